//! Tandem's contract engine.
//!
//! A service is a business machine (a contract file) plus a [`Handler`] with one arm per
//! transition. For each message the engine evaluates the guards of the transitions leaving
//! the execution's current state, producing a *dynamic contract* (the enabled transition and
//! every session its handles traverse), acquires those sessions through a [`Negotiator`]
//! without blocking a thread and without deadlock, runs the handler arm, applies the state
//! change, sends what the arm sent, and releases. Messages that enable no transition are
//! absorbed.
#![forbid(unsafe_code)]

mod arm;
mod compiled;
pub mod dispatch;
mod engine;
mod eval;
mod event;
mod locks;
#[cfg(test)]
mod model_tests;
mod plan;
mod reads;
mod sorted_set;
mod stats;
mod transition;

pub use arm::ArmContext;
pub use compiled::{CompileError, Compiled};
pub use engine::{Handler, HandlerError, MachineService, Negotiator};
pub use eval::Value;
pub use event::{Event, MessageRef, Trigger};
pub use locks::{Acquire, LockTable, Ticket, GLOBAL};
pub use transition::{Body, Transition, TransitionError};
