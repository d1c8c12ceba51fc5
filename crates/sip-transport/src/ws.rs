//! SIP over WebSocket (RFC 7118): `ws` on TCP, `wss` on TLS, through tokio-tungstenite.
//!
//! The socket and TLS parts are the stream code's ([`crate::tcp`], [`crate::tls`]); what is
//! WebSocket-specific lives here: the HTTP upgrade (the `sip` subprotocol is required, RFC 7118
//! §4), and the framing, which differs from TCP's: every WebSocket message carries exactly one
//! SIP message (§5.2), so there is no Content-Length framing and no CRLF keep-alive — the
//! WebSocket layer has its own Ping/Pong, answered by tungstenite.
//!
//! Limits: a message (and a frame) above `max_message_bytes` closes the connection (tungstenite
//! refuses it before buffering it whole); the upgrade is bounded by the handshake timeout, the
//! connection by the idle timeout and the connection limits shared with TCP and TLS.

use crate::{tcp, Inner};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tandem_sip::{Flow, Transport};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

/// The subprotocol SIP uses (RFC 7118 §4.1, registered with IANA).
pub const SUBPROTOCOL: &str = "sip";

fn ws_config(inner: &Inner) -> WebSocketConfig {
    let max = inner.config.max_message_bytes;
    WebSocketConfig::default().max_message_size(Some(max)).max_frame_size(Some(max))
}

/// Whether a `Sec-WebSocket-Protocol` header offers `sip` (a comma-separated token list).
fn offers_sip(request: &Request) -> bool {
    request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim() == SUBPROTOCOL)
}

/// Accepts the upgrade only for the `sip` subprotocol, and answers with it (RFC 7118 §4.1);
/// anything else (a plain HTTP request, another subprotocol) gets an HTTP 400 and is closed.
// The signature is tungstenite's callback's; the large error is its HTTP response.
#[allow(clippy::result_large_err)]
fn check_upgrade(request: &Request, mut response: Response) -> Result<Response, ErrorResponse> {
    if !offers_sip(request) {
        let mut refusal = ErrorResponse::new(Some("the WebSocket subprotocol \"sip\" is required (RFC 7118)".to_string()));
        *refusal.status_mut() = StatusCode::BAD_REQUEST;
        return Err(refusal);
    }
    response.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
    Ok(response)
}

/// An accepted connection on a `ws` listener, or on a `wss` one after its TLS handshake:
/// the upgrade (bounded by the handshake timeout), then the connection.
pub(crate) async fn serve_accepted<S>(inner: Arc<Inner>, stream: S, rx: mpsc::Receiver<Bytes>, flow: Flow)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = ws_config(&inner);
    let upgrade = tokio_tungstenite::accept_hdr_async_with_config(stream, check_upgrade, Some(config));
    match tokio::time::timeout(inner.config.tls_handshake_timeout, upgrade).await {
        Ok(Ok(ws)) => run_connection(inner, ws, rx, flow).await,
        Ok(Err(e)) => upgrade_failed(&inner, flow, &e.to_string()),
        Err(_) => upgrade_failed(&inner, flow, "timed out"),
    }
}

/// An outgoing connection to a WebSocket server (TCP connected, TLS done for `wss`): the
/// client side of the upgrade, asking for `sip`, then the connection.
pub(crate) async fn serve_connected<S>(inner: Arc<Inner>, stream: S, rx: mpsc::Receiver<Bytes>, flow: Flow)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let scheme = if flow.transport == Transport::Wss { "wss" } else { "ws" };
    let request = match tungstenite::client::IntoClientRequest::into_client_request(format!("{scheme}://{}/", flow.remote)) {
        Ok(mut request) => {
            request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
            request
        }
        Err(e) => return upgrade_failed(&inner, flow, &e.to_string()),
    };
    let config = ws_config(&inner);
    let upgrade = tokio_tungstenite::client_async_with_config(request, stream, Some(config));
    match tokio::time::timeout(inner.config.tls_handshake_timeout, upgrade).await {
        Ok(Ok((ws, response))) => {
            let agreed = response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()) == Some(SUBPROTOCOL);
            if agreed {
                run_connection(inner, ws, rx, flow).await;
            } else {
                upgrade_failed(&inner, flow, "server did not agree to the sip subprotocol");
            }
        }
        Ok(Err(e)) => upgrade_failed(&inner, flow, &e.to_string()),
        Err(_) => upgrade_failed(&inner, flow, "timed out"),
    }
}

fn upgrade_failed(inner: &Inner, flow: Flow, reason: &str) {
    inner.stats.ws_upgrade_failed.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(remote = %flow.remote, reason, "websocket upgrade failed");
    tcp::close(inner, flow);
}

async fn run_connection<S>(inner: Arc<Inner>, ws: WebSocketStream<S>, rx: mpsc::Receiver<Bytes>, flow: Flow)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (write, read) = ws.split();
    let writer = tokio::spawn(write_loop(write, rx));
    // Unlike TCP's half-close, a WebSocket that stopped reading is over (a Close frame
    // ends both directions, RFC 6455 §5.5.1): no lingering for late responses.
    let _ended = read_loop(&inner, read, flow).await;
    writer.abort();
    tcp::close(&inner, flow);
}

async fn write_loop<W>(mut write: W, mut rx: mpsc::Receiver<Bytes>)
where
    W: futures_util::Sink<Message, Error = tungstenite::Error> + Unpin,
{
    while let Some(first) = rx.recv().await {
        if write.feed(frame(first)).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if write.feed(frame(more)).await.is_err() {
                return;
            }
        }
        if write.flush().await.is_err() {
            return;
        }
    }
    let _ = write.close().await;
}

/// SIP is text: a UTF-8 message goes as a text frame (what browsers' SIP stacks expect),
/// anything else as binary (RFC 7118 §5.1 allows both). Neither copies the bytes.
fn frame(payload: Bytes) -> Message {
    match Utf8Bytes::try_from(payload.clone()) {
        Ok(text) => Message::Text(text),
        Err(_) => Message::Binary(payload),
    }
}

async fn read_loop<R>(inner: &Inner, mut read: R, flow: Flow) -> tcp::ReadEnd
where
    R: futures_util::Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    let limits = inner.config.parse_limits();
    loop {
        let next = match tokio::time::timeout(inner.config.tcp_idle_timeout, read.next()).await {
            Err(_) => {
                inner.stats.tcp_idle_closed.fetch_add(1, Ordering::Relaxed);
                return tcp::ReadEnd::Idle;
            }
            Ok(None) => return tcp::ReadEnd::Closed,
            Ok(Some(Err(e))) => {
                if matches!(e, tungstenite::Error::Capacity(_)) {
                    inner.stats.ws_oversize_closed.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(error = %e, remote = %flow.remote, "websocket closed");
                return tcp::ReadEnd::Closed;
            }
            Ok(Some(Ok(message))) => message,
        };
        let bytes: Bytes = match next {
            Message::Text(text) => text.into(),
            Message::Binary(bytes) => bytes,
            Message::Close(_) => return tcp::ReadEnd::Closed,
            // Pings are answered by tungstenite; pongs and raw frames carry no SIP.
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
        };
        if bytes.iter().all(|b| matches!(b, b'\r' | b'\n')) {
            continue;
        }
        match tandem_sip::parse_datagram(bytes, &limits) {
            Ok(msg) => inner.sink.on_message(msg, flow),
            Err(e) => inner.sink.on_parse_error(e, flow),
        }
    }
}

/// Whether a transport is carried over WebSocket.
pub(crate) fn is_ws(transport: Transport) -> bool {
    matches!(transport, Transport::Ws | Transport::Wss)
}
