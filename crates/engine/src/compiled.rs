//! A contract prepared for evaluation: transitions indexed by source state, roles' state
//! access and single-assignment attributes, and every guard, `let`, handle and move compiled
//! into a [`Program`] whose names are resolved once: attribute names to slots (indices into
//! [`Compiled::slots`]), `let` variables to indices, names and strings to values.

use crate::eval::Value;
use crate::event::Event;
use smol_str::SmolStr;
use tandem_contract::ast::{self, AttrType, CmpOp, Expr, Nav, NavRoot, StateKind};

/// The slot of the built-in `role` attribute (stored as `@role`).
pub(crate) const ROLE_SLOT: usize = 0;
/// The slot of the execution state (stored as `@state` on the state holder).
pub(crate) const STATE_SLOT: usize = 1;

pub struct Compiled {
    pub machine: ast::Machine,
    pub initial: String,
    /// `initial`, as a value.
    pub(crate) initial_text: SmolStr,
    pub finals: Names<()>,
    by_state: Names<Vec<usize>>,
    roles: Names<RoleInfo>,
    /// The stored names of the attributes evaluation can read, by slot: `@role`, `@state`, then
    /// every attribute a role declares or a navigation names.
    pub(crate) slots: Vec<String>,
    /// `short_key` of each slot's name, to find a name's slot without comparing strings.
    slot_keys: Vec<(usize, u64)>,
    /// Each role's name (by index), as a value.
    role_texts: Vec<SmolStr>,
    /// `slot_keys` by a perfect hash, if one was found (else `slot` scans `slot_keys`).
    slot_table: Option<SlotTable>,
    /// One per transition, in the machine's order.
    programs: Vec<Program>,
    /// Per method some transition names (`msg.method == X`): whether every transition that
    /// may take a message of it is `direct`.
    direct_methods: Vec<(SmolStr, bool)>,
    /// The same for any other method: whether every transition that names no method is direct.
    direct_otherwise: bool,
    /// [`Self::method_index`] of the name of each method code (`Event::method_code`).
    method_index_by_code: [Option<usize>; crate::event::METHOD_CODES],
    /// Every slot a [`SimpleNav::SipsAttr`] of some transition reads, once each: the engine's
    /// fast path reads them all in its one look at the message's session, before it knows
    /// which transition is enabled.
    pub(crate) sips_nav_slots: Vec<usize>,
    /// The same for the candidates of one state that may take one method: by place (see
    /// [`Compiled::candidates_at`]), then by method index ([`Compiled::method_index`]; the
    /// last for any other method). The fast path reads only these when the message's session
    /// names its state (most messages need none or one: scanning a session's attributes for
    /// every slot was the hottest loop of its look at the session).
    sips_nav_slots_at: Vec<Vec<Vec<usize>>>,
    /// What selection decides from the state, the method and `msg.sips.role` alone, by
    /// [`Compiled::selection_at`]'s index: most messages need no guard evaluated, only this
    /// look-up (the dating contract decides 17 of its 20 transitions so).
    selections: Vec<Selection>,
    /// Every slot a [`PayloadNav::VarAttr`] reads: the fast path reads them in its one look
    /// at the payload's session.
    pub(crate) payload_nav_slots: Vec<usize>,
    /// The initial state's place for [`Compiled::candidates_at`] (None: no transition leaves
    /// it), for a request that starts an execution.
    initial_at: Option<usize>,
    /// Every role that keeps its state on another session names it by a `once` attribute: a
    /// state holder evaluation found is still the holder when the transition commits.
    pub(crate) fixed_holders: bool,
}

/// A contract's few names (states, roles, attributes) and what they map to. Looked up several
/// times per message: a scan over short strings is cheaper than hashing them.
pub struct Names<V>(Vec<(String, V)>);

impl<V> Names<V> {
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|(n, _)| n == name)
    }

    fn entry_or_insert_with(&mut self, name: &str, make: impl FnOnce() -> V) -> &mut V {
        let at = match self.position(name) {
            Some(at) => at,
            None => {
                self.0.push((name.to_string(), make()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }
}

impl<V> FromIterator<(String, V)> for Names<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut names = Names(Vec::new());
        for (n, v) in iter {
            match names.0.iter_mut().find(|(m, _)| *m == n) {
                Some((_, old)) => *old = v,
                None => names.0.push((n, v)),
            }
        }
        names
    }
}

pub struct RoleInfo {
    pub holds_state: bool,
    pub state_via: Option<String>,
    /// The slot of `state_via`.
    pub(crate) state_via_slot: Option<usize>,
    /// Single-assignment attributes (`once`), by slot.
    pub(crate) once: Vec<usize>,
}

/// One step of a navigation after its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The built-in `role`.
    Role,
    /// The built-in `state` (the state of the session's execution).
    State,
    /// A stored attribute, by slot.
    Attr(usize),
}

#[derive(Debug)]
pub(crate) enum Root {
    /// `msg.method`, `msg.status`, `msg.payl`, `msg.timer`, `msg.sips`.
    Msg(NavRoot),
    /// `msg.apps.NAME`: an attribute of the application session.
    App(String),
    /// A `let` variable, by index (None: not bound, null).
    Var(Option<usize>),
    /// `msg.apps` alone: null.
    Null,
}

#[derive(Debug)]
pub(crate) struct CNav {
    pub root: Root,
    pub path: Vec<Step>,
}

#[derive(Debug)]
pub(crate) enum CExpr {
    /// A name, string, integer, boolean or null.
    Const(Value),
    /// `msg.method`.
    Method,
    Nav(CNav),
    /// `session(msg.payl)`.
    PayloadSession,
    /// `msg.sips.role == R` (`!=` when `negate`), R a declared role (by index) or null
    /// (`None`): decided on the role's index, without making or comparing texts.
    SipsRole {
        role: Option<usize>,
        negate: bool,
    },
    SessionOf(Box<CExpr>),
    Not(Box<CExpr>),
    And(Box<CExpr>, Box<CExpr>),
    Or(Box<CExpr>, Box<CExpr>),
    Cmp(Box<CExpr>, CmpOp, Box<CExpr>),
}

/// A transition compiled: its `let`s (variable `i` is `lets[i]`), guard, handles and the
/// targets of its moves (in `moves` order).
pub(crate) struct Program {
    /// The methods (`msg.method`) the guard can hold for, when it says (e.g. `msg.method == BYE
    /// && ...`): a message with another method skips the transition without evaluating its
    /// `let`s (they cannot make a false guard true).
    pub methods: Option<Vec<SmolStr>>,
    pub lets: Vec<CExpr>,
    /// The guard, for messages `may_take` admits (see `after_method_test`).
    pub guard: CExpr,
    pub handles: Vec<CNav>,
    pub moves: Vec<CNav>,
    /// Whether the transition's target state is final (its execution ends).
    pub to_final: bool,
    /// Whether any of its `moves` goes to a final state.
    pub moves_final: bool,
    /// The target state's place for [`Compiled::candidates_at`] (None: no transition leaves
    /// it), and the same for each move's target: found once here, not at every commit.
    pub to_state: Option<usize>,
    pub move_states: Vec<Option<usize>>,
    /// Whether nothing of it reads an application session's attribute (`msg.apps.NAME`):
    /// the engine then predicts it reading each session for the one value asked, without
    /// copying the sessions' slots (see `MachineService::predict_direct`).
    pub direct: bool,
    /// `methods` as bits of [`Compiled::method_index`] (None: any method, or too many names).
    pub method_bits: Option<u64>,
    /// The guard as a [`Simple`] test, when it has no `let`s and reads nothing but the
    /// message and `msg.sips.role`.
    pub simple_guard: Option<Simple>,
    /// The handles, then the moves, as [`SimpleNav`]s, when each is `msg.sips` or one stored
    /// attribute of it.
    pub simple_navs: Option<Vec<SimpleNav>>,
    /// The guard, handles and moves of a transition whose one `let` is `session(msg.payl)`
    /// (the dating contract's T6 and T7), in the fast path's terms: see [`PayloadProgram`].
    pub payload: Option<PayloadProgram>,
}

/// A transition `let v = session(msg.payl)` whose guard reads nothing but the message,
/// `msg.sips.role`, whether `v` is null, whether it is `msg.sips` or the session one of its
/// attributes names, and `v.state`; and whose handles and moves are `msg.sips`, `v`, or one
/// attribute of either. The engine's fast path decides it from the memo of `v`'s session
/// (`MachineService::fast_select`).
#[derive(Debug, PartialEq)]
pub(crate) struct PayloadProgram {
    pub guard: PayloadTest,
    pub navs: Vec<PayloadNav>,
}

/// A [`PayloadProgram`]'s guard: the same truth as `eval` gives.
#[derive(Debug, PartialEq)]
pub(crate) enum PayloadTest {
    /// A part that reads only the message and `msg.sips.role`.
    Msg(Simple),
    /// `v == null` (`!=` when `negate`).
    Null {
        negate: bool,
    },
    /// `v == msg.sips` (`slot` None) or `v == msg.sips.NAME` (by slot).
    Sips {
        slot: Option<usize>,
        negate: bool,
    },
    /// `v.state == NAME`: the named state's place ([`Compiled::candidates_at`]; None when no
    /// transition leaves it, or it is no state).
    State {
        place: Option<usize>,
        negate: bool,
    },
    Not(Box<PayloadTest>),
    And(Box<PayloadTest>, Box<PayloadTest>),
    Or(Box<PayloadTest>, Box<PayloadTest>),
}

/// What a [`PayloadTest`] compares `v` with: null, a session, or anything else (a new
/// session, a stored value that is no session), which no session and not null equals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Operand {
    Null,
    Session(tandem_container::SessionId),
    Other,
}

/// What a [`PayloadTest`] reads of the message's session and of `v`.
pub(crate) struct PayloadView<'a> {
    /// `v`: None when null.
    pub var: Option<tandem_container::SessionId>,
    /// `v.state` as a place: None when unknown (no memo: the test cannot be decided here);
    /// `Some(None)` for a state no transition leaves.
    pub var_place: Option<Option<usize>>,
    /// `msg.sips`.
    pub sips: Operand,
    /// `msg.sips.NAME` by slot, for the slots in [`Compiled::sips_nav_slots`] (absent: null).
    pub sips_attrs: &'a [(usize, Operand)],
}

impl PayloadTest {
    fn of(expr: &CExpr, places: &Names<Vec<usize>>) -> Option<PayloadTest> {
        if let Some(simple) = Simple::of(expr) {
            return Some(PayloadTest::Msg(simple));
        }
        let is_var = |e: &CExpr, step: Option<Step>| match e {
            CExpr::Nav(CNav { root: Root::Var(Some(0)), path }) => path.as_slice() == step.as_slice(),
            _ => false,
        };
        Some(match expr {
            CExpr::Not(e) => PayloadTest::Not(Box::new(PayloadTest::of(e, places)?)),
            CExpr::And(a, b) => PayloadTest::And(Box::new(PayloadTest::of(a, places)?), Box::new(PayloadTest::of(b, places)?)),
            CExpr::Or(a, b) => PayloadTest::Or(Box::new(PayloadTest::of(a, places)?), Box::new(PayloadTest::of(b, places)?)),
            CExpr::Cmp(a, op @ (CmpOp::Eq | CmpOp::Ne), b) => {
                let negate = *op == CmpOp::Ne;
                let (var, other) = if is_var(a, None) || is_var(a, Some(Step::State)) { (&**a, &**b) } else { (&**b, &**a) };
                match other {
                    CExpr::Const(Value::Null) if is_var(var, None) => PayloadTest::Null { negate },
                    CExpr::Nav(CNav { root: Root::Msg(NavRoot::MsgSips), path }) if is_var(var, None) => match path.as_slice() {
                        [] => PayloadTest::Sips { slot: None, negate },
                        [Step::Attr(slot)] => PayloadTest::Sips { slot: Some(*slot), negate },
                        _ => return None,
                    },
                    CExpr::Const(Value::Str(state)) if is_var(var, Some(Step::State)) => {
                        PayloadTest::State { place: places.position(state), negate }
                    }
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    /// The guard's truth, None when it cannot be decided from `facts` (`v.state` read with its
    /// place unknown, or equal to neither place). `state_read`: set when `v.state` was read
    /// (the evaluator then wants `v`'s lock), in the evaluator's order (short-circuit).
    pub(crate) fn holds<'t>(
        &self,
        sips_role: Option<Option<usize>>,
        text: &impl Fn(MsgText) -> &'t str,
        facts: &PayloadView<'_>,
        state_read: &mut bool,
    ) -> Option<bool> {
        Some(match self {
            PayloadTest::Msg(simple) => simple.holds(sips_role, text),
            PayloadTest::Null { negate } => facts.var.is_none() != *negate,
            PayloadTest::Sips { slot, negate } => {
                let other = match slot {
                    Some(slot) => facts.sips_attrs.iter().find(|(s, _)| s == slot).map_or(Operand::Null, |(_, o)| *o),
                    None => facts.sips,
                };
                let equal = match (facts.var, other) {
                    (None, Operand::Null) => true,
                    (Some(v), Operand::Session(o)) => v == o,
                    _ => false,
                };
                equal != *negate
            }
            PayloadTest::State { place, negate } => {
                // A null `v` has a null state, which equals no name.
                if facts.var.is_none() {
                    return Some(*negate);
                }
                *state_read = true;
                let equal = match (facts.var_place?, place) {
                    (Some(at), Some(named)) => at == *named,
                    // Two states no transition leaves: the places cannot tell them apart.
                    (None, None) => return None,
                    _ => false,
                };
                equal != *negate
            }
            PayloadTest::Not(e) => !e.holds(sips_role, text, facts, state_read)?,
            PayloadTest::And(a, b) => a.holds(sips_role, text, facts, state_read)? && b.holds(sips_role, text, facts, state_read)?,
            PayloadTest::Or(a, b) => a.holds(sips_role, text, facts, state_read)? || b.holds(sips_role, text, facts, state_read)?,
        })
    }
}

impl PayloadProgram {
    /// The `msg.sips` attributes it reads: those its handles and moves traverse, and those
    /// its guard compares `v` with.
    fn sips_navs(&self) -> impl Iterator<Item = SimpleNav> + '_ {
        let mut compared = Vec::new();
        self.guard.sips_slots(&mut compared);
        self.navs
            .iter()
            .filter_map(|n| match n {
                PayloadNav::Sips(nav) => Some(*nav),
                _ => None,
            })
            .chain(compared.into_iter().map(SimpleNav::SipsAttr))
    }
}

impl PayloadTest {
    fn sips_slots(&self, out: &mut Vec<usize>) {
        match self {
            PayloadTest::Sips { slot: Some(slot), .. } => out.push(*slot),
            PayloadTest::Not(e) => e.sips_slots(out),
            PayloadTest::And(a, b) | PayloadTest::Or(a, b) => {
                a.sips_slots(out);
                b.sips_slots(out);
            }
            _ => {}
        }
    }
}

/// A [`PayloadProgram`]'s handle or move target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PayloadNav {
    /// `msg.sips` or `msg.sips.NAME`.
    Sips(SimpleNav),
    /// `v`.
    Var,
    /// `v.NAME`, by slot.
    VarAttr(usize),
}

impl PayloadNav {
    fn of(nav: &CNav) -> Option<PayloadNav> {
        match (&nav.root, nav.path.as_slice()) {
            (Root::Var(Some(0)), []) => Some(PayloadNav::Var),
            (Root::Var(Some(0)), [Step::Attr(slot)]) => Some(PayloadNav::VarAttr(*slot)),
            _ => SimpleNav::of(nav).map(PayloadNav::Sips),
        }
    }
}

/// A guard that reads nothing but the message and `msg.sips.role`, evaluated without an
/// environment or values: the same truth as `eval` gives (every node is a boolean there too).
#[derive(Debug, PartialEq)]
pub(crate) enum Simple {
    Bool(bool),
    /// As [`CExpr::SipsRole`].
    SipsRole {
        role: Option<usize>,
        negate: bool,
    },
    /// `msg.method`, `msg.cseq` or `msg.timer` `==` (`!=` when `negate`) a text.
    Text {
        of: MsgText,
        text: SmolStr,
        negate: bool,
    },
    Not(Box<Simple>),
    And(Box<Simple>, Box<Simple>),
    Or(Box<Simple>, Box<Simple>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum MsgText {
    Method,
    Cseq,
    Timer,
}

/// A handle or move target that is the message's session (`msg.sips`) or the session one of
/// its stored attributes names (`msg.sips.NAME`, by slot).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SimpleNav {
    Sips,
    SipsAttr(usize),
}

impl Simple {
    fn of(expr: &CExpr) -> Option<Simple> {
        Some(match expr {
            CExpr::Const(Value::Bool(b)) => Simple::Bool(*b),
            CExpr::SipsRole { role, negate } => Simple::SipsRole { role: *role, negate: *negate },
            CExpr::Not(e) => Simple::Not(Box::new(Simple::of(e)?)),
            CExpr::And(a, b) => Simple::And(Box::new(Simple::of(a)?), Box::new(Simple::of(b)?)),
            CExpr::Or(a, b) => Simple::Or(Box::new(Simple::of(a)?), Box::new(Simple::of(b)?)),
            CExpr::Cmp(a, op @ (CmpOp::Eq | CmpOp::Ne), b) => {
                let (of, text) = match (msg_text(a), &**b, msg_text(b), &**a) {
                    (Some(of), CExpr::Const(Value::Str(t)), _, _) | (_, _, Some(of), CExpr::Const(Value::Str(t))) => (of, t.clone()),
                    _ => return None,
                };
                Simple::Text { of, text, negate: *op == CmpOp::Ne }
            }
            _ => return None,
        })
    }

    /// The guard's truth for a message whose `msg.method`, `msg.cseq` and `msg.timer` are
    /// `text` of each, and whose `msg.sips.role` is `sips_role` (as
    /// [`crate::eval::Env::sips_role`] answers it).
    pub(crate) fn holds<'t>(&self, sips_role: Option<Option<usize>>, text: &impl Fn(MsgText) -> &'t str) -> bool {
        match self {
            Simple::Bool(b) => *b,
            Simple::SipsRole { role, negate } => crate::eval::sips_role_test(sips_role, *role, *negate),
            Simple::Text { of, text: t, negate } => (text(*of) == t.as_str()) != *negate,
            Simple::Not(e) => !e.holds(sips_role, text),
            Simple::And(a, b) => a.holds(sips_role, text) && b.holds(sips_role, text),
            Simple::Or(a, b) => a.holds(sips_role, text) || b.holds(sips_role, text),
        }
    }

    /// Whether it reads nothing of the message but its method (and `msg.sips.role`): its
    /// truth is then fixed by the state's candidates, the method and the role.
    fn reads_only_method(&self) -> bool {
        match self {
            Simple::Bool(_) | Simple::SipsRole { .. } => true,
            Simple::Text { of, .. } => *of == MsgText::Method,
            Simple::Not(e) => e.reads_only_method(),
            Simple::And(a, b) | Simple::Or(a, b) => a.reads_only_method() && b.reads_only_method(),
        }
    }
}

/// The fast path's selection for one state, method and `msg.sips.role`, decided when
/// compiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Selection {
    /// No transition is enabled.
    Nothing,
    /// This transition alone is enabled (its guard simple, its handles `msg.sips` or its
    /// attributes).
    One(usize),
    /// A guard reads more than the method and role (a payload, `msg.cseq`), is not simple, or
    /// several hold: evaluated per message.
    Evaluate,
}

/// `msg.method`, `msg.cseq` or `msg.timer` (no steps after it).
fn msg_text(expr: &CExpr) -> Option<MsgText> {
    match expr {
        CExpr::Method => Some(MsgText::Method),
        CExpr::Nav(CNav { root: Root::Msg(root), path }) if path.is_empty() => match root {
            NavRoot::MsgMethod => Some(MsgText::Method),
            NavRoot::MsgCseq => Some(MsgText::Cseq),
            NavRoot::MsgTimer => Some(MsgText::Timer),
            _ => None,
        },
        _ => None,
    }
}

impl SimpleNav {
    fn of(nav: &CNav) -> Option<SimpleNav> {
        match (&nav.root, nav.path.as_slice()) {
            (Root::Msg(NavRoot::MsgSips), []) => Some(SimpleNav::Sips),
            (Root::Msg(NavRoot::MsgSips), [Step::Attr(slot)]) => Some(SimpleNav::SipsAttr(*slot)),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("the contract has no initial state")]
    NoInitialState,
    #[error("the handler has no arm for transition {0}")]
    NoArm(String),
}

/// Names to slots, while compiling.
struct Slots(Vec<String>);

impl Slots {
    fn slot(&mut self, stored: &str) -> usize {
        let at = match self.0.iter().position(|n| n == stored) {
            Some(at) => at,
            None => {
                self.0.push(stored.to_string());
                self.0.len() - 1
            }
        };
        at
    }

    fn step(&mut self, name: &str) -> Step {
        match name {
            "role" => Step::Role,
            "state" => Step::State,
            other => Step::Attr(self.slot(other)),
        }
    }
}

struct Compiler<'s> {
    slots: &'s mut Slots,
    roles: &'s Names<RoleInfo>,
    /// The names of the `let`s bound so far, in order.
    lets: Vec<&'s str>,
}

impl<'s> Compiler<'s> {
    fn var(&self, name: &str) -> Option<usize> {
        self.lets.iter().rposition(|n| *n == name)
    }

    fn nav(&mut self, nav: &Nav) -> CNav {
        let mut path = nav.path.iter();
        let root = match &nav.root {
            NavRoot::Var(v) => Root::Var(self.var(&v.name)),
            NavRoot::MsgApps => match path.next() {
                Some(first) => Root::App(first.name.clone()),
                None => Root::Null,
            },
            root => Root::Msg(root.clone()),
        };
        CNav { root, path: path.map(|s| self.slots.step(&s.name)).collect() }
    }

    /// `msg.sips.role == R` / `!= R`, R a declared role or null, as a [`CExpr::SipsRole`].
    fn role_test(&self, a: &Expr, op: CmpOp, b: &Expr) -> Option<CExpr> {
        let negate = match op {
            CmpOp::Eq => false,
            CmpOp::Ne => true,
            _ => return None,
        };
        let (nav, other) = match (a, b) {
            (Expr::Nav(nav), other) | (other, Expr::Nav(nav)) => (nav, other),
            _ => return None,
        };
        if !matches!(nav.root, NavRoot::MsgSips) || nav.path.len() != 1 || nav.path[0].name != "role" {
            return None;
        }
        let role = match other {
            Expr::Null(_) => None,
            // A name the contract does not declare as a role can still be a stored text: left
            // to the general comparison.
            Expr::Name(i) => Some(self.roles.position(&i.name)?),
            Expr::Str(s, _) => Some(self.roles.position(s)?),
            _ => return None,
        };
        Some(CExpr::SipsRole { role, negate })
    }

    fn expr(&mut self, expr: &Expr) -> CExpr {
        if let Expr::Cmp(a, op, b) = expr {
            if let Some(test) = self.role_test(a, *op, b) {
                return test;
            }
        }
        match expr {
            Expr::Nav(nav) if nav.path.is_empty() && matches!(nav.root, NavRoot::MsgMethod) => CExpr::Method,
            Expr::Nav(nav) => CExpr::Nav(self.nav(nav)),
            Expr::SessionOf(inner, _) => match &**inner {
                Expr::Nav(nav) if matches!(nav.root, NavRoot::MsgPayload) && nav.path.is_empty() => CExpr::PayloadSession,
                inner => CExpr::SessionOf(Box::new(self.expr(inner))),
            },
            Expr::Name(i) => CExpr::Const(Value::Str(SmolStr::new(&i.name))),
            Expr::Str(s, _) => CExpr::Const(Value::Str(SmolStr::new(s))),
            Expr::Int(i, _) => CExpr::Const(Value::Int(*i)),
            Expr::Bool(b, _) => CExpr::Const(Value::Bool(*b)),
            Expr::Null(_) => CExpr::Const(Value::Null),
            Expr::Not(e, _) => CExpr::Not(Box::new(self.expr(e))),
            Expr::And(a, b) => CExpr::And(Box::new(self.expr(a)), Box::new(self.expr(b))),
            Expr::Or(a, b) => CExpr::Or(Box::new(self.expr(a)), Box::new(self.expr(b))),
            Expr::Cmp(a, op, b) => CExpr::Cmp(Box::new(self.expr(a)), *op, Box::new(self.expr(b))),
        }
    }
}

/// A name's length and (up to 8 bytes) the bytes it starts and ends with: equal keys mean
/// equal names up to 8 bytes long (attribute names usually are), and must be compared in full
/// beyond. Fixed-size reads only (no copy of a variable length).
fn short_key(name: &str) -> (usize, u64) {
    let b = name.as_bytes();
    let n = b.len();
    let body = match *b {
        [] => 0,
        [x, ..] if n < 4 => u64::from(x) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16,
        [b0, b1, b2, b3, ..] => {
            let last = [b[n - 4], b[n - 3], b[n - 2], b[n - 1]];
            u64::from(u32::from_le_bytes([b0, b1, b2, b3])) | u64::from(u32::from_le_bytes(last)) << 32
        }
        _ => 0,
    };
    (n, body)
}

/// The slots by their names' `short_key`: one multiplication and one comparison find a stored
/// name's only candidate slot (`Reads::load` looks every attribute of a session up).
struct SlotTable {
    mult: u64,
    shift: u32,
    /// `slot + 1` at each key's hash; 0: no slot.
    at: Vec<u16>,
}

impl SlotTable {
    /// A table without collisions between `keys` (None if none was found, e.g. two long names
    /// with equal keys, or too many slots).
    fn new(keys: &[(usize, u64)]) -> Option<SlotTable> {
        let size = (keys.len() * 4).next_power_of_two().max(16);
        let shift = 64 - size.trailing_zeros();
        let slots = u16::try_from(keys.len()).ok()?;
        let mut mult: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..1000 {
            let mut at = vec![0u16; size];
            let mut free = true;
            for (slot, key) in (1..=slots).zip(keys) {
                let h = Self::hash(mult, shift, *key);
                if at[h] != 0 {
                    free = false;
                    break;
                }
                at[h] = slot;
            }
            if free {
                return Some(SlotTable { mult, shift, at });
            }
            mult = mult.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(0x9e37_79b9_7f4a_7c15) | 1;
        }
        None
    }

    fn hash(mult: u64, shift: u32, (len, body): (usize, u64)) -> usize {
        // The top bits of the product: less than `at.len()` by construction.
        ((body ^ (len as u64).rotate_right(8)).wrapping_mul(mult) >> shift) as usize
    }

    #[inline]
    fn get(&self, key: (usize, u64)) -> Option<usize> {
        match self.at.get(Self::hash(self.mult, self.shift, key)) {
            Some(&slot) if slot != 0 => Some(usize::from(slot) - 1),
            _ => None,
        }
    }
}

/// The methods `expr` can only be true for, if it tells.
fn methods(expr: &CExpr) -> Option<Vec<SmolStr>> {
    match expr {
        CExpr::Cmp(a, CmpOp::Eq, b) => match (&**a, &**b) {
            (CExpr::Method, CExpr::Const(Value::Str(m))) | (CExpr::Const(Value::Str(m)), CExpr::Method) => Some(vec![m.clone()]),
            _ => None,
        },
        CExpr::And(a, b) => methods(a).or_else(|| methods(b)),
        CExpr::Or(a, b) => {
            let mut all = methods(a)?;
            all.extend(methods(b)?);
            Some(all)
        }
        _ => None,
    }
}

/// Whether `expr` reads an attribute of the application session (`msg.apps.NAME`).
fn reads_app(expr: &CExpr) -> bool {
    match expr {
        CExpr::Const(_) | CExpr::Method | CExpr::SipsRole { .. } | CExpr::PayloadSession => false,
        CExpr::Nav(nav) => nav_reads_app(nav),
        CExpr::SessionOf(e) | CExpr::Not(e) => reads_app(e),
        CExpr::And(a, b) | CExpr::Or(a, b) | CExpr::Cmp(a, _, b) => reads_app(a) || reads_app(b),
    }
}

fn nav_reads_app(nav: &CNav) -> bool {
    matches!(nav.root, Root::App(_))
}

/// For [`Compiled::direct_for`]: per named method, whether all transitions that may take it
/// are direct; and whether those that name no method (they may take any) are.
fn direct_methods(programs: &[Program]) -> (Vec<(SmolStr, bool)>, bool) {
    let otherwise = programs.iter().filter(|p| p.methods.is_none()).all(|p| p.direct);
    let mut by_method: Vec<(SmolStr, bool)> = Vec::new();
    for p in programs {
        for m in p.methods.iter().flatten() {
            match by_method.iter_mut().find(|(n, _)| n == m) {
                Some((_, direct)) => *direct &= p.direct,
                None => by_method.push((m.clone(), p.direct && otherwise)),
            }
        }
    }
    (by_method, otherwise)
}

/// Whether `expr` only compares `msg.method` with names (`==`, joined by `||`).
fn method_only(expr: &CExpr) -> bool {
    match expr {
        CExpr::Cmp(a, CmpOp::Eq, b) => {
            matches!((&**a, &**b), (CExpr::Method, CExpr::Const(Value::Str(_))) | (CExpr::Const(Value::Str(_)), CExpr::Method))
        }
        CExpr::Or(a, b) => method_only(a) && method_only(b),
        _ => false,
    }
}

/// The guard to evaluate once [`Program::may_take`] held: a leading method test (`msg.method
/// == X && ...`) is what `methods` was taken from, so it holds then and is dropped.
fn after_method_test(guard: CExpr) -> CExpr {
    match guard {
        CExpr::And(a, b) if method_only(&a) => *b,
        guard => guard,
    }
}

/// The role's column in [`Compiled::selection_at`]'s table: a role's index, or `roles` for no
/// session (a session without a role: none, evaluated).
fn selection_role(roles: usize, sips_role: Option<Option<usize>>) -> Option<usize> {
    match sips_role {
        None => Some(roles),
        Some(Some(role)) => Some(role),
        Some(None) => None,
    }
}

/// [`Compiled::selections`]: for each state some transition leaves, each method a guard names
/// and each role (then no session), the candidates' simple guards evaluated as the fast path
/// would for such a message.
fn selections(by_state: &Names<Vec<usize>>, programs: &[Program], methods: &[(SmolStr, bool)], roles: usize) -> Vec<Selection> {
    let mut table = Vec::with_capacity(by_state.0.len() * methods.len() * (roles + 1));
    for (_, candidates) in &by_state.0 {
        for (m, (name, _)) in methods.iter().enumerate() {
            for role in 0..=roles {
                let sips_role = if role == roles { None } else { Some(Some(role)) };
                let text = |of: MsgText| match of {
                    MsgText::Method => name.as_str(),
                    // Not read: `reads_only_method` was checked first.
                    MsgText::Cseq | MsgText::Timer => "",
                };
                let mut selection = Selection::Nothing;
                for &c in candidates {
                    let p = &programs[c];
                    if !p.takes(Some(m), name) {
                        continue;
                    }
                    let enabled = match (&p.simple_guard, &p.simple_navs) {
                        (Some(guard), Some(_)) if guard.reads_only_method() => guard.holds(sips_role, &text),
                        _ => {
                            selection = Selection::Evaluate;
                            break;
                        }
                    };
                    if enabled && selection != Selection::Nothing {
                        selection = Selection::Evaluate;
                        break;
                    }
                    if enabled {
                        selection = Selection::One(c);
                    }
                }
                table.push(selection);
            }
        }
    }
    table
}

impl Program {
    /// The `msg.sips` attributes its guard, handles and moves read (a simple or payload
    /// program; none for another).
    fn sips_attr_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.simple_navs.iter().flatten().copied().chain(self.payload.iter().flat_map(PayloadProgram::sips_navs)).filter_map(|n| match n {
            SimpleNav::SipsAttr(slot) => Some(slot),
            SimpleNav::Sips => None,
        })
    }

    /// Whether the guard may hold for a message of this method.
    pub fn may_take(&self, method: &str) -> bool {
        self.methods.as_ref().is_none_or(|ms| ms.iter().any(|m| m == method))
    }

    /// [`Self::may_take`] for a method found once by [`Compiled::method_index`] (`name` is
    /// its text), without comparing texts.
    pub(crate) fn takes(&self, method: Option<usize>, name: &str) -> bool {
        match (self.method_bits, method) {
            (Some(bits), Some(i)) => bits >> i & 1 == 1,
            // Every name `methods` holds has an index: another method is none of them.
            (Some(_), None) => false,
            (None, _) => self.may_take(name),
        }
    }
}

impl Compiled {
    pub fn new(machine: ast::Machine) -> Result<Compiled, CompileError> {
        let initial = machine.initial_state().ok_or(CompileError::NoInitialState)?.name.name.clone();
        let finals: Names<()> = machine.states.iter().filter(|s| s.kind == StateKind::Final).map(|s| (s.name.name.clone(), ())).collect();
        let mut by_state: Names<Vec<usize>> = Names(Vec::new());
        for (i, t) in machine.transitions.iter().enumerate() {
            for from in &t.from {
                by_state.entry_or_insert_with(&from.name, Vec::new).push(i);
            }
        }
        let mut slots = Slots(vec![crate::engine::ROLE.to_string(), crate::engine::STATE.to_string()]);
        let roles = machine
            .roles
            .iter()
            .map(|r| {
                let once = r.attributes.iter().filter(|a| a.once).map(|a| slots.slot(&a.name.name)).collect();
                for a in &r.attributes {
                    slots.slot(&a.name.name);
                }
                let state_via = r.state_via.as_ref().map(|v| v.name.clone());
                let state_via_slot = state_via.as_deref().map(|v| slots.slot(v));
                (r.name.name.clone(), RoleInfo { holds_state: r.holds_state, state_via, state_via_slot, once })
            })
            .collect();
        let mut programs: Vec<Program> = machine
            .transitions
            .iter()
            .map(|t| {
                let mut c = Compiler { slots: &mut slots, roles: &roles, lets: Vec::new() };
                let mut lets = Vec::new();
                for l in &t.lets {
                    lets.push(c.expr(&l.value));
                    c.lets.push(&l.name.name);
                }
                let guard = c.expr(&t.guard);
                let methods = methods(&guard);
                let guard = if methods.is_some() { after_method_test(guard) } else { guard };
                let handles: Vec<CNav> = t.handles.iter().map(|h| c.nav(h)).collect();
                let moves: Vec<CNav> = t.moves.iter().map(|m| c.nav(&m.target)).collect();
                let direct = !lets.iter().chain([&guard]).any(reads_app) && !handles.iter().chain(&moves).any(nav_reads_app);
                let simple_guard = if lets.is_empty() { Simple::of(&guard) } else { None };
                let simple_navs = handles.iter().chain(&moves).map(SimpleNav::of).collect();
                let payload = match lets.as_slice() {
                    [CExpr::PayloadSession] => PayloadTest::of(&guard, &by_state).and_then(|guard| {
                        let navs = handles.iter().chain(&moves).map(PayloadNav::of).collect::<Option<Vec<_>>>()?;
                        Some(PayloadProgram { guard, navs })
                    }),
                    _ => None,
                };
                Program {
                    methods,
                    lets,
                    guard,
                    handles,
                    moves,
                    to_final: finals.contains(&t.to.name),
                    moves_final: t.moves.iter().any(|m| finals.contains(&m.to.name)),
                    to_state: by_state.position(&t.to.name),
                    move_states: t.moves.iter().map(|m| by_state.position(&m.to.name)).collect(),
                    direct,
                    method_bits: None,
                    simple_guard,
                    simple_navs,
                    payload,
                }
            })
            .collect();
        let (direct_methods, direct_otherwise) = direct_methods(&programs);
        if direct_methods.len() <= 64 {
            for p in &mut programs {
                p.method_bits = p.methods.as_ref().map(|ms| {
                    ms.iter().filter_map(|m| direct_methods.iter().position(|(n, _)| n == m)).fold(0u64, |bits, i| bits | 1 << i)
                });
            }
        }
        let method_index_by_code: [Option<usize>; crate::event::METHOD_CODES] =
            std::array::from_fn(|code| direct_methods.iter().position(|(n, _)| n == crate::event::method_code_name(code)));
        let slot_keys: Vec<(usize, u64)> = slots.0.iter().map(|n| short_key(n)).collect();
        let slot_table = SlotTable::new(&slot_keys);
        let role_texts = machine.roles.iter().map(|r| SmolStr::new(&r.name.name)).collect();
        let mut sips_nav_slots: Vec<usize> = programs.iter().flat_map(Program::sips_attr_slots).collect();
        sips_nav_slots.sort_unstable();
        sips_nav_slots.dedup();
        let sips_nav_slots_at = by_state
            .0
            .iter()
            .map(|(_, candidates)| {
                (0..=direct_methods.len())
                    .map(|m| {
                        let method = direct_methods.get(m).map(|(name, _)| (m, name));
                        let mut slots: Vec<usize> = candidates
                            .iter()
                            .map(|&c| &programs[c])
                            // Another method: what a program without method bits may take.
                            .filter(|p| method.map_or(p.method_bits.is_none(), |(m, name)| p.takes(Some(m), name)))
                            .flat_map(Program::sips_attr_slots)
                            .collect();
                        slots.sort_unstable();
                        slots.dedup();
                        slots
                    })
                    .collect()
            })
            .collect();
        let selections = selections(&by_state, &programs, &direct_methods, roles.0.len());
        let mut payload_nav_slots: Vec<usize> = programs
            .iter()
            .flat_map(|p| p.payload.iter().flat_map(|p| &p.navs))
            .filter_map(|n| match n {
                PayloadNav::VarAttr(slot) => Some(*slot),
                _ => None,
            })
            .collect();
        payload_nav_slots.sort_unstable();
        payload_nav_slots.dedup();
        let initial_at = by_state.position(&initial);
        let fixed_holders = roles.0.iter().all(|(_, r)| r.holds_state || r.state_via_slot.is_none_or(|slot| r.once.contains(&slot)));
        Ok(Compiled {
            fixed_holders,
            sips_nav_slots,
            sips_nav_slots_at,
            selections,
            payload_nav_slots,
            initial_at,
            initial_text: SmolStr::new(&initial),
            initial,
            finals,
            by_state,
            roles,
            slots: slots.0,
            slot_keys,
            role_texts,
            slot_table,
            programs,
            direct_methods,
            direct_otherwise,
            method_index_by_code,
            machine,
        })
    }

    /// Whether every transition that may take a message of `method` is `direct` (the engine
    /// asks [`Self::direct_at`] with the method's index).
    #[cfg(test)]
    pub(crate) fn direct_for(&self, method: &str) -> bool {
        self.direct_methods.iter().find(|(m, _)| m == method).map_or(self.direct_otherwise, |(_, direct)| *direct)
    }

    /// The index of `method` among the methods the contract's guards name (for
    /// [`Program::takes`] and [`Self::direct_at`]); None for any other method.
    pub(crate) fn method_index(&self, method: &str) -> Option<usize> {
        self.direct_methods.iter().position(|(m, _)| m == method)
    }

    /// [`Self::method_index`] of the event's [`Event::method`], found by its code when it has
    /// one (no text compared).
    pub(crate) fn event_method_index(&self, event: &Event<'_>) -> Option<usize> {
        match event.method_code() {
            Some(code) => self.method_index_by_code[code],
            None => self.method_index(event.method()),
        }
    }

    /// Whether every transition that may take a message of the method at `method` (from
    /// [`Self::method_index`]; None: a method no guard names) is `direct`.
    pub(crate) fn direct_at(&self, method: Option<usize>) -> bool {
        method.map_or(self.direct_otherwise, |i| self.direct_methods[i].1)
    }

    /// The initial state's place (None: no transition leaves it).
    pub(crate) fn initial_at(&self) -> Option<usize> {
        self.initial_at
    }

    /// The candidates of the initial state.
    pub(crate) fn initial_candidates(&self) -> &[usize] {
        self.initial_at.map_or(&[], |at| self.candidates_at(at))
    }

    /// The place of the state named `state` among the states transitions leave (None: no
    /// transition leaves it), as [`Program::to_state`] gives it.
    pub(crate) fn place_of(&self, state: &str) -> Option<usize> {
        self.by_state.position(state)
    }

    pub fn candidates(&self, state: &str) -> &[usize] {
        self.by_state.get(state).map_or(&[], Vec::as_slice)
    }

    /// The slots of [`Self::sips_nav_slots`] that the candidates of the state at `place` read
    /// for a message of the method at `method` ([`Self::event_method_index`]).
    pub(crate) fn sips_nav_slots_at(&self, place: usize, method: Option<usize>) -> &[usize] {
        let Some(by_method) = self.sips_nav_slots_at.get(place) else { return &[] };
        let at = method.unwrap_or(by_method.len().saturating_sub(1));
        by_method.get(at).map_or(&[], Vec::as_slice)
    }

    /// What selection decides, without evaluating, for a message of the method at `method`
    /// ([`Self::event_method_index`]) in the state at `place` whose `msg.sips.role` is
    /// `sips_role` (None: no session, an initial request).
    #[inline]
    pub(crate) fn selection_at(&self, place: usize, method: Option<usize>, sips_role: Option<Option<usize>>) -> Selection {
        let (Some(method), Some(role)) = (method, selection_role(self.roles.0.len(), sips_role)) else {
            return Selection::Evaluate;
        };
        let at = (place * self.direct_methods.len() + method) * (self.roles.0.len() + 1) + role;
        self.selections.get(at).copied().unwrap_or(Selection::Evaluate)
    }

    /// [`Self::selection_at`] for a state's place as a memo or [`Self::initial_at`] gives it
    /// (None: a state no transition leaves, where a message enables nothing).
    #[inline]
    pub(crate) fn selection_in(&self, place: Option<usize>, method: Option<usize>, sips_role: Option<Option<usize>>) -> Selection {
        place.map_or(Selection::Nothing, |at| self.selection_at(at, method, sips_role))
    }

    /// The candidates of the state at `index` (a place among the states some transition
    /// leaves: [`Program::to_state`], [`Program::move_states`]).
    pub(crate) fn candidates_at(&self, index: usize) -> &[usize] {
        self.by_state.0.get(index).map_or(&[], |(_, c)| c.as_slice())
    }

    pub fn role(&self, name: &str) -> Option<&RoleInfo> {
        self.roles.get(name)
    }

    /// The index of role `name` (for [`Self::role_at`]).
    pub(crate) fn role_index(&self, name: &str) -> Option<usize> {
        self.roles.position(name)
    }

    /// The name of the role at `index`, as a value.
    pub(crate) fn role_text(&self, index: usize) -> &SmolStr {
        &self.role_texts[index]
    }

    pub(crate) fn role_at(&self, index: usize) -> &RoleInfo {
        &self.roles.0[index].1
    }

    /// The slot of a stored attribute name, if evaluation can read it.
    #[inline]
    pub(crate) fn slot(&self, stored: &str) -> Option<usize> {
        let k = short_key(stored);
        let same = |slot: usize| self.slot_keys[slot] == k && (k.0 <= 8 || self.slots[slot] == stored);
        match &self.slot_table {
            Some(table) => table.get(k).filter(|&slot| same(slot)),
            None => (0..self.slots.len()).find(|&slot| same(slot)),
        }
    }

    /// Whether `attr` of a session playing `role` never changes once set.
    pub fn is_once(&self, role: Option<&str>, attr: &str) -> bool {
        attr == "role" || role.and_then(|r| self.roles.get(r)).is_some_and(|r| self.slot(attr).is_some_and(|s| r.once.contains(&s)))
    }

    /// Whether slot `slot` of a session playing role `role` (an index) never changes once set.
    pub(crate) fn is_once_slot(&self, role: Option<usize>, slot: usize) -> bool {
        slot == ROLE_SLOT || role.is_some_and(|r| self.role_at(r).once.contains(&slot))
    }

    pub fn transition(&self, index: usize) -> &ast::Transition {
        &self.machine.transitions[index]
    }

    pub(crate) fn program(&self, index: usize) -> &Program {
        &self.programs[index]
    }

    pub fn is_session_attr(&self, role: &str, attr: &str) -> bool {
        self.machine
            .role(role)
            .and_then(|r| r.attributes.iter().find(|a| a.name.name == attr))
            .is_some_and(|a| matches!(a.ty, AttrType::Session(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_tell_short_names_apart() {
        let names = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "abc",
            "acc",
            "cba",
            "abcd",
            "abdd",
            "abcde",
            "abxde",
            "@state",
            "@stata",
            "abcdefgh",
            "abcdxfgh",
            "abcdefghi",
        ];
        for a in names {
            for b in names {
                let (ka, kb) = (short_key(a), short_key(b));
                if a.len() <= 8 || b.len() <= 8 {
                    assert_eq!(ka == kb, a == b, "{a:?} {b:?}");
                }
            }
        }
    }

    const CONTRACT: &str = r#"
service t
role Caller holds state {
  msr: session Msr once
  p2t: session Caller
  a_rather_long_attribute_name: string
  a_rather_long_attribute_other: string
}
role Msr {
  caller: session Caller once
  state via caller
}
states { initial Idle, Busy, final Done }
transition T1: Idle -> Busy
  when msg.method == INVITE && msg.sips.role == null
  handles msg.sips
transition T2: Busy -> Done
  let p = session(msg.payl)
  when (msg.method == BYE || msg.method == CANCEL) && p != null
  handles msg.sips, p.msr
transition T3: Busy -> same
  when msg.sips.role == Msr && msg.method != BYE
  handles msg.sips
"#;

    #[test]
    fn names_resolve_to_slots_and_guards_to_methods() {
        let c = Compiled::new(tandem_contract::parse(CONTRACT).expect("parses")).expect("compiles");
        assert!(c.slot_table.is_some());
        for (i, name) in c.slots.iter().enumerate() {
            assert_eq!(c.slot(name), Some(i), "{name}");
            let longer = format!("{name}x");
            assert_eq!(c.slot(&longer), c.slots.iter().position(|n| *n == longer), "{longer}");
        }
        for other in ["", "x", "sdp", "@rolf", "role", "a_much_longer_attribute_name"] {
            assert_eq!(c.slot(other), c.slots.iter().position(|n| n == other), "{other}");
        }
        assert_eq!(&c.slots[..2], ["@role", "@state"]);
        for (i, name) in c.slots.iter().enumerate() {
            assert_eq!(c.slot(name), Some(i), "{name}");
        }
        assert_eq!(c.slot("a_rather_long_attribute_third"), None);
        assert_eq!(c.slot("ms"), None);
        assert_eq!(c.slot("msrx"), None);
        let msr = c.slot("msr").expect("msr has a slot");
        let caller = c.role_index("Caller");
        assert!(c.is_once_slot(caller, msr) && c.is_once_slot(None, ROLE_SLOT));
        assert!(!c.is_once_slot(caller, c.slot("p2t").expect("p2t")));
        let methods = |i: usize| c.program(i).methods.clone();
        assert_eq!(methods(0), Some(vec![SmolStr::new("INVITE")]));
        assert_eq!(methods(1), Some(vec![SmolStr::new("BYE"), SmolStr::new("CANCEL")]));
        assert_eq!(methods(2), None);
        assert!(c.program(1).may_take("CANCEL") && !c.program(1).may_take("ACK") && c.program(2).may_take("ACK"));
        assert!(matches!(c.program(1).handles[1], CNav { root: Root::Var(Some(0)), ref path } if path == &[Step::Attr(msr)]));
        // The method test `may_take` decides is dropped from the guard; role tests use indices.
        assert!(matches!(c.program(0).guard, CExpr::SipsRole { role: None, negate: false }));
        assert!(matches!(c.program(1).guard, CExpr::Cmp(..)), "p != null stays");
        let msr_role = c.role_index("Msr");
        assert!(
            matches!(&c.program(2).guard, CExpr::And(a, _) if matches!(**a, CExpr::SipsRole { role, negate: false } if role == msr_role))
        );
    }

    /// Answers what a guard of the message and `msg.sips.role` asks; nothing else is asked.
    struct MessageOnly<'m> {
        method: &'m str,
        cseq: &'m str,
        role: Option<Option<usize>>,
    }

    impl crate::eval::Env for MessageOnly<'_> {
        fn message(&self, root: &NavRoot) -> Value {
            match root {
                NavRoot::MsgMethod => Value::Str(SmolStr::new(self.method)),
                NavRoot::MsgCseq => Value::Str(SmolStr::new(self.cseq)),
                NavRoot::MsgTimer => Value::Str(SmolStr::new("")),
                other => panic!("a simple guard read {other:?}"),
            }
        }
        fn method(&self) -> &str {
            self.method
        }
        fn app_attr(&mut self, _: &str) -> Result<Value, crate::eval::Need> {
            panic!("a simple guard read the application session")
        }
        fn session_step(&mut self, _: tandem_container::SessionId, _: Step) -> Result<Value, crate::eval::Need> {
            panic!("a simple guard read a session")
        }
        fn sips_role(&mut self) -> Result<Option<Option<usize>>, crate::eval::Need> {
            Ok(self.role)
        }
        fn session_of(&mut self, _: &str) -> Value {
            panic!("a simple guard looked a session up")
        }
        fn payload_session(&mut self) -> Value {
            panic!("a simple guard looked a session up")
        }
        fn initial_state(&self) -> Value {
            panic!("a simple guard read a state")
        }
    }

    /// A message with a payload naming session `var` (None: null), whose `msg.sips` holds
    /// `sips_attr` in every slot, and whose `var` is in state `state`.
    struct PayloadOnly<'m> {
        method: &'m str,
        role: Option<Option<usize>>,
        sips: tandem_container::SessionId,
        sips_attr: Operand,
        var: Option<tandem_container::SessionId>,
        state: &'m str,
        state_read: bool,
    }

    impl crate::eval::Env for PayloadOnly<'_> {
        fn message(&self, root: &NavRoot) -> Value {
            match root {
                NavRoot::MsgMethod => Value::Str(SmolStr::new(self.method)),
                NavRoot::MsgSips => Value::Session(self.sips),
                other => panic!("a payload guard read {other:?}"),
            }
        }
        fn method(&self) -> &str {
            self.method
        }
        fn app_attr(&mut self, _: &str) -> Result<Value, crate::eval::Need> {
            panic!("a payload guard read the application session")
        }
        fn session_step(&mut self, id: tandem_container::SessionId, step: Step) -> Result<Value, crate::eval::Need> {
            Ok(match step {
                Step::State if Some(id) == self.var => {
                    self.state_read = true;
                    Value::Str(SmolStr::new(self.state))
                }
                Step::Attr(_) if id == self.sips => match self.sips_attr {
                    Operand::Null => Value::Null,
                    Operand::Session(s) => Value::Session(s),
                    Operand::Other => Value::Str(SmolStr::new("text")),
                },
                other => panic!("a payload guard read {other:?} of {id}"),
            })
        }
        fn sips_role(&mut self) -> Result<Option<Option<usize>>, crate::eval::Need> {
            Ok(self.role)
        }
        fn session_of(&mut self, _: &str) -> Value {
            panic!("a payload guard looked a session up by text")
        }
        fn payload_session(&mut self) -> Value {
            self.var.map_or(Value::Null, Value::Session)
        }
        fn initial_state(&self) -> Value {
            panic!("a payload guard read the initial state")
        }
    }

    #[test]
    fn payload_guards_agree_with_the_evaluator() {
        use tandem_container::SessionId;
        let dating = include_str!("../../../services/dating.machine");
        let pairing = include_str!("../../../services/pairing.machine");
        for (source, payload) in [(dating, vec![5, 6]), (pairing, vec![1, 2])] {
            let c = Compiled::new(tandem_contract::parse(source).expect("parses")).expect("compiles");
            let found: Vec<usize> = (0..c.programs.len()).filter(|&i| c.program(i).payload.is_some()).collect();
            assert_eq!(found, payload, "transitions with a payload program");
            let (sips, other) = (SessionId(1), SessionId(2));
            let mut decided = 0;
            for &i in &payload {
                let p = c.program(i);
                let guard = &p.payload.as_ref().expect("payload program").guard;
                for role in [None, Some(None), Some(Some(0)), Some(Some(1))] {
                    for var in [None, Some(sips), Some(other)] {
                        for sips_attr in [Operand::Null, Operand::Session(sips), Operand::Session(other), Operand::Other] {
                            for state in c.machine.states.iter().map(|s| s.name.name.as_str()) {
                                let mut env = PayloadOnly { method: "MESSAGE", role, sips, sips_attr, var, state, state_read: false };
                                let mut vars = crate::eval::Vars::default();
                                vars.push(crate::eval::eval(&p.lets[0], &mut env, &vars).expect("no lock needed"));
                                let evaluated = crate::eval::eval(&p.guard, &mut env, &vars) == Ok(Value::Bool(true));
                                let attrs: Vec<(usize, Operand)> = c.sips_nav_slots.iter().map(|s| (*s, sips_attr)).collect();
                                let view = PayloadView {
                                    var,
                                    var_place: Some(c.by_state.position(state)),
                                    sips: Operand::Session(sips),
                                    sips_attrs: &attrs,
                                };
                                let text = |_: MsgText| "MESSAGE";
                                let mut state_read = false;
                                let Some(holds) = guard.holds(role, &text, &view, &mut state_read) else {
                                    // Undecided only for a state no transition leaves.
                                    assert!(c.by_state.position(state).is_none(), "T{} undecided in {state}", i + 1);
                                    continue;
                                };
                                decided += 1;
                                let case = format!("T{} role {role:?} var {var:?} sips attr {sips_attr:?} state {state}", i + 1);
                                assert_eq!(holds, evaluated, "{case}");
                                assert_eq!(state_read, env.state_read, "state read: {case}");
                            }
                        }
                    }
                }
            }
            assert!(decided > 100, "{decided} cases decided");
        }
    }

    #[test]
    fn simple_guards_and_navs_agree_with_the_evaluator() {
        let dating = include_str!("../../../services/dating.machine");
        for (source, simple) in [(CONTRACT, vec![0, 2]), (dating, (0..20).filter(|i| ![5, 6].contains(i)).collect())] {
            let c = Compiled::new(tandem_contract::parse(source).expect("parses")).expect("compiles");
            let found: Vec<usize> = (0..c.programs.len()).filter(|&i| c.program(i).simple_guard.is_some()).collect();
            assert_eq!(found, simple, "transitions with a simple guard");
            let methods = ["INVITE", "ACK", "BYE", "CANCEL", "MESSAGE", "OK", "ERROR", "PROVISIONAL", "TIMER", "OPTIONS"];
            let roles = [None, Some(None), Some(Some(0)), Some(Some(1))];
            for (i, p) in c.programs.iter().enumerate() {
                for method in methods {
                    let index = c.method_index(method);
                    assert_eq!(p.takes(index, method), p.may_take(method), "T{} {method}", i + 1);
                    assert_eq!(c.direct_at(index), c.direct_for(method), "{method}");
                    let Some(guard) = &p.simple_guard else { continue };
                    for cseq in ["INVITE", "BYE", "MESSAGE", ""] {
                        for role in roles {
                            let mut env = MessageOnly { method, cseq, role };
                            let evaluated = crate::eval::eval(&p.guard, &mut env, &crate::eval::Vars::default()) == Ok(Value::Bool(true));
                            let text = |of: MsgText| match of {
                                MsgText::Method => method,
                                MsgText::Cseq => cseq,
                                MsgText::Timer => "",
                            };
                            assert_eq!(guard.holds(role, &text), evaluated, "T{} {method} cseq {cseq} role {role:?}", i + 1);
                        }
                    }
                }
            }
        }
        let c = Compiled::new(tandem_contract::parse(CONTRACT).expect("parses")).expect("compiles");
        assert_eq!(c.program(0).simple_navs, Some(vec![SimpleNav::Sips]));
        assert_eq!(c.program(1).simple_navs, None, "p.msr starts at a let");
        let dating =
            Compiled::new(tandem_contract::parse(include_str!("../../../services/dating.machine")).expect("parses")).expect("compiles");
        let slot = |n: &str| dating.slot(n).expect("declared");
        // T11: msg.sips, msg.sips.msr, msg.sips.p2t, and its move's msg.sips.p2t.
        let t11 = SimpleNav::SipsAttr(slot("p2t"));
        assert_eq!(dating.program(10).simple_navs, Some(vec![SimpleNav::Sips, SimpleNav::SipsAttr(slot("msr")), t11, t11]));
        assert_eq!(dating.program(6).simple_navs, None, "T7's handles start at a let");
    }

    #[test]
    fn each_state_reads_only_the_sips_attributes_its_candidates_navigate() {
        let dating =
            Compiled::new(tandem_contract::parse(include_str!("../../../services/dating.machine")).expect("parses")).expect("compiles");
        let slot = |n: &str| dating.slot(n).expect("declared");
        let at = |state: &str, method: &str| {
            let place = dating.by_state.position(state).expect("a state some transition leaves");
            dating.sips_nav_slots_at(place, dating.method_index(method))
        };
        // Every candidate that may take the method finds what it navigates among the slots read.
        for (place, (state, candidates)) in dating.by_state.0.iter().enumerate() {
            for method in ["INVITE", "ACK", "BYE", "CANCEL", "MESSAGE", "OK", "ERROR", "TIMER", "OPTIONS"] {
                let read = dating.sips_nav_slots_at(place, dating.method_index(method));
                for &c in candidates.iter().filter(|&&c| dating.program(c).may_take(method)) {
                    for needed in dating.program(c).sips_attr_slots() {
                        assert!(read.contains(&needed), "T{} in {state} on {method} reads slot {needed}", c + 1);
                    }
                }
                assert!(read.iter().all(|s| dating.sips_nav_slots.contains(s)));
            }
        }
        assert_eq!(at("TalkingWithPeer", "BYE"), [slot("msr"), slot("p2t")], "T11");
        assert_eq!(at("ConnectingMS2Caller", "ACK"), [slot("msr")], "T4");
        assert_eq!(at("Terminating", "BYE"), [] as [usize; 0], "T13 handles msg.sips only");
        assert_eq!(at("TalkingWithMS", "OPTIONS"), [] as [usize; 0], "no transition takes it");
        // Msr keeps its state via `caller`, a `once` attribute; were it not, the holder found
        // before the arm ran would have to be looked up again at commit.
        assert!(dating.fixed_holders);
        let source = include_str!("../../../services/dating.machine").replace("caller: session Caller once", "caller: session Caller");
        let changing = Compiled::new(tandem_contract::parse(&source).expect("parses")).expect("compiles");
        assert!(!changing.fixed_holders);
    }

    #[test]
    fn selection_is_decided_from_state_method_and_role_where_the_guards_read_nothing_else() {
        let dating =
            Compiled::new(tandem_contract::parse(include_str!("../../../services/dating.machine")).expect("parses")).expect("compiles");
        let role = |n: &str| Some(Some(dating.role_index(n).expect("a role")));
        let at = |state: &str, method: &str, sips_role: Option<Option<usize>>| {
            let place = dating.by_state.position(state).expect("a state some transition leaves");
            dating.selection_at(place, dating.method_index(method), sips_role)
        };
        let t = |n: usize| Selection::One(n - 1);
        assert_eq!(at("Idle", "INVITE", None), t(1), "an initial INVITE");
        assert_eq!(at("Idle", "INVITE", role("Caller")), Selection::Nothing, "T1 wants no role");
        assert_eq!(at("InvitingMS", "OK", role("Msr")), t(2));
        assert_eq!(at("InvitingMS", "OK", role("Caller")), Selection::Nothing);
        assert_eq!(at("ConnectingMS2Caller", "ACK", role("Caller")), t(4));
        assert_eq!(at("ConnectingMS2Caller", "BYE", role("Caller")), t(15));
        assert_eq!(at("TalkingWithMS", "BYE", role("Caller")), t(5));
        assert_eq!(at("TalkingWithMS", "BYE", role("Msr")), t(18));
        assert_eq!(at("TalkingWithPeer", "BYE", role("Caller")), t(11));
        assert_eq!(at("Pairing", "BYE", role("Caller")), t(14));
        assert_eq!(at("Pairing", "MESSAGE", role("Msr")), t(9), "T9 reads no payload");
        // T6 and T7 read the payload's session, T12 `msg.cseq`: evaluated per message.
        assert_eq!(at("TalkingWithMS", "MESSAGE", role("Msr")), Selection::Evaluate);
        assert_eq!(at("Terminating", "OK", role("Caller")), Selection::Evaluate);
        assert_eq!(at("Terminating", "BYE", role("Caller")), t(13));
        // A method no guard names, or a session without a role: not decided here.
        assert_eq!(dating.selection_at(0, None, role("Caller")), Selection::Evaluate);
        assert_eq!(dating.selection_at(0, dating.method_index("BYE"), Some(None)), Selection::Evaluate);
        // Every transition but those three is decided from the table somewhere.
        let mut decided: Vec<usize> =
            dating.selections.iter().filter_map(|s| if let Selection::One(t) = s { Some(t + 1) } else { None }).collect();
        decided.sort_unstable();
        decided.dedup();
        assert_eq!(decided, [1, 2, 3, 4, 5, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20]);
        // Two guards that hold together (T9 made to take the caller's BYE, as T13 does in
        // `Terminating`) are left to evaluation, which finds the ambiguity.
        let source = include_str!("../../../services/dating.machine").replace(
            "when msg.method == MESSAGE && msg.sips.role == Msr\n  handles msg.sips\n",
            "when msg.method == BYE && msg.sips.role == Caller\n  handles msg.sips\n",
        );
        assert_ne!(source, include_str!("../../../services/dating.machine"));
        let ambiguous = Compiled::new(tandem_contract::parse(&source).expect("parses")).expect("compiles");
        let place = ambiguous.by_state.position("Terminating").expect("a state");
        assert_eq!(ambiguous.selection_at(place, ambiguous.method_index("BYE"), role("Caller")), Selection::Evaluate);
    }
}
