#!/usr/bin/env python3
"""Memory scale run: N concurrent established calls on `tandem --service uas`, RSS per call.

SIPp places N calls (`-sn uac`, pause --hold-s after the ACK before its BYE) at --rate
calls/s; tandem's UAS is told to hold far longer, so every call stays established. Once
tandem reports N application sessions (its /metrics gauge), its RSS is read from
/proc/PID/status and compared with the RSS before the first call:

    rss_bytes_per_call = (RSS with N calls - RSS idle) / N

Goal (issue 5): 100,000 concurrent calls in under 1 GiB. Results are printed and, with
--json, written as a JSON object (bench/suite.py stores them in bench/results/suite.json).
Standard library only.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kib(pid, key="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def metric(admin, name):
    with urllib.request.urlopen("http://%s/metrics" % admin, timeout=5) as r:
        text = r.read().decode()
    total = None
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})? ([0-9.e+]+)$" % re.escape(name), line)
        if m:
            total = (total or 0) + float(m.group(2))
    return total


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(binary, calls, rate, hold_s, workdir, transport="udp"):
    port, admin_port = free_port(), free_port()
    admin = "127.0.0.1:%d" % admin_port
    tlog = open(os.path.join(workdir, "tandem.stderr.log"), "wb")
    tandem = subprocess.Popen([binary, "run", "--listen", "%s:127.0.0.1:%d" % (transport, port), "--admin", admin,
                               "--service", "uas", "--set", "uas.hold=2h", "--set", "container.app_session_expiry=2h"],
                              stdout=subprocess.DEVNULL, stderr=tlog, start_new_session=True)
    sipp = None
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen("http://%s/health" % admin, timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or tandem.poll() is not None:
                    raise RuntimeError("tandem did not start (see %s)" % workdir)
                time.sleep(0.2)
        time.sleep(1.0)
        idle = rss_kib(tandem.pid)
        sipp = subprocess.Popen(["sipp", "-sn", "uac", "127.0.0.1:%d" % port, "-t", "u1" if transport == "udp" else "t1",
                                 "-i", "127.0.0.1", "-p", str(free_port()), "-r", str(rate), "-m", str(calls),
                                 "-l", str(calls), "-d", str(int(hold_s * 1000)), "-nostdin", "-buff_size", str(8 << 20),
                                 "-trace_stat", "-stf", os.path.join(workdir, "sipp.stat.csv"), "-fd", "5",
                                 "-timeout", "%ds" % (calls / rate + hold_s + 120)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir, start_new_session=True)
        started = time.monotonic()
        peak_sessions, rss_at_peak = 0, idle
        deadline = started + calls / rate + min(hold_s, 60) + 30
        while time.monotonic() < deadline:
            time.sleep(1.0)
            n = int(metric(admin, "tandem_app_sessions") or 0)
            if n >= peak_sessions:
                peak_sessions, rss_at_peak = n, rss_kib(tandem.pid)
            if n >= calls:
                time.sleep(2.0)  # let the last ACKs and retransmission state settle
                peak_sessions = int(metric(admin, "tandem_app_sessions") or 0)
                rss_at_peak = rss_kib(tandem.pid)
                break
            if sipp.poll() is not None:
                break
        hwm = rss_kib(tandem.pid, "VmHWM")
        per_call = (rss_at_peak - idle) * 1024 / peak_sessions if peak_sessions else None
        return {
            "transport": transport,
            "calls_offered": calls,
            "rate_cps": rate,
            "concurrent_calls": peak_sessions,
            "rss_idle_bytes": idle * 1024,
            "rss_bytes": rss_at_peak * 1024,
            "rss_peak_bytes": hwm * 1024 if hwm else None,
            "rss_bytes_per_call": per_call,
            "ramp_seconds": round(time.monotonic() - started, 1),
            "goal": "100,000 concurrent calls in under 1 GiB",
            "goal_met": bool(peak_sessions >= 100_000 and rss_at_peak * 1024 < (1 << 30)),
        }
    finally:
        stop(sipp)
        stop(tandem)
        tlog.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "target", "release", "tandem"))
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=2500, help="calls/s while ramping up")
    ap.add_argument("--hold-s", type=float, default=120, help="SIPp's pause before its BYE (calls stay up that long)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tandem-memory-") as workdir:
        r = run(os.path.abspath(args.binary), args.calls, args.rate, args.hold_s, workdir)
    print("concurrent calls %d, RSS idle %.1f MiB, with calls %.1f MiB, %.0f bytes per call, goal met: %s" % (
        r["concurrent_calls"], r["rss_idle_bytes"] / 2**20, r["rss_bytes"] / 2**20, r["rss_bytes_per_call"] or 0,
        r["goal_met"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
