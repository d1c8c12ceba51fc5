//! [`Resolver`]: the selection logic over hickory's tokio resolver.

use crate::dns::{Dns, DnsError, NaptrRecord, SrvRecord};
use crate::select::resolve_with;
use crate::{ResolveError, SipTarget, Target};
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::NetError;
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use hickory_resolver::TokioResolver;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tandem_sip::Transport;

/// The default seed of the RFC 2782 weighted ordering; see [`Resolver::with_seed`].
const DEFAULT_SEED: u64 = 0x0053_4950_3332_3633; // "SIP3263" in ASCII

/// RFC 3263 resolution over DNS. Cheap to clone: clones share hickory's cache and the seeded
/// generator.
#[derive(Clone)]
pub struct Resolver {
    dns: HickoryDns,
    rng: Arc<Mutex<ChaCha8Rng>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    /// The system's configuration: name servers, search domains and options of
    /// /etc/resolv.conf, and /etc/hosts.
    pub fn from_system_conf() -> Result<Resolver, ResolveError> {
        let mut builder = TokioResolver::builder_tokio().map_err(|e| ResolveError::Config(e.to_string()))?;
        builder.options_mut().ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        let inner = builder.build().map_err(|e| ResolveError::Config(e.to_string()))?;
        Ok(Resolver::from_hickory(inner))
    }

    /// One name server, over UDP with TCP for truncated answers, no search domains and no
    /// /etc/hosts: for a `[dns] nameserver` setting and for tests, which must not reach any
    /// other server.
    pub fn with_nameserver(server: SocketAddr) -> Result<Resolver, ResolveError> {
        let mut ns = NameServerConfig::udp_and_tcp(server.ip());
        for connection in &mut ns.connections {
            connection.port = server.port();
        }
        let config = ResolverConfig::from_parts(None, Vec::new(), vec![ns]);
        let mut options = ResolverOpts::default();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        options.use_hosts_file = ResolveHosts::Never;
        let inner = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(options)
            .build()
            .map_err(|e| ResolveError::Config(e.to_string()))?;
        Ok(Resolver::from_hickory(inner))
    }

    /// An already configured hickory resolver.
    pub fn from_hickory(inner: TokioResolver) -> Resolver {
        Resolver { dns: HickoryDns(inner), rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(DEFAULT_SEED))) }
    }

    /// Reseeds the generator of the RFC 2782 weighted order, e.g. from the configuration, so
    /// that a run can be replayed. Without it a fixed default seed is used.
    pub fn with_seed(self, seed: u64) -> Resolver {
        Resolver { rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))), ..self }
    }

    /// The targets for `target`, in the order to try them, using the transports of
    /// `preferences` (most preferred first). See the crate documentation for the procedure.
    pub async fn resolve(&self, target: &SipTarget, preferences: &[Transport]) -> Result<Vec<Target>, ResolveError> {
        // One draw from the shared generator seeds this resolution's own, so that the lock is
        // not held across the lookups.
        let seed = {
            let mut shared = self.rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            shared.next_u64()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        resolve_with(&self.dns, target, preferences, &mut rng).await
    }

    /// The [`Dns`] view of this resolver, to run [`resolve_with`] with another generator.
    pub fn dns(&self) -> &impl Dns {
        &self.dns
    }
}

#[derive(Clone)]
struct HickoryDns(TokioResolver);

fn name(s: &str) -> String {
    let text = s.to_string();
    text.strip_suffix('.').map(str::to_owned).unwrap_or(text)
}

fn lookup_error(what: &str, query: &str, e: NetError) -> Result<(), DnsError> {
    if e.is_no_records_found() {
        Ok(())
    } else {
        Err(DnsError(format!("{what} {query}: {e}")))
    }
}

impl HickoryDns {
    async fn records(&self, query: &str, record_type: RecordType) -> Result<Vec<RData>, DnsError> {
        let fqdn = Name::from_utf8(query).map_err(|e| DnsError(format!("{query}: {e}")))?;
        match self.0.lookup(fqdn, record_type).await {
            Ok(lookup) => Ok(lookup.answers().iter().map(|r| r.data.clone()).collect()),
            Err(e) => lookup_error(record_type.to_string().as_str(), query, e).map(|()| Vec::new()),
        }
    }
}

impl Dns for HickoryDns {
    fn naptr(&self, query: &str) -> impl Future<Output = Result<Vec<NaptrRecord>, DnsError>> + Send {
        let query = query.to_owned();
        async move {
            let records = self.records(&query, RecordType::NAPTR).await?;
            Ok(records
                .into_iter()
                .filter_map(|data| match data {
                    RData::NAPTR(n) => Some(NaptrRecord {
                        order: n.order,
                        preference: n.preference,
                        flags: String::from_utf8_lossy(&n.flags).into_owned(),
                        services: String::from_utf8_lossy(&n.services).into_owned(),
                        replacement: name(&n.replacement.to_string()),
                    }),
                    _ => None,
                })
                .collect())
        }
    }

    fn srv(&self, query: &str) -> impl Future<Output = Result<Vec<SrvRecord>, DnsError>> + Send {
        let query = query.to_owned();
        async move {
            let records = self.records(&query, RecordType::SRV).await?;
            Ok(records
                .into_iter()
                .filter_map(|data| match data {
                    RData::SRV(s) => {
                        Some(SrvRecord { priority: s.priority, weight: s.weight, port: s.port, target: name(&s.target.to_string()) })
                    }
                    _ => None,
                })
                .collect())
        }
    }

    fn ip(&self, query: &str) -> impl Future<Output = Result<Vec<IpAddr>, DnsError>> + Send {
        let query = query.to_owned();
        async move {
            match self.0.lookup_ip(query.as_str()).await {
                Ok(lookup) => Ok(lookup.iter().collect()),
                Err(e) => lookup_error("A/AAAA", &query, e).map(|()| Vec::new()),
            }
        }
    }
}
