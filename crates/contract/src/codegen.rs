//! A contract compiled to Rust: the business machine's states, roles and transitions as enums,
//! and its selection (which transition a message takes) as straight-line code, for
//! `tandem_engine::dispatch` to run without the engine's tables, records and lock table
//! (decision 0008).
//!
//! Only contracts of one shape compile (every other contract runs on the engine):
//! - one role holds the state; every other role reaches it through a `once` attribute
//!   (`state via`) and has only `once` attributes, so its sessions hold nothing that changes and
//!   are never locked with anything (they are read in short critical sections of their own);
//! - a transition touches at most one other execution (its *peer*): either the session the
//!   payload names (`let x = session(msg.payl)`, the only `let` form) or a state holder an
//!   attribute of the message's session names (`msg.sips.p2t`); everything it moves is that peer;
//! - guards test `msg.method`, `msg.cseq` (against names), `msg.status` (against integers),
//!   `msg.sips.role`, and sessions reached by attributes, their states and `null`, joined with
//!   `&&`, `||` and `!`;
//! - each attribute name is declared by one role.
//!
//! [`generate`] says why a contract is outside that shape.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::ast::*;
use crate::EVENT_METHODS;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: the contract cannot be compiled to Rust: {message}")]
pub struct CodegenError {
    pub line: u32,
    pub col: u32,
    pub message: String,
}

fn error<T>(span: Span, message: impl Into<String>) -> Result<T, CodegenError> {
    Err(CodegenError { line: span.line, col: span.col, message: message.into() })
}

/// Where a transition's peer (the one other execution it locks) comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Peer {
    None,
    /// `session(msg.payl)`.
    Payload,
    /// The state holder the message's session's attribute names.
    SipsAttr(String),
}

impl Peer {
    fn rust(&self) -> String {
        match self {
            Peer::None => "tandem_engine::dispatch::Peer::None".into(),
            Peer::Payload => "tandem_engine::dispatch::Peer::Payload".into(),
            Peer::SipsAttr(a) => format!("tandem_engine::dispatch::Peer::SipsAttr({a:?})"),
        }
    }
}

/// What a navigation reaches, for the shape's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reach {
    /// The message's session, or a session of this execution.
    Own,
    /// The peer (a state holder of another execution).
    Peer(Peer),
    /// A session of the peer's execution that is not its state holder (never locked).
    PeerSatellite,
}

struct Gen<'m> {
    m: &'m Machine,
    holder: &'m Role,
    /// Event names the guards compare `msg.method` or `msg.cseq` with, in first-use order.
    events: Vec<String>,
}

/// Rust source for `machine` (to be `include!`d in a module of its own), or why it is not of
/// the shape this compiler handles.
pub fn generate(machine: &Machine) -> Result<String, CodegenError> {
    let Some(holder) = machine.state_holder() else {
        return error(machine.service.span, "exactly one role must hold the state");
    };
    let mut seen = BTreeSet::new();
    for role in &machine.roles {
        for a in &role.attributes {
            if !seen.insert(a.name.name.as_str()) {
                return error(a.span, format!("attribute `{}` is declared by more than one role", a.name));
            }
        }
        if !role.holds_state {
            let Some(via) = &role.state_via else { return error(role.span, "a role that does not hold the state needs `state via`") };
            if role.attributes.iter().any(|a| !a.once) {
                return error(role.span, format!("every attribute of `{}` must be `once` (its sessions are never locked)", role.name));
            }
            if role.attribute(&via.name).is_none() {
                return error(via.span, format!("`state via {}` names no attribute of `{}`", via.name, role.name));
            }
        }
    }
    let mut g = Gen { m: machine, holder, events: Vec::new() };
    let mut selection = String::new();
    let mut peers = Vec::new();
    let initial = machine.initial_state().map(|s| s.name.name.as_str());
    for t in &machine.transitions {
        let peer = g.peer_of(t)?;
        if peer != Peer::None && t.from.iter().any(|f| Some(f.name.as_str()) == initial) {
            return error(t.span, "a transition from the initial state cannot lock another execution");
        }
        peers.push(peer);
    }
    for state in &machine.states {
        let _ = writeln!(selection, "            State::{} => {{", state.name);
        for (t, peer) in machine.transitions.iter().zip(&peers).filter(|(t, _)| t.from.iter().any(|f| f.name == state.name.name)) {
            let (guard, ty) = g.expr(&t.guard)?;
            if ty != Ty::Bool {
                return error(t.guard.span(), "the guard is not a condition");
            }
            // A guard that may read its peer is evaluated only for the events the plan locks
            // that peer for (the same events: `methods` is sound), so that it never reads an
            // execution the dispatcher does not hold.
            let gate = match (peer, methods(&t.guard)) {
                (Peer::Payload | Peer::SipsAttr(_), Some(events)) => {
                    let events: Vec<String> = events.iter().map(|e| format!("Ev::{}", g.event(e))).collect();
                    format!("matches!(ev.kind, {}) && ", events.join(" | "))
                }
                _ => String::new(),
            };
            let _ = writeln!(
                selection,
                "                if {gate}{guard} {{\n                    return Some(T::{});\n                }}",
                t.name
            );
        }
        let _ = writeln!(selection, "                None\n            }}");
    }
    // The peer a message in each state may need: its candidates' (one at most per event).
    let mut plan = String::new();
    for state in &machine.states {
        let mut by_event: std::collections::BTreeMap<String, Peer> = Default::default();
        let mut any: Option<Peer> = None;
        for (t, peer) in machine.transitions.iter().zip(&peers) {
            if *peer == Peer::None || !t.from.iter().any(|f| f.name == state.name.name) {
                continue;
            }
            let clash = || error(t.span, format!("two transitions from {} need different peers for one message", state.name));
            match methods(&t.guard) {
                Some(set) => {
                    for e in set {
                        let v = g.event(&e);
                        if by_event.insert(v, peer.clone()).is_some_and(|p| p != *peer) {
                            return clash();
                        }
                    }
                }
                None => {
                    if any.replace(peer.clone()).is_some_and(|p| p != *peer) {
                        return clash();
                    }
                }
            }
        }
        let body = match any {
            Some(peer) => {
                if by_event.values().any(|p| *p != peer) {
                    return error(state.name.span, format!("transitions from {} need different peers for one message", state.name));
                }
                peer.rust()
            }
            None if by_event.is_empty() => continue,
            None => {
                let arms: Vec<String> = by_event.iter().map(|(v, p)| format!("Ev::{v} => {}", p.rust())).collect();
                format!("match ev {{ {}, _ => tandem_engine::dispatch::Peer::None }}", arms.join(", "))
            }
        };
        let _ = writeln!(plan, "            State::{} => {body},", state.name);
    }
    let mut out = String::new();
    let src = &machine.service.name;
    let _ = writeln!(out, "// The contract `{src}` compiled by tandem_contract::codegen (build.rs). Not edited by hand.\n");
    g.enums(&mut out);
    g.transitions(&mut out, &peers);
    let _ = writeln!(
        out,
        "impl tandem_engine::dispatch::Contract for Machine {{
    type State = State;
    type Role = Role;
    type T = T;
    type Ev = Ev;
    const SERVICE: &'static str = {src:?};
    const HOLDER: Role = Role::{holder};
    const INITIAL: State = State::{initial};
    const NAMES: &'static [&'static str] = &T_NAMES;

    fn state_name(s: State) -> &'static str {{ STATE_NAMES[s as usize] }}
    fn state_named(name: &str) -> Option<State> {{
        match name {{ {state_match}_ => None }}
    }}
    fn is_final(s: State) -> bool {{ FINAL[s as usize] }}
    fn role_named(name: &str) -> Option<Role> {{
        match name {{ {role_match}_ => None }}
    }}
    // A match, inlined: where the role is known, the name is a constant and its look-up
    // compares in place (no library call).
    #[inline(always)]
    fn via(r: Role) -> Option<&'static str> {{
        match r {{ {via_match}}}
    }}
    fn ev(code: Option<usize>) -> Ev {{ code.and_then(|c| EV_BY_CODE.get(c)).copied().unwrap_or(Ev::Other) }}
    fn index(t: T) -> usize {{ t as usize }}
    #[inline(always)]
    fn target(t: T, from: State) -> State {{ t.target(from) }}
    fn moves(t: T) -> Option<State> {{ MOVES[t as usize] }}

    fn plan(state: State, ev: Ev) -> tandem_engine::dispatch::Peer {{
        match state {{
{plan}            _ => tandem_engine::dispatch::Peer::None,
        }}
    }}

    #[allow(unused_variables)] // a contract whose guards never test the role or read sessions
    #[inline(always)] // into the dispatcher: no call per message, guards read the view in place
    fn select(state: State, role: Option<Role>, ev: &tandem_engine::dispatch::Facts<Ev>, r: &impl tandem_engine::dispatch::Reads<State>) -> Option<T> {{
        match state {{
{selection}        }}
    }}
}}",
        holder = holder.name,
        initial = machine.initial_state().map_or("?", |s| s.name.name.as_str()),
        state_match = machine.states.iter().map(|s| format!("{:?} => Some(State::{}), ", s.name.name, s.name)).collect::<String>(),
        role_match = machine.roles.iter().map(|r| format!("{:?} => Some(Role::{}), ", r.name.name, r.name)).collect::<String>(),
        via_match = machine
            .roles
            .iter()
            .map(|r| format!("Role::{} => {}, ", r.name, r.state_via.as_ref().map_or("None".into(), |v| format!("Some({:?})", v.name))))
            .collect::<String>(),
    );
    // The event enum last: the guards above named the events they compare with.
    g.event_enum(&mut out);
    Ok(out)
}

/// Reads, checks and compiles a contract file, for build scripts: the Rust source, or the
/// contract's rendered diagnostics (or why it cannot be compiled) as `file:line:col` text.
pub fn generate_file(path: &str) -> Result<String, String> {
    let source = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let (machine, diagnostics) = crate::parse_and_check(&source);
    match machine {
        Some(m) if !crate::has_errors(&diagnostics) => generate(&m).map_err(|e| format!("{path}:{e}")),
        _ => Err(crate::render_all(&diagnostics, path, &source)),
    }
}

/// The method names a guard can hold for (None: any), from its `msg.method == NAME` tests.
fn methods(e: &Expr) -> Option<BTreeSet<String>> {
    match e {
        Expr::And(a, b) => match (methods(a), methods(b)) {
            (Some(x), Some(y)) => Some(x.intersection(&y).cloned().collect()),
            (x, None) => x,
            (None, y) => y,
        },
        Expr::Or(a, b) => Some(methods(a)?.union(&methods(b)?).cloned().collect()),
        Expr::Cmp(a, CmpOp::Eq, b) => match (&**a, &**b) {
            (Expr::Nav(n), Expr::Name(x)) | (Expr::Name(x), Expr::Nav(n)) if n.root == NavRoot::MsgMethod && n.path.is_empty() => {
                Some([x.name.clone()].into())
            }
            _ => None,
        },
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Bool,
    /// `Option<SessionId>`.
    Session,
    /// `Option<State>`.
    State,
    /// `Option<Role>` (only `msg.sips.role`).
    Role,
    /// `msg.method`, `msg.cseq` (an `Ev`).
    Method,
    /// An integer (`msg.status`, literals).
    Int,
    /// A bare name, typed by what it is compared with.
    Name,
    Null,
}

impl Gen<'_> {
    /// The variant naming event `name` (a SIP method or one of `EVENT_METHODS`).
    fn event(&mut self, name: &str) -> String {
        if !self.events.iter().any(|e| e == name) {
            self.events.push(name.to_string());
        }
        variant(name)
    }

    fn role_of_attr(&self, name: &str) -> Option<(&Role, &Attribute)> {
        self.m.roles.iter().find_map(|r| r.attribute(name).map(|a| (r, a)))
    }

    /// What `nav` (a session-valued navigation without `.state` / `.role`) reaches.
    fn reach(&self, nav: &Nav) -> Result<Reach, CodegenError> {
        let attr_target = |a: &Ident| -> Result<(&Role, &Attribute, &str), CodegenError> {
            match self.role_of_attr(&a.name) {
                Some((r, attr)) => match &attr.ty {
                    AttrType::Session(target) => Ok((r, attr, target.name.as_str())),
                    _ => error(a.span, format!("`{}` is not a session attribute", a.name)),
                },
                None => error(a.span, format!("no role declares `{}`", a.name)),
            }
        };
        match (&nav.root, &nav.path[..]) {
            (NavRoot::MsgSips, []) => Ok(Reach::Own),
            (NavRoot::MsgSips, [a]) => {
                let (declarer, _, target) = attr_target(a)?;
                let own_holder = declarer.state_via.as_ref().is_some_and(|v| v.name == a.name);
                if declarer.holds_state && target == self.holder.name.name {
                    Ok(Reach::Peer(Peer::SipsAttr(a.name.clone())))
                } else if own_holder || target != self.holder.name.name {
                    // This execution's state holder, or one of its other sessions.
                    Ok(Reach::Own)
                } else {
                    error(nav.span, "a state holder reached from a session that does not hold the state")
                }
            }
            (NavRoot::Var(_), []) => Ok(Reach::Peer(Peer::Payload)),
            (NavRoot::Var(_), [a]) => {
                let (declarer, _, target) = attr_target(a)?;
                if declarer.holds_state && target != self.holder.name.name {
                    Ok(Reach::PeerSatellite)
                } else {
                    error(nav.span, "only one other execution's state holder can be reached")
                }
            }
            _ => error(nav.span, "only `msg.sips`, `msg.sips.ATTR`, a `let` variable and `VAR.ATTR` are supported here"),
        }
    }

    /// The transition's peer: from its `let`s, handles, moves and the sessions its guard reads.
    fn peer_of(&self, t: &Transition) -> Result<Peer, CodegenError> {
        for l in &t.lets {
            let payload = matches!(&l.value, Expr::SessionOf(inner, _)
                if matches!(&**inner, Expr::Nav(n) if n.root == NavRoot::MsgPayload && n.path.is_empty()));
            if !payload {
                return error(l.span, "the only `let` supported is `session(msg.payl)`");
            }
        }
        if t.lets.len() > 1 {
            return error(t.span, "at most one `let`");
        }
        let mut found = BTreeSet::new();
        for nav in &t.handles {
            if let Reach::Peer(p) = self.reach(nav)? {
                found.insert(p);
            }
        }
        for mv in &t.moves {
            match self.reach(&mv.target)? {
                Reach::Peer(p) => {
                    found.insert(p);
                }
                _ => return error(mv.span, "a transition may move only its peer (another execution's state holder)"),
            }
        }
        self.guard_peers(&t.guard, &mut found)?;
        if found.len() > 1 {
            return error(t.span, "the transition needs two other executions; one at most is supported");
        }
        Ok(found.into_iter().next().unwrap_or(Peer::None))
    }

    /// Peers whose state a guard reads.
    fn guard_peers(&self, e: &Expr, found: &mut BTreeSet<Peer>) -> Result<(), CodegenError> {
        match e {
            Expr::Nav(n) if n.path.last().is_some_and(|p| p.name == "state") => {
                let inner = Nav { root: n.root.clone(), path: n.path[..n.path.len() - 1].to_vec(), span: n.span };
                match self.reach(&inner)? {
                    Reach::Peer(p) => {
                        found.insert(p);
                    }
                    Reach::PeerSatellite => return error(n.span, "the state of another execution's satellite session"),
                    Reach::Own => {}
                }
            }
            Expr::Not(a, _) => self.guard_peers(a, found)?,
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(a, _, b) => {
                self.guard_peers(a, found)?;
                self.guard_peers(b, found)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Rust for a guard expression, and its type.
    fn expr(&mut self, e: &Expr) -> Result<(String, Ty), CodegenError> {
        Ok(match e {
            Expr::Bool(b, _) => (b.to_string(), Ty::Bool),
            Expr::Int(i, _) => (format!("{i}i64"), Ty::Int),
            Expr::Null(_) => ("None".into(), Ty::Null),
            Expr::Name(n) => (n.name.clone(), Ty::Name),
            Expr::Not(a, _) => {
                let (a, ty) = self.expr(a)?;
                if ty != Ty::Bool {
                    return error(e.span(), "`!` of something that is not a condition");
                }
                (format!("!({a})"), Ty::Bool)
            }
            Expr::And(a, b) | Expr::Or(a, b) => {
                let op = if matches!(e, Expr::And(..)) { "&&" } else { "||" };
                let ((a, ta), (b, tb)) = (self.expr(a)?, self.expr(b)?);
                if ta != Ty::Bool || tb != Ty::Bool {
                    return error(e.span(), format!("`{op}` of something that is not a condition"));
                }
                (format!("({a}) {op} ({b})"), Ty::Bool)
            }
            Expr::Nav(n) => self.nav(n)?,
            Expr::SessionOf(..) | Expr::Str(..) => return error(e.span(), "only `let x = session(msg.payl)` may use this"),
            Expr::Cmp(a, op, b) => {
                let (ra, ta) = self.expr(a)?;
                let (rb, tb) = self.expr(b)?;
                let (x, tx, y, ty, op) = if ta == Ty::Name || ta == Ty::Null { (rb, tb, ra, ta, op.flip()) } else { (ra, ta, rb, tb, *op) };
                let eq = match op {
                    CmpOp::Eq => "==",
                    CmpOp::Ne => "!=",
                    _ if tx == Ty::Int && ty == Ty::Int => op.as_str(),
                    _ => return error(e.span(), "ordering is supported between integers only"),
                };
                let code = match (tx, ty) {
                    (Ty::Method, Ty::Name) => {
                        let v = self.event(&y);
                        format!("{x} {eq} Ev::{v}")
                    }
                    (Ty::Role, Ty::Name) => {
                        if self.m.role(&y).is_none() {
                            return error(e.span(), format!("`{y}` is not a role"));
                        }
                        format!("{x} {eq} Some(Role::{y})")
                    }
                    (Ty::State, Ty::Name) => {
                        if self.m.state(&y).is_none() {
                            return error(e.span(), format!("`{y}` is not a state"));
                        }
                        format!("{x} {eq} Some(State::{y})")
                    }
                    (Ty::Role | Ty::State | Ty::Session, Ty::Null) => {
                        format!("{}{x}.is_none()", if op == CmpOp::Eq { "" } else { "!" })
                    }
                    (Ty::Session, Ty::Session) | (Ty::Int, Ty::Int) => format!("{x} {eq} {y}"),
                    _ => return error(e.span(), "this comparison is not supported by the compiler"),
                };
                (code, Ty::Bool)
            }
        })
    }

    fn nav(&mut self, n: &Nav) -> Result<(String, Ty), CodegenError> {
        let mut path = &n.path[..];
        let (mut code, mut ty) = match &n.root {
            NavRoot::MsgMethod => ("ev.kind".to_string(), Ty::Method),
            NavRoot::MsgCseq => ("ev.cseq".to_string(), Ty::Method),
            NavRoot::MsgStatus => ("i64::from(ev.status)".to_string(), Ty::Int),
            NavRoot::MsgSips => {
                if path.len() == 1 && path[0].name == "role" {
                    return Ok(("role".into(), Ty::Role));
                }
                ("r.sips()".to_string(), Ty::Session)
            }
            // The only `let` is `session(msg.payl)`, read (once) by the dispatcher.
            NavRoot::Var(_) => ("r.payload()".to_string(), Ty::Session),
            _ => return error(n.span, format!("`{}` is not supported by the compiler", n.root_text())),
        };
        while let Some((step, rest)) = path.split_first() {
            if ty != Ty::Session {
                return error(step.span, "a step from something that is not a session");
            }
            match step.name.as_str() {
                "state" => (code, ty) = (format!("r.state({code})"), Ty::State),
                "role" => return error(step.span, "`.role` is supported on `msg.sips` only"),
                attr => match self.role_of_attr(attr).map(|(_, a)| &a.ty) {
                    Some(AttrType::Session(_)) => code = format!("r.attr({code}, {attr:?})"),
                    _ => return error(step.span, format!("`{attr}` is not a session attribute")),
                },
            }
            path = rest;
        }
        Ok((code, ty))
    }

    fn enums(&self, out: &mut String) {
        let m = self.m;
        let states: Vec<&str> = m.states.iter().map(|s| s.name.name.as_str()).collect();
        let roles: Vec<&str> = m.roles.iter().map(|r| r.name.name.as_str()).collect();
        let _ = writeln!(out, "/// The contract's service (its `Contract` implementation).\npub struct Machine;\n");
        let _ = writeln!(out, "#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub enum State {{ {} }}\n", states.join(", "));
        let _ = writeln!(out, "pub const STATES: [State; {}] = [{}];", states.len(), list("State::", &states));
        let _ = writeln!(out, "const STATE_NAMES: [&str; {}] = [{}];", states.len(), quoted(&states));
        let finals: Vec<&str> = m.states.iter().map(|s| if s.kind == StateKind::Final { "true" } else { "false" }).collect();
        let _ = writeln!(out, "const FINAL: [bool; {}] = [{}];\n", states.len(), finals.join(", "));
        let _ = writeln!(out, "#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub enum Role {{ {} }}\n", roles.join(", "));
        let _ = writeln!(out, "pub const ROLES: [Role; {}] = [{}];\n", roles.len(), list("Role::", &roles));
    }

    fn transitions(&self, out: &mut String, peers: &[Peer]) {
        let m = self.m;
        let names: Vec<&str> = m.transitions.iter().map(|t| t.name.name.as_str()).collect();
        let _ = writeln!(out, "#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub enum T {{ {} }}\n", names.join(", "));
        let _ = writeln!(out, "pub const TS: [T; {}] = [{}];", names.len(), list("T::", &names));
        let _ = writeln!(out, "const T_NAMES: [&str; {}] = [{}];", names.len(), quoted(&names));
        let moves: Vec<String> =
            m.transitions.iter().map(|t| t.moves.first().map_or("None".into(), |mv| format!("Some(State::{})", mv.to))).collect();
        let _ = writeln!(out, "const MOVES: [Option<State>; {}] = [{}];\n", names.len(), moves.join(", "));
        let mut target = String::new();
        let mut peer = String::new();
        for (t, p) in m.transitions.iter().zip(peers) {
            let to = if t.stays { "from".to_string() } else { format!("State::{}", t.to) };
            let _ = writeln!(target, "            T::{} => {to},", t.name);
            let _ = writeln!(peer, "            T::{} => {},", t.name, p.rust());
        }
        // Kept for readers and tests of the generated code: the plan is what the dispatcher uses.
        let _ = writeln!(
            out,
            "impl T {{
    /// The execution's state after the transition from `from`.
    #[inline(always)]
    pub fn target(self, from: State) -> State {{
        #[allow(unreachable_patterns)]
        match self {{
{target}        }}
    }}

    /// The other execution the transition locks.
    pub fn peer(self) -> tandem_engine::dispatch::Peer {{
        match self {{
{peer}        }}
    }}
}}
"
        );
    }

    fn event_enum(&self, out: &mut String) {
        let variants: Vec<String> = self.events.iter().map(|e| variant(e)).collect();
        let _ = writeln!(
            out,
            "\n/// The events the guards name (`msg.method`, `msg.cseq`); `Other` is any other.\n#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub enum Ev {{ {}{}Other }}\n",
            variants.join(", "),
            if variants.is_empty() { "" } else { ", " }
        );
        // Indexed by `tandem_engine`'s method codes: the standard methods, then EVENT_METHODS.
        let codes: Vec<String> = tandem_sip::Method::STANDARD_NAMES
            .iter()
            .chain(EVENT_METHODS.iter())
            .map(|name| if self.events.iter().any(|e| e == name) { format!("Ev::{}", variant(name)) } else { "Ev::Other".into() })
            .collect();
        let _ = writeln!(out, "const EV_BY_CODE: [Ev; {}] = [{}];", codes.len(), codes.join(", "));
    }
}

/// `INVITE` -> `Invite`.
fn variant(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) => c.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase(),
        None => String::new(),
    }
}

fn list(prefix: &str, names: &[&str]) -> String {
    names.iter().map(|n| format!("{prefix}{n}")).collect::<Vec<_>>().join(", ")
}

fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(src: &str) -> Machine {
        let (m, diags) = crate::parse_and_check(src);
        assert!(!crate::has_errors(&diags), "{diags:?}");
        m.unwrap()
    }

    #[test]
    fn the_dating_and_pairing_contracts_compile() {
        for path in ["../../services/dating.machine", "../../services/pairing.machine"] {
            let src = std::fs::read_to_string(path).unwrap();
            let code = generate(&machine(&src)).unwrap();
            assert!(code.contains("impl tandem_engine::dispatch::Contract for Machine"), "{code}");
        }
        let dating = generate(&machine(&std::fs::read_to_string("../../services/dating.machine").unwrap())).unwrap();
        // T7 reads the suggested peer's state and moves it: the payload's session is its peer;
        // T11 moves the caller's `p2t`.
        assert!(dating.contains("T::T7 => tandem_engine::dispatch::Peer::Payload"), "{dating}");
        assert!(dating.contains("T::T11 => tandem_engine::dispatch::Peer::SipsAttr(\"p2t\")"), "{dating}");
        assert!(dating.contains("T::T2 => tandem_engine::dispatch::Peer::None"), "{dating}");
    }

    #[test]
    fn contracts_outside_the_shape_are_refused_with_a_position() {
        let base = "service s\nrole A holds state { p: session A\n q: session A }\nstates { initial I\n final D }\n";
        let two_peers = format!("{base}transition X: I -> D\n  when msg.method == BYE\n  handles msg.sips, msg.sips.p, msg.sips.q\n");
        let e = generate(&machine(&two_peers)).unwrap_err();
        assert!(e.message.contains("two other executions"), "{e}");
        assert_eq!(e.line, 6);
        let mutable_satellite = "service s\nrole A holds state { b: session B once }\nrole B { a: session A once\n x: session A\n state via a }\nstates { initial I\n final D }\ntransition X: I -> D\n  when msg.method == BYE\n  handles msg.sips\n";
        let e = generate(&machine(mutable_satellite)).unwrap_err();
        assert!(e.message.contains("must be `once`"), "{e}");
    }
}
