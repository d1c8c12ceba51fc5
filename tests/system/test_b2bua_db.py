"""B2BUA 1T and 2T with the database resource adaptor: sipp (caller) -> tandem -> sipp (callee).

Cases:
  1t_sqlite_udp / 1t_sqlite_tcp
                 100 calls at 20 calls/s through `b2bua_1t` on an SQLite file; the policy of
                 the callee `service` is seeded at startup. Both SIPp instances end with 100
                 successful calls, the database holds 100 billing records ended by the caller
                 (read with Python's sqlite3, not through tandem), and the callee's totals in
                 b2bua_policy add up.
  1t_no_policy_403
                 an INVITE to a callee without a policy gets 403 and no leg B is placed.
  1t_call_timer  `b2bua.call_timer=1s`, callers that wait for the BYE: the B2BUA ends every
                 call on both legs after about 1 s; billing says `timer`.
  2t_revoked_policy
                 `b2bua_2t` queries each live call's policy every 200 ms; `tandem db deny
                 service` (another process, same database) removes the policy while the calls
                 are up: every call is ended with BYE on both legs, billing says `policy`.
  2t_tcp_checks_and_timer
                 `b2bua_2t` over TCP: 1 s calls checked every 200 ms (>= 3 queries per call),
                 ended by the call timer.
  1t_postgres    the 1t_sqlite_udp run against a fresh PostgreSQL database (created and
                 dropped with psql); skipped with a message when no server answers on
                 127.0.0.1:5432 (TANDEM_TEST_POSTGRES_URL overrides the server URL).
After each case the B2BUA holds no session.
"""

import os
import socket
import sqlite3
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

SCEN = os.path.join(HERE, "scenarios")


def wait_drained(t, timeout=15.0):
    return common.wait_sessions_drained(t, timeout, what="b2bua")


def b2bua_metric(samples, name, service):
    return common.metric_sum(samples, name, service=service)


def sqlite_url(env):
    path = env.log_path("b2bua.sqlite3")
    return path, "sqlite:%s?mode=rwc" % path


def sqlite_rows(path, query):
    con = sqlite3.connect(path, timeout=10)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def run_calls(env, service, db_url, transport="udp", calls=100, rate=20, caller="uac", sets=(), during=None):
    """sipp caller -> tandem `service` -> sipp callee; returns the drained metrics."""
    common.require_sipp()
    mode = "u1" if transport == "udp" else "t1"
    callee_port = common.free_port()
    callee = common.BackgroundSipp(env, "callee_%s" % transport, [
        "-sn", "uas", "-i", "127.0.0.1", "-p", str(callee_port), "-t", mode, "-m", str(calls), "-timeout", "120s",
    ])
    caller_args = ["-sn", "uac"] if caller == "uac" else ["-sf", os.path.join(SCEN, "uac_wait_bye.xml")]
    with callee:
        check(common.wait_port_bound(transport, callee_port, timeout=10),
              "sipp callee did not bind %s 127.0.0.1:%d" % (transport, callee_port))
        next_hop = ("127.0.0.1:%d" if transport == "udp" else "tcp:127.0.0.1:%d") % callee_port
        t = common.Tandem(env, name="tandem", service=service,
                          sets=["b2bua.next_hop=" + next_hop, 'database.url="%s"' % db_url] + list(sets))
        with t:
            ip, port = t.addr(transport)
            args = caller_args + ["%s:%d" % (ip, port), "-t", mode, "-i", "127.0.0.1", "-p", str(common.free_port()),
                                  "-r", str(rate), "-m", str(calls), "-timeout", "90s", "-timeout_error"]
            if during is None:
                res = common.run_sipp(env, "caller_%s" % transport, args, timeout=120)
            else:
                runner = common.BackgroundSipp(env, "caller_%s" % transport, args)
                with runner:
                    during(t)
                    res = runner.result(timeout=60)
            env.log(res.summary())
            common.check_sipp_all_ok(res, calls)
            callee.check_completed(calls, label="sipp callee")
            metrics = wait_drained(t)
            # Billing is written after the call's last message: give the pool a moment.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                billed = b2bua_metric(metrics, "tandem_b2bua_billing_records_total", service)
                failed = b2bua_metric(metrics, "tandem_b2bua_billing_failures_total", service)
                if (billed or 0) + (failed or 0) >= calls:
                    break
                time.sleep(0.2)
                metrics = common.parse_metrics(t.get("/metrics")[1])
            check(t.alive(), "tandem exited during the run (code %s)" % t.proc.returncode)
            t.stop()
            return metrics


def check_tier_metrics(metrics, service, calls):
    lookups = b2bua_metric(metrics, "tandem_b2bua_policy_lookups_total", service)
    billed = b2bua_metric(metrics, "tandem_b2bua_billing_records_total", service)
    failures = b2bua_metric(metrics, "tandem_b2bua_billing_failures_total", service)
    check(lookups == calls, "%d policy lookups expected, metrics say %s" % (calls, lookups))
    check(billed == calls and failures == 0, "%d billing records expected, metrics say %s written, %s failed"
          % (calls, billed, failures))


def check_billing(rows, calls, ended_by, duration_ms=None):
    check(len(rows) == calls, "%d billing records expected, the database holds %d" % (calls, len(rows)))
    reasons = sorted(set(r[1] for r in rows))
    check(reasons == [ended_by], "billing records should all be ended by %r, got %s" % (ended_by, reasons))
    check(len(set(r[0] for r in rows)) == calls, "one record per call expected (distinct Call-IDs)")
    if duration_ms is not None:
        lo, hi = duration_ms
        bad = [r[2] for r in rows if not lo <= r[2] <= hi]
        check(not bad, "call durations outside [%d, %d] ms: %s" % (lo, hi, bad[:10]))


def case_1t_sqlite(env, transport):
    path, url = sqlite_url(env)
    metrics = run_calls(env, "b2bua_1t", url, transport=transport)
    check_tier_metrics(metrics, "b2bua_1t", 100)
    rows = sqlite_rows(path, "SELECT call_id, ended_by, duration_ms FROM b2bua_billing")
    check_billing(rows, 100, "caller")
    totals = sqlite_rows(path, "SELECT billed_calls, billed_ms FROM b2bua_policy WHERE user_name = 'service'")
    check(totals and totals[0][0] == 100 and totals[0][1] == sum(r[2] for r in rows),
          "b2bua_policy totals for 'service' should be 100 calls and the sum of the durations, got %s" % totals)


def case_no_policy(env):
    path, url = sqlite_url(env)
    callee_port = common.free_port()  # nothing listens: a leg B would be visible in the metrics
    t = common.Tandem(env, name="tandem", service="b2bua_1t",
                      sets=["b2bua.next_hop=127.0.0.1:%d" % callee_port, 'database.url="%s"' % url])
    with t:
        ip, port = t.addr("udp")
        sock = common.udp_socket()
        local = sock.getsockname()
        ruri = "sip:nobody@%s:%d" % (ip, port)
        call_id, branch, tag = common.new_call_id("nopolicy"), common.new_branch(), "np1"
        sock.sendto(common.build_request("INVITE", ruri, local, call_id=call_id, branch=branch, from_tag=tag,
                                         body=common.SDP_OFFER), (ip, port))
        got = common.udp_collect(sock, 5.0, until_final=True, grace=0.2)
        finals = [m for m, _ in got if m is not None and m.code is not None and m.code >= 200]
        check(finals and finals[0].code == 403, "expected 403 for a callee without policy, got %s"
              % [m.first_line for m, _ in got if m])
        sock.sendto(common.build_request("ACK", ruri, local, call_id=call_id, branch=branch, from_tag=tag,
                                         to_hdr=finals[0].get("to")), (ip, port))
        metrics = wait_drained(t)
        out = common.metric_sum(metrics, "tandem_messages_out_total", method="INVITE", status_class="request")
        check(not out, "no leg B may be placed for a refused call; %s INVITE(s) sent" % out)
        check(b2bua_metric(metrics, "tandem_b2bua_rejected_total", "b2bua_1t") == 1, "rejected_total should be 1")
        t.stop()


def case_call_timer(env):
    path, url = sqlite_url(env)
    metrics = run_calls(env, "b2bua_1t", url, calls=10, rate=5, caller="wait_bye", sets=["b2bua.call_timer=1s"])
    check_tier_metrics(metrics, "b2bua_1t", 10)
    check(b2bua_metric(metrics, "tandem_b2bua_timer_ends_total", "b2bua_1t") == 10, "10 calls should end on the timer")
    check_billing(sqlite_rows(path, "SELECT call_id, ended_by, duration_ms FROM b2bua_billing"), 10, "timer", (950, 1600))


def case_revoked_policy(env):
    path, url = sqlite_url(env)
    calls = 5

    def revoke(t):
        # All calls are up after ~1 s at 5 calls/s; their policy is checked every 200 ms.
        time.sleep(1.6)
        out = subprocess.run([env.binary, "db", "deny", "service",
                              "--set", 'database.url="%s"' % url], capture_output=True, text=True, timeout=30)
        env.log("tandem db deny: rc=%s %s %s" % (out.returncode, out.stdout.strip(), out.stderr.strip()))
        check(out.returncode == 0 and "policy removed" in out.stdout, "tandem db deny failed: %s %s" % (out.stdout, out.stderr))

    metrics = run_calls(env, "b2bua_2t", url, calls=calls, rate=5, caller="wait_bye",
                        sets=["b2bua.call_timer=30s", "b2bua.check_period=200ms"], during=revoke)
    checks = b2bua_metric(metrics, "tandem_b2bua_policy_checks_total", "b2bua_2t") or 0
    check(checks >= calls, "each live call's policy should have been queried (got %s queries)" % checks)
    check(b2bua_metric(metrics, "tandem_b2bua_policy_ends_total", "b2bua_2t") == calls, "every call should end on the revoked policy")
    check_billing(sqlite_rows(path, "SELECT call_id, ended_by, duration_ms FROM b2bua_billing"), calls, "policy")


def case_2t_tcp(env):
    path, url = sqlite_url(env)
    calls = 10
    metrics = run_calls(env, "b2bua_2t", url, transport="tcp", calls=calls, rate=5, caller="wait_bye",
                        sets=["b2bua.call_timer=1s", "b2bua.check_period=200ms"])
    check_tier_metrics(metrics, "b2bua_2t", calls)
    checks = b2bua_metric(metrics, "tandem_b2bua_policy_checks_total", "b2bua_2t") or 0
    # A 1 s call checked every 200 ms: about 4 queries each.
    check(checks >= 3 * calls, "expected >= %d periodic policy queries, got %s" % (3 * calls, checks))
    check_billing(sqlite_rows(path, "SELECT call_id, ended_by, duration_ms FROM b2bua_billing"), calls, "timer", (950, 1600))


def postgres_base():
    url = os.environ.get("TANDEM_TEST_POSTGRES_URL") or "postgres://postgres@127.0.0.1:5432/test"
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        if not os.environ.get("TANDEM_TEST_POSTGRES_URL"):
            raise common.Skip("no PostgreSQL server on 127.0.0.1:5432 (set TANDEM_TEST_POSTGRES_URL to use another)")
    return url


def psql(url, sql):
    out = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-tA", "-c", sql], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise common.Failure("psql %r failed: %s" % (sql, out.stderr.strip()))
    return out.stdout.strip()


def case_postgres(env):
    base = postgres_base()
    if subprocess.run(["which", "psql"], capture_output=True).returncode != 0:
        raise common.Skip("psql (Debian postgresql-client) is not installed")
    name = "tandem_sys_" + uuid.uuid4().hex[:10]
    psql(base, "CREATE DATABASE %s" % name)
    url = base.rsplit("/", 1)[0] + "/" + name
    try:
        metrics = run_calls(env, "b2bua_1t", url)
        check_tier_metrics(metrics, "b2bua_1t", 100)
        count = psql(url, "SELECT count(*) FROM b2bua_billing WHERE ended_by = 'caller'")
        check(count == "100", "PostgreSQL should hold 100 billing records, holds %s" % count)
        totals = psql(url, "SELECT billed_calls FROM b2bua_policy WHERE user_name = 'service'")
        check(totals == "100", "b2bua_policy.billed_calls should be 100, is %s" % totals)
    finally:
        psql(base, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)


CASES = [
    ("1t_sqlite_udp", lambda env: case_1t_sqlite(env, "udp")),
    ("1t_sqlite_tcp", lambda env: case_1t_sqlite(env, "tcp")),
    ("1t_no_policy_403", case_no_policy),
    ("1t_call_timer", case_call_timer),
    ("2t_revoked_policy", case_revoked_policy),
    ("2t_tcp_checks_and_timer", case_2t_tcp),
    ("1t_postgres", case_postgres),
]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_b2bua_db"] + sys.argv[1:]))
