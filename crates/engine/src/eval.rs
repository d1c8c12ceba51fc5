//! Evaluation of compiled guards and handles (see [`crate::compiled::Program`]) against a
//! message and the sessions it reaches.
//!
//! Reading a session's attributes may require holding the session: the environment answers
//! `Err(Need(id))` when it does, and the negotiator acquires it and evaluates again.

use crate::compiled::{CExpr, CNav, Root, Step};
use crate::engine::key;
use crate::locks::Key;
use crate::sorted_set::SortedSet;
use smallvec::SmallVec;
use smol_str::SmolStr;
use tandem_container::SessionId;
use tandem_contract::ast::{CmpOp, NavRoot};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    /// Text; short values (names, states, methods) are stored inline, without allocating.
    Str(SmolStr),
    Session(SessionId),
    /// The session an initial request will create: no role, the initial state, no attributes.
    NewSession,
}

impl Value {
    fn text(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Evaluation needs this session held first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need(pub SessionId);

/// What evaluation may ask of the message and the sessions.
pub(crate) trait Env {
    /// `msg.method`, `msg.status`, `msg.payl`, `msg.timer`, `msg.sips`.
    fn message(&self, root: &NavRoot) -> Value;
    /// `msg.method`'s text.
    fn method(&self) -> &str;
    /// An attribute of the message's application session.
    fn app_attr(&mut self, name: &str) -> Result<Value, Need>;
    /// One navigation step from a session: its role, its execution's state, or an attribute.
    fn session_step(&mut self, session: SessionId, step: Step) -> Result<Value, Need>;
    /// `msg.sips.role`: null (`None`), or the index of the role the contract declares by its
    /// name (`Some(None)` for a name it does not declare).
    fn sips_role(&mut self) -> Result<Option<Option<usize>>, Need>;
    /// `session(text)`.
    fn session_of(&mut self, text: &str) -> Value;
    /// `session(msg.payl)`: the same as `session_of` of the payload's text, without making a
    /// text value of the payload first.
    fn payload_session(&mut self) -> Value;
    /// The initial state (the state of a [`Value::NewSession`]).
    fn initial_state(&self) -> Value;
}

/// `let` bindings of one transition, by index (a transition has a few: kept inline).
#[derive(Default, Clone, PartialEq)]
pub struct Vars {
    vars: SmallVec<[Value; 2]>,
}

impl Vars {
    pub fn push(&mut self, value: Value) {
        self.vars.push(value);
    }

    /// Variable `index` if it holds a session.
    pub(crate) fn session(&self, index: usize) -> Option<SessionId> {
        match self.vars.get(index) {
            Some(Value::Session(id)) => Some(*id),
            _ => None,
        }
    }

    fn get(&self, index: Option<usize>) -> Value {
        index.and_then(|i| self.vars.get(i)).map_or(Value::Null, Value::clone)
    }
}

pub(crate) fn eval(expr: &CExpr, env: &mut dyn Env, vars: &Vars) -> Result<Value, Need> {
    Ok(match expr {
        CExpr::Const(v) => v.clone(),
        CExpr::Method => Value::Str(SmolStr::new(env.method())),
        CExpr::Nav(nav) => nav_value(nav, env, vars, None)?,
        // `msg.payl` is always text: look the session up from the body directly.
        CExpr::PayloadSession => env.payload_session(),
        CExpr::SipsRole { role, negate } => Value::Bool(sips_role_test(env.sips_role()?, *role, *negate)),
        CExpr::SessionOf(inner) => match eval(inner, env, vars)? {
            Value::Str(s) => env.session_of(&s),
            _ => Value::Null,
        },
        CExpr::Not(e) => Value::Bool(!truthy(&eval(e, env, vars)?)),
        // Short-circuit: the right side may need sessions the left side rules out.
        CExpr::And(a, b) => Value::Bool(truthy(&eval(a, env, vars)?) && truthy(&eval(b, env, vars)?)),
        CExpr::Or(a, b) => Value::Bool(truthy(&eval(a, env, vars)?) || truthy(&eval(b, env, vars)?)),
        CExpr::Cmp(a, op, b) => {
            // Most guards start by testing the method against a name: compare the texts
            // without making values of them (same result as `compare` on two texts).
            if let (CmpOp::Eq | CmpOp::Ne, Some(x), Some(y)) = (op, fixed_text(a, &*env), fixed_text(b, &*env)) {
                return Ok(Value::Bool((x == y) == (*op == CmpOp::Eq)));
            }
            let (a, b) = (eval(a, env, vars)?, eval(b, env, vars)?);
            Value::Bool(compare(&a, *op, &b))
        }
    })
}

/// `msg.sips.role == role` (`!=` when `negate`), `read` being `msg.sips.role` as
/// [`Env::sips_role`] answers it: null tests true only against null, an undeclared role never.
pub(crate) fn sips_role_test(read: Option<Option<usize>>, role: Option<usize>, negate: bool) -> bool {
    let is = match (read, role) {
        (None, None) => true,
        (Some(Some(read)), Some(role)) => read == role,
        _ => false,
    };
    is != negate
}

/// The text of an operand that is text whatever the sessions hold: a name, a string or
/// `msg.method`.
fn fixed_text<'x>(expr: &'x CExpr, env: &'x dyn Env) -> Option<&'x str> {
    match expr {
        CExpr::Const(Value::Str(s)) => Some(s),
        CExpr::Method => Some(env.method()),
        _ => None,
    }
}

fn truthy(v: &Value) -> bool {
    matches!(v, Value::Bool(true))
}

fn compare(a: &Value, op: CmpOp, b: &Value) -> bool {
    use std::cmp::Ordering;
    let ord = match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        _ => None,
    };
    let eq = match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::NewSession, Value::NewSession) => true,
        (Value::Session(x), Value::Session(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        _ => matches!((a.text(), b.text()), (Some(x), Some(y)) if x == y),
    };
    match op {
        CmpOp::Eq => eq,
        CmpOp::Ne => !eq,
        CmpOp::Lt => ord == Some(Ordering::Less),
        CmpOp::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        CmpOp::Gt => ord == Some(Ordering::Greater),
        CmpOp::Ge => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
    }
}

/// A navigation's value, adding the lock key of every session it traverses (the root's and
/// each intermediate one's, and the result if it is a session) to `traversed` when asked to.
pub(crate) fn nav_value(nav: &CNav, env: &mut dyn Env, vars: &Vars, mut traversed: Option<&mut SortedSet<Key>>) -> Result<Value, Need> {
    let mut value = match &nav.root {
        Root::Var(i) => vars.get(*i),
        Root::App(name) => env.app_attr(name)?,
        Root::Null => return Ok(Value::Null),
        Root::Msg(root) => env.message(root),
    };
    for &step in &nav.path {
        value = step_from(value, step, env, traversed.as_deref_mut())?;
    }
    if let (Value::Session(id), Some(t)) = (&value, traversed) {
        t.insert(key(*id));
    }
    Ok(value)
}

fn step_from(value: Value, step: Step, env: &mut dyn Env, traversed: Option<&mut SortedSet<Key>>) -> Result<Value, Need> {
    match value {
        Value::Session(id) => {
            if let Some(t) = traversed {
                t.insert(key(id));
            }
            env.session_step(id, step)
        }
        Value::NewSession if step == Step::State => Ok(env.initial_state()),
        _ => Ok(Value::Null),
    }
}
