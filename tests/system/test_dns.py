"""RFC 3263: the proxy locates a next hop named by host through a real DNS server.

dnsmasq on 127.0.0.1 (a free port, only its own `.test` records, never forwarding) holds:
  uas.test      NAPTR order 10 SIP+D2T -> _sip._tcp.uas.test, order 20 SIP+D2U -> _sip._udp.uas.test
  _sip._tcp.uas.test  SRV -> host.uas.test:PORT_TCP   (a tandem `uas` listening on TCP there)
  _sip._udp.uas.test  SRV -> host.uas.test:PORT_DEAD  (nothing listens: chosen only if NAPTR order is ignored)
  srvonly.test  no NAPTR; _sip._udp SRV -> host.uas.test:PORT_UDP (the uas on UDP)
  host.uas.test A 127.0.0.1
A tandem `proxy` asks only that server (dns.nameserver); a second one has
proxy.next_hop = "sip:uas.test" (an outbound proxy named by host: the Request-URI, a
documentation address that is never contacted, does not matter). A UDP client sends OPTIONS to
sip:ping@uas.test and sip:ping@srvonly.test through the proxy: the uas's 200 comes back, over
TCP for the first (NAPTR order) and UDP for the second (SRV without NAPTR); sip:ping@failover.test
(SRV: first a TCP port where nothing listens, then the uas) fails over to the second target
(RFC 3263 §4.3); a name with no records gets 503 with a Warning saying why.
"""

import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from common import check  # noqa: E402


def dnsmasq_path():
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/sbin"]:
        p = os.path.join(d, "dnsmasq")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


class Dnsmasq:
    def __init__(self, env, records):
        self.env = env
        self.port = common.free_port()
        self.records = records
        self.log = env.log_path("dnsmasq.log")
        self.proc = None

    def __enter__(self):
        binary = dnsmasq_path()
        cmd = [binary, "--no-daemon", "--no-resolv", "--no-hosts", "--conf-file=/dev/null", "--pid-file=",
               "--log-facility=-", "--log-queries", "--listen-address=127.0.0.1", "--bind-interfaces",
               "--local=/test/", "--port=%d" % self.port] + self.records
        self.env.log("start: " + " ".join(cmd))
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        if not common.wait_port_bound("udp", self.port, timeout=10) or self.proc.poll() is not None:
            self.__exit__()
            raise common.Failure("dnsmasq did not start (exit %s); see %s" % (self.proc.poll(), self.log))
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            common.stop_process(self.proc, timeout=5)
        self._out.close()
        return False


def options_via(proxy, ruri, timeout=5.0):
    """OPTIONS to ruri sent to the proxy over UDP; the final response (SipMessage) or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.5)
        s.sendto(common.build_request("OPTIONS", ruri, s.getsockname()), proxy)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data, _ = s.recvfrom(65535)
            except socket.timeout:
                continue
            msg = common.parse_message(data)
            if msg is not None and msg.code is not None and msg.code >= 200:
                return msg
    return None


def case_naptr_srv_a(env):
    if dnsmasq_path() is None:
        raise common.Skip("dnsmasq not installed; run scripts/install-test-deps.sh")
    tcp, udp, dead = common.free_port(), common.free_port(), common.free_port()
    records = [
        "--naptr-record=uas.test,10,10,S,SIP+D2T,,_sip._tcp.uas.test",
        "--naptr-record=uas.test,20,10,S,SIP+D2U,,_sip._udp.uas.test",
        "--srv-host=_sip._tcp.uas.test,host.uas.test,%d,10,0" % tcp,
        "--srv-host=_sip._udp.uas.test,host.uas.test,%d,10,0" % dead,
        "--srv-host=_sip._udp.srvonly.test,host.uas.test,%d,10,0" % udp,
        "--host-record=host.uas.test,127.0.0.1",
        # failover.test: the preferred SRV target refuses TCP connections, the next one is the uas.
        "--srv-host=_sip._tcp.failover.test,host.uas.test,%d,10,0" % dead,
        "--srv-host=_sip._tcp.failover.test,host.uas.test,%d,20,0" % tcp,
    ]
    with Dnsmasq(env, records) as dns:
        uas = common.Tandem(env, name="uas", service="uas", listen=[("tcp", "127.0.0.1", tcp), ("udp", "127.0.0.1", udp)])
        proxy = common.Tandem(env, name="proxy", service="proxy",
                              sets=["dns.nameserver=\"127.0.0.1:%d\"" % dns.port, "proxy.record_route=false"])
        with uas, proxy:
            target = proxy.addr("udp")
            r = options_via(target, "sip:ping@uas.test")
            check(r is not None and r.code == 200, "OPTIONS sip:ping@uas.test through the proxy: %r" % r)
            r = options_via(target, "sip:ping@srvonly.test")
            check(r is not None and r.code == 200, "OPTIONS sip:ping@srvonly.test through the proxy: %r" % r)
            r = options_via(target, "sip:ping@failover.test")
            check(r is not None and r.code == 200,
                  "OPTIONS sip:ping@failover.test (first SRV target refuses TCP) did not fail over: %r" % r)
            r = options_via(target, "sip:ping@nowhere.test")
            check(r is not None and r.code == 503 and "cannot locate nowhere.test" in (r.get("Warning") or ""),
                  "a name without records should get 503 with a Warning: %r" % r)
            # A configured next hop named by host is located per request.
            outbound = common.Tandem(env, name="outbound", service="proxy",
                                     sets=["dns.nameserver=\"127.0.0.1:%d\"" % dns.port, "proxy.record_route=false",
                                           "proxy.next_hop=\"sip:uas.test\""])
            with outbound:
                r = options_via(outbound.addr("udp"), "sip:ping@192.0.2.1")
                check(r is not None and r.code == 200,
                      "OPTIONS to an unreachable Request-URI through proxy.next_hop=sip:uas.test: %r" % r)
            _, metrics = common.http_get(uas.admin_url + "/metrics")
            proxy_alive = proxy.proc.poll() is None
        check(proxy_alive, "the proxy exited")
        by_transport = {t: 'tandem_messages_in_total{method="OPTIONS",status_class="request",transport="%s"} %d' % (t, n)
                        for t, n in (("tcp", 3), ("udp", 1))}
        for t, line in by_transport.items():
            check(line in metrics, "the uas should have received OPTIONS over %s as NAPTR and SRV order (tcp 2, udp 1):\n%s"
                  % (t, "\n".join(x for x in metrics.splitlines() if "OPTIONS" in x)))
    with open(dns.log, errors="replace") as f:
        queries = [line for line in f if "query[" in line]
    env.log("dnsmasq answered %d queries:\n%s" % (len(queries), "".join(queries[:20])))
    check(any("query[NAPTR] uas.test" in q for q in queries), "no NAPTR query for uas.test reached dnsmasq")


CASES = [("naptr_srv_a", case_naptr_srv_a)]


if __name__ == "__main__":
    import run_all
    sys.exit(run_all.main(["-k", "test_dns"] + sys.argv[1:]))
