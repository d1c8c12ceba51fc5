//! The addresses Tandem is reachable at, per transport: written into Via, Contact and
//! Record-Route, and used to recognise Route values that point at us.

use std::net::{IpAddr, SocketAddr};
use tandem_sip::{SipUri, Transport, Uri};

#[derive(Debug, Clone)]
pub struct LocalListener {
    pub index: u16,
    pub transport: Transport,
    pub addr: SocketAddr,
    /// `host:port` as written in headers.
    pub host_port: String,
}

#[derive(Debug, Clone, Default)]
pub struct Locals {
    pub listeners: Vec<LocalListener>,
}

impl Locals {
    pub fn new(bound: &[(Transport, SocketAddr)], advertised_host: Option<&str>) -> Locals {
        let listeners = bound
            .iter()
            .enumerate()
            .map(|(i, (transport, addr))| {
                let host = match (advertised_host, addr.ip()) {
                    (Some(h), _) => h.to_string(),
                    (None, ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
                    (None, IpAddr::V6(v6)) => format!("[{v6}]"),
                    (None, IpAddr::V4(v4)) => v4.to_string(),
                };
                LocalListener { index: i as u16, transport: *transport, addr: *addr, host_port: format!("{host}:{}", addr.port()) }
            })
            .collect();
        Locals { listeners }
    }

    pub fn for_transport(&self, transport: Transport) -> Option<&LocalListener> {
        self.listeners.iter().find(|l| l.transport == transport)
    }

    pub fn by_index(&self, index: u16) -> Option<&LocalListener> {
        self.listeners.get(index as usize)
    }

    /// Whether a URI (a Route value) designates this server.
    pub fn is_local_uri(&self, uri: &SipUri<'_>) -> bool {
        let port = uri.port.unwrap_or(if uri.secure { 5061 } else { 5060 });
        self.listeners.iter().any(|l| {
            l.addr.port() == port
                && (uri.host_ip().is_some_and(|ip| ip == l.addr.ip() || l.addr.ip().is_unspecified())
                    || l.host_port.rsplit_once(':').is_some_and(|(h, _)| h.eq_ignore_ascii_case(uri.host)))
        })
    }
}

/// Where to send a request: resolved without DNS (IP literals only; DNS comes with RFC 3263
/// support in the transport work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    pub transport: Transport,
    pub addr: SocketAddr,
}

impl Destination {
    pub fn from_uri(uri: &Uri<'_>) -> Option<Destination> {
        let Uri::Sip(sip) = uri else { return None };
        let ip = sip.host_ip()?;
        let transport = match sip.param("transport").flatten() {
            Some(t) => Transport::parse(t),
            None if sip.secure => Transport::Tls,
            None => Transport::Udp,
        };
        let default_port = if sip.secure { 5061 } else { 5060 };
        Some(Destination { transport, addr: SocketAddr::new(ip, sip.port.unwrap_or(default_port)) })
    }

    /// `IP:PORT` (UDP) or `PROTO:IP:PORT` with PROTO one of udp, tcp, tls, ws, wss, inproc, as
    /// in `proxy.next_hop`.
    pub fn parse(s: &str) -> Option<Destination> {
        const PROTOCOLS: [(&str, Transport); 6] = [
            ("udp", Transport::Udp),
            ("tcp", Transport::Tcp),
            ("tls", Transport::Tls),
            ("ws", Transport::Ws),
            ("wss", Transport::Wss),
            ("inproc", Transport::InProc),
        ];
        let named =
            s.split_once(':').and_then(|(p, rest)| PROTOCOLS.iter().find(|(n, _)| p.eq_ignore_ascii_case(n)).map(|(_, t)| (*t, rest)));
        let (transport, addr) = named.unwrap_or((Transport::Udp, s));
        Some(Destination { transport, addr: addr.parse().ok()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations() {
        let d = Destination::parse("tcp:127.0.0.1:5070").unwrap();
        assert_eq!((d.transport, d.addr.port()), (Transport::Tcp, 5070));
        assert_eq!(Destination::parse("127.0.0.1:5070").unwrap().transport, Transport::Udp);
        assert!(Destination::parse("example.com:5060").is_none());
        let d = Destination::parse("wss:127.0.0.1:8443").unwrap();
        assert_eq!((d.transport, d.addr.port()), (Transport::Wss, 8443));
        assert_eq!(Destination::parse("inproc:127.0.0.1:5070").unwrap().transport, Transport::InProc);
        let d = Destination::parse("TLS:127.0.0.1:5061").unwrap();
        assert_eq!((d.transport, d.addr.port()), (Transport::Tls, 5061));
        let d = Destination::from_uri(&Uri::parse("sips:bob@127.0.0.1").unwrap()).unwrap();
        assert_eq!((d.transport, d.addr.port()), (Transport::Tls, 5061));
        let d = Destination::from_uri(&Uri::parse("sip:bob@127.0.0.1:5070;transport=tls").unwrap()).unwrap();
        assert_eq!((d.transport, d.addr.port()), (Transport::Tls, 5070));
        let uri = Uri::parse("sip:bob@[::1]:5080;transport=tcp").unwrap();
        let d = Destination::from_uri(&uri).unwrap();
        assert_eq!((d.transport, d.addr), (Transport::Tcp, "[::1]:5080".parse().unwrap()));
        assert!(Destination::from_uri(&Uri::parse("sip:bob@example.com").unwrap()).is_none());
    }

    #[test]
    fn recognises_itself() {
        let locals = Locals::new(&[(Transport::Udp, "127.0.0.1:5060".parse().unwrap())], None);
        let Some(Uri::Sip(me)) = Uri::parse("sip:127.0.0.1;lr") else { panic!() };
        assert!(locals.is_local_uri(&me));
        let Some(Uri::Sip(other)) = Uri::parse("sip:127.0.0.1:5070;lr") else { panic!() };
        assert!(!locals.is_local_uri(&other));
    }
}
