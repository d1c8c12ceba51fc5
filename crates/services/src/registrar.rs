//! `registrar`: REGISTER (RFC 3261 §10.3) into an in-memory location service, which the
//! `proxy` consults to reach registered users — including browsers on WebSocket, whose
//! Contact names an unreachable `.invalid` host: a binding made over a connection (WS, WSS,
//! TCP, TLS) is reached over that same connection (RFC 7118 §5, RFC 5626 in spirit).
//!
//! No authentication: deploy behind something that authenticates, or on a trusted network.

use parking_lot::Mutex;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_container::{Context, Destination, Request, Service};
use tandem_sip::{HeaderName, Method, NameAddr, Uri};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistrarConfig {
    /// Registrations asking for more are granted this (and told so in the 200 OK).
    #[serde(with = "humantime_serde")]
    pub max_expires: Duration,
    /// Registrations asking for less (but not 0) are refused with 423 Interval Too Brief.
    #[serde(with = "humantime_serde")]
    pub min_expires: Duration,
    /// Granted when the request names no expiry.
    #[serde(with = "humantime_serde")]
    pub default_expires: Duration,
}

impl Default for RegistrarConfig {
    fn default() -> Self {
        RegistrarConfig {
            max_expires: Duration::from_secs(3600),
            min_expires: Duration::from_secs(60),
            default_expires: Duration::from_secs(3600),
        }
    }
}

/// One registered contact of an address of record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The Contact URI as registered (the Request-URI a proxy retargets to).
    pub contact: String,
    /// Where requests for it go: the registering connection for connection-oriented
    /// transports, else the contact's own address (or the REGISTER's source when it names
    /// a host without an IP address).
    pub destination: Destination,
    pub expires_at: Instant,
    call_id: String,
    cseq: u32,
}

/// Bindings by address of record, and the reverse index from contact to AOR that in-dialog
/// requests (sent to a contact) are routed with. Shared by the registrar and the proxy; it
/// is a resource like the database, so it has its own (short) lock.
#[derive(Default)]
pub struct Location {
    inner: Mutex<LocationTables>,
}

#[derive(Default)]
struct LocationTables {
    by_aor: HashMap<String, Vec<Binding>>,
    contact_to_aor: HashMap<String, String>,
}

/// `user@host` of a SIP URI, host lowercased: what bindings are keyed by.
pub fn aor_key(uri: &Uri<'_>) -> Option<String> {
    let Uri::Sip(sip) = uri else { return None };
    Some(format!("{}@{}", sip.user_base().unwrap_or(""), sip.host.to_ascii_lowercase()))
}

impl Location {
    pub fn new() -> Arc<Location> {
        Arc::new(Location::default())
    }

    /// Live bindings of an AOR, most recently registered first.
    pub fn lookup(&self, aor: &str, now: Instant) -> Vec<Binding> {
        let mut tables = self.inner.lock();
        tables.expire(aor, now);
        tables.by_aor.get(aor).map(|b| b.iter().rev().cloned().collect()).unwrap_or_default()
    }

    /// The destination of a registered contact URI (an in-dialog request's Request-URI).
    pub fn destination_of_contact(&self, contact: &str, now: Instant) -> Option<Destination> {
        let tables = self.inner.lock();
        let aor = tables.contact_to_aor.get(contact)?;
        tables.by_aor.get(aor)?.iter().find(|b| b.contact == contact && b.expires_at > now).map(|b| b.destination)
    }

    /// Number of live and expired-but-not-yet-removed bindings (for tests and metrics).
    pub fn len(&self) -> usize {
        self.inner.lock().by_aor.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LocationTables {
    fn expire(&mut self, aor: &str, now: Instant) {
        let Some(bindings) = self.by_aor.get_mut(aor) else { return };
        let (live, dead): (Vec<_>, Vec<_>) = std::mem::take(bindings).into_iter().partition(|b| b.expires_at > now);
        *bindings = live;
        for b in dead {
            self.contact_to_aor.remove(&b.contact);
        }
        if self.by_aor.get(aor).is_some_and(Vec::is_empty) {
            self.by_aor.remove(aor);
        }
    }

    fn remove(&mut self, aor: &str, contact: &str) {
        if let Some(bindings) = self.by_aor.get_mut(aor) {
            bindings.retain(|b| b.contact != contact);
        }
        self.contact_to_aor.remove(contact);
    }
}

pub struct Registrar {
    config: RegistrarConfig,
    location: Arc<Location>,
}

/// What one Contact value of a REGISTER asks for.
struct ContactRequest<'a> {
    uri: &'a str,
    expires: Option<u64>,
}

impl Registrar {
    pub fn new(config: &RegistrarConfig, location: Arc<Location>) -> Registrar {
        Registrar { config: config.clone(), location }
    }

    fn register(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        let msg = req.msg;
        let Some(aor) = msg.to_addr().and_then(|to| to.uri()).as_ref().and_then(aor_key) else {
            return ctx.respond_with(req, 400, &[("Warning", "399 tandem \"To is not a SIP URI\"")], None);
        };
        let header_expires = msg.header(HeaderName::Expires).map(|v| v.trim().parse::<u64>());
        if let Some(Err(_)) = header_expires {
            return ctx.respond_with(req, 400, &[("Warning", "399 tandem \"invalid Expires\"")], None);
        }
        let header_expires = header_expires.and_then(Result::ok);
        let mut contacts = Vec::new();
        let mut wildcard = false;
        for (_, value) in msg.values_of(HeaderName::Contact) {
            if value.trim() == "*" {
                wildcard = true;
                continue;
            }
            let Some(addr) = NameAddr::parse(value) else {
                return ctx.respond_with(req, 400, &[("Warning", "399 tandem \"invalid Contact\"")], None);
            };
            let expires = match addr.param("expires") {
                Some(Some(v)) => match v.parse::<u64>() {
                    Ok(n) => Some(n),
                    Err(_) => return ctx.respond_with(req, 400, &[("Warning", "399 tandem \"invalid expires parameter\"")], None),
                },
                _ => header_expires,
            };
            contacts.push(ContactRequest { uri: addr.uri_text, expires });
        }
        let (call_id, cseq, now) = (msg.call_id(), msg.cseq().map_or(0, |c| c.seq), ctx.now());
        // RFC 3261 §10.3 step 6: "*" only alone and with Expires: 0.
        if wildcard {
            if !contacts.is_empty() || header_expires != Some(0) {
                return ctx.respond(req, 400);
            }
            let mut tables = self.location.inner.lock();
            for b in tables.by_aor.remove(&aor).unwrap_or_default() {
                tables.contact_to_aor.remove(&b.contact);
            }
            drop(tables);
            return ctx.respond(req, 200);
        }
        let min = self.config.min_expires.as_secs();
        if let Some(too_brief) = contacts.iter().filter_map(|c| c.expires).find(|&e| e != 0 && e < min) {
            tracing::debug!(aor, too_brief, "registration interval too brief");
            return ctx.respond_with(req, 423, &[("Min-Expires", &min.to_string())], None);
        }
        let mut tables = self.location.inner.lock();
        tables.expire(&aor, now);
        // Step 7: a re-registration with an older CSeq in the same Call-ID is out of order.
        let stale = contacts.iter().any(|c| {
            tables.by_aor.get(&aor).is_some_and(|bs| bs.iter().any(|b| b.contact == c.uri && b.call_id == call_id && b.cseq >= cseq))
        });
        if stale {
            drop(tables);
            return ctx.respond(req, 500);
        }
        for c in &contacts {
            let seconds = c.expires.unwrap_or(self.config.default_expires.as_secs()).min(self.config.max_expires.as_secs());
            tables.remove(&aor, c.uri);
            if seconds == 0 {
                continue;
            }
            let binding = Binding {
                contact: c.uri.to_string(),
                destination: destination_for(c.uri, req),
                expires_at: now + Duration::from_secs(seconds),
                call_id: call_id.to_string(),
                cseq,
            };
            tables.contact_to_aor.insert(binding.contact.clone(), aor.clone());
            tables.by_aor.entry(aor.clone()).or_default().push(binding);
        }
        // The 200 OK lists every current binding with the time it has left.
        let current: Vec<String> = tables
            .by_aor
            .get(&aor)
            .map(|bs| bs.iter().map(|b| format!("<{}>;expires={}", b.contact, seconds_left(b.expires_at, now))).collect())
            .unwrap_or_default();
        drop(tables);
        let headers: Vec<(&str, &str)> = current.iter().map(|c| ("Contact", c.as_str())).collect();
        ctx.respond_with(req, 200, &headers, None);
    }
}

/// Whole seconds a binding has left, rounded up (a fresh binding shows what was granted).
fn seconds_left(expires_at: Instant, now: Instant) -> u64 {
    (expires_at.saturating_duration_since(now).as_millis() as u64).div_ceil(1000)
}

/// Connection-oriented transports: the connection the REGISTER came on (the only way to reach
/// a browser). UDP: the contact's own address when it is an IP literal, else the source.
fn destination_for(contact: &str, req: &Request<'_>) -> Destination {
    let flow = req.flow;
    let over_flow = Destination { transport: flow.transport, addr: flow.remote };
    if flow.transport.is_reliable() {
        return over_flow;
    }
    Uri::parse(contact).as_ref().and_then(Destination::from_uri).unwrap_or(over_flow)
}

impl Service for Registrar {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        match req.method() {
            Method::Register => self.register(ctx, req),
            Method::Ack => {}
            Method::Options => ctx.respond_with(req, 200, &[("Allow", "REGISTER, OPTIONS")], None),
            _ => ctx.respond_with(req, 405, &[("Allow", "REGISTER, OPTIONS")], None),
        }
    }
}
