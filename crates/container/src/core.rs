//! One executor's state and event handling, without I/O: fed received messages, flow
//! failures and the time; its output is drained as [`Transmit`]s. The async driver in
//! `runtime` feeds it; a simulator or a replica could feed it the same way.

use crate::config::ContainerConfig;
use crate::context::Context;
use crate::ids::{AppSessionId, IdSource, SessionId};
use crate::locals::Locals;
use crate::metrics::{Drop as DropReason, Metrics};
use crate::proxy::ProxyContext;
use crate::routing::{self, RouteRule};
use crate::service::{Request, RequestKind, ResponseEvent, Service, ServiceId};
use crate::session::{LegRole, SessionState};
use crate::store::SessionStore;
use crate::timers::TimerQueue;
use bytes::Bytes;
use griddle::HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

type FastState = foldhash::fast::RandomState;
use std::sync::Arc;
use std::time::Instant;
use tandem_sip::{Flow, HeaderName, Message, Method, ResponseBuilder, Scheme, Span, Transport};
use tandem_transaction::{ClientTxId, Event, Matched, ServerTxId, TransactionLayer, Transmit, TxMap};

/// The services of a container, by index.
pub struct Services {
    pub(crate) list: Vec<Arc<dyn Service>>,
    pub(crate) names: Vec<String>,
}

impl Services {
    pub fn new(services: Vec<(String, Arc<dyn Service>)>) -> Services {
        let (names, list) = services.into_iter().unzip();
        Services { list, names }
    }

    pub fn id(&self, name: &str) -> Option<ServiceId> {
        self.names.iter().position(|n| n == name).map(|i| i as ServiceId)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ServerOwner {
    /// The INVITE server transaction of a UAS SIP session.
    Session(SessionId),
    /// A proxied request (its context is in `proxies`).
    Proxy,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ClientOwner {
    Session(SessionId),
    Proxy { server_tx: Option<ServerTxId> },
}

pub(crate) struct CoreState {
    pub executor: u16,
    pub executors: u16,
    pub config: Arc<ContainerConfig>,
    pub routes: Arc<Vec<RouteRule>>,
    pub service_names: Vec<String>,
    pub layer: TransactionLayer,
    pub store: Arc<SessionStore>,
    pub metrics: Arc<Metrics>,
    pub locals: Arc<Locals>,
    pub ids: IdSource,
    /// Local tag → SIP session (our tags are random and unique, so they alone key a dialog).
    // foldhash (random seed: dialog IDs come from the network); SipHash cost 3 % per call.
    pub dialogs: HashMap<Box<str>, SessionId, FastState>,
    // Indexed by the transaction's slot (no hashing; a UDP proxy holds 32 s of transactions).
    pub server_owner: TxMap<ServerTxId, ServerOwner>,
    pub client_owner: TxMap<ClientTxId, ClientOwner>,
    pub proxies: TxMap<ServerTxId, ProxyContext>,
    pub timers: TimerQueue,
    pub expiry: BinaryHeap<Reverse<(Instant, AppSessionId)>>,
    /// Work for executors (this one included), delivered by the driver after each event.
    pub posts: Vec<(u16, ServiceId, crate::Post)>,
    /// How work started outside the event loop comes back ([`crate::Completion`]).
    pub reentry: Arc<dyn crate::Reentry>,
    /// The wall clock at one instant of the executor's clock: wall time is derived from the
    /// event's time, so that a replayed event sees the same wall time.
    pub wall_anchor: (Instant, std::time::SystemTime),
}

pub struct Core {
    services: Arc<Services>,
    pub(crate) st: CoreState,
}

/// What an executor core is made of; public so simulations and tests can build executors
/// without sockets (see the runtime for how the container wires them).
pub struct CoreParts {
    pub executor: u16,
    pub executors: u16,
    pub config: Arc<ContainerConfig>,
    pub routes: Arc<Vec<RouteRule>>,
    pub store: Arc<SessionStore>,
    pub metrics: Arc<Metrics>,
    pub locals: Arc<Locals>,
    pub services: Arc<Services>,
    pub ids: IdSource,
}

impl Core {
    pub fn new(p: CoreParts) -> Core {
        let layer = TransactionLayer::new(tandem_transaction::Config {
            timers: tandem_transaction::TimerConfig { t1: p.config.t1, t2: p.config.t2, t4: p.config.t4 },
            max_transactions: p.config.max_transactions,
        });
        Core {
            services: p.services.clone(),
            st: CoreState {
                executor: p.executor,
                executors: p.executors,
                config: p.config,
                routes: p.routes,
                service_names: p.services.names.clone(),
                layer,
                store: p.store,
                metrics: p.metrics,
                locals: p.locals,
                ids: p.ids,
                dialogs: HashMap::default(),
                server_owner: TxMap::default(),
                client_owner: TxMap::default(),
                proxies: TxMap::default(),
                timers: TimerQueue::default(),
                expiry: BinaryHeap::new(),
                posts: Vec::new(),
                reentry: Arc::new(crate::Detached),
                wall_anchor: (Instant::now(), std::time::SystemTime::now()),
            },
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.st.layer.poll_transmit()
    }

    /// Work posted by services for an executor: `(executor, service, work)`.
    pub fn take_posts(&mut self) -> Vec<(u16, ServiceId, crate::Post)> {
        std::mem::take(&mut self.st.posts)
    }

    /// Runs work posted to this executor.
    pub fn run_post(&mut self, now: Instant, service: ServiceId, work: crate::Post) {
        if (service as usize) < self.services.list.len() {
            self.run(now, service, work);
        }
        self.drain_events(now);
    }

    pub fn executor(&self) -> u16 {
        self.st.executor
    }

    /// How many executors the container runs (for routing by Call-ID, [`crate::executor_for`]).
    pub fn executors(&self) -> u16 {
        self.st.executors
    }

    /// Attaches the way completions ([`crate::Completion`]) come back to executors.
    pub fn set_reentry(&mut self, reentry: Arc<dyn crate::Reentry>) {
        self.st.reentry = reentry;
    }

    pub fn next_deadline(&mut self) -> Option<Instant> {
        let candidates = [self.st.layer.next_timeout(), self.st.timers.next_deadline(), self.st.expiry.peek().map(|Reverse((t, _))| *t)];
        candidates.into_iter().flatten().min()
    }

    pub fn on_message(&mut self, now: Instant, msg: Message, flow: Flow) {
        let metric_method = msg.transaction_method().cloned();
        self.st.metrics.message_in(metric_method.as_ref(), msg.status(), flow.transport);
        if let Some(defect) = msg.defect() {
            self.st.metrics.parse_error(true);
            tracing::debug!(reason = defect.reason, remote = %flow.remote, "invalid message");
            if msg.is_request() && msg.method() != Some(&Method::Ack) {
                self.st.reply_stateless(&msg, flow, defect.status, Some(defect.reason));
            }
            return;
        }
        // By reference: moving the message through the layer and back copied it twice.
        match self.st.layer.on_message_ref(now, &msg, flow) {
            Matched::Request { tx, cancels } => self.on_request(now, &msg, flow, tx, cancels),
            Matched::Response { tx } => self.on_client_response(now, tx, &msg),
            Matched::StrayResponse => self.st.forward_stray_response(&msg),
            Matched::Absorbed => self.st.metrics.absorbed(),
            Matched::Overloaded => {
                self.st.metrics.dropped(DropReason::Limit);
                if msg.is_request() && msg.method() != Some(&Method::Ack) {
                    self.st.reply_stateless(&msg, flow, 503, Some("transaction limit reached"));
                }
            }
        }
        self.drain_events(now);
    }

    /// A connection closed or could not be opened.
    pub fn on_flow_closed(&mut self, now: Instant, flow: Flow) {
        self.st.layer.transport_error(now, flow);
        // Requests sent before the connection existed were sent on the flow without an id.
        self.st.layer.transport_error(now, Flow { connection: 0, ..flow });
        self.drain_events(now);
    }

    /// Sending failed synchronously (queue full, no listener).
    pub fn on_send_failed(&mut self, now: Instant, flow: Flow) {
        self.st.metrics.dropped(DropReason::SendFailed);
        if flow.transport != Transport::Udp {
            self.on_flow_closed(now, flow);
        }
    }

    pub fn on_timeout(&mut self, now: Instant) {
        self.st.layer.on_timeout(now);
        self.drain_events(now);
        while let Some((id, entry)) = self.st.timers.pop_due(now) {
            let Some(app) = self.st.store.app_session(entry.app) else {
                continue;
            };
            if entry.period.is_none() {
                app.lock().timers.retain(|t| *t != id);
            }
            drop(app);
            self.st.touch(entry.app, now);
            let service = self.services.list[entry.service as usize].clone();
            self.run(now, entry.service, |ctx| service.on_timer(ctx, entry.app, id, entry.name));
        }
        self.expire(now);
        self.drain_events(now);
    }

    fn expire(&mut self, now: Instant) {
        while let Some(Reverse((at, app_id))) = self.st.expiry.peek().copied() {
            if at > now {
                return;
            }
            self.st.expiry.pop();
            let Some(cell) = self.st.store.app_session(app_id) else {
                continue;
            };
            let (expires_at, service) = {
                let app = cell.lock();
                (app.expires_at, app.service)
            };
            if expires_at > now {
                self.st.expiry.push(Reverse((expires_at, app_id)));
                continue;
            }
            tracing::debug!(app = %app_id, "application session expired");
            let svc = self.services.list[service as usize].clone();
            self.run(now, service, |ctx| svc.on_expired(ctx, app_id));
            self.st.invalidate(app_id);
        }
    }

    /// Publishes this executor's counters for the admin endpoint.
    pub fn publish_stats(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(s) = self.st.metrics.executor_stats.get(self.st.executor as usize) {
            let (server, client) = self.st.layer.counts();
            s.server_transactions.store(server as u64, Relaxed);
            s.client_transactions.store(client as u64, Relaxed);
            s.retransmissions.store(self.st.layer.retransmissions(), Relaxed);
        }
    }

    fn run(&mut self, now: Instant, service: ServiceId, f: impl FnOnce(&mut Context<'_>)) {
        let started = Instant::now();
        let mut ctx = Context::new(&mut self.st, now, service);
        f(&mut ctx);
        self.st.metrics.handler_time(started.elapsed().as_secs_f64());
    }

    fn dispatch(&mut self, now: Instant, service: ServiceId, req: &Request<'_>) {
        let svc = self.services.list[service as usize].clone();
        self.run(now, service, |ctx| svc.on_request(ctx, req));
    }

    fn on_request(&mut self, now: Instant, msg: &Message, flow: Flow, tx: Option<ServerTxId>, cancels: Option<ServerTxId>) {
        let method = msg.method().cloned().unwrap_or(Method::Options);
        if method == Method::Cancel {
            return self.on_cancel(now, msg, tx, cancels);
        }
        let base = Request { msg, tx, flow, kind: RequestKind::Initial, session: None, app: None, consumed_route: None };
        if let Some(session) = msg.to_tag().and_then(|tag| self.st.dialogs.get(tag).copied()) {
            return self.in_dialog(now, Request { kind: RequestKind::InDialog, session: Some(session), ..base });
        }
        if let Some((service, consumed)) = self.routed_service(msg) {
            return self.dispatch(now, service, &Request { kind: RequestKind::Routed, consumed_route: Some(consumed), ..base });
        }
        if msg.to_tag().is_some() {
            // Mid-dialog, but no dialog or Route of ours: a proxy chosen by the routing rules
            // still relays it (user agents that ignore Record-Route, such as SIPp's built-in
            // scenarios, send these); a user agent answers 481.
            if let Some(service) = self.route_to_proxy(msg, flow) {
                return self.dispatch(now, service, &Request { kind: RequestKind::Routed, ..base });
            }
        }
        let Some(tx) = tx.filter(|_| method != Method::Ack) else {
            self.st.metrics.dropped(DropReason::Stray);
            return;
        };
        if msg.to_tag().is_some() {
            return self.st.reply(now, tx, msg, 481, None);
        }
        self.initial(now, Request { tx: Some(tx), ..base }, tx);
    }

    fn route_to_proxy(&self, msg: &Message, flow: Flow) -> Option<ServiceId> {
        let local_port = self.st.locals.by_index(flow.listener).map_or(0, |l| l.addr.port());
        let service = routing::route(&self.st.routes, msg, local_port).and_then(|name| self.services.id(name))?;
        self.services.list[service as usize].user_agent().is_none().then_some(service)
    }

    fn initial(&mut self, now: Instant, req: Request<'_>, tx: ServerTxId) {
        let msg = req.msg;
        if !matches!(msg.request_uri().map(|u| u.scheme()), Some(Scheme::Sip | Scheme::Sips | Scheme::Tel)) {
            return self.st.reply(now, tx, msg, 416, None);
        }
        let local_port = self.st.locals.by_index(req.flow.listener).map_or(0, |l| l.addr.port());
        let service = routing::route(&self.st.routes, msg, local_port).and_then(|name| self.services.id(name));
        let Some(service) = service else {
            self.st.metrics.dropped(DropReason::NoRoute);
            return self.st.reply(now, tx, msg, 404, Some("no service for this request"));
        };
        if self.st.store.live_app_sessions() >= self.st.config.max_app_sessions {
            self.st.metrics.dropped(DropReason::Limit);
            return self.st.reply(now, tx, msg, 503, Some("session limit reached"));
        }
        if !self.ua_checks(now, service, &req) {
            return;
        }
        self.dispatch(now, service, &req);
    }

    fn in_dialog(&mut self, now: Instant, req: Request<'_>) {
        let msg = req.msg;
        let Some(cell) = req.session.and_then(|s| self.st.store.session(s)) else {
            return;
        };
        let (service, app, stale) = {
            let mut s = cell.lock();
            if s.dialog.call_id.as_ref() != msg.call_id() {
                return;
            }
            let seq = msg.cseq().map_or(0, |c| c.seq);
            let is_ack = msg.method() == Some(&Method::Ack);
            let stale = !is_ack && seq <= s.dialog.remote_seq && s.dialog.remote_seq != 0;
            if is_ack {
                if let Some(invite_tx) = s.invite_tx.take() {
                    self.st.layer.ack_received(invite_tx);
                    self.st.server_owner.remove(&invite_tx);
                }
                if s.state == SessionState::Early {
                    s.state = SessionState::Confirmed;
                }
            } else if !stale {
                s.dialog.remote_seq = seq;
                if msg.method() == Some(&Method::Bye) {
                    // RFC 3261 §15.1.2: a BYE ends the dialog; nothing more is sent on it (an
                    // action decided earlier and still on its way, such as our own BYE, is
                    // then dropped instead of reaching a phone that hung up).
                    s.state = SessionState::Terminated;
                }
            }
            (s.service, s.app, stale)
        };
        drop(cell);
        if stale {
            // RFC 3261 §12.2.2: a lower CSeq than seen is out of order.
            if let Some(tx) = req.tx {
                self.st.reply(now, tx, msg, 500, Some("CSeq out of order"));
            }
            return;
        }
        self.st.touch(app, now);
        if req.tx.is_some() && !self.ua_checks(now, service, &req) {
            return;
        }
        self.dispatch(now, service, &Request { app: Some(app), ..req });
    }

    /// RFC 3261 §8.2 checks for user-agent services; false when a response was sent.
    fn ua_checks(&mut self, now: Instant, service: ServiceId, req: &Request<'_>) -> bool {
        let Some(profile) = self.services.list[service as usize].user_agent().copied() else {
            return true;
        };
        let (Some(tx), msg) = (req.tx, req.msg) else {
            return true;
        };
        let method = req.method();
        if !profile.allowed_methods.contains(&method.as_str()) {
            let allow = profile.allowed_methods.join(", ");
            self.st.reply_with(now, tx, msg, 405, &[("Allow", &allow)], None);
            return false;
        }
        let unsupported: Vec<&str> = msg
            .values_of(HeaderName::Require)
            .map(|(_, v)| v)
            .filter(|opt| !profile.supported_extensions.iter().any(|s| s.eq_ignore_ascii_case(opt)))
            .collect();
        if !unsupported.is_empty() && *method != Method::Ack {
            let list = unsupported.join(", ");
            self.st.reply_with(now, tx, msg, 420, &[("Unsupported", &list)], None);
            return false;
        }
        if msg.body_len() > 0 && !profile.accepted_bodies.is_empty() {
            let ct = msg.header(HeaderName::ContentType).unwrap_or("");
            let base = ct.split(';').next().unwrap_or("").trim();
            if !profile.accepted_bodies.iter().any(|a| a.eq_ignore_ascii_case(base)) {
                let accept = profile.accepted_bodies.join(", ");
                self.st.reply_with(now, tx, msg, 415, &[("Accept", &accept)], None);
                return false;
            }
        }
        if let (Method::Invite, Some(answer)) = (method, profile.answer_body) {
            if !accepts(msg, answer) {
                self.st.reply_with(now, tx, msg, 406, &[("Accept", answer)], None);
                return false;
            }
        }
        true
    }

    /// A request carrying a Route value that designates us and a service (`;tsvc=`),
    /// as record-routed proxies receive their subsequent requests.
    fn routed_service(&self, msg: &Message) -> Option<(ServiceId, (usize, Span))> {
        let (index, value) = msg.route_values().next()?;
        let na = tandem_sip::NameAddr::parse(value)?;
        let uri = na.uri()?;
        let sip = uri.as_sip()?;
        if !self.st.locals.is_local_uri(sip) {
            return None;
        }
        let name = sip.param("tsvc").flatten()?;
        Some((self.services.id(name)?, (index, msg.span_of(value)?)))
    }

    fn on_cancel(&mut self, now: Instant, msg: &Message, tx: Option<ServerTxId>, cancels: Option<ServerTxId>) {
        let Some(tx) = tx else { return };
        let owner = cancels.and_then(|itx| self.st.server_owner.get(&itx).copied().map(|o| (itx, o)));
        let Some((invite_tx, owner)) = owner else {
            return self.st.reply(now, tx, msg, 481, None);
        };
        match owner {
            ServerOwner::Proxy => {
                self.st.reply(now, tx, msg, 200, None);
                self.st.proxy_cancel(now, invite_tx, msg);
            }
            ServerOwner::Session(sid) => {
                let cell = self.st.store.session(sid);
                // RFC 3261 §9.2: the CANCEL's 200 carries the To tag of the INVITE's response
                // (a caller whose CANCEL crossed our 2xx builds its ACK and BYE from either).
                match cell.as_ref().map(|c| c.lock().dialog.local_tag.clone()) {
                    Some(tag) => self.st.reply_tagged(now, tx, msg, 200, &tag),
                    None => self.st.reply(now, tx, msg, 200, None),
                }
                let Some(cell) = cell else {
                    return;
                };
                let (service, tag) = {
                    let mut s = cell.lock();
                    if s.answered {
                        return;
                    }
                    s.answered = true;
                    s.state = SessionState::Terminated;
                    s.invite_tx = None;
                    s.pending_invite = None;
                    (s.service, s.dialog.local_tag.clone())
                };
                self.st.server_owner.remove(&invite_tx);
                let terminated = cancelled_invite_response(msg, &tag);
                self.st.metrics.message_out(Some(&Method::Invite), Some(487), msg_transport(msg));
                self.st.layer.respond(now, invite_tx, 487, terminated, false);
                let svc = self.services.list[service as usize].clone();
                self.run(now, service, |ctx| svc.on_cancelled(ctx, sid));
            }
        }
    }

    fn on_client_response(&mut self, now: Instant, tx: ClientTxId, msg: &Message) {
        match self.st.client_owner.get(&tx).copied() {
            Some(ClientOwner::Session(sid)) => self.session_response(now, sid, msg),
            Some(ClientOwner::Proxy { server_tx }) => self.st.proxy_relay(now, tx, server_tx, msg),
            None => self.st.metrics.dropped(DropReason::Stray),
        }
    }

    fn session_response(&mut self, now: Instant, sid: SessionId, msg: &Message) {
        let status = msg.status().unwrap_or(0);
        let invite = msg.transaction_method() == Some(&Method::Invite);
        let Some(cell) = self.st.store.session(sid) else {
            // The session ended while its INVITE was pending: a 2xx still set up a dialog,
            // which must be acknowledged and ended (RFC 3261 §15).
            if invite && (200..300).contains(&status) {
                self.st.ack_and_bye_orphan(now, msg);
            }
            return;
        };
        let service = {
            let mut s = cell.lock();
            if invite && status >= 200 {
                s.pending_request = None;
            }
            if invite && (200..300).contains(&status) {
                // A UAC leg's dialog is fixed by its first 2xx; a re-INVITE's 2xx (either
                // role) is acknowledged in the dialog.
                self.st.confirm_uac_dialog(&mut s, msg);
            } else if invite && status >= 300 && s.role == LegRole::Uac && s.state == SessionState::Early {
                s.state = SessionState::Terminated;
            }
            s.service
        };
        drop(cell);
        let svc = self.services.list[service as usize].clone();
        self.run(now, service, |ctx| svc.on_response(ctx, sid, ResponseEvent::Received(msg)));
    }

    fn drain_events(&mut self, now: Instant) {
        while let Some(event) = self.st.layer.poll_event() {
            match event {
                Event::ClientTimeout { tx } => self.client_failed(now, tx, ResponseEvent::Timeout),
                Event::ClientTransportError { tx } => self.client_failed(now, tx, ResponseEvent::TransportError),
                Event::AckTimeout { tx } => {
                    if let Some(ServerOwner::Session(sid)) = self.st.server_owner.remove(&tx) {
                        let service = self.st.store.session(sid).map(|c| c.lock().service);
                        if let Some(service) = service {
                            let svc = self.services.list[service as usize].clone();
                            self.run(now, service, |ctx| svc.on_ack_timeout(ctx, sid));
                        }
                    }
                }
                Event::ServerTerminated { tx } => {
                    self.st.server_owner.remove(&tx);
                    self.st.proxies.remove(&tx);
                }
                Event::ClientTerminated { tx } => {
                    self.st.client_owner.remove(&tx);
                }
                Event::TryingDue { tx } => self.st.proxy_trying_due(now, tx),
            }
        }
    }

    fn client_failed(&mut self, now: Instant, tx: ClientTxId, why: ResponseEvent<'_>) {
        match self.st.client_owner.remove(&tx) {
            Some(ClientOwner::Session(sid)) => {
                let service = self.st.store.session(sid).map(|c| {
                    let mut s = c.lock();
                    if s.state == SessionState::Early && s.role == LegRole::Uac {
                        s.state = SessionState::Terminated;
                    }
                    s.service
                });
                if let Some(service) = service {
                    let svc = self.services.list[service as usize].clone();
                    self.run(now, service, |ctx| svc.on_response(ctx, sid, why));
                }
            }
            Some(ClientOwner::Proxy { server_tx: Some(stx) }) => self.st.proxy_branch_failed(now, tx, stx, why.status()),
            Some(ClientOwner::Proxy { server_tx: None }) | None => {}
        }
    }
}

/// Whether an `Accept` header (absent means `application/sdp`) admits `body_type`.
fn accepts(msg: &Message, body_type: &str) -> bool {
    let mut values = msg.values_of(HeaderName::Accept).peekable();
    if values.peek().is_none() {
        return true;
    }
    let (major, _) = body_type.split_once('/').unwrap_or((body_type, ""));
    values.any(|(_, v)| {
        let v = v.split(';').next().unwrap_or("").trim();
        v == "*/*" || v.eq_ignore_ascii_case(body_type) || v.strip_suffix("/*").is_some_and(|m| m.eq_ignore_ascii_case(major))
    })
}

fn msg_transport(msg: &Message) -> Transport {
    msg.top_via_transport().unwrap_or(Transport::Udp)
}

/// 487 for the INVITE a CANCEL names, built from the CANCEL (same Via, From, To, Call-ID and
/// CSeq number; RFC 3261 §9.2), with the dialog's local tag.
fn cancelled_invite_response(cancel: &Message, local_tag: &str) -> Bytes {
    let mut w = tandem_sip::MessageWriter::with_capacity(512).status_line(487, "Request Terminated");
    w.copy_headers_named(cancel, HeaderName::Via);
    w.copy_headers_named(cancel, HeaderName::From);
    match cancel.to_tag() {
        Some(_) => w.copy_headers_named(cancel, HeaderName::To),
        None => w.header_parts("To", &[cancel.to_value(), ";tag=", local_tag]),
    };
    w.copy_headers_named(cancel, HeaderName::CallId);
    let seq = cancel.cseq().map_or(0, |c| c.seq);
    w.header_parts("CSeq", &[itoa::Buffer::new().format(seq), " INVITE"]);
    w.finish()
}

impl CoreState {
    pub(crate) fn reason_phrase(status: u16) -> &'static str {
        match status {
            100 => "Trying",
            180 => "Ringing",
            200 => "OK",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            406 => "Not Acceptable",
            408 => "Request Timeout",
            415 => "Unsupported Media Type",
            416 => "Unsupported URI Scheme",
            420 => "Bad Extension",
            481 => "Call/Transaction Does Not Exist",
            482 => "Loop Detected",
            483 => "Too Many Hops",
            487 => "Request Terminated",
            500 => "Server Internal Error",
            503 => "Service Unavailable",
            505 => "Version Not Supported",
            _ => "Unknown",
        }
    }

    /// A response outside any transaction (invalid requests, overload), on the flow the
    /// request came in on (symmetric response routing).
    pub(crate) fn reply_stateless(&mut self, msg: &Message, flow: Flow, status: u16, warning: Option<&str>) {
        let tag = self.ids.tag();
        let mut b = ResponseBuilder::new(msg, status, Self::reason_phrase(status), Some(&tag));
        if let Some(w) = warning {
            b.writer().header_parts("Warning", &["399 tandem \"", w, "\""]);
        }
        self.metrics.message_out(msg.method(), Some(status), flow.transport);
        self.layer.send_stateless(b.finish(), flow);
    }

    pub(crate) fn reply(&mut self, now: Instant, tx: ServerTxId, msg: &Message, status: u16, warning: Option<&str>) {
        let warning = warning.map(|w| format!("399 tandem \"{w}\""));
        let headers: Vec<(&str, &str)> = warning.iter().map(|w| ("Warning", w.as_str())).collect();
        self.reply_with(now, tx, msg, status, &headers, None);
    }

    /// A response without a body whose To tag (when the request has none) is `tag`.
    pub(crate) fn reply_tagged(&mut self, now: Instant, tx: ServerTxId, msg: &Message, status: u16, tag: &str) {
        let tag = msg.to_tag().is_none().then_some(tag);
        self.send_reply(now, tx, msg, status, tag, &[], None);
    }

    pub(crate) fn reply_with(
        &mut self,
        now: Instant,
        tx: ServerTxId,
        msg: &Message,
        status: u16,
        headers: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) {
        let tag = if msg.to_tag().is_none() && status > 100 { Some(self.ids.tag()) } else { None };
        self.send_reply(now, tx, msg, status, tag.as_deref(), headers, body);
    }

    /// Builds and sends a response with To tag `tag` (added when `Some`).
    #[allow(clippy::too_many_arguments)]
    fn send_reply(
        &mut self,
        now: Instant,
        tx: ServerTxId,
        msg: &Message,
        status: u16,
        tag: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) {
        let mut b = ResponseBuilder::new(msg, status, Self::reason_phrase(status), tag);
        for (name, value) in headers {
            b.writer().header(name, value);
        }
        let bytes = match body {
            Some((ct, body)) => b.body(ct, body),
            None => b.finish(),
        };
        self.metrics.message_out(msg.method(), Some(status), msg_transport(msg));
        self.layer.respond(now, tx, status, bytes, false);
    }

    /// Records activity on an application session, postponing its expiry.
    pub(crate) fn touch(&mut self, app: AppSessionId, now: Instant) {
        if let Some(cell) = self.store.app_session(app) {
            cell.lock().expires_at = now + self.config.app_session_expiry;
        }
    }

    /// Removes an application session with its SIP sessions and timers.
    pub(crate) fn invalidate(&mut self, app_id: AppSessionId) {
        let Some(cell) = self.store.remove_app(app_id) else {
            return;
        };
        let app = cell.lock();
        for timer in &app.timers {
            self.timers.cancel(*timer);
        }
        for sid in &app.sessions {
            if let Some(scell) = self.store.remove_session(*sid) {
                let mut s = scell.lock();
                s.removed = true;
                if self.dialogs.get(&s.dialog.local_tag) == Some(sid) {
                    self.dialogs.remove(&s.dialog.local_tag);
                }
                if let Some(tx) = s.invite_tx {
                    self.server_owner.remove(&tx);
                }
            }
        }
    }
}
