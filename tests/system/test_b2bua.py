"""B2BUA NT: sipp (caller) -> tandem --service b2bua_nt -> sipp (callee), UDP and TCP.

Cases per transport:
  caller_hangs_up  `sipp -sn uac` places 100 calls at 20 calls/s; `sipp -sn uas` answers.
                   Every INVITE / 180 / 200 / ACK / BYE crosses the B2BUA as two dialogs;
                   both SIPp instances must end with 100 successful calls.
  callee_hangs_up  the callee (scenarios/b2bua_uas_hangup.xml) sends BYE 300 ms after the ACK;
                   the caller (scenarios/uac_wait_bye.xml) must get the B2BUA's BYE.
  cancel           the caller (scenarios/b2bua_uac_cancel.xml) cancels on 180; the callee
                   (scenarios/b2bua_uas_ring_cancel.xml) must get the B2BUA's CANCEL and end
                   its INVITE with 487; the caller gets 200 (CANCEL) and 487.
  loop_ends_with_483  next hop = the B2BUA itself: Max-Forwards ends the loop with 483.
After each case the B2BUA must hold no session (tandem_app_sessions and tandem_sip_sessions
back to 0), i.e. no leg is left behind.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

SCEN = os.path.join(HERE, "scenarios")
CALLS = 100
RATE = 20


def wait_drained(t, timeout=15.0):
    return common.wait_sessions_drained(t, timeout, what="b2bua")


def run_case(env, transport, case):
    common.require_sipp()
    mode = "u1" if transport == "udp" else "t1"
    callee_port = common.free_port()
    callee_args = {
        "caller_hangs_up": ["-sn", "uas"],
        "callee_hangs_up": ["-sf", os.path.join(SCEN, "b2bua_uas_hangup.xml")],
        "cancel": ["-sf", os.path.join(SCEN, "b2bua_uas_ring_cancel.xml")],
    }[case]
    caller_args = {
        "caller_hangs_up": ["-sn", "uac"],
        "callee_hangs_up": ["-sf", os.path.join(SCEN, "uac_wait_bye.xml")],
        "cancel": ["-sf", os.path.join(SCEN, "b2bua_uac_cancel.xml")],
    }[case]
    callee = common.BackgroundSipp(env, "callee_%s_%s" % (case, transport), callee_args + [
        "-i", "127.0.0.1", "-p", str(callee_port), "-t", mode, "-m", str(CALLS), "-timeout", "120s",
    ])
    with callee:
        check(common.wait_port_bound(transport, callee_port, timeout=10),
              "sipp callee did not bind %s 127.0.0.1:%d" % (transport, callee_port))
        next_hop = ("127.0.0.1:%d" if transport == "udp" else "tcp:127.0.0.1:%d") % callee_port
        t = common.Tandem(env, name="tandem", service="b2bua_nt", sets=["b2bua.next_hop=" + next_hop])
        with t:
            ip, port = t.addr(transport)
            res = common.run_sipp(env, "caller_%s_%s" % (case, transport), caller_args + [
                "%s:%d" % (ip, port), "-t", mode, "-i", "127.0.0.1", "-p", str(common.free_port()),
                "-r", str(RATE), "-m", str(CALLS), "-timeout", "90s", "-timeout_error",
            ], timeout=120)
            env.log(res.summary())
            common.check_sipp_all_ok(res, CALLS)
            callee.check_completed(CALLS, label="sipp callee")
            wait_drained(t)
            check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
            t.stop()


def loop_ends(env):
    """A next hop that points back at the B2BUA itself: every pass is a new call, so only
    Max-Forwards (leg B carries leg A's minus one) ends the loop: the caller gets 483 after
    as many hops as its Max-Forwards allowed, relayed back through every leg, and no leg of
    any pass is left behind."""
    port = common.free_port()
    t = common.Tandem(env, name="tandem", service="b2bua_nt", listen=[("udp", "127.0.0.1", port)],
                      sets=["b2bua.next_hop=127.0.0.1:%d" % port])
    with t:
        sock = common.udp_socket()
        local = sock.getsockname()
        ruri = "sip:loop@127.0.0.1:%d" % port
        call_id, branch, tag = common.new_call_id("loop"), common.new_branch(), "looptag"
        sock.sendto(common.build_request("INVITE", ruri, local, call_id=call_id, branch=branch, from_tag=tag,
                                         body=common.SDP_OFFER, max_forwards=10), ("127.0.0.1", port))
        got = common.udp_collect(sock, 10.0, until_final=True, grace=0.2)
        finals = [m for m, _ in got if m is not None and m.code is not None and m.code >= 200]
        check(finals and finals[0].code == 483,
              "expected 483 Too Many Hops after the loop, got %s" % [m.first_line for m, _ in got if m])
        ack = common.build_request("ACK", ruri, local, call_id=call_id, branch=branch, from_tag=tag,
                                   to_hdr=finals[0].get("to"), max_forwards=70)
        sock.sendto(ack, ("127.0.0.1", port))
        status, body = t.get("/metrics")
        invites = common.requests_in(common.parse_metrics(body), "INVITE")
        check(invites == 11, "the loop should take 11 passes (Max-Forwards 10 .. 0), metrics count %s INVITEs" % invites)
        wait_drained(t)
        check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
        t.stop()


CASES = [("%s_%s" % (case, tr), (lambda env, tr=tr, case=case: run_case(env, tr, case)))
         for tr in ("udp", "tcp") for case in ("caller_hangs_up", "callee_hangs_up", "cancel")]
CASES.append(("loop_ends_with_483", loop_ends))


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_b2bua"] + sys.argv[1:]))
