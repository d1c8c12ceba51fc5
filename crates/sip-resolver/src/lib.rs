//! Locating SIP servers (RFC 3263): from a SIP or SIPS URI to an ordered list of
//! `(transport, address:port)` targets to try.
//!
//! # What it does
//!
//! Given a [`SipTarget`] (the host, port, `transport` parameter and scheme of a Request-URI,
//! a Route or a configured next hop) and the transports this node supports, in the order of the
//! configuration's transport preference list, [`Resolver::resolve`] runs the RFC 3263 §4
//! procedure and returns the [`Target`]s in the order they should be tried:
//!
//! 1. **Transport** (§4.1). A `transport` URI parameter decides it (for `sips:`, `tcp` means TLS
//!    and `ws` means WSS). Otherwise, a numeric IP host or an explicit port gives UDP for `sip:`
//!    and TLS for `sips:` (the first supported transport when that one is not in the list).
//!    Otherwise NAPTR records of the host are looked up: those whose service is one we support
//!    (`SIP+D2U`, `SIP+D2T`, `SIPS+D2T`, `SIP+D2S`, and RFC 7118 §4.4's `SIP+D2W`/`SIPS+D2W`;
//!    only the `SIPS+` ones for a `sips:` URI) are kept and taken in NAPTR order, then
//!    preference. The DNS administrator's order wins over our preference list, which only
//!    filters. Without usable NAPTR records, SRV records `_sips._tcp`, `_sip._tcp`, `_sip._udp`,
//!    `_sip._sctp` are queried for each supported transport in our preference order and the first
//!    that answers is used (there is no SRV name for WebSocket). Without SRV records, the host's
//!    A/AAAA records are used with the first preferred transport usable for the scheme.
//! 2. **Address and port** (§4.2). A numeric IP is used as it is; an explicit port skips SRV and
//!    goes to A/AAAA; otherwise SRV records are ordered per RFC 2782 (priority ascending, weighted
//!    random order within a priority) and each SRV target host is resolved to its A and AAAA
//!    addresses. Default ports are 5060, and 5061 for TLS and WSS (the SIP defaults: 80 and 443
//!    are not used for WebSocket unless the URI says so).
//!
//! Where several NAPTR records are usable, the targets of all of them are listed, in NAPTR
//! order: the first target is the one RFC 3263 picks, the others are there for failover.
//!
//! # Determinism
//!
//! The only randomness, the RFC 2782 weighted order, comes from a seeded ChaCha generator
//! ([`Resolver::with_seed`], or any `rand::RngCore` given to [`resolve_with`]), never from the
//! system, so that a run can be replayed.
//!
//! # Sans-IO core
//!
//! The selection logic ([`resolve_with`], [`order_naptr`], [`order_srv`]) talks to DNS through
//! the small [`Dns`] trait. [`Resolver`] implements it with hickory's tokio resolver (which caches
//! answers for their TTL); [`MemoryDns`] is an in-memory table for tests.
//!
//! # How the container uses it
//!
//! The caller turns a Request-URI, the top Route or a configured next hop into a [`SipTarget`]
//! ([`SipTarget::from_uri`]), calls [`Resolver::resolve`] with its transport preference list,
//! and sends to the first target. Failing over to the next target on a transport error, a
//! timeout or a 503 (RFC 3263 §4.3), and blacklisting, are the caller's job: this crate only
//! produces the ordered list.

#![forbid(unsafe_code)]

mod dns;
mod hickory;
mod select;

pub use dns::{Dns, DnsError, MemoryDns, NaptrRecord, SrvRecord};
pub use hickory::Resolver;
pub use select::{default_port, order_naptr, order_srv, resolve_with, srv_name};
pub use tandem_sip::Transport;

use std::net::SocketAddr;
use tandem_sip::SipUri;

/// One place to send a request to: a transport and the peer's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    pub transport: Transport,
    pub addr: SocketAddr,
}

/// What RFC 3263 needs of a SIP URI, owned so that it can outlive the message it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SipTarget {
    host: String,
    port: Option<u16>,
    transport: Option<Transport>,
    secure: bool,
}

impl SipTarget {
    /// `host` is a domain name or an IP address; IPv6 may be given with or without brackets.
    pub fn new(host: &str, port: Option<u16>, transport: Option<Transport>, secure: bool) -> SipTarget {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        SipTarget { host: bare.to_owned(), port, transport, secure }
    }

    /// The target of a SIP URI: its `maddr` parameter when present (RFC 3263 §4), else its host;
    /// its port, its `transport` parameter (an unknown value becomes [`Transport::Other`], which
    /// [`Resolver::resolve`] rejects) and its scheme.
    pub fn from_uri(uri: &SipUri<'_>) -> SipTarget {
        let host = match uri.param("maddr") {
            Some(Some(maddr)) if !maddr.is_empty() => maddr,
            _ => uri.host,
        };
        let transport = match uri.param("transport") {
            Some(Some(t)) => Some(Transport::parse(t)),
            _ => None,
        };
        SipTarget::new(host, uri.port, transport, uri.secure)
    }

    /// Host without IPv6 brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> Option<u16> {
        self.port
    }

    pub fn transport(&self) -> Option<Transport> {
        self.transport
    }

    /// `sips:` URI.
    pub fn secure(&self) -> bool {
        self.secure
    }
}

/// Why no target could be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// DNS answered, but has no usable record for this host (NXDOMAIN, no data, or only
    /// services we do not support).
    #[error("no usable DNS records for {0}")]
    NoRecords(String),
    /// A DNS query failed (timeout, server failure, bad name) and nothing usable was found.
    #[error("DNS lookup failed: {0}")]
    Dns(String),
    /// The URI asks for a transport that is not in the preference list (or that cannot carry
    /// this scheme, e.g. `sips:` over UDP).
    #[error("transport {} not supported for a {} URI", .transport.as_str(), if *.secure { "sips" } else { "sip" })]
    UnsupportedTransport { transport: Transport, secure: bool },
    /// The preference list has no transport usable for this scheme (e.g. no TLS for `sips:`).
    #[error("no supported transport for a {} URI", if *.secure { "sips" } else { "sip" })]
    NoTransport { secure: bool },
    /// The resolver could not be set up (e.g. unreadable /etc/resolv.conf).
    #[error("DNS resolver configuration: {0}")]
    Config(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_sip::Uri;

    fn target(uri: &str) -> SipTarget {
        let parsed = Uri::parse(uri).and_then(|u| u.as_sip().copied());
        match parsed {
            Some(u) => SipTarget::from_uri(&u),
            None => panic!("test URI does not parse: {uri}"),
        }
    }

    #[test]
    fn from_uri_takes_host_port_transport_scheme() {
        assert_eq!(target("sip:alice@example.com"), SipTarget::new("example.com", None, None, false));
        assert_eq!(target("sips:example.com:5071;transport=tcp"), SipTarget::new("example.com", Some(5071), Some(Transport::Tcp), true));
        assert_eq!(target("sip:[2001:db8::1]:5070;lr"), SipTarget::new("2001:db8::1", Some(5070), None, false));
        assert_eq!(target("sip:a@example.com;transport=foo").transport(), Some(Transport::Other));
    }

    #[test]
    fn from_uri_prefers_maddr() {
        assert_eq!(target("sip:example.com;maddr=192.0.2.7;transport=udp").host(), "192.0.2.7");
    }
}
