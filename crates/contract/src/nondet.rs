//! The nondeterminism test: can two transitions that share a source state both fire on the
//! same message?
//!
//! Each guard (with its `let` variables inlined, so `p2t` in one transition and `peer` in
//! another compare equal when both are `session(msg.payl)`) is put in disjunctive normal form
//! over atoms `TERM op VALUE`. Two guards are exclusive when every conjunction of one contradicts
//! every conjunction of the other, i.e. their union contains contradictory atoms:
//!
//! - `t == a` and `t == b` with distinct constants (`msg.method == OK` / `msg.method == ERROR`,
//!   `x.role == Caller` / `x.role == null`, `x.state == A` / `x.state == B`);
//! - `t == a` and `t != a` (`x == null` / `x != null`; `E` / `!E` for a boolean `E`);
//! - integer bounds on `t` with an empty intersection (`msg.status < 300` / `msg.status >= 300`);
//! - `msg.method == OK` (2xx), `PROVISIONAL` (1xx), `ERROR` (3xx-6xx) or a request method or
//!   `TIMER` (status 0) against bounds on `msg.status`;
//! - `s op t` and its negation for two non-constant terms.
//!
//! Anything not proven contradictory is reported: the test is sound (it never misses an overlap
//! between guards under two-valued comparisons) but can report guards that are exclusive for
//! reasons it does not know.

use std::collections::HashMap;

use crate::ast::*;
use crate::diagnostic::Diagnostic;
use crate::util::quote_list;

/// Largest number of conjunctions a guard's DNF may have before the test gives up on it.
const MAX_CONJUNCTIONS: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Val {
    /// A non-constant term, by canonical text (`msg.sips.role`, `session(msg.payl).state`).
    Term(String),
    Name(String),
    Str(String),
    Int(i64),
    Bool(bool),
    Null,
}

impl Val {
    fn text(&self) -> String {
        match self {
            Val::Term(t) => t.clone(),
            Val::Name(n) => n.clone(),
            Val::Str(s) => Expr::Str(s.clone(), Span::default()).to_string(),
            Val::Int(i) => i.to_string(),
            Val::Bool(b) => b.to_string(),
            Val::Null => "null".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Atom {
    lhs: Val,
    op: CmpOp,
    rhs: Val,
}

impl Atom {
    fn text(&self) -> String {
        match (&self.op, &self.rhs) {
            (CmpOp::Eq, Val::Bool(true)) => self.lhs.text(),
            (CmpOp::Ne, Val::Bool(true)) => format!("!{}", self.lhs.text()),
            _ => format!("{} {} {}", self.lhs.text(), self.op, self.rhs.text()),
        }
    }
}

/// A guard in DNF: alternatives of conjunctions of atoms. `[]` is false, `[[]]` is true.
type Dnf = Vec<Vec<Atom>>;

struct TooComplex;

enum Lit {
    True,
    False,
    Atom(Atom),
}

/// Canonical atom: constants on the right, two terms in text order.
fn atom(lhs: Val, op: CmpOp, rhs: Val) -> Lit {
    let (lc, rc) = (!matches!(lhs, Val::Term(_)), !matches!(rhs, Val::Term(_)));
    match (lc, rc) {
        (true, true) => {
            let holds = match (op, &lhs, &rhs) {
                (CmpOp::Eq, a, b) => same(a, b),
                (CmpOp::Ne, a, b) => !same(a, b),
                (op, Val::Int(a), Val::Int(b)) => match op {
                    CmpOp::Lt => a < b,
                    CmpOp::Le => a <= b,
                    CmpOp::Gt => a > b,
                    _ => a >= b,
                },
                // Ill-typed (reported by the checker): keep it as an opaque atom.
                _ => {
                    return Lit::Atom(Atom {
                        lhs: Val::Term(format!("{} {op} {}", lhs.text(), rhs.text())),
                        op: CmpOp::Eq,
                        rhs: Val::Bool(true),
                    })
                }
            };
            if holds {
                Lit::True
            } else {
                Lit::False
            }
        }
        (true, false) => Lit::Atom(Atom { lhs: rhs, op: op.flip(), rhs: lhs }),
        (false, true) => Lit::Atom(Atom { lhs, op, rhs }),
        (false, false) => {
            if rhs < lhs {
                Lit::Atom(Atom { lhs: rhs, op: op.flip(), rhs: lhs })
            } else {
                Lit::Atom(Atom { lhs, op, rhs })
            }
        }
    }
}

/// Value equality as the engine sees it: a bare name is its text.
fn same(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Name(x) | Val::Str(x), Val::Name(y) | Val::Str(y)) => x == y,
        _ => a == b,
    }
}

/// `let` values already turned into terms, in binding order.
type Env = Vec<(String, Val)>;

fn term(e: &Expr, env: &Env) -> Val {
    match e {
        Expr::Nav(n) => {
            let mut base = match &n.root {
                NavRoot::Var(v) => match env.iter().rev().find(|(name, _)| *name == v.name) {
                    Some((_, val)) if n.path.is_empty() => return val.clone(),
                    Some((_, val)) => val.text(),
                    None => format!("?{}", v.name),
                },
                _ => n.root_text().to_string(),
            };
            for p in &n.path {
                base.push('.');
                base.push_str(&p.name);
            }
            Val::Term(base)
        }
        Expr::SessionOf(inner, _) => Val::Term(format!("session({})", term(inner, env).text())),
        Expr::Name(i) => Val::Name(i.name.clone()),
        Expr::Str(s, _) => Val::Str(s.clone()),
        Expr::Int(i, _) => Val::Int(*i),
        Expr::Bool(b, _) => Val::Bool(*b),
        Expr::Null(_) => Val::Null,
        // A condition used as a value (ill-typed; the checker reports it): opaque.
        other => Val::Term(format!("({other})")),
    }
}

fn or(mut a: Dnf, b: Dnf) -> Result<Dnf, TooComplex> {
    a.extend(b);
    if a.len() > MAX_CONJUNCTIONS {
        return Err(TooComplex);
    }
    Ok(a)
}

fn and(a: Dnf, b: Dnf) -> Result<Dnf, TooComplex> {
    if a.len().saturating_mul(b.len()) > MAX_CONJUNCTIONS {
        return Err(TooComplex);
    }
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in &a {
        for y in &b {
            let mut c = x.clone();
            for atom in y {
                if !c.contains(atom) {
                    c.push(atom.clone());
                }
            }
            out.push(c);
        }
    }
    Ok(out)
}

fn lit_dnf(l: Lit) -> Dnf {
    match l {
        Lit::True => vec![vec![]],
        Lit::False => vec![],
        Lit::Atom(a) => vec![vec![a]],
    }
}

/// DNF of `e` (of `!e` when `negated`), negations pushed onto the atoms.
fn dnf(e: &Expr, negated: bool, env: &Env) -> Result<Dnf, TooComplex> {
    match e {
        Expr::Not(inner, _) => dnf(inner, !negated, env),
        Expr::And(a, b) | Expr::Or(a, b) => {
            let (da, db) = (dnf(a, negated, env)?, dnf(b, negated, env)?);
            // De Morgan: a negated `&&` is an `||` of the negations, and the other way round.
            if matches!(e, Expr::And(..)) != negated {
                and(da, db)
            } else {
                or(da, db)
            }
        }
        Expr::Cmp(a, op, b) => {
            let (ta, tb) = (term(a, env), term(b, env));
            if !(negated && op.is_ordering()) {
                return Ok(lit_dnf(atom(ta, if negated { op.negate() } else { *op }, tb)));
            }
            // `!(a < b)` is `a >= b` only between integers: an ordering with null (an unset
            // int attribute) is false, so its negation also holds when either side is null.
            let mut alts = lit_dnf(atom(ta.clone(), op.negate(), tb.clone()));
            for t in [ta, tb] {
                if matches!(&t, Val::Term(k) if k != "msg.status") {
                    alts = or(alts, lit_dnf(atom(t, CmpOp::Eq, Val::Null)))?;
                }
            }
            Ok(alts)
        }
        Expr::Bool(v, _) => Ok(if *v != negated { vec![vec![]] } else { vec![] }),
        // A boolean-valued navigation `E` is the atom `E == true`; `!E` is `E != true`.
        other => Ok(lit_dnf(atom(term(other, env), if negated { CmpOp::Ne } else { CmpOp::Eq }, Val::Bool(true)))),
    }
}

/// The status codes `msg.method == m` implies.
fn status_range(method: &str) -> (i128, i128) {
    match method {
        "OK" => (200, 299),
        "PROVISIONAL" => (100, 199),
        "ERROR" => (300, 699),
        _ => (0, 0),
    }
}

/// True when the atoms cannot all hold together.
fn contradictory(atoms: &[&Atom]) -> bool {
    #[derive(Default)]
    struct Facts<'a> {
        eq: Vec<&'a Val>,
        ne: Vec<&'a Val>,
        lo: Option<i128>,
        hi: Option<i128>,
        /// An ordering comparison holds: the term is an integer (not null).
        ordered: bool,
    }
    impl Facts<'_> {
        fn bound(&mut self, lo: i128, hi: i128) {
            self.lo = Some(self.lo.map_or(lo, |l| l.max(lo)));
            self.hi = Some(self.hi.map_or(hi, |h| h.min(hi)));
        }
    }
    let mut facts: HashMap<&str, Facts> = HashMap::new();
    for a in atoms {
        let Val::Term(t) = &a.lhs else { continue };
        if let Val::Term(u) = &a.rhs {
            // Two terms: an exact negation contradicts; an ordering says both are integers.
            if atoms.iter().any(|b| b.lhs == a.lhs && b.rhs == a.rhs && b.op == a.op.negate()) {
                return true;
            }
            if a.op.is_ordering() {
                facts.entry(t).or_default().ordered = true;
                facts.entry(u).or_default().ordered = true;
            }
            continue;
        }
        let f = facts.entry(t).or_default();
        match (a.op, &a.rhs) {
            (CmpOp::Eq, v) => {
                f.eq.push(v);
                if let Val::Int(k) = v {
                    f.bound(i128::from(*k), i128::from(*k));
                }
            }
            (CmpOp::Ne, v) => f.ne.push(v),
            (op, Val::Int(k)) => {
                f.ordered = true;
                let k = i128::from(*k);
                match op {
                    CmpOp::Lt => f.bound(i128::MIN, k - 1),
                    CmpOp::Le => f.bound(i128::MIN, k),
                    CmpOp::Gt => f.bound(k + 1, i128::MAX),
                    _ => f.bound(k, i128::MAX),
                }
            }
            _ => {}
        }
    }
    // What the message type says about the status code.
    let method_range =
        facts.get("msg.method").and_then(|f| f.eq.iter().find_map(|v| if let Val::Name(m) = v { Some(status_range(m)) } else { None }));
    if let Some((lo, hi)) = method_range {
        facts.entry("msg.status").or_default().bound(lo, hi);
    }
    facts.values().any(|f| {
        let two_values = f.eq.windows(2).any(|w| !same(w[0], w[1]));
        let eq_and_ne = f.eq.iter().any(|v| f.ne.iter().any(|n| same(v, n)));
        let ordered_non_int = f.ordered && f.eq.iter().any(|v| !matches!(v, Val::Int(_)));
        let (lo, hi) = (f.lo.unwrap_or(i128::MIN), f.hi.unwrap_or(i128::MAX));
        let empty_range = lo > hi || (lo == hi && f.ne.iter().any(|v| matches!(v, Val::Int(k) if i128::from(*k) == lo)));
        two_values || eq_and_ne || ordered_non_int || empty_range
    })
}

fn satisfiable(conj: &[Atom]) -> bool {
    !contradictory(&conj.iter().collect::<Vec<_>>())
}

fn guard_dnf(t: &Transition) -> Result<Dnf, TooComplex> {
    let mut env: Env = Vec::new();
    for l in &t.lets {
        let v = term(&l.value, &env);
        env.push((l.name.name.clone(), v));
    }
    Ok(dnf(&t.guard, false, &env)?.into_iter().filter(|c| satisfiable(c)).collect())
}

pub(crate) fn check(m: &Machine) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut dnfs: Vec<Option<Dnf>> = Vec::new();
    for t in &m.transitions {
        match guard_dnf(t) {
            Ok(d) => {
                if d.is_empty() {
                    diags.push(
                        Diagnostic::warning(format!("the guard of transition {} can never be true", t.name.name), t.guard.span())
                            .with_note(format!("every alternative of `{}` contains contradictory conditions", t.guard)),
                    );
                }
                dnfs.push(Some(d));
            }
            Err(TooComplex) => {
                diags.push(
                    Diagnostic::warning(
                        format!("the guard of transition {} is too complex for the nondeterminism check", t.name.name),
                        t.guard.span(),
                    )
                    .with_note(format!(
                        "its disjunctive normal form has more than {MAX_CONJUNCTIONS} alternatives; it was not compared with the other guards"
                    )),
                );
                dnfs.push(None);
            }
        }
    }
    for (i, a) in m.transitions.iter().enumerate() {
        for (j, b) in m.transitions.iter().enumerate().skip(i + 1) {
            let shared: Vec<&str> = a.from.iter().filter(|f| b.from.iter().any(|g| g.name == f.name)).map(|f| f.name.as_str()).collect();
            if shared.is_empty() {
                continue;
            }
            let (Some(da), Some(db)) = (&dnfs[i], &dnfs[j]) else { continue };
            let witness = da.iter().flat_map(|x| db.iter().map(move |y| (x, y))).find(|(x, y)| {
                let all: Vec<&Atom> = x.iter().chain(y.iter()).collect();
                !contradictory(&all)
            });
            let Some((x, y)) = witness else { continue };
            let mut both: Vec<String> = Vec::new();
            for atom in x.iter().chain(y.iter()) {
                let s = atom.text();
                if !both.contains(&s) {
                    both.push(s);
                }
            }
            let states = if shared.len() == 1 { format!("state {}", shared[0]) } else { format!("states {}", quote_list(&shared)) };
            let condition = if both.is_empty() { "always".to_string() } else { format!("when {}", both.join(" && ")) };
            diags.push(
                Diagnostic::error(
                    format!("transitions {} and {} are nondeterministic: both can fire in {states}", a.name.name, b.name.name),
                    b.name.span,
                )
                .with_note(format!("{} (line {}): when {}", a.name.name, a.name.span.line, a.guard))
                .with_note(format!("{} (line {}): when {}", b.name.name, b.name.span.line, b.guard))
                .with_note(format!("both guards hold {condition}"))
                .with_note("make them exclusive: e.g. test a different `msg.method` or `msg.sips.role`, or add a condition to one and its negation to the other"),
            );
        }
    }
    diags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(src: &str) -> Dnf {
        let text = format!(
            "service s\nrole C holds state {{ x: session C  n: int }}\nstates {{ initial A final B }}\ntransition T: A -> B\n{src}\nhandles msg.sips"
        );
        let m = crate::parse(&text).unwrap_or_else(|e| panic!("{e:?}"));
        guard_dnf(&m.transitions[0]).unwrap_or_else(|_| panic!("too complex"))
    }

    #[test]
    fn dnf_pushes_negations_and_distributes() {
        let d = guard("when !(msg.method == OK && msg.sips.role == C) || msg.status > 3");
        let texts: Vec<Vec<String>> = d.iter().map(|c| c.iter().map(Atom::text).collect()).collect();
        assert_eq!(
            texts,
            vec![vec!["msg.method != OK".to_string()], vec!["msg.sips.role != C".to_string()], vec!["msg.status > 3".to_string()]]
        );
        let d = guard("when (msg.method == OK || msg.method == ERROR) && (msg.status == 1 || msg.sips.x == null)");
        // OK with status 1 and ERROR with status 1 are contradictory and dropped.
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn contradictions() {
        assert!(guard("when msg.method == OK && msg.method == ERROR").is_empty());
        assert!(guard("when msg.sips.x == null && null != msg.sips.x").is_empty());
        assert!(guard("when msg.status < 300 && msg.status >= 300").is_empty());
        assert!(guard("when msg.status >= 200 && msg.status <= 200 && msg.status != 200").is_empty());
        assert!(guard("when msg.method == OK && msg.status == 486").is_empty());
        assert!(guard("when msg.method == INVITE && msg.status > 0").is_empty());
        assert!(guard("let v = msg.sips.x when v.n == 1 && !(msg.sips.x.n == 1)").is_empty());
        assert!(guard("when msg.sips.x.n < msg.status && !(msg.status > msg.sips.x.n)").is_empty());
        assert!(guard("when false || 1 == 2").is_empty());
        assert!(guard("when msg.sips.n >= 3 && msg.sips.n == null").is_empty());
        assert!(guard("when msg.method == OK && msg.method == \"OK\"").len() == 1);
        // `!(n < 3)` also holds when n is null (unset): not the same as `n >= 3`.
        let d = guard("when !(msg.sips.n < 3)");
        let texts: Vec<Vec<String>> = d.iter().map(|c| c.iter().map(Atom::text).collect()).collect();
        assert_eq!(texts, vec![vec!["msg.sips.n >= 3".to_string()], vec!["msg.sips.n == null".to_string()]]);
        assert_eq!(guard("when !(msg.status < 3)").len(), 1);
        assert_eq!(guard("when true || msg.method == OK").len(), 2);
        assert_eq!(guard("when msg.method == OK && msg.status < 300").len(), 1);
    }
}
