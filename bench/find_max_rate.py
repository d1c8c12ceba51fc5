#!/usr/bin/env python3
"""Step-load benchmark of Tandem with SIPp (Python 3 standard library only).

Scenarios
  proxy200  SIPstone Proxy 200: sipp uac -> tandem --service proxy -> sipp uas
  uas       MLT service: sipp uac -> tandem --service uas (the caller hangs up)
  b2bua_nt  B2BUA NT: sipp uac -> tandem --service b2bua_nt -> sipp uas (two dialogs per call)
  b2bua_1t  B2BUA 1T: NT + policy lookup, call timer and billing in the database
            (embedded SQLite unless --set database.url=postgres://...)
  b2bua_2t  B2BUA 2T: 1T + a periodic per-call database query (b2bua.check_period)
  kamailio200  Proxy 200 through Kamailio (bench/kamailio/proxy200.cfg.in: transaction-
            stateful, Record-Route) instead of tandem, for the side-by-side comparison;
            --kamailio-shm / --kamailio-children size it

Both use bench/scenarios/uac_rtd.xml: a basic call whose response time 1 is
the session setup delay, INVITE sent -> 200 OK received, logged per call with
-trace_rtt (millisecond resolution).

Load: the offered rate starts at --start (500 calls/s) and grows by --step
(500) every step of --duration seconds (20); each step is fresh sipp uac
processes placing rate x duration calls. One sipp uac tops out near 6,000
calls/s on the 2-core machine, so a step's rate is split over
ceil(rate / --uac-max-rate) instances (5,000 calls/s each by default; or
--uac-instances N), each with its own local port and its own files in the
step directory (uacN-stat.csv, uacN-errors.log, ..., and sipp's
uac_rtd_<pid>_rtt.csv; a single instance keeps stat.csv, errors.log, ...).
Calls, failures and retransmissions are summed over the instances and the
setup delay percentiles are computed over all their per-call RTT traces.
The run stops after a step with < 95 % successful calls, after the second
step that misses the latency criterion, when the load generator cannot reach
the offered rate, or at --max-rate.

Per step: successful/total calls, setup delay p50/p95/p99, share of calls set
up within 25 ms and 50 ms, tandem CPU time per call (utime+stime from
/proc/PID/stat over the steady part of the step divided by the calls set up in
that window), tandem RSS, and the load generator's own limit: the number of
sipp uac instances, their CPU share (summed in sipp_uac_cpu_share, per
instance in sipp_uac_cpu_share_per_instance and uac[]), the calls set up per
second (setup_rate_achieved), whether that reached the offered rate
(generator_reached_rate: >= 90 %) and, if not while an instance had a whole
core, generator_limited; per instance uac[].cps_per_cpu_second estimates what
one instance could place on a core of its own.

  maximum throughput    = highest offered rate with >= 95 % successful calls
  latency-criterion rate = highest such rate where >= 95 % of calls are set up
                           within 50 ms and >= 50 % within 25 ms

Results: a table on stdout, <out-dir>/<name>.md and <name>.json (default
bench/results/first-benchmark.*), raw sipp/tandem files under
<out-dir>/raw/<timestamp>/ (git-ignored).
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCENARIO = os.path.join(HERE, "scenarios", "uac_rtd.xml")
CLK_TCK = os.sysconf("SC_CLK_TCK")
SUCCESS_MIN = 0.95
LAT50_MS, LAT50_SHARE = 50, 0.95
LAT25_MS, LAT25_SHARE = 25, 0.50


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def free_port():
    for _ in range(100):
        t = socket.socket()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind(("127.0.0.1", 0))
            p = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
        finally:
            t.close()
            u.close()
    raise RuntimeError("no free port")


def proc_times(pid):
    """(utime, stime) of a process (all threads), in seconds; None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid):
    """utime+stime of a process (all threads), in seconds; None if gone."""
    t = proc_times(pid)
    return None if t is None else t[0] + t[1]


def system_seconds(pid):
    """stime of a process (all threads): its time in the kernel, in seconds; None if gone."""
    t = proc_times(pid)
    return None if t is None else t[1]


def session_system_seconds(sid):
    """stime summed over the session's processes; None if none is left."""
    times = [t for t in map(system_seconds, session_pids(sid)) if t is not None]
    return sum(times) if times else None


def session_pids(sid):
    """PIDs of every process of session `sid` (a server started with start_new_session:
    Kamailio's main process and its workers; tandem alone)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            if int(st[st.rindex(")") + 2:].split()[3]) == sid:
                pids.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def session_cpu_seconds(sid):
    """utime+stime summed over the session's processes; None if none is left."""
    times = [t for t in map(cpu_seconds, session_pids(sid)) if t is not None]
    return sum(times) if times else None


def session_rss_kib(sid):
    """RSS summed over the session's processes (shared memory counted once per process
    that touched it: an upper bound for Kamailio)."""
    return sum(rss_kib(p) or 0 for p in session_pids(sid)) or None


def machine_busy_seconds():
    """CPU-seconds spent busy by the whole machine (all cores) since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / CLK_TCK


def udp_drops_by_pid():
    """{pid: packets dropped by that process's UDP sockets (receive buffer full)}, from
    `ss -u -a -m -n -p` (skmem d counter, cumulative per socket); {} if ss is missing."""
    try:
        out = subprocess.run(["ss", "-u", "-a", "-m", "-n", "-p"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    drops, pids = {}, []
    for line in out.splitlines():
        if "users:(" in line:
            pids = [int(p) for p in re.findall(r"pid=(\d+)", line)]
        m = re.search(r"skmem:\(.*\bd(\d+)\)", line)
        if m and pids:
            for p in set(pids):
                drops[p] = drops.get(p, 0) + int(m.group(1))
            pids = []
    return drops


def udp_rcvbuf_errors():
    """Machine-wide UDP RcvbufErrors (all processes)."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [l.split() for l in f if l.startswith("Udp:")]
        return int(dict(zip(rows[0][1:], rows[1][1:]))["RcvbufErrors"])
    except (OSError, KeyError, IndexError, ValueError):
        return None


def rss_kib(pid, key="VmRSS"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def wait_health(url, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("tandem exited with %s during startup" % proc.returncode)
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("%s did not answer within %d s" % (url, timeout))


def wait_bound(proto, port, timeout=10):
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        finally:
            s.close()
        time.sleep(0.05)
    return False


def stop(proc, timeout=10):
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc else None
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.wait()


def read_stats(path):
    try:
        with open(path, encoding="latin-1") as f:
            rows = [l.rstrip("\r\n") for l in f if l.strip()]
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    return dict(zip(rows[0].split(";"), rows[-1].split(";")))


def ival(stats, key):
    try:
        return int(stats.get(key, ""))
    except ValueError:
        return None


def hms_ms(v):
    """SIPp duration 'HH:MM:SS:uuuuuu' -> milliseconds (float); None if absent."""
    try:
        h, m, sec, us = v.split(":")
        return ((int(h) * 60 + int(m)) * 60 + int(sec)) * 1000 + int(us) / 1000.0
    except (AttributeError, ValueError):
        return None


def read_rtt(step_dir):
    """[(t_ms since sipp start, response_time_ms)] for rtd 1, over every sipp uac instance
    of the step (each writes its own <scenario>_<pid>_rtt.csv)."""
    return read_rtt_files(glob.glob(os.path.join(step_dir, "*_rtt.csv")))


def read_rtt_files(paths):
    """[(t_ms since that sipp's start, response_time_ms)] for rtd 1 from the given files."""
    out = []
    for path in paths:
        with open(path) as f:
            for line in f:
                parts = line.strip().split(";")
                if len(parts) < 3 or parts[2].strip() != "1":
                    continue
                try:
                    out.append((float(parts[0]), float(parts[1])))
                except ValueError:
                    continue
    out.sort()
    return out


def uac_split(rate, max_per_instance, forced=0):
    """Calls/s per sipp uac instance for an offered `rate`: `forced` instances if > 0, else
    as few as keep each at or under `max_per_instance`; the rate is split into integers that
    differ by at most 1 (e.g. 400 over 3 -> [134, 133, 133])."""
    rate = int(rate)
    n = forced if forced and forced > 0 else max(1, math.ceil(rate / max(1, max_per_instance)))
    n = max(1, min(n, rate)) if rate > 0 else 1
    base, extra = divmod(rate, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def rtt_freq(calls, most=200):
    """-rtt_freq for a sipp placing `calls` calls: sipp writes its rtt trace in batches of
    that many and drops a last partial batch at exit, so use the largest divisor of `calls`
    up to `most` (200 for the usual multiples of 200; 134 for 670 calls)."""
    for f in range(min(most, max(1, calls)), 0, -1):
        if calls % f == 0:
            return f
    return 1


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def machine():
    info = {"nproc": os.cpu_count(), "kernel": platform.release(), "arch": platform.machine(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_total_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        v = subprocess.run(["sipp", "-v"], capture_output=True, text=True, timeout=5)
        for line in (v.stdout + v.stderr).splitlines():
            if "SIPp v" in line:
                info["sipp"] = line.strip()
                break
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def binary_id(path):
    """sha256 prefix and modification time of the tandem binary (it may be rebuilt mid-run)."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(path)).isoformat(timespec="seconds")
    return {"sha256": h.hexdigest()[:16], "mtime": mtime}


def git_rev():
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        rev = r.stdout.strip() if r.returncode == 0 else None
        d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "crates"],
                           capture_output=True, text=True, timeout=5)
        if rev and d.stdout.strip():
            rev += "-dirty"
        return rev
    except (OSError, subprocess.TimeoutExpired):
        return None


# --------------------------------------------------------------------------
# one scenario
# --------------------------------------------------------------------------

class Rig:
    """tandem (+ a sipp uas for proxy200), started once per scenario."""

    def __init__(self, args, scenario, raw_dir):
        self.args = args
        self.scenario = scenario
        self.dir = os.path.join(raw_dir, scenario)
        os.makedirs(self.dir, exist_ok=True)
        self.tandem = None
        self.uas = None
        self.port = free_port()
        self.admin = free_port()
        self.mode = "u1" if args.transport == "udp" else "t1"
        # The SIPp callee's port, where there is one (set by start).
        self.uas_port = None
        # --callees N: the callers cycle through N request-URI users (a SIPp injection file),
        # so that per-callee database rows (B2BUA policies and billing) are not one hot row.
        self.scenario_file, self.inf, self.callees = SCENARIO, None, []
        if getattr(args, "callees", 0):
            self.callees = ["callee%05d" % i for i in range(1, args.callees + 1)]
            self.inf = os.path.join(self.dir, "callees.csv")
            with open(self.inf, "w") as f:
                f.write("SEQUENTIAL\n" + "".join(u + "\n" for u in self.callees))
            with open(SCENARIO) as f:
                xml = f.read()
            self.scenario_file = os.path.join(self.dir, "uac_callees.xml")
            with open(self.scenario_file, "w") as f:
                f.write(xml.replace("[service]", "[field0]"))

    def start(self):
        a = self.args
        if self.scenario in ("proxy200", "kamailio200", "b2bua_nt", "b2bua_1t", "b2bua_2t"):
            p2 = free_port()
            self.uas_port = p2
            self.uas_out = open(os.path.join(self.dir, "uas.stdout.log"), "wb")
            self.uas = subprocess.Popen(
                ["sipp", "-sn", "uas", "-i", "127.0.0.1", "-p", str(p2), "-t", self.mode,
                 "-nostdin", "-buff_size", str(a.sipp_buffer),
                 "-trace_err", "-error_file", os.path.join(self.dir, "uas.errors.log"),
                 "-trace_stat", "-stf", os.path.join(self.dir, "uas.stat.csv"), "-fd", "5"],
                stdin=subprocess.DEVNULL, stdout=self.uas_out, stderr=subprocess.STDOUT,
                cwd=self.dir, start_new_session=True)
            if not wait_bound(a.transport, p2):
                raise RuntimeError("sipp uas did not bind port %d" % p2)
            hop = ("127.0.0.1:%d" if a.transport == "udp" else "tcp:127.0.0.1:%d") % p2
            svc = (["--service", "proxy", "--set", "proxy.next_hop=" + hop] if self.scenario == "proxy200"
                   else ["--service", self.scenario, "--set", "b2bua.next_hop=" + hop])
            if self.scenario == "kamailio200":
                return self.start_kamailio("127.0.0.1:%d" % p2)
        else:
            svc = ["--service", "uas"]
        self.binary = binary_id(a.binary)
        sets = list(a.set)
        if self.callees:
            # every callee gets a policy at start-up (B2BUA 1T/2T): no call is refused with 403
            sets.append("database.seed_users=[%s]" % ",".join('"%s"' % u for u in self.callees))
        cmd = [a.binary, "run", "--listen", "%s:127.0.0.1:%d" % (a.transport, self.port),
               "--admin", "127.0.0.1:%d" % self.admin] + svc + sum((["--set", s] for s in sets), [])
        self.cmd = cmd
        self.t_out = open(os.path.join(self.dir, "tandem.stdout.log"), "wb")
        self.t_err = open(os.path.join(self.dir, "tandem.stderr.log"), "wb")
        self.tandem = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.t_out,
                                       stderr=self.t_err, start_new_session=True)
        wait_health("http://127.0.0.1:%d/health" % self.admin, self.tandem)

    def start_kamailio(self, next_hop):
        a = self.args
        with open(os.path.join(HERE, "kamailio", "proxy200.cfg.in")) as f:
            cfg = f.read()
        for k, v in (("@PORT@", str(self.port)), ("@NEXT_HOP@", next_hop), ("@PROTO@", a.transport),
                     ("@CHILDREN@", str(a.kamailio_children))):
            cfg = cfg.replace(k, v)
        path = os.path.join(self.dir, "kamailio.cfg")
        with open(path, "w") as f:
            f.write(cfg)
        kam = shutil.which("kamailio") or "/usr/sbin/kamailio"
        version = subprocess.run([kam, "-v"], capture_output=True, text=True).stdout.splitlines()
        self.binary = {"path": kam, "version": version[0] if version else "?"}
        cmd = [kam, "-f", path, "-DD", "-E", "-m", str(a.kamailio_shm), "-M", str(a.kamailio_pkg)] + (
            ["-x", a.kamailio_mem] if a.kamailio_mem else [])
        self.cmd = cmd
        self.t_out = open(os.path.join(self.dir, "kamailio.stdout.log"), "wb")
        self.t_err = open(os.path.join(self.dir, "kamailio.stderr.log"), "wb")
        self.tandem = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.t_out,
                                       stderr=self.t_err, start_new_session=True)
        if not wait_bound(a.transport, self.port):
            raise RuntimeError("kamailio did not bind %s port %d (see %s)" % (a.transport, self.port, self.dir))
        time.sleep(1.0)  # its workers fork after binding

    def stop(self):
        rc = stop(self.tandem)
        stop(self.uas)
        return rc

    def step(self, rate):
        a = self.args
        dur = a.duration
        rates = uac_split(rate, getattr(a, "uac_max_rate", 5000), getattr(a, "uac_instances", 0))
        n_inst = len(rates)
        calls_each = [int(r * dur) for r in rates]
        calls = sum(calls_each)
        sdir = os.path.join(self.dir, "rate-%05d" % rate)
        os.makedirs(sdir, exist_ok=True)
        pid = self.tandem.pid
        # CPU is read from `warm` on: past start-up by default; past the transactions'
        # 32 s lifetime (full tables, the steady state of a long step) with --warm 40.
        warm = a.warm if getattr(a, "warm", None) is not None else min(2.0, dur * 0.2)
        end = max(warm + 0.5, dur - 0.5)
        drops0 = udp_drops_by_pid()
        rcvbuf0 = udp_rcvbuf_errors()
        # One sipp uac per share of the offered rate, each with its own local port and its
        # own files (a single instance keeps the historical names stat.csv, errors.log, ...;
        # several use uacN-stat.csv, ...; the -trace_rtt file is named by sipp after its pid).
        ports, uacs = set(), []
        t0 = time.monotonic()
        for i, (r_i, c_i) in enumerate(zip(rates, calls_each)):
            port = free_port()
            while port in ports or port in (self.port, self.admin):
                port = free_port()
            ports.add(port)
            pre = "" if n_inst == 1 else "uac%d-" % (i + 1)
            cmd = ["sipp", "-sf", self.scenario_file, "127.0.0.1:%d" % self.port, "-t", self.mode,
                   "-i", "127.0.0.1", "-p", str(port),
                   "-r", str(r_i), "-m", str(c_i), "-l", str(max(1000, r_i * 10)),
                   "-nostdin", "-buff_size", str(a.sipp_buffer), "-trace_rtt", "-rtt_freq", str(rtt_freq(c_i)),
                   "-trace_stat", "-stf", os.path.join(sdir, pre + "stat.csv"), "-fd", "1",
                   "-trace_err", "-error_file", os.path.join(sdir, pre + "errors.log"),
                   "-trace_screen", "-screen_file", os.path.join(sdir, pre + "screen.log"),
                   "-timeout", "%ds" % (dur + 60)] + (["-inf", self.inf] if self.inf else [])
            out = open(os.path.join(sdir, pre + "sipp.stdout.log"), "wb")
            started = time.monotonic() - t0
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        cwd=sdir, start_new_session=True)
            except OSError:
                out.close()
                for u in uacs:  # leave no caller of a half-started step behind
                    stop(u["proc"])
                    u["out"].close()
                raise
            uacs.append({"proc": proc, "out": out, "rate": r_i, "calls": c_i, "port": port,
                         "prefix": pre, "started_s": started})
        samples = {}
        for label, at in (("warm", warm), ("end", end)):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            samples[label] = (time.monotonic() - t0, session_cpu_seconds(pid),
                              [cpu_seconds(u["proc"].pid) for u in uacs],
                              cpu_seconds(self.uas.pid) if self.uas else 0.0, machine_busy_seconds(),
                              session_system_seconds(pid))
        rss = rss_kib(pid) if self.scenario != "kamailio200" else session_rss_kib(pid)
        drops1 = udp_drops_by_pid()
        deadline = t0 + dur + 90
        for u in uacs:
            try:
                u["exit"] = u["proc"].wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                u["exit"] = stop(u["proc"])
            u["out"].close()
        w0, w1 = samples["warm"][0] * 1000, samples["end"][0] * 1000
        wsec = max(1e-3, (w1 - w0) / 1000)
        rtt = []
        for i, u in enumerate(uacs):
            u["stats"] = read_stats(os.path.join(sdir, u["prefix"] + "stat.csv"))
            # sipp's rtt times count from its own start: shift them onto this step's clock
            own = [(t + u["started_s"] * 1000, v) for t, v in
                   read_rtt_files(glob.glob(os.path.join(sdir, "*_%d_rtt.csv" % u["proc"].pid)))]
            u["rtt"] = own
            rtt.extend(own)
            c0, c1 = samples["warm"][2][i], samples["end"][2][i]
            u["cpu_share"] = (c1 - c0) / wsec if None not in (c0, c1) else None
        rtt.sort()
        lat = sorted(v for _, v in rtt)
        in_window = sum(1 for t, _ in rtt if w0 <= t <= w1)
        cpu = None
        if samples["warm"][1] is not None and samples["end"][1] is not None and in_window:
            cpu = (samples["end"][1] - samples["warm"][1]) * 1e6 / in_window
        cpu_system = None
        if samples["warm"][5] is not None and samples["end"][5] is not None and in_window:
            cpu_system = (samples["end"][5] - samples["warm"][5]) * 1e6 / in_window
        shares = [u["cpu_share"] for u in uacs]
        sipp_cpu = sum(s for s in shares if s is not None) if any(s is not None for s in shares) else None
        rcvbuf1 = udp_rcvbuf_errors()
        uas_pid = self.uas.pid if self.uas else None
        drops = {
            "tandem": drops1.get(pid, 0) - drops0.get(pid, 0) if drops1 else None,
            "sipp_uac": sum(drops1.get(u["proc"].pid, 0) for u in uacs) if drops1 else None,
            "sipp_uas": (drops1.get(uas_pid, 0) - drops0.get(uas_pid, 0)) if (drops1 and uas_pid) else None,
            "machine_rcvbuf_errors": (rcvbuf1 - rcvbuf0) if None not in (rcvbuf0, rcvbuf1) else None,
        }
        other = machine_share = None
        sw, se = samples["warm"], samples["end"]
        if None not in (sw[1], se[1], sw[3], se[3]) and None not in sw[2] + se[2]:
            spent = (se[1] - sw[1]) + sum(se[2]) - sum(sw[2]) + (se[3] - sw[3])
            other = max(0.0, (se[4] - sw[4]) - spent) / wsec
        machine_share = (se[4] - sw[4]) / wsec / (os.cpu_count() or 1)
        tandem_share = None
        if samples["warm"][1] is not None and samples["end"][1] is not None:
            tandem_share = (samples["end"][1] - samples["warm"][1]) / wsec
        per_uac = []
        for u in uacs:
            st, own = u["stats"], u["rtt"]
            ach = None
            if len(own) > 1 and own[-1][0] > own[0][0]:
                ach = (len(own) - 1) / ((own[-1][0] - own[0][0]) / 1000)
            per_uac.append({
                "rate": u["rate"], "calls": u["calls"], "local_port": u["port"], "files": u["prefix"] + "*",
                "pid": u["proc"].pid, "sipp_exit": u["exit"],
                "created": ival(st, "TotalCallCreated") or 0,
                "successful": ival(st, "SuccessfulCall(C)") or 0, "failed": ival(st, "FailedCall(C)") or 0,
                "retransmissions": ival(st, "Retransmissions(C)"),
                "setup_samples": len(own), "mean_ms": hms_ms(st.get("ResponseTime1(C)")),
                "setup_rate_achieved": ach, "cpu_share": u["cpu_share"],
                # calls set up per CPU-second of this sipp: what one instance could reach on a
                # core of its own (an extrapolation; sipp's main loop is single-threaded)
                "cps_per_cpu_second": (ach / u["cpu_share"]) if ach and u["cpu_share"] else None,
                "udp_drops": drops1.get(u["proc"].pid) if drops1 else None,
            })
        ok = sum(u["successful"] for u in per_uac)
        failed = sum(u["failed"] for u in per_uac)
        created = sum(u["created"] for u in per_uac)
        retrans = [u["retransmissions"] for u in per_uac]
        retrans = None if all(x is None for x in retrans) else sum(x or 0 for x in retrans)
        # sipp's own mean setup delay (sub-millisecond), weighted by each instance's setups
        means = [(u["mean_ms"], u["setup_samples"]) for u in per_uac if u["mean_ms"] is not None]
        weight = sum(k for _, k in means)
        mean_ms = None
        if means:
            mean_ms = (sum(m * k for m, k in means) / weight) if weight else sum(m for m, _ in means) / len(means)
        exits = [u["sipp_exit"] for u in per_uac]
        achieved = None
        if len(rtt) > 1 and rtt[-1][0] > rtt[0][0]:
            achieved = (len(rtt) - 1) / ((rtt[-1][0] - rtt[0][0]) / 1000)
        n = len(lat)
        r = {
            "rate": rate, "calls": calls, "created": created, "successful": ok, "failed": failed,
            "success_ratio": ok / calls if calls else 0.0,
            "sipp_exit": next((e for e in exits if e != 0), 0),
            "retransmissions": retrans,
            "setup_samples": n,
            "mean_ms": mean_ms,
            "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99), "max_ms": lat[-1] if lat else None,
            "share_le_25ms": sum(1 for v in lat if v <= LAT25_MS) / n if n else 0.0,
            "share_le_50ms": sum(1 for v in lat if v <= LAT50_MS) / n if n else 0.0,
            "cpu_us_per_call": cpu,
            "cpu_system_us_per_call": cpu_system,
            "calls_in_cpu_window": in_window,
            "tandem_rss_kib": rss,
            "tandem_alive": self.tandem.poll() is None,
            "setup_rate_achieved": achieved,
            "sipp_uac_cpu_share": sipp_cpu,
            "tandem_cpu_share": tandem_share,
            "other_cpu_share": other,
            "machine_cpu_share": machine_share,
            "udp_drops": drops,
            # the load generator: how many sipp uac instances, their CPU, their own rates
            "uac_instances": n_inst,
            "uac_rates": rates,
            "sipp_uac_cpu_share_per_instance": shares,
            "uac": per_uac,
        }
        # The latency criterion is judged on the calls that were set up,
        # and only matters if the step also met the success threshold.
        r["success_ok"] = r["success_ratio"] >= SUCCESS_MIN
        r["latency_ok"] = bool(n) and r["share_le_50ms"] >= LAT50_SHARE and r["share_le_25ms"] >= LAT25_SHARE
        # Did the generator place the offered load? Calls set up per second (all instances,
        # first to last setup) within 10 % of the offered rate. If not, and one instance had a
        # whole core, the generator (not the server) is the limit.
        r["generator_reached_rate"] = bool(achieved is not None and achieved >= 0.9 * rate)
        r["generator_limited"] = bool(achieved is not None and achieved < 0.9 * rate
                                      and max((s or 0) for s in shares) > 0.9)
        return r


def run_scenario(args, scenario, raw_dir):
    rig = Rig(args, scenario, raw_dir)
    steps = []
    stop_reason = None
    exit_code = None
    try:
        rig.start()
        rate = args.start
        lat_fail = 0
        while True:
            r = rig.step(rate)
            steps.append(r)
            print_row(scenario, r)
            if not r["tandem_alive"]:
                stop_reason = "tandem exited during the %d cps step" % rate
                break
            if not r["success_ok"]:
                stop_reason = "%.1f %% successful calls at %d cps (< 95 %%)" % (100 * r["success_ratio"], rate)
                break
            if not r["latency_ok"]:
                lat_fail += 1
                if lat_fail >= 2:
                    stop_reason = "latency criterion missed twice (last at %d cps)" % rate
                    break
            if r["generator_limited"]:
                stop_reason = ("load generator limited: %d sipp uac reached %.0f of %d cps at %s %% CPU"
                               % (r["uac_instances"], r["setup_rate_achieved"], rate,
                                  "+".join(pct(x) for x in r["sipp_uac_cpu_share_per_instance"])))
                break
            if rate + args.step > args.max_rate or (args.max_steps and len(steps) >= args.max_steps):
                stop_reason = "reached the configured limit (%d cps, %d steps)" % (rate, len(steps))
                break
            rate += args.step
            time.sleep(args.pause)
    finally:
        exit_code = rig.stop()
    good = [s for s in steps if s["success_ok"]]
    lat_good = [s for s in good if s["latency_ok"]]
    return {
        "scenario": scenario,
        "tandem_cmd": getattr(rig, "cmd", None),
        "tandem_binary": getattr(rig, "binary", None),
        "steps": steps,
        "stop_reason": stop_reason,
        "max_throughput_cps": max((s["rate"] for s in good), default=None),
        "latency_criterion_cps": max((s["rate"] for s in lat_good), default=None),
        "tandem_exit_code": exit_code,
        "raw_dir": rig.dir,
    }


# --------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------

HEAD = ("%-9s %6s %7s %8s %7s %7s %7s %6s %6s %9s %8s %7s %4s %7s %7s %7s"
        % ("scenario", "rate", "calls", "success", "p50ms", "p95ms", "p99ms", "<=25", "<=50",
           "cpu_us/c", "rss_MiB", "tandem%", "uacs", "sipp%", "other%", "setup/s"))


def fmt(v, f="%.0f"):
    return "-" if v is None else f % v


def print_row(scenario, r):
    print("%-9s %6d %7d %7.1f%% %7s %7s %7s %5.0f%% %5.0f%% %9s %8s %6s%% %4d %6s%% %6s%% %7s%s" % (
        scenario, r["rate"], r["calls"], 100 * r["success_ratio"], fmt(r["p50_ms"]),
        fmt(r["p95_ms"]), fmt(r["p99_ms"]), 100 * r["share_le_25ms"], 100 * r["share_le_50ms"],
        fmt(r["cpu_us_per_call"], "%.1f"),
        fmt(r["tandem_rss_kib"] / 1024 if r["tandem_rss_kib"] else None, "%.1f"),
        pct(r.get("tandem_cpu_share")), r.get("uac_instances", 1), pct(r["sipp_uac_cpu_share"]),
        pct(r.get("other_cpu_share")), fmt(r.get("setup_rate_achieved")),
        "" if r.get("uac_instances", 1) == 1 else
        "  (sipp uac CPU %s %%)" % "+".join(pct(x) for x in r["sipp_uac_cpu_share_per_instance"])),
        flush=True)


def pct(share):
    return "-" if share is None else "%.0f" % (100 * share)


def generator_cell(r):
    """The load generator's own figures for a step: setups/s reached (and whether that is
    the offered rate), each sipp uac's CPU share and its setups per CPU-second."""
    if "uac" not in r:
        return "-"
    per = ", ".join("%s %%" % pct(u["cpu_share"]) for u in r["uac"])
    cap = ", ".join(fmt(u.get("cps_per_cpu_second")) for u in r["uac"])
    return "%s/s (%s); %s; %s" % (fmt(r.get("setup_rate_achieved")),
                                  "reached" if r.get("generator_reached_rate") else
                                  ("**generator-limited**" if r.get("generator_limited") else "not reached"),
                                  per, cap)


def markdown(report):
    m = report["machine"]
    p = report["parameters"]
    lines = ["# Tandem benchmark: %s" % report["name"], "",
             "Run %s, tandem %s (`%s`)." % (report["started"], report.get("git_rev") or "unknown",
                                            report["binary"]), "",
             "## Machine", "",
             "| | |", "|---|---|",
             "| CPU | %s |" % m.get("cpu_model", "?"),
             "| cores (nproc) | %s |" % m.get("nproc"),
             "| memory | %s GiB |" % m.get("mem_total_gib", "?"),
             "| kernel | %s (%s) |" % (m.get("kernel"), m.get("arch")),
             "| OS | %s |" % m.get("os", "?"),
             "| load generator | %s |" % m.get("sipp", "sipp"), "",
             "tandem, the sipp uac and (for proxy200 and b2bua_nt) the sipp uas all share these cores over loopback.",
             "",
             "## Method", "",
             "Step load with SIPp (`bench/find_max_rate.py`), %s transport: start %d calls/s, +%d per "
             "step, %d s per step (a fresh `sipp -sf bench/scenarios/uac_rtd.xml -r RATE -m RATE*%d` "
             "each step). Setup delay = INVITE sent to 200 OK received, per call from `-trace_rtt` "
             "(SIPp measures whole milliseconds: 0 means under 1 ms). CPU per call = tandem "
             "utime+stime (/proc/PID/stat) over the steady part of the step divided by the calls set "
             "up in that window. CPU columns are shares of one core over that window; 'other' is the "
             "CPU used by everything except tandem and the sipp processes (interference from the rest "
             "of the machine). Stop: < 95 %% successful calls, second miss of the latency criterion, "
             "load generator saturated, or the configured limit. sipp runs with `-buff_size %d`; "
             "'UDP drops' counts datagrams dropped because a socket's receive buffer was full "
             "(ss skmem), for tandem and for the sipp processes. Load generator: the offered rate of a "
             "step is split over sipp uac instances (%s; own local port and trace files each; calls, "
             "retransmissions and setup delays merged over them; 'sipp uac CPU' is their sum, "
             "the last column gives per instance the CPU share and the calls set up per CPU-second of "
             "that instance, an estimate of one instance's own limit on a free core); 'reached' = "
             "calls set up per second (first to last setup) >= 90 %% of the offered rate."
             % (p["transport"].upper(), p["start"], p["step"], p["duration"], p["duration"],
                p.get("sipp_buffer", 0),
                ("%d per step" % p["uac_instances"]) if p.get("uac_instances") else
                "as many as keep each at or under %s calls/s" % p.get("uac_max_rate", 5000)), "",
             "- **maximum throughput**: highest offered rate with >= 95 % successful calls",
             "- **latency-criterion rate**: highest such rate with >= 95 % of calls set up within "
             "50 ms and >= 50 % within 25 ms (the SIPstone Proxy 200 criterion)", ""]
    lines += ["## Results", "",
              "| scenario | max throughput (cps) | latency-criterion rate (cps) | stopped because |",
              "|---|---|---|---|"]
    for s in report["scenarios"]:
        lines.append("| %s | %s | %s | %s |" % (s["scenario"], fmt(s["max_throughput_cps"], "%d"),
                                               fmt(s["latency_criterion_cps"], "%d"),
                                               s["stop_reason"] or s.get("error", "-")))
    for s in report["scenarios"]:
        lines += ["", "### %s" % s["scenario"], "",
                  "tandem: `%s`" % " ".join(s["tandem_cmd"] or []), "",
                  "binary: sha256 %s, modified %s" % ((s.get("tandem_binary") or {}).get("sha256", "?"),
                                                      (s.get("tandem_binary") or {}).get("mtime", "?")),
                  "",
                  "| offered cps | calls | successful | p50 ms | p95 ms | p99 ms | <= 25 ms "
                  "| <= 50 ms | cpu µs/call | tandem RSS MiB | tandem CPU | sipp uac CPU | other CPU "
                  "| retrans | UDP drops tandem / sipp | sipp uacs | generator: setups/s, CPU per uac, "
                  "setups per uac CPU-second |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in s["steps"]:
            d = r.get("udp_drops") or {}
            sipp_drops = None
            if d.get("sipp_uac") is not None:
                sipp_drops = d["sipp_uac"] + (d.get("sipp_uas") or 0)
            lines.append("| %d | %d | %.2f %% | %s | %s | %s | %.1f %% | %.1f %% | %s | %s | %s %% | %s %% "
                         "| %s %% | %s | %s / %s | %s | %s |" % (
                r["rate"], r["calls"], 100 * r["success_ratio"], fmt(r["p50_ms"]), fmt(r["p95_ms"]),
                fmt(r["p99_ms"]), 100 * r["share_le_25ms"], 100 * r["share_le_50ms"],
                fmt(r["cpu_us_per_call"], "%.1f"),
                fmt(r["tandem_rss_kib"] / 1024 if r["tandem_rss_kib"] else None, "%.1f"),
                pct(r.get("tandem_cpu_share")), pct(r["sipp_uac_cpu_share"]),
                pct(r.get("other_cpu_share")), fmt(r["retransmissions"], "%d"),
                fmt(d.get("tandem"), "%d"), fmt(sipp_drops, "%d"), r.get("uac_instances", 1),
                generator_cell(r)))
        if s.get("error"):
            lines += ["", "Error: %s" % s["error"]]
        lines += ["", "tandem exit code after SIGTERM: %s" % s.get("tandem_exit_code")]
    lines += ["", "Raw sipp and tandem files: `%s` (not committed)." % report["raw_dir"], ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "target", "release", "tandem"))
    ap.add_argument("--scenario", choices=["proxy200", "kamailio200", "uas", "b2bua_nt", "b2bua_1t", "b2bua_2t", "all"],
                    default="all")
    ap.add_argument("--kamailio-shm", type=int, default=2048,
                    help="Kamailio shared memory, MiB (-m); its default and 256 run out near 2,000 cps here")
    ap.add_argument("--kamailio-pkg", type=int, default=32, help="Kamailio private memory per process, MiB (-M)")
    ap.add_argument("--kamailio-children", type=int, default=2,
                    help="Kamailio worker processes per listener (2 on this 2-core machine: 4 cost 50 %% more CPU "
                         "per call in spinning locks)")
    ap.add_argument("--kamailio-mem", default="tlsf",
                    help="Kamailio memory manager (-x): Debian's default qm costs 3x the CPU per call of tlsf "
                         "here (618 vs 202 us/call at 1,000 cps, 2 children)")
    ap.add_argument("--transport", choices=["udp", "tcp"], default="udp")
    ap.add_argument("--start", type=int, default=500, help="first offered rate, calls/s")
    ap.add_argument("--step", type=int, default=500, help="rate increment per step, calls/s")
    ap.add_argument("--duration", type=int, default=20, help="seconds per step")
    ap.add_argument("--warm", type=float, default=None,
                    help="seconds into each step before CPU is read (default: min(2, 20%% of the step))")
    ap.add_argument("--max-rate", type=int, default=20000)
    ap.add_argument("--max-steps", type=int, default=0, help="0 = no limit")
    ap.add_argument("--pause", type=float, default=3.0, help="seconds between steps")
    ap.add_argument("--set", action="append", default=[], help="extra tandem --set KEY=VALUE")
    ap.add_argument("--sipp-buffer", type=int, default=4 * 1024 * 1024,
                    help="sipp -buff_size (socket send/receive buffers, bytes); sipp's own default "
                         "(128 KiB) overflows near 6,000 cps and makes the load generator the bottleneck")
    ap.add_argument("--uac-max-rate", type=int, default=5000,
                    help="calls/s per sipp uac instance: a step offering more is split over "
                         "ceil(rate / this) instances (one sipp uac tops out near 6,000 cps here)")
    ap.add_argument("--uac-instances", type=int, default=0,
                    help="force this many sipp uac instances per step (0 = from --uac-max-rate)")
    ap.add_argument("--callees", type=int, default=0,
                    help="callers cycle through this many request-URI users, each seeded with a "
                         "B2BUA policy (0: every call to the one user 'service')")
    ap.add_argument("--quick", action="store_true",
                    help="short run: 5 s steps, +1000 cps, at most 3 steps per scenario")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--name", default=None, help="report base name (default first-benchmark, "
                                                 "or quick-benchmark with --quick)")
    args = ap.parse_args(argv)
    if args.uac_max_rate < 1 or args.uac_instances < 0:
        ap.error("--uac-max-rate must be >= 1 and --uac-instances >= 0")
    if args.quick:
        args.duration = min(args.duration, 5)
        args.step = 1000 if args.step == 500 else args.step
        args.max_steps = args.max_steps or 3
        args.pause = min(args.pause, 1.0)
    name = args.name or ("quick-benchmark" if args.quick else "first-benchmark")
    args.binary = os.path.abspath(args.binary)
    if not os.access(args.binary, os.X_OK):
        sys.exit("tandem binary not found: %s (run `make build`)" % args.binary)
    if not shutil.which("sipp"):
        sys.exit("sipp not found: run scripts/install-test-deps.sh")

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    raw_dir = os.path.join(args.out_dir, "raw", stamp)
    os.makedirs(raw_dir, exist_ok=True)
    report = {
        "name": name, "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "binary": args.binary, "git_rev": git_rev(), "machine": machine(),
        "parameters": {"transport": args.transport, "start": args.start, "step": args.step,
                       "duration": args.duration, "max_rate": args.max_rate,
                       "max_steps": args.max_steps, "quick": args.quick, "set": args.set,
                       "sipp_buffer": args.sipp_buffer,
                       "uac_max_rate": args.uac_max_rate, "uac_instances": args.uac_instances,
                       "callees": args.callees,
                       "success_min": SUCCESS_MIN,
                       "latency_criterion": "%d%% <= %d ms and %d%% <= %d ms"
                                            % (LAT50_SHARE * 100, LAT50_MS, LAT25_SHARE * 100, LAT25_MS)},
        "raw_dir": os.path.relpath(raw_dir, REPO), "scenarios": [],
    }
    m = report["machine"]
    print("machine: %s, %s cores, %s GiB, kernel %s" % (m.get("cpu_model"), m.get("nproc"),
                                                        m.get("mem_total_gib"), m.get("kernel")))
    print(HEAD)
    scenarios = ["proxy200", "uas", "b2bua_nt"] if args.scenario == "all" else [args.scenario]
    if "kamailio200" in scenarios and not (shutil.which("kamailio") or os.path.exists("/usr/sbin/kamailio")):
        sys.exit("kamailio not found: apt-get install kamailio")
    for sc in scenarios:
        try:
            res = run_scenario(args, sc, raw_dir)
        except Exception as e:  # noqa: BLE001 - keep the other scenario's results
            res = {"scenario": sc, "steps": [], "stop_reason": None, "error": str(e),
                   "max_throughput_cps": None, "latency_criterion_cps": None, "tandem_cmd": None}
            print("%s: ERROR %s" % (sc, e), flush=True)
        report["scenarios"].append(res)
        print("%s: max throughput %s cps, latency-criterion rate %s cps (%s)" % (
            sc, fmt(res["max_throughput_cps"], "%d"), fmt(res["latency_criterion_cps"], "%d"),
            res["stop_reason"] or res.get("error")), flush=True)
    report["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    os.makedirs(args.out_dir, exist_ok=True)
    jpath = os.path.join(args.out_dir, name + ".json")
    mpath = os.path.join(args.out_dir, name + ".md")
    with open(jpath, "w") as f:
        json.dump(report, f, indent=1)
    with open(mpath, "w") as f:
        f.write(markdown(report))
    print("wrote %s and %s" % (os.path.relpath(mpath), os.path.relpath(jpath)))
    return 0 if all(not s.get("error") for s in report["scenarios"]) else 1


if __name__ == "__main__":
    sys.exit(main())
