//! The transports the benchmark knows. Adding one is one entry in [`TRANSPORTS`]: once
//! tandem-transport binds a listen spec for it, set `listen` and it is measured (both
//! endpoints bind that spec; the flow's transport comes from the spec's protocol).

use tandem_transport::ListenSpec;

/// The raw tokio baseline a transport is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    Udp,
    Tcp,
    Tls,
}

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub name: &'static str,
    /// Listen spec for both endpoints (port 0: ephemeral); `None`: not in tandem-transport yet.
    pub listen: Option<&'static str>,
    /// A stream transport opens a new connection per session; a datagram one does not.
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
}

const STREAM_MAX: usize = tandem_sip::MAX_MESSAGE_BYTES;

pub const TRANSPORTS: &[Entry] = &[
    Entry {
        name: "in-process",
        listen: None,
        stream: true,
        raw: None,
        max_size: STREAM_MAX,
        note: "not measured yet: tandem-transport has no in-process transport (API not final)",
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
        listen: None, // Some("ws:127.0.0.1:0") once Protocol::Ws exists
        stream: true,
        raw: None,
        max_size: STREAM_MAX,
        note: "not measured yet: Protocol::Ws is being added to tandem-transport",
    },
    Entry {
        name: "wss",
        listen: None, // Some("wss:127.0.0.1:0") once Protocol::Wss exists
        stream: true,
        raw: None,
        max_size: STREAM_MAX,
        note: "not measured yet: Protocol::Wss is being added to tandem-transport",
    },
];

pub fn by_name(name: &str) -> Option<&'static Entry> {
    TRANSPORTS.iter().find(|e| e.name.eq_ignore_ascii_case(name))
}
