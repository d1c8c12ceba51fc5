"""The dating service (services/dating.machine) with the media service, end to end over UDP.

Two tandems: a media service (`--service media`) and the dating service (`--service dating
--set dating.media=127.0.0.1:MPORT`). SIPp plays the callers of the paper's three usage profiles
(Figure 6), one profile after the other, with tests/dating/scenarios/*.xml:
  * Cancel      20 calls at 10 calls/s: INVITE, CANCEL at once; 200 + 487, ACK (T1, T3);
  * Early Bye   20 calls at 10 calls/s: INVITE, 200, ACK, BYE 500 ms later (T1, T2, T4, T5);
  * Complete    60 calls at 10 calls/s: INVITE, 200, ACK, then the re-INVITE that connects a
                peer (T7, T8), 2 s of talk, BYE (T11, or T13 when the two BYEs cross).
The media service answers after 100 ms (media.answer_delay, as if on another machine: the Cancel
profile then cancels the media leg before it is answered, T3) and suggests a peer 1 s after the
ACK (media.preference_delay: longer than the Early Bye pause, so early callers hang up before
anyone can pair them).

Pass: every SIPp run exits 0 with all calls successful and 0 failed; within a few seconds of the
last call both servers have tandem_app_sessions 0 and tandem_sip_sessions 0 (every execution
ended, including the media legs); the dating service took T7 once per pair of complete callers
and T3 at least once, and counted no ambiguous message (tandem_ambiguous_messages_total 0);
both tandems exit 0 on SIGTERM. Cases: two tandems over UDP; the media service as an in-process
companion container (`inprocess`); and the dating tandem on one executor (`one_executor`), where
the fast path runs without the lock table (tandem_unlocked_transitions_total above 0).

Skipped while the binary has no `dating` or `media` service (the error then reads
`route names unknown service "dating"`, or `unknown field \`media\`` for the --set).
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

SCENARIOS = os.path.join(common.REPO, "tests", "dating", "scenarios")
RATE = 10
# (profile, scenario file, calls); complete calls pair up with each other: keep that even.
PROFILES = [("cancel", "cancel.xml", 20), ("early_bye", "early_bye.xml", 20), ("complete", "complete.xml", 60)]
MEDIA_SETS = ["media.answer_delay=100ms", "media.preference_delay=1s", "media.retry_delay=300ms", "media.max_tries=20"]
SETTLE_TIMEOUT = 10.0


def start_or_skip(t, service):
    """Start tandem t; Skip if the binary does not know `service` (not written or wired yet)."""
    try:
        t.start()
    except common.Failure:
        out = t.stderr_text() + t.stdout_text()
        lines = [l.strip() for l in out.splitlines()
                 if ("unknown service" in l or "unknown field" in l) and service in l]
        if lines:
            t.kill()
            raise common.Skip("the tandem binary has no %r service yet: %s" % (service, lines[0][:200]))
        raise


def metrics(t):
    status, body = t.get("/metrics")
    check(status == 200, "%s: GET /metrics answered %s" % (t.name, status))
    return common.parse_metrics(body)


def wait_sessions_gone(t, timeout):
    """(app, sip) sessions left once both reach 0 or after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        samples = metrics(t)
        app = common.metric_sum(samples, "tandem_app_sessions")
        sip = common.metric_sum(samples, "tandem_sip_sessions")
        if (app == 0 and sip == 0) or time.monotonic() > deadline:
            return app, sip
        time.sleep(0.2)


def transitions(samples, service="dating", metric="tandem_transitions_total"):
    """Transitions taken, by name, from `service`'s `metric`."""
    out = {}
    for name, labels, value in samples:
        if name == metric and labels.get("service") == service and value:
            out[labels.get("transition")] = int(value)
    return out


def run(env, dating_sets=(), after_profiles=None, service="dating", profiles=None):
    """The profiles against `service` (the dating service, or another version of it, checked by
    `profiles(env, media, dating)` instead of this file's `run_profiles`)."""
    common.require_sipp()
    for _, scenario, _ in PROFILES:
        path = os.path.join(SCENARIOS, scenario)
        check(os.path.isfile(path), "scenario missing: %s" % path)
    media = common.Tandem(env, name="tandem-media", service="media", sets=MEDIA_SETS)
    try:
        start_or_skip(media, "media")
        mip, mport = media.addr("udp")
        # Every direct prediction is checked against the general evaluator (see
        # docs/decisions/0004-contract-engine.md, "Direct transitions").
        verify = ["engine.verify_direct=true"] if service == "dating" else []
        dating = common.Tandem(env, name="tandem-" + service.replace("_", "-"), service=service,
                               sets=["dating.media=%s:%d" % (mip, mport)] + verify + list(dating_sets))
        try:
            start_or_skip(dating, service)
            (profiles or run_profiles)(env, media, dating)
            if after_profiles:
                after_profiles(env, dating)
            dating.stop()
        finally:
            dating.kill()
        media.stop()
    finally:
        media.kill()


def play_profiles(env, media, dating, service="dating"):
    """SIPp plays every profile against `dating`; then both tandems must drain. Returns the
    dating tandem's metric samples."""
    ip, port = dating.addr("udp")
    for profile, scenario, calls in PROFILES:
        res = common.run_sipp(env, profile, [
            "-sf", os.path.join(SCENARIOS, scenario), "%s:%d" % (ip, port),
            "-t", "u1", "-i", "127.0.0.1", "-p", str(common.free_port()),
            "-r", str(RATE), "-m", str(calls),
            "-timeout", "60s", "-timeout_error",
        ], timeout=90)
        env.log(res.summary())
        common.check_sipp_all_ok(res, calls)
        check(media.alive() and dating.alive(),
              "a tandem exited during the %s profile (media %s, %s %s)"
              % (profile, media.proc.poll(), service, dating.proc.poll()))
    for t in (dating, media):
        app, sip = wait_sessions_gone(t, SETTLE_TIMEOUT)
        check(app == 0 and sip == 0,
              "%s: %s application and %s SIP sessions still live %.0f s after the last call "
              "(an execution never ended)" % (t.name, app, sip, SETTLE_TIMEOUT))
    return metrics(dating)


def run_profiles(env, media, dating):
    samples = play_profiles(env, media, dating)
    taken = transitions(samples)
    env.log("dating transitions: %s" % ", ".join("%s=%d" % kv for kv in sorted(taken.items())))
    env.log("media: %s" % ", ".join(
        "%s%s=%d" % (n[len("tandem_media_"):], "".join("/" + l[k] for k in ("kind", "result") if k in l), v)
        for n, l, v in metrics(media) if n.startswith("tandem_media_")))
    env.log("dating: absorbed %s, handler failures %s, negotiation waits %s" % (
        common.metric_sum(samples, "tandem_absorbed_messages_total", service="dating"),
        common.metric_sum(samples, "tandem_transition_failures_total", service="dating"),
        common.metric_sum(samples, "tandem_negotiation_waits_total", service="dating")))
    direct = common.metric_sum(samples, "tandem_direct_predictions_total", service="dating")
    mismatches = common.metric_sum(samples, "tandem_direct_mismatches_total", service="dating")
    env.log("dating: direct predictions %s, mismatches with the general evaluator %s" % (direct, mismatches))
    check(direct and direct > 0, "dating: no direct prediction made (tandem_direct_predictions_total %s)" % direct)
    fast = common.metric_sum(samples, "tandem_fast_selections_total", service="dating")
    env.log("dating: transitions selected by the fast path %s" % fast)
    check(fast and fast > 0, "dating: no transition took the fast path (tandem_fast_selections_total %s)" % fast)
    check(mismatches == 0, "dating: %s direct predictions differ from the general evaluator's outcome "
          "(tandem_direct_mismatches_total; the tandem's log names them)" % mismatches)
    ambiguous = common.metric_sum(samples, "tandem_ambiguous_messages_total", service="dating")
    check(ambiguous == 0, "dating: tandem_ambiguous_messages_total is %s (a message enabled "
          "several transitions: a contract defect)" % ambiguous)
    complete_calls = dict((p, c) for p, _, c in PROFILES)["complete"]
    check(taken.get("T7", 0) > 0, "dating: no T7 taken (no pair formed); transitions %s" % taken)
    check(taken.get("T7", 0) == complete_calls // 2,
          "dating: T7 taken %d times for %d complete callers (expected one per pair); "
          "transitions %s" % (taken.get("T7", 0), complete_calls, taken))
    check(taken.get("T3", 0) > 0,
          "dating: no T3 taken: no CANCEL reached the dating service before the media "
          "service answered (media.answer_delay=100ms should allow it); transitions %s" % taken)


def run_one_executor(env):
    """The same profiles with the dating tandem on one executor, the benchmark's configuration:
    the fast path then runs its transitions without the lock table (decision 0004, "One
    executor without the lock table"), still checked against the general evaluator."""
    run(env, dating_sets=["container.executors=1"], after_profiles=check_one_executor)


def check_one_executor(env, dating):
    samples = metrics(dating)
    unlocked = common.metric_sum(samples, "tandem_unlocked_transitions_total", service="dating")
    fast = common.metric_sum(samples, "tandem_fast_selections_total", service="dating")
    env.log("dating (one executor): %s fast selections, %s transitions without the lock table" % (fast, unlocked))
    check(unlocked and unlocked > 0,
          "dating on one executor: no transition ran without the lock table "
          "(tandem_unlocked_transitions_total %s)" % unlocked)


class Companion:
    """The media companion container inside the dating tandem's process (its own admin port)."""

    def __init__(self, host, name, admin):
        self.host, self.name, self.admin_url = host, name, "http://%s:%d" % admin

    @property
    def proc(self):
        return self.host.proc

    def alive(self):
        return self.host.alive()

    def get(self, path, timeout=3.0):
        return common.http_get(self.admin_url + path, timeout=timeout)


COMPANION_CONFIG = """
[dating]
media = "inproc:127.0.0.1:5070"

[[companion]]
service = "media"
listen = ["inproc:127.0.0.1:5070"]
admin = "127.0.0.1:%(admin)d"

[media]
%(media)s
"""


def run_in_process(env):
    """The same profiles against one process: dating in the main container, media in a
    companion container, the two talking over the in-process transport."""
    common.require_sipp()
    admin = common.free_port()
    media_lines = "\n".join("%s = %s" % (k.split(".", 1)[1], '"%s"' % v if not v.replace(".", "").isdigit() else v)
                             for k, v in (s.split("=", 1) for s in MEDIA_SETS))
    cfg = os.path.join(env.test_dir, "dating-inprocess.toml")
    with open(cfg, "w") as f:
        f.write(COMPANION_CONFIG % {"admin": admin, "media": media_lines})
    port = common.free_port()
    dating = common.Tandem(env, name="tandem-dating", service="dating", extra_args=["--config", cfg],
                           sets=["engine.verify_direct=true"],
                           listen=[("udp", "127.0.0.1", port), ("tcp", "127.0.0.1", port), ("inproc", "127.0.0.1", 5071)])
    try:
        start_or_skip(dating, "dating")
        out = dating.stdout_text()
        check("companion media listening on inproc:127.0.0.1:5070" in out, "no in-process media companion:\n%s" % out)
        media = Companion(dating, "media-companion", ("127.0.0.1", admin))
        run_profiles(env, media, dating)
        samples = metrics(dating)
        inproc_out = common.metric_sum(samples, "tandem_messages_out_total", transport="inproc")
        inproc_in = common.metric_sum(samples, "tandem_messages_in_total", transport="inproc")
        udp_out = common.metric_sum(samples, "tandem_messages_out_total", transport="udp")
        env.log("dating: %s messages out and %s in over inproc, %s out over udp" % (inproc_out, inproc_in, udp_out))
        check((inproc_out or 0) > 0 and (inproc_in or 0) > 0, "dating exchanged no message in-process with media")
        dating.stop()
    finally:
        dating.kill()


CASES = [(None, run), ("inprocess", run_in_process), ("one_executor", run_one_executor)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_dating_smoke"] + sys.argv[1:]))
