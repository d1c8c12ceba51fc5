//! `transport-bench`: the transport micro benchmark of issue 6, after §6.1 of the SJ paper on
//! transport-independent sessions (../shared/papers/): SIP ping-pong between two Tandem
//! endpoints in one process, over each transport, for several message sizes and session
//! lengths, side by side with the same exchange on raw tokio sockets.
//!
//! Endpoint B binds `tandem_transport::Transports` on 127.0.0.1 (ephemeral port); its `Sink`
//! answers every request with a 200 OK of the same size on the flow it came on. Each session
//! binds a fresh endpoint A that sends a MESSAGE padded to the size and waits (channel from
//! its `Sink`) for the response, `n` times in sequence: over one new connection for stream
//! transports (its set-up is in the first exchange), over one socket for UDP. The raw
//! baseline (see `raw.rs`) does the same SIP work (copy, frame, parse with `tandem_sip`,
//! check) with the same bytes, without the abstraction. Raw and Tandem sessions alternate,
//! session by session, in every round, so a noisy machine hurts both alike.
//!
//! Writes `<out-dir>/transports.json` and `transports.md` (`transports-quick.*` with
//! `--quick`).
#![forbid(unsafe_code)]

mod message;
mod pki;
mod raw;
mod report;
mod stats;
mod tandem;
mod transports;

use anyhow::Context;
use clap::Parser;
use stats::Samples;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use transports::{Entry, TRANSPORTS};

#[derive(Parser, Debug, Clone)]
#[command(name = "transport-bench", about = "SIP ping-pong between two Tandem endpoints per transport, against raw tokio sockets")]
pub struct Cli {
    /// A run of a few seconds (smoke test): one round, 300 B and 60 KiB, sessions of 1, 10 and
    /// 100; writes transports-quick.{json,md}.
    #[arg(long)]
    quick: bool,
    /// Transports to measure (default: all that tandem-transport has).
    #[arg(long, value_delimiter = ',')]
    transports: Vec<String>,
    /// Message sizes in bytes (request and response alike).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Session lengths: exchanges per session.
    #[arg(long, value_delimiter = ',')]
    session_lengths: Vec<usize>,
    /// Measured rounds (each preceded, once, by a discarded warm-up round).
    #[arg(long)]
    rounds: Option<usize>,
    /// Exchanges per round for each (transport, size, session length) and implementation:
    /// sessions = this / session length, at least 1, at most --max-sessions.
    #[arg(long)]
    exchanges: Option<usize>,
    /// Most sessions per round for each (transport, size, session length) and implementation.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Run both endpoints on a current-thread runtime instead of the multi-thread one.
    #[arg(long)]
    current_thread: bool,
    /// Worker threads of the multi-thread runtime (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Where the results go.
    #[arg(long, default_value = "bench/results")]
    out_dir: PathBuf,
    /// Output file name stem (default: transports, or transports-quick with --quick).
    #[arg(long)]
    name: Option<String>,
}

/// What a run measures, from the command line and the defaults.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub transports: Vec<&'static str>,
    pub sizes: Vec<usize>,
    pub session_lengths: Vec<usize>,
    pub rounds: usize,
    pub exchanges: usize,
    pub max_sessions: usize,
    pub runtime: String,
}

impl Plan {
    fn from_cli(cli: &Cli) -> anyhow::Result<Plan> {
        let pick = |given: &Vec<usize>, full: &[usize], quick: &[usize]| {
            if !given.is_empty() {
                given.clone()
            } else if cli.quick {
                quick.to_vec()
            } else {
                full.to_vec()
            }
        };
        let transports = if cli.transports.is_empty() {
            TRANSPORTS.iter().filter(|e| e.listen.is_some()).map(|e| e.name).collect()
        } else {
            let mut names = Vec::new();
            for name in &cli.transports {
                let entry = transports::by_name(name).with_context(|| format!("unknown transport {name}"))?;
                anyhow::ensure!(entry.listen.is_some(), "transport {}: {}", entry.name, entry.note);
                names.push(entry.name);
            }
            names
        };
        let workers = cli.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        Ok(Plan {
            transports,
            sizes: pick(&cli.sizes, &[300, 1024, 4096, 16_384, 61_440], &[300, 61_440]),
            session_lengths: pick(&cli.session_lengths, &[1, 10, 100, 1000], &[1, 10, 100]),
            rounds: cli.rounds.unwrap_or(if cli.quick { 1 } else { 10 }),
            exchanges: cli.exchanges.unwrap_or(if cli.quick { 100 } else { 2000 }),
            max_sessions: cli.max_sessions.unwrap_or(if cli.quick { 20 } else { 100 }),
            runtime: if cli.current_thread { "tokio current-thread".to_string() } else { format!("tokio multi-thread, {workers} workers") },
        })
    }

    pub fn sessions(&self, length: usize) -> usize {
        (self.exchanges / length.max(1)).clamp(1, self.max_sessions.max(1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub transport: usize,
    pub size: usize,
    pub length: usize,
}

/// Per (transport, size, session length): each round's samples, Tandem and raw.
#[derive(Debug, Default)]
pub struct Measured {
    pub tandem: Vec<Samples>,
    pub raw: Vec<Samples>,
}

pub struct Results {
    pub measured: BTreeMap<Key, Measured>,
    pub server_errors: u64,
    pub wall_seconds: f64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let plan = Plan::from_cli(&cli)?;
    let runtime = if cli.current_thread {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        let workers = cli.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()?
    };
    let machine = report::Machine::describe();
    let started = Instant::now();
    let mut results = runtime.block_on(run(&plan))?;
    results.wall_seconds = started.elapsed().as_secs_f64();
    let report = report::Report::build(&plan, &results, machine);
    let stem = cli.name.clone().unwrap_or_else(|| if cli.quick { "transports-quick".into() } else { "transports".into() });
    std::fs::create_dir_all(&cli.out_dir).with_context(|| format!("creating {}", cli.out_dir.display()))?;
    let json = cli.out_dir.join(format!("{stem}.json"));
    let md = cli.out_dir.join(format!("{stem}.md"));
    std::fs::write(&json, serde_json::to_string_pretty(&report)? + "\n").with_context(|| format!("writing {}", json.display()))?;
    let markdown = report.markdown();
    std::fs::write(&md, &markdown).with_context(|| format!("writing {}", md.display()))?;
    println!("{markdown}");
    eprintln!("wrote {} and {} in {:.1} s", json.display(), md.display(), results.wall_seconds);
    anyhow::ensure!(report.failed_sessions() == 0, "{} sessions failed", report.failed_sessions());
    Ok(())
}

async fn run(plan: &Plan) -> anyhow::Result<Results> {
    let pki = pki::Pki::generate()?;
    let mut results = Results { measured: BTreeMap::new(), server_errors: 0, wall_seconds: 0.0 };
    let warmup = Plan { exchanges: (plan.exchanges / 10).max(10), max_sessions: (plan.max_sessions / 10).max(2), ..plan.clone() };
    let mut discarded = Results { measured: BTreeMap::new(), server_errors: 0, wall_seconds: 0.0 };
    eprintln!("warm-up round");
    round(&warmup, 0, &pki, &mut discarded).await?;
    for r in 0..plan.rounds {
        eprintln!("round {}/{}", r + 1, plan.rounds);
        round(plan, r, &pki, &mut results).await?;
    }
    results.server_errors += discarded.server_errors;
    Ok(results)
}

#[derive(Clone, Copy)]
enum Side {
    Tandem,
    Raw,
}

async fn round(plan: &Plan, r: usize, pki: &pki::Pki, results: &mut Results) -> anyhow::Result<()> {
    for name in &plan.transports {
        let (index, entry) = TRANSPORTS.iter().enumerate().find(|(_, e)| e.name == *name).expect("planned transport in table");
        for &size in plan.sizes.iter().filter(|s| **s <= entry.max_size) {
            measure(plan, r, pki, index, entry, size, results).await?;
        }
    }
    Ok(())
}

async fn measure(
    plan: &Plan,
    r: usize,
    pki: &pki::Pki,
    index: usize,
    entry: &Entry,
    size: usize,
    results: &mut Results,
) -> anyhow::Result<()> {
    let spec = entry.spec().expect("measured transports have a listen spec");
    let msgs = message::Messages::new(size, spec.protocol.transport().as_str());
    let mut config = tandem::config(pki.tls_config());
    if spec.protocol == tandem_transport::Protocol::InProc {
        // One hub per cell, shared by B and every endpoint A.
        config.in_process = Some(tandem_transport::InProcessHub::new());
    }
    let tandem_server = tandem::Server::start(spec, config.clone(), msgs.response.clone()).await?;
    let raw_server = match entry.raw {
        Some(kind) => Some((raw::Client::new(kind).await?, raw::Server::start(kind, msgs.response.clone(), pki).await?)),
        None => None,
    };
    // A datagram transport keeps one endpoint A for all its sessions; a stream transport binds a
    // fresh one per session (a new connection each time). Tandem's UDP send is a non-blocking
    // `try_send_to`, which fails (the datagram is dropped, as UDP may) until the runtime has
    // seen the new socket writable: let A's socket settle before the first session.
    let mut shared_client = None;
    if !entry.stream {
        shared_client = Some(tandem::Client::bind(entry.client_spec().expect("listen spec"), config.clone(), tandem_server.addr).await?);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for &length in &plan.session_lengths {
        let (mut tandem_samples, mut raw_samples) = (Samples::default(), Samples::default());
        for s in 0..plan.sessions(length) {
            let order = if (r + s).is_multiple_of(2) { [Side::Raw, Side::Tandem] } else { [Side::Tandem, Side::Raw] };
            for side in order {
                match side {
                    Side::Tandem => {
                        let outcome = match shared_client.as_mut() {
                            Some(client) => client.session(&msgs.request, length).await,
                            None => fresh_session(entry, &config, tandem_server.addr, &msgs.request, length).await,
                        };
                        record(&mut tandem_samples, outcome, entry.name, "tandem");
                    }
                    Side::Raw => {
                        if let Some((client, server)) = &raw_server {
                            let outcome = client.session(server.addr, pki, &msgs.request, length).await;
                            record(&mut raw_samples, outcome, entry.name, "raw");
                        }
                    }
                }
            }
        }
        let (t, w) = (tandem_samples.summary(), raw_samples.summary());
        let raw_p50 = if raw_server.is_some() { format!("{:>8.1} µs", w.p50_us) } else { format!("{:>11}", "—") };
        eprintln!(
            "  {:<10} {:>6} B  n={:<4} tandem p50 {:>8.1} µs  raw p50 {raw_p50}  ({} + {} exchanges)",
            entry.name, size, length, t.p50_us, t.exchanges, w.exchanges
        );
        let m = results.measured.entry(Key { transport: index, size, length }).or_default();
        m.tandem.push(tandem_samples);
        if raw_server.is_some() {
            m.raw.push(raw_samples);
        }
    }
    if let Some(client) = shared_client {
        client.shutdown();
    }
    results.server_errors += tandem_server.errors() + raw_server.as_ref().map_or(0, |(_, s)| s.errors());
    tandem_server.shutdown();
    if let Some((_, server)) = raw_server {
        server.shutdown();
    }
    Ok(())
}

/// A session from a fresh endpoint A (a new connection; in-process: a new name in the hub).
async fn fresh_session(
    entry: &Entry,
    config: &tandem_transport::TransportConfig,
    server: std::net::SocketAddr,
    request: &bytes::Bytes,
    length: usize,
) -> anyhow::Result<(Vec<u64>, std::time::Duration)> {
    let spec = entry.client_spec().expect("measured transports have a listen spec");
    let mut client = tandem::Client::bind(spec, config.clone(), server).await?;
    let outcome = client.session(request, length).await;
    client.shutdown();
    outcome
}

fn record(samples: &mut Samples, outcome: anyhow::Result<(Vec<u64>, std::time::Duration)>, transport: &str, side: &str) {
    match outcome {
        Ok((latencies, busy)) => {
            samples.latencies_ns.extend(latencies);
            samples.busy += busy;
            samples.sessions += 1;
        }
        Err(e) => {
            samples.failed_sessions += 1;
            eprintln!("  {transport} {side} session failed: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every measured transport, both implementations, a few exchanges: the smoke test of the
    /// benchmark itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_transport_exchanges() {
        let plan = Plan {
            transports: TRANSPORTS.iter().filter(|e| e.listen.is_some()).map(|e| e.name).collect(),
            sizes: vec![300, 61_440],
            session_lengths: vec![1, 3],
            rounds: 1,
            exchanges: 3,
            max_sessions: 2,
            runtime: "test".into(),
        };
        let pki = pki::Pki::generate().unwrap();
        let mut results = Results { measured: BTreeMap::new(), server_errors: 0, wall_seconds: 0.0 };
        round(&plan, 0, &pki, &mut results).await.unwrap();
        assert_eq!(results.server_errors, 0);
        assert_eq!(results.measured.len(), plan.transports.len() * 2 * 2);
        for (key, m) in &results.measured {
            let t = m.tandem[0].summary();
            assert_eq!(t.failed_sessions, 0, "{key:?}");
            assert_eq!(t.exchanges, plan.sessions(key.length) * key.length, "{key:?}");
            match TRANSPORTS[key.transport].raw {
                Some(_) => assert_eq!(m.raw[0].summary().exchanges, t.exchanges, "{key:?}"),
                None => assert!(m.raw.is_empty(), "{key:?}"),
            }
        }
    }
}
