"""SIPp's built-in `uac` scenario against `tandem run --service uas` (the MLT service).

1000 calls at 200 calls/s over UDP (-t u1) and over TCP (-t t1). Each call is
INVITE / 200 / ACK / BYE / 200 (the caller hangs up first: uas.hold defaults
to 180 s). Pass: sipp exits 0 by itself with 1000 successful and 0 failed
calls, tandem counted >= 1000 INVITEs, and tandem exits 0 on SIGTERM.
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
    t = common.Tandem(env, name="tandem", service="uas")
    with t:
        ip, port = t.addr(transport)
        res = common.run_sipp(env, "uac_" + transport, [
            "-sn", "uac", "%s:%d" % (ip, port),
            "-t", "u1" if transport == "udp" else "t1",
            "-i", "127.0.0.1", "-p", str(common.free_port()),
            "-r", str(RATE), "-m", str(CALLS),
            "-timeout", "90s", "-timeout_error",
        ], timeout=120)
        env.log(res.summary())
        common.check_sipp_all_ok(res, CALLS)
        check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
        status, body = t.get("/metrics")
        check(status == 200, "GET /metrics answered %s" % status)
        inv = common.requests_in(common.parse_metrics(body), "INVITE", transport)
        check(inv is not None and inv >= CALLS,
              'tandem_messages_in_total{method="INVITE",transport="%s"} is %s, expected >= %d'
              % (transport, inv, CALLS))
        t.stop()


CASES = [("udp", lambda env: run_case(env, "udp")),
         ("tcp", lambda env: run_case(env, "tcp"))]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_sipp_uas"] + sys.argv[1:]))
