//! Prometheus metrics. Counter handles for every label combination are created up front, so
//! the per-message path is one atomic add, never a label lookup.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use tandem_sip::{Method, Transport};

/// Method labels: the standard methods' names (`Method::STANDARD_NAMES`, by
/// `Method::standard_index`), then "other" for extension methods.
const METHODS: usize = Method::STANDARD_NAMES.len() + 1;

fn method_label(index: usize) -> &'static str {
    Method::STANDARD_NAMES.get(index).copied().unwrap_or("other")
}

const CLASSES: [&str; 7] = ["request", "1xx", "2xx", "3xx", "4xx", "5xx", "6xx"];
/// The transports with a label of their own (`Transport::as_lowercase_str`); SCTP and unknown
/// ones are counted under "tcp" (`Metrics::slot`).
const TRANSPORTS: [Transport; 6] = [Transport::Udp, Transport::Tcp, Transport::Tls, Transport::Ws, Transport::Wss, Transport::InProc];
const SLOTS: usize = METHODS * CLASSES.len() * TRANSPORTS.len();

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    method: &'static str,
    status_class: &'static str,
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// Why a message was dropped or refused without reaching a service.
#[derive(Debug, Clone, Copy)]
pub enum Drop {
    /// An executor's queue was full (a request got 503 if it could).
    Overload,
    /// Too many transactions or sessions (503).
    Limit,
    /// A response or ACK that matched nothing.
    Stray,
    /// A request with no route to any service (404).
    NoRoute,
    /// Could not send (queue full, no listener, unresolvable target).
    SendFailed,
}

impl Drop {
    fn label(self) -> &'static str {
        match self {
            Drop::Overload => "overload",
            Drop::Limit => "limit",
            Drop::Stray => "stray",
            Drop::NoRoute => "no_route",
            Drop::SendFailed => "send_failed",
        }
    }
}

pub struct Metrics {
    registry: Registry,
    messages_in: Vec<Counter>,
    messages_out: Vec<Counter>,
    parse_errors: Family<KindLabels, Counter>,
    drops: Family<ReasonLabels, Counter>,
    absorbed: Counter,
    handler_seconds: Histogram,
    sip_sessions: Gauge,
    app_sessions: Gauge,
    transactions: Family<KindLabels, Gauge>,
    retransmissions: Counter,
    tcp_connections: Gauge,
    /// Per-executor transaction counts and retransmissions, published by each executor.
    pub(crate) executor_stats: Vec<ExecutorStats>,
}

#[derive(Default)]
pub(crate) struct ExecutorStats {
    pub server_transactions: AtomicU64,
    pub client_transactions: AtomicU64,
    pub retransmissions: AtomicU64,
}

impl Metrics {
    pub fn new(executors: usize) -> Metrics {
        let mut registry = Registry::with_prefix("tandem");
        let messages_in_family = Family::<MessageLabels, Counter>::default();
        let messages_out_family = Family::<MessageLabels, Counter>::default();
        registry.register("messages_in", "SIP messages received, by method, status class and transport", messages_in_family.clone());
        registry.register(
            "messages_out",
            "SIP messages sent (first transmissions), by method, status class and transport",
            messages_out_family.clone(),
        );
        let messages_in = Self::slots(&messages_in_family);
        let messages_out = Self::slots(&messages_out_family);
        let parse_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "parse_errors",
            "Received bytes that were not a valid SIP message (unparseable, or invalid and answered 4xx/dropped)",
            parse_errors.clone(),
        );
        let drops = Family::<ReasonLabels, Counter>::default();
        registry.register("dropped", "Messages dropped or refused before reaching a service", drops.clone());
        let absorbed = Counter::default();
        registry.register("absorbed", "Retransmissions absorbed by the transaction layer", absorbed.clone());
        let handler_seconds = Histogram::new(exponential_buckets(0.000_005, 2.0, 18));
        registry.register("handler_seconds", "Time spent in service handlers per event", handler_seconds.clone());
        let sip_sessions = Gauge::default();
        registry.register("sip_sessions", "Live SIP sessions", sip_sessions.clone());
        let app_sessions = Gauge::default();
        registry.register("app_sessions", "Live application sessions", app_sessions.clone());
        let transactions = Family::<KindLabels, Gauge>::default();
        registry.register("transactions", "Live SIP transactions", transactions.clone());
        let retransmissions = Counter::default();
        registry.register("retransmissions", "Requests and responses retransmitted by the transaction layer", retransmissions.clone());
        let tcp_connections = Gauge::default();
        registry.register("tcp_connections", "Open TCP connections", tcp_connections.clone());
        Metrics {
            registry,
            messages_in,
            messages_out,
            parse_errors,
            drops,
            absorbed,
            handler_seconds,
            sip_sessions,
            app_sessions,
            transactions,
            retransmissions,
            tcp_connections,
            executor_stats: (0..executors).map(|_| ExecutorStats::default()).collect(),
        }
    }

    fn slots(family: &Family<MessageLabels, Counter>) -> Vec<Counter> {
        let mut v = Vec::with_capacity(SLOTS);
        for method in (0..METHODS).map(method_label) {
            for status_class in CLASSES {
                for transport in TRANSPORTS.map(Transport::as_lowercase_str) {
                    v.push(family.get_or_create(&MessageLabels { method, status_class, transport }).clone());
                }
            }
        }
        v
    }

    fn slot(method: Option<&Method>, status: Option<u16>, transport: Transport) -> usize {
        // By index: this runs for every message in and out.
        let m = method.and_then(Method::standard_index).unwrap_or(METHODS - 1);
        let c = status.map_or(0, |s| usize::from(s / 100).clamp(1, 6));
        let t = TRANSPORTS.iter().position(|x| *x == transport).unwrap_or(1);
        (m * CLASSES.len() + c) * TRANSPORTS.len() + t
    }

    pub fn message_in(&self, method: Option<&Method>, status: Option<u16>, transport: Transport) {
        self.messages_in[Self::slot(method, status, transport)].inc();
    }

    pub fn message_out(&self, method: Option<&Method>, status: Option<u16>, transport: Transport) {
        self.messages_out[Self::slot(method, status, transport)].inc();
    }

    pub fn parse_error(&self, invalid_but_framed: bool) {
        let kind = if invalid_but_framed { "invalid" } else { "unparseable" };
        self.parse_errors.get_or_create(&KindLabels { kind }).inc();
    }

    pub fn dropped(&self, why: Drop) {
        self.drops.get_or_create(&ReasonLabels { reason: why.label() }).inc();
    }

    pub fn absorbed(&self) {
        self.absorbed.inc();
    }

    pub fn handler_time(&self, seconds: f64) {
        self.handler_seconds.observe(seconds);
    }

    /// Refreshes gauges from their sources and renders the Prometheus text format.
    pub fn render(&self, sip_sessions: usize, app_sessions: usize, tcp_connections: usize) -> String {
        self.sip_sessions.set(sip_sessions as i64);
        self.app_sessions.set(app_sessions as i64);
        self.tcp_connections.set(tcp_connections as i64);
        let (mut server, mut client, mut retrans) = (0, 0, 0);
        for s in &self.executor_stats {
            server += s.server_transactions.load(Ordering::Relaxed);
            client += s.client_transactions.load(Ordering::Relaxed);
            retrans += s.retransmissions.load(Ordering::Relaxed);
        }
        self.transactions.get_or_create(&KindLabels { kind: "server" }).set(server as i64);
        self.transactions.get_or_create(&KindLabels { kind: "client" }).set(client as i64);
        let seen = self.retransmissions.get();
        self.retransmissions.inc_by(retrans.saturating_sub(seen));
        let mut out = String::with_capacity(16 * 1024);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_labels() {
        let m = Metrics::new(1);
        m.message_in(Some(&Method::Options), None, Transport::Udp);
        m.message_out(Some(&Method::Options), Some(200), Transport::Tcp);
        m.parse_error(false);
        let text = m.render(3, 2, 0);
        assert!(text.contains(r#"tandem_messages_in_total{method="OPTIONS",status_class="request",transport="udp"} 1"#), "{text}");
        assert!(text.contains(r#"tandem_messages_out_total{method="OPTIONS",status_class="2xx",transport="tcp"} 1"#));
        assert!(text.contains(r#"tandem_parse_errors_total{kind="unparseable"} 1"#));
        assert!(text.contains("tandem_sip_sessions 3"));
    }

    #[test]
    fn every_transport_counts_under_its_own_label() {
        let m = Metrics::new(1);
        let all = [Transport::Udp, Transport::Tcp, Transport::Tls, Transport::Ws, Transport::Wss, Transport::InProc];
        for (n, transport) in all.into_iter().enumerate() {
            for _ in 0..=n {
                m.message_in(Some(&Method::Invite), None, transport);
            }
        }
        m.message_in(Some(&Method::Invite), None, Transport::Sctp);
        let text = m.render(0, 0, 0);
        for (label, count) in [("udp", 1), ("tcp", 3), ("tls", 3), ("ws", 4), ("wss", 5), ("inproc", 6)] {
            let line = format!(r#"tandem_messages_in_total{{method="INVITE",status_class="request",transport="{label}"}} {count}"#);
            assert!(text.contains(&line), "{line} in {text}");
        }
    }
}
