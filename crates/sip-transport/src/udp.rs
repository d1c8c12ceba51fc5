use crate::{Inner, SendError};
use bytes::Bytes;
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tandem_sip::{parse_datagram, Flow, Transport};
use tokio::net::UdpSocket;

/// The bound socket twice: tokio's, for the read loops, and a plain non-blocking handle on the
/// same socket for sending. Sending on tokio's (`try_send_to`) fails with WouldBlock until
/// the reactor has reported the socket writable once — a fresh listener silently dropped its
/// first datagrams (found by the transport benchmark); the plain handle only fails when the
/// kernel's send buffer is really full.
pub(crate) fn bind(addr: SocketAddr, buffer_bytes: usize) -> std::io::Result<(UdpSocket, std::net::UdpSocket)> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(SockProtocol::UDP))?;
    // Best effort: the kernel caps these at net.core.{r,w}mem_max.
    let _ = socket.set_recv_buffer_size(buffer_bytes);
    let _ = socket.set_send_buffer_size(buffer_bytes);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    let sender: std::net::UdpSocket = socket.try_clone()?.into();
    Ok((UdpSocket::from_std(socket.into())?, sender))
}

/// Reads datagrams, copying each into a buffer of its own size: a message kept alive by a
/// transaction then holds only its own bytes, not a shared 64 KiB receive buffer.
pub(crate) async fn read_loop(inner: Arc<Inner>, socket: Arc<UdpSocket>, listener: u16) {
    let max = inner.config.max_message_bytes;
    let limits = inner.config.parse_limits();
    let mut buf = vec![0u8; max + 1];
    loop {
        let (len, remote) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                // ICMP port unreachable and the like surface here on some systems: keep reading.
                tracing::debug!(error = %e, "udp receive error");
                continue;
            }
        };
        let flow = Flow { transport: Transport::Udp, listener, connection: 0, remote };
        if len > max {
            inner.stats.udp_oversize_dropped.fetch_add(1, Ordering::Relaxed);
            inner.sink.on_parse_error(tandem_sip::ParseError::TooLarge(len), flow);
            continue;
        }
        match parse_datagram(Bytes::copy_from_slice(&buf[..len]), &limits) {
            Ok(msg) => inner.sink.on_message(msg, flow),
            Err(tandem_sip::ParseError::KeepAlive) => {}
            Err(e) => inner.sink.on_parse_error(e, flow),
        }
    }
}

pub(crate) fn send(inner: &Inner, flow: Flow, payload: &Bytes) -> Result<(), SendError> {
    let socket = inner
        .listeners
        .get(flow.listener as usize)
        .and_then(|l| l.udp_sender.as_ref())
        .or_else(|| inner.listeners.iter().find_map(|l| l.udp_sender.as_ref()))
        .ok_or(SendError::NoListener(Transport::Udp))?;
    match socket.send_to(payload, flow.remote) {
        Ok(_) => Ok(()),
        Err(e) => {
            // UDP is lossy by contract: the transaction layer retransmits what matters.
            inner.stats.udp_send_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, remote = %flow.remote, "udp send dropped");
            Ok(())
        }
    }
}
