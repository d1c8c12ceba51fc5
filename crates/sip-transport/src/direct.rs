//! Writing to a plain TCP connection from the sender's thread.
//!
//! Handing every message to a writer task costs a task wake-up (often on another thread)
//! per message; the transport benchmark measured it as most of the abstraction's overhead
//! over TCP. So a send first tries the socket itself (non-blocking), under the connection's
//! lock; only what the kernel does not take at once is queued, and the connection's task
//! writes it out when the socket becomes writable again. Order is kept: nothing is written
//! directly while anything is queued. TLS and WebSocket keep their writer task (their
//! framing state lives in the stream object).

use crate::SendError;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::ErrorKind;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, Notify};

pub(crate) struct DirectWriter {
    half: OwnedWriteHalf,
    state: Mutex<Pending>,
    wake: Notify,
    /// Messages queued at most (the write queue limit of the configuration).
    limit: usize,
}

#[derive(Default)]
struct Pending {
    queue: VecDeque<Bytes>,
    failed: bool,
}

enum Flush {
    Done,
    Blocked,
    Failed,
}

impl DirectWriter {
    pub(crate) fn new(half: OwnedWriteHalf, limit: usize) -> DirectWriter {
        DirectWriter { half, state: Mutex::new(Pending::default()), wake: Notify::new(), limit: limit.max(1) }
    }

    /// Writes at once what the socket takes; queues the rest for [`Self::run`].
    pub(crate) fn send(&self, payload: Bytes) -> Result<(), SendError> {
        let mut pending = self.state.lock();
        if pending.failed {
            return Err(SendError::QueueFull);
        }
        if !pending.queue.is_empty() {
            if pending.queue.len() >= self.limit {
                return Err(SendError::QueueFull);
            }
            pending.queue.push_back(payload);
            return Ok(());
        }
        match self.half.try_write(&payload) {
            Ok(n) if n == payload.len() => return Ok(()),
            Ok(n) => pending.queue.push_back(payload.slice(n..)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => pending.queue.push_back(payload),
            Err(_) => {
                pending.failed = true;
                return Err(SendError::QueueFull);
            }
        }
        drop(pending);
        self.wake.notify_one();
        Ok(())
    }

    /// Writes what is queued until the socket would block.
    fn flush(&self) -> Flush {
        let mut pending = self.state.lock();
        while let Some(front) = pending.queue.front_mut() {
            match self.half.try_write(front) {
                Ok(n) if n == front.len() => {
                    pending.queue.pop_front();
                }
                Ok(n) => *front = front.slice(n..),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Flush::Blocked,
                Err(_) => {
                    pending.failed = true;
                    pending.queue.clear();
                    return Flush::Failed;
                }
            }
        }
        Flush::Done
    }

    /// The connection's writing task: writes out what [`Self::send`] could not, and what
    /// still arrives on the queue the connection was registered with (messages sent while
    /// it was being set up, or by a sender that looked the connection up just before).
    pub(crate) async fn run(&self, rx: mpsc::Receiver<Bytes>) {
        let mut rx = Some(rx);
        loop {
            loop {
                match self.flush() {
                    Flush::Done => break,
                    Flush::Failed => return,
                    Flush::Blocked => {
                        if self.half.writable().await.is_err() {
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
