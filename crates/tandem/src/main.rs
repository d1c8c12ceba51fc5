//! `tandem`: the SIP application server.
#![forbid(unsafe_code)]

mod admin;
mod cert;
mod config;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use tandem_container::{Container, ContainerSettings, RouteRule, Service};
use tandem_services::{Proxy, Uas};

#[derive(Parser)]
#[command(name = "tandem", version, about = "Tandem SIP application server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (no options: the embedded default configuration on 127.0.0.1:5060).
    Run(RunArgs),
    /// Check a contract file: errors and warnings as file:line:col; exit 1 on errors.
    Check { file: PathBuf },
    /// Database of the B2BUA 1T/2T services: create the schema, seed and set policies, list
    /// billing records.
    Db(DbArgs),
    /// Draw a contract's business machine.
    Diagram {
        file: PathBuf,
        /// dot, mermaid or svg (svg needs Graphviz's `dot`).
        #[arg(long, default_value = "dot")]
        format: String,
        /// Output file (default: standard output).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Write a self-signed development CA, and a certificate and key signed by it, for TLS.
    Cert {
        /// Directory for ca.pem, cert.pem and key.pem (created if missing).
        #[arg(long = "out-dir", value_name = "DIR")]
        out_dir: PathBuf,
        /// A DNS name or IP address the certificate is for; repeatable
        /// (default: localhost, 127.0.0.1, ::1).
        #[arg(long = "host", value_name = "NAME")]
        hosts: Vec<String>,
    },
}

#[derive(clap::Args)]
struct DbArgs {
    #[command(subcommand)]
    action: DbAction,
    /// TOML configuration file (default: the embedded configuration); `database.*` is used.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Override a configuration key, e.g. database.url=postgres://postgres@127.0.0.1/tandem.
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
}

#[derive(Subcommand)]
enum DbAction {
    /// Create the schema (if missing) and seed `database.seed_users`.
    Init,
    /// Give a callee a policy (or replace it).
    Allow {
        user: String,
        /// Longest call allowed, e.g. 90s or 1h.
        #[arg(long, default_value = "1h")]
        max_duration: String,
    },
    /// Remove a callee's policy (its calls get 403; 2T ends its live calls).
    Deny { user: String },
    /// Print billing records as tab-separated lines.
    Billing {
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// TOML configuration file (default: the embedded configuration).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Listen on PROTO:IP:PORT (udp, tcp, tls, ws or wss); repeatable; replaces server.listen.
    #[arg(long = "listen", value_name = "PROTO:IP:PORT")]
    listen: Vec<String>,
    /// Admin endpoint address (metrics, health); replaces server.admin.
    #[arg(long, value_name = "IP:PORT")]
    admin: Option<String>,
    /// Route every initial request to this service (uas, proxy, b2bua_nt, b2bua_1t, b2bua_2t, dating, ...).
    #[arg(long)]
    service: Option<String>,
    /// Override a configuration key, e.g. uas.hold=2s or proxy.next_hop=127.0.0.1:5070.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { file } => std::process::exit(check(&file)?),
        Command::Diagram { file, format, output } => diagram(&file, &format, output.as_deref()),
        Command::Run(args) => serve(args),
        Command::Db(args) => database(args),
        Command::Cert { out_dir, hosts } => cert::write(&out_dir, &hosts),
    }
}

fn database(args: DbArgs) -> Result<()> {
    let config = config::Config::load(args.config.as_deref(), &args.set)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(async {
        let db = tandem_db::Database::connect(&config.database).await?;
        db.create_schema().await?;
        match args.action {
            DbAction::Init => {
                let added = db.seed(&config.database.seed_users, config.database.seed_max_duration).await?;
                println!("schema ready; {added} policy(ies) added");
            }
            DbAction::Allow { user, max_duration } => {
                let d = humantime::parse_duration(&max_duration).with_context(|| format!("--max-duration {max_duration:?}"))?;
                db.set_policy(&user, d).await?;
                println!("{user}: calls allowed, at most {}", humantime::format_duration(d));
            }
            DbAction::Deny { user } => {
                let removed = db.remove_policy(&user).await?;
                println!("{user}: {}", if removed { "policy removed" } else { "had no policy" });
            }
            DbAction::Billing { limit } => {
                println!("call_ref\tcall_id\tcaller\tcallee\tanswered_at_ms\tduration_ms\tended_by");
                for r in db.billing(limit).await? {
                    println!(
                        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                        r.call_ref, r.call_id, r.caller, r.callee, r.answered_at_ms, r.duration_ms, r.ended_by
                    );
                }
            }
        }
        db.close().await;
        Ok::<_, anyhow::Error>(())
    })
}

fn check(file: &std::path::Path) -> Result<i32> {
    let report = tandem_contract::check_file(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = report.render();
    if !text.is_empty() {
        eprint!("{text}");
        if !text.ends_with('\n') {
            eprintln!();
        }
    }
    Ok(if report.has_errors() { 1 } else { 0 })
}

fn diagram(file: &std::path::Path, format: &str, output: Option<&std::path::Path>) -> Result<()> {
    let format: tandem_contract::diagram::Format = format.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (machine, warnings) = tandem_contract::load(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let source = std::fs::read_to_string(file).unwrap_or_default();
    for w in &warnings {
        eprintln!("{}", tandem_contract::render(w, &file.display().to_string(), &source));
    }
    let text = tandem_contract::diagram::render(&machine, format).map_err(|e| anyhow::anyhow!("{e}"))?;
    match output {
        Some(path) => std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

fn serve(args: RunArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let config = load_run_config(&args)?;
    // One thread: tokio's current-thread scheduler, on this thread. The multi-thread one with a
    // single worker parks this thread and hands every wake-up through its shared queues
    // (bench/results/proxy-cpu-ab-runtime.md: 51.8 → 49.9 µs per call).
    let runtime = match config.worker_threads() {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        threads => tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build(),
    }
    .context("starting the runtime")?;
    let result = runtime.block_on(run(args, config));
    // Tasks still parked on sockets need not be waited for: everything is stopped.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}

/// The configuration file (or the embedded default) with the command line's overrides.
fn load_run_config(args: &RunArgs) -> Result<config::Config> {
    let mut sets = args.set.clone();
    if !args.listen.is_empty() {
        let quoted: Vec<String> = args.listen.iter().map(|l| format!("{l:?}")).collect();
        sets.push(format!("server.listen=[{}]", quoted.join(",")));
    }
    if let Some(admin) = &args.admin {
        sets.push(format!("server.admin={admin:?}"));
    }
    config::Config::load(args.config.as_deref(), &sets)
}

async fn run(args: RunArgs, config: config::Config) -> Result<()> {
    let routes = match &args.service {
        Some(name) => vec![RouteRule::catch_all(name)],
        None => config.routes.clone(),
    };
    // One hub per process: every container's `inproc:` listeners register in it.
    let hub = tandem_transport::InProcessHub::new();
    let mut transport = config.transport_config()?;
    transport.in_process = Some(hub.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut running: Vec<(Arc<Container>, Option<tokio::task::JoinHandle<()>>)> = Vec::new();
    // Companions first: the main container's first in-process sends must find them.
    for companion in &config.companions {
        let routes = vec![RouteRule::catch_all(&companion.service)];
        let services = build_services(&config, &routes).await?;
        let settings = ContainerSettings { container: config.container.clone(), routes };
        let listen = config.companion_listen_specs(companion)?;
        let container = Container::start(settings, services, &listen, transport.clone())
            .await
            .with_context(|| format!("starting companion {:?}", companion.service))?;
        let container = Arc::new(container);
        for (protocol, addr) in container.local_addrs() {
            println!("companion {} listening on {}:{addr}", companion.service, protocol.as_str());
        }
        let admin =
            start_admin(companion.admin.as_deref(), &container, &stop_rx, &format!("companion {} admin", companion.service)).await?;
        running.push((container, admin));
    }
    let services = build_services(&config, &routes).await?;
    let settings = ContainerSettings { container: config.container.clone(), routes };
    let listen = config.listen_specs()?;
    let container = Arc::new(Container::start(settings, services, &listen, transport).await?);
    for (protocol, addr) in container.local_addrs() {
        println!("listening on {}:{addr}", protocol.as_str());
    }
    let admin = start_admin(config.server.admin.as_deref(), &container, &stop_rx, "admin").await?;
    println!("services: {}", container.services().join(", "));
    running.insert(0, (container, admin));
    wait_for_signal().await?;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    for (container, admin) in running {
        if let Some(task) = admin {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
        }
        match Arc::try_unwrap(container) {
            Ok(container) => container.shutdown().await,
            Err(_) => tracing::warn!("container still referenced at shutdown"),
        }
    }
    tracing::info!("stopped");
    Ok(())
}

async fn start_admin(
    addr: Option<&str>,
    container: &Arc<Container>,
    stop: &tokio::sync::watch::Receiver<bool>,
    what: &str,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = addr else { return Ok(None) };
    let addr = addr.parse().with_context(|| format!("{what} {addr:?} is not IP:PORT"))?;
    let (local, task) =
        admin::serve(addr, container.clone(), stop.clone()).await.with_context(|| format!("starting the {what} endpoint"))?;
    println!("{what} on http://{local}");
    Ok(Some(task))
}

/// Every service a container can route to, built from the configuration. Each container
/// gets its own instances (and its own registrar bindings).
async fn build_services(config: &config::Config, routes: &[RouteRule]) -> Result<Vec<(String, Arc<dyn Service>)>> {
    // Bindings the registrar makes and the proxy routes with.
    let location = tandem_services::Location::new();
    let mut proxy = Proxy::new(&config.proxy)?.with_location(location.clone());
    match config.dns.resolver() {
        Ok(resolver) => {
            let runtime = tokio::runtime::Handle::current();
            proxy = proxy.with_dns(tandem_services::ProxyDns { resolver, runtime, preferences: config.dns.preferences()? });
        }
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "no DNS resolver: next hops named by host get 503"),
    }
    let pairing = tandem_services::pairing_service(config.negotiator_for("pairing"))?;
    pairing.set_verify_direct(config.engine.verify_direct);
    let dating = tandem_services::dating_service(&config.dating, config.negotiator_for("dating"))?;
    dating.set_verify_direct(config.engine.verify_direct);
    let mut services: Vec<(String, Arc<dyn Service>)> = vec![
        ("uas".to_string(), Arc::new(Uas::new(&config.uas))),
        ("proxy".to_string(), Arc::new(proxy)),
        ("registrar".to_string(), Arc::new(tandem_services::Registrar::new(&config.registrar, location))),
        ("pairing".to_string(), pairing),
        ("dating".to_string(), dating),
        ("dating_manual".to_string(), tandem_services::dating_manual_service(&config.dating)?),
        ("dating_compiled".to_string(), tandem_services::dating_compiled_service(&config.dating)?),
        ("media".to_string(), Arc::new(tandem_services::Media::new(&config.media)?)),
        ("b2bua_nt".to_string(), Arc::new(tandem_services::B2bua::new(&config.b2bua)?)),
    ];
    // The database is opened (schema, seed policies) only when a service that needs it is routed.
    let routed = |name: &str| routes.iter().any(|r| r.service == name);
    if routed("b2bua_1t") || routed("b2bua_2t") {
        let db = tandem_db::Database::open(&config.database).await.context("opening the database (database.url)")?;
        let handle = tokio::runtime::Handle::current();
        for (name, periodic) in [("b2bua_1t", false), ("b2bua_2t", true)] {
            let service = tandem_services::B2bua::with_database(&config.b2bua, db.clone(), handle.clone(), periodic)?;
            services.push((name.to_string(), Arc::new(service)));
        }
    }
    Ok(services)
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
