//! SIP over WebSocket (RFC 7118): `ws` on TCP, `wss` on TLS, through tungstenite.
//!
//! The socket and TLS parts are the stream code's ([`crate::tcp`], [`crate::tls`]); what is
//! WebSocket-specific lives here: the HTTP upgrade (the `sip` subprotocol is required, RFC 7118
//! §4), and the framing, which differs from TCP's: every WebSocket message carries exactly one
//! SIP message (§5.2), so there is no Content-Length framing and no CRLF keep-alive — the
//! WebSocket layer has its own Ping/Pong, answered by tungstenite.
//!
//! tungstenite's synchronous `WebSocket` runs on the connection's non-blocking link
//! (`stream::Link`), so senders frame and write their messages directly, as over TCP; the
//! upgrade is driven the same way, resumed whenever the socket has more to read.
//!
//! Limits: a message (and a frame) above `max_message_bytes` closes the connection (tungstenite
//! refuses it before buffering it whole); the upgrade is bounded by the handshake timeout, the
//! connection by the idle timeout and the connection limits shared with TCP and TLS; frames
//! waiting for a blocked socket by [`ws_config`]'s write buffer limit.

use crate::stream::{Framing, Link, ReadOutcome, Shared};
use crate::{tcp, Inner};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tandem_sip::{Flow, Transport};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::handshake::{HandshakeError, HandshakeRole};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, WebSocket};

/// The subprotocol SIP uses (RFC 7118 §4.1, registered with IANA).
pub const SUBPROTOCOL: &str = "sip";

/// Frames go out as soon as they are written (no write buffering); what a blocked socket does
/// not take waits, up to the write queue's worth of messages of 1 KiB (and at least two of the
/// largest), then sending fails.
fn ws_config(inner: &Inner) -> WebSocketConfig {
    let max = inner.config.max_message_bytes;
    let held_back = inner.config.tcp_write_queue.saturating_mul(1024).max(2 * max + 1);
    WebSocketConfig::default().max_message_size(Some(max)).max_frame_size(Some(max)).write_buffer_size(0).max_write_buffer_size(held_back)
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
pub(crate) async fn serve_accepted(inner: Arc<Inner>, socket: Arc<TcpStream>, link: Link, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    let config = ws_config(&inner);
    let upgrade = finish_upgrade(&socket, tungstenite::accept_hdr_with_config(link, check_upgrade, Some(config)));
    match tokio::time::timeout(inner.config.tls_handshake_timeout, upgrade).await {
        Ok(Ok(ws)) => established(inner, socket, ws, rx, flow).await,
        Ok(Err(e)) => upgrade_failed(&inner, flow, &e.to_string()),
        Err(_) => upgrade_failed(&inner, flow, "timed out"),
    }
}

/// An outgoing connection to a WebSocket server (TCP connected, TLS done for `wss`): the
/// client side of the upgrade, asking for `sip`, then the connection.
pub(crate) async fn serve_connected(inner: Arc<Inner>, socket: Arc<TcpStream>, link: Link, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    let scheme = if flow.transport == Transport::Wss { "wss" } else { "ws" };
    let request = match tungstenite::client::IntoClientRequest::into_client_request(format!("{scheme}://{}/", flow.remote)) {
        Ok(mut request) => {
            request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
            request
        }
        Err(e) => return upgrade_failed(&inner, flow, &e.to_string()),
    };
    let config = ws_config(&inner);
    let upgrade = finish_upgrade(&socket, tungstenite::client::client_with_config(request, link, Some(config)));
    match tokio::time::timeout(inner.config.tls_handshake_timeout, upgrade).await {
        Ok(Ok((ws, response))) => {
            let agreed = response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()) == Some(SUBPROTOCOL);
            if agreed {
                established(inner, socket, ws, rx, flow).await;
            } else {
                upgrade_failed(&inner, flow, "server did not agree to the sip subprotocol");
            }
        }
        Ok(Err(e)) => upgrade_failed(&inner, flow, &e.to_string()),
        Err(_) => upgrade_failed(&inner, flow, "timed out"),
    }
}

/// Drives tungstenite's synchronous upgrade (server or client side) on the non-blocking link:
/// an interrupted attempt goes on when the peer sent more, or (rarely: the socket did not take
/// the whole request or response) after a moment.
async fn finish_upgrade<Role: HandshakeRole>(
    socket: &TcpStream,
    mut attempt: Result<Role::FinalResult, HandshakeError<Role>>,
) -> Result<Role::FinalResult, tungstenite::Error> {
    loop {
        match attempt {
            Ok(done) => return Ok(done),
            Err(HandshakeError::Failure(e)) => return Err(e),
            Err(HandshakeError::Interrupted(mid)) => {
                tokio::select! {
                    _ = socket.readable() => {}
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                }
                attempt = mid.handshake();
            }
        }
    }
}

async fn established(inner: Arc<Inner>, socket: Arc<TcpStream>, ws: WebSocket<Link>, rx: mpsc::Receiver<Bytes>, flow: Flow) {
    tcp::run_established(inner, socket, Framing::Ws(Box::new(ws)), rx, flow).await;
}

fn upgrade_failed(inner: &Inner, flow: Flow, reason: &str) {
    inner.stats.ws_upgrade_failed.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(remote = %flow.remote, reason, "websocket upgrade failed");
    tcp::close(inner, flow);
}

/// Reads an established WebSocket: each text or binary message is one SIP message.
pub(crate) async fn read_loop(inner: &Inner, shared: &Shared, flow: Flow) -> tcp::ReadEnd {
    let limits = inner.config.parse_limits();
    let mut unused = BytesMut::new();
    let mut messages = Vec::new();
    let mut idle = tcp::IdleWatch::new(inner);
    loop {
        let outcome = shared.read(&mut unused, &mut messages);
        for bytes in messages.drain(..) {
            if bytes.iter().all(|b| matches!(b, b'\r' | b'\n')) {
                continue;
            }
            match tandem_sip::parse_datagram(bytes, &limits) {
                Ok(msg) => inner.sink.on_message(msg, flow),
                Err(e) => inner.sink.on_parse_error(e, flow),
            }
        }
        match outcome {
            ReadOutcome::Data => idle.read(),
            ReadOutcome::WouldBlock => {
                if let Err(end) = idle.readable(inner, shared).await {
                    return end;
                }
            }
            ReadOutcome::Closed => {
                tracing::debug!(remote = %flow.remote, "websocket closed");
                return tcp::ReadEnd::Closed;
            }
            ReadOutcome::Oversize => {
                inner.stats.ws_oversize_closed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(remote = %flow.remote, "websocket closed: message above the size limit");
                return tcp::ReadEnd::Closed;
            }
        }
    }
}

/// Whether a transport is carried over WebSocket.
pub(crate) fn is_ws(transport: Transport) -> bool {
    matches!(transport, Transport::Ws | Transport::Wss)
}
