//! `proxy`: a transaction-stateful, record-routing proxy. Initial requests go to the
//! configured next hop, else to the contact registered for the Request-URI (when a
//! `registrar` runs beside it), else to the Request-URI; subsequent ones follow loose routing,
//! and reach registered contacts over the connection they registered on. A next hop named
//! by a host name is located with RFC 3263 (NAPTR, SRV, A/AAAA) when a resolver is given.

use crate::registrar::{aor_key, Location};
use serde::Deserialize;
use std::sync::Arc;
use tandem_container::{Context, Destination, DetachedRequest, ProxyOptions, Request, RequestKind, Service};
use tandem_resolver::{Resolver, SipTarget};
use tandem_sip::{Transport, Uri};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// `IP:PORT` (UDP), `PROTO:IP:PORT` (udp, tcp, tls, ws, wss, inproc), or a SIP URI
    /// located with RFC 3263 for each initial request, e.g. `sip:proxy.example.com` or
    /// `sips:edge.example.com;transport=tcp`; absent: the Request-URI decides.
    pub next_hop: Option<String>,
    /// Stay on the dialog's path (Record-Route). On by default.
    pub record_route: Option<bool>,
}

pub struct Proxy {
    next_hop: Option<Destination>,
    /// A next hop named by host, located per request (needs [`Proxy::with_dns`]).
    next_hop_name: Option<SipTarget>,
    record_route: bool,
    location: Option<Arc<Location>>,
    dns: Option<ProxyDns>,
}

/// RFC 3263 resolution for next hops named by host: the resolver, the runtime its lookups
/// run on, and the transports to use in order of preference (the configuration's list,
/// reduced to those this server listens on).
#[derive(Clone)]
pub struct ProxyDns {
    pub resolver: Resolver,
    pub runtime: tokio::runtime::Handle,
    pub preferences: Vec<Transport>,
}

#[derive(Debug, thiserror::Error)]
#[error("proxy.next_hop {0:?} is not IP:PORT, PROTO:IP:PORT or a sip:/sips: URI")]
pub struct InvalidNextHop(pub String);

impl Proxy {
    pub fn new(config: &ProxyConfig) -> Result<Proxy, InvalidNextHop> {
        let (mut next_hop, mut next_hop_name) = (None, None);
        if let Some(s) = &config.next_hop {
            match (Destination::parse(s), Uri::parse(s)) {
                (Some(d), _) => next_hop = Some(d),
                (None, Some(uri)) => match Destination::from_uri(&uri) {
                    Some(d) => next_hop = Some(d),
                    None => match uri {
                        Uri::Sip(sip) => next_hop_name = Some(SipTarget::from_uri(&sip)),
                        _ => return Err(InvalidNextHop(s.clone())),
                    },
                },
                (None, None) => return Err(InvalidNextHop(s.clone())),
            }
        }
        let record_route = config.record_route.unwrap_or(true);
        Ok(Proxy { next_hop, next_hop_name, record_route, location: None, dns: None })
    }

    /// Locates next hops named by host name (RFC 3263); without it they get 503.
    pub fn with_dns(mut self, dns: ProxyDns) -> Proxy {
        self.dns = Some(dns);
        self
    }

    /// Routes requests for registered users to their contacts (the registrar's bindings).
    pub fn with_location(mut self, location: Arc<Location>) -> Proxy {
        self.location = Some(location);
        self
    }
}

impl Service for Proxy {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        let mut options = match req.kind {
            RequestKind::Initial => ProxyOptions { destination: self.next_hop, record_route: self.record_route, ..Default::default() },
            RequestKind::Routed | RequestKind::InDialog => ProxyOptions { fallback: self.next_hop, ..Default::default() },
        };
        let registered = match (&self.location, self.next_hop, &self.next_hop_name) {
            (Some(location), None, None) => self.registered_target(ctx, req, location),
            _ => None,
        };
        match &registered {
            Some(Target::Registered(destination, contact)) => {
                options.destination = Some(*destination);
                options.request_uri = contact.as_deref();
            }
            Some(Target::Unavailable) => return ctx.respond_with(req, 480, &[("Warning", "399 tandem \"not registered\"")], None),
            None => {}
        }
        if let (Some(name), RequestKind::Initial) = (&self.next_hop_name, req.kind) {
            return match &self.dns {
                Some(dns) => self.resolve_then_forward(ctx, req, dns, name.clone(), options.record_route),
                None => ctx.respond_with(req, 503, &[("Warning", "399 tandem \"no DNS resolver for proxy.next_hop\"")], None),
            };
        }
        if let (Some(dns), None) = (&self.dns, options.destination) {
            match req.next_hop_uri().map(|u| (Destination::from_uri(&u), u)) {
                // Located here already: the container need not parse it again.
                Some((Some(located), _)) => options.located = Some(located),
                Some((None, Uri::Sip(sip))) => {
                    let target = SipTarget::from_uri(&sip);
                    return self.resolve_then_forward(ctx, req, dns, target, options.record_route);
                }
                _ => {}
            }
        }
        if let Err(e) = ctx.proxy(req, options) {
            tracing::debug!(error = %e, "proxy could not forward");
        }
    }
}

impl Proxy {
    /// Looks the host up off the executor, then forwards on the executor the request came in
    /// on, to the first target (an INVITE is answered 100 Trying meanwhile). Failing
    /// resolution answers 503.
    fn resolve_then_forward(&self, ctx: &mut Context<'_>, req: &Request<'_>, dns: &ProxyDns, target: SipTarget, record_route: bool) {
        if req.method() == &tandem_sip::Method::Invite {
            ctx.respond(req, 100);
        }
        let preferences: Vec<Transport> = dns.preferences.iter().copied().filter(|t| ctx.listens_on(*t)).collect();
        let (resolver, completion, detached) = (dns.resolver.clone(), ctx.completion(), req.detach());
        dns.runtime.spawn(async move {
            let resolved = resolver.resolve(&target, &preferences).await;
            completion.complete(Box::new(move |ctx: &mut Context<'_>| forward_resolved(ctx, &detached, &target, resolved, record_route)));
        });
    }

    /// Initial requests: the newest binding of the Request-URI's AOR (retargeted to its
    /// contact). Others: the binding whose contact is the Request-URI, if any (the only route
    /// to a browser whose contact host is `.invalid`). An unregistered user of this server's
    /// own domain gets 480.
    fn registered_target(&self, ctx: &mut Context<'_>, req: &Request<'_>, location: &Location) -> Option<Target> {
        let uri = req.msg.request_uri()?;
        let now = ctx.now();
        if req.kind != RequestKind::Initial {
            return location.destination_of_contact(req.msg.request_uri_text(), now).map(|d| Target::Registered(d, None));
        }
        let binding = aor_key(&uri).and_then(|aor| location.lookup(&aor, now).into_iter().next());
        match binding {
            Some(b) => Some(Target::Registered(b.destination, Some(b.contact))),
            None if ctx.is_local_uri(&uri) && req.method() != &tandem_sip::Method::Ack => Some(Target::Unavailable),
            None => None,
        }
    }
}

/// Targets tried after the first when it fails at the transport or times out.
const MAX_ALTERNATIVES: usize = 4;

fn forward_resolved(
    ctx: &mut Context<'_>,
    detached: &DetachedRequest,
    target: &SipTarget,
    resolved: Result<Vec<tandem_resolver::Target>, tandem_resolver::ResolveError>,
    record_route: bool,
) {
    let req = detached.request();
    match resolved.as_deref().map(|targets| targets.split_first()) {
        Ok(Some((first, rest))) => {
            tracing::debug!(host = target.host(), transport = ?first.transport, addr = %first.addr, "next hop located");
            let destination = Destination { transport: first.transport, addr: first.addr };
            // The rest, in order, for failover (RFC 3263 §4.3); a few are plenty.
            let alternatives: Vec<Destination> =
                rest.iter().take(MAX_ALTERNATIVES).map(|t| Destination { transport: t.transport, addr: t.addr }).collect();
            let options = ProxyOptions { destination: Some(destination), record_route, alternatives: &alternatives, ..Default::default() };
            if let Err(e) = ctx.proxy(&req, options) {
                tracing::debug!(error = %e, "proxy could not forward");
            }
        }
        Ok(None) => ctx.respond_with(&req, 503, &[("Warning", "399 tandem \"no target for the next hop\"")], None),
        Err(e) => {
            tracing::debug!(host = target.host(), error = %e, "next hop not located");
            // Inside a quoted string: no quotes, backslashes or line breaks from the error text.
            let reason: String =
                format!("cannot locate {}: {e}", target.host()).chars().filter(|c| !matches!(c, '"' | '\\' | '\r' | '\n')).collect();
            let warning = format!("399 tandem \"{reason}\"");
            ctx.respond_with(&req, 503, &[("Warning", &warning)], None);
        }
    }
}

enum Target {
    /// A binding: where to send, and the contact to retarget to (initial requests).
    Registered(Destination, Option<String>),
    /// Addressed to a user of this server who is not registered.
    Unavailable,
}
