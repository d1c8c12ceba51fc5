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
mod tests {
    use super::*;

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
