"""RFC 4475 / RFC 5118 torture messages against a live `tandem run --service uas`.

Everything runs inside a private network namespace (the messages name hosts
such as 192.0.2.x; nothing may leave the machine): tandem and the sending
client (this file re-invoked with --client) are both started with
`ip netns exec`. Needs root; otherwise SKIP.

Case `udp`: every .dat file (rfc4475/, rfc4475/extra/, rfc5118/,
rfc5118/cl-fixed/) is sent as one UDP datagram; responses are collected for up
to 1.5 s (0.5 s after the first final response) and compared with
conformance_expectations.tsv. After every file a fresh valid OPTIONS must get
200. Several files reuse one transaction identity (same top Via branch and
sent-by, or same Call-ID/From-tag/CSeq: e.g. cparam01/cparam02, the three
cl-fixed copies), which a correct server treats as a retransmission; such
files are sent to separate, fresh tandem instances ("rounds"). At the end of
the first round, /metrics must show tandem_parse_errors_total > 0.

Case `tcp`: clerr.dat (Content-Length 9999) over TCP gets no response within
1 s and the connection stays open (the server waits for more bytes); a valid
OPTIONS on a new connection gets 200. dblreq.dat over TCP: the REGISTER is
answered (not 400), and the trailing INVITE, complete on the stream, is
parsed as the next message and answered (any final code, 400 included).
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import Failure, Skip, check  # noqa: E402

EXPECTATIONS = os.path.join(HERE, "conformance_expectations.tsv")
SUBDIRS = ["rfc4475", "rfc4475/extra", "rfc5118", "rfc5118/cl-fixed"]
WINDOW = 1.5      # seconds to collect responses to one file
GRACE = 0.5       # seconds to keep collecting after the first final response
REFUSED = (400, 416, 500, 505)


# --------------------------------------------------------------------------
# corpus and expectations
# --------------------------------------------------------------------------

def corpus_dir(env):
    d = env.conformance_dir or common.default_conformance_dir()
    if not os.path.isdir(os.path.join(d, "rfc4475")):
        raise Skip("conformance corpus not found at %s (set TANDEM_CONFORMANCE_DIR)" % d)
    return d


def corpus_files(d):
    files = []
    for sub in SUBDIRS:
        p = os.path.join(d, sub)
        if os.path.isdir(p):
            files += sorted("%s/%s" % (sub, f) for f in os.listdir(p) if f.endswith(".dat"))
    return files


def load_expectations(path=EXPECTATIONS):
    table = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#") or line.startswith("file\t"):
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise Failure("bad line in %s: %r" % (path, line))
            table[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return table


def outcome_matches(expected, finals, any_response):
    """finals: sorted distinct final codes received for the file."""
    for alt in expected.split("|"):
        alt = alt.strip()
        if alt == "none":
            if not any_response:
                return True
            continue
        if len(finals) != 1:
            continue
        c = finals[0]
        if re.fullmatch(r"\d{3}", alt) and c == int(alt):
            return True
        if re.fullmatch(r"\dxx", alt) and c // 100 == int(alt[0]):
            return True
        if alt == "4xx-not-400" and 400 < c < 500:
            return True
        if alt == "recover" and c >= 200 and c not in REFUSED:
            return True
    return False


# --------------------------------------------------------------------------
# transaction identities -> rounds
# --------------------------------------------------------------------------

def identity_keys(data):
    """Keys that make two requests the same transaction / merged request."""
    msg = common.parse_message(data if b"\r\n\r\n" in data else data + b"\r\n")
    if msg is None or msg.is_response:
        return set()
    keys = set()
    method = msg.method.upper()
    via = msg.get("via") or ""
    m = re.match(r"\s*SIP\s*/\s*2\.0\s*/\s*[^\s]+\s+([^;,\s]+)", via, re.I)
    sent_by = m.group(1).lower() if m else ""
    b = re.search(r";\s*branch\s*=\s*([^;,\s]+)", via, re.I)
    branch = b.group(1) if b else ""
    keys.add(("tx", branch, sent_by, "INVITE" if method == "ACK" else method))
    ft = re.search(r";\s*tag\s*=\s*([^;,\s>]+)", msg.get("from", "") or "")
    num, cm = msg.cseq()
    keys.add(("cseq", msg.get("call-id"), ft.group(1) if ft else None, num, cm))
    return keys


def plan_rounds(d, files):
    rounds = []  # list of (files, keys)
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            keys = identity_keys(fh.read())
        for r in rounds:
            if not (r[1] & keys):
                r[0].append(f)
                r[1].update(keys)
                break
        else:
            rounds.append(([f], set(keys)))
    return [r[0] for r in rounds]


# --------------------------------------------------------------------------
# client side (runs inside the namespace)
# --------------------------------------------------------------------------

def describe(msg, raw):
    if msg is None:
        return {"first_line": raw[:80].decode("latin-1"), "code": None, "request": False,
                "cseq_method": None}
    return {"first_line": msg.first_line[:120], "code": msg.code, "request": not msg.is_response,
            "cseq_method": msg.cseq_method()}


def client_udp(server, corpus, files, metrics_url):
    results = {}
    for f in files:
        with open(os.path.join(corpus, f), "rb") as fh:
            data = fh.read()
        s = common.udp_socket()
        local = s.getsockname()
        got = []
        acked = set()
        t0 = time.monotonic()
        try:
            s.sendto(data, server)
            deadline = t0 + WINDOW
            final_seen = False
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                s.settimeout(remaining)
                try:
                    raw, _ = s.recvfrom(70000)
                except socket.timeout:
                    break
                except OSError:  # e.g. ICMP errors surfacing on the socket
                    time.sleep(0.01)
                    continue
                msg = common.parse_message(raw)
                got.append(describe(msg, raw))
                if msg is None or not msg.is_response or not msg.code:
                    continue
                if (200 <= msg.code < 300 and msg.cseq_method() == "INVITE"
                        and msg.to_tag() not in acked):
                    acked.add(msg.to_tag())
                    s.sendto(common.build_ack_for_2xx(msg, local, "UDP"), server)
                if msg.code >= 200 and not final_seen:
                    final_seen = True
                    deadline = min(deadline, time.monotonic() + GRACE)
        finally:
            s.close()
        alive = common.options_udp(server, timeout=3.0)
        results[f] = {"responses": got, "acked": len(acked),
                      "alive": alive.code if alive else None}
        sys.stderr.write("%s -> %s alive=%s\n" % (f, [g["code"] for g in got], results[f]["alive"]))
        sys.stderr.flush()
    status, body = common.http_get(metrics_url, timeout=3.0)
    return {"files": results, "metrics_status": status, "metrics": body}


def client_tcp(server, corpus):
    out = {}
    # 1. clerr.dat: Content-Length 9999 on a stream -> the server must wait for more bytes.
    with open(os.path.join(corpus, "rfc4475", "clerr.dat"), "rb") as fh:
        clerr = fh.read()
    a = socket.create_connection(server, timeout=3)
    try:
        a.sendall(clerr)
        a.settimeout(1.0)
        try:
            data = a.recv(65536)
            out["clerr"] = {"received": data[:200].decode("latin-1"), "closed": data == b""}
        except socket.timeout:
            out["clerr"] = {"received": "", "closed": False}
        # 2. a valid OPTIONS on a new connection while A is still pending.
        r = common.options_tcp(server, timeout=3.0)
        out["options_after_clerr"] = r.code if r else None
    finally:
        a.close()
    # 3. dblreq.dat on a stream: REGISTER, then the trailing bytes are the next message.
    with open(os.path.join(corpus, "rfc4475", "dblreq.dat"), "rb") as fh:
        dbl = fh.read()
    c = socket.create_connection(server, timeout=3)
    got = []
    try:
        local = c.getsockname()
        c.sendall(dbl)
        rd = common.StreamReader(c)
        deadline = time.monotonic() + 3.0
        have = set()
        while time.monotonic() < deadline and not {"REGISTER", "INVITE"} <= have:
            msg = rd.read(deadline - time.monotonic())
            if msg is None:
                break
            got.append(describe(msg, msg.raw))
            if msg.is_response and msg.code and msg.code >= 200:
                have.add(msg.cseq_method())
                if msg.cseq_method() == "INVITE" and 200 <= msg.code < 300:
                    c.sendall(common.build_ack_for_2xx(msg, local, "TCP"))
        out["dblreq"] = {"responses": got, "closed": rd.closed}
    finally:
        c.close()
    r = common.options_udp(server, timeout=3.0)
    out["options_udp_end"] = r.code if r else None
    r = common.options_tcp(server, timeout=3.0)
    out["options_tcp_end"] = r.code if r else None
    return out


def client_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=["udp", "tcp"], required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--files", default="")
    ap.add_argument("--metrics-url", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    host, port = a.server.rsplit(":", 1)
    server = (host, int(port))
    if a.client == "udp":
        res = client_udp(server, a.corpus, [f for f in a.files.split(",") if f], a.metrics_url)
    else:
        res = client_tcp(server, a.corpus)
    common.dump_json(a.out, res)
    return 0


# --------------------------------------------------------------------------
# test cases (run in the host namespace)
# --------------------------------------------------------------------------

def run_client(env, ns, name, args, timeout):
    out = os.path.join(env.test_dir, name + ".json")
    errlog = env.log_path(name + ".stderr.log")
    with open(errlog, "wb") as err:
        r = common.ns_python(ns, [os.path.abspath(__file__)] + args + ["--out", out],
                             timeout=timeout, stdout=err, stderr=subprocess.STDOUT)
    check(r.returncode == 0, "%s exited with %s (see %s)" % (name, r.returncode, errlog))
    with open(out) as f:
        return json.load(f)


def summarize(responses):
    parts = []
    for g in responses:
        if g["request"]:
            parts.append("request(%s)" % g["first_line"].split(" ")[0])
        else:
            parts.append("%s%s" % (g["code"], "/" + g["cseq_method"] if g["cseq_method"] else ""))
    return ",".join(parts) or "-"


def case_udp(env):
    corpus = corpus_dir(env)
    table = load_expectations()
    files = corpus_files(corpus)
    check(files, "no .dat files under %s" % corpus)
    missing = [f for f in files if f not in table]
    stale = [f for f in table if f not in files]
    check(not missing, "files without an expectation in %s: %s" % (EXPECTATIONS, missing))
    check(not stale, "expectations for files not in the corpus %s: %s" % (corpus, stale))
    rounds = plan_rounds(corpus, files)
    env.log("%d files in %d rounds: %s" % (len(files), len(rounds), [len(r) for r in rounds]))

    results = {}
    problems = []
    parse_errors = None
    with common.netns("tandem-conf") as ns:
        for i, rfiles in enumerate(rounds, 1):
            t = common.Tandem(env, name="tandem-round%d" % i, service="uas", ns=ns)
            with t:
                udp = t.addr("udp")
                res = run_client(env, ns, "client-round%d" % i,
                                 ["--client", "udp", "--server", "%s:%d" % udp, "--corpus", corpus,
                                  "--files", ",".join(rfiles),
                                  "--metrics-url", t.admin_url + "/metrics"],
                                 timeout=len(rfiles) * (WINDOW + 4) + 30)
                results.update(res["files"])
                if i == 1:
                    check(res["metrics_status"] == 200,
                          "GET /metrics inside the namespace answered %s" % res["metrics_status"])
                    parse_errors = common.metric_sum(common.parse_metrics(res["metrics"]),
                                                     "tandem_parse_errors_total")
                try:
                    t.stop()
                except Failure as e:
                    problems.append("round %d (%s): %s" % (i, ",".join(rfiles), e))

    lines = []
    bad = []
    for f in files:
        expected = table[f][0]
        r = results.get(f)
        if r is None:
            bad.append(f)
            lines.append("  %-48s expected %-16s got NOTHING RECORDED" % (f, expected))
            continue
        resp = [g for g in r["responses"] if not g["request"]]
        finals = sorted({g["code"] for g in resp if g["code"] and g["code"] >= 200})
        ok = outcome_matches(expected, finals, bool(resp))
        notes = []
        if f == "rfc4475/dblreq.dat" and any(g["cseq_method"] == "INVITE" for g in resp):
            ok = False
            notes.append("the INVITE after Content-Length was answered over UDP")
        if len(finals) > 1:
            notes.append("several different final responses")
        if any(g["code"] is None for g in resp):
            notes.append("unparsable datagram received")
        if r["alive"] != 200:
            ok = False
            notes.append("next OPTIONS got %s, not 200" % r["alive"])
        if not ok:
            bad.append(f)
        lines.append("  %s %-48s expected %-16s got %-14s alive=%s %s" % (
            "ok " if ok else "BAD", f, expected, summarize(r["responses"]), r["alive"],
            "; ".join(notes)))
    report = "\n".join(lines)
    env.log("per-file outcomes:\n" + report)
    if bad or problems or not (parse_errors and parse_errors > 0):
        msg = []
        if bad:
            msg.append("%d of %d files off expectation: %s" % (len(bad), len(files), ", ".join(bad)))
        if problems:
            msg.append("server problems: " + " | ".join(problems))
        if not (parse_errors and parse_errors > 0):
            msg.append("tandem_parse_errors_total after round 1 is %s (expected > 0)" % parse_errors)
        raise Failure("; ".join(msg) + "\nper-file outcomes:\n" + report)


def case_tcp(env):
    corpus = corpus_dir(env)
    with common.netns("tandem-conf") as ns:
        t = common.Tandem(env, name="tandem-tcp", service="uas", ns=ns)
        with t:
            tcp = t.addr("tcp")
            res = run_client(env, ns, "client-tcp",
                             ["--client", "tcp", "--server", "%s:%d" % tcp, "--corpus", corpus],
                             timeout=60)
            t.stop()
    errs = []
    cl = res["clerr"]
    if cl["received"]:
        errs.append("clerr.dat over TCP was answered within 1 s (expected the server to wait for "
                    "9999 body bytes): %r" % cl["received"][:80])
    elif cl["closed"]:
        errs.append("clerr.dat over TCP: the server closed the connection within 1 s "
                    "(expected it to wait for more bytes)")
    if res["options_after_clerr"] != 200:
        errs.append("OPTIONS on a new TCP connection while clerr is pending got %s"
                    % res["options_after_clerr"])
    resp = [g for g in res["dblreq"]["responses"] if not g["request"]]
    reg = sorted({g["code"] for g in resp if g["cseq_method"] == "REGISTER" and g["code"] >= 200})
    inv = sorted({g["code"] for g in resp if g["cseq_method"] == "INVITE" and g["code"] >= 200})
    if not reg:
        errs.append("dblreq.dat over TCP: the REGISTER got no final response (got %s)"
                    % summarize(res["dblreq"]["responses"]))
    elif not outcome_matches("2xx|4xx-not-400", reg, True):
        errs.append("dblreq.dat over TCP: REGISTER answered %s (expected 2xx or a 4xx other than 400)"
                    % reg)
    if not inv:
        errs.append("dblreq.dat over TCP: the INVITE following the REGISTER on the stream got no "
                    "final response (got %s)" % summarize(res["dblreq"]["responses"]))
    for k in ("options_udp_end", "options_tcp_end"):
        if res[k] != 200:
            errs.append("%s: OPTIONS got %s" % (k, res[k]))
    env.log("tcp results: %s" % json.dumps(res)[:2000])
    check(not errs, "; ".join(errs))


CASES = [("udp", case_udp), ("tcp", case_tcp)]


if __name__ == "__main__":
    if "--client" in sys.argv:
        sys.exit(client_main(sys.argv[1:]))
    import run_all
    sys.exit(run_all.main(["-k", "test_conformance"] + sys.argv[1:]))
