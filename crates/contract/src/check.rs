//! The checker: static rules over a parsed [`Machine`] (see docs/contracts.md, "Checker rules").

use std::collections::{HashMap, HashSet, VecDeque};

use crate::ast::*;
use crate::diagnostic::Diagnostic;
use crate::nondet;
use crate::util::{closest, quote_list};

/// Checks a machine. Returns errors and warnings, sorted by position; the machine is valid
/// when none is an error ([`crate::has_errors`]).
pub fn check(machine: &Machine) -> Vec<Diagnostic> {
    let mut c = Checker { m: machine, diags: Vec::new() };
    c.duplicates();
    c.state_kinds();
    c.roles();
    for t in &machine.transitions {
        c.transition(t);
    }
    c.graph();
    c.diags.extend(nondet::check(machine));
    c.diags.sort_by_key(|d| (d.span.start, d.severity));
    c.diags
}

/// The static type of an expression.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Bool,
    Int,
    Str,
    Bytes,
    /// A session (or null), of the given role when known.
    Session(Option<String>),
    State,
    Role,
    Method,
    Null,
    /// A bare name, resolved by what it is compared with.
    Name(String),
    /// Not known statically (`msg.apps...`, or after an error already reported).
    Unknown,
}

impl Ty {
    fn describe(&self) -> String {
        match self {
            Ty::Bool => "a boolean".into(),
            Ty::Int => "an integer".into(),
            Ty::Str => "a string".into(),
            Ty::Bytes => "bytes".into(),
            Ty::Session(None) => "a session".into(),
            Ty::Session(Some(r)) => format!("a session (of role {r})"),
            Ty::State => "a state".into(),
            Ty::Role => "a role".into(),
            Ty::Method => "a method".into(),
            Ty::Null => "null".into(),
            Ty::Name(n) => format!("the bare name `{n}`"),
            Ty::Unknown => "a value of unknown type".into(),
        }
    }

    fn nullable(&self) -> bool {
        matches!(self, Ty::Session(_) | Ty::Role | Ty::State | Ty::Str | Ty::Bytes | Ty::Null | Ty::Unknown)
    }

    fn from_attr(t: &AttrType) -> Ty {
        match t {
            AttrType::String => Ty::Str,
            AttrType::Int => Ty::Int,
            AttrType::Bool => Ty::Bool,
            AttrType::Bytes => Ty::Bytes,
            AttrType::Session(r) => Ty::Session(Some(r.name.clone())),
        }
    }
}

/// What a guard's top-level `X.role == R` (or `== null`) conjunct tells about session X.
#[derive(Debug, Clone, PartialEq)]
enum Narrow {
    Role(String),
    Null,
}

/// Typing context of one transition.
#[derive(Default)]
struct Scope {
    /// `let` variables bound so far, in order.
    vars: Vec<(String, Ty)>,
    /// Roles known from the guard, by navigation key (`msg.sips`, `p2t`, `msg.sips.p2t`).
    narrow: HashMap<String, Narrow>,
}

impl Scope {
    fn var(&self, name: &str) -> Option<&Ty> {
        self.vars.iter().rev().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// `root.path[..k]` as text: the key of a navigation prefix.
fn nav_key(n: &Nav, k: usize) -> String {
    let mut s = n.root_text().to_string();
    for p in &n.path[..k.min(n.path.len())] {
        s.push('.');
        s.push_str(&p.name);
    }
    s
}

struct Checker<'m> {
    m: &'m Machine,
    diags: Vec<Diagnostic>,
}

impl<'m> Checker<'m> {
    fn error(&mut self, msg: impl Into<String>, span: Span) -> &mut Diagnostic {
        self.diags.push(Diagnostic::error(msg, span));
        self.diags.last_mut().expect("just pushed")
    }

    fn warning(&mut self, msg: impl Into<String>, span: Span) -> &mut Diagnostic {
        self.diags.push(Diagnostic::warning(msg, span));
        self.diags.last_mut().expect("just pushed")
    }

    fn state_names(&self) -> Vec<&'m str> {
        self.m.states.iter().map(|s| s.name.name.as_str()).collect()
    }

    fn role_names(&self) -> Vec<&'m str> {
        self.m.roles.iter().map(|r| r.name.name.as_str()).collect()
    }

    // ---------------------------------------------------------------- declarations

    fn duplicates(&mut self) {
        fn dups<'a>(c: &mut Checker, what: &str, within: &str, items: impl Iterator<Item = &'a Ident>) {
            let mut seen: HashMap<&str, Span> = HashMap::new();
            for i in items {
                if let Some(first) = seen.get(i.name.as_str()) {
                    let note = format!("the first one is at line {}, column {}", first.line, first.col);
                    c.error(format!("duplicate {what} `{}`{within}", i.name), i.span).notes.push(note);
                } else {
                    seen.insert(&i.name, i.span);
                }
            }
        }
        let m = self.m;
        dups(self, "role", "", m.roles.iter().map(|r| &r.name));
        for r in &m.roles {
            dups(self, "attribute", &format!(" in role {}", r.name.name), r.attributes.iter().map(|a| &a.name));
        }
        dups(self, "state", "", m.states.iter().map(|s| &s.name));
        dups(self, "transition", "", m.transitions.iter().map(|t| &t.name));
        for t in &m.transitions {
            dups(self, "variable", &format!(" in transition {}", t.name.name), t.lets.iter().map(|l| &l.name));
            dups(self, "source state", &format!(" in transition {}", t.name.name), t.from.iter());
        }
    }

    fn state_kinds(&mut self) {
        let m = self.m;
        let initials: Vec<&State> = m.states.iter().filter(|s| s.kind == StateKind::Initial).collect();
        match initials.as_slice() {
            [] => {
                self.error("the machine has no initial state", m.service.span)
                    .notes
                    .push("mark the state a new execution starts in with `initial` (e.g. `states { initial Idle ... }`)".into());
            }
            [_] => {}
            [first, rest @ ..] => {
                for s in rest {
                    let note = format!("`{}` is already initial (line {})", first.name.name, first.name.span.line);
                    self.error(format!("more than one initial state: `{}`", s.name.name), s.name.span).notes.push(note);
                }
            }
        }
        if m.final_states().next().is_none() {
            self.error("the machine has no final state", m.service.span)
                .notes
                .push("mark the state(s) where an execution ends with `final` (e.g. `final Done`)".into());
        }
    }

    fn roles(&mut self) {
        let m = self.m;
        let holders: Vec<&Role> = m.roles.iter().filter(|r| r.holds_state).collect();
        match holders.as_slice() {
            [] => {
                self.error("no role `holds state`", m.service.span)
                    .notes
                    .push("exactly one role's sessions carry the execution's state: declare it as `role NAME holds state { ... }`".into());
            }
            [_] => {}
            [first, rest @ ..] => {
                for r in rest {
                    let note = format!("`{}` already holds the state; the other roles reach it with `state via ATTR`", first.name.name);
                    self.error(format!("more than one role holds state: `{}`", r.name.name), r.name.span).notes.push(note);
                }
            }
        }
        let holder = m.state_holder().map(|r| r.name.name.clone());
        for r in &m.roles {
            for a in &r.attributes {
                if let AttrType::Session(target) = &a.ty {
                    if m.role(&target.name).is_none() {
                        self.unknown_role(target);
                    }
                }
            }
            match (&r.state_via, r.holds_state) {
                (Some(via), true) => {
                    self.error(
                        format!("role {} holds the state itself and cannot also reach it `via {}`", r.name.name, via.name),
                        via.span,
                    )
                    .notes
                    .push("remove `state via` from the holder role".into());
                }
                (Some(via), false) => self.state_via(r, via, holder.as_deref()),
                (None, false) => {
                    let holder_name = holder.clone().unwrap_or_else(|| "HOLDER".into());
                    self.warning(format!("role {} has no `state via`", r.name.name), r.name.span).notes.push(format!(
                        "messages arriving on {} sessions cannot find their execution's state; add `state via ATTR` naming a \
                         `session {holder_name}` attribute (ignore this if these sessions never receive messages)",
                        r.name.name
                    ));
                }
                (None, true) => {}
            }
        }
    }

    fn state_via(&mut self, r: &Role, via: &Ident, holder: Option<&str>) {
        let Some(attr) = r.attribute(&via.name) else {
            let attrs: Vec<&str> = r.attributes.iter().map(|a| a.name.name.as_str()).collect();
            let d = self.error(format!("`state via {}`: role {} has no attribute `{}`", via.name, r.name.name, via.name), via.span);
            d.notes.push(format!("the attributes of {} are {}", r.name.name, quote_list(&attrs)));
            if let Some(s) = closest(&via.name, attrs.iter().copied()) {
                d.notes.push(format!("did you mean `{s}`?"));
            }
            return;
        };
        let Some(holder) = holder else { return };
        let ok = matches!(&attr.ty, AttrType::Session(t) if t.name == holder);
        if !ok {
            let found = Ty::from_attr(&attr.ty).describe();
            self.error(format!("`state via {}` must name an attribute of type `session {holder}`", via.name), via.span)
                .notes
                .push(format!("`{}` is {found}; {holder} is the role that holds state", via.name));
        } else if !attr.once {
            let note =
                format!("an execution's sessions must keep pointing at its state holder; declare `{}: session {holder} once`", via.name);
            self.warning(format!("`state via {}` names an attribute that is not `once`", via.name), via.span).notes.push(note);
        }
    }

    fn unknown_role(&mut self, r: &Ident) {
        let names = self.role_names();
        let d = self.error(format!("unknown role `{}`", r.name), r.span);
        d.notes.push(format!("the roles are {}", quote_list(&names)));
        if let Some(s) = closest(&r.name, names.iter().copied()) {
            d.notes.push(format!("did you mean `{s}`?"));
        }
    }

    fn unknown_state(&mut self, s: &Ident) {
        let names = self.state_names();
        let d = self.error(format!("unknown state `{}`", s.name), s.span);
        d.notes.push(format!("the states are {}", quote_list(&names)));
        if let Some(c) = closest(&s.name, names.iter().copied()) {
            d.notes.push(format!("did you mean `{c}`?"));
        }
    }

    // ---------------------------------------------------------------- transitions

    fn transition(&mut self, t: &'m Transition) {
        let m = self.m;
        for f in &t.from {
            match m.state(&f.name) {
                None => self.unknown_state(f),
                Some(s) if s.kind == StateKind::Final => {
                    self.error(format!("transition {} leaves the final state `{}`", t.name.name, f.name), f.span)
                        .notes
                        .push("an execution in a final state is over: no transition may start there".into());
                }
                Some(_) => {}
            }
        }
        if !t.stays && m.state(&t.to.name).is_none() {
            self.unknown_state(&t.to);
        }

        let mut scope = Scope { vars: Vec::new(), narrow: narrowings(m, &t.guard) };
        for l in &t.lets {
            let ty = self.expr_ty(&l.value, &scope);
            let ty = match ty {
                Ty::Name(n) => {
                    self.bare_name_alone(&n, l.value.span());
                    Ty::Unknown
                }
                ty => ty,
            };
            if m.state(&l.name.name).is_some() || m.role(&l.name.name).is_some() {
                let what = if m.state(&l.name.name).is_some() { "state" } else { "role" };
                self.warning(format!("variable `{}` hides the {what} of the same name", l.name.name), l.name.span)
                    .notes
                    .push(format!("in transition {}, the bare name `{}` means the variable", t.name.name, l.name.name));
            }
            scope.vars.push((l.name.name.clone(), ty));
        }

        let gty = self.expr_ty(&t.guard, &scope);
        self.expect_bool(&gty, &t.guard, "the guard");

        if t.handles.is_empty() {
            self.warning(format!("transition {} has no `handles`", t.name.name), t.name.span)
                .notes
                .push("its handler gets exclusive access to no session; list at least the sessions it reads or changes".into());
        }
        for (i, h) in t.handles.iter().enumerate() {
            let ty = self.nav_ty(h, &scope);
            self.expect_session(&ty, h, "a handle");
            if t.handles[..i].iter().any(|o| o.same_as(h)) {
                self.warning(format!("handle `{h}` is listed twice"), h.span);
            }
        }
        for mv in &t.moves {
            let ty = self.nav_ty(&mv.target, &scope);
            self.expect_session(&ty, &mv.target, "the target of `moves`");
            if m.state(&mv.to.name).is_none() {
                self.unknown_state(&mv.to);
            }
            if !t.handles.iter().any(|h| h.same_as(&mv.target)) {
                let target = mv.target.to_string();
                self.error(format!("`moves {target}`: `{target}` is not among the handles of transition {}", t.name.name), mv.target.span)
                    .notes
                    .push(format!("changing another execution's state needs exclusive access to its session: add `{target}` to `handles`"));
            } else if let Ty::Session(Some(role)) = &ty {
                self.holder_handled_for_move(t, mv, role);
            }
        }
        self.holder_handled(t, &scope);
    }

    /// Warns when a state-changing transition does not lock the session that holds the
    /// execution's state (only when the guard says which role the message's session plays).
    fn holder_handled(&mut self, t: &Transition, scope: &Scope) {
        let m = self.m;
        let Some(holder) = m.state_holder() else { return };
        if t.stays || t.from.iter().all(|f| f.name == t.to.name) {
            return;
        }
        let Some(Narrow::Role(role)) = scope.narrow.get("msg.sips") else { return };
        let Some(r) = m.role(role) else { return };
        let needed: Vec<&str> = if r.name.name == holder.name.name {
            vec![]
        } else if let Some(via) = &r.state_via {
            vec![via.name.as_str()]
        } else {
            self.error(
                format!("transition {} takes messages on {} sessions, but role {} has no `state via`", t.name.name, role, role),
                t.name.span,
            )
            .notes
            .push(format!("add `state via ATTR` to role {role} so its messages find their execution's state"));
            return;
        };
        let ok = t.handles.iter().any(|h| {
            matches!(h.root, NavRoot::MsgSips) && h.path.len() >= needed.len() && h.path.iter().zip(&needed).all(|(a, b)| a.name == *b)
        });
        if !ok {
            let want = if needed.is_empty() { "msg.sips".to_string() } else { format!("msg.sips.{}", needed.join(".")) };
            self.warning(
                format!("transition {} changes the execution's state but does not handle its state holder `{want}`", t.name.name),
                t.name.span,
            )
            .notes
            .push(format!("add `{want}` to `handles` so the state is changed under exclusive access"));
        }
    }

    fn holder_handled_for_move(&mut self, t: &Transition, mv: &Move, role: &str) {
        let m = self.m;
        let (Some(holder), Some(r)) = (m.state_holder(), m.role(role)) else { return };
        if r.name.name == holder.name.name {
            return;
        }
        let Some(via) = &r.state_via else { return };
        let ok = t.handles.iter().any(|h| {
            h.path.len() > mv.target.path.len() && {
                let prefix = Nav { root: h.root.clone(), path: h.path[..mv.target.path.len()].to_vec(), span: h.span };
                prefix.same_as(&mv.target) && h.path[mv.target.path.len()].name == via.name
            }
        });
        if !ok {
            let want = format!("{}.{}", mv.target, via.name);
            self.warning(format!("`moves {}` changes a state held by `{want}`, which is not among the handles", mv.target), mv.target.span)
                .notes
                .push(format!("add `{want}` to `handles`"));
        }
    }

    fn expect_session(&mut self, ty: &Ty, n: &Nav, what: &str) {
        match ty {
            Ty::Session(_) | Ty::Unknown => {}
            other => {
                self.error(format!("{what} must designate a session; `{n}` is {}", other.describe()), n.span);
            }
        }
    }

    fn expect_bool(&mut self, ty: &Ty, e: &Expr, what: &str) {
        match ty {
            Ty::Bool | Ty::Unknown => {}
            Ty::Name(n) => self.bare_name_alone(n, e.span()),
            Ty::Session(_) => {
                self.error(format!("{what} must be a condition (a boolean), found a session"), e.span())
                    .notes
                    .push(format!("to test that the session exists, write `{e} != null`"));
            }
            other => {
                self.error(format!("{what} must be a condition (a boolean), found {}", other.describe()), e.span());
            }
        }
    }

    fn bare_name_alone(&mut self, n: &str, span: Span) {
        self.error(format!("the bare name `{n}` must be compared with something"), span).notes.push(format!(
            "bare names are states (`X.state == {n}`), roles (`X.role == {n}`) or methods (`msg.method == {n}`); \
             a `let` variable must be bound before it is used"
        ));
    }

    // ---------------------------------------------------------------- typing

    fn expr_ty(&mut self, e: &Expr, scope: &Scope) -> Ty {
        match e {
            Expr::Nav(n) => self.nav_ty(n, scope),
            Expr::SessionOf(inner, _) => {
                let t = self.expr_ty(inner, scope);
                match t {
                    Ty::Str | Ty::Unknown => {}
                    Ty::Name(n) => {
                        self.error(format!("`session(...)` takes a string (a session ID), found the bare name `{n}`"), inner.span());
                    }
                    other => {
                        self.error(format!("`session(...)` takes a string (a session ID), found {}", other.describe()), inner.span());
                    }
                }
                Ty::Session(None)
            }
            Expr::Name(i) => Ty::Name(i.name.clone()),
            Expr::Str(..) => Ty::Str,
            Expr::Int(..) => Ty::Int,
            Expr::Bool(..) => Ty::Bool,
            Expr::Null(_) => Ty::Null,
            Expr::Not(inner, _) => {
                let t = self.expr_ty(inner, scope);
                self.expect_bool(&t, inner, "the operand of `!`");
                Ty::Bool
            }
            Expr::And(a, b) | Expr::Or(a, b) => {
                let op = if matches!(e, Expr::And(..)) { "`&&`" } else { "`||`" };
                for x in [a, b] {
                    let t = self.expr_ty(x, scope);
                    self.expect_bool(&t, x, &format!("each operand of {op}"));
                }
                Ty::Bool
            }
            Expr::Cmp(a, op, b) => {
                let ta = self.expr_ty(a, scope);
                let tb = self.expr_ty(b, scope);
                self.compare(e, (a, &ta), *op, (b, &tb));
                Ty::Bool
            }
        }
    }

    fn compare(&mut self, whole: &Expr, (a, ta): (&Expr, &Ty), op: CmpOp, (b, tb): (&Expr, &Ty)) {
        match (ta, tb) {
            (Ty::Name(x), Ty::Name(y)) => {
                self.error(format!("cannot tell what `{x}` and `{y}` are"), whole.span())
                    .notes
                    .push("compare a bare name with `.state` (a state), `.role` (a role) or `msg.method` (a method)".into());
            }
            (Ty::Name(x), other) => self.resolve_name(x, a.span(), op, other),
            (other, Ty::Name(y)) => self.resolve_name(y, b.span(), op, other),
            (Ty::Unknown, _) | (_, Ty::Unknown) => {}
            _ if op.is_ordering() => {
                if !(ta == &Ty::Int && tb == &Ty::Int) {
                    self.error(format!("`{op}` compares integers, found {} and {}", ta.describe(), tb.describe()), whole.span());
                }
            }
            _ => {
                let same_kind = std::mem::discriminant(ta) == std::mem::discriminant(tb);
                let null_ok = (ta == &Ty::Null && tb.nullable()) || (tb == &Ty::Null && ta.nullable());
                let text_ok = matches!((ta, tb), (Ty::Str, Ty::Bytes) | (Ty::Bytes, Ty::Str));
                if same_kind || null_ok || text_ok {
                    return;
                }
                let (ta, tb) = (ta.clone(), tb.clone());
                let d = if ta == Ty::Null || tb == Ty::Null {
                    let other = if ta == Ty::Null { &tb } else { &ta };
                    self.error(format!("{} is never null", other.describe()), whole.span())
                } else {
                    self.error(format!("cannot compare {} with {}", ta.describe(), tb.describe()), whole.span())
                };
                let literal = [a, b].into_iter().find_map(|e| if let Expr::Str(s, _) = e { Some(s.clone()) } else { None });
                for (x, y) in [(&ta, &tb), (&tb, &ta)] {
                    let what = match (x, y) {
                        (Ty::Role, Ty::Str) => "role names",
                        (Ty::State, Ty::Str) => "state names",
                        (Ty::Method, Ty::Str) => "methods",
                        (Ty::Session(_), Ty::Str) => {
                            d.notes.push("to find the session whose ID is a string, write `session(STRING)`".into());
                            continue;
                        }
                        _ => continue,
                    };
                    match &literal {
                        Some(text) => d.notes.push(format!("{what} are written bare: `{text}`, not `\"{text}\"`")),
                        None => d.notes.push(format!("{what} are written bare, without quotes")),
                    }
                }
            }
        }
    }

    fn resolve_name(&mut self, name: &str, span: Span, op: CmpOp, other: &Ty) {
        let ident = Ident { name: name.to_string(), span };
        if op.is_ordering() && !matches!(other, Ty::Unknown) {
            self.error(format!("`{op}` compares integers; `{name}` is a bare name"), span);
            return;
        }
        match other {
            Ty::State => {
                if self.m.state(name).is_some() {
                    return;
                }
                if self.m.role(name).is_some() {
                    self.error(format!("cannot compare a state with a role: `{name}` is a role"), span)
                        .notes
                        .push(format!("`.state` is an execution state; to test the role, write `X.role == {name}`"));
                } else {
                    self.unknown_state(&ident);
                }
            }
            Ty::Role => {
                if self.m.role(name).is_some() {
                    return;
                }
                if self.m.state(name).is_some() {
                    self.error(format!("cannot compare a role with a state: `{name}` is a state"), span)
                        .notes
                        .push(format!("`.role` is the role a session plays; to test the state, write `X.state == {name}`"));
                } else {
                    self.unknown_role(&ident);
                }
            }
            Ty::Method => {
                let upper = name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if !upper {
                    let d = self.warning(format!("`{name}` does not look like a SIP method"), span);
                    d.notes.push("methods are case-sensitive and uppercase (INVITE, ACK, BYE, ...); responses are OK, PROVISIONAL and ERROR; timers TIMER".into());
                    // The methods and events it is commonly compared with; other all-uppercase tokens
                    // are accepted too (extension methods).
                    let known = tandem_sip::Method::STANDARD_NAMES.iter().chain(&crate::EVENT_METHODS).copied();
                    if let Some(s) = closest(name, known) {
                        d.notes.push(format!("did you mean `{s}`?"));
                    }
                }
            }
            Ty::Unknown => {}
            Ty::Null => {
                self.error(format!("cannot compare the bare name `{name}` with null"), span);
            }
            Ty::Str => {
                self.error(format!("cannot compare a string with the bare name `{name}`"), span)
                    .notes
                    .push(format!("if you mean the text, write \"{name}\""));
            }
            other => {
                self.error(format!("cannot compare {} with the bare name `{name}`", other.describe()), span).notes.push(
                    "bare names stand for states (compared with `.state`), roles (with `.role`) and methods (with `msg.method`)".into(),
                );
            }
        }
    }

    fn nav_ty(&mut self, n: &Nav, scope: &Scope) -> Ty {
        let mut ty = match &n.root {
            NavRoot::MsgMethod | NavRoot::MsgCseq => Ty::Method,
            NavRoot::MsgStatus => Ty::Int,
            NavRoot::MsgPayload | NavRoot::MsgTimer => Ty::Str,
            NavRoot::MsgSips => Ty::Session(None),
            // The application session's attributes are not declared: not checked.
            NavRoot::MsgApps => Ty::Unknown,
            NavRoot::Var(v) => match scope.var(&v.name) {
                Some(t) => t.clone(),
                None => {
                    let vars: Vec<&str> = scope.vars.iter().map(|(n, _)| n.as_str()).collect();
                    let d = self.error(format!("unknown variable `{}`", v.name), v.span);
                    d.notes.push("bind it with `let NAME = EXPR` before `when` (a variable can use only the ones bound before it)".into());
                    if let Some(s) = closest(&v.name, vars.iter().copied()) {
                        d.notes.push(format!("did you mean `{s}`?"));
                    }
                    return Ty::Unknown;
                }
            },
        };
        ty = self.narrowed(ty, n, 0, scope);
        for (k, seg) in n.path.iter().enumerate() {
            ty = match ty {
                Ty::Unknown => Ty::Unknown,
                Ty::Session(role) => match seg.name.as_str() {
                    "role" => Ty::Role,
                    "state" => Ty::State,
                    attr => self.attribute_ty(role.as_deref(), attr, seg.span),
                },
                other => {
                    let prefix = nav_key(n, k);
                    self.error(
                        format!("`{prefix}` is {}, not a session: the navigation cannot continue with `.{}`", other.describe(), seg.name),
                        seg.span,
                    );
                    return Ty::Unknown;
                }
            };
            ty = self.narrowed(ty, n, k + 1, scope);
        }
        ty
    }

    fn narrowed(&self, ty: Ty, n: &Nav, k: usize, scope: &Scope) -> Ty {
        match (&ty, scope.narrow.get(&nav_key(n, k))) {
            (Ty::Session(_), Some(Narrow::Role(r))) if self.m.role(r).is_some() => Ty::Session(Some(r.clone())),
            _ => ty,
        }
    }

    fn attribute_ty(&mut self, role: Option<&str>, attr: &str, span: Span) -> Ty {
        let m = self.m;
        match role {
            Some(r) => {
                let Some(role) = m.role(r) else { return Ty::Unknown };
                if let Some(a) = role.attribute(attr) {
                    return Ty::from_attr(&a.ty);
                }
                let names: Vec<&str> = role.attributes.iter().map(|a| a.name.name.as_str()).collect();
                let d = self.error(format!("role {r} has no attribute `{attr}`"), span);
                d.notes.push(format!("the attributes of {r} are {}, and the built-ins `role` and `state`", quote_list(&names)));
                if let Some(s) = closest(attr, names.iter().copied().chain(["role", "state"])) {
                    d.notes.push(format!("did you mean `{s}`?"));
                }
                Ty::Unknown
            }
            None => {
                let found: Vec<Ty> = m.roles.iter().filter_map(|r| r.attribute(attr)).map(|a| Ty::from_attr(&a.ty)).collect();
                match found.split_first() {
                    None => {
                        let all: Vec<&str> = m.roles.iter().flat_map(|r| r.attributes.iter().map(|a| a.name.name.as_str())).collect();
                        let d = self.error(format!("no role has an attribute `{attr}`"), span);
                        d.notes.push(format!(
                            "the attributes are {}, and the built-ins `role` and `state`",
                            quote_list(all.iter().collect::<std::collections::BTreeSet<_>>())
                        ));
                        if let Some(s) = closest(attr, all.iter().copied().chain(["role", "state"])) {
                            d.notes.push(format!("did you mean `{s}`?"));
                        }
                        Ty::Unknown
                    }
                    Some((first, rest)) if rest.iter().all(|t| t == first) => first.clone(),
                    // Same name, different types in different roles: the guard should say which
                    // role the session plays (`X.role == R`).
                    Some(_) => Ty::Unknown,
                }
            }
        }
    }

    // ---------------------------------------------------------------- graph

    fn graph(&mut self) {
        let m = self.m;
        let Some(initial) = m.initial_state() else { return };
        let known: HashSet<&str> = m.states.iter().map(|s| s.name.name.as_str()).collect();

        // Forward reachability through transitions and `moves`.
        let mut reached: HashSet<&str> = HashSet::from([initial.name.name.as_str()]);
        loop {
            let before = reached.len();
            for t in &m.transitions {
                let fired_from: Vec<&str> = t.from.iter().map(|f| f.name.as_str()).filter(|f| reached.contains(f)).collect();
                if fired_from.is_empty() {
                    continue;
                }
                for f in fired_from {
                    let to = t.target_for(f);
                    if known.contains(to) {
                        reached.insert(to);
                    }
                }
                for mv in &t.moves {
                    if known.contains(mv.to.name.as_str()) {
                        reached.insert(&mv.to.name);
                    }
                }
            }
            if reached.len() == before {
                break;
            }
        }
        for s in &m.states {
            if !reached.contains(s.name.name.as_str()) {
                self.error(format!("state `{}` is unreachable", s.name.name), s.name.span).notes.push(format!(
                    "no sequence of transitions (or `moves` of other executions) leads to it from the initial state `{}`",
                    initial.name.name
                ));
            }
        }

        // Ways out, and whether a final state can be reached (through this execution's own
        // transitions: `moves` change other executions).
        let finals: HashSet<&str> = m.final_states().map(|s| s.name.name.as_str()).collect();
        let mut preds: HashMap<&str, Vec<&str>> = HashMap::new();
        for t in &m.transitions {
            for (f, to) in t.edges() {
                if f != to {
                    preds.entry(to).or_default().push(f);
                }
            }
        }
        let stuck = |name: &str| !finals.contains(name) && !m.transitions_from(name).any(|t| t.target_for(name) != name);
        // States from which a final state or a stuck state (reported on its own) is reachable.
        let mut can_finish: HashSet<&str> =
            m.states.iter().map(|s| s.name.name.as_str()).filter(|s| finals.contains(s) || stuck(s)).collect();
        let mut queue: VecDeque<&str> = can_finish.iter().copied().collect();
        while let Some(s) = queue.pop_front() {
            for p in preds.get(s).into_iter().flatten() {
                if can_finish.insert(p) {
                    queue.push_back(p);
                }
            }
        }
        for s in &m.states {
            let name = s.name.name.as_str();
            if s.kind == StateKind::Final {
                continue;
            }
            if stuck(name) {
                self.error(format!("state `{name}` has no way out"), s.name.span).notes.push(
                    "it is not final and no transition leaves it: an execution that gets there stays forever (add a transition \
                     to another state, or mark it `final`)"
                        .into(),
                );
            } else if !finals.is_empty() && !can_finish.contains(name) {
                self.error(format!("no final state can be reached from state `{name}`"), s.name.span)
                    .notes
                    .push("every path out of it loops among non-final states: its executions never end".into());
            }
        }
    }
}

/// Roles that the guard's top-level conjuncts fix: `X.role == R` or `X.role == null`.
fn narrowings(m: &Machine, guard: &Expr) -> HashMap<String, Narrow> {
    let mut conjuncts = Vec::new();
    let mut stack = vec![guard];
    while let Some(e) = stack.pop() {
        match e {
            Expr::And(a, b) => {
                stack.push(b);
                stack.push(a);
            }
            other => conjuncts.push(other),
        }
    }
    let mut out = HashMap::new();
    for c in conjuncts {
        let Expr::Cmp(a, CmpOp::Eq, b) = c else { continue };
        let (nav, other) = match (&**a, &**b) {
            (Expr::Nav(n), o) | (o, Expr::Nav(n)) if n.path.last().is_some_and(|p| p.name == "role") => (n, o),
            _ => continue,
        };
        let key = nav_key(nav, nav.path.len() - 1);
        match other {
            Expr::Name(r) if m.role(&r.name).is_some() => {
                out.insert(key, Narrow::Role(r.name.clone()));
            }
            Expr::Null(_) => {
                out.insert(key, Narrow::Null);
            }
            _ => {}
        }
    }
    out
}
