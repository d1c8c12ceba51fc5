"""The hand-synchronized dating service (`dating_manual`) with the media service, end to end.

The same run as test_dating_smoke.py (whose helpers and profiles it reuses) but with
`--service dating_manual --set dating.media=127.0.0.1:MPORT`: the baseline version of the
paper's dating service, with hand-written locking instead of the contract engine, must behave
the same way. SIPp plays the three usage profiles one after the other (Cancel 20 calls, Early
Bye 20, Complete 60, at 10 calls/s) against a media service tandem.

Pass: every SIPp run exits 0 with all calls successful and 0 failed; within a few seconds of the
last call both servers have tandem_app_sessions 0 and tandem_sip_sessions 0; dating_manual took
T7 once per pair of complete callers (tandem_manual_transitions_total) and T3 at least once;
both tandems exit 0 on SIGTERM.

Skipped while the binary has no `dating_manual` (or `media`) service (the error then reads
`route names unknown service "dating_manual"`).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402
import test_dating_smoke as smoke  # noqa: E402

SERVICE = "dating_manual"


def run(env):
    smoke.run(env, service=SERVICE, profiles=run_profiles)


def run_profiles(env, media, dating):
    samples = smoke.play_profiles(env, media, dating, SERVICE)
    taken = smoke.transitions(samples, SERVICE, "tandem_manual_transitions_total")
    env.log("%s transitions: %s" % (SERVICE, ", ".join("%s=%d" % kv for kv in sorted(taken.items()))))
    env.log("media: %s" % ", ".join(
        "%s%s=%d" % (n[len("tandem_media_"):], "".join("/" + l[k] for k in ("kind", "result") if k in l), v)
        for n, l, v in smoke.metrics(media) if n.startswith("tandem_media_")))
    env.log("%s: absorbed %s, transition failures %s, lock retries %s, out-of-order try-locks %s" % (
        SERVICE,
        common.metric_sum(samples, "tandem_manual_absorbed_messages_total", service=SERVICE),
        common.metric_sum(samples, "tandem_manual_transition_failures_total", service=SERVICE),
        common.metric_sum(samples, "tandem_manual_lock_retries_total", service=SERVICE),
        common.metric_sum(samples, "tandem_manual_out_of_order_try_locks_total", service=SERVICE)))
    complete_calls = dict((p, c) for p, _, c in smoke.PROFILES)["complete"]
    check(taken.get("T7", 0) > 0, "%s: no T7 taken (no pair formed); transitions %s" % (SERVICE, taken))
    check(taken.get("T7", 0) == complete_calls // 2,
          "%s: T7 taken %d times for %d complete callers (expected one per pair); "
          "transitions %s" % (SERVICE, taken.get("T7", 0), complete_calls, taken))
    check(taken.get("T3", 0) > 0,
          "%s: no T3 taken: no CANCEL reached the service before the media service answered "
          "(media.answer_delay=100ms should allow it); transitions %s" % (SERVICE, taken))


CASES = [(None, run)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_dating_manual_smoke"] + sys.argv[1:]))
