use crate::{Inner, SendError};
use bytes::Bytes;
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tandem_sip::{parse_datagram, Flow, Transport};
use tokio::net::UdpSocket;

/// The bound socket twice: tokio's, for the read loops, and a plain non-blocking handle on the
/// same socket for sending. Sending on tokio's (`try_send_to`) fails with WouldBlock until
/// the reactor has reported the socket writable once — a fresh listener silently dropped its
/// first datagrams (found by the transport benchmark); the plain handle only fails when the
/// kernel's send buffer is really full.
pub(crate) fn bind(addr: SocketAddr, buffer_bytes: usize, arrival_times: bool) -> std::io::Result<(UdpSocket, std::net::UdpSocket)> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(SockProtocol::UDP))?;
    // Best effort: the kernel caps these at net.core.{r,w}mem_max.
    let _ = socket.set_recv_buffer_size(buffer_bytes);
    let _ = socket.set_send_buffer_size(buffer_bytes);
    socket.set_nonblocking(true)?;
    if arrival_times {
        // For receivers read by their owner, which refuses new calls that waited too long
        // (`UdpReceiver::try_recv`); best effort. Reader tasks do not use them.
        let _ = nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimestampns, &true);
    }
    socket.bind(&addr.into())?;
    let sender: std::net::UdpSocket = socket.try_clone()?.into();
    Ok((UdpSocket::from_std(socket.into())?, sender))
}

/// Reads datagrams, copying each into a buffer of its own size: a message kept alive by a
/// transaction then holds only its own bytes, not a shared 64 KiB receive buffer.
pub(crate) async fn read_loop(inner: Arc<Inner>, socket: Arc<UdpSocket>, listener: u16) {
    let mut buf = vec![0u8; inner.config.max_message_bytes + 1];
    loop {
        let (len, remote) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                // ICMP port unreachable and the like surface here on some systems: keep reading.
                tracing::debug!(error = %e, "udp receive error");
                continue;
            }
        };
        if let Some((msg, flow)) = datagram(&inner, &buf[..len], remote, listener) {
            inner.sink.on_message(msg, flow);
        }
    }
}

/// One received datagram: its message, or None after counting and reporting what it was
/// (oversize, unparseable, a keep-alive).
fn datagram(inner: &Inner, bytes: &[u8], remote: SocketAddr, listener: u16) -> Option<(tandem_sip::Message, Flow)> {
    let flow = Flow { transport: Transport::Udp, listener, connection: 0, remote };
    if bytes.len() > inner.config.max_message_bytes {
        inner.stats.udp_oversize_dropped.fetch_add(1, Ordering::Relaxed);
        inner.sink.on_parse_error(tandem_sip::ParseError::TooLarge(bytes.len()), flow);
        return None;
    }
    match parse_datagram(Bytes::copy_from_slice(bytes), &inner.config.parse_limits()) {
        Ok(msg) => Some((msg, flow)),
        Err(tandem_sip::ParseError::KeepAlive) => None,
        Err(e) => {
            inner.sink.on_parse_error(e, flow);
            None
        }
    }
}

/// A UDP listener read by its owner instead of a reader task (`TransportConfig::udp_readers`
/// = 0): the container's executor polls it in its own loop, so a datagram is read, parsed and
/// handled on one task, with no hand-over between tasks (decision 0003, "Runtime threads").
pub struct UdpReceiver {
    inner: Arc<Inner>,
    socket: Arc<UdpSocket>,
    listener: u16,
    buf: Vec<u8>,
    /// Room for the arrival time's control message.
    control: Vec<u8>,
}

impl UdpReceiver {
    pub(crate) fn new(inner: Arc<Inner>, socket: Arc<UdpSocket>, listener: u16) -> UdpReceiver {
        let buf = vec![0u8; inner.config.max_message_bytes + 1];
        UdpReceiver { inner, socket, listener, buf, control: nix::cmsg_space!(nix::sys::time::TimeSpec) }
    }

    /// Ready when a datagram may be waiting; registers the task's waker otherwise.
    pub fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        // An error (none is expected from readiness) is reported as ready: `try_recv` then
        // surfaces it.
        self.socket.poll_recv_ready(cx).map(|_| ())
    }

    /// Reads the next waiting datagram without blocking. `Received::Message` carries a parsed
    /// message and when the kernel received it (None if not asked for, or the system did not
    /// say);
    /// `Received::Other` is a datagram that was not a message (counted and reported to the
    /// sink, as the reader tasks do); `Received::Empty` means nothing is waiting, and the next
    /// [`Self::poll_ready`] waits for more.
    ///
    /// `timestamped` asks for the arrival time (a `recvmsg` and its control message, which
    /// costs a little more than the plain read): the owner asks when it may be falling behind.
    pub fn try_recv(&mut self, timestamped: bool) -> Received {
        let UdpReceiver { socket, buf, control, .. } = self;
        let read = if timestamped {
            socket.try_io(tokio::io::Interest::READABLE, || recv_timestamped(socket, buf, control))
        } else {
            socket.try_recv_from(buf).map(|(len, remote)| (len, remote, None))
        };
        match read {
            Ok((len, remote, arrived)) => match datagram(&self.inner, &self.buf[..len], remote, self.listener) {
                Some((msg, flow)) => Received::Message(msg, flow, arrived),
                None => Received::Other,
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Received::Empty,
            Err(e) => {
                tracing::debug!(error = %e, "udp receive error");
                Received::Other
            }
        }
    }
}

/// One `recvmsg`: the datagram's length, source and kernel arrival time (`SO_TIMESTAMPNS`).
fn recv_timestamped(socket: &UdpSocket, buf: &mut [u8], control: &mut [u8]) -> std::io::Result<(usize, SocketAddr, Option<SystemTime>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg =
        recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(control), MsgFlags::MSG_DONTWAIT).map_err(std::io::Error::from)?;
    let remote = msg
        .address
        .and_then(|a| match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
            (Some(v4), _) => Some(SocketAddr::from(*v4)),
            (_, Some(v6)) => Some(SocketAddr::from(*v6)),
            _ => None,
        })
        .ok_or_else(|| std::io::Error::other("datagram without an IP source address"))?;
    let mut arrived = None;
    for c in msg.cmsgs().into_iter().flatten() {
        if let ControlMessageOwned::ScmTimestampns(ts) = c {
            let since_epoch = u64::try_from(ts.tv_sec()).ok().zip(u32::try_from(ts.tv_nsec()).ok());
            arrived = since_epoch.map(|(s, ns)| UNIX_EPOCH + Duration::new(s, ns));
        }
    }
    Ok((msg.bytes, remote, arrived))
}

/// What [`UdpReceiver::try_recv`] found.
// A message is what is nearly always received: boxing it would add an allocation per datagram.
#[allow(clippy::large_enum_variant)]
pub enum Received {
    Message(tandem_sip::Message, Flow, Option<SystemTime>),
    Other,
    Empty,
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
