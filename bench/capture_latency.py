#!/usr/bin/env python3
"""Setup delay with microsecond resolution, from a packet capture of the client leg.

SIPp's response-time trace has 1 ms resolution. Here tcpdump (Debian `tcpdump`) captures the
server's SIP port on loopback during one fixed-rate step of bench/find_max_rate.py's rig, and
the delay of each call is taken from the capture's timestamps: first INVITE from the caller
to the server → first 200 OK (CSeq INVITE) from the server back to that caller. The same rate
is run for each server named, one after the other, so Tandem and Kamailio are compared
side by side:

    python3 bench/capture_latency.py --rate 4000 --scenarios proxy200,kamailio200
    python3 bench/capture_latency.py --rates 2000,6000,8000,10000    # a table per rate
    python3 bench/capture_latency.py --rates 1000,2000,4000 --rounds 3   # medians of 3 rounds
    # two Tandem builds and Kamailio, interleaved: a scenario may name its binary after '@'
    python3 bench/capture_latency.py --scenarios proxy200@/tmp/tandem-base,proxy200,kamailio200
    KEEP_PCAP=/tmp/pcaps python3 bench/capture_latency.py ...   # keep each step's capture there
    python3 bench/capture_latency.py --transport tcp --rates 1000,3000   # every leg over TCP

With several rates the servers take turns at each rate (Tandem, Kamailio, next rate), and a
markdown table of the percentiles side by side is written next to the JSON.

The step is find_max_rate.py's: above --uac-max-rate (5,000 calls/s) the rate is split over
several SIPp callers, each on its own port (calls are matched per Call-ID, so every caller's
calls count); the number of callers and their CPU share are recorded with the results.

Prints p50/p90/p95/p99/p99.9 in microseconds per scenario and writes them as JSON with --json
(bench/results/capture-latency.json by default). Needs root (or CAP_NET_RAW) for tcpdump.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import find_max_rate as fmr  # noqa: E402


def packets(path, proto=17):
    """(timestamp_s, src_port, dst_port, payload) of UDP/IPv4 packets in a pcap (Ethernet or
    Linux cooked), microsecond or nanosecond timestamps; with proto=6, TCP segments as
    (timestamp_s, src_port, dst_port, payload, seq)."""
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        magic = struct.unpack("<I", head[:4])[0]
        if magic in (0xA1B2C3D4, 0xA1B23C4D):
            endian = "<"
        else:
            endian = ">"
            magic = struct.unpack(">I", head[:4])[0]
        scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
        linktype = struct.unpack(endian + "I", head[20:24])[0]
        link_len = {1: 14, 113: 16, 276: 20}.get(linktype)
        if link_len is None:
            raise RuntimeError("unsupported pcap link type %d" % linktype)
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, incl, _ = struct.unpack(endian + "IIII", rec)
            data = f.read(incl)
            ip = data[link_len:]
            if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != proto:
                continue
            ihl = (ip[0] & 0x0F) * 4
            sport, dport = struct.unpack(">HH", ip[ihl:ihl + 4])
            if proto == 17:
                yield sec + frac * scale, sport, dport, ip[ihl + 8:]
                continue
            total = struct.unpack(">H", ip[2:4])[0]
            seq = struct.unpack(">I", ip[ihl + 4:ihl + 8])[0]
            doff = (ip[ihl + 12] >> 4) * 4
            payload = ip[ihl + doff:total]
            if payload:
                yield sec + frac * scale, sport, dport, payload, seq


# How a SIP message can begin, to find the next one after a gap in a captured stream.
STARTS = (b"INVITE ", b"ACK ", b"BYE ", b"CANCEL ", b"OPTIONS ", b"SIP/2.0 ", b"PRACK ", b"UPDATE ")


def messages(path, transport):
    """(timestamp_s, src_port, dst_port, message) of every SIP message captured. Over UDP a
    datagram is a message; over TCP each direction of each connection is reassembled and cut
    at the header section's end plus Content-Length (a segment may carry several messages:
    Tandem writes a batch's messages to a connection at once), a message stamped with the
    segment that completed it."""
    if transport == "udp":
        yield from packets(path)
        return
    streams = {}  # (sport, dport) -> [next seq, buffer]
    for ts, sport, dport, payload, seq in packets(path, proto=6):
        st = streams.setdefault((sport, dport), [seq, b""])
        if seq != st[0]:
            ahead = (seq - st[0]) % (1 << 32)
            if ahead >= 1 << 31:  # a retransmission of what was seen: keep only what is new
                old = (st[0] - seq) % (1 << 32)
                if old >= len(payload):
                    continue
                payload, seq = payload[old:], st[0]
            else:  # a gap (not captured): start again at the next message start
                st[1] = b""
                at = min((i for i in (payload.find(m) for m in STARTS) if i >= 0), default=-1)
                if at < 0:
                    st[0] = (seq + len(payload)) % (1 << 32)
                    continue
                payload, seq = payload[at:], seq + at
        st[0] = (seq + len(payload)) % (1 << 32)
        buf = st[1] + payload
        while True:
            buf = buf.lstrip(b"\r\n")  # keep-alive CRLFs
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end + 4]
            length = header(head, b"content-length") or header(head, b"l") or b"0"
            size = end + 4 + int(length)
            if len(buf) < size:
                break
            yield ts, sport, dport, buf[:size]
            buf = buf[size:]
        st[1] = buf


def header(payload, name):
    for line in payload.split(b"\r\n")[1:]:
        if not line:
            break
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def call_times_us(path, server_port, transport="udp", callee_port=None):
    """Per call (by Call-ID, the first of each message), in microseconds, each list sorted:
    `setup`, the caller's INVITE in → the server's 200 OK (CSeq INVITE) out to that caller;
    `server`, the time the INVITE and its 200 spent inside the server (INVITE in → INVITE out
    to the callee, plus 200 in from the callee → 200 out), also apart as `invite` and `ok`; and
    `callee`, INVITE out → 200 in: what of the setup delay is the server's own (reading,
    handling, sending, and its wake-ups) and what is SIPp's."""
    first = {}   # (cid, event) -> timestamp
    caller = {}
    for ts, sport, dport, payload in messages(path, transport):
        # Towards the server: to its port, or (its connections to the callee leave from
        # another port over TCP) from the callee's.
        inward = dport == server_port or (callee_port is not None and sport == callee_port)
        if payload.startswith(b"INVITE "):
            ev = "inv_in" if inward else "inv_out"
        elif payload.startswith(b"SIP/2.0 200"):
            if not (header(payload, b"cseq") or b"").endswith(b"INVITE"):
                continue
            ev = "ok_in" if inward else "ok_out"
        else:
            continue
        cid = header(payload, b"call-id")
        if cid is None or (cid, ev) in first:
            continue
        if ev == "inv_in":
            caller[cid] = sport
        elif ev == "ok_out" and caller.get(cid) != dport:
            continue
        first[(cid, ev)] = ts
    times = {k: [] for k in ("setup", "server", "invite", "ok", "callee")}
    for cid in caller:
        t = [first.get((cid, e)) for e in ("inv_in", "inv_out", "ok_in", "ok_out")]
        if t[3] is not None and t[3] >= t[0]:
            times["setup"].append((t[3] - t[0]) * 1e6)
        if None in t:
            continue
        times["invite"].append((t[1] - t[0]) * 1e6)
        times["ok"].append((t[3] - t[2]) * 1e6)
        times["server"].append(times["invite"][-1] + times["ok"][-1])
        times["callee"].append((t[2] - t[1]) * 1e6)
    return {k: sorted(v) for k, v in times.items()}


def run(args, label, rate):
    """One step of `label`: a find_max_rate.py scenario, optionally `SCENARIO@BINARY` (another
    tandem binary, e.g. the build before a change, measured in the same run)."""
    scenario, _, binary = label.partition("@")
    ns = argparse.Namespace(**vars(args))
    ns.transport = args.transport
    if binary:
        ns.binary = os.path.abspath(binary)
    work = tempfile.mkdtemp(prefix="tandem-capture-")
    rig = fmr.Rig(ns, scenario, work)
    pcap = os.path.join(work, "client.pcap")
    dump = None
    try:
        rig.start()
        if args.transport == "udp":
            # The server sends to the callee from its own port: one filter sees both legs.
            snap, ports = "700", "udp port %d" % rig.port
        else:
            # Whole segments (a batch of messages may share one); the callee leg by its port.
            snap = "0"
            ports = " or ".join("tcp port %d" % p for p in (rig.port, rig.uas_port) if p)
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", snap, "-B", "65536", "-w", pcap, ports],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        time.sleep(1.0)
        step = rig.step(rate)
    finally:
        if dump is not None:
            os.killpg(dump.pid, signal.SIGINT)
            err = dump.communicate(timeout=30)[1].decode(errors="replace")
        else:
            err = ""
        rig.stop()
    times = call_times_us(pcap, rig.port, args.transport, rig.uas_port)
    lat = times["setup"]
    dropped = next((line for line in err.splitlines() if "dropped by kernel" in line), "")
    if os.environ.get("KEEP_PCAP"):  # a directory: keep each run's capture there
        os.makedirs(os.environ["KEEP_PCAP"], exist_ok=True)
        shutil.copy(pcap, os.path.join(os.environ["KEEP_PCAP"], "%s-%d.pcap" % (label.replace("/", "_"), rate)))
    shutil.rmtree(work, ignore_errors=True)
    pct = {("p%s" % q).replace(".", "_"): fmr.percentile(lat, q) for q in (50, 90, 95, 99, 99.9)}
    return {"scenario": label, "rate": rate, "calls": step["calls"], "success_ratio": step["success_ratio"],
            "calls_measured": len(lat), "setup_us": pct,
            **{name: {k: fmr.percentile(times[part], q) for k, q in (("p50", 50), ("p99", 99))}
               for name, part in (("server_us", "server"), ("server_invite_us", "invite"),
                                  ("server_ok_us", "ok"), ("callee_us", "callee"))},
            "sipp_p99_ms": step["p99_ms"], "tcpdump": dropped.strip(),
            "uac_instances": step["uac_instances"], "sipp_uac_cpu_share": step["sipp_uac_cpu_share"],
            "sipp_uac_cpu_share_per_instance": step["sipp_uac_cpu_share_per_instance"],
            "setup_rate_achieved": step["setup_rate_achieved"],
            "generator_reached_rate": step["generator_reached_rate"]}


def markdown(out, scenarios, rates, argv):
    m = out["machine"]
    lines = ["# Setup delay from a capture of the client leg (µs), Proxy 200 over %s" % out.get("transport", "udp").upper(), "",
             "`python3 bench/capture_latency.py %s` (tandem %s). Machine: %s, %d cores, "
             "kernel %s." % (" ".join(argv), out["git_rev"], m.get("cpu_model"),
                             m.get("nproc", 0), m.get("kernel")), "",
             out["method"], "",
             "Inside the server = INVITE in → INVITE out plus 200 in → 200 out (the server's reading, "
             "handling, sending and wake-ups, per call), also given apart (INVITE / 200, p50); callee = "
             "INVITE out → 200 in (SIPp's uas). A server named `proxy200@PATH` is another tandem binary.", "",
             "| rate | server | calls measured / made | p50 | p90 | p95 | p99 | p99.9 | SIPp p99 (ms) "
             "| inside the server p50 / p99 | of which INVITE / 200, p50 | callee p50 / p99 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "–" if v is None else "%.0f" % v  # noqa: E731
    for r in out["results"]:
        u = r["setup_us"]
        sv, ce = r.get("server_us") or {}, r.get("callee_us") or {}
        si, so = r.get("server_invite_us") or {}, r.get("server_ok_us") or {}
        lines.append("| %d | %s | %d / %d | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s / %s |" % (
            r["rate"], r["scenario"], r["calls_measured"], r["calls"], fmt(u["p50"]), fmt(u["p90"]), fmt(u["p95"]),
            fmt(u["p99"]), fmt(u["p99_9"]), fmt(r["sipp_p99_ms"]), fmt(sv.get("p50")), fmt(sv.get("p99")),
            fmt(si.get("p50")), fmt(so.get("p50")), fmt(ce.get("p50")), fmt(ce.get("p99"))))
    # With several rounds, the median of each (scenario, rate)'s p99 over the rounds.
    runs = {}
    for r in out["results"]:
        if r["setup_us"]["p99"] is not None:
            runs.setdefault((r["scenario"], r["rate"]), []).append(r["setup_us"]["p99"])
    by = {k: statistics.median(v) for k, v in runs.items()}
    rounds = out.get("rounds", 1)
    # Every other server against the last one named (e.g. Kamailio).
    b = scenarios[-1]
    for a in scenarios[:-1]:
        if rounds > 1:
            lines += ["", "Per round, p99 %s / %s (rounds interleave the servers at each rate):" % (a, b), ""]
            for rate in rates:
                pa, pb = runs.get((a, rate), []), runs.get((b, rate), [])
                lines.append("- %d calls/s: %s" % (rate, ", ".join("%.2f" % (x / y) for x, y in zip(pa, pb) if y)))
        lines += ["", "p99 %s / %s by rate%s: %s" % (a, b, " (medians of %d rounds)" % rounds if rounds > 1 else "", ", ".join(
            "%d: %s" % (rate, "%.2f" % (by[(a, rate)] / by[(b, rate)]) if by.get((a, rate)) and by.get((b, rate)) else "–")
            for rate in rates))]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "target", "release", "tandem"))
    ap.add_argument("--scenarios", default="proxy200,kamailio200")
    ap.add_argument("--rate", type=int, default=4000)
    ap.add_argument("--rates", default="", help="comma-separated rates (overrides --rate)")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="repeat every (rate, server) step; the report takes medians")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--sipp-buffer", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--uac-max-rate", type=int, default=5000, help="calls/s per SIPp caller (more: several callers)")
    ap.add_argument("--uac-instances", type=int, default=0, help="force this many SIPp callers")
    ap.add_argument("--kamailio-shm", type=int, default=2048)
    ap.add_argument("--kamailio-pkg", type=int, default=32)
    ap.add_argument("--kamailio-children", type=int, default=2)
    ap.add_argument("--kamailio-mem", default="tlsf")
    ap.add_argument("--transport", choices=("udp", "tcp"), default="udp",
                    help="every leg over this transport (TCP: both legs captured, streams reassembled)")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "capture-latency.json"))
    args = ap.parse_args(argv)
    args.binary = os.path.abspath(args.binary)
    if not shutil.which("tcpdump"):
        sys.exit("tcpdump not found: apt-get install tcpdump")
    rates = [int(r) for r in args.rates.split(",") if r] or [args.rate]
    scenarios = [s for s in args.scenarios.split(",") if s]
    results = []
    for scenario, rate in ((s, r) for _ in range(args.rounds) for r in rates for s in scenarios):
        r = run(args, scenario, rate)
        results.append(r)
        u = r["setup_us"]
        sv, ce = r["server_us"], r["callee_us"]
        print("%-12s %5d calls/s  measured %6d of %6d  p50 %7s  p90 %7s  p95 %7s  p99 %7s  p99.9 %7s µs  %s"
              "  (%d SIPp caller%s, CPU %s %%)  inside the server p50 %s p99 %s, callee p50 %s p99 %s" % (
                  scenario, r["rate"], r["calls_measured"], r["calls"],
                  *("%.0f" % u[k] if u[k] is not None else "-" for k in ("p50", "p90", "p95", "p99", "p99_9")),
                  r["tcpdump"], r["uac_instances"], "" if r["uac_instances"] == 1 else "s",
                  "+".join(fmr.pct(x) for x in r["sipp_uac_cpu_share_per_instance"]),
                  *("%.0f" % v if v is not None else "-" for v in (sv["p50"], sv["p99"], ce["p50"], ce["p99"]))),
              flush=True)
    out = {"machine": fmr.machine(), "git_rev": fmr.git_rev(), "method": __doc__.split("\n\n")[1].replace("\n", " "),
           "rounds": args.rounds, "transport": args.transport, "results": results}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", os.path.relpath(args.json, REPO))
    if len(rates) > 1 or args.rounds > 1:
        md = os.path.splitext(args.json)[0] + ".md"
        with open(md, "w") as f:
            f.write(markdown(out, scenarios, rates, sys.argv[1:] if argv is None else argv))
        print("wrote", os.path.relpath(md, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
