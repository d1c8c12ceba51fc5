//! `b2bua_nt`: the back-to-back user agent of the J2EE and Mobicents benchmarks ("NT": no
//! timers, no database). It answers the caller's INVITE as a UAS (leg A) and places a new
//! call (leg B) to the next hop or the Request-URI, then relays between the two dialogs:
//! provisional and final answers of B to A, SDP unchanged both ways; in-dialog requests
//! (re-INVITE, UPDATE, INFO, MESSAGE, ...) from either side to the other, with the other
//! side's answer relayed back; CANCEL of A cancels B; a BYE from either side is answered and
//! ends the other leg with BYE.
//!
//! Both legs live on the executor that received the INVITE (leg B's Call-ID is chosen to hash
//! there), so relaying needs no locks beyond the container's per-session ones.

use bytes::Bytes;
use dashmap::DashMap;
use serde::Deserialize;
use tandem_container::{
    AppSessionId, AttrValue, Context, Destination, IdHashBuilder, LegRole, Request, RequestKind, ResponseEvent, ServerTxId, Service,
    SessionId, SessionState, SipSession, UaProfile,
};
use tandem_sip::{Flow, HeaderName, Message, Method, NameAddr};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct B2buaConfig {
    /// Where leg B goes: `IP:PORT` (UDP), `udp:IP:PORT` or `tcp:IP:PORT`; absent: the
    /// Request-URI's host and port.
    pub next_hop: Option<String>,
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

/// A request received on one leg and sent on the other, waiting for that leg's answer.
struct Relayed {
    msg: Message,
    tx: ServerTxId,
    flow: Flow,
    from: SessionId,
    app: Option<AppSessionId>,
}

pub struct B2bua {
    next_hop: Option<Destination>,
    /// Keyed by the leg the request was relayed on.
    relayed: DashMap<SessionId, Relayed, IdHashBuilder>,
}

impl B2bua {
    pub fn new(config: &B2buaConfig) -> Result<B2bua, InvalidB2buaNextHop> {
        let next_hop = match &config.next_hop {
            Some(s) => Some(Destination::parse(s).ok_or_else(|| InvalidB2buaNextHop(s.clone()))?),
            None => None,
        };
        Ok(B2bua { next_hop, relayed: DashMap::default() })
    }

    fn peer(ctx: &mut Context<'_>, session: SessionId) -> Option<SessionId> {
        ctx.with_session(session, |_, s| match s.attributes.get(PEER) {
            Some(AttrValue::Session(p)) => Some(*p),
            _ => None,
        })
        .flatten()
    }

    fn new_call(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
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
        let Some(app) = ctx.with_session(a, |_, s| s.app) else { return };
        let from_uri = msg.header(HeaderName::From).and_then(NameAddr::parse).map_or("sip:anonymous@invalid", |n| n.uri_text).to_string();
        let b = match ctx.create_uac_session(app, &from_uri, msg.request_uri_text(), target) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "b2bua could not create leg B");
                ctx.with_session(a, |ctx, s| ctx.answer_session(s, 500, None));
                return ctx.invalidate(app);
            }
        };
        ctx.with_session(a, |_, s| s.attributes.set(PEER, AttrValue::Session(b)));
        ctx.with_session(b, |_, s| {
            s.attributes.set(PEER, AttrValue::Session(a));
            s.dialog.max_forwards = u8::try_from(max_forwards - 1).unwrap_or(u8::MAX);
        });
        let body = body_of(msg);
        let sent = match &body {
            Some((ct, b_)) => ctx.send_invite(b, Some((ct, b_))),
            None => ctx.send_invite(b, None),
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "b2bua could not send leg B's INVITE");
            ctx.with_session(a, |ctx, s| ctx.answer_session(s, 500, None));
            ctx.invalidate(app);
        }
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
            ctx.with_session(session, |_, s| s.state = SessionState::Terminated);
            match peer {
                Some(p) if ctx.with_session(p, end_leg).unwrap_or(false) => {}
                _ => {
                    if let Some(app) = req.app {
                        ctx.invalidate(app);
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
                    ctx.invalidate(app);
                }
            }
        }
        if status >= 300 {
            if let Some(app) = ctx.with_session(b, |_, s| s.app) {
                ctx.invalidate(app);
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

impl Service for B2bua {
    fn user_agent(&self) -> Option<&UaProfile> {
        Some(&PROFILE)
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
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
                        ctx.invalidate(app);
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
        let _ = ctx.send_bye(a);
        if let Some(b) = Self::peer(ctx, a) {
            ctx.with_session(b, end_leg);
        }
    }
}
