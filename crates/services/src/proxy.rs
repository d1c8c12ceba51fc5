//! `proxy`: a transaction-stateful, record-routing proxy. Initial requests go to the
//! configured next hop (or the Request-URI); subsequent ones follow loose routing.

use serde::Deserialize;
use tandem_container::{Context, Destination, ProxyOptions, Request, RequestKind, Service};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// `IP:PORT` (UDP) or `tcp:IP:PORT`; absent: the Request-URI decides.
    pub next_hop: Option<String>,
    /// Stay on the dialog's path (Record-Route). On by default.
    pub record_route: Option<bool>,
}

pub struct Proxy {
    next_hop: Option<Destination>,
    record_route: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("proxy.next_hop {0:?} is not IP:PORT, udp:IP:PORT or tcp:IP:PORT")]
pub struct InvalidNextHop(pub String);

impl Proxy {
    pub fn new(config: &ProxyConfig) -> Result<Proxy, InvalidNextHop> {
        let next_hop = match &config.next_hop {
            Some(s) => Some(Destination::parse(s).ok_or_else(|| InvalidNextHop(s.clone()))?),
            None => None,
        };
        Ok(Proxy { next_hop, record_route: config.record_route.unwrap_or(true) })
    }
}

impl Service for Proxy {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        let options = match req.kind {
            RequestKind::Initial => ProxyOptions { destination: self.next_hop, fallback: None, record_route: self.record_route },
            RequestKind::Routed | RequestKind::InDialog => ProxyOptions { destination: None, fallback: self.next_hop, record_route: false },
        };
        if let Err(e) = ctx.proxy(req, options) {
            tracing::debug!(error = %e, "proxy could not forward");
        }
    }
}
