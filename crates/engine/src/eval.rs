//! Evaluation of guards and handles against a message and the sessions it reaches.
//!
//! Reading a session's attributes may require holding the session: the environment answers
//! `Err(Need(id))` when it does, and the negotiator acquires it and evaluates again.

use crate::sorted_set::SortedSet;
use smallvec::SmallVec;
use smol_str::SmolStr;
use tandem_container::SessionId;
use tandem_contract::ast::{CmpOp, Expr, Nav, NavRoot};

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
pub trait Env {
    /// `msg.method`, `msg.status`, `msg.payl`, `msg.timer`, `msg.sips`.
    fn message(&self, root: &NavRoot) -> Value;
    /// `msg.method`'s text.
    fn method(&self) -> &str;
    /// An attribute of the message's application session.
    fn app_attr(&mut self, name: &str) -> Result<Value, Need>;
    /// An attribute of a session (including the built-ins `role` and `state`).
    fn session_attr(&mut self, session: SessionId, name: &str) -> Result<Value, Need>;
    /// `session(text)`.
    fn session_of(&mut self, text: &str) -> Value;
    /// `session(msg.payl)`: the same as `session_of` of the payload's text, without making a
    /// text value of the payload first.
    fn payload_session(&mut self) -> Value;
    /// The initial state's name (the state of a [`Value::NewSession`]).
    fn initial_state(&self) -> &str;
}

/// `let` bindings of one transition (a transition has a few: kept inline).
#[derive(Default)]
pub struct Vars {
    vars: SmallVec<[(SmolStr, Value); 2]>,
}

impl Vars {
    pub fn bind(&mut self, name: &str, value: Value) {
        self.vars.push((SmolStr::new(name), value));
    }

    fn get(&self, name: &str) -> Value {
        self.vars.iter().rev().find(|(n, _)| n == name).map_or(Value::Null, |(_, v)| v.clone())
    }
}

pub fn eval(expr: &Expr, env: &mut dyn Env, vars: &Vars) -> Result<Value, Need> {
    Ok(match expr {
        Expr::Nav(nav) => nav_value(nav, env, vars, None)?,
        Expr::SessionOf(inner, _) => match &**inner {
            // `msg.payl` is always text: look the session up from the body directly.
            Expr::Nav(nav) if matches!(nav.root, NavRoot::MsgPayload) && nav.path.is_empty() => env.payload_session(),
            inner => match eval(inner, env, vars)? {
                Value::Str(s) => env.session_of(&s),
                _ => Value::Null,
            },
        },
        Expr::Name(i) => Value::Str(SmolStr::new(&i.name)),
        Expr::Str(s, _) => Value::Str(SmolStr::new(s)),
        Expr::Int(i, _) => Value::Int(*i),
        Expr::Bool(b, _) => Value::Bool(*b),
        Expr::Null(_) => Value::Null,
        Expr::Not(e, _) => Value::Bool(!truthy(&eval(e, env, vars)?)),
        // Short-circuit: the right side may need sessions the left side rules out.
        Expr::And(a, b) => Value::Bool(truthy(&eval(a, env, vars)?) && truthy(&eval(b, env, vars)?)),
        Expr::Or(a, b) => Value::Bool(truthy(&eval(a, env, vars)?) || truthy(&eval(b, env, vars)?)),
        Expr::Cmp(a, op, b) => {
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

/// The text of an operand that is text whatever the sessions hold: a name, a string or
/// `msg.method`.
fn fixed_text<'x>(expr: &'x Expr, env: &'x dyn Env) -> Option<&'x str> {
    match expr {
        Expr::Name(i) => Some(&i.name),
        Expr::Str(s, _) => Some(s),
        Expr::Nav(nav) if nav.path.is_empty() && matches!(nav.root, NavRoot::MsgMethod) => Some(env.method()),
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

/// Evaluates a navigation expression, adding every session it traverses (the root's and
/// each intermediate one's, and the result if it is a session) to `traversed`.
pub fn eval_nav(nav: &Nav, env: &mut dyn Env, vars: &Vars, traversed: &mut SortedSet<SessionId>) -> Result<Value, Need> {
    nav_value(nav, env, vars, Some(traversed))
}

/// A navigation's value, noting the sessions it traverses when asked to.
pub fn nav_value(nav: &Nav, env: &mut dyn Env, vars: &Vars, mut traversed: Option<&mut SortedSet<SessionId>>) -> Result<Value, Need> {
    let mut value = match &nav.root {
        NavRoot::Var(v) => vars.get(&v.name),
        NavRoot::MsgApps => {
            let Some(first) = nav.path.first() else { return Ok(Value::Null) };
            let mut v = env.app_attr(&first.name)?;
            for step in &nav.path[1..] {
                v = step_from(v, &step.name, env, traversed.as_deref_mut())?;
            }
            if let (Value::Session(id), Some(t)) = (&v, traversed) {
                t.insert(*id);
            }
            return Ok(v);
        }
        root => env.message(root),
    };
    for step in &nav.path {
        value = step_from(value, &step.name, env, traversed.as_deref_mut())?;
    }
    if let (Value::Session(id), Some(t)) = (&value, traversed) {
        t.insert(*id);
    }
    Ok(value)
}

fn step_from(value: Value, name: &str, env: &mut dyn Env, traversed: Option<&mut SortedSet<SessionId>>) -> Result<Value, Need> {
    match value {
        Value::Session(id) => {
            if let Some(t) = traversed {
                t.insert(id);
            }
            env.session_attr(id, name)
        }
        Value::NewSession if name == "state" => Ok(Value::Str(SmolStr::new(env.initial_state()))),
        _ => Ok(Value::Null),
    }
}
