//! A contract compiled to Rust, and the dispatcher that runs it (decision 0008).
//!
//! `tandem_contract::codegen` turns a contract of one shape (see there) into a [`Contract`]:
//! its states, roles, transitions and events as enums, and its selection as straight-line
//! code. [`CompiledService`] runs such a contract with the service's arms: per message it
//! locks the execution's state holder (the session of the role that `holds state`), reads the
//! state, locks the one other execution the candidates may need (their *peer*: the session the
//! payload names, or the one an attribute names), selects the transition, runs its arm, writes
//! the states, and sends what the arm sent once every lock is released. No lock table, no
//! records of what was read, no general outcome: what the engine decides from tables at run
//! time is decided here by code generated from the contract.
//!
//! Locking, deadlock-free by order, as the hand-synchronized services do it:
//! - state holders are the only sessions held together, at most two (the execution's and its
//!   peer's), in the order of their IDs; a peer ordered before the holder is try-locked, and
//!   when that fails the holder is released and both are taken in order, and the state read
//!   again;
//! - every other session (a role that keeps its state `via` a `once` attribute and has only
//!   `once` attributes: nothing of it changes) is a leaf: locked only briefly, to read or act
//!   on it, never while waiting for another lock;
//! - unlike the engine's negotiators, a thread may block on a state holder another executor
//!   holds: arms do not wait for anything (their sends go out after the locks are released),
//!   so that wait is as short as one arm.

use crate::arm::ArmContext;
use crate::engine::{answer_absorbed_request, HandlerError, ROLE, STATE};
use crate::event::{response_code, timer_code};
use crate::stats::ServiceStats;
use crate::transition::{Body, SessionOp, TransitionError};
use bytes::Bytes;
use parking_lot::{MutexGuard, RawMutex};
use smallvec::SmallVec;
use std::cell::Cell;
use std::fmt::Write;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tandem_container::{
    ActionTicket, AppSessionId, AttrValue, Context, Destination, Request, ResponseEvent, Service, ServiceId, SessionCell, SessionId,
    SipSession, TimerId, UaProfile,
};
use tandem_sip::{Message, Method};

type PeerGuard = parking_lot::ArcMutexGuard<RawMutex, SipSession>;

/// A peer held: its guard, its execution's state, its cell.
type HeldPeer<S> = (PeerGuard, S, SessionCell);

/// The other execution a transition locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    None,
    /// `session(msg.payl)`.
    Payload,
    /// The state holder the message's session's attribute of this name names.
    SipsAttr(&'static str),
}

/// What a guard reads of the message besides sessions.
#[derive(Debug, Clone, Copy)]
pub struct Facts<E> {
    /// `msg.method`.
    pub kind: E,
    /// `msg.cseq`.
    pub cseq: E,
    /// `msg.status`.
    pub status: u16,
}

/// The sessions a guard reads, as the dispatcher holds them.
pub trait Reads<S> {
    /// `msg.sips`.
    fn sips(&self) -> Option<SessionId>;
    /// `session(msg.payl)`.
    fn payload(&self) -> Option<SessionId>;
    /// A session attribute of `of`.
    fn attr(&self, of: Option<SessionId>, name: &'static str) -> Option<SessionId>;
    /// The state of `of`'s execution.
    fn state(&self, of: Option<SessionId>) -> Option<S>;
}

/// A contract compiled by `tandem_contract::codegen`.
pub trait Contract: Send + Sync + 'static {
    type State: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;
    type Role: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;
    type T: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;
    type Ev: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;
    const SERVICE: &'static str;
    /// The role whose sessions hold the execution's state.
    const HOLDER: Self::Role;
    const INITIAL: Self::State;
    /// The transitions' names, in the contract's order.
    const NAMES: &'static [&'static str];

    fn state_name(s: Self::State) -> &'static str;
    fn state_named(name: &str) -> Option<Self::State>;
    fn is_final(s: Self::State) -> bool;
    fn role_named(name: &str) -> Option<Self::Role>;
    /// The `once` attribute by which a session of role `r` reaches its state holder.
    fn via(r: Self::Role) -> Option<&'static str>;
    /// The event of a method code ([`crate::event::Event::method_code`]).
    fn ev(code: Option<usize>) -> Self::Ev;
    /// The transition's place in [`Self::NAMES`].
    fn index(t: Self::T) -> usize;
    fn target(t: Self::T, from: Self::State) -> Self::State;
    /// The state the transition moves its peer to.
    fn moves(t: Self::T) -> Option<Self::State>;
    /// The peer a message of event `ev` may need in `state` (its candidates').
    fn plan(state: Self::State, ev: Self::Ev) -> Peer;
    /// The transition the message takes, or None (absorbed).
    fn select(state: Self::State, role: Option<Self::Role>, ev: &Facts<Self::Ev>, r: &impl Reads<Self::State>) -> Option<Self::T>;
}

/// A service's arms for a compiled contract.
pub trait Arms<C: Contract>: Send + Sync + 'static {
    fn run(&self, t: C::T, step: &mut Step<'_, '_, C>) -> Result<(), HandlerError>;
}

fn role_of<C: Contract>(s: &SipSession) -> Option<C::Role> {
    C::role_named(s.attributes.get_str(ROLE)?)
}

/// A state holder's state; one without `@state` is in the initial state (as the engine reads it).
fn state_of<C: Contract>(s: &SipSession) -> Option<C::State> {
    match s.attributes.get_str(STATE) {
        None => Some(C::INITIAL),
        Some(name) => C::state_named(name),
    }
}

fn set_state<C: Contract>(s: &mut SipSession, to: C::State) {
    s.attributes.set_str(STATE, C::state_name(to));
}

/// The session ID the payload names (whether such a session exists is not checked).
fn parse_payload(input: &Input<'_, '_>) -> Option<SessionId> {
    session_id_in(input.msg?.body_bytes())
}

/// The session ID a body holds, read in place (no reference count taken on the message's
/// buffer); `SessionId`'s parser trims whitespace around it, as the engine reads `msg.payl`.
fn session_id_in(body: &[u8]) -> Option<SessionId> {
    std::str::from_utf8(body).ok()?.parse().ok()
}

/// `session(msg.payl)`'s ID, if such a session is in the store.
#[inline(never)]
fn payload_id(ctx: &Context<'_>, input: &Input<'_, '_>) -> Option<SessionId> {
    parse_payload(input).filter(|id| ctx.session(*id).is_some())
}

/// A peer's state, or None if it is gone for the transition: removed, another service's, in a
/// final state (its executor is about to end it), or not a state holder.
fn live_state<C: Contract>(s: &SipSession, service: ServiceId) -> Option<C::State> {
    if s.is_removed() || s.service != service || role_of::<C>(s) != Some(C::HOLDER) {
        return None;
    }
    state_of::<C>(s).filter(|st| !C::is_final(*st))
}

/// An event as the compiled dispatcher takes it: what the container delivered, borrowed (the
/// request's flow is not copied, nor a request rebuilt to answer it).
struct Input<'r, 'm> {
    req: Option<&'r Request<'m>>,
    msg: Option<&'r Message>,
    /// The session the message arrived on (`None` for an initial request).
    session: Option<SessionId>,
    app: Option<AppSessionId>,
    status: u16,
}

impl Input<'_, '_> {
    fn body(&self) -> Bytes {
        self.msg.map(Message::body).unwrap_or_default()
    }
}

struct View<'v, 'a, C: Contract> {
    ctx: &'v Context<'a>,
    input: &'v Input<'v, 'v>,
    sips: Option<SessionId>,
    /// When the message's session is a leaf: the `once` attribute naming its holder (see
    /// [`Step`]'s), so that a guard reading it gets the holder without locking the leaf again.
    sips_via: Option<&'static str>,
    /// The held sessions (their IDs in them), with their states.
    holder: Option<(&'v SipSession, C::State)>,
    peer: Option<(&'v SipSession, C::State)>,
    /// A peer found gone: not read (it may be held by the transition that ended it).
    gone_peer: Option<SessionId>,
    /// `session(msg.payl)`, read the first time a guard asks.
    payload: Cell<Option<Option<SessionId>>>,
    /// A payload peer found gone (see [`live_state`]): null for the guards, as the engine reads it.
    payload_gone: bool,
}

impl<'v, 'a, C: Contract> View<'v, 'a, C> {
    /// The view of a message whose execution's state holder `hg` is held, alone.
    #[inline(always)]
    fn held(ctx: &'v Context<'a>, input: &'v Input<'v, 'v>, sips_via: Option<&'static str>, hg: &'v SipSession, state: C::State) -> Self {
        View {
            ctx,
            input,
            sips: input.session,
            sips_via,
            holder: Some((hg, state)),
            peer: None,
            gone_peer: None,
            payload: Cell::new(None),
            payload_gone: false,
        }
    }
}

// Inlined into the dispatcher with the generated selection (no call per guard read); what
// reaches beyond the held sessions is kept out of line.
impl<C: Contract> View<'_, '_, C> {
    #[inline(always)]
    fn read<R>(&self, id: SessionId, f: impl FnOnce(&SipSession) -> Option<R>) -> Option<R> {
        match (self.holder, self.peer) {
            (Some((h, _)), _) if h.id == id => f(h),
            (_, Some((p, _))) if p.id == id => f(p),
            _ if self.gone_peer == Some(id) => None,
            _ => read_leaf(self.ctx, id, f),
        }
    }
}

// What reaches beyond the held sessions is out of line and takes what it needs by value: a
// view passed by reference would have to be written to memory for every message, though most
// never read past the held sessions.

/// A leaf: locked briefly. Guards reach only leaves besides the held sessions (the generator
/// gates the payload's reads on the events its plan locks it for).
#[inline(never)]
fn read_leaf<R>(ctx: &Context<'_>, id: SessionId, f: impl FnOnce(&SipSession) -> Option<R>) -> Option<R> {
    let cell = ctx.session(id)?;
    let s = cell.lock();
    if s.is_removed() {
        return None;
    }
    f(&s)
}

/// The state of the execution a leaf belongs to (its holder's): one of the held sessions'
/// (`held`: their IDs and states), else unknown.
#[inline(never)]
fn leaf_state<C: Contract>(ctx: &Context<'_>, of: SessionId, held: [Option<(SessionId, C::State)>; 2]) -> Option<C::State> {
    let (role, via) = read_leaf(ctx, of, |s| Some((role_of::<C>(s)?, s.attributes.get_session(C::via(role_of::<C>(s)?)?))))?;
    if role == C::HOLDER {
        return None;
    }
    held.into_iter().flatten().find(|(id, _)| Some(*id) == via).map(|(_, state)| state)
}

impl<C: Contract> Reads<C::State> for View<'_, '_, C> {
    #[inline(always)]
    fn sips(&self) -> Option<SessionId> {
        self.sips
    }

    #[inline(always)]
    fn payload(&self) -> Option<SessionId> {
        if self.payload_gone {
            return None;
        }
        match self.payload.get() {
            Some(p) => p,
            None => {
                let p = payload_id(self.ctx, self.input);
                self.payload.set(Some(p));
                p
            }
        }
    }

    #[inline(always)]
    fn attr(&self, of: Option<SessionId>, name: &'static str) -> Option<SessionId> {
        let of = of?;
        if let (Some(via), Some((holder, _))) = (self.sips_via, self.holder) {
            if self.sips == Some(of) && via == name {
                return Some(holder.id);
            }
        }
        self.read(of, |s| s.attributes.get_session(name))
    }

    #[inline(always)]
    fn state(&self, of: Option<SessionId>) -> Option<C::State> {
        let of = of?;
        match (self.holder, self.peer) {
            (Some((h, state)), _) if h.id == of => Some(state),
            (_, Some((p, state))) if p.id == of => Some(state),
            _ => leaf_state::<C>(self.ctx, of, [self.holder.map(|(h, st)| (h.id, st)), self.peer.map(|(p, st)| (p.id, st))]),
        }
    }
}

struct Act {
    cell: SessionCell,
    /// A held session's place in its order of actions, taken under its lock when the arm
    /// decided the action (given back if the arm then fails: `CompiledService::give_back`);
    /// another session's is taken when the action is applied.
    ticket: Option<ActionTicket>,
    op: SessionOp,
}

/// A session the dispatcher holds, with its cell.
struct Held<'s> {
    cell: &'s SessionCell,
    s: &'s mut SipSession,
}

/// What an arm sends, inline up to four actions (the dating T7 sends four), in a buffer of the
/// dispatcher's frame: moved neither into the arm nor out of it. Each action is taken out of
/// its slot where it is applied (no drain to set up and drop), leaving `None` behind.
type Acts = SmallVec<[Option<Act>; 4]>;

/// An action buffer whose every action was taken: freed only if it spilled to the heap (the
/// `None`s left inline have nothing to drop).
#[inline(always)]
fn free_drained(acts: &mut ManuallyDrop<Acts>) {
    debug_assert!(acts.iter().all(Option::is_none));
    if acts.spilled() {
        // Moved out only here: the inline buffer is never copied.
        drop(std::mem::take(&mut **acts));
    }
}

/// The sessions an arm created, with their cells (kept from their creation: written and
/// acted on without a look-up by ID). `K` is only for the tests, which make no sessions.
struct Created<K = SessionCell> {
    cells: [Option<(SessionId, K)>; CREATED_MAX],
}

impl<K> Default for Created<K> {
    fn default() -> Self {
        Created { cells: std::array::from_fn(|_| None) }
    }
}

/// What an arm that creates sessions leaves for the dispatcher (an initial transition's: the
/// dating T1 creates two). A step starts without it: most arms create nothing, and a `None`
/// is one word to write and nothing to look through when an arm touches a session.
struct Creation<S> {
    created: Created,
    /// The session `accept` created for the request (the arm's `msg.sips`).
    sips: Option<SessionId>,
    /// The created session the arm gave the state-holding role.
    holder: Option<SessionId>,
    /// An initial transition's target, when a state is written for it (neither the initial
    /// state nor a final one): written on the created holder as the arm gives it its role,
    /// under that lock, not looked up and locked again after the arm.
    to: Option<S>,
    app: Option<AppSessionId>,
}

impl<S> Creation<S> {
    fn new(to: Option<S>) -> Self {
        Creation { created: Created::default(), sips: None, holder: None, to, app: None }
    }
}

/// An initial transition creates its execution's sessions (the dating T1: two).
const CREATED_MAX: usize = 4;

/// A step's creation ended: the created sessions' cells let go where they lie (the creation is
/// not moved out to be dropped), and what the dispatcher still needs of it, the created holder
/// and application session, returned. A step that created nothing has nothing to free,
/// checked inline by the caller.
#[inline(never)]
fn end_creation<S>(creation: &mut ManuallyDrop<Option<Creation<S>>>) -> (Option<SessionId>, Option<AppSessionId>) {
    match creation.as_mut() {
        Some(c) => {
            c.created = Created::default();
            (c.holder, c.app)
        }
        None => (None, None),
    }
}

/// A session's role and first attributes, written where it is called (inlined: the attributes
/// go from the arm's array to the session without a move into a function of their own).
#[inline(always)]
fn write_role_and_attrs<const N: usize>(s: &mut SipSession, role: &str, attrs: [(&str, AttrValue); N]) {
    s.attributes.set(ROLE, AttrValue::Str(role.to_string()));
    for (name, value) in attrs {
        s.attributes.set(name, value);
    }
}

impl<K> Created<K> {
    #[inline]
    fn cell(&self, id: SessionId) -> Option<&K> {
        self.cells.iter().flatten().find(|(c, _)| *c == id).map(|(_, cell)| cell)
    }

    fn add(&mut self, (id, cell): (SessionId, K)) -> Result<SessionId, TransitionError> {
        let slot = self.cells.iter_mut().find(|s| s.is_none()).ok_or(TransitionError::TooManyCreated(CREATED_MAX))?;
        *slot = Some((id, cell));
        Ok(id)
    }
}

/// What an arm gets from a [`CompiledService`]: the held sessions, the sessions it creates, and
/// actions that take effect once the transition commits and every lock is released.
pub struct Step<'s, 'a, C: Contract> {
    ctx: &'s mut Context<'a>,
    input: &'s Input<'s, 's>,
    /// The held sessions (their IDs in them).
    holder: Option<Held<'s>>,
    peer: Option<Held<'s>>,
    /// When the message's session is a leaf: the `once` attribute naming its holder, so that
    /// an arm reading it gets the holder without locking the leaf again.
    sips_via: Option<&'static str>,
    payload: Option<SessionId>,
    /// Set by the first session the arm creates (an initial transition's from the start).
    /// Not dropped with the step: most arms create nothing, and an `Option<Creation>`'s drop
    /// glue is an out-of-line call on every message; [`end_creation`] frees one that is set
    /// (an arm that panics leaves its created sessions' cells unfreed: a leak, nothing worse).
    creation: ManuallyDrop<Option<Creation<C::State>>>,
    respond: Option<u16>,
    acts: &'s mut Acts,
    _contract: PhantomData<fn() -> C>,
}

impl<C: Contract> Step<'_, '_, C> {
    /// A held session directly; any other through [`Step::other`], out of line (one copy for
    /// every closure).
    #[inline]
    fn with<R>(&mut self, id: SessionId, write: bool, f: impl FnOnce(&mut SipSession) -> R) -> Result<R, TransitionError> {
        if let Some(h) = &mut self.holder {
            if h.s.id == id {
                return Ok(f(h.s));
            }
        }
        if let Some(p) = &mut self.peer {
            if p.s.id == id {
                return Ok(f(p.s));
            }
        }
        if let Some(cell) = self.creation.as_ref().and_then(|c| c.created.cell(id)) {
            // Created by the arm: its cell kept, no look-up.
            return Ok(f(&mut cell.lock()));
        }
        let mut g = self.other(id, write)?;
        Ok(f(&mut g))
    }

    /// A session the step neither holds nor created, locked: a leaf to read.
    #[inline(never)]
    fn other(&self, id: SessionId, write: bool) -> Result<PeerGuard, TransitionError> {
        if write {
            // Only held and created sessions change: another session is a leaf (all `once`).
            return Err(TransitionError::NotAcquired(id));
        }
        let g = self.ctx.session(id).ok_or(TransitionError::NoSuchSession(id))?.lock_arc();
        if g.is_removed() {
            return Err(TransitionError::NoSuchSession(id));
        }
        Ok(g)
    }

    /// What the arm created so far, started by its first creation.
    #[inline]
    fn creation(&mut self) -> &mut Creation<C::State> {
        self.creation.get_or_insert_with(|| Creation::new(None))
    }

    #[inline]
    fn on_session(&mut self, session: SessionId, op: SessionOp) -> Result<(), TransitionError> {
        // A held session's place in its order is taken now, under its lock.
        let (cell, ticket) = match (&mut self.holder, &mut self.peer) {
            (Some(h), _) if h.s.id == session => (h.cell.clone(), Some(h.s.reserve_action())),
            (_, Some(p)) if p.s.id == session => (p.cell.clone(), Some(p.s.reserve_action())),
            _ => match self.creation.as_ref().and_then(|c| c.created.cell(session)) {
                // Created by the arm: its cell kept.
                Some(cell) => (cell.clone(), None),
                // A leaf; one gone meanwhile is skipped (as the engine does).
                None => match self.ctx.session(session) {
                    Some(cell) => (cell, None),
                    None => return Ok(()),
                },
            },
        };
        self.acts.push(Some(Act { cell, ticket, op }));
        Ok(())
    }

    /// A role given to a held session (not an initial transition's created one): rare.
    #[inline(never)]
    fn set_role_held<const N: usize>(&mut self, id: SessionId, role: &str, attrs: [(&str, AttrValue); N]) -> Result<(), TransitionError> {
        let s = match (&mut self.holder, &mut self.peer) {
            (Some(h), _) if h.s.id == id => &mut *h.s,
            (_, Some(p)) if p.s.id == id => &mut *p.s,
            _ => return Err(TransitionError::NotAcquired(id)),
        };
        write_role_and_attrs(s, role, attrs);
        Ok(())
    }

    #[inline]
    fn app(&mut self) -> Option<AppSessionId> {
        self.creation.as_ref().and_then(|c| c.app).or(self.input.app).or_else(|| self.holder.as_ref().map(|h| h.s.app))
    }
}

impl<C: Contract> ArmContext for Step<'_, '_, C> {
    #[inline]
    fn sips(&self) -> Option<SessionId> {
        self.input.session.or_else(|| self.creation.as_ref()?.sips)
    }

    #[inline]
    fn body(&self) -> Bytes {
        self.input.body()
    }

    #[inline]
    fn status(&self) -> u16 {
        self.input.status
    }

    #[inline]
    fn accept(&mut self) -> Result<SessionId, TransitionError> {
        let Some(req) = self.input.req else { return Err(TransitionError::NotARequest("accepted")) };
        let app = self.ctx.create_app_session();
        self.creation().app = Some(app);
        let created = self.ctx.accept_cell(req, Some(app))?;
        let creation = self.creation();
        let id = creation.created.add(created)?;
        creation.sips = Some(id);
        Ok(id)
    }

    #[inline]
    fn create_leg(&mut self, from_uri: &str, to_uri: &str, target: Destination) -> Result<SessionId, TransitionError> {
        let app = self.app().ok_or(TransitionError::NotARequest("given a leg"))?;
        let created = self.ctx.create_uac_cell(app, from_uri, to_uri, target)?;
        self.creation().created.add(created)
    }

    #[inline]
    fn set_role_and_attrs<const N: usize>(
        &mut self,
        id: SessionId,
        role: &str,
        attrs: [(&str, AttrValue); N],
    ) -> Result<(), TransitionError> {
        let Some(r) = C::role_named(role) else { return Err(TransitionError::UnknownRole(role.to_string())) };
        // A session the arm created (an initial transition's), written through its kept cell,
        // here, where the arm gives the role (inlined into it): the attributes go from the
        // arm's array to the session without being moved into a function of their own.
        let Some((cell, holder, to)) = self.creation.as_mut().and_then(|c| Some((c.created.cell(id)?, &mut c.holder, c.to))) else {
            return self.set_role_held(id, role, attrs);
        };
        let state = if r == C::HOLDER {
            *holder = Some(id);
            to
        } else {
            None
        };
        let mut s = cell.lock();
        write_role_and_attrs(&mut s, role, attrs);
        if let Some(to) = state {
            set_state::<C>(&mut s, to);
        }
        Ok(())
    }

    #[inline(always)]
    fn attr(&mut self, id: SessionId, name: &str) -> Result<Option<AttrValue>, TransitionError> {
        self.with(id, false, |s| s.attributes.get(name).cloned())
    }

    #[inline(always)]
    fn session_attr(&mut self, id: SessionId, name: &str) -> Result<Option<SessionId>, TransitionError> {
        if let (Some(via), Some(holder)) = (self.sips_via, &self.holder) {
            if self.input.session == Some(id) && via == name {
                return Ok(Some(holder.s.id));
            }
        }
        self.with(id, false, |s| s.attributes.get_session(name))
    }

    #[inline]
    fn set_attr(&mut self, id: SessionId, name: &str, value: AttrValue) -> Result<(), TransitionError> {
        self.with(id, true, |s| {
            s.attributes.set(name, value);
        })
    }

    /// The compiled contracts have one `let` (`session(msg.payl)`): whatever its name.
    #[inline]
    fn session_var(&self, _name: &str) -> Option<SessionId> {
        self.payload
    }

    #[inline]
    fn respond(&mut self, status: u16) {
        self.respond = Some(status);
    }

    #[inline]
    fn answer(&mut self, session: SessionId, status: u16, body: Option<Body>) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Answer { status, body })
    }

    #[inline]
    fn send(&mut self, session: SessionId, method: Method, body: Option<Body>) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Send { method, body })
    }

    #[inline]
    fn bye(&mut self, session: SessionId) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Bye)
    }

    #[inline]
    fn cancel(&mut self, session: SessionId) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Cancel)
    }

    #[inline]
    fn set_timer(&mut self, delay: Duration, name: &'static str) -> Result<TimerId, TransitionError> {
        let app = self.app().ok_or(TransitionError::NotARequest("given a timer"))?;
        Ok(self.ctx.set_timer(app, delay, name)?)
    }
}

/// A service whose contract was compiled to Rust, run with its arms.
pub struct CompiledService<C: Contract, A: Arms<C>> {
    name: String,
    arms: A,
    ua: Option<UaProfile>,
    stats: ServiceStats,
    names: Vec<String>,
    /// Peers ordered before the holder that were busy: both released and taken in order.
    lock_retries: AtomicU64,
    _contract: PhantomData<fn() -> C>,
}

impl<C: Contract, A: Arms<C>> CompiledService<C, A> {
    /// The service, named `name` in its metrics and logs.
    pub fn new(name: &str, arms: A, ua: Option<UaProfile>) -> Arc<Self> {
        Arc::new(CompiledService {
            name: name.to_string(),
            arms,
            ua,
            stats: ServiceStats::new(C::NAMES.len()),
            names: C::NAMES.iter().map(|n| n.to_string()).collect(),
            lock_retries: AtomicU64::new(0),
            _contract: PhantomData,
        })
    }

    pub fn transition_count(&self, name: &str) -> u64 {
        self.stats.named(&self.names, name).map_or(0, |t| t.count.load(Relaxed))
    }

    pub fn failures(&self, name: &str) -> u64 {
        self.stats.named(&self.names, name).map_or(0, |t| t.failures.load(Relaxed))
    }

    pub fn absorbed(&self) -> u64 {
        self.stats.absorbed.load(Relaxed)
    }

    pub fn lock_retries(&self) -> u64 {
        self.lock_retries.load(Relaxed)
    }

    /// What the guards read of an event besides sessions; `kind`, its method code (see
    /// [`crate::event::Event::method_code`]), is passed in where the caller knows it without matching.
    #[inline(always)]
    fn facts(kind: Option<usize>, msg: Option<&Message>, status: u16) -> Facts<C::Ev> {
        let cseq = msg.and_then(Message::cseq).and_then(|c| c.method.standard_index());
        Facts { kind: C::ev(kind), cseq: C::ev(cseq), status }
    }

    fn handle(&self, ctx: &mut Context<'_>, input: &Input<'_, '_>, ev: &Facts<C::Ev>) {
        let Some(sid) = input.session else { return self.initial(ctx, input, ev) };
        let Some(cell) = ctx.session(sid) else { return self.absorb(ctx, input) };
        let g = cell.lock();
        let Some(role) = (if g.is_removed() { None } else { role_of::<C>(&g) }) else {
            drop(g);
            return self.absorb(ctx, input);
        };
        // One call of `on_holder` (inlined here), whichever session holds the state.
        let leaf_holder;
        let (holder, hcell, hg) = if role == C::HOLDER {
            // The message's session holds the state: keep its lock.
            (sid, &cell, g)
        } else {
            // A leaf: its holder is a `once` attribute, read and let go. The arm that created
            // both set it to the holder (its role is not read again, as `dating_manual` does
            // not read its caller's: the generated code trusts the arms' writes).
            let holder = C::via(role).and_then(|a| g.attributes.get_session(a));
            drop(g);
            let Some((h, hcell)) = holder.and_then(|h| Some((h, ctx.session(h)?))) else { return self.absorb(ctx, input) };
            leaf_holder = hcell;
            let hg = leaf_holder.lock();
            if hg.is_removed() {
                drop(hg);
                return self.absorb(ctx, input);
            }
            (h, &leaf_holder, hg)
        };
        self.on_holder(ctx, input, ev, role, holder, hcell, hg)
    }

    /// An initial request (no session yet): the initial state, no role, nothing to lock.
    #[inline(never)]
    fn initial(&self, ctx: &mut Context<'_>, input: &Input<'_, '_>, ev: &Facts<C::Ev>) {
        if input.req.is_none() {
            return self.absorb(ctx, input);
        }
        let view: View<'_, '_, C> = View {
            ctx,
            input,
            sips: None,
            sips_via: None,
            holder: None,
            peer: None,
            gone_peer: None,
            payload: Cell::new(None),
            payload_gone: false,
        };
        let Some(t) = C::select(C::INITIAL, None, ev, &view) else { return self.absorb(ctx, input) };
        let payload = view.payload.get().flatten();
        let to = C::target(t, C::INITIAL);
        let mut acts = ManuallyDrop::new(Acts::new());
        // The step is dropped where it is, at the block's end: moving it (to drop it, or to
        // take its fields) copies its few hundred bytes.
        let (result, respond, created_holder, created_app) = {
            // Written on the holder by `set_role_and_attrs`, as the arm creates it; an arm that
            // then fails has its execution invalidated before anyone else can see that session.
            let creation = Creation::new(Some(to).filter(|to| *to != C::INITIAL && !C::is_final(*to)));
            let mut step = self.step(ctx, input, None, None, None, payload, Some(creation), &mut acts);
            let result = self.arms.run(t, &mut step);
            let (holder, app) = end_creation(&mut step.creation);
            (result, step.respond, holder, app)
        };
        if let Err(e) = result {
            self.give_back(ctx, &mut acts);
            free_drained(&mut acts);
            return self.failed(ctx, input, t, e, created_app);
        }
        let mut ended = [None; 2];
        if C::is_final(to) {
            // Set only for a session the arm created.
            ended[0] = created_holder.and_then(|h| ctx.session(h)).map(|cell| cell.lock().app);
        }
        self.commit(ctx, input, t, respond, &mut acts, ended);
        free_drained(&mut acts);
    }

    #[allow(clippy::too_many_arguments)]
    fn step<'s, 'a>(
        &self,
        ctx: &'s mut Context<'a>,
        input: &'s Input<'s, 's>,
        holder: Option<Held<'s>>,
        peer: Option<Held<'s>>,
        sips_via: Option<&'static str>,
        payload: Option<SessionId>,
        creation: Option<Creation<C::State>>,
        acts: &'s mut Acts,
    ) -> Step<'s, 'a, C> {
        let creation = ManuallyDrop::new(creation);
        Step { ctx, input, holder, peer, sips_via, payload, creation, respond: None, acts, _contract: PhantomData }
    }

    /// A message of the execution whose state holder `holder` is locked (`hg`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn on_holder<'h>(
        &self,
        ctx: &mut Context<'_>,
        input: &Input<'_, '_>,
        ev: &Facts<C::Ev>,
        role: C::Role,
        holder: SessionId,
        hcell: &'h SessionCell,
        hg: MutexGuard<'h, SipSession>,
    ) {
        let Some(state) = state_of::<C>(&hg) else {
            drop(hg);
            return self.absorb(ctx, input);
        };
        if C::plan(state, ev.kind) != Peer::None {
            return self.with_peer(ctx, input, ev, role, holder, hcell, hg, state);
        }
        // No candidate needs another execution (most messages): the holder alone.
        let sips = input.session;
        let sips_via = if sips == Some(holder) { None } else { C::via(role) };
        let view = View::<C>::held(ctx, input, sips_via, &hg, state);
        let Some(t) = C::select(state, Some(role), ev, &view) else {
            drop(hg);
            return self.absorb(ctx, input);
        };
        let payload = view.payload.get().flatten();
        self.take(ctx, input, t, state, holder, hcell, hg, None, sips_via, payload);
    }

    /// A message whose candidates may need a peer (see [`Peer`]): both locked in order.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn with_peer<'h>(
        &self,
        ctx: &mut Context<'_>,
        input: &Input<'_, '_>,
        ev: &Facts<C::Ev>,
        role: C::Role,
        holder: SessionId,
        hcell: &'h SessionCell,
        mut hg: MutexGuard<'h, SipSession>,
        state: C::State,
    ) {
        let sips = input.session;
        let mut payload: Option<Option<SessionId>> = None;
        // The state read by `on_holder`; read again only if the locks had to be taken in order.
        let mut known = Some(state);
        // A peer found gone (see `live_state`): not held, null to the guards (as the engine reads a
        // removed session), not read again.
        let mut gone_peer = None;
        // The state and the peer with its state, read again if the locks had to be taken in order.
        let (state, pg): (C::State, Option<HeldPeer<C::State>>) = loop {
            let Some(state) = known.take().or_else(|| state_of::<C>(&hg)) else {
                drop(hg);
                return self.absorb(ctx, input);
            };
            let plan = C::plan(state, ev.kind);
            let peer = match plan {
                Peer::None => None,
                Peer::Payload => parse_payload(input),
                Peer::SipsAttr(a) if sips == Some(holder) => hg.attributes.get_session(a),
                Peer::SipsAttr(_) => None,
            };
            // One look-up: the peer's cell, and whether `session(msg.payl)` names a session.
            let found = peer.filter(|p| *p != holder).map(|p| (p, ctx.session(p)));
            if plan == Peer::Payload {
                payload = Some(match &found {
                    Some((_, None)) => None,
                    _ => peer,
                });
            }
            let Some((p, Some(pcell))) = found else { break (state, None) };
            let g = if holder.0 < p.0 {
                pcell.lock_arc()
            } else if let Some(g) = pcell.try_lock_arc() {
                g
            } else {
                // The peer comes first and is busy: release, take both in order, look again.
                self.note_lock_retry();
                drop(hg);
                let g = pcell.lock_arc();
                // Only a state holder is held while waiting for another lock.
                let g = live_state::<C>(&g, ctx.service()).map(|st| (g, st));
                hg = hcell.lock();
                if hg.is_removed() {
                    drop(hg);
                    return self.absorb(ctx, input);
                }
                let again = state_of::<C>(&hg);
                let same = match again.map(|s| C::plan(s, ev.kind)) {
                    Some(Peer::Payload) => true,
                    Some(Peer::SipsAttr(a)) => sips == Some(holder) && hg.attributes.get_session(a) == Some(p),
                    _ => false,
                };
                match (same, again, g) {
                    (true, Some(again), Some((g, st))) => break (again, Some((g, st, pcell))),
                    (true, Some(again), None) => {
                        gone_peer = Some(p);
                        break (again, None);
                    }
                    _ => continue,
                }
            };
            match live_state::<C>(&g, ctx.service()) {
                Some(st) => break (state, Some((g, st, pcell))),
                None => {
                    gone_peer = Some(p);
                    break (state, None);
                }
            }
        };
        let payload_gone = gone_peer.is_some() && matches!(C::plan(state, ev.kind), Peer::Payload);
        let sips_via = if sips == Some(holder) { None } else { C::via(role) };
        let view = View {
            peer: pg.as_ref().map(|(g, st, _)| (&**g, *st)),
            gone_peer,
            payload: Cell::new(payload),
            payload_gone,
            ..View::<C>::held(ctx, input, sips_via, &hg, state)
        };
        let Some(t) = C::select(state, Some(role), ev, &view) else {
            drop(pg);
            drop(hg);
            return self.absorb(ctx, input);
        };
        let payload = if payload_gone { None } else { view.payload.get().flatten() };
        self.take(ctx, input, t, state, holder, hcell, hg, pg.map(|(g, _, cell)| (g, cell)), sips_via, payload);
    }

    /// Runs transition `t`'s arm on the held sessions (each action it decides on one takes
    /// that session's next place in its order of actions), writes the states, releases the
    /// sessions and commits; if the arm fails, gives the places back.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn take<'h>(
        &self,
        ctx: &mut Context<'_>,
        input: &Input<'_, '_>,
        t: C::T,
        state: C::State,
        holder: SessionId,
        hcell: &'h SessionCell,
        mut hg: MutexGuard<'h, SipSession>,
        mut pg: Option<(PeerGuard, SessionCell)>,
        sips_via: Option<&'static str>,
        payload: Option<SessionId>,
    ) {
        // Emptied on every path below (commit, give_back): only a spilled buffer has anything
        // left to free, so the inline one's drop glue (an out-of-line call) is skipped.
        let mut acts = ManuallyDrop::new(Acts::new());
        let held = Some(Held { cell: hcell, s: &mut hg });
        let peer = pg.as_mut().map(|(g, cell)| Held { cell: &*cell, s: g });
        // Dropped in place at the block's end (see `initial`).
        let (result, respond, created_app) = {
            let mut step = self.step(ctx, input, held, peer, sips_via, payload, None, &mut acts);
            let result = self.arms.run(t, &mut step);
            let created_app = if step.creation.is_some() { end_creation(&mut step.creation).1 } else { None };
            (result, step.respond, created_app)
        };
        if let Err(e) = result {
            drop(pg);
            drop(hg);
            self.give_back(ctx, &mut acts);
            free_drained(&mut acts);
            return self.failed(ctx, input, t, e, created_app);
        }
        let mut ended = [None; 2];
        let to = C::target(t, state);
        if C::is_final(to) {
            ended[0] = Some(hg.app);
        }
        // A final state on the message's own session is not written: the execution ends next.
        if to != state && !(C::is_final(to) && input.session == Some(holder)) {
            set_state::<C>(&mut hg, to);
        }
        if let (Some(moved), Some((g, _))) = (C::moves(t), pg.as_mut()) {
            set_state::<C>(g, moved);
            if C::is_final(moved) {
                ended[1] = Some(g.app);
            }
        }
        drop(pg);
        drop(hg);
        self.commit(ctx, input, t, respond, &mut acts, ended);
        free_drained(&mut acts);
    }

    /// Out of line and cold, so that the retry's block is laid out away from the common path.
    #[cold]
    #[inline(never)]
    fn note_lock_retry(&self) {
        self.lock_retries.fetch_add(1, Relaxed);
    }

    /// Sends what the transition decided (every lock released), then ends the executions that
    /// reached a final state.
    fn commit(
        &self,
        ctx: &mut Context<'_>,
        input: &Input<'_, '_>,
        t: C::T,
        respond: Option<u16>,
        acts: &mut Acts,
        ended: [Option<AppSessionId>; 2],
    ) {
        if let (Some(status), Some(req)) = (respond, input.req) {
            ctx.respond(req, status);
        }
        // Taken in place: no move of the inline buffer.
        for act in acts.iter_mut() {
            let Some(Act { cell, ticket, op }) = act.take() else { continue };
            let mut s = cell.lock();
            let ticket = ticket.unwrap_or_else(|| s.reserve_action());
            // At the session's home, in the order the actions were decided.
            ctx.act_in_order(&cell, &mut s, ticket, move |ctx: &mut Context<'_>, s: &mut SipSession| op.apply_on(ctx, s));
        }
        let [own, peer] = ended;
        if let Some(app) = own {
            ctx.invalidate(app);
        }
        if let Some(app) = peer {
            ctx.invalidate(app);
        }
        self.stats.transitions[C::index(t)].count.fetch_add(1, Relaxed);
    }

    /// A failed arm's places in the held sessions' orders of actions, taken for actions it
    /// will not send: each is passed with nothing done, so that later actions do not wait
    /// for it. Empties the buffer (the actions without a place are dropped).
    #[cold]
    #[inline(never)]
    fn give_back(&self, ctx: &mut Context<'_>, acts: &mut Acts) {
        for act in acts.iter_mut() {
            if let Some(Act { cell, ticket: Some(ticket), .. }) = act.take() {
                let mut s = cell.lock();
                ctx.act_in_order(&cell, &mut s, ticket, |_: &mut Context<'_>, _: &mut SipSession| {});
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn failed(&self, ctx: &mut Context<'_>, input: &Input<'_, '_>, t: C::T, e: HandlerError, created_app: Option<AppSessionId>) {
        tracing::warn!(service = %self.name, transition = C::NAMES[C::index(t)], error = %e, "transition failed; nothing sent but a 500");
        self.stats.transitions[C::index(t)].failures.fetch_add(1, Relaxed);
        if let Some(req) = input.req {
            ctx.respond_failed(req);
        }
        if let Some(app) = created_app {
            ctx.invalidate(app);
        }
    }

    // Rare (a message no transition takes, or whose session is gone): out of line and cold,
    // laid out away from the common path as the errors are.
    #[cold]
    #[inline(never)]
    fn absorb(&self, ctx: &mut Context<'_>, input: &Input<'_, '_>) {
        self.stats.absorbed.fetch_add(1, Relaxed);
        if let Some(req) = input.req {
            answer_absorbed_request(ctx, req);
        }
    }
}

impl<C: Contract, A: Arms<C>> Service for CompiledService<C, A> {
    fn user_agent(&self) -> Option<&UaProfile> {
        self.ua.as_ref()
    }

    // The facts are read where the kind of event is known (no match on the trigger per read).
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        // A request's CSeq names its method (the parser refuses one that does not).
        let kind = C::ev(req.msg.method().and_then(Method::standard_index));
        let ev = Facts { kind, cseq: kind, status: 0 };
        let input = Input { req: Some(req), msg: Some(req.msg), session: req.session, app: req.app, status: 0 };
        self.handle(ctx, &input, &ev);
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        let status = response.status();
        let msg = match &response {
            ResponseEvent::Received(m) => Some(*m),
            _ => None,
        };
        let ev = Self::facts(Some(response_code(status)), msg, status);
        self.handle(ctx, &Input { req: None, msg, session: Some(session), app: None, status }, &ev);
    }

    // The contracts name a timer's event only (`TIMER`), not the timer.
    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, _name: &'static str) {
        let session = ctx.with_app(app, |a| a.sessions.first().copied()).flatten();
        self.handle(ctx, &Input { req: None, msg: None, session, app: Some(app), status: 0 }, &Self::facts(Some(timer_code()), None, 0));
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, session: SessionId) {
        // A cancelled INVITE is the contract's CANCEL.
        let code = Method::Cancel.standard_index();
        self.handle(ctx, &Input { req: None, msg: None, session: Some(session), app: None, status: 0 }, &Self::facts(code, None, 0));
    }

    fn metrics_text(&self) -> String {
        let mut out = self.stats.render(&self.name, &self.names);
        let name = "tandem_compiled_lock_retries_total";
        let _ = write!(
            out,
            "# HELP {name} Peers ordered before the state holder that were busy (both released and taken in order).\n# TYPE {name} counter\n{name}{{service=\"{}\"}} {}\n",
            self.name,
            self.lock_retries.load(Relaxed)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{session_id_in, Created, CREATED_MAX};
    use crate::transition::TransitionError;
    use tandem_container::SessionId;

    #[test]
    fn a_step_records_the_sessions_it_creates_up_to_its_limit() {
        let mut created = Created::<u128>::default();
        for n in 1..=CREATED_MAX as u128 {
            assert_eq!(created.cell(SessionId(n)), None);
            assert_eq!(created.add((SessionId(n), n * 10)).ok(), Some(SessionId(n)));
            assert_eq!(created.cell(SessionId(n)), Some(&(n * 10)));
        }
        assert!(matches!(created.add((SessionId(99), 990)), Err(TransitionError::TooManyCreated(CREATED_MAX))));
        assert_eq!(created.cell(SessionId(99)), None);
    }

    #[test]
    fn a_payload_names_a_session_with_whitespace_around_it_as_the_engine_reads_it() {
        let id = SessionId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let text = id.to_string();
        assert_eq!(session_id_in(text.as_bytes()), Some(id));
        assert_eq!(session_id_in(format!(" \t{text}\r\n").as_bytes()), Some(id));
        // Beyond ASCII: what `str::trim` (the engine's) takes too.
        assert_eq!(session_id_in(format!("\u{2003}{text}\u{a0}\n").as_bytes()), Some(id));
        assert_eq!(session_id_in(text.as_bytes()).map(|i| i.to_string()), text.parse::<SessionId>().ok().map(|i| i.to_string()));
        for bad in ["", "  ", "unavailable", &text[1..], &format!("{text}x")] {
            assert_eq!(session_id_in(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(session_id_in(&[0xff, 0xfe]), None);
    }
}
