//! Lexical helpers shared by the header parsers (RFC 3261 §25.1).

/// `token` characters of RFC 3261: alphanumerics and `-.!%*_+`'~`. A table: this runs for
/// every byte of every header name and parameter (bench/proxy_instructions.sh).
const TOKEN_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~');
        b += 1;
    }
    table
};

pub(crate) const fn is_token_byte(b: u8) -> bool {
    TOKEN_BYTES[b as usize]
}

pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_token_byte)
}

/// Linear white space, including the CRLF of a folded line.
pub(crate) fn is_lws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Token bytes and LWS: an unquoted display name is tokens separated by LWS.
pub(crate) fn is_token_or_lws_byte(b: u8) -> bool {
    is_token_byte(b) || is_lws(b)
}

pub(crate) fn trim_lws(s: &str) -> &str {
    let b = s.as_bytes();
    // Most values have no white space at either end; LWS bytes are all <= b' '.
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) if first > b' ' && last > b' ' => return s,
        _ => {}
    }
    let mut start = 0;
    let mut end = b.len();
    while start < end && is_lws(b[start]) {
        start += 1;
    }
    while end > start && is_lws(b[end - 1]) {
        end -= 1;
    }
    // LWS bytes are ASCII, so both ends are char boundaries.
    s.get(start..end).unwrap_or("")
}

/// `(start, end)` of `b` without LWS at either end.
pub(crate) fn trim_lws_range(b: &[u8]) -> (usize, usize) {
    let mut start = 0;
    let mut end = b.len();
    while start < end && b.get(start).is_some_and(|c| is_lws(*c)) {
        start += 1;
    }
    while end > start && b.get(end - 1).is_some_and(|c| is_lws(*c)) {
        end -= 1;
    }
    (start, end)
}

/// Index of the first `byte` (ASCII) in `s`. `str::find(char)` goes through the generic
/// `CharSearcher`, which the parser profile showed as its single largest cost.
pub(crate) fn find_byte(s: &str, byte: u8) -> Option<usize> {
    find_in(s.as_bytes(), byte)
}

/// Index of the first `byte` in `b`. Short haystacks (most SIP tokens) are scanned directly;
/// longer ones (lines, values) with SSE2 called directly: `memchr::memchr` picks its
/// implementation through a function pointer on every call, ~60 instructions per header line
/// (bench/proxy_instructions.sh).
pub(crate) fn find_in(b: &[u8], byte: u8) -> Option<usize> {
    if b.len() < 16 {
        return b.iter().position(|c| *c == byte);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(finder) = memchr::arch::x86_64::sse2::memchr::One::new(byte) {
        return finder.find(b);
    }
    memchr::memchr(byte, b)
}

/// Byte offset of `child` inside `parent`; `child` must be a sub-slice of `parent`.
pub(crate) fn offset_in(parent: &str, child: &str) -> usize {
    let offset = (child.as_ptr() as usize).wrapping_sub(parent.as_ptr() as usize);
    debug_assert!(offset <= parent.len());
    offset
}

/// Splits `s` at top-level occurrences of `sep` (outside quoted strings and `<...>`),
/// without allocating. Yields `Err(())` once when a quote or bracket is left open.
pub(crate) struct TopLevelSplit<'a> {
    s: &'a str,
    pos: usize,
    sep: u8,
    done: bool,
}

pub(crate) fn split_top(s: &str, sep: u8) -> TopLevelSplit<'_> {
    TopLevelSplit { s, pos: 0, sep, done: false }
}

/// Bytes a scan over a header value stops at, as bit masks of [`STOPS`].
const STOP_QUOTE: u8 = 1;
const STOP_LT: u8 = 2;
const STOP_COMMA: u8 = 4;
const STOP_SEMI: u8 = 8;
const STOP_EQ: u8 = 16;
/// Not stops: classes the parameter scanner accumulates on the way.
const C_TOKEN: u8 = 32;
const C_TOKEN_OR_COLON: u8 = 64;

/// One table lookup per byte in the scanning loops instead of a chain of compares.
const STOPS: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = STOP_QUOTE;
    table[b'<' as usize] = STOP_LT;
    table[b',' as usize] = STOP_COMMA;
    table[b';' as usize] = STOP_SEMI;
    table[b'=' as usize] = STOP_EQ;
    let mut b = 0;
    while b < 256 {
        if TOKEN_BYTES[b] {
            table[b] |= C_TOKEN | C_TOKEN_OR_COLON;
        }
        b += 1;
    }
    table[b':' as usize] |= C_TOKEN_OR_COLON;
    table
};

/// Index of the first byte at or after `i` whose class is in `mask` (or `b.len()`).
fn skip_to(b: &[u8], mut i: usize, mask: u8) -> usize {
    while let Some(&c) = b.get(i) {
        if STOPS[c as usize] & mask != 0 {
            break;
        }
        i += 1;
    }
    i
}

/// Index of the first byte at or after `i` equal to `x`, `y` or `z` (or `b.len()`): whole Via
/// values are split this way (the top Via of every message), ~7 instructions per byte
/// bytewise. From 16 bytes on with SSE2 called directly (as [`find_in`]; ~300 instructions
/// per Via value with the eight-bytes-at-a-time loop below), shorter rest eight bytes at a time.
fn skip_to_any3(b: &[u8], i: usize, x: u8, y: u8, z: u8) -> usize {
    #[cfg(target_arch = "x86_64")]
    if let Some(rest) = b.get(i..).filter(|r| r.len() >= 16) {
        if let Some(finder) = memchr::arch::x86_64::sse2::memchr::Three::new(x, y, z) {
            return finder.find(rest).map_or(b.len(), |off| i + off);
        }
    }
    skip_to_any3_words(b, i, x, y, z)
}

/// [`skip_to_any3`] eight bytes at a time, then byte by byte.
fn skip_to_any3_words(b: &[u8], mut i: usize, x: u8, y: u8, z: u8) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // Non-zero exactly when some byte of `w` equals `c` (the classic has-zero-byte test).
    let has = |w: u64, c: u8| {
        let v = w ^ (LO * u64::from(c));
        v.wrapping_sub(LO) & !v & HI
    };
    while let Some(chunk) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let w = u64::from_le_bytes(*chunk);
        if has(w, x) | has(w, y) | has(w, z) != 0 {
            break;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == x || c == y || c == z {
            break;
        }
        i += 1;
    }
    i
}

impl<'a> Iterator for TopLevelSplit<'a> {
    type Item = Result<&'a str, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let bytes = self.s.as_bytes();
        let start = self.pos;
        let mut i = start;
        while i < bytes.len() {
            i = skip_to_any3(bytes, i, b'"', b'<', self.sep);
            let Some(&b) = bytes.get(i) else { break };
            match b {
                b'"' => match skip_quoted(bytes, i) {
                    Some(next) => i = next,
                    None => return self.fail(),
                },
                b'<' => match bytes.get(i..).and_then(|rest| memchr::memchr(b'>', rest)) {
                    Some(off) => i += off + 1,
                    None => return self.fail(),
                },
                b if b == self.sep => {
                    self.pos = i + 1;
                    return Some(Ok(self.s.get(start..i).unwrap_or("")));
                }
                _ => i += 1,
            }
        }
        self.done = true;
        Some(Ok(self.s.get(start..).unwrap_or("")))
    }
}

impl TopLevelSplit<'_> {
    fn fail<T>(&mut self) -> Option<Result<T, ()>> {
        self.done = true;
        Some(Err(()))
    }
}

/// Collecting form of [`split_top`], for tests and cold paths.
#[cfg(test)]
pub(crate) fn split_top_level(s: &str, sep: u8) -> Option<Vec<&str>> {
    split_top(s, sep).collect::<Result<Vec<_>, ()>>().ok()
}

/// Index just past the closing quote of the quoted string starting at `start`.
pub(crate) fn skip_quoted(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// A `;name=value` generic parameter, both parts trimmed of LWS (the tests' reference reading).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Param<'a> {
    pub name: &'a str,
    pub value: Option<&'a str>,
}

/// Validates `a=b;c` (what follows the first `;`): empty parameters (`;;`) and non-token
/// names are errors. Returns `None` when invalid.
pub(crate) fn parse_params(s: &str) -> Option<()> {
    scan_params(s, "", false).map(|_| ())
}

/// [`parse_params`] that also returns the value of the first parameter `name`
/// (case-insensitive; `None` when absent or without a value): one pass where the parser used
/// to validate the list and then search it again for a tag or a branch.
pub(crate) fn parse_params_find<'a>(s: &'a str, name: &str) -> Option<Option<&'a str>> {
    scan_params(s, name, false).map(Option::flatten)
}

/// The one scanner behind the parameter functions: splits at top-level `;` (outside quoted
/// strings and `<...>`, as [`split_top`]) and checks each parameter as [`parse_param`], in one
/// pass without iterator layers (it runs on every Via, From, To and URI of every message).
/// With `first_only` it returns at the first `name` without looking at the rest of the list;
/// otherwise it validates the whole list. Outer `None`: invalid (or, with `first_only`,
/// absent); `Some(None)`: absent (whole list) or present without a value.
fn scan_params<'a>(s: &'a str, name: &str, first_only: bool) -> Option<Option<Option<&'a str>>> {
    let b = s.as_bytes();
    let mut found = None;
    let mut start = 0;
    loop {
        // The common shape first: a token name, optionally `=` and a value of token bytes and
        // `:`, up to `;` or the end. The general loop below accepts exactly such a parameter
        // with the same name, value and end (it finds the same first `=` and `;`, and its
        // class bits say "all token"), so taking it here changes nothing but the cost: two
        // tight loops of one table lookup per byte, without the class bookkeeping.
        if let Some((param_name, value, end)) = simple_param(s, start) {
            if found.is_none() && param_name.eq_ignore_ascii_case(name) {
                if first_only {
                    return Some(Some(value));
                }
                found = Some(value);
            }
            if end >= b.len() {
                return if first_only { None } else { Some(found) };
            }
            start = end + 1;
            continue;
        }
        // The first `=` outside quotes and brackets splits name from value. `split_top` +
        // `find_byte` took the first `=` anywhere, but a quote or `<` before it makes the name
        // a non-token either way, so both reject the same parameters.
        let mut eq = None;
        let mut i = start;
        // AND of the byte classes of the name and of the value, accumulated on the way: when
        // they say "all token" (value: token or `:`), the parameter is valid and has no LWS
        // to trim, with no second look at its bytes. Anything else (LWS, quotes, brackets,
        // other bytes) takes the exact check below.
        let mut name_class = 0;
        let mut class = C_TOKEN | C_TOKEN_OR_COLON;
        while let Some(&c) = b.get(i) {
            let k = STOPS[c as usize];
            if k & (STOP_QUOTE | STOP_LT | STOP_SEMI | STOP_EQ) == 0 {
                class &= k;
                i += 1;
                continue;
            }
            match c {
                b';' => break,
                b'"' => {
                    class = 0;
                    i = skip_quoted(b, i)?;
                }
                b'<' => {
                    class = 0;
                    i += memchr::memchr(b'>', b.get(i..)?)? + 1;
                }
                _ if eq.is_none() => {
                    eq = Some(i);
                    name_class = class;
                    class = C_TOKEN | C_TOKEN_OR_COLON;
                    i += 1;
                }
                _ => {
                    class = 0;
                    i += 1;
                }
            }
        }
        let fast = match eq {
            Some(e) => e > start && name_class & C_TOKEN != 0 && class & C_TOKEN_OR_COLON != 0,
            None => i > start && class & C_TOKEN != 0,
        };
        // Every boundary here is an ASCII byte (or an end), so the slices cannot fail.
        let (param_name, value) = match eq {
            Some(e) => (s.get(start..e)?, Some(s.get(e + 1..i)?)),
            None => (s.get(start..i)?, None),
        };
        let (param_name, value) = if fast { (param_name, value) } else { (trim_lws(param_name), value.map(trim_lws)) };
        if !fast && (!is_token(param_name) || !value.is_none_or(value_valid)) {
            return None;
        }
        if found.is_none() && param_name.eq_ignore_ascii_case(name) {
            if first_only {
                return Some(Some(value));
            }
            found = Some(value);
        }
        if i >= b.len() {
            return if first_only { None } else { Some(found) };
        }
        start = i + 1;
    }
}

/// The parameter starting at `start` when it is `token` or `token=value` with a value of token
/// bytes and `:` only, ending at `;` or the end of `s`: its name, value and end (the index of
/// the `;`, or `s.len()`). `None` for any other shape, valid or not.
fn simple_param(s: &str, start: usize) -> Option<(&str, Option<&str>, usize)> {
    let b = s.as_bytes();
    let mut i = start;
    while b.get(i).is_some_and(|c| is_token_byte(*c)) {
        i += 1;
    }
    if i == start {
        return None;
    }
    match b.get(i) {
        None | Some(b';') => Some((s.get(start..i)?, None, i)),
        Some(b'=') => {
            let mut j = i + 1;
            while b.get(j).is_some_and(|c| STOPS[*c as usize] & C_TOKEN_OR_COLON != 0) {
                j += 1;
            }
            match b.get(j) {
                None | Some(b';') => Some((s.get(start..i)?, Some(s.get(i + 1..j)?), j)),
                Some(_) => None,
            }
        }
        Some(_) => None,
    }
}

/// `token`, `[host]` or a quoted string; plain values may also contain `:` (e.g. `maddr`).
fn value_valid(v: &str) -> bool {
    let quoted = v.len() >= 2 && v.starts_with('"') && v.ends_with('"');
    let host_like = v.starts_with('[') && v.ends_with(']');
    quoted || host_like || v.bytes().all(|b| is_token_byte(b) || b == b':')
}

#[cfg(test)]
pub(crate) fn parse_param(raw: &str) -> Option<Param<'_>> {
    let (name, value) = match find_byte(raw, b'=') {
        Some(eq) => (trim_lws(&raw[..eq]), Some(trim_lws(&raw[eq + 1..]))),
        None => (trim_lws(raw), None),
    };
    if !is_token(name) || !value.is_none_or(value_valid) {
        return None;
    }
    Some(Param { name, value })
}

/// The parameter `name` (case-insensitive) in `a=b;c`, without allocating.
/// `None` if absent (or the list is invalid), `Some(None)` for a parameter with no value.
pub(crate) fn find_param<'a>(s: &'a str, name: &str) -> Option<Option<&'a str>> {
    scan_params(s, name, true).flatten()
}

/// Position of the first `<` outside quoted strings; `None` if a quote is unbalanced.
pub(crate) fn find_top_level_lt(s: &str) -> Option<Option<usize>> {
    let bytes = s.as_bytes();
    let mut i = 0;
    loop {
        i = skip_to(bytes, i, STOP_QUOTE | STOP_LT);
        match bytes.get(i) {
            None => return Some(None),
            Some(b'"') => i = skip_quoted(bytes, i)?,
            Some(_) => return Some(Some(i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_respects_quotes_and_brackets() {
        let parts = split_top_level(r#""a,b" <sip:x;y,z>, c"#, b',').unwrap();
        assert_eq!(parts, vec![r#""a,b" <sip:x;y,z>"#, " c"]);
        assert!(split_top_level(r#""open"#, b',').is_none());
    }

    #[test]
    fn params_reject_empty_and_accept_lws() {
        let p = " tag = 1918181833n ; q = 0.33";
        assert!(parse_params(p).is_some());
        assert_eq!(find_param(p, "TAG"), Some(Some("1918181833n")));
        assert_eq!(find_param(p, "q"), Some(Some("0.33")));
        assert_eq!(parse_param("lr"), Some(Param { name: "lr", value: None }));
        assert!(parse_params(";,").is_none());
        assert!(parse_params("a;;b").is_none());
    }

    /// The reading the one-pass scanner replaced: split, then check each parameter.
    fn reference(list: &str, name: &str) -> (Option<()>, Option<Option<&'static str>>, Option<Option<&'static str>>) {
        let list: &'static str = Box::leak(list.to_string().into_boxed_str());
        let params: Option<Vec<Param>> = split_top(list, b';').map(|raw| raw.ok().and_then(parse_param)).collect();
        let find_first = || {
            for raw in split_top(list, b';') {
                let p = parse_param(raw.ok()?)?;
                if p.name.eq_ignore_ascii_case(name) {
                    return Some(p.value);
                }
            }
            None
        };
        let valid = params.as_ref().map(|_| ());
        let found = params.map(|ps| ps.iter().find(|p| p.name.eq_ignore_ascii_case(name)).and_then(|p| p.value));
        (valid, found, find_first())
    }

    /// Random lists of grammar-relevant bytes against split-then-check (kept from a tried
    /// eight-bytes-at-a-time scanner, dropped: decision 0001, third pass).
    #[test]
    fn one_pass_scanner_matches_split_then_check_on_random_lists() {
        const ALPHABET: &[&str] = &[
            "a", "T", "g", "tag", "1", "-", ".", "=", ";", "\"", "<", ">", "\\", " ", "\t", "\r\n ", ":", "[", "]", ",", "/", "\u{e9}", "~",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..100_000 {
            let len = (next() % 24) as usize;
            let list: String = (0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect();
            let (valid, found, first) = reference(&list, "tag");
            assert_eq!(parse_params(&list), valid, "{list:?}");
            assert_eq!(parse_params_find(&list, "tag"), valid.and(found), "{list:?}");
            assert_eq!(find_param(&list, "tag"), first, "{list:?}");
        }
    }

    #[test]
    fn one_pass_scanner_matches_split_then_check() {
        for list in [
            "tag=a;tag=b",
            "tag;tag=b",
            "x=1; TAG = z ;y",
            "x=1;y",
            "a;;tag=1",
            "tag=\"q\"",
            "",
            ";",
            "tag=1;",
            "tag=<a;b>",
            "x=\"a\"<b>\"c\";tag=2",
            "a\"=\"b",
            "x=<a=b>",
            "tag=[::1]",
            "tag=",
            "tag=a:b",
            "tag=a/b",
            "x=\"open;tag=1",
            "tag=1;x=<open",
            "x=\"a\\\\\";tag=3",
            "t\"ag=1",
            "tag =\r\n 5",
            "tag=1,x=2",
            "tag=a=b",
            "a:b=c;tag=1",
            ";tag=1",
            "tag=1;;",
            "branch=z9hG4bK-1;rport;received=1.2.3.4",
            "lr;tag=a:b:c;x",
            "tag=1 ;x",
            "tag=1;x= 2",
        ] {
            let (valid, found, first) = reference(list, "tag");
            assert_eq!(parse_params(list), valid, "{list:?}");
            assert_eq!(parse_params_find(list, "tag"), valid.and(found), "{list:?}");
            assert_eq!(find_param(list, "tag"), first, "{list:?}");
        }
    }

    #[test]
    fn word_scan_matches_byte_scan() {
        let naive = |b: &[u8], i: usize| (i..b.len()).find(|&j| matches!(b[j], b'"' | b'<' | b',')).unwrap_or(b.len().max(i));
        for len in 0..40 {
            for at in 0..=len {
                for c in [b'"', b'<', b',', b'a', 0x80, 0xff, 0x2c ^ 0x80, 0x01] {
                    let mut b: Vec<u8> = (0..len).map(|k| b'a' + (k % 26) as u8).collect();
                    if at < len {
                        b[at] = c;
                    }
                    for from in 0..=len {
                        assert_eq!(skip_to_any3(&b, from, b'"', b'<', b','), naive(&b, from), "{b:?} from {from}");
                        assert_eq!(skip_to_any3_words(&b, from, b'"', b'<', b','), naive(&b, from), "{b:?} from {from}");
                    }
                }
            }
        }
    }

    #[test]
    fn byte_helpers() {
        assert_eq!(trim_lws(" \t a b \r\n"), "a b");
        assert_eq!(trim_lws(" \t "), "");
        assert_eq!(find_byte("abc", b'c'), Some(2));
        assert_eq!(find_byte(&"x".repeat(40), b'y'), None);
        assert_eq!(find_byte(&format!("{}:", "x".repeat(40)), b':'), Some(40));
        assert!(is_token_byte(b'~') && is_token_byte(b'Z') && !is_token_byte(b':') && !is_token_byte(0xC3));
    }
}
