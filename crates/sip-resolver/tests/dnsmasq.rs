//! RFC 3263 resolution against a real DNS server: a `dnsmasq` this test starts on 127.0.0.1 and a
//! free port, serving NAPTR, SRV, A and AAAA records for names under `.test` (RFC 2606) and
//! nothing else (`--no-resolv`, `--local=/test/`). The resolver is pointed at that server only,
//! with /etc/hosts off, so no other DNS server is ever asked.
//!
//! Skipped, with a message, when dnsmasq is not installed (scripts/install-test-deps.sh installs
//! it). The addresses in the answers are documentation ranges: nothing is ever sent to them.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tandem_resolver::{ResolveError, Resolver, SipTarget, Target, Transport};

const RECORDS: &[&str] = &[
    // NAPTR: TLS first, then TCP, then UDP; a non-SIP service that must be ignored.
    "--naptr-record=example.test,5,10,S,SIPS+D2T,,_sips._tcp.example.test",
    "--naptr-record=example.test,10,10,S,SIP+D2T,,_sip._tcp.example.test",
    "--naptr-record=example.test,20,10,S,SIP+D2U,,_sip._udp.example.test",
    "--naptr-record=example.test,1,10,U,E2U+sip,!^.*$!sip:x@example.test!,",
    // --srv-host=name,target,port,priority,weight
    "--srv-host=_sips._tcp.example.test,tls.example.test,5061,10,0",
    "--srv-host=_sip._tcp.example.test,b.example.test,5071,20,0",
    "--srv-host=_sip._tcp.example.test,a.example.test,5070,10,0",
    "--srv-host=_sip._udp.example.test,a.example.test,5072,10,0",
    "--host-record=a.example.test,192.0.2.10,2001:db8::10",
    "--host-record=b.example.test,192.0.2.11",
    "--host-record=tls.example.test,192.0.2.12",
    // SRV only, no NAPTR.
    "--srv-host=_sip._udp.srvonly.test,c.srvonly.test,5080,10,0",
    "--srv-host=_sip._tcp.srvonly.test,c.srvonly.test,5081,10,0",
    "--host-record=c.srvonly.test,192.0.2.20",
    // Neither NAPTR nor SRV.
    "--host-record=plain.test,192.0.2.30,2001:db8::30",
    "--host-record=v6only.test,2001:db8::6",
    // Answered by the readiness probe.
    "--host-record=ready.test,127.0.0.1",
];

fn find_dnsmasq() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("dnsmasq"))
        .find(|p| p.is_file())
}

/// The dnsmasq process, killed and reaped when dropped, even if the test panics.
struct Dnsmasq {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1, at the time of asking.
fn free_port() -> u16 {
    for _ in 0..20 {
        let Ok(udp) = UdpSocket::bind("127.0.0.1:0") else { continue };
        let Ok(addr) = udp.local_addr() else { continue };
        if TcpListener::bind(addr).is_ok() {
            return addr.port();
        }
    }
    panic!("no free port on 127.0.0.1");
}

/// A minimal DNS query (A, IN, recursion desired) for `name`.
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// True once the server answers a query for `ready.test` with NOERROR.
fn answers(addr: SocketAddr) -> bool {
    let Ok(socket) = UdpSocket::bind("127.0.0.1:0") else { return false };
    if socket.set_read_timeout(Some(Duration::from_millis(100))).is_err() || socket.send_to(&dns_query("ready.test"), addr).is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    matches!(socket.recv_from(&mut buf), Ok((n, from)) if from == addr && n >= 12 && buf[0] == 0x12 && buf[1] == 0x34 && buf[3] & 0x0f == 0)
}

fn start(binary: &PathBuf) -> Dnsmasq {
    let mut last_failure = String::new();
    for _ in 0..3 {
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let spawned = Command::new(binary)
            .args(["--no-daemon", "--no-resolv", "--no-hosts", "--conf-file=/dev/null", "--pid-file=", "--log-facility=-"])
            .args(["--listen-address=127.0.0.1", "--bind-interfaces", "--local=/test/"])
            .arg(format!("--port={port}"))
            .args(RECORDS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let mut server = match spawned {
            Ok(child) => Dnsmasq { child, addr },
            Err(e) => panic!("cannot start {}: {e}", binary.display()),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if answers(addr) {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = server.child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                last_failure = format!("dnsmasq exited with {status}: {stderr}");
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if last_failure.is_empty() {
            last_failure = format!("dnsmasq did not answer on {addr} within 10 s");
        }
        // Port taken between asking and binding, or a slow start: try again on another port.
    }
    panic!("{last_failure}");
}

fn target(transport: Transport, addr: &str) -> Target {
    match addr.parse() {
        Ok(addr) => Target { transport, addr },
        Err(e) => panic!("bad test address {addr}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn rfc3263_against_dnsmasq() {
    let Some(binary) = find_dnsmasq() else {
        println!("SKIP rfc3263_against_dnsmasq: dnsmasq is not installed (scripts/install-test-deps.sh installs it)");
        return;
    };
    let server = start(&binary);
    let resolver = match Resolver::with_nameserver(server.addr) {
        Ok(r) => r.with_seed(1),
        Err(e) => panic!("resolver: {e}"),
    };
    let udp_tcp = [Transport::Udp, Transport::Tcp];
    let all = [Transport::Udp, Transport::Tcp, Transport::Tls];

    // NAPTR: the zone's order (TCP before UDP) wins over ours; SIPS+D2T is filtered out because
    // TLS is not in the list; SRV priorities order a before b; A before AAAA.
    let got = resolver.resolve(&SipTarget::new("example.test", None, None, false), &udp_tcp).await;
    assert_eq!(
        got,
        Ok(vec![
            target(Transport::Tcp, "192.0.2.10:5070"),
            target(Transport::Tcp, "[2001:db8::10]:5070"),
            target(Transport::Tcp, "192.0.2.11:5071"),
            target(Transport::Udp, "192.0.2.10:5072"),
            target(Transport::Udp, "[2001:db8::10]:5072"),
        ])
    );

    // With TLS supported, SIPS+D2T (order 5) comes first.
    let got = resolver.resolve(&SipTarget::new("example.test", None, None, false), &all).await;
    assert_eq!(got.as_ref().map(|v| v.first().copied()), Ok(Some(target(Transport::Tls, "192.0.2.12:5061"))));

    // sips: only the SIPS+ NAPTR records.
    let got = resolver.resolve(&SipTarget::new("example.test", None, None, true), &all).await;
    assert_eq!(got, Ok(vec![target(Transport::Tls, "192.0.2.12:5061")]));

    // transport=udp: NAPTR skipped, _sip._udp used.
    let got = resolver.resolve(&SipTarget::new("example.test", None, Some(Transport::Udp), false), &all).await;
    assert_eq!(got, Ok(vec![target(Transport::Udp, "192.0.2.10:5072"), target(Transport::Udp, "[2001:db8::10]:5072")]));

    // No NAPTR: SRV of the first preferred transport that answers.
    let got = resolver.resolve(&SipTarget::new("srvonly.test", None, None, false), &[Transport::Tls, Transport::Tcp, Transport::Udp]).await;
    assert_eq!(got, Ok(vec![target(Transport::Tcp, "192.0.2.20:5081")]));

    // No NAPTR, no SRV: A/AAAA, default port, first preferred transport.
    let got = resolver.resolve(&SipTarget::new("plain.test", None, None, false), &udp_tcp).await;
    assert_eq!(got, Ok(vec![target(Transport::Udp, "192.0.2.30:5060"), target(Transport::Udp, "[2001:db8::30]:5060")]));
    let got = resolver.resolve(&SipTarget::new("v6only.test", None, None, false), &udp_tcp).await;
    assert_eq!(got, Ok(vec![target(Transport::Udp, "[2001:db8::6]:5060")]));

    // Explicit port: A/AAAA only, so a name with only NAPTR/SRV records has no target.
    let got = resolver.resolve(&SipTarget::new("plain.test", Some(5090), None, false), &udp_tcp).await;
    assert_eq!(got, Ok(vec![target(Transport::Udp, "192.0.2.30:5090"), target(Transport::Udp, "[2001:db8::30]:5090")]));
    let got = resolver.resolve(&SipTarget::new("example.test", Some(5090), None, false), &udp_tcp).await;
    assert_eq!(got, Err(ResolveError::NoRecords("example.test".into())));

    // NXDOMAIN.
    let got = resolver.resolve(&SipTarget::new("missing.test", None, None, false), &udp_tcp).await;
    assert_eq!(got, Err(ResolveError::NoRecords("missing.test".into())));

    // A second resolution is answered the same (from hickory's cache or the server).
    let again = resolver.resolve(&SipTarget::new("plain.test", None, None, false), &udp_tcp).await;
    assert_eq!(again, Ok(vec![target(Transport::Udp, "192.0.2.30:5060"), target(Transport::Udp, "[2001:db8::30]:5060")]));

    drop(server);
}
