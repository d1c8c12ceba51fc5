"""The proxy's deferred 100 Trying (RFC 3261 §17.2.1; `container.trying_delay`, default 100 ms).

sipp uac -> tandem (--service proxy, UDP) -> sipp uas, 20 calls at 20 calls/s per case:
- slow callee (a uas scenario that waits 400 ms before 180 and 200): the caller's scenario
  requires a 100 before the 180, so every call succeeds only if the proxy sent the 100 while
  the callee kept silent;
- fast callee (SIPp's built-in uas, which rings and answers at once), with
  `container.trying_delay=200ms`: the caller's scenario treats a 100 as unexpected, so every
  call succeeds only if the callee's 180 made the 100 moot;
- fast callee with `container.trying_delay=0s`: the 100 leaves at once again (as Kamailio
  sends it), required before the 180.
Pass: the uac and the uas both exit 0 with 20 successful calls in each case.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

CALLS = 20
RATE = 20
EXPECTS_TRYING = os.path.join(common.SCENARIOS, "proxy_uac_expects_trying.xml")
NO_TRYING = os.path.join(common.SCENARIOS, "proxy_uac_no_trying.xml")
SLOW_CALLEE = os.path.join(common.SCENARIOS, "proxy_uas_slow_answer.xml")


def run_case(env, name, callee, caller, sets=()):
    common.require_sipp()
    p2 = common.free_port()
    callee_args = ["-sn", "uas"] if callee == "builtin" else ["-sf", callee]
    uas = common.BackgroundSipp(env, "uas_" + name, callee_args + [
        "-i", "127.0.0.1", "-p", str(p2), "-m", str(CALLS), "-timeout", "60s",
    ])
    with uas:
        check(common.wait_port_bound("udp", p2, timeout=10), "sipp uas did not bind udp 127.0.0.1:%d" % p2)
        t = common.Tandem(env, name="tandem_" + name, service="proxy",
                          sets=["proxy.next_hop=127.0.0.1:%d" % p2] + list(sets))
        with t:
            ip, port = t.addr("udp")
            res = common.run_sipp(env, "uac_" + name, [
                "-sf", caller, "-s", "service", "%s:%d" % (ip, port),
                "-i", "127.0.0.1", "-p", str(common.free_port()),
                "-r", str(RATE), "-m", str(CALLS), "-timeout", "60s", "-timeout_error",
            ], timeout=90)
            env.log(res.summary())
            common.check_sipp_all_ok(res, CALLS)
            uas.check_completed(CALLS, timeout=30)
            check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
            t.stop()


CASES = [
    ("slow_callee_hears_100", lambda env: run_case(env, "slow", SLOW_CALLEE, EXPECTS_TRYING)),
    ("fast_callee_no_100", lambda env: run_case(env, "fast", "builtin", NO_TRYING,
                                                 sets=['container.trying_delay="200ms"'])),
    ("immediate_100_when_asked", lambda env: run_case(env, "immediate", "builtin", EXPECTS_TRYING,
                                                      sets=['container.trying_delay="0s"'])),
]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_proxy_trying"] + sys.argv[1:]))
