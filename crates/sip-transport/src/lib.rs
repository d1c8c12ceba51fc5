//! SIP transports on tokio: UDP, TCP, TLS, WS and WSS listeners, outgoing connections on each,
//! message framing, and the limits that keep a misbehaving peer from exhausting the server.
//!
//! Received messages are parsed here, on the reader task, and handed to a [`Sink`] (the
//! container's dispatcher); sending never blocks: every queue is bounded and a full queue is
//! an error the caller counts.
//!
//! Modules: `udp` (datagrams), `tcp` (every stream transport: accepting, connecting, the
//! connection table with reuse and limits, serving an established connection; SIP framing on
//! a byte stream), `stream` (an established connection's state behind one lock — socket, TLS
//! session, WebSocket framing — written directly by senders, read by the connection's task),
//! `tls` (the TLS handshake on top of a TCP socket, then `tcp`'s framing or, for WSS, `ws`),
//! `ws` (RFC 7118: the upgrade with the `sip` subprotocol, one SIP message per WebSocket
//! message), `inprocess` (containers of one process handing message buffers over through an
//! [`InProcessHub`]).
//!
//! Adding a transport (SCTP, ...) — WS was added this way:
//! 1. a [`Protocol`] variant, its [`Transport`] mapping and its `ListenSpec` name (`spec.rs`);
//! 2. a listener: bind it in [`Transports::bind`] and start its accept or read loop; a stream
//!    transport does its handshake on the accepted socket, wraps what it needs per connection
//!    in a `stream::Link` (its non-blocking byte stream: plain, or a TLS session) and a
//!    `stream::Framing`, and hands them to `tcp::run_established`, as `tls::serve_accepted`
//!    and `ws::serve_accepted` do;
//! 3. a connector: route its [`Transport`] in [`Transports::send`] (stream transports go
//!    through `tcp::send`, which reuses a connection to the same peer and transport, else
//!    opens one in `tcp::connect`, where the new transport's handshake goes, as TLS's does);
//! 4. in the container, `Destination::parse` (`crates/container/src/locals.rs`) for
//!    `next_hop` values; Via and Contact take the transport's name from [`Transport`].
#![forbid(unsafe_code)]

mod inprocess;
mod spec;
mod stream;
mod tcp;
mod tls;
mod udp;
mod ws;

pub use inprocess::InProcessHub;
pub use spec::{ListenSpec, Protocol, SpecError};
pub use tls::{certificates_from_pem, client_config, server_config, TlsError};
/// The rustls crate this transport is built with (for building configurations by hand).
pub use tokio_rustls::rustls;
pub use udp::{BlockingUdpReceiver, Doorbell, Received, UdpReceiver};

use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem_sip::{Flow, Message, ParseError, ParseLimits, Transport};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub struct TransportConfig {
    pub max_message_bytes: usize,
    pub max_headers: usize,
    /// Open TCP connections, in and out.
    pub tcp_max_connections: usize,
    /// Open TCP connections from or to one IP address.
    pub tcp_max_connections_per_peer: usize,
    /// A TCP connection with nothing received for this long is closed.
    pub tcp_idle_timeout: Duration,
    pub tcp_connect_timeout: Duration,
    /// Messages queued for writing on one TCP connection; beyond, sending fails.
    pub tcp_write_queue: usize,
    /// Tasks reading each UDP socket. 0: none; the owner reads them through the
    /// [`UdpReceiver`]s of [`Transports::take_udp_receivers`].
    pub udp_readers: usize,
    /// SO_RCVBUF / SO_SNDBUF for UDP sockets, so bursts are not dropped by the kernel.
    pub udp_socket_buffer_bytes: usize,
    /// Certificates for TLS listeners and outgoing TLS connections. The TCP limits above
    /// (connections, per peer, idle timeout, write queue) apply to TLS connections too, and
    /// count TCP and TLS connections together.
    pub tls: TlsConfig,
    /// The process's registry of in-process endpoints, needed by `inproc:` listeners; every
    /// container that talks in-process gets a clone of the same hub.
    pub in_process: Option<InProcessHub>,
    /// A TLS handshake or WebSocket upgrade (in or out) not done by then is abandoned and
    /// its connection closed.
    pub tls_handshake_timeout: Duration,
}

/// TLS material. [`TlsConfig::from_files`] reads it from PEM files.
#[derive(Debug, Clone, Default)]
pub struct TlsConfig {
    /// Certificate chain and key for `tls:` listeners; binding one without it fails.
    pub server: Option<Arc<rustls::ServerConfig>>,
    /// Trust roots (or no verification) for outgoing TLS; without it, sending to a TLS
    /// destination fails with [`SendError::NoTlsClient`].
    pub client: Option<Arc<rustls::ClientConfig>>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_message_bytes: tandem_sip::MAX_MESSAGE_BYTES,
            max_headers: 256,
            tcp_max_connections: 10_000,
            tcp_max_connections_per_peer: 256,
            tcp_idle_timeout: Duration::from_secs(120),
            tcp_connect_timeout: Duration::from_secs(5),
            tcp_write_queue: 4096,
            udp_readers: 1,
            udp_socket_buffer_bytes: 8 << 20,
            tls: TlsConfig::default(),
            tls_handshake_timeout: Duration::from_secs(5),
            in_process: None,
        }
    }
}

impl TransportConfig {
    fn parse_limits(&self) -> ParseLimits {
        ParseLimits { max_message_bytes: self.max_message_bytes, max_headers: self.max_headers }
    }
}

/// Where received messages go. Called on reader tasks: must not block.
pub trait Sink: Send + Sync + 'static {
    /// A framed and parsed message (it may carry a defect, for the stack to answer).
    fn on_message(&self, msg: Message, flow: Flow);
    /// Bytes that could not be parsed into a message at all.
    fn on_parse_error(&self, _error: ParseError, _flow: Flow) {}
    /// A connection closed or could not be opened: transactions on it have failed.
    fn on_flow_closed(&self, _flow: Flow) {}
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    #[error("no listener for transport {0:?}")]
    NoListener(Transport),
    #[error("send queue full")]
    QueueFull,
    #[error("connection limit reached")]
    ConnectionLimit,
    #[error("message too large for the transport")]
    TooLarge,
    #[error("transport {0:?} not supported")]
    Unsupported(Transport),
    #[error("no TLS client configuration (trust roots) for outgoing TLS")]
    NoTlsClient,
    #[error("no in-process endpoint with that name")]
    NoPeer,
}

/// Stream connections with messages queued by [`Transports::send_held`], not yet written.
#[derive(Default)]
pub struct HeldSends {
    connections: Vec<(Flow, Arc<stream::Shared>)>,
    messages: usize,
}

impl HeldSends {
    /// Messages held since the last release.
    pub fn messages(&self) -> usize {
        self.messages
    }

    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    fn note(&mut self, flow: Flow, connection: Arc<stream::Shared>) {
        self.messages += 1;
        // A handful of connections per batch: a scan is cheaper than a map. Each flow is kept
        // (two may name one connection), so that a failure reaches every one of them.
        if !self.connections.iter().any(|(f, c)| *f == flow && Arc::ptr_eq(c, &connection)) {
            self.connections.push((flow, connection));
        }
    }
}

/// Counters the admin endpoint exports.
#[derive(Debug, Default)]
pub struct TransportStats {
    pub udp_send_dropped: AtomicU64,
    pub udp_oversize_dropped: AtomicU64,
    pub tcp_accepted: AtomicU64,
    pub tcp_refused: AtomicU64,
    pub tcp_idle_closed: AtomicU64,
    pub tcp_open: AtomicU64,
    pub tcp_queue_full: AtomicU64,
    /// TLS handshakes (in or out) that failed or timed out.
    pub tls_handshake_failed: AtomicU64,
    /// WebSocket upgrades (in or out) refused, failed or timed out (e.g. no `sip` subprotocol).
    pub ws_upgrade_failed: AtomicU64,
    /// WebSocket connections closed for a message or frame above `max_message_bytes`.
    pub ws_oversize_closed: AtomicU64,
}

#[derive(Clone)]
pub struct Transports {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub me: std::sync::Weak<Inner>,
    pub config: TransportConfig,
    pub sink: Arc<dyn Sink>,
    pub listeners: Vec<Listener>,
    pub connections: Mutex<Connections>,
    pub next_connection: AtomicU64,
    pub stats: TransportStats,
    pub tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Set by [`Transports::shutdown`]: a task started after it is stopped at once.
    pub shut_down: std::sync::atomic::AtomicBool,
    pub tls_connector: Option<tokio_rustls::TlsConnector>,
    /// With `udp_readers` = 0, the UDP listeners' receivers until the owner takes them.
    pub udp_receivers: Mutex<Vec<UdpReceiver>>,
}

pub(crate) struct Listener {
    pub protocol: Protocol,
    pub local: SocketAddr,
    /// The UDP socket, for sending (see `udp::bind`); its reading handle goes to the reader
    /// tasks or the owner's [`UdpReceiver`].
    pub udp_sender: Option<std::net::UdpSocket>,
}

#[derive(Default)]
pub(crate) struct Connections {
    pub by_id: HashMap<u64, Connection>,
    /// TCP and TLS connections to one address are distinct.
    pub by_remote: HashMap<(Transport, SocketAddr), u64>,
    pub per_ip: HashMap<IpAddr, usize>,
}

pub(crate) struct Connection {
    pub transport: Transport,
    pub remote: SocketAddr,
    pub writer: Writer,
}

/// How a connection is written to: through the queue it was registered with (until it is set
/// up: connected, TLS handshake, WebSocket upgrade), then directly from the sender's thread
/// (`stream.rs`).
#[derive(Clone)]
pub(crate) enum Writer {
    Queued(mpsc::Sender<Bytes>),
    Direct(Arc<stream::Shared>),
}

impl Connections {
    /// Reserves room for one more connection to or from `ip`; false when a limit is reached.
    pub fn admit(&mut self, ip: IpAddr, config: &TransportConfig) -> bool {
        let per_ip = self.per_ip.get(&ip).copied().unwrap_or(0);
        if self.by_id.len() >= config.tcp_max_connections || per_ip >= config.tcp_max_connections_per_peer {
            return false;
        }
        *self.per_ip.entry(ip).or_insert(0) += 1;
        true
    }

    pub fn remove(&mut self, id: u64) {
        if let Some(conn) = self.by_id.remove(&id) {
            if self.by_remote.get(&(conn.transport, conn.remote)) == Some(&id) {
                self.by_remote.remove(&(conn.transport, conn.remote));
            }
            let ip = conn.remote.ip();
            if let Some(n) = self.per_ip.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.per_ip.remove(&ip);
                }
            }
        }
    }
}

impl Transports {
    /// Binds every listener and starts reading. Port 0 binds an ephemeral port
    /// (see [`Self::local_addrs`]). A `tls:` or `wss:` listener without `config.tls.server` is
    /// an `InvalidInput` error.
    pub async fn bind(specs: &[ListenSpec], config: TransportConfig, sink: Arc<dyn Sink>) -> std::io::Result<Transports> {
        let mut listeners = Vec::new();
        let mut tcp_sockets = Vec::new();
        let mut udp_sockets = Vec::new();
        let acceptor = tls::acceptor(&config.tls);
        let tls_connector = tls::connector(&config.tls);
        for spec in specs {
            match spec.protocol {
                Protocol::Udp => {
                    let (socket, sender) = udp::bind(spec.addr, config.udp_socket_buffer_bytes, config.udp_readers == 0)?;
                    let local = socket.local_addr()?;
                    listeners.push(Listener { protocol: Protocol::Udp, local, udp_sender: Some(sender) });
                    udp_sockets.push((listeners.len() - 1, socket));
                }
                Protocol::InProc => {
                    if config.in_process.is_none() {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("listener {spec} needs an in-process hub (TransportConfig::in_process)"),
                        ));
                    }
                    listeners.push(Listener { protocol: Protocol::InProc, local: spec.addr, udp_sender: None });
                }
                Protocol::Tcp | Protocol::Ws => {
                    let listener = tcp::bind(spec.addr)?;
                    let local = listener.local_addr()?;
                    listeners.push(Listener { protocol: spec.protocol, local, udp_sender: None });
                    tcp_sockets.push((listeners.len() - 1, listener, None));
                }
                Protocol::Tls | Protocol::Wss => {
                    let Some(acceptor) = acceptor.clone() else {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("listener {spec} needs a TLS certificate and private key"),
                        ));
                    };
                    let listener = tcp::bind(spec.addr)?;
                    let local = listener.local_addr()?;
                    listeners.push(Listener { protocol: spec.protocol, local, udp_sender: None });
                    tcp_sockets.push((listeners.len() - 1, listener, Some(acceptor)));
                }
            }
        }
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            config,
            sink,
            listeners,
            connections: Mutex::new(Connections::default()),
            next_connection: AtomicU64::new(1),
            stats: TransportStats::default(),
            tasks: Mutex::new(Vec::new()),
            shut_down: std::sync::atomic::AtomicBool::new(false),
            tls_connector,
            udp_receivers: Mutex::new(Vec::new()),
        });
        if let Some(hub) = &inner.config.in_process {
            for (index, listener) in inner.listeners.iter().enumerate().filter(|(_, l)| l.protocol == Protocol::InProc) {
                if let Err(e) = hub.register(listener.local, Arc::downgrade(&inner), index as u16) {
                    inner.unregister_in_process();
                    return Err(e);
                }
            }
        }
        let mut tasks = Vec::new();
        for (index, socket) in udp_sockets {
            // The receiver holds the only reading handle, so that it can take the socket out
            // of the reactor (`UdpReceiver::into_blocking`).
            if inner.config.udp_readers == 0 {
                inner.udp_receivers.lock().push(UdpReceiver::new(inner.clone(), socket, index as u16));
                continue;
            }
            let socket = Arc::new(socket);
            for _ in 0..inner.config.udp_readers {
                tasks.push(tokio::spawn(udp::read_loop(inner.clone(), socket.clone(), index as u16)));
            }
        }
        for (index, listener, acceptor) in tcp_sockets {
            let transport = inner.listeners[index].protocol.transport();
            tasks.push(tokio::spawn(tcp::accept_loop(inner.clone(), listener, index as u16, transport, acceptor)));
        }
        inner.tasks.lock().extend(tasks);
        Ok(Transports { inner })
    }

    /// With `udp_readers` = 0, the receivers of the UDP listeners, in listener order, for the
    /// owner to read (once: later calls return none). Received messages are then the owner's
    /// to handle; parse errors still go to the sink.
    pub fn take_udp_receivers(&self) -> Vec<UdpReceiver> {
        std::mem::take(&mut *self.inner.udp_receivers.lock())
    }

    /// Bound addresses, in the order of the specs given to [`Self::bind`].
    pub fn local_addrs(&self) -> Vec<(Protocol, SocketAddr)> {
        self.inner.listeners.iter().map(|l| (l.protocol, l.local)).collect()
    }

    /// The first listener for a transport: its index (for [`Flow::listener`]) and address.
    pub fn listener_for(&self, transport: Transport) -> Option<(u16, SocketAddr)> {
        let protocol = Protocol::for_transport(transport)?;
        self.inner.listeners.iter().enumerate().find(|(_, l)| l.protocol == protocol).map(|(i, l)| (i as u16, l.local))
    }

    pub fn listener_addr(&self, index: u16) -> Option<(Protocol, SocketAddr)> {
        self.inner.listeners.get(index as usize).map(|l| (l.protocol, l.local))
    }

    /// Sends without waiting. UDP goes out at once; TCP, TLS, WS and WSS are queued on the
    /// flow's connection, or on a connection to `flow.remote` over the same transport (reused,
    /// or opened in the background).
    pub fn send(&self, flow: Flow, payload: Bytes) -> Result<(), SendError> {
        self.dispatch(flow, payload, None)
    }

    /// As [`Self::send`], except that a message for an established stream connection (TCP,
    /// TLS, WS, WSS) is queued on it and written by [`Self::release`]: the messages a batch of
    /// work sends to one connection then leave in one write (one system call, one segment,
    /// one wake-up of the peer) instead of one each. UDP and everything else go out at once.
    pub fn send_held(&self, flow: Flow, payload: Bytes, held: &mut HeldSends) -> Result<(), SendError> {
        self.dispatch(flow, payload, Some(held))
    }

    fn dispatch(&self, flow: Flow, payload: Bytes, held: Option<&mut HeldSends>) -> Result<(), SendError> {
        if payload.len() > self.inner.config.max_message_bytes {
            return Err(SendError::TooLarge);
        }
        match flow.transport {
            Transport::Udp => udp::send(&self.inner, flow, &payload),
            Transport::Tcp | Transport::Tls | Transport::Ws | Transport::Wss => match held {
                Some(held) => tcp::hold(&self.inner, flow, payload, held),
                None => tcp::send(&self.inner, flow, payload),
            },
            Transport::InProc => inprocess::send(&self.inner, flow, payload),
            other => Err(SendError::Unsupported(other)),
        }
    }

    /// Writes what [`Self::send_held`] queued; `failed` gets each flow whose connection
    /// failed (its held messages are lost, as a failed [`Self::send`]'s are).
    pub fn release(&self, held: &mut HeldSends, mut failed: impl FnMut(Flow)) {
        held.messages = 0;
        for (flow, connection) in held.connections.drain(..) {
            if connection.release().is_err() {
                failed(flow);
            }
        }
    }

    pub fn stats(&self) -> &TransportStats {
        &self.inner.stats
    }

    pub fn open_connections(&self) -> usize {
        self.inner.connections.lock().by_id.len()
    }

    /// Stops every reader, acceptor and connection, and leaves the in-process hub.
    pub fn shutdown(&self) {
        self.inner.unregister_in_process();
        // A connection accepted or opened just now may be tracked after the drain below: the
        // flag makes `track` stop it (found by shutdown_closes_outgoing_and_accepted_connections).
        self.inner.shut_down.store(true, Ordering::SeqCst);
        // Receivers hold the transport: dropping those never taken breaks the cycle.
        self.inner.udp_receivers.lock().clear();
        for task in self.inner.tasks.lock().drain(..) {
            task.abort();
        }
        let mut conns = self.inner.connections.lock();
        let ids: Vec<u64> = conns.by_id.keys().copied().collect();
        for id in ids {
            conns.remove(id);
        }
    }
}

impl Inner {
    fn unregister_in_process(&self) {
        if let Some(hub) = &self.config.in_process {
            for listener in self.listeners.iter().filter(|l| l.protocol == Protocol::InProc) {
                hub.unregister(listener.local, &self.me);
            }
        }
    }

    pub(crate) fn new_connection_id(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn self_arc(&self) -> Option<Arc<Inner>> {
        self.me.upgrade()
    }

    pub(crate) fn track(&self, task: JoinHandle<()>) {
        let mut tasks = self.tasks.lock();
        if self.shut_down.load(Ordering::SeqCst) {
            task.abort();
            return;
        }
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
}

#[cfg(test)]
mod tests;
