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
    /// Target state. For `-> same` with one source, that source (and `stays` is true); with
    /// several sources, the first source, and `stays` tells that each source stays where it is.
    /// The span of `to` is the span of the word `same` in both cases.
    pub to: Ident,
    /// `-> same`: the execution stays in whichever source state it is in (a self-loop on every
    /// source). Use [`Transition::target_for`] to get the state after the transition.
    pub stays: bool,
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
    /// `msg.cseq`: the method in the message's CSeq (for a response: the method of the request
    /// it answers, e.g. `INVITE` or `BYE`); empty when there is no message (a timer, or a
    /// response the container made up for a timeout or transport failure).
    MsgCseq,
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

// ------------------------------------------------------------------------------------------
// Helpers added with the parser and checker (tandem-contract). No existing meaning changed.

impl Span {
    /// The smallest span covering `self` and `other` (line/col of whichever starts first).
    pub fn cover(self, other: Span) -> Span {
        let (first, _) = if other.start < self.start { (other, self) } else { (self, other) };
        Span { start: first.start, end: self.end.max(other.end), line: first.line, col: first.col }
    }
}

impl Ident {
    pub fn new(name: impl Into<String>, span: Span) -> Ident {
        Ident { name: name.into(), span }
    }
}

impl std::fmt::Display for Ident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Machine {
    pub fn final_states(&self) -> impl Iterator<Item = &State> {
        self.states.iter().filter(|s| s.kind == StateKind::Final)
    }

    /// The role whose sessions carry the execution state (`holds state`), if exactly one does.
    pub fn state_holder(&self) -> Option<&Role> {
        let mut holders = self.roles.iter().filter(|r| r.holds_state);
        let first = holders.next()?;
        holders.next().is_none().then_some(first)
    }

    /// Transitions whose `from` contains `state`, in declaration order: the ones whose guards
    /// the engine evaluates for an execution in `state`.
    pub fn transitions_from<'a>(&'a self, state: &'a str) -> impl Iterator<Item = &'a Transition> + 'a {
        self.transitions.iter().filter(move |t| t.from.iter().any(|f| f.name == state))
    }
}

impl Role {
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.name.name == name)
    }
}

impl Transition {
    /// The state an execution in `source` (one of `from`) is in after this transition:
    /// `source` itself for `-> same`, else `to`.
    pub fn target_for<'a>(&'a self, source: &'a str) -> &'a str {
        if self.stays {
            source
        } else {
            &self.to.name
        }
    }

    /// `(source, target)` for every source state, with `-> same` resolved.
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str)> {
        self.from.iter().map(move |f| (f.name.as_str(), self.target_for(&f.name)))
    }
}

impl Nav {
    /// The name of the root as written: `msg.sips`, `msg.method`, ..., or the variable's name.
    pub fn root_text(&self) -> &str {
        match &self.root {
            NavRoot::MsgMethod => "msg.method",
            NavRoot::MsgStatus => "msg.status",
            NavRoot::MsgCseq => "msg.cseq",
            NavRoot::MsgPayload => "msg.payl",
            NavRoot::MsgTimer => "msg.timer",
            NavRoot::MsgSips => "msg.sips",
            NavRoot::MsgApps => "msg.apps",
            NavRoot::Var(v) => &v.name,
        }
    }

    /// True when both designate the same thing (same root and path; spans ignored).
    pub fn same_as(&self, other: &Nav) -> bool {
        self.root_text() == other.root_text()
            && matches!(self.root, NavRoot::Var(_)) == matches!(other.root, NavRoot::Var(_))
            && self.path.len() == other.path.len()
            && self.path.iter().zip(&other.path).all(|(a, b)| a.name == b.name)
    }
}

impl std::fmt::Display for Nav {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.root_text())?;
        for p in &self.path {
            write!(f, ".{}", p.name)?;
        }
        Ok(())
    }
}

impl CmpOp {
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The operator of the negated comparison: `!(a < b)` is `a >= b`.
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
        }
    }

    /// The operator with the operands swapped: `a < b` is `b > a`.
    pub fn flip(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Eq,
            CmpOp::Ne => CmpOp::Ne,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
        }
    }

    pub fn is_ordering(self) -> bool {
        !matches!(self, CmpOp::Eq | CmpOp::Ne)
    }
}

impl std::fmt::Display for CmpOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Expr {
    /// Binding strength for printing: 1 `||`, 2 `&&`, 3 comparison, 4 `!`, 5 primary.
    fn precedence(&self) -> u8 {
        match self {
            Expr::Or(..) => 1,
            Expr::And(..) => 2,
            Expr::Cmp(..) => 3,
            Expr::Not(..) => 4,
            _ => 5,
        }
    }

    fn fmt_operand(&self, f: &mut std::fmt::Formatter<'_>, min: u8) -> std::fmt::Result {
        if self.precedence() < min {
            write!(f, "({self})")
        } else {
            write!(f, "{self}")
        }
    }
}

/// Prints the expression in the contract language's syntax, with the parentheses precedence
/// needs (so the output parses back to the same tree, spans aside).
impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expr::Nav(n) => write!(f, "{n}"),
            Expr::SessionOf(e, _) => write!(f, "session({e})"),
            Expr::Name(i) => f.write_str(&i.name),
            Expr::Str(s, _) => {
                f.write_str("\"")?;
                for c in s.chars() {
                    match c {
                        '"' => f.write_str("\\\"")?,
                        '\\' => f.write_str("\\\\")?,
                        '\n' => f.write_str("\\n")?,
                        '\t' => f.write_str("\\t")?,
                        c => write!(f, "{c}")?,
                    }
                }
                f.write_str("\"")
            }
            Expr::Int(i, _) => write!(f, "{i}"),
            Expr::Bool(b, _) => write!(f, "{b}"),
            Expr::Null(_) => f.write_str("null"),
            Expr::Not(e, _) => {
                f.write_str("!")?;
                e.fmt_operand(f, 4)
            }
            // `&&` and `||` are associative: a right operand of the same operator needs no
            // parentheses for meaning, but keep them so the printed tree is the parsed one.
            Expr::And(a, b) => {
                a.fmt_operand(f, 2)?;
                f.write_str(" && ")?;
                b.fmt_operand(f, 3)
            }
            Expr::Or(a, b) => {
                a.fmt_operand(f, 1)?;
                f.write_str(" || ")?;
                b.fmt_operand(f, 2)
            }
            Expr::Cmp(a, op, b) => {
                a.fmt_operand(f, 4)?;
                write!(f, " {op} ")?;
                b.fmt_operand(f, 4)
            }
        }
    }
}
