"""A real browser (headless Chromium) calls through a SIP server over WSS (RFC 7118).

The page (tests/system/browser/) runs two JsSIP user agents: bob registers and
answers, alice registers and calls sip:bob@DOMAIN, hangs up after about a
second; browser_harness.run_browser_call() serves it, collects the page's
milestones and fails listing them when the call was not answered with WebRTC
SDP (see browser_harness.py).

Cases:
  * `kamailio`: the stand-in server, Kamailio with its websocket, registrar and
    usrloc modules on tls:127.0.0.1:P (browser/kamailio-wss.cfg.in) with a
    self-signed certificate from `openssl req -x509`. It checks the harness
    itself, while Tandem has no WSS listener.

A case against another server is one call of browser_call(env, wss_url, domain)
once that server listens; e.g. for Tandem, roughly:

    def case_tandem(env):
        browser_harness.require_browser()
        pki = test_tls.make_cert(env)
        port = common.free_port()
        t = common.Tandem(env, service=..., listen=[("wss", "127.0.0.1", port)], sets=test_tls.tls_sets(pki))
        with t:
            browser_call(env, "wss://127.0.0.1:%d" % port, "127.0.0.1")
            t.stop()
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import browser_harness  # noqa: E402
import common  # noqa: E402
import test_tls  # noqa: E402
from common import check  # noqa: E402

KAMAILIO_CFG_IN = os.path.join(HERE, "browser", "kamailio-wss.cfg.in")
KAMAILIO_TLS_CFG = """[server:default]
method = TLSv1.2+
verify_certificate = no
require_certificate = no
certificate = %(cert)s
private_key = %(key)s
"""
DOMAIN = "127.0.0.1"
TIMEOUT = 45.0


def browser_call(env, wss_url, domain=DOMAIN, timeout=TIMEOUT):
    """Run the page against wss_url; logs in the test directory; returns the harness's dict."""
    log_dir = os.path.join(env.test_dir, "browser")
    env.register_log(os.path.join(log_dir, "chromium.log"))
    r = browser_harness.run_browser_call(wss_url, domain, timeout=timeout, log_dir=log_dir)
    env.log("browser call via %s answered (%s, %.1f s):\n%s" % (wss_url, r["jssip"], r["elapsed"], r["text"]))
    return r


def require_kamailio_ws():
    test_tls.require_kamailio()
    mods = test_tls.kamailio_modules()
    for mod in ("websocket", "xhttp", "registrar", "usrloc", "nathelper"):
        if not os.path.isfile(os.path.join(mods, mod + ".so")):
            raise common.Skip("kamailio module %s.so missing (Debian package kamailio-websocket-modules "
                              "for websocket); run scripts/install-test-deps.sh" % mod)


def self_signed(env):
    """(cert, key) for 127.0.0.1 from `openssl req -x509` in the test directory."""
    if not shutil.which("openssl"):
        raise common.Skip("openssl not installed")
    d = os.path.join(env.test_dir, "pki")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "openssl req -x509 exited %s: %s" % (r.returncode, r.stderr[-1500:]))
    return cert, key


class KamailioWss:
    """Kamailio in the foreground (-DD -E) with browser/kamailio-wss.cfg.in."""

    def __init__(self, env, cert, key):
        self.env = env
        self.wss = common.free_port()
        d = os.path.join(env.test_dir, "kamailio")
        os.makedirs(d, exist_ok=True)
        tls_cfg = os.path.join(d, "tls.cfg")
        with open(tls_cfg, "w") as f:
            f.write(KAMAILIO_TLS_CFG % {"cert": cert, "key": key})
        with open(KAMAILIO_CFG_IN) as f:
            template = f.read()
        self.cfg = os.path.join(d, "kamailio.cfg")
        with open(self.cfg, "w") as f:
            f.write(template % {"wss": self.wss, "mpath": test_tls.kamailio_modules(), "tls_cfg": tls_cfg})
        self.dir = d
        self.log = env.log_path("kamailio.log")
        self.proc = None
        self._out = None

    @property
    def url(self):
        return "wss://127.0.0.1:%d" % self.wss

    def __enter__(self):
        cmd = ["kamailio", "-f", self.cfg, "-DD", "-E", "-w", self.dir, "-Y", self.dir,
               "-P", os.path.join(self.dir, "kamailio.pid"), "-m", "64", "-M", "16"]
        self.env.log("start: " + " ".join(cmd))
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT,
                                     cwd=self.dir, start_new_session=True)
        ok = common.wait_port_bound("tcp", self.wss, timeout=10)
        if not ok or self.proc.poll() is not None:
            self.__exit__()
            raise common.Failure("kamailio did not start (exit %s); see %s" % (self.proc.poll(), self.log))
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            common.stop_process(self.proc, timeout=5)
        if self._out is not None:
            self._out.close()
        return False


def case_kamailio(env):
    browser_harness.require_browser()
    require_kamailio_ws()
    cert, key = self_signed(env)
    with KamailioWss(env, cert, key) as k:
        r = browser_call(env, k.url)
        check(k.proc.poll() is None, "kamailio exited (code %s) during the call" % k.proc.returncode)
    names = r["names"]
    check("bob.ended" in names, "bob's session did not end after alice hung up:\n%s" % r["text"])


# Tandem as the browsers' server: REGISTER to the registrar, everything else to the proxy,
# which reaches the registered browsers over their own WSS connections.
TANDEM_ROUTES = 'route=[{service="registrar", method="REGISTER"}, {service="proxy"}]'


def case_tandem(env):
    browser_harness.require_browser()
    pki = test_tls.make_cert(env)
    port = common.free_port()
    t = common.Tandem(env, listen=[("wss", "127.0.0.1", port)], sets=test_tls.tls_sets(pki, TANDEM_ROUTES))
    with t:
        r = browser_call(env, "wss://127.0.0.1:%d" % port)
        check(t.proc.poll() is None, "tandem exited (code %s) during the call" % t.proc.returncode)
        _, metrics = common.http_get(t.admin_url + "/metrics")
        t.stop()
    names = r["names"]
    check("bob.ended" in names, "bob's session did not end after alice hung up:\n%s" % r["text"])
    check('transport="wss"} ' in metrics and 'method="INVITE",status_class="request",transport="wss"' in metrics,
          "tandem's metrics do not show the INVITE over WSS:\n%s" % metrics[:3000])


CASES = [("kamailio", case_kamailio), ("tandem", case_tandem)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_browser"] + sys.argv[1:]))
