"""Admin endpoint and lifecycle of `tandem run`.

* the startup lines on stdout name the SIP listeners and the admin URL;
* GET /health answers 200;
* after valid OPTIONS over UDP (and one over TCP), each answered 200,
  GET /metrics is Prometheus text whose tandem_messages_in_total samples with
  method="OPTIONS" add up to at least the number sent;
* SIGTERM -> exit code 0 within 5 s, no panic.
Case `sipsak`: sipsak's OPTIONS ping gets 200 (interop with another client).
"""

import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

N_UDP = 5


def case_admin(env):
    t = common.Tandem(env, name="tandem", service="uas")
    with t:
        udp, tcp = t.addr("udp"), t.addr("tcp")
        # Startup lines (Rust's stdout is line-buffered; give it a moment).
        want = ["listening on udp:%s:%d" % udp, "listening on tcp:%s:%d" % tcp,
                "admin on %s" % t.admin_url]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not all(w in t.stdout_text() for w in want):
            time.sleep(0.05)
        out = t.stdout_text()
        for w in want:
            check(w in out, "stdout lacks %r; stdout was:\n%s" % (w, out[-2000:]))

        status, _ = t.get("/health")
        check(status == 200, "GET /health answered %s" % status)

        for i in range(N_UDP):
            r = common.options_udp(udp, timeout=3.0)
            check(r is not None, "OPTIONS #%d over UDP got no final response" % (i + 1))
            check(r.code == 200, "OPTIONS #%d over UDP got %s %s" % (i + 1, r.code, r.reason))
            check(r.get("call-id") and (r.get("cseq") or "").split()[-1:] == ["OPTIONS"],
                  "OPTIONS response lacks Call-ID/CSeq: %r" % r.first_line)
            check(r.to_tag(), "200 to OPTIONS has no To tag")
        r = common.options_tcp(tcp, timeout=3.0)
        check(r is not None and r.code == 200, "OPTIONS over TCP got %s" % (r and r.code))

        status, body = t.get("/metrics")
        check(status == 200, "GET /metrics answered %s" % status)
        samples = common.parse_metrics(body)
        check(samples, "GET /metrics returned no Prometheus samples:\n%s" % body[:1000])
        bad = [n for n, _, _ in samples if not n.startswith("tandem_")]
        check(not bad, "metric names not starting with tandem_: %s" % sorted(set(bad))[:10])
        total = common.requests_in(samples, "OPTIONS")
        check(total is not None,
              'no tandem_messages_in_total{method="OPTIONS",...} sample in /metrics:\n%s'
              % "\n".join(l for l in body.splitlines() if "messages_in" in l)[:1500])
        check(total >= N_UDP + 1, "tandem_messages_in_total for OPTIONS is %s, expected >= %d"
              % (total, N_UDP + 1))
        udp_total = common.requests_in(samples, "OPTIONS", "udp")
        check(udp_total is not None and udp_total >= N_UDP,
              'tandem_messages_in_total{method="OPTIONS",transport="udp"} is %s, expected >= %d'
              % (udp_total, N_UDP))

        t.stop(timeout=5.0)


def case_sipsak(env):
    """Interop: sipsak's OPTIONS ping (`sipsak -s URI`) over UDP gets 200 (sipsak exit 0)."""
    if not shutil.which("sipsak"):
        raise common.Skip("sipsak not installed; run scripts/install-test-deps.sh")
    t = common.Tandem(env, name="tandem", service="uas")
    with t:
        ip, port = t.addr("udp")
        out = env.log_path("sipsak.log")
        with open(out, "wb") as f:
            r = subprocess.run(["sipsak", "-s", "sip:ping@%s:%d" % (ip, port), "-H", "127.0.0.1", "-v"],
                               stdout=f, stderr=subprocess.STDOUT, timeout=30)
        with open(out, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        check(r.returncode == 0 and "SIP/2.0 200" in text,
              "sipsak OPTIONS ping exited %s; output:\n%s" % (r.returncode, text[-1500:]))
        t.stop()


CASES = [(None, case_admin), ("sipsak", case_sipsak)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_admin"] + sys.argv[1:]))
