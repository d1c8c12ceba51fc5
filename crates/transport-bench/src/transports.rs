//! The transports the benchmark knows. Adding one is one entry in [`TRANSPORTS`]: once
//! tandem-transport binds a listen spec for it, set `listen` and it is measured (both
//! endpoints bind that spec, except in-process ones, see [`Entry::client_spec`]; the flow's
//! transport comes from the spec's protocol).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use tandem_transport::{ListenSpec, Protocol};

/// The raw tokio baseline a transport is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    Udp,
    Tcp,
    Tls,
    /// tokio-tungstenite on a `TcpStream`.
    Ws,
    /// tokio-tungstenite on tokio-rustls.
    Wss,
}

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub name: &'static str,
    /// Listen spec for both endpoints (port 0: ephemeral; for in-process, the server's name);
    /// `None`: not in tandem-transport yet.
    pub listen: Option<&'static str>,
    /// A stream transport opens a new connection per session (in-process: binds a new
    /// endpoint A per session); a datagram one does not.
    pub stream: bool,
    pub raw: Option<Raw>,
    /// Largest message the transport carries (one UDP datagram: 65,507 bytes of payload).
    pub max_size: usize,
    /// Why it is not measured, or what to know about it.
    pub note: &'static str,
}

impl Entry {
    pub fn spec(&self) -> Option<ListenSpec> {
        self.listen.map(|s| s.parse().expect("valid listen spec in the transport table"))
    }

    /// The listen spec of a new endpoint A: the server's for socket transports (port 0 is
    /// ephemeral); for in-process, whose addresses are names and port 0 is not ephemeral, a
    /// fresh name per endpoint (127.1.x.y:port, from a process-wide counter).
    pub fn client_spec(&self) -> Option<ListenSpec> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let spec = self.spec()?;
        if spec.protocol != Protocol::InProc {
            return Some(spec);
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let ip = Ipv4Addr::from(0x7f01_0000 + n / 65_535);
        Some(ListenSpec { protocol: Protocol::InProc, addr: SocketAddr::new(ip.into(), (1 + n % 65_535) as u16) })
    }
}

const STREAM_MAX: usize = tandem_sip::MAX_MESSAGE_BYTES;

pub const TRANSPORTS: &[Entry] = &[
    Entry {
        name: "in-process",
        listen: Some("inproc:127.0.0.1:1"),
        stream: true,
        raw: None,
        max_size: STREAM_MAX,
        note: "one InProcessHub; the Bytes buffer is handed over on the sender's thread (no socket, no copy): no raw baseline",
    },
    Entry { name: "udp", listen: Some("udp:127.0.0.1:0"), stream: false, raw: Some(Raw::Udp), max_size: 65_507, note: "" },
    Entry { name: "tcp", listen: Some("tcp:127.0.0.1:0"), stream: true, raw: Some(Raw::Tcp), max_size: STREAM_MAX, note: "" },
    Entry {
        name: "tls",
        listen: Some("tls:127.0.0.1:0"),
        stream: true,
        raw: Some(Raw::Tls),
        max_size: STREAM_MAX,
        note: "TLS 1.3, rustls (ring), ECDSA P-256 certificate from rcgen, no session resumption",
    },
    Entry {
        name: "ws",
        listen: Some("ws:127.0.0.1:0"),
        stream: true,
        raw: Some(Raw::Ws),
        max_size: STREAM_MAX,
        note: "RFC 7118, subprotocol sip, one text message per SIP message (tokio-tungstenite)",
    },
    Entry {
        name: "wss",
        listen: Some("wss:127.0.0.1:0"),
        stream: true,
        raw: Some(Raw::Wss),
        max_size: STREAM_MAX,
        note: "WebSocket on TLS 1.3, same certificate and rustls configurations as tls",
    },
];

pub fn by_name(name: &str) -> Option<&'static Entry> {
    TRANSPORTS.iter().find(|e| e.name.eq_ignore_ascii_case(name))
}
