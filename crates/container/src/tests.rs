//! The container driven without sockets or sleeps: messages in, transmits out, a virtual clock.

use crate::core::{Core, CoreParts, Services};
use crate::ids::IdSource;
use crate::locals::{Destination, Locals};
use crate::metrics::Metrics;
use crate::proxy::ProxyOptions;
use crate::service::{Request, RequestKind, ResponseEvent, Service, UaProfile};
use crate::store::SessionStore;
use crate::{AppSessionId, ContainerConfig, Context, RouteRule, SessionId, TimerId};
use bytes::Bytes;
use parking_lot::Mutex;
use rand::SeedableRng;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_sip::{Flow, HeaderName, Message, Method, Transport};

const CALLER: &str = "127.0.0.1:5061";
const CALLEE: &str = "127.0.0.1:5070";

struct Harness {
    core: Core,
    now: Instant,
    store: Arc<SessionStore>,
    metrics: Arc<Metrics>,
}

fn harness(services: Vec<(&str, Arc<dyn Service>)>, routes: Vec<RouteRule>, config: ContainerConfig) -> Harness {
    let services = Arc::new(Services::new(services.into_iter().map(|(n, s)| (n.to_string(), s)).collect()));
    let store = Arc::new(SessionStore::default());
    let metrics = Arc::new(Metrics::new(1));
    let locals =
        Locals::new(&[(Transport::Udp, "127.0.0.1:5060".parse().unwrap()), (Transport::Tcp, "127.0.0.1:5060".parse().unwrap())], None);
    let core = Core::new(CoreParts {
        executor: 0,
        executors: 1,
        config: Arc::new(config),
        routes: Arc::new(routes),
        store: store.clone(),
        metrics: metrics.clone(),
        locals: Arc::new(locals),
        services,
        ids: IdSource::new(rand_chacha::ChaCha20Rng::seed_from_u64(42)),
    });
    Harness { core, now: Instant::now(), store, metrics }
}

fn fast_config() -> ContainerConfig {
    ContainerConfig { t1: Duration::from_millis(500), ..ContainerConfig::default() }
}

impl Harness {
    fn recv(&mut self, text: &str, from: &str) {
        let msg = tandem_sip::parse_datagram(Bytes::from(text.replace('\n', "\r\n")), &Default::default()).expect("test message parses");
        let flow = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: from.parse().unwrap() };
        self.core.on_message(self.now, msg, flow);
    }

    fn recv_bytes(&mut self, bytes: Bytes, from: &str) {
        let msg = tandem_sip::parse_datagram(bytes, &Default::default()).expect("parses");
        let flow = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: from.parse().unwrap() };
        self.core.on_message(self.now, msg, flow);
    }

    /// Everything sent since the last call, parsed, with its destination.
    fn sent(&mut self) -> Vec<(SocketAddr, Message)> {
        std::iter::from_fn(|| self.core.poll_transmit())
            .map(|t| (t.flow.remote, tandem_sip::parse_datagram(t.payload, &Default::default()).expect("we send valid SIP")))
            .collect()
    }

    fn advance(&mut self, by: Duration) {
        let target = self.now + by;
        while let Some(deadline) = self.core.next_deadline().filter(|d| *d <= target) {
            self.now = self.now.max(deadline);
            self.core.on_timeout(self.now);
        }
        self.now = target;
    }
}

fn summary(sent: &[(SocketAddr, Message)]) -> Vec<String> {
    sent.iter()
        .map(|(to, m)| match m.status() {
            Some(s) => format!("{s} {} -> {to}", m.cseq().map(|c| c.method.as_str()).unwrap_or("?")),
            None => format!("{} -> {to}", m.method().map(|x| x.as_str()).unwrap_or("?")),
        })
        .collect()
}

fn invite(call_id: &str, branch: &str) -> String {
    format!(
        "INVITE sip:service@127.0.0.1:5060 SIP/2.0\nVia: SIP/2.0/UDP {CALLER};branch={branch}\nMax-Forwards: 70\nFrom: <sip:alice@127.0.0.1>;tag=alice1\nTo: <sip:service@127.0.0.1>\nCall-ID: {call_id}\nCSeq: 1 INVITE\nContact: <sip:alice@{CALLER}>\nContent-Type: application/sdp\nContent-Length: 4\n\nv=0\n"
    )
}

fn in_dialog(method: &str, call_id: &str, to_tag: &str, cseq: u32, branch: &str) -> String {
    format!(
        "{method} sip:service@127.0.0.1:5060 SIP/2.0\nVia: SIP/2.0/UDP {CALLER};branch={branch}\nMax-Forwards: 70\nFrom: <sip:alice@127.0.0.1>;tag=alice1\nTo: <sip:service@127.0.0.1>;tag={to_tag}\nCall-ID: {call_id}\nCSeq: {cseq} {method}\nContent-Length: 0\n\n"
    )
}

// ---------------------------------------------------------------- a small UAS for the tests

#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().push(s.into());
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock())
    }
}

static UA: UaProfile = UaProfile {
    allowed_methods: &["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS"],
    accepted_bodies: &["application/sdp"],
    supported_extensions: &["timer"],
    answer_body: Some("application/sdp"),
};

/// Answers INVITE, hangs up `hold` after the ACK; OPTIONS creates an app session it abandons.
struct TestUas {
    hold: Duration,
    log: Arc<Log>,
    ticks: Option<Duration>,
}

impl Service for TestUas {
    fn user_agent(&self) -> Option<&UaProfile> {
        Some(&UA)
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        self.log.push(format!("{:?} {}", req.kind, req.method()));
        match (req.kind, req.method()) {
            (RequestKind::Initial, Method::Invite) => {
                ctx.answer(req, None, Some(("application/sdp", b"v=0\r\n"))).unwrap();
            }
            (RequestKind::Initial, Method::Options) => {
                let app = ctx.create_app_session();
                if let Some(period) = self.ticks {
                    ctx.set_periodic_timer(app, period, "tick").unwrap();
                }
                ctx.respond(req, 200);
            }
            (RequestKind::InDialog, Method::Ack) => {
                ctx.set_timer(req.app.unwrap(), self.hold, "hold").unwrap();
            }
            (RequestKind::InDialog, Method::Bye) => {
                ctx.respond(req, 200);
                ctx.invalidate(req.app.unwrap());
            }
            _ => ctx.respond(req, 200),
        }
    }

    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, name: &'static str) {
        self.log.push(format!("timer {name}"));
        if name == "hold" {
            for s in ctx.with_app(app, |a| a.sessions.clone()).unwrap() {
                ctx.send_bye(s).unwrap();
            }
        }
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        self.log.push(format!("response {}", response.status()));
        let app = ctx.with_session(session, |_, s| s.app).unwrap();
        ctx.invalidate(app);
    }

    fn on_expired(&self, _ctx: &mut Context<'_>, _app: AppSessionId) {
        self.log.push("expired");
    }
}

fn uas_harness(hold: Duration) -> (Harness, Arc<Log>) {
    let log = Arc::new(Log::default());
    let uas: Arc<dyn Service> = Arc::new(TestUas { hold, log: log.clone(), ticks: None });
    (harness(vec![("uas", uas)], vec![RouteRule::catch_all("uas")], fast_config()), log)
}

#[test]
fn uas_answers_retransmits_until_ack_and_hangs_up_after_hold() {
    let (mut h, log) = uas_harness(Duration::from_secs(2));
    h.recv(&invite("call-1", "z9hG4bKinv1"), CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("200 INVITE -> {CALLER}")]);
    let ok = &sent[0].1;
    let tag = ok.to_tag().expect("To tag added").to_string();
    assert_eq!(ok.contact().unwrap().uri_text, "sip:127.0.0.1:5060;transport=udp");
    assert_eq!(&ok.body()[..], b"v=0\r\n");
    assert_eq!(h.store.live_sessions(), 1);

    // No ACK yet: the 200 is retransmitted after T1.
    h.advance(Duration::from_millis(600));
    assert_eq!(summary(&h.sent()), vec![format!("200 INVITE -> {CALLER}")]);

    h.recv(&in_dialog("ACK", "call-1", &tag, 1, "z9hG4bKack1"), CALLER);
    h.advance(Duration::from_millis(1900));
    assert!(h.sent().is_empty(), "no retransmission after the ACK, no BYE before the hold ends");

    h.advance(Duration::from_millis(200));
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("BYE -> {CALLER}")]);
    let bye = &sent[0].1;
    assert_eq!(bye.request_uri_text(), format!("sip:alice@{CALLER}"));
    assert_eq!(bye.from_tag(), Some(tag.as_str()));
    assert_eq!(bye.to_tag(), Some("alice1"));
    assert_eq!(bye.call_id(), "call-1");
    let bye_ok = format!(
        "SIP/2.0 200 OK\nVia: {}\nFrom: {}\nTo: {}\nCall-ID: call-1\nCSeq: {} BYE\nContent-Length: 0\n\n",
        bye.header(HeaderName::Via).unwrap(),
        bye.from_value(),
        bye.to_value(),
        bye.cseq().unwrap().seq
    );
    h.recv(&bye_ok, CALLER);
    assert_eq!((h.store.live_sessions(), h.store.live_app_sessions()), (0, 0));
    assert_eq!(log.take(), vec!["Initial INVITE", "InDialog ACK", "timer hold", "response 200"]);
}

#[test]
fn a_cancel_crossing_the_2xx_is_answered_with_the_dialog_tag() {
    let (mut h, _log) = uas_harness(Duration::from_secs(2));
    h.recv(&invite("call-c", "z9hG4bKinvc"), CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("200 INVITE -> {CALLER}")]);
    let tag = sent[0].1.to_tag().expect("To tag added").to_string();
    // The caller's CANCEL was sent before our 200 reached it: it matches the INVITE's
    // transaction, has no effect, and its 200 carries the dialog's tag (RFC 3261 §9.2), which
    // the caller then uses for its ACK and BYE.
    let cancel = format!(
        "CANCEL sip:service@127.0.0.1:5060 SIP/2.0\nVia: SIP/2.0/UDP {CALLER};branch=z9hG4bKinvc\nMax-Forwards: 70\nFrom: <sip:alice@127.0.0.1>;tag=alice1\nTo: <sip:service@127.0.0.1>\nCall-ID: call-c\nCSeq: 1 CANCEL\nContent-Length: 0\n\n"
    );
    h.recv(&cancel, CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("200 CANCEL -> {CALLER}")]);
    assert_eq!(sent[0].1.to_tag(), Some(tag.as_str()));
    h.recv(&in_dialog("ACK", "call-c", &tag, 1, "z9hG4bKackc"), CALLER);
    h.recv(&in_dialog("BYE", "call-c", &tag, 2, "z9hG4bKbyec"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("200 BYE -> {CALLER}")]);
    assert_eq!((h.store.live_sessions(), h.store.live_app_sessions()), (0, 0));
}

#[test]
fn caller_hangs_up_first_and_the_hold_timer_dies_with_the_session() {
    let (mut h, log) = uas_harness(Duration::from_secs(2));
    h.recv(&invite("call-2", "z9hG4bKinv2"), CALLER);
    let tag = h.sent()[0].1.to_tag().unwrap().to_string();
    h.recv(&in_dialog("ACK", "call-2", &tag, 1, "z9hG4bKack2"), CALLER);
    h.recv(&in_dialog("BYE", "call-2", &tag, 2, "z9hG4bKbye2"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("200 BYE -> {CALLER}")]);
    assert_eq!(h.store.live_sessions(), 0);
    h.advance(Duration::from_secs(5));
    assert!(h.sent().is_empty());
    assert_eq!(log.take(), vec!["Initial INVITE", "InDialog ACK", "InDialog BYE"]);
    // A BYE for the gone dialog gets 481.
    h.recv(&in_dialog("BYE", "call-2", &tag, 3, "z9hG4bKbye3"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("481 BYE -> {CALLER}")]);
}

#[test]
fn unacknowledged_2xx_ends_with_bye_after_64_t1() {
    let (mut h, log) = uas_harness(Duration::from_secs(2));
    h.recv(&invite("call-3", "z9hG4bKinv3"), CALLER);
    h.sent();
    h.advance(Duration::from_secs(33));
    let sent = h.sent();
    assert!(sent.iter().filter(|(_, m)| m.status() == Some(200)).count() >= 5, "{:?}", summary(&sent));
    assert_eq!(sent.last().map(|(_, m)| m.method().cloned()), Some(Some(Method::Bye)), "{:?}", summary(&sent));
    assert_eq!(log.take(), vec!["Initial INVITE"]);
}

#[test]
fn abandoned_application_sessions_expire_and_periodic_timers_tick() {
    let log = Arc::new(Log::default());
    let uas: Arc<dyn Service> =
        Arc::new(TestUas { hold: Duration::from_secs(1), log: log.clone(), ticks: Some(Duration::from_millis(300)) });
    let config = ContainerConfig { app_session_expiry: Duration::from_secs(1), ..fast_config() };
    let mut h = harness(vec![("uas", uas)], vec![RouteRule::catch_all("uas")], config);
    let options = "OPTIONS sip:service@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKo1\nFrom: <sip:a@b>;tag=1\nTo: <sip:s@b>\nCall-ID: o1\nCSeq: 1 OPTIONS\nContent-Length: 0\n\n";
    h.recv(options, CALLER);
    assert_eq!(h.store.live_app_sessions(), 1);
    h.advance(Duration::from_millis(700));
    assert_eq!(h.store.live_app_sessions(), 1);
    // Timer events count as activity: the session lives while its periodic timer ticks.
    let ticks = log.take().iter().filter(|l| *l == "timer tick").count();
    assert_eq!(ticks, 2);
    h.advance(Duration::from_secs(3));
    assert_eq!(h.store.live_app_sessions(), 1, "ticking keeps it alive");
    assert_eq!(log.take().iter().filter(|l| *l == "timer tick").count(), 10);
}

#[test]
fn idle_application_session_expires() {
    let log = Arc::new(Log::default());
    let uas: Arc<dyn Service> = Arc::new(TestUas { hold: Duration::from_secs(1), log: log.clone(), ticks: None });
    let config = ContainerConfig { app_session_expiry: Duration::from_secs(1), ..fast_config() };
    let mut h = harness(vec![("uas", uas)], vec![RouteRule::catch_all("uas")], config);
    let options = "OPTIONS sip:service@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKo1\nFrom: <sip:a@b>;tag=1\nTo: <sip:s@b>\nCall-ID: o1\nCSeq: 1 OPTIONS\nContent-Length: 0\n\n";
    h.recv(options, CALLER);
    assert_eq!(h.store.live_app_sessions(), 1);
    h.advance(Duration::from_millis(900));
    assert_eq!(h.store.live_app_sessions(), 1);
    h.advance(Duration::from_millis(200));
    assert_eq!(h.store.live_app_sessions(), 0);
    assert_eq!(log.take(), vec!["Initial OPTIONS", "expired"]);
}

#[test]
fn rfc3261_checks_before_the_service() {
    let (mut h, log) = uas_harness(Duration::from_secs(2));
    let base = invite("c-check", "z9hG4bKc1");
    let cases: Vec<(String, u16)> = vec![
        (base.replace("INVITE sip:service@127.0.0.1:5060", "INVITE im:service@example.com"), 416),
        (base.replace("CSeq: 1 INVITE", "Require: 100rel\nCSeq: 1 INVITE"), 420),
        (base.replace("application/sdp", "application/unknownformat"), 415),
        (base.replace("CSeq: 1 INVITE", "Accept: text/nobodyKnowsThis\nCSeq: 1 INVITE"), 406),
        (base.replace("INVITE", "SUBSCRIBE"), 405),
        (in_dialog("BYE", "nope", "unknown-tag", 2, "z9hG4bKc2"), 481),
        (in_dialog("CANCEL", "nope", "unknown-tag", 2, "z9hG4bKc3"), 481),
    ];
    for (i, (text, status)) in cases.iter().enumerate() {
        let text = text.replace("z9hG4bKc1", &format!("z9hG4bKcase{i}"));
        h.recv(&text, CALLER);
        let sent = h.sent();
        assert_eq!(sent.iter().map(|(_, m)| m.status()).collect::<Vec<_>>(), vec![Some(*status)], "case {i}: {text}");
    }
    let with_require = base.replace("CSeq: 1 INVITE", "Require: timer\nCSeq: 1 INVITE");
    h.recv(&with_require, CALLER);
    assert_eq!(h.sent()[0].1.status(), Some(200), "supported extensions pass");
    assert_eq!(log.take(), vec!["Initial INVITE"]);
    assert!(h.metrics.render(0, 0, 0).contains("tandem_messages_out_total{method=\"INVITE\",status_class=\"4xx\",transport=\"udp\"} 4"));
}

#[test]
fn invalid_requests_are_answered_statelessly_and_invalid_responses_dropped() {
    let (mut h, _log) = uas_harness(Duration::from_secs(2));
    let bad = invite("c-bad", "z9hG4bKb1").replace("CSeq: 1 INVITE", "CSeq: 1 OPTIONS");
    h.recv_bytes(Bytes::from(bad.replace('\n', "\r\n")), CALLER);
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1.status(), Some(400));
    assert!(sent[0].1.header_by_name("Warning").unwrap().contains("CSeq method"));
    let bad_response = "SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx\nFrom: <sip:a@b>;tag=1\nTo: <sip:c@d>;tag=2\nCall-ID: x\nCSeq: 99999999999 INVITE\nContent-Length: 0\n\n";
    h.recv_bytes(Bytes::from(bad_response.replace('\n', "\r\n")), CALLER);
    assert!(h.sent().is_empty());
}

// ---------------------------------------------------------------- proxy

struct TestProxy(Option<Destination>);

impl Service for TestProxy {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        let options = match req.kind {
            RequestKind::Initial => ProxyOptions { destination: self.0, record_route: true, ..Default::default() },
            _ => ProxyOptions { fallback: self.0, ..Default::default() },
        };
        let _ = ctx.proxy(req, options);
    }
}

fn proxy_harness() -> Harness {
    let proxy: Arc<dyn Service> = Arc::new(TestProxy(Destination::parse(CALLEE)));
    harness(vec![("proxy", proxy)], vec![RouteRule::catch_all("proxy")], fast_config())
}

fn answer(request: &Message, status: u16, to_tag: Option<&str>, extra: &str) -> String {
    let vias: Vec<&str> = request.headers_named(HeaderName::Via).collect();
    let to = match (request.to_tag(), to_tag) {
        (None, Some(t)) => format!("{};tag={t}", request.to_value()),
        _ => request.to_value().to_string(),
    };
    let cseq = request.cseq().unwrap();
    format!(
        "SIP/2.0 {status} Whatever\n{}\nFrom: {}\nTo: {to}\nCall-ID: {}\nCSeq: {} {}\n{extra}Content-Length: 0\n\n",
        vias.iter().map(|v| format!("Via: {v}")).collect::<Vec<_>>().join("\n"),
        request.from_value(),
        request.call_id(),
        cseq.seq,
        cseq.method
    )
}

#[test]
fn proxy_200_call_flow_with_record_route_and_loose_routing() {
    let mut h = proxy_harness();
    h.recv(&invite("p-1", "z9hG4bKup1"), CALLER);
    let sent = h.sent();
    // No 100 Trying yet: it waits `trying_delay` for a response from the callee.
    assert_eq!(summary(&sent), vec![format!("INVITE -> {CALLEE}")]);
    let fwd = sent[0].1.clone();
    assert_eq!(fwd.via_header_count(), 2);
    assert_eq!(fwd.max_forwards(), Some(69));
    let rr = fwd.header(HeaderName::RecordRoute).unwrap().to_string();
    assert_eq!(rr, "<sip:127.0.0.1:5060;transport=udp;lr;tsvc=proxy>");

    let ringing = answer(&fwd, 180, Some("bob1"), "");
    h.advance(Duration::from_millis(20));
    h.recv(&ringing, CALLEE);
    let ok = answer(&fwd, 200, Some("bob1"), &format!("Record-Route: {rr}\nContact: <sip:bob@{CALLEE}>\n"));
    h.recv(&ok, CALLEE);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("180 INVITE -> {CALLER}"), format!("200 INVITE -> {CALLER}")]);
    h.advance(Duration::from_millis(500));
    assert_eq!(summary(&h.sent()), Vec::<String>::new(), "the 180 made the 100 moot");
    assert_eq!(sent[1].1.via_header_count(), 1);
    assert_eq!(sent[1].1.branch(), Some("z9hG4bKup1"));
    // A retransmitted 2xx is relayed again (RFC 6026).
    h.recv(&ok, CALLEE);
    assert_eq!(summary(&h.sent()), vec![format!("200 INVITE -> {CALLER}")]);

    // ACK and BYE follow the Record-Route back through the proxy, then the Request-URI.
    let ack = format!("ACK sip:bob@{CALLEE} SIP/2.0\nVia: SIP/2.0/UDP {CALLER};branch=z9hG4bKack\nRoute: {rr}\nMax-Forwards: 70\nFrom: <sip:alice@127.0.0.1>;tag=alice1\nTo: <sip:service@127.0.0.1>;tag=bob1\nCall-ID: p-1\nCSeq: 1 ACK\nContent-Length: 0\n\n");
    h.recv(&ack, CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("ACK -> {CALLEE}")]);
    assert_eq!(sent[0].1.route_values().count(), 0, "our Route value is consumed");
    let bye = ack.replace("ACK sip", "BYE sip").replace("CSeq: 1 ACK", "CSeq: 2 BYE").replace("z9hG4bKack", "z9hG4bKbye");
    h.recv(&bye, CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("BYE -> {CALLEE}")]);
    h.recv(&answer(&sent[0].1, 200, None, ""), CALLEE);
    assert_eq!(summary(&h.sent()), vec![format!("200 BYE -> {CALLER}")]);
}

#[test]
fn proxy_sends_100_trying_when_the_callee_is_slow_or_at_once_when_asked() {
    let mut h = proxy_harness();
    h.recv(&invite("p-6", "z9hG4bKup6"), CALLER);
    let fwd = h.sent()[0].1.clone();
    h.advance(Duration::from_millis(99));
    assert_eq!(summary(&h.sent()), Vec::<String>::new());
    h.advance(Duration::from_millis(1));
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("100 INVITE -> {CALLER}")], "100 ms without a response");
    assert_eq!(sent[0].1.branch(), Some("z9hG4bKup6"));
    assert_eq!(sent[0].1.to_tag(), None);
    // The caller's retransmission gets the 100 again; the callee's 180 and 200 still go up.
    h.recv(&invite("p-6", "z9hG4bKup6"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("100 INVITE -> {CALLER}")]);
    h.recv(&answer(&fwd, 180, Some("bob6"), ""), CALLEE);
    h.recv(&answer(&fwd, 200, Some("bob6"), ""), CALLEE);
    assert_eq!(summary(&h.sent()), vec![format!("180 INVITE -> {CALLER}"), format!("200 INVITE -> {CALLER}")]);

    // `trying_delay = 0`: the 100 leaves at once, after the forwarded INVITE (whose departure
    // is set-up delay; the 100 only stops the caller's retransmissions).
    let proxy: Arc<dyn Service> = Arc::new(TestProxy(Destination::parse(CALLEE)));
    let config = ContainerConfig { trying_delay: Duration::ZERO, ..fast_config() };
    let mut h = harness(vec![("proxy", proxy)], vec![RouteRule::catch_all("proxy")], config);
    h.recv(&invite("p-7", "z9hG4bKup7"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("INVITE -> {CALLEE}"), format!("100 INVITE -> {CALLER}")]);
}

#[test]
fn proxy_relays_mid_dialog_requests_of_uas_that_ignore_record_route() {
    let mut h = proxy_harness();
    h.recv(&invite("p-5", "z9hG4bKup5"), CALLER);
    let fwd = h.sent()[0].1.clone();
    h.recv(&answer(&fwd, 200, Some("bob5"), ""), CALLEE);
    h.sent();
    // SIPp's built-in uac sends ACK and BYE to the Request-URI (us), with no Route.
    let ack = in_dialog("ACK", "p-5", "bob5", 1, "z9hG4bKack5");
    h.recv(&ack, CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("ACK -> {CALLEE}")]);
    h.recv(&in_dialog("BYE", "p-5", "bob5", 2, "z9hG4bKbye5"), CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("BYE -> {CALLEE}")]);
    h.recv(&answer(&sent[0].1, 200, None, ""), CALLEE);
    assert_eq!(summary(&h.sent()), vec![format!("200 BYE -> {CALLER}")]);
}

#[test]
fn proxy_answers_408_when_the_next_hop_is_silent_and_483_at_zero_hops() {
    let mut h = proxy_harness();
    h.recv(&invite("p-2", "z9hG4bKup2"), CALLER);
    h.sent();
    h.advance(Duration::from_millis(100));
    assert_eq!(summary(&h.sent()), vec![format!("100 INVITE -> {CALLER}")]);
    h.advance(Duration::from_secs(33));
    let sent = h.sent();
    assert!(sent.iter().filter(|(_, m)| m.method() == Some(&Method::Invite)).count() >= 6, "Timer A retransmissions");
    let statuses: Vec<u16> = sent.iter().filter_map(|(_, m)| m.status()).collect();
    assert!(!statuses.is_empty() && statuses.iter().all(|s| *s == 408), "{statuses:?} (a 408 not acknowledged is retransmitted)");
    h.recv(&invite("p-3", "z9hG4bKup3").replace("Max-Forwards: 70", "Max-Forwards: 0"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("483 INVITE -> {CALLER}")]);
}

#[test]
fn proxy_cancel_goes_downstream_and_487_comes_back() {
    let mut h = proxy_harness();
    h.recv(&invite("p-4", "z9hG4bKup4"), CALLER);
    let fwd = h.sent()[0].1.clone();
    h.recv(&answer(&fwd, 180, Some("bob4"), ""), CALLEE);
    h.sent();
    let cancel = format!("CANCEL sip:service@127.0.0.1:5060 SIP/2.0\nVia: SIP/2.0/UDP {CALLER};branch=z9hG4bKup4\nMax-Forwards: 70\nFrom: <sip:alice@127.0.0.1>;tag=alice1\nTo: <sip:service@127.0.0.1>\nCall-ID: p-4\nCSeq: 1 CANCEL\nContent-Length: 0\n\n");
    h.recv(&cancel, CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("200 CANCEL -> {CALLER}"), format!("CANCEL -> {CALLEE}")]);
    assert_eq!(sent[1].1.branch(), fwd.branch());
    h.recv(&answer(&sent[1].1, 200, Some("bob4"), ""), CALLEE);
    h.recv(&answer(&fwd, 487, Some("bob4"), ""), CALLEE);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("ACK -> {CALLEE}"), format!("487 INVITE -> {CALLER}")]);
}

// ---------------------------------------------------------------- UAC legs

/// On INVITE from A: opens a leg to B, answers A once B answers (a minimal B2BUA).
struct Bridge {
    log: Arc<Log>,
}

impl Service for Bridge {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        match (req.kind, req.method()) {
            (RequestKind::Initial, Method::Invite) => {
                let app = ctx.create_app_session();
                let leg = ctx
                    .create_uac_session(app, "sip:bridge@127.0.0.1", &format!("sip:bob@{CALLEE}"), Destination::parse(CALLEE).unwrap())
                    .unwrap();
                ctx.with_app(app, |a| a.attributes.set("caller_call", crate::AttrValue::Str(req.msg.call_id().into())));
                ctx.send_invite(leg, Some(("application/sdp", b"v=0\r\n"))).unwrap();
                self.log.push(format!("leg {leg}"));
            }
            _ => ctx.respond(req, 200),
        }
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        let state = ctx.with_session(session, |_, s| s.state).unwrap();
        self.log.push(format!("{} {:?}", response.status(), state));
    }
}

#[test]
fn uac_legs_get_their_dialog_from_the_2xx_and_are_acknowledged() {
    let log = Arc::new(Log::default());
    let bridge: Arc<dyn Service> = Arc::new(Bridge { log: log.clone() });
    let mut h = harness(vec![("bridge", bridge)], vec![RouteRule::catch_all("bridge")], fast_config());
    h.recv(&invite("b-1", "z9hG4bKb1"), CALLER);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec![format!("INVITE -> {CALLEE}")]);
    let leg_invite = sent[0].1.clone();
    assert!(leg_invite.call_id().ends_with("@tandem"));
    assert_eq!(leg_invite.contact().unwrap().uri_text, "sip:127.0.0.1:5060;transport=udp");
    let leg_id: SessionId = log.take()[0].trim_start_matches("leg ").parse().unwrap();
    assert!(h.store.session(leg_id).is_some(), "the session ID resolves");
    h.recv(&answer(&leg_invite, 200, Some("bob9"), "Contact: <sip:bob@127.0.0.1:5071>\n"), CALLEE);
    let sent = h.sent();
    assert_eq!(summary(&sent), vec!["ACK -> 127.0.0.1:5071".to_string()], "ACK goes to the remote target");
    assert_eq!(sent[0].1.to_tag(), Some("bob9"));
    assert_eq!(sent[0].1.cseq().map(|c| c.seq), leg_invite.cseq().map(|c| c.seq));
    assert_eq!(log.take(), vec!["200 Confirmed"]);
}

/// Opens a leg to B on A's INVITE and cancels it when its timer fires, whatever B did
/// meanwhile (as the dating service's T3 does when the caller hangs up).
struct CancelLater;

impl Service for CancelLater {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        if (req.kind, req.method()) == (RequestKind::Initial, &Method::Invite) {
            let app = ctx.create_app_session();
            let leg = ctx
                .create_uac_session(app, "sip:bridge@127.0.0.1", &format!("sip:bob@{CALLEE}"), Destination::parse(CALLEE).unwrap())
                .unwrap();
            ctx.send_invite(leg, None).unwrap();
            ctx.set_timer(app, Duration::from_millis(100), "cancel").unwrap();
        }
    }

    fn on_timer(&self, ctx: &mut Context<'_>, app: AppSessionId, _timer: TimerId, _name: &'static str) {
        let leg = ctx.with_app(app, |a| a.sessions.first().copied()).flatten().unwrap();
        ctx.with_session(leg, |ctx, s| ctx.cancel_invite(s)).unwrap().unwrap();
    }
}

#[test]
fn cancelling_a_leg_whose_2xx_came_first_ends_it_with_bye() {
    let mut h = harness(vec![("cancel", Arc::new(CancelLater) as Arc<dyn Service>)], vec![RouteRule::catch_all("cancel")], fast_config());
    // B answers before the cancel: the leg is acknowledged, then ended with BYE.
    h.recv(&invite("c-1", "z9hG4bKc1"), CALLER);
    let leg_invite = h.sent().remove(0).1;
    h.recv(&answer(&leg_invite, 200, Some("bob1"), "Contact: <sip:bob@127.0.0.1:5071>\n"), CALLEE);
    assert_eq!(summary(&h.sent()), vec!["ACK -> 127.0.0.1:5071".to_string()]);
    h.advance(Duration::from_millis(100));
    // What goes to B (A, never answered by this service, may get a 100 Trying meanwhile).
    let to_b = |sent: Vec<(SocketAddr, Message)>| sent.into_iter().filter(|(to, _)| to.to_string() != CALLER).collect::<Vec<_>>();
    let sent = to_b(h.sent());
    assert_eq!(summary(&sent), vec!["BYE -> 127.0.0.1:5071".to_string()], "a CANCEL would leave B's call up");
    assert_eq!(sent[0].1.to_tag(), Some("bob1"));
    // B has not answered: CANCEL, as before.
    h.recv(&invite("c-2", "z9hG4bKc2"), CALLER);
    let leg_invite = to_b(h.sent()).remove(0).1;
    h.advance(Duration::from_millis(100));
    let sent = to_b(h.sent());
    assert_eq!(summary(&sent), vec![format!("CANCEL -> {CALLEE}")]);
    assert_eq!(sent[0].1.branch(), leg_invite.branch());
}

// ---------------------------------------------------------------- determinism

#[test]
fn same_seed_same_inputs_same_outputs() {
    let run = || {
        let (mut h, _) = uas_harness(Duration::from_secs(1));
        let mut out = Vec::new();
        for i in 0..20 {
            h.recv(&invite(&format!("d-{i}"), &format!("z9hG4bKd{i}")), CALLER);
            h.advance(Duration::from_millis(100));
        }
        h.advance(Duration::from_secs(40));
        while let Some(t) = h.core.poll_transmit() {
            out.push(t.payload);
        }
        for (_, m) in h.sent() {
            out.push(m.wire_bytes());
        }
        out
    };
    let (a, b) = (run(), run());
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

// ---------------------------------------------------------------- completions

/// Collects completions as a runtime's queue would, for the test to deliver.
#[derive(Default)]
struct QueuedReentry(Mutex<Vec<(u16, crate::ServiceId, crate::Post)>>);

impl crate::Reentry for QueuedReentry {
    fn post(&self, executor: u16, service: crate::ServiceId, work: crate::Post) {
        self.0.lock().push((executor, service, work));
    }
}

/// Answers an INVITE only once "a database" (another thread) has replied.
struct Deferred;

impl Service for Deferred {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        if req.method() != &Method::Invite {
            return;
        }
        let Ok(session) = ctx.accept(req, None) else { return };
        let completion = ctx.completion();
        std::thread::spawn(move || {
            let status = 486; // the "query result", computed off the executor
            completion.complete(Box::new(move |ctx: &mut Context<'_>| {
                ctx.with_session(session, |ctx, s| ctx.answer_session(s, status, None));
            }));
        })
        .join()
        .expect("the worker thread runs");
    }
}

#[test]
fn a_completion_runs_on_its_executor_as_a_later_event() {
    let mut h = harness(vec![("deferred", Arc::new(Deferred))], vec![RouteRule::catch_all("deferred")], fast_config());
    let queue = Arc::new(QueuedReentry::default());
    h.core.set_reentry(queue.clone());
    h.recv(&invite("c-deferred", "z9hG4bKdef"), CALLER);
    assert!(!summary(&h.sent()).iter().any(|l| l.starts_with("486")), "nothing answered before the completion ran");
    let posted: Vec<_> = std::mem::take(&mut *queue.0.lock());
    assert_eq!(posted.len(), 1);
    for (executor, service, work) in posted {
        assert_eq!(executor, 0);
        h.core.run_post(h.now, service, work);
    }
    assert!(summary(&h.sent()).contains(&format!("486 INVITE -> {CALLER}")));
}

// ---------------------------------------------------------------- ordered session actions

/// Acts on its dialog in an order the test controls: INFO takes two places in the session's
/// order and redeems the second (an INFO) before the first (a MESSAGE); OPTIONS takes two,
/// redeems only the second (a BYE) and ends the execution before it runs.
struct InOrder;

impl Service for InOrder {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        match (req.kind, req.method()) {
            (RequestKind::Initial, Method::Invite) => {
                let _ = ctx.answer(req, None, None);
            }
            (RequestKind::InDialog, Method::Info) => {
                ctx.respond(req, 200);
                let Some(cell) = req.session.and_then(|s| ctx.session(s)) else { return };
                let mut s = cell.lock();
                let (first, second) = (s.reserve_action(), s.reserve_action());
                let info: crate::SessionWork = Box::new(|ctx: &mut Context<'_>, s: &mut crate::SipSession| {
                    let _ = ctx.send_in_dialog(s, Method::Info, None);
                });
                ctx.act_in_order(&cell, &mut s, second, info);
                let message: crate::SessionWork = Box::new(|ctx: &mut Context<'_>, s: &mut crate::SipSession| {
                    let _ = ctx.send_in_dialog(s, Method::Message, None);
                });
                ctx.act_in_order(&cell, &mut s, first, message);
            }
            (RequestKind::InDialog, Method::Options) => {
                ctx.respond(req, 200);
                let Some(cell) = req.session.and_then(|s| ctx.session(s)) else { return };
                let app = {
                    let mut s = cell.lock();
                    let (_never, bye) = (s.reserve_action(), s.reserve_action());
                    let work: crate::SessionWork = Box::new(|ctx: &mut Context<'_>, s: &mut crate::SipSession| {
                        let _ = ctx.send_bye_on(s);
                    });
                    ctx.act_in_order(&cell, &mut s, bye, work);
                    s.app
                };
                ctx.invalidate(app);
            }
            _ => ctx.respond(req, 200),
        }
    }
}

fn deliver(h: &mut Harness, queue: &QueuedReentry) -> usize {
    let posted: Vec<_> = std::mem::take(&mut *queue.0.lock());
    let n = posted.len();
    for (_, service, work) in posted {
        h.core.run_post(h.now, service, work);
    }
    n
}

#[test]
fn session_actions_run_in_the_order_decided_and_survive_the_end_of_the_execution() {
    let mut h = harness(vec![("in_order", Arc::new(InOrder))], vec![RouteRule::catch_all("in_order")], fast_config());
    let queue = Arc::new(QueuedReentry::default());
    h.core.set_reentry(queue.clone());
    h.recv(&invite("c-order", "z9hG4bKord"), CALLER);
    let sent = h.sent();
    let tag = sent[0].1.to_tag().unwrap().to_string();
    h.recv(&in_dialog("ACK", "c-order", &tag, 1, "z9hG4bKorda"), CALLER);
    // The second action, redeemed first, waits for the first (posted behind it, not sent).
    h.recv(&in_dialog("INFO", "c-order", &tag, 2, "z9hG4bKordi"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("200 INFO -> {CALLER}"), format!("MESSAGE -> {CALLER}")]);
    assert_eq!(deliver(&mut h, &queue), 1);
    assert_eq!(summary(&h.sent()), vec![format!("INFO -> {CALLER}")]);
    // An action still on its way when the execution ends is not lost (a BYE ends the dialog
    // there), and does not wait for an earlier place nobody will redeem.
    h.recv(&in_dialog("OPTIONS", "c-order", &tag, 3, "z9hG4bKordo"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("200 OPTIONS -> {CALLER}")]);
    assert_eq!(h.store.live_sessions(), 0);
    assert_eq!(deliver(&mut h, &queue), 1);
    assert_eq!(summary(&h.sent()), vec![format!("BYE -> {CALLER}")]);
    assert_eq!(deliver(&mut h, &queue), 0, "nothing re-posted");
}

#[test]
fn a_bye_received_ends_the_dialog_for_later_sends() {
    let mut h = harness(vec![("in_order", Arc::new(InOrder))], vec![RouteRule::catch_all("in_order")], fast_config());
    h.recv(&invite("c-bye", "z9hG4bKbye"), CALLER);
    let tag = h.sent()[0].1.to_tag().unwrap().to_string();
    h.recv(&in_dialog("ACK", "c-bye", &tag, 1, "z9hG4bKbyea"), CALLER);
    h.recv(&in_dialog("BYE", "c-bye", &tag, 2, "z9hG4bKbyeb"), CALLER);
    assert_eq!(summary(&h.sent()), vec![format!("200 BYE -> {CALLER}")]);
    let cell = h.store.snapshot().into_iter().next().expect("the service keeps its session");
    assert!(cell.lock().is_terminated(), "a BYE received terminates the dialog (RFC 3261 15.1.2)");
}
