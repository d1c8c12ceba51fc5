//! The service's view of the container during one event: send, answer, create sessions,
//! arm timers. Time and identifiers come from here, never from the system, so an executor
//! replayed with the same inputs makes the same decisions.

use crate::core::{ClientOwner, CoreState, ServerOwner};
use crate::ids::{AppSessionId, SessionId, TimerId};
use crate::locals::{Destination, LocalListener};
use crate::proxy::ProxyOptions;
use crate::service::{Request, ServiceId};
use crate::session::{ActionTicket, AppSession, Dialog, LegRole, SessionState, SipSession};
use crate::store::SessionCell;
use crate::timers::TimerEntry;
use crate::{executor_for, ContainerError, Post, SessionWork};
use smallvec::SmallVec;
use std::time::{Duration, Instant};
use tandem_sip::{Flow, HeaderName, Message, MessageWriter, Method, NameAddr, ResponseBuilder, Transport};

pub struct Context<'a> {
    st: &'a mut CoreState,
    now: Instant,
    service: ServiceId,
}

impl<'a> Context<'a> {
    pub(crate) fn new(st: &'a mut CoreState, now: Instant, service: ServiceId) -> Self {
        Context { st, now, service }
    }

    /// The time of the event being handled.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The service this context serves.
    pub fn service(&self) -> ServiceId {
        self.service
    }

    pub fn executor(&self) -> u16 {
        self.st.executor
    }

    /// How many executors the container runs. With one, every service call of the container
    /// runs on one thread, one at a time and to completion (a context borrows its executor's
    /// state mutably, so no call can start inside another).
    pub fn executors(&self) -> u16 {
        self.st.executors
    }

    /// Wall-clock time of the event being handled (for records such as billing), derived
    /// from [`Self::now`], never read from the system by the handler.
    pub fn wall_time(&self) -> std::time::SystemTime {
        let (instant, wall) = self.st.wall_anchor;
        match self.now.checked_duration_since(instant) {
            Some(after) => wall + after,
            None => wall - instant.duration_since(self.now),
        }
    }

    /// Whether a URI designates this server (one of its listening addresses or its
    /// advertised host), e.g. the Request-URI `sip:bob@<this server>`.
    pub fn is_local_uri(&self, uri: &tandem_sip::Uri<'_>) -> bool {
        matches!(uri, tandem_sip::Uri::Sip(sip) if self.st.locals.is_local_uri(sip))
    }

    /// Whether this server has a listener for `transport` (requests can go out over it).
    pub fn listens_on(&self, transport: tandem_sip::Transport) -> bool {
        self.st.locals.for_transport(transport).is_some()
    }

    pub fn random_u64(&mut self) -> u64 {
        self.st.ids.u64()
    }

    // ----- responses -----

    pub fn respond(&mut self, req: &Request<'_>, status: u16) {
        self.respond_with(req, status, &[], None);
    }

    /// Answers `req` on its transaction with extra headers and an optional `(type, body)`.
    /// Inside a dialog the To tag is the dialog's; otherwise a fresh one.
    pub fn respond_with(&mut self, req: &Request<'_>, status: u16, headers: &[(&str, &str)], body: Option<(&str, &[u8])>) {
        let Some(tx) = req.tx else { return };
        self.st.reply_with(self.now, tx, req.msg, status, headers, body);
    }

    /// Answers a request its service failed to handle (nothing the service decided was sent)
    /// with 500, so that its sender neither retransmits it for 32 s nor waits that long for a
    /// final answer; an ACK (no transaction) gets nothing.
    pub fn respond_failed(&mut self, req: &Request<'_>) {
        // `respond_with` answers only a request with a transaction.
        if matches!(req.msg.method(), Some(Method::Ack) | None) {
            return;
        }
        self.respond_with(req, 500, &[("Warning", "399 tandem \"the service failed to handle this request\"")], None);
    }

    // ----- sessions -----

    pub fn create_app_session(&mut self) -> AppSessionId {
        let id = AppSessionId(self.st.ids.u128());
        let expires_at = self.now + self.st.config.app_session_expiry;
        self.st.store.insert_app(AppSession {
            id,
            service: self.service,
            home: self.st.executor,
            sessions: SmallVec::new(),
            attributes: Default::default(),
            timers: SmallVec::new(),
            expires_at,
        });
        self.st.expiry.push(std::cmp::Reverse((expires_at, id)));
        id
    }

    /// Accepts an initial INVITE as a UAS: creates the SIP session (and an application
    /// session unless `app` is given), answers 200 OK with our Contact and `body`, and
    /// retransmits the 200 until the ACK arrives (then the session is `Confirmed`).
    pub fn answer(
        &mut self,
        req: &Request<'_>,
        app: Option<AppSessionId>,
        body: Option<(&str, &[u8])>,
    ) -> Result<SessionId, ContainerError> {
        let msg = req.msg;
        let tx = req.tx.ok_or(ContainerError::NotAnInvite)?;
        if msg.method() != Some(&Method::Invite) || req.session.is_some() {
            return Err(ContainerError::NotAnInvite);
        }
        let listener = self.listener_for_flow(req.flow)?;
        let app = match app {
            Some(a) => a,
            None => self.create_app_session(),
        };
        let id = SessionId(self.st.ids.u128());
        let local_tag = self.st.ids.tag();
        let dialog = uas_dialog(msg, &local_tag, req.flow);
        let contact = contact_value(&listener);
        let mut b = ResponseBuilder::new(msg, 200, "OK", Some(&local_tag));
        b.writer().header("Contact", &contact);
        b.writer().copy_headers_named(msg, HeaderName::RecordRoute);
        let bytes = match body {
            Some((ct, body)) => b.body(ct, body),
            None => b.finish(),
        };
        self.register_session(SipSession {
            id,
            app,
            service: self.service,
            home: self.st.executor,
            role: LegRole::Uas,
            state: SessionState::Early,
            dialog,
            attributes: Default::default(),
            removed: false,
            actions_issued: 0,
            actions_done: 0,
            invite_tx: Some(tx),
            answered: true,
            pending_invite: None,
            pending_request: None,
        })?;
        self.st.server_owner.insert(tx, ServerOwner::Session(id));
        self.st.metrics.message_out(Some(&Method::Invite), Some(200), req.flow.transport);
        self.st.layer.respond(self.now, tx, 200, bytes, true);
        Ok(id)
    }

    /// Accepts an initial INVITE as a UAS without answering it yet: the SIP session (and an
    /// application session unless `app` is given) exists from now on, in state `Early`;
    /// answer later with [`Self::answer_session`]. A CANCEL before the answer is answered 487
    /// by the container (the service hears `on_cancelled`).
    pub fn accept(&mut self, req: &Request<'_>, app: Option<AppSessionId>) -> Result<SessionId, ContainerError> {
        self.accept_cell(req, app).map(|(id, _)| id)
    }

    /// [`Self::accept`], with the new session's cell: a service that writes the session next
    /// locks it without looking its ID up again.
    pub fn accept_cell(&mut self, req: &Request<'_>, app: Option<AppSessionId>) -> Result<(SessionId, SessionCell), ContainerError> {
        let msg = req.msg;
        let tx = req.tx.ok_or(ContainerError::NotAnInvite)?;
        if msg.method() != Some(&Method::Invite) || req.session.is_some() {
            return Err(ContainerError::NotAnInvite);
        }
        let app = match app {
            Some(a) => a,
            None => self.create_app_session(),
        };
        let id = SessionId(self.st.ids.u128());
        let local_tag = self.st.ids.tag();
        let cell = self.register_session(SipSession {
            id,
            app,
            service: self.service,
            home: self.st.executor,
            role: LegRole::Uas,
            state: SessionState::Early,
            dialog: uas_dialog(msg, &local_tag, req.flow),
            attributes: Default::default(),
            removed: false,
            actions_issued: 0,
            actions_done: 0,
            invite_tx: Some(tx),
            answered: false,
            pending_invite: Some(msg.clone()),
            pending_request: None,
        })?;
        self.st.server_owner.insert(tx, ServerOwner::Session(id));
        Ok((id, cell))
    }

    /// Answers the INVITE of a session made by [`Self::accept`]: a 2xx (with our Contact,
    /// retransmitted until the ACK) or a final failure (the session is then terminated).
    pub fn answer_session(&mut self, session: &mut SipSession, status: u16, body: Option<(&str, &[u8])>) -> Result<(), ContainerError> {
        let (Some(invite), Some(tx)) = (session.pending_invite.take(), session.invite_tx) else {
            return Err(ContainerError::NotAnInvite);
        };
        session.answered = true;
        let listener = self.listener_for_flow(session.dialog.flow)?;
        let tag = session.dialog.local_tag.clone();
        let mut b = ResponseBuilder::new(&invite, status, crate::core::CoreState::reason_phrase(status), Some(&tag));
        if (200..300).contains(&status) {
            b.writer().header("Contact", &contact_value(&listener));
            b.writer().copy_headers_named(&invite, HeaderName::RecordRoute);
        } else {
            session.state = SessionState::Terminated;
            session.invite_tx = None;
            self.st.server_owner.remove(&tx);
        }
        let bytes = match body {
            Some((ct, body)) => b.body(ct, body),
            None => b.finish(),
        };
        self.st.metrics.message_out(Some(&Method::Invite), Some(status), session.dialog.flow.transport);
        self.st.layer.respond(self.now, tx, status, bytes, (200..300).contains(&status));
        Ok(())
    }

    /// A provisional response (e.g. 180) on the INVITE of a session made by [`Self::accept`].
    pub fn provisional(&mut self, session: &SipSession, status: u16) -> Result<(), ContainerError> {
        let (Some(invite), Some(tx)) = (session.pending_invite.as_ref(), session.invite_tx) else {
            return Err(ContainerError::NotAnInvite);
        };
        // 100 Trying is hop-by-hop and creates no dialog: no To tag (RFC 3261 §8.2.6.2 allows one, peers do not expect it).
        let tag = (status != 100).then_some(&*session.dialog.local_tag);
        let b = ResponseBuilder::new(invite, status, crate::core::CoreState::reason_phrase(status), tag);
        self.st.metrics.message_out(Some(&Method::Invite), Some(status), session.dialog.flow.transport);
        self.st.layer.respond(self.now, tx, status, b.finish(), false);
        Ok(())
    }

    /// Runs `work` on executor `executor` (possibly this one, after the current event), with a
    /// context of this service there. Used to send on sessions owned by another executor and
    /// to resume work parked while waiting for another executor.
    pub fn post(&mut self, executor: u16, work: Post) {
        self.st.posts.push((executor, self.service, work));
    }

    /// Runs `work` on the session (locked by the caller, `cell` its cell) at the session's home
    /// executor, after every action whose ticket was taken before `ticket`: at once when this
    /// is the home and its turn has come, else through the home executor's post queue (posted
    /// now, not at the end of the event). Without the order, a send posted by one executor
    /// could be overtaken by a later one made on the home executor (a BYE ahead of the
    /// re-INVITE it follows), and a send posted just before the session's execution ended
    /// would find the session gone and be lost (a media leg never hung up). `work` runs even
    /// when the session has been removed meanwhile (`s.is_removed()`): it decides what still
    /// applies to an ended execution (a BYE or CANCEL still ends the dialog).
    ///
    /// `work` is boxed only when it has to be posted: the usual action, on this executor's own
    /// session, runs at once with no allocation. Inlined: the common case is two comparisons
    /// and the call of `work`, and a call in between moves `work` (with what it owns) again.
    #[inline(always)]
    pub fn act_in_order<W>(&mut self, cell: &SessionCell, s: &mut SipSession, ticket: ActionTicket, work: W)
    where
        W: FnOnce(&mut Context<'_>, &mut SipSession) + Send + 'static,
    {
        if s.home == self.st.executor && s.actions_done == ticket.0 {
            s.actions_done += 1;
            work(self, s);
        } else {
            let home = s.home;
            self.post_in_order(home, cell.clone(), ticket, Box::new(work));
        }
    }

    #[inline(never)]
    fn post_in_order(&mut self, home: u16, cell: SessionCell, ticket: ActionTicket, work: SessionWork) {
        let post: Post = Box::new(move |ctx: &mut Context<'_>| {
            let mut s = cell.lock();
            // A removed session waits for nobody: an earlier action may never come (it was
            // decided on a session already gone from the store), and only actions that end
            // the dialog still apply there.
            if s.actions_done == ticket.0 || s.removed {
                s.actions_done += 1;
                work(ctx, &mut s);
            } else {
                // An earlier action is still on its way here (decided by an executor that has
                // not posted it yet): queue behind it.
                drop(s);
                ctx.post_in_order(home, cell, ticket, work);
            }
        });
        self.st.reentry.post(home, self.service, post);
    }

    /// A way back to this executor and service for work done outside the event loop (an
    /// asynchronous database query): hand it to the task, which calls
    /// [`crate::Completion::complete`] with the continuation.
    pub fn completion(&self) -> crate::Completion {
        crate::Completion { executor: self.st.executor, service: self.service, reentry: self.st.reentry.clone() }
    }

    /// Creates a UAC leg: a SIP session for a dialog this service starts (B2BUA legs, a
    /// media-service leg). Send its INVITE with [`Self::send_invite`].
    pub fn create_uac_session(
        &mut self,
        app: AppSessionId,
        from_uri: &str,
        to_uri: &str,
        target: Destination,
    ) -> Result<SessionId, ContainerError> {
        self.create_uac_cell(app, from_uri, to_uri, target).map(|(id, _)| id)
    }

    /// [`Self::create_uac_session`], with the new session's cell (see [`Self::accept_cell`]).
    pub fn create_uac_cell(
        &mut self,
        app: AppSessionId,
        from_uri: &str,
        to_uri: &str,
        target: Destination,
    ) -> Result<(SessionId, SessionCell), ContainerError> {
        let listener = self.st.locals.for_transport(target.transport).cloned().ok_or(ContainerError::NoListener)?;
        let call_id = self.local_call_id();
        let local_tag = self.st.ids.tag();
        // A target other than the one `to_uri` names is an outbound proxy: a preloaded loose
        // route (RFC 3261 §8.1.2), replaced by the 2xx's Record-Route set.
        let named = tandem_sip::Uri::parse(to_uri).as_ref().and_then(Destination::from_uri);
        let route_set = if named == Some(target) {
            Vec::new()
        } else {
            let host = match target.addr {
                std::net::SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
                a => a.to_string(),
            };
            vec![format!("<sip:{host};transport={};lr>", target.transport.as_str().to_ascii_lowercase()).into()]
        };
        let dialog = Dialog {
            call_id: call_id.into(),
            local_party: format!("<{from_uri}>;tag={local_tag}").into(),
            local_tag: local_tag.into(),
            remote_tag: "".into(),
            remote_party: format!("<{to_uri}>").into(),
            remote_target: to_uri.into(),
            route_set,
            local_seq: 0,
            max_forwards: 70,
            remote_seq: 0,
            flow: Flow { transport: target.transport, listener: listener.index, connection: 0, remote: target.addr },
        };
        let id = SessionId(self.st.ids.u128());
        let cell = self.register_session(SipSession {
            id,
            app,
            service: self.service,
            home: self.st.executor,
            role: LegRole::Uac,
            state: SessionState::Early,
            dialog,
            attributes: Default::default(),
            removed: false,
            actions_issued: 0,
            actions_done: 0,
            invite_tx: None,
            answered: false,
            pending_invite: None,
            pending_request: None,
        })?;
        Ok((id, cell))
    }

    /// A Call-ID that hashes to this executor, so the dialog's messages come back here.
    fn local_call_id(&mut self) -> String {
        loop {
            let candidate = format!("{:032x}@tandem", self.st.ids.u128());
            if executor_for(&candidate, self.st.executors) == self.st.executor {
                return candidate;
            }
        }
    }

    fn register_session(&mut self, session: SipSession) -> Result<SessionCell, ContainerError> {
        let app = self.st.store.app_session(session.app).ok_or(ContainerError::NoSuchApp)?;
        app.lock().sessions.push(session.id);
        self.st.dialogs.insert(session.dialog.local_tag.clone(), session.id);
        Ok(self.st.store.insert_session(session))
    }

    /// Resolves a session ID (e.g. one received in a message body) to a live session.
    pub fn session(&self, id: SessionId) -> Option<SessionCell> {
        self.st.store.session(id)
    }

    /// Runs `f` with the session locked. Do not lock the same session again inside `f`
    /// (use the `_on` variants that take the session).
    pub fn with_session<R>(&mut self, id: SessionId, f: impl FnOnce(&mut Context<'_>, &mut SipSession) -> R) -> Option<R> {
        let cell = self.st.store.session(id)?;
        let mut guard = cell.lock();
        Some(f(self, &mut guard))
    }

    pub fn with_app<R>(&mut self, id: AppSessionId, f: impl FnOnce(&mut AppSession) -> R) -> Option<R> {
        let cell = self.st.store.app_session(id)?;
        let mut guard = cell.lock();
        Some(f(&mut guard))
    }

    /// Ends the dialog with BYE (the session is `Terminated` at once).
    pub fn send_bye(&mut self, id: SessionId) -> Result<(), ContainerError> {
        let cell = self.st.store.session(id).ok_or(ContainerError::NoSuchSession)?;
        let mut s = cell.lock();
        self.send_bye_on(&mut s)
    }

    pub fn send_bye_on(&mut self, session: &mut SipSession) -> Result<(), ContainerError> {
        if session.state == SessionState::Terminated {
            return Err(ContainerError::Terminated);
        }
        let result = self.send_in_dialog(session, Method::Bye, None);
        session.state = SessionState::Terminated;
        result
    }

    /// Sends the INVITE of a UAC leg made by [`Self::create_uac_session`].
    pub fn send_invite(&mut self, id: SessionId, body: Option<(&str, &[u8])>) -> Result<(), ContainerError> {
        let cell = self.st.store.session(id).ok_or(ContainerError::NoSuchSession)?;
        let mut s = cell.lock();
        self.send_in_dialog(&mut s, Method::Invite, body)
    }

    /// Sends a request inside the session's dialog (BYE, INFO, MESSAGE, re-INVITE, ...);
    /// the response comes to the service's `on_response`.
    pub fn send_in_dialog(&mut self, session: &mut SipSession, method: Method, body: Option<(&str, &[u8])>) -> Result<(), ContainerError> {
        let d = &mut session.dialog;
        d.local_seq += 1;
        let (mut w, flow, listener, branch) = dialog_request(self.st, d, &method, d.local_seq)?;
        if matches!(method, Method::Invite | Method::Update) {
            w.header("Contact", &contact_value(&listener));
        }
        let bytes = match body {
            Some((ct, b)) => w.finish_with_body(Some(ct), b),
            None => w.finish(),
        };
        self.st.metrics.message_out(Some(&method), None, flow.transport);
        if method == Method::Invite {
            session.pending_request = Some((bytes.clone(), flow));
        }
        let tx = self.st.layer.send_request(self.now, method, &branch, bytes, flow);
        self.st.client_owner.insert(tx, ClientOwner::Session(session.id));
        Ok(())
    }

    /// Cancels the session's INVITE if it has no final response yet (RFC 3261 §9.1). A 2xx
    /// that crosses the CANCEL still arrives; if the session is gone by then, the container
    /// acknowledges and ends that dialog. If the 2xx came first (it was processed, and
    /// acknowledged, before the service decided to cancel), the dialog exists and a CANCEL
    /// would change nothing: it is ended with BYE instead, as §9.1 asks of a UAC whose CANCEL
    /// is too late. Without this, a caller hanging up at that instant left the callee's leg
    /// up for good (seen as a media-service execution that never ended, issue 4).
    pub fn cancel_invite(&mut self, session: &mut SipSession) -> Result<(), ContainerError> {
        if session.pending_request.is_none() && session.role == LegRole::Uac && session.state == SessionState::Confirmed {
            return self.send_bye_on(session);
        }
        let (invite, flow) = session.pending_request.take().ok_or(ContainerError::NotAnInvite)?;
        let parsed = tandem_sip::parse_datagram(invite, &Default::default()).map_err(|_| ContainerError::NotAnInvite)?;
        let branch = parsed.branch().ok_or(ContainerError::NotAnInvite)?.to_string();
        let cancel = crate::proxy::cancel_for(&parsed);
        self.st.metrics.message_out(Some(&Method::Cancel), None, flow.transport);
        let tx = self.st.layer.send_request(self.now, Method::Cancel, &branch, cancel, flow);
        self.st.client_owner.insert(tx, ClientOwner::Proxy { server_tx: None });
        Ok(())
    }

    /// Removes the application session, its SIP sessions and timers.
    pub fn invalidate(&mut self, app: AppSessionId) {
        self.st.invalidate(app);
    }

    // ----- timers -----

    pub fn set_timer(&mut self, app: AppSessionId, delay: Duration, name: &'static str) -> Result<TimerId, ContainerError> {
        self.arm(app, delay, None, name)
    }

    pub fn set_periodic_timer(&mut self, app: AppSessionId, period: Duration, name: &'static str) -> Result<TimerId, ContainerError> {
        self.arm(app, period, Some(period.max(Duration::from_millis(1))), name)
    }

    fn arm(&mut self, app: AppSessionId, delay: Duration, period: Option<Duration>, name: &'static str) -> Result<TimerId, ContainerError> {
        let cell = self.st.store.app_session(app).ok_or(ContainerError::NoSuchApp)?;
        let id = self.st.timers.arm(self.now + delay, TimerEntry { app, service: self.service, name, period });
        cell.lock().timers.push(id);
        Ok(id)
    }

    pub fn cancel_timer(&mut self, app: AppSessionId, timer: TimerId) -> bool {
        if let Some(cell) = self.st.store.app_session(app) {
            cell.lock().timers.retain(|t| *t != timer);
        }
        self.st.timers.cancel(timer)
    }

    /// Keeps the application session alive for at least `after` from now.
    pub fn set_expiry(&mut self, app: AppSessionId, after: Duration) {
        let at = self.now + after;
        if let Some(cell) = self.st.store.app_session(app) {
            cell.lock().expires_at = at;
            self.st.expiry.push(std::cmp::Reverse((at, app)));
        }
    }

    // ----- proxying -----

    /// Forwards the request statefully (ACK statelessly); responses are relayed upstream
    /// by the container.
    pub fn proxy(&mut self, req: &Request<'_>, options: ProxyOptions<'_>) -> Result<(), ContainerError> {
        self.st.proxy_request(self.now, req, self.service, options)
    }

    fn listener_for_flow(&self, flow: Flow) -> Result<LocalListener, ContainerError> {
        self.st
            .locals
            .by_index(flow.listener)
            .filter(|l| l.transport == flow.transport)
            .or_else(|| self.st.locals.for_transport(flow.transport))
            .cloned()
            .ok_or(ContainerError::NoListener)
    }
}

fn contact_value(listener: &LocalListener) -> String {
    format!("<sip:{};transport={}>", listener.host_port, listener.transport.as_str().to_ascii_lowercase())
}

/// Dialog state of a UAS from the INVITE (RFC 3261 §12.1.1).
fn uas_dialog(msg: &Message, local_tag: &str, flow: Flow) -> Dialog {
    let remote_target = msg.contact().map(|c| c.uri_text).or_else(|| msg.from_addr().map(|f| f.uri_text)).unwrap_or("");
    Dialog {
        call_id: msg.call_id().into(),
        local_tag: local_tag.into(),
        remote_tag: msg.from_tag().unwrap_or("").into(),
        local_party: format!("{};tag={local_tag}", msg.to_value()).into(),
        remote_party: msg.from_value().into(),
        remote_target: remote_target.into(),
        route_set: msg.record_route_values().map(|(_, v)| v.into()).collect(),
        local_seq: 0,
        max_forwards: 70,
        remote_seq: msg.cseq().map_or(0, |c| c.seq),
        flow,
    }
}

impl CoreState {
    /// RFC 3261 §12.1.2: a 2xx to our INVITE fixes the dialog; ACK it at once.
    pub(crate) fn confirm_uac_dialog(&mut self, s: &mut SipSession, msg: &Message) {
        let d = &mut s.dialog;
        if s.state == SessionState::Early && s.role == LegRole::Uac {
            d.remote_tag = msg.to_tag().unwrap_or("").into();
            d.remote_party = msg.to_value().into();
            if let Some(c) = msg.contact() {
                d.remote_target = c.uri_text.into();
            }
            let mut routes: Vec<Box<str>> = msg.record_route_values().map(|(_, v)| v.into()).collect();
            routes.reverse();
            d.route_set = routes;
            s.state = SessionState::Confirmed;
        }
        let seq = msg.cseq().map_or(0, |c| c.seq);
        self.ack_2xx(d, seq);
    }
}

impl CoreState {
    /// ACK and BYE for a 2xx whose session no longer exists, built from the response.
    pub(crate) fn ack_and_bye_orphan(&mut self, now: Instant, msg: &Message) {
        let mut routes: Vec<Box<str>> = msg.record_route_values().map(|(_, v)| v.into()).collect();
        routes.reverse();
        let Some(target) = msg.contact().map(|c| c.uri_text.to_string()) else { return };
        let dialog = Dialog {
            call_id: msg.call_id().into(),
            local_tag: msg.from_tag().unwrap_or("").into(),
            remote_tag: msg.to_tag().unwrap_or("").into(),
            local_party: msg.from_value().into(),
            remote_party: msg.to_value().into(),
            remote_target: target.into(),
            route_set: routes,
            local_seq: msg.cseq().map_or(0, |c| c.seq),
            remote_seq: 0,
            max_forwards: 70,
            flow: Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: std::net::SocketAddr::from(([0, 0, 0, 0], 0)) },
        };
        self.ack_2xx(&dialog, dialog.local_seq);
        if let Ok((w, flow, _, branch)) = dialog_request(self, &dialog, &Method::Bye, dialog.local_seq + 1) {
            self.metrics.message_out(Some(&Method::Bye), None, flow.transport);
            let tx = self.layer.send_request(now, Method::Bye, &branch, w.finish(), flow);
            self.client_owner.insert(tx, ClientOwner::Proxy { server_tx: None });
        }
    }

    /// ACK for a 2xx to an INVITE of the dialog (RFC 3261 §13.2.2.4), outside any transaction.
    fn ack_2xx(&mut self, d: &Dialog, seq: u32) {
        if let Ok((w, flow, _, _)) = dialog_request(self, d, &Method::Ack, seq) {
            self.metrics.message_out(Some(&Method::Ack), None, flow.transport);
            self.layer.send_stateless(w.finish(), flow);
        }
    }
}

/// A request inside a dialog (RFC 3261 §12.2.1.1): to the first Route, else the remote target,
/// reusing the dialog's connection on connection transports; the request line and Via (a new
/// branch), Max-Forwards, the route set, From, To, Call-ID and CSeq written. The caller adds
/// what else it needs and the body.
fn dialog_request(
    st: &mut CoreState,
    d: &Dialog,
    method: &Method,
    seq: u32,
) -> Result<(MessageWriter, Flow, LocalListener, String), ContainerError> {
    let dest = match d.route_set.first() {
        Some(route) => NameAddr::parse(route).and_then(|n| n.uri()).and_then(|u| Destination::from_uri(&u)),
        None => tandem_sip::Uri::parse(&d.remote_target).and_then(|u| Destination::from_uri(&u)),
    }
    .ok_or(ContainerError::Unroutable)?;
    let listener = st.locals.for_transport(dest.transport).cloned().ok_or(ContainerError::NoListener)?;
    let reuse = dest.transport == d.flow.transport && dest.transport != Transport::Udp;
    let flow = Flow {
        transport: dest.transport,
        listener: listener.index,
        connection: if reuse { d.flow.connection } else { 0 },
        remote: dest.addr,
    };
    let branch = st.layer.client_branch(st.ids.u64());
    let mut w = MessageWriter::with_capacity(768).request_line(method, &d.remote_target);
    w.header_parts("Via", &["SIP/2.0/", dest.transport.as_str(), " ", &listener.host_port, ";branch=", &branch]);
    w.header_u32("Max-Forwards", u32::from(d.max_forwards));
    for route in &d.route_set {
        w.header("Route", route);
    }
    w.header("From", &d.local_party);
    w.header("To", &d.remote_party);
    w.header("Call-ID", &d.call_id);
    w.header_parts("CSeq", &[itoa::Buffer::new().format(seq), " ", method.as_str()]);
    Ok((w, flow, listener, branch))
}
