"""SIPstone Proxy 200: sipp uac -> tandem (--service proxy) -> sipp uas.

`sipp -sn uas` listens on 127.0.0.1:P2; tandem runs with
`--set proxy.next_hop=127.0.0.1:P2` (UDP) or `tcp:127.0.0.1:P2` (TCP);
`sipp -sn uac` places 1000 calls at 200 calls/s to tandem.
Pass: the uac exits 0 with 1000 successful and 0 failed calls; the uas (run
with -m 1000) then ends by itself with exit 0 and 1000 successful calls, i.e.
every INVITE, ACK and BYE went through the proxy; tandem exits 0 on SIGTERM.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

CALLS = 1000
RATE = 200


def run_case(env, transport):
    common.require_sipp()
    mode = "u1" if transport == "udp" else "t1"
    p2 = common.free_port()
    uas = common.BackgroundSipp(env, "uas_" + transport, [
        "-sn", "uas", "-i", "127.0.0.1", "-p", str(p2), "-t", mode,
        "-m", str(CALLS), "-timeout", "120s",
    ])
    with uas:
        check(common.wait_port_bound(transport, p2, timeout=10),
              "sipp uas did not bind %s 127.0.0.1:%d" % (transport, p2))
        next_hop = ("127.0.0.1:%d" if transport == "udp" else "tcp:127.0.0.1:%d") % p2
        t = common.Tandem(env, name="tandem", service="proxy",
                          sets=["proxy.next_hop=" + next_hop])
        with t:
            ip, port = t.addr(transport)
            res = common.run_sipp(env, "uac_" + transport, [
                "-sn", "uac", "%s:%d" % (ip, port), "-t", mode,
                "-i", "127.0.0.1", "-p", str(common.free_port()),
                "-r", str(RATE), "-m", str(CALLS),
                "-timeout", "90s", "-timeout_error",
            ], timeout=120)
            env.log(res.summary())
            common.check_sipp_all_ok(res, CALLS)
            # The uas ends 4 s after its last BYE (built-in timewait).
            rc = uas.wait(timeout=30)
            st = common.SippResult("uas_" + transport, rc, rc is None, uas.stats(), uas.files)
            env.log(st.summary())
            check(rc is not None, "sipp uas did not finish its %d calls within 30 s of the uac: %s"
                  % (CALLS, st.summary()))
            check(rc == 0 and st.stat("SuccessfulCall(C)") == CALLS,
                  "sipp uas: %s; expected exit 0 and %d successful calls" % (st.summary(), CALLS))
            check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
            t.stop()


CASES = [("udp", lambda env: run_case(env, "udp")),
         ("tcp", lambda env: run_case(env, "tcp"))]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_proxy200"] + sys.argv[1:]))
