//! The measured side: two `tandem_transport::Transports` endpoints. B's [`Sink`] answers each
//! request on the flow it came on; A's hands each response to the waiting session over a
//! channel.

use crate::message::{check_response, is_good_request};
use anyhow::Context;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tandem_sip::{Flow, Message};
use tandem_transport::{ListenSpec, Sink, TransportConfig, Transports};
use tokio::sync::mpsc;

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Both endpoints' configuration: the defaults, with TLS material, and connection limits
/// raised (one address opens thousands of short sessions; closed ones linger 1.5 s).
pub fn config(tls: tandem_transport::TlsConfig) -> TransportConfig {
    TransportConfig { tls, tcp_max_connections: 1_000_000, tcp_max_connections_per_peer: 1_000_000, ..Default::default() }
}

struct Echo {
    me: OnceLock<Transports>,
    response: Bytes,
    errors: AtomicU64,
}

impl Sink for Echo {
    fn on_message(&self, msg: Message, flow: Flow) {
        let sent = is_good_request(&msg) && self.me.get().is_some_and(|t| t.send(flow, self.response.clone()).is_ok());
        if !sent {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Endpoint B.
pub struct Server {
    transports: Transports,
    sink: Arc<Echo>,
    pub addr: SocketAddr,
}

impl Server {
    pub async fn start(spec: ListenSpec, config: TransportConfig, response: Bytes) -> anyhow::Result<Server> {
        let sink = Arc::new(Echo { me: OnceLock::new(), response, errors: AtomicU64::new(0) });
        let transports = Transports::bind(&[spec], config, sink.clone()).await.with_context(|| format!("binding {spec}"))?;
        let addr = transports.local_addrs()[0].1;
        let _ = sink.me.set(transports.clone());
        Ok(Server { transports, sink, addr })
    }

    pub fn errors(&self) -> u64 {
        self.sink.errors.load(Ordering::Relaxed)
    }

    pub fn shutdown(&self) {
        self.transports.shutdown();
    }
}

/// A response and its flow; `None`: the flow closed.
type Event = Option<(Message, Flow)>;

struct Waiter(mpsc::Sender<Event>);

impl Sink for Waiter {
    fn on_message(&self, msg: Message, flow: Flow) {
        let _ = self.0.try_send(Some((msg, flow)));
    }
    fn on_flow_closed(&self, _flow: Flow) {
        let _ = self.0.try_send(None);
    }
}

/// Endpoint A: sends requests to B and waits for each response.
pub struct Client {
    transports: Transports,
    events: mpsc::Receiver<Event>,
    first_flow: Flow,
}

impl Client {
    pub async fn bind(spec: ListenSpec, config: TransportConfig, server: SocketAddr) -> anyhow::Result<Client> {
        let (tx, events) = mpsc::channel(16);
        let transports = Transports::bind(&[spec], config, Arc::new(Waiter(tx))).await.with_context(|| format!("binding {spec}"))?;
        let transport = spec.protocol.transport();
        let (listener, _) = transports.listener_for(transport).context("no listener")?;
        Ok(Client { transports, events, first_flow: Flow { transport, listener, connection: 0, remote: server } })
    }

    /// One session: `n` sequential exchanges over one flow (for a stream transport, a new
    /// connection opened by the first send if this client has none): each exchange's round
    /// trip in nanoseconds, and the session's duration.
    pub async fn session(&mut self, request: &Bytes, n: usize) -> anyhow::Result<(Vec<u64>, Duration)> {
        let mut flow = self.first_flow;
        let mut latencies = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            self.transports.send(flow, request.clone()).map_err(|e| anyhow::anyhow!("send: {e}"))?;
            match tokio::time::timeout(TIMEOUT, self.events.recv()).await {
                Ok(Some(Some((msg, on)))) => {
                    check_response(&msg)?;
                    flow = on;
                }
                Ok(Some(None) | None) => anyhow::bail!("flow closed"),
                Err(_) => {
                    let dropped = self.transports.stats().udp_send_dropped.load(Ordering::Relaxed);
                    anyhow::bail!("no response in {TIMEOUT:?} (UDP sends dropped by this endpoint: {dropped})")
                }
            }
            latencies.push(t0.elapsed().as_nanos() as u64);
        }
        Ok((latencies, start.elapsed()))
    }

    pub fn shutdown(&self) {
        self.transports.shutdown();
    }
}
