"""Shared helpers for Tandem's system tests (Python 3 standard library only).

What lives here:
  * Skip / Failure exceptions and check() for assertions with a message;
  * Env: the per-run settings (binary, log directory, conformance corpus);
  * free_port(): a port number free for both UDP and TCP on 127.0.0.1;
  * Tandem: start `tandem run ...` (optionally inside a network namespace),
    wait for /health, stop with SIGTERM and assert exit 0 and no panic;
  * run_sipp() / start_sipp(): SIPp in the foreground with a timeout, with its
    statistics (-trace_stat), screen (-trace_screen) and errors kept;
  * netns(): a private network namespace, always deleted afterwards;
  * a tiny SIP toolkit: build requests (OPTIONS with unique branch/Call-ID),
    parse messages, frame a TCP stream, send OPTIONS over UDP or TCP;
  * Prometheus text parsing for /metrics.

This file is also a small command-line tool, used to reach an admin endpoint
from inside a network namespace:
    python3 common.py wait-http URL TIMEOUT      exit 0 once URL answers 200
    python3 common.py get URL                    print the body (exit 1 on error)
"""

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCENARIOS = os.path.join(HERE, "scenarios")

HEALTH_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0


class Skip(Exception):
    """The test cannot run here (missing privilege, tool or corpus)."""


class Failure(AssertionError):
    """A check failed."""


def check(cond, msg):
    if not cond:
        raise Failure(msg)


# --------------------------------------------------------------------------
# Environment and logs
# --------------------------------------------------------------------------

class Env:
    """Settings for one run of the suite; one log directory per test case."""

    def __init__(self, binary, workdir, conformance_dir=None, verbose=False):
        self.binary = os.path.abspath(binary)
        self.workdir = workdir
        self.conformance_dir = conformance_dir
        self.verbose = verbose
        self.test_dir = workdir
        self.logs = []  # log files written by the current test case

    def begin_test(self, name):
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        self.test_dir = os.path.join(self.workdir, safe)
        os.makedirs(self.test_dir, exist_ok=True)
        self.logs = []

    def log_path(self, name):
        """A fresh path in the current test's directory, registered for tails."""
        base = os.path.join(self.test_dir, name)
        path, n = base, 1
        while os.path.exists(path) or path in self.logs:
            n += 1
            root, ext = os.path.splitext(base)
            path = "%s.%d%s" % (root, n, ext)
        self.logs.append(path)
        return path

    def register_log(self, path):
        if path not in self.logs:
            self.logs.append(path)

    def log(self, msg):
        if self.verbose:
            print("    " + msg, flush=True)


def tail(path, lines=25, max_bytes=64 * 1024, max_chars=3000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError as e:
        return "<cannot read %s: %s>" % (path, e)
    text = "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
    if len(text) > max_chars:
        text = "[...]" + text[-max_chars:]
    return text


def default_conformance_dir():
    d = os.environ.get("TANDEM_CONFORMANCE_DIR")
    if d:
        return d
    return os.path.normpath(os.path.join(REPO, "..", "shared", "conformance"))


# --------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------

_used_ports = set()


def free_port(host="127.0.0.1"):
    """A port that is free for both TCP and UDP on host (and not handed out before)."""
    for _ in range(200):
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind((host, 0))
            port = t.getsockname()[1]
            if port in _used_ports or port < 10000:
                continue
            try:
                u.bind((host, port))
            except OSError:
                continue
            _used_ports.add(port)
            return port
        finally:
            t.close()
            u.close()
    raise RuntimeError("no free port found")


# --------------------------------------------------------------------------
# Network namespace
# --------------------------------------------------------------------------

def ns_prefix(ns):
    return ["ip", "netns", "exec", ns] if ns else []


@contextlib.contextmanager
def netns(tag="tandem"):
    """A private network namespace with only `lo` up; deleted on exit.

    Raises Skip when not root or when `ip netns` does not work here.
    """
    if os.geteuid() != 0:
        raise Skip("needs root to create a network namespace (ip netns add)")
    if not shutil.which("ip"):
        raise Skip("`ip` (iproute2) not installed; run scripts/install-test-deps.sh")
    name = "%s-%d-%s" % (tag, os.getpid(), uuid.uuid4().hex[:6])
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip("`ip netns add %s` failed: %s" % (name, r.stderr.strip()))
    try:
        r = subprocess.run(ns_prefix(name) + ["ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip("`ip netns exec %s ip link set lo up` failed: %s" % (name, r.stderr.strip()))
        yield name
    finally:
        # Anything still running inside our private namespace is ours: stop it by pid.
        r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        for pid in r.stdout.split():
            with contextlib.suppress(Exception):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def ns_python(ns, args, timeout, stdout=None, stderr=None):
    """Run `python3 <args>` inside namespace ns (or here when ns is None)."""
    cmd = ns_prefix(ns) + [sys.executable] + list(args)
    return subprocess.run(cmd, timeout=timeout, stdout=stdout, stderr=stderr)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

def kill_group(proc, sig=signal.SIGKILL):
    """Signal proc's process group (it was started with start_new_session)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def stop_process(proc, timeout=5.0):
    """SIGTERM, wait, then SIGKILL. Returns the exit code (None if it had to be killed)."""
    if proc.poll() is not None:
        return proc.returncode
    kill_group(proc, signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        return None


def http_get(url, timeout=2.0):
    """(status, body text) — status None on connection errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None, ""


class Tandem:
    """One `tandem run` process.

    listen: list of (proto, ip, port); admin: (ip, port). With ns set, the
    process runs inside that network namespace (`ip netns exec` execs tandem,
    so the pid we hold is tandem's own).
    """

    def __init__(self, env, name="tandem", service=None, sets=(), listen=None,
                 admin=None, ns=None, extra_args=(), host="127.0.0.1"):
        self.env = env
        self.name = name
        self.ns = ns
        self.host = host
        if listen is None:
            p = free_port()
            listen = [("udp", host, p), ("tcp", host, p)]
        self.listen = list(listen)
        self.admin = admin or (host, free_port())
        self.service = service
        self.sets = list(sets)
        self.extra_args = list(extra_args)
        self.proc = None
        self.stopped = False
        self.stdout_path = env.log_path(name + ".stdout.log")
        self.stderr_path = env.log_path(name + ".stderr.log")

    # addresses ---------------------------------------------------------
    def addr(self, proto="udp"):
        for p, ip, port in self.listen:
            if p == proto:
                return (ip, port)
        raise KeyError(proto)

    @property
    def admin_url(self):
        return "http://%s:%d" % self.admin

    def argv(self):
        a = [self.env.binary, "run"]
        for proto, ip, port in self.listen:
            a += ["--listen", "%s:%s:%d" % (proto, ip, port)]
        a += ["--admin", "%s:%d" % self.admin]
        if self.service:
            a += ["--service", self.service]
        for s in self.sets:
            a += ["--set", s]
        return a + self.extra_args

    # lifecycle ---------------------------------------------------------
    def start(self, wait=True):
        cmd = ns_prefix(self.ns) + self.argv()
        self.env.log("start: " + " ".join(cmd))
        envv = dict(os.environ)
        envv.setdefault("RUST_BACKTRACE", "1")
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=self._err, env=envv, start_new_session=True)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout=HEALTH_TIMEOUT):
        url = self.admin_url + "/health"
        deadline = time.monotonic() + timeout
        if self.ns:
            # The admin port lives in the namespace: poll from a helper inside it,
            # while watching that tandem itself stays up.
            helper = subprocess.Popen(
                ns_prefix(self.ns) + [sys.executable, os.path.join(HERE, "common.py"),
                                      "wait-http", url, str(timeout)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while True:
                    rc = helper.poll()
                    if rc is not None:
                        check(rc == 0, "%s: %s did not answer 200 within %.0f s"
                              % (self.name, url, timeout))
                        return
                    if self.proc.poll() is not None:
                        raise Failure("%s exited with code %s before becoming healthy"
                                      % (self.name, self.proc.returncode))
                    if time.monotonic() > deadline + 5:
                        raise Failure("%s: health helper hung" % self.name)
                    time.sleep(0.05)
            finally:
                if helper.poll() is None:
                    helper.kill()
                    helper.wait()
        while True:
            if self.proc.poll() is not None:
                raise Failure("%s exited with code %s before becoming healthy"
                              % (self.name, self.proc.returncode))
            status, _ = http_get(url, timeout=1.0)
            if status == 200:
                return
            if time.monotonic() > deadline:
                raise Failure("%s: %s did not answer 200 within %.0f s (last status %s)"
                              % (self.name, url, timeout, status))
            time.sleep(0.05)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def get(self, path, timeout=3.0):
        """(status, body) of an admin GET; works inside a namespace too."""
        url = self.admin_url + path
        if not self.ns:
            return http_get(url, timeout=timeout)
        r = subprocess.run(ns_prefix(self.ns) + [sys.executable, os.path.join(HERE, "common.py"),
                                                 "get", url],
                           capture_output=True, timeout=timeout + 10)
        out = r.stdout.decode("utf-8", "replace")
        if r.returncode != 0:
            return None, out
        status, _, body = out.partition("\n")
        return int(status), body

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stdout_text(self):
        try:
            with open(self.stdout_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def check_no_panic(self):
        err = self.stderr_text() + self.stdout_text()
        check("panicked" not in err, "%s: 'panicked' found in its output:\n%s"
              % (self.name, "\n".join(l for l in err.splitlines() if "panicked" in l)[:2000]))

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM; assert exit code 0 within timeout and no panic in stderr."""
        check(self.proc is not None, "%s was never started" % self.name)
        if self.proc.poll() is not None:
            self.stopped = True
            self.check_no_panic()
            raise Failure("%s had already exited (code %s) before SIGTERM"
                          % (self.name, self.proc.returncode))
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            self.proc.wait()
            self.stopped = True
            raise Failure("%s did not exit within %.0f s of SIGTERM" % (self.name, timeout))
        self.stopped = True
        self.env.log("%s exited %s after %.2f s" % (self.name, rc, time.monotonic() - t0))
        self.check_no_panic()
        check(rc == 0, "%s exited with code %s after SIGTERM (expected 0)" % (self.name, rc))
        return rc

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if f:
                with contextlib.suppress(Exception):
                    f.close()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, *exc):
        self.kill()
        return False


# --------------------------------------------------------------------------
# SIPp
# --------------------------------------------------------------------------

def require_sipp():
    if not shutil.which("sipp"):
        raise Skip("sipp not installed (Debian package sip-tester); run scripts/install-test-deps.sh")


class SippResult:
    def __init__(self, name, rc, timed_out, stats, files):
        self.name = name
        self.rc = rc
        self.timed_out = timed_out
        self.stats = stats  # dict of the last -trace_stat row ({} if none)
        self.files = files

    def stat(self, key, default=None):
        v = self.stats.get(key)
        if v is None:
            return default
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return v

    def summary(self):
        return ("sipp %s: exit=%s%s created=%s successful=%s failed=%s "
                "(maxUDPretrans=%s unexpected=%s cannotsend=%s)" % (
                    self.name, self.rc, " TIMED OUT" if self.timed_out else "",
                    self.stat("TotalCallCreated"), self.stat("SuccessfulCall(C)"),
                    self.stat("FailedCall(C)"), self.stat("FailedMaxUDPRetrans(C)"),
                    self.stat("FailedUnexpectedMessage(C)"),
                    self.stat("FailedCannotSendMessage(C)")))


def read_sipp_stats(path):
    """Last row of a SIPp -trace_stat CSV as a dict (header names as keys)."""
    try:
        with open(path, "r", encoding="latin-1") as f:
            rows = [l.rstrip("\r\n") for l in f if l.strip()]
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    header = rows[0].split(";")
    last = rows[-1].split(";")
    return dict(zip(header, last))


def sipp_args(env, name, extra_trace=()):
    """Common tracing flags; all files go to the current test directory."""
    d = env.test_dir
    files = {
        "stat": os.path.join(d, name + ".stat.csv"),
        "screen": os.path.join(d, name + ".screen.log"),
        "errors": os.path.join(d, name + ".errors.log"),
        "stdout": os.path.join(d, name + ".stdout.log"),
    }
    args = ["-nostdin",
            "-trace_stat", "-stf", files["stat"], "-fd", "1",
            "-trace_screen", "-screen_file", files["screen"],
            "-trace_err", "-error_file", files["errors"]]
    for f in ("screen", "errors", "stdout"):
        env.register_log(files[f])
    return args + list(extra_trace), files


def run_sipp(env, name, args, timeout):
    """Run sipp in the foreground (own process group) with a wall-clock timeout."""
    require_sipp()
    trace, files = sipp_args(env, name)
    cmd = ["sipp"] + list(args) + trace
    env.log("run: " + " ".join(cmd))
    with open(files["stdout"], "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=env.test_dir, start_new_session=True)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                rc = proc.wait()
        finally:
            kill_group(proc)
    return SippResult(name, rc, timed_out, read_sipp_stats(files["stat"]), files)


def check_sipp_all_ok(res, calls):
    """sipp ended by itself with exit 0 and exactly `calls` successful, 0 failed calls."""
    check(not res.timed_out, "%s (killed after the test's timeout)" % res.summary())
    check(res.stats, "sipp %s wrote no statistics (exit %s)" % (res.name, res.rc))
    check(res.rc == 0, "%s; sipp exits 0 only if every call succeeded" % res.summary())
    check(res.stat("SuccessfulCall(C)") == calls,
          "%s; expected %d successful calls" % (res.summary(), calls))
    check(res.stat("FailedCall(C)") == 0, "%s; expected 0 failed calls" % res.summary())


def wait_port_bound(proto, port, timeout=5.0, host="127.0.0.1"):
    """Wait until some process has bound proto host:port (so a bind attempt fails)."""
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind((host, port))
        except OSError:
            return True
        finally:
            s.close()
        time.sleep(0.05)
    return False


class BackgroundSipp:
    """A sipp (e.g. a UAS) running while something else drives load."""

    def __init__(self, env, name, args):
        require_sipp()
        self.env = env
        self.name = name
        trace, self.files = sipp_args(env, name)
        self.cmd = ["sipp"] + list(args) + trace
        self.proc = None

    def start(self):
        self.env.log("start: " + " ".join(self.cmd))
        self._out = open(self.files["stdout"], "wb")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=subprocess.STDOUT, cwd=self.env.test_dir,
                                     start_new_session=True)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout):
        """Exit code, or None if still running after timeout."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stats(self):
        return read_sipp_stats(self.files["stat"])

    def result(self, timeout):
        """Waits up to `timeout` s for it to exit; its SippResult (timed out if still running)."""
        rc = self.wait(timeout=timeout)
        return SippResult(self.name, rc, rc is None, self.stats(), self.files)

    def check_completed(self, calls, timeout=30, label=None):
        """Waits for it to exit and checks exit 0 with `calls` successful calls; returns the result."""
        st = self.result(timeout)
        self.env.log(st.summary())
        check(st.rc == 0 and st.stat("SuccessfulCall(C)") == calls,
              "%s: %s; expected exit 0 and %d successful calls" % (label or "sipp " + self.name, st.summary(), calls))
        return st

    def stop(self):
        if self.proc is not None:
            stop_process(self.proc, timeout=5)
        with contextlib.suppress(Exception):
            self._out.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


# --------------------------------------------------------------------------
# SIP toolkit
# --------------------------------------------------------------------------

COMPACT = {
    "i": "call-id", "m": "contact", "e": "content-encoding", "l": "content-length",
    "c": "content-type", "f": "from", "s": "subject", "k": "supported", "t": "to",
    "v": "via", "o": "event", "r": "refer-to", "u": "allow-events", "x": "session-expires",
}


def new_branch():
    return "z9hG4bK-t-" + uuid.uuid4().hex[:20]


def new_call_id(tag="t"):
    return "%s-%s@tandem.test" % (tag, uuid.uuid4().hex[:20])


def build_request(method, ruri, local, transport="UDP", call_id=None, cseq=1,
                  from_tag=None, to_hdr=None, branch=None, extra_headers=(), body=b"",
                  content_type=None, max_forwards=70):
    """Build a request as bytes. local = (ip, port) for Via/Contact."""
    call_id = call_id or new_call_id(method.lower())
    from_tag = from_tag or uuid.uuid4().hex[:10]
    branch = branch or new_branch()
    to_hdr = to_hdr or "<%s>" % ruri
    lines = [
        "%s %s SIP/2.0" % (method, ruri),
        "Via: SIP/2.0/%s %s:%d;branch=%s;rport" % (transport, local[0], local[1], branch),
        "Max-Forwards: %d" % max_forwards,
        "From: <sip:tester@%s>;tag=%s" % (local[0], from_tag),
        "To: %s" % to_hdr,
        "Call-ID: %s" % call_id,
        "CSeq: %d %s" % (cseq, method),
        "Contact: <sip:tester@%s:%d>" % (local[0], local[1]),
    ]
    lines += list(extra_headers)
    if body:
        lines.append("Content-Type: %s" % (content_type or "application/sdp"))
    lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def build_options(server, local, transport="UDP", **kw):
    """A valid OPTIONS to server=(ip, port) with a unique branch and Call-ID."""
    ruri = "sip:ping@%s:%d" % server
    return build_request("OPTIONS", ruri, local, transport=transport,
                         extra_headers=["Accept: application/sdp"], **kw)


SDP_OFFER = (b"v=0\r\no=tester 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\n"
             b"t=0 0\r\nm=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n")


class SipMessage:
    def __init__(self, raw, first_line, headers, body):
        self.raw = raw
        self.first_line = first_line
        self.headers = headers  # list of (canonical lowercase name, value)
        self.body = body
        self.is_response = first_line.startswith("SIP/")
        self.code = None
        self.reason = ""
        self.method = None
        if self.is_response:
            parts = first_line.split(" ", 2)
            if len(parts) >= 2 and parts[1].isdigit():
                self.code = int(parts[1])
            self.reason = parts[2] if len(parts) > 2 else ""
        else:
            self.method = first_line.split(" ", 1)[0]

    def get(self, name, default=None):
        name = name.lower()
        for n, v in self.headers:
            if n == name:
                return v
        return default

    def get_all(self, name):
        name = name.lower()
        return [v for n, v in self.headers if n == name]

    def cseq(self):
        v = self.get("cseq", "")
        parts = v.split()
        if len(parts) >= 2:
            return parts[0], parts[1]
        return None, None

    def cseq_method(self):
        return self.cseq()[1]

    def to_tag(self):
        m = re.search(r";\s*tag\s*=\s*([^;,\s>]+)", self.get("to", "") or "")
        return m.group(1) if m else None

    def __repr__(self):
        return "<SipMessage %r>" % self.first_line


def parse_message(data):
    """Parse bytes into a SipMessage (lenient), or None if there is no header end."""
    if isinstance(data, str):
        data = data.encode("latin-1")
    end = data.find(b"\r\n\r\n")
    sep = 4
    if end < 0:
        end = data.find(b"\n\n")
        sep = 2
        if end < 0:
            return None
    head = data[:end].decode("utf-8", "replace")
    body = data[end + sep:]
    lines = re.split(r"\r?\n", head)
    first = lines[0]
    headers = []
    for line in lines[1:]:
        if line[:1] in (" ", "\t") and headers:
            n, v = headers[-1]
            headers[-1] = (n, v + " " + line.strip())
            continue
        if ":" not in line:
            continue
        n, v = line.split(":", 1)
        n = n.strip().lower()
        n = COMPACT.get(n, n)
        headers.append((n, v.strip()))
    return SipMessage(data, first, headers, body)


def header_block(data):
    end = data.find(b"\r\n\r\n")
    return data if end < 0 else data[:end]


class StreamReader:
    """Frames SIP messages on a TCP socket (CRLF keepalives skipped)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.closed = False

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        except OSError:
            self.closed = True
            return False
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def read(self, timeout):
        """Next complete message (SipMessage) or None on timeout/close."""
        deadline = time.monotonic() + timeout
        while True:
            while self.buf.startswith(b"\r\n"):
                self.buf = self.buf[2:]
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                m = re.search(rb"\r\n(?:content-length|l)[ \t]*:[ \t]*(\d+)", self.buf[:end + 2], re.I)
                clen = int(m.group(1)) if m else 0
                total = end + 4 + clen
                if len(self.buf) >= total:
                    raw, self.buf = self.buf[:total], self.buf[total:]
                    return parse_message(raw)
            if self.closed or not self._fill(deadline):
                return None


def build_ack_for_2xx(resp, local, transport="UDP", ruri=None):
    """ACK for a 2xx to INVITE, built from the response (RFC 3261 13.2.2.4)."""
    contact = resp.get("contact")
    if not ruri:
        if contact:
            m = re.search(r"<([^>]+)>", contact)
            ruri = m.group(1) if m else contact.split(";")[0].strip()
        else:
            m = re.search(r"<([^>]+)>", resp.get("to", ""))
            ruri = m.group(1) if m else (resp.get("to", "sip:invalid").split(";")[0].strip())
    num, _ = resp.cseq()
    lines = [
        "ACK %s SIP/2.0" % ruri,
        "Via: SIP/2.0/%s %s:%d;branch=%s;rport" % (transport, local[0], local[1], new_branch()),
        "Max-Forwards: 70",
        "From: %s" % resp.get("from", ""),
        "To: %s" % resp.get("to", ""),
        "Call-ID: %s" % resp.get("call-id", ""),
        "CSeq: %s ACK" % (num or "1"),
        "Content-Length: 0",
    ]
    for rr in reversed(resp.get_all("record-route")):
        lines.insert(3, "Route: %s" % rr)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def udp_socket(host="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    return s


def udp_collect(sock, timeout, until_final=False, grace=0.0):
    """Receive datagrams for up to timeout seconds; returns [(SipMessage|None, raw)].

    With until_final, stop `grace` seconds after the first final response.
    """
    out = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return out
        sock.settimeout(remaining)
        try:
            data, _ = sock.recvfrom(70000)
        except socket.timeout:
            return out
        except OSError:
            time.sleep(0.01)
            continue
        msg = parse_message(data)
        out.append((msg, data))
        if until_final and msg is not None and msg.code is not None and msg.code >= 200:
            deadline = min(deadline, time.monotonic() + grace)


def options_udp(server, timeout=2.0, host="127.0.0.1"):
    """Send a valid OPTIONS over UDP (retransmitted like Timer E) and return the
    final response (SipMessage) or None."""
    s = udp_socket(host)
    try:
        local = s.getsockname()
        msg = build_options(server, local, "UDP")
        call_id = parse_message(msg).get("call-id")
        deadline = time.monotonic() + timeout
        interval, next_send = 0.5, 0.0
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_send:
                s.sendto(msg, server)
                next_send = now + interval
                interval = min(interval * 2, 4.0)
            s.settimeout(max(0.01, min(next_send, deadline) - time.monotonic()))
            try:
                data, _ = s.recvfrom(70000)
            except socket.timeout:
                continue
            except OSError:
                continue
            r = parse_message(data)
            if r and r.code and r.code >= 200 and r.get("call-id") == call_id:
                return r
        return None
    finally:
        s.close()


def options_tcp(server, timeout=2.0):
    """Valid OPTIONS on a new TCP connection; final response or None."""
    try:
        s = socket.create_connection(server, timeout=timeout)
    except OSError:
        return None
    try:
        local = s.getsockname()
        msg = build_options(server, local, "TCP")
        s.sendall(msg)
        rd = StreamReader(s)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = rd.read(deadline - time.monotonic())
            if r is None:
                return None
            if r.code and r.code >= 200:
                return r
        return None
    finally:
        s.close()


# --------------------------------------------------------------------------
# Prometheus text format
# --------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """[(name, {label: value}, float)] for every sample line."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


def metric_sum(samples, name, **labels):
    """Sum of samples named name whose labels include all given ones; None if none."""
    vals = [v for n, l, v in samples
            if n == name and all(l.get(k) == want for k, want in labels.items())]
    return sum(vals) if vals else None


def wait_sessions_drained(t, timeout=15.0, what="tandem"):
    """Poll t's /metrics until it holds no application or SIP session; returns the metrics.
    Fails naming what is left after `timeout` seconds (a leg left behind)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        status, body = t.get("/metrics")
        check(status == 200, "GET /metrics answered %s" % status)
        m = parse_metrics(body)
        last = (metric_sum(m, "tandem_app_sessions"), metric_sum(m, "tandem_sip_sessions"))
        if last == (0, 0):
            return m
        time.sleep(0.3)
    raise Failure("%s still holds sessions %s s after the calls (app, sip) = %s" % (what, timeout, last))


def requests_in(samples, method, transport=None):
    """tandem_messages_in_total for requests of `method` (status_class="request" when the
    metric carries that label; otherwise all samples of the method)."""
    labels = {"method": method}
    if transport:
        labels["transport"] = transport
    if any("status_class" in l for n, l, _ in samples if n == "tandem_messages_in_total"):
        labels["status_class"] = "request"
    return metric_sum(samples, "tandem_messages_in_total", **labels)


# --------------------------------------------------------------------------
# misc
# --------------------------------------------------------------------------

def seeded_rng(seed):
    return random.Random(seed)


def dump_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)


def _cli(argv):
    if len(argv) >= 3 and argv[1] == "wait-http":
        url, timeout = argv[2], float(argv[3]) if len(argv) > 3 else HEALTH_TIMEOUT
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _ = http_get(url, timeout=1.0)
            if status == 200:
                return 0
            time.sleep(0.05)
        return 1
    if len(argv) >= 3 and argv[1] == "get":
        status, body = http_get(argv[2], timeout=3.0)
        if status is None:
            return 1
        sys.stdout.write("%d\n%s" % (status, body))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(_cli(sys.argv))
