//! `dating-sim`: one deterministic run of the dating service behind a media service, with
//! scripted callers, on a virtual clock (see the library). Prints what the run did as
//! `key value` lines; exits non-zero if a call did not end as its profile says.

use anyhow::{bail, Result};
use clap::Parser;
use std::time::Duration;
use tandem_dating_sim::{simulate, Profile, SimConfig};

#[derive(Parser)]
#[command(about = "The dating service run deterministically on a virtual clock with scripted callers")]
struct Args {
    /// dating_compiled or dating_manual
    #[arg(long, default_value = "dating_compiled")]
    service: String,
    /// Calls per phase (the phases: Complete, Early Bye, Complete, as bench/dating/workload.sh)
    #[arg(long, default_value_t = 100)]
    calls: usize,
    /// New calls per second within a phase
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print every datagram's first line to stderr
    #[arg(long)]
    trace: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let config = SimConfig {
        service: args.service,
        calls: args.calls,
        rate: args.rate,
        seed: args.seed,
        phases: vec![Profile::Complete, Profile::EarlyBye, Profile::Complete],
        preference_delay: Duration::from_millis(300),
        trace: args.trace,
    };
    let r = simulate(&config)?;
    let pct = |q: f64| r.setup_ms.get(((r.setup_ms.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    println!("service {}", config.service);
    println!("dating_messages {}", r.dating_messages);
    println!("dating_sent {}", r.dating_sent);
    println!("calls {}", r.calls);
    println!("completed {}", r.completed);
    println!("paired {}", r.paired);
    println!("failed {}", r.failed);
    println!("unfinished {}", r.unfinished);
    println!("dating_sessions_left {}", r.dating_sessions_left);
    println!("media_sessions_left {}", r.media_sessions_left);
    println!("setup_ms_p50 {}", pct(0.5));
    println!("setup_ms_p99 {}", pct(0.99));
    if r.completed != r.calls || r.dating_sessions_left != 0 || r.media_sessions_left != 0 {
        bail!("not every call completed or not every session ended");
    }
    Ok(())
}
