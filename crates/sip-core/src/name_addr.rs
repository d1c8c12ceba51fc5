//! `name-addr` / `addr-spec` with header parameters: From, To, Contact, Route, Record-Route.

use crate::lex::{self, trim_lws};
use crate::uri::Uri;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameAddr<'a> {
    pub display: Option<&'a str>,
    /// The URI text (inside `<>` when it was bracketed).
    pub uri_text: &'a str,
    /// Header parameters after the address, without the leading `;`.
    pub params: &'a str,
    pub bracketed: bool,
}

impl<'a> NameAddr<'a> {
    /// Parses one value; any URI scheme is accepted (RFC 4475 §3.3.4).
    pub fn parse(value: &'a str) -> Option<NameAddr<'a>> {
        Self::parse_finding(value, "").map(|(n, _)| n)
    }

    /// [`Self::parse`] and [`Self::tag`] in one pass over the parameters.
    pub(crate) fn parse_tagged(value: &'a str) -> Option<(NameAddr<'a>, Option<&'a str>)> {
        Self::parse_finding(value, "tag")
    }

    fn parse_finding(value: &'a str, param: &str) -> Option<(NameAddr<'a>, Option<&'a str>)> {
        if let Some(parsed) = Self::parse_simple(value, param) {
            return Some(parsed);
        }
        Self::parse_general(value, param)
    }

    /// `[display-name] <URI>[;params]` with a display name of tokens and spaces, nothing to
    /// trim, and a URI the simple URI scan takes: most From, To and Contact values, read
    /// without the general parser's separate passes. `None` means "not this shape" (the general
    /// parser decides), never "invalid" (checked by `simple_scan_agrees_with_general`).
    fn parse_simple(value: &'a str, param: &str) -> Option<(NameAddr<'a>, Option<&'a str>)> {
        let b = value.as_bytes();
        // Nothing to trim at either end (LWS bytes are all <= b' ').
        if *b.first()? <= b' ' || *b.last()? <= b' ' {
            return None;
        }
        let mut lt = 0;
        while b.get(lt).is_some_and(|c| lex::is_token_byte(*c) || *c == b' ') {
            lt += 1;
        }
        if b.get(lt) != Some(&b'<') {
            return None;
        }
        let gt = lt + lex::find_byte(value.get(lt..)?, b'>')?;
        let uri_text = value.get(lt + 1..gt)?;
        Uri::parse(uri_text)?;
        let display = trim_lws(value.get(..lt)?);
        let rest = value.get(gt + 1..)?;
        let (params, found) = match rest.strip_prefix(';') {
            Some(p) => (p, lex::parse_params_find(p, param)?),
            None if rest.is_empty() => ("", None),
            None => return None,
        };
        Some((NameAddr { display: Some(display).filter(|d| !d.is_empty()), uri_text, params, bracketed: true }, found))
    }

    fn parse_general(value: &'a str, param: &str) -> Option<(NameAddr<'a>, Option<&'a str>)> {
        let value = trim_lws(value);
        let lt = lex::find_top_level_lt(value)?;
        let (display, uri_text, rest, bracketed) = match lt {
            Some(lt) => {
                let gt = lt + lex::find_byte(&value[lt..], b'>')?;
                let display = trim_lws(&value[..lt]);
                (Some(display).filter(|d| !d.is_empty()), &value[lt + 1..gt], &value[gt + 1..], true)
            }
            None => match lex::find_byte(value, b';') {
                Some(semi) => (None, trim_lws(&value[..semi]), &value[semi..], false),
                None => (None, value, "", false),
            },
        };
        if let Some(d) = display {
            if !display_name_valid(d) {
                return None;
            }
        }
        Uri::parse(uri_text)?;
        let rest = trim_lws(rest);
        let (params, found) = match rest.strip_prefix(';') {
            Some(p) => (p, lex::parse_params_find(p, param)?),
            None if rest.is_empty() => ("", None),
            None => return None,
        };
        Some((NameAddr { display, uri_text, params, bracketed }, found))
    }

    pub fn uri(&self) -> Option<Uri<'a>> {
        Uri::parse(self.uri_text)
    }

    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        if self.params.is_empty() {
            return None;
        }
        lex::find_param(self.params, name)
    }

    pub fn tag(&self) -> Option<&'a str> {
        self.param("tag").flatten()
    }
}

/// A quoted string, or tokens separated by LWS.
fn display_name_valid(d: &str) -> bool {
    if d.starts_with('"') {
        return lex::skip_quoted(d.as_bytes(), 0) == Some(d.len());
    }
    // Every word a token: the same as every byte a token byte or LWS (`d` is trimmed, not empty).
    d.bytes().all(lex::is_token_or_lws_byte)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Inputs near the simple shapes: seeds and every short mutation of them (one byte
    /// replaced, inserted or removed, from bytes that matter to the grammar), plus random
    /// splices, deterministic.
    pub(crate) fn near_inputs(seeds: &[&str], rounds: usize) -> Vec<String> {
        const BYTES: &[u8] = b" \t\r\n\"<>@:;?=%,.-_[]5aZ~/\\&+'!*()$\x7f\x80\xc3\xa9";
        let mut out: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for seed in seeds {
            let b = seed.as_bytes();
            for i in 0..=b.len() {
                for &c in BYTES {
                    let mut v = b.to_vec();
                    if i < b.len() {
                        v[i] = c;
                        out.push(String::from_utf8_lossy(&v).into_owned());
                        v.remove(i);
                        out.push(String::from_utf8_lossy(&v).into_owned());
                    }
                    let mut w = b.to_vec();
                    w.insert(i, c);
                    out.push(String::from_utf8_lossy(&w).into_owned());
                }
            }
        }
        for _ in 0..rounds {
            let seed = seeds[(next() % seeds.len() as u64) as usize].as_bytes().to_vec();
            let mut v = seed;
            for _ in 0..(next() % 4 + 1) {
                let i = (next() % (v.len() as u64 + 1)) as usize;
                let c = BYTES[(next() % BYTES.len() as u64) as usize];
                match next() % 3 {
                    0 if i < v.len() => v[i] = c,
                    1 if i < v.len() => {
                        v.remove(i);
                    }
                    _ => v.insert(i, c),
                }
            }
            out.push(String::from_utf8_lossy(&v).into_owned());
        }
        out
    }

    #[test]
    fn simple_scan_agrees_with_general() {
        let seeds = [
            "sipp <sip:sipp@127.0.0.1:5061>;tag=12345SIPpTag001",
            "service <sip:service@127.0.0.1:5060>",
            "<sip:sipp@127.0.0.1:5061;transport=UDP>",
            "\"Bob\" <sips:bob@biloxi.example.com>;tag=a6c85cf",
            "Alice Smith <SIP:alice@atlanta.example.com:5060;lr;maddr=1.2.3.4>;tag=1;x",
            "<sip:[2001:db8::1]:5060>;tag=x",
            "<tel:+1-201-555-0123>;tag=1",
            "sip:caller@example.net;tag=134161461246",
            "A <sip:a:pw@h;x=y?h=v>;tag=t;expires=30",
        ];
        let mut simple = 0;
        for v in near_inputs(&seeds, 200_000) {
            if NameAddr::parse_simple(&v, "tag").is_some() {
                simple += 1;
            }
            assert_eq!(NameAddr::parse_finding(&v, "tag"), NameAddr::parse_general(&v, "tag"), "{v:?}");
            assert_eq!(NameAddr::parse_finding(&v, ""), NameAddr::parse_general(&v, ""), "{v:?}");
        }
        assert!(simple > 1000, "the simple scan took only {simple} inputs");
    }

    #[test]
    fn forms() {
        let n = NameAddr::parse(r#""J Rosenberg \\\""       <sip:jdrosen@example.com>  ;   tag = 98asjd8"#).unwrap();
        assert_eq!(n.tag(), Some("98asjd8"));
        assert_eq!(n.uri_text, "sip:jdrosen@example.com");
        let n = NameAddr::parse("sip:caller@example.net;tag=134161461246").unwrap();
        assert_eq!((n.uri_text, n.tag()), ("sip:caller@example.net", Some("134161461246")));
        assert!(NameAddr::parse("isbn:2983792873").is_some());
        assert!(NameAddr::parse(r#""Mr. J. User <sip:j.user@example.com>"#).is_none());
        assert!(NameAddr::parse("Bell, Alexander <sip:a.g.bell@example.com>;tag=43").is_none());
        assert!(NameAddr::parse(r#""Watson, Thomas" < sip:t.watson@example.org >"#).is_none());
        assert!(NameAddr::parse(r#""Joe" <sip:joe@example.org>;;;;"#).is_none());
    }
}
