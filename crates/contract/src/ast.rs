//! The contract of one service: a business machine (roles, states, transitions), each
//! transition with a guard and the handles whose sessions it needs exclusively.
//!
//! Every node carries the [`Span`] of its source text, for diagnostics.

/// Byte range in the source file; `line` and `col` (1-based, col in characters) of its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub line: u32,
    pub col: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// `service NAME`
    pub service: Ident,
    pub roles: Vec<Role>,
    pub states: Vec<State>,
    pub transitions: Vec<Transition>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    pub name: Ident,
    /// `role Caller holds state { .. }`: this role's sessions carry the execution's state.
    pub holds_state: bool,
    /// `state via caller`: how a session of this role reaches the state holder (an attribute
    /// of type `session <holder role>`). None for the holder itself (and for roles that never
    /// receive messages, which the checker reports).
    pub state_via: Option<Ident>,
    pub attributes: Vec<Attribute>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub name: Ident,
    pub ty: AttrType,
    /// `once`: single-assignment (set once, never changed afterwards).
    pub once: bool,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttrType {
    String,
    Int,
    Bool,
    Bytes,
    /// `session ROLE`: a reference to a SIP session playing that role.
    Session(Ident),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    Initial,
    Normal,
    Final,
}

#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub name: Ident,
    pub kind: StateKind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub name: Ident,
    /// Source states (`A, B -> C`).
    pub from: Vec<Ident>,
    pub to: Ident,
    /// `let x = EXPR` bindings, evaluated in order before the guard.
    pub lets: Vec<Let>,
    /// `when EXPR`.
    pub guard: Expr,
    /// `handles NAV, NAV, ...`.
    pub handles: Vec<Nav>,
    /// `moves NAV -> STATE`: state changes this transition makes in another execution
    /// (the dashed arrows of the paper's Figure 1). The session must be among the handles.
    pub moves: Vec<Move>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Let {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub target: Nav,
    pub to: Ident,
    pub span: Span,
}

/// A navigation expression (paper, Figure 2): a root followed by attribute names.
#[derive(Debug, Clone, PartialEq)]
pub struct Nav {
    pub root: NavRoot,
    /// Attribute names traversed after the root, in order. The last one may also be one of
    /// the built-ins `role` (the session's role name, or null before it has one) and `state`
    /// (the state of the execution the session belongs to).
    pub path: Vec<Ident>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NavRoot {
    /// `msg.method`: the request method (`INVITE`, ...), or for a response its type (`OK` for
    /// 2xx, `PROVISIONAL` for 1xx, `ERROR` for 3xx-6xx), or `TIMER` for a timer event.
    MsgMethod,
    /// `msg.status`: the response status code (0 for requests and timers).
    MsgStatus,
    /// `msg.payl`: the message body as text.
    MsgPayload,
    /// `msg.timer`: the name of the timer that fired (empty otherwise).
    MsgTimer,
    /// `msg.sips`: the SIP session the message arrived on.
    MsgSips,
    /// `msg.apps`: the message's application session (its attributes).
    MsgApps,
    /// A `let`-bound variable.
    Var(Ident),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Nav(Nav),
    /// `session(EXPR)`: the live SIP session whose ID is the text of EXPR, or null.
    SessionOf(Box<Expr>, Span),
    /// A bare name: a state, a role, or a method / response type, resolved by the checker from
    /// what it is compared with.
    Name(Ident),
    Str(String, Span),
    Int(i64, Span),
    Bool(bool, Span),
    Null(Span),
    Not(Box<Expr>, Span),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(Box<Expr>, CmpOp, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Nav(n) => n.span,
            Expr::Name(i) => i.span,
            Expr::SessionOf(_, s) | Expr::Str(_, s) | Expr::Int(_, s) | Expr::Bool(_, s) | Expr::Null(s) | Expr::Not(_, s) => *s,
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(a, _, b) => {
                let (a, b) = (a.span(), b.span());
                Span { start: a.start, end: b.end, line: a.line, col: a.col }
            }
        }
    }
}

impl Machine {
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.iter().find(|r| r.name.name == name)
    }

    pub fn state(&self, name: &str) -> Option<&State> {
        self.states.iter().find(|s| s.name.name == name)
    }

    pub fn initial_state(&self) -> Option<&State> {
        self.states.iter().find(|s| s.kind == StateKind::Initial)
    }

    pub fn transition(&self, name: &str) -> Option<&Transition> {
        self.transitions.iter().find(|t| t.name.name == name)
    }
}
