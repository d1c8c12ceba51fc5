use crate::{Inner, SendError};
use bytes::Bytes;
use nix::sys::socket::MsgFlags;
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
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
    socket: UdpSocket,
    listener: u16,
    buf: Vec<u8>,
    /// Room for the arrival time's control message.
    control: Vec<u8>,
}

impl UdpReceiver {
    pub(crate) fn new(inner: Arc<Inner>, socket: UdpSocket, listener: u16) -> UdpReceiver {
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
            socket.try_io(tokio::io::Interest::READABLE, || recv_timestamped(socket, buf, control, MsgFlags::MSG_DONTWAIT))
        } else {
            socket.try_recv_from(buf).map(|(len, remote)| (len, remote, None))
        };
        received(&self.inner, &self.buf, self.listener, read)
    }

    /// The same receiver, read by blocking system calls on its owner's thread instead of
    /// through tokio's reactor (Kamailio's model): a datagram costs one `recvmsg` and no
    /// readiness wake-up (`epoll_wait`) nor the read that finds the socket empty. The socket
    /// leaves the reactor, so it must not be polled by [`Self::poll_ready`] any more (it is
    /// consumed). Call within the tokio runtime that registered it.
    pub fn into_blocking(self) -> std::io::Result<BlockingUdpReceiver> {
        let UdpReceiver { inner, socket, listener, buf, control } = self;
        let socket = socket.into_std()?;
        // Shared with the sending handle (same open file): sends pass MSG_DONTWAIT.
        socket.set_nonblocking(false)?;
        let local = socket.local_addr()?;
        let target = match local {
            SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, a.port())),
            SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port())),
            other => other,
        };
        // Bound to the listener's own address (loopback for a wildcard one), not to every
        // interface; its datagrams are recognised by that address and port.
        let bell_socket = std::net::UdpSocket::bind(SocketAddr::new(target.ip(), 0))?;
        bell_socket.connect(target)?;
        bell_socket.set_nonblocking(true)?;
        let bell = Arc::new(Doorbell { from: bell_socket.local_addr()?, socket: bell_socket, asleep: AtomicBool::new(false) });
        Ok(BlockingUdpReceiver { inner, socket, listener, buf, control, bell, timeout: None })
    }
}

/// A read: the datagram's length, source and arrival time (if asked for).
type Read = std::io::Result<(usize, SocketAddr, Option<SystemTime>)>;

/// What a read of a listener's socket gives its owner: the datagram's message, `Other` for a
/// datagram that is none (counted and reported to the sink, as the reader tasks do) or a
/// failed read, `Empty` when nothing was waiting.
fn received(inner: &Inner, buf: &[u8], listener: u16, read: Read) -> Received {
    match read {
        Ok((len, remote, arrived)) => match datagram(inner, &buf[..len], remote, listener) {
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

/// One `recvmsg`: the datagram's length, source and kernel arrival time (`SO_TIMESTAMPNS`).
fn recv_timestamped(socket: &impl AsRawFd, buf: &mut [u8], control: &mut [u8], flags: MsgFlags) -> Read {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, SockaddrStorage};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(control), flags).map_err(std::io::Error::from)?;
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

/// Wakes a [`BlockingUdpReceiver`]'s owner blocked in a read, when other work came for it
/// (a queued message, a post): an empty datagram from a socket of its own, sent only while
/// the owner says it is asleep.
pub struct Doorbell {
    socket: std::net::UdpSocket,
    from: SocketAddr,
    asleep: AtomicBool,
}

impl Doorbell {
    /// After queueing work for the owner: wakes it if it is (about to be) blocked.
    pub fn ring(&self) {
        // Pairs with the fence in `fall_asleep`: either the owner sees the work queued before
        // it blocks, or this sees it asleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.asleep.swap(false, Ordering::SeqCst) {
            let _ = self.socket.send(&[]);
        }
    }

    /// The owner is about to block: it must look at its queues once more after this.
    pub fn fall_asleep(&self) {
        self.asleep.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    pub fn wake_up(&self) {
        self.asleep.store(false, Ordering::Relaxed);
    }
}

/// A UDP listener read by blocking `recvmsg` on its owner's thread ([`UdpReceiver::into_blocking`]).
pub struct BlockingUdpReceiver {
    inner: Arc<Inner>,
    socket: std::net::UdpSocket,
    listener: u16,
    buf: Vec<u8>,
    control: Vec<u8>,
    bell: Arc<Doorbell>,
    /// The read timeout the socket has (`SO_RCVTIMEO`), changed only when it must.
    timeout: Option<Duration>,
}

impl BlockingUdpReceiver {
    /// The doorbell that wakes this receiver's owner out of [`Self::recv`].
    pub fn doorbell(&self) -> Arc<Doorbell> {
        self.bell.clone()
    }

    /// Waits at most `timeout` for the next datagram, or returns the one waiting.
    /// `Received::Empty`: the time ran out, or the doorbell rang (the owner has other work).
    /// Arrival times as in [`UdpReceiver::try_recv`].
    pub fn recv(&mut self, timestamped: bool, timeout: Duration) -> Received {
        // SO_RCVTIMEO of zero means no limit: the smallest limit is a microsecond.
        let timeout = Some(timeout.max(Duration::from_micros(1)));
        if timeout != self.timeout {
            if let Err(e) = self.socket.set_read_timeout(timeout) {
                tracing::debug!(error = %e, "udp read timeout not set");
            }
            self.timeout = timeout;
        }
        let BlockingUdpReceiver { socket, buf, control, .. } = self;
        let read = if timestamped {
            recv_timestamped(socket, buf, control, MsgFlags::empty())
        } else {
            socket.recv_from(buf).map(|(len, remote)| (len, remote, None))
        };
        match read {
            Ok((_, remote, _)) if remote == self.bell.from => Received::Empty,
            // The timeout ran out (EAGAIN, reported as either kind), or a signal came.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => Received::Empty,
            read => received(&self.inner, &self.buf, self.listener, read),
        }
    }
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
    // MSG_DONTWAIT: the socket may be in blocking mode for its owner's reads
    // (`UdpReceiver::into_blocking`); a full send buffer must drop, not block the sender.
    let to = nix::sys::socket::SockaddrStorage::from(flow.remote);
    match nix::sys::socket::sendto(socket.as_raw_fd(), payload, &to, MsgFlags::MSG_DONTWAIT) {
        Ok(_) => Ok(()),
        Err(e) => {
            // UDP is lossy by contract: the transaction layer retransmits what matters.
            inner.stats.udp_send_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, remote = %flow.remote, "udp send dropped");
            Ok(())
        }
    }
}
