//! Routing of initial requests to services (SIP Servlet "application router" in its simplest,
//! declarative form): the first rule whose conditions all hold names the service.

use serde::Deserialize;
use tandem_sip::{Message, Uri};

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteRule {
    pub service: String,
    /// Request method, e.g. `INVITE` (any when absent).
    pub method: Option<String>,
    /// Request-URI user; a trailing `*` matches a prefix.
    pub user: Option<String>,
    /// Request-URI host (case-insensitive).
    pub domain: Option<String>,
    /// Local port the request arrived on.
    pub port: Option<u16>,
}

impl RouteRule {
    pub fn catch_all(service: &str) -> RouteRule {
        RouteRule { service: service.to_string(), method: None, user: None, domain: None, port: None }
    }

    pub fn matches(&self, req: &Message, local_port: u16) -> bool {
        if let Some(m) = &self.method {
            if req.method().map(|x| x.as_str()) != Some(m.as_str()) {
                return false;
            }
        }
        if self.port.is_some_and(|p| p != local_port) {
            return false;
        }
        if self.user.is_none() && self.domain.is_none() {
            return true;
        }
        let Some(Uri::Sip(uri)) = req.request_uri() else {
            return false;
        };
        let user_ok = self.user.as_deref().is_none_or(|pattern| {
            let user = uri.user_base().unwrap_or("");
            match pattern.strip_suffix('*') {
                Some(prefix) => user.starts_with(prefix),
                None => user == pattern,
            }
        });
        let domain_ok = self.domain.as_deref().is_none_or(|d| uri.host.eq_ignore_ascii_case(d));
        user_ok && domain_ok
    }
}

/// Index into the rule list's services: the first matching rule.
pub fn route<'a>(rules: &'a [RouteRule], req: &Message, local_port: u16) -> Option<&'a str> {
    rules.iter().find(|r| r.matches(req, local_port)).map(|r| r.service.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn req(line: &str) -> Message {
        let text = format!("{line}\r\nVia: SIP/2.0/UDP h;branch=z9hG4bKx\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 {}\r\nContent-Length: 0\r\n\r\n", line.split(' ').next().unwrap());
        tandem_sip::parse_datagram(Bytes::from(text), &Default::default()).unwrap()
    }

    #[test]
    fn first_matching_rule_wins() {
        let rules = vec![
            RouteRule { method: Some("OPTIONS".into()), ..RouteRule::catch_all("ping") },
            RouteRule { user: Some("mlt*".into()), ..RouteRule::catch_all("uas") },
            RouteRule { domain: Some("Proxy.Example.com".into()), port: Some(5080), ..RouteRule::catch_all("proxy") },
        ];
        assert_eq!(route(&rules, &req("OPTIONS sip:x@y SIP/2.0"), 5060), Some("ping"));
        assert_eq!(route(&rules, &req("INVITE sip:mlt-7@y SIP/2.0"), 5060), Some("uas"));
        assert_eq!(route(&rules, &req("INVITE sip:bob@proxy.example.com SIP/2.0"), 5080), Some("proxy"));
        assert_eq!(route(&rules, &req("INVITE sip:bob@proxy.example.com SIP/2.0"), 5060), None);
        assert_eq!(route(&rules, &req("INVITE tel:+123 SIP/2.0"), 5060), None);
    }
}
