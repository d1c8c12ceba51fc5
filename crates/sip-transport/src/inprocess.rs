//! The in-process transport: containers of one process exchange messages by handing over the
//! message buffer — no socket, no system call, no copy (the analogue of the paper's zero-copy
//! `noalias` delivery between co-located sessions).
//!
//! An endpoint is an `inproc:IP:PORT` listener. The address is only a name — nothing is
//! bound — chosen so that Via, Contact and Record-Route read like any other transport's and
//! routing code stays transport-independent. Every container taking part is given the same
//! [`InProcessHub`] (in [`crate::TransportConfig::in_process`]); sending to an `inproc`
//! destination looks the name up there and gives the [`bytes::Bytes`] of the message (a
//! reference-counted buffer: moved, not copied) to the receiving container's sink, on the
//! sender's thread. Like every transport, the receiver parses it once into its message
//! index (zero-copy over the same buffer); the sink only queues it for an executor, so the
//! hand-over never blocks.
//!
//! In-process delivery cannot be lost or reordered, so the transport counts as reliable (no
//! retransmissions); a receiver whose executor queue is full answers 503, as it would over
//! any transport.

use crate::{Inner, Protocol, SendError};
use bytes::Bytes;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use tandem_sip::{Flow, Transport};

/// The registry of in-process endpoints of one process: give a clone to every container.
#[derive(Clone, Default)]
pub struct InProcessHub {
    endpoints: Arc<RwLock<HashMap<SocketAddr, Endpoint>>>,
}

#[derive(Clone)]
struct Endpoint {
    owner: Weak<Inner>,
    listener: u16,
}

impl std::fmt::Debug for InProcessHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<SocketAddr> = self.endpoints.read().keys().copied().collect();
        f.debug_struct("InProcessHub").field("endpoints", &names).finish()
    }
}

impl InProcessHub {
    pub fn new() -> InProcessHub {
        InProcessHub::default()
    }

    /// Registers an endpoint; an address already taken by a live endpoint is refused.
    pub(crate) fn register(&self, addr: SocketAddr, owner: Weak<Inner>, listener: u16) -> std::io::Result<()> {
        let mut endpoints = self.endpoints.write();
        if endpoints.get(&addr).is_some_and(|e| e.owner.strong_count() > 0) {
            return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, format!("in-process endpoint inproc:{addr} already exists")));
        }
        endpoints.insert(addr, Endpoint { owner, listener });
        Ok(())
    }

    /// Removes `addr` if `owner` registered it.
    pub(crate) fn unregister(&self, addr: SocketAddr, owner: &Weak<Inner>) {
        let mut endpoints = self.endpoints.write();
        if endpoints.get(&addr).is_some_and(|e| Weak::ptr_eq(&e.owner, owner)) {
            endpoints.remove(&addr);
        }
    }

    /// The names of the live endpoints.
    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.endpoints.read().iter().filter(|(_, e)| e.owner.strong_count() > 0).map(|(a, _)| *a).collect()
    }
}

/// Hands a message to the endpoint `flow.remote`, as sent from this container's in-process
/// listener.
pub(crate) fn send(inner: &Inner, flow: Flow, payload: Bytes) -> Result<(), SendError> {
    let Some(hub) = &inner.config.in_process else {
        return Err(SendError::NoListener(Transport::InProc));
    };
    let Some(from) = inner.listeners.iter().find(|l| l.protocol == Protocol::InProc).map(|l| l.local) else {
        return Err(SendError::NoListener(Transport::InProc));
    };
    let endpoint = hub.endpoints.read().get(&flow.remote).cloned();
    let Some((peer, listener)) = endpoint.and_then(|e| e.owner.upgrade().map(|owner| (owner, e.listener))) else {
        return Err(SendError::NoPeer);
    };
    let arrival = Flow { transport: Transport::InProc, listener, connection: 0, remote: from };
    match tandem_sip::parse_datagram(payload, &peer.config.parse_limits()) {
        Ok(msg) => peer.sink.on_message(msg, arrival),
        Err(e) => peer.sink.on_parse_error(e, arrival),
    }
    Ok(())
}
