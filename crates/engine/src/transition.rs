//! What a handler arm gets: the event, access to the sessions its transition acquired (and
//! those it creates), and SIP actions that take effect when the transition commits.

use crate::compiled::Compiled;
use crate::engine::{key, ROLE};
use crate::eval::Vars;
use crate::event::Event;
use crate::locks::Key;
use crate::reads::{Cells, Reads};
use crate::sorted_set::SortedSet;
use bytes::Bytes;
use std::borrow::Cow;
use std::time::Duration;
use tandem_container::{AppSessionId, AttrValue, Context, Destination, Request, SessionCell, SessionId, SipSession, TimerId};
use tandem_sip::Method;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("session {0} is not among the sessions this transition acquired")]
    NotAcquired(SessionId),
    #[error("no such session {0}")]
    NoSuchSession(SessionId),
    #[error("{0}")]
    Container(#[from] tandem_container::ContainerError),
    #[error("this transition's message is not a request that can be {0}")]
    NotARequest(&'static str),
    #[error("role {0:?} is not declared by the contract")]
    UnknownRole(String),
    #[error("a transition of a compiled contract creates at most {0} sessions")]
    TooManyCreated(usize),
}

/// A message body an arm sends: its content type and its bytes, shared rather than copied (a
/// caller's SDP read from an attribute or from the event, a `String` made into `Bytes`, a
/// static text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub content_type: Cow<'static, str>,
    pub bytes: Bytes,
}

impl Body {
    pub fn new(content_type: impl Into<Cow<'static, str>>, bytes: impl Into<Bytes>) -> Body {
        Body { content_type: content_type.into(), bytes: bytes.into() }
    }

    pub(crate) fn parts(&self) -> (&str, &[u8]) {
        (&self.content_type, &self.bytes)
    }
}

/// A SIP action on a session, applied at commit (on the session's executor).
pub(crate) enum SessionOp {
    Answer { status: u16, body: Option<Body> },
    Send { method: Method, body: Option<Body> },
    Bye,
    Cancel,
}

impl SessionOp {
    /// Applies the action to `s`, locked by the caller. On a session whose execution ended
    /// since the action was decided, only what ends the dialog (BYE, CANCEL) still applies.
    pub(crate) fn apply_on(self, ctx: &mut Context<'_>, s: &mut SipSession) {
        if s.is_removed() && !matches!(self, SessionOp::Bye | SessionOp::Cancel) {
            return;
        }
        let result = match self {
            SessionOp::Answer { status, body } => ctx.answer_session(s, status, body.as_ref().map(Body::parts)),
            SessionOp::Send { method, body } => ctx.send_in_dialog(s, method, body.as_ref().map(Body::parts)),
            SessionOp::Bye => ctx.send_bye_on(s),
            SessionOp::Cancel => ctx.cancel_invite(s),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, session = %s.id, "action at commit failed");
        }
    }
}

pub(crate) enum Action {
    Respond { status: u16, headers: Vec<(String, String)>, body: Option<Body> },
    OnSession { session: SessionId, op: SessionOp },
}

/// What an arm sends, inline up to the most a dating arm sends (T7: an answer, two re-INVITEs,
/// two BYEs): a buffer that spills to the heap is allocated, moved and freed on the
/// per-message path (~75 instructions per message for T7's, decision 0004).
pub(crate) type Actions = smallvec::SmallVec<[Action; 5]>;

/// The sessions an arm creates, and what goes with them (the dating T1: a caller's and its
/// media leg's), inline.
pub(crate) type Created<T> = smallvec::SmallVec<[T; 2]>;

pub(crate) struct Done {
    /// The sessions whose attributes the arm set (their memos are then stale), the first
    /// four (a session past them keeps a stale memo: its messages take the general path, which
    /// is correct, only slower).
    pub wrote: Wrote,
    pub created_sips: Option<SessionId>,
    pub created_apps: Created<AppSessionId>,
    /// The cells of the sessions the arm created: the commit reaches them without a look-up.
    pub created_cells: Created<(SessionId, SessionCell)>,
}

pub struct Transition<'c, 'a> {
    ctx: &'c mut Context<'a>,
    compiled: &'c Compiled,
    event: &'c Event<'c>,
    /// The dynamic contract's sessions: the only existing ones the arm may touch.
    allowed: &'c SortedSet<Key>,
    /// What evaluation read: the cells of the sessions it reached (no store look-up for them).
    reads: &'c Reads,
    created: Created<SessionId>,
    /// The cells of the sessions in `created` (found once, when created), so that the arm's
    /// later accesses to them need no store look-up.
    created_cells: Created<(SessionId, SessionCell)>,
    created_sips: Option<SessionId>,
    created_apps: Created<AppSessionId>,
    /// What the arm sends, in a buffer of the caller's (no move of the inline vector when the
    /// arm returns).
    actions: &'c mut Actions,
    /// The transition's `let`s and the values the contract bound them to.
    lets: &'c [tandem_contract::ast::Let],
    vars: &'c Vars,
    /// See [`Done::wrote`].
    wrote: Wrote,
}

/// See [`Done::wrote`] (an array: nothing to drop).
pub(crate) type Wrote = [Option<SessionId>; 4];

fn note_write(wrote: &mut Wrote, id: SessionId) {
    if wrote.contains(&Some(id)) {
        return;
    }
    if let Some(free) = wrote.iter_mut().find(|w| w.is_none()) {
        *free = Some(id);
    }
}

impl<'c, 'a> Transition<'c, 'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctx: &'c mut Context<'a>,
        compiled: &'c Compiled,
        event: &'c Event<'c>,
        allowed: &'c SortedSet<Key>,
        reads: &'c Reads,
        lets: &'c [tandem_contract::ast::Let],
        vars: &'c Vars,
        actions: &'c mut Actions,
    ) -> Self {
        Transition {
            ctx,
            compiled,
            event,
            allowed,
            reads,
            created: Created::new(),
            created_cells: Created::new(),
            created_sips: None,
            created_apps: Created::new(),
            actions,
            lets,
            vars,
            wrote: [None; 4],
        }
    }

    pub(crate) fn finish(self) -> Done {
        Done { wrote: self.wrote, created_sips: self.created_sips, created_apps: self.created_apps, created_cells: self.created_cells }
    }

    pub fn event(&self) -> &Event<'c> {
        self.event
    }

    /// The time of the event (never the system clock: replicas must agree).
    pub fn now(&self) -> std::time::Instant {
        self.ctx.now()
    }

    /// The SIP session the message arrived on (for an initial request: the one `accept`
    /// created).
    pub fn sips(&self) -> Option<SessionId> {
        self.event.session.or(self.created_sips)
    }

    /// The execution's application session.
    pub fn app(&mut self) -> Option<AppSessionId> {
        if self.event.app.is_some() {
            return self.event.app;
        }
        // Responses carry no application session: their session's is the execution's.
        let session = self.event.session.or(self.created_sips)?;
        self.with_unchecked(session, |s| s.app)
    }

    fn check(&self, id: SessionId) -> Result<(), TransitionError> {
        if self.allowed.contains(&key(id)) || self.created.contains(&id) {
            Ok(())
        } else {
            Err(TransitionError::NotAcquired(id))
        }
    }

    /// Runs `f` on an acquired session; any other session is refused.
    pub fn with<R>(&mut self, id: SessionId, f: impl FnOnce(&mut SipSession) -> R) -> Result<R, TransitionError> {
        self.check(id)?;
        self.with_unchecked(id, f).ok_or(TransitionError::NoSuchSession(id))
    }

    fn with_unchecked<R>(&mut self, id: SessionId, f: impl FnOnce(&mut SipSession) -> R) -> Option<R> {
        match (Cells { reads: self.reads, created: &self.created_cells }).cell(id) {
            Some(cell) => {
                let mut s = cell.lock();
                (!s.is_removed()).then(|| f(&mut s))
            }
            None => self.ctx.with_session(id, |_, s| f(s)),
        }
    }

    pub fn attr(&mut self, id: SessionId, name: &str) -> Result<Option<AttrValue>, TransitionError> {
        self.with(id, |s| s.attributes.get(name).cloned())
    }

    pub fn session_attr(&mut self, id: SessionId, name: &str) -> Result<Option<SessionId>, TransitionError> {
        self.with(id, |s| s.attributes.get_session(name))
    }

    pub fn set_attr(&mut self, id: SessionId, name: &str, value: AttrValue) -> Result<(), TransitionError> {
        note_write(&mut self.wrote, id);
        self.with(id, |s| {
            s.attributes.set(name, value);
        })
    }

    pub fn role(&mut self, id: SessionId) -> Result<Option<String>, TransitionError> {
        self.with(id, |s| s.attributes.get_str(ROLE).map(str::to_string))
    }

    /// Gives a session its role (roles are single-assignment: set it once).
    pub fn set_role(&mut self, id: SessionId, role: &str) -> Result<(), TransitionError> {
        self.set_role_and_attrs(id, role, [])
    }

    /// Gives a session its role and first attributes at once: one lock of the session, where
    /// [`Self::set_role`] and a [`Self::set_attr`] per attribute take it each time.
    pub fn set_role_and_attrs<const N: usize>(
        &mut self,
        id: SessionId,
        role: &str,
        attrs: [(&str, AttrValue); N],
    ) -> Result<(), TransitionError> {
        let Some(index) = self.compiled.role_index(role) else {
            return Err(TransitionError::UnknownRole(role.to_string()));
        };
        // A role that keeps its state on another session has no state memo of its own (see
        // `engine::via_memo`): its role as an index instead.
        let via = if self.compiled.role_at(index).holds_state { None } else { crate::engine::via_memo(index) };
        // A role that keeps its state elsewhere gets its memo here; a state holder's is stale.
        if via.is_none() {
            note_write(&mut self.wrote, id);
        }
        self.with(id, |s| {
            s.attributes.set(ROLE, AttrValue::Str(role.to_string()));
            for (name, value) in attrs {
                s.attributes.set(name, value);
            }
            if let Some(memo) = via {
                s.attributes.set_memo(memo);
            }
        })
    }

    fn request(&self) -> Option<Request<'c>> {
        self.event.request()
    }

    /// For an initial INVITE: creates its SIP session (and the execution's application
    /// session) without answering yet (answer with [`Self::answer`]).
    pub fn accept(&mut self) -> Result<SessionId, TransitionError> {
        let req = self.request().ok_or(TransitionError::NotARequest("accepted"))?;
        let id = self.ctx.accept(&req, None)?;
        if let Some(cell) = self.ctx.session(id) {
            let app = cell.lock().app;
            self.created_apps.push(app);
            self.created_cells.push((id, cell));
        }
        self.created.push(id);
        self.created_sips = Some(id);
        Ok(id)
    }

    /// Creates a UAC leg in this execution (send its INVITE with [`Self::invite`]).
    pub fn create_leg(&mut self, from_uri: &str, to_uri: &str, target: Destination) -> Result<SessionId, TransitionError> {
        let app = self.app().ok_or(TransitionError::NotARequest("given a leg"))?;
        let id = self.ctx.create_uac_session(app, from_uri, to_uri, target)?;
        if let Some(cell) = self.ctx.session(id) {
            self.created_cells.push((id, cell));
        }
        self.created.push(id);
        Ok(id)
    }

    /// Answers the triggering request (at commit).
    pub fn respond(&mut self, status: u16) {
        self.respond_with(status, &[], None);
    }

    pub fn respond_with(&mut self, status: u16, headers: &[(&str, &str)], body: Option<Body>) {
        let headers = headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        self.actions.push(Action::Respond { status, headers, body });
    }

    fn on_session(&mut self, session: SessionId, op: SessionOp) -> Result<(), TransitionError> {
        self.check(session)?;
        self.actions.push(Action::OnSession { session, op });
        Ok(())
    }

    /// Answers the INVITE of an accepted session (at commit).
    pub fn answer(&mut self, session: SessionId, status: u16, body: Option<Body>) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Answer { status, body })
    }

    /// Sends the INVITE of a leg, or a re-INVITE in an established dialog (at commit).
    pub fn invite(&mut self, session: SessionId, body: Option<Body>) -> Result<(), TransitionError> {
        self.send(session, Method::Invite, body)
    }

    /// Sends a request in the session's dialog (at commit).
    pub fn send(&mut self, session: SessionId, method: Method, body: Option<Body>) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Send { method, body })
    }

    /// Hangs up the session's dialog (at commit).
    pub fn bye(&mut self, session: SessionId) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Bye)
    }

    /// Cancels the INVITE of a leg that has no final answer yet (at commit).
    pub fn cancel(&mut self, session: SessionId) -> Result<(), TransitionError> {
        self.on_session(session, SessionOp::Cancel)
    }

    pub fn set_timer(&mut self, delay: Duration, name: &'static str) -> Result<TimerId, TransitionError> {
        let app = self.app().ok_or(TransitionError::NotARequest("given a timer"))?;
        Ok(self.ctx.set_timer(app, delay, name)?)
    }

    /// The session the transition's `let NAME = ...` bound, as the contract evaluated it (the
    /// transition holds it if its guard or handles read it). None: the `let` is null (e.g. no
    /// such session), not a session, or there is no such `let`.
    pub fn session_var(&self, name: &str) -> Option<SessionId> {
        let index = self.lets.iter().position(|l| l.name.name == name)?;
        self.vars.session(index)
    }

    /// Resolves a session ID received as text (e.g. in a message body).
    pub fn resolve(&self, text: &str) -> Option<SessionId> {
        text.parse().ok().filter(|id| match self.reads.cell(*id) {
            Some(cell) => !cell.lock().is_removed(),
            None => self.ctx.session(*id).is_some(),
        })
    }
}
