//! Stream transports: TCP, and the stream code TLS and WebSocket share.
//!
//! Accepting, connecting, the connection table (reuse, limits) and serving an established
//! connection ([`run_established`]: direct writes, the flush task, lingering) serve every stream
//! transport. SIP framing over a byte stream (Content-Length, CRLF keep-alives, idle timeout)
//! reads plain TCP and TLS alike (the TLS session lives in `stream::Link`); WebSocket frames SIP
//! messages itself (`ws.rs`), on a plain or a TLS link.

use crate::stream::{Framing, Link, ReadOutcome, Shared};
use crate::{tls, ws, Connection, Inner, Protocol, SendError, Writer};
use bytes::{Buf, Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tandem_sip::{frame_stream, parse_stream_message, Flow, ParseError, StreamFrame, Transport};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Accepts connections on a TCP, TLS, WS or WSS listener (`acceptor` is set for TLS and WSS).
pub(crate) async fn accept_loop(
    inner: Arc<Inner>,
    listener: TcpListener,
    index: u16,
    transport: Transport,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(error = %e, "tcp accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = inner.connections.lock().admit(remote.ip(), &inner.config);
        if !admitted {
            inner.stats.tcp_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%remote, "tcp connection refused: limit reached");
            continue;
        }
        inner.stats.tcp_accepted.fetch_add(1, Ordering::Relaxed);
        let id = inner.new_connection_id();
        let (tx, rx) = mpsc::channel(inner.config.tcp_write_queue);
        register(&inner, id, transport, remote, tx);
        let flow = Flow { transport, listener: index, connection: id, remote };
        let task = match &acceptor {
            Some(acceptor) => tokio::spawn(tls::serve_accepted(inner.clone(), stream, acceptor.clone(), rx, flow)),
            None if ws::is_ws(transport) => {
                let _ = stream.set_nodelay(true);
                let socket = Arc::new(stream);
                let link = Link::plain(socket.clone(), inner.config.tcp_write_queue);
                tokio::spawn(ws::serve_accepted(inner.clone(), socket, link, rx, flow))
            }
            None => tokio::spawn(serve_plain(inner.clone(), stream, rx, flow)),
        };
        inner.track(task);
    }
}

fn register(inner: &Inner, id: u64, transport: Transport, remote: SocketAddr, writer: mpsc::Sender<Bytes>) {
    let mut conns = inner.connections.lock();
    conns.by_id.insert(id, Connection { transport, remote, writer: Writer::Queued(writer) });
    conns.by_remote.insert((transport, remote), id);
    inner.stats.tcp_open.store(conns.by_id.len() as u64, Ordering::Relaxed);
}

fn unregister(inner: &Inner, id: u64) {
    let mut conns = inner.connections.lock();
    conns.remove(id);
    inner.stats.tcp_open.store(conns.by_id.len() as u64, Ordering::Relaxed);
}

/// How long a connection stays writable after reading stopped (peer closed its side, or the
/// stream could not be framed): responses to what was read before are still in flight
/// through the executors.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_millis(1500);

/// A connection that ended before it carried anything (connect or handshake failed).
pub(crate) fn close(inner: &Inner, flow: Flow) {
    unregister(inner, flow.connection);
    inner.sink.on_flow_closed(flow);
}

/// A connection's writer task, aborted when dropped: the writer must not outlive its reader's
/// task, also when that task is aborted ([`crate::Transports::shutdown`]); a direct writer
/// otherwise waits for wake-ups forever and keeps the socket open (found by the transport
/// benchmark: thousands of connections left established).
pub(crate) struct WriterTask(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for WriterTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A plain TCP connection, once connected or accepted.
async fn serve_plain(inner: Arc<Inner>, stream: TcpStream, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    let _ = stream.set_nodelay(true);
    let socket = Arc::new(stream);
    let link = Link::plain(socket.clone(), inner.config.tcp_write_queue);
    run_established(inner, socket, Framing::Sip(link), rx, flow).await;
}

/// Serves one established connection (TCP; TLS after its handshake; WS and WSS after the
/// upgrade) until it closes, idles out or cannot be framed; then unregisters it and reports
/// the flow closed. Senders write it directly from now on (`stream.rs`); its flush task
/// writes what they could not, and what was queued while it was being set up.
pub(crate) async fn run_established(inner: Arc<Inner>, socket: Arc<TcpStream>, framing: Framing, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    let websocket = matches!(framing, Framing::Ws(_));
    let shared = Shared::new(socket, framing);
    if let Some(conn) = inner.connections.lock().by_id.get_mut(&flow.connection) {
        conn.writer = Writer::Direct(shared.clone());
    }
    let flusher = shared.clone();
    let mut writer = WriterTask(tokio::spawn(async move { flusher.run(rx).await }));
    let ended = if websocket { ws::read_loop(&inner, &shared, flow).await } else { read_loop(&inner, &shared, flow).await };
    // Keep the connection registered so responses to what was read can still be written.
    // Unlike TCP's half-close, a WebSocket that stopped reading is over (a Close frame ends
    // both directions, RFC 6455 §5.5.1): no lingering for late responses.
    if ended != ReadEnd::Idle && !websocket {
        let _ = tokio::time::timeout(LINGER, &mut writer.0).await;
    }
    drop(writer);
    shared.close();
    close(&inner, flow);
}

/// The idle timeout of a connection's reader. One timer for the connection's life, re-armed
/// only when it fires early: arming a timer per read cost the per-message path a timer-wheel
/// insertion and removal (measured in the transport benchmark).
pub(crate) struct IdleWatch {
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    last_read: tokio::time::Instant,
    idle: std::time::Duration,
}

impl IdleWatch {
    pub(crate) fn new(inner: &Inner) -> IdleWatch {
        let idle = inner.config.tcp_idle_timeout;
        IdleWatch { timer: Box::pin(tokio::time::sleep(idle)), last_read: tokio::time::Instant::now(), idle }
    }

    /// Something was read.
    pub(crate) fn read(&mut self) {
        self.last_read = tokio::time::Instant::now();
    }

    /// Waits until the connection may have more to read; `Err`: idle for too long, or failed.
    /// Polled by hand rather than through `select!`: this wait comes once per read, and the
    /// macro's futures (a waiter joining and leaving the socket's list, a random branch order)
    /// cost more than the two polls.
    pub(crate) async fn readable(&mut self, inner: &Inner, shared: &Shared) -> Result<(), ReadEnd> {
        std::future::poll_fn(|cx| loop {
            if let std::task::Poll::Ready(ready) = shared.poll_readable(cx) {
                return std::task::Poll::Ready(ready.map_err(|_| ReadEnd::Closed));
            }
            if std::future::Future::poll(self.timer.as_mut(), cx).is_pending() {
                return std::task::Poll::Pending;
            }
            let deadline = self.last_read + self.idle;
            if tokio::time::Instant::now() >= deadline {
                inner.stats.tcp_idle_closed.fetch_add(1, Ordering::Relaxed);
                return std::task::Poll::Ready(Err(ReadEnd::Idle));
            }
            // Fired early (reads since it was armed): re-armed, and polled again to register.
            self.timer.as_mut().reset(deadline);
        })
        .await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadEnd {
    Closed,
    Idle,
    Unframeable,
}

async fn read_loop(inner: &Inner, shared: &Shared, flow: Flow) -> ReadEnd {
    let max = inner.config.max_message_bytes;
    let limits = inner.config.parse_limits();
    let mut buf = BytesMut::with_capacity(8192);
    let mut no_messages = Vec::new();
    let mut idle = IdleWatch::new(inner);
    loop {
        match shared.read(&mut buf, &mut no_messages) {
            ReadOutcome::WouldBlock => {
                if let Err(end) = idle.readable(inner, shared).await {
                    return end;
                }
                continue;
            }
            ReadOutcome::Closed | ReadOutcome::Oversize => return ReadEnd::Closed,
            ReadOutcome::Data => idle.read(),
        }
        loop {
            match frame_stream(&buf, max) {
                StreamFrame::Incomplete => break,
                StreamFrame::KeepAlive { len, double } => {
                    buf.advance(len);
                    if double {
                        // RFC 5626 §4.4.1: answer a CRLFCRLF ping with a CRLF pong.
                        let _ = shared.send(Bytes::from_static(b"\r\n"));
                    }
                }
                StreamFrame::Message { len } => {
                    let bytes = Bytes::copy_from_slice(&buf[..len]);
                    buf.advance(len);
                    match parse_stream_message(bytes, &limits) {
                        Ok(msg) => inner.sink.on_message(msg, flow),
                        Err(e) => inner.sink.on_parse_error(e, flow),
                    }
                }
                StreamFrame::Invalid { reason, head_len } => {
                    tracing::debug!(reason, remote = %flow.remote, "closing unframeable tcp stream");
                    report_invalid(inner, &buf, head_len, flow, &limits);
                    return ReadEnd::Unframeable;
                }
            }
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(8192.min(max + 1 - buf.len().min(max)).max(1024));
        }
    }
}

/// Hands the header section of an unframeable message up (as a datagram would be parsed, so
/// it carries a defect and a request gets its 400), before the connection closes.
fn report_invalid(inner: &Inner, buf: &BytesMut, head_len: Option<usize>, flow: Flow, limits: &tandem_sip::ParseLimits) {
    let Some(head_len) = head_len else {
        inner.sink.on_parse_error(ParseError::TooLarge(buf.len()), flow);
        return;
    };
    match tandem_sip::parse_datagram(Bytes::copy_from_slice(&buf[..head_len]), limits) {
        Ok(msg) => inner.sink.on_message(msg, flow),
        Err(e) => inner.sink.on_parse_error(e, flow),
    }
}

pub(crate) fn send(inner: &Inner, flow: Flow, payload: Bytes) -> Result<(), SendError> {
    send_with(inner, flow, payload, writer_of(inner, flow))
}

/// As [`send`], but a message for an established connection is only queued on it, and the
/// connection noted in `held` for [`crate::Transports::release`].
pub(crate) fn hold(inner: &Inner, flow: Flow, payload: Bytes, held: &mut crate::HeldSends) -> Result<(), SendError> {
    let direct = match writer_of(inner, flow) {
        Some(Writer::Direct(direct)) => direct,
        other => return send_with(inner, flow, payload, other),
    };
    let queued = direct.hold(payload);
    match queued {
        Ok(()) => held.note(flow, direct),
        Err(_) => {
            inner.stats.tcp_queue_full.fetch_add(1, Ordering::Relaxed);
        }
    }
    queued
}

/// The writer of the connection `flow` names, else of one to its remote over its transport.
fn writer_of(inner: &Inner, flow: Flow) -> Option<Writer> {
    let conns = inner.connections.lock();
    let id = if flow.connection != 0 && conns.by_id.contains_key(&flow.connection) {
        Some(flow.connection)
    } else {
        conns.by_remote.get(&(flow.transport, flow.remote)).copied()
    };
    id.and_then(|id| conns.by_id.get(&id).map(|c| c.writer.clone()))
}

fn send_with(inner: &Inner, flow: Flow, payload: Bytes, writer: Option<Writer>) -> Result<(), SendError> {
    let queued = match writer {
        Some(Writer::Queued(tx)) => tx.try_send(payload).map_err(|_| SendError::QueueFull),
        Some(Writer::Direct(direct)) => direct.send(payload),
        None => return connect(inner, flow, payload),
    };
    if queued.is_err() {
        inner.stats.tcp_queue_full.fetch_add(1, Ordering::Relaxed);
    }
    queued
}

/// Opens a connection (TCP, TLS, WS or WSS as `flow.transport` says; TCP for anything else)
/// in the background; the payload waits in its queue.
fn connect(inner: &Inner, flow: Flow, payload: Bytes) -> Result<(), SendError> {
    let Some(owner) = inner.self_arc() else {
        return Err(SendError::NoListener(flow.transport));
    };
    let transport = match flow.transport {
        t @ (Transport::Tls | Transport::Ws | Transport::Wss) => t,
        _ => Transport::Tcp,
    };
    let protocol = Protocol::for_transport(transport).unwrap_or(Protocol::Tcp);
    let connector = match transport {
        Transport::Tls | Transport::Wss => Some(inner.tls_connector.clone().ok_or(SendError::NoTlsClient)?),
        _ => None,
    };
    if !inner.connections.lock().admit(flow.remote.ip(), &inner.config) {
        inner.stats.tcp_refused.fetch_add(1, Ordering::Relaxed);
        return Err(SendError::ConnectionLimit);
    }
    let id = inner.new_connection_id();
    let (tx, rx) = mpsc::channel(inner.config.tcp_write_queue);
    let _ = tx.try_send(payload);
    register(inner, id, transport, flow.remote, tx);
    let listener = inner.listeners.iter().position(|l| l.protocol == protocol).unwrap_or(0) as u16;
    let flow = Flow { transport, listener, connection: id, remote: flow.remote };
    let task = tokio::spawn(async move {
        let timeout = owner.config.tcp_connect_timeout;
        match tokio::time::timeout(timeout, TcpStream::connect(flow.remote)).await {
            Ok(Ok(stream)) => match connector {
                Some(connector) => tls::serve_connected(owner, stream, connector, rx, flow).await,
                None if ws::is_ws(transport) => {
                    let _ = stream.set_nodelay(true);
                    let socket = Arc::new(stream);
                    let link = Link::plain(socket.clone(), owner.config.tcp_write_queue);
                    ws::serve_connected(owner, socket, link, rx, flow).await
                }
                None => serve_plain(owner, stream, rx, flow).await,
            },
            _ => {
                tracing::debug!(remote = %flow.remote, "tcp connect failed");
                close(&owner, flow);
            }
        }
    });
    inner.track(task);
    Ok(())
}
