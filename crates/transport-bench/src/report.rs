//! bench/results/transports.json and transports.md.

use crate::stats::{median, Samples, Summary};
use crate::transports::TRANSPORTS;
use crate::{Plan, Results};
use serde::Serialize;
use std::fmt::Write;

const OVERHEAD_GOAL: f64 = 0.05;
const INPROCESS_GOAL: f64 = 10.0;

pub const METHOD: &str = "Endpoints A (client) and B (server) run in one process, each a tandem_transport::Transports on \
127.0.0.1 with an ephemeral port (in-process: named inproc:127.0.0.1:1 for B and a fresh name per endpoint A, all in one \
InProcessHub; nothing is bound). A sends a MESSAGE padded with a text body to the size; B's Sink answers with a 200 OK of the \
same size on the received flow via its own Transports::send; A's Sink hands the response to the waiting session over a tokio \
mpsc channel. Each exchange's round trip is timed with std::time::Instant. A session is n sequential exchanges from a fresh \
endpoint A: over a new connection for TCP and TLS (opened by the first send, so its set-up and handshake count in the first \
exchange), over a new WebSocket connection for WS and WSS (connect, TLS handshake for WSS and the upgrade with the sip \
subprotocol in the first exchange), over one socket for UDP; in-process, a fresh endpoint A per session (the message buffer \
is handed to the other endpoint's sink on the sender's thread: no set-up, no socket). The raw baseline does the same exchange \
with plain tokio sockets (UdpSocket send_to / recv_from; TcpStream; tokio-rustls with the same rustls configurations; \
tokio-tungstenite with the same WebSocketConfig, the sip subprotocol and one text message per SIP message, on TcpStream or \
tokio-rustls) and the same bytes, and the same SIP work: each received message is copied out of the receive buffer, framed \
(TCP and TLS: frame_stream, end of headers and Content-Length; WebSocket: one message is one SIP message) and parsed once \
with tandem_sip, and checked as Tandem's endpoints check it; the raw client works its socket from the session's task, the raw \
server runs one task per socket. The difference is the abstraction: reader and writer tasks, write queues, the connection \
registry, the idle timer, Sink dispatch and the hand-over to the waiting task. Raw and Tandem sessions alternate, session by \
session, within every round (which goes first alternates too), after one discarded warm-up round. overhead = Tandem p50 / raw p50 \
- 1 over all rounds' exchanges. In-process has no raw baseline (there is no socket); it is compared with Tandem over TCP \
(TCP p50 / in-process p50). Throughput is exchanges over the summed session durations, one exchange in flight.";

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub rustc: String,
    pub date: String,
    pub git_commit: String,
    pub load_average_at_start: String,
}

fn command(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

impl Machine {
    pub fn describe() -> Machine {
        let lscpu = command("lscpu", &[]);
        let cpu_model = lscpu
            .lines()
            .find_map(|l| l.strip_prefix("Model name:"))
            .map(|m| m.trim().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        Machine {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: command("uname", &["-r"]),
            rustc: command("rustc", &["--version"]),
            date: command("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
            git_commit: command("git", &["rev-parse", "--short", "HEAD"]),
            load_average_at_start: std::fs::read_to_string("/proc/loadavg").map(|s| s.trim().to_string()).unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub size_bytes: usize,
    pub session_length: usize,
    pub sessions_per_round: usize,
    pub tandem: Summary,
    pub raw: Option<Summary>,
    /// Tandem p50 / raw p50 − 1, all rounds pooled.
    pub overhead: Option<f64>,
    /// Tandem p50 − raw p50, µs.
    pub overhead_us: Option<f64>,
    /// The same, round by round (how much the noise moves it).
    pub overhead_by_round: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TransportReport {
    pub name: &'static str,
    pub measured: bool,
    /// A stream transport: a new connection per session.
    pub stream: bool,
    pub note: &'static str,
    pub raw_baseline: Option<String>,
    pub results: Vec<Row>,
}

/// TCP p50 / in-process p50 for one size and session length.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub size_bytes: usize,
    pub session_length: usize,
    pub tcp_p50_us: f64,
    pub in_process_p50_us: f64,
    pub ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Goals {
    pub abstraction_overhead_max: f64,
    pub abstraction_overhead_met: bool,
    pub inprocess_vs_tcp_min: f64,
    pub inprocess_vs_tcp_met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub command: String,
    pub machine: Machine,
    pub plan: Plan,
    pub method: &'static str,
    /// The headline: median of the per-(transport, size) overheads over UDP, TCP and TLS at
    /// the longest session length (the definition of the first version of this benchmark).
    pub abstraction_overhead: Option<f64>,
    pub abstraction_overhead_definition: String,
    pub abstraction_overhead_worst: Option<f64>,
    /// The same median over UDP, TCP, TLS, WS and WSS (not the headline).
    pub abstraction_overhead_with_ws: Option<f64>,
    pub abstraction_overhead_with_ws_worst: Option<f64>,
    /// Median over transports and sizes, per session length.
    pub abstraction_overhead_by_session_length: Vec<(usize, Option<f64>)>,
    /// Median over sizes at the longest session length, per transport.
    pub abstraction_overhead_by_transport: Vec<(&'static str, Option<f64>)>,
    /// TCP p50 / in-process p50 (Tandem both) at the largest size and longest session; null
    /// when either was not measured.
    pub inprocess_vs_tcp_largest: Option<f64>,
    pub inprocess_vs_tcp_note: String,
    /// The same ratio per size, at every session length.
    pub inprocess_vs_tcp_by_size: Vec<Ratio>,
    pub goals: Goals,
    pub server_errors: u64,
    pub wall_seconds: f64,
    pub transports: Vec<TransportReport>,
}

fn p50_ratio(a: &Summary, b: &Summary) -> Option<f64> {
    (a.exchanges > 0 && b.exchanges > 0 && b.p50_us > 0.0).then(|| round4(a.p50_us / b.p50_us))
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn pooled(rounds: &[Samples]) -> Samples {
    let mut all = Samples::default();
    for s in rounds {
        all.extend(s);
    }
    all
}

impl Report {
    pub fn build(plan: &Plan, results: &Results, machine: Machine) -> Report {
        let mut transports = Vec::new();
        for (index, entry) in TRANSPORTS.iter().enumerate() {
            let mut rows = Vec::new();
            for (key, m) in results.measured.range(crate::Key { transport: index, size: 0, length: 0 }..) {
                if key.transport != index {
                    break;
                }
                let tandem = pooled(&m.tandem).summary();
                let raw = (!m.raw.is_empty()).then(|| pooled(&m.raw).summary());
                let overhead = raw.as_ref().and_then(|r| p50_ratio(&tandem, r)).map(|x| round4(x - 1.0));
                let overhead_us = raw.as_ref().map(|r| ((tandem.p50_us - r.p50_us) * 10.0).round() / 10.0);
                let overhead_by_round = m
                    .tandem
                    .iter()
                    .zip(&m.raw)
                    .filter_map(|(t, r)| p50_ratio(&t.summary(), &r.summary()))
                    .map(|x| round4(x - 1.0))
                    .collect();
                rows.push(Row {
                    size_bytes: key.size,
                    session_length: key.length,
                    sessions_per_round: plan.sessions(key.length),
                    tandem,
                    raw,
                    overhead,
                    overhead_us,
                    overhead_by_round,
                });
            }
            let measured = plan.transports.contains(&entry.name);
            let note = if entry.listen.is_some() && !measured { "not selected for this run" } else { entry.note };
            let raw_baseline = entry.raw.map(|r| format!("{r:?}").to_lowercase());
            transports.push(TransportReport { name: entry.name, measured, stream: entry.stream, note, raw_baseline, results: rows });
        }

        let longest = plan.session_lengths.iter().copied().max().unwrap_or(1);
        const HEADLINE: &[&str] = &["udp", "tcp", "tls"];
        const WITH_WS: &[&str] = &["udp", "tcp", "tls", "ws", "wss"];
        let overheads_of = |names: &[&str], length: usize| -> Vec<f64> {
            transports
                .iter()
                .filter(|t| names.contains(&t.name))
                .flat_map(|t| t.results.iter())
                .filter(|r| r.session_length == length)
                .filter_map(|r| r.overhead)
                .collect()
        };
        let overheads_at = |length: usize| overheads_of(HEADLINE, length);
        let at_longest = overheads_at(longest);
        let abstraction_overhead = median(&at_longest).map(round4);
        let abstraction_overhead_worst = at_longest.iter().copied().reduce(f64::max);
        let with_ws = overheads_of(WITH_WS, longest);
        let abstraction_overhead_with_ws = median(&with_ws).map(round4);
        let abstraction_overhead_with_ws_worst = with_ws.iter().copied().reduce(f64::max).map(round4);
        let by_transport = transports
            .iter()
            .filter(|t| !t.results.is_empty())
            .map(|t| {
                let at: Vec<f64> = t.results.iter().filter(|r| r.session_length == longest).filter_map(|r| r.overhead).collect();
                (t.name, median(&at).map(round4))
            })
            .collect();
        let by_length = plan.session_lengths.iter().map(|&l| (l, median(&overheads_at(l)).map(round4))).collect();

        let largest = plan.sizes.iter().copied().max().unwrap_or(0);
        let p50_of = |name: &str, size: usize, length: usize| {
            transports
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.results.iter().find(|r| r.size_bytes == size && r.session_length == length))
                .map(|r| r.tandem.clone())
        };
        let mut inprocess_vs_tcp_by_size = Vec::new();
        for &length in &plan.session_lengths {
            for &size in &plan.sizes {
                if let (Some(tcp), Some(local)) = (p50_of("tcp", size, length), p50_of("in-process", size, length)) {
                    inprocess_vs_tcp_by_size.push(Ratio {
                        size_bytes: size,
                        session_length: length,
                        tcp_p50_us: tcp.p50_us,
                        in_process_p50_us: local.p50_us,
                        ratio: p50_ratio(&tcp, &local),
                    });
                }
            }
        }
        let inprocess_vs_tcp_largest =
            inprocess_vs_tcp_by_size.iter().find(|r| r.size_bytes == largest && r.session_length == longest).and_then(|r| r.ratio);
        let inprocess_vs_tcp_note = if inprocess_vs_tcp_largest.is_some() {
            format!("TCP p50 / in-process p50, Tandem both, {largest} B, sessions of {longest} exchanges")
        } else {
            "null: TCP and in-process not both measured".to_string()
        };

        Report {
            benchmark: "transport ping-pong (issue 6, after SJ paper section 6.1)",
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine,
            plan: plan.clone(),
            method: METHOD,
            abstraction_overhead,
            abstraction_overhead_definition: format!(
                "median over UDP, TCP and TLS and every size of (Tandem p50 / raw p50 - 1), sessions of {longest} exchanges \
                 (per-exchange cost, connection set-up amortised); abstraction_overhead_worst is the largest of them"
            ),
            abstraction_overhead_worst: abstraction_overhead_worst.map(round4),
            abstraction_overhead_with_ws,
            abstraction_overhead_with_ws_worst,
            abstraction_overhead_by_session_length: by_length,
            abstraction_overhead_by_transport: by_transport,
            inprocess_vs_tcp_largest,
            inprocess_vs_tcp_note,
            inprocess_vs_tcp_by_size,
            goals: Goals {
                abstraction_overhead_max: OVERHEAD_GOAL,
                abstraction_overhead_met: abstraction_overhead.is_some_and(|o| o <= OVERHEAD_GOAL),
                inprocess_vs_tcp_min: INPROCESS_GOAL,
                inprocess_vs_tcp_met: inprocess_vs_tcp_largest.map(|r| r >= INPROCESS_GOAL),
            },
            server_errors: results.server_errors,
            wall_seconds: (results.wall_seconds * 10.0).round() / 10.0,
            transports,
        }
    }

    pub fn failed_sessions(&self) -> usize {
        self.transports
            .iter()
            .flat_map(|t| &t.results)
            .map(|r| r.tandem.failed_sessions + r.raw.as_ref().map_or(0, |s| s.failed_sessions))
            .sum()
    }

    pub fn markdown(&self) -> String {
        let pct = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{:+.1} %", x * 100.0));
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(out, "# Transport benchmark: SIP ping-pong per transport, Tandem vs raw tokio\n");
        let _ = writeln!(out, "`{}` — {}\n", self.command, m.date);
        let _ = writeln!(
            out,
            "Machine: {} ({} cores), kernel {}, {}, {}; load average at start {}; commit {}.\n",
            m.cpu_model, m.cores, m.kernel, m.rustc, self.plan.runtime, m.load_average_at_start, m.git_commit
        );
        let _ = writeln!(
            out,
            "Plan: sizes {:?} B, session lengths {:?}, {} rounds (+1 warm-up), up to {} exchanges and {} sessions per round per cell and implementation; run took {:.1} s.\n",
            self.plan.sizes, self.plan.session_lengths, self.plan.rounds, self.plan.exchanges, self.plan.max_sessions, self.wall_seconds
        );
        let _ = writeln!(out, "## Summary\n");
        let _ = writeln!(
            out,
            "- **Abstraction overhead (headline): {}** ({}; goal ≤ {:.0} %: {}). Worst cell: {}.",
            pct(self.abstraction_overhead),
            self.abstraction_overhead_definition,
            self.goals.abstraction_overhead_max * 100.0,
            if self.goals.abstraction_overhead_met { "met" } else { "not met" },
            pct(self.abstraction_overhead_worst)
        );
        let _ = writeln!(
            out,
            "- Abstraction overhead with WS and WSS included (median over UDP, TCP, TLS, WS and WSS, same session length; not the headline): {}. Worst cell: {}.",
            pct(self.abstraction_overhead_with_ws),
            pct(self.abstraction_overhead_with_ws_worst)
        );
        let by: Vec<String> = self.abstraction_overhead_by_session_length.iter().map(|(l, o)| format!("{l}: {}", pct(*o))).collect();
        let _ = writeln!(out, "- Median overhead (UDP, TCP, TLS) by session length: {}.", by.join(", "));
        let by: Vec<String> = self.abstraction_overhead_by_transport.iter().map(|(t, o)| format!("{t}: {}", pct(*o))).collect();
        let _ = writeln!(out, "- Median overhead by transport (longest sessions): {}.", by.join(", "));
        let _ = writeln!(
            out,
            "- **In-process vs TCP at the largest size: {}** ({}; goal ≥ {:.0}×: {}).",
            self.inprocess_vs_tcp_largest.map_or_else(|| "—".to_string(), |r| format!("{r:.1}×")),
            self.inprocess_vs_tcp_note,
            self.goals.inprocess_vs_tcp_min,
            match self.goals.inprocess_vs_tcp_met {
                Some(true) => "met",
                Some(false) => "not met",
                None => "not measured",
            }
        );
        if !self.inprocess_vs_tcp_by_size.is_empty() {
            let mut lengths: Vec<usize> = self.inprocess_vs_tcp_by_size.iter().map(|r| r.session_length).collect();
            lengths.dedup();
            for length in lengths {
                let by: Vec<String> = self
                    .inprocess_vs_tcp_by_size
                    .iter()
                    .filter(|r| r.session_length == length)
                    .map(|r| {
                        format!(
                            "{} B {} ({:.1} / {:.1} µs)",
                            r.size_bytes,
                            r.ratio.map_or("—".to_string(), |x| format!("{x:.1}×")),
                            r.tcp_p50_us,
                            r.in_process_p50_us
                        )
                    })
                    .collect();
                let _ = writeln!(out, "  - sessions of {length}: {}.", by.join(", "));
            }
        }
        let _ = writeln!(out, "- Failed sessions: {}; server-side errors: {}.\n", self.failed_sessions(), self.server_errors);
        let _ = writeln!(out, "## Method\n\n{}\n", self.method);
        let _ = writeln!(out, "## Results\n");
        let _ = writeln!(out, "Latency is per exchange (round trip) in µs; the first exchange of a TCP, TLS, WS or WSS session includes connecting (and the TLS handshake, the WebSocket upgrade). Overhead = Tandem p50 / raw p50 − 1 (and Tandem p50 − raw p50 in µs); the range is the overhead round by round.\n");
        let _ = writeln!(
            out,
            "| transport | size B | session | exchanges | Tandem p50 | p95 | p99 | exch/s | raw p50 | p95 | p99 | exch/s | overhead | µs | by round |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for t in &self.transports {
            if !t.measured {
                let _ = writeln!(out, "| {} | — | — | — | {} | | | | | | | | | | |", t.name, t.note);
                continue;
            }
            for r in &t.results {
                let (rp50, rp95, rp99, rtp) = r.raw.as_ref().map_or(("—".into(), "—".into(), "—".into(), "—".into()), |s| {
                    (
                        format!("{:.1}", s.p50_us),
                        format!("{:.1}", s.p95_us),
                        format!("{:.1}", s.p99_us),
                        format!("{:.0}", s.exchanges_per_s),
                    )
                });
                let range =
                    match (r.overhead_by_round.iter().copied().reduce(f64::min), r.overhead_by_round.iter().copied().reduce(f64::max)) {
                        (Some(lo), Some(hi)) if r.overhead_by_round.len() > 1 => format!("{:+.0} … {:+.0} %", lo * 100.0, hi * 100.0),
                        _ => String::new(),
                    };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
                    t.name,
                    r.size_bytes,
                    r.session_length,
                    r.tandem.exchanges,
                    r.tandem.p50_us,
                    r.tandem.p95_us,
                    r.tandem.p99_us,
                    r.tandem.exchanges_per_s,
                    rp50,
                    rp95,
                    rp99,
                    rtp,
                    pct(r.overhead),
                    r.overhead_us.map_or(String::new(), |us| format!("{us:+.1}")),
                    range
                );
            }
        }
        out
    }
}
