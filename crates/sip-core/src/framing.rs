//! Message boundaries on stream transports (RFC 3261 §18.3): header section, then
//! Content-Length bytes of body. Runs on every read, so it only scans for what it needs.

/// Largest message Tandem accepts on any transport (and the UDP receive buffer size).
pub const MAX_MESSAGE_BYTES: usize = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFrame {
    /// Not a whole message yet; read more.
    Incomplete,
    /// The first `len` bytes are one message.
    Message { len: usize },
    /// The first `len` bytes are CRLFs: a keep-alive ping (`double: true` for CRLFCRLF, RFC 5626 §4.4.1).
    KeepAlive { len: usize, double: bool },
    /// The stream cannot be framed (no usable Content-Length, or too large): answer if possible,
    /// then close. `head_len` bytes hold the header section when it is complete.
    Invalid { reason: &'static str, head_len: Option<usize> },
}

use crate::lex::find_in;

/// Above this many bytes, a buffer is first searched for the end of its header section before
/// its lines are walked. The walk costs more per line than the search, and a peer trickling a
/// header section in small reads has it repeated on every read: bounded by this, it costs
/// about what the kernel spends receiving those reads (a 60 KB section of bare LF lines took
/// 232 µs per walk against 4 µs per search). A whole message of ordinary size is walked once.
const WALK_UNSEARCHED: usize = 2048;

/// The end of a header section. Built once: `memmem::find` builds its searcher on every call,
/// which cost as much as the search itself on a typical message.
static HEAD_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));

pub fn frame_stream(buf: &[u8], max_bytes: usize) -> StreamFrame {
    frame_stream_walking(buf, max_bytes, WALK_UNSEARCHED)
}

fn frame_stream_walking(buf: &[u8], max_bytes: usize, walk_unsearched: usize) -> StreamFrame {
    let lead = buf.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
    if lead > 0 {
        let double = buf[..lead].windows(4).any(|w| w == b"\r\n\r\n");
        return StreamFrame::KeepAlive { len: lead, double };
    }
    let incomplete_head = || {
        if buf.len() > max_bytes {
            StreamFrame::Invalid { reason: "header section too large", head_len: None }
        } else {
            StreamFrame::Incomplete
        }
    };
    if buf.len() > walk_unsearched && HEAD_END.find(buf).is_none() {
        return incomplete_head();
    }
    // One pass over the header lines finds both the end of the header section and its
    // Content-Length (a search for `\r\n\r\n`, then a second walk over the lines, cost a
    // tenth of a stream message's framing more).
    let mut lines = HeaderLines::new(buf);
    let content_length = content_length(&mut lines);
    // An early verdict (a second Content-Length) still needs the end of the section.
    lines.by_ref().for_each(drop);
    let Some(head_len) = lines.head_len else {
        return incomplete_head();
    };
    let content_length = match content_length {
        Ok(Some(n)) => n,
        Ok(None) => return StreamFrame::Invalid { reason: "Content-Length is required on stream transports", head_len: Some(head_len) },
        Err(reason) => return StreamFrame::Invalid { reason, head_len: Some(head_len) },
    };
    let total = head_len.saturating_add(content_length);
    if total > max_bytes {
        return StreamFrame::Invalid { reason: "message too large", head_len: Some(head_len) };
    }
    if buf.len() < total {
        return StreamFrame::Incomplete;
    }
    StreamFrame::Message { len: total }
}

/// Finds a single, well-formed Content-Length (or `l`) header among header lines.
fn content_length<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Result<Option<usize>, &'static str> {
    let mut found = None;
    let mut lines = lines.peekable();
    let folded = |l: &&[u8]| l.first().is_some_and(|b| *b == b' ' || *b == b'\t');
    while let Some(line) = lines.next() {
        // Only a name starting with c or l can match: most lines end here, before their colon
        // is looked for.
        if !line.iter().find(|c| !c.is_ascii_whitespace()).is_some_and(|c| matches!(c, b'c' | b'C' | b'l' | b'L')) {
            continue;
        }
        let Some(colon) = find_in(line, b':') else {
            continue;
        };
        if folded(&line) {
            continue;
        }
        let name = trim(&line[..colon]);
        if !(name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"l")) {
            continue;
        }
        let mut value = trim(&line[colon + 1..]);
        // A folded value continues on the next line (RFC 3261 §7.3.1).
        if value.is_empty() {
            if let Some(next) = lines.next_if(folded) {
                value = trim(next);
            }
        }
        if found.is_some() {
            return Err("more than one Content-Length");
        }
        if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
            return Err("malformed Content-Length");
        }
        found = Some(value.iter().fold(0usize, |n, d| n * 10 + usize::from(d - b'0')));
    }
    Ok(found)
}

/// The header lines of a buffer's first header section, without their `\n`: the lines after
/// the start line up to the empty line that ends the section (the first `\r\n\r\n`), which
/// is not yielded. When the iterator is done, `head_len` is the section's length with that
/// empty line, or None if the buffer does not hold it yet. Line ends come from the parser's
/// byte search (a byte-at-a-time split was most of the framing's cost).
struct HeaderLines<'a> {
    buf: &'a [u8],
    /// Where the next line starts; None when done.
    at: Option<usize>,
    /// The line before the next one ended with `\r`.
    after_cr: bool,
    head_len: Option<usize>,
}

impl<'a> HeaderLines<'a> {
    fn new(buf: &'a [u8]) -> Self {
        let start_line_end = find_in(buf, b'\n');
        HeaderLines {
            buf,
            at: start_line_end.map(|i| i + 1),
            after_cr: start_line_end.is_some_and(|i| i > 0 && buf[i - 1] == b'\r'),
            head_len: None,
        }
    }
}

impl<'a> Iterator for HeaderLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let at = self.at?;
        let rest = &self.buf[at..];
        let Some(end) = find_in(rest, b'\n') else {
            // No line end: the section's end is not in the buffer.
            self.at = None;
            return None;
        };
        let line = &rest[..end];
        if self.after_cr && line == b"\r" {
            self.at = None;
            self.head_len = Some(at + end + 1);
            return None;
        }
        self.after_cr = line.last() == Some(&b'\r');
        self.at = Some(at + end + 1);
        Some(line)
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let m = b"OPTIONS sip:a@b SIP/2.0\r\nl: 3\r\n\r\nabcNEXT";
        assert_eq!(frame_stream(m, MAX_MESSAGE_BYTES), StreamFrame::Message { len: m.len() - 4 });
        assert_eq!(frame_stream(&m[..20], MAX_MESSAGE_BYTES), StreamFrame::Incomplete);
        assert_eq!(frame_stream(&m[..m.len() - 6], MAX_MESSAGE_BYTES), StreamFrame::Incomplete);
        assert_eq!(frame_stream(b"\r\n\r\nINV", MAX_MESSAGE_BYTES), StreamFrame::KeepAlive { len: 4, double: true });
        let folded = b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length:\r\n 3\r\n\r\nabc";
        assert_eq!(frame_stream(folded, MAX_MESSAGE_BYTES), StreamFrame::Message { len: folded.len() });
        let neg = b"INVITE sip:a@b SIP/2.0\r\nContent-Length: -999\r\n\r\n";
        assert!(matches!(frame_stream(neg, MAX_MESSAGE_BYTES), StreamFrame::Invalid { .. }));
        let big = vec![b'a'; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(frame_stream(&big, MAX_MESSAGE_BYTES), StreamFrame::Invalid { head_len: None, .. }));
    }

    /// The framing this one replaced, kept as the oracle: the end of the header section by a
    /// search for `\r\n\r\n`, then its Content-Length by splitting it into lines a byte at a
    /// time.
    fn frame_stream_by_search(buf: &[u8], max_bytes: usize) -> StreamFrame {
        let lead = buf.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
        if lead > 0 {
            let double = buf[..lead].windows(4).any(|w| w == b"\r\n\r\n");
            return StreamFrame::KeepAlive { len: lead, double };
        }
        let Some(head_len) = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4) else {
            return if buf.len() > max_bytes {
                StreamFrame::Invalid { reason: "header section too large", head_len: None }
            } else {
                StreamFrame::Incomplete
            };
        };
        let content_length = match content_length_by_split(&buf[..head_len]) {
            Ok(Some(n)) => n,
            Ok(None) => {
                return StreamFrame::Invalid { reason: "Content-Length is required on stream transports", head_len: Some(head_len) }
            }
            Err(reason) => return StreamFrame::Invalid { reason, head_len: Some(head_len) },
        };
        let total = head_len.saturating_add(content_length);
        if total > max_bytes {
            return StreamFrame::Invalid { reason: "message too large", head_len: Some(head_len) };
        }
        if buf.len() < total {
            return StreamFrame::Incomplete;
        }
        StreamFrame::Message { len: total }
    }

    fn content_length_by_split(head: &[u8]) -> Result<Option<usize>, &'static str> {
        let mut found = None;
        let mut lines = head.split(|b| *b == b'\n').skip(1).peekable();
        let folded = |l: &&[u8]| l.first().is_some_and(|b| *b == b' ' || *b == b'\t');
        while let Some(line) = lines.next() {
            let Some(colon) = memchr::memchr(b':', line) else { continue };
            if folded(&line) {
                continue;
            }
            let name = trim(&line[..colon]);
            if !(name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"l")) {
                continue;
            }
            let mut value = trim(&line[colon + 1..]);
            if value.is_empty() {
                if let Some(next) = lines.next_if(folded) {
                    value = trim(next);
                }
            }
            if found.is_some() {
                return Err("more than one Content-Length");
            }
            if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
                return Err("malformed Content-Length");
            }
            found = Some(value.iter().fold(0usize, |n, d| n * 10 + usize::from(d - b'0')));
        }
        Ok(found)
    }

    #[test]
    fn framing_agrees_with_the_search_it_replaced() {
        // Streams assembled from pieces that matter to framing (names, folding, whitespace,
        // bare CR/LF, section ends, digits, body bytes), by a fixed generator: every run checks
        // the same ones, whole and cut at a few points, against two size limits.
        const PIECES: &[&[u8]] = &[
            b"INVITE sip:a@b SIP/2.0",
            b"\r\n",
            b"\n",
            b"\r",
            b" ",
            b"\t",
            b"\x0c",
            b":",
            b"Content-Length",
            b"content-length",
            b"CONTENT-LENGTH",
            b"l",
            b"L",
            b"Content-Type",
            b"Call-ID",
            b"CSeq",
            b"Via",
            b"lr",
            b"0",
            b"12",
            b"3",
            b"-3",
            b"1234567890",
            b"x",
            b"Contact: <sip:c@d>",
            b"\r\n ",
            b"\r\n\t",
            b"\r\n\r\n",
            b"\r\n\r\nabc",
            b"\r\nContent-Length: 3\r\n\r\n",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let fixed: [&[u8]; 9] = [
            b"INVITE sip:a@b SIP/2.0\r\nl: 3\r\n\r\nabc",
            b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length:\r\n 3\r\n\r\nabc",
            b"X\n\rContent-Length: 5\r\n\r\n",
            b"X\r\n Content-Length: 5\r\nl:6\r\n\r\n",
            b"X\r\n\r\n",
            b"X\r\nl: 0\r\r\n\r\n",
            b"X\r\nl: 0\n\r\n",
            b"no line ends",
            b"",
        ];
        for buf in fixed {
            for max in [MAX_MESSAGE_BYTES, 8] {
                for walk in [WALK_UNSEARCHED, 0] {
                    assert_eq!(
                        frame_stream_walking(buf, max, walk),
                        frame_stream_by_search(buf, max),
                        "{:?}",
                        String::from_utf8_lossy(buf)
                    );
                }
            }
        }
        for _ in 0..20_000 {
            let n = 1 + next() % 24;
            let mut buf = Vec::new();
            for _ in 0..n {
                buf.extend_from_slice(PIECES[(next() % PIECES.len() as u64) as usize]);
            }
            let cuts = [buf.len(), (next() % (buf.len() as u64 + 1)) as usize, (next() % (buf.len() as u64 + 1)) as usize];
            for cut in cuts {
                let part = &buf[..cut];
                for max in [MAX_MESSAGE_BYTES, 40] {
                    // Walked at once, and searched first (the path of buffers above the limit).
                    for walk in [WALK_UNSEARCHED, 16] {
                        assert_eq!(
                            frame_stream_walking(part, max, walk),
                            frame_stream_by_search(part, max),
                            "{:?}",
                            String::from_utf8_lossy(part)
                        );
                    }
                }
            }
        }
    }
}
