"""MLT: the server hangs up. scenarios/uac_wait_bye.xml against
`tandem run --service uas --set uas.hold=1s`.

Each call: INVITE, optional 100/180/183, 200, ACK, then the caller waits for
the server's BYE and answers 200. 200 calls at 100 calls/s, UDP and TCP.
Pass: sipp exits 0 with 200 successful and 0 failed calls (a call whose BYE
does not arrive within 10 s fails), and the measured ACK->BYE delay (SIPp
response-time counter 2) averages between 0.9 s and 3 s, i.e. the server
honours uas.hold; tandem exits 0 on SIGTERM.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

CALLS = 200
RATE = 100
SCENARIO = os.path.join(common.SCENARIOS, "uac_wait_bye.xml")


def hold_ms(res):
    """Average ACK->BYE time in ms from the stats row (column ResponseTime2(C), HH:MM:SS:mmm...)."""
    v = res.stats.get("ResponseTime2(C)")
    if not v:
        return None
    parts = v.split(":")
    try:
        if len(parts) >= 4:
            h, m, s, ms = parts[0], parts[1], parts[2], parts[3]
            return ((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(ms[:3])
        return float(v)
    except ValueError:
        return None


def run_case(env, transport):
    common.require_sipp()
    t = common.Tandem(env, name="tandem", service="uas", sets=["uas.hold=1s"])
    with t:
        ip, port = t.addr(transport)
        res = common.run_sipp(env, "uac_wait_bye_" + transport, [
            "-sf", SCENARIO, "%s:%d" % (ip, port),
            "-t", "u1" if transport == "udp" else "t1",
            "-i", "127.0.0.1", "-p", str(common.free_port()),
            "-r", str(RATE), "-m", str(CALLS),
            "-timeout", "60s", "-timeout_error",
        ], timeout=90)
        env.log(res.summary())
        common.check_sipp_all_ok(res, CALLS)
        h = hold_ms(res)
        check(h is not None and 900 <= h <= 3000,
              "average ACK->BYE delay is %s ms (ResponseTime2(C)=%r); expected about 1000 ms "
              "for uas.hold=1s" % (h, res.stats.get("ResponseTime2(C)")))
        check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
        t.stop()


CASES = [("udp", lambda env: run_case(env, "udp")),
         ("tcp", lambda env: run_case(env, "tcp"))]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_mlt_server_hangs_up"] + sys.argv[1:]))
