//! `uas`: the MLT service of the Mobicents benchmark. Answers INVITE with 200 OK and SDP,
//! waits for the ACK, holds the call for `hold`, then hangs up with BYE. Answers OPTIONS.

use bytes::Bytes;
use serde::Deserialize;
use std::time::Duration;
use tandem_container::{AppSessionId, Context, Request, RequestKind, ResponseEvent, Service, SessionId, SessionState, TimerId, UaProfile};
use tandem_sip::Method;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UasConfig {
    /// How long an answered call lasts before the service sends BYE.
    #[serde(with = "humantime_serde")]
    pub hold: Duration,
    /// Address written in the SDP answer.
    pub media_address: String,
    pub media_port: u16,
}

impl Default for UasConfig {
    fn default() -> Self {
        UasConfig { hold: Duration::from_secs(180), media_address: "127.0.0.1".into(), media_port: 6000 }
    }
}

const ALLOWED: &[&str] = &["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "UPDATE", "INFO"];

static PROFILE: UaProfile = UaProfile {
    allowed_methods: ALLOWED,
    accepted_bodies: &["application/sdp"],
    supported_extensions: &[],
    answer_body: Some("application/sdp"),
};

const SDP: &str = "application/sdp";
const HOLD_TIMER: &str = "hold";
const HOLD_ARMED: &str = "hold_armed";

pub struct Uas {
    hold: Duration,
    sdp: Bytes,
}

impl Uas {
    pub fn new(config: &UasConfig) -> Uas {
        let sdp = format!(
            "v=0\r\no=tandem 1 1 IN IP4 {a}\r\ns=tandem\r\nc=IN IP4 {a}\r\nt=0 0\r\nm=audio {p} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
            a = config.media_address,
            p = config.media_port
        );
        Uas { hold: config.hold, sdp: Bytes::from(sdp) }
    }

    fn allow_headers() -> [(&'static str, &'static str); 2] {
        [("Allow", "INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO"), ("Accept", SDP)]
    }
}

impl Service for Uas {
    fn user_agent(&self) -> Option<&UaProfile> {
        Some(&PROFILE)
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        match (req.kind, req.method(), req.session, req.app) {
            (RequestKind::Initial, Method::Invite, _, _) => {
                match ctx.answer(req, None, Some((SDP, &self.sdp))) {
                    Ok(session) => {
                        let app = ctx.with_session(session, |_, s| s.app);
                        if let Some(app) = app {
                            // The call outlives the default expiry when the hold is long.
                            ctx.set_expiry(app, self.hold + Duration::from_secs(64));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "uas could not answer");
                        ctx.respond(req, 500);
                    }
                }
            }
            (RequestKind::Initial, Method::Options, _, _) => ctx.respond_with(req, 200, &Self::allow_headers(), None),
            (RequestKind::InDialog, Method::Ack, Some(session), Some(app)) => self.start_hold(ctx, session, app),
            (RequestKind::InDialog, Method::Bye, _, Some(app)) => {
                ctx.respond(req, 200);
                ctx.invalidate(app);
            }
            (RequestKind::InDialog, Method::Invite, _, _) => ctx.respond_with(req, 200, &[], Some((SDP, &self.sdp))),
            (RequestKind::InDialog, Method::Ack, _, _) => {}
            (RequestKind::InDialog, _, _, _) => ctx.respond(req, 200),
            (_, Method::Ack, _, _) => {}
            _ => ctx.respond_with(req, 405, &Self::allow_headers(), None),
        }
    }

    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, name: &'static str) {
        if name != HOLD_TIMER {
            return;
        }
        let sessions = ctx.with_app(app, |a| a.sessions.clone()).unwrap_or_default();
        for session in sessions {
            if let Err(e) = ctx.send_bye(session) {
                tracing::debug!(error = %e, "uas could not send BYE");
                ctx.invalidate(app);
            }
        }
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        if response.status() < 200 {
            return;
        }
        // The only request the uas sends is BYE: whatever its final answer, the call is over.
        if let Some(app) = ctx.with_session(session, |_, s| s.app) {
            ctx.invalidate(app);
        }
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, session: SessionId) {
        if let Some(app) = ctx.with_session(session, |_, s| s.app) {
            ctx.invalidate(app);
        }
    }
}

impl Uas {
    fn start_hold(&self, ctx: &mut Context<'_>, session: SessionId, app: AppSessionId) {
        let first_ack = ctx
            .with_session(session, |_, s| {
                let first = s.state == SessionState::Confirmed && s.attributes.get_bool(HOLD_ARMED).is_none();
                if first {
                    s.attributes.set(HOLD_ARMED, tandem_container::AttrValue::Bool(true));
                }
                first
            })
            .unwrap_or(false);
        if first_ack {
            if let Err(e) = ctx.set_timer(app, self.hold, HOLD_TIMER) {
                tracing::debug!(error = %e, "uas could not arm the hold timer");
            }
        }
    }
}
