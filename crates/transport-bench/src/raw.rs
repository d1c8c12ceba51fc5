//! The baseline: the same exchange on plain tokio sockets, with no Tandem abstraction (no
//! reader/writer tasks, queues, connection registry or sink dispatch). Each side does the
//! same SIP work as Tandem's: every received message is copied out of the receive buffer,
//! framed (streams: `frame_stream`, the end of the headers and Content-Length) and parsed
//! once with the same `tandem_sip` parser, and checked the same way; the bytes sent are the
//! same. The client reads and writes its socket in the session's own task; the server runs
//! one task per socket (per connection for TCP, TLS, WS and WSS) that reads, parses and answers.
//!
//! WS and WSS use tokio-tungstenite directly, as tandem-transport does, with the same
//! `WebSocketConfig` (message and frame limits), the `sip` subprotocol asked for by the
//! client and answered by the server, each SIP message one text message (built from the
//! `Bytes` without a copy, UTF-8 checked as Tandem's `frame` does), and each received
//! message's payload parsed once with `parse_datagram`, as Tandem's WebSocket reader does.

use crate::message::{check_response, is_good_request};
use crate::pki::Pki;
use crate::transports::Raw;
use anyhow::Context;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_sip::{frame_stream, parse_datagram, parse_stream_message, Message, ParseLimits, StreamFrame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use crate::tandem::TIMEOUT;

fn limits() -> ParseLimits {
    ParseLimits { max_message_bytes: tandem_sip::MAX_MESSAGE_BYTES, max_headers: 256 }
}

/// The WebSocket subprotocol of SIP (RFC 7118).
const SUBPROTOCOL: &str = "sip";

/// Tandem's WebSocket configuration: messages and frames up to the SIP message limit.
fn ws_config() -> WebSocketConfig {
    let max = tandem_sip::MAX_MESSAGE_BYTES;
    WebSocketConfig::default().max_message_size(Some(max)).max_frame_size(Some(max))
}

/// Endpoint B of the baseline.
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    errors: Arc<AtomicU64>,
}

impl Server {
    pub async fn start(kind: Raw, response: Bytes, pki: &Pki) -> anyhow::Result<Server> {
        let errors = Arc::new(AtomicU64::new(0));
        let (addr, task) = match kind {
            Raw::Udp => {
                let socket = UdpSocket::bind("127.0.0.1:0").await?;
                (socket.local_addr()?, tokio::spawn(udp_serve(socket, response, errors.clone())))
            }
            Raw::Tcp | Raw::Tls | Raw::Ws | Raw::Wss => {
                let listener = TcpListener::bind("127.0.0.1:0").await?;
                let acceptor = matches!(kind, Raw::Tls | Raw::Wss).then(|| TlsAcceptor::from(pki.server.clone()));
                let ws = matches!(kind, Raw::Ws | Raw::Wss);
                (listener.local_addr()?, tokio::spawn(accept_loop(listener, acceptor, ws, response, errors.clone())))
            }
        };
        Ok(Server { addr, task, errors })
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn shutdown(&self) {
        self.task.abort();
    }
}

async fn udp_serve(socket: UdpSocket, response: Bytes, errors: Arc<AtomicU64>) {
    let limits = limits();
    let mut buf = vec![0u8; limits.max_message_bytes + 1];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf).await else { continue };
        let good = matches!(parse_datagram(Bytes::copy_from_slice(&buf[..len]), &limits), Ok(msg) if is_good_request(&msg));
        if !good || socket.send_to(&response, from).await.is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn accept_loop(listener: TcpListener, acceptor: Option<TlsAcceptor>, ws: bool, response: Bytes, errors: Arc<AtomicU64>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        let (acceptor, response, errors) = (acceptor.clone(), response.clone(), errors.clone());
        // Connection tasks end when the client closes; aborting the acceptor leaves none behind
        // once every session is over.
        tokio::spawn(async move {
            let served = match (acceptor, ws) {
                (Some(acceptor), ws) => match acceptor.accept(stream).await {
                    Ok(tls) if ws => ws_serve(tls, &response).await,
                    Ok(tls) => stream_serve(tls, &response).await,
                    Err(e) => Err(e.into()),
                },
                (None, true) => ws_serve(stream, &response).await,
                (None, false) => stream_serve(stream, &response).await,
            };
            if served.is_err() {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

async fn stream_serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, response: &Bytes) -> anyhow::Result<()> {
    let limits = limits();
    let mut buf = BytesMut::with_capacity(8192);
    loop {
        let Some(msg) = read_message(&mut stream, &mut buf, &limits).await? else { return Ok(()) };
        anyhow::ensure!(is_good_request(&msg), "bad request");
        stream.write_all(response).await?;
        // A no-op on TCP; pushes out the TLS records (Tandem's writer flushes too).
        stream.flush().await?;
    }
}

/// Accepts the upgrade only for the `sip` subprotocol and answers with it, as Tandem does.
// The signature is tungstenite's callback's; the large error is its HTTP response.
#[allow(clippy::result_large_err)]
fn check_upgrade(request: &Request, mut response: Response) -> Result<Response, ErrorResponse> {
    let offered = request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim() == SUBPROTOCOL);
    if !offered {
        let mut refusal = ErrorResponse::new(Some("the sip subprotocol is required".to_string()));
        *refusal.status_mut() = StatusCode::BAD_REQUEST;
        return Err(refusal);
    }
    response.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
    Ok(response)
}

/// The server side of a WebSocket connection: the upgrade, then each request answered.
async fn ws_serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, response: &Bytes) -> anyhow::Result<()> {
    let mut ws = tokio_tungstenite::accept_hdr_async_with_config(stream, check_upgrade, Some(ws_config())).await?;
    let limits = limits();
    while let Some(msg) = ws_read(&mut ws, &limits).await? {
        anyhow::ensure!(is_good_request(&msg), "bad request");
        ws.send(ws_frame(response)).await?;
    }
    Ok(())
}

/// A SIP message as a WebSocket message, as Tandem frames it: text if UTF-8 (checked; the
/// bytes are not copied), else binary.
fn ws_frame(payload: &Bytes) -> WsMessage {
    match Utf8Bytes::try_from(payload.clone()) {
        Ok(text) => WsMessage::Text(text),
        Err(_) => WsMessage::Binary(payload.clone()),
    }
}

/// The next SIP message on a WebSocket, parsed as Tandem's WebSocket reader parses it;
/// `None` when the connection closed.
async fn ws_read<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>, limits: &ParseLimits) -> anyhow::Result<Option<Message>> {
    loop {
        let bytes: Bytes = match ws.next().await.transpose()? {
            None | Some(WsMessage::Close(_)) => return Ok(None),
            Some(WsMessage::Text(text)) => text.into(),
            Some(WsMessage::Binary(bytes)) => bytes,
            Some(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_)) => continue,
        };
        if bytes.iter().all(|b| matches!(b, b'\r' | b'\n')) {
            continue;
        }
        return Ok(Some(parse_datagram(bytes, limits)?));
    }
}

/// Reads until one whole message is framed, as Tandem's stream reader does (same buffer
/// growth, same copy, same parser); `None` at end of stream.
async fn read_message<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut BytesMut, limits: &ParseLimits) -> anyhow::Result<Option<Message>> {
    let max = limits.max_message_bytes;
    loop {
        match frame_stream(buf, max) {
            StreamFrame::Message { len } => {
                let bytes = Bytes::copy_from_slice(&buf[..len]);
                buf.advance(len);
                return Ok(Some(parse_stream_message(bytes, limits)?));
            }
            StreamFrame::KeepAlive { len, .. } => buf.advance(len),
            StreamFrame::Incomplete => {
                if buf.capacity() - buf.len() < 1024 {
                    buf.reserve(8192.min(max + 1 - buf.len().min(max)));
                }
                if stream.read_buf(buf).await? == 0 {
                    return Ok(None);
                }
            }
            StreamFrame::Invalid { reason, .. } => anyhow::bail!("unframeable stream: {reason}"),
        }
    }
}

/// Endpoint A of the baseline: for UDP one socket for all sessions, as Tandem's UDP endpoint A.
pub struct Client {
    kind: Raw,
    udp: Option<UdpSocket>,
}

impl Client {
    pub async fn new(kind: Raw) -> anyhow::Result<Client> {
        let udp = match kind {
            Raw::Udp => Some(UdpSocket::bind("127.0.0.1:0").await?),
            Raw::Tcp | Raw::Tls | Raw::Ws | Raw::Wss => None,
        };
        Ok(Client { kind, udp })
    }

    /// One session: `n` sequential exchanges (over a new connection for TCP, TLS, WS and WSS,
    /// whose set-up — connect, TLS handshake, WebSocket upgrade — counts in the first
    /// exchange, as it does for Tandem).
    pub async fn session(&self, server: SocketAddr, pki: &Pki, request: &Bytes, n: usize) -> anyhow::Result<(Vec<u64>, Duration)> {
        tokio::time::timeout(TIMEOUT + Duration::from_millis(n as u64 * 10), async {
            match &self.udp {
                Some(socket) => udp_session(socket, server, request, n).await,
                None => stream_session(self.kind, server, pki, request, n).await,
            }
        })
        .await
        .context("session timed out")?
    }
}

async fn udp_session(socket: &UdpSocket, server: SocketAddr, request: &Bytes, n: usize) -> anyhow::Result<(Vec<u64>, Duration)> {
    let limits = limits();
    let mut buf = vec![0u8; limits.max_message_bytes + 1];
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        socket.send_to(request, server).await?;
        let (len, _) = socket.recv_from(&mut buf).await?;
        check_response(&parse_datagram(Bytes::copy_from_slice(&buf[..len]), &limits)?)?;
        latencies.push(t0.elapsed().as_nanos() as u64);
    }
    Ok((latencies, start.elapsed()))
}

async fn stream_session(kind: Raw, server: SocketAddr, pki: &Pki, request: &Bytes, n: usize) -> anyhow::Result<(Vec<u64>, Duration)> {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    let tcp = TcpStream::connect(server).await?;
    tcp.set_nodelay(true)?;
    let elapsed = match kind {
        Raw::Tls | Raw::Wss => {
            let name = rustls_pki_types::ServerName::IpAddress(server.ip().into());
            let mut tls = TlsConnector::from(pki.client.clone()).connect(name, tcp).await?;
            if kind == Raw::Wss {
                let mut ws = ws_connect(tls, "wss", server).await?;
                ws_exchanges(&mut ws, start, request, n, &mut latencies).await?
            } else {
                exchanges(&mut tls, start, request, n, &mut latencies).await?
            }
        }
        Raw::Ws => {
            let mut ws = ws_connect(tcp, "ws", server).await?;
            ws_exchanges(&mut ws, start, request, n, &mut latencies).await?
        }
        Raw::Tcp | Raw::Udp => {
            let mut tcp = tcp;
            exchanges(&mut tcp, start, request, n, &mut latencies).await?
        }
    };
    Ok((latencies, elapsed))
}

/// The client side of the upgrade, asking for `sip` (and checking the server agreed), as
/// Tandem's connector does.
async fn ws_connect<S: AsyncRead + AsyncWrite + Unpin>(stream: S, scheme: &str, server: SocketAddr) -> anyhow::Result<WebSocketStream<S>> {
    let mut request = format!("{scheme}://{server}/").into_client_request()?;
    request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
    let (ws, response) = tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config())).await?;
    let agreed = response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()) == Some(SUBPROTOCOL);
    anyhow::ensure!(agreed, "server did not agree to the sip subprotocol");
    Ok(ws)
}

/// The exchanges of a WebSocket session; the first one's round trip starts at `start`
/// (before the connection was opened).
async fn ws_exchanges<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    start: Instant,
    request: &Bytes,
    n: usize,
    latencies: &mut Vec<u64>,
) -> anyhow::Result<Duration> {
    let limits = limits();
    for i in 0..n {
        let t0 = if i == 0 { start } else { Instant::now() };
        ws.send(ws_frame(request)).await?;
        let msg = ws_read(ws, &limits).await?.context("connection closed")?;
        check_response(&msg)?;
        latencies.push(t0.elapsed().as_nanos() as u64);
    }
    let elapsed = start.elapsed();
    let _ = ws.close(None).await;
    Ok(elapsed)
}

/// The exchanges of a stream session; the first one's round trip starts at `start` (before
/// the connection was opened).
async fn exchanges<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    start: Instant,
    request: &Bytes,
    n: usize,
    latencies: &mut Vec<u64>,
) -> anyhow::Result<Duration> {
    let limits = limits();
    let mut buf = BytesMut::with_capacity(8192);
    for i in 0..n {
        let t0 = if i == 0 { start } else { Instant::now() };
        stream.write_all(request).await?;
        stream.flush().await?;
        let msg = read_message(stream, &mut buf, &limits).await?.context("connection closed")?;
        check_response(&msg)?;
        latencies.push(t0.elapsed().as_nanos() as u64);
    }
    let elapsed = start.elapsed();
    let _ = stream.shutdown().await;
    Ok(elapsed)
}
