#!/usr/bin/env python3
"""Dating-service benchmark: the contract version vs the hand-optimized one, under SIPp load.

Reproduces section 5 of the paper (../shared/papers/contract-synchronization-ipt-services.txt):
  * usage profiles Cancel / Early Bye / Complete Call mixed 5 / 5 / 90 %: three SIPp instances
    (one per profile scenario) whose rates stay in that proportion, so that callers of the three
    profiles arrive interleaved at random (Poisson-like) instants;
  * call rate starting at 10 calls/s and rising by 5 calls/s every 10 s (SIPp -rate_increase /
    -rate_interval / -rate_max -no_rate_quit), until a target number of concurrent executions,
    then held near it (SIPp -l: the Complete Call instance gets 90 % of the target, the others
    5 % each);
  * 300 s runs (--quick: 40 s; the ramp is then compressed so that it fits in half the run);
    a warm-up load (20 Complete calls at 10 calls/s, drained) before each measured run, excluded.

Per run (one tandem `--service media` + one tandem `--service SERVICE`, on free ports):
  * messages processed per second over time: the dating tandem's tandem_messages_in_total,
    sampled every second from /metrics;
  * call-setup delay, INVITE -> 200 at the caller (SIPp rtd 1, -trace_rtt, 1 ms resolution):
    p50 / p90 / p99 / p99.9 and the share under 20 ms and under 50 ms;
  * SIPp calls created / successful / failed per profile;
  * negotiations and back-offs (tandem_transition_backoffs_total, tandem_negotiation_waits_total,
    tandem_manual_lock_retries_total when present), transitions taken, CPU of both tandems;
  * invariants after the load stops: both tandems' tandem_app_sessions and tandem_sip_sessions
    drain to 0 within --drain seconds; pairing consistent (2*T7 <= Complete + Early callers,
    T8 <= 2*T7); every SIPp call completed its profile (0 failed); no ambiguous message.

Modes
  run.py [--service dating] [--target N]      one run, printed + JSON under bench/results/raw/
  run.py --capacity                           capacity search (hand-optimized version, or the
                                              contract one when it is missing)
  run.py --compare [--capacity-executions N]  both versions at 80 % and 100 % of capacity:
                                              bench/results/dating.{md,json}, dating-*.png
Add --quick for ~40 s runs.  See bench/dating/README.md.
"""

import argparse
import datetime
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
# Shared with the step-load benchmark: free ports and /proc CPU readings.
from find_max_rate import cpu_seconds, free_port, machine_busy_seconds, system_seconds  # noqa: E402
from find_max_rate import machine as describe_machine  # noqa: E402
from capture_latency import header as sip_header, packets as pcap_packets  # noqa: E402
RESULTS = os.path.join(REPO, "bench", "results")
BINARY = os.path.join(REPO, "target", "release", "tandem")
DEFAULT_BINARY = BINARY
TEST_SCEN = os.path.join(REPO, "tests", "dating", "scenarios")
SCEN = {
    "cancel": os.path.join(TEST_SCEN, "cancel.xml"),
    "early_bye": os.path.join(HERE, "scenarios", "early_bye.xml"),  # accepts being paired
    "complete": os.path.join(HERE, "scenarios", "complete.xml"),    # logs unpaired callers
}
MIX = {"cancel": 0.05, "early_bye": 0.05, "complete": 0.90}
RATE_PERIOD_MS = 20000          # SIPp rates are given in calls per 20 s: integers for 5/5/90 %
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Expected SIPp call length of a Complete call (s): answer + 1 s preference delay + pairing
# + 2 s talk + 1 s timewait. Only used to cap the rates so that the mix stays 5/5/90 once
# the Complete instance holds its concurrency limit.
COMPLETE_CALL_S = 4.2


# ----------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------

def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def machine():
    """The step-load benchmark's machine description, plus the git revision measured."""
    info = describe_machine()
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        info["git"] = r.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def udp_receive_drops():
    """Datagrams the kernel dropped so far because a UDP socket's receive buffer was full
    (/proc/net/snmp `Udp: RcvbufErrors`, the whole machine), or None."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [line.split() for line in f if line.startswith("Udp:")]
        return int(rows[1][rows[0].index("RcvbufErrors")])
    except (OSError, IndexError, ValueError):
        return None


def other_load():
    """Processes other than ours using CPU (sipp / tandem started by someone else): a warning."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmd.startswith("sipp ") or "/tandem run" in cmd or cmd.startswith("tandem run"):
            out.append("%s: %s" % (pid, cmd[:160]))
    return out


def stop(proc, sig=signal.SIGTERM, timeout=10):
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc else None
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def parse_metrics(text):
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        try:
            out.append((m.group(1), labels, float(m.group(4))))
        except ValueError:
            pass
    return out


def msum(samples, name, **want):
    return sum(v for n, l, v in samples
               if n == name and all(l.get(k) == w for k, w in want.items()))


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


# ----------------------------------------------------------------------------------------------
# tandems
# ----------------------------------------------------------------------------------------------

CGROUP_CPU = "/sys/fs/cgroup/cpu"
CPU_PERIOD_US = 10000
# Side by side: how long one side waits for the other to be ready to start its load (warm-up,
# drain of the warm-up's calls, capture start).
READY_TIMEOUT_S = 300


def built_binary():
    """The tandem binary the run used, relative to the repository, if not the default one
    (e.g. `bench/dating/pgo.sh`'s profile-guided build); None for the default."""
    return None if BINARY == DEFAULT_BINARY else os.path.relpath(BINARY, REPO)

def cpu_list(text):
    """`1`, `0-1`, `0,2`: the CPU numbers, sorted (for os.sched_setaffinity and the report);
    each one this process may run on, else a clear argument error."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    unknown = cpus - os.sched_getaffinity(0)
    if unknown:
        raise argparse.ArgumentTypeError("no such CPU here: %s" % ",".join(map(str, sorted(unknown))))
    return sorted(cpus)


class Tandem:
    def __init__(self, name, service, sets, rawdir, cpu_limit=0.0, cpus=None):
        self.name, self.service, self.sets = name, service, sets
        # cores (0: unlimited): a CFS quota on the process's own cgroup (v1 cpu controller)
        self.cpu_limit, self.cgroup = cpu_limit, None
        # CPUs the process (and every thread it starts) may run on; None: any
        self.cpus = cpus
        self.port, self.admin = free_port(), free_port()
        self.out = os.path.join(rawdir, name + ".log")
        self.proc = None

    def start(self):
        cmd = [BINARY, "run", "--listen", "udp:127.0.0.1:%d" % self.port,
               "--admin", "127.0.0.1:%d" % self.admin, "--service", self.service]
        for s in self.sets:
            cmd += ["--set", s]
        self.f = open(self.out, "wb")
        cpus = self.cpus
        self.proc = subprocess.Popen(cmd, stdout=self.f, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, RUST_BACKTRACE="0"),
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        if self.cpu_limit:
            self.limit_cpu()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.out, errors="replace") as f:
                    text = f.read()
                if "unknown service" in text:
                    return "missing: " + next(l.strip() for l in text.splitlines()
                                              if "unknown service" in l)
                raise RuntimeError("%s exited with %s: %s" % (self.name, self.proc.returncode,
                                                              text[-2000:]))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.admin,
                                            timeout=1) as r:
                    if r.status == 200:
                        return None
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("%s did not answer /metrics within 20 s" % self.name)

    def metrics(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.admin,
                                        timeout=2) as r:
                return parse_metrics(r.read().decode(errors="replace"))
        except OSError:
            return None

    def sessions(self):
        s = self.metrics()
        if s is None:
            return None, None
        return msum(s, "tandem_app_sessions"), msum(s, "tandem_sip_sessions")

    def limit_cpu(self):
        """Caps the process at cpu_limit cores, so that it, not the load generator sharing the
        machine, saturates first; both versions get the same cap."""
        if not os.path.isdir(CGROUP_CPU):
            raise SystemExit("--dating-cpu needs the cgroup v1 cpu controller at %s" % CGROUP_CPU)
        self.cgroup = os.path.join(CGROUP_CPU, "tandem-bench-%s-%d" % (self.name, self.proc.pid))
        os.makedirs(self.cgroup, exist_ok=True)
        with open(os.path.join(self.cgroup, "cpu.cfs_period_us"), "w") as f:
            f.write(str(CPU_PERIOD_US))
        with open(os.path.join(self.cgroup, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(max(1000, int(self.cpu_limit * CPU_PERIOD_US))))
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(self.proc.pid))

    def throttled_s(self):
        """Seconds the cap held the process back so far (cpu.stat throttled_time)."""
        if not self.cgroup:
            return None
        try:
            with open(os.path.join(self.cgroup, "cpu.stat")) as f:
                for line in f:
                    k, v = line.split()
                    if k == "throttled_time":
                        return int(v) / 1e9
        except OSError:
            return None
        return None

    def stop(self):
        rc = stop(self.proc)
        self.f.close()
        if self.cgroup:
            try:
                os.rmdir(self.cgroup)
            except OSError:
                pass
        return rc


def service_available(service):
    """None if the binary knows `service`, else the error line."""
    tmp = os.path.join("/tmp", "dating-bench-probe-%d" % os.getpid())
    os.makedirs(tmp, exist_ok=True)
    t = Tandem("probe", service, ["dating.media=127.0.0.1:9"], tmp)
    try:
        missing = t.start()
    finally:
        if t.proc:
            t.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return missing


# ----------------------------------------------------------------------------------------------
# one run
# ----------------------------------------------------------------------------------------------

def ramp_plan(target, duration, args):
    """Rates (calls per RATE_PERIOD_MS) per profile: start, increase, max, and the interval."""
    per = RATE_PERIOD_MS / 1000.0
    total_max_cps = target * MIX["complete"] / COMPLETE_CALL_S / MIX["complete"]
    total_max_cps = max(total_max_cps * 1.15, args.start_rate)  # -l holds, not rate_max
    step = args.rate_step
    steps = max(1, math.ceil((total_max_cps - args.start_rate) / step))
    interval = args.rate_interval
    if steps * interval > duration * 0.5:       # --quick / short runs: compress the ramp
        interval = max(1, int(duration * 0.5 / steps))
        if steps * interval > duration * 0.5:   # still too long: bigger steps every second
            steps = max(1, int(duration * 0.5))
            step = max(args.rate_step, math.ceil((total_max_cps - args.start_rate) / steps))
    plan = {}
    for p, share in MIX.items():
        plan[p] = {
            "r": max(1, round(args.start_rate * share * per)),
            "inc": max(1, round(step * share * per)),
            "max": max(1, round(total_max_cps * share * per)),
            "limit": max(1, round(target * share)),
        }
    return plan, interval, min(steps * interval, duration), step


def sipp_stats(path):
    try:
        with open(path, encoding="latin-1") as f:
            rows = [l.rstrip("\r\n") for l in f if l.strip()]
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    return dict(zip(rows[0].split(";"), rows[-1].split(";")))


def read_rtt(d):
    """[(epoch s, ms)] of rtd 1 (INVITE -> 200) from SIPp -trace_rtt files in d."""
    out = []
    for path in glob.glob(os.path.join(d, "*_rtt.csv")):
        with open(path, encoding="latin-1") as f:
            for line in f:
                parts = line.strip().split(";")
                if len(parts) < 3 or parts[2].strip() != "1":
                    continue
                try:
                    out.append((float(parts[0]), float(parts[1])))
                except ValueError:
                    continue
    return out


def warm_up(dating, rawdir):
    d = os.path.join(rawdir, "warmup")
    os.makedirs(d, exist_ok=True)
    cmd = ["sipp", "-sf", SCEN["complete"], "127.0.0.1:%d" % dating.port, "-t", "u1",
           "-i", "127.0.0.1", "-p", str(free_port()), "-r", "10", "-m", "20", "-nostdin",
           "-timeout", "60s", "-timeout_error"]
    with open(os.path.join(d, "sipp.out"), "wb") as f:
        subprocess.run(cmd, cwd=d, stdout=f, stderr=subprocess.STDOUT, timeout=90)


def add_failure_causes(p, events, causes):
    """Counts the call failures in SIPp error-log events of profile p into causes."""
    sends = send_indexes(SCEN[p]) if p in SCEN else set()
    jumped = {}   # Call-ID -> (time, element index) of its last receive-timeout jump
    for e in events:
        m = re.search(r"\t(\d+\.\d+): Call-Id: (\S+), receive timeout on message .*?:(\d+), "
                      r"jumping to label (\d+)", e)
        if m:
            jumped[m.group(2)] = (float(m.group(1)), int(m.group(4)))
            continue
        b = re.search(r"\t(\d+\.\d+): Aborting call on an unexpected BYE for call: (\S+?@\S+?)"
                      r"(?=\d{4}-|\s|$)", e)
        if b and b.group(2) in jumped:
            # SIPp aborts on an unexpected BYE without naming the element. When the
            # call's last event was a receive timeout that jumped to a send a moment
            # before (the 2 s talk ends and our BYE is due), the peer's BYE came in
            # while the call sat on that send: the same race as "while sending".
            t, target = jumped[b.group(2)]
            if target in sends and float(b.group(1)) - t < 0.05:
                k = "%s: while sending (index %d, after a receive timeout) unexpected BYE" % (p, target)
                causes[k] = causes.get(k, 0) + 1
                continue
        m = re.search(r"Aborting call on unexpected message for Call-Id '[^']*': "
                      r"(while [^,]*), received '([^\r\n']*)", e)
        if m:
            k = "%s: %s unexpected %s" % (p, m.group(1), m.group(2)[:60])
            causes[k] = causes.get(k, 0) + 1
        elif "aborting call" in e.lower() or "timeout" in e.lower() and "jumping" not in e:
            k = "%s: %s" % (p, re.sub(r"Call-Id: \S+", "", e.split(": ", 1)[-1])[:100].strip())
            causes[k] = causes.get(k, 0) + 1


def send_indexes(path):
    """Indexes (as SIPp numbers them: labels and statistics excluded) of a scenario's send
    elements."""
    import xml.etree.ElementTree as ET
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return set()
    steps = [el.tag for el in root
             if el.tag in ("send", "recv", "pause", "nop", "timewait", "sendCmd", "recvCmd")]
    return {i for i, tag in enumerate(steps) if tag == "send"}


def wait_drain(tandems, timeout):
    """{name: seconds to reach app == sip == 0, or None} and the last values."""
    t0 = time.monotonic()
    done, last = {}, {}
    while True:
        for t in tandems:
            if t.name in done:
                continue
            app, sip = t.sessions()
            last[t.name] = (app, sip)
            if app == 0 and sip == 0:
                done[t.name] = round(time.monotonic() - t0, 1)
        if len(done) == len(tandems) or time.monotonic() - t0 > timeout:
            return {t.name: done.get(t.name) for t in tandems}, last
        time.sleep(0.25)


# Only the caller leg's INVITEs and 200s: "INVI" or "SIP/" + "200 " at the start of the payload.
# (pcap-filter's "and" and "or" bind equally, left to right: hence the parentheses.)
CAPTURE_FILTER = ("(udp dst port {port} and udp[8:4] = 0x494e5649) or "
                  "(udp src port {port} and udp[8:4] = 0x5349502f and udp[16:4] = 0x32303020)")


def start_capture(port, work):
    """tcpdump of the dating tandem's caller leg (sub-millisecond setup delays); None without
    tcpdump."""
    if not shutil.which("tcpdump"):
        return None
    path = os.path.join(work, "caller.pcap")
    proc = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", "600", "-B", "65536", "-w", path,
                             CAPTURE_FILTER.format(port=port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(1.0)
    return {"proc": proc, "path": path}


def capture_delays(cap, port):
    """Stops the capture; returns ([(INVITE time, setup delay ms)], tcpdump's drop line). The
    first 200 to an INVITE of each caller's Call-ID ends its setup (Cancel callers that got a
    487 have none)."""
    os.killpg(cap["proc"].pid, signal.SIGINT)
    err = cap["proc"].communicate(timeout=60)[1].decode(errors="replace")
    invites, delays = {}, []
    for ts, sport, dport, payload in pcap_packets(cap["path"]):
        if dport == port and payload.startswith(b"INVITE "):
            cid = sip_header(payload, b"call-id")
            if cid is not None and cid not in invites:
                invites[cid] = (ts, sport)
        elif sport == port and payload.startswith(b"SIP/2.0 200"):
            cid = sip_header(payload, b"call-id")
            start = invites.get(cid)
            if start and start[0] is not None and dport == start[1] and \
                    (sip_header(payload, b"cseq") or b"").endswith(b"INVITE"):
                delays.append((start[0], round((ts - start[0]) * 1e3, 3)))
                invites[cid] = (None, start[1])   # the first 200 only
    dropped = next((line.strip() for line in err.splitlines() if "dropped by kernel" in line), "")
    return delays, dropped


def run_once(service, target, duration, args, label=None, ready=None):
    """One measured run. Returns a result dict ('missing' set when the service is unknown).
    `service` may carry a side suffix (`dating_manual#A`, for --aa): the tandem runs the part
    before the `#`. `ready` (side by side: a `threading.Barrier` shared with the other side) is
    waited on once the tandems are warm and the capture runs, so that both sides' SIPp start
    together (their warm-ups and drains take different times)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = label or "%s-%d" % (service, target)
    rawdir = os.path.join(RESULTS, "raw", "dating", "%s-%s" % (stamp, label))
    os.makedirs(rawdir, exist_ok=True)
    res = {"service": service, "target_executions": target, "duration_s": duration,
           "rawdir": os.path.relpath(rawdir, REPO), "started": stamp,
           "other_load": other_load()}
    media = Tandem("media", "media", ["media.answer_delay=%s" % args.answer_delay,
                                      "media.preference_delay=1s", "media.retry_delay=300ms",
                                      "media.max_tries=40"], rawdir)
    dating = None
    sipps = {}
    capture = None
    capture_dir = tempfile.mkdtemp(prefix="tandem-dating-capture-")
    try:
        media.start()
        # The contract version's side runs the engine (`dating`) or the compiled contract
        # (`--contract-service dating_compiled`); its results stay labelled `dating`.
        svc = service.split("#")[0]
        svc = getattr(args, "contract_service", "dating") if svc == "dating" else svc
        res["tandem_service"] = svc
        dating = Tandem("dating", svc, ["dating.media=127.0.0.1:%d" % media.port], rawdir,
                        cpu_limit=args.dating_cpu, cpus=args.dating_cpus)
        missing = dating.start()
        if missing:
            res["missing"] = missing
            log("%s: %s" % (service, missing))
            return res
        warm_up(dating, rawdir)
        res["warmup_drain"], _ = wait_drain([dating, media], args.drain)
        plan, interval, ramp_s, step = ramp_plan(target, duration, args)
        res["plan"] = {"rate_period_ms": RATE_PERIOD_MS, "rate_interval_s": interval,
                       "rate_step_cps": step, "start_cps": args.start_rate,
                       "ramp_s": ramp_s, "profiles": plan}
        log("%s: target %d executions, %d s, ramp %d s (+%g cps every %d s), plan %s" % (
            label, target, duration, ramp_s, step, interval,
            {p: (v["r"], v["inc"], v["max"], v["limit"]) for p, v in plan.items()}))

        # sampler
        samples = []
        stop_flag = threading.Event()

        def sampler():
            while not stop_flag.is_set():
                t = time.time()
                dm, mm = dating.metrics(), media.metrics()
                row = {"t": t, "cpu_dating": cpu_seconds(dating.proc.pid),
                       "sys_dating": system_seconds(dating.proc.pid),
                       "cpu_media": cpu_seconds(media.proc.pid),
                       "cpu_machine": machine_busy_seconds()}
                if dm is not None:
                    row.update({
                        "msgs_in": msum(dm, "tandem_messages_in_total"),
                        "app": msum(dm, "tandem_app_sessions"),
                        "sip": msum(dm, "tandem_sip_sessions"),
                        "backoffs": msum(dm, "tandem_transition_backoffs_total"),
                        "waits": msum(dm, "tandem_negotiation_waits_total"),
                        "lock_retries": msum(dm, "tandem_manual_lock_retries_total"),
                    })
                if mm is not None:
                    row.update({"media_app": msum(mm, "tandem_app_sessions"),
                                "media_sip": msum(mm, "tandem_sip_sessions"),
                                "media_msgs_in": msum(mm, "tandem_messages_in_total")})
                samples.append(row)
                stop_flag.wait(max(0.0, 1.0 - (time.time() - t)))

        if args.capture:
            capture = start_capture(dating.port, capture_dir)
        if ready is not None:
            ready.wait(timeout=READY_TIMEOUT_S)
        before = dating.metrics()
        drops_before = udp_receive_drops()
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t_start = time.time()
        res["t_start"] = t_start
        for p, v in plan.items():
            d = os.path.join(rawdir, p)
            os.makedirs(d, exist_ok=True)
            cmd = ["sipp", "-sf", SCEN[p], "127.0.0.1:%d" % dating.port, "-t", "u1",
                   "-i", "127.0.0.1", "-p", str(free_port()),
                   "-r", str(v["r"]), "-rp", str(RATE_PERIOD_MS),
                   "-rate_increase", str(v["inc"]), "-rate_interval", str(interval),
                   "-rate_max", str(v["max"]), "-no_rate_quit", "-l", str(v["limit"]),
                   "-nostdin", "-trace_rtt", "-rtt_freq", "1", "-trace_stat",
                   "-stf", os.path.join(d, "stat.csv"), "-fd", "1",
                   "-trace_err", "-error_file", os.path.join(d, "errors.log"),
                   "-trace_screen", "-screen_file", os.path.join(d, "screen.log"),
                   "-timeout", "%ds" % (duration + 120), "-max_socket", "10000"]
            f = open(os.path.join(d, "sipp.out"), "wb")
            sipps[p] = (subprocess.Popen(cmd, cwd=d, stdout=f, stderr=subprocess.STDOUT), f)
        time.sleep(duration)
        t_stop = time.time()
        for p, (proc, _) in sipps.items():         # smooth exit: no new calls, finish the others
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 60
        for p, (proc, f) in sipps.items():
            try:
                proc.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            f.close()
        t_sipp_done = time.time()
        drops_after = udp_receive_drops()
        if drops_before is not None and drops_after is not None:
            # Machine-wide: side by side, the other version's run is counted too. A dropped
            # request or response that is not retransmitted (an ACK) can fail a call.
            res["udp_receive_drops"] = drops_after - drops_before
        captured = None
        if capture:
            captured = capture_delays(capture, dating.port)
            capture = None
        drain, last = wait_drain([dating, media], args.drain)
        stop_flag.set()
        th.join()
        after = dating.metrics()
        res.update(analyse(res, plan, samples, before, after, rawdir, t_start, t_stop,
                           t_sipp_done, ramp_s, sipps, drain, last, args))
        if captured is not None:
            delays, dropped = captured
            res["setup_delay_capture_hold"] = setup_stats(sorted(ms for t, ms in delays if t >= t_start + ramp_s))
            res["capture_dropped"] = dropped
        json.dump({"samples": samples}, open(os.path.join(rawdir, "samples.json"), "w"))
        return res
    finally:
        if capture:
            os.killpg(capture["proc"].pid, signal.SIGKILL)
            capture["proc"].wait()
        shutil.rmtree(capture_dir, ignore_errors=True)
        for p, (proc, f) in sipps.items():
            if proc.poll() is None:
                proc.kill()
        if dating and dating.proc:
            res["dating_cpu_limit"] = dating.cpu_limit
            res["dating_throttled_s"] = dating.throttled_s()
            res["dating_exit"] = dating.stop()
        if media.proc:
            res["media_exit"] = media.stop()
        json.dump(res, open(os.path.join(rawdir, "result.json"), "w"), indent=1)


def analyse(res, plan, samples, before, after, rawdir, t_start, t_stop, t_sipp_done, ramp_s,
            sipps, drain, last, args):
    out = {}
    warm = t_start + args.warmup_s                      # extra exclusion at the load's start
    hold_from = t_start + ramp_s
    # throughput: messages received by the dating tandem per second
    series = []
    for a, b in zip(samples, samples[1:]):
        if "msgs_in" in a and "msgs_in" in b and b["t"] > a["t"]:
            series.append({"t": round(b["t"] - t_start, 2),
                           "mps": (b["msgs_in"] - a["msgs_in"]) / (b["t"] - a["t"]),
                           "app": b.get("app"), "media_app": b.get("media_app"),
                           "cpu_dating": (b["cpu_dating"] - a["cpu_dating"]) / (b["t"] - a["t"])
                           if a.get("cpu_dating") is not None and b.get("cpu_dating") is not None
                           else None,
                           "cpu_machine": (b["cpu_machine"] - a["cpu_machine"]) / (b["t"] - a["t"])})
    out["series"] = series

    def mean(rows, key, lo, hi):
        v = [r[key] for r in rows if lo <= r["t"] + t_start <= hi and r.get(key) is not None]
        return round(sum(v) / len(v), 2) if v else None
    out["throughput_mps_load"] = mean(series, "mps", warm, t_stop)
    out["throughput_mps_hold"] = mean(series, "mps", hold_from, t_stop)
    out["app_sessions_hold_mean"] = mean(series, "app", hold_from, t_stop)
    out["app_sessions_max"] = max([r["app"] for r in series if r.get("app") is not None] or [0])
    out["cpu_dating_hold"] = mean(series, "cpu_dating", hold_from, t_stop)
    out["cpu_machine_hold"] = mean(series, "cpu_machine", hold_from, t_stop)
    # CPU per message over the hold window from the raw counters (CPU seconds and messages
    # between the window's first and last samples), not from the rounded means above: those
    # come in steps of 0.01 core, 5 us per message at 2,000 messages/s.
    held = [r for r in samples if hold_from <= r["t"] <= t_stop
            and r.get("msgs_in") is not None and r.get("cpu_dating") is not None]
    out["cpu_us_per_message"] = out["sys_us_per_message"] = None
    if len(held) >= 2 and held[-1]["msgs_in"] > held[0]["msgs_in"]:
        msgs = held[-1]["msgs_in"] - held[0]["msgs_in"]
        out["cpu_us_per_message"] = round(1e6 * (held[-1]["cpu_dating"] - held[0]["cpu_dating"]) / msgs, 2)
        if held[0].get("sys_dating") is not None and held[-1].get("sys_dating") is not None:
            out["sys_us_per_message"] = round(1e6 * (held[-1]["sys_dating"] - held[0]["sys_dating"]) / msgs, 2)
    # growth of unfinished executions during the hold: slope of app sessions (per s)
    hold = [(r["t"], r["app"]) for r in series
            if hold_from <= r["t"] + t_start <= t_stop and r.get("app") is not None]
    if len(hold) >= 5:
        n = len(hold)
        mt, ma = sum(t for t, _ in hold) / n, sum(a for _, a in hold) / n
        den = sum((t - mt) ** 2 for t, _ in hold)
        out["app_sessions_slope_per_s"] = round(
            sum((t - mt) * (a - ma) for t, a in hold) / den, 3) if den else 0.0
    else:
        out["app_sessions_slope_per_s"] = None

    # setup delay (INVITE -> 200), Early Bye + Complete callers, after the warm-up exclusion
    rtt = []
    for p in ("complete", "early_bye"):
        rtt += read_rtt(os.path.join(rawdir, p))
    rtt.sort()
    t0_rtt = t_start
    # SIPp rtt dates: epoch seconds with ms in the fraction, or ms since start (old SIPp)
    if rtt and rtt[0][0] < 1e8:
        rtt = [(t_start + t / 1000.0, v) for t, v in rtt]
    measured = sorted(v for t, v in rtt if t >= warm)
    out["setup_delay"] = setup_stats(measured)
    out["setup_delay_hold"] = setup_stats(sorted(v for t, v in rtt if t >= hold_from))
    bins = {}
    for t, v in rtt:
        bins.setdefault(int((t - t0_rtt) // 5) * 5, []).append(v)
    out["setup_delay_series"] = [
        {"t": k + 2.5, "mean": round(sum(v) / len(v), 2),
         "p99": percentile(sorted(v), 99), "n": len(v)} for k, v in sorted(bins.items())]

    # SIPp outcome per profile
    prof, causes = {}, {}
    for p, (proc, _) in sipps.items():
        st = sipp_stats(os.path.join(rawdir, p, "stat.csv"))

        def iv(k):
            try:
                return int(st.get(k, ""))
            except ValueError:
                return None
        errs = []
        ep = os.path.join(rawdir, p, "errors.log")
        if os.path.exists(ep):
            with open(ep, errors="replace") as f:
                text = f.read()
            # SIPp's error log: events run together; keep the ones that fail a call
            events = re.split(r"(?=\d{4}-\d\d-\d\d\t\d\d:\d\d:\d\d\.\d+\t)", text)
            errs = [e.strip()[:300] for e in events
                    if "jumping to label" not in e and e.strip()
                    and "following events" not in e][:8]
            add_failure_causes(p, events, causes)
        prof[p] = {"created": iv("TotalCallCreated"), "successful": iv("SuccessfulCall(C)"),
                   "failed": iv("FailedCall(C)"), "exit": proc.returncode,
                   "failed_unexpected_msg": iv("FailedUnexpectedMessage(C)"),
                   "failed_timeout": (iv("FailedCallTimeout(C)") or 0) + (iv("FailedMaxUDPRetrans(C)") or 0),
                   "error_samples": errs}
    out["profiles"] = prof
    out["failure_causes"] = causes
    created = sum(v["created"] or 0 for v in prof.values())
    failed = sum(v["failed"] or 0 for v in prof.values())
    out["calls_created"], out["calls_failed"] = created, failed
    # SIPp takes a message in between executing two elements of a call; a message arriving
    # while the next element is a send (e.g. the dating service's re-INVITE in the instant the
    # Early Bye caller's BYE is due) can match no element ("while sending"), and no scenario
    # element can stand there to take it. The call fails in SIPp though both sides behaved.
    # Counted apart, and listed by cause; every other failure breaks the invariant.
    out["calls_failed_sipp_race"] = sum(n for k, n in causes.items() if ": while sending" in k)

    # counters over the run
    def delta(name, **want):
        if before is None or after is None:
            return None
        return msum(after, name, **want) - msum(before, name, **want)
    out["backoffs"] = delta("tandem_transition_backoffs_total")
    out["negotiation_waits"] = delta("tandem_negotiation_waits_total")
    has_retries = after is not None and any(n == "tandem_manual_lock_retries_total" for n, _, _ in after)
    out["manual_lock_retries"] = delta("tandem_manual_lock_retries_total") if has_retries else None
    out["ambiguous"] = delta("tandem_ambiguous_messages_total")
    # the hand-written service counts its transitions under its own names (same labels)
    failures = [delta(n) for n in ("tandem_transition_failures_total", "tandem_manual_transition_failures_total")]
    out["handler_failures"] = None if None in failures else sum(failures)
    tr = {}
    if after is not None:
        for n, l, v in after:
            if n in ("tandem_transitions_total", "tandem_manual_transitions_total") and v:
                b = msum(before or [], n, **l)
                if v - b:
                    tr[l.get("transition")] = tr.get(l.get("transition"), 0) + int(v - b)
    out["transitions"] = tr
    out["messages_in_total"] = delta("tandem_messages_in_total")

    # invariants
    inv = {}
    inv["drained"] = all(v is not None for v in drain.values())
    inv["drain_seconds"] = drain
    inv["left_after_drain"] = {k: {"app": v[0], "sip": v[1]} for k, v in last.items()}
    comp = prof.get("complete", {}).get("successful") or 0
    early = prof.get("early_bye", {}).get("successful") or 0
    t7, t8 = tr.get("T7", 0), tr.get("T8", 0)

    def count_lines(path):
        try:
            with open(path) as f:
                return sum(1 for l in f if l.strip())
        except OSError:
            return 0
    unpaired = count_lines(os.path.join(rawdir, "complete", "unpaired.log"))
    early_paired = count_lines(os.path.join(rawdir, "early_bye", "paired.log"))
    comp_created = prof.get("complete", {}).get("created") or 0
    early_created = prof.get("early_bye", {}).get("created") or 0
    # callers that got (and accepted) a re-INVITE. A failed Complete call logged neither line:
    # it may have failed before pairing (e.g. shed with 503) or after, so it is not counted.
    comp_failed = prof.get("complete", {}).get("failed") or 0
    reinvited = comp_created - comp_failed - unpaired + early_paired
    inv.update({"T7": t7, "T8": t8, "complete_calls": comp, "early_bye_calls": early,
                "complete_unpaired": unpaired, "early_bye_paired": early_paired,
                "complete_failed": comp_failed, "callers_reinvited": reinvited})
    # the brief's bound; it can fail legitimately when Early Bye callers get paired too
    inv["t7_le_complete_half"] = t7 <= comp / 2.0
    # each pair re-INVITEs its two callers (at most: a caller may hang up while pairing),
    # a caller accepts at most one re-INVITE (a second one fails the SIPp call)
    if tr:
        inv["pairing_ok"] = (reinvited <= 2 * t7 and 2 * t7 <= comp_created + early_created
                             and t8 <= 2 * t7)
    else:   # no transition counts (a tandem without its metrics): only SIPp's side is checked
        inv["pairing_ok"] = None
    # the odd caller(s) left waiting when the load stops hang up after 20 s: allow 2
    inv["unpaired_ok"] = unpaired <= 2
    races = out.get("calls_failed_sipp_race", 0)
    inv["sipp_races"] = races
    inv["all_calls_completed"] = failed - races == 0 and created > 0 and all(
        v["exit"] == 0 or v["failed"] for v in prof.values())
    inv["no_ambiguous"] = not out["ambiguous"]
    inv["ok"] = bool(inv["drained"] and inv["pairing_ok"] is not False and inv["all_calls_completed"]
                     and inv["no_ambiguous"] and inv["unpaired_ok"])
    out["invariants"] = inv
    return out


def setup_stats(v):
    if not v:
        return {"n": 0}
    n = len(v)
    return {"n": n, "p50": percentile(v, 50), "p90": percentile(v, 90),
            "p99": percentile(v, 99), "p999": percentile(v, 99.9), "max": v[-1],
            "mean": round(sum(v) / n, 2),
            "under_20ms": round(sum(1 for x in v if x < 20) / n, 4),
            "under_50ms": round(sum(1 for x in v if x < 50) / n, 4)}


def summary_line(r):
    if r.get("missing"):
        return "%s: MISSING (%s)" % (r["service"], r["missing"])
    sd = r["setup_delay_hold"] if r["setup_delay_hold"].get("n") else r["setup_delay"]
    inv = r["invariants"]
    return ("%s @%d: %s msg/s (hold), app sessions mean %s max %s slope %s/s; setup p50 %s p99 %s "
            "p99.9 %s ms, <20ms %s; calls %d failed %d; backoffs %s waits %s; drained %s; "
            "T7 %d; invariants %s" % (
                r["service"], r["target_executions"], r["throughput_mps_hold"],
                r["app_sessions_hold_mean"], r["app_sessions_max"], r["app_sessions_slope_per_s"],
                sd.get("p50"), sd.get("p99"), sd.get("p999"), sd.get("under_20ms"),
                r["calls_created"], r["calls_failed"], r["backoffs"], r["negotiation_waits"],
                inv["drain_seconds"], inv["T7"], "OK" if inv["ok"] else "FAILED"))


# ----------------------------------------------------------------------------------------------
# capacity search
# ----------------------------------------------------------------------------------------------

def healthy(r, base_p99):
    """(ok, reason): the version keeps up (no accumulation of unfinished executions)."""
    if r.get("missing"):
        return False, "missing"
    reasons = []
    # A call the runtime's overload control answered 503 is load the version did not keep up
    # with: one is enough (the invariants allow none). Other failures but SIPp's races (see
    # `calls_failed_sipp_race`): a few are tolerated, a lost datagram is not saturation.
    shed = calls_shed(r)
    if shed:
        reasons.append("%d calls shed (503)" % shed)
    others = (r["calls_failed"] or 0) - shed - (r.get("calls_failed_sipp_race") or 0)
    if r["calls_created"] and others > max(1, 0.001 * r["calls_created"]):
        reasons.append("%d failed calls" % others)
    if not r["invariants"]["drained"]:
        # a handful of leftovers is a defect (reported by the invariants), not saturation
        left = sum((v.get("app") or 0) for v in r["invariants"]["left_after_drain"].values())
        if left > max(2, 0.001 * r["target_executions"]):
            reasons.append("%d executions not drained" % left)
    slope = r.get("app_sessions_slope_per_s")
    if slope is not None and slope > max(0.5, 0.02 * r["target_executions"]):
        reasons.append("app sessions growing %.2f/s" % slope)
    sd = r["setup_delay_hold"] if r["setup_delay_hold"].get("n") else r["setup_delay"]
    p99 = sd.get("p99")
    if p99 is not None and p99 > max(100.0, 10 * (base_p99 or 0)):
        reasons.append("setup delay p99 %s ms exploding" % p99)
    if sd.get("under_50ms") is not None and sd["under_50ms"] < 0.95:
        reasons.append("only %.1f %% set up within 50 ms" % (100 * sd["under_50ms"]))
    return (not reasons), "; ".join(reasons) or "ok"


def calls_shed(r):
    """Calls SIPp saw answered 503 Service Unavailable (the runtime's overload shedding)."""
    return sum(n for k, n in (r.get("failure_causes") or {}).items() if " 503 " in k)


def level_record(target, ok, why, r):
    """What the report keeps of one capacity-search level."""
    keep = ("throughput_mps_hold", "app_sessions_hold_mean", "app_sessions_slope_per_s",
            "setup_delay_hold", "calls_failed", "cpu_machine_hold", "rawdir")
    return dict({"target": target, "ok": ok, "why": why, "calls_shed": calls_shed(r)},
                **{k: r[k] for k in keep})


def capacity_search(service, args):
    duration = args.capacity_duration

    def level(target):
        # With --side-by-side the comparison runs both versions at once, which is more load on
        # the shared machine than one version alone: the capacity is searched the same way
        # (both at once, `service`'s run decides), so that the loads derived from it are the
        # ones `service` keeps up with in the comparison itself.
        if args.side_by_side and service == "dating_manual":
            pair = [service, "dating"] if args.swap_sides else ["dating", service]
            got = run_side_by_side(pair, target, args, "cap-%d" % target, duration)
            log(summary_line(got["dating"]))
            return got[service]
        return run_once(service, target, duration, args, label="cap-%s-%d" % (service, target))

    levels = []
    target = args.capacity_start
    base_p99 = None
    last_ok, first_bad = None, None
    while target <= args.capacity_max:
        r = level(target)
        if r.get("missing"):
            return None, levels
        ok, why = healthy(r, base_p99)
        log(summary_line(r))
        log("capacity: target %d -> %s" % (target, why))
        levels.append(level_record(target, ok, why, r))
        if base_p99 is None:
            base_p99 = (r["setup_delay_hold"] or {}).get("p99")
        if ok:
            last_ok = target
            if first_bad:
                break
            target = int(target * args.capacity_factor)
        else:
            first_bad = target
            if last_ok or target // 2 < 10:
                break
            target = int(target / args.capacity_factor)   # first level already unhealthy: go down
    if last_ok and first_bad and first_bad < last_ok:  # found going down: bisect above it
        first_bad = min(l["target"] for l in levels if not l["ok"] and l["target"] > last_ok)
    # one bisection step between the last good and the first bad level
    if last_ok and first_bad and first_bad - last_ok > max(10, last_ok // 4) and args.refine:
        mid = (last_ok + first_bad) // 2
        r = level(mid)
        ok, why = healthy(r, base_p99)
        log(summary_line(r))
        log("capacity: target %d -> %s" % (mid, why))
        levels.append(level_record(mid, ok, why, r))
        if ok:
            last_ok = mid
    cap = last_ok if last_ok else args.capacity_start
    return cap, levels


# ----------------------------------------------------------------------------------------------
# comparison, report, plots
# ----------------------------------------------------------------------------------------------

def compact(r):
    if r is None:
        return None
    if r.get("missing"):
        return {"service": r["service"], "missing": r["missing"]}
    keep = ("service", "target_executions", "duration_s", "rawdir", "plan", "throughput_mps_load",
            "throughput_mps_hold", "app_sessions_hold_mean", "app_sessions_max",
            "app_sessions_slope_per_s", "cpu_dating_hold", "cpu_machine_hold", "cpu_us_per_message",
            "sys_us_per_message", "setup_delay",
            "setup_delay_hold", "profiles", "calls_created", "calls_failed", "calls_failed_sipp_race", "backoffs",
            "negotiation_waits", "manual_lock_retries", "ambiguous", "handler_failures",
            "transitions", "messages_in_total", "invariants", "dating_exit", "media_exit",
            "failure_causes", "setup_delay_capture_hold", "capture_dropped",
            "other_load", "start_skew_s")
    return {k: r.get(k) for k in keep}


def compare(args):
    mach = machine()
    manual_missing = service_available("dating_manual")
    ref = "dating" if manual_missing else "dating_manual"
    levels = []
    if args.capacity_executions:
        cap = args.capacity_executions
        cap_src = "given (--capacity-executions)"
    else:
        cap, levels = capacity_search(ref, args)
        cap_src = "searched with %s" % ref
        if args.side_by_side and ref == "dating_manual":
            cap_src += ", side by side with dating as in the comparison"
    if cap is None:
        raise SystemExit("capacity search failed")
    loads = {"expected": max(2, int(round(cap * 0.8))), "overload": cap}
    runs, runs_swapped = {}, {}
    for lvl, target in loads.items():
        if manual_missing:
            runs[(lvl, "dating_manual")] = {"service": "dating_manual", "missing": manual_missing}
        svcs = ["dating"] if manual_missing else ["dating", "dating_manual"]
        if args.side_by_side and len(svcs) == 2:
            # (sides swapped, where the runs go, label); --both-orders: both, back to back
            orders = ([(False, runs, lvl), (True, runs_swapped, lvl + "-swapped")] if args.both_orders
                      else [(args.swap_sides, runs, lvl)])
            for swapped, into, label in orders:
                got = run_side_by_side(svcs[::-1] if swapped else svcs, target, args, label)
                for svc, r in got.items():
                    log(summary_line(r))
                    into[(lvl, svc)] = r
        else:
            for svc in svcs:
                r = run_once(svc, target, args.duration, args, label="%s-%s" % (lvl, svc))
                log(summary_line(r))
                runs[(lvl, svc)] = r
    report(args, mach, cap, cap_src, levels, loads, runs, manual_missing, runs_swapped)


def aa_check(args):
    """The side-by-side rig with the same version on both sides (an A/A test): the ratios it
    reports are what the rig itself contributes, to read the contract / hand-optimized ratios
    against. Writes bench/results/dating-aa.{json,md}; leaves dating.* alone."""
    svc, cap = args.aa, args.capacity_executions
    if not cap:
        raise SystemExit("--aa needs --capacity-executions")
    loads = {"expected": max(2, int(round(cap * 0.8))), "overload": cap}
    out = {"generated": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
           "service": svc, "duration_s": args.duration, "dating_cpu_limit": args.dating_cpu,
           "dating_cpus": args.dating_cpus, "binary": built_binary(),
           "machine": machine(), "loads": loads, "runs": {}}
    rows = []
    for lvl, target in loads.items():
        got = run_side_by_side([svc + "#A", svc + "#B"], target, args, lvl)
        a, b = got[svc + "#A"], got[svc + "#B"]
        for side, r in (("A", a), ("B", b)):
            log(summary_line(r))
            out["runs"]["%s/%s" % (lvl, side)] = compact(r)
        pa, pb = setup_stats_of(a).get("p99"), setup_stats_of(b).get("p99")
        # with --capture: the same p99 from the caller leg's packets (µs, not SIPp's ~4-ms steps)
        ca, cb = ((r.get("setup_delay_capture_hold") or {}).get("p99") for r in (a, b))
        out["throughput_ratio_" + lvl] = ratio(a["throughput_mps_hold"], b["throughput_mps_hold"])
        out["p99_ratio_" + lvl] = ratio(pa, pb)
        out["p99_capture_ratio_" + lvl] = ratio(ca, cb)
        out["cpu_per_message_ratio_" + lvl] = ratio(a.get("cpu_us_per_message"), b.get("cpu_us_per_message"))
        rows.append("| %s | %s | %s | %s / %s | %s | %s / %s | %s | %s / %s | %s |" % (
            lvl, fmt(out["throughput_ratio_" + lvl], 3), fmt(out["p99_ratio_" + lvl], 3),
            fmt(pa), fmt(pb), fmt(out["p99_capture_ratio_" + lvl], 3), fmt(ca, 2), fmt(cb, 2),
            fmt(out["cpu_per_message_ratio_" + lvl], 3),
            fmt(a.get("dating_throttled_s"), 0), fmt(b.get("dating_throttled_s"), 0),
            "OK" if a["invariants"]["ok"] and b["invariants"]["ok"] else "FAILED"))
    with open(os.path.join(RESULTS, "dating-aa.json"), "w") as f:
        json.dump(out, f, indent=1)
    m = out["machine"]
    with open(os.path.join(RESULTS, "dating-aa.md"), "w") as f:
        f.write("# Dating benchmark rig, A/A check: `%s` against itself, side by side\n\n"
                "Generated %s by `bench/dating/run.py --aa %s --capacity-executions %d "
                "--dating-cpu %s%s%s` (%d s per run); tandem git %s, %s × %s, kernel %s.\n\n"
                "Both sides run the same version at the same time, as `--compare "
                "--side-by-side` runs the two versions: a ratio away from 1 here is the rig's "
                "own asymmetry or noise.\n\n"
                "| load | throughput ratio A/B | p99 ratio A/B | p99 A / B (ms) | p99 ratio A/B "
                "from a capture | p99 A / B from a capture (ms) | CPU per message ratio | "
                "throttled A / B (s) | invariants |\n|---|---|---|---|---|---|---|---|---|\n"
                % (svc, out["generated"], svc, cap, args.dating_cpu,
                   " --dating-cpus " + ",".join(map(str, args.dating_cpus)) if args.dating_cpus else "",
                   " --capture" if args.capture else "", args.duration, m.get("git"),
                   m.get("nproc"), m.get("cpu_model"), m.get("kernel")))
        f.write("\n".join(rows) + "\n")
        skews = skew_text((lvl, out["runs"]["%s/A" % lvl]) for lvl in loads)
        if skews:
            f.write("\nBoth sides' loads started together once both were warm (B's start minus "
                    "A's: %s).\n" % skews)
    log("wrote bench/results/dating-aa.md, dating-aa.json")


def skew_text(levels):
    """"expected +0.001 s, overload -0.002 s" from (load, run) pairs: how far apart the two
    sides' loads started (`start_skew_s`); "" for runs from before the barrier."""
    return ", ".join("%s %+.3f s" % (lvl, r["start_skew_s"]) for lvl, r in levels
                     if r.get("start_skew_s") is not None)


def setup_stats_of(r):
    return r["setup_delay_hold"] if r["setup_delay_hold"].get("n") else r["setup_delay"]


def run_side_by_side(svcs, target, args, lvl, duration=None):
    """Both versions at once, each with its own media service and SIPp instances: whatever
    else the shared machine does during the run (steal time, a neighbour's burst) falls on both,
    so their ratio is not a comparison of two different five-minute windows. Their loads start
    together (a barrier once both are warm: `start_skew_s` in the results says how together).
    The second version runs in a thread, the first in this one (a signal unwinds this one and
    breaks the barrier; the thread finishes its run and its `finally` stops its processes)."""
    got, errors = {}, {}
    ready = threading.Barrier(2)

    def one(svc):
        try:
            got[svc] = run_once(svc, target, duration or args.duration, args, label="%s-%s" % (lvl, svc),
                                ready=ready)
        except BaseException as e:  # reported after the join (a signal: re-raised)
            errors[svc] = e
            if not isinstance(e, Exception):
                raise
        finally:
            # A side that ended before its start (an error, an unknown service) must not leave
            # the other waiting; once both started, breaking the barrier changes nothing.
            ready.abort()

    other = threading.Thread(target=one, args=(svcs[1],))
    other.start()
    one(svcs[0])
    other.join()
    if errors:
        raise RuntimeError("side-by-side run failed: %s" % errors)
    starts = [got[svc].get("t_start") for svc in svcs]
    for r in got.values():
        r["side_by_side"] = True
        # how far apart the two sides' SIPp started (the barrier keeps it to milliseconds)
        if None not in starts:
            r["start_skew_s"] = round(starts[1] - starts[0], 4)
        # the sibling's SIPp and tandem processes are expected here, not a disturbance
        r["other_load"] = []
    return {svc: got[svc] for svc in svcs}


RATIO_KEYS = ["throughput_ratio_expected", "throughput_ratio_overload", "p99_ratio_expected",
              "p99_ratio_overload", "p99_capture_ratio_expected", "p99_capture_ratio_overload",
              "cpu_per_message_ratio_expected", "cpu_per_message_ratio_overload"]


def ratios_of(runs):
    """The contract / hand-optimized ratios of one set of runs keyed (load, version)."""
    def fig(lvl, svc, key, sub=None):
        r = runs.get((lvl, svc))
        if not r or r.get("missing"):
            return None
        v = r.get(key)
        return v.get(sub) if sub and isinstance(v, dict) else v

    def sd(lvl, svc):
        r = runs.get((lvl, svc))
        return setup_stats_of(r) if r and not r.get("missing") else {}

    out = {}
    for lvl in ("expected", "overload"):
        out["throughput_ratio_" + lvl] = ratio(fig(lvl, "dating", "throughput_mps_hold"),
                                               fig(lvl, "dating_manual", "throughput_mps_hold"))
        out["p99_ratio_" + lvl] = ratio(sd(lvl, "dating").get("p99"), sd(lvl, "dating_manual").get("p99"))
        # the same from a capture of the caller leg (microseconds, not SIPp's ~4 ms steps)
        out["p99_capture_ratio_" + lvl] = ratio(fig(lvl, "dating", "setup_delay_capture_hold", "p99"),
                                                fig(lvl, "dating_manual", "setup_delay_capture_hold", "p99"))
        # the dating tandem's CPU per message (contract / hand-optimized): the cost difference
        # that throughput does not show while the machine is not saturated
        out["cpu_per_message_ratio_" + lvl] = ratio(fig(lvl, "dating", "cpu_us_per_message"),
                                                    fig(lvl, "dating_manual", "cpu_us_per_message"))
    return {k: out[k] for k in RATIO_KEYS}


def geometric_mean(a, b):
    return None if a is None or b is None else round(math.sqrt(a * b), 3)


def report(args, mach, cap, cap_src, levels, loads, runs, manual_missing, runs_swapped=None):
    """`runs_swapped` (--both-orders): the same loads run again with the sides swapped; the
    ratios reported are then the geometric means of the two orders' (a side bias that scales
    one order's ratio by some factor scales the other's by its inverse, and cancels), each
    order's kept under `ratios_by_order`."""
    both = bool(runs_swapped)
    by_order = {"dating_first": ratios_of(runs), "dating_manual_first": ratios_of(runs_swapped)} if both else None
    headline = ({k: geometric_mean(by_order["dating_first"][k], by_order["dating_manual_first"][k])
                 for k in RATIO_KEYS} if both else ratios_of(runs))
    every_run = list(runs.values()) + list((runs_swapped or {}).values())
    out = {
        "generated": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "quick" if args.quick else "full",
        "duration_s": args.duration,
        "machine": mach,
        "capacity_executions": cap,
        "capacity_source": cap_src,
        "capacity_levels": levels,
        "loads": loads,
        "manual_version": None if not manual_missing else manual_missing,
        **headline,
        "ratios_by_order": by_order,
        "invariants_ok": all(r["invariants"]["ok"] for r in every_run if not r.get("missing")),
        "setup_delay_resolution_ms": 1,
        "media_answer_delay": args.answer_delay,
        "dating_cpu_limit": args.dating_cpu,
        "dating_cpus": args.dating_cpus,
        "binary": built_binary(),
        "side_by_side": bool(getattr(args, "side_by_side", False)),
        # what ran the contract version: the engine (`dating`) or the compiled contract
        "contract_service": getattr(args, "contract_service", "dating"),
        # which version the driver's main thread ran (the other ran in a second thread);
        # "both": --both-orders, `runs` with the contract version first, `runs_swapped` after
        "side_by_side_first": ("both" if both else "dating_manual" if getattr(args, "swap_sides", False)
                               else "dating") if getattr(args, "side_by_side", False) else None,
        "runs": {"%s/%s" % k: compact(v) for k, v in runs.items()},
        "runs_swapped": {"%s/%s" % k: compact(v) for k, v in runs_swapped.items()} if both else None,
    }
    if manual_missing:
        out["goal_met"] = None
    else:
        tr = [out["throughput_ratio_expected"], out["throughput_ratio_overload"]]
        pr = [out["p99_ratio_expected"], out["p99_ratio_overload"]]
        out["goal_met"] = (None not in tr + pr and min(tr) >= 1.0 and max(pr) <= 1.05)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "dating.json"), "w") as f:
        json.dump(out, f, indent=1)
    plots = plot(runs, loads)
    # the report's tables list the second order's runs after the first's, marked
    listed = dict(runs)
    listed.update({(lvl, svc + SWAPPED_MARK): r for (lvl, svc), r in (runs_swapped or {}).items()})
    write_md(out, listed, loads, plots)
    log("wrote bench/results/dating.md, dating.json%s" % (
        ", " + ", ".join(plots) if plots else " (no plots: matplotlib missing)"))


# How the report's tables name a run of the second order of --both-orders.
SWAPPED_MARK = " (sides swapped)"


def fmt(v, nd=1):
    if v is None:
        return "–"
    if isinstance(v, float):
        return ("%." + str(nd) + "f") % v
    return str(v)


def write_md(out, runs, loads, plots):
    m = out["machine"]
    L = []
    L.append("# Dating service: contract version vs hand-optimized version\n")
    L.append("Generated %s by `bench/dating/run.py --compare%s` (%s mode, %d s per run). "
             "Method: bench/dating/README.md.\n" % (
                 out["generated"], (" --quick" if out["mode"] == "quick" else "")
                 + (" --side-by-side" if out.get("side_by_side") else "")
                 + (" --both-orders" if out.get("side_by_side_first") == "both" else "")
                 + (" --contract-service %s" % out["contract_service"]
                    if out.get("contract_service", "dating") != "dating" else ""), out["mode"],
                 out["duration_s"]))
    if out.get("contract_service", "dating") != "dating":
        L.append("**Contract version**: `%s` (the contract compiled to Rust and run by "
                 "`tandem_engine::dispatch`, decision 0008), labelled `dating` below.\n" % out["contract_service"])
    L.append("**Machine**: %s × %s, %s GiB RAM, kernel %s, %s; %s; tandem git %s.\n" % (
        m.get("nproc"), m.get("cpu_model"), m.get("mem_total_gib"), m.get("kernel"),
        m.get("os"), m.get("sipp"), m.get("git")))
    if out.get("side_by_side"):
        # one side of each pair (both sides carry the pair's skew)
        skews = skew_text((k[0] + (" swapped" if k[1].endswith(SWAPPED_MARK) else ""), r)
                          for k, r in runs.items() if k[1] in ("dating", "dating" + SWAPPED_MARK))
        L.append("**Side by side** (`--side-by-side`): at each load both versions ran at the same "
                 "time, each with its own media service and SIPp callers, so that the shared "
                 "machine's disturbances during the run fall on both.%s\n" % (
                     " Their loads started together once both were warm (second side's start "
                     "minus the first's: %s)." % skews if skews else ""))
    if out["manual_version"]:
        L.append("**Hand-optimized version missing** (%s): only the contract version was "
                 "measured; the ratios are null.\n" % out["manual_version"])
    L.append("**Capacity**: %s concurrent executions (%s); expected load = %d, overload = %d "
             "(SIPp concurrent calls, `-l`).\n" % (out["capacity_executions"],
                                                   out["capacity_source"], loads["expected"],
                                                   loads["overload"]))
    if out.get("dating_cpu_limit"):
        thr = ["%s/%s %.0f s" % (k[0], k[1], r["dating_throttled_s"]) for k, r in runs.items()
               if r.get("dating_throttled_s") is not None]
        L.append("**CPU cap**: the dating tandem ran capped at %.2f core (cgroup CFS quota, %d µs "
                 "period), the same for both versions, so that it saturates before SIPp (which "
                 "shares the machine) does: capacity and overload are then the server's. Time "
                 "held back by the cap: %s.\n" % (out["dating_cpu_limit"], CPU_PERIOD_US,
                                                   ", ".join(thr) or "n/a"))
    if out.get("dating_cpus"):
        L.append("**CPUs**: every dating tandem ran on CPU(s) %s only (`--dating-cpus`): side by "
                 "side, both versions on the same CPUs.\n" % ",".join(map(str, out["dating_cpus"])))
    if out.get("side_by_side_first") == "dating_manual":
        L.append("**Sides swapped** (`--swap-sides`): the hand-optimized version ran in the "
                 "driver's main thread, the contract version in the second one.\n")
    if out.get("side_by_side_first") == "both":
        L.append("**Both orders** (`--both-orders`): at each load the pair ran twice, back to "
                 "back: first with the contract version in the driver's main thread, then with "
                 "the hand-optimized version there (the runs marked \"%s\"). The ratios below "
                 "are the geometric means of the two orders' ratios: a bias of the rig's sides "
                 "(its A/A checks favour the first) scales one order's ratio up by the factor it "
                 "scales the other's down, and cancels. The plots show the first order's runs.\n"
                 % SWAPPED_MARK.strip(" ()"))
    if out.get("binary"):
        L.append("**Binary**: `%s` (`--binary`; one binary holds both versions), not the default "
                 "`target/release/tandem`.\n" % out["binary"])
    races = sum(r.get("calls_failed_sipp_race") or 0 for r in runs.values() if not r.get("missing"))
    if races:
        L.append("**SIPp races**: %d failed call(s) were a message SIPp took in just before a "
                 "send of the scenario (\"while sending\": no scenario element can receive "
                 "there, e.g. a pairing re-INVITE in the instant an Early Bye caller hangs up); "
                 "they are listed below and do not fail the invariants.\n" % races)
    busy = sorted({l.split(": ", 1)[-1][:90] for r in runs.values() for l in (r.get("other_load") or [])})
    if busy:
        L.append("**Warning: the machine was shared**: other SIPp/tandem processes were running "
                 "during the runs (%d distinct), e.g. `%s`. Absolute figures are disturbed; the "
                 "contract and hand-optimized runs alternate, so ratios are less affected but "
                 "noisy.\n" % (len(busy), busy[0]))
    L.append("## Ratios (contract / hand-optimized)\n")
    L.append("| | expected load | overload | goal |")
    L.append("|---|---|---|---|")
    L.append("| throughput ratio | %s | %s | ≥ 1.00 |" % (fmt(out["throughput_ratio_expected"], 3),
                                                        fmt(out["throughput_ratio_overload"], 3)))
    L.append("| p99 setup-delay ratio | %s | %s | ≤ 1.05 |" % (fmt(out["p99_ratio_expected"], 3),
                                                             fmt(out["p99_ratio_overload"], 3)))
    L.append("| p99 setup-delay ratio, from a capture (µs resolution) | %s | %s | (the same, resolved) |" % (
        fmt(out.get("p99_capture_ratio_expected"), 3), fmt(out.get("p99_capture_ratio_overload"), 3)))
    L.append("| dating CPU per message ratio | %s | %s | (not a goal) |" % (
        fmt(out["cpu_per_message_ratio_expected"], 3), fmt(out["cpu_per_message_ratio_overload"], 3)))
    if out.get("ratios_by_order"):
        o1, o2 = out["ratios_by_order"]["dating_first"], out["ratios_by_order"]["dating_manual_first"]
        L.append("\nEach order's ratios (expected load / overload):\n")
        L.append("| | contract version first | hand-optimized version first | geometric mean |")
        L.append("|---|---|---|---|")
        for name, k in (("throughput ratio", "throughput_ratio_"), ("p99 setup-delay ratio", "p99_ratio_"),
                        ("p99 setup-delay ratio, from a capture", "p99_capture_ratio_"),
                        ("dating CPU per message ratio", "cpu_per_message_ratio_")):
            L.append("| %s | %s | %s | %s |" % (name, *(
                "%s / %s" % (fmt(d.get(k + "expected"), 3), fmt(d.get(k + "overload"), 3))
                for d in (o1, o2, out))))
    L.append("\nInvariants: **%s**. Goal met: %s.\n" % (
        "OK" if out["invariants_ok"] else "FAILED", fmt(out["goal_met"])))
    L.append("## Per run (hold phase: after the ramp, until the load stops)\n")
    L.append("| load | version | target | msg/s | app sessions mean/max | dating CPU | "
             "setup p50 | p90 | p99 | p99.9 | < 20 ms | < 50 ms | calls | failed "
             "(cancel/early/complete) | back-offs | negotiation waits | lock retries | "
             "T7 | drained (s) | invariants | CPU µs/msg (kernel) |")
    L.append("|" + "---|" * 21)
    for (lvl, svc), r in runs.items():
        if r.get("missing"):
            L.append("| %s | %s | missing |" % (lvl, svc) + " |" * 18)
            continue
        s = r["setup_delay_hold"] if r["setup_delay_hold"].get("n") else r["setup_delay"]
        pf = r["profiles"]
        inv = r["invariants"]
        L.append("| %s | %s | %d | %s | %s / %s | %s | %s | %s | %s | %s | %s | %s | %d | %d (%s/%s/%s) "
                 "| %s | %s | %s | %d | %s | %s | %s |" % (
                     lvl, svc, r["target_executions"], fmt(r["throughput_mps_hold"]),
                     fmt(r["app_sessions_hold_mean"]), fmt(r["app_sessions_max"], 0),
                     fmt(r["cpu_dating_hold"], 2), fmt(s.get("p50")), fmt(s.get("p90")),
                     fmt(s.get("p99")), fmt(s.get("p999")),
                     "%.1f %%" % (100 * s["under_20ms"]) if s.get("n") else "–",
                     "%.1f %%" % (100 * s["under_50ms"]) if s.get("n") else "–",
                     r["calls_created"], r["calls_failed"],
                     pf.get("cancel", {}).get("failed"), pf.get("early_bye", {}).get("failed"),
                     pf.get("complete", {}).get("failed"), fmt(r["backoffs"], 0),
                     fmt(r["negotiation_waits"], 0), fmt(r["manual_lock_retries"], 0), inv["T7"],
                     "/".join(fmt(v) for v in inv["drain_seconds"].values()),
                     "OK" if inv["ok"] else "FAILED",
                     "%s (%s)" % (fmt(r.get("cpu_us_per_message")), fmt(r.get("sys_us_per_message")))
                     if r.get("sys_us_per_message") is not None else fmt(r.get("cpu_us_per_message"))))
    L.append("\nSetup delay = INVITE sent → 200 OK received at the SIPp caller (Early Bye and "
             "Complete Call profiles), in ms; SIPp's resolution is 1 ms, and its values come in steps of "
             "about 4 ms here (4 ms is measured although the media service answers after 5 ms: "
             "SIPp reads its clock once per scheduler loop), so p50/p99 differences below 4 ms "
             "are not resolved. It includes the media "
             "service's configured answer delay (`media.answer_delay=%s`, which lets the Cancel "
             "profile's CANCEL overtake the answer). msg/s = SIP messages received by the "
             "dating tandem per second (`tandem_messages_in_total`). Dating CPU in cores.\n"
             % out["media_answer_delay"])
    caps = [(k, r) for k, r in runs.items() if not r.get("missing") and (r.get("setup_delay_capture_hold") or {}).get("n")]
    if caps:
        L.append("Setup delay from a capture of the caller leg (tcpdump on loopback: INVITE to the "
                 "dating tandem → its first 200 OK for that Call-ID; hold phase), in ms:\n")
        L.append("| load | version | calls | p50 | p90 | p99 | p99.9 | < 20 ms | tcpdump |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for (lvl, svc), r in caps:
            c = r["setup_delay_capture_hold"]
            L.append("| %s | %s | %d | %s | %s | %s | %s | %.1f %% | %s |" % (
                lvl, svc, c["n"], fmt(c["p50"], 2), fmt(c["p90"], 2), fmt(c["p99"], 2), fmt(c["p999"], 2),
                100 * c["under_20ms"], r.get("capture_dropped") or "–"))
        L.append("")
    fc = [(k, r) for k, r in runs.items() if not r.get("missing") and r.get("failure_causes")]
    if fc:
        L.append("Failed SIPp calls, by cause (from each instance's `errors.log`):\n")
        for (lvl, svc), r in fc:
            for cause, n in sorted(r["failure_causes"].items(), key=lambda kv: -kv[1]):
                L.append("* %s / %s: %d × %s" % (lvl, svc, n, cause.replace("|", "/")))
        L.append("")
    drops = ["%s/%s %d" % (k[0], k[1], r["udp_receive_drops"]) for k, r in runs.items()
             if r.get("udp_receive_drops") is not None]
    if drops:
        L.append("UDP datagrams the kernel dropped for a full receive buffer while SIPp ran "
                 "(`/proc/net/snmp` RcvbufErrors, whole machine: side by side, both versions' "
                 "runs; a lost message that nobody retransmits, e.g. an ACK, or one lost "
                 "before a later one overtakes it, can fail a call): %s.\n" % ", ".join(drops))
    if out["capacity_levels"]:
        L.append("## Capacity search\n")
        L.append("| target | msg/s | app sessions mean | slope /s | setup p99 | < 50 ms | failed | "
                 "machine CPU | verdict |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for c in out["capacity_levels"]:
            s = c["setup_delay_hold"] or {}
            L.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c["target"], fmt(c["throughput_mps_hold"]), fmt(c["app_sessions_hold_mean"]),
                fmt(c["app_sessions_slope_per_s"], 2), fmt(s.get("p99")),
                "%.1f %%" % (100 * s["under_50ms"]) if s.get("n") else "–",
                c["calls_failed"], fmt(c["cpu_machine_hold"], 2), c["why"]))
        L.append("")
    for p in plots:
        L.append("![%s](%s)\n" % (p, p))
    with open(os.path.join(RESULTS, "dating.md"), "w") as f:
        f.write("\n".join(L) + "\n")


def plot(runs, loads):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: `pip install matplotlib` to get the PNG plots")
        return []
    style = {"dating_manual": dict(color="black", ls="-", label="hand-optimized (dating_manual)"),
             "dating": dict(color="red", ls="--", label="contract (dating)")}
    made = []
    fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for ax, lvl in zip(axes, ("expected", "overload")):
        for svc in ("dating_manual", "dating"):
            r = runs.get((lvl, svc))
            if not r or r.get("missing"):
                continue
            ax.plot([p["t"] for p in r["series"]], [p["mps"] for p in r["series"]], **style[svc])
            ax.axvline(r["plan"]["ramp_s"], color="grey", lw=0.8, ls=":")
        ax.set_title("%s: %d concurrent executions (SIPp calls)" % (
            "expected load" if lvl == "expected" else "overload", loads[lvl]))
        ax.set_ylim(bottom=0)
        ax.set_ylabel("messages / s (dating tandem)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[-1].set_xlabel("time since load start (s); dotted: end of ramp")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "dating-throughput.png"), dpi=100)
    plt.close(fig)
    made.append("dating-throughput.png")
    fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for ax, lvl in zip(axes, ("expected", "overload")):
        for svc in ("dating_manual", "dating"):
            r = runs.get((lvl, svc))
            if not r or r.get("missing"):
                continue
            s = r["setup_delay_series"]
            st = dict(style[svc])
            ax.plot([p["t"] for p in s], [p["mean"] for p in s], **st)
            st.update(label=st["label"] + " p99", lw=0.8, alpha=0.6)
            st["ls"] = ":" if svc == "dating" else "-."
            ax.plot([p["t"] for p in s], [p["p99"] for p in s], **st)
        ax.set_title("call-setup delay (INVITE→200), %s (%d executions): mean and p99 per 5 s"
                     % ("expected load" if lvl == "expected" else "overload", loads[lvl]))
        ax.set_ylabel("ms (SIPp clock, 1 ms nominal)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("time since load start (s)")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "dating-latency.png"), dpi=100)
    plt.close(fig)
    made.append("dating-latency.png")
    return made


def rereport(args):
    """Rebuild dating.{md,json} and the plots from the raw result.json files of the runs named
    in bench/results/dating.json (after a change of the report code)."""
    with open(os.path.join(RESULTS, "dating.json")) as f:
        old = json.load(f)
    runs, runs_swapped = {}, {}
    for into, listed in ((runs, old["runs"]), (runs_swapped, old.get("runs_swapped") or {})):
        for key, c in listed.items():
            lvl, svc = key.split("/")
            into[(lvl, svc)] = c if c.get("missing") else raw_result(c)
    args.quick = old.get("mode") == "quick"
    args.side_by_side = old.get("side_by_side", False)
    args.swap_sides = old.get("side_by_side_first") == "dating_manual"
    args.dating_cpu = old.get("dating_cpu_limit", args.dating_cpu)
    args.dating_cpus = old.get("dating_cpus", args.dating_cpus)
    if old.get("binary"):
        global BINARY
        BINARY = os.path.join(REPO, old["binary"])
    args.duration = old.get("duration_s")
    args.answer_delay = old.get("media_answer_delay", args.answer_delay)
    missing = old.get("manual_version")
    if missing and missing.startswith("missing: "):
        missing = missing[len("missing: "):]
    report(args, old["machine"], old["capacity_executions"], old.get("capacity_source"),
           old.get("capacity_levels") or [], old["loads"], runs, missing, runs_swapped)


def raw_result(c):
    """A run's raw result.json, as the report named it in `c` (its compact entry)."""
    with open(os.path.join(REPO, c["rawdir"], "result.json")) as f:
        r = json.load(f)
    # set by run_side_by_side after the raw result was written: kept from the report
    for k in ("start_skew_s", "other_load"):
        if k in c:
            r[k] = c[k]
    if r.get("cpu_us_per_message") is None and r.get("cpu_dating_hold") and r.get("throughput_mps_hold"):
        r["cpu_us_per_message"] = round(1e6 * r["cpu_dating_hold"] / r["throughput_mps_hold"], 1)
    inv = r["invariants"]
    if not r.get("transitions"):          # no transition metric: pairing not measurable
        inv["pairing_ok"] = None
    inv["ok"] = bool(inv["drained"] and inv["pairing_ok"] is not False
                     and inv["all_calls_completed"] and inv["no_ambiguous"]
                     and inv.get("unpaired_ok", True))
    return r


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--service", default="dating", help="dating or dating_manual (single run)")
    ap.add_argument("--target", type=int, default=80, help="concurrent executions (single run)")
    ap.add_argument("--duration", type=int, default=None, help="load duration per run, s (300; --quick 40)")
    ap.add_argument("--quick", action="store_true", help="~40 s runs")
    ap.add_argument("--capacity", action="store_true", help="capacity search only")
    ap.add_argument("--compare", action="store_true", help="both versions at 80 %% and 100 %% of capacity")
    ap.add_argument("--capacity-executions", type=int, default=None, help="skip the search")
    ap.add_argument("--aa", metavar="SERVICE", default=None,
                    help="A/A check of the side-by-side rig: SERVICE against itself at 80 %% and "
                         "100 %% of --capacity-executions (writes bench/results/dating-aa.*)")
    ap.add_argument("--contract-service", default="dating_compiled",
                    help="what runs the contract version: dating_compiled (default: the contract "
                         "compiled to Rust, tandem_engine::dispatch) or dating (the engine, "
                         "negotiating per message); reported as `dating`")
    ap.add_argument("--side-by-side", action="store_true",
                    help="--compare runs both versions at the same time (each with its own "
                         "media service and SIPp), so machine noise falls on both")
    ap.add_argument("--rereport", action="store_true",
                    help="rebuild bench/results/dating.* from the raw files of the last --compare")
    ap.add_argument("--capacity-start", type=int, default=40)
    ap.add_argument("--capacity-factor", type=float, default=2.0)
    ap.add_argument("--capacity-max", type=int, default=100000)
    ap.add_argument("--capacity-duration", type=int, default=None, help="s per search level (default: --duration)")
    ap.add_argument("--no-refine", dest="refine", action="store_false")
    ap.add_argument("--start-rate", type=float, default=10.0, help="calls/s at start (10)")
    ap.add_argument("--rate-step", type=float, default=5.0, help="calls/s added per interval (5)")
    ap.add_argument("--rate-interval", type=int, default=10, help="s between increases (10)")
    ap.add_argument("--warmup-s", type=float, default=0.0,
                    help="extra seconds excluded at the start of the measured load (the "
                         "warm-up calls before it are always excluded)")
    # 75 s: a caller that vanishes after our 200 (SIPp aborting a call on a race at the end of a
    # run) is ended by the protocol's own timers: the 200 is retransmitted until Timer H (64 *
    # T1 = 32 s), then the BYE sent instead waits up to Timer F (another 32 s). Shorter, such an
    # execution counts as left behind although its end is already on its way.
    ap.add_argument("--drain", type=float, default=75.0, help="s allowed for sessions to drain (75)")
    ap.add_argument("--answer-delay", default="5ms", help="media.answer_delay (5ms)")
    ap.add_argument("--capture", action="store_true",
                    help="tcpdump the caller leg for sub-millisecond setup delays (its packet "
                         "filter runs in the sender's context: under --dating-cpu it is charged "
                         "to the capped tandem, which then saturates earlier)")
    ap.add_argument("--dating-cpu", type=float, default=0.0,
                    help="cap the dating tandem at this many cores (cgroup CFS quota; 0: no cap). "
                         "On a machine where SIPp saturates first, a cap makes the server the "
                         "bottleneck; both versions get the same cap")
    ap.add_argument("--dating-cpus", type=cpu_list, default=None,
                    help="run every dating tandem on these CPUs only (e.g. 1, or 0-1; default: "
                         "any). Side by side, one CPU for both versions puts them on the same "
                         "(virtual) CPU, so that what slows one CPU of a shared host down falls "
                         "on both, as the run's other disturbances do")
    ap.add_argument("--swap-sides", action="store_true",
                    help="side by side: run dating_manual in the driver's main thread and dating "
                         "in the second one (default: the other way round), to tell the rig's "
                         "own asymmetry from the versions'")
    ap.add_argument("--both-orders", action="store_true",
                    help="--compare --side-by-side: at each load run the pair twice, the contract "
                         "version in the driver's main thread and then the hand-optimized one, and "
                         "report the geometric means of the two orders' ratios (a side bias "
                         "cancels); twice as long")
    ap.add_argument("--binary", default=None,
                    help="the tandem binary for every tandem of the run (default "
                         "target/release/tandem), e.g. target/pgo/release/tandem from "
                         "bench/dating/pgo.sh; recorded in dating.json and the report")
    args = ap.parse_args()
    if args.both_orders and (not (args.compare and args.side_by_side) or args.swap_sides):
        ap.error("--both-orders goes with --compare --side-by-side, and not with --swap-sides")
    if args.binary:
        global BINARY
        BINARY = os.path.abspath(args.binary)
    # SIGTERM / SIGINT: unwind so that the finally blocks stop our SIPps and tandems
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.duration is None:
        args.duration = 40 if args.quick else 300
    # Levels as long as the compared runs: a shorter hold at the same concurrency can pass where
    # the 300-s run reaches the executors' queue limit and sheds calls (2026-11-29, Intel: 60-s
    # levels accepted 3,050, where both versions shed calls in 300-s runs).
    if args.capacity_duration is None:
        args.capacity_duration = args.duration
    if not os.path.exists(BINARY):
        raise SystemExit("%s missing: cd %s && cargo build --release -p tandem" % (BINARY, REPO))
    if shutil.which("sipp") is None:
        raise SystemExit("sipp not found (apt-get install sip-tester)")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("matplotlib missing; installing it with pip (or run `pip install matplotlib`)")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"])
    busy = other_load()
    if busy:
        log("WARNING: other SIPp/tandem processes are running and will disturb the figures:\n  "
            + "\n  ".join(busy))
    if args.aa:
        aa_check(args)
    elif args.rereport:
        rereport(args)
    elif args.compare:
        compare(args)
    elif args.capacity:
        missing = service_available("dating_manual")
        svc = "dating" if missing else "dating_manual"
        if missing:
            log("dating_manual missing (%s): searching the contract version's capacity" % missing)
        cap, levels = capacity_search(svc, args)
        log("capacity_executions = %s (%s)" % (cap, svc))
        with open(os.path.join(RESULTS, "raw", "dating", "capacity-%s.json" % time.strftime(
                "%Y%m%d-%H%M%S")), "w") as f:
            json.dump({"service": svc, "capacity_executions": cap, "levels": levels}, f, indent=1)
    else:
        r = run_once(args.service, args.target, args.duration, args)
        log(summary_line(r))
        return 0 if r.get("missing") or r["invariants"]["ok"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
