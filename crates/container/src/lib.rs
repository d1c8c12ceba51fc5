//! Tandem's service container, in the tradition of SIP Servlets and JAIN SLEE.
//!
//! Services see SIP sessions (one per dialog leg) grouped in application sessions, with
//! typed attributes, unguessable session IDs and timers. The container routes initial
//! requests to services by rules, matches subsequent requests and responses to their
//! sessions, answers what the RFCs make it answer (400, 416, 420, 481, 483, ...), and proxies.
//!
//! Calls are spread over executors by Call-ID: one executor owns a call's transactions,
//! dialogs and timers and handles its events one after another, on its own task, so a slow
//! handler never stalls the socket readers and nothing inside an executor needs a lock. Each
//! executor's core ([`Core`]) is deterministic: it gets the time and its random numbers from
//! its inputs and seed, which replication will rely on.
#![forbid(unsafe_code)]

mod attributes;
mod config;
mod context;
mod core;
mod ids;
mod locals;
mod metrics;
mod proxy;
mod routing;
mod runtime;
mod service;
mod session;
mod store;
mod timers;

pub use attributes::{AttrValue, Attributes};
pub use config::{ContainerConfig, ContainerSettings};
pub use context::Context;
pub use core::{Core, CoreParts, Services};
pub use ids::{AppSessionId, IdHashBuilder, IdHasher, IdSource, InvalidId, SessionId, TimerId};
pub use locals::{Destination, LocalListener, Locals};
pub use metrics::Metrics;
pub use proxy::ProxyOptions;
pub use routing::RouteRule;
pub use runtime::{Container, StartError};
pub use service::{DetachedRequest, Request, RequestKind, ResponseEvent, Service, ServiceId, UaProfile};
pub use session::{ActionTicket, AppSession, Dialog, LegRole, SessionState, SipSession};
pub use store::{AppSessionCell, SessionCell, SessionStore};
/// The server transaction a request arrived on (see [`Request::new`]).
pub use tandem_transaction::ServerTxId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContainerError {
    #[error("no such SIP session")]
    NoSuchSession,
    #[error("no such application session")]
    NoSuchApp,
    #[error("only an initial INVITE can be answered this way")]
    NotAnInvite,
    #[error("the session is terminated")]
    Terminated,
    #[error("no route to the target (IP addresses only, no DNS yet)")]
    Unroutable,
    #[error("no listener for the transport")]
    NoListener,
}

/// Work posted to an executor with `Context::post`; runs there with that executor's context.
pub type Post = Box<dyn FnOnce(&mut Context<'_>) + Send>;

/// Work on one SIP session, run at its home executor with the session locked
/// ([`Context::act_in_order`]).
pub type SessionWork = Box<dyn FnOnce(&mut Context<'_>, &mut SipSession) + Send>;

/// Brings work back into an executor from outside the container's event loop (a resource
/// adaptor's task finishing a database query). The runtime delivers it as an event of its
/// own, after the one being handled; a simulation or a replica can log and replay it.
pub trait Reentry: Send + Sync + 'static {
    fn post(&self, executor: u16, service: ServiceId, work: Post);
}

/// A one-shot way back to the executor and service that made it ([`Context::completion`]).
pub struct Completion {
    pub(crate) executor: u16,
    pub(crate) service: ServiceId,
    pub(crate) reentry: std::sync::Arc<dyn Reentry>,
}

impl Completion {
    /// Runs `work` on the executor this completion came from, with the service's context.
    pub fn complete(self, work: Post) {
        self.reentry.post(self.executor, self.service, work);
    }

    pub fn executor(&self) -> u16 {
        self.executor
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("executor", &self.executor).field("service", &self.service).finish()
    }
}

/// Where completions go when no runtime is attached (a bare sans-IO core): nowhere, loudly.
pub(crate) struct Detached;

impl Reentry for Detached {
    fn post(&self, executor: u16, _service: ServiceId, _work: Post) {
        tracing::warn!(executor, "a completion arrived for a core with no runtime attached; dropped");
    }
}

/// The executor that owns a call: FNV-1a of the Call-ID, stable across runs and builds (a
/// replica must place a call on the same executor).
pub fn executor_for(call_id: &str, executors: u16) -> u16 {
    if executors <= 1 {
        return 0;
    }
    let hash = call_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    (hash % u64::from(executors)) as u16
}

#[cfg(test)]
mod tests;
