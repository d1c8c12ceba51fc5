//! The Via header (RFC 3261 §20.42): `SIP / 2.0 / UDP host:port ;params`, LWS allowed around `/`.

use crate::lex::{self, trim_lws};
use crate::uri::split_host_port;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Udp,
    Tcp,
    Tls,
    Sctp,
    Ws,
    Wss,
    /// Tandem's in-process transport: messages handed between containers of one process.
    InProc,
    Other,
}

impl Transport {
    pub fn parse(s: &str) -> Transport {
        // Matched by length on folded bytes: `c | 0x20` equals a lower-case letter exactly when
        // `c` is that letter in either case, so this is the ASCII case-insensitive compare
        // (upper-casing into an array first cost ~75 instructions per Via).
        let f = |c: &u8| c | 0x20;
        match s.as_bytes() {
            [a, b] if [f(a), f(b)] == *b"ws" => Transport::Ws,
            [a, b, c] => match [f(a), f(b), f(c)] {
                [b'u', b'd', b'p'] => Transport::Udp,
                [b't', b'c', b'p'] => Transport::Tcp,
                [b't', b'l', b's'] => Transport::Tls,
                [b'w', b's', b's'] => Transport::Wss,
                _ => Transport::Other,
            },
            [a, b, c, d] if [f(a), f(b), f(c), f(d)] == *b"sctp" => Transport::Sctp,
            [a, b, c, d, e, g] if [f(a), f(b), f(c), f(d), f(e), f(g)] == *b"inproc" => Transport::InProc,
            _ => Transport::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
            Transport::Tls => "TLS",
            Transport::Sctp => "SCTP",
            Transport::Ws => "WS",
            Transport::Wss => "WSS",
            Transport::InProc => "INPROC",
            Transport::Other => "OTHER",
        }
    }

    /// The lowercase form, as in a URI's `transport=` parameter (RFC 3261 §19.1.1).
    pub fn as_lowercase_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
            Transport::Sctp => "sctp",
            Transport::Ws => "ws",
            Transport::Wss => "wss",
            Transport::InProc => "inproc",
            Transport::Other => "other",
        }
    }

    pub fn is_reliable(self) -> bool {
        !matches!(self, Transport::Udp)
    }
}

/// One Via value, borrowed from the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Via<'a> {
    pub transport: Transport,
    pub transport_text: &'a str,
    pub host: &'a str,
    pub port: Option<u16>,
    /// Parameters after sent-by, without the leading `;`.
    pub params: &'a str,
}

impl<'a> Via<'a> {
    /// Parses a single Via value (not a comma-separated list).
    pub fn parse(value: &'a str) -> Option<Via<'a>> {
        Self::parse_finding(value, "").map(|(v, _)| v)
    }

    /// [`Self::parse`] and [`Self::branch`] in one pass over the parameters.
    pub(crate) fn parse_with_branch(value: &'a str) -> Option<(Via<'a>, Option<&'a str>)> {
        Self::parse_finding(value, "branch")
    }

    fn parse_finding(value: &'a str, param: &str) -> Option<(Via<'a>, Option<&'a str>)> {
        // `SIP / 2.0 / transport`, LWS allowed around each part, scanned left to right. Each
        // part, trimmed, had to equal `SIP` / `2.0` up to the next `/`; neither contains `/`
        // or LWS, so matching LWS* part LWS* `/` in place accepts exactly the same texts.
        let b = value.as_bytes();
        let mut i = skip_lws(b, 0);
        if !b.get(i..i + 3).is_some_and(|p| p.eq_ignore_ascii_case(b"SIP")) {
            return None;
        }
        i = skip_lws(b, i + 3);
        if b.get(i) != Some(&b'/') {
            return None;
        }
        i = skip_lws(b, i + 1);
        if b.get(i..i + 3) != Some(b"2.0") {
            return None;
        }
        i = skip_lws(b, i + 3);
        if b.get(i) != Some(&b'/') {
            return None;
        }
        let start = skip_lws(b, i + 1);
        let end = start + b.get(start..)?.iter().take_while(|c| lex::is_token_byte(**c)).count();
        if end == start {
            return None;
        }
        let transport_text = value.get(start..end)?;
        let rest = trim_lws(value.get(end..)?);
        let (sent_by, params) = match lex::find_byte(rest, b';') {
            Some(semi) => (trim_lws(rest.get(..semi)?), rest.get(semi + 1..)?),
            None => (rest, ""),
        };
        let (host, port) = split_host_port(sent_by)?;
        let found = if !params.is_empty() {
            lex::parse_params_find(params, param)?
        } else if rest.ends_with(';') {
            return None;
        } else {
            None
        };
        Some((Via { transport: Transport::parse(transport_text), transport_text, host, port, params }, found))
    }

    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        if self.params.is_empty() {
            return None;
        }
        lex::find_param(self.params, name)
    }

    pub fn branch(&self) -> Option<&'a str> {
        self.param("branch").flatten()
    }

    pub fn received(&self) -> Option<&'a str> {
        self.param("received").flatten()
    }

    /// `Some(None)` for a bare `;rport` (a request asking for it), `Some(Some(p))` when filled in.
    pub fn rport(&self) -> Option<Option<u16>> {
        self.param("rport").map(|v| v.and_then(|p| p.parse().ok()))
    }
}

fn skip_lws(b: &[u8], from: usize) -> usize {
    from + b.get(from..).unwrap_or_default().iter().take_while(|c| lex::is_lws(**c)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tortuous_via() {
        let v = Via::parse("SIP  /   2.0\r\n /UDP\r\n    192.0.2.2;branch=390skdjuw").unwrap();
        assert_eq!((v.transport, v.host, v.port, v.branch()), (Transport::Udp, "192.0.2.2", None, Some("390skdjuw")));
        let v = Via::parse(" SIP  /    2.0   / UDP  192.168.255.111   ; branch=\r\n z9hG4bK30239").unwrap();
        assert_eq!(v.branch(), Some("z9hG4bK30239"));
        let v = Via::parse("SIP/2.0/UDP [2001:db8::9:1];received=[2001:db8::9:255];branch=z9hG4bKas3-111").unwrap();
        assert_eq!(v.received(), Some("[2001:db8::9:255]"));
        assert_eq!(Via::parse("SIP/2.0/UNKNOWN t4.example.com;branch=x").unwrap().transport, Transport::Other);
        assert!(Via::parse("SIP/2.0/UDP 192.0.2.15;;,;,,").is_none());
        assert!(Via::parse("SIP/7.0/UDP c.example.com;branch=z9hG4bKkdjuw").is_none());
        assert_eq!(Via::parse("SIP/2.0/UDP h:5060;rport;branch=z9").unwrap().rport(), Some(None));
    }
}

#[cfg(test)]
mod transport_tests {
    use super::Transport;

    /// The upper-case-then-match reading [`Transport::parse`] replaced.
    fn reference(s: &[u8]) -> Transport {
        match s.to_ascii_uppercase().as_slice() {
            b"UDP" => Transport::Udp,
            b"TCP" => Transport::Tcp,
            b"TLS" => Transport::Tls,
            b"SCTP" => Transport::Sctp,
            b"WS" => Transport::Ws,
            b"WSS" => Transport::Wss,
            b"INPROC" => Transport::InProc,
            _ => Transport::Other,
        }
    }

    #[test]
    fn folded_match_agrees_with_upper_case_match() {
        let names: [&[u8]; 9] = [b"udp", b"TCP", b"Tls", b"sctp", b"ws", b"wss", b"inproc", b"", b"udpx"];
        for name in names {
            for at in 0..name.len() {
                for c in 0..=255u8 {
                    let mut v = name.to_vec();
                    v[at] = c;
                    if let Ok(text) = std::str::from_utf8(&v) {
                        assert_eq!(Transport::parse(text), reference(&v), "{v:?}");
                    }
                }
            }
            let text = std::str::from_utf8(name).unwrap_or_default();
            assert_eq!(Transport::parse(text), reference(name));
            assert_eq!(Transport::parse(&text.to_ascii_uppercase()), reference(name));
        }
        for other in ["u", "UDP ", "inprocs", "sctps", "w", "\u{e9}dp"] {
            assert_eq!(Transport::parse(other), reference(other.as_bytes()), "{other}");
        }
    }
}
