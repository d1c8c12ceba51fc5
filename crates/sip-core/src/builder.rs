//! Serialization by direct writes into one buffer.

use crate::header::HeaderName;
use crate::message::{Header, Message, Span};
use crate::method::Method;
use bytes::{BufMut, Bytes, BytesMut};

/// Writes a message line by line. Headers are written as given; `finish_with_body` adds
/// Content-Length (always, so the message frames on stream transports) and the body.
pub struct MessageWriter {
    buf: BytesMut,
}

impl MessageWriter {
    pub fn with_capacity(capacity: usize) -> Self {
        MessageWriter { buf: BytesMut::with_capacity(capacity) }
    }

    pub fn request_line(mut self, method: &Method, uri: &str) -> Self {
        self.put(method.as_bytes());
        self.put(b" ");
        self.put(uri.as_bytes());
        self.put(b" SIP/2.0\r\n");
        self
    }

    pub fn status_line(mut self, status: u16, reason: &str) -> Self {
        self.put(b"SIP/2.0 ");
        self.put(itoa::Buffer::new().format(status).as_bytes());
        self.put(b" ");
        self.put(reason.as_bytes());
        self.put(b"\r\n");
        self
    }

    pub fn header(&mut self, name: &str, value: &str) -> &mut Self {
        self.header_parts(name, &[value])
    }

    /// One header whose value is the concatenation of `parts` (avoids formatting).
    pub fn header_parts(&mut self, name: &str, parts: &[&str]) -> &mut Self {
        self.put(name.as_bytes());
        self.put(b": ");
        for p in parts {
            self.put(p.as_bytes());
        }
        self.put(b"\r\n");
        self
    }

    pub fn header_u32(&mut self, name: &str, value: u32) -> &mut Self {
        self.header(name, itoa::Buffer::new().format(value))
    }

    /// Copies a received header line, name and value as they were (folding included).
    pub fn copy_header(&mut self, msg: &Message, header: &Header) -> &mut Self {
        // Bytes, not text: the header section was validated as UTF-8 when parsed, and doing
        // it again per copied header was 2.5 % of a proxied call's instructions.
        let name = match header.name {
            HeaderName::Other => msg.raw(header.name_span),
            known => known.canonical().as_bytes(),
        };
        self.put(name);
        self.put(b": ");
        self.put(msg.raw(header.value));
        self.put(b"\r\n");
        self
    }

    /// Copies `headers` of `msg` in order, each exactly as [`Self::copy_header`] would write
    /// it; consecutive lines already in that form on the wire (canonical name, `": "`, value,
    /// CRLF) are copied as one slice of the received bytes instead of four writes per header.
    pub fn copy_header_run(&mut self, msg: &Message, headers: &[Header]) -> &mut Self {
        let mut run: Option<(usize, usize)> = None;
        for h in headers {
            match verbatim_line(msg, h) {
                Some((start, end)) => match &mut run {
                    Some((_, run_end)) if *run_end == start => *run_end = end,
                    _ => {
                        if let Some((a, b)) = run.replace((start, end)) {
                            self.put(msg.raw(Span::new(a, b)));
                        }
                    }
                },
                None => {
                    if let Some((a, b)) = run.take() {
                        self.put(msg.raw(Span::new(a, b)));
                    }
                    self.copy_header(msg, h);
                }
            }
        }
        if let Some((a, b)) = run {
            self.put(msg.raw(Span::new(a, b)));
        }
        self
    }

    /// Copies every header with this name, in order.
    pub fn copy_headers_named(&mut self, msg: &Message, name: HeaderName) -> &mut Self {
        for h in msg.headers().iter().filter(|h| h.name == name) {
            self.copy_header(msg, h);
        }
        self
    }

    pub fn finish_with_body(mut self, content_type: Option<&str>, body: &[u8]) -> Bytes {
        if let Some(ct) = content_type.filter(|_| !body.is_empty()) {
            self.header("Content-Type", ct);
        }
        self.header_u32("Content-Length", body.len() as u32);
        self.put(b"\r\n");
        self.put(body);
        self.buf.freeze()
    }

    pub fn finish(self) -> Bytes {
        self.finish_with_body(None, b"")
    }

    /// Bytes appended as they are: the rest of a received message, spliced (its own
    /// Content-Length, blank line and body included); end with [`Self::into_bytes`].
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.put(bytes);
        self
    }

    /// What was written, with nothing added (for a message completed with [`Self::raw`]).
    pub fn into_bytes(self) -> Bytes {
        self.buf.freeze()
    }

    fn put(&mut self, b: &[u8]) {
        self.buf.put_slice(b);
    }
}

/// The received line of `h` with its CRLF, as `(start, end)` in the buffer, when its bytes are
/// exactly what [`MessageWriter::copy_header`] writes for it.
fn verbatim_line(msg: &Message, h: &Header) -> Option<(usize, usize)> {
    let b: &[u8] = msg.buffer();
    let (name_start, name_end) = (h.name_span.start as usize, h.name_span.end as usize);
    let (value_start, value_end) = (h.value.start as usize, h.value.end as usize);
    if value_start != name_end + 2 || b.get(name_end..value_start)? != b": " || b.get(value_end..value_end + 2)? != b"\r\n" {
        return None;
    }
    if h.name != HeaderName::Other && b.get(name_start..name_end)? != h.name.canonical().as_bytes() {
        return None;
    }
    Some((name_start, value_end + 2))
}

/// Builds a response to a request (RFC 3261 §8.2.6): Via, From, Call-ID and CSeq copied,
/// To copied with a tag added when the request had none and `to_tag` is given.
pub struct ResponseBuilder {
    writer: MessageWriter,
}

impl ResponseBuilder {
    pub fn new(request: &Message, status: u16, reason: &str, to_tag: Option<&str>) -> Self {
        let mut writer = MessageWriter::with_capacity(512 + request.via_header_count() * 64).status_line(status, reason);
        writer.copy_headers_named(request, HeaderName::Via);
        writer.copy_headers_named(request, HeaderName::From);
        match (request.to_tag(), to_tag) {
            (None, Some(tag)) if status > 100 && !request.to_value().is_empty() => {
                writer.header_parts("To", &[request.to_value(), ";tag=", tag]);
            }
            _ => {
                writer.copy_headers_named(request, HeaderName::To);
            }
        }
        writer.copy_headers_named(request, HeaderName::CallId);
        writer.copy_headers_named(request, HeaderName::CSeq);
        ResponseBuilder { writer }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.writer.header(name, value);
        self
    }

    pub fn writer(&mut self) -> &mut MessageWriter {
        &mut self.writer
    }

    pub fn body(self, content_type: &str, body: &[u8]) -> Bytes {
        self.writer.finish_with_body(Some(content_type), body)
    }

    pub fn finish(self) -> Bytes {
        self.writer.finish()
    }
}
