"""SIP over TLS against real TLS-capable SIP peers from Debian.

Peers: sipsak (built with GnuTLS: `--transport tls`) and Kamailio with its TLS
module (packages kamailio, kamailio-tls-modules). Debian's SIPp (sip-tester) is
built without OpenSSL (`-t l1` answers "To use a TLS transport you must compile
SIPp with OpenSSL"), so calls over TLS put Kamailio on the TLS leg and SIPp on a
UDP leg.

Every case first writes a development CA, certificate and key with
`tandem cert --out-dir DIR` and runs tandem with `--set tls.certificate=...`.

Cases:
  * `options_sipsak`: sipsak sends OPTIONS over TLS to `tandem run --service uas`
    listening on tls:127.0.0.1:P (sipsak checks the certificate against the CA)
    and gets 200; the 200's Via says TLS; the metrics count the OPTIONS as tls.
  * `call_in_kamailio`: SIPp uac (UDP) -> Kamailio -> TLS -> tandem uas: calls
    set up and torn down over TLS (INVITE, ACK and BYE reach tandem over TLS;
    Kamailio checks tandem's certificate against the CA).
  * `server_hangs_up_kamailio`: the same with `uas.hold=1s` and SIPp waiting for
    the BYE (scenarios/uac_wait_bye.xml): tandem's BYEs go out over TLS along the
    Record-Route set (Kamailio's TLS entry first).
  * `call_out_kamailio`: SIPp uac (UDP) -> tandem proxy -> TLS -> Kamailio ->
    SIPp uas (UDP): Tandem connects out over TLS (proxy.next_hop=tls:...,
    checking Kamailio's certificate with tls.ca); every call succeeds at both
    ends and tandem counted INVITEs sent over tls.
  * `bad_input`: a raw TCP connection that sends half a ClientHello and stalls,
    and one that sends plain SIP instead of a handshake: the server never answers
    them in clear, closes both (the stalled one after tls.handshake_timeout), and
    sipsak's TLS OPTIONS gets 200 while the stalled handshake is pending and after.
  * `no_certificate`: `tandem run --listen tls:...` without a certificate exits
    non-zero with a message naming tls.certificate.
"""

import glob
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from common import check  # noqa: E402

CALLS = 20
RATE = 10


def kamailio_modules():
    """Kamailio's module directory (multiarch path), or None."""
    found = sorted(glob.glob("/usr/lib/*/kamailio/modules/tls.so"))
    return os.path.dirname(found[0]) if found else None


def make_cert(env):
    """`tandem cert` into the test directory: (ca, cert, key) paths."""
    out = os.path.join(env.test_dir, "pki")
    r = subprocess.run([env.binary, "cert", "--out-dir", out, "--host", "127.0.0.1", "--host", "localhost"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "tandem cert exited %s: %s" % (r.returncode, r.stderr[-1500:]))
    check("[tls]" in r.stdout and "certificate = " in r.stdout,
          "tandem cert did not print the [tls] lines:\n%s" % r.stdout)
    paths = tuple(os.path.join(out, f) for f in ("ca.pem", "cert.pem", "key.pem"))
    for p in paths:
        check(os.path.getsize(p) > 0, "tandem cert did not write %s" % p)
    check(os.stat(paths[2]).st_mode & 0o077 == 0, "key.pem is readable by others")
    return paths


def tls_sets(pki, *extra):
    ca, cert, key = pki
    return ["tls.certificate=" + cert, "tls.private_key=" + key, "tls.ca=" + ca] + list(extra)


def require_sipsak():
    if not shutil.which("sipsak"):
        raise common.Skip("sipsak not installed; run scripts/install-test-deps.sh")


def sipsak_options(env, port, ca, name="sipsak"):
    """sipsak's OPTIONS over TLS; (exit code, output)."""
    out = env.log_path(name + ".log")
    with open(out, "wb") as f:
        # The target goes in as the outbound proxy (-p): sipsak 0.9.8 checks the certificate
        # against the URI's host and port as one name ("127.0.0.1:5061") otherwise.
        r = subprocess.run(["sipsak", "-s", "sip:ping@127.0.0.1", "-p", "127.0.0.1:%d" % port, "--transport", "tls",
                            "--tls-ca-cert", ca, "-H", "127.0.0.1", "-vv"],
                           stdout=f, stderr=subprocess.STDOUT, timeout=30)
    with open(out, "rb") as f:
        return r.returncode, f.read().decode("utf-8", "replace")


def tls_tandem(env, pki, service, sets=(), udp=False):
    port = common.free_port()
    listen = [("tls", "127.0.0.1", port)]
    if udp:
        listen.append(("udp", "127.0.0.1", common.free_port()))
    return common.Tandem(env, name="tandem", service=service, listen=listen, sets=tls_sets(pki, *sets))


def counted(t, direction, method, transport):
    status, body = t.get("/metrics")
    check(status == 200, "GET /metrics answered %s" % status)
    samples = common.parse_metrics(body)
    name = "tandem_messages_%s_total" % direction
    return common.metric_sum(samples, name, method=method, transport=transport) or 0


# --------------------------------------------------------------------------
# sipsak
# --------------------------------------------------------------------------

def case_options_sipsak(env):
    require_sipsak()
    pki = make_cert(env)
    t = tls_tandem(env, pki, "uas")
    with t:
        ip, port = t.addr("tls")
        out = t.stdout_text()
        deadline = time.monotonic() + 3
        while "listening on tls:" not in out and time.monotonic() < deadline:
            time.sleep(0.05)
            out = t.stdout_text()
        check("listening on tls:%s:%d" % (ip, port) in out, "stdout lacks the tls listener line:\n%s" % out)
        rc, text = sipsak_options(env, port, pki[0])
        check(rc == 0 and "SIP/2.0 200" in text, "sipsak TLS OPTIONS exited %s; output:\n%s" % (rc, text[-2000:]))
        check("SIP/2.0/TLS" in text, "the 200 lacks a TLS Via; sipsak output:\n%s" % text[-2000:])
        n = counted(t, "in", "OPTIONS", "tls")
        check(n >= 1, 'tandem_messages_in_total{method="OPTIONS",transport="tls"} is %s' % n)
        t.stop()


# --------------------------------------------------------------------------
# Kamailio
# --------------------------------------------------------------------------

KAMAILIO_CFG = """#!KAMAILIO
debug=2
log_stderror=yes
children=2
tcp_children=2
auto_aliases=no
enable_tls=yes
listen=udp:127.0.0.1:%(udp)d
listen=tls:127.0.0.1:%(tls)d
mpath="%(mpath)s"
loadmodule "tls.so"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "textops.so"
loadmodule "siputils.so"
modparam("tls", "config", "%(tls_cfg)s")

# Requests received over UDP go to tandem over TLS; those received over TLS go to the UDP
# next hop. In-dialog requests with a Route set follow it; SIPp's built-in scenarios send
# ACK and BYE to the address of their INVITE without one, so those take the same way.
request_route {
    if (!mf_process_maxfwd_header("10")) { sl_send_reply("483", "Too Many Hops"); exit; }
    if (is_method("CANCEL")) { if (t_check_trans()) { t_relay(); } exit; }
    if (has_totag() && loose_route()) { t_relay(); exit; }
    if (!has_totag()) { record_route(); }
    if ($pr == "udp") {
        $du = "sip:127.0.0.1:%(to_tls)d;transport=tls";
    } else {
        $du = "sip:127.0.0.1:%(to_udp)d;transport=udp";
    }
    if (!t_relay()) { sl_reply_error(); }
}
"""

KAMAILIO_TLS_CFG = """[server:default]
method = TLSv1.2+
verify_certificate = no
require_certificate = no
certificate = %(cert)s
private_key = %(key)s

[client:default]
method = TLSv1.2+
verify_certificate = yes
require_certificate = yes
ca_list = %(ca)s
"""


def require_kamailio():
    if not shutil.which("kamailio") or not kamailio_modules():
        raise common.Skip("kamailio with its TLS module not installed (Debian packages kamailio, "
                          "kamailio-tls-modules); run scripts/install-test-deps.sh")


class Kamailio:
    """Kamailio in the foreground (-DD -E), with the config above."""

    def __init__(self, env, pki, to_tls=0, to_udp=0):
        ca, cert, key = pki
        self.env = env
        self.udp = common.free_port()
        self.tls = common.free_port()
        d = os.path.join(env.test_dir, "kamailio")
        os.makedirs(d, exist_ok=True)
        tls_cfg = os.path.join(d, "tls.cfg")
        with open(tls_cfg, "w") as f:
            f.write(KAMAILIO_TLS_CFG % {"cert": cert, "key": key, "ca": ca})
        self.cfg = os.path.join(d, "kamailio.cfg")
        with open(self.cfg, "w") as f:
            f.write(KAMAILIO_CFG % {"udp": self.udp, "tls": self.tls, "mpath": kamailio_modules(),
                                    "tls_cfg": tls_cfg, "to_tls": to_tls, "to_udp": to_udp})
        self.dir = d
        self.log = env.log_path("kamailio.log")
        self.proc = None

    def __enter__(self):
        cmd = ["kamailio", "-f", self.cfg, "-DD", "-E", "-w", self.dir, "-Y", self.dir,
               "-P", os.path.join(self.dir, "kamailio.pid"), "-m", "64", "-M", "16"]
        self.env.log("start: " + " ".join(cmd))
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT,
                                     cwd=self.dir, start_new_session=True)
        ok = common.wait_port_bound("tcp", self.tls, timeout=10) and common.wait_port_bound("udp", self.udp, timeout=5)
        if not ok or self.proc.poll() is not None:
            self.__exit__()
            raise common.Failure("kamailio did not start (exit %s); see %s" % (self.proc.poll(), self.log))
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            common.stop_process(self.proc, timeout=5)
        self._out.close()
        return False


def case_call_in_kamailio(env, server_hangs_up=False):
    common.require_sipp()
    require_kamailio()
    pki = make_cert(env)
    t = tls_tandem(env, pki, "uas", sets=["uas.hold=1s"] if server_hangs_up else [])
    with t:
        _, tls_port = t.addr("tls")
        with Kamailio(env, pki, to_tls=tls_port) as k:
            msgs = env.log_path("uac.messages.log")
            scenario = ["-sf", os.path.join(common.SCENARIOS, "uac_wait_bye.xml")] if server_hangs_up else ["-sn", "uac"]
            res = common.run_sipp(env, "uac", scenario + [
                "127.0.0.1:%d" % k.udp, "-t", "u1", "-trace_msg", "-message_file", msgs,
                "-i", "127.0.0.1", "-p", str(common.free_port()),
                "-r", str(RATE), "-m", str(CALLS), "-timeout", "60s", "-timeout_error",
            ], timeout=90)
            env.log(res.summary())
            common.check_sipp_all_ok(res, CALLS)
        # Tandem's 200s (relayed by Kamailio) name a TLS contact; Kamailio record-routed on TLS.
        with open(msgs, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        contact = "Contact: <sip:127.0.0.1:%d;transport=tls>" % tls_port
        check(contact in text, "no %r in the responses SIPp received (%s)" % (contact, msgs))
        rr = "Record-Route: <sip:127.0.0.1:%d;transport=tls;" % k.tls
        check(rr in text, "no %r in the responses SIPp received (%s)" % (rr, msgs))
        for method in ("INVITE", "ACK", "BYE"):
            n = counted(t, "out" if server_hangs_up and method == "BYE" else "in", method, "tls")
            check(n >= CALLS, 'tandem_messages_%s_total{method="%s",transport="tls"} is %s, expected >= %d'
                  % ("out" if server_hangs_up and method == "BYE" else "in", method, n, CALLS))
        t.stop()


def case_call_out_kamailio(env):
    common.require_sipp()
    require_kamailio()
    pki = make_cert(env)
    uas_port = common.free_port()
    msgs = env.log_path("uas.messages.log")
    uas = common.BackgroundSipp(env, "uas", [
        "-sn", "uas", "-i", "127.0.0.1", "-p", str(uas_port), "-t", "u1", "-m", str(CALLS), "-timeout", "90s",
        "-trace_msg", "-message_file", msgs,
    ])
    with uas, Kamailio(env, pki, to_udp=uas_port) as k:
        check(common.wait_port_bound("udp", uas_port, timeout=10), "sipp uas did not bind udp %d" % uas_port)
        t = tls_tandem(env, pki, "proxy", sets=["proxy.next_hop=tls:127.0.0.1:%d" % k.tls], udp=True)
        with t:
            ip, port = t.addr("udp")
            res = common.run_sipp(env, "uac", [
                "-sn", "uac", "%s:%d" % (ip, port), "-t", "u1",
                "-i", "127.0.0.1", "-p", str(common.free_port()),
                "-r", str(RATE), "-m", str(CALLS), "-timeout", "60s", "-timeout_error",
            ], timeout=90)
            env.log(res.summary())
            common.check_sipp_all_ok(res, CALLS)
            uas.check_completed(CALLS, label="sipp uas behind Kamailio")
            # The INVITEs reached the uas with tandem's Via saying TLS (below Kamailio's).
            with open(msgs, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            via = "Via: SIP/2.0/TLS %s:%d" % t.addr("tls")
            check(via in text, "no %r in the requests the uas received (%s)" % (via, msgs))
            n = counted(t, "out", "INVITE", "tls")
            check(n >= CALLS, 'tandem_messages_out_total{method="INVITE",transport="tls"} is %s, expected >= %d'
                  % (n, CALLS))
            t.stop()


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------

PARTIAL_CLIENT_HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]) + b"\x00" * 20
HANDSHAKE_TIMEOUT = 2.0


def read_until_closed(sock, timeout):
    """Bytes read until the peer closes (or resets); None if still open after timeout."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data
    except socket.timeout:
        return None


def case_bad_input(env):
    require_sipsak()
    pki = make_cert(env)
    t = tls_tandem(env, pki, "uas", sets=["tls.handshake_timeout=%ds" % HANDSHAKE_TIMEOUT])
    with t:
        _, port = t.addr("tls")
        stalled = socket.create_connection(("127.0.0.1", port))
        garbage = socket.create_connection(("127.0.0.1", port))
        try:
            t0 = time.monotonic()
            stalled.sendall(PARTIAL_CLIENT_HELLO)
            garbage.sendall(common.build_options(("127.0.0.1", port), garbage.getsockname(), transport="TLS"))
            # While the partial handshake is pending, a proper client is served.
            rc, text = sipsak_options(env, port, pki[0], name="sipsak_during")
            check(rc == 0 and "SIP/2.0 200" in text,
                  "sipsak TLS OPTIONS during a stalled handshake exited %s; output:\n%s" % (rc, text[-2000:]))
            check(time.monotonic() - t0 < HANDSHAKE_TIMEOUT,
                  "sipsak was answered only after the stalled handshake's timeout")
            got = read_until_closed(garbage, 5)
            check(got is not None, "the connection that sent plain SIP was not closed within 5 s")
            check(b"SIP/2.0" not in got, "plain SIP on the TLS port was answered in clear: %r" % got[:200])
            got = read_until_closed(stalled, HANDSHAKE_TIMEOUT + 5)
            check(got is not None, "the stalled handshake was not closed within the handshake timeout + 5 s")
            check(time.monotonic() - t0 >= HANDSHAKE_TIMEOUT - 0.5,
                  "the stalled handshake was closed before its timeout (%.1f s)" % (time.monotonic() - t0))
        finally:
            stalled.close()
            garbage.close()
        status, body = t.get("/metrics")
        failed = common.metric_sum(common.parse_metrics(body), "tandem_tls_handshake_failures_total")
        check(failed == 2, "tandem_tls_handshake_failures_total is %s, expected 2" % failed)
        rc, text = sipsak_options(env, port, pki[0], name="sipsak_after")
        check(rc == 0 and "SIP/2.0 200" in text,
              "sipsak TLS OPTIONS after the bad connections exited %s; output:\n%s" % (rc, text[-2000:]))
        check(t.alive(), "tandem exited (code %s)" % t.proc.returncode)
        t.stop()


def case_no_certificate(env):
    port = common.free_port()
    r = subprocess.run([env.binary, "run", "--listen", "tls:127.0.0.1:%d" % port, "--admin", "127.0.0.1:%d"
                        % common.free_port()], capture_output=True, text=True, timeout=20)
    check(r.returncode != 0, "tandem run with a tls listener and no certificate exited 0")
    check("tls.certificate" in r.stderr, "the startup error does not name tls.certificate:\n%s" % r.stderr[-1500:])


CASES = [("options_sipsak", case_options_sipsak),
         ("call_in_kamailio", case_call_in_kamailio),
         ("server_hangs_up_kamailio", lambda env: case_call_in_kamailio(env, server_hangs_up=True)),
         ("call_out_kamailio", case_call_out_kamailio),
         ("bad_input", case_bad_input),
         ("no_certificate", case_no_certificate)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_tls"] + sys.argv[1:]))
