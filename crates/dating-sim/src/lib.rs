//! The dating service (either version) and its media service, each in a container core of
//! its own, driven in one process on a virtual clock by scripted callers that play the
//! benchmark's SIPp profiles (`bench/dating/scenarios`): no sockets, no threads, no sleeps.
//!
//! Everything is decided by the input and the seeds, so two runs of one build process the
//! same messages with the same instructions: the dating core's cost per message, counted by
//! callgrind over the dating core's functions only (`bench/dating/sim-instructions.sh`),
//! compares the two versions to a few instructions, where the live workload
//! (`instructions.sh`) moves by ±0.5 % with its timing. What the live workload adds (sockets,
//! the runtime, batching) is the same for both versions and is measured there.

#![forbid(unsafe_code)]

use bytes::Bytes;
use rand::SeedableRng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_container::{ContainerConfig, Core, CoreParts, IdSource, Locals, Metrics, RouteRule, Service, Services, SessionStore};
use tandem_services::{DatingConfig, Media, MediaConfig};
use tandem_sip::{Flow, Message, Method, ResponseBuilder, Transport};

const fn local(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), port))
}

/// Where the dating core listens.
pub const DATING: SocketAddr = local(5060);
/// Where the media core listens.
pub const MEDIA: SocketAddr = local(5070);
/// Caller `i` listens on this port + `i`.
const CALLER_BASE: u16 = 20_000;

/// A caller's usage profile (the paper's Figure 6), as the bench scenarios play it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Wait to be paired, accept the re-INVITE, talk 2 s and hang up (or be hung up on).
    Complete,
    /// Hang up right after acknowledging the 200 OK, before pairing.
    EarlyBye,
}

impl Profile {
    fn name(self) -> &'static str {
        match self {
            Profile::Complete => "complete",
            Profile::EarlyBye => "early_bye",
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    /// `dating_compiled` or `dating_manual`.
    pub service: String,
    /// Calls per phase; the phases run one after another, as the workload's SIPp runs.
    pub calls: usize,
    pub phases: Vec<Profile>,
    /// New calls per second within a phase.
    pub rate: f64,
    pub seed: u64,
    pub preference_delay: Duration,
    /// Prints every datagram's first line to stderr, with the virtual time.
    pub trace: bool,
}

impl Default for SimConfig {
    /// The live workload's (`bench/dating/workload.sh`).
    fn default() -> Self {
        SimConfig {
            service: "dating_compiled".into(),
            calls: 100,
            phases: vec![Profile::Complete, Profile::EarlyBye, Profile::Complete],
            rate: 20.0,
            seed: 7,
            preference_delay: Duration::from_millis(300),
            trace: false,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// SIP messages the dating core received.
    pub dating_messages: u64,
    /// SIP messages the dating core sent.
    pub dating_sent: u64,
    pub calls: usize,
    /// Calls that ended with a BYE answered, either way.
    pub completed: usize,
    /// Complete-profile calls re-INVITEd to a peer.
    pub paired: usize,
    /// Calls whose INVITE got a final failure.
    pub failed: usize,
    /// Calls still going when the run ended.
    pub unfinished: usize,
    /// Sessions each core still held after every timer ran out.
    pub dating_sessions_left: usize,
    pub media_sessions_left: usize,
    /// INVITE to 200 OK at the callers, in virtual time (milliseconds, sorted).
    pub setup_ms: Vec<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown service {0} (dating_compiled or dating_manual)")]
    UnknownService(String),
    #[error("service set-up failed: {0}")]
    Setup(String),
    #[error("{0} sent a message that does not parse: {1}")]
    Unparsable(&'static str, String),
    #[error("{0} calls in all: each caller has a port of its own, at most {1}")]
    TooManyCalls(usize, usize),
    #[error("the call rate must be a positive number of calls per second, not {0}")]
    Rate(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Wake {
    Start,
    /// The hang-up armed as generation `n` (a later arming supersedes it).
    Hangup(u32),
}

struct Caller {
    profile: Profile,
    port: u16,
    call_id: String,
    tag: String,
    started: Option<Instant>,
    invite_branch: String,
    branches: u32,
    to_tag: Option<String>,
    answered: bool,
    reinvited: bool,
    talking: bool,
    hangup_gen: u32,
    bye_sent: bool,
    done: bool,
    completed: bool,
    failed: bool,
}

const SDP: &str = "v=0\r\no=caller 53655765 2353687637 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";

impl Caller {
    fn addr(&self) -> SocketAddr {
        local(self.port)
    }

    fn branch(&mut self) -> String {
        self.branches += 1;
        format!("z9hG4bK-{}-{}", self.port, self.branches)
    }

    fn request(&self, method: &str, branch: &str, cseq: u32, body: Option<&str>) -> Bytes {
        let port = self.port;
        let to_tag = self.to_tag.as_deref().map(|t| format!(";tag={t}")).unwrap_or_default();
        let profile = self.profile.name();
        let (ct, body) = match body {
            Some(b) => ("Content-Type: application/sdp\r\n", b),
            None => ("", ""),
        };
        Bytes::from(format!(
            "{method} sip:dating@{DATING} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch={branch}\r\nFrom: {profile} <sip:{profile}@127.0.0.1:{port}>;tag={tag}\r\nTo: dating <sip:dating@{DATING}>{to_tag}\r\nCall-ID: {call_id}\r\nCSeq: {cseq} {method}\r\nContact: <sip:{profile}@127.0.0.1:{port};transport=udp>\r\nMax-Forwards: 70\r\n{ct}Content-Length: {len}\r\n\r\n{body}",
            tag = self.tag,
            call_id = self.call_id,
            len = body.len(),
        ))
    }

    fn respond(&self, req: &Message, body: Option<&str>) -> Bytes {
        let b =
            ResponseBuilder::new(req, 200, "OK", None).header("Contact", &format!("<sip:caller@127.0.0.1:{};transport=udp>", self.port));
        match body {
            Some(sdp) => b.body("application/sdp", sdp.as_bytes()),
            None => b.finish(),
        }
    }
}

/// A datagram on its way.
struct Datagram {
    from: SocketAddr,
    to: SocketAddr,
    bytes: Bytes,
}

pub struct Sim {
    now: Instant,
    start: Instant,
    dating: Core,
    dating_store: Arc<SessionStore>,
    media: Core,
    media_store: Arc<SessionStore>,
    callers: Vec<Caller>,
    wakes: BinaryHeap<Reverse<(Instant, u64, usize, Wake)>>,
    wake_seq: u64,
    queue: VecDeque<Datagram>,
    report: Report,
    trace: bool,
}

fn core(name: &str, service: Arc<dyn Service>, listen: SocketAddr, seed: u64) -> (Core, Arc<SessionStore>) {
    let store = Arc::new(SessionStore::default());
    let core = Core::new(CoreParts {
        executor: 0,
        executors: 1,
        config: Arc::new(ContainerConfig::default()),
        routes: Arc::new(vec![RouteRule::catch_all(name)]),
        store: store.clone(),
        metrics: Arc::new(Metrics::new(1)),
        locals: Arc::new(Locals::new(&[(Transport::Udp, listen)], None)),
        services: Arc::new(Services::new(vec![(name.to_string(), service)])),
        ids: IdSource::new(rand_chacha::ChaCha20Rng::seed_from_u64(seed)),
    });
    (core, store)
}

fn flow(from: SocketAddr) -> Flow {
    Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: from }
}

fn parse(bytes: Bytes, who: &'static str) -> Result<Message, SimError> {
    tandem_sip::parse_datagram(bytes, &Default::default()).map_err(|e| SimError::Unparsable(who, e.to_string()))
}

// The dating core's work, each in a function of its own: what callgrind collects
// (`--toggle-collect=tandem_dating_sim::dating_core_*`). Parsing is included, as the live
// tandem parses each datagram it receives.
#[inline(never)]
pub fn dating_core_message(core: &mut Core, now: Instant, bytes: Bytes, from: SocketAddr) -> Result<(), SimError> {
    let msg = parse(bytes, "a caller or the media service")?;
    core.on_message(now, msg, flow(from));
    Ok(())
}

#[inline(never)]
pub fn dating_core_timeout(core: &mut Core, now: Instant) {
    core.on_timeout(now);
}

#[inline(never)]
pub fn dating_core_transmit(core: &mut Core) -> Option<(SocketAddr, Bytes)> {
    core.poll_transmit().map(|t| (t.flow.remote, t.payload))
}

impl Sim {
    pub fn new(config: &SimConfig) -> Result<Sim, SimError> {
        let dating_config = DatingConfig { media: MEDIA.to_string() };
        let dating: Arc<dyn Service> = match config.service.as_str() {
            "dating_compiled" => tandem_services::dating_compiled_service(&dating_config).map_err(|e| SimError::Setup(e.to_string()))?,
            "dating_manual" => tandem_services::dating_manual_service(&dating_config).map_err(|e| SimError::Setup(e.to_string()))?,
            other => return Err(SimError::UnknownService(other.to_string())),
        };
        let media_config =
            MediaConfig { preference_delay: config.preference_delay, answer_delay: Duration::ZERO, ..MediaConfig::default() };
        let media = Arc::new(Media::new(&media_config).map_err(|e| SimError::Setup(e.to_string()))?);
        let (dating, dating_store) = core(&config.service, dating, DATING, config.seed);
        let (media, media_store) = core("media", media, MEDIA, config.seed.wrapping_add(1));
        let now = Instant::now();
        Ok(Sim {
            now,
            start: now,
            dating,
            dating_store,
            media,
            media_store,
            callers: Vec::new(),
            wakes: BinaryHeap::new(),
            wake_seq: 0,
            queue: VecDeque::new(),
            report: Report::default(),
            trace: config.trace,
        })
    }

    /// Runs every phase, then lets every timer run out; reports what happened.
    pub fn run(mut self, config: &SimConfig) -> Result<Report, SimError> {
        let total = config.calls.saturating_mul(config.phases.len());
        let most = usize::from(u16::MAX - CALLER_BASE);
        if total > most {
            return Err(SimError::TooManyCalls(total, most));
        }
        if !(config.rate.is_finite() && config.rate > 0.0) {
            return Err(SimError::Rate(config.rate));
        }
        for profile in &config.phases {
            let first = self.callers.len();
            for i in 0..config.calls {
                let n = first + i;
                // Below u16::MAX: checked above.
                let port = CALLER_BASE + n as u16;
                self.callers.push(Caller {
                    profile: *profile,
                    port,
                    call_id: format!("sim-{n}@127.0.0.1"),
                    tag: format!("caller{n}"),
                    started: None,
                    invite_branch: String::new(),
                    branches: 0,
                    to_tag: None,
                    answered: false,
                    reinvited: false,
                    talking: false,
                    hangup_gen: 0,
                    bye_sent: false,
                    done: false,
                    completed: false,
                    failed: false,
                });
                let at = self.now + Duration::from_secs_f64(i as f64 / config.rate);
                self.wake(at, n, Wake::Start);
            }
            // The phase ends when its callers are done (SIPp's run ends with its last call).
            while self.callers[first..].iter().any(|c| !c.done) {
                if !self.step()? {
                    break;
                }
            }
        }
        // Every transaction and session timer runs out.
        let end = self.now + Duration::from_secs(300);
        while self.step_until(end)? {}
        let r = &mut self.report;
        r.calls = self.callers.len();
        r.completed = self.callers.iter().filter(|c| c.completed).count();
        r.paired = self.callers.iter().filter(|c| c.reinvited).count();
        r.failed = self.callers.iter().filter(|c| c.failed).count();
        r.unfinished = self.callers.iter().filter(|c| !c.done).count();
        r.dating_sessions_left = self.dating_store.live_sessions();
        r.media_sessions_left = self.media_store.live_sessions();
        r.setup_ms.sort_unstable();
        Ok(self.report)
    }

    /// Virtual seconds since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn wake(&mut self, at: Instant, caller: usize, what: Wake) {
        self.wake_seq += 1;
        self.wakes.push(Reverse((at, self.wake_seq, caller, what)));
    }

    fn step(&mut self) -> Result<bool, SimError> {
        self.step_until(self.now + Duration::from_secs(3600))
    }

    /// Delivers one datagram, or moves the clock to the next deadline (not past `end`) and
    /// fires what is due; false when nothing is left before `end`.
    fn step_until(&mut self, end: Instant) -> Result<bool, SimError> {
        if let Some(d) = self.queue.pop_front() {
            self.deliver(d)?;
            return Ok(true);
        }
        let next = [self.dating.next_deadline(), self.media.next_deadline(), self.wakes.peek().map(|Reverse((t, ..))| *t)]
            .into_iter()
            .flatten()
            .min()
            .filter(|t| *t <= end);
        let Some(next) = next else { return Ok(false) };
        self.now = self.now.max(next);
        let now = self.now;
        if self.dating.next_deadline().is_some_and(|d| d <= now) {
            dating_core_timeout(&mut self.dating, now);
            self.collect_dating();
        }
        if self.media.next_deadline().is_some_and(|d| d <= now) {
            self.media.on_timeout(now);
            self.collect_media();
        }
        while let Some(Reverse((t, _, caller, what))) = self.wakes.peek().copied() {
            if t > now {
                break;
            }
            self.wakes.pop();
            self.on_wake(caller, what);
        }
        Ok(true)
    }

    fn collect_dating(&mut self) {
        while let Some((to, bytes)) = dating_core_transmit(&mut self.dating) {
            self.report.dating_sent += 1;
            self.queue.push_back(Datagram { from: DATING, to, bytes });
        }
    }

    fn collect_media(&mut self) {
        while let Some(t) = self.media.poll_transmit() {
            self.queue.push_back(Datagram { from: MEDIA, to: t.flow.remote, bytes: t.payload });
        }
    }

    fn deliver(&mut self, d: Datagram) -> Result<(), SimError> {
        if self.trace {
            let first = d.bytes.split(|b| *b == b'\r').next().unwrap_or_default();
            let defect =
                parse(d.bytes.clone(), "trace").ok().and_then(|m| m.defect()).map(|x| format!(" (defect: {} {})", x.status, x.reason));
            eprintln!(
                "{:>9.3} {} -> {} {}{}",
                self.elapsed().as_secs_f64(),
                d.from,
                d.to,
                String::from_utf8_lossy(first),
                defect.unwrap_or_default()
            );
        }
        if d.to == DATING {
            self.report.dating_messages += 1;
            dating_core_message(&mut self.dating, self.now, d.bytes, d.from)?;
            self.collect_dating();
        } else if d.to == MEDIA {
            let msg = parse(d.bytes, "the dating service")?;
            self.media.on_message(self.now, msg, flow(d.from));
            self.collect_media();
        } else {
            let index = usize::from(d.to.port().wrapping_sub(CALLER_BASE));
            if index < self.callers.len() {
                let msg = parse(d.bytes, "the dating service")?;
                self.on_caller_message(index, &msg);
            }
        }
        Ok(())
    }

    fn send(&mut self, from: usize, bytes: Bytes) {
        let from = self.callers[from].addr();
        self.queue.push_back(Datagram { from, to: DATING, bytes });
    }

    fn on_wake(&mut self, i: usize, what: Wake) {
        match what {
            Wake::Start => {
                let now = self.now;
                let c = &mut self.callers[i];
                c.started = Some(now);
                let branch = c.branch();
                c.invite_branch = branch.clone();
                let invite = c.request("INVITE", &branch, 1, Some(SDP));
                self.send(i, invite);
            }
            Wake::Hangup(generation) => {
                let c = &mut self.callers[i];
                if c.done || c.bye_sent || c.hangup_gen != generation {
                    return;
                }
                self.hang_up(i);
            }
        }
    }

    fn hang_up(&mut self, i: usize) {
        let c = &mut self.callers[i];
        c.bye_sent = true;
        let branch = c.branch();
        let bye = c.request("BYE", &branch, 2, None);
        self.send(i, bye);
    }

    fn arm_hangup(&mut self, i: usize, after: Duration) {
        let c = &mut self.callers[i];
        c.hangup_gen += 1;
        let generation = c.hangup_gen;
        self.wake(self.now + after, i, Wake::Hangup(generation));
    }

    /// The caller's side of the bench scenarios (`bench/dating/scenarios/*.xml`).
    fn on_caller_message(&mut self, i: usize, msg: &Message) {
        let now = self.now;
        if let Some(status) = msg.status() {
            let Some(method) = msg.cseq().map(|c| c.method.clone()) else { return };
            match method {
                Method::Invite if status >= 200 => {
                    let c = &mut self.callers[i];
                    c.to_tag = msg.to_tag().map(str::to_string);
                    if status >= 300 {
                        // Acknowledged in its transaction (the INVITE's branch).
                        let branch = c.invite_branch.clone();
                        let ack = c.request("ACK", &branch, 1, None);
                        if !c.done {
                            c.failed = true;
                            c.done = true;
                        }
                        self.send(i, ack);
                        return;
                    }
                    let first = !c.answered;
                    c.answered = true;
                    if first {
                        let started = c.started.unwrap_or(now);
                        self.report.setup_ms.push((now - started).as_millis() as u64);
                    }
                    let branch = c.branch();
                    let ack = c.request("ACK", &branch, 1, None);
                    let profile = c.profile;
                    self.send(i, ack);
                    if first {
                        match profile {
                            Profile::EarlyBye => self.hang_up(i),
                            // Never paired within 20 s: hang up (the bench scenario's "unpaired").
                            Profile::Complete => self.arm_hangup(i, Duration::from_secs(20)),
                        }
                    }
                }
                Method::Bye if status >= 200 => {
                    let c = &mut self.callers[i];
                    if !c.done {
                        c.done = true;
                        c.completed = true;
                    }
                }
                _ => {}
            }
            return;
        }
        match msg.method() {
            Some(Method::Invite) => {
                // Paired: the peer's SDP; answered with ours, talk once acknowledged.
                self.callers[i].reinvited = true;
                let ok = self.callers[i].respond(msg, Some(SDP));
                self.send(i, ok);
            }
            Some(Method::Ack) => {
                let c = &mut self.callers[i];
                if c.reinvited && !c.talking && !c.done {
                    c.talking = true;
                    self.arm_hangup(i, Duration::from_secs(2));
                }
            }
            Some(Method::Bye) => {
                let ok = self.callers[i].respond(msg, None);
                self.send(i, ok);
                let c = &mut self.callers[i];
                if !c.done {
                    c.done = true;
                    c.completed = true;
                }
            }
            Some(_) => {
                let ok = self.callers[i].respond(msg, None);
                self.send(i, ok);
            }
            None => {}
        }
    }
}

/// Builds and runs one simulation.
pub fn simulate(config: &SimConfig) -> Result<Report, SimError> {
    Sim::new(config)?.run(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(service: &str, calls: usize) -> Report {
        let config = SimConfig { service: service.into(), calls, ..SimConfig::default() };
        match simulate(&config) {
            Ok(r) => r,
            Err(e) => panic!("{service}: {e}"),
        }
    }

    /// Both versions play the workload to its end: every call completes its profile, every
    /// Complete caller is paired, every session of both cores ends, and both versions
    /// exchange the same messages.
    #[test]
    fn both_versions_complete_every_call_and_agree_on_the_messages() {
        let compiled = run("dating_compiled", 20);
        let manual = run("dating_manual", 20);
        for r in [&compiled, &manual] {
            assert_eq!(r.calls, 60);
            assert_eq!(r.completed, 60, "{r:?}");
            assert_eq!(r.paired, 40, "{r:?}");
            assert_eq!((r.failed, r.unfinished), (0, 0), "{r:?}");
            assert_eq!((r.dating_sessions_left, r.media_sessions_left), (0, 0), "{r:?}");
            assert_eq!(r.setup_ms.len(), 60);
        }
        assert_eq!((compiled.dating_messages, compiled.dating_sent), (manual.dating_messages, manual.dating_sent));
        // Complete: INVITE, 200 (media), ACK, MESSAGE, 200 (re-INVITE), ACK... at least six
        // per call; an Early Bye call fewer.
        assert!(compiled.dating_messages >= 6 * 40 + 4 * 20, "{compiled:?}");
    }

    /// Same input, same run: what the instruction counts rely on.
    #[test]
    fn a_run_is_repeatable() {
        assert_eq!(run("dating_compiled", 10), run("dating_compiled", 10));
    }

    #[test]
    fn more_calls_than_ports_are_refused() {
        let config = SimConfig { calls: 20_000, ..SimConfig::default() };
        assert!(matches!(simulate(&config), Err(SimError::TooManyCalls(60_000, _))));
    }

    #[test]
    fn a_rate_that_is_not_positive_is_refused() {
        for rate in [0.0, -1.0, f64::NAN] {
            let config = SimConfig { rate, ..SimConfig::default() };
            assert!(matches!(simulate(&config), Err(SimError::Rate(_))), "{rate}");
        }
    }

    #[test]
    fn an_unknown_service_is_refused() {
        let config = SimConfig { service: "dating_nope".into(), ..SimConfig::default() };
        assert!(matches!(Sim::new(&config), Err(SimError::UnknownService(_))));
    }
}
