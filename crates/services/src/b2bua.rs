//! `b2bua_nt`: the back-to-back user agent of the J2EE and Mobicents benchmarks ("NT": no
//! timers, no database). It answers the caller's INVITE as a UAS (leg A) and places a new
//! call (leg B) to the next hop or the Request-URI, then relays between the two dialogs:
//! provisional and final answers of B to A, SDP unchanged both ways; in-dialog requests
//! (re-INVITE, UPDATE, INFO, MESSAGE, ...) from either side to the other, with the other
//! side's answer relayed back; CANCEL of A cancels B; a BYE from either side is answered and
//! ends the other leg with BYE.
//!
//! `b2bua_1t` adds, as in the benchmarks' "1T" service: a policy lookup in the database keyed
//! by the Request-URI user before leg B is created (no policy: 403), a call timer (the
//! smaller of `b2bua.call_timer` and the policy's maximum duration) that ends an answered
//! call with BYE on both legs, and a billing record written in a database transaction when
//! an answered call ends. `b2bua_2t` adds a periodic timer (`b2bua.check_period`) that runs
//! one query per live call: it reads the callee's policy again and ends the call if the
//! policy is gone.
//!
//! Queries never run on a SIP executor: they are spawned on the tokio runtime and their
//! results come back to the call's executor as an event of their own (a `Completion`).
//!
//! Both legs live on the executor that received the INVITE (leg B's Call-ID is chosen to hash
//! there), so relaying needs no locks beyond the container's per-session ones.

use bytes::Bytes;
use dashmap::DashMap;
use serde::Deserialize;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};
use tandem_container::{
    AppSessionId, AttrValue, Context, Destination, IdHashBuilder, LegRole, Request, RequestKind, ResponseEvent, ServerTxId, Service,
    SessionId, SessionState, SipSession, TimerId, UaProfile,
};
use tandem_db::{BillingRecord, Database, DbError, Policy};
use tandem_sip::{Flow, HeaderName, Message, Method, NameAddr};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct B2buaConfig {
    /// Where leg B goes: `IP:PORT` (UDP), `udp:IP:PORT` or `tcp:IP:PORT`; absent: the
    /// Request-URI's host and port.
    pub next_hop: Option<String>,
    /// 1T/2T: the longest an answered call lasts (the policy may allow less).
    #[serde(with = "humantime_serde")]
    pub call_timer: Duration,
    /// 2T: how often each live call's policy is queried again.
    #[serde(with = "humantime_serde")]
    pub check_period: Duration,
}

impl Default for B2buaConfig {
    fn default() -> Self {
        B2buaConfig { next_hop: None, call_timer: Duration::from_secs(180), check_period: Duration::from_secs(10) }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("b2bua.next_hop {0:?} is not IP:PORT, udp:IP:PORT or tcp:IP:PORT")]
pub struct InvalidB2buaNextHop(pub String);

const ALLOWED: &[&str] = &["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "UPDATE", "INFO", "MESSAGE", "REFER", "NOTIFY"];

static PROFILE: UaProfile = UaProfile {
    // Bodies are relayed, not interpreted: any type is passed through.
    allowed_methods: ALLOWED,
    accepted_bodies: &[],
    supported_extensions: &[],
    answer_body: None,
};

/// The other leg of a session.
const PEER: &str = "b2bua.peer";
/// Timer names (1T, 2T).
const CALL_LIMIT: &str = "b2bua.call-limit";
const POLICY_CHECK: &str = "b2bua.policy-check";

/// A request received on one leg and sent on the other, waiting for that leg's answer.
struct Relayed {
    msg: Message,
    tx: ServerTxId,
    flow: Flow,
    from: SessionId,
    app: Option<AppSessionId>,
}

pub struct B2bua {
    shared: Arc<Shared>,
}

struct Shared {
    next_hop: Option<Destination>,
    /// Keyed by the leg the request was relayed on.
    relayed: DashMap<SessionId, Relayed, IdHashBuilder>,
    /// 1T and 2T: the database side.
    tier: Option<Tier>,
}

/// The database-backed part of `b2bua_1t` / `b2bua_2t`.
struct Tier {
    name: &'static str,
    db: Database,
    runtime: tokio::runtime::Handle,
    call_timer: Duration,
    /// 2T only.
    check_period: Option<Duration>,
    calls: DashMap<AppSessionId, Call, IdHashBuilder>,
    stats: Arc<TierStats>,
}

#[derive(Default)]
struct TierStats {
    lookups: AtomicU64,
    rejected: AtomicU64,
    db_errors: AtomicU64,
    billed: AtomicU64,
    billing_failures: AtomicU64,
    checks: AtomicU64,
    timer_ends: AtomicU64,
    policy_ends: AtomicU64,
}

/// A call admitted by its policy.
struct Call {
    a: SessionId,
    b: Option<SessionId>,
    call_id: String,
    caller: String,
    callee: String,
    limit: Duration,
    /// When both legs were answered: the event time and the wall time in ms.
    answered: Option<(Instant, i64)>,
}

/// What leg B needs from the caller's INVITE, kept while the policy is looked up.
struct Invite {
    from_uri: String,
    to_uri: String,
    body: Option<(String, Bytes)>,
    max_forwards: u32,
    target: Destination,
}

impl B2bua {
    /// `b2bua_nt`: no timers, no database.
    pub fn new(config: &B2buaConfig) -> Result<B2bua, InvalidB2buaNextHop> {
        Ok(B2bua { shared: Arc::new(Shared { next_hop: next_hop(config)?, relayed: DashMap::default(), tier: None }) })
    }

    /// `b2bua_1t` (`periodic_checks` false) or `b2bua_2t` (true) on `db`; queries run on
    /// `runtime`.
    pub fn with_database(
        config: &B2buaConfig,
        db: Database,
        runtime: tokio::runtime::Handle,
        periodic_checks: bool,
    ) -> Result<B2bua, InvalidB2buaNextHop> {
        let tier = Tier {
            name: if periodic_checks { "b2bua_2t" } else { "b2bua_1t" },
            db,
            runtime,
            call_timer: config.call_timer,
            check_period: periodic_checks.then_some(config.check_period.max(Duration::from_millis(10))),
            calls: DashMap::default(),
            stats: Arc::default(),
        };
        Ok(B2bua { shared: Arc::new(Shared { next_hop: next_hop(config)?, relayed: DashMap::default(), tier: Some(tier) }) })
    }
}

fn next_hop(config: &B2buaConfig) -> Result<Option<Destination>, InvalidB2buaNextHop> {
    match &config.next_hop {
        Some(s) => Ok(Some(Destination::parse(s).ok_or_else(|| InvalidB2buaNextHop(s.clone()))?)),
        None => Ok(None),
    }
}

impl Shared {
    fn peer(ctx: &mut Context<'_>, session: SessionId) -> Option<SessionId> {
        ctx.with_session(session, |_, s| match s.attributes.get(PEER) {
            Some(AttrValue::Session(p)) => Some(*p),
            _ => None,
        })
        .flatten()
    }

    fn new_call(self: &Arc<Self>, ctx: &mut Context<'_>, req: &Request<'_>) {
        let msg = req.msg;
        let target = match self.next_hop.or_else(|| msg.request_uri().as_ref().and_then(Destination::from_uri)) {
            Some(t) => t,
            None => return ctx.respond(req, 404),
        };
        // A B2BUA starts a new request but must not reset Max-Forwards, or a loop through it
        // (e.g. a next hop that points back here) would never end.
        let max_forwards = msg.max_forwards().unwrap_or(70);
        if max_forwards == 0 {
            return ctx.respond(req, 483);
        }
        let a = match ctx.accept(req, None) {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "b2bua could not accept");
                return ctx.respond(req, 500);
            }
        };
        // 100 Trying at once: leg B (and, for 1T/2T, the policy lookup) may take longer than
        // the caller's first retransmission interval.
        let Some(app) = ctx.with_session(a, |ctx, s| {
            let _ = ctx.provisional(s, 100);
            s.app
        }) else {
            return;
        };
        let invite = Invite {
            from_uri: msg.header(HeaderName::From).and_then(NameAddr::parse).map_or("sip:anonymous@invalid", |n| n.uri_text).to_string(),
            to_uri: msg.request_uri_text().to_string(),
            body: body_of(msg),
            max_forwards,
            target,
        };
        let Some(tier) = &self.tier else { return self.place_leg_b(ctx, a, app, invite) };
        let callee = msg.request_uri().as_ref().and_then(|u| u.as_sip().and_then(|s| s.user_base())).unwrap_or("").to_string();
        tier.stats.lookups.fetch_add(1, Relaxed);
        let completion = ctx.completion();
        let db = tier.db.clone();
        let me = self.clone();
        let call_id = msg.call_id().to_string();
        tier.runtime.spawn(async move {
            let result = db.policy(&callee).await;
            completion.complete(Box::new(move |ctx: &mut Context<'_>| me.admit(ctx, a, app, invite, call_id, callee, result)));
        });
    }

    /// 1T/2T: the policy lookup came back; admit the call (leg B) or refuse it.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        ctx: &mut Context<'_>,
        a: SessionId,
        app: AppSessionId,
        invite: Invite,
        call_id: String,
        callee: String,
        result: Result<Option<Policy>, DbError>,
    ) {
        let Some(tier) = &self.tier else { return };
        // The caller may have cancelled while the database answered.
        let waiting = ctx.with_session(a, |_, s| s.awaits_answer() && s.state != SessionState::Terminated).unwrap_or(false);
        if !waiting {
            return self.end_app(ctx, app);
        }
        let status = match result {
            Ok(Some(policy)) => {
                let limit = tier.call_timer.min(policy.max_duration);
                let caller = invite.from_uri.clone();
                tier.calls.insert(app, Call { a, b: None, call_id, caller, callee, limit, answered: None });
                return self.place_leg_b(ctx, a, app, invite);
            }
            Ok(None) => {
                tier.stats.rejected.fetch_add(1, Relaxed);
                403
            }
            Err(e) => {
                tier.stats.db_errors.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "policy lookup failed");
                500
            }
        };
        ctx.with_session(a, |ctx, s| ctx.answer_session(s, status, None));
        self.end_app(ctx, app);
    }

    fn place_leg_b(&self, ctx: &mut Context<'_>, a: SessionId, app: AppSessionId, invite: Invite) {
        let b = match ctx.create_uac_session(app, &invite.from_uri, &invite.to_uri, invite.target) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "b2bua could not create leg B");
                ctx.with_session(a, |ctx, s| ctx.answer_session(s, 500, None));
                return self.end_app(ctx, app);
            }
        };
        ctx.with_session(a, |_, s| s.attributes.set(PEER, AttrValue::Session(b)));
        ctx.with_session(b, |_, s| {
            s.attributes.set(PEER, AttrValue::Session(a));
            s.dialog.max_forwards = u8::try_from(invite.max_forwards - 1).unwrap_or(u8::MAX);
        });
        if let Some(mut call) = self.tier.as_ref().and_then(|t| t.calls.get_mut(&app)) {
            call.b = Some(b);
        }
        let sent = match &invite.body {
            Some((ct, b_)) => ctx.send_invite(b, Some((ct, b_))),
            None => ctx.send_invite(b, None),
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "b2bua could not send leg B's INVITE");
            ctx.with_session(a, |ctx, s| ctx.answer_session(s, 500, None));
            self.end_app(ctx, app);
        }
    }

    /// Both legs answered: start the call timer (and the 2T checks).
    fn answered(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        let Some(tier) = &self.tier else { return };
        let Some(mut call) = tier.calls.get_mut(&app) else { return };
        let wall_ms = ctx.wall_time().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        call.answered = Some((ctx.now(), wall_ms));
        let limit = call.limit;
        drop(call);
        let _ = ctx.set_timer(app, limit, CALL_LIMIT);
        if let Some(period) = tier.check_period {
            let _ = ctx.set_periodic_timer(app, period, POLICY_CHECK);
        }
    }

    /// The call is over (`ended_by` says how): bill it if it was answered. Idempotent.
    fn call_over(&self, ctx: &mut Context<'_>, app: AppSessionId, ended_by: &str) {
        let Some(tier) = &self.tier else { return };
        let Some((_, call)) = tier.calls.remove(&app) else { return };
        let Some((answered, answered_at_ms)) = call.answered else { return };
        let duration_ms = i64::try_from(ctx.now().saturating_duration_since(answered).as_millis()).unwrap_or(i64::MAX);
        let record = BillingRecord {
            call_ref: app.to_string(),
            call_id: call.call_id,
            caller: call.caller,
            callee: call.callee,
            answered_at_ms,
            duration_ms,
            ended_by: ended_by.into(),
        };
        let db = tier.db.clone();
        let stats = tier.stats.clone();
        tier.runtime.spawn(async move {
            match db.bill(&record).await {
                Ok(()) => stats.billed.fetch_add(1, Relaxed),
                Err(e) => {
                    tracing::warn!(error = %e, call_id = %record.call_id, "billing record not written");
                    stats.billing_failures.fetch_add(1, Relaxed)
                }
            };
        });
    }

    /// Ends the call on both legs (call timer, revoked policy).
    fn hang_up(&self, ctx: &mut Context<'_>, app: AppSessionId, ended_by: &str) {
        let Some((a, b)) = self.tier.as_ref().and_then(|t| t.calls.get(&app).map(|c| (c.a, c.b))) else { return };
        self.call_over(ctx, app, ended_by);
        let mut live = false;
        for leg in [Some(a), b].into_iter().flatten() {
            live |= ctx.with_session(leg, end_leg).unwrap_or(false);
        }
        if !live {
            self.end_app(ctx, app);
        }
    }

    /// 2T: the periodic query of one live call.
    fn check_policy(self: &Arc<Self>, ctx: &mut Context<'_>, app: AppSessionId) {
        let Some(tier) = &self.tier else { return };
        let Some(callee) = tier.calls.get(&app).map(|c| c.callee.clone()) else { return };
        tier.stats.checks.fetch_add(1, Relaxed);
        let completion = ctx.completion();
        let db = tier.db.clone();
        let me = self.clone();
        tier.runtime.spawn(async move {
            let result = db.policy(&callee).await;
            completion.complete(Box::new(move |ctx: &mut Context<'_>| me.checked(ctx, app, result)));
        });
    }

    fn checked(&self, ctx: &mut Context<'_>, app: AppSessionId, result: Result<Option<Policy>, DbError>) {
        let Some(tier) = &self.tier else { return };
        match result {
            Ok(Some(_)) => {}
            Ok(None) => {
                tier.stats.policy_ends.fetch_add(1, Relaxed);
                self.hang_up(ctx, app, "policy");
            }
            Err(e) => {
                tier.stats.db_errors.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "periodic policy query failed; the call goes on");
            }
        }
    }

    /// Removes the application session (and the call's record: billed if it was answered).
    fn end_app(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        self.call_over(ctx, app, "ended");
        ctx.invalidate(app);
    }
    /// A request inside one leg's dialog.
    fn in_dialog(&self, ctx: &mut Context<'_>, req: &Request<'_>, session: SessionId) {
        let method = req.method().clone();
        if method == Method::Ack {
            return; // each leg's 2xx is acknowledged on its own dialog
        }
        let peer = Self::peer(ctx, session);
        if method == Method::Bye {
            ctx.respond(req, 200);
            let role = ctx.with_session(session, |_, s| {
                s.state = SessionState::Terminated;
                s.role
            });
            if let Some(app) = req.app {
                self.call_over(ctx, app, if role == Some(LegRole::Uas) { "caller" } else { "callee" });
            }
            match peer {
                Some(p) if ctx.with_session(p, end_leg).unwrap_or(false) => {}
                _ => {
                    if let Some(app) = req.app {
                        self.end_app(ctx, app);
                    }
                }
            }
            return;
        }
        let Some(peer) = peer else { return ctx.respond(req, 481) };
        let (Some(tx), true) = (req.tx, !self.relayed.contains_key(&peer)) else {
            // One relayed request per leg at a time (RFC 3261 14.2 answers a second
            // re-INVITE 491 anyway).
            return ctx.respond(req, 491);
        };
        let body = body_of(req.msg);
        let sent = ctx
            .with_session(peer, |ctx, s| match &body {
                Some((ct, b)) => ctx.send_in_dialog(s, method.clone(), Some((ct, b))),
                None => ctx.send_in_dialog(s, method.clone(), None),
            })
            .map(|r| r.is_ok())
            .unwrap_or(false);
        if sent {
            self.relayed.insert(peer, Relayed { msg: req.msg.clone(), tx, flow: req.flow, from: session, app: req.app });
        } else {
            ctx.respond(req, 481);
        }
    }

    /// Leg B's answer to its INVITE, relayed to leg A.
    fn invite_answer(&self, ctx: &mut Context<'_>, b: SessionId, response: &ResponseEvent<'_>) {
        let Some(a) = Self::peer(ctx, b) else { return };
        let status = response.status();
        let body = match response {
            ResponseEvent::Received(m) => body_of(m),
            _ => None,
        };
        let answered = ctx
            .with_session(a, |ctx, s| {
                if s.is_answered() || s.state == SessionState::Terminated {
                    return Err(());
                }
                match (status, &body) {
                    (100, _) => Ok(()),
                    (101..=199, _) => ctx.provisional(s, status).map_err(|_| ()),
                    (_, Some((ct, b_))) => ctx.answer_session(s, status, Some((ct, b_))).map_err(|_| ()),
                    (_, None) => ctx.answer_session(s, status, None).map_err(|_| ()),
                }
            })
            .unwrap_or(Err(()));
        if answered.is_ok() && (200..300).contains(&status) {
            if let Some(app) = ctx.with_session(b, |_, s| s.app) {
                self.answered(ctx, app);
            }
        }
        if answered.is_err() && (200..300).contains(&status) {
            // A is gone (it cancelled or hung up while B was ringing) but B answered, maybe
            // crossing our CANCEL: the container acknowledged B's 2xx; end that dialog.
            let ended = ctx
                .with_session(b, |ctx, s| {
                    s.state = SessionState::Confirmed;
                    ctx.send_bye_on(s).is_ok()
                })
                .unwrap_or(false);
            if !ended {
                if let Some(app) = ctx.with_session(b, |_, s| s.app) {
                    self.end_app(ctx, app);
                }
            }
        }
        if status >= 300 {
            if let Some(app) = ctx.with_session(b, |_, s| s.app) {
                self.end_app(ctx, app);
            }
        }
    }
}

fn body_of(msg: &Message) -> Option<(String, Bytes)> {
    let body = msg.body();
    if body.is_empty() {
        return None;
    }
    Some((msg.header(HeaderName::ContentType).unwrap_or("application/octet-stream").to_string(), body))
}

/// Ends a leg: BYE once confirmed, CANCEL while its INVITE is pending. False if the leg was
/// already over (the application session can go).
fn end_leg(ctx: &mut Context<'_>, s: &mut SipSession) -> bool {
    match s.state {
        SessionState::Terminated => false,
        SessionState::Early if s.invite_pending() => {
            // Leg B still ringing: CANCEL; its 487 (or a 2xx crossing the CANCEL) comes back.
            s.state = SessionState::Terminated;
            ctx.cancel_invite(s).is_ok()
        }
        SessionState::Early if s.awaits_answer() => {
            // Leg A not answered yet: refuse its INVITE; nothing more will come back.
            let _ = ctx.answer_session(s, 487, None);
            false
        }
        _ => ctx.send_bye_on(s).is_ok(),
    }
}

impl Shared {
    fn on_request(self: &Arc<Self>, ctx: &mut Context<'_>, req: &Request<'_>) {
        match (req.kind, req.method(), req.session) {
            (RequestKind::Initial, Method::Invite, _) => self.new_call(ctx, req),
            (RequestKind::Initial, Method::Ack, _) => {}
            (RequestKind::Initial, Method::Options, _) => ctx.respond_with(req, 200, &[("Allow", &ALLOWED.join(", "))], None),
            (RequestKind::InDialog, _, Some(session)) => self.in_dialog(ctx, req, session),
            (_, Method::Ack, _) => {}
            _ => ctx.respond(req, 481),
        }
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        let status = response.status();
        // The answer to a request relayed from the other leg (an in-dialog one).
        if let Some(method) = response.method() {
            let pending = self.relayed.get(&session).is_some_and(|r| r.msg.method() == Some(method));
            if pending && status >= 200 {
                if let Some((_, r)) = self.relayed.remove(&session) {
                    let req = Request::new(&r.msg, Some(r.tx), r.flow, RequestKind::InDialog, Some(r.from), r.app);
                    match response {
                        ResponseEvent::Received(m) => match body_of(m) {
                            Some((ct, b)) => ctx.respond_with(&req, status, &[], Some((&ct, &b))),
                            None => ctx.respond(&req, status),
                        },
                        _ => ctx.respond(&req, status),
                    }
                }
                return;
            }
            if pending {
                return; // provisional answers to relayed requests are not relayed
            }
        }
        // Leg B's own INVITE (relayed re-INVITEs were handled above); a timeout or transport
        // failure carries no method: it is the INVITE's while leg B is still being set up.
        let setting_up = ctx.with_session(session, |_, s| s.role == LegRole::Uac && s.state == SessionState::Early).unwrap_or(false);
        match response.method() {
            Some(Method::Invite) => self.invite_answer(ctx, session, &response),
            None if setting_up => self.invite_answer(ctx, session, &response),
            _ => {
                // The answer to a BYE (or CANCEL) that ended this leg: when both legs are over,
                // the call is.
                if status < 200 {
                    return;
                }
                let over =
                    |ctx: &mut Context<'_>, id: SessionId| ctx.with_session(id, |_, s| s.state == SessionState::Terminated).unwrap_or(true);
                let peer = Self::peer(ctx, session);
                if over(ctx, session) && peer.is_none_or(|p| over(ctx, p)) {
                    if let Some(app) = ctx.with_session(session, |_, s| s.app) {
                        self.end_app(ctx, app);
                    }
                }
            }
        }
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, a: SessionId) {
        // The caller cancelled before B answered: cancel B (its 487 ends the call).
        if let Some(b) = Self::peer(ctx, a) {
            ctx.with_session(b, end_leg);
        }
    }

    fn on_ack_timeout(&self, ctx: &mut Context<'_>, a: SessionId) {
        if let Some(app) = ctx.with_session(a, |_, s| s.app) {
            self.call_over(ctx, app, "no-ack");
        }
        let _ = ctx.send_bye(a);
        if let Some(b) = Self::peer(ctx, a) {
            ctx.with_session(b, end_leg);
        }
    }

    fn on_timer(self: &Arc<Self>, ctx: &mut Context<'_>, app: AppSessionId, name: &'static str) {
        let Some(tier) = &self.tier else { return };
        match name {
            CALL_LIMIT => {
                tier.stats.timer_ends.fetch_add(1, Relaxed);
                self.hang_up(ctx, app, "timer");
            }
            POLICY_CHECK => self.check_policy(ctx, app),
            _ => {}
        }
    }

    fn metrics_text(&self) -> String {
        let Some(tier) = &self.tier else { return String::new() };
        let mut out = String::with_capacity(2048);
        let st = &tier.stats;
        for (name, help, counter) in [
            ("tandem_b2bua_policy_lookups_total", "Policy lookups before leg B", &st.lookups),
            ("tandem_b2bua_rejected_total", "Calls refused 403 for want of a policy", &st.rejected),
            ("tandem_b2bua_db_errors_total", "Failed policy queries", &st.db_errors),
            ("tandem_b2bua_billing_records_total", "Billing records written", &st.billed),
            ("tandem_b2bua_billing_failures_total", "Billing records that could not be written", &st.billing_failures),
            ("tandem_b2bua_policy_checks_total", "Periodic per-call policy queries (2T)", &st.checks),
            ("tandem_b2bua_timer_ends_total", "Calls ended by the call timer", &st.timer_ends),
            ("tandem_b2bua_policy_ends_total", "Calls ended because their policy was removed", &st.policy_ends),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}.\n# TYPE {name} counter\n{name}{{service=\"{}\"}} {}",
                tier.name,
                counter.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP tandem_b2bua_calls Admitted calls not yet over.\n# TYPE tandem_b2bua_calls gauge\ntandem_b2bua_calls{{service=\"{}\"}} {}",
            tier.name,
            tier.calls.len()
        );
        out
    }
}

impl Service for B2bua {
    fn user_agent(&self) -> Option<&UaProfile> {
        Some(&PROFILE)
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        self.shared.on_request(ctx, req)
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        self.shared.on_response(ctx, session, response)
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, a: SessionId) {
        self.shared.on_cancelled(ctx, a)
    }

    fn on_ack_timeout(&self, ctx: &mut Context<'_>, a: SessionId) {
        self.shared.on_ack_timeout(ctx, a)
    }

    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, name: &'static str) {
        self.shared.on_timer(ctx, app, name)
    }

    fn on_expired(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        self.shared.call_over(ctx, app, "expired");
    }

    fn metrics_text(&self) -> String {
        self.shared.metrics_text()
    }
}
