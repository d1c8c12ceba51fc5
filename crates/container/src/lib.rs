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
pub use service::{Request, RequestKind, ResponseEvent, Service, ServiceId, UaProfile};
pub use session::{AppSession, Dialog, LegRole, SessionState, SipSession};
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
