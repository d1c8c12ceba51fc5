use crate::routing::RouteRule;
use serde::Deserialize;
use std::time::Duration;

/// The container's part of the configuration (`[container]` and `[[route]]` in TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContainerConfig {
    /// Executors (each owns the transactions and dialogs of the calls hashed to it);
    /// 0 means one per CPU core.
    pub executors: usize,
    /// Messages waiting per executor; beyond it, requests are refused with 503.
    pub queue_capacity: usize,
    /// Where executors read UDP themselves (`transport.udp_readers` = 0): a new call (an INVITE
    /// outside a dialog) that waited longer than this in the socket's buffer is refused with
    /// 503; everything else, which may finish work in progress, is still handled.
    #[serde(with = "humantime_serde")]
    pub overload_delay: Duration,
    /// Where executors read UDP themselves: a single executor (`executors = 1`) that reads a
    /// single UDP socket does it with blocking reads on a thread of its own (one system call
    /// per datagram, no readiness polling), woken for other work by a doorbell datagram; false
    /// keeps it on the async runtime (readiness through epoll). Several executors always poll:
    /// waking one blocked in a read costs more than it saves there. Decision 0003, "Blocking
    /// reads".
    pub blocking_udp: bool,
    /// An application session with no activity for this long is invalidated.
    #[serde(with = "humantime_serde")]
    pub app_session_expiry: Duration,
    /// Live application sessions; initial requests beyond it get 503.
    pub max_app_sessions: usize,
    /// Live transactions per executor.
    pub max_transactions: usize,
    /// Seed of the executors' random generators (IDs, tags, branches). Absent: from the OS.
    /// Set it for reproducible runs; never share it, since session IDs must be unguessable.
    pub seed: Option<u64>,
    /// Host written in Via, Contact and Record-Route when a listener is bound to a wildcard
    /// address.
    pub advertised_host: Option<String>,
    /// How long a proxied INVITE may go without a response from downstream before the proxy
    /// answers 100 Trying itself. RFC 3261 §17.2.1 lets a server omit the 100 when a response
    /// follows within 200 ms; a callee that rings or answers sooner spares the caller's leg a
    /// datagram, one of a proxied call's 13 (decision 0003, "A deferred 100 Trying"). Zero sends
    /// it at once with the forwarded INVITE, as Kamailio does. At most 200 ms.
    #[serde(with = "humantime_serde")]
    pub trying_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub t1: Duration,
    #[serde(with = "humantime_serde")]
    pub t2: Duration,
    #[serde(with = "humantime_serde")]
    pub t4: Duration,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            executors: 0,
            queue_capacity: 16_384,
            overload_delay: Duration::from_millis(200),
            blocking_udp: true,
            app_session_expiry: Duration::from_secs(300),
            max_app_sessions: 1_000_000,
            max_transactions: 500_000,
            seed: None,
            advertised_host: None,
            trying_delay: Duration::from_millis(100),
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
            t4: Duration::from_secs(5),
        }
    }
}

/// Everything the container needs to start.
#[derive(Debug, Clone, Default)]
pub struct ContainerSettings {
    pub container: ContainerConfig,
    pub routes: Vec<RouteRule>,
}
