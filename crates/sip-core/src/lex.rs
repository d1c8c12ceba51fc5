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

pub(crate) fn is_token_byte(b: u8) -> bool {
    TOKEN_BYTES[b as usize]
}

pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_token_byte)
}

/// Linear white space, including the CRLF of a folded line.
pub(crate) fn is_lws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

pub(crate) fn trim_lws(s: &str) -> &str {
    let b = s.as_bytes();
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

pub(crate) fn trim_lws_start(s: &str) -> &str {
    let skip = s.bytes().take_while(|b| is_lws(*b)).count();
    s.get(skip..).unwrap_or("")
}

/// Index of the first `byte` (ASCII) in `s`. `str::find(char)` goes through the generic
/// `CharSearcher`, which the parser profile showed as its single largest cost.
pub(crate) fn find_byte(s: &str, byte: u8) -> Option<usize> {
    let b = s.as_bytes();
    // Short haystacks (most SIP tokens) are faster scanned directly than through memchr's setup.
    if b.len() < 16 {
        return b.iter().position(|c| *c == byte);
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
            match bytes[i] {
                b'"' => match skip_quoted(bytes, i) {
                    Some(next) => i = next,
                    None => return self.fail(),
                },
                b'<' => match memchr::memchr(b'>', &bytes[i..]) {
                    Some(off) => i += off + 1,
                    None => return self.fail(),
                },
                b if b == self.sep => {
                    self.pos = i + 1;
                    return Some(Ok(&self.s[start..i]));
                }
                _ => i += 1,
            }
        }
        self.done = true;
        Some(Ok(&self.s[start..]))
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

/// A `;name=value` generic parameter, both parts trimmed of LWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Param<'a> {
    pub name: &'a str,
    pub value: Option<&'a str>,
}

/// Validates `a=b;c` (what follows the first `;`): empty parameters (`;;`) and non-token
/// names are errors. Returns `None` when invalid.
pub(crate) fn parse_params(s: &str) -> Option<()> {
    for raw in split_top(s, b';') {
        parse_param(raw.ok()?)?;
    }
    Some(())
}

/// [`parse_params`] that also returns the value of the first parameter `name`
/// (case-insensitive; `None` when absent or without a value): one pass where the parser used
/// to validate the list and then search it again for a tag or a branch.
pub(crate) fn parse_params_find<'a>(s: &'a str, name: &str) -> Option<Option<&'a str>> {
    let mut seen = false;
    let mut found = None;
    for raw in split_top(s, b';') {
        let p = parse_param(raw.ok()?)?;
        if !seen && p.name.eq_ignore_ascii_case(name) {
            seen = true;
            found = p.value;
        }
    }
    Some(found)
}

pub(crate) fn parse_param(raw: &str) -> Option<Param<'_>> {
    let (name, value) = match find_byte(raw, b'=') {
        Some(eq) => (trim_lws(&raw[..eq]), Some(trim_lws(&raw[eq + 1..]))),
        None => (trim_lws(raw), None),
    };
    if !is_token(name) {
        return None;
    }
    if let Some(v) = value {
        let quoted = v.len() >= 2 && v.starts_with('"') && v.ends_with('"');
        let host_like = v.starts_with('[') && v.ends_with(']');
        if !quoted && !host_like && !is_token(v) && !v.bytes().all(|b| is_token_byte(b) || b == b':') {
            return None;
        }
    }
    Some(Param { name, value })
}

/// The parameter `name` (case-insensitive) in `a=b;c`, without allocating.
/// `None` if absent (or the list is invalid), `Some(None)` for a parameter with no value.
pub(crate) fn find_param<'a>(s: &'a str, name: &str) -> Option<Option<&'a str>> {
    for raw in split_top(s, b';') {
        let p = parse_param(raw.ok()?)?;
        if p.name.eq_ignore_ascii_case(name) {
            return Some(p.value);
        }
    }
    None
}
/// Position of the first `<` outside quoted strings; `None` if a quote is unbalanced.
pub(crate) fn find_top_level_lt(s: &str) -> Option<Option<usize>> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = skip_quoted(bytes, i)?,
            b'<' => return Some(Some(i)),
            _ => i += 1,
        }
    }
    Some(None)
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

    #[test]
    fn one_pass_search_matches_validate_then_find() {
        for list in ["tag=a;tag=b", "tag;tag=b", "x=1; TAG = z ;y", "x=1;y", "a;;tag=1", "tag=\"q\"", ""] {
            let expected = parse_params(list).map(|()| find_param(list, "tag").flatten());
            assert_eq!(parse_params_find(list, "tag"), expected, "{list:?}");
        }
    }

    #[test]
    fn byte_helpers() {
        assert_eq!(trim_lws(" \t a b \r\n"), "a b");
        assert_eq!(trim_lws(" \t "), "");
        assert_eq!(trim_lws_start("\r\n x "), "x ");
        assert_eq!(find_byte("abc", b'c'), Some(2));
        assert_eq!(find_byte(&"x".repeat(40), b'y'), None);
        assert_eq!(find_byte(&format!("{}:", "x".repeat(40)), b':'), Some(40));
        assert!(is_token_byte(b'~') && is_token_byte(b'Z') && !is_token_byte(b':') && !is_token_byte(0xC3));
    }
}
