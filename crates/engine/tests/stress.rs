//! Randomized stress: many executions on several executor threads rendezvous in pairs across
//! executions (like the dating service's T7), for every negotiator. After each run the
//! invariants must hold: pairing is symmetric, nobody is paired twice, no update was lost,
//! every lock was released. Paired executions also poke each other: a `same` transition,
//! decided from the state alone, that writes both sessions of the pair from either side.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_container::{
    executor_for, AttrValue, ContainerConfig, Core, CoreParts, IdSource, Locals, Metrics, Post, RouteRule, Service, ServiceId, Services,
    SessionId, SessionStore,
};
use tandem_engine::dispatch::{Arms, CompiledService, Contract, Step};
use tandem_engine::{ArmContext, Compiled, Handler, HandlerError, MachineService, Negotiator, Transition};
use tandem_sip::{Flow, Transport};

/// The contract, also compiled to Rust by the build script (`pairing_contract` below) for the
/// compiled dispatcher's runs.
const PAIRING: &str = include_str!("pairing_stress.machine");

/// `pairing_stress.machine` compiled by `tandem_contract::codegen` (build.rs).
#[allow(clippy::all, dead_code)]
mod pairing_contract {
    include!(concat!(env!("OUT_DIR"), "/pairing_stress_contract.rs"));
}

/// `poke`: the Busy arm also tries to write to the session named in the message, which its
/// contract did not acquire; the engine must refuse that.
struct Pairing {
    poke: bool,
}

use pairing_contract::T as Arm;

fn arm_named(name: &str) -> Option<Arm> {
    let index = <pairing_contract::Machine as Contract>::NAMES.iter().position(|n| *n == name)?;
    pairing_contract::TS.get(index).copied()
}

impl Handler for Pairing {
    type Arm = Arm;

    fn arm(&self, name: &str) -> Option<Arm> {
        arm_named(name)
    }

    fn do_transition(&self, arm: Arm, t: &mut Transition<'_, '_>) -> Result<(), HandlerError> {
        if arm == Arm::Busy && self.poke {
            if let Some(other) = t.resolve(&t.event().payload()).filter(|o| Some(*o) != t.sips()) {
                t.set_attr(other, "poked", AttrValue::Bool(true))?;
                panic!("the engine let a transition write to a session it did not acquire");
            }
        }
        run_arm(arm, t)
    }
}

/// The compiled contract's service runs the same arms.
impl Arms<pairing_contract::Machine> for Pairing {
    fn run(&self, arm: Arm, step: &mut Step<'_, '_, pairing_contract::Machine>) -> Result<(), HandlerError> {
        run_arm(arm, step)
    }
}

fn run_arm(arm: Arm, t: &mut impl ArmContext) -> Result<(), HandlerError> {
    match arm {
        Arm::Join => {
            let me = t.accept()?;
            t.set_role_and_attrs(me, "Party", [("pairings", AttrValue::Int(0))])?;
            t.answer(me, 200, None)?;
        }
        Arm::Pair => {
            let me = t.sips().ok_or_else(|| HandlerError("no session".into()))?;
            let peer = t.session_var("p").ok_or_else(|| HandlerError("peer vanished".into()))?;
            for (a, b) in [(me, peer), (peer, me)] {
                t.set_attr(a, "peer", AttrValue::Session(b))?;
                let n = match t.attr(a, "pairings")? {
                    Some(AttrValue::Int(n)) => n,
                    _ => 0,
                };
                t.set_attr(a, "pairings", AttrValue::Int(n + 1))?;
            }
            t.respond(200);
        }
        // Both sessions of the pair count every poke of either: a lost update shows as a
        // pair whose counts differ, or a total that is not twice the pokes taken.
        Arm::Poke => {
            let me = t.sips().ok_or_else(|| HandlerError("no session".into()))?;
            let peer = t.session_attr(me, "peer")?.ok_or_else(|| HandlerError("no peer".into()))?;
            for s in [me, peer] {
                let n = match t.attr(s, "pokes")? {
                    Some(AttrValue::Int(n)) => n,
                    _ => 0,
                };
                t.set_attr(s, "pokes", AttrValue::Int(n + 1))?;
            }
            t.respond(200);
        }
        Arm::Busy | Arm::Late | Arm::Hangup => t.respond(200),
    }
    Ok(())
}

enum Input {
    Sip(Bytes),
    Post(ServiceId, Post),
    Stop,
}

/// What the runs read of a service, on the engine or on the compiled contract.
trait Counts {
    fn transition_count(&self, name: &str) -> u64;
    fn failures(&self, name: &str) -> u64;
    fn absorbed(&self) -> u64;
    /// Locks still held in the engine's lock table (the compiled dispatcher has none).
    fn held_locks(&self) -> usize;
}

impl Counts for MachineService<Pairing> {
    fn transition_count(&self, name: &str) -> u64 {
        MachineService::transition_count(self, name)
    }
    fn failures(&self, name: &str) -> u64 {
        MachineService::failures(self, name)
    }
    fn absorbed(&self) -> u64 {
        MachineService::absorbed(self)
    }
    fn held_locks(&self) -> usize {
        MachineService::held_locks(self)
    }
}

type CompiledPairing = CompiledService<pairing_contract::Machine, Pairing>;

impl Counts for CompiledPairing {
    fn transition_count(&self, name: &str) -> u64 {
        CompiledService::transition_count(self, name)
    }
    fn failures(&self, name: &str) -> u64 {
        CompiledService::failures(self, name)
    }
    fn absorbed(&self) -> u64 {
        CompiledService::absorbed(self)
    }
    fn held_locks(&self) -> usize {
        0
    }
}

struct Sim<S> {
    inboxes: Vec<mpsc::Sender<Input>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    store: Arc<SessionStore>,
    service: Arc<S>,
}

fn start(executors: usize, negotiator: Negotiator, seed: u64, poke: bool) -> Sim<MachineService<Pairing>> {
    let machine = tandem_contract::parse(PAIRING).expect("pairing contract parses");
    let service = MachineService::new("pairing", Compiled::new(machine).unwrap(), Pairing { poke }, negotiator, None).unwrap();
    start_with(executors, seed, service)
}

fn start_with<S: Service + 'static>(executors: usize, seed: u64, service: Arc<S>) -> Sim<S> {
    let services = Arc::new(Services::new(vec![("pairing".to_string(), service.clone() as Arc<dyn Service>)]));
    let store = Arc::new(SessionStore::default());
    let metrics = Arc::new(Metrics::new(executors));
    let locals = Arc::new(Locals::new(&[(Transport::Udp, "127.0.0.1:5060".parse().unwrap())], None));
    let config = Arc::new(ContainerConfig::default());
    let routes = Arc::new(vec![RouteRule::catch_all("pairing")]);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..executors).map(|_| mpsc::channel::<Input>()).unzip();
    let mut threads = Vec::new();
    for (index, rx) in receivers.into_iter().enumerate() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        rng.set_stream(index as u64);
        let mut core = Core::new(CoreParts {
            executor: index as u16,
            executors: executors as u16,
            config: config.clone(),
            routes: routes.clone(),
            store: store.clone(),
            metrics: metrics.clone(),
            locals: locals.clone(),
            services: services.clone(),
            ids: IdSource::new(rng),
        });
        let peers = senders.clone();
        threads.push(std::thread::spawn(move || {
            let flow = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: "127.0.0.1:5061".parse().unwrap() };
            while let Ok(input) = rx.recv() {
                let now = Instant::now();
                match input {
                    Input::Sip(bytes) => {
                        let msg = tandem_sip::parse_datagram(bytes, &Default::default()).expect("test SIP parses");
                        core.on_message(now, msg, flow);
                    }
                    Input::Post(service, work) => core.run_post(now, service, work),
                    Input::Stop => return,
                }
                while core.poll_transmit().is_some() {}
                for (executor, service, work) in core.take_posts() {
                    let _ = peers[executor as usize].send(Input::Post(service, work));
                }
            }
        }));
    }
    Sim { inboxes: senders, threads, store, service }
}

impl<S> Sim<S> {
    fn send(&self, call_id: &str, text: String) {
        let executor = executor_for(call_id, self.inboxes.len() as u16) as usize;
        self.inboxes[executor].send(Input::Sip(Bytes::from(text))).expect("executor alive");
    }

    fn stop(self) -> (Arc<SessionStore>, Arc<S>) {
        for tx in &self.inboxes {
            let _ = tx.send(Input::Stop);
        }
        for t in self.threads {
            t.join().expect("executor thread panicked");
        }
        (self.store, self.service)
    }
}

fn invite(i: usize) -> String {
    format!("INVITE sip:pairing@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKi{i}\r\nFrom: <sip:p{i}@x>;tag=f{i}\r\nTo: <sip:pairing@127.0.0.1>\r\nCall-ID: call-{i}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")
}

fn message(i: usize, to_tag: &str, seq: u32, body: &str) -> String {
    format!(
        "MESSAGE sip:pairing@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKm{i}x{seq}\r\nFrom: <sip:p{i}@x>;tag=f{i}\r\nTo: <sip:pairing@127.0.0.1>;tag={to_tag}\r\nCall-ID: call-{i}\r\nCSeq: {seq} MESSAGE\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn info(i: usize, to_tag: &str, seq: u32) -> String {
    format!(
        "INFO sip:pairing@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKn{i}x{seq}\r\nFrom: <sip:p{i}@x>;tag=f{i}\r\nTo: <sip:pairing@127.0.0.1>;tag={to_tag}\r\nCall-ID: call-{i}\r\nCSeq: {seq} INFO\r\nContent-Length: 0\r\n\r\n"
    )
}

fn run(negotiator: Negotiator, executors: usize, executions: usize, rounds: usize, seed: u64) {
    run_with(negotiator, executors, executions, rounds, seed, false);
}

/// Each round sends every execution a MESSAGE (pairing it, or not) and an INFO (a `Poke` once
/// it is paired, else absorbed).
fn run_with(
    negotiator: Negotiator,
    executors: usize,
    executions: usize,
    rounds: usize,
    seed: u64,
    poke: bool,
) -> Arc<MachineService<Pairing>> {
    let started = Instant::now();
    let sim = start(executors, negotiator, seed, poke);
    // Every direct prediction kept (single-assign: every message here, the MESSAGEs' `let`s
    // and peer sessions included) is checked against the general evaluator under the locks.
    sim.service.set_verify_direct(true);
    let sessions = drive(&sim, executions, rounds, seed);
    let elapsed = started.elapsed();
    let (store, service) = sim.stop();
    check_invariants(&store, &sessions, &*service);
    assert_eq!(service.direct_mismatches(), 0, "a direct prediction differs from the general evaluator");
    check_pokes(&store, &sessions, &*service);
    if negotiator == Negotiator::SingleAssign {
        let messages = (executions * (2 * rounds + 1)) as u64;
        assert!(
            service.direct_predictions() >= messages,
            "not every message was predicted directly: {} of {messages}",
            service.direct_predictions()
        );
        // Every message may take the fast path, verified like the direct path: the INVITEs,
        // the MESSAGEs of a paired execution, and those that read the session their payload
        // names (Pair, Busy), the INFOs (a poke's commit sets again the memo its arm's writes
        // made stale). It falls back on a busy lock or a session changed meanwhile: often with
        // a few executions and many rounds, whose pokes race on the same pairs.
        let percent = if executions < 20 { 50 } else { 90 };
        assert!(
            service.fast_selections() * 100 >= messages * percent,
            "too few messages took the fast path: {} of {messages}",
            service.fast_selections()
        );
    }
    eprintln!(
        "{negotiator:?}: {executors} executors, {executions} executions, {} messages in {elapsed:?}: pairs {}, back-offs {}, \
         predictions evaluated again {}, fast selections {}, pokes {}",
        executions * (2 * rounds + 1),
        service.transition_count("Pair"),
        service.backoffs(),
        service.reevaluations(),
        service.fast_selections(),
        service.transition_count("Poke")
    );
    for (id, _) in &sessions {
        let poked = store.session(*id).and_then(|c| c.lock().attributes.get_bool("poked"));
        assert_eq!(poked, None, "a transition wrote to a session it had not acquired");
    }
    service
}

/// Joins `executions` executions, then sends `rounds` rounds of traffic and waits until every
/// message was handled. Returns each execution's session (ID and local tag).
fn drive<S: Counts>(sim: &Sim<S>, executions: usize, rounds: usize, seed: u64) -> Vec<(SessionId, String)> {
    for i in 0..executions {
        sim.send(&format!("call-{i}"), invite(i));
    }
    // Find each execution's session (ID and local tag) in the shared store.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sessions: Vec<Option<(SessionId, String)>> = vec![None; executions];
    while sessions.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "INVITEs not all handled");
        std::thread::sleep(Duration::from_millis(5));
        sessions = find_sessions(&sim.store, executions);
    }
    let sessions: Vec<(SessionId, String)> = sessions.into_iter().map(|s| s.unwrap()).collect();
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x5eed);
    let mut seq = vec![1u32; executions];
    for _ in 0..rounds {
        for i in 0..executions {
            let target = rng.gen_range(0..executions + executions / 10);
            let body = match target {
                t if t < executions => sessions[t].0.to_string(),
                _ => "0123456789abcdef0123456789abcdef".to_string(), // unknown session: Busy
            };
            seq[i] += 1;
            sim.send(&format!("call-{i}"), message(i, &sessions[i].1, seq[i], &body));
            seq[i] += 1;
            sim.send(&format!("call-{i}"), info(i, &sessions[i].1, seq[i]));
        }
    }
    // Let every executor drain: messages and posts settle when nothing is parked.
    let settle = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let total: u64 = ["Pair", "Busy", "Late"].iter().map(|n| sim.service.transition_count(n) + sim.service.failures(n)).sum();
        // An INFO before its execution is paired is absorbed.
        let infos = sim.service.transition_count("Poke") + sim.service.failures("Poke") + sim.service.absorbed();
        if total as usize == executions * rounds && infos as usize == executions * rounds && sim.service.held_locks() == 0 {
            break;
        }
        assert!(Instant::now() < settle, "messages not all handled: {total} of {}", executions * rounds);
    }
    sessions
}

/// Each execution's session (ID and local tag), found by Call-ID in the shared store.
fn find_sessions(store: &SessionStore, executions: usize) -> Vec<Option<(SessionId, String)>> {
    let mut found = vec![None; executions];
    for cell in store.snapshot() {
        let s = cell.lock();
        if let Some(i) = s.dialog.call_id.strip_prefix("call-").and_then(|n| n.parse::<usize>().ok()) {
            if i < executions {
                found[i] = Some((s.id, s.dialog.local_tag.to_string()));
            }
        }
    }
    found
}

fn check_invariants(store: &SessionStore, sessions: &[(SessionId, String)], service: &impl Counts) {
    let mut paired = 0;
    for (id, _) in sessions {
        let cell = store.session(*id).expect("session alive");
        let s = cell.lock();
        let state = s.attributes.get_str("@state").unwrap_or("Idle").to_string();
        let pairings = s.attributes.get_int("pairings").unwrap_or(-1);
        let peer = s.attributes.get_session("peer");
        drop(s);
        assert!(pairings <= 1, "{id} paired {pairings} times");
        match state.as_str() {
            "Paired" => {
                paired += 1;
                assert_eq!(pairings, 1, "{id} is Paired but was paired {pairings} times");
                let peer = peer.expect("a paired session has a peer");
                let back = store.session(peer).expect("peer alive").lock().attributes.get_session("peer");
                assert_eq!(back, Some(*id), "pairing is not symmetric");
            }
            "Waiting" => assert_eq!((pairings, peer), (0, None), "{id} waits but has a peer"),
            other => panic!("{id} in unexpected state {other}"),
        }
    }
    assert_eq!(paired % 2, 0);
    assert_eq!(service.transition_count("Pair") as usize * 2, paired, "a pairing was lost or doubled");
    assert_eq!(service.held_locks(), 0);
}

/// Every poke counted on both sessions of its pair, none lost: each paired session's count is
/// its peer's, and all counts add up to twice the pokes taken (none failed).
fn check_pokes(store: &SessionStore, sessions: &[(SessionId, String)], service: &impl Counts) {
    let pokes = |id: SessionId| store.session(id).expect("session alive").lock().attributes.get_int("pokes").unwrap_or(0);
    let mut total = 0;
    for (id, _) in sessions {
        let mine = pokes(*id);
        total += mine;
        if let Some(peer) = store.session(*id).expect("session alive").lock().attributes.get_session("peer") {
            assert_eq!(mine, pokes(peer), "{id} and its peer counted different pokes: an update was lost");
        }
    }
    assert_eq!(service.failures("Poke"), 0, "a poke failed");
    assert_eq!(
        total as u64,
        2 * service.transition_count("Poke"),
        "pokes counted {total} times for {} pokes",
        service.transition_count("Poke")
    );
}

#[test]
fn ordered_negotiator_rendezvous() {
    for seed in 0..3 {
        run(Negotiator::Ordered, 3, 200, 5, seed);
    }
}

#[test]
fn single_assign_negotiator_rendezvous() {
    for seed in 0..3 {
        let service = run_with(Negotiator::SingleAssign, 3, 200, 5, seed, false);
        assert_eq!(service.unlocked_runs(), 0, "with three executors every transition takes its locks");
    }
}

/// One executor: the fast path runs its transitions without the lock table (no other call of
/// the service can be in progress); the same invariants, and every fast decision is still
/// checked against the general evaluator.
#[test]
fn single_assign_negotiator_on_one_executor() {
    for seed in 0..3 {
        let service = run_with(Negotiator::SingleAssign, 1, 200, 5, seed, false);
        // The INVITEs, Pair/Busy and the pokes of paired executions; the INFOs of the others
        // are absorbed.
        assert!(service.unlocked_runs() >= 200, "the fast path took the lock table: {} unlocked runs", service.unlocked_runs());
        assert_eq!(service.held_locks(), 0);
    }
}

#[test]
fn sessions_outside_the_contract_are_refused() {
    for negotiator in [Negotiator::Ordered, Negotiator::SingleAssign] {
        let service = run_with(negotiator, 2, 60, 3, 11, true);
        assert!(service.failures("Busy") > 0, "the poking arm never ran");
    }
}

#[test]
fn global_negotiator_rendezvous() {
    for seed in 0..3 {
        run(Negotiator::Global, 2, 200, 5, seed);
    }
}

/// Few executions and many rounds: predictions often read a session that another transition
/// changes before it is acquired, so the single-assignment negotiator has to notice and
/// evaluate again under the locks; the invariants must hold all the same.
#[test]
fn single_assign_negotiator_under_contention() {
    let mut reevaluated = 0;
    for seed in 0..5 {
        reevaluated += run_with(Negotiator::SingleAssign, 3, 8, 60, seed, false).reevaluations();
    }
    eprintln!("predictions evaluated again: {reevaluated}");
}

/// The contract compiled to Rust (`tandem_engine::dispatch`, decision 0008) under the same
/// traffic: pairs across executors (the payload's peer, locked in order or by try-lock and
/// back-off) and pokes racing on both sessions of a pair (`msg.sips.peer`). The same
/// invariants: symmetric pairs, nobody paired twice, no lost update, no session left locked.
fn run_compiled(executors: usize, executions: usize, rounds: usize, seed: u64) -> Arc<CompiledPairing> {
    let started = Instant::now();
    let sim = start_with(executors, seed, CompiledService::new("pairing", Pairing { poke: false }, None));
    let sessions = drive(&sim, executions, rounds, seed);
    let elapsed = started.elapsed();
    let (store, service) = sim.stop();
    check_invariants(&store, &sessions, &*service);
    check_pokes(&store, &sessions, &*service);
    for cell in store.snapshot() {
        assert!(cell.try_lock().is_some(), "a session was left locked");
    }
    eprintln!(
        "compiled: {executors} executors, {executions} executions, {} messages in {elapsed:?}: pairs {}, lock retries {}, pokes {}",
        executions * (2 * rounds + 1),
        service.transition_count("Pair"),
        service.lock_retries(),
        service.transition_count("Poke")
    );
    service
}

#[test]
fn compiled_contract_rendezvous() {
    for seed in 0..3 {
        run_compiled(3, 200, 5, seed);
    }
    run_compiled(1, 200, 5, 7);
}

/// Few executions and many rounds: peers ordered before the holder are often busy, so the
/// dispatcher releases and takes both in order; the invariants must hold all the same.
#[test]
fn compiled_contract_under_contention() {
    let mut retries = 0;
    for seed in 0..5 {
        retries += run_compiled(3, 8, 60, seed).lock_retries();
    }
    eprintln!("compiled: lock retries {retries}");
}

/// A handler without an arm for one of the contract's transitions is refused when the service
/// is built, not when that transition first runs.
#[test]
fn a_transition_without_an_arm_is_refused_at_build_time() {
    struct NoHangup;
    impl Handler for NoHangup {
        type Arm = Arm;
        fn arm(&self, name: &str) -> Option<Arm> {
            arm_named(name).filter(|a| *a != Arm::Hangup)
        }
        fn do_transition(&self, _: Arm, _: &mut Transition<'_, '_>) -> Result<(), HandlerError> {
            Ok(())
        }
    }
    let machine = tandem_contract::parse(PAIRING).expect("pairing contract parses");
    match MachineService::new("pairing", Compiled::new(machine).unwrap(), NoHangup, Negotiator::SingleAssign, None) {
        Err(e) => assert_eq!(e.to_string(), "the handler has no arm for transition Hangup"),
        Ok(_) => panic!("a handler without an arm for Hangup was accepted"),
    }
}
