#!/usr/bin/env python3
"""A real browser calls through a SIP server over secure WebSocket (RFC 7118).

Headless Chromium loads tests/system/browser/index.html, where two JsSIP user
agents (npm package `jssip`, pinned in tests/system/browser/package.json) talk
to the server at a wss:// URL: bob registers and answers every call with
audio; alice registers, calls sip:bob@DOMAIN, and hangs up about one second
after the call is confirmed. The page reports each milestone with
GET /event?seq=N&name=...&detail=... to the small HTTP server here, which
also serves the page and JsSIP's browser bundle on 127.0.0.1 (an http:// page
on 127.0.0.1 is a secure context, so getUserMedia works, and may open wss://).

    run_browser_call(wss_url, domain, timeout=45, log_dir=None) -> dict

returns {"events": [(seq, name, detail), ...], "names": [...], ...} once the
call was answered (alice `accepted` and `confirmed`) and ended, and raises
common.Failure listing every event (and the tail of Chromium's stderr)
otherwise; common.Skip when chromium or the npm install is missing.

Command line, to point a browser at any server by hand:

    python3 tests/system/browser_harness.py wss://127.0.0.1:5443 127.0.0.1
"""

import contextlib
import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402

PAGE_DIR = os.path.join(HERE, "browser")
JSSIP_BUNDLE = os.path.join(PAGE_DIR, "node_modules", "jssip", "dist", "jssip.min.js")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

# Files the HTTP server hands out: URL path -> (file, content type).
FILES = {
    "/": (os.path.join(PAGE_DIR, "index.html"), "text/html; charset=utf-8"),
    "/index.html": (os.path.join(PAGE_DIR, "index.html"), "text/html; charset=utf-8"),
    "/call.js": (os.path.join(PAGE_DIR, "call.js"), "application/javascript; charset=utf-8"),
    "/jssip.min.js": (JSSIP_BUNDLE, "application/javascript; charset=utf-8"),
}

# The page's last word: alice's call ended or failed (or registration failed), UAs stopped.
DONE = "done"
ANSWERED = ("alice.accepted", "alice.confirmed")


def find_chromium():
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def require_browser():
    """Skip unless Chromium and the page's npm install are present."""
    if not find_chromium():
        raise common.Skip("chromium not installed (Debian package chromium); run scripts/install-test-deps.sh")
    if not os.path.isfile(JSSIP_BUNDLE):
        raise common.Skip("JsSIP bundle %s missing (npm ci in tests/system/browser); "
                          "run scripts/install-test-deps.sh" % os.path.relpath(JSSIP_BUNDLE, common.REPO))


class EventServer:
    """HTTP on 127.0.0.1: serves the page's files and records GET /event reports."""

    def __init__(self):
        self.events = []  # (seq, name, detail, monotonic time received)
        self.cond = threading.Condition()
        self.requests = []  # (path, status) of everything else asked for
        self.console = []  # (seq, text) of the page's console, from POST /log
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/event":
                    q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
                    seq = int((q.get("seq") or ["0"])[0] or 0)
                    ev = (seq, (q.get("name") or [""])[0], (q.get("detail") or [""])[0], time.monotonic())
                    with outer.cond:
                        outer.events.append(ev)
                        outer.cond.notify_all()
                    self._reply(204, b"", "text/plain")
                    return
                entry = FILES.get(url.path)
                if entry is None:
                    outer.requests.append((url.path, 404))
                    self._reply(404, b"not found\n", "text/plain")
                    return
                with open(entry[0], "rb") as f:
                    body = f.read()
                outer.requests.append((url.path, 200))
                self._reply(200, body, entry[1])

            def do_POST(self):  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length") or 0)
                text = self.rfile.read(n).decode("utf-8", "replace")
                if urllib.parse.urlsplit(self.path).path != "/log":
                    self._reply(404, b"not found\n", "text/plain")
                    return
                seq, _, _ = text.partition(" ")
                with outer.cond:
                    outer.console.append((int(seq) if seq.isdigit() else 0, text))
                self._reply(204, b"", "text/plain")

            def _reply(self, status, body, ctype):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if body:
                    self.wfile.write(body)

            def log_message(self, fmt, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="browser-events", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        return False

    def ordered(self):
        """Events in the page's order (fetches may arrive out of order)."""
        with self.cond:
            return sorted(self.events, key=lambda e: (e[0], e[3]))

    def write_console(self, path):
        with self.cond:
            lines = [t for _, t in sorted(self.console, key=lambda c: c[0])]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n" if lines else "")

    def wait_for(self, name, deadline, alive=lambda: True):
        """Wait until an event `name` arrived, the deadline passed, or alive() says no."""
        with self.cond:
            while True:
                if any(e[1] == name for e in self.events):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or not alive():
                    return False
                self.cond.wait(min(left, 0.2))


def wait_group_gone(pgid, timeout):
    """Wait until no process of group pgid is left (killed children take a moment to exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        time.sleep(0.05)
    return False


def chromium_command(chromium, url, profile):
    return [
        chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        "--user-data-dir=" + profile,
        "--no-first-run", "--no-default-browser-check", "--disable-extensions",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--autoplay-policy=no-user-gesture-required",
        # The page's console (JsSIP's errors) goes to stderr too.
        "--enable-logging=stderr", "--log-level=0",
        url,
    ]


def chromium_tail(path, lines=30):
    """The end of Chromium's stderr without its D-Bus noise (no system bus in containers)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return "<cannot read %s: %s>" % (path, e)
    kept = [l for l in text.splitlines() if "dbus/" not in l and "D-Bus" not in l]
    return "\n".join(kept[-lines:])


def format_events(events, t0=None):
    if not events:
        return "  (no events: the page never reported; did it load?)"
    base = t0 if t0 is not None else events[0][3]
    return "\n".join("  %3d %+7.3fs %-24s %s" % (seq, t - base, name, detail) for seq, name, detail, t in events)


def run_browser_call(wss_url, domain, timeout=45.0, log_dir=None, hold_ms=1000, chromium=None):
    """One call alice -> bob through the server at wss_url; see the module docstring.

    log_dir: where chromium.log goes (a temporary directory, removed on success, otherwise).
    Returns a dict: events [(seq, name, detail)], names [name], chromium_log, page_url, jssip.
    """
    require_browser()
    chromium = chromium or find_chromium()
    own_dir = log_dir is None
    if own_dir:
        log_dir = tempfile.mkdtemp(prefix="tandem-browser-")
    os.makedirs(log_dir, exist_ok=True)
    chromium_log = os.path.join(log_dir, "chromium.log")
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=log_dir)
    ok = False
    try:
        result = _run(srv_factory=EventServer, chromium=chromium, wss_url=wss_url, domain=domain,
                      timeout=timeout, hold_ms=hold_ms, profile=profile, chromium_log=chromium_log)
        ok = True
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if own_dir and ok:
        shutil.rmtree(log_dir, ignore_errors=True)
        result["chromium_log"] = result["page_log"] = None
    return result


def _run(srv_factory, chromium, wss_url, domain, timeout, hold_ms, profile, chromium_log):
    page_log = os.path.join(os.path.dirname(chromium_log), "page.log")
    with srv_factory() as srv:
        query = urllib.parse.urlencode({"wss": wss_url, "domain": domain, "hold": str(int(hold_ms))})
        page_url = "http://127.0.0.1:%d/index.html?%s" % (srv.port, query)
        cmd = chromium_command(chromium, page_url, profile)
        t0 = time.monotonic()
        with open(chromium_log, "wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            finished = srv.wait_for(DONE, t0 + timeout, alive=lambda: proc.poll() is None)
            exit_code = proc.poll()
        finally:
            # Chromium's whole process group: browser, renderer, GPU, network and zygote processes.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            wait_group_gone(proc.pid, timeout=10)
        events = srv.ordered()
        srv.write_console(page_log)
        names = [e[1] for e in events]
        jssip = next((d for _, n, d, _ in events if n == "page.loaded"), "")
        result = {
            "events": [(s, n, d) for s, n, d, _ in events],
            "names": names,
            "chromium_log": chromium_log,
            "page_log": page_log,
            "page_url": page_url,
            "jssip": jssip,
            "elapsed": time.monotonic() - t0,
        }
        problems = []
        if not finished:
            if exit_code is not None:
                problems.append("chromium exited with %s before the page said %r" % (exit_code, DONE))
            else:
                problems.append("the page did not say %r within %.0f s" % (DONE, timeout))
        for name in ("bob.registered", "alice.registered", "bob.newRTCSession") + ANSWERED + ("alice.ended",):
            if name not in names:
                problems.append("no %s" % name)
        for name in ("alice.failed", "page.error", "alice.registrationFailed", "bob.registrationFailed"):
            if name in names:
                problems.append("got %s" % name)
        accepted = next((d for _, n, d, _ in events if n == "alice.accepted"), None)
        if accepted is not None and not ("200" in accepted and "fingerprint" in accepted
                                         and "m=audio UDP/TLS/RTP/SAVPF" in accepted):
            problems.append("alice.accepted without a 200 carrying WebRTC SDP: %s" % accepted)
        if problems:
            served = ", ".join("%s %d" % r for r in srv.requests) or "nothing"
            raise common.Failure(
                "browser call via %s (domain %s) not answered: %s\n"
                "events from the page:\n%s\n"
                "HTTP requests served: %s\n"
                "page: %s\n"
                "--- tail of %s (D-Bus lines left out)\n%s\n"
                "--- the page's console, with JsSIP's debug log (every SIP message): %s"
                % (wss_url, domain, "; ".join(problems), format_events(events, t0), served, page_url,
                   chromium_log, chromium_tail(chromium_log), page_log))
        result["text"] = format_events(events, t0)
        return result


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wss_url")
    ap.add_argument("domain")
    ap.add_argument("--timeout", type=float, default=45.0)
    ap.add_argument("--log-dir")
    args = ap.parse_args(argv)
    try:
        r = run_browser_call(args.wss_url, args.domain, timeout=args.timeout, log_dir=args.log_dir)
    except common.Skip as e:
        print("SKIP: %s" % e)
        return 2
    except common.Failure as e:
        print("FAIL: %s" % e)
        return 1
    print("answered: %s\n%s" % (r["jssip"], r["text"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
