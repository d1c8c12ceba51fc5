"""No leaked state: after traffic stops, the live-state gauges return to zero.

`tandem run --service uas` gets 2000 OPTIONS over UDP (sent in bursts of 50)
and 300 SIPp basic calls (INVITE/200/ACK/BYE/200) at 300 calls/s. Once the
traffic stops, every transaction must end within RFC 3261's timers (over UDP
the longest are Timer J and Timer L, 64*T1 = 32 s) and every session with its
call: the gauges tandem_transactions, tandem_sip_sessions and
tandem_app_sessions (all samples summed) must reach 0 within 45 s.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

GAUGES = ["tandem_transactions", "tandem_sip_sessions", "tandem_app_sessions"]
DRAIN_TIMEOUT = 45.0
N_OPTIONS = 2000
CALLS = 300


def live_state(t):
    status, body = t.get("/metrics")
    check(status == 200, "GET /metrics answered %s" % status)
    samples = common.parse_metrics(body)
    out = {}
    for g in GAUGES:
        rows = [(l, v) for n, l, v in samples if n == g]
        out[g] = (sum(v for _, v in rows), rows) if rows else (None, [])
    return out


def case_drain(env):
    common.require_sipp()
    t = common.Tandem(env, name="tandem", service="uas")
    with t:
        udp = t.addr("udp")
        s = common.udp_socket()
        local = s.getsockname()
        for i in range(N_OPTIONS):
            s.sendto(common.build_options(udp, local), udp)
            if i % 50 == 49:
                common.udp_collect(s, 0.005)
        answered = [m for m, _ in common.udp_collect(s, 1.0) if m is not None and m.code == 200]
        s.close()
        res = common.run_sipp(env, "uac", [
            "-sn", "uac", "%s:%d" % udp, "-t", "u1", "-i", "127.0.0.1",
            "-p", str(common.free_port()), "-r", "300", "-m", str(CALLS),
            "-timeout", "60s", "-timeout_error"], timeout=90)
        common.check_sipp_all_ok(res, CALLS)
        r = common.options_udp(udp, timeout=3.0)
        check(r is not None and r.code == 200, "OPTIONS after the load got %s" % (r and r.code))

        state = live_state(t)
        missing = [g for g, (v, _) in state.items() if v is None]
        check(not missing, "gauges missing from /metrics: %s" % missing)
        env.log("right after the load: %s" % {g: v for g, (v, _) in state.items()})
        deadline = time.monotonic() + DRAIN_TIMEOUT
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            state = live_state(t)
            if all(v == 0 for v, _ in state.values()):
                env.log("drained after %.1f s" % (time.monotonic() - t0))
                break
            time.sleep(1.0)
        left = {g: (v, rows) for g, (v, rows) in state.items() if v != 0}
        check(not left,
              "live state did not drain within %.0f s of the last message (UDP timers end at 32 s): %s"
              % (DRAIN_TIMEOUT, "; ".join("%s = %s %s" % (g, v, [(l, x) for l, x in rows if x])
                                          for g, (v, rows) in left.items())))
        env.log("%d OPTIONS answered 200 during the burst" % len(answered))
        t.stop()


CASES = [(None, case_drain)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_state_drains"] + sys.argv[1:]))
