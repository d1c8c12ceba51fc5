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
        // The common shape (`sip:user@host:port;simple=params`) in one tight scan; anything
        // else, valid or not, takes the general parser.
        if let Some(u) = SipUri::parse_simple(s) {
            return Some(Uri::Sip(u));
        }
        Self::parse_general(s)
    }

    /// The full parser, for any input ([`Self::parse`] only skips it for inputs it accepts
    /// with the same result).
    pub(crate) fn parse_general(s: &'a str) -> Option<Uri<'a>> {
        let b = s.as_bytes();
        // The scheme runs to the first `:`; scheme bytes never include `:`, so scanning them
        // and requiring a `:` right after is the same as splitting at the first `:`.
        if !b.first().is_some_and(u8::is_ascii_alphabetic) {
            return None;
        }
        let colon = 1 + b.get(1..)?.iter().take_while(|c| class(**c) & SCHEME != 0).count();
        if b.get(colon) != Some(&b':') {
            return None;
        }
        let scheme = s.get(..colon)?;
        let rest = s.get(colon + 1..)?;
        // One pass: no white space or angle brackets anywhere, the first `@` and the first
        // `;` or `?` (for sip URIs).
        let mut at = None;
        let mut stop = None;
        for (i, c) in rest.bytes().enumerate() {
            let k = class(c);
            if k & (BAD | AT | STOP) != 0 {
                if k & BAD != 0 {
                    return None;
                }
                if k & AT != 0 {
                    at = at.or(Some(i));
                } else {
                    stop = stop.or(Some(i));
                }
            }
        }
        if rest.is_empty() {
            return None;
        }
        if scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips") {
            SipUri::parse_after_scheme(rest, at, stop, scheme.len() == 4).map(Uri::Sip)
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

/// Byte classes of URI text (RFC 3261 §25.1), one table lookup per byte.
const BAD: u8 = 1; // LWS, `<`, `>`: never inside a URI here
const AT: u8 = 2;
const SCHEME: u8 = 4; // after the first letter
const USER: u8 = 8; // unreserved, escaped (`%`), user-unreserved, and `:` / `;` of password / tel params
const HOST: u8 = 16; // hostname and IPv4 characters
const STOP: u8 = 32; // `;` and `?`: end of the host part
/// User bytes the simple scan takes: [`USER`] without `%` (escapes), `;`, `?` and `:`
/// (telephone-subscriber parameters, headers, password), which it leaves to the general parser.
const USER_SIMPLE: u8 = 64;
/// Bytes of simple URI parameters: token bytes, `=`, `;` and `:` (no quotes, brackets, LWS,
/// `?` or `@`).
const PARAM_SIMPLE: u8 = 128;

const CLASSES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        let mut k = 0;
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b'<' | b'>') {
            k |= BAD;
        }
        if c == b'@' {
            k |= AT;
        }
        if c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.') {
            k |= SCHEME;
        }
        if c.is_ascii_alphanumeric()
            || matches!(
                c,
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
        {
            k |= USER;
        }
        if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' {
            k |= HOST;
        }
        if c == b';' || c == b'?' {
            k |= STOP;
        }
        if k & USER != 0 && !matches!(c, b'%' | b';' | b'?' | b':') {
            k |= USER_SIMPLE;
        }
        if crate::lex::is_token_byte(c) || matches!(c, b'=' | b';' | b':') {
            k |= PARAM_SIMPLE;
        }
        table[i] = k;
        i += 1;
    }
    table
};

fn class(c: u8) -> u8 {
    CLASSES[c as usize]
}

impl<'a> SipUri<'a> {
    /// `sip:` / `sips:`, an optional plain user (no escapes, password or `;` parameters), a
    /// host name or IPv4 address, an optional port and optional simple parameters, no headers:
    /// the shape of nearly every URI a proxy sees, read in one scan. `None` means "not this
    /// shape" (the general parser decides), never "invalid": whatever this accepts, the general
    /// parser accepts with the same parts (checked by `simple_scan_agrees_with_general`).
    fn parse_simple(s: &'a str) -> Option<SipUri<'a>> {
        let b = s.as_bytes();
        let secure = match b {
            [c0, c1, c2, b':', ..] if c0 | 0x20 == b's' && c1 | 0x20 == b'i' && c2 | 0x20 == b'p' => false,
            [c0, c1, c2, c3, b':', ..] if c0 | 0x20 == b's' && c1 | 0x20 == b'i' && c2 | 0x20 == b'p' && c3 | 0x20 == b's' => true,
            _ => return None,
        };
        let rest = s.get(if secure { 5 } else { 4 }..)?;
        let r = rest.as_bytes();
        let mut i = 0;
        while r.get(i).is_some_and(|c| class(*c) & USER_SIMPLE != 0) {
            i += 1;
        }
        let (user, host_start) = match r.get(i) {
            Some(b'@') if i > 0 => (Some(rest.get(..i)?), i + 1),
            Some(b'@') => return None,
            _ => (None, 0),
        };
        let mut j = host_start;
        while r.get(j).is_some_and(|c| class(*c) & HOST != 0) {
            j += 1;
        }
        if j == host_start {
            return None;
        }
        let host = rest.get(host_start..j)?;
        let mut port = None;
        if r.get(j) == Some(&b':') {
            let digits = r.get(j + 1..)?.iter().take_while(|c| c.is_ascii_digit()).count();
            port = Some(parse_port(rest.get(j + 1..j + 1 + digits)?)?);
            j += 1 + digits;
        }
        let params = match r.get(j) {
            None => "",
            Some(b';') => {
                let params = rest.get(j + 1..)?;
                if !params.bytes().all(|c| class(c) & PARAM_SIMPLE != 0) {
                    return None;
                }
                if !params.is_empty() {
                    lex::parse_params(params)?;
                }
                params
            }
            Some(_) => return None,
        };
        Some(SipUri { secure, user, host, port, params, headers: None })
    }

    /// `at`, `stop`: indexes of the first `@` and the first `;` or `?` in `rest`, found by the
    /// caller's pass.
    fn parse_after_scheme(rest: &'a str, at: Option<usize>, stop: Option<usize>, secure: bool) -> Option<SipUri<'a>> {
        // The user part may contain `?`, `;` and `:` (RFC 3261 `user-unreserved`, password),
        // so the `@` is found first and headers are only looked for after it.
        let (user, after_user) = match at {
            Some(at) => (Some(rest.get(..at)?), rest.get(at + 1..)?),
            None => (None, rest),
        };
        if let Some(user) = user {
            if user.is_empty() || !user_valid(user.as_bytes()) {
                return None;
            }
        }
        // First `;` or `?` after the user part: `?` ends host and parameters, `;` the host.
        let tail = after_user.as_bytes();
        let stop = match (at, stop) {
            // The caller's `;` / `?` is after the `@`: it is the first one after it too.
            (None, Some(stop)) => stop,
            (Some(at), Some(stop)) if stop > at => stop - at - 1,
            (_, None) => tail.len(),
            // A `;` or `?` in the user part: look again after the `@`.
            _ => tail.iter().position(|c| matches!(c, b';' | b'?')).unwrap_or(tail.len()),
        };
        let (hostport, params, headers) = match tail.get(stop) {
            Some(b'?') => (after_user.get(..stop)?, "", Some(after_user.get(stop + 1..)?)),
            Some(_) => {
                let after = after_user.get(stop + 1..)?;
                match lex::find_byte(after, b'?') {
                    Some(q) => (after_user.get(..stop)?, after.get(..q)?, Some(after.get(q + 1..)?)),
                    None => (after_user.get(..stop)?, after, None),
                }
            }
            None => (after_user, "", None),
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

/// User characters only, and every `%` followed by two hex digits (a hex digit is never a
/// `%`, so no escape can hide another).
fn user_valid(b: &[u8]) -> bool {
    b.iter().enumerate().all(|(i, c)| {
        class(*c) & USER != 0
            && (*c != b'%' || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)))
    })
}

/// Splits `host[:port]`, validating the host (hostname, IPv4 or bracketed IPv6).
pub(crate) fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port_text) = if s.starts_with('[') {
        let close = lex::find_byte(s, b']')?;
        let host = s.get(..=close)?;
        s.get(1..close)?.parse::<Ipv6Addr>().ok()?;
        match s.get(close + 1..)? {
            "" => (host, None),
            rest => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        // Host bytes never include `:`, so the host must run exactly to the first `:` or the end.
        let end = s.bytes().take_while(|c| class(*c) & HOST != 0).count();
        if end == 0 {
            return None;
        }
        match s.as_bytes().get(end) {
            None => (s, None),
            Some(b':') => (s.get(..end)?, Some(s.get(end + 1..)?)),
            Some(_) => return None,
        }
    };
    let port = match port_text {
        None => None,
        Some(p) => Some(parse_port(p)?),
    };
    Some((host, port))
}

/// 1 to 5 digits, at most 65535.
fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 {
        return None;
    }
    let mut n: u32 = 0;
    for c in p.bytes() {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(c - b'0');
    }
    u16::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_scan_agrees_with_general() {
        let seeds = [
            "sip:sipp@127.0.0.1:5061",
            "sip:service@127.0.0.1:5060;transport=udp",
            "sips:bob@biloxi.example.com",
            "SIP:127.0.0.1:5060;lr;tsvc=proxy",
            "sip:a.b-c@x.example;maddr=[::1];a=b:c;;",
            "sip:user;par=u%40example.net@example.com:5070;lr;transport=tcp?x=y",
            "sip:[2001:db8::10]:5070",
            "tel:+1-201-555-0123",
            "sip:a:pw@h:99999",
        ];
        let mut simple = 0;
        for v in crate::name_addr::tests::near_inputs(&seeds, 200_000) {
            if let Some(u) = SipUri::parse_simple(&v) {
                simple += 1;
                assert_eq!(Uri::parse_general(&v), Some(Uri::Sip(u)), "{v:?}");
            }
            assert_eq!(Uri::parse(&v), Uri::parse_general(&v), "{v:?}");
        }
        assert!(simple > 1000, "the simple scan took only {simple} inputs");
    }

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
