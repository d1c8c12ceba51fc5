/// Header names the stack and services look at; everything else is `Other`.
/// Compact forms (RFC 3261 §7.3.3) map to their full names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderName {
    Via,
    From,
    To,
    CallId,
    CSeq,
    MaxForwards,
    ContentLength,
    ContentType,
    Contact,
    Route,
    RecordRoute,
    Require,
    ProxyRequire,
    Supported,
    Unsupported,
    Allow,
    Accept,
    Expires,
    Date,
    Server,
    UserAgent,
    Other,
}

impl HeaderName {
    pub fn from_bytes(name: &[u8]) -> HeaderName {
        if name.len() == 1 {
            return match name[0].to_ascii_lowercase() {
                b'v' => HeaderName::Via,
                b'f' => HeaderName::From,
                b't' => HeaderName::To,
                b'i' => HeaderName::CallId,
                b'l' => HeaderName::ContentLength,
                b'c' => HeaderName::ContentType,
                b'm' => HeaderName::Contact,
                b'k' => HeaderName::Supported,
                _ => HeaderName::Other,
            };
        }
        // Candidates by length and first letter, then one case-insensitive compare: a scan of
        // the whole list cost ~160 instructions per header (bench/proxy_instructions.sh).
        let Some(first) = name.first() else { return HeaderName::Other };
        let candidate = match (name.len(), first.to_ascii_lowercase()) {
            (2, b't') => (&b"to"[..], HeaderName::To),
            (3, b'v') => (&b"via"[..], HeaderName::Via),
            (4, b'f') => (&b"from"[..], HeaderName::From),
            (4, b'c') => (&b"cseq"[..], HeaderName::CSeq),
            (4, b'd') => (&b"date"[..], HeaderName::Date),
            (5, b'r') => (&b"route"[..], HeaderName::Route),
            (5, b'a') => (&b"allow"[..], HeaderName::Allow),
            (6, b'a') => (&b"accept"[..], HeaderName::Accept),
            (6, b's') => (&b"server"[..], HeaderName::Server),
            (7, b'c') if name[1].eq_ignore_ascii_case(&b'a') => (&b"call-id"[..], HeaderName::CallId),
            (7, b'c') => (&b"contact"[..], HeaderName::Contact),
            (7, b'r') => (&b"require"[..], HeaderName::Require),
            (7, b'e') => (&b"expires"[..], HeaderName::Expires),
            (9, b's') => (&b"supported"[..], HeaderName::Supported),
            (10, b'u') => (&b"user-agent"[..], HeaderName::UserAgent),
            (11, b'u') => (&b"unsupported"[..], HeaderName::Unsupported),
            (12, b'm') => (&b"max-forwards"[..], HeaderName::MaxForwards),
            (12, b'r') => (&b"record-route"[..], HeaderName::RecordRoute),
            (12, b'c') => (&b"content-type"[..], HeaderName::ContentType),
            (13, b'p') => (&b"proxy-require"[..], HeaderName::ProxyRequire),
            (14, b'c') => (&b"content-length"[..], HeaderName::ContentLength),
            _ => return HeaderName::Other,
        };
        if candidate.0.eq_ignore_ascii_case(name) {
            candidate.1
        } else {
            HeaderName::Other
        }
    }

    /// Canonical spelling used when Tandem writes the header.
    pub fn canonical(self) -> &'static str {
        match self {
            HeaderName::Via => "Via",
            HeaderName::From => "From",
            HeaderName::To => "To",
            HeaderName::CallId => "Call-ID",
            HeaderName::CSeq => "CSeq",
            HeaderName::MaxForwards => "Max-Forwards",
            HeaderName::ContentLength => "Content-Length",
            HeaderName::ContentType => "Content-Type",
            HeaderName::Contact => "Contact",
            HeaderName::Route => "Route",
            HeaderName::RecordRoute => "Record-Route",
            HeaderName::Require => "Require",
            HeaderName::ProxyRequire => "Proxy-Require",
            HeaderName::Supported => "Supported",
            HeaderName::Unsupported => "Unsupported",
            HeaderName::Allow => "Allow",
            HeaderName::Accept => "Accept",
            HeaderName::Expires => "Expires",
            HeaderName::Date => "Date",
            HeaderName::Server => "Server",
            HeaderName::UserAgent => "User-Agent",
            HeaderName::Other => "",
        }
    }

    /// Headers that may appear at most once (RFC 3261 §7.3 and Table 2).
    pub fn is_single_valued(self) -> bool {
        matches!(
            self,
            HeaderName::From
                | HeaderName::To
                | HeaderName::CallId
                | HeaderName::CSeq
                | HeaderName::MaxForwards
                | HeaderName::ContentLength
                | HeaderName::ContentType
        )
    }
}

#[cfg(test)]
mod tests {
    use super::HeaderName;

    #[test]
    fn compact_and_case_insensitive() {
        assert_eq!(HeaderName::from_bytes(b"MaX-fOrWaRdS"), HeaderName::MaxForwards);
        assert_eq!(HeaderName::from_bytes(b"I"), HeaderName::CallId);
        assert_eq!(HeaderName::from_bytes(b"C%6Fntact"), HeaderName::Other);
        assert_eq!(HeaderName::from_bytes(b""), HeaderName::Other);
        let all = [
            ("Via", HeaderName::Via),
            ("From", HeaderName::From),
            ("To", HeaderName::To),
            ("Call-ID", HeaderName::CallId),
            ("CSeq", HeaderName::CSeq),
            ("Max-Forwards", HeaderName::MaxForwards),
            ("Content-Length", HeaderName::ContentLength),
            ("Content-Type", HeaderName::ContentType),
            ("Contact", HeaderName::Contact),
            ("Route", HeaderName::Route),
            ("Record-Route", HeaderName::RecordRoute),
            ("Require", HeaderName::Require),
            ("Proxy-Require", HeaderName::ProxyRequire),
            ("Supported", HeaderName::Supported),
            ("Unsupported", HeaderName::Unsupported),
            ("Allow", HeaderName::Allow),
            ("Accept", HeaderName::Accept),
            ("Expires", HeaderName::Expires),
            ("Date", HeaderName::Date),
            ("Server", HeaderName::Server),
            ("User-Agent", HeaderName::UserAgent),
        ];
        for (text, name) in all {
            assert_eq!(HeaderName::from_bytes(text.as_bytes()), name, "{text}");
            assert_eq!(HeaderName::from_bytes(text.to_ascii_uppercase().as_bytes()), name, "{text}");
            assert_eq!(name.canonical(), text);
        }
        for other in ["Cal-ID", "Contacts", "Call-Id2", "Routes", "Accept-Encoding", "X-To", "Tu"] {
            assert_eq!(HeaderName::from_bytes(other.as_bytes()), HeaderName::Other, "{other}");
        }
    }
}
