//! A compiled contract's arm that acts on its held session and then fails sends nothing but a
//! 500 to its request, and does not hold up the session's later actions: the place in the
//! session's order of actions the failed arm took (under the lock, when it decided the action)
//! is given back. The engine answers a failed arm's request with 500 too. An initial
//! transition writes its state on the holder its arm creates; one whose arm fails sends only a
//! 500 and leaves no session behind.

use bytes::Bytes;
use rand::SeedableRng;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tandem_container::{
    AttrValue, ContainerConfig, Core, CoreParts, Destination, IdSource, Locals, Metrics, RouteRule, Service, Services, SessionStore,
};
use tandem_engine::dispatch::{Arms, CompiledService, Contract, Step};
use tandem_engine::{ArmContext, Body, Compiled, Handler, HandlerError, MachineService, Negotiator, Transition};
use tandem_sip::{Flow, Method, Transport};

/// `pairing_stress.machine` compiled by `tandem_contract::codegen` (build.rs).
#[allow(clippy::all, dead_code)]
mod pairing_contract {
    include!(concat!(env!("OUT_DIR"), "/pairing_stress_contract.rs"));
}

use pairing_contract::T as Arm;

/// Join: the party's session accepted and answered 200.
fn join(t: &mut impl ArmContext) -> Result<(), HandlerError> {
    let me = t.accept()?;
    t.set_role_and_attrs(me, "Party", [])?;
    t.answer(me, 200, None)?;
    Ok(())
}

/// Busy sends an INFO on the caller's own session; the first Busy then fails.
struct FailsOnce {
    busy: AtomicU32,
}

impl Arms<pairing_contract::Machine> for FailsOnce {
    fn run(&self, arm: Arm, t: &mut Step<'_, '_, pairing_contract::Machine>) -> Result<(), HandlerError> {
        self.run_arm(arm, t)
    }
}

/// The engine runs the same arms.
impl Handler for FailsOnce {
    type Arm = Arm;

    fn arm(&self, name: &str) -> Option<Arm> {
        let index = <pairing_contract::Machine as Contract>::NAMES.iter().position(|n| *n == name)?;
        pairing_contract::TS.get(index).copied()
    }

    fn do_transition(&self, arm: Arm, t: &mut Transition<'_, '_>) -> Result<(), HandlerError> {
        self.run_arm(arm, t)
    }
}

impl FailsOnce {
    fn run_arm(&self, arm: Arm, t: &mut impl ArmContext) -> Result<(), HandlerError> {
        match arm {
            Arm::Join => join(t)?,
            Arm::Busy => {
                let me = t.sips().ok_or_else(|| HandlerError("no session".into()))?;
                let n = self.busy.fetch_add(1, Relaxed);
                t.send(me, Method::Info, Some(Body::new("text/plain", format!("busy {n}"))))?;
                t.respond(200);
                if n == 0 {
                    return Err(HandlerError("the first Busy fails after deciding its INFO".into()));
                }
            }
            _ => t.respond(200),
        }
        Ok(())
    }
}

struct Rig {
    core: Core,
    store: Arc<SessionStore>,
    sent: Vec<String>,
}

const FIRST_INVITE: &str = "INVITE sip:pairing@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKi0\r\nFrom: <sip:p0@x>;tag=f0\r\nTo: <sip:pairing@127.0.0.1>\r\nCall-ID: call-0\r\nCSeq: 1 INVITE\r\nContact: <sip:p0@127.0.0.1:5061>\r\nContent-Length: 0\r\n\r\n";

impl Rig {
    fn new(service: Arc<dyn Service>) -> Rig {
        let services = Arc::new(Services::new(vec![("pairing".to_string(), service)]));
        let store = Arc::new(SessionStore::default());
        let core = Core::new(CoreParts {
            executor: 0,
            executors: 1,
            config: Arc::new(ContainerConfig::default()),
            routes: Arc::new(vec![RouteRule::catch_all("pairing")]),
            store: store.clone(),
            metrics: Arc::new(Metrics::new(1)),
            locals: Arc::new(Locals::new(&[(Transport::Udp, "127.0.0.1:5060".parse().unwrap())], None)),
            services,
            ids: IdSource::new(rand_chacha::ChaCha20Rng::seed_from_u64(1)),
        });
        Rig { core, store, sent: Vec::new() }
    }

    /// Joins (INVITE, answered 200, ACK): the dialog's To tag.
    fn join(&mut self) -> String {
        self.deliver(FIRST_INVITE.to_string());
        let ok = self.sent.iter().find(|m| m.starts_with("SIP/2.0 200")).expect("the INVITE answered 200");
        let to_tag = ok
            .lines()
            .find(|l| l.starts_with("To:"))
            .and_then(|l| l.split(";tag=").nth(1))
            .expect("a To tag in the 200")
            .trim()
            .to_string();
        self.deliver(in_dialog("ACK", &to_tag, 1, ""));
        to_tag
    }

    /// Delivers `text`, then runs what was posted until nothing is (at most 100 rounds: an
    /// action waiting for a place never given back would be posted again for ever).
    fn deliver(&mut self, text: String) {
        let flow = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: "127.0.0.1:5061".parse().unwrap() };
        let msg = tandem_sip::parse_datagram(Bytes::from(text), &Default::default()).expect("test SIP parses");
        let now = Instant::now();
        self.core.on_message(now, msg, flow);
        for _ in 0..100 {
            let posts = self.core.take_posts();
            if posts.is_empty() {
                break;
            }
            for (_, service, work) in posts {
                self.core.run_post(now, service, work);
            }
        }
        while let Some(t) = self.core.poll_transmit() {
            self.sent.push(String::from_utf8_lossy(&t.payload).into_owned());
        }
    }
}

fn in_dialog(method: &str, to_tag: &str, seq: u32, body: &str) -> String {
    format!(
        "{method} sip:pairing@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKf{seq}\r\nFrom: <sip:p0@x>;tag=f0\r\nTo: <sip:pairing@127.0.0.1>;tag={to_tag}\r\nCall-ID: call-0\r\nCSeq: {seq} {method}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Whether a 500 answered the MESSAGE of CSeq `seq`.
fn server_error_to(sent: &[String], seq: u32) -> bool {
    sent.iter().any(|m| m.starts_with("SIP/2.0 500") && m.contains(&format!("CSeq: {seq} MESSAGE")))
}

/// Joins, then Busy (no such peer) twice: the first arm decides an INFO, then fails. Its
/// MESSAGE is answered 500 and its INFO not sent; the second arm's INFO is sent and its MESSAGE
/// answered by it. `counts`: the service's failures and transitions of Busy.
fn the_first_of_two_busy_fails(service: Arc<dyn Service>, counts: impl Fn() -> (u64, u64)) {
    let mut rig = Rig::new(service);
    let to_tag = rig.join();
    rig.deliver(in_dialog("MESSAGE", &to_tag, 2, "0123456789abcdef0123456789abcdef"));
    rig.deliver(in_dialog("MESSAGE", &to_tag, 3, "0123456789abcdef0123456789abcdef"));
    assert_eq!(counts(), (1, 1), "Busy failed once and was taken once");
    let sent = &rig.sent;
    let infos: Vec<&String> = sent.iter().filter(|m| m.starts_with("INFO ")).collect();
    assert_eq!(infos.len(), 1, "one INFO sent (the failed arm's is not): {sent:?}");
    assert!(infos[0].ends_with("busy 1"), "the second Busy's INFO went out: {}", infos[0]);
    assert!(server_error_to(sent, 2), "the failed arm's MESSAGE answered 500: {sent:?}");
    assert!(!server_error_to(sent, 3), "the second MESSAGE answered by its arm: {sent:?}");
}

#[test]
fn a_failed_arm_gives_back_its_place_in_the_held_sessions_order_of_actions() {
    let service = CompiledService::new("pairing", FailsOnce { busy: AtomicU32::new(0) }, None);
    the_first_of_two_busy_fails(service.clone(), || (service.failures("Busy"), service.transition_count("Busy")));
}

#[test]
fn the_engine_answers_a_failed_arms_request_with_500() {
    let machine = tandem_contract::parse(include_str!("pairing_stress.machine")).expect("pairing contract parses");
    let handler = FailsOnce { busy: AtomicU32::new(0) };
    let service = MachineService::new("pairing", Compiled::new(machine).expect("compiles"), handler, Negotiator::Ordered, None)
        .expect("the engine takes the contract");
    the_first_of_two_busy_fails(service.clone(), || (service.failures("Busy"), service.transition_count("Busy")));
}

/// Busy sends six INFOs on the caller's own session: more than the dispatcher's action buffer
/// holds inline (four), so the buffer spills to the heap.
struct Chatty;

impl Arms<pairing_contract::Machine> for Chatty {
    fn run(&self, arm: Arm, t: &mut Step<'_, '_, pairing_contract::Machine>) -> Result<(), HandlerError> {
        match arm {
            Arm::Join => join(t)?,
            Arm::Busy => {
                let me = t.sips().ok_or_else(|| HandlerError("no session".into()))?;
                for k in 0..6 {
                    t.send(me, Method::Info, Some(Body::new("text/plain", format!("info {k}"))))?;
                }
                t.respond(200);
            }
            _ => t.respond(200),
        }
        Ok(())
    }
}

#[test]
fn an_arm_deciding_more_actions_than_the_inline_buffer_holds_sends_them_all_in_order() {
    let service = CompiledService::new("pairing", Chatty, None);
    let mut rig = Rig::new(service.clone());
    let to_tag = rig.join();
    for seq in [2, 3] {
        rig.deliver(in_dialog("MESSAGE", &to_tag, seq, "0123456789abcdef0123456789abcdef"));
    }
    assert_eq!(service.transition_count("Busy"), 2);
    let infos: Vec<&str> = rig.sent.iter().filter(|m| m.starts_with("INFO ")).map(|m| m.rsplit("\r\n").next().unwrap_or("")).collect();
    let want: Vec<String> = (0..2).flat_map(|_| (0..6).map(|k| format!("info {k}"))).collect();
    assert_eq!(infos, want, "every INFO, in the order decided: {:?}", rig.sent);
}

#[test]
fn an_initial_transition_writes_its_state_on_the_holder_its_arm_creates() {
    let service = CompiledService::new("pairing", FailsOnce { busy: AtomicU32::new(0) }, None);
    let mut rig = Rig::new(service);
    rig.join();
    let sessions = rig.store.snapshot();
    assert_eq!(sessions.len(), 1, "the party's session");
    let s = sessions[0].lock();
    assert_eq!(s.attributes.get_str("@role"), Some("Party"));
    assert_eq!(s.attributes.get_str("@state"), Some("Waiting"), "Join: Idle -> Waiting, written as the arm set the role");
}

/// Join accepts the party and decides its 200, then fails.
struct JoinFails;

impl Arms<pairing_contract::Machine> for JoinFails {
    fn run(&self, arm: Arm, t: &mut Step<'_, '_, pairing_contract::Machine>) -> Result<(), HandlerError> {
        join(t)?;
        Err(HandlerError(format!("{arm:?} fails after deciding its answer")))
    }
}

#[test]
fn an_initial_arm_that_fails_after_deciding_its_answer_sends_only_a_500_and_leaves_no_session() {
    let service = CompiledService::new("pairing", JoinFails, None);
    let mut rig = Rig::new(service.clone());
    rig.deliver(FIRST_INVITE.to_string());
    let sent = &rig.sent;
    assert!(sent.iter().any(|m| m.starts_with("SIP/2.0 500") && m.contains("CSeq: 1 INVITE")), "the INVITE answered 500: {sent:?}");
    assert!(!sent.iter().any(|m| m.starts_with("SIP/2.0 200")), "the failed arm's 200 not sent: {sent:?}");
    assert_eq!((service.failures("Join"), service.transition_count("Join")), (1, 0));
    assert_eq!((rig.store.live_sessions(), rig.store.live_app_sessions()), (0, 0), "the execution the arm created is gone");
}

/// Busy creates a leg (a later transition, not an initial one), writes an attribute on it and
/// invites it; a second Busy writes on the first one's leg, which it neither holds nor created.
struct Forks;

impl Arms<pairing_contract::Machine> for Forks {
    fn run(&self, arm: Arm, t: &mut Step<'_, '_, pairing_contract::Machine>) -> Result<(), HandlerError> {
        match arm {
            Arm::Join => join(t)?,
            Arm::Busy => {
                let me = t.sips().ok_or_else(|| HandlerError("no session".into()))?;
                t.respond(200);
                let earlier = t.session_attr(me, "leg")?;
                let target = Destination::parse("127.0.0.1:5070").ok_or_else(|| HandlerError("destination".into()))?;
                let leg = t.create_leg("sip:pairing@tandem.invalid", "sip:media@127.0.0.1:5070", target)?;
                t.set_attr(leg, "party", AttrValue::Session(me))?;
                t.set_attr(me, "leg", AttrValue::Session(leg))?;
                t.invite(leg, None)?;
                if let Some(earlier) = earlier {
                    t.set_attr(earlier, "party", AttrValue::Int(0))?;
                }
            }
            _ => t.respond(200),
        }
        Ok(())
    }
}

#[test]
fn a_later_transition_creates_a_leg_writes_it_and_may_not_write_a_session_it_did_not_create() {
    let service = CompiledService::new("pairing", Forks, None);
    let mut rig = Rig::new(service.clone());
    let to_tag = rig.join();
    rig.deliver(in_dialog("MESSAGE", &to_tag, 2, "unknown"));
    assert_eq!(service.transition_count("Busy"), 1);
    let invites = rig.sent.iter().filter(|m| m.starts_with("INVITE sip:media@127.0.0.1:5070")).count();
    assert_eq!(invites, 1, "the created leg invited: {:?}", rig.sent);
    let sessions = rig.store.snapshot();
    let party = sessions.iter().find(|s| s.lock().attributes.get_str("@role") == Some("Party")).expect("the party's session");
    let party_id = party.lock().id;
    let leg = party.lock().attributes.get_session("leg").expect("the leg noted on the party");
    let leg = sessions.iter().find(|s| s.lock().id == leg).expect("the leg in the store");
    assert_eq!(leg.lock().attributes.get_session("party"), Some(party_id), "written by the arm that created it");
    // The second Busy may not write the first one's leg: its arm fails, its MESSAGE gets a 500
    // and its own leg's INVITE is not sent.
    rig.deliver(in_dialog("MESSAGE", &to_tag, 3, "unknown"));
    assert_eq!((service.failures("Busy"), service.transition_count("Busy")), (1, 1));
    assert!(server_error_to(&rig.sent, 3), "{:?}", rig.sent);
    let invites = rig.sent.iter().filter(|m| m.starts_with("INVITE sip:media@127.0.0.1:5070")).count();
    assert_eq!(invites, 1, "the failed arm's INVITE not sent: {:?}", rig.sent);
    assert_eq!(leg.lock().attributes.get_session("party"), Some(party_id), "the first leg unchanged");
}
