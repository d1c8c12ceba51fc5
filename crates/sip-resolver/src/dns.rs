//! The three DNS questions RFC 3263 asks, behind a trait, and an in-memory answer table.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;

/// A NAPTR record (RFC 3403), the fields RFC 3263 uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NaptrRecord {
    pub order: u16,
    pub preference: u16,
    /// `S` for records whose replacement is an SRV name, the only kind RFC 3263 follows.
    pub flags: String,
    /// E.g. `SIP+D2U`, `SIPS+D2T`, `SIP+D2W`.
    pub services: String,
    /// Domain name, without the trailing dot.
    pub replacement: String,
}

/// An SRV record (RFC 2782).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvRecord {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    /// Domain name, without the trailing dot; `.` (empty here) means "no service".
    pub target: String,
}

/// A DNS query that failed: timeout, server failure, unparsable name. "No such record" is not
/// a failure: it is an empty answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DnsError(pub String);

/// The DNS lookups RFC 3263 needs. An empty answer means NXDOMAIN or no data of that type.
///
/// The futures are `Send` so that a resolution can run inside a spawned tokio task.
pub trait Dns: Sync {
    fn naptr(&self, name: &str) -> impl Future<Output = Result<Vec<NaptrRecord>, DnsError>> + Send;
    fn srv(&self, name: &str) -> impl Future<Output = Result<Vec<SrvRecord>, DnsError>> + Send;
    /// A and AAAA records, in the order they are to be tried.
    fn ip(&self, name: &str) -> impl Future<Output = Result<Vec<IpAddr>, DnsError>> + Send;
}

/// A fixed table of answers, for tests: names are matched case-insensitively, without a trailing
/// dot; a name added with [`MemoryDns::fail`] answers every query with a [`DnsError`].
#[derive(Debug, Clone, Default)]
pub struct MemoryDns {
    naptr: HashMap<String, Vec<NaptrRecord>>,
    srv: HashMap<String, Vec<SrvRecord>>,
    ip: HashMap<String, Vec<IpAddr>>,
    failing: Vec<String>,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl MemoryDns {
    pub fn new() -> MemoryDns {
        MemoryDns::default()
    }

    pub fn naptr(mut self, name: &str, order: u16, preference: u16, flags: &str, services: &str, replacement: &str) -> MemoryDns {
        let record =
            NaptrRecord { order, preference, flags: flags.to_owned(), services: services.to_owned(), replacement: key(replacement) };
        self.naptr.entry(key(name)).or_default().push(record);
        self
    }

    pub fn srv(mut self, name: &str, priority: u16, weight: u16, port: u16, target: &str) -> MemoryDns {
        self.srv.entry(key(name)).or_default().push(SrvRecord { priority, weight, port, target: key(target) });
        self
    }

    pub fn ip(mut self, name: &str, addr: IpAddr) -> MemoryDns {
        self.ip.entry(key(name)).or_default().push(addr);
        self
    }

    pub fn fail(mut self, name: &str) -> MemoryDns {
        self.failing.push(key(name));
        self
    }

    fn answer<T: Clone>(&self, table: &HashMap<String, Vec<T>>, name: &str) -> Result<Vec<T>, DnsError> {
        let k = key(name);
        if self.failing.contains(&k) {
            return Err(DnsError(format!("{k}: server failure")));
        }
        Ok(table.get(&k).cloned().unwrap_or_default())
    }
}

impl Dns for MemoryDns {
    fn naptr(&self, name: &str) -> impl Future<Output = Result<Vec<NaptrRecord>, DnsError>> + Send {
        std::future::ready(self.answer(&self.naptr, name))
    }

    fn srv(&self, name: &str) -> impl Future<Output = Result<Vec<SrvRecord>, DnsError>> + Send {
        std::future::ready(self.answer(&self.srv, name))
    }

    fn ip(&self, name: &str) -> impl Future<Output = Result<Vec<IpAddr>, DnsError>> + Send {
        std::future::ready(self.answer(&self.ip, name))
    }
}
