//! Parser: source text -> [`ast::Machine`], with spans on every node.
//!
//! The grammar lives in `contract.pest` (pest PEG). Syntax errors are turned into one
//! [`Diagnostic`] that says what was expected and what was found; a few semantic problems that
//! the AST cannot represent (an unknown `msg.` field, an unknown attribute type, an integer out of
//! range, a bad string escape, two `state via` in one role) are reported here too.

use pest::iterators::Pair;
use pest::Parser as _;
use pest_derive::Parser;

use crate::ast::*;
use crate::diagnostic::{Diagnostic, LineIndex};
use crate::util::{closest, quote_list};

#[derive(Parser)]
#[grammar = "contract.pest"]
struct ContractParser;

/// Deepest nesting of parentheses accepted (keeps every recursive pass far from the stack limit).
const MAX_PAREN_DEPTH: usize = 64;
/// Deepest expression tree accepted (long `&&` chains nest one level per operand).
const MAX_EXPR_DEPTH: usize = 512;

pub(crate) const KEYWORDS: &[&str] = &[
    "service",
    "role",
    "holds",
    "states",
    "state",
    "via",
    "initial",
    "final",
    "transition",
    "same",
    "let",
    "when",
    "handles",
    "moves",
    "session",
    "once",
    "null",
    "true",
    "false",
    "msg",
];

const MSG_FIELDS: &[&str] = &["method", "status", "cseq", "payl", "timer", "sips", "apps"];
const TYPE_NAMES: &[&str] = &["string", "int", "bool", "bytes"];

/// Parses a contract. On failure, returns the diagnostics (all errors): one for a syntax error,
/// possibly several for problems found while building the AST.
pub fn parse(source: &str) -> Result<Machine, Vec<Diagnostic>> {
    let idx = LineIndex::new(source);
    if let Some(d) = prescan(source, &idx) {
        return Err(vec![d]);
    }
    let mut pairs = ContractParser::parse(Rule::file, source).map_err(|e| vec![syntax_error(&e, source, &idx)])?;
    let mut b = Builder { idx, diags: Vec::new(), too_deep_reported: false };
    let machine = match pairs.next() {
        Some(file) => b.file(file),
        None => None,
    };
    match machine {
        Some(m) if b.diags.is_empty() => Ok(m),
        _ => {
            if b.diags.is_empty() {
                b.diags.push(Diagnostic::error("internal error: the parse tree has an unexpected shape", b.idx.span(0, 0)));
            }
            Err(b.diags)
        }
    }
}

/// Rejects parentheses nested deeper than [`MAX_PAREN_DEPTH`] before pest sees them.
fn prescan(source: &str, idx: &LineIndex) -> Option<Diagnostic> {
    let bytes = source.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'(' => {
                depth += 1;
                if depth > MAX_PAREN_DEPTH {
                    return Some(Diagnostic::error(
                        format!("expression nested too deeply (more than {MAX_PAREN_DEPTH} levels of parentheses)"),
                        idx.span(i, i + 1),
                    ));
                }
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

// ------------------------------------------------------------------------------------------
// Syntax errors

fn syntax_error(e: &pest::error::Error<Rule>, source: &str, idx: &LineIndex) -> Diagnostic {
    let pos = match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    }
    .min(source.len());
    let found = Found::at(source, pos);
    let span = idx.span(pos, found.end);
    match &e.variant {
        pest::error::ErrorVariant::CustomError { message } => Diagnostic::error(format!("cannot parse the contract here: {message}"), span),
        pest::error::ErrorVariant::ParsingError { positives, negatives } => {
            if found.unterminated_string {
                return Diagnostic::error("unterminated string (a closing `\"` is missing on this line)", span);
            }
            let mut ranked: Vec<Rule> = positives.clone();
            ranked.sort_by_key(|r| rank(*r));
            let mut expected: Vec<&'static str> = Vec::new();
            for r in &ranked {
                let d = describe(*r);
                if !expected.contains(&d) {
                    expected.push(d);
                }
            }
            let mut diag = if expected.is_empty() {
                let what = negatives.first().map_or("this", |r| describe(*r));
                Diagnostic::error(format!("unexpected {}: {what} is not allowed here", found.text), span)
            } else {
                Diagnostic::error(format!("expected {}, found {}", or_list(&expected), found.text), span)
            };
            let expects = |r: Rule| positives.contains(&r);
            if found.is_keyword && expects(Rule::ident) {
                diag.notes.push(format!("`{}` is a keyword and cannot be used as a name", found.word));
            }
            if found.word == "=" && (expects(Rule::cmp_op) || expects(Rule::AND)) {
                diag.notes.push("use `==` to compare".into());
            }
            if ["==", "!=", "<", "<=", ">", ">="].contains(&found.word.as_str()) && expects(Rule::AND) {
                diag.notes.push("comparisons cannot be chained: combine them with `&&` or `||`".into());
            }
            if found.is_word && !found.is_keyword {
                let kws: Vec<&str> = positives.iter().filter_map(|r| keyword_of(*r)).collect();
                if let Some(k) = closest(&found.word, kws.iter().copied()) {
                    diag.notes.push(format!("did you mean `{k}`?"));
                }
            }
            if expects(Rule::attr_type) || expects(Rule::type_name) {
                if let Some(t) = closest(&found.word, TYPE_NAMES.iter().copied().chain(["session"])) {
                    diag.notes.push(format!("did you mean `{t}`?"));
                } else if found.word.chars().next().is_some_and(char::is_uppercase) {
                    diag.notes.push(format!("for a reference to a session of role {0}, write `session {0}`", found.word));
                }
            }
            let clause = ["let", "when", "handles", "moves"];
            if clause.contains(&found.word.as_str()) && positives.iter().filter_map(|r| keyword_of(*r)).any(|k| clause.contains(&k)) {
                diag.notes.push("the clauses of a transition come in this order: `let`s, `when`, `handles`, `moves`".into());
            }
            if found.word == "\"" && expects(Rule::ident) {
                diag.notes.push("names of states, roles and methods are written bare, without quotes".into());
            }
            diag
        }
    }
}

/// What the parser stumbled on.
struct Found {
    /// For the message: "`word`", "end of file", "a string", ...
    text: String,
    /// The raw token.
    word: String,
    end: usize,
    is_word: bool,
    is_keyword: bool,
    unterminated_string: bool,
}

impl Found {
    fn at(source: &str, pos: usize) -> Found {
        let rest = source.get(pos..).unwrap_or("");
        let mut f =
            Found { text: String::new(), word: String::new(), end: pos, is_word: false, is_keyword: false, unterminated_string: false };
        let Some(c) = rest.chars().next() else {
            f.text = "end of file".into();
            return f;
        };
        if c.is_ascii_alphanumeric() || c == '_' {
            let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            f.word = rest[..len].to_string();
            f.end = pos + len;
            f.is_word = !c.is_ascii_digit();
            f.is_keyword = KEYWORDS.contains(&f.word.as_str());
            f.text = if f.is_keyword { format!("keyword `{}`", f.word) } else { format!("`{}`", f.word) };
        } else if c == '"' {
            let line = rest.split('\n').next().unwrap_or("");
            let mut chars = line.char_indices().skip(1);
            let mut close = None;
            while let Some((i, ch)) = chars.next() {
                match ch {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        close = Some(i + 1);
                        break;
                    }
                    _ => {}
                }
            }
            f.unterminated_string = close.is_none();
            f.end = pos + close.unwrap_or(line.len());
            f.word = "\"".into();
            f.text = "a string".into();
        } else {
            let two = rest.get(..2).unwrap_or("");
            let tok = if ["->", "==", "!=", "<=", ">=", "&&", "||"].contains(&two) { two.to_string() } else { c.to_string() };
            f.end = pos + tok.len();
            f.text = if c.is_whitespace() || c.is_control() { format!("{c:?}") } else { format!("`{tok}`") };
            f.word = tok;
        }
        f
    }
}

/// Order of the alternatives in "expected ..." messages: what could continue the current
/// construct first, then clauses, then new declarations, then end of file.
fn rank(rule: Rule) -> u8 {
    match rule {
        Rule::DOT | Rule::COLON | Rule::COMMA | Rule::ARROW | Rule::ASSIGN | Rule::LPAREN | Rule::RPAREN | Rule::LBRACE => 0,
        Rule::RBRACE => 1,
        Rule::cmp_op => 2,
        Rule::AND | Rule::OR => 3,
        Rule::kw_service | Rule::kw_role | Rule::kw_states | Rule::kw_transition => 6,
        Rule::role_decl | Rule::states_decl | Rule::transition_decl => 6,
        Rule::EOI => 7,
        r if keyword_of(r).is_some() => 5,
        Rule::let_clause | Rule::when_clause | Rule::handles_clause | Rule::moves_clause => 5,
        _ => 4,
    }
}

fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn keyword_of(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::kw_service => "service",
        Rule::kw_role => "role",
        Rule::kw_holds => "holds",
        Rule::kw_states => "states",
        Rule::kw_state => "state",
        Rule::kw_via => "via",
        Rule::kw_initial => "initial",
        Rule::kw_final => "final",
        Rule::kw_transition => "transition",
        Rule::kw_same => "same",
        Rule::kw_let => "let",
        Rule::kw_when => "when",
        Rule::kw_handles => "handles",
        Rule::kw_moves => "moves",
        Rule::kw_session => "session",
        Rule::kw_once => "once",
        Rule::kw_null => "null",
        Rule::kw_true => "true",
        Rule::kw_false => "false",
        Rule::kw_msg => "msg",
        _ => return None,
    })
}

/// How a rule reads in "expected ..." messages.
fn describe(rule: Rule) -> &'static str {
    match rule {
        Rule::kw_service => "`service`",
        Rule::kw_role | Rule::role_decl => "`role`",
        Rule::kw_holds | Rule::holds_state => "`holds`",
        Rule::kw_states | Rule::states_decl => "`states`",
        Rule::kw_state => "`state`",
        Rule::kw_via => "`via`",
        Rule::kw_initial => "`initial`",
        Rule::kw_final => "`final`",
        Rule::kw_transition | Rule::transition_decl => "`transition`",
        Rule::kw_same | Rule::same => "`same`",
        Rule::kw_let | Rule::let_clause => "`let`",
        Rule::kw_when | Rule::when_clause => "`when`",
        Rule::kw_handles | Rule::handles_clause => "`handles`",
        Rule::kw_moves | Rule::moves_clause => "`moves`",
        Rule::kw_session => "`session`",
        Rule::kw_once | Rule::once => "`once`",
        Rule::kw_null => "`null`",
        Rule::kw_true => "`true`",
        Rule::kw_false => "`false`",
        Rule::kw_msg => "`msg`",
        Rule::ARROW => "`->`",
        Rule::COLON => "`:`",
        Rule::COMMA => "`,`",
        Rule::DOT => "`.`",
        Rule::LBRACE => "`{`",
        Rule::RBRACE => "`}`",
        Rule::LPAREN => "`(`",
        Rule::RPAREN => "`)`",
        Rule::ASSIGN => "`=`",
        Rule::AND => "`&&`",
        Rule::OR => "`||`",
        Rule::NOT => "`!`",
        Rule::cmp_op => "a comparison operator (`==`, `!=`, `<`, `<=`, `>`, `>=`)",
        Rule::ident | Rule::keyword => "a name",
        Rule::field => "an attribute name",
        Rule::int_lit => "an integer",
        Rule::str_lit => "a string",
        Rule::expr
        | Rule::or_expr
        | Rule::and_expr
        | Rule::cmp_expr
        | Rule::unary
        | Rule::paren
        | Rule::session_call
        | Rule::null_lit
        | Rule::bool_lit => "an expression",
        Rule::nav | Rule::msg_nav | Rule::var_nav | Rule::move_item => {
            "a navigation expression (such as `msg.sips.caller` or a `let` variable)"
        }
        Rule::attr_type | Rule::type_name | Rule::session_type => "a type (`string`, `int`, `bool`, `bytes` or `session ROLE`)",
        Rule::attribute => "an attribute (`name: type`)",
        Rule::state_via => "`state via`",
        Rule::state_decl | Rule::from_list => "a state name",
        Rule::state_kind => "`initial` or `final`",
        Rule::target => "a state name or `same`",
        Rule::service_decl => "`service NAME`",
        Rule::EOI => "end of file",
        _ => "a contract",
    }
}

// ------------------------------------------------------------------------------------------
// AST building

struct Builder<'a> {
    idx: LineIndex<'a>,
    diags: Vec<Diagnostic>,
    too_deep_reported: bool,
}

type P<'i> = Pair<'i, Rule>;

impl<'a> Builder<'a> {
    /// The pair's span without the whitespace and comments pest includes after a trailing
    /// optional or repeated element (it ends where the pair's last token ends).
    fn span(&self, p: &P) -> Span {
        let mut end = p.as_span().end();
        let mut last = p.clone().into_inner().last();
        while let Some(l) = last {
            end = l.as_span().end();
            last = l.into_inner().last();
        }
        self.idx.span(p.as_span().start(), end)
    }

    fn ident(&self, p: &P) -> Ident {
        Ident { name: p.as_str().to_string(), span: self.span(p) }
    }

    fn internal(&mut self, p: &P, what: &str) {
        let span = self.span(p);
        self.diags.push(Diagnostic::error(format!("internal error: cannot build {what} from the parse tree"), span));
    }

    fn file(&mut self, p: P) -> Option<Machine> {
        let mut service = None;
        let mut roles = Vec::new();
        let mut states = Vec::new();
        let mut transitions = Vec::new();
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::service_decl => service = c.into_inner().find(|c| c.as_rule() == Rule::ident).map(|i| self.ident(&i)),
                Rule::role_decl => roles.extend(self.role(c)),
                Rule::states_decl => {
                    for s in c.into_inner().filter(|c| c.as_rule() == Rule::state_decl) {
                        states.extend(self.state(s));
                    }
                }
                Rule::transition_decl => transitions.extend(self.transition(c)),
                _ => {}
            }
        }
        Some(Machine { service: service?, roles, states, transitions })
    }

    fn role(&mut self, p: P) -> Option<Role> {
        let span = self.span(&p);
        let mut name = None;
        let mut holds_state = false;
        let mut state_via: Option<Ident> = None;
        let mut attributes = Vec::new();
        for c in p.clone().into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.ident(&c)),
                Rule::holds_state => holds_state = true,
                Rule::state_via => {
                    let Some(attr) = c.clone().into_inner().find(|c| c.as_rule() == Rule::ident).map(|i| self.ident(&i)) else {
                        self.internal(&c, "`state via`");
                        continue;
                    };
                    if let Some(first) = &state_via {
                        let d = Diagnostic::error("a role has at most one `state via`", self.span(&c))
                            .with_note(format!("the first one, `state via {}`, is at line {}", first.name, first.span.line));
                        self.diags.push(d);
                    } else {
                        state_via = Some(attr);
                    }
                }
                Rule::attribute => attributes.extend(self.attribute(c)),
                _ => {}
            }
        }
        let Some(name) = name else {
            self.internal(&p, "a role");
            return None;
        };
        Some(Role { name, holds_state, state_via, attributes, span })
    }

    fn attribute(&mut self, p: P) -> Option<Attribute> {
        let span = self.span(&p);
        let mut name = None;
        let mut ty = None;
        let mut once = false;
        for c in p.clone().into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.ident(&c)),
                Rule::once => once = true,
                Rule::attr_type => ty = c.into_inner().next().and_then(|t| self.attr_type(t)),
                _ => {}
            }
        }
        match (name, ty) {
            (Some(name), Some(ty)) => Some(Attribute { name, ty, once, span }),
            (None, _) => {
                self.internal(&p, "an attribute");
                None
            }
            // An unknown type was already reported.
            (Some(_), None) => None,
        }
    }

    fn attr_type(&mut self, p: P) -> Option<AttrType> {
        if p.as_rule() == Rule::session_type {
            let Some(i) = p.clone().into_inner().find(|c| c.as_rule() == Rule::ident) else {
                self.internal(&p, "a type");
                return None;
            };
            return Some(AttrType::Session(self.ident(&i)));
        }
        let ident = self.ident(&p);
        {
            match ident.name.as_str() {
                "string" => Some(AttrType::String),
                "int" => Some(AttrType::Int),
                "bool" => Some(AttrType::Bool),
                "bytes" => Some(AttrType::Bytes),
                other => {
                    let mut d = Diagnostic::error(format!("unknown type `{other}`"), ident.span)
                        .with_note("the types are `string`, `int`, `bool`, `bytes` and `session ROLE`");
                    if let Some(s) = closest(other, TYPE_NAMES.iter().copied()) {
                        d.notes.push(format!("did you mean `{s}`?"));
                    } else if other.chars().next().is_some_and(char::is_uppercase) {
                        d.notes.push(format!("for a reference to a session of role {other}, write `session {other}`"));
                    }
                    self.diags.push(d);
                    None
                }
            }
        }
    }

    fn state(&mut self, p: P) -> Option<State> {
        let mut kind = StateKind::Normal;
        let mut name = None;
        for c in p.clone().into_inner() {
            match c.as_rule() {
                Rule::state_kind => {
                    kind = if c.as_str().starts_with("initial") { StateKind::Initial } else { StateKind::Final };
                }
                Rule::ident => name = Some(self.ident(&c)),
                _ => {}
            }
        }
        let Some(name) = name else {
            self.internal(&p, "a state");
            return None;
        };
        Some(State { name, kind })
    }

    fn transition(&mut self, p: P) -> Option<Transition> {
        let span = self.span(&p);
        let mut name = None;
        let mut from = Vec::new();
        let mut to = None;
        let mut stays = false;
        let mut lets: Vec<Let> = Vec::new();
        let mut guard = None;
        let mut handles = Vec::new();
        let mut moves = Vec::new();
        for c in p.clone().into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.ident(&c)),
                Rule::from_list => from = c.into_inner().filter(|c| c.as_rule() == Rule::ident).map(|c| self.ident(&c)).collect(),
                Rule::target => {
                    for t in c.into_inner() {
                        match t.as_rule() {
                            Rule::same => {
                                stays = true;
                                let first = from.first().map_or_else(String::new, |f: &Ident| f.name.clone());
                                to = Some(Ident { name: first, span: self.span(&t) });
                            }
                            Rule::ident => to = Some(self.ident(&t)),
                            _ => {}
                        }
                    }
                }
                Rule::let_clause => {
                    let lspan = self.span(&c);
                    let mut lname = None;
                    let mut value = None;
                    let scope: Vec<String> = lets.iter().map(|l| l.name.name.clone()).collect();
                    for lc in c.into_inner() {
                        match lc.as_rule() {
                            Rule::ident => lname = Some(self.ident(&lc)),
                            Rule::expr => value = Some(self.expr(lc, &scope).0),
                            _ => {}
                        }
                    }
                    if let (Some(name), Some(value)) = (lname, value) {
                        lets.push(Let { name, value, span: lspan });
                    }
                }
                Rule::when_clause => {
                    let scope: Vec<String> = lets.iter().map(|l| l.name.name.clone()).collect();
                    guard = c.into_inner().find(|c| c.as_rule() == Rule::expr).map(|e| self.expr(e, &scope).0);
                }
                Rule::handles_clause => {
                    handles = c.into_inner().filter(|c| c.as_rule() == Rule::nav).filter_map(|n| self.nav(n)).collect();
                }
                Rule::moves_clause => {
                    for m in c.into_inner().filter(|c| c.as_rule() == Rule::move_item) {
                        let mspan = self.span(&m);
                        let mut target = None;
                        let mut state = None;
                        for mc in m.into_inner() {
                            match mc.as_rule() {
                                Rule::nav => target = self.nav(mc),
                                Rule::ident => state = Some(self.ident(&mc)),
                                _ => {}
                            }
                        }
                        if let (Some(target), Some(to)) = (target, state) {
                            moves.push(Move { target, to, span: mspan });
                        }
                    }
                }
                _ => {}
            }
        }
        match (name, to, guard) {
            (Some(name), Some(to), Some(guard)) if !from.is_empty() => {
                Some(Transition { name, from, to, stays, lets, guard, handles, moves, span })
            }
            _ => {
                if self.diags.is_empty() {
                    self.internal(&p, "a transition");
                }
                None
            }
        }
    }

    // -------------------------------------------------------------------- expressions

    /// Builds an expression; returns it with its tree depth. `scope`: the `let` names bound so
    /// far (a bare name that is one of them is a variable, any other bare name is a `Name`).
    fn expr(&mut self, p: P, scope: &[String]) -> (Expr, usize) {
        let rule = p.as_rule();
        let fallback_span = self.span(&p);
        let placeholder = |s: Span| (Expr::Bool(true, s), 1);
        match rule {
            Rule::expr => match p.into_inner().next() {
                Some(inner) => self.expr(inner, scope),
                None => placeholder(fallback_span),
            },
            Rule::or_expr | Rule::and_expr => {
                let mut acc: Option<(Expr, usize)> = None;
                for c in p.into_inner() {
                    if matches!(c.as_rule(), Rule::OR | Rule::AND) {
                        continue;
                    }
                    let (e, d) = self.expr(c, scope);
                    acc = Some(match acc {
                        None => (e, d),
                        Some((a, ad)) => {
                            let depth = ad.max(d) + 1;
                            if depth > MAX_EXPR_DEPTH {
                                return self.too_deep(a.span().cover(e.span()));
                            }
                            if rule == Rule::or_expr {
                                (Expr::Or(Box::new(a), Box::new(e)), depth)
                            } else {
                                (Expr::And(Box::new(a), Box::new(e)), depth)
                            }
                        }
                    });
                }
                acc.unwrap_or_else(|| placeholder(fallback_span))
            }
            Rule::cmp_expr => {
                let mut operands = Vec::new();
                let mut op = None;
                for c in p.into_inner() {
                    if c.as_rule() == Rule::cmp_op {
                        op = Some(match c.as_str() {
                            "==" => CmpOp::Eq,
                            "!=" => CmpOp::Ne,
                            "<" => CmpOp::Lt,
                            "<=" => CmpOp::Le,
                            ">" => CmpOp::Gt,
                            _ => CmpOp::Ge,
                        });
                    } else {
                        operands.push(self.expr(c, scope));
                    }
                }
                let mut operands = operands.into_iter();
                match (operands.next(), op, operands.next()) {
                    (Some((a, ad)), Some(op), Some((b, bd))) => (Expr::Cmp(Box::new(a), op, Box::new(b)), ad.max(bd) + 1),
                    (Some(a), None, None) => a,
                    _ => placeholder(fallback_span),
                }
            }
            Rule::unary => {
                let mut nots = Vec::new();
                let mut operand = None;
                for c in p.into_inner() {
                    if c.as_rule() == Rule::NOT {
                        nots.push(c.as_span().start());
                    } else {
                        operand = Some(self.primary(c, scope));
                    }
                }
                let Some((mut e, mut depth)) = operand else {
                    return placeholder(fallback_span);
                };
                for start in nots.into_iter().rev() {
                    depth += 1;
                    let end = e.span().end;
                    if depth > MAX_EXPR_DEPTH {
                        return self.too_deep(self.idx.span(start, end));
                    }
                    e = Expr::Not(Box::new(e), self.idx.span(start, end));
                }
                (e, depth)
            }
            _ => self.primary(p, scope),
        }
    }

    fn too_deep(&mut self, span: Span) -> (Expr, usize) {
        if !self.too_deep_reported {
            self.too_deep_reported = true;
            self.diags.push(Diagnostic::error(format!("expression too long (nested more than {MAX_EXPR_DEPTH} levels)"), span));
        }
        (Expr::Bool(true, span), 1)
    }

    fn primary(&mut self, p: P, scope: &[String]) -> (Expr, usize) {
        let span = self.span(&p);
        match p.as_rule() {
            Rule::paren => match p.into_inner().find(|c| c.as_rule() == Rule::expr) {
                Some(e) => self.expr(e, scope),
                None => (Expr::Bool(true, span), 1),
            },
            Rule::session_call => match p.into_inner().find(|c| c.as_rule() == Rule::expr) {
                Some(e) => {
                    let (inner, d) = self.expr(e, scope);
                    (Expr::SessionOf(Box::new(inner), span), d + 1)
                }
                None => (Expr::Bool(true, span), 1),
            },
            Rule::null_lit => (Expr::Null(span), 1),
            Rule::bool_lit => (Expr::Bool(p.as_str().starts_with("true"), span), 1),
            Rule::int_lit => match p.as_str().parse::<i64>() {
                Ok(i) => (Expr::Int(i, span), 1),
                Err(_) => {
                    self.diags
                        .push(Diagnostic::error(format!("integer `{}` is out of range (64-bit signed integers only)", p.as_str()), span));
                    (Expr::Int(0, span), 1)
                }
            },
            Rule::str_lit => (Expr::Str(self.unescape(&p), span), 1),
            Rule::nav => match p.into_inner().next() {
                Some(inner) => {
                    // A bare name that is not a `let` variable is a state, role or method name.
                    if inner.as_rule() == Rule::var_nav {
                        let parts: Vec<P> = inner.clone().into_inner().collect();
                        if let [only] = parts.as_slice() {
                            if !scope.iter().any(|s| s == only.as_str()) {
                                return (Expr::Name(self.ident(only)), 1);
                            }
                        }
                    }
                    match self.nav_inner(inner, span) {
                        Some(n) => (Expr::Nav(n), 1),
                        None => (Expr::Null(span), 1),
                    }
                }
                None => (Expr::Null(span), 1),
            },
            Rule::expr | Rule::or_expr | Rule::and_expr | Rule::cmp_expr | Rule::unary => self.expr(p, scope),
            _ => {
                self.internal(&p, "an expression");
                (Expr::Null(span), 1)
            }
        }
    }

    fn unescape(&mut self, p: &P) -> String {
        let raw = p.as_str();
        let body = raw.get(1..raw.len().saturating_sub(1)).unwrap_or("");
        let mut out = String::with_capacity(body.len());
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some((_, '"')) => out.push('"'),
                Some((_, '\\')) => out.push('\\'),
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, 'r')) => out.push('\r'),
                Some((j, other)) => {
                    let start = p.as_span().start() + 1 + i;
                    let end = p.as_span().start() + 1 + j + other.len_utf8();
                    self.diags.push(
                        Diagnostic::error(format!("unknown escape `\\{other}` in string"), self.idx.span(start, end))
                            .with_note("the escapes are \\\" \\\\ \\n \\t \\r"),
                    );
                }
                None => {}
            }
        }
        out
    }

    /// A `nav` pair (in `handles` and `moves`): always a navigation, a bare name is a variable.
    fn nav(&mut self, p: P) -> Option<Nav> {
        let span = self.span(&p);
        let inner = p.into_inner().next()?;
        self.nav_inner(inner, span)
    }

    fn nav_inner(&mut self, p: P, span: Span) -> Option<Nav> {
        let rule = p.as_rule();
        let mut names = p.into_inner().filter(|c| matches!(c.as_rule(), Rule::ident | Rule::field));
        let root = match rule {
            Rule::msg_nav => {
                let f = names.next()?;
                match f.as_str() {
                    "method" => NavRoot::MsgMethod,
                    "status" => NavRoot::MsgStatus,
                    "cseq" => NavRoot::MsgCseq,
                    "payl" => NavRoot::MsgPayload,
                    "timer" => NavRoot::MsgTimer,
                    "sips" => NavRoot::MsgSips,
                    "apps" => NavRoot::MsgApps,
                    other => {
                        let mut d = Diagnostic::error(format!("unknown message field `msg.{other}`"), self.span(&f))
                            .with_note(format!("the message fields are {}", quote_list(MSG_FIELDS.iter().map(|f| format!("msg.{f}")))));
                        if let Some(s) = closest(other, MSG_FIELDS.iter().copied()) {
                            d.notes.push(format!("did you mean `msg.{s}`?"));
                        }
                        self.diags.push(d);
                        return None;
                    }
                }
            }
            _ => NavRoot::Var(self.ident(&names.next()?)),
        };
        let path = names.map(|n| self.ident(&n)).collect();
        Some(Nav { root, path, span })
    }
}
