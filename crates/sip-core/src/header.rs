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
        // Every known name is a token: anything else can only be `Other`.
        if name.is_empty() || !name.iter().all(|b| crate::lex::is_token_byte(*b)) {
            return HeaderName::Other;
        }
        Self::from_token(name)
    }

    /// [`Self::from_bytes`] for a name already checked to be a non-empty token (the parser's
    /// header names): candidates by length and first letter, then one compare of two words.
    /// Folding with `| 0x20` is exact on token bytes: it maps only `A-Z` onto `a-z`, and the
    /// one other byte it would map onto `-` (CR) is not a token byte.
    pub(crate) fn from_token(name: &[u8]) -> HeaderName {
        let Some(first) = name.first() else { return HeaderName::Other };
        if name.len() == 1 {
            return match first.to_ascii_lowercase() {
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
        macro_rules! known {
            ($text:literal, $name:ident) => {
                (const { folded_key($text) }, HeaderName::$name)
            };
        }
        let candidate = match (name.len(), first | 0x20) {
            (2, b't') => known!(b"to", To),
            (3, b'v') => known!(b"via", Via),
            (4, b'f') => known!(b"from", From),
            (4, b'c') => known!(b"cseq", CSeq),
            (4, b'd') => known!(b"date", Date),
            (5, b'r') => known!(b"route", Route),
            (5, b'a') => known!(b"allow", Allow),
            (6, b'a') => known!(b"accept", Accept),
            (6, b's') => known!(b"server", Server),
            (7, b'c') if name.get(1).is_some_and(|b| b | 0x20 == b'a') => known!(b"call-id", CallId),
            (7, b'c') => known!(b"contact", Contact),
            (7, b'r') => known!(b"require", Require),
            (7, b'e') => known!(b"expires", Expires),
            (9, b's') => known!(b"supported", Supported),
            (10, b'u') => known!(b"user-agent", UserAgent),
            (11, b'u') => known!(b"unsupported", Unsupported),
            (12, b'm') => known!(b"max-forwards", MaxForwards),
            (12, b'r') => known!(b"record-route", RecordRoute),
            (12, b'c') => known!(b"content-type", ContentType),
            (13, b'p') => known!(b"proxy-require", ProxyRequire),
            (14, b'c') => known!(b"content-length", ContentLength),
            _ => return HeaderName::Other,
        };
        if key(name) == candidate.0 {
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

/// The bytes of a 2..=16-byte name as two overlapping little-endian words (first and last
/// 8, or first and last 4 below 8 bytes), each byte `| 0x20`. Two names of the same length
/// (at most 16) have equal keys exactly when they are equal after folding; callers compare
/// lengths first. This form builds the constants; [`key`] is the same with word loads.
const fn folded_key(b: &[u8]) -> (u64, u64) {
    let n = b.len();
    let w = if n >= 8 {
        8
    } else if n >= 4 {
        4
    } else {
        n
    };
    let mut lo = 0u64;
    let mut hi = 0u64;
    let mut i = 0;
    while i < w {
        lo |= ((b[i] | 0x20) as u64) << (8 * i);
        hi |= ((b[n - w + i] | 0x20) as u64) << (8 * i);
        i += 1;
    }
    (lo, hi)
}

/// [`folded_key`] with word loads (the loop costs ~50 instructions per header at run time).
fn key(b: &[u8]) -> (u64, u64) {
    const F8: u64 = 0x2020_2020_2020_2020;
    const F4: u32 = 0x2020_2020;
    if let (Some(lo), Some(hi)) = (b.first_chunk::<8>(), b.last_chunk::<8>()) {
        return (u64::from_le_bytes(*lo) | F8, u64::from_le_bytes(*hi) | F8);
    }
    if let (Some(lo), Some(hi)) = (b.first_chunk::<4>(), b.last_chunk::<4>()) {
        return (u64::from(u32::from_le_bytes(*lo) | F4), u64::from(u32::from_le_bytes(*hi) | F4));
    }
    folded_key(b)
}

#[cfg(test)]
mod tests {
    use super::HeaderName;

    fn all_compact(i: usize) -> HeaderName {
        [
            HeaderName::Via,
            HeaderName::From,
            HeaderName::To,
            HeaderName::CallId,
            HeaderName::ContentLength,
            HeaderName::ContentType,
            HeaderName::Contact,
            HeaderName::Supported,
        ][i]
    }

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
        // The reference reading: a case-insensitive compare with every known name.
        let reference = |text: &[u8]| {
            let found = all.iter().find(|(t, _)| t.as_bytes().eq_ignore_ascii_case(text)).map(|(_, n)| *n);
            let compact = [b'v', b'f', b't', b'i', b'l', b'c', b'm', b'k'];
            match text {
                [c] => compact.iter().position(|x| x.eq_ignore_ascii_case(c)).map_or(HeaderName::Other, all_compact),
                _ => found.unwrap_or(HeaderName::Other),
            }
        };
        for (text, _) in all {
            for at in 0..text.len() {
                for with in [b'\r', b'\n', b'-', b'_', b'M', 0x7f, 0xC3, b' ', b':', b'%', b'~', b'0'] {
                    let mut mutated = text.as_bytes().to_vec();
                    mutated[at] = with;
                    assert_eq!(HeaderName::from_bytes(&mutated), reference(&mutated), "{mutated:?}");
                    mutated[at] ^= 0x20;
                    assert_eq!(HeaderName::from_bytes(&mutated), reference(&mutated), "{mutated:?}");
                }
            }
        }
        for c in 0..=255u8 {
            assert_eq!(HeaderName::from_bytes(&[c]), reference(&[c]), "{c}");
        }
        for other in ["Cal-ID", "Contacts", "Call-Id2", "Routes", "Accept-Encoding", "X-To", "Tu"] {
            assert_eq!(HeaderName::from_bytes(other.as_bytes()), HeaderName::Other, "{other}");
        }
    }
}
