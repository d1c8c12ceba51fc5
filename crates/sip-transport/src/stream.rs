//! An established stream connection (TCP, TLS, WS, WSS), written from the sender's thread.
//!
//! Handing every message to a writer task costs a task wake-up (often on another thread) per
//! message; the transport benchmark measured it as most of the abstraction's overhead over
//! raw sockets. So a connection's state — the socket, the TLS session (rustls), the WebSocket
//! framing (tungstenite's sync [`WebSocket`]) — lives behind one short lock, driven by
//! non-blocking reads and writes:
//!
//! - a sender locks it, encrypts and frames its message, and writes what the kernel takes at
//!   once; only what it does not take stays queued (in order), and the connection's flush task
//!   writes it out when the socket becomes writable again;
//! - the connection's reader task waits for readability without the lock, then locks it to
//!   read and decrypt what arrived, and hands the SIP messages to the sink after unlocking.
//!
//! Queued output is bounded ([`Shared::new`]'s limit): beyond it, sending fails.

use crate::SendError;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::{self, BufRead, ErrorKind, Read, Write};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio_rustls::rustls;
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes, WebSocket};

/// The socket and, for TLS and WSS, the TLS session on it: non-blocking `Read` + `Write` of
/// plaintext (what tungstenite reads and writes for WS and WSS).
pub(crate) struct Link {
    socket: Arc<TcpStream>,
    tls: Option<Box<rustls::Connection>>,
    /// Plain TCP with SIP framing: what the socket did not take yet.
    queue: VecDeque<Bytes>,
    /// Messages (or, under WebSocket framing, writes) accepted but not yet all written to the
    /// socket (queued here, or held by rustls).
    pending: usize,
    /// Most of them held back for a blocked socket (the configuration's write queue).
    limit: usize,
}

/// Queued messages handed to one vectored write (Linux takes up to 1,024).
const WRITE_SLICES: usize = 32;

/// Non-blocking reads and writes on a shared tokio socket.
struct Socket<'a>(&'a TcpStream);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_socket(self.0, buf.len(), |socket| socket.try_read(buf))
    }
}

/// One non-blocking read of at most `room` bytes. A short read means the kernel had no more:
/// the socket's readiness is cleared with it, as tokio's own `poll_read` does, so the next
/// read waits for the reactor instead of paying a system call to learn there is nothing
/// (the transport benchmark counted one such EAGAIN per message, ~1 µs each). The clear is
/// done inside the same `try_io` as the read, so it cannot swallow data that arrived since:
/// tokio clears only the readiness event it handed to that call.
fn read_socket(socket: &TcpStream, room: usize, read: impl FnOnce(&TcpStream) -> io::Result<usize>) -> io::Result<usize> {
    let mut got = 0;
    let outcome = socket.try_io(tokio::io::Interest::READABLE, || {
        got = read(socket)?;
        if got > 0 && got < room {
            // Not an error: the bytes are kept, only the readiness is cleared.
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(got)
    });
    match outcome {
        Err(e) if e.kind() == ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    /// rustls hands over its records in one vectored write: one system call per flush, not
    /// one per 16 KiB record.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Link {
    pub(crate) fn plain(socket: Arc<TcpStream>, limit: usize) -> Link {
        Link { socket, tls: None, queue: VecDeque::new(), pending: 0, limit }
    }

    /// After the TLS handshake (done by tokio-rustls, then taken apart). rustls's own buffer
    /// limit is lifted: it would accept part of a message; `limit` bounds what is held back.
    pub(crate) fn tls(socket: Arc<TcpStream>, mut session: rustls::Connection, limit: usize) -> Link {
        session.set_buffer_limit(None);
        Link { socket, tls: Some(Box::new(session)), queue: VecDeque::new(), pending: 0, limit }
    }

    /// Writes what is held back until done (true) or the socket would block (false).
    fn flush_out(&mut self) -> io::Result<bool> {
        let socket = &*self.socket;
        match &mut self.tls {
            Some(tls) => {
                if !write_tls(tls, socket)? {
                    return Ok(false);
                }
            }
            None => {
                // Messages held back together (an executor's batch, or a blocked socket) leave
                // in one vectored write: one system call and, on TCP, one segment for them all.
                while !self.queue.is_empty() {
                    let mut slices = [io::IoSlice::new(&[]); WRITE_SLICES];
                    let mut count = 0;
                    for (slice, message) in slices.iter_mut().zip(self.queue.iter()) {
                        *slice = io::IoSlice::new(message);
                        count += 1;
                    }
                    let written = match socket.try_write_vectored(&slices[..count]) {
                        Ok(n) => n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                        Err(e) => return Err(e),
                    };
                    if written == 0 {
                        return Err(ErrorKind::WriteZero.into());
                    }
                    let mut left = written;
                    while let Some(front) = self.queue.front_mut() {
                        if left < front.len() {
                            *front = front.slice(left..);
                            break;
                        }
                        left -= front.len();
                        self.queue.pop_front();
                    }
                }
            }
        }
        self.pending = 0;
        Ok(true)
    }

    /// Queues one SIP message (stream framing: the bytes as they are) and writes what the
    /// socket takes. Ok(false): some of it waits for the socket.
    fn send_sip(&mut self, payload: Bytes) -> Result<bool, SendError> {
        self.hold_sip(payload)?;
        self.flush_out().map_err(|_| SendError::QueueFull)
    }

    /// Queues one SIP message (encrypted, for TLS) without writing it.
    fn hold_sip(&mut self, payload: Bytes) -> Result<(), SendError> {
        if self.pending >= self.limit {
            return Err(SendError::QueueFull);
        }
        self.pending += 1;
        match &mut self.tls {
            Some(tls) => tls.writer().write_all(&payload).map_err(|_| SendError::QueueFull),
            None => {
                self.queue.push_back(payload);
                Ok(())
            }
        }
    }

    /// Reads what arrived into `buf` (plaintext). Ok(0): the peer closed.
    fn read_into(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let socket = &*self.socket;
        let Some(tls) = &mut self.tls else {
            if buf.capacity() == buf.len() {
                buf.reserve(4096);
            }
            let room = buf.capacity() - buf.len();
            return read_socket(socket, room, |socket| socket.try_read_buf(buf));
        };
        loop {
            // Copied straight from rustls's plaintext buffer: no zeroed scratch space.
            let mut reader = tls.reader();
            match reader.fill_buf() {
                Ok(chunk) => {
                    let n = chunk.len();
                    buf.extend_from_slice(chunk);
                    reader.consume(n);
                    // n == 0: a clean close (close_notify).
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // A close without close_notify, or a failed session.
                Err(e) => return Err(e),
            }
            receive_tls(tls, socket)?;
        }
    }

    /// TLS: a close_notify, written if the socket takes it.
    fn close(&mut self) {
        if let Some(tls) = &mut self.tls {
            tls.send_close_notify();
            let _ = self.flush_out();
        }
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let socket = &*self.socket;
        let Some(tls) = &mut self.tls else {
            return Socket(socket).read(buf);
        };
        loop {
            match tls.reader().read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // Plaintext, a clean close (0), or a close without close_notify.
                other => return other,
            }
            receive_tls(tls, socket)?;
        }
    }
}

/// Reads TLS records from the socket into the session and decrypts them; writes what the
/// session wants to answer (alerts, key updates). WouldBlock: nothing more on the socket.
fn receive_tls(tls: &mut rustls::Connection, socket: &TcpStream) -> io::Result<()> {
    // 0 (end of stream) is recorded by rustls: its reader reports the close next.
    tls.read_tls(&mut Socket(socket))?;
    tls.process_new_packets().map_err(io::Error::other)?;
    // What the socket does not take now goes with the next write or flush.
    write_tls(tls, socket)?;
    Ok(())
}

/// Writes the TLS records the session holds until none is left (true) or the socket would
/// block (false).
fn write_tls(tls: &mut rustls::Connection, socket: &TcpStream) -> io::Result<bool> {
    while tls.wants_write() {
        match tls.write_tls(&mut Socket(socket)) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

impl Write for Link {
    /// Plain: what the socket takes. TLS: rustls takes it all (encrypted into its buffer) and
    /// writes what the socket takes, until the limit of held-back writes.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.tls.is_some() && self.pending >= self.limit && !self.flush_out()? {
            return Err(ErrorKind::WouldBlock.into());
        }
        let Some(tls) = &mut self.tls else {
            return self.socket.try_write(buf);
        };
        let n = tls.writer().write(buf)?;
        self.pending += 1;
        self.flush_out()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.flush_out()? {
            Ok(())
        } else {
            Err(ErrorKind::WouldBlock.into())
        }
    }
}

/// How messages are delimited on the connection.
pub(crate) enum Framing {
    /// SIP over a byte stream (TCP, TLS): Content-Length framing, done by the reader.
    Sip(Link),
    /// One SIP message per WebSocket message (WS, WSS, RFC 7118).
    Ws(Box<WebSocket<Link>>),
}

struct State {
    framing: Framing,
    failed: bool,
}

/// One established connection, shared by its reader task, its flush task and every sender.
pub(crate) struct Shared {
    socket: Arc<TcpStream>,
    state: Mutex<State>,
    wake: Notify,
}

/// What one turn of [`Shared::read`] got.
pub(crate) enum ReadOutcome {
    /// Nothing more for now: wait for readability.
    WouldBlock,
    /// Data (SIP framing: appended to the buffer; WS: whole messages).
    Data,
    /// The peer closed the connection, or it failed.
    Closed,
    /// A WebSocket message or frame above the size limit.
    Oversize,
}

/// Messages taken from a WebSocket per lock hold, so senders are not kept waiting.
const WS_MESSAGES_PER_TURN: usize = 32;

impl Shared {
    pub(crate) fn new(socket: Arc<TcpStream>, framing: Framing) -> Arc<Shared> {
        Arc::new(Shared { socket, state: Mutex::new(State { framing, failed: false }), wake: Notify::new() })
    }

    /// Readiness for reading, for the connection's one reader (tokio keeps one reader waker
    /// per socket: no waiter list to join and leave per wait, as `readable()` has).
    pub(crate) fn poll_readable(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        self.socket.poll_read_ready(cx)
    }

    /// Sends one SIP message: written at once as far as the socket takes it, the rest queued
    /// for the flush task.
    pub(crate) fn send(&self, payload: Bytes) -> Result<(), SendError> {
        let mut guard = self.state.lock();
        let State { framing, failed } = &mut *guard;
        if *failed {
            return Err(SendError::QueueFull);
        }
        let written = match framing {
            Framing::Sip(link) => link.send_sip(payload),
            Framing::Ws(ws) => ws_outcome(ws.write(frame(payload)).and_then(|()| ws.flush()), failed),
        };
        drop(guard);
        match written {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.wake.notify_one();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Queues one SIP message without writing it: [`Shared::release`] writes what was held,
    /// so that several messages for this connection leave in one write.
    pub(crate) fn hold(&self, payload: Bytes) -> Result<(), SendError> {
        let mut guard = self.state.lock();
        let State { framing, failed } = &mut *guard;
        if *failed {
            return Err(SendError::QueueFull);
        }
        match framing {
            Framing::Sip(link) => link.hold_sip(payload),
            // tungstenite buffers the frame (a WouldBlock: buffered, not written).
            Framing::Ws(ws) => ws_outcome(ws.write(frame(payload)), failed).map(|_| ()),
        }
    }

    /// Writes what [`Shared::hold`] queued, as far as the socket takes it; the rest is left to
    /// the flush task. Err: the connection failed.
    pub(crate) fn release(&self) -> io::Result<()> {
        if !self.flush()? {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Reads what arrived: SIP framing appends to `buf`; WebSocket pushes whole messages
    /// (text or binary) to `messages`.
    pub(crate) fn read(&self, buf: &mut BytesMut, messages: &mut Vec<Bytes>) -> ReadOutcome {
        let mut state = self.state.lock();
        let outcome = match &mut state.framing {
            Framing::Sip(link) => match link.read_into(buf) {
                Ok(0) => ReadOutcome::Closed,
                Ok(_) => ReadOutcome::Data,
                Err(e) if e.kind() == ErrorKind::WouldBlock => ReadOutcome::WouldBlock,
                Err(_) => ReadOutcome::Closed,
            },
            Framing::Ws(ws) => {
                let mut outcome = ReadOutcome::WouldBlock;
                while messages.len() < WS_MESSAGES_PER_TURN {
                    match ws.read() {
                        Ok(Message::Text(text)) => messages.push(text.into()),
                        Ok(Message::Binary(bytes)) => messages.push(bytes),
                        Ok(Message::Close(_)) => {
                            outcome = ReadOutcome::Closed;
                            break;
                        }
                        // Pings are answered by tungstenite; pongs and raw frames carry no SIP.
                        Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                        Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(tungstenite::Error::Capacity(_)) => {
                            outcome = ReadOutcome::Oversize;
                            break;
                        }
                        Err(_) => {
                            outcome = ReadOutcome::Closed;
                            break;
                        }
                    }
                }
                if matches!(outcome, ReadOutcome::WouldBlock) && !messages.is_empty() {
                    outcome = ReadOutcome::Data;
                }
                // Pongs and the reply to a Close, queued by reading.
                if let Err(tungstenite::Error::Io(e)) = ws.flush() {
                    if e.kind() == ErrorKind::WouldBlock {
                        self.wake.notify_one();
                    }
                }
                outcome
            }
        };
        if matches!(outcome, ReadOutcome::Closed | ReadOutcome::Oversize) {
            state.failed = true;
        }
        outcome
    }

    /// Writes what is queued until the socket would block: Ok(true) when all is written.
    fn flush(&self) -> io::Result<bool> {
        let mut state = self.state.lock();
        if state.failed {
            return Err(ErrorKind::BrokenPipe.into());
        }
        let flushed = match &mut state.framing {
            Framing::Sip(link) => link.flush_out(),
            Framing::Ws(ws) => match ws.flush() {
                Ok(()) => Ok(true),
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => Ok(false),
                Err(e) => Err(io::Error::other(e.to_string())),
            },
        };
        if flushed.is_err() {
            state.failed = true;
        }
        flushed
    }

    /// Ends the connection from this side: TLS close_notify, WebSocket Close frame (both
    /// best effort); then nothing more is sent.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        match &mut state.framing {
            Framing::Sip(link) => link.close(),
            Framing::Ws(ws) => {
                let _ = ws.close(None);
                let _ = ws.flush();
                ws.get_mut().close();
            }
        }
        state.failed = true;
    }

    /// The connection's flush task: writes out what senders could not, and what still arrives
    /// on the queue the connection was registered with (messages sent while it was being set
    /// up, or by a sender that looked the connection up just before it was set up). Ends when
    /// writing fails.
    pub(crate) async fn run(&self, rx: mpsc::Receiver<Bytes>) {
        let mut rx = Some(rx);
        loop {
            loop {
                match self.flush() {
                    Ok(true) => break,
                    Err(_) => return,
                    Ok(false) => {
                        if self.socket.writable().await.is_err() {
                            self.state.lock().failed = true;
                            return;
                        }
                    }
                }
            }
            match &mut rx {
                Some(queued) => tokio::select! {
                    _ = self.wake.notified() => {}
                    message = queued.recv() => match message {
                        Some(payload) => {
                            if self.send(payload).is_err() {
                                return;
                            }
                        }
                        None => rx = None,
                    },
                },
                None => self.wake.notified().await,
            }
        }
    }
}

/// The last holder of a connection lets the peer know at once (FIN), also when its tasks were
/// aborted rather than ended, as dropping tokio's write half did before.
impl Drop for Shared {
    fn drop(&mut self) {
        let _ = socket2::SockRef::from(&*self.socket).shutdown(std::net::Shutdown::Write);
    }
}

/// What a WebSocket write (and flush) came to: written (true), buffered for the socket
/// (false), refused (its buffer full), or failed, which fails the connection.
fn ws_outcome(result: Result<(), tungstenite::Error>, failed: &mut bool) -> Result<bool, SendError> {
    match result {
        Ok(()) => Ok(true),
        Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => Ok(false),
        Err(tungstenite::Error::WriteBufferFull(_)) => Err(SendError::QueueFull),
        Err(_) => {
            *failed = true;
            Err(SendError::QueueFull)
        }
    }
}

/// SIP is text: a UTF-8 message goes as a text frame (what browsers' SIP stacks expect),
/// anything else as binary (RFC 7118 §5.1 allows both). Neither copies the bytes.
pub(crate) fn frame(payload: Bytes) -> Message {
    match Utf8Bytes::try_from(payload.clone()) {
        Ok(text) => Message::Text(text),
        Err(_) => Message::Binary(payload),
    }
}
