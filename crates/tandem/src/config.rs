//! The configuration file: TOML, an embedded default, `--set` overrides.

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;
use std::time::Duration;
use tandem_container::{ContainerConfig, RouteRule};
use tandem_services::{B2buaConfig, DatingConfig, MediaConfig, ProxyConfig, RegistrarConfig, UasConfig};
use tandem_transport::{ListenSpec, Protocol, TlsConfig, TransportConfig};

pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerSection,
    #[serde(default)]
    pub container: ContainerConfig,
    #[serde(default)]
    pub transport: TransportSection,
    #[serde(default)]
    pub tls: TlsSection,
    #[serde(default)]
    pub uas: UasConfig,
    #[serde(default)]
    pub proxy: ProxyConfig,
    #[serde(default)]
    pub registrar: RegistrarConfig,
    #[serde(default)]
    pub dns: DnsSection,
    #[serde(default)]
    pub b2bua: B2buaConfig,
    #[serde(default)]
    pub database: tandem_db::DatabaseConfig,
    #[serde(default)]
    pub dating: DatingConfig,
    #[serde(default)]
    pub media: MediaConfig,
    /// Negotiator per contract service (`ordered`, `single-assign`, `global`); `default`
    /// applies to services not named.
    #[serde(default)]
    pub negotiator: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub engine: EngineSection,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteRule>,
    /// Further containers in this process (`[[companion]]`), each running one service; with
    /// `inproc:` listeners they and the main container talk in-process.
    #[serde(default, rename = "companion")]
    pub companions: Vec<CompanionSection>,
}

/// `[engine]`: checks of the contract engine, for tests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSection {
    /// Check every direct prediction the engine keeps against its general evaluator, under the
    /// locks (`tandem_direct_mismatches_total` counts differences). Each such message is then
    /// evaluated twice.
    pub verify_direct: bool,
}

/// `[[companion]]`: another container in the same process, sharing every other section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompanionSection {
    /// The one service it runs (every request is routed to it).
    pub service: String,
    /// Its listeners, e.g. `["inproc:127.0.0.1:5070"]` (a name, nothing is bound).
    pub listen: Vec<String>,
    /// Its own admin endpoint (health, metrics), `IP:PORT`.
    pub admin: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Vec<String>,
    pub admin: Option<String>,
    /// Threads of the async runtime. 0: as many as executors (`container.executors`, itself
    /// one per core when 0). Fewer threads than cores saves cross-thread wake-ups where load
    /// generators or other servers share the machine (bench/results/proxy-cpu-ab.md).
    #[serde(default)]
    pub worker_threads: usize,
}

impl Config {
    /// The runtime's thread count from `server.worker_threads` and `container.executors`.
    pub fn worker_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match (self.server.worker_threads, self.container.executors) {
            (0, 0) => cores,
            (0, executors) => executors.min(cores),
            (threads, _) => threads,
        }
        .max(1)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportSection {
    pub max_message_bytes: usize,
    pub max_headers: usize,
    pub tcp_max_connections: usize,
    pub tcp_max_connections_per_peer: usize,
    #[serde(with = "humantime_serde")]
    pub tcp_idle_timeout: Duration,
    pub udp_readers: usize,
}

impl Default for TransportSection {
    fn default() -> Self {
        let d = TransportConfig::default();
        TransportSection {
            max_message_bytes: d.max_message_bytes,
            max_headers: d.max_headers,
            tcp_max_connections: d.tcp_max_connections,
            tcp_max_connections_per_peer: d.tcp_max_connections_per_peer,
            tcp_idle_timeout: d.tcp_idle_timeout,
            udp_readers: d.udp_readers,
        }
    }
}

impl TransportSection {
    pub fn to_config(&self) -> TransportConfig {
        TransportConfig {
            max_message_bytes: self.max_message_bytes.min(tandem_sip::MAX_MESSAGE_BYTES),
            max_headers: self.max_headers,
            tcp_max_connections: self.tcp_max_connections,
            tcp_max_connections_per_peer: self.tcp_max_connections_per_peer,
            tcp_idle_timeout: self.tcp_idle_timeout,
            udp_readers: self.udp_readers,
            ..TransportConfig::default()
        }
    }
}

/// `[dns]`: how the proxy locates next hops named by host (RFC 3263).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSection {
    /// `IP:PORT` of the one DNS server to ask; absent: the system's (/etc/resolv.conf).
    pub nameserver: Option<String>,
    /// Transports in order of preference for RFC 3263 selection (only those listened on count).
    pub transports: Vec<String>,
    /// Seed of the SRV weighted choice (deterministic, like everything handlers see).
    pub seed: u64,
}

impl Default for DnsSection {
    fn default() -> Self {
        DnsSection { nameserver: None, transports: ["udp", "tcp", "tls", "ws", "wss"].map(String::from).to_vec(), seed: 0 }
    }
}

impl DnsSection {
    pub fn preferences(&self) -> Result<Vec<tandem_sip::Transport>> {
        self.transports
            .iter()
            .map(|name| match tandem_sip::Transport::parse(name) {
                tandem_sip::Transport::Other => bail!("dns.transports: unknown transport {name:?} (udp, tcp, tls, ws, wss)"),
                t => Ok(t),
            })
            .collect()
    }

    pub fn resolver(&self) -> Result<tandem_resolver::Resolver> {
        let resolver = match &self.nameserver {
            Some(addr) => {
                let addr = addr.parse().with_context(|| format!("dns.nameserver {addr:?} is not IP:PORT"))?;
                tandem_resolver::Resolver::with_nameserver(addr)?
            }
            None => tandem_resolver::Resolver::from_system_conf()?,
        };
        Ok(resolver.with_seed(self.seed))
    }
}

/// `[tls]`: PEM files for `tls:` listeners and outgoing TLS (`tandem cert` writes a
/// development set).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSection {
    /// Certificate chain (leaf first) presented by `tls:` listeners.
    pub certificate: Option<std::path::PathBuf>,
    pub private_key: Option<std::path::PathBuf>,
    /// Trust roots for outgoing TLS connections; without it (and without
    /// insecure_skip_verify) Tandem does not connect out over TLS.
    pub ca: Option<std::path::PathBuf>,
    /// Development only: accept any server certificate on outgoing TLS.
    pub insecure_skip_verify: bool,
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            certificate: None,
            private_key: None,
            ca: None,
            insecure_skip_verify: false,
            handshake_timeout: TransportConfig::default().tls_handshake_timeout,
        }
    }
}

impl Config {
    /// The transport settings, with the TLS material read from its PEM files.
    pub fn transport_config(&self) -> Result<TransportConfig> {
        let t = &self.tls;
        if t.insecure_skip_verify {
            tracing::warn!("tls.insecure_skip_verify is set: outgoing TLS does not check server certificates");
        }
        let tls = TlsConfig::from_files(t.certificate.as_deref(), t.private_key.as_deref(), t.ca.as_deref(), t.insecure_skip_verify)
            .context("loading the [tls] certificates")?;
        Ok(TransportConfig { tls, tls_handshake_timeout: t.handshake_timeout, ..self.transport.to_config() })
    }

    /// Reads the file (or the embedded default), applies `--set KEY=VALUE` overrides, checks.
    pub fn load(file: Option<&std::path::Path>, sets: &[String]) -> Result<Config> {
        let text = match file {
            Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
            None => DEFAULT_CONFIG.to_string(),
        };
        let mut value: toml::Table = text
            .parse()
            .with_context(|| format!("parsing {}", file.map_or("the default configuration".into(), |p| p.display().to_string())))?;
        for set in sets {
            apply_set(&mut value, set)?;
        }
        let config: Config = toml::Value::Table(value).try_into().context("invalid configuration")?;
        let specs = config.listen_specs()?;
        if let Some(spec) = specs.iter().find(|s| matches!(s.protocol, Protocol::Tls | Protocol::Wss)) {
            if config.tls.certificate.is_none() || config.tls.private_key.is_none() {
                bail!(
                    "listening on {spec} needs a certificate: set tls.certificate and tls.private_key \
                     (PEM files; `tandem cert --out-dir DIR` writes a development pair)"
                );
            }
        }
        let tls_hops = [("proxy.next_hop", &config.proxy.next_hop), ("b2bua.next_hop", &config.b2bua.next_hop)];
        for (key, hop) in tls_hops {
            let tls_hop = hop.as_deref().is_some_and(|h| {
                let scheme = h.split_once(':').map_or("", |(s, _)| s);
                ["tls", "wss", "sips"].iter().any(|s| scheme.eq_ignore_ascii_case(s)) || h.to_ascii_lowercase().contains("transport=tls")
            });
            if tls_hop && config.tls.ca.is_none() && !config.tls.insecure_skip_verify {
                bail!("{key} is a TLS destination: set tls.ca (PEM trust roots for outgoing TLS)");
            }
        }
        if config.container.trying_delay > std::time::Duration::from_millis(200) {
            // RFC 3261 §17.2.1: the 100 may be omitted only when a response follows within 200 ms.
            bail!("container.trying_delay is {:?}: at most 200ms (RFC 3261 §17.2.1)", config.container.trying_delay);
        }
        config.dns.preferences()?;
        for companion in &config.companions {
            if config.companion_listen_specs(companion)?.is_empty() {
                bail!("companion {:?} has no listener", companion.service);
            }
        }
        for (service, name) in &config.negotiator {
            name.parse::<tandem_engine::Negotiator>().map_err(|e| anyhow::anyhow!("negotiator.{service}: {e}"))?;
        }
        Ok(config)
    }

    /// The negotiator configured for a contract service.
    pub fn negotiator_for(&self, service: &str) -> tandem_engine::Negotiator {
        self.negotiator
            .get(service)
            .or_else(|| self.negotiator.get("default"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(tandem_engine::Negotiator::SingleAssign)
    }

    pub fn listen_specs(&self) -> Result<Vec<ListenSpec>> {
        self.server.listen.iter().map(|s| s.parse::<ListenSpec>().with_context(|| format!("server.listen entry {s:?}"))).collect()
    }

    pub fn companion_listen_specs(&self, companion: &CompanionSection) -> Result<Vec<ListenSpec>> {
        companion
            .listen
            .iter()
            .map(|s| s.parse::<ListenSpec>().with_context(|| format!("companion {:?}: listen entry {s:?}", companion.service)))
            .collect()
    }
}

/// `a.b=value`: the value is read as TOML (number, boolean, array, ...), else as a string.
fn apply_set(root: &mut toml::Table, set: &str) -> Result<()> {
    let Some((path, raw)) = set.split_once('=') else { bail!("--set expects KEY=VALUE, got {set:?}") };
    let value = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let mut parts: Vec<&str> = path.trim().split('.').collect();
    let Some(last) = parts.pop().filter(|l| !l.is_empty()) else { bail!("--set {set:?}: empty key") };
    let mut table = root;
    for part in parts {
        let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => bail!("--set {set:?}: {part} is not a section"),
        };
    }
    table.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_configuration_loads() {
        let c = Config::load(None, &[]).unwrap();
        assert_eq!(c.listen_specs().unwrap().len(), 2);
        assert_eq!(c.uas.hold, Duration::from_secs(180));
        assert_eq!(c.routes, vec![RouteRule::catch_all("uas")]);
    }

    #[test]
    fn set_overrides_typed_values() {
        let sets =
            ["uas.hold=2s", "proxy.next_hop=tcp:127.0.0.1:5070", "container.executors=3", "transport.udp_readers=2"].map(String::from);
        let c = Config::load(None, &sets).unwrap();
        assert_eq!(c.uas.hold, Duration::from_secs(2));
        assert_eq!(c.proxy.next_hop.as_deref(), Some("tcp:127.0.0.1:5070"));
        assert_eq!(c.container.executors, 3);
        assert_eq!(c.transport.udp_readers, 2);
        assert_eq!(c.negotiator_for("pairing"), tandem_engine::Negotiator::SingleAssign);
        let c = Config::load(None, &["negotiator.pairing=ordered".into(), "negotiator.default=global".into()]).unwrap();
        assert_eq!(c.negotiator_for("pairing"), tandem_engine::Negotiator::Ordered);
        assert_eq!(c.negotiator_for("dating"), tandem_engine::Negotiator::Global);
        assert!(Config::load(None, &["negotiator.pairing=optimistic".into()]).is_err());
    }

    #[test]
    fn bad_input_is_explained() {
        let err = Config::load(None, &["uas.hold=forever".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("invalid configuration"), "{err:#}");
        assert!(Config::load(None, &["server.listen=[\"sctp:1.2.3.4:5\"]".into()]).is_err());
        assert!(Config::load(None, &["nokey".into()]).is_err());
        assert!(Config::load(None, &["uas.colour=1".into()]).is_err());
        let err = Config::load(None, &["container.trying_delay=\"250ms\"".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("at most 200ms"), "{err:#}");
        let c = Config::load(None, &["container.trying_delay=\"0s\"".into()]).unwrap();
        assert!(c.container.trying_delay.is_zero());
    }

    #[test]
    fn tls_listener_needs_a_certificate() {
        let listen = "server.listen=[\"tls:127.0.0.1:5061\"]".to_string();
        let err = Config::load(None, std::slice::from_ref(&listen)).unwrap_err();
        assert!(format!("{err:#}").contains("tls.certificate"), "{err:#}");
        let sets = [listen, "tls.certificate=/x/cert.pem".into(), "tls.private_key=/x/key.pem".into(), "tls.handshake_timeout=2s".into()];
        let c = Config::load(None, &sets).unwrap();
        assert_eq!(c.tls.handshake_timeout, Duration::from_secs(2));
        assert!(!c.tls.insecure_skip_verify);
        // The files are read when the transports are configured.
        assert!(format!("{:#}", c.transport_config().unwrap_err()).contains("/x/cert.pem"));
        assert!(Config::load(None, &[]).unwrap().transport_config().unwrap().tls.server.is_none());
        let err = Config::load(None, &["proxy.next_hop=tls:127.0.0.1:5061".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("tls.ca"), "{err:#}");
        assert!(Config::load(None, &["b2bua.next_hop=TLS:127.0.0.1:5061".into(), "tls.ca=/x/ca.pem".into()]).is_ok());
    }
}
