//! The machine service: events in, negotiation, one handler arm, commit, release.

use crate::compiled::{
    CompileError, Compiled, MsgText, Operand, PayloadNav, PayloadView, Selection, SimpleNav, Step, ROLE_SLOT, STATE_SLOT,
};
use crate::eval::{eval, nav_value, Env, Need, Value, Vars};
use crate::event::{Event, Trigger};
use crate::locks::{Acquire, Key, LockTable, Ticket, GLOBAL};
use crate::reads::{to_value, Cells, Reads};
use crate::sorted_set::SortedSet;
use crate::stats::ServiceStats;
use crate::transition::{Action, Actions, Transition};
use smol_str::SmolStr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tandem_container::{AppSessionId, Context, Request, ResponseEvent, Service, SessionId, SipSession, TimerId, UaProfile};
use tandem_contract::ast::NavRoot;

/// How a service's transitions acquire their sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiator {
    /// The paper's generic negotiator: sessions in one global order; evaluation that needs a
    /// session ordered before one already held releases, re-acquires in order and
    /// re-evaluates the guard.
    Ordered,
    /// As `Ordered`, but single-assignment attributes (and roles) are read without holding
    /// their session, and the sessions a message will need are predicted before anything is
    /// locked, so the usual case acquires everything in order at once and never backs off.
    SingleAssign,
    /// One lock for the whole service: every transition runs alone. No per-session lock
    /// traffic and no back-off; no parallelism between transitions of this service.
    Global,
}

impl FromStr for Negotiator {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ordered" => Ok(Negotiator::Ordered),
            "single-assign" => Ok(Negotiator::SingleAssign),
            "global" => Ok(Negotiator::Global),
            other => Err(format!("unknown negotiator {other:?} (ordered, single-assign, global)")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HandlerError(pub String);

impl From<crate::transition::TransitionError> for HandlerError {
    // A failing arm's path: out of line, and unlikely where an arm's `?` converts.
    #[cold]
    #[inline(never)]
    fn from(e: crate::transition::TransitionError) -> Self {
        HandlerError(e.to_string())
    }
}

/// The business logic: one arm per transition (the paper's `doTransition`).
///
/// Each of the contract's transitions is mapped to an arm once, when the service is built
/// ([`Self::arm`]; a transition without one is refused then, [`CompileError::NoArm`]), so a
/// message runs its arm without comparing names. [`crate::arms!`] declares an enum of the
/// transitions' names to serve as `Arm`.
pub trait Handler: Send + Sync + 'static {
    type Arm: Copy + Send + Sync + 'static;
    /// The arm that runs transition `name`; None: the handler has none.
    fn arm(&self, name: &str) -> Option<Self::Arm>;
    fn do_transition(&self, arm: Self::Arm, t: &mut Transition<'_, '_>) -> Result<(), HandlerError>;
}

/// Declares an enum of a contract's transition names, to be a [`Handler::Arm`]:
/// `from_name` maps a name to its variant, `name` the other way.
///
/// ```
/// tandem_engine::arms! {
///     /// The pairing contract's transitions.
///     pub enum PairingArm { Join, Pair, Busy, Late, Hangup }
/// }
/// assert_eq!(PairingArm::from_name("Pair"), Some(PairingArm::Pair));
/// assert_eq!(PairingArm::Hangup.name(), "Hangup");
/// assert_eq!(PairingArm::from_name("Lost"), None);
/// ```
#[macro_export]
macro_rules! arms {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($arm:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name { $($arm),+ }

        impl $name {
            /// The variant named `name` (a transition's name in the contract).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $(stringify!($arm) => Some(Self::$arm),)+
                    _ => None,
                }
            }

            /// The transition's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$arm => stringify!($arm),)+
                }
            }
        }
    };
}

/// A negotiation in progress: the event, what it holds and what it still has to acquire.
pub(crate) struct Negotiation<'m> {
    pub ticket: Ticket,
    /// Borrows the container's message until the negotiation has to wait.
    pub event: Event<'m>,
    pub executor: u16,
    pub held: SortedSet<Key>,
    to_acquire: SortedSet<Key>,
    started: Instant,
    backoffs: u64,
    /// The single-assignment negotiator's unlocked evaluation, until the first evaluation
    /// under the locks uses or discards it.
    prediction: Option<Box<Prediction>>,
    /// Whether this negotiation's session has an entry in `in_progress` that it must pass on
    /// (or remove) when it ends: made when a negotiation of the session had to wait.
    owns_queue: bool,
    /// Whether `held` was granted without the lock table: the fast path on a container with one
    /// executor (see [`MachineService::run_fast`]); nothing to release then.
    unlocked: bool,
}

impl Negotiation<'_> {
    /// The negotiation with its own copy of the message, to wait in a lock queue.
    fn into_owned(self) -> Negotiation<'static> {
        Negotiation {
            ticket: self.ticket,
            event: self.event.into_owned(),
            executor: self.executor,
            held: self.held,
            to_acquire: self.to_acquire,
            started: self.started,
            backoffs: self.backoffs,
            prediction: self.prediction,
            owns_queue: self.owns_queue,
            unlocked: self.unlocked,
        }
    }
}

/// What the fast path (`MachineService::fast_select`) selected, before taking any lock. What
/// it read and the sessions to lock are written in place (the negotiation's `held` and a
/// record on `begin`'s stack): moving them through a returned record was a visible share of
/// the engine's cost per message.
struct Fast {
    /// None: the message enables nothing (absorbed).
    transition: Option<usize>,
    holder: Option<SessionId>,
    /// The message's session's application session.
    app: Option<AppSessionId>,
    /// The transition's `let` (`session(msg.payl)`), if it has one.
    vars: Vars,
    /// A session locked (its state was read) that the arm may not touch.
    unneeded: Option<Key>,
}

impl Fast {
    /// A message whose session is gone: nothing read, nothing to hold.
    fn absorbed() -> Fast {
        Fast { transition: None, holder: None, app: None, vars: Vars::default(), unneeded: None }
    }
}

/// The session `session(msg.payl)` names, as the fast path read it.
struct PayloadRead {
    /// None: null (no session ID, or no such session).
    var: Option<SessionId>,
    /// Its execution's state as a place (see [`crate::compiled::PayloadView::var_place`]).
    place: Option<Option<usize>>,
    /// Its attributes in [`Compiled::payload_nav_slots`] that name sessions.
    attrs: smallvec::SmallVec<[(usize, SessionId); 2]>,
}

/// Reads the session `session(msg.payl)` names (recording it in `reads`) in one locked look: its
/// state from its memo, and the attributes payload handles traverse. None: the fast path
/// cannot decide (a session it already read, one removed meanwhile, or another service's).
fn read_payload(ctx: &mut Context<'_>, compiled: &Compiled, event: &Event<'_>, reads: &mut Reads) -> Option<PayloadRead> {
    // The ID as `session(msg.payl)` parses it; whether it exists is read below.
    let Value::Session(id) = payload_session(event, |text| text.parse().map_or(Value::Null, Value::Session)) else {
        return Some(PayloadRead { var: None, place: None, attrs: smallvec::SmallVec::new() });
    };
    // The message's own session or its holder: left to the general path (rare; e.g. a
    // suggestion naming the caller itself).
    if reads.cell(id).is_some() {
        return None;
    }
    let Some(cell) = ctx.session(id) else {
        // Recorded as read, as missing (IDs are not reused: it stays so).
        reads.record_missing(id);
        return Some(PayloadRead { var: None, place: None, attrs: smallvec::SmallVec::new() });
    };
    let s = cell.lock();
    // A memo is in its service's encoding: another service's session is read by name.
    if s.is_removed() || s.service != ctx.service() {
        return None;
    }
    let place = holder_memo(s.attributes.memo()).map(memo_place);
    let mut attrs = smallvec::SmallVec::new();
    for &slot in &compiled.payload_nav_slots {
        if let Some(target) = s.attributes.get_session(&compiled.slots[slot]) {
            attrs.push((slot, target));
        }
    }
    let generation = s.attributes.generation();
    drop(s);
    reads.record(id, cell, generation);
    Some(PayloadRead { var: Some(id), place, attrs })
}

/// The `msg.sips.NAME` a fast selection read: (slot, what it names).
type Targets = smallvec::SmallVec<[(usize, Operand); 4]>;

/// Where a fast selection found the execution's state, and what the table decides there.
struct Located {
    place: Option<usize>,
    selection: Selection,
    /// `msg.sips.role`: None, no session; Some(None), a session without a role.
    sips_role: Option<Option<usize>>,
    holder: Option<SessionId>,
    app: Option<AppSessionId>,
}

/// A session whose selection the table does not decide from it alone (`read_undecided`).
struct Undecided {
    /// The state's place if the session names it (a memo).
    place: Option<usize>,
    role: usize,
    /// The state holder for a role that keeps its state on another session.
    via: Option<SessionId>,
}

/// Reads, from the message's session `s` (locked), its role, where its state is, and the
/// `msg.sips.NAME` to read into `targets`: those the state's candidates for this method read
/// when the memo names the state, else (its state is on another session, not read yet; the
/// role from a `via_memo` or by name) all of them. None: the general path decides (a state
/// holder without a memo, no role).
#[inline(never)]
fn read_undecided(compiled: &Compiled, s: &SipSession, method_index: Option<usize>, targets: &mut Targets) -> Option<Undecided> {
    let (found, nav_slots) = match s.attributes.memo() {
        // A role that keeps its state on another session, its index from the memo.
        Some(memo) if is_via_memo(memo) => {
            let role = memo_role(memo);
            let via = s.attributes.get_session(&compiled.slots[compiled.role_at(role).state_via_slot?])?;
            (Undecided { place: None, role, via: Some(via) }, &compiled.sips_nav_slots[..])
        }
        Some(memo) => {
            let place = memo_place(memo);
            let nav_slots = place.map_or(&[][..], |at| compiled.sips_nav_slots_at(at, method_index));
            (Undecided { place, role: memo_role(memo), via: None }, nav_slots)
        }
        None => {
            // A role that keeps its state on another session (`state via`).
            let role = compiled.role_index(s.attributes.get_str(ROLE)?)?;
            let info = compiled.role_at(role);
            if info.holds_state {
                return None;
            }
            let via = s.attributes.get_session(&compiled.slots[info.state_via_slot?])?;
            (Undecided { place: None, role, via: Some(via) }, &compiled.sips_nav_slots[..])
        }
    };
    for &slot in nav_slots {
        match s.attributes.get(&compiled.slots[slot]) {
            None => {}
            Some(tandem_container::AttrValue::Session(target)) => targets.push((slot, Operand::Session(*target))),
            Some(_) => targets.push((slot, Operand::Other)),
        }
    }
    Some(found)
}

/// The key of the session `msg.sips.NAME` (at `slot`) names, as the fast path read it into
/// `targets` (None: no session there).
fn target_key(targets: &[(usize, Operand)], slot: usize) -> Option<Key> {
    match targets.iter().find(|(s, _)| *s == slot) {
        Some((_, Operand::Session(target))) => Some(key(*target)),
        _ => None,
    }
}

/// The keys of the sessions a transition's `msg.sips` handles (`navs`) reach, from `targets`.
fn target_keys(navs: &[SimpleNav], targets: &[(usize, Operand)], keys: &mut SortedSet<Key>) {
    for nav in navs {
        let SimpleNav::SipsAttr(slot) = nav else { continue };
        // `insert`, not `extend`: the latter is an out-of-line call per key.
        if let Some(k) = target_key(targets, *slot) {
            keys.insert(k);
        }
    }
}

/// An evaluation made without locks: its outcome, what it read, and the sessions it asked for.
struct Prediction {
    outcome: Outcome,
    reads: Reads,
    keys: SortedSet<Key>,
    /// Made by the direct path (`predict_direct`), not the general evaluator.
    direct: bool,
}

impl Prediction {
    /// Nothing predicted yet.
    fn empty() -> Prediction {
        Prediction { outcome: Outcome::Absorb, reads: Reads::default(), keys: SortedSet::new(), direct: false }
    }
}

pub struct MachineService<H: Handler> {
    me: Weak<MachineService<H>>,
    name: String,
    pub(crate) compiled: Compiled,
    handler: H,
    negotiator: Negotiator,
    locks: LockTable<Box<Negotiation<'static>>>,
    /// The handler's arm for each transition (by index).
    arms: Vec<H::Arm>,
    stats: ServiceStats,
    names: Vec<String>,
    next_ticket: AtomicU64,
    ua: Option<UaProfile>,
    /// SIP sessions with an event in a negotiation that had to wait, and the events of theirs
    /// that came after: an execution's messages are taken in arrival order even while one
    /// waits for a lock (otherwise a later message could find the sessions free and overtake
    /// it). A negotiation that never waits runs to its end within the event that started it,
    /// before its executor takes the session's next message, so it needs no entry.
    in_progress: dashmap::DashMap<SessionId, std::collections::VecDeque<Event<'static>>, tandem_container::IdHashBuilder>,
    /// Entries in `in_progress`: while there are none (the usual case) no message looks there.
    queued_sessions: AtomicUsize,
    /// Check every direct prediction kept against the general evaluator under the locks
    /// (`tandem_direct_mismatches_total`): for tests, it evaluates each such message twice.
    verify_direct: AtomicBool,
}

pub(crate) fn key(id: SessionId) -> Key {
    // Multiplying by an odd constant is a bijection (distinct sessions, distinct keys) whose
    // top bits, a key's lock stripe, depend on all of the ID's: sequential IDs (tests) spread
    // over stripes as random ones do. Negotiations acquire in this order. 0 (the global lock)
    // comes only from ID 0, which never occurs in practice, and is mapped away to be sure.
    id.0.wrapping_mul(KEY_MIX).max(1)
}

/// 2^128 divided by the golden ratio, made odd (Fibonacci hashing).
const KEY_MIX: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;

enum Outcome {
    Need(SortedSet<Key>),
    Absorb,
    Ambiguous(Vec<String>),
    Run(Chosen),
}

/// The transition evaluation enabled, and what running and committing it needs.
struct Chosen {
    transition: usize,
    vars: Vars,
    /// The sessions its handles traverse, and the state holders.
    needed: SortedSet<Key>,
    /// The state holder of the message's session, as evaluation found it.
    holder: Option<SessionId>,
}

impl<H: Handler> MachineService<H> {
    pub fn new(
        name: &str,
        compiled: Compiled,
        handler: H,
        negotiator: Negotiator,
        ua: Option<UaProfile>,
    ) -> Result<Arc<Self>, CompileError> {
        let names: Vec<String> = compiled.machine.transitions.iter().map(|t| t.name.name.clone()).collect();
        let arms = names.iter().map(|n| handler.arm(n).ok_or_else(|| CompileError::NoArm(n.clone()))).collect::<Result<_, _>>()?;
        Ok(Arc::new_cyclic(|me| MachineService {
            me: me.clone(),
            name: name.to_string(),
            stats: ServiceStats::new(names.len()),
            names,
            compiled,
            handler,
            negotiator,
            locks: LockTable::default(),
            arms,
            next_ticket: AtomicU64::new(1),
            ua,
            in_progress: dashmap::DashMap::default(),
            queued_sessions: AtomicUsize::new(0),
            verify_direct: AtomicBool::new(false),
        }))
    }

    pub fn negotiator(&self) -> Negotiator {
        self.negotiator
    }

    /// Locks held right now (zero when the service is idle).
    pub fn held_locks(&self) -> usize {
        self.locks.held()
    }

    pub fn transition_count(&self, name: &str) -> u64 {
        self.stats.named(&self.names, name).map_or(0, |t| t.count.load(Relaxed))
    }

    /// Handler arms of `name` that failed (nothing they sent left).
    pub fn failures(&self, name: &str) -> u64 {
        self.stats.named(&self.names, name).map_or(0, |t| t.failures.load(Relaxed))
    }

    pub fn absorbed(&self) -> u64 {
        self.stats.absorbed.load(Relaxed)
    }

    /// Unlocked predictions that had to be evaluated again under the locks.
    pub fn reevaluations(&self) -> u64 {
        self.stats.reevaluations.load(Relaxed)
    }

    /// Checks every direct prediction that is kept against the general evaluator, under the
    /// locks; a difference is counted (`direct_mismatches`) and logged. For tests: each such
    /// message is evaluated twice.
    pub fn set_verify_direct(&self, on: bool) {
        self.verify_direct.store(on, Relaxed);
    }

    /// Predictions made by the direct path.
    pub fn direct_predictions(&self) -> u64 {
        self.stats.direct.load(Relaxed) + self.stats.fast.load(Relaxed)
    }

    /// Messages the fast path (`fast_select`) decided, a part of [`Self::direct_predictions`].
    pub fn fast_selections(&self) -> u64 {
        self.stats.fast.load(Relaxed)
    }

    /// Fast-path transitions run without the lock table (a container with one executor).
    pub fn unlocked_runs(&self) -> u64 {
        self.stats.unlocked.load(Relaxed)
    }

    /// Direct predictions whose outcome the general evaluator did not reach (with
    /// [`Self::set_verify_direct`]); always 0 unless the direct path is wrong.
    pub fn direct_mismatches(&self) -> u64 {
        self.stats.direct_mismatches.load(Relaxed)
    }

    pub fn backoffs(&self) -> u64 {
        self.stats.transitions.iter().map(|t| t.backoffs.load(Relaxed)).sum()
    }

    fn start(&self, ctx: &mut Context<'_>, event: Event<'_>) {
        // A session's events are started by its home executor, one at a time: an entry made
        // by an earlier event of it is visible here (same thread), so the count can be read
        // relaxed.
        if let (Some(session), true) = (event.session, self.queued_sessions.load(Relaxed) != 0) {
            if let Some(mut waiting) = self.in_progress.get_mut(&session) {
                return waiting.push_back(event.into_owned());
            }
        }
        self.begin(ctx, event, false);
    }

    /// Makes `session`'s queue (its next events wait behind the negotiation that owns it).
    fn open_queue(&self, neg: &mut Negotiation<'_>) {
        let Some(session) = neg.event.session else { return };
        if neg.owns_queue {
            return;
        }
        // Only the negotiation that made the queue owns it: one begun outside `start` (a
        // timer, a completion) that finds another's queue must not hand it on or remove it.
        if let dashmap::Entry::Vacant(free) = self.in_progress.entry(session) {
            free.insert(std::collections::VecDeque::new());
            self.queued_sessions.fetch_add(1, Relaxed);
            neg.owns_queue = true;
        }
    }

    /// The next event of `session` that waited for the previous one, if any (it then owns the
    /// queue); else the queue goes.
    fn next_event(&self, ctx: &mut Context<'_>, session: SessionId) {
        let next = match self.in_progress.entry(session) {
            dashmap::Entry::Occupied(mut waiting) => match waiting.get_mut().pop_front() {
                Some(event) => Some(event),
                None => {
                    waiting.remove();
                    self.queued_sessions.fetch_sub(1, Relaxed);
                    None
                }
            },
            dashmap::Entry::Vacant(_) => None,
        };
        if let Some(event) = next {
            self.begin(ctx, event, true);
        }
    }

    fn begin(&self, ctx: &mut Context<'_>, event: Event<'_>, owns_queue: bool) {
        // On the stack: boxed only if it has to wait for a lock.
        let mut neg = Negotiation {
            ticket: self.next_ticket.fetch_add(1, Relaxed),
            event,
            executor: ctx.executor(),
            held: SortedSet::new(),
            to_acquire: SortedSet::new(),
            started: ctx.now(),
            backoffs: 0,
            prediction: None,
            owns_queue,
            unlocked: false,
        };
        if self.negotiator == Negotiator::SingleAssign {
            let mut reads = Reads::default();
            // By reference: moving the selection out of its `Option` was a copy per message.
            if let Some(fast) = &self.fast_select(ctx, &neg.event, &mut neg.held, &mut reads) {
                if self.run_fast(ctx, &mut neg, fast, &mut reads) {
                    return;
                }
            }
            neg.held.clear();
        }
        self.begin_general(ctx, neg);
    }

    /// The single-assignment negotiator's fast path, for a message whose possible transitions
    /// all have a [`crate::compiled::Simple`] guard and `msg.sips` handles (18 of the dating
    /// contract's 20): one locked look at the message's session (and, for a role whose state
    /// is kept `via` another session, one at that session) finds the role and state as
    /// indices (the memo the commit leaves, `Attributes::memo`), decides the guards (most by
    /// one look-up, `Compiled::selection_at`; guards that read more are evaluated), and reads
    /// the handles' sessions; no general prediction, outcome or record is built. It selects
    /// what `predict_direct` would (the same transition, sessions, state holder and record:
    /// checked under the locks with `engine.verify_direct`), or that the message enables
    /// nothing (no transition, or its session is gone). None: not such a message, or not such
    /// a state (a memo not set or stale, a candidate that is not simple, several transitions
    /// enabled) — the general path decides it.
    ///
    /// The sessions it read go to `reads` (each with its cell and the attributes' generation
    /// it saw: the message's, then its state holder if that is another, then the payload's),
    /// the sessions to lock to `keys` (the message's, the handles' and moves', the state
    /// holder, and a payload session whose state was read); both are left partly filled when
    /// it returns None.
    fn fast_select(&self, ctx: &mut Context<'_>, event: &Event<'_>, keys: &mut SortedSet<Key>, reads: &mut Reads) -> Option<Fast> {
        let compiled = &self.compiled;
        let method_index = compiled.event_method_index(event);
        let Some(id) = event.session else {
            if !matches!(event.trigger, Trigger::Request { .. }) {
                return None;
            }
            let place = compiled.initial_at();
            let selection = compiled.selection_in(place, method_index, None);
            let located = Located { place, selection, sips_role: None, holder: None, app: None };
            return self.fast_select_rest(ctx, event, method_index, located, &[], keys, reads);
        };
        // A session gone from the store never comes back (IDs are not reused): the general
        // path would absorb the message too, having read the same.
        let Some(cell) = ctx.session(id) else {
            return Some(Fast::absorbed());
        };
        let s = cell.lock();
        if s.is_removed() {
            return None;
        }
        // Most messages: the session names its state (a memo), and the state, method and role
        // decide the selection. The chosen transition's `msg.sips.NAME` sessions are read and
        // go to `keys` in this same look, and selection is done. Everything else is out of
        // line (`read_undecided`, `fast_select_undecided`): what a message runs here is kept
        // to a few cache lines of code.
        if let Some(memo) = holder_memo(s.attributes.memo()) {
            let decided = match compiled.selection_in(memo_place(memo), method_index, Some(Some(memo_role(memo)))) {
                Selection::Nothing => Some(None),
                Selection::One(t) => Some(Some(t)),
                Selection::Evaluate => None,
            };
            if let Some(transition) = decided {
                for nav in transition.and_then(|t| compiled.program(t).simple_navs.as_deref()).unwrap_or(&[]) {
                    if let SimpleNav::SipsAttr(slot) = nav {
                        if let Some(tandem_container::AttrValue::Session(target)) = s.attributes.get(&compiled.slots[*slot]) {
                            keys.insert(key(*target));
                        }
                    }
                }
                let (app, generation) = (Some(s.app), s.attributes.generation());
                drop(s);
                reads.record(id, cell, generation);
                keys.insert(key(id));
                return Some(Fast { transition, holder: Some(id), app, vars: Vars::default(), unneeded: None });
            }
        }
        let mut targets = Targets::new();
        let found = read_undecided(compiled, &s, method_index, &mut targets)?;
        let (app, generation) = (Some(s.app), s.attributes.generation());
        drop(s);
        reads.record(id, cell, generation);
        self.fast_select_undecided(ctx, event, id, method_index, found, app, &targets, keys, reads)
    }

    /// [`Self::fast_select`] for a message on a session whose selection the table does not
    /// decide from the session alone: a memo whose candidates' guards read more, or a role
    /// that keeps its state on another session (`state via`, read here).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn fast_select_undecided(
        &self,
        ctx: &mut Context<'_>,
        event: &Event<'_>,
        id: SessionId,
        method_index: Option<usize>,
        found: Undecided,
        app: Option<AppSessionId>,
        targets: &[(usize, Operand)],
        keys: &mut SortedSet<Key>,
        reads: &mut Reads,
    ) -> Option<Fast> {
        let Undecided { place, role, via } = found;
        let located = match via {
            // Its state on it (a memo): a selection the table decides returned before.
            None => Located { place, selection: Selection::Evaluate, sips_role: Some(Some(role)), holder: Some(id), app },
            Some(h) if h == id => return None,
            Some(h) => {
                let cell = ctx.session(h)?;
                let s = cell.lock();
                // Only a state holder's commit sets a memo.
                let memo = holder_memo(s.attributes.memo()).filter(|_| !s.is_removed())?;
                let generation = s.attributes.generation();
                drop(s);
                reads.record(h, cell, generation);
                let place = memo_place(memo);
                let selection = self.compiled.selection_in(place, method_index, Some(Some(role)));
                // Decided by the table, with `msg.sips` handles: the keys from the targets read
                // (as `fast_select_rest` would put them, without its general case).
                let decided = match selection {
                    Selection::Nothing => Some((None, &[][..])),
                    Selection::One(t) => self.compiled.program(t).simple_navs.as_deref().map(|navs| (Some(t), navs)),
                    Selection::Evaluate => None,
                };
                if let Some((transition, navs)) = decided {
                    keys.insert(key(id));
                    keys.insert(key(h));
                    target_keys(navs, targets, keys);
                    return Some(Fast { transition, holder: Some(h), app, vars: Vars::default(), unneeded: None });
                }
                Located { place, selection, sips_role: Some(Some(role)), holder: Some(h), app }
            }
        };
        self.fast_select_rest(ctx, event, method_index, located, targets, keys, reads)
    }

    /// The rest of [`Self::fast_select`] once the state is located: the selection (evaluated
    /// where the table cannot decide it) and the sessions to lock.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn fast_select_rest(
        &self,
        ctx: &mut Context<'_>,
        event: &Event<'_>,
        method_index: Option<usize>,
        located: Located,
        targets: &[(usize, Operand)],
        keys: &mut SortedSet<Key>,
        reads: &mut Reads,
    ) -> Option<Fast> {
        let compiled = &self.compiled;
        let Located { place, selection, sips_role, holder, app } = located;
        // `session(msg.payl)`, read the first time a candidate binds it.
        let mut payload: Option<PayloadRead> = None;
        let mut state_read = false;
        // The initial state and a `state via` holder's are mostly decided by the table too.
        let transition = match selection {
            Selection::Nothing => None,
            Selection::One(index) => Some(index),
            Selection::Evaluate => {
                self.evaluate_candidates(ctx, event, method_index, place, sips_role, targets, reads, &mut payload, &mut state_read)?
            }
        };
        let program = transition.map(|t| compiled.program(t));
        if let Some(id) = event.session {
            keys.insert(key(id));
        }
        match (program.and_then(|p| p.simple_navs.as_deref()), program.and_then(|p| p.payload.as_ref())) {
            (Some(navs), _) => target_keys(navs, targets, keys),
            (None, Some(p)) => {
                let found = payload.as_ref()?;
                for nav in &p.navs {
                    match (nav, found.var) {
                        (PayloadNav::Sips(SimpleNav::SipsAttr(slot)), _) => {
                            if let Some(k) = target_key(targets, *slot) {
                                keys.insert(k);
                            }
                        }
                        (PayloadNav::Sips(SimpleNav::Sips), _) => {}
                        (PayloadNav::Var, Some(v)) => {
                            keys.insert(key(v));
                        }
                        (PayloadNav::VarAttr(slot), Some(v)) => {
                            keys.insert(key(v));
                            if let Some((_, target)) = found.attrs.iter().find(|(s, _)| s == slot) {
                                keys.insert(key(*target));
                            }
                        }
                        (_, None) => {}
                    }
                }
            }
            // No transition: nothing more to hold. A payload read decided it, and with it a
            // session the message's own do not name: the general path absorbs it, under locks.
            (None, None) if payload.is_some() => return None,
            (None, None) => {}
        }
        if let Some(h) = holder {
            keys.insert(key(h));
        }
        // What the arm may touch is what the handles traverse and the state holder; the
        // evaluator also locks `v` if it read its state (its lock makes the state stable).
        let mut unneeded = None;
        let mut vars = Vars::default();
        if let Some(found) = &payload {
            let chosen = program.and_then(|p| p.payload.as_ref());
            if chosen.is_some() {
                vars.push(found.var.map_or(Value::Null, Value::Session));
            }
            // `v` is wanted if any candidate's guard read its state (whichever transition
            // was chosen: the choice depends on it) or the chosen one's handles read it.
            let read_attr = chosen.is_some_and(|p| p.navs.iter().any(|n| matches!(n, PayloadNav::VarAttr(_))));
            if let Some(v) = found.var.filter(|v| (state_read || read_attr) && !keys.contains(&key(*v))) {
                keys.insert(key(v));
                unneeded = Some(key(v));
            }
        }
        Some(Fast { transition, holder, app, vars, unneeded })
    }

    /// The fast path's selection where [`Compiled::selection_at`] cannot decide it: each
    /// candidate's guard evaluated, reading the payload's session the first time one binds it.
    /// Some(None): nothing enabled; None: the general path decides (several enabled, a guard
    /// it cannot evaluate). Out of line: most messages do not need it.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn evaluate_candidates(
        &self,
        ctx: &mut Context<'_>,
        event: &Event<'_>,
        method_index: Option<usize>,
        place: Option<usize>,
        sips_role: Option<Option<usize>>,
        targets: &[(usize, Operand)],
        reads: &mut Reads,
        payload: &mut Option<PayloadRead>,
        state_read: &mut bool,
    ) -> Option<Option<usize>> {
        let compiled = &self.compiled;
        let method = event.method();
        let text = |of: MsgText| match of {
            MsgText::Method => method,
            MsgText::Cseq => event.cseq_method(),
            MsgText::Timer => event.timer(),
        };
        let candidates = place.map_or(&[][..], |at| compiled.candidates_at(at));
        let mut chosen = None;
        for &index in candidates {
            let program = compiled.program(index);
            if !program.takes(method_index, method) {
                continue;
            }
            let enabled = match (&program.simple_guard, &program.simple_navs, &program.payload) {
                (Some(guard), Some(_), _) => guard.holds(sips_role, &text),
                (_, _, Some(p)) => {
                    if payload.is_none() {
                        *payload = Some(read_payload(ctx, compiled, event, reads)?);
                    }
                    let found = payload.as_ref()?;
                    let sips = match event.session {
                        Some(id) => Operand::Session(id),
                        None => Operand::Other,
                    };
                    let view = PayloadView { var: found.var, var_place: found.place, sips, sips_attrs: targets };
                    p.guard.holds(sips_role, &text, &view, state_read)?
                }
                _ => return None,
            };
            if enabled && chosen.replace(index).is_some() {
                return None;
            }
        }
        Some(chosen)
    }

    /// Takes the fast path's locks, checks that nothing it read changed meanwhile, and runs
    /// the transition. False when a lock is busy or a session changed: the locks it took are
    /// released and the general path decides (and waits, in order).
    fn run_fast(&self, ctx: &mut Context<'_>, neg: &mut Negotiation<'_>, fast: &Fast, reads: &mut Reads) -> bool {
        let verify = self.verify_direct.load(Relaxed);
        // A message that enables nothing is absorbed without locks: it changes nothing, and
        // what it was decided on (the role and state of a memo still valid, i.e. as the last
        // commit left them, no arm having written the session since) is a state the
        // execution was in, so it is as if it had come just before whichever transition
        // holds the sessions now. (Its session's earlier messages are all done: `start`.)
        // Checked like a selection when verifying, under the locks.
        if fast.transition.is_none() && (!verify || !reads.any_session()) {
            self.stats.fast.fetch_add(1, Relaxed);
            // Nothing was taken.
            neg.held.clear();
            self.absorb(ctx, neg);
            return true;
        }
        if ctx.executors() == 1 {
            // One executor runs every call of this service, one at a time and to completion
            // (a context borrows the executor mutably: no call starts inside another). So no
            // negotiation ever holds a lock between two calls (none can wait: a lock is only
            // ever taken by the call that runs), the locks are free, and nothing read since
            // `fast_select` can have changed: exclusion holds without the table and its check,
            // which the hand-written version does not have to pay either (its locks are the
            // sessions' own mutexes, which the arm takes here too).
            neg.unlocked = true;
            // The one thread that takes this branch is its only writer: no atomic add needed.
            self.stats.unlocked.store(self.stats.unlocked.load(Relaxed) + 1, Relaxed);
        } else {
            let mut taken = 0;
            for &k in neg.held.iter() {
                if !self.locks.try_take(k, neg.ticket) {
                    break;
                }
                taken += 1;
            }
            if taken != neg.held.len() || !reads.unchanged(ctx) {
                for &k in neg.held.iter().take(taken) {
                    self.release_key(ctx, k, neg.ticket);
                }
                return false;
            }
        }
        if neg.event.app.is_none() && matches!(neg.event.trigger, Trigger::Request { .. }) {
            neg.event.app = fast.app;
        }
        self.stats.fast.fetch_add(1, Relaxed);
        match (verify, fast.transition, fast.unneeded) {
            (false, Some(transition), None) => self.run_with(ctx, neg, transition, &fast.vars, fast.holder, &neg.held, reads),
            (false, Some(transition), Some(k)) => {
                self.run_with(ctx, neg, transition, &fast.vars, fast.holder, &fast_needed(&neg.held, k), reads)
            }
            // Verifying (an absorption without locks returned above).
            _ => self.run_fast_verified(ctx, neg, fast, reads),
        }
        true
    }

    /// [`Self::run_fast`] under `engine.verify_direct` (tests), once the locks are held: the
    /// fast decision is compared with the general evaluator's, then run (or absorbed). Out of
    /// line and cold, off the fast path's code.
    #[cold]
    #[inline(never)]
    fn run_fast_verified(&self, ctx: &mut Context<'_>, neg: &mut Negotiation<'_>, fast: &Fast, reads: &mut Reads) {
        let Some(transition) = fast.transition else {
            // Verifying an absorption (see above): the same outcome, keys and record as the
            // general prediction, under the locks.
            let p = Prediction { outcome: Outcome::Absorb, reads: std::mem::take(reads), keys: neg.held.clone(), direct: true };
            self.verify(ctx, neg, &p);
            self.absorb(ctx, neg);
            return;
        };
        let needed = match fast.unneeded {
            Some(k) => fast_needed(&neg.held, k),
            None => neg.held.clone(),
        };
        let chosen = Chosen { transition, vars: fast.vars.clone(), needed, holder: fast.holder };
        let p = Prediction { outcome: Outcome::Run(chosen), reads: std::mem::take(reads), keys: neg.held.clone(), direct: true };
        self.verify(ctx, neg, &p);
        if let Prediction { outcome: Outcome::Run(chosen), reads, .. } = p {
            self.run(ctx, neg, chosen, &reads);
        }
    }

    /// A message that enables no transition: answered if it is a request that needs it, and
    /// let go of (with whatever its negotiation holds).
    fn absorb(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>) {
        self.stats.absorbed.fetch_add(1, Relaxed);
        answer_absorbed(ctx, &neg.event);
        self.release_all(ctx, neg);
    }

    // Out of line: with it (its ~1 KiB prediction, `predict_direct`, `drive_with`) inlined,
    // `begin` was 21 KB of code with a 4.7 KB stack frame that every fast-path message paid
    // for in cache lines (decision 0004, "Hot and cold code").
    #[inline(never)]
    fn begin_general(&self, ctx: &mut Context<'_>, mut neg: Negotiation<'_>) {
        // A request is answered with its application session; other events find it through
        // their session when they need it (`Transition::app`, `msg.apps`).
        let wants_app = neg.event.app.is_none() && matches!(neg.event.trigger, Trigger::Request { .. });
        // Filled in place, on this stack: a prediction is large (about 1 KiB), and is moved
        // only if it must wait (`drive_with` then boxes it); else it is dropped here.
        let mut predicted = Prediction::empty();
        let mut prediction = None;
        match self.negotiator {
            Negotiator::Global => {
                neg.to_acquire.insert(GLOBAL);
            }
            Negotiator::SingleAssign => {
                if !self.predict_direct(ctx, &neg, &mut predicted) {
                    self.predict(ctx, &neg, &mut predicted);
                }
                neg.to_acquire.copy_from(&predicted.keys);
                prediction = Some(&mut predicted);
            }
            Negotiator::Ordered => {}
        }
        // Set before anything is decided (evaluation finds it the same way without it): through
        // the cell the prediction kept, if it reached the session, instead of a store look-up.
        if let (true, Some(session)) = (wants_app, neg.event.session) {
            neg.event.app = match prediction.as_deref().and_then(|p| p.reads.cell(session)) {
                Some(cell) => Some(cell.lock()).filter(|s| !s.is_removed()).map(|s| s.app),
                None => ctx.with_session(session, |_, s| s.app),
            };
        }
        if let Some(k) = self.drive_with(ctx, &mut neg, &mut prediction) {
            self.park(ctx, Box::new(neg.into_owned()), k);
        }
    }

    /// Resumes a negotiation handed a lock (its prediction, if any, travels with it).
    fn drive(&self, ctx: &mut Context<'_>, mut neg: Box<Negotiation<'static>>) {
        if let Some(k) = self.drive_with(ctx, &mut neg, &mut None) {
            self.park(ctx, neg, k);
        }
    }

    /// Queues `neg` for `k`, which `drive_with` found taken; if it was released meanwhile,
    /// goes on.
    fn park(&self, ctx: &mut Context<'_>, neg: Box<Negotiation<'static>>, k: Key) {
        match self.locks.acquire(k, neg.ticket, neg) {
            Acquire::Acquired(mut n) => {
                n.held.insert(k);
                self.drive(ctx, n);
            }
            Acquire::Queued => {
                self.stats.waits.fetch_add(1, Relaxed);
            }
        }
    }

    /// Acquires what is pending, evaluates, and either runs the transition, absorbs the
    /// message, or parks (the negotiation then waits in a lock queue and is resumed by the
    /// transition that releases the lock, on this executor).
    ///
    /// `prediction` is the single-assignment negotiator's unlocked evaluation while it is on
    /// this stack; it moves into the negotiation only if the negotiation has to wait. The
    /// negotiation itself may be on the caller's stack too: a busy lock's key is returned, and
    /// the caller boxes the negotiation and queues it ([`Self::park`]). `None`: it ended.
    fn drive_with(&self, ctx: &mut Context<'_>, neg: &mut Negotiation<'_>, prediction: &mut Option<&mut Prediction>) -> Option<Key> {
        loop {
            // In order; the keys gone through leave `to_acquire` at once, after the loop.
            let mut through = 0;
            let mut busy = None;
            for &k in neg.to_acquire.iter() {
                through += 1;
                if neg.held.contains(&k) {
                    continue;
                }
                debug_assert!(neg.held.last().is_none_or(|m| *m < k), "acquisition out of order");
                // Free locks are taken without moving the negotiation or its prediction.
                if self.locks.try_take(k, neg.ticket) {
                    neg.held.insert(k);
                    continue;
                }
                busy = Some(k);
                break;
            }
            neg.to_acquire.remove_first(through);
            if let Some(k) = busy {
                // It will wait: later events of its session must wait behind it, and it
                // carries its prediction.
                self.open_queue(neg);
                if let Some(p) = prediction.take() {
                    neg.prediction = Some(Box::new(std::mem::replace(p, Prediction::empty())));
                }
                return Some(k);
            }
            // Evaluate again only if the prediction may be stale. Evaluation is a function of
            // the message (fixed) and of what it reads. The prediction read without locks, so a
            // transition may have changed a session after the prediction read it and before we
            // acquired it. Now every session it asked for is held (checked below), so a locked
            // evaluation would need no further lock on the prediction's path; and if nothing it
            // read changed (no session's attributes changed since, and every session exists or
            // not as it did), that evaluation would take the same path, read the same values
            // and reach the same outcome. Checking costs one lock per session read (its cell is
            // kept, its attributes' generation compared), where evaluating again walks every
            // candidate's guard; it is done only when something changed (or was read that the
            // record cannot check, e.g. an application session's attribute).
            let mut boxed = neg.prediction.take();
            let had_prediction = prediction.is_some() || boxed.is_some();
            let held = &neg.held;
            // What the outcome was evaluated from: its sessions' cells serve the commit.
            let fresh: Reads;
            let (outcome, reads) = match prediction.as_deref_mut().or(boxed.as_deref_mut()) {
                Some(p) if p.keys.iter().all(|k| held.contains(k)) && p.reads.unchanged(ctx) => {
                    if p.direct && self.verify_direct.load(Relaxed) {
                        self.verify(ctx, neg, p);
                    }
                    (std::mem::replace(&mut p.outcome, Outcome::Absorb), &p.reads)
                }
                _ => {
                    if had_prediction {
                        self.stats.reevaluations.fetch_add(1, Relaxed);
                    }
                    let (outcome, reads) = self.evaluate(ctx, neg);
                    fresh = reads;
                    (outcome, &fresh)
                }
            };
            match outcome {
                Outcome::Need(wanted) => {
                    *prediction = None;
                    self.plan(ctx, neg, wanted);
                }
                Outcome::Absorb => {
                    self.absorb(ctx, neg);
                    return None;
                }
                Outcome::Ambiguous(names) => {
                    tracing::error!(service = %self.name, transitions = ?names, "contract defect: several transitions enabled; none taken");
                    self.stats.ambiguous.fetch_add(1, Relaxed);
                    self.release_all(ctx, neg);
                    return None;
                }
                Outcome::Run(chosen) => {
                    if self.negotiator == Negotiator::Global || chosen.needed.iter().all(|k| neg.held.contains(k)) {
                        self.run(ctx, neg, chosen, reads);
                        return None;
                    }
                    let missing: SortedSet<Key> = chosen.needed.difference(&neg.held).copied().collect();
                    *prediction = None;
                    self.plan(ctx, neg, missing);
                }
            }
        }
    }

    /// Schedules acquisition of `wanted`: directly when all of it comes after what is held,
    /// else by backing off (release what is held after the first wanted key, re-acquire all
    /// in order; the guard is then evaluated again on fresh state).
    fn plan(&self, ctx: &mut Context<'_>, neg: &mut Negotiation<'_>, wanted: SortedSet<Key>) {
        let released = crate::plan::plan(&mut neg.held, &mut neg.to_acquire, &wanted);
        if !released.is_empty() {
            neg.backoffs += 1;
        }
        for k in released {
            self.release_key(ctx, k, neg.ticket);
        }
    }

    fn release_key(&self, ctx: &mut Context<'_>, k: Key, ticket: Ticket) {
        // The next waiter holds the key it waited for (of the same stripe as `k`).
        let Some((k, mut next)) = self.locks.release(k, ticket) else { return };
        next.held.insert(k);
        let Some(me) = self.me.upgrade() else { return };
        let executor = next.executor;
        ctx.post(executor, Box::new(move |ctx: &mut Context<'_>| me.drive(ctx, next)));
    }

    fn release_all(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>) {
        if !neg.unlocked {
            for &k in &neg.held {
                self.release_key(ctx, k, neg.ticket);
            }
        }
        if let (true, Some(session)) = (neg.owns_queue, neg.event.session) {
            self.next_event(ctx, session);
        }
    }

    fn env<'e, 'a>(
        &'e self,
        ctx: &'e mut Context<'a>,
        neg: &'e Negotiation<'_>,
        predict: bool,
        reads: &'e mut Reads,
    ) -> EvalEnv<'e, 'a, H> {
        EvalEnv { engine: self, ctx, neg, predict, reads }
    }

    fn evaluate(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>) -> (Outcome, Reads) {
        let mut reads = Reads::default();
        let mut env = self.env(ctx, neg, false, &mut reads);
        let outcome = match select(&mut env) {
            Ok(outcome) => outcome,
            Err(Need(id)) => Outcome::Need([key(id)].into()),
        };
        (outcome, reads)
    }

    /// The sessions a message will most likely need, read without locks, and the outcome
    /// those reads give (a hint only: it stands only if the reads still hold under the locks).
    fn predict(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>, p: &mut Prediction) {
        let Prediction { outcome, reads, keys, .. } = p;
        let mut env = self.env(ctx, neg, true, reads);
        // Prediction reads never need a lock, so this is always `Ok`.
        *outcome = select(&mut env).unwrap_or_else(|Need(id)| Outcome::Need([key(id)].into()));
        keys.extend(reads.wanted().map(key));
        // Sessions the handles reach without reading them (the last step of a navigation)
        // are needed too.
        if let Outcome::Run(Chosen { needed, .. }) = outcome {
            keys.extend(needed.iter().copied());
        }
    }

    /// The single-assignment prediction of a message that only `direct` transitions may take
    /// (`Compiled::direct_at`), made without copying the sessions' slots: the message's
    /// session is read under one lock for its role and the state holder (or its execution's
    /// state), and the candidates' `let`s, guards, handles and moves read each session they
    /// reach for the one attribute they ask (`DirectEnv`). It reads and records what `predict`
    /// would (the same sessions, each marked wanted where `predict` marks it, the same
    /// outcome); the check under the locks (`Reads::unchanged`) is the same. Returns false,
    /// with `p` left empty, when the message is not one for it.
    fn predict_direct(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>, p: &mut Prediction) -> bool {
        let compiled = &self.compiled;
        let event = &neg.event;
        let method = event.method();
        let method_index = compiled.event_method_index(event);
        if !compiled.direct_at(method_index) {
            return false;
        }
        let reads = &mut p.reads;
        // The message's session: the state `select` would find, the role `msg.sips.role`
        // gives, and the holder `state_holder` names.
        let (candidates, sips_role, holder) = match event.session {
            None if matches!(event.trigger, Trigger::Request { .. }) => (compiled.initial_candidates(), None, None),
            None => return self.direct_outcome(p, Outcome::Absorb),
            Some(id) => match direct_state(ctx, compiled, reads, id) {
                Some(found) => found,
                None => return self.direct_outcome(p, Outcome::Absorb),
            },
        };
        let mut env = DirectEnv { ctx, compiled, reads, event, sips_role, payload: None, escaped: false };
        let mut enabled: smallvec::SmallVec<[(usize, Vars); 1]> = smallvec::SmallVec::new();
        let text = |of: MsgText| match of {
            MsgText::Method => method,
            MsgText::Cseq => event.cseq_method(),
            MsgText::Timer => event.timer(),
        };
        for &index in candidates {
            let program = compiled.program(index);
            if !program.takes(method_index, method) {
                continue;
            }
            // A guard of the message and `msg.sips.role` alone: no environment, no values.
            if let Some(guard) = &program.simple_guard {
                if guard.holds(sips_role, &text) {
                    enabled.push((index, Vars::default()));
                }
                continue;
            }
            // `direct_at` admitted the method only if every transition that may take it is.
            debug_assert!(program.direct);
            let mut vars = Vars::default();
            for l in &program.lets {
                // The direct view never asks for a lock (it answers `Ok`).
                let v = eval(l, &mut env, &vars).unwrap_or(Value::Null);
                vars.push(v);
            }
            if eval(&program.guard, &mut env, &vars) == Ok(Value::Bool(true)) {
                enabled.push((index, vars));
            }
        }
        let outcome = if enabled.len() > 1 {
            Outcome::Ambiguous(enabled.iter().map(|(i, _)| compiled.transition(*i).name.name.clone()).collect())
        } else if let Some((index, vars)) = enabled.pop() {
            let program = compiled.program(index);
            let mut needed = SortedSet::new();
            match &program.simple_navs {
                Some(navs) => sips_navs(env.ctx, compiled, env.reads, event.session, navs, &mut needed),
                None => {
                    for nav in program.handles.iter().chain(&program.moves) {
                        let _ = nav_value(nav, &mut env, &vars, Some(&mut needed));
                    }
                }
            }
            if let Some(id) = event.session {
                needed.insert(key(id));
                if let Some(h) = holder {
                    needed.insert(key(h));
                }
            }
            Outcome::Run(Chosen { transition: index, vars, needed, holder })
        } else {
            Outcome::Absorb
        };
        if env.escaped {
            *p = Prediction::empty();
            return false;
        }
        self.direct_outcome(p, outcome)
    }

    /// Completes a direct prediction with its outcome: the keys to acquire are those of the
    /// sessions it read and those the handles traverse, as `predict` has them.
    fn direct_outcome(&self, p: &mut Prediction, outcome: Outcome) -> bool {
        p.keys.extend(p.reads.wanted().map(key));
        if let Outcome::Run(Chosen { needed, .. }) = &outcome {
            p.keys.extend(needed.iter().copied());
        }
        p.outcome = outcome;
        p.direct = true;
        self.stats.direct.fetch_add(1, Relaxed);
        true
    }

    /// Compares a kept direct prediction with the general evaluator under the locks: with the
    /// outcome a locked evaluation reaches (transition, `let` values, sessions needed, state
    /// holder), and with what the general prediction would read and ask for now (the sessions
    /// recorded, and the keys to lock).
    fn verify(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>, p: &Prediction) {
        let (general, _) = self.evaluate(ctx, neg);
        let mut again = Prediction::empty();
        self.predict(ctx, neg, &mut again);
        let predicted = &p.outcome;
        let same_outcome = |a: &Outcome, b: &Outcome| match (a, b) {
            (Outcome::Absorb, Outcome::Absorb) => true,
            (Outcome::Ambiguous(a), Outcome::Ambiguous(b)) => a == b,
            (Outcome::Run(a), Outcome::Run(b)) => {
                a.transition == b.transition && a.vars == b.vars && a.needed == b.needed && a.holder == b.holder
            }
            _ => false,
        };
        let same = same_outcome(predicted, &general)
            && same_outcome(predicted, &again.outcome)
            && p.keys == again.keys
            && p.reads.recorded() == again.reads.recorded();
        if !same {
            self.stats.direct_mismatches.fetch_add(1, Relaxed);
            tracing::error!(service = %self.name, method = neg.event.method(), direct = %describe(predicted), general = %describe(&general),
                direct_keys = ?p.keys.iter().collect::<Vec<_>>(), general_keys = ?again.keys.iter().collect::<Vec<_>>(),
                direct_reads = ?p.reads.recorded(), general_reads = ?again.reads.recorded(),
                "the direct prediction differs from the general evaluator's");
        }
    }

    /// Runs the arm with access to the dynamic contract's sessions (`needed`: what the handles
    /// traverse, and the state holders) — not to sessions only the guard looked at.
    fn run(&self, ctx: &mut Context<'_>, neg: &Negotiation<'_>, chosen: Chosen, reads: &Reads) {
        self.run_with(ctx, neg, chosen.transition, &chosen.vars, chosen.holder, &chosen.needed, reads);
    }

    /// [`Self::run`] with the chosen transition in parts: `allowed` is what the arm may touch
    /// (the fast path passes what it holds, which is the same set).
    #[allow(clippy::too_many_arguments)]
    fn run_with(
        &self,
        ctx: &mut Context<'_>,
        neg: &Negotiation<'_>,
        transition: usize,
        vars: &Vars,
        holder: Option<SessionId>,
        allowed: &SortedSet<Key>,
        reads: &Reads,
    ) {
        // A negotiation that never waited ends within the event that began it (the same
        // time): no subtraction then.
        let now = ctx.now();
        let negotiated = if now == neg.started { Duration::ZERO } else { now.saturating_duration_since(neg.started) };
        let t = self.compiled.transition(transition);
        // The arm's wall-clock time is sampled: two clock reads per transition were a visible
        // share of the engine's cost per message (decision 0004), and the container times
        // every handler call anyway.
        let started = neg.ticket.is_multiple_of(HANDLER_TIME_SAMPLE).then(Instant::now);
        let mut actions = Actions::new();
        let mut tr = Transition::new(ctx, &self.compiled, &neg.event, allowed, reads, &t.lets, vars, &mut actions);
        let result = self.handler.do_transition(self.arms[transition], &mut tr);
        let done = tr.finish();
        let stats = &self.stats.transitions[transition];
        match result {
            Ok(()) => {
                let cells = Cells { reads, created: &done.created_cells };
                self.commit_state(ctx, neg, transition, vars, holder, &done, &cells);
                apply(ctx, &neg.event, &mut actions, &cells);
                self.finish_executions(ctx, neg, transition, vars, done.created_sips, &cells);
                stats.count.fetch_add(1, Relaxed);
            }
            Err(e) => self.failed(ctx, &neg.event, transition, e, done.created_apps),
        }
        // Shared counters: touched only when there is something to add.
        if neg.backoffs != 0 {
            stats.backoffs.fetch_add(neg.backoffs, Relaxed);
        }
        if !negotiated.is_zero() {
            stats.negotiation_ns.fetch_add(negotiated.as_nanos() as u64, Relaxed);
        }
        if let Some(started) = started {
            stats.handler_ns.fetch_add(started.elapsed().as_nanos() as u64 * HANDLER_TIME_SAMPLE, Relaxed);
        }
        self.release_all(ctx, neg);
    }

    /// A transition whose arm failed: nothing it sent goes out, the application sessions it
    /// created go. Out of line: the logging is most of `run_with`'s code otherwise.
    #[cold]
    #[inline(never)]
    fn failed(
        &self,
        ctx: &mut Context<'_>,
        event: &Event<'_>,
        transition: usize,
        e: HandlerError,
        created_apps: crate::transition::Created<AppSessionId>,
    ) {
        let t = self.compiled.transition(transition);
        tracing::warn!(service = %self.name, transition = %t.name.name, error = %e, "transition failed; nothing sent but a 500");
        self.stats.transitions[transition].failures.fetch_add(1, Relaxed);
        if let Some(req) = event.request() {
            ctx.respond_failed(&req);
        }
        for app in created_apps {
            ctx.invalidate(app);
        }
    }

    /// Sets the state of this execution and of those the transition `moves`.
    #[allow(clippy::too_many_arguments)]
    fn commit_state(
        &self,
        ctx: &mut Context<'_>,
        neg: &Negotiation<'_>,
        transition: usize,
        vars: &Vars,
        evaluated: Option<SessionId>,
        done: &crate::transition::Done,
        cells: &Cells<'_>,
    ) {
        let t = self.compiled.transition(transition);
        let program = self.compiled.program(transition);
        let stays = t.stays;
        let sips = neg.event.session.or(done.created_sips);
        // A session that holds its execution's state still does (roles never change), and one
        // that keeps it via a `once` attribute still names the holder evaluation found: no
        // look-up then.
        let holder = match (neg.event.session, evaluated) {
            (Some(s), Some(h)) if s == h || self.compiled.fixed_holders => Some(h),
            _ => sips.and_then(|s| self.holder(ctx, s, cells)),
        };
        // The state holders whose state this commit writes (and with it their memo), or ends.
        let mut stated: [Option<SessionId>; 4] = [None; 4];
        if let (Some(holder), false) = (holder, stays) {
            // A final state on the message's own session is not written: `finish_executions`
            // ends that execution next, still under this negotiation's locks, and its sessions
            // leave the store. Whoever reads the old state meanwhile (without the lock) acts
            // on it only once it holds the lock, and then finds the session gone.
            if !(program.to_final && Some(holder) == sips) {
                set_state(ctx, &self.compiled, cells, holder, &t.to.name, program.to_state);
            }
            stated[0] = Some(holder);
        }
        for (i, (mv, index)) in t.moves.iter().zip(&program.move_states).enumerate() {
            if let Some(s) = self.move_target(ctx, neg, transition, i, vars, cells) {
                if let Some(holder) = self.holder(ctx, s, cells) {
                    set_state(ctx, &self.compiled, cells, holder, &mv.to.name, *index);
                    if let Some(free) = stated.iter_mut().find(|h| h.is_none()) {
                        *free = Some(holder);
                    }
                }
            }
        }
        // The arm's writes made the memos of the sessions it wrote stale: set again where no
        // state was written (a `same` transition's, a peer's), else the executions' next
        // messages would leave the fast path for good (only a commit sets a memo).
        for &id in done.wrote.iter().flatten() {
            if !stated.contains(&Some(id)) {
                with_session(ctx, cells, id, |s| refresh_memo(&self.compiled, s));
            }
        }
    }

    /// The session move `i` of `transition` targets, read after the arm ran: directly for a
    /// handle of a simple form (`msg.sips`, `msg.sips.NAME`, a payload `v`, `v.NAME`), else
    /// by evaluating its navigation. The sessions it reads are held.
    fn move_target(
        &self,
        ctx: &mut Context<'_>,
        neg: &Negotiation<'_>,
        transition: usize,
        i: usize,
        vars: &Vars,
        cells: &Cells<'_>,
    ) -> Option<SessionId> {
        let program = self.compiled.program(transition);
        let at = program.handles.len() + i;
        let simple = match (&program.simple_navs, &program.payload) {
            (Some(navs), _) => navs.get(at).copied().map(PayloadNav::Sips),
            (None, Some(p)) => p.navs.get(at).copied(),
            (None, None) => None,
        };
        let slots = &self.compiled.slots;
        let attr = |ctx: &mut Context<'_>, id: SessionId, slot: usize| {
            with_session(ctx, cells, id, |s| s.attributes.get_session(&slots[slot])).flatten()
        };
        match simple {
            Some(PayloadNav::Sips(SimpleNav::Sips)) => neg.event.session,
            Some(PayloadNav::Sips(SimpleNav::SipsAttr(slot))) => attr(ctx, neg.event.session?, slot),
            Some(PayloadNav::Var) => vars.session(0),
            Some(PayloadNav::VarAttr(slot)) => attr(ctx, vars.session(0)?, slot),
            None => {
                let mut fresh = Reads::default();
                let mut env = self.env(ctx, neg, false, &mut fresh);
                match nav_value(program.moves.get(i)?, &mut env, vars, None) {
                    Ok(Value::Session(s)) => Some(s),
                    _ => None,
                }
            }
        }
    }

    /// Executions that reached a final state are over: their application sessions go.
    fn finish_executions(
        &self,
        ctx: &mut Context<'_>,
        neg: &Negotiation<'_>,
        transition: usize,
        vars: &Vars,
        created: Option<SessionId>,
        cells: &Cells<'_>,
    ) {
        let p = self.compiled.program(transition);
        // Most transitions end nothing: decided without comparing state names.
        if !p.to_final && !p.moves_final {
            return;
        }
        let t = self.compiled.transition(transition);
        let mut ended: smallvec::SmallVec<[SessionId; 2]> = smallvec::SmallVec::new();
        if p.to_final {
            ended.extend(neg.event.session.or(created));
        }
        for (i, _) in t.moves.iter().enumerate().filter(|(_, m)| self.compiled.finals.contains(&m.to.name)) {
            ended.extend(self.move_target(ctx, neg, transition, i, vars, cells));
        }
        for s in ended {
            if let Some(app) = with_session(ctx, cells, s, |s| s.app) {
                ctx.invalidate(app);
            }
        }
    }

    /// The session carrying the execution state of `session`'s execution.
    fn holder(&self, ctx: &mut Context<'_>, session: SessionId, cells: &Cells<'_>) -> Option<SessionId> {
        with_session(ctx, cells, session, |s| {
            let info = self.compiled.role(s.attributes.get_str(ROLE)?)?;
            if info.holds_state {
                return Some(session);
            }
            s.attributes.get_session(info.state_via.as_deref()?)
        })?
    }
}

/// One negotiation in this many has its arm timed (`tandem_transition_handler_seconds_total`
/// counts each timed one this many times).
const HANDLER_TIME_SAMPLE: u64 = 8;

pub(crate) const ROLE: &str = "@role";
pub(crate) const STATE: &str = "@state";

/// What a fast-path arm may touch: what the handles traverse and the state holder, which is
/// what the negotiation holds but for `unneeded`, a session whose state only a guard read.
fn fast_needed(held: &SortedSet<Key>, unneeded: Key) -> SortedSet<Key> {
    let mut needed = held.clone();
    needed.remove(&unneeded);
    needed
}

/// Runs `f` on session `id`, through the cell evaluation kept if it reached the session or the
/// arm created it (a session removed from the store since reads as missing, as a look-up would
/// find it), else through a store look-up.
fn with_session<R>(ctx: &mut Context<'_>, cells: &Cells<'_>, id: SessionId, f: impl FnOnce(&mut SipSession) -> R) -> Option<R> {
    match cells.cell(id) {
        Some(cell) => Some(cell.lock()).filter(|s| !s.is_removed()).map(|mut s| f(&mut s)),
        None => ctx.with_session(id, |_, s| f(s)),
    }
}

fn set_state(ctx: &mut Context<'_>, compiled: &Compiled, cells: &Cells<'_>, holder: SessionId, state: &str, index: Option<usize>) {
    with_session(ctx, cells, holder, |s| set_state_on(compiled, s, state, index));
}

/// Writes `state` (at `index`, see `Program::to_state`) on a state holder.
fn set_state_on(compiled: &Compiled, s: &mut SipSession, state: &str, index: Option<usize>) {
    // A session removed meanwhile keeps no state (as if looked up and not found).
    if s.is_removed() {
        return;
    }
    // The role, as a memo still valid gives it (the arm changed none of the session's
    // attributes), else by its name.
    let memo_role = holder_memo(s.attributes.memo()).map(memo_role);
    s.attributes.set_str(STATE, state);
    // The next message's prediction then reads the role and state as indices (`direct_peek`),
    // until an attribute of the session changes.
    let role = memo_role.or_else(|| holding_role(compiled, s));
    if let Some(memo) = role.and_then(|r| state_memo(r, index)) {
        s.attributes.set_memo(memo);
    }
}

/// The index of `s`'s role, read by name, if that role holds its execution's state.
fn holding_role(compiled: &Compiled, s: &SipSession) -> Option<usize> {
    s.attributes.get_str(ROLE).and_then(|r| compiled.role_index(r)).filter(|r| compiled.role_at(*r).holds_state)
}

/// A state holder's memo again after an arm changed its attributes without changing its state
/// (a `same` transition): the role and state read by name, as they are now. Nothing for a
/// session whose memo holds, one that keeps no state of its own, or one without a state yet.
fn refresh_memo(compiled: &Compiled, s: &mut SipSession) {
    if s.is_removed() || s.attributes.memo().is_some() {
        return;
    }
    let Some(role) = holding_role(compiled, s) else { return };
    let Some(place) = s.attributes.get_str(STATE).map(|state| compiled.place_of(state)) else { return };
    if let Some(memo) = state_memo(role, place) {
        s.attributes.set_memo(memo);
    }
}

/// A state-holding session's role and state as one word (`Attributes::memo`): the role's index
/// in the low 16 bits; above it, the state's place among the states transitions leave (plus
/// one; below `VIA`, the code of a `via_memo`), or `NO_CANDIDATES` for a state none leaves.
/// Never 0.
fn state_memo(role: usize, index: Option<usize>) -> Option<u32> {
    let role = memo_role_bits(role)?;
    let code = match index {
        Some(i) => u32::try_from(i + 1).ok().filter(|c| *c < VIA)?,
        None => NO_CANDIDATES,
    };
    Some(code << 16 | role)
}

const NO_CANDIDATES: u32 = 0xFFFF;

/// The code (above the role) of a memo on a session whose role keeps its execution's state on
/// another session (`state via`): the role's index, and no state (`via_memo`). No state's code.
const VIA: u32 = 0xFFFE;

/// The memo of a session whose role (at `role`) keeps its state `via` another session, set with
/// the role (`Transition::set_role_and_attrs`): the fast path then reads the role without
/// comparing names, until an attribute of the session changes.
pub(crate) fn via_memo(role: usize) -> Option<u32> {
    Some(VIA << 16 | memo_role_bits(role)?)
}

/// A role index as a memo's low 16 bits (None: too large for them).
fn memo_role_bits(role: usize) -> Option<u32> {
    u32::try_from(role).ok().filter(|r| *r <= 0xFFFF)
}

/// Whether `memo` is a `via_memo` (a role's index, no state).
fn is_via_memo(memo: u32) -> bool {
    memo >> 16 == VIA
}

/// `memo` if it is a state holder's (`state_memo`), not a `via_memo`.
fn holder_memo(memo: Option<u32>) -> Option<u32> {
    memo.filter(|m| !is_via_memo(*m))
}

/// The role index a memo from `state_memo` holds.
fn memo_role(memo: u32) -> usize {
    (memo & 0xFFFF) as usize
}

/// The role index and the candidates of the state a memo from `state_memo` names.
fn memo_candidates(compiled: &Compiled, memo: u32) -> (usize, &[usize]) {
    let candidates = memo_place(memo).map_or(&[][..], |at| compiled.candidates_at(at));
    (memo_role(memo), candidates)
}

/// The state's place a memo from `state_memo` names (None: a state no transition leaves).
fn memo_place(memo: u32) -> Option<usize> {
    match memo >> 16 {
        NO_CANDIDATES => None,
        code => (code as usize).checked_sub(1),
    }
}

/// Candidate transitions of the current state, their guards, and the handles of the one
/// enabled.
fn select<H: Handler>(env: &mut EvalEnv<'_, '_, H>) -> Result<Outcome, Need> {
    let compiled = &env.engine.compiled;
    let sips = env.message(&NavRoot::MsgSips);
    let state = match &sips {
        Value::NewSession => compiled.initial_text.clone(),
        Value::Session(id) => match env.session_step(*id, Step::State)? {
            Value::Str(s) => s,
            _ => return Ok(Outcome::Absorb),
        },
        _ => return Ok(Outcome::Absorb),
    };
    let mut enabled: smallvec::SmallVec<[(usize, Vars); 1]> = smallvec::SmallVec::new();
    let method = env.neg.event.method();
    for &index in compiled.candidates(&state) {
        let p = compiled.program(index);
        if !p.may_take(method) {
            continue;
        }
        let mut vars = Vars::default();
        for l in &p.lets {
            let v = eval(l, env, &vars)?;
            vars.push(v);
        }
        if eval(&p.guard, env, &vars)? == Value::Bool(true) {
            enabled.push((index, vars));
        }
    }
    if enabled.len() > 1 {
        return Ok(Outcome::Ambiguous(enabled.iter().map(|(i, _)| compiled.transition(*i).name.name.clone()).collect()));
    }
    let Some((index, vars)) = enabled.pop() else { return Ok(Outcome::Absorb) };
    let p = compiled.program(index);
    let mut traversed = SortedSet::new();
    for nav in p.handles.iter().chain(&p.moves) {
        nav_value(nav, env, &vars, Some(&mut traversed))?;
    }
    // The state holders written by the transition are needed too.
    let mut holder = None;
    if let Value::Session(id) = sips {
        traversed.insert(key(id));
        holder = state_holder(env, id)?;
        if let Some(h) = holder {
            traversed.insert(key(h));
        }
    }
    Ok(Outcome::Run(Chosen { transition: index, vars, needed: traversed, holder }))
}

fn state_holder<H: Handler>(env: &mut EvalEnv<'_, '_, H>, id: SessionId) -> Result<Option<SessionId>, Need> {
    let Some(Some(role)) = env.role_of(id)? else { return Ok(None) };
    let info = env.engine.compiled.role_at(role);
    if info.holds_state {
        return Ok(Some(id));
    }
    let Some(via) = info.state_via_slot else { return Ok(None) };
    Ok(match env.session_step(id, Step::Attr(via))? {
        Value::Session(h) => Some(h),
        _ => None,
    })
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Need(keys) => format!("need {} session(s)", keys.iter().count()),
        Outcome::Absorb => "absorb".to_string(),
        Outcome::Ambiguous(names) => format!("ambiguous {names:?}"),
        Outcome::Run(c) => format!("transition #{} over {} session(s), holder {:?}", c.transition, c.needed.iter().count(), c.holder),
    }
}

/// The sessions `msg.sips` and `msg.sips.NAME` handles and moves traverse, recorded as
/// `nav_value` over `DirectEnv` records them: the message's session, and each attribute's
/// session (the message's session read once, under one lock, for all of them).
/// Nothing for an initial request (its session does not exist yet).
fn sips_navs(
    ctx: &mut Context<'_>,
    compiled: &Compiled,
    reads: &mut Reads,
    sips: Option<SessionId>,
    navs: &[SimpleNav],
    needed: &mut SortedSet<Key>,
) {
    let Some(id) = sips else { return };
    needed.insert(key(id));
    if !navs.iter().any(|n| matches!(n, SimpleNav::SipsAttr(_))) {
        return;
    }
    let read = reads.touch_with(ctx, id, |s| {
        let mut found: smallvec::SmallVec<[SessionId; 4]> = smallvec::SmallVec::new();
        for nav in navs {
            if let SimpleNav::SipsAttr(slot) = *nav {
                if let Some(tandem_container::AttrValue::Session(target)) = s.attributes.get(&compiled.slots[slot]) {
                    found.push(*target);
                }
            }
        }
        found
    });
    // `direct_state` read the message's session and marked it wanted already (the general
    // path's `read_wanted` marks it again).
    if let Some((_, found)) = read {
        for target in found {
            needed.insert(key(target));
        }
    }
}

/// The candidates of a state, `msg.sips.role`, and the state holder.
type SipsFound<'c> = (&'c [usize], Option<Option<usize>>, Option<SessionId>);

/// What the direct path found of a message's session, as `select` and `state_holder` would
/// in a prediction: the candidates of its execution's state, `msg.sips.role`, and the state
/// holder. None: the message enables nothing (no such session, no or an undeclared role, a
/// state that is not a text, a broken `state via` chain).
fn direct_state<'c>(ctx: &mut Context<'_>, compiled: &'c Compiled, reads: &mut Reads, id: SessionId) -> Option<SipsFound<'c>> {
    let (role, next) = peek_wanted(ctx, compiled, reads, id)?;
    let (candidates, holder) = match next {
        Peeked::State(candidates) => (candidates?, id),
        Peeked::Via(holder) => {
            let holder = holder?;
            (holder_state(ctx, compiled, reads, holder)?, holder)
        }
    };
    Some((candidates, Some(Some(role)), Some(holder)))
}

/// The state of the execution whose state `id` is meant to hold (the end of a `state via`
/// hop), read as `session_step(id, State)` would in a prediction: its candidates.
fn holder_state<'c>(ctx: &mut Context<'_>, compiled: &'c Compiled, reads: &mut Reads, id: SessionId) -> Option<&'c [usize]> {
    let mut at = id;
    // `state via` chains are followed as the general evaluator follows them; a contract has
    // a handful of roles, so a chain longer than that is a loop.
    for _ in 0..=compiled.machine.roles.len() {
        match peek_wanted(ctx, compiled, reads, at)?.1 {
            Peeked::State(candidates) => return candidates,
            Peeked::Via(next) => at = next?,
        }
    }
    None
}

/// One step of `session_step(id, State)` in a prediction: the session is read (recorded in
/// `reads`), and, if its role is set, marked wanted; None when it is missing or its role is
/// unset or undeclared (the state is then null).
fn peek_wanted<'c>(ctx: &mut Context<'_>, compiled: &'c Compiled, reads: &mut Reads, id: SessionId) -> Option<(usize, Peeked<'c>)> {
    let (entry, (role_set, role, next)) = reads.touch_with(ctx, id, |s| direct_peek(compiled, s))?;
    if !role_set {
        return None;
    }
    reads.want(entry);
    Some((role?, next))
}

/// Where a session's execution state is: its own (`holds_state`), as the candidates of that
/// state (None: a stored state that is not a text), or the session `state via` names.
enum Peeked<'c> {
    State(Option<&'c [usize]>),
    Via(Option<SessionId>),
}

/// One locked look at a session: whether its role is set (a text), the role's index, and
/// where its state is. An undeclared role (or none) answers `Via(None)`.
fn direct_peek<'c>(compiled: &'c Compiled, s: &SipSession) -> (bool, Option<usize>, Peeked<'c>) {
    // Set with the state at the last commit, and valid while no attribute changed since: the
    // role and state the names below would give.
    if let Some(memo) = holder_memo(s.attributes.memo()) {
        let (role, candidates) = memo_candidates(compiled, memo);
        return (true, Some(role), Peeked::State(Some(candidates)));
    }
    let Some((role, at)) = state_at(compiled, s) else { return (false, None, Peeked::Via(None)) };
    let next = match at {
        StateAt::Own(None) => Peeked::State(Some(compiled.initial_candidates())),
        StateAt::Own(Some(v)) => Peeked::State(attr_text(v).map(|t| compiled.candidates(&t))),
        StateAt::Via(v) => Peeked::Via(match v {
            Some(tandem_container::AttrValue::Session(id)) => Some(*id),
            _ => None,
        }),
    };
    (true, role, next)
}

/// Where a session's execution state is, as stored: its own state attribute (a role that holds
/// it), or its `state via` attribute (any other role; none for a role without one, or an
/// undeclared role).
enum StateAt<'s> {
    Own(Option<&'s tandem_container::AttrValue>),
    Via(Option<&'s tandem_container::AttrValue>),
}

/// The role and state of a session, read under its lock as evaluation reads them: None when
/// its role is not a text; else the role's index (None: undeclared) and where the state is.
/// Shared by the direct path's first look (`direct_peek`) and its `state` steps (`state_step`).
fn state_at<'s>(compiled: &Compiled, s: &'s SipSession) -> Option<(Option<usize>, StateAt<'s>)> {
    let text = s.attributes.get(ROLE).and_then(attr_text)?;
    let Some(role) = compiled.role_index(&text) else { return Some((None, StateAt::Via(None))) };
    let info = compiled.role_at(role);
    let at = if info.holds_state {
        StateAt::Own(s.attributes.get(STATE))
    } else {
        StateAt::Via(info.state_via_slot.and_then(|slot| s.attributes.get(&compiled.slots[slot])))
    };
    Some((Some(role), at))
}

/// A stored value as text, the way evaluation reads it (`reads::to_value`): a text, or bytes
/// read as UTF-8 (lossy); None for any other value.
fn attr_text(v: &tandem_container::AttrValue) -> Option<std::borrow::Cow<'_, str>> {
    match v {
        tandem_container::AttrValue::Str(t) => Some(std::borrow::Cow::Borrowed(t.as_str())),
        tandem_container::AttrValue::Bytes(b) => Some(String::from_utf8_lossy(b)),
        _ => None,
    }
}

/// The direct path's view of the message and the sessions: each session a step reaches is
/// read under its lock for the one value asked (no slot is copied), and recorded in `reads`
/// (marked wanted) exactly where `EvalEnv` in prediction mode records and marks it. An
/// application session's attribute is not for it: `escaped` says so and the general path is
/// taken.
struct DirectEnv<'e, 'a> {
    ctx: &'e mut Context<'a>,
    compiled: &'e Compiled,
    reads: &'e mut Reads,
    event: &'e Event<'e>,
    /// `msg.sips.role`, found with the message's session's state.
    sips_role: Option<Option<usize>>,
    /// `session(msg.payl)`, once evaluated.
    payload: Option<Value>,
    escaped: bool,
}

/// What a `state` step finds in a session with a role set: the value (its own state, or
/// null), or the session its `state via` attribute holds.
enum StateStep {
    Value(Value),
    Via(Value),
}

impl Env for DirectEnv<'_, '_> {
    fn message(&self, root: &NavRoot) -> Value {
        message_value(self.event, root)
    }

    fn method(&self) -> &str {
        self.event.method()
    }

    fn app_attr(&mut self, _: &str) -> Result<Value, Need> {
        self.escaped = true;
        Ok(Value::Null)
    }

    fn session_step(&mut self, id: SessionId, step: Step) -> Result<Value, Need> {
        let compiled = self.compiled;
        match step {
            Step::Role => Ok(self.read_wanted(id, |s| to_value(s.attributes.get(ROLE)))),
            Step::Attr(slot) => {
                let name = &compiled.slots[slot];
                Ok(self.read_wanted(id, |s| to_value(s.attributes.get(name))))
            }
            Step::State => {
                // As `EvalEnv`: a session without a role (text) has no state and is not
                // wanted; with one, it is wanted whatever it holds.
                let Some((entry, read)) = self.reads.touch_with(self.ctx, id, |s| state_step(compiled, s)) else {
                    return Ok(Value::Null);
                };
                let Some(read) = read else { return Ok(Value::Null) };
                self.reads.want(entry);
                match read {
                    StateStep::Value(v) => Ok(v),
                    StateStep::Via(Value::Session(holder)) => self.session_step(holder, Step::State),
                    StateStep::Via(_) => Ok(Value::Null),
                }
            }
        }
    }

    fn sips_role(&mut self) -> Result<Option<Option<usize>>, Need> {
        Ok(self.sips_role)
    }

    fn session_of(&mut self, text: &str) -> Value {
        match text.parse::<SessionId>() {
            Ok(id) if self.reads.present(self.ctx, id) => Value::Session(id),
            _ => Value::Null,
        }
    }

    fn payload_session(&mut self) -> Value {
        // The message is fixed and its session was recorded the first time: transitions that
        // bind the same `let p = session(msg.payl)` (a MESSAGE's T6 and T7) parse it once.
        if let Some(v) = &self.payload {
            return v.clone();
        }
        let event = self.event;
        let v = payload_session(event, |text| self.session_of(text));
        self.payload = Some(v.clone());
        v
    }

    fn initial_state(&self) -> Value {
        Value::Str(self.compiled.initial_text.clone())
    }
}

impl DirectEnv<'_, '_> {
    /// One value of session `id`, read under its lock; the session is recorded and marked
    /// wanted (null, not wanted, if it does not exist).
    fn read_wanted(&mut self, id: SessionId, read: impl FnOnce(&SipSession) -> Value) -> Value {
        match self.reads.touch_with(self.ctx, id, read) {
            Some((entry, v)) => {
                self.reads.want(entry);
                v
            }
            None => Value::Null,
        }
    }
}

/// A `state` step on a session, as `EvalEnv::session_step` takes it in a prediction: None
/// when its role is not a text (state null, session not wanted); else the state of a role
/// that holds it (the initial state while none is stored), or the session a `state via`
/// attribute names (null for an undeclared role or a role with neither).
fn state_step(compiled: &Compiled, s: &SipSession) -> Option<StateStep> {
    let (_, at) = state_at(compiled, s)?;
    Some(match at {
        StateAt::Own(v) => StateStep::Value(match to_value(v) {
            Value::Null => Value::Str(compiled.initial_text.clone()),
            v => v,
        }),
        StateAt::Via(v) => StateStep::Via(to_value(v)),
    })
}

/// `session(msg.payl)` through an environment's `session_of`: the body's text, trimmed, without
/// making a text value of it first (lossy when it is not UTF-8).
fn payload_session(event: &Event<'_>, mut session_of: impl FnMut(&str) -> Value) -> Value {
    let body = event.body();
    match std::str::from_utf8(&body) {
        Ok(text) => session_of(text.trim()),
        Err(_) => session_of(&event.payload()),
    }
}

/// `msg.method`, `msg.status`, `msg.cseq`, `msg.payl`, `msg.timer`, `msg.sips` of an event.
fn message_value(e: &Event<'_>, root: &NavRoot) -> Value {
    match root {
        NavRoot::MsgMethod => Value::Str(SmolStr::new(e.method())),
        NavRoot::MsgStatus => Value::Int(i64::from(e.status())),
        NavRoot::MsgCseq => Value::Str(SmolStr::new(e.cseq_method())),
        NavRoot::MsgPayload => Value::Str(SmolStr::new(e.payload())),
        NavRoot::MsgTimer => Value::Str(SmolStr::new(e.timer())),
        NavRoot::MsgSips => match e.session {
            Some(id) => Value::Session(id),
            None if matches!(e.trigger, Trigger::Request { .. }) => Value::NewSession,
            None => Value::Null,
        },
        NavRoot::MsgApps | NavRoot::Var(_) => Value::Null,
    }
}

struct EvalEnv<'e, 'a, H: Handler> {
    engine: &'e MachineService<H>,
    ctx: &'e mut Context<'a>,
    neg: &'e Negotiation<'e>,
    /// Prediction mode: read everything without locks and note every session read
    /// ([`Reads::want`]).
    predict: bool,
    /// What this evaluation read.
    reads: &'e mut Reads,
}

impl<H: Handler> EvalEnv<'_, '_, H> {
    fn readable(&mut self, entry: usize, id: SessionId, role: Option<usize>, slot: usize, set: bool) -> bool {
        if self.predict {
            // Its key is added to the prediction's once evaluation ends (`Reads::wanted`).
            self.reads.want(entry);
            return true;
        }
        match self.engine.negotiator {
            Negotiator::Global => true,
            _ if self.neg.held.contains(&key(id)) => true,
            Negotiator::SingleAssign => set && self.engine.compiled.is_once_slot(role, slot),
            Negotiator::Ordered => false,
        }
    }
}

impl<H: Handler> EvalEnv<'_, '_, H> {
    /// `id.role` as [`Env::sips_role`] gives it (the same reads, readability and record as
    /// `session_step(id, Step::Role)`).
    fn role_of(&mut self, id: SessionId) -> Result<Option<Option<usize>>, Need> {
        let compiled = &self.engine.compiled;
        let Some(entry) = self.reads.load(self.ctx, compiled, id) else { return Ok(None) };
        let role = self.reads.role(entry);
        let (role_set, null) = match self.reads.value(entry, ROLE_SLOT) {
            Value::Str(_) => (true, false),
            Value::Null => (false, true),
            _ => (false, false),
        };
        if !self.readable(entry, id, role, ROLE_SLOT, role_set) {
            return Err(Need(id));
        }
        // A stored role that is not a text is no declared role (and not null).
        Ok((!null).then_some(role))
    }
}

impl<H: Handler> Env for EvalEnv<'_, '_, H> {
    fn message(&self, root: &NavRoot) -> Value {
        message_value(&self.neg.event, root)
    }

    fn method(&self) -> &str {
        self.neg.event.method()
    }

    fn app_attr(&mut self, name: &str) -> Result<Value, Need> {
        let e = &self.neg.event;
        let app = e.app.or_else(|| e.session.and_then(|s| self.ctx.with_session(s, |_, s| s.app)));
        let Some(app) = app else { return Ok(Value::Null) };
        self.reads.read_unrecorded();
        Ok(self.ctx.with_app(app, |a| to_value(a.attributes.get(name))).unwrap_or(Value::Null))
    }

    fn session_step(&mut self, id: SessionId, step: Step) -> Result<Value, Need> {
        let compiled = &self.engine.compiled;
        let Some(entry) = self.reads.load(self.ctx, compiled, id) else { return Ok(Value::Null) };
        let role = self.reads.role(entry);
        // Every step depends on the role (readability, where the state is): it is recorded.
        let role_set = matches!(self.reads.value(entry, ROLE_SLOT), Value::Str(_));
        match step {
            Step::Role => {
                if self.readable(entry, id, role, ROLE_SLOT, role_set) {
                    Ok(self.reads.value(entry, ROLE_SLOT).clone())
                } else {
                    Err(Need(id))
                }
            }
            Step::State => {
                if !role_set {
                    return Ok(Value::Null);
                }
                if !self.readable(entry, id, role, ROLE_SLOT, true) {
                    return Err(Need(id));
                }
                let Some(info) = role.map(|r| compiled.role_at(r)) else { return Ok(Value::Null) };
                if info.holds_state {
                    // The state changes: only its holder's lock makes it stable.
                    if self.predict || self.engine.negotiator == Negotiator::Global || self.neg.held.contains(&key(id)) {
                        return Ok(match self.reads.value(entry, STATE_SLOT) {
                            Value::Null => Value::Str(compiled.initial_text.clone()),
                            v => v.clone(),
                        });
                    }
                    return Err(Need(id));
                }
                let Some(via) = info.state_via_slot else { return Ok(Value::Null) };
                match self.session_step(id, Step::Attr(via))? {
                    Value::Session(holder) => self.session_step(holder, Step::State),
                    _ => Ok(Value::Null),
                }
            }
            Step::Attr(slot) => {
                let value = self.reads.value(entry, slot).clone();
                if self.readable(entry, id, role, slot, value != Value::Null) {
                    Ok(value)
                } else {
                    Err(Need(id))
                }
            }
        }
    }

    fn sips_role(&mut self) -> Result<Option<Option<usize>>, Need> {
        match self.neg.event.session {
            Some(id) => self.role_of(id),
            // A new session (or none) has no role.
            None => Ok(None),
        }
    }

    fn session_of(&mut self, text: &str) -> Value {
        match text.parse::<SessionId>() {
            Ok(id) if self.reads.exists(self.ctx, &self.engine.compiled, id) => Value::Session(id),
            _ => Value::Null,
        }
    }

    fn payload_session(&mut self) -> Value {
        let neg = self.neg;
        payload_session(&neg.event, |text| self.session_of(text))
    }

    fn initial_state(&self) -> Value {
        Value::Str(self.engine.compiled.initial_text.clone())
    }
}

/// A request that enables no transition still needs an answer, or its sender retransmits it
/// for 32 s: OPTIONS (a keep-alive ping) gets 200, anything else 481 inside a dialog (the call
/// is not in a state that takes it) or 405 outside one.
pub(crate) fn answer_absorbed(ctx: &mut Context<'_>, event: &Event<'_>) {
    // A request without a transaction (an ACK) is left unanswered there.
    if let Some(req) = event.request() {
        answer_absorbed_request(ctx, &req);
    }
}

/// [`answer_absorbed`] for a request as the container delivered it.
pub(crate) fn answer_absorbed_request(ctx: &mut Context<'_>, req: &Request<'_>) {
    if req.tx.is_none() {
        return;
    }
    let status = match req.msg.method() {
        Some(tandem_sip::Method::Ack) | None => return,
        Some(tandem_sip::Method::Options) => 200,
        Some(_) if req.session.is_some() => 481,
        Some(_) => 405,
    };
    ctx.respond_with(req, status, &[("Warning", "399 tandem \"no transition of the service's machine accepts this request now\"")], None);
}

/// Sends what the arm sent, now that the transition commits. Sends on a session owned by
/// another executor are posted there.
// Drains `actions` in place: moving the inline vector (by value, then into its iterator) was
// two copies of a few hundred bytes per transition.
fn apply(ctx: &mut Context<'_>, event: &Event<'_>, actions: &mut Actions, cells: &Cells<'_>) {
    for action in actions.drain(..) {
        match action {
            Action::Respond { status, headers, body } => {
                if let Some(req) = event.request() {
                    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                    ctx.respond_with(&req, status, &headers, body.as_ref().map(crate::transition::Body::parts));
                }
            }
            Action::OnSession { session, op } => {
                // One look-up: the session's home, and the action itself when it is this
                // executor's.
                // Borrowed from the reads if evaluation kept it or the arm created it (no
                // reference count traffic).
                let found;
                let cell = match cells.cell(session) {
                    Some(cell) => cell,
                    None => match ctx.session(session) {
                        Some(cell) => {
                            found = cell;
                            &found
                        }
                        None => continue,
                    },
                };
                let mut s = cell.lock();
                if s.is_removed() {
                    continue;
                }
                // In the order transitions commit (they still hold their sessions here), at
                // the session's home: a send posted from another executor is not overtaken
                // by a later one, nor lost if the execution ends before it gets there.
                let ticket = s.reserve_action();
                ctx.act_in_order(cell, &mut s, ticket, move |ctx: &mut Context<'_>, s: &mut SipSession| op.apply_on(ctx, s));
            }
        }
    }
}

impl<H: Handler> Service for MachineService<H> {
    fn user_agent(&self) -> Option<&UaProfile> {
        self.ua.as_ref()
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        self.start(ctx, Event::from_request(req));
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        self.start(ctx, Event::from_response(session, &response));
    }

    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, name: &'static str) {
        let session = ctx.with_app(app, |a| a.sessions.first().copied()).flatten();
        self.start(ctx, Event { trigger: Trigger::Timer { name }, session, app: Some(app) });
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, session: SessionId) {
        self.start(ctx, Event { trigger: Trigger::Cancelled, session: Some(session), app: None });
    }

    fn metrics_text(&self) -> String {
        self.stats.render(&self.name, &self.names)
    }
}
