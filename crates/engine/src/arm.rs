//! What a handler arm can do, whichever dispatcher runs it: the engine ([`Transition`]) or a
//! contract compiled to Rust ([`crate::dispatch::Step`]). A service's arms written against this
//! trait run on both unchanged.

use crate::transition::{Body, Transition, TransitionError};
use bytes::Bytes;
use std::time::Duration;
use tandem_container::{AttrValue, Destination, SessionId, TimerId};
use tandem_sip::Method;

pub trait ArmContext {
    /// The SIP session the message arrived on (for an initial request: the one `accept`
    /// created).
    fn sips(&self) -> Option<SessionId>;
    /// The message's body (empty without a message).
    fn body(&self) -> Bytes;
    /// The response's status (0 for anything else).
    fn status(&self) -> u16;
    /// For an initial INVITE: creates its SIP session (and the execution's application
    /// session) without answering yet.
    fn accept(&mut self) -> Result<SessionId, TransitionError>;
    /// Creates a UAC leg in this execution (send its INVITE with [`Self::invite`]).
    fn create_leg(&mut self, from_uri: &str, to_uri: &str, target: Destination) -> Result<SessionId, TransitionError>;
    /// Gives a session its role (once) and first attributes.
    fn set_role_and_attrs<const N: usize>(
        &mut self,
        id: SessionId,
        role: &str,
        attrs: [(&str, AttrValue); N],
    ) -> Result<(), TransitionError>;
    fn attr(&mut self, id: SessionId, name: &str) -> Result<Option<AttrValue>, TransitionError>;
    fn session_attr(&mut self, id: SessionId, name: &str) -> Result<Option<SessionId>, TransitionError>;
    fn set_attr(&mut self, id: SessionId, name: &str, value: AttrValue) -> Result<(), TransitionError>;
    /// The session the transition's `let NAME = ...` bound (None: null, or no such `let`).
    fn session_var(&self, name: &str) -> Option<SessionId>;
    /// Answers the triggering request (at commit).
    fn respond(&mut self, status: u16);
    /// Answers the INVITE of an accepted session (at commit).
    fn answer(&mut self, session: SessionId, status: u16, body: Option<Body>) -> Result<(), TransitionError>;
    /// Sends a request in the session's dialog (at commit).
    fn send(&mut self, session: SessionId, method: Method, body: Option<Body>) -> Result<(), TransitionError>;
    /// Hangs up the session's dialog (at commit).
    fn bye(&mut self, session: SessionId) -> Result<(), TransitionError>;
    /// Cancels the INVITE of a leg that has no final answer yet (at commit).
    fn cancel(&mut self, session: SessionId) -> Result<(), TransitionError>;
    fn set_timer(&mut self, delay: Duration, name: &'static str) -> Result<TimerId, TransitionError>;

    /// Sends the INVITE of a leg, or a re-INVITE in an established dialog (at commit).
    fn invite(&mut self, session: SessionId, body: Option<Body>) -> Result<(), TransitionError> {
        self.send(session, Method::Invite, body)
    }
}

impl ArmContext for Transition<'_, '_> {
    fn sips(&self) -> Option<SessionId> {
        Transition::sips(self)
    }

    fn body(&self) -> Bytes {
        self.event().body()
    }

    fn status(&self) -> u16 {
        self.event().status()
    }

    fn accept(&mut self) -> Result<SessionId, TransitionError> {
        Transition::accept(self)
    }

    fn create_leg(&mut self, from_uri: &str, to_uri: &str, target: Destination) -> Result<SessionId, TransitionError> {
        Transition::create_leg(self, from_uri, to_uri, target)
    }

    fn set_role_and_attrs<const N: usize>(
        &mut self,
        id: SessionId,
        role: &str,
        attrs: [(&str, AttrValue); N],
    ) -> Result<(), TransitionError> {
        Transition::set_role_and_attrs(self, id, role, attrs)
    }

    fn attr(&mut self, id: SessionId, name: &str) -> Result<Option<AttrValue>, TransitionError> {
        Transition::attr(self, id, name)
    }

    fn session_attr(&mut self, id: SessionId, name: &str) -> Result<Option<SessionId>, TransitionError> {
        Transition::session_attr(self, id, name)
    }

    fn set_attr(&mut self, id: SessionId, name: &str, value: AttrValue) -> Result<(), TransitionError> {
        Transition::set_attr(self, id, name, value)
    }

    fn session_var(&self, name: &str) -> Option<SessionId> {
        Transition::session_var(self, name)
    }

    fn respond(&mut self, status: u16) {
        Transition::respond(self, status)
    }

    fn answer(&mut self, session: SessionId, status: u16, body: Option<Body>) -> Result<(), TransitionError> {
        Transition::answer(self, session, status, body)
    }

    fn send(&mut self, session: SessionId, method: Method, body: Option<Body>) -> Result<(), TransitionError> {
        Transition::send(self, session, method, body)
    }

    fn bye(&mut self, session: SessionId) -> Result<(), TransitionError> {
        Transition::bye(self, session)
    }

    fn cancel(&mut self, session: SessionId) -> Result<(), TransitionError> {
        Transition::cancel(self, session)
    }

    fn set_timer(&mut self, delay: Duration, name: &'static str) -> Result<TimerId, TransitionError> {
        Transition::set_timer(self, delay, name)
    }
}
