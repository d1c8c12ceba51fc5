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

pub fn frame_stream(buf: &[u8], max_bytes: usize) -> StreamFrame {
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
    let content_length = match content_length(&buf[..head_len]) {
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

/// Finds a single, well-formed Content-Length (or `l`) header in a header section.
fn content_length(head: &[u8]) -> Result<Option<usize>, &'static str> {
    let mut found = None;
    let mut lines = head.split(|b| *b == b'\n').skip(1).peekable();
    let folded = |l: &&[u8]| l.first().is_some_and(|b| *b == b' ' || *b == b'\t');
    while let Some(line) = lines.next() {
        let Some(colon) = memchr::memchr(b':', line) else {
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
}
