"""Garbage in, service survives: `tandem run --service uas` inside a private
network namespace (needs root, else SKIP) gets, from a client in the same
namespace (this file re-invoked with --client):

* a few thousand seeded random UDP datagrams: random bytes, truncated and
  byte-mutated valid messages, SIP-ish token soup, absurd numbers, a few
  datagrams with thousands of header lines; every 250 datagrams a valid
  OPTIONS must still get 200;
* a valid OPTIONS with 200 extra header lines over UDP: must be answered
  (any final response: 200, or a 400/413/513 size refusal);
* a 70 KiB request over TCP (header section of 70 KiB): the server closes the
  connection or answers 413/400/513, within 5 s; a new TCP connection then
  gets 200 to OPTIONS;
then a valid OPTIONS over UDP and TCP -> 200, tandem_parse_errors_total > 0,
SIGTERM -> exit 0, and no panic in tandem's output.

The seed is 4475 (override with TANDEM_FUZZ_SEED) so failures replay.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

N_DATAGRAMS = 3000
CHECK_EVERY = 250
MAX_UDP = 65507


# --------------------------------------------------------------------------
# generators
# --------------------------------------------------------------------------

def templates(server, local):
    ruri = "sip:fuzz@%s:%d" % server
    return [
        common.build_options(server, local),
        common.build_request("INVITE", ruri, local, body=common.SDP_OFFER),
        common.build_request("REGISTER", "sip:%s:%d" % server, local),
        common.build_request("BYE", ruri, local, to_hdr="<%s>;tag=abc" % ruri, cseq=2),
        common.build_request("CANCEL", ruri, local),
        common.build_request("ACK", ruri, local, to_hdr="<%s>;tag=abc" % ruri),
        ("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP %s:%d;branch=z9hG4bK-x\r\nFrom: <sip:a@b>;tag=1\r\n"
         "To: <sip:c@d>;tag=2\r\nCall-ID: resp-1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
         % local).encode(),
    ]


SOUP = [b"INVITE", b"OPTIONS", b"SIP/2.0", b"sip:", b"sips:", b"tel:", b"Via:", b"v:", b"From:",
        b"To:", b"Call-ID:", b"CSeq:", b"Content-Length:", b"l:", b"Max-Forwards:", b";", b",",
        b":", b"<", b">", b"\"", b"\\", b"%", b"%00", b"@", b"[", b"]", b"::", b" ", b"\t",
        b"\r\n", b"\r\n ", b"\n", b"\r", b"=", b"branch=z9hG4bK", b"tag=", b"99999999999999999999",
        b"-1", b"0", b"4294967296", b"\x00", b"\xff", b"\xc3\xa9", b"SIP/2.0/UDP", b"127.0.0.1",
        b"received=", b"rport", b"lr", b"Route:", b"Record-Route:", b"Contact: *", b"\r\n\r\n"]

ABSURD = [
    b"Content-Length: 99999999999999999999999",
    b"Content-Length: -1",
    b"Content-Length: 4294967296",
    b"Content-Length: 1e3",
    b"CSeq: 18446744073709551616 OPTIONS",
    b"CSeq: -5 OPTIONS",
    b"CSeq: 1",
    b"Max-Forwards: 99999999999999",
    b"Max-Forwards: -1",
    b"Expires: 99999999999999999999999999",
    b"Via: SIP/2.0/UDP [::1;branch=z9hG4bK-x",
    b"Via: SIP/2.0/UDP 127.0.0.1:99999999;branch=z9hG4bK-x",
    b"Via: SIP/2.0/UDP 127.0.0.1:0;branch=",
    b"Via: ,,,,,,,,,,,,,,,,",
    b"From: \"unterminated <sip:a@b>;tag=1",
    b"To: <sip:a@b",
    b"Call-ID: ",
    b"Contact: <sip:a@[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]>",
    b"Route: <sip:a@b;lr>, <<<<<<",
    b"Content-Type: multipart/mixed;boundary=",
]


KINDS = ["random", "truncated", "mutated", "soup", "absurd", "response", "flood", "folded", "empty"]
WEIGHTS = [20, 20, 25, 10, 10, 5, 1, 5, 2]


def gen_datagram(rng, tpls):
    kind = rng.choices(KINDS, weights=WEIGHTS)[0]
    if kind == "random":
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 1400)))
    elif kind == "truncated":
        t = rng.choice(tpls)
        data = t[:rng.randint(0, len(t) - 1)]
    elif kind == "mutated":
        data = bytearray(rng.choice(tpls))
        for _ in range(rng.randint(1, 12)):
            op = rng.random()
            pos = rng.randrange(len(data)) if data else 0
            if op < 0.5 and data:
                data[pos] = rng.getrandbits(8)
            elif op < 0.75:
                data[pos:pos] = bytes([rng.choice(b" \t\r\n:;,<>\"%@\x00")])
            elif data:
                del data[pos:pos + rng.randint(1, 20)]
        data = bytes(data)
    elif kind == "soup":
        data = b"".join(rng.choice(SOUP) for _ in range(rng.randint(1, 200)))
    elif kind == "absurd":
        t = rng.choice(tpls[:6])
        head, _, body = t.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        for _ in range(rng.randint(1, 3)):
            lines.insert(rng.randint(1, len(lines)), rng.choice(ABSURD))
        data = b"\r\n".join(lines) + b"\r\n\r\n" + body
    elif kind == "response":
        code = rng.choice([b"0", b"99", b"100", b"180", b"200", b"487", b"999", b"1000",
                           b"4294967301", b"-200", b"abc"])
        data = b"SIP/2.0 " + code + b" X\r\n" + rng.choice(tpls)[rng.randint(0, 60):]
    elif kind == "flood":
        t = rng.choice(tpls[:4])
        head, _, body = t.partition(b"\r\n\r\n")
        n = rng.randint(1000, 6000)
        extra = b"".join(b"X-F%d: v\r\n" % i for i in range(n))
        data = head + b"\r\n" + extra + b"\r\n" + body
        data = data[:MAX_UDP]
    elif kind == "folded":
        t = rng.choice(tpls[:4])
        data = t.replace(b"\r\n", b"\r\n " if rng.random() < 0.5 else b"\n", rng.randint(1, 6))
    else:
        data = rng.choice([b"", b"\r\n", b"\r\n\r\n", b"\x00", b" "])
    return kind, data[:MAX_UDP]


# --------------------------------------------------------------------------
# client (inside the namespace)
# --------------------------------------------------------------------------

def drain(sock):
    n = 0
    sock.setblocking(False)
    try:
        while True:
            try:
                sock.recvfrom(70000)
                n += 1
            except OSError:  # BlockingIOError: nothing left
                return n
    finally:
        sock.setblocking(True)


def client_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", action="store_true")
    ap.add_argument("--server", required=True)
    ap.add_argument("--metrics-url", required=True)
    ap.add_argument("--seed", type=int, default=4475)
    ap.add_argument("--count", type=int, default=N_DATAGRAMS)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    host, port = a.server.rsplit(":", 1)
    server = (host, int(port))
    rng = common.seeded_rng(a.seed)
    out = {"seed": a.seed, "kinds": {}, "dead_checks": [], "received": 0}

    s = common.udp_socket()
    tpls = templates(server, s.getsockname())
    for i in range(1, a.count + 1):
        kind, data = gen_datagram(rng, tpls)
        out["kinds"][kind] = out["kinds"].get(kind, 0) + 1
        try:
            s.sendto(data, server)
        except OSError as e:
            out.setdefault("send_errors", []).append("%d %s: %s" % (i, kind, e))
        if i % 20 == 0:
            out["received"] += drain(s)
            time.sleep(0.002)
        if i % CHECK_EVERY == 0:
            r = common.options_udp(server, timeout=3.0)
            if r is None or r.code != 200:
                out["dead_checks"].append({"after": i, "last_kind": kind, "code": r and r.code,
                                           "last_datagram": data[:300].decode("latin-1")})
                sys.stderr.write("OPTIONS after datagram %d got %s\n" % (i, r and r.code))
    out["received"] += drain(s)
    s.close()

    # 200 extra header lines over UDP.
    s = common.udp_socket()
    local = s.getsockname()
    extra = ["X-Line-%03d: value-%03d" % (i, i) for i in range(200)]
    msg = common.build_request("OPTIONS", "sip:many@%s:%d" % server, local, extra_headers=extra)
    s.sendto(msg, server)
    got = [m.code for m, _ in common.udp_collect(s, 3.0, until_final=True, grace=0.2)
           if m is not None and m.code]
    out["headers200"] = {"bytes": len(msg), "codes": got}
    s.close()

    # 70 KiB request over TCP.
    res = {"response": None, "closed": False, "error": None}
    try:
        c = socket.create_connection(server, timeout=5)
        local = c.getsockname()
        pad = ["X-Pad-%04d: %s" % (i, "p" * 60) for i in range(1100)]  # ~ 75,000 bytes
        big = common.build_request("OPTIONS", "sip:big@%s:%d" % server, local, "TCP",
                                   extra_headers=pad)
        res["bytes"] = len(big)
        try:
            c.sendall(big)
        except OSError as e:  # the server may close mid-send: that is a fine outcome
            res["error"] = "send: %s" % e
        rd = common.StreamReader(c)
        m = rd.read(5.0)
        if m is not None:
            res["response"] = m.code
        res["closed"] = rd.closed
        c.close()
    except OSError as e:
        res["error"] = str(e)
        res["closed"] = True
    out["tcp70k"] = res
    r = common.options_tcp(server, timeout=3.0)
    out["tcp_options_after"] = r.code if r else None

    r = common.options_udp(server, timeout=3.0)
    out["udp_options_end"] = r.code if r else None
    status, body = common.http_get(a.metrics_url, timeout=3.0)
    out["metrics_status"] = status
    out["parse_errors"] = common.metric_sum(common.parse_metrics(body), "tandem_parse_errors_total")
    common.dump_json(a.out, out)
    return 0


# --------------------------------------------------------------------------
# test case
# --------------------------------------------------------------------------

def case_bad_input(env):
    seed = int(os.environ.get("TANDEM_FUZZ_SEED", "4475"))
    with common.netns("tandem-bad") as ns:
        t = common.Tandem(env, name="tandem", service="uas", ns=ns)
        with t:
            outp = os.path.join(env.test_dir, "client.json")
            errlog = env.log_path("client.stderr.log")
            with open(errlog, "wb") as err:
                r = common.ns_python(ns, [os.path.abspath(__file__), "--client",
                                          "--server", "%s:%d" % t.addr("udp"),
                                          "--metrics-url", t.admin_url + "/metrics",
                                          "--seed", str(seed), "--out", outp],
                                     timeout=300, stdout=err, stderr=subprocess.STDOUT)
            check(r.returncode == 0, "client exited with %s (see %s)" % (r.returncode, errlog))
            with open(outp) as f:
                res = json.load(f)
            env.log("bad-input results: %s" % json.dumps(res)[:3000])
            check(t.alive(), "tandem died during the garbage run (exit %s); seed %d"
                  % (t.proc.returncode, seed))
            t.stop()
    errs = []
    if res["dead_checks"]:
        errs.append("OPTIONS not answered 200 during the garbage run (seed %d): %s"
                    % (seed, json.dumps(res["dead_checks"][:3])))
    if not any(c >= 200 for c in res["headers200"]["codes"]):
        errs.append("OPTIONS with 200 extra header lines (%d bytes, UDP) got no final response "
                    "(got %s)" % (res["headers200"]["bytes"], res["headers200"]["codes"]))
    tk = res["tcp70k"]
    if not (tk["closed"] or tk["response"] in (400, 413, 513)):
        errs.append("70 KiB request over TCP: expected the connection closed or 413/400/513 "
                    "within 5 s, got response %s, connection %s"
                    % (tk["response"], "closed" if tk["closed"] else "still open"))
    if res["tcp_options_after"] != 200:
        errs.append("OPTIONS on a new TCP connection after the 70 KiB request got %s"
                    % res["tcp_options_after"])
    if res["udp_options_end"] != 200:
        errs.append("final OPTIONS over UDP got %s" % res["udp_options_end"])
    if res["metrics_status"] != 200:
        errs.append("GET /metrics answered %s" % res["metrics_status"])
    elif not (res["parse_errors"] and res["parse_errors"] > 0):
        errs.append("tandem_parse_errors_total is %s after %d garbage datagrams (expected > 0)"
                    % (res["parse_errors"], sum(res["kinds"].values())))
    check(not errs, "; ".join(errs))


CASES = [(None, case_bad_input)]


if __name__ == "__main__":
    if "--client" in sys.argv:
        sys.exit(client_main(sys.argv[1:]))
    import run_all
    sys.exit(run_all.main(["-k", "test_bad_input_survives"] + sys.argv[1:]))
