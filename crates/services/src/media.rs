//! `media`: the media service of the dating case study (Huang, Dillon and Stirewalt, section
//! 2.2). The dating service calls it once per caller with an INVITE whose body is the caller's
//! session ID (32 hex digits, `text/plain`); it answers 200 OK with SDP (after
//! `answer_delay`; a fraction `error_rate` is answered 500 instead), "preference collection"
//! starts, and once the dialog is acknowledged it waits `preference_delay`, then
//! suggests a peer: a MESSAGE in the dialog whose body is another waiting caller's session ID
//! (or empty when nobody else waits). The dating service answers 200 and either pairs the two
//! callers (then it hangs up this leg with BYE) or says `unavailable` in a MESSAGE of its own,
//! after which the media service tries again after `retry_delay`, at most `max_tries` times.
//!
//! Executions of this service do not synchronize with each other beyond the pool of waiting
//! callers, a short critical section of its own (this service has no contract). Randomness
//! (which peer, which INVITE fails with `error_rate`) comes from the executor's seeded
//! generator, so a run with a fixed `container.seed` decides the same way.

use bytes::Bytes;
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
use tandem_container::{
    AppSessionId, AttrValue, Context, Request, RequestKind, ResponseEvent, Service, SessionId, SessionState, TimerId, UaProfile,
};
use tandem_sip::Method;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MediaConfig {
    /// Time from the ACK to the first suggestion ("preference collection").
    #[serde(with = "humantime_serde")]
    pub preference_delay: Duration,
    /// Time from an `unavailable` answer (or a failed suggestion) to the next suggestion.
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// Time from an INVITE to its 200 OK (0: at once). A media service on another machine,
    /// as in the paper's test bed, takes a while; the dating service's Cancel profile needs
    /// that time to cancel the media leg before it is answered (transition T3).
    #[serde(with = "humantime_serde")]
    pub answer_delay: Duration,
    /// Fraction (0 to 1) of initial INVITEs answered 500 instead of 200.
    pub error_rate: f64,
    /// Suggestions per caller; after that the service stops suggesting (it still answers,
    /// and other callers may still be suggested this one).
    pub max_tries: u32,
    /// Address written in the SDP answer.
    pub media_address: String,
    pub media_port: u16,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            preference_delay: Duration::from_secs(1),
            retry_delay: Duration::from_millis(500),
            answer_delay: Duration::ZERO,
            error_rate: 0.0,
            max_tries: 10,
            media_address: "127.0.0.1".into(),
            media_port: 6002,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MediaConfigError {
    #[error("media.error_rate must be between 0 and 1, got {0}")]
    ErrorRate(f64),
}

const ALLOWED: &[&str] = &["INVITE", "ACK", "BYE", "CANCEL", "MESSAGE", "OPTIONS"];

static PROFILE: UaProfile = UaProfile {
    allowed_methods: ALLOWED,
    accepted_bodies: &["text/plain", "application/sdp"],
    supported_extensions: &[],
    answer_body: Some(SDP),
};

const SDP: &str = "application/sdp";
const TEXT: &str = "text/plain";
/// The caller's session ID, as received in the INVITE (SIP-session attribute).
pub const CALLER_ID: &str = "caller_id";
/// Suggestions sent so far (SIP-session attribute).
const TRIES: &str = "tries";
/// Set once the first ACK put the execution in the pool (SIP-session attribute).
const POOLED: &str = "pooled";
/// Set while a suggestion timer is armed, so a retry is never armed twice.
const ARMED: &str = "armed";
const SUGGEST_TIMER: &str = "suggest";
const ANSWER_TIMER: &str = "answer";
/// The body of the dating service's MESSAGE declining a suggestion.
pub const UNAVAILABLE: &str = "unavailable";

/// A caller waiting for a suggestion: the media service's own SIP session and the caller ID
/// it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Waiting {
    session: SessionId,
    caller_id: String,
}

#[derive(Default)]
struct Counters {
    answered: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
    suggestions: AtomicU64,
    suggestions_none: AtomicU64,
    unavailable: AtomicU64,
    suggestion_errors: AtomicU64,
    gave_up: AtomicU64,
}

pub struct Media {
    preference_delay: Duration,
    retry_delay: Duration,
    answer_delay: Duration,
    error_rate: f64,
    max_tries: u32,
    sdp: Bytes,
    /// Callers whose media leg is up and not yet hung up, in arrival order.
    pool: Mutex<Vec<Waiting>>,
    counters: Counters,
}

impl Media {
    pub fn new(config: &MediaConfig) -> Result<Media, MediaConfigError> {
        if !(0.0..=1.0).contains(&config.error_rate) {
            return Err(MediaConfigError::ErrorRate(config.error_rate));
        }
        let sdp = format!(
            "v=0\r\no=tandem-media 1 1 IN IP4 {a}\r\ns=tandem media\r\nc=IN IP4 {a}\r\nt=0 0\r\nm=audio {p} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
            a = config.media_address,
            p = config.media_port
        );
        Ok(Media {
            preference_delay: config.preference_delay,
            retry_delay: config.retry_delay,
            answer_delay: config.answer_delay,
            error_rate: config.error_rate,
            max_tries: config.max_tries,
            sdp: Bytes::from(sdp),
            pool: Mutex::new(Vec::new()),
            counters: Counters::default(),
        })
    }

    /// Callers currently waiting in the pool.
    pub fn waiting(&self) -> usize {
        self.lock_pool().len()
    }

    fn lock_pool(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        // Nothing can be left half-done under this lock (push, retain, a read): a panic
        // elsewhere while holding it leaves a consistent vector.
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn join_pool(&self, session: SessionId, caller_id: String) {
        let mut pool = self.lock_pool();
        if !pool.iter().any(|w| w.session == session) {
            pool.push(Waiting { session, caller_id });
        }
    }

    fn leave_pool(&self, session: SessionId) {
        self.lock_pool().retain(|w| w.session != session);
    }

    /// Leaves the pool for every SIP session of `app` (before invalidating it).
    fn leave_pool_app(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        let sessions = ctx.with_app(app, |a| a.sessions.clone()).unwrap_or_default();
        if sessions.is_empty() {
            return;
        }
        self.lock_pool().retain(|w| !sessions.contains(&w.session));
    }

    fn allow_headers() -> [(&'static str, &'static str); 2] {
        [("Allow", "INVITE, ACK, BYE, CANCEL, MESSAGE, OPTIONS"), ("Accept", "text/plain, application/sdp")]
    }

    fn on_invite(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        let body = req.msg.body();
        let Some(caller_id) = parse_caller_id(&body) else {
            self.counters.rejected.fetch_add(1, Relaxed);
            let warning = "399 tandem \"the body must be the caller's session ID: 32 hexadecimal digits\"";
            ctx.respond_with(req, 400, &[("Warning", warning)], None);
            return;
        };
        if self.error_rate > 0.0 && unit_interval(ctx.random_u64()) < self.error_rate {
            self.counters.failed.fetch_add(1, Relaxed);
            ctx.respond_with(req, 500, &[("Warning", "399 tandem \"media.error_rate\"")], None);
            return;
        }
        let answered = if self.answer_delay.is_zero() {
            ctx.answer(req, None, Some((SDP, &self.sdp)))
        } else {
            // Answered by the timer (a CANCEL meanwhile is answered 487 by the container).
            ctx.accept(req, None)
        };
        let session = match answered {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(error = %e, "media could not answer");
                ctx.respond(req, 500);
                return;
            }
        };
        let app = ctx.with_session(session, |_, s| {
            s.attributes.set(CALLER_ID, AttrValue::Str(caller_id));
            s.attributes.set(TRIES, AttrValue::Int(0));
            s.app
        });
        if self.answer_delay.is_zero() {
            self.counters.answered.fetch_add(1, Relaxed);
        } else if let Some(app) = app {
            if let Err(e) = ctx.set_timer(app, self.answer_delay, ANSWER_TIMER) {
                tracing::warn!(error = %e, "media could not arm the answer timer");
                ctx.invalidate(app);
            }
        }
    }

    /// The delayed 200 OK of an INVITE accepted earlier.
    fn answer_later(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        let Some(session) = ctx.with_app(app, |a| a.sessions.first().copied()).flatten() else { return };
        let sdp = self.sdp.clone();
        let result = ctx.with_session(session, |ctx, s| {
            if s.is_terminated() {
                return Ok(false);
            }
            ctx.answer_session(s, 200, Some((SDP, &sdp))).map(|()| true)
        });
        match result {
            Some(Ok(true)) => {
                self.counters.answered.fetch_add(1, Relaxed);
            }
            Some(Ok(false)) | None => {}
            Some(Err(e)) => {
                tracing::debug!(error = %e, "media could not answer the INVITE");
                ctx.invalidate(app);
            }
        }
    }

    /// The first ACK of the dialog: the caller starts waiting.
    fn on_ack(&self, ctx: &mut Context<'_>, session: SessionId, app: AppSessionId) {
        let joined = ctx
            .with_session(session, |_, s| {
                let first = s.state == SessionState::Confirmed && s.attributes.get_bool(POOLED).is_none();
                if !first {
                    return None;
                }
                s.attributes.set(POOLED, AttrValue::Bool(true));
                s.attributes.get_str(CALLER_ID).map(str::to_string)
            })
            .flatten();
        if let Some(caller_id) = joined {
            self.join_pool(session, caller_id);
            self.arm(ctx, session, app, self.preference_delay);
        }
    }

    /// Arms the suggestion timer unless one is armed already.
    fn arm(&self, ctx: &mut Context<'_>, session: SessionId, app: AppSessionId, delay: Duration) {
        let fresh = ctx
            .with_session(session, |_, s| {
                if s.is_terminated() || s.attributes.get_bool(ARMED) == Some(true) {
                    return false;
                }
                s.attributes.set(ARMED, AttrValue::Bool(true));
                true
            })
            .unwrap_or(false);
        if fresh {
            if let Err(e) = ctx.set_timer(app, delay, SUGGEST_TIMER) {
                tracing::debug!(error = %e, "media could not arm the suggestion timer");
            }
        }
    }

    /// Another suggestion after `retry_delay`, if tries remain.
    fn retry(&self, ctx: &mut Context<'_>, session: SessionId) {
        let state = ctx.with_session(session, |_, s| (s.app, s.attributes.get_int(TRIES).unwrap_or(0), s.is_terminated()));
        let Some((app, tries, terminated)) = state else { return };
        if terminated {
            return;
        }
        if tries < i64::from(self.max_tries) {
            self.arm(ctx, session, app, self.retry_delay);
        } else {
            self.counters.gave_up.fetch_add(1, Relaxed);
            tracing::debug!(%session, tries, "media stops suggesting peers");
        }
    }

    fn suggest(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        let Some(session) = ctx.with_app(app, |a| a.sessions.first().copied()).flatten() else { return };
        let me = ctx
            .with_session(session, |_, s| {
                s.attributes.remove(ARMED);
                if s.is_terminated() {
                    return None;
                }
                let tries = s.attributes.get_int(TRIES).unwrap_or(0) + 1;
                s.attributes.set(TRIES, AttrValue::Int(tries));
                s.attributes.get_str(CALLER_ID).map(str::to_string)
            })
            .flatten();
        let Some(me) = me else { return };
        let r = ctx.random_u64();
        let peer = {
            let pool = self.lock_pool();
            choose_peer(&pool, session, &me, r).map(|w| w.caller_id.clone())
        };
        let body = peer.unwrap_or_default();
        if body.is_empty() {
            self.counters.suggestions_none.fetch_add(1, Relaxed);
        } else {
            self.counters.suggestions.fetch_add(1, Relaxed);
        }
        let sent = ctx.with_session(session, |ctx, s| ctx.send_in_dialog(s, Method::Message, Some((TEXT, body.as_bytes()))));
        if let Some(Err(e)) = sent {
            tracing::debug!(error = %e, "media could not send its suggestion");
        }
    }
}

/// The caller ID of an INVITE body: trimmed text, exactly 32 hexadecimal digits.
fn parse_caller_id(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?.trim();
    (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| text.to_string())
}

/// A random number in [0, 1) from 64 random bits (the top 53).
fn unit_interval(r: u64) -> f64 {
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// A waiting caller other than `me` (neither its session nor its caller ID), chosen by `r`
/// uniformly among the others; `None` if nobody else waits.
fn choose_peer<'a>(pool: &'a [Waiting], me: SessionId, my_id: &str, r: u64) -> Option<&'a Waiting> {
    let others = || pool.iter().filter(|w| w.session != me && w.caller_id != my_id);
    let n = others().count();
    if n == 0 {
        return None;
    }
    others().nth((r % n as u64) as usize)
}

impl Service for Media {
    fn user_agent(&self) -> Option<&UaProfile> {
        Some(&PROFILE)
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        match (req.kind, req.method(), req.session, req.app) {
            (RequestKind::Initial, Method::Invite, _, _) => self.on_invite(ctx, req),
            (RequestKind::Initial, Method::Options, _, _) => ctx.respond_with(req, 200, &Self::allow_headers(), None),
            (RequestKind::InDialog, Method::Ack, Some(session), Some(app)) => self.on_ack(ctx, session, app),
            (RequestKind::InDialog, Method::Message, Some(session), _) => {
                ctx.respond(req, 200);
                if String::from_utf8_lossy(&req.msg.body()).trim().eq_ignore_ascii_case(UNAVAILABLE) {
                    self.counters.unavailable.fetch_add(1, Relaxed);
                    self.retry(ctx, session);
                }
            }
            (RequestKind::InDialog, Method::Bye, session, Some(app)) => {
                ctx.respond(req, 200);
                if let Some(s) = session {
                    self.leave_pool(s);
                }
                self.leave_pool_app(ctx, app);
                ctx.invalidate(app);
            }
            (RequestKind::InDialog, Method::Invite, _, _) => ctx.respond_with(req, 200, &[], Some((SDP, &self.sdp))),
            (_, Method::Ack, _, _) => {}
            (RequestKind::InDialog, _, _, _) => ctx.respond(req, 200),
            _ => ctx.respond_with(req, 405, &Self::allow_headers(), None),
        }
    }

    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, name: &'static str) {
        match name {
            SUGGEST_TIMER => self.suggest(ctx, app),
            ANSWER_TIMER => self.answer_later(ctx, app),
            _ => {}
        }
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        let status = response.status();
        if status < 200 {
            return;
        }
        match response.method() {
            // A declined suggestion comes back as a MESSAGE of its own: nothing to do on the 2xx.
            Some(Method::Message) if status < 300 => {}
            // The dating service took no transition for it (e.g. its caller has not
            // acknowledged yet: 481) or it was lost: try again later, within max_tries. If
            // the dialog is really gone, the dating service's BYE ends this leg.
            Some(Method::Message) => {
                self.counters.suggestion_errors.fetch_add(1, Relaxed);
                tracing::debug!(%session, status, "media suggestion answered with an error");
                self.retry(ctx, session);
            }
            // The only other request this service sends is BYE (after an ACK timeout), and a
            // timeout or transport failure leaves no method: the leg is over.
            _ => {
                self.leave_pool(session);
                if let Some(app) = ctx.with_session(session, |_, s| s.app) {
                    self.leave_pool_app(ctx, app);
                    ctx.invalidate(app);
                }
            }
        }
    }

    fn on_cancelled(&self, ctx: &mut Context<'_>, session: SessionId) {
        self.leave_pool(session);
        if let Some(app) = ctx.with_session(session, |_, s| s.app) {
            ctx.invalidate(app);
        }
    }

    fn on_ack_timeout(&self, ctx: &mut Context<'_>, session: SessionId) {
        self.leave_pool(session);
        if let Err(e) = ctx.send_bye(session) {
            tracing::debug!(error = %e, "media could not send BYE after the ACK timeout");
            if let Some(app) = ctx.with_session(session, |_, s| s.app) {
                ctx.invalidate(app);
            }
        }
    }

    fn on_expired(&self, ctx: &mut Context<'_>, app: AppSessionId) {
        self.leave_pool_app(ctx, app);
    }

    fn metrics_text(&self) -> String {
        let c = &self.counters;
        let mut out = String::new();
        out.push_str("# HELP tandem_media_invites_total INVITEs the media service answered, by result.\n");
        out.push_str("# TYPE tandem_media_invites_total counter\n");
        for (result, v) in [("answered", &c.answered), ("failed", &c.failed), ("rejected", &c.rejected)] {
            out.push_str(&format!("tandem_media_invites_total{{service=\"media\",result=\"{result}\"}} {}\n", v.load(Relaxed)));
        }
        out.push_str("# HELP tandem_media_suggestions_total Suggestions sent, naming a peer or none.\n");
        out.push_str("# TYPE tandem_media_suggestions_total counter\n");
        for (kind, v) in [("peer", &c.suggestions), ("none", &c.suggestions_none)] {
            out.push_str(&format!("tandem_media_suggestions_total{{service=\"media\",kind=\"{kind}\"}} {}\n", v.load(Relaxed)));
        }
        for (name, help, v) in [
            ("tandem_media_unavailable_total", "Suggestions the dating service declined (MESSAGE unavailable)", &c.unavailable),
            ("tandem_media_suggestion_errors_total", "Suggestions answered with an error or never answered", &c.suggestion_errors),
            ("tandem_media_gave_up_total", "Callers for whom max_tries suggestions were used up", &c.gave_up),
        ] {
            out.push_str(&format!("# HELP {name} {help}.\n# TYPE {name} counter\n{name}{{service=\"media\"}} {}\n", v.load(Relaxed)));
        }
        out.push_str("# HELP tandem_media_waiting Callers waiting in the media service's pool.\n# TYPE tandem_media_waiting gauge\n");
        out.push_str(&format!("tandem_media_waiting{{service=\"media\"}} {}\n", self.waiting()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error as DeError, MapDeserializer};
    use serde::de::{IntoDeserializer, Visitor};

    fn w(session: u128, id: &str) -> Waiting {
        Waiting { session: SessionId(session), caller_id: id.to_string() }
    }

    #[test]
    fn pool_selection_never_picks_itself() {
        let pool = vec![w(1, "a"), w(2, "b"), w(3, "c")];
        let mut seen = std::collections::BTreeSet::new();
        for r in 0..1000u64 {
            let p = choose_peer(&pool, SessionId(2), "b", r.wrapping_mul(0x9e37_79b9_7f4a_7c15)).expect("others wait");
            assert_ne!(p.session, SessionId(2));
            seen.insert(p.caller_id.clone());
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "c"], "both others are chosen");
        assert_eq!(choose_peer(&pool[1..2], SessionId(2), "b", 7), None, "alone: nobody");
        assert_eq!(choose_peer(&[], SessionId(2), "b", 7), None);
        // Not in the pool (yet): anybody.
        assert!(choose_peer(&pool, SessionId(9), "z", 5).is_some());
        // Another leg carrying the same caller ID is not a peer either.
        assert_eq!(choose_peer(&[w(1, "a"), w(2, "a")], SessionId(2), "a", 3), None);
    }

    #[test]
    fn caller_ids_are_32_hex_digits() {
        assert_eq!(parse_caller_id(b" 0123456789abcdefABCDEF0123456789\r\n").as_deref(), Some("0123456789abcdefABCDEF0123456789"));
        assert_eq!(parse_caller_id(b""), None);
        assert_eq!(parse_caller_id(b"0123456789abcdef0123456789abcde"), None, "31 digits");
        assert_eq!(parse_caller_id(b"+123456789abcdef0123456789abcdef"), None, "a sign is not a digit");
        assert_eq!(parse_caller_id(b"0123456789abcdef0123456789abcdeg"), None);
        assert_eq!(parse_caller_id(&[0xff; 32]), None);
        let id = SessionId(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(parse_caller_id(id.to_string().as_bytes()), Some(id.to_string()));
    }

    #[test]
    fn error_rate_draws_are_in_the_unit_interval() {
        assert_eq!(unit_interval(0), 0.0);
        assert!(unit_interval(u64::MAX) < 1.0);
        assert!((unit_interval(1 << 63) - 0.5).abs() < 1e-12);
    }

    /// A config value as TOML would give it (the crate has no TOML parser).
    #[derive(Clone, Copy)]
    enum V {
        S(&'static str),
        F(f64),
        U(u64),
    }

    impl<'de> serde::Deserializer<'de> for V {
        type Error = DeError;
        fn deserialize_any<Vi: Visitor<'de>>(self, v: Vi) -> Result<Vi::Value, DeError> {
            match self {
                V::S(s) => v.visit_str(s),
                V::F(f) => v.visit_f64(f),
                V::U(u) => v.visit_u64(u),
            }
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
        }
    }

    impl<'de> IntoDeserializer<'de, DeError> for V {
        type Deserializer = V;
        fn into_deserializer(self) -> V {
            self
        }
    }

    fn parse(entries: &[(&'static str, V)]) -> Result<MediaConfig, DeError> {
        MediaConfig::deserialize(MapDeserializer::new(entries.iter().copied()))
    }

    #[test]
    fn config_defaults_and_parsing() {
        let d = MediaConfig::default();
        assert_eq!(d.preference_delay, Duration::from_secs(1));
        assert_eq!(d.retry_delay, Duration::from_millis(500));
        assert_eq!(d.error_rate, 0.0);
        assert_eq!(d.max_tries, 10);
        assert_eq!(d.answer_delay, Duration::ZERO);
        assert_eq!(parse(&[]).unwrap(), d);
        let c = parse(&[
            ("preference_delay", V::S("300ms")),
            ("retry_delay", V::S("2s")),
            ("error_rate", V::F(0.25)),
            ("max_tries", V::U(3)),
            ("answer_delay", V::S("150ms")),
        ])
        .unwrap();
        assert_eq!(c.preference_delay, Duration::from_millis(300));
        assert_eq!(c.retry_delay, Duration::from_secs(2));
        assert_eq!(c.error_rate, 0.25);
        assert_eq!(c.answer_delay, Duration::from_millis(150));
        assert_eq!(c.max_tries, 3);
        assert!(parse(&[("colour", V::S("red"))]).is_err(), "unknown keys are refused");
        assert!(parse(&[("preference_delay", V::S("soon"))]).is_err());
        assert!(Media::new(&c).is_ok());
        assert_eq!(Media::new(&MediaConfig { error_rate: 1.5, ..d.clone() }).err(), Some(MediaConfigError::ErrorRate(1.5)));
        assert!(Media::new(&MediaConfig { error_rate: f64::NAN, ..d }).is_err());
    }

    // ------------------------------------------------------------ end to end over UDP

    use std::net::{SocketAddr, UdpSocket};
    use std::sync::Arc;
    use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule};

    /// Plays the dating service's side of media legs over a real socket.
    struct Dating {
        sock: UdpSocket,
        media: SocketAddr,
    }

    struct Leg {
        call_id: String,
        to_tag: String,
        cseq: u32,
    }

    impl Dating {
        fn local(&self) -> SocketAddr {
            self.sock.local_addr().unwrap()
        }

        fn send(&self, text: &str) {
            self.sock.send_to(text.replace('\n', "\r\n").as_bytes(), self.media).unwrap();
        }

        fn recv(&self, timeout: Duration) -> Option<tandem_sip::Message> {
            self.sock.set_read_timeout(Some(timeout)).unwrap();
            let mut buf = vec![0u8; 65536];
            let (n, _) = self.sock.recv_from(&mut buf).ok()?;
            Some(tandem_sip::parse_datagram(Bytes::copy_from_slice(&buf[..n]), &Default::default()).expect("media sends valid SIP"))
        }

        /// The next message that is not a 100 Trying.
        fn next(&self, timeout: Duration) -> tandem_sip::Message {
            loop {
                let m = self.recv(timeout).expect("an answer from the media service");
                if m.status() != Some(100) {
                    return m;
                }
            }
        }

        fn invite(&self, n: u32, body: &str) -> (Leg, tandem_sip::Message) {
            let call_id = format!("leg{n}@test");
            let local = self.local();
            self.send(&format!(
                "INVITE sip:media@{m} SIP/2.0\nVia: SIP/2.0/UDP {local};branch=z9hG4bKinv{n}\nMax-Forwards: 70\nFrom: <sip:dating@{local}>;tag=d{n}\nTo: <sip:media@{m}>\nCall-ID: {call_id}\nCSeq: 1 INVITE\nContact: <sip:dating@{local}>\nContent-Type: text/plain\nContent-Length: {len}\n\n{body}",
                m = self.media,
                len = body.len()
            ));
            let r = self.next(Duration::from_secs(2));
            let leg = Leg { call_id, to_tag: r.to_tag().unwrap_or("").to_string(), cseq: 1 };
            (leg, r)
        }

        fn in_dialog(&self, leg: &mut Leg, n: u32, method: &str, body: &str) {
            let local = self.local();
            if method != "ACK" {
                leg.cseq += 1;
            }
            let ct = if body.is_empty() { String::new() } else { "Content-Type: text/plain\n".to_string() };
            self.send(&format!(
                "{method} sip:media@{m} SIP/2.0\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{method}{n}x{c}\nMax-Forwards: 70\nFrom: <sip:dating@{local}>;tag=d{n}\nTo: <sip:media@{m}>;tag={t}\nCall-ID: {call}\nCSeq: {c} {method}\n{ct}Content-Length: {len}\n\n{body}",
                m = self.media,
                t = leg.to_tag,
                call = leg.call_id,
                c = leg.cseq,
                len = body.len()
            ));
        }

        /// ACK for a final error to INVITE (same branch, the response's To).
        fn ack_error(&self, r: &tandem_sip::Message) {
            let mut text = format!("ACK sip:media@{} SIP/2.0\n", self.media);
            for name in ["Via", "From", "To", "Call-ID"] {
                text.push_str(&format!("{name}: {}\n", r.header_by_name(name).unwrap()));
            }
            text.push_str("CSeq: 1 ACK\nMax-Forwards: 70\nContent-Length: 0\n\n");
            self.send(&text);
        }

        fn answer(&self, req: &tandem_sip::Message, status: u16) {
            let mut text = format!("SIP/2.0 {status} OK\n");
            for name in ["Via", "From", "To", "Call-ID", "CSeq"] {
                text.push_str(&format!("{name}: {}\n", req.header_by_name(name).unwrap()));
            }
            text.push_str("Content-Length: 0\n\n");
            self.send(&text);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn suggests_waiting_callers_and_retries_when_unavailable() {
        let config = MediaConfig {
            preference_delay: Duration::from_millis(100),
            retry_delay: Duration::from_millis(50),
            max_tries: 2,
            ..Default::default()
        };
        let media: Arc<dyn Service> = Arc::new(Media::new(&config).unwrap());
        let settings = ContainerSettings {
            container: ContainerConfig { executors: 2, seed: Some(7), ..Default::default() },
            routes: vec![RouteRule::catch_all("media")],
        };
        let listen = ["udp:127.0.0.1:0".parse::<tandem_transport::ListenSpec>().unwrap()];
        let container = Container::start(settings, vec![("media".into(), media)], &listen, Default::default()).await.unwrap();
        let addr = container.local_addrs()[0].1;
        let dating = tokio::task::spawn_blocking(move || {
            let d = Dating { sock: UdpSocket::bind("127.0.0.1:0").unwrap(), media: addr };
            // A body that is not a session ID is refused.
            let (_, r) = d.invite(9, "hello");
            assert_eq!(r.status(), Some(400));
            d.ack_error(&r);
            let a_id = "0000000000000000000000000000000a";
            let b_id = "0000000000000000000000000000000b";
            let (mut a, r) = d.invite(1, a_id);
            assert_eq!(r.status(), Some(200));
            assert_eq!(r.header_by_name("Content-Type"), Some(SDP));
            d.in_dialog(&mut a, 1, "ACK", "");
            // Alone in the pool: the suggestion names nobody.
            let m = d.next(Duration::from_secs(2));
            assert_eq!(m.method(), Some(&Method::Message), "{m:?}");
            assert_eq!(m.call_id(), a.call_id);
            assert_eq!(&m.body()[..], b"");
            d.answer(&m, 200);
            let (mut b, r) = d.invite(2, b_id);
            assert_eq!(r.status(), Some(200));
            d.in_dialog(&mut b, 2, "ACK", "");
            // A is declined: its retry (the last of its 2 tries) names B.
            d.in_dialog(&mut a, 1, "MESSAGE", UNAVAILABLE);
            let mut got = Vec::new();
            while got.len() < 3 {
                let m = d.next(Duration::from_secs(2));
                if m.status() == Some(200) {
                    got.push(format!("200 {}", m.cseq().unwrap().method.as_str()));
                    continue;
                }
                assert_eq!(m.method(), Some(&Method::Message));
                let body = String::from_utf8(m.body().to_vec()).unwrap();
                let from = if m.call_id() == a.call_id { "a" } else { "b" };
                got.push(format!("{from} suggests {body}"));
                d.answer(&m, 200);
            }
            got.sort();
            assert_eq!(got, ["200 MESSAGE".to_string(), format!("a suggests {b_id}"), format!("b suggests {a_id}")]);
            // A has used its tries: declining again stops the suggestions.
            d.in_dialog(&mut a, 1, "MESSAGE", UNAVAILABLE);
            assert_eq!(d.next(Duration::from_secs(2)).status(), Some(200));
            let late = d.recv(Duration::from_millis(300));
            assert!(
                late.is_none(),
                "no suggestion after max_tries: {:?}",
                late.map(|m| String::from_utf8_lossy(&m.wire_bytes()).into_owned())
            );
            // Both legs hang up.
            d.in_dialog(&mut a, 1, "BYE", "");
            assert_eq!(d.next(Duration::from_secs(2)).status(), Some(200));
            d.in_dialog(&mut b, 2, "BYE", "");
            assert_eq!(d.next(Duration::from_secs(2)).status(), Some(200));
        });
        dating.await.unwrap();
        let metrics = container.metrics_text();
        assert!(metrics.contains("tandem_media_waiting{service=\"media\"} 0"), "{metrics}");
        assert!(metrics.contains("tandem_media_invites_total{service=\"media\",result=\"rejected\"} 1"), "{metrics}");
        assert_eq!(container.store().live_sessions(), 0);
        assert_eq!(container.store().live_app_sessions(), 0);
        container.shutdown().await;
    }
}

#[cfg(test)]
mod delayed_tests {
    use super::*;
    use std::net::{SocketAddr, UdpSocket};
    use std::sync::Arc;
    use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule};

    fn recv(sock: &UdpSocket, timeout: Duration) -> Option<tandem_sip::Message> {
        sock.set_read_timeout(Some(timeout)).unwrap();
        let mut buf = vec![0u8; 65536];
        let (n, _) = sock.recv_from(&mut buf).ok()?;
        Some(tandem_sip::parse_datagram(Bytes::copy_from_slice(&buf[..n]), &Default::default()).unwrap())
    }

    /// A request of leg `n` from the dating side: `branch` names its transaction, `cseq` is
    /// "NUMBER METHOD" (and gives the method).
    fn request(n: u32, branch: &str, cseq: &str, from: SocketAddr, to: SocketAddr, to_tag: Option<&str>, body: &str) -> String {
        let method = cseq.split(' ').nth(1).unwrap_or("OPTIONS");
        let ct = if body.is_empty() { "" } else { "Content-Type: text/plain\r\n" };
        let to_tag = to_tag.map(|t| format!(";tag={t}")).unwrap_or_default();
        format!(
            "{method} sip:media@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK{branch}\r\nMax-Forwards: 70\r\nFrom: <sip:dating@{from}>;tag=d{n}\r\nTo: <sip:media@{to}>{to_tag}\r\nCall-ID: leg{n}@test\r\nCSeq: {cseq}\r\nContact: <sip:dating@{from}>\r\n{ct}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// With `answer_delay`, the 200 OK comes late, and a CANCEL before it ends the leg (487).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delayed_answer_can_be_cancelled() {
        let config =
            MediaConfig { answer_delay: Duration::from_millis(300), preference_delay: Duration::from_secs(60), ..Default::default() };
        let media: Arc<dyn Service> = Arc::new(Media::new(&config).unwrap());
        let settings = ContainerSettings {
            container: ContainerConfig { executors: 1, seed: Some(3), ..Default::default() },
            routes: vec![RouteRule::catch_all("media")],
        };
        let listen = ["udp:127.0.0.1:0".parse::<tandem_transport::ListenSpec>().unwrap()];
        let container = Container::start(settings, vec![("media".into(), media)], &listen, Default::default()).await.unwrap();
        let addr = container.local_addrs()[0].1;
        let store = container.store().clone();
        tokio::task::spawn_blocking(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let me = sock.local_addr().unwrap();
            let send = |text: String| {
                sock.send_to(text.as_bytes(), addr).unwrap();
            };
            let id = "0123456789abcdef0123456789abcdef";
            // Leg 1: answered after the delay, not before.
            let t0 = std::time::Instant::now();
            send(request(1, "inv1", "1 INVITE", me, addr, None, id));
            assert!(recv(&sock, Duration::from_millis(150)).is_none(), "no answer before answer_delay");
            let ok = recv(&sock, Duration::from_secs(2)).expect("the delayed 200");
            assert_eq!(ok.status(), Some(200));
            assert!(t0.elapsed() >= Duration::from_millis(250));
            let tag = ok.to_tag().unwrap().to_string();
            send(request(1, "ack1", "1 ACK", me, addr, Some(&tag), ""));
            // Leg 2: cancelled before the answer.
            send(request(2, "inv2", "1 INVITE", me, addr, None, id));
            std::thread::sleep(Duration::from_millis(50));
            send(request(2, "inv2", "1 CANCEL", me, addr, None, ""));
            let mut got = Vec::new();
            while got.len() < 2 {
                let m = recv(&sock, Duration::from_secs(2)).expect("answers to CANCEL and INVITE");
                got.push(format!("{} {}", m.status().unwrap(), m.cseq().unwrap().method.as_str()));
                if m.status() == Some(487) {
                    send(request(2, "inv2", "1 ACK", me, addr, m.to_tag(), ""));
                }
            }
            got.sort();
            assert_eq!(got, ["200 CANCEL", "487 INVITE"]);
            assert!(recv(&sock, Duration::from_millis(500)).is_none(), "nothing after the 487 (no late 200)");
            // Leg 1 hangs up.
            send(request(1, "bye1", "2 BYE", me, addr, Some(&tag), ""));
            assert_eq!(recv(&sock, Duration::from_secs(2)).unwrap().status(), Some(200));
        })
        .await
        .unwrap();
        assert_eq!(store.live_sessions(), 0);
        assert_eq!(store.live_app_sessions(), 0);
        container.shutdown().await;
    }
}
