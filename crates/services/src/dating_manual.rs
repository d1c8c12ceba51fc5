//! `dating_manual`: the paper's dating service with hand-written synchronization (the
//! "optimized manual version" of Huang, Dillon and Stirewalt, Figure 5) — the baseline the
//! contract version (`dating`, `services/dating.machine`) is benchmarked against.
//!
//! Observable behaviour is the contract version's: the same transitions T1-T19 (same guards,
//! same actions, same messages), the same session attributes (`@role`, `@state` with the
//! contract's state names, `msr`, `caller`, `p2t`, `sdp`), executions invalidated when they
//! reach `Done`, and messages that enable no transition answered like the engine does
//! (`OPTIONS` 200, in-dialog 481, else 405) and counted. What differs is how: no contract, no
//! engine, no lock table — each message is classified by hand (event, role, state) and the
//! sessions it needs are locked directly (their `parking_lot` cells) in an application-specific
//! order:
//!
//! - between executions, the caller session with the smaller `SessionId` first; within an
//!   execution, the caller session before its media-service session (`msr`);
//! - single-assignment attributes (`@role`, `msr`, `caller`, `sdp`) are read in a short critical
//!   section of their own, never while waiting for another lock;
//! - a media-service session is never locked together with anything: nothing mutable lives on
//!   it (its `@role` and `caller` are set by T1 before its ID is published, and the execution's
//!   state lives on the caller session), so only caller sessions are ever held together, at
//!   most two (T7, and the moves of T11/T14/T19);
//! - the one place where the order is not known before locking is a caller's `p2t` (read under
//!   the caller's lock): a peer ordered after the caller is locked directly, one ordered before
//!   it is try-locked (never blocks, so no deadlock) and, if that fails, the caller's lock is
//!   released and both are re-acquired in order, and the state is checked again
//!   (`tandem_manual_lock_retries_total`);
//! - every lock is released before anything is sent; sends on a session homed on another
//!   executor are posted there (`Context::post`), like the engine's commit does.

use crate::dating::{DatingConfig, DatingError};
use bytes::Bytes;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tandem_container::{
    ActionTicket, AppSessionId, AttrValue, Context, Destination, Request, ResponseEvent, Service, SessionCell, SessionId, SipSession,
    TimerId, UaProfile,
};
use tandem_sip::{Message, Method};

const SERVICE: &str = "dating_manual";
const ROLE: &str = "@role";
const STATE: &str = "@state";
const CALLER: &str = "Caller";
const MSR: &str = "Msr";
const SDP: &str = "application/sdp";

/// The contract version's user-agent profile (the container's RFC 3261 §8.2 checks).
static PROFILE: UaProfile = UaProfile {
    allowed_methods: &["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "MESSAGE", "UPDATE", "INFO"],
    accepted_bodies: &["application/sdp", "text/plain"],
    supported_extensions: &[],
    answer_body: Some("application/sdp"),
};

/// The execution states of `services/dating.machine` (stored as `@state` on the caller
/// session, by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Idle,
    InvitingMS,
    ConnectingMS2Caller,
    TalkingWithMS,
    Pairing,
    TalkingWithPeer,
    Terminating,
    Done,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "Idle",
            State::InvitingMS => "InvitingMS",
            State::ConnectingMS2Caller => "ConnectingMS2Caller",
            State::TalkingWithMS => "TalkingWithMS",
            State::Pairing => "Pairing",
            State::TalkingWithPeer => "TalkingWithPeer",
            State::Terminating => "Terminating",
            State::Done => "Done",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        Some(match s {
            "Idle" => State::Idle,
            "InvitingMS" => State::InvitingMS,
            "ConnectingMS2Caller" => State::ConnectingMS2Caller,
            "TalkingWithMS" => State::TalkingWithMS,
            "Pairing" => State::Pairing,
            "TalkingWithPeer" => State::TalkingWithPeer,
            "Terminating" => State::Terminating,
            "Done" => State::Done,
            _ => return None,
        })
    }

    /// A caller session's state; a session without `@state` is in the initial state (as the
    /// engine reads it), one with an unknown value in none.
    fn of(s: &SipSession) -> Option<State> {
        match s.attributes.get_str(STATE) {
            None => Some(State::Idle),
            Some(name) => State::parse(name),
        }
    }

    /// Reuses the text's buffer (`set_str`, as the engine's commit writes a state): no
    /// allocation per state change.
    fn set(self, s: &mut SipSession) {
        s.attributes.set_str(STATE, self.name());
    }
}

/// What the contract calls `msg.method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Invite,
    Ack,
    Bye,
    /// The caller's CANCEL of an unanswered INVITE (`on_cancelled`), or a CANCEL request.
    Cancel,
    Message,
    /// A 2xx response.
    Ok,
    /// A final non-2xx response, or a timeout / transport failure (as 408 / 503).
    Error,
    /// Anything else: provisional responses, other methods, timers.
    Other,
}

impl Kind {
    fn of_request(m: Option<&Method>) -> Kind {
        match m {
            Some(Method::Invite) => Kind::Invite,
            Some(Method::Ack) => Kind::Ack,
            Some(Method::Bye) => Kind::Bye,
            Some(Method::Cancel) => Kind::Cancel,
            Some(Method::Message) => Kind::Message,
            _ => Kind::Other,
        }
    }

    fn of_status(status: u16) -> Kind {
        match status {
            0..=199 => Kind::Other,
            200..=299 => Kind::Ok,
            _ => Kind::Error,
        }
    }
}

/// The transitions of `services/dating.machine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum T {
    T1 = 0,
    T2,
    T3,
    T4,
    T5,
    T6,
    T7,
    T8,
    T9,
    T10,
    T11,
    T12,
    T13,
    T14,
    T15,
    T16,
    T17,
    T18,
    T19,
    T20,
}

const NAMES: [&str; 20] =
    ["T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "T12", "T13", "T14", "T15", "T16", "T17", "T18", "T19", "T20"];

impl T {
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// The execution's state after the transition (`same` resolved to `from`).
    pub fn target(self, from: State) -> State {
        match self {
            T::T1 => State::InvitingMS,
            T::T2 => State::ConnectingMS2Caller,
            T::T4 => State::TalkingWithMS,
            T::T7 => State::Pairing,
            T::T8 => State::TalkingWithPeer,
            T::T6 | T::T9 | T::T16 => from,
            T::T17 | T::T18 | T::T19 => State::Terminating,
            T::T3 | T::T5 | T::T10 | T::T11 | T::T12 | T::T13 | T::T14 | T::T15 | T::T20 => State::Done,
        }
    }

    /// Whether the transition needs the peer's caller session (`p2t`): it moves the peer.
    pub fn moves_peer(self) -> bool {
        matches!(self, T::T11 | T::T14 | T::T19)
    }
}

/// The transition a message on the caller session takes in `state` (`None`: absorbed);
/// `answers_invite`: a response whose CSeq names INVITE (the contract's `msg.cseq == INVITE`).
pub fn caller_transition(kind: Kind, state: State, answers_invite: bool) -> Option<T> {
    use State::*;
    Some(match (state, kind) {
        (InvitingMS, Kind::Cancel) => T::T3,
        (ConnectingMS2Caller, Kind::Ack) => T::T4,
        (ConnectingMS2Caller, Kind::Bye) => T::T15,
        (ConnectingMS2Caller, Kind::Cancel) => T::T16,
        (ConnectingMS2Caller, Kind::Ok | Kind::Error) => T::T20,
        (TalkingWithMS, Kind::Bye) => T::T5,
        (Pairing, Kind::Ok) => T::T8,
        (Pairing, Kind::Bye) => T::T14,
        (Pairing, Kind::Error) => T::T19,
        (TalkingWithPeer, Kind::Bye) => T::T11,
        (Terminating, Kind::Ok | Kind::Error) if !answers_invite => T::T12,
        (Terminating, Kind::Bye) => T::T13,
        _ => return None,
    })
}

/// The transition a message on the media-service session takes in `state`;
/// `peer_talking_with_ms`: for a MESSAGE, whether the suggested peer is another caller whose
/// execution is `TalkingWithMS` (T7's guard; T6's is its negation).
pub fn msr_transition(kind: Kind, state: State, peer_talking_with_ms: bool) -> Option<T> {
    use State::*;
    Some(match (state, kind) {
        (InvitingMS, Kind::Ok) => T::T2,
        (InvitingMS, Kind::Error) => T::T10,
        (TalkingWithMS, Kind::Message) if peer_talking_with_ms => T::T7,
        (TalkingWithMS, Kind::Message) => T::T6,
        (TalkingWithMS, Kind::Error) => T::T17,
        (TalkingWithMS, Kind::Bye) => T::T18,
        (Pairing | TalkingWithPeer | Terminating, Kind::Message) => T::T9,
        _ => return None,
    })
}

/// Sessions of different executions are ordered by their caller sessions' IDs.
pub fn locks_before(a: SessionId, b: SessionId) -> bool {
    a.0 < b.0
}

/// A SIP action on a session, applied after every lock is released.
enum Op {
    Answer { status: u16, body: Option<Bytes> },
    Send { method: Method, body: Option<(&'static str, Bytes)> },
    Bye,
    Cancel,
}

impl Op {
    /// Applies the action to `s`, locked by the caller. On a session whose execution ended
    /// since the action was decided, only what ends the dialog (BYE, CANCEL) still applies.
    fn apply_on(self, ctx: &mut Context<'_>, s: &mut SipSession) {
        if s.is_removed() && !matches!(self, Op::Bye | Op::Cancel) {
            return;
        }
        let result = match self {
            Op::Answer { status, body } => ctx.answer_session(s, status, body.as_ref().map(|b| (SDP, &b[..]))),
            Op::Send { method, body } => ctx.send_in_dialog(s, method, body.as_ref().map(|(c, b)| (*c, &b[..]))),
            Op::Bye => ctx.send_bye_on(s),
            Op::Cancel => ctx.cancel_invite(s),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, session = %s.id, "dating_manual: action failed");
        }
    }
}

struct Act {
    /// The session's cell, taken where the action was decided: the action still reaches the
    /// session if its execution ends before the action is applied (a BYE to a media leg).
    cell: Option<SessionCell>,
    /// The action's place in the session's order, taken under the session's lock (caller
    /// sessions); `None` for media-service sessions, which are never locked with anything
    /// and take their place when the action is applied.
    ticket: Option<ActionTicket>,
    op: Op,
}

/// What a transition does once its locks are released.
struct Effects {
    /// Status to answer the triggering request with (first, as the contract arms do).
    respond: Option<u16>,
    acts: [Option<Act>; 4],
    n: usize,
    /// The execution reached `Done`: its application session goes.
    finished: Option<AppSessionId>,
}

impl Effects {
    fn new() -> Self {
        Effects { respond: None, acts: [None, None, None, None], n: 0, finished: None }
    }

    fn push(&mut self, act: Act) {
        self.acts[self.n] = Some(act);
        self.n += 1;
    }

    /// An action on a caller session whose lock is held: its place in the session's order of
    /// actions is taken now, so that an action decided later by another executor (once the
    /// lock is released) cannot overtake it.
    fn push_locked(&mut self, cell: &SessionCell, s: &mut SipSession, op: Op) {
        let ticket = Some(s.reserve_action());
        self.push(Act { cell: Some(cell.clone()), ticket, op });
    }

    /// An action on a media-service session.
    fn push_msr(&mut self, ctx: &Context<'_>, msr: SessionId, op: Op) {
        self.push(Act { cell: ctx.session(msr), ticket: None, op });
    }
}

/// The message being handled, as the transitions see it.
struct Msg<'r, 'm> {
    kind: Kind,
    session: Option<SessionId>,
    req: Option<&'r Request<'m>>,
    msg: Option<&'r Message>,
    status: u16,
    /// A response to an INVITE (its CSeq says so).
    answers_invite: bool,
}

impl Msg<'_, '_> {
    fn body(&self) -> Bytes {
        self.msg.map(Message::body).unwrap_or_default()
    }
}

#[derive(Default)]
struct Stats {
    transitions: [AtomicU64; 20],
    failures: [AtomicU64; 20],
    absorbed: AtomicU64,
    lock_retries: AtomicU64,
    /// Peers ordered before the caller that were try-locked successfully (no retry needed).
    out_of_order_try_locks: AtomicU64,
}

pub struct DatingManual {
    media: Destination,
    media_uri: String,
    stats: Stats,
}

/// The dating service with hand-written synchronization (config shared with `dating`).
pub fn dating_manual_service(config: &DatingConfig) -> Result<Arc<DatingManual>, DatingError> {
    let media = Destination::parse(&config.media).ok_or_else(|| DatingError::Media(config.media.clone()))?;
    Ok(Arc::new(DatingManual { media, media_uri: format!("sip:media@{}", media.addr), stats: Stats::default() }))
}

fn role_of(s: &SipSession) -> Option<&str> {
    s.attributes.get_str(ROLE)
}

fn sdp_of(s: &SipSession) -> Bytes {
    match s.attributes.get("sdp") {
        Some(AttrValue::Bytes(b)) => b.clone(),
        _ => Bytes::new(),
    }
}

impl DatingManual {
    pub fn transition_count(&self, t: T) -> u64 {
        self.stats.transitions[t as usize].load(Relaxed)
    }

    pub fn absorbed(&self) -> u64 {
        self.stats.absorbed.load(Relaxed)
    }

    pub fn lock_retries(&self) -> u64 {
        self.stats.lock_retries.load(Relaxed)
    }

    fn handle(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>) {
        let Some(sid) = m.session else {
            // A new session: only T1 starts from Idle.
            return if m.kind == Kind::Invite { self.t1(ctx, m) } else { self.absorb(ctx, m) };
        };
        let Some(cell) = ctx.session(sid) else { return self.absorb(ctx, m) };
        let g = cell.lock();
        let role = match role_of(&g) {
            Some(CALLER) => 1,
            Some(MSR) => 2,
            _ => 0,
        };
        match role {
            // The message's session is the state holder: keep its lock.
            1 => self.on_caller(ctx, m, sid, &cell, g),
            2 => {
                // `caller` is single-assignment: read it, then let go.
                let caller = g.attributes.get_session("caller");
                drop(g);
                match caller {
                    Some(caller) => self.on_msr(ctx, m, sid, caller),
                    None => self.absorb(ctx, m),
                }
            }
            _ => self.absorb_locked(ctx, m, g),
        }
    }

    /// Caller?INVITE: a new execution. Nothing to lock: no other execution knows its sessions
    /// until the media service is given the caller's ID, which is the last thing done.
    fn t1(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>) {
        let Some(req) = m.req else { return self.absorb(ctx, m) };
        let app = ctx.create_app_session();
        // The new sessions' cells are kept: written and acted on without a look-up by ID.
        let (caller, caller_cell) = match ctx.accept_cell(req, Some(app)) {
            Ok(created) => created,
            Err(e) => return self.failed(ctx, m, T::T1, app, &e.to_string()),
        };
        let (msr, msr_cell) = match ctx.create_uac_cell(app, "sip:dating@tandem.invalid", &self.media_uri, self.media) {
            Ok(created) => created,
            Err(e) => return self.failed(ctx, m, T::T1, app, &e.to_string()),
        };
        let offer = m.body();
        {
            let mut s = caller_cell.lock();
            s.attributes.set(ROLE, AttrValue::Str(CALLER.to_string()));
            s.attributes.set("sdp", AttrValue::Bytes(offer));
            s.attributes.set("msr", AttrValue::Session(msr));
            State::InvitingMS.set(&mut s);
        }
        // Written and invited under one lock (the caller's released first: its lock comes first).
        let mut s = msr_cell.lock();
        s.attributes.set(ROLE, AttrValue::Str(MSR.to_string()));
        s.attributes.set("caller", AttrValue::Session(caller));
        let id = Bytes::from(caller.to_string());
        Op::Send { method: Method::Invite, body: Some(("text/plain", id)) }.apply_on(ctx, &mut s);
        drop(s);
        self.stats.transitions[T::T1 as usize].fetch_add(1, Relaxed);
    }

    fn failed(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>, t: T, app: AppSessionId, error: &str) {
        self.failed_no_app(ctx, m, t, error);
        ctx.invalidate(app);
    }

    /// A message on a caller session, whose lock `g` is held.
    fn on_caller<G>(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>, caller: SessionId, cell: &SessionCell, mut g: G)
    where
        G: std::ops::DerefMut<Target = SipSession>,
    {
        let Some(state) = State::of(&g) else { return self.absorb_locked(ctx, m, g) };
        let Some(t) = caller_transition(m.kind, state, m.answers_invite) else { return self.absorb_locked(ctx, m, g) };
        if !t.moves_peer() {
            let mut fx = Effects::new();
            self.caller_arm(ctx, t, state, (cell, &mut g), None, &mut fx);
            drop(g);
            return self.commit(ctx, m, t, &mut fx);
        }
        // T11, T14, T19: the peer (`p2t`, set by T7 under both callers' locks, stable from
        // Pairing on) must be held too, to move it.
        let Some(peer) = g.attributes.get_session("p2t") else {
            drop(g);
            return self.failed_no_app(ctx, m, t, "the caller session has no p2t");
        };
        let Some(peer_cell) = ctx.session(peer).filter(|_| peer != caller) else {
            // The peer's execution is gone: nothing to move or hang up there.
            let mut fx = Effects::new();
            self.caller_arm(ctx, t, state, (cell, &mut g), None, &mut fx);
            drop(g);
            return self.commit(ctx, m, t, &mut fx);
        };
        if locks_before(caller, peer) {
            let mut pg = peer_cell.lock();
            let mut fx = Effects::new();
            self.caller_arm(ctx, t, state, (cell, &mut g), Some((&peer_cell, &mut *pg)), &mut fx);
            drop(pg);
            drop(g);
            return self.commit(ctx, m, t, &mut fx);
        }
        if let Some(mut pg) = peer_cell.try_lock() {
            // Out of order, but without waiting: cannot deadlock.
            self.stats.out_of_order_try_locks.fetch_add(1, Relaxed);
            let mut fx = Effects::new();
            self.caller_arm(ctx, t, state, (cell, &mut g), Some((&peer_cell, &mut *pg)), &mut fx);
            drop(pg);
            drop(g);
            return self.commit(ctx, m, t, &mut fx);
        }
        // The peer comes first and is busy: back off, take both in order, look again.
        self.stats.lock_retries.fetch_add(1, Relaxed);
        drop(g);
        let mut pg = peer_cell.lock();
        let mut g = cell.lock();
        // Its execution may have ended while no lock was held.
        let Some(state) = State::of(&g).filter(|_| !g.is_removed()) else {
            drop(pg);
            return self.absorb_locked(ctx, m, g);
        };
        let Some(t) = caller_transition(m.kind, state, m.answers_invite) else {
            drop(pg);
            return self.absorb_locked(ctx, m, g);
        };
        let mut fx = Effects::new();
        // `p2t` cannot have changed (T7 only pairs TalkingWithMS executions); the peer lock
        // is used only by the transitions that move the peer.
        let peer_guard = if t.moves_peer() && g.attributes.get_session("p2t") == Some(peer) { Some((&peer_cell, &mut *pg)) } else { None };
        self.caller_arm(ctx, t, state, (cell, &mut g), peer_guard, &mut fx);
        drop(pg);
        drop(g);
        self.commit(ctx, m, t, &mut fx)
    }

    fn failed_no_app(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>, t: T, error: &str) {
        tracing::warn!(service = SERVICE, transition = t.name(), error, "transition failed; nothing sent but a 500");
        self.stats.failures[t as usize].fetch_add(1, Relaxed);
        if let Some(req) = m.req {
            ctx.respond_failed(req);
        }
    }

    /// The arms of the transitions triggered on the caller session, under its lock (and the
    /// peer's for those that move it; `None` when the peer's execution is over).
    fn caller_arm(
        &self,
        ctx: &Context<'_>,
        t: T,
        from: State,
        (cell, g): (&SessionCell, &mut SipSession),
        peer: Option<(&SessionCell, &mut SipSession)>,
        fx: &mut Effects,
    ) {
        // The engine finishes an execution in the event that ends it; here a peer found in
        // `Done` is one whose executor is about to invalidate it: as good as gone.
        let peer = peer.filter(|(_, p)| State::of(p) != Some(State::Done));
        let msr = g.attributes.get_session("msr");
        match t {
            T::T3 => {
                if let Some(msr) = msr {
                    fx.push_msr(ctx, msr, Op::Cancel);
                }
            }
            T::T4 | T::T8 | T::T12 | T::T16 => {}
            T::T5 | T::T15 => {
                fx.respond = Some(200);
                if let Some(msr) = msr {
                    fx.push_msr(ctx, msr, Op::Bye);
                }
            }
            T::T13 => fx.respond = Some(200),
            T::T20 => {
                if let Some(msr) = msr {
                    fx.push_msr(ctx, msr, Op::Bye);
                }
            }
            T::T11 | T::T14 => {
                fx.respond = Some(200);
                if let Some((pc, p)) = peer {
                    State::Terminating.set(p);
                    fx.push_locked(pc, p, Op::Bye);
                }
            }
            T::T19 => {
                fx.push_locked(cell, g, Op::Bye);
                if let Some((pc, p)) = peer {
                    State::Terminating.set(p);
                    fx.push_locked(pc, p, Op::Bye);
                }
            }
            _ => unreachable!("{} is not triggered on the caller session", t.name()),
        }
        let to = t.target(from);
        if to != from {
            to.set(g);
        }
        if to == State::Done {
            fx.finished = Some(g.app);
        }
    }

    /// A message on a media-service session (its `caller` read already).
    fn on_msr(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>, msr: SessionId, caller: SessionId) {
        let Some(cell) = ctx.session(caller) else { return self.absorb(ctx, m) };
        // A suggestion names another caller: lock both callers in order right away (Figure 5)
        // — T7 needs both, and T6/T9 decide on the peer's state or the caller's.
        let peer = if m.kind == Kind::Message {
            let payload = m.msg.map_or(&[][..], Message::body_bytes);
            std::str::from_utf8(payload).ok().and_then(|p| p.parse::<SessionId>().ok()).filter(|p| *p != caller)
        } else {
            None
        };
        let peer_cell = peer.and_then(|p| ctx.session(p));
        let mut fx = Effects::new();
        let t = match &peer_cell {
            None => {
                let mut g = cell.lock();
                let Some(t) = self.msr_arm(ctx, m, msr, (&cell, &mut g), None, &mut fx) else {
                    return self.absorb_locked(ctx, m, g);
                };
                t
            }
            Some(pc) => {
                let (mut g, mut pg) = if locks_before(caller, peer.unwrap_or(caller)) {
                    let g = cell.lock();
                    (g, pc.lock())
                } else {
                    let pg = pc.lock();
                    (cell.lock(), pg)
                };
                let t = self.msr_arm(ctx, m, msr, (&cell, &mut g), Some((pc, &mut *pg)), &mut fx);
                drop(pg);
                let Some(t) = t else { return self.absorb_locked(ctx, m, g) };
                t
            }
        };
        self.commit(ctx, m, t, &mut fx)
    }

    /// The arms of the transitions triggered on the media-service session, under the caller's
    /// lock (and the suggested peer's). `None`: no transition (nothing was changed).
    fn msr_arm(
        &self,
        ctx: &Context<'_>,
        m: &Msg<'_, '_>,
        msr: SessionId,
        (cell, g): (&SessionCell, &mut SipSession),
        peer: Option<(&SessionCell, &mut SipSession)>,
        fx: &mut Effects,
    ) -> Option<T> {
        let from = State::of(g)?;
        let peer = peer.filter(|(_, p)| role_of(p) == Some(CALLER) && State::of(p) == Some(State::TalkingWithMS));
        let t = msr_transition(m.kind, from, peer.is_some())?;
        match t {
            T::T2 => fx.push_locked(cell, g, Op::Answer { status: 200, body: Some(m.body()) }),
            T::T10 => fx.push_locked(cell, g, Op::Answer { status: m.status.max(500), body: None }),
            T::T6 => {
                fx.respond = Some(200);
                fx.push_msr(ctx, msr, Op::Send { method: Method::Message, body: Some(("text/plain", Bytes::from_static(b"unavailable"))) });
            }
            T::T7 => {
                let (pc, p) = peer?;
                fx.respond = Some(200);
                g.attributes.set("p2t", AttrValue::Session(p.id));
                p.attributes.set("p2t", AttrValue::Session(g.id));
                let (caller_sdp, peer_sdp) = (sdp_of(g), sdp_of(p));
                let peer_msr = p.attributes.get_session("msr");
                State::Pairing.set(p);
                fx.push_locked(cell, g, Op::Send { method: Method::Invite, body: Some((SDP, peer_sdp)) });
                fx.push_locked(pc, p, Op::Send { method: Method::Invite, body: Some((SDP, caller_sdp)) });
                fx.push_msr(ctx, msr, Op::Bye);
                if let Some(pm) = peer_msr {
                    fx.push_msr(ctx, pm, Op::Bye);
                }
            }
            T::T9 => fx.respond = Some(200),
            T::T17 => fx.push_locked(cell, g, Op::Bye),
            T::T18 => {
                fx.respond = Some(200);
                fx.push_locked(cell, g, Op::Bye);
            }
            _ => unreachable!("{} is not triggered on the media-service session", t.name()),
        }
        let to = t.target(from);
        if to != from {
            to.set(g);
        }
        if to == State::Done {
            fx.finished = Some(g.app);
        }
        Some(t)
    }

    /// Sends what the transition decided (every lock released), then ends the execution if it
    /// reached `Done`.
    /// `fx` is the caller's (in its frame, taken from in place: not moved here).
    fn commit(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>, t: T, fx: &mut Effects) {
        if let (Some(status), Some(req)) = (fx.respond, m.req) {
            ctx.respond(req, status);
        }
        for act in fx.acts[..fx.n].iter_mut() {
            let Some(Act { cell, ticket, op }) = act.take() else { continue };
            let Some(cell) = cell else { continue };
            let mut s = cell.lock();
            let ticket = ticket.unwrap_or_else(|| s.reserve_action());
            // At the session's home, in the order the actions were decided (see Act).
            ctx.act_in_order(&cell, &mut s, ticket, move |ctx: &mut Context<'_>, s: &mut SipSession| op.apply_on(ctx, s));
        }
        if let Some(app) = fx.finished {
            ctx.invalidate(app);
        }
        self.stats.transitions[t as usize].fetch_add(1, Relaxed);
    }

    fn absorb_locked<G>(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>, g: G) {
        drop(g);
        self.absorb(ctx, m)
    }

    /// No transition takes the message: count it, and answer a request as the engine does
    /// (else its sender retransmits it for 32 s).
    fn absorb(&self, ctx: &mut Context<'_>, m: &Msg<'_, '_>) {
        self.stats.absorbed.fetch_add(1, Relaxed);
        let Some(req) = m.req else { return };
        if req.tx.is_none() {
            return;
        }
        let status = match req.msg.method() {
            Some(Method::Ack) | None => return,
            Some(Method::Options) => 200,
            Some(_) if req.session.is_some() => 481,
            Some(_) => 405,
        };
        ctx.respond_with(
            req,
            status,
            &[("Warning", "399 tandem \"no transition of the service's machine accepts this request now\"")],
            None,
        );
    }
}

impl Service for DatingManual {
    fn user_agent(&self) -> Option<&UaProfile> {
        Some(&PROFILE)
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        let m = Msg {
            kind: Kind::of_request(req.msg.method()),
            session: req.session,
            req: Some(req),
            msg: Some(req.msg),
            status: 0,
            answers_invite: false,
        };
        self.handle(ctx, &m);
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        let msg = match response {
            ResponseEvent::Received(msg) => Some(msg),
            _ => None,
        };
        let status = response.status();
        let answers_invite = msg.and_then(Message::cseq).is_some_and(|c| c.method == Method::Invite);
        let m = Msg { kind: Kind::of_status(status), session: Some(session), req: None, msg, status, answers_invite };
        self.handle(ctx, &m);
    }

    fn on_timer(&self, _ctx: &mut Context<'_>, _app: AppSessionId, _timer: TimerId, _name: &'static str) {
        // The service arms no timers; the engine would absorb one.
        self.stats.absorbed.fetch_add(1, Relaxed);
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, session: SessionId) {
        let m = Msg { kind: Kind::Cancel, session: Some(session), req: None, msg: None, status: 0, answers_invite: false };
        self.handle(ctx, &m);
    }

    fn metrics_text(&self) -> String {
        let mut out = String::with_capacity(4096);
        for (name, help, counters) in [
            ("tandem_manual_transitions_total", "Transitions taken by a hand-synchronized service", &self.stats.transitions),
            ("tandem_manual_transition_failures_total", "Transitions that failed (nothing was sent)", &self.stats.failures),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter");
            for (t, c) in NAMES.iter().zip(counters.iter()) {
                let _ = writeln!(out, "{name}{{service=\"{SERVICE}\",transition=\"{t}\"}} {}", c.load(Relaxed));
            }
        }
        for (name, help, c) in [
            ("tandem_manual_absorbed_messages_total", "Messages that enabled no transition", &self.stats.absorbed),
            (
                "tandem_manual_lock_retries_total",
                "Lock acquisitions redone in order after releasing (a needed session came first and was busy)",
                &self.stats.lock_retries,
            ),
            (
                "tandem_manual_out_of_order_try_locks_total",
                "Sessions ordered first taken with a successful try-lock instead of a retry",
                &self.stats.out_of_order_try_locks,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter\n{name}{{service=\"{SERVICE}\"}} {}", c.load(Relaxed));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const STATES: [State; 8] = [
        State::Idle,
        State::InvitingMS,
        State::ConnectingMS2Caller,
        State::TalkingWithMS,
        State::Pairing,
        State::TalkingWithPeer,
        State::Terminating,
        State::Done,
    ];
    const KINDS: [Kind; 8] = [Kind::Invite, Kind::Ack, Kind::Bye, Kind::Cancel, Kind::Message, Kind::Ok, Kind::Error, Kind::Other];

    /// Every (role, message, state) the hand-written tables map to a transition, with the
    /// state reached.
    fn table() -> Vec<(&'static str, Kind, State, T, State)> {
        let mut out = Vec::new();
        for &s in &STATES {
            for &k in &KINDS {
                for answers_invite in [false, true] {
                    if let Some(t) = caller_transition(k, s, answers_invite) {
                        out.push((CALLER, k, s, t, t.target(s)));
                    }
                }
                for peer in [false, true] {
                    if let Some(t) = msr_transition(k, s, peer) {
                        out.push((MSR, k, s, t, t.target(s)));
                    }
                }
            }
        }
        out
    }

    fn contract() -> tandem_contract::ast::Machine {
        let (machine, diags) = tandem_contract::parse_and_check(crate::DATING_CONTRACT);
        assert!(!tandem_contract::has_errors(&diags));
        machine.unwrap()
    }

    #[test]
    fn state_names_round_trip() {
        for s in STATES {
            assert_eq!(State::parse(s.name()), Some(s));
        }
        assert_eq!(State::parse("Nowhere"), None);
        let names: BTreeSet<String> = contract().states.iter().map(|s| s.name.name.clone()).collect();
        let mine: BTreeSet<String> = STATES.iter().map(|s| s.name().to_string()).collect();
        assert_eq!(names, mine);
    }

    #[test]
    fn tables_agree_with_the_contract_on_sources_targets_and_moves() {
        let machine = contract();
        assert_eq!(machine.transitions.len(), NAMES.len());
        let rows = table();
        for (i, ct) in machine.transitions.iter().enumerate() {
            assert_eq!(ct.name.name, NAMES[i]);
            let sources: BTreeSet<&str> = ct.from.iter().map(|f| f.name.as_str()).collect();
            let mine: Vec<_> = rows.iter().filter(|r| r.3 as usize == i).collect();
            if i == T::T1 as usize {
                // T1 starts an execution from a brand-new session (handled apart).
                assert_eq!(sources, BTreeSet::from(["Idle"]));
                assert_eq!(T::T1.target(State::Idle).name(), ct.to.name);
                continue;
            }
            let my_sources: BTreeSet<&str> = mine.iter().map(|r| r.2.name()).collect();
            assert_eq!(sources, my_sources, "{}: source states", ct.name.name);
            for r in &mine {
                let expected = if ct.stays { r.2.name() } else { ct.to.name.as_str() };
                assert_eq!(r.4.name(), expected, "{}: target from {}", ct.name.name, r.2.name());
            }
            let moves: Vec<&str> = ct.moves.iter().map(|m| m.to.name.as_str()).collect();
            let my_moves: Vec<&str> = match NAMES[i] {
                "T7" => vec!["Pairing"],
                _ if mine[0].3.moves_peer() => vec!["Terminating"],
                _ => vec![],
            };
            assert_eq!(moves, my_moves, "{}: moves", ct.name.name);
        }
    }

    #[test]
    fn one_transition_per_message_and_the_papers_choices() {
        // The tables are functions, so no message enables two transitions; spot-check them.
        assert_eq!(caller_transition(Kind::Cancel, State::InvitingMS, false), Some(T::T3));
        assert_eq!(caller_transition(Kind::Bye, State::TalkingWithPeer, false), Some(T::T11));
        assert_eq!(caller_transition(Kind::Bye, State::Terminating, false), Some(T::T13));
        assert_eq!(caller_transition(Kind::Error, State::Pairing, false), Some(T::T19));
        assert_eq!(caller_transition(Kind::Other, State::Pairing, false), None);
        assert_eq!(caller_transition(Kind::Message, State::TalkingWithMS, false), None);
        // Terminating ends on the BYE's answer (or its failure), not on an answer to T7's INVITE.
        assert_eq!(caller_transition(Kind::Ok, State::Terminating, false), Some(T::T12));
        assert_eq!(caller_transition(Kind::Error, State::Terminating, false), Some(T::T12));
        assert_eq!(caller_transition(Kind::Ok, State::Terminating, true), None);
        assert_eq!(caller_transition(Kind::Error, State::Terminating, true), None);
        assert_eq!(caller_transition(Kind::Ok, State::Pairing, true), Some(T::T8));
        assert_eq!(msr_transition(Kind::Message, State::TalkingWithMS, true), Some(T::T7));
        assert_eq!(msr_transition(Kind::Message, State::TalkingWithMS, false), Some(T::T6));
        assert_eq!(msr_transition(Kind::Message, State::Terminating, true), Some(T::T9));
        assert_eq!(msr_transition(Kind::Ok, State::TalkingWithMS, false), None);
        assert_eq!(msr_transition(Kind::Error, State::InvitingMS, false), Some(T::T10));
        for &k in &KINDS {
            assert_eq!(caller_transition(k, State::Done, false), None);
            assert_eq!(msr_transition(k, State::Done, true), None);
            assert_eq!(caller_transition(k, State::Idle, false), None);
        }
    }

    #[test]
    fn messages_map_to_the_contracts_methods() {
        assert_eq!(Kind::of_status(100), Kind::Other);
        assert_eq!(Kind::of_status(180), Kind::Other);
        assert_eq!(Kind::of_status(200), Kind::Ok);
        assert_eq!(Kind::of_status(299), Kind::Ok);
        assert_eq!(Kind::of_status(302), Kind::Error);
        assert_eq!(Kind::of_status(408), Kind::Error);
        assert_eq!(Kind::of_request(Some(&Method::Options)), Kind::Other);
        assert_eq!(Kind::of_request(Some(&Method::Message)), Kind::Message);
        assert_eq!(Kind::of_request(None), Kind::Other);
    }

    #[test]
    fn lock_order_is_total_between_callers() {
        let (a, b) = (SessionId(1), SessionId(2));
        assert!(locks_before(a, b));
        assert!(!locks_before(b, a));
        assert!(!locks_before(a, a));
    }

    #[test]
    fn builds_and_rejects_a_bad_media_address() {
        let svc = dating_manual_service(&DatingConfig::default()).unwrap();
        assert!(svc.user_agent().is_some());
        let text = svc.metrics_text();
        assert!(text.contains("tandem_manual_transitions_total{service=\"dating_manual\",transition=\"T7\"} 0"));
        assert!(text.contains("tandem_manual_lock_retries_total{service=\"dating_manual\"} 0"));
        assert!(dating_manual_service(&DatingConfig { media: "media.example.com".into() }).is_err());
    }
}

#[cfg(test)]
mod end_to_end {
    //! Two phones and a scripted media service over real UDP sockets against a container
    //! running `dating_manual` or the contract version `dating` (each test runs both): T1, T2,
    //! T4, T6, T7, T8, T9, T11, T12, T19, and the attributes both keep.
    use super::*;
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Duration;
    use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule, SessionStore};

    const WAIT: Duration = Duration::from_secs(3);
    static BRANCHES: AtomicU64 = AtomicU64::new(1);

    /// The version under test, and how to read its transition counts.
    enum Version {
        Manual(Arc<DatingManual>),
        Contract(Arc<tandem_engine::MachineService<crate::dating::Dating>>),
    }

    impl Version {
        fn new(contract: bool, config: &DatingConfig) -> Version {
            if contract {
                Version::Contract(crate::dating::dating_service(config, tandem_engine::Negotiator::SingleAssign).unwrap())
            } else {
                Version::Manual(dating_manual_service(config).unwrap())
            }
        }

        fn service(&self) -> Arc<dyn Service> {
            match self {
                Version::Manual(s) => s.clone(),
                Version::Contract(s) => s.clone(),
            }
        }

        fn count(&self, t: T) -> u64 {
            match self {
                Version::Manual(s) => s.transition_count(t),
                Version::Contract(s) => s.transition_count(t.name()),
            }
        }

        fn lock_retries(&self) -> u64 {
            match self {
                Version::Manual(s) => s.lock_retries(),
                Version::Contract(_) => 0,
            }
        }
    }

    struct Ua {
        sock: UdpSocket,
        name: &'static str,
    }

    impl Ua {
        fn new(name: &'static str) -> Ua {
            Ua { sock: UdpSocket::bind("127.0.0.1:0").unwrap(), name }
        }

        fn me(&self) -> SocketAddr {
            self.sock.local_addr().unwrap()
        }

        fn send(&self, to: SocketAddr, text: &str) {
            self.sock.send_to(text.replace('\n', "\r\n").as_bytes(), to).unwrap();
        }

        /// The next message that is not a 100 Trying (ACKs too unless `acks`).
        fn next(&self, acks: bool) -> Message {
            self.sock.set_read_timeout(Some(WAIT)).unwrap();
            let mut buf = vec![0u8; 65536];
            loop {
                let (n, _) = self.sock.recv_from(&mut buf).unwrap_or_else(|e| panic!("{}: nothing received: {e}", self.name));
                let m = tandem_sip::parse_datagram(Bytes::copy_from_slice(&buf[..n]), &Default::default()).unwrap();
                if m.status() == Some(100) || (!acks && m.method() == Some(&Method::Ack)) {
                    continue;
                }
                return m;
            }
        }

        /// Answers a request (our tag added to To when it has none; a body makes it SDP).
        fn answer(&self, to: SocketAddr, req: &Message, status: u16, body: &str) {
            let mut text = format!("SIP/2.0 {status} OK\n");
            for name in ["Via", "From", "Call-ID", "CSeq"] {
                text.push_str(&format!("{name}: {}\n", req.header_by_name(name).unwrap()));
            }
            let to_value = req.header_by_name("To").unwrap();
            let tag = if req.to_tag().is_some() { String::new() } else { format!(";tag={}", self.name) };
            text.push_str(&format!("To: {to_value}{tag}\nContact: <sip:{}@{}>\n", self.name, self.me()));
            if body.is_empty() {
                text.push_str("Content-Length: 0\n\n");
            } else {
                text.push_str(&format!("Content-Type: application/sdp\nContent-Length: {}\n\n{body}", body.len()));
            }
            self.send(to, &text);
        }
    }

    /// A phone's call to the service: its dialog, once answered.
    struct Call {
        to_tag: String,
        cseq: u32,
    }

    fn phone_request(ua: &Ua, srv: SocketAddr, call: &mut Call, method: &str) {
        if method != "ACK" {
            call.cseq += 1;
        }
        let n = if method == "ACK" { 1 } else { call.cseq };
        let (name, me, tag) = (ua.name, ua.me(), &call.to_tag);
        ua.send(srv, &format!(
            "{method} sip:dating@{srv} SIP/2.0\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{name}{method}{n}\nMax-Forwards: 70\nFrom: <sip:{name}@{me}>;tag={name}\nTo: <sip:dating@{srv}>;tag={tag}\nCall-ID: {name}@test\nCSeq: {n} {method}\nContent-Length: 0\n\n"
        ));
    }

    /// The media side of one leg: the dating service's INVITE, for MESSAGEs in its dialog.
    struct Leg {
        invite: Message,
        cseq: u32,
    }

    fn media_request(media: &Ua, srv: SocketAddr, leg: &mut Leg, method: &str, body: &str) {
        leg.cseq += 1;
        let inv = &leg.invite;
        let me = media.me();
        let ct = if body.is_empty() { String::new() } else { "Content-Type: text/plain\n".into() };
        media.send(srv, &format!(
            "{method} {target} SIP/2.0\nVia: SIP/2.0/UDP {me};branch=z9hG4bKm{method}{c}x{b}\nMax-Forwards: 70\nFrom: {to};tag=media\nTo: {from}\nCall-ID: {cid}\nCSeq: {c} {method}\n{ct}Content-Length: {len}\n\n{body}",
            target = inv.contact().unwrap().uri_text,
            b = BRANCHES.fetch_add(1, Relaxed),
            to = inv.header_by_name("To").unwrap(),
            from = inv.header_by_name("From").unwrap(),
            cid = inv.call_id(),
            c = leg.cseq,
            len = body.len()
        ));
    }

    /// A phone dials in, the media service answers, the phone acknowledges (T1, T2, T4).
    fn dial_in(phone: &Ua, media: &Ua, srv: SocketAddr) -> (Call, Leg, String) {
        let (name, me) = (phone.name, phone.me());
        let sdp = format!("v=0 {name}");
        phone.send(srv, &format!(
            "INVITE sip:dating@{srv} SIP/2.0\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{name}inv\nMax-Forwards: 70\nFrom: <sip:{name}@{me}>;tag={name}\nTo: <sip:dating@{srv}>\nCall-ID: {name}@test\nCSeq: 1 INVITE\nContact: <sip:{name}@{me}>\nContent-Type: application/sdp\nContent-Length: {}\n\n{sdp}",
            sdp.len()
        ));
        let invite = media.next(false);
        assert_eq!(invite.method(), Some(&Method::Invite));
        let caller_id = String::from_utf8(invite.body().to_vec()).unwrap();
        assert!(caller_id.parse::<SessionId>().is_ok(), "the media INVITE carries the caller session's ID: {caller_id:?}");
        media.answer(srv, &invite, 200, "v=0 media");
        let ok = phone.next(false);
        assert_eq!(ok.status(), Some(200));
        assert_eq!(&ok.body()[..], b"v=0 media");
        let mut call = Call { to_tag: ok.to_tag().unwrap().to_string(), cseq: 1 };
        phone_request(phone, srv, &mut call, "ACK");
        (call, Leg { invite, cseq: 0 }, caller_id)
    }

    fn caller_state(store: &SessionStore, id: &str) -> (Option<String>, Option<SessionId>) {
        let id: SessionId = id.parse().unwrap();
        let cell = store.session(id).expect("the caller session is live");
        let s = cell.lock();
        assert_eq!(s.attributes.get_str(ROLE), Some(CALLER));
        let msr = s.attributes.get_session("msr").expect("msr set by T1");
        let m = store.session(msr).expect("the media leg is live");
        let m = m.lock();
        assert_eq!(m.attributes.get_str(ROLE), Some(MSR));
        assert_eq!(m.attributes.get_session("caller"), Some(id));
        (s.attributes.get_str(STATE).map(str::to_string), s.attributes.get_session("p2t"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_callers_are_paired_talk_and_hang_up() {
        paired_talk_and_hang_up(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_callers_are_paired_talk_and_hang_up_contract() {
        paired_talk_and_hang_up(true).await;
    }

    async fn paired_talk_and_hang_up(contract: bool) {
        let media = Ua::new("media");
        let config = DatingConfig { media: media.me().to_string() };
        let svc = Version::new(contract, &config);
        let settings = ContainerSettings {
            container: ContainerConfig { executors: 2, seed: Some(11), ..Default::default() },
            routes: vec![RouteRule::catch_all(SERVICE)],
        };
        let listen = ["udp:127.0.0.1:0".parse::<tandem_transport::ListenSpec>().unwrap()];
        let service = svc.service();
        let container = Container::start(settings, vec![(SERVICE.into(), service)], &listen, Default::default()).await.unwrap();
        let srv = container.local_addrs()[0].1;
        let store = container.store().clone();
        tokio::task::spawn_blocking(move || {
            let (a, b) = (Ua::new("alice"), Ua::new("bob"));
            let (mut call_a, mut leg_a, id_a) = dial_in(&a, &media, srv);
            let (mut call_b, mut leg_b, id_b) = dial_in(&b, &media, srv);
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(caller_state(&store, &id_a), (Some("TalkingWithMS".into()), None));
            // T6: a suggestion of the caller itself is declined.
            media_request(&media, srv, &mut leg_a, "MESSAGE", &id_a);
            let mut got = [media.next(false), media.next(false)];
            got.sort_by_key(|m| m.status().is_none());
            assert_eq!(got[0].status(), Some(200));
            assert_eq!(got[1].method(), Some(&Method::Message));
            assert_eq!(&got[1].body()[..], b"unavailable");
            media.answer(srv, &got[1], 200, "");
            // T7: a suggestion of bob pairs them; both media legs are hung up.
            media_request(&media, srv, &mut leg_a, "MESSAGE", &id_b);
            let mut to_media = Vec::new();
            for _ in 0..3 {
                let m = media.next(false);
                if m.method() == Some(&Method::Bye) {
                    media.answer(srv, &m, 200, "");
                }
                to_media.push(m.status().map_or_else(|| m.method().unwrap().as_str().to_string(), |s| s.to_string()));
            }
            to_media.sort();
            assert_eq!(to_media, ["200", "BYE", "BYE"]);
            let reinvite_a = a.next(false);
            let reinvite_b = b.next(false);
            assert_eq!(reinvite_a.method(), Some(&Method::Invite));
            assert_eq!(&reinvite_a.body()[..], b"v=0 bob");
            assert_eq!(&reinvite_b.body()[..], b"v=0 alice");
            assert_eq!(caller_state(&store, &id_a), (Some("Pairing".into()), id_b.parse().ok()));
            assert_eq!(caller_state(&store, &id_b), (Some("Pairing".into()), id_a.parse().ok()));
            // T8 in both executions (the container acknowledges).
            a.answer(srv, &reinvite_a, 200, "v=0 alice2");
            b.answer(srv, &reinvite_b, 200, "v=0 bob2");
            assert_eq!(a.next(true).method(), Some(&Method::Ack));
            assert_eq!(b.next(true).method(), Some(&Method::Ack));
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(caller_state(&store, &id_a).0.as_deref(), Some("TalkingWithPeer"));
            // T9: a late suggestion is just acknowledged.
            media_request(&media, srv, &mut leg_b, "MESSAGE", &id_a);
            assert_eq!(media.next(false).status(), Some(200));
            // T11 (alice hangs up), then T12 (bob's phone answers the BYE it is sent).
            phone_request(&a, srv, &mut call_a, "BYE");
            assert_eq!(a.next(false).status(), Some(200));
            let bye = b.next(false);
            assert_eq!(bye.method(), Some(&Method::Bye));
            assert_eq!(caller_state(&store, &id_b).0.as_deref(), Some("Terminating"));
            // A late retransmission of bob's OK to the re-INVITE is acknowledged, but it does
            // not answer the BYE: bob's execution stays in Terminating (T12 needs the BYE's).
            b.answer(srv, &reinvite_b, 200, "v=0 bob2");
            assert_eq!(b.next(true).method(), Some(&Method::Ack));
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(caller_state(&store, &id_b).0.as_deref(), Some("Terminating"));
            b.answer(srv, &bye, 200, "");
            let _ = &mut call_b;
            let deadline = std::time::Instant::now() + WAIT;
            while store.live_sessions() > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .await
        .unwrap();
        assert_eq!(container.store().live_sessions(), 0);
        assert_eq!(container.store().live_app_sessions(), 0);
        for (t, n) in [(T::T1, 2), (T::T2, 2), (T::T4, 2), (T::T6, 1), (T::T7, 1), (T::T8, 2), (T::T9, 1), (T::T11, 1), (T::T12, 1)] {
            assert_eq!(svc.count(t), n, "{}", t.name());
        }
        assert_eq!(svc.lock_retries(), 0);
        container.shutdown().await;
    }

    /// T19: a phone rejects the re-INVITE that connects its peer; both executions go to
    /// Terminating, both phones are hung up, and their answers end both executions (T12).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejected_reinvite_hangs_up_both_callers() {
        rejected_reinvite_hangs_up_both(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejected_reinvite_hangs_up_both_callers_contract() {
        rejected_reinvite_hangs_up_both(true).await;
    }

    async fn rejected_reinvite_hangs_up_both(contract: bool) {
        let media = Ua::new("media");
        let svc = Version::new(contract, &DatingConfig { media: media.me().to_string() });
        let settings = ContainerSettings {
            container: ContainerConfig { executors: 2, seed: Some(5), ..Default::default() },
            routes: vec![RouteRule::catch_all(SERVICE)],
        };
        let listen = ["udp:127.0.0.1:0".parse::<tandem_transport::ListenSpec>().unwrap()];
        let service = svc.service();
        let container = Container::start(settings, vec![(SERVICE.into(), service)], &listen, Default::default()).await.unwrap();
        let srv = container.local_addrs()[0].1;
        let store = container.store().clone();
        tokio::task::spawn_blocking(move || {
            let (a, b) = (Ua::new("alice"), Ua::new("bob"));
            let (_call_a, _leg_a, id_a) = dial_in(&a, &media, srv);
            let (_call_b, mut leg_b, id_b) = dial_in(&b, &media, srv);
            std::thread::sleep(Duration::from_millis(100));
            // This time bob's media leg suggests alice.
            media_request(&media, srv, &mut leg_b, "MESSAGE", &id_a);
            for _ in 0..3 {
                let m = media.next(false);
                if m.method() == Some(&Method::Bye) {
                    media.answer(srv, &m, 200, "");
                }
            }
            let reinvite_a = a.next(false);
            let reinvite_b = b.next(false);
            b.answer(srv, &reinvite_b, 200, "v=0 bob2");
            assert_eq!(b.next(true).method(), Some(&Method::Ack));
            a.answer(srv, &reinvite_a, 486, "");
            // Both phones are hung up (alice's ACK for the 486 is the transaction layer's).
            let bye_a = a.next(false);
            let bye_b = b.next(false);
            assert_eq!(bye_a.method(), Some(&Method::Bye));
            assert_eq!(bye_b.method(), Some(&Method::Bye));
            assert_eq!(caller_state(&store, &id_a).0.as_deref(), Some("Terminating"));
            assert_eq!(caller_state(&store, &id_b).0.as_deref(), Some("Terminating"));
            a.answer(srv, &bye_a, 200, "");
            b.answer(srv, &bye_b, 200, "");
            let deadline = std::time::Instant::now() + WAIT;
            while store.live_sessions() > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = id_b;
        })
        .await
        .unwrap();
        assert_eq!(container.store().live_sessions(), 0);
        assert_eq!(container.store().live_app_sessions(), 0);
        for (t, n) in [(T::T7, 1), (T::T8, 1), (T::T19, 1), (T::T12, 2)] {
            assert_eq!(svc.count(t), n, "{}", t.name());
        }
        container.shutdown().await;
    }
}
