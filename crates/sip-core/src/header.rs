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
        const NAMES: &[(&[u8], HeaderName)] = &[
            (b"via", HeaderName::Via),
            (b"from", HeaderName::From),
            (b"to", HeaderName::To),
            (b"call-id", HeaderName::CallId),
            (b"cseq", HeaderName::CSeq),
            (b"max-forwards", HeaderName::MaxForwards),
            (b"content-length", HeaderName::ContentLength),
            (b"content-type", HeaderName::ContentType),
            (b"contact", HeaderName::Contact),
            (b"route", HeaderName::Route),
            (b"record-route", HeaderName::RecordRoute),
            (b"require", HeaderName::Require),
            (b"proxy-require", HeaderName::ProxyRequire),
            (b"supported", HeaderName::Supported),
            (b"unsupported", HeaderName::Unsupported),
            (b"allow", HeaderName::Allow),
            (b"accept", HeaderName::Accept),
            (b"expires", HeaderName::Expires),
            (b"date", HeaderName::Date),
            (b"server", HeaderName::Server),
            (b"user-agent", HeaderName::UserAgent),
        ];
        // Length first: most names are then rejected without a case-insensitive compare.
        NAMES.iter().find(|(n, _)| n.len() == name.len() && n.eq_ignore_ascii_case(name)).map_or(HeaderName::Other, |(_, h)| *h)
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
    }
}
