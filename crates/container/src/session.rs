//! SIP sessions (one per dialog leg) and application sessions (one per service execution).

use crate::attributes::Attributes;
use crate::ids::{AppSessionId, SessionId, TimerId};
use crate::ServiceId;
use smallvec::SmallVec;
use std::time::Instant;
use tandem_sip::Flow;
use tandem_transaction::ServerTxId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Dialog being set up (INVITE sent or received, no final answer yet or not acknowledged).
    Early,
    /// Answered and acknowledged.
    Confirmed,
    /// BYE sent or received, or failed.
    Terminated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegRole {
    /// The remote party called us.
    Uas,
    /// We called the remote party.
    Uac,
}

/// Dialog state (RFC 3261 §12): what is needed to send requests inside the dialog.
#[derive(Debug, Clone)]
pub struct Dialog {
    pub call_id: Box<str>,
    pub local_tag: Box<str>,
    pub remote_tag: Box<str>,
    /// Our From/To header value (with our tag).
    pub local_party: Box<str>,
    /// The remote From/To header value (with its tag).
    pub remote_party: Box<str>,
    /// Where in-dialog requests go (the remote Contact URI).
    pub remote_target: Box<str>,
    /// Route set, in the order used for requests we send.
    pub route_set: Vec<Box<str>>,
    pub local_seq: u32,
    pub remote_seq: u32,
    /// Max-Forwards of the requests we send (70; a B2BUA's leg B carries leg A's minus one,
    /// so that a loop through B2BUAs still ends).
    pub max_forwards: u8,
    /// The flow the dialog was set up on (reused for connection transports).
    pub flow: Flow,
}

/// A SIP session: one dialog leg, with attributes.
#[derive(Debug)]
pub struct SipSession {
    pub id: SessionId,
    pub app: AppSessionId,
    pub service: ServiceId,
    /// The executor that owns the dialog's transactions.
    pub home: u16,
    pub role: LegRole,
    pub state: SessionState,
    pub dialog: Dialog,
    pub attributes: Attributes,
    /// UAS: the INVITE server transaction until the dialog is confirmed.
    pub(crate) invite_tx: Option<ServerTxId>,
    /// UAS: a final response was sent on `invite_tx`.
    pub(crate) answered: bool,
    /// UAS: the INVITE, kept from `Context::accept` until it is answered.
    pub(crate) pending_invite: Option<tandem_sip::Message>,
    /// UAC: the INVITE sent and its flow, kept until a final response (to CANCEL it).
    pub(crate) pending_request: Option<(bytes::Bytes, tandem_sip::Flow)>,
    /// Taken out of the store (its application session was invalidated): whoever still holds
    /// the cell sees it is gone without looking the ID up again.
    pub(crate) removed: bool,
    /// Actions ordered on this session so far ([`SipSession::reserve_action`]) and how many of
    /// them have run ([`crate::Context::act_in_order`]).
    pub(crate) actions_issued: u64,
    pub(crate) actions_done: u64,
}

/// A session's place in its order of actions: taken under the session's lock when a handler
/// decides to act on it, redeemed by [`crate::Context::act_in_order`] at the session's home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionTicket(pub(crate) u64);

impl SipSession {
    /// Takes the next place in this session's order of actions (call with the session locked,
    /// where the decision to act is made): actions run in the order their tickets were taken,
    /// whichever executor decided them.
    pub fn reserve_action(&mut self) -> ActionTicket {
        let t = ActionTicket(self.actions_issued);
        self.actions_issued += 1;
        t
    }

    /// The session was removed from the store (see [`crate::SessionStore`]).
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    pub fn is_terminated(&self) -> bool {
        self.state == SessionState::Terminated
    }

    /// UAS: a final response has been sent to the initial INVITE.
    pub fn is_answered(&self) -> bool {
        self.answered
    }

    /// UAS: the initial INVITE is still waiting for a final response.
    pub fn awaits_answer(&self) -> bool {
        !self.answered && self.invite_tx.is_some()
    }

    /// UAC: the initial INVITE has been sent and has no final response yet (it can be cancelled).
    pub fn invite_pending(&self) -> bool {
        self.pending_request.is_some()
    }
}

/// An application session: the SIP sessions, attributes and timers of one service execution.
#[derive(Debug)]
pub struct AppSession {
    pub id: AppSessionId,
    pub service: ServiceId,
    pub home: u16,
    pub sessions: SmallVec<[SessionId; 2]>,
    pub attributes: Attributes,
    pub(crate) timers: SmallVec<[TimerId; 2]>,
    /// Reclaimed (invalidated) when this passes without activity being recorded.
    pub expires_at: Instant,
}
