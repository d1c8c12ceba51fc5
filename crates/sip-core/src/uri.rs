//! URIs as they appear in request lines and name-addrs: `sip:`/`sips:` parsed into parts,
//! any other scheme kept opaque (RFC 3261 §19.1, §25.1 `absoluteURI`).

use crate::lex;
use std::net::{IpAddr, Ipv6Addr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Sip,
    Sips,
    Tel,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uri<'a> {
    Sip(SipUri<'a>),
    /// Any other scheme, e.g. `tel:`, `im:`, `http:`: the scheme and the opaque rest.
    Other {
        scheme: &'a str,
        rest: &'a str,
    },
}

/// `sip:user:password@host:port;params?headers`, each part a slice of the original text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SipUri<'a> {
    pub secure: bool,
    pub user: Option<&'a str>,
    /// Host as written, IPv6 references keep their brackets.
    pub host: &'a str,
    pub port: Option<u16>,
    /// Everything after the first `;` up to `?`, without the leading `;`.
    pub params: &'a str,
    pub headers: Option<&'a str>,
}

impl<'a> Uri<'a> {
    pub fn parse(s: &'a str) -> Option<Uri<'a>> {
        let colon = lex::find_byte(s, b':')?;
        let scheme = &s[..colon];
        let rest = &s[colon + 1..];
        if !is_scheme(scheme) || rest.is_empty() || rest.bytes().any(|b| lex::is_lws(b) || b == b'<' || b == b'>') {
            return None;
        }
        if scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips") {
            SipUri::parse_after_scheme(rest, scheme.len() == 4).map(Uri::Sip)
        } else {
            Some(Uri::Other { scheme, rest })
        }
    }

    pub fn scheme(&self) -> Scheme {
        match self {
            Uri::Sip(u) if u.secure => Scheme::Sips,
            Uri::Sip(_) => Scheme::Sip,
            Uri::Other { scheme, .. } if scheme.eq_ignore_ascii_case("tel") => Scheme::Tel,
            Uri::Other { .. } => Scheme::Other,
        }
    }

    pub fn as_sip(&self) -> Option<&SipUri<'a>> {
        match self {
            Uri::Sip(u) => Some(u),
            Uri::Other { .. } => None,
        }
    }
}

fn is_scheme(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

impl<'a> SipUri<'a> {
    fn parse_after_scheme(rest: &'a str, secure: bool) -> Option<SipUri<'a>> {
        // The user part may contain `?`, `;` and `:` (RFC 3261 `user-unreserved`, password),
        // so the `@` is found first and headers are only looked for after it.
        let (user, after_user) = match lex::find_byte(rest, b'@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (hostpart, headers) = match lex::find_byte(after_user, b'?') {
            Some(q) => (&after_user[..q], Some(&after_user[q + 1..])),
            None => (after_user, None),
        };
        if let Some(user) = user {
            if user.is_empty() || !user.bytes().all(is_user_byte) || !escapes_valid(user) {
                return None;
            }
        }
        let (hostport, params) = match lex::find_byte(hostpart, b';') {
            Some(semi) => (&hostpart[..semi], &hostpart[semi + 1..]),
            None => (hostpart, ""),
        };
        let (host, port) = split_host_port(hostport)?;
        if !params.is_empty() {
            lex::parse_params(params)?;
        }
        Some(SipUri { secure, user, host, port, params, headers })
    }

    /// The user part without any `;`-parameters of a telephone-subscriber user.
    pub fn user_base(&self) -> Option<&'a str> {
        self.user.map(|u| {
            let u = u.split(':').next().unwrap_or(u);
            u.split(';').next().unwrap_or(u)
        })
    }

    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        if self.params.is_empty() {
            return None;
        }
        lex::find_param(self.params, name)
    }

    pub fn has_lr(&self) -> bool {
        self.param("lr").is_some()
    }

    /// Host without IPv6 brackets, as an IP address when it is one.
    pub fn host_ip(&self) -> Option<IpAddr> {
        host_ip(self.host)
    }
}

pub(crate) fn host_ip(host: &str) -> Option<IpAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse().ok()
}

fn is_user_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_'
                | b'.'
                | b'!'
                | b'~'
                | b'*'
                | b'\''
                | b'('
                | b')'
                | b'%'
                | b'&'
                | b'='
                | b'+'
                | b'$'
                | b','
                | b';'
                | b'?'
                | b'/'
                | b':'
        )
}

fn escapes_valid(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// Splits `host[:port]`, validating the host (hostname, IPv4 or bracketed IPv6).
pub(crate) fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port_text) = if s.starts_with('[') {
        let close = lex::find_byte(s, b']')?;
        let host = &s[..=close];
        host[1..close].parse::<Ipv6Addr>().ok()?;
        match &s[close + 1..] {
            "" => (host, None),
            rest => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match lex::find_byte(s, b':') {
            Some(c) => (&s[..c], Some(&s[c + 1..])),
            None => (s, None),
        }
    };
    if !host.starts_with('[') && (host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')) {
        return None;
    }
    let port = match port_text {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse::<u16>().ok()?),
        Some(_) => return None,
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip_uri_parts() {
        let Some(Uri::Sip(u)) = Uri::parse("sip:user;par=u%40example.net@example.com:5070;lr;transport=tcp?x=y") else {
            panic!("not parsed")
        };
        assert_eq!(u.user, Some("user;par=u%40example.net"));
        assert_eq!(u.user_base(), Some("user"));
        assert_eq!(u.host, "example.com");
        assert_eq!(u.port, Some(5070));
        assert!(u.has_lr());
        assert_eq!(u.param("transport"), Some(Some("tcp")));
        assert_eq!(u.headers, Some("x=y"));
    }

    #[test]
    fn ipv6_references() {
        let Some(Uri::Sip(u)) = Uri::parse("sip:[2001:db8::10]:5070") else { panic!() };
        assert_eq!((u.host, u.port), ("[2001:db8::10]", Some(5070)));
        assert!(Uri::parse("sip:2001:db8::10").is_none());
        assert!(Uri::parse("sip:user@[2001:db8:::192.0.2.1]").is_none());
    }

    #[test]
    fn other_schemes_and_rejects() {
        assert_eq!(Uri::parse("tel:+1-201-555-0123").map(|u| u.scheme()), Some(Scheme::Tel));
        assert_eq!(Uri::parse("soap.beep://192.0.2.103:3002").map(|u| u.scheme()), Some(Scheme::Other));
        assert!(Uri::parse("<sip:user@example.com>").is_none());
        assert!(Uri::parse("sip:user@host:99999").is_none());
        assert!(Uri::parse("sip:us%zzer@host").is_none());
    }
}
