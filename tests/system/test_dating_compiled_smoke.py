"""The dating service on its contract compiled to Rust (`dating_compiled`), end to end.

The same run as test_dating_smoke.py (whose helpers and profiles it reuses) with `--service
dating_compiled`: `services/dating.machine` compiled by tandem_contract::codegen at build time
and run by tandem_engine::dispatch with the contract version's own arms (decision 0008). SIPp
plays the three usage profiles one after the other (Cancel 20 calls, Early Bye 20, Complete 60,
at 10 calls/s) against a media service tandem. Cases: the default executors (two on the CI
machine: peers locked across executors, in order) and one executor (the benchmark's setting).

Pass: every SIPp run exits 0 with all calls successful and 0 failed; within a few seconds of the
last call both servers have tandem_app_sessions 0 and tandem_sip_sessions 0; dating_compiled took
T7 once per pair of complete callers (tandem_transitions_total) and T3 at least once, and no arm
failed (tandem_transition_failures_total 0); both tandems exit 0 on SIGTERM.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402
import test_dating_smoke as smoke  # noqa: E402

SERVICE = "dating_compiled"


def run(env, dating_sets=()):
    smoke.run(env, dating_sets=dating_sets, service=SERVICE, profiles=run_profiles)


def run_profiles(env, media, dating):
    samples = smoke.play_profiles(env, media, dating, SERVICE)
    taken = smoke.transitions(samples, SERVICE)
    env.log("%s transitions: %s" % (SERVICE, ", ".join("%s=%d" % kv for kv in sorted(taken.items()))))
    failures = common.metric_sum(samples, "tandem_transition_failures_total", service=SERVICE)
    env.log("%s: absorbed %s, transition failures %s, lock retries %s" % (
        SERVICE,
        common.metric_sum(samples, "tandem_absorbed_messages_total", service=SERVICE),
        failures,
        common.metric_sum(samples, "tandem_compiled_lock_retries_total", service=SERVICE)))
    check(not failures, "%s: %s transitions failed (the tandem's log names them)" % (SERVICE, failures))
    complete_calls = dict((p, c) for p, _, c in smoke.PROFILES)["complete"]
    check(taken.get("T7", 0) == complete_calls // 2,
          "%s: T7 taken %d times for %d complete callers (expected one per pair); "
          "transitions %s" % (SERVICE, taken.get("T7", 0), complete_calls, taken))
    check(taken.get("T3", 0) > 0,
          "%s: no T3 taken: no CANCEL reached the service before the media service answered "
          "(media.answer_delay=100ms should allow it); transitions %s" % (SERVICE, taken))


def run_one_executor(env):
    run(env, dating_sets=["container.executors=1"])


CASES = [(None, run), ("one_executor", run_one_executor)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_dating_compiled_smoke"] + sys.argv[1:]))
