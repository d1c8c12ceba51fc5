//! RFC 3263 §4.1/§4.2 selection over a [`Dns`]: which transport, which addresses, in which order.

use crate::dns::{Dns, DnsError, NaptrRecord, SrvRecord};
use crate::{ResolveError, SipTarget, Target};
use rand::{Rng, RngCore};
use std::net::{IpAddr, SocketAddr};
use tandem_sip::Transport;
use tracing::{debug, warn};

/// The SIP default port of a transport (RFC 3261 §19.1.2; RFC 7118 keeps SIP's defaults).
pub fn default_port(transport: Transport) -> u16 {
    match transport {
        Transport::Tls | Transport::Wss => 5061,
        _ => 5060,
    }
}

/// The SRV owner name for a transport (RFC 3263 §4.1), `None` where there is none (WebSocket).
pub fn srv_name(transport: Transport, host: &str) -> Option<String> {
    let prefix = match transport {
        Transport::Udp => "_sip._udp",
        Transport::Tcp => "_sip._tcp",
        Transport::Tls => "_sips._tcp",
        Transport::Sctp => "_sip._sctp",
        Transport::Ws | Transport::Wss | Transport::InProc | Transport::Other => return None,
    };
    Some(format!("{prefix}.{}", host.trim_end_matches('.')))
}

/// The transport a NAPTR service field names (RFC 3263 §4.1, RFC 7118 §4.4); TLS over SCTP has
/// no [`Transport`] and is not supported.
fn naptr_transport(services: &str) -> Option<Transport> {
    const SERVICES: &[(&str, Transport)] = &[
        ("SIP+D2U", Transport::Udp),
        ("SIP+D2T", Transport::Tcp),
        ("SIPS+D2T", Transport::Tls),
        ("SIP+D2S", Transport::Sctp),
        ("SIP+D2W", Transport::Ws),
        ("SIPS+D2W", Transport::Wss),
    ];
    SERVICES.iter().find(|(s, _)| s.eq_ignore_ascii_case(services)).map(|(_, t)| *t)
}

fn is_secure(transport: Transport) -> bool {
    matches!(transport, Transport::Tls | Transport::Wss)
}

/// The preference list reduced to what can carry this scheme: for `sips:` only TLS and WSS;
/// `Other` never; duplicates dropped.
fn usable(preferences: &[Transport], secure: bool) -> Vec<Transport> {
    let mut out: Vec<Transport> = Vec::with_capacity(preferences.len());
    for &t in preferences {
        if t != Transport::Other && (!secure || is_secure(t)) && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The transport a URI's `transport` parameter asks for, in this scheme: `sips:` with `tcp`
/// means TLS and with `ws` means WSS (RFC 3261 §26.2.2, RFC 7118 §5).
fn explicit_transport(t: Transport, secure: bool, usable: &[Transport]) -> Result<Transport, ResolveError> {
    let effective = match (t, secure) {
        (Transport::Tcp, true) => Transport::Tls,
        (Transport::Ws, true) => Transport::Wss,
        (t, _) => t,
    };
    if usable.contains(&effective) {
        Ok(effective)
    } else {
        Err(ResolveError::UnsupportedTransport { transport: t, secure })
    }
}

/// RFC 3263 §4.1 for a numeric IP or an explicit port without a transport parameter: UDP for
/// `sip:`, TLS for `sips:`; the first usable transport when that one is not supported.
fn implied_transport(usable: &[Transport], secure: bool) -> Option<Transport> {
    let wanted = if secure { Transport::Tls } else { Transport::Udp };
    if usable.contains(&wanted) {
        Some(wanted)
    } else {
        usable.first().copied()
    }
}

/// NAPTR records usable by this client, in the order to try them: records with flag `S` whose
/// service is a supported transport (only `SIPS+` services for `sips:`), sorted by order then
/// preference (RFC 3403 §4.1). The preference list only filters; it does not reorder.
pub fn order_naptr(records: &[NaptrRecord], secure: bool, preferences: &[Transport]) -> Vec<(Transport, String)> {
    let usable = usable(preferences, secure);
    let mut kept: Vec<(u16, u16, Transport, &str)> = records
        .iter()
        .filter(|r| r.flags.eq_ignore_ascii_case("s") && !r.replacement.is_empty())
        .filter_map(|r| {
            let t = naptr_transport(&r.services)?;
            usable.contains(&t).then_some((r.order, r.preference, t, r.replacement.as_str()))
        })
        .collect();
    kept.sort_by_key(|&(order, preference, _, _)| (order, preference));
    kept.into_iter().map(|(_, _, t, name)| (t, name.to_owned())).collect()
}

/// SRV records in the order to try them (RFC 2782): priority ascending; within a priority, a
/// weighted random order drawn from `rng` (weight-0 records placed first, as RFC 2782 says, so
/// that they have a small chance when others weigh more). Records whose target is `.` (no
/// service) are dropped.
pub fn order_srv<R: RngCore + ?Sized>(records: &[SrvRecord], rng: &mut R) -> Vec<SrvRecord> {
    let mut rest: Vec<SrvRecord> = records.iter().filter(|r| !r.target.is_empty() && r.target != ".").cloned().collect();
    // Stable: records with equal priority and weight keep the DNS answer's order.
    rest.sort_by_key(|r| (r.priority, r.weight != 0));
    let mut out = Vec::with_capacity(rest.len());
    while let Some(first) = rest.first() {
        let priority = first.priority;
        let mut group: Vec<SrvRecord> = Vec::new();
        rest.retain(|r| {
            if r.priority == priority {
                group.push(r.clone());
                false
            } else {
                true
            }
        });
        while !group.is_empty() {
            let total: u32 = group.iter().map(|r| u32::from(r.weight)).sum();
            let pick = rng.gen_range(0..=total);
            let mut running = 0u32;
            let mut index = group.len() - 1;
            for (i, r) in group.iter().enumerate() {
                running += u32::from(r.weight);
                if running >= pick {
                    index = i;
                    break;
                }
            }
            out.push(group.remove(index));
        }
    }
    out
}

/// Lookup failures seen along the way: reported only if nothing usable was found.
#[derive(Default)]
struct Failures(Option<DnsError>);

impl Failures {
    fn note(&mut self, what: &str, name: &str, e: DnsError) {
        warn!(query = what, name, error = %e, "DNS lookup failed");
        self.0 = Some(e);
    }

    fn into_error(self, host: &str) -> ResolveError {
        match self.0 {
            Some(e) => ResolveError::Dns(e.0),
            None => ResolveError::NoRecords(host.to_owned()),
        }
    }
}

fn push_unique(out: &mut Vec<Target>, target: Target) {
    if !out.contains(&target) {
        out.push(target);
    }
}

async fn addresses<D: Dns + ?Sized>(dns: &D, host: &str, port: u16, transport: Transport, failures: &mut Failures, out: &mut Vec<Target>) {
    match dns.ip(host).await {
        Ok(ips) => {
            for ip in ips {
                push_unique(out, Target { transport, addr: SocketAddr::new(ip, port) });
            }
        }
        Err(e) => failures.note("A/AAAA", host, e),
    }
}

/// The targets of one SRV name: its records ordered per RFC 2782, each target host resolved.
async fn srv_targets<D: Dns + ?Sized, R: RngCore + Send + ?Sized>(
    dns: &D,
    name: &str,
    transport: Transport,
    rng: &mut R,
    failures: &mut Failures,
    out: &mut Vec<Target>,
) {
    let records = match dns.srv(name).await {
        Ok(records) => records,
        Err(e) => return failures.note("SRV", name, e),
    };
    for record in order_srv(&records, rng) {
        addresses(dns, &record.target, record.port, transport, failures, out).await;
    }
}

/// RFC 3263 §4.1/§4.2 over `dns`: the targets for `target`, in the order to try them, using the
/// transports of `preferences` (most preferred first) and `rng` for the RFC 2782 weighted order.
pub async fn resolve_with<D: Dns + ?Sized, R: RngCore + Send + ?Sized>(
    dns: &D,
    target: &SipTarget,
    preferences: &[Transport],
    rng: &mut R,
) -> Result<Vec<Target>, ResolveError> {
    let secure = target.secure();
    let host = target.host();
    let usable = usable(preferences, secure);
    let explicit = target.transport().map(|t| explicit_transport(t, secure, &usable)).transpose()?;
    let fallback = match explicit {
        Some(t) => t,
        None => usable.first().copied().ok_or(ResolveError::NoTransport { secure })?,
    };

    // Numeric IP: no DNS at all.
    if let Ok(ip) = host.parse::<IpAddr>() {
        let transport = explicit.or_else(|| implied_transport(&usable, secure)).unwrap_or(fallback);
        let port = target.port().unwrap_or_else(|| default_port(transport));
        return Ok(vec![Target { transport, addr: SocketAddr::new(ip, port) }]);
    }

    let mut failures = Failures::default();
    let mut out = Vec::new();

    // Explicit port: A/AAAA only (§4.2).
    if let Some(port) = target.port() {
        let transport = explicit.or_else(|| implied_transport(&usable, secure)).unwrap_or(fallback);
        addresses(dns, host, port, transport, &mut failures, &mut out).await;
        return if out.is_empty() { Err(failures.into_error(host)) } else { Ok(out) };
    }

    match explicit {
        // Transport given: SRV for that transport, where it has one (§4.2).
        Some(transport) => {
            if let Some(name) = srv_name(transport, host) {
                srv_targets(dns, &name, transport, rng, &mut failures, &mut out).await;
            }
        }
        None => {
            // NAPTR (§4.1).
            match dns.naptr(host).await {
                Ok(records) => {
                    let ordered = order_naptr(&records, secure, &usable);
                    if !records.is_empty() && ordered.is_empty() {
                        debug!(host, "NAPTR records present but none for a supported transport; trying SRV");
                    }
                    for (transport, replacement) in ordered {
                        srv_targets(dns, &replacement, transport, rng, &mut failures, &mut out).await;
                    }
                }
                Err(e) => failures.note("NAPTR", host, e),
            }
            // No usable NAPTR: SRV per supported transport, first that answers.
            if out.is_empty() {
                for &transport in &usable {
                    let Some(name) = srv_name(transport, host) else { continue };
                    srv_targets(dns, &name, transport, rng, &mut failures, &mut out).await;
                    if !out.is_empty() {
                        break;
                    }
                }
            }
        }
    }

    // No SRV: A/AAAA with the default port.
    if out.is_empty() {
        addresses(dns, host, default_port(fallback), fallback, &mut failures, &mut out).await;
    }
    if out.is_empty() {
        Err(failures.into_error(host))
    } else {
        debug!(host, targets = out.len(), "resolved");
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryDns;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const ALL: &[Transport] = &[Transport::Udp, Transport::Tcp, Transport::Tls, Transport::Ws, Transport::Wss];

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn t(transport: Transport, addr: &str) -> Target {
        match addr.parse() {
            Ok(addr) => Target { transport, addr },
            Err(e) => panic!("bad test address {addr}: {e}"),
        }
    }

    fn run(dns: &MemoryDns, target: &SipTarget, prefs: &[Transport]) -> Result<Vec<Target>, ResolveError> {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        futures_block_on(resolve_with(dns, target, prefs, &mut rng))
    }

    /// The fake DNS answers immediately, so a current-thread runtime is all it takes.
    fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
        match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => rt.block_on(f),
            Err(e) => panic!("runtime: {e}"),
        }
    }

    fn first(r: Result<Vec<Target>, ResolveError>) -> Option<Target> {
        r.ok().and_then(|v| v.first().copied())
    }

    fn name(host: &str) -> SipTarget {
        SipTarget::new(host, None, None, false)
    }

    /// A zone with everything: NAPTR for UDP, TCP, TLS, WS and WSS, SRV for each, addresses.
    fn full_zone() -> MemoryDns {
        MemoryDns::new()
            .naptr("example.com", 50, 50, "s", "SIP+D2U", "_sip._udp.example.com")
            .naptr("example.com", 10, 20, "S", "SIP+D2T", "_sip._tcp.example.com")
            .naptr("example.com", 10, 10, "s", "SIPS+D2T", "_sips._tcp.example.com")
            .naptr("example.com", 30, 10, "s", "SIP+D2W", "_sip._ws.example.com")
            .naptr("example.com", 40, 10, "s", "SIPS+D2W", "_sips._ws.example.com")
            .naptr("example.com", 5, 10, "u", "SIP+D2U", "ignored.example.com")
            .naptr("example.com", 6, 10, "s", "E2U+sip", "enum.example.com")
            .srv("_sip._udp.example.com", 10, 0, 5060, "udp.example.com")
            .srv("_sip._tcp.example.com", 10, 0, 5060, "tcp.example.com")
            .srv("_sips._tcp.example.com", 10, 0, 5061, "tls.example.com")
            .srv("_sip._ws.example.com", 10, 0, 8080, "ws.example.com")
            .srv("_sips._ws.example.com", 10, 0, 8443, "wss.example.com")
            .ip("udp.example.com", v4(192, 0, 2, 1))
            .ip("tcp.example.com", v4(192, 0, 2, 2))
            .ip("tls.example.com", v4(192, 0, 2, 3))
            .ip("ws.example.com", v4(192, 0, 2, 4))
            .ip("wss.example.com", v4(192, 0, 2, 5))
            .ip("example.com", v4(192, 0, 2, 100))
    }

    #[test]
    fn ip_literal_uses_that_address_and_default_port() {
        let dns = MemoryDns::new();
        assert_eq!(run(&dns, &name("192.0.2.9"), ALL), Ok(vec![t(Transport::Udp, "192.0.2.9:5060")]));
        let sips = SipTarget::new("192.0.2.9", None, None, true);
        assert_eq!(run(&dns, &sips, ALL), Ok(vec![t(Transport::Tls, "192.0.2.9:5061")]));
        let v6 = SipTarget::new("[2001:db8::9]", Some(5070), Some(Transport::Tcp), false);
        assert_eq!(run(&dns, &v6, ALL), Ok(vec![t(Transport::Tcp, "[2001:db8::9]:5070")]));
        let ws = SipTarget::new("192.0.2.9", None, Some(Transport::Ws), false);
        assert_eq!(run(&dns, &ws, ALL), Ok(vec![t(Transport::Ws, "192.0.2.9:5060")]));
        let wss = SipTarget::new("192.0.2.9", None, Some(Transport::Ws), true);
        assert_eq!(run(&dns, &wss, ALL), Ok(vec![t(Transport::Wss, "192.0.2.9:5061")]));
    }

    #[test]
    fn ip_literal_without_udp_support_uses_first_preference() {
        let dns = MemoryDns::new();
        assert_eq!(run(&dns, &name("192.0.2.9"), &[Transport::Tcp, Transport::Tls]), Ok(vec![t(Transport::Tcp, "192.0.2.9:5060")]));
    }

    #[test]
    fn transport_param_selects_srv_of_that_transport_skipping_naptr() {
        let dns = full_zone();
        let target = SipTarget::new("example.com", None, Some(Transport::Udp), false);
        assert_eq!(run(&dns, &target, ALL), Ok(vec![t(Transport::Udp, "192.0.2.1:5060")]));
        // sips + transport=tcp is TLS, found under _sips._tcp.
        let target = SipTarget::new("example.com", None, Some(Transport::Tcp), true);
        assert_eq!(run(&dns, &target, ALL), Ok(vec![t(Transport::Tls, "192.0.2.3:5061")]));
    }

    #[test]
    fn transport_param_without_srv_uses_host_and_default_port() {
        let dns = MemoryDns::new().ip("example.com", v4(192, 0, 2, 100));
        let ws = SipTarget::new("example.com", None, Some(Transport::Ws), false);
        assert_eq!(run(&dns, &ws, ALL), Ok(vec![t(Transport::Ws, "192.0.2.100:5060")]));
        let tls = SipTarget::new("example.com", None, Some(Transport::Tls), false);
        assert_eq!(run(&dns, &tls, ALL), Ok(vec![t(Transport::Tls, "192.0.2.100:5061")]));
    }

    #[test]
    fn unsupported_transport_param_is_an_error() {
        let dns = full_zone();
        let target = SipTarget::new("example.com", None, Some(Transport::Ws), false);
        assert_eq!(
            run(&dns, &target, &[Transport::Udp, Transport::Tcp]),
            Err(ResolveError::UnsupportedTransport { transport: Transport::Ws, secure: false })
        );
        let other = SipTarget::new("example.com", None, Some(Transport::Other), false);
        assert!(matches!(run(&dns, &other, ALL), Err(ResolveError::UnsupportedTransport { .. })));
        let sips_udp = SipTarget::new("example.com", None, Some(Transport::Udp), true);
        assert!(matches!(run(&dns, &sips_udp, ALL), Err(ResolveError::UnsupportedTransport { transport: Transport::Udp, secure: true })));
        let sips = SipTarget::new("example.com", None, None, true);
        assert_eq!(run(&dns, &sips, &[Transport::Udp, Transport::Tcp]), Err(ResolveError::NoTransport { secure: true }));
    }

    #[test]
    fn explicit_port_skips_naptr_and_srv() {
        let dns = full_zone().ip("example.com", "2001:db8::100".parse().unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        let target = SipTarget::new("example.com", Some(5080), None, false);
        assert_eq!(run(&dns, &target, ALL), Ok(vec![t(Transport::Udp, "192.0.2.100:5080"), t(Transport::Udp, "[2001:db8::100]:5080")]));
        let sips = SipTarget::new("example.com", Some(5081), None, true);
        assert_eq!(first(run(&dns, &sips, ALL)), Some(t(Transport::Tls, "192.0.2.100:5081")));
        // No UDP in the list: the first supported one.
        assert_eq!(first(run(&dns, &target, &[Transport::Tcp, Transport::Udp])), Some(t(Transport::Udp, "192.0.2.100:5080")));
        assert_eq!(first(run(&dns, &target, &[Transport::Tcp, Transport::Tls])), Some(t(Transport::Tcp, "192.0.2.100:5080")));
    }

    #[test]
    fn naptr_order_wins_over_preferences_which_only_filter() {
        let dns = full_zone();
        // Our list prefers UDP, but the zone orders SIPS+D2T (10/10), SIP+D2T (10/20), SIP+D2W (30),
        // SIPS+D2W (40), SIP+D2U (50). Non-S flags and non-SIP services are ignored.
        assert_eq!(
            run(&dns, &name("example.com"), ALL),
            Ok(vec![
                t(Transport::Tls, "192.0.2.3:5061"),
                t(Transport::Tcp, "192.0.2.2:5060"),
                t(Transport::Ws, "192.0.2.4:8080"),
                t(Transport::Wss, "192.0.2.5:8443"),
                t(Transport::Udp, "192.0.2.1:5060"),
            ])
        );
        // Only UDP and TCP supported: the others are filtered out, the zone's order is kept.
        assert_eq!(
            run(&dns, &name("example.com"), &[Transport::Udp, Transport::Tcp]),
            Ok(vec![t(Transport::Tcp, "192.0.2.2:5060"), t(Transport::Udp, "192.0.2.1:5060")])
        );
    }

    #[test]
    fn sips_keeps_only_sips_naptr_services() {
        let dns = full_zone();
        let sips = SipTarget::new("example.com", None, None, true);
        assert_eq!(run(&dns, &sips, ALL), Ok(vec![t(Transport::Tls, "192.0.2.3:5061"), t(Transport::Wss, "192.0.2.5:8443")]));
    }

    #[test]
    fn naptr_with_no_supported_service_falls_back_to_srv() {
        let dns = MemoryDns::new()
            .naptr("example.com", 10, 10, "s", "SIP+D2S", "_sip._sctp.example.com")
            .srv("_sip._tcp.example.com", 10, 0, 5070, "tcp.example.com")
            .ip("tcp.example.com", v4(192, 0, 2, 2));
        assert_eq!(run(&dns, &name("example.com"), &[Transport::Udp, Transport::Tcp]), Ok(vec![t(Transport::Tcp, "192.0.2.2:5070")]));
    }

    #[test]
    fn srv_without_naptr_takes_first_preferred_transport_that_answers() {
        let dns = MemoryDns::new()
            .srv("_sip._udp.example.com", 10, 0, 5060, "udp.example.com")
            .srv("_sip._tcp.example.com", 10, 0, 5060, "tcp.example.com")
            .ip("udp.example.com", v4(192, 0, 2, 1))
            .ip("tcp.example.com", v4(192, 0, 2, 2));
        assert_eq!(run(&dns, &name("example.com"), &[Transport::Tcp, Transport::Udp]), Ok(vec![t(Transport::Tcp, "192.0.2.2:5060")]));
        assert_eq!(run(&dns, &name("example.com"), &[Transport::Udp, Transport::Tcp]), Ok(vec![t(Transport::Udp, "192.0.2.1:5060")]));
        // TLS preferred but no _sips._tcp: the next one that answers.
        assert_eq!(run(&dns, &name("example.com"), &[Transport::Tls, Transport::Tcp]), Ok(vec![t(Transport::Tcp, "192.0.2.2:5060")]));
    }

    #[test]
    fn no_srv_falls_back_to_a_aaaa_with_default_port() {
        let dns =
            MemoryDns::new().ip("example.com", v4(192, 0, 2, 100)).ip("example.com", "2001:db8::100".parse().unwrap_or(v4(0, 0, 0, 0)));
        assert_eq!(
            run(&dns, &name("example.com"), &[Transport::Tcp, Transport::Udp]),
            Ok(vec![t(Transport::Tcp, "192.0.2.100:5060"), t(Transport::Tcp, "[2001:db8::100]:5060")])
        );
        let sips = SipTarget::new("example.com", None, None, true);
        assert_eq!(first(run(&dns, &sips, &[Transport::Udp, Transport::Tls])), Some(t(Transport::Tls, "192.0.2.100:5061")));
    }

    #[test]
    fn ipv6_only_host() {
        let dns = MemoryDns::new()
            .srv("_sip._udp.example.com", 10, 0, 5062, "v6.example.com")
            .ip("v6.example.com", "2001:db8::6".parse().unwrap_or(v4(0, 0, 0, 0)));
        assert_eq!(run(&dns, &name("example.com"), ALL), Ok(vec![t(Transport::Udp, "[2001:db8::6]:5062")]));
    }

    #[test]
    fn nxdomain_is_no_records_and_server_failure_is_dns_error() {
        let dns = MemoryDns::new();
        assert_eq!(run(&dns, &name("nowhere.example"), ALL), Err(ResolveError::NoRecords("nowhere.example".into())));
        let failing = MemoryDns::new().fail("broken.example");
        assert!(matches!(run(&failing, &name("broken.example"), ALL), Err(ResolveError::Dns(_))));
        // A failed NAPTR query (and a failed SRV query) does not hide the SRV records that answer.
        let partly = MemoryDns::new()
            .fail("example.com")
            .fail("_sip._udp.example.com")
            .srv("_sip._tcp.example.com", 10, 0, 5060, "tcp.example.com")
            .ip("tcp.example.com", v4(192, 0, 2, 2));
        assert_eq!(run(&partly, &name("example.com"), ALL), Ok(vec![t(Transport::Tcp, "192.0.2.2:5060")]));
    }

    #[test]
    fn srv_targets_with_several_addresses_and_dot_target() {
        let dns = MemoryDns::new()
            .srv("_sip._udp.example.com", 10, 0, 5060, ".")
            .srv("_sip._udp.example.com", 20, 0, 5060, "multi.example.com")
            .ip("multi.example.com", v4(192, 0, 2, 1))
            .ip("multi.example.com", v4(192, 0, 2, 2));
        assert_eq!(
            run(&dns, &name("example.com"), ALL),
            Ok(vec![t(Transport::Udp, "192.0.2.1:5060"), t(Transport::Udp, "192.0.2.2:5060")])
        );
    }

    fn srv(priority: u16, weight: u16, target: &str) -> SrvRecord {
        SrvRecord { priority, weight, port: 5060, target: target.to_owned() }
    }

    fn targets(records: &[SrvRecord]) -> Vec<&str> {
        records.iter().map(|r| r.target.as_str()).collect()
    }

    #[test]
    fn srv_priority_ascending() {
        let records = [srv(30, 5, "c"), srv(10, 5, "a"), srv(20, 5, "b")];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(targets(&order_srv(&records, &mut rng)), ["a", "b", "c"]);
    }

    #[test]
    fn srv_weighted_order_is_deterministic_per_seed_and_follows_weights() {
        let records = [srv(10, 90, "heavy"), srv(10, 10, "light"), srv(10, 0, "zero"), srv(5, 0, "first")];
        let mut a = ChaCha8Rng::seed_from_u64(42);
        let mut b = ChaCha8Rng::seed_from_u64(42);
        for _ in 0..20 {
            let x = order_srv(&records, &mut a);
            assert_eq!(x, order_srv(&records, &mut b));
            assert_eq!(x.len(), 4);
            assert_eq!(x[0].target, "first");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut heavy_first = 0;
        let mut zero_first = 0;
        for _ in 0..1000 {
            let x = order_srv(&records, &mut rng);
            match x[1].target.as_str() {
                "heavy" => heavy_first += 1,
                "zero" => zero_first += 1,
                _ => {}
            }
        }
        // Expected 90/101 heavy, 1/101 zero.
        assert!((850..950).contains(&heavy_first), "heavy first {heavy_first} of 1000");
        assert!(zero_first < 40, "zero-weight first {zero_first} of 1000");
    }

    #[test]
    fn naptr_ordering_pure() {
        let records = [
            NaptrRecord { order: 20, preference: 1, flags: "s".into(), services: "SIP+D2U".into(), replacement: "u".into() },
            NaptrRecord { order: 10, preference: 2, flags: "s".into(), services: "SIP+D2T".into(), replacement: "t".into() },
            NaptrRecord { order: 10, preference: 1, flags: "S".into(), services: "sips+d2t".into(), replacement: "s".into() },
            NaptrRecord { order: 1, preference: 1, flags: "s".into(), services: "SIPS+D2S".into(), replacement: "x".into() },
        ];
        assert_eq!(
            order_naptr(&records, false, ALL),
            [(Transport::Tls, "s".to_owned()), (Transport::Tcp, "t".to_owned()), (Transport::Udp, "u".to_owned())]
        );
        assert_eq!(order_naptr(&records, true, ALL), [(Transport::Tls, "s".to_owned())]);
        assert_eq!(order_naptr(&records, false, &[Transport::Udp]), [(Transport::Udp, "u".to_owned())]);
    }
}
