use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use tandem_sip::Transport;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Udp,
    Tcp,
    /// TLS over TCP (RFC 3261 §26.2): the TCP stream code with a TLS session in between.
    Tls,
    /// SIP over WebSocket (RFC 7118) on TCP.
    Ws,
    /// SIP over WebSocket on TLS.
    Wss,
    /// Containers of one process handing messages over (`inprocess.rs`); the address is a name.
    InProc,
}

impl Protocol {
    pub fn transport(self) -> Transport {
        match self {
            Protocol::Udp => Transport::Udp,
            Protocol::Tcp => Transport::Tcp,
            Protocol::Tls => Transport::Tls,
            Protocol::Ws => Transport::Ws,
            Protocol::Wss => Transport::Wss,
            Protocol::InProc => Transport::InProc,
        }
    }

    pub fn for_transport(t: Transport) -> Option<Protocol> {
        match t {
            Transport::Udp => Some(Protocol::Udp),
            Transport::Tcp => Some(Protocol::Tcp),
            Transport::Tls => Some(Protocol::Tls),
            Transport::Ws => Some(Protocol::Ws),
            Transport::Wss => Some(Protocol::Wss),
            Transport::InProc => Some(Protocol::InProc),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            Protocol::Tcp => "tcp",
            Protocol::Tls => "tls",
            Protocol::Ws => "ws",
            Protocol::Wss => "wss",
            Protocol::InProc => "inproc",
        }
    }
}

/// `PROTO:IP:PORT`, e.g. `udp:127.0.0.1:5060`, `tcp:[::1]:5060`, `tls:127.0.0.1:5061`, `ws:127.0.0.1:8080` or `wss:127.0.0.1:8443`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenSpec {
    pub protocol: Protocol,
    pub addr: SocketAddr,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("expected PROTO:IP:PORT (PROTO is udp, tcp, tls, ws, wss or inproc), got {0:?}")]
    Format(String),
    #[error("unknown transport {0:?} (supported: udp, tcp, tls, ws, wss, inproc)")]
    Protocol(String),
}

impl FromStr for ListenSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (proto, addr) = s.split_once(':').ok_or_else(|| SpecError::Format(s.to_string()))?;
        let protocol = match proto.to_ascii_lowercase().as_str() {
            "udp" => Protocol::Udp,
            "tcp" => Protocol::Tcp,
            "tls" => Protocol::Tls,
            "ws" => Protocol::Ws,
            "wss" => Protocol::Wss,
            "inproc" => Protocol::InProc,
            _ => return Err(SpecError::Protocol(proto.to_string())),
        };
        let addr = addr.parse().map_err(|_| SpecError::Format(s.to_string()))?;
        Ok(ListenSpec { protocol, addr })
    }
}

impl fmt::Display for ListenSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.protocol.as_str(), self.addr)
    }
}
