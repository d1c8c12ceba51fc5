//! Seeded random input for the parser and the stream framer, on stable Rust (no fuzzing engine):
//! pure random bytes, SIP-fragment soup, mutations of the conformance corpus (bit flips,
//! truncation, duplicated/removed lines, huge header counts, long lines, NULs, invalid UTF-8,
//! bare CR/LF, continuation abuse, Content-Length extremes), every truncation of a few files,
//! and every split point of a stream of valid messages.
//!
//! Each input goes to `parse_datagram`, `frame_stream` and (when framed) `parse_stream_message`.
//! The checks: no panic, and the invariants in [`check_message`] / [`check_frame`]. A failure
//! names its input (escaped bytes) so it can be replayed as a case in [`regressions`].
//!
//! Deterministic by default; `TANDEM_RANDOM_SEED=<u64>` picks another seed and
//! `TANDEM_RANDOM_SCALE=<n>` multiplies the number of random inputs (for longer local runs).

use bytes::Bytes;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use tandem_sip::{
    frame_stream, parse_datagram, parse_stream_message, HeaderName, Message, ParseError, ParseLimits, ResponseBuilder, StreamFrame,
    MAX_MESSAGE_BYTES,
};

const DEFAULT_SEED: u64 = 0x5EED_0F7A_4DE4_0001;

fn seed() -> u64 {
    std::env::var("TANDEM_RANDOM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED)
}

fn scale() -> usize {
    std::env::var("TANDEM_RANDOM_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// SplitMix64: small, seeded, stable across platforms and crate versions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Invariants.
// ---------------------------------------------------------------------------------------------

/// Everything a caller may do with a parsed message must work, and the spans must be sane.
fn check_message(input: &[u8], m: &Message, limits: &ParseLimits) {
    let len = input.len();
    assert_eq!(m.buffer().len(), len, "the message keeps the whole buffer");
    assert!(len <= limits.max_message_bytes, "accepted over the limit");
    let wire = m.wire_bytes();
    let body = m.body();
    assert!(wire.len() <= len, "wire_bytes longer than the input");
    assert_eq!(body.len(), m.body_len());
    assert!(body.len() <= wire.len(), "body longer than the message");
    assert!(wire.ends_with(&body), "the body is the end of wire_bytes");
    assert_eq!(&input[..wire.len()], &wire[..]);
    let body_start = wire.len() - body.len();
    for h in m.headers() {
        for span in [h.name_span, h.value] {
            assert!(span.start <= span.end, "inverted span {span:?}");
            assert!(span.range().end <= body_start, "header span {span:?} past the head");
        }
        assert!(!h.name_span.is_empty(), "empty header name");
        let _ = (m.header_value(h), m.header_name_text(h));
    }
    assert!(m.headers().len() <= limits.max_headers, "more headers than the limit");

    // Every accessor, with its result used so nothing is optimized away.
    let mut sink = 0usize;
    sink += m.method().map_or(0, |x| x.as_str().len() + x.metric_label().len());
    sink += m.transaction_method().map_or(0, |x| x.as_str().len());
    sink += usize::from(m.status().unwrap_or(0));
    sink += m.reason().len() + m.request_uri_text().len();
    if let Some(uri) = m.request_uri() {
        sink += usize::from(uri.scheme() == tandem_sip::Scheme::Sip);
        if let Some(sip) = uri.as_sip() {
            sink += sip.user_base().map_or(0, str::len);
            sink += usize::from(sip.has_lr()) + usize::from(sip.host_ip().is_some());
            sink += sip.param("transport").flatten().map_or(0, str::len);
        }
    }
    for name in [
        HeaderName::Via,
        HeaderName::From,
        HeaderName::To,
        HeaderName::CallId,
        HeaderName::CSeq,
        HeaderName::MaxForwards,
        HeaderName::ContentLength,
        HeaderName::ContentType,
        HeaderName::Contact,
        HeaderName::Route,
        HeaderName::RecordRoute,
        HeaderName::Require,
        HeaderName::Supported,
        HeaderName::Expires,
        HeaderName::Other,
    ] {
        sink += m.header(name).map_or(0, str::len);
        sink += m.headers_named(name).count();
        sink += m.values_of(name).map(|(i, v)| i + v.len()).sum::<usize>();
    }
    sink += m.header_by_name("x-unknown").map_or(0, str::len);
    sink += m.header_by_name("l").map_or(0, str::len);
    sink += m.call_id().len() + m.from_value().len() + m.to_value().len();
    sink += m.cseq().map_or(0, |c| c.seq as usize + c.method.as_str().len());
    sink += m.max_forwards().unwrap_or(0) as usize + m.content_length().unwrap_or(0) as usize;
    sink += m.from_tag().map_or(0, str::len) + m.to_tag().map_or(0, str::len);
    for addr in [m.from_addr(), m.to_addr(), m.contact()].into_iter().flatten() {
        sink += addr.tag().map_or(0, str::len) + addr.uri_text.len();
        sink += addr.uri().map_or(0, |u| usize::from(u.as_sip().is_some()));
        sink += addr.param("expires").flatten().map_or(0, str::len);
    }
    if let Some(via) = m.top_via() {
        sink += via.branch().map_or(0, str::len) + via.received().map_or(0, str::len);
        sink += via.rport().map_or(0, |p| usize::from(p.unwrap_or(0)));
        sink += via.host.len() + via.transport.as_str().len();
    }
    sink += m.top_via_transport().map_or(0, |t| usize::from(t.is_reliable()));
    sink += m.top_via_host().len() + usize::from(m.top_via_port().unwrap_or(0));
    sink += m.branch().map_or(0, str::len) + m.via_header_count();
    if let Some((index, span)) = m.top_via_location() {
        assert!(index < m.headers().len(), "top Via index out of range");
        assert!(span.range().end <= body_start);
    }
    sink += m.route_values().count() + m.record_route_values().count();
    let call_id = m.call_id();
    if !call_id.is_empty() {
        let span = m.span_of(call_id).expect("call_id is a slice of the buffer");
        assert_eq!(m.text(span), call_id);
    }
    sink += format!("{m:?} {:?}", m.start_line()).len();
    std::hint::black_box(sink);

    match m.defect() {
        None => {
            // A message without defect has what the stack relies on.
            assert!(!m.call_id().is_empty(), "no defect but no Call-ID");
            assert!(m.cseq().is_some(), "no defect but no CSeq");
            assert!(m.top_via().is_some(), "no defect but no parsable top Via");
            assert!(m.from_addr().is_some() && m.to_addr().is_some());
            if let Some(n) = m.content_length() {
                assert_eq!(m.body_len(), n as usize, "body length differs from Content-Length");
            }
            match m.status() {
                Some(code) => assert!((100..=699).contains(&code), "status {code}"),
                None => {
                    assert!(m.request_uri().is_some(), "no defect but bad Request-URI");
                    assert_eq!(m.method(), m.cseq().map(|c| &c.method), "CSeq method");
                }
            }
        }
        Some(d) => {
            assert!((400..=599).contains(&d.status), "odd defect status {d:?}");
            assert!(!d.reason.is_empty());
        }
    }

    // What the stack does with any request: answer it. The answer must be well-formed when
    // the request was, and building it must never panic.
    if m.is_request() {
        let response = ResponseBuilder::new(m, 400, "Bad Request", Some("t4g")).finish();
        let parsed = parse_datagram(response.clone(), &ParseLimits::default());
        if m.defect().is_none() && m.method().is_some() {
            let r = parsed.unwrap_or_else(|e| panic!("our own response does not parse: {e}"));
            assert_eq!(r.defect(), None, "our own response has a defect: {response:?}");
            assert_eq!(r.status(), Some(400));
            assert_eq!(r.call_id(), m.call_id());
            assert_eq!(r.branch(), m.branch());
            assert_eq!(r.from_tag(), m.from_tag());
            assert_eq!(r.to_tag(), Some(m.to_tag().unwrap_or("t4g")));
            assert_eq!(r.cseq(), m.cseq());
        }
    }
}

/// `parse_datagram` on any input: no panic, and the invariants when it returns a message.
fn check_datagram(input: &[u8], limits: &ParseLimits) -> Result<(), ParseError> {
    let m = parse_datagram(Bytes::copy_from_slice(input), limits)?;
    check_message(input, &m, limits);
    Ok(())
}

/// `frame_stream` on any input: lengths within the buffer and the limit; a framed message,
/// parsed, is within the limit and no longer than its frame.
fn check_frame(input: &[u8], max: usize) -> StreamFrame {
    let frame = frame_stream(input, max);
    match frame {
        StreamFrame::Incomplete => {
            assert!(input.len() <= max || !has_head_end(input), "Incomplete over the limit");
        }
        StreamFrame::KeepAlive { len, double } => {
            assert!(len > 0 && len <= input.len(), "keep-alive length {len}");
            assert!(input[..len].iter().all(|b| matches!(b, b'\r' | b'\n')));
            assert!(input.get(len).is_none_or(|b| !matches!(b, b'\r' | b'\n')));
            assert_eq!(double, input[..len].windows(4).any(|w| w == b"\r\n\r\n"));
        }
        StreamFrame::Invalid { head_len, reason } => {
            assert!(!reason.is_empty());
            if let Some(h) = head_len {
                assert!(h > 0 && h <= input.len(), "head_len {h} of {}", input.len());
            }
        }
        StreamFrame::Message { len } => {
            assert!(len > 0 && len <= input.len(), "frame length {len} of {}", input.len());
            assert!(len <= max, "frame length {len} over the limit {max}");
            let limits = ParseLimits { max_message_bytes: max, ..ParseLimits::default() };
            let framed = &input[..len];
            match parse_stream_message(Bytes::copy_from_slice(framed), &limits) {
                Ok(m) => {
                    check_message(framed, &m, &limits);
                    // With CRLF line ends only, framer and parser see the same header section
                    // and the same Content-Length, so a valid message fills its frame exactly.
                    if m.defect().is_none() && crlf_only(framed) {
                        assert_eq!(m.wire_bytes().len(), len, "parser and framer disagree");
                    }
                }
                Err(ParseError::TooLarge(n)) => panic!("framed {len} bytes, parser says {n} > {max}"),
                Err(_) => {}
            }
        }
    }
    frame
}

fn has_head_end(b: &[u8]) -> bool {
    b.windows(4).any(|w| w == b"\r\n\r\n")
}

fn crlf_only(b: &[u8]) -> bool {
    b.iter().enumerate().all(|(i, c)| match c {
        b'\n' => i > 0 && b[i - 1] == b'\r',
        b'\r' => b.get(i + 1) == Some(&b'\n'),
        _ => true,
    })
}

/// Runs every check on one input, catching panics so the input can be reported.
struct Runner {
    name: &'static str,
    inputs: usize,
    accepted: usize,
    failures: Vec<String>,
}

impl Runner {
    fn new(name: &'static str) -> Runner {
        Runner { name, inputs: 0, accepted: 0, failures: Vec::new() }
    }

    fn run(&mut self, input: &[u8]) {
        self.inputs += 1;
        if self.failures.len() >= 10 {
            return;
        }
        let small_max = 64 + input.len() / 2;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let ok = check_datagram(input, &ParseLimits::default()).is_ok();
            let tight = ParseLimits { max_message_bytes: MAX_MESSAGE_BYTES, max_headers: 4 };
            let _ = check_datagram(input, &tight);
            check_frame(input, MAX_MESSAGE_BYTES);
            check_frame(input, small_max);
            if let Ok(m) = parse_stream_message(Bytes::copy_from_slice(input), &ParseLimits::default()) {
                check_message(input, &m, &ParseLimits::default());
            }
            ok
        }));
        match outcome {
            Ok(accepted) => self.accepted += usize::from(accepted),
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(non-string panic)".into());
                let shown: String = input.escape_ascii().to_string().chars().take(4000).collect();
                self.failures.push(format!("[{}] panic: {msg}\n  input ({} bytes): b\"{shown}\"", self.name, input.len()));
            }
        }
    }

    fn finish(self) {
        println!("{}: {} inputs, {} parsed as datagrams, {} failures", self.name, self.inputs, self.accepted, self.failures.len());
        assert!(self.failures.is_empty(), "{} failing input(s) (seed {:#x}):\n{}", self.failures.len(), seed(), self.failures.join("\n\n"));
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs.
// ---------------------------------------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    std::env::var_os("TANDEM_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance"))
}

/// A valid message always available (even without the corpus).
const BUILTIN: &[u8] = b"INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds\r\n\
Max-Forwards: 70\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
CSeq: 314159 INVITE\r\n\
Contact: <sip:alice@pc33.atlanta.example.com>\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n";

const BUILTIN_RESPONSE: &[u8] = b"SIP/2.0 180 Ringing\r\n\
v: SIP/2.0/UDP [2001:db8::9:1]:5060;branch=z9hG4bKnashds8;received=192.0.2.1\r\n\
t: Bob <sip:bob@biloxi.example.com>;tag=a6c85cf\r\n\
f: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
i: a84b4c76e66710\r\n\
CSeq: 314159 INVITE\r\n\
l: 0\r\n\
\r\n";

fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files = vec![("builtin/invite".to_string(), BUILTIN.to_vec()), ("builtin/180".to_string(), BUILTIN_RESPONSE.to_vec())];
    let dir = corpus_dir();
    if !dir.exists() {
        eprintln!("note: conformance corpus not found at {}; builtin messages only", dir.display());
        return files;
    }
    for sub in ["rfc4475", "rfc4475/extra", "rfc5118", "rfc5118/cl-fixed"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .expect("corpus folder")
            .map(|e| e.expect("corpus entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "dat"))
            .collect();
        names.sort();
        for path in names {
            let name = format!("{sub}/{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("?"));
            files.push((name, std::fs::read(&path).expect("corpus file")));
        }
    }
    files
}

const FRAGMENTS: &[&[u8]] = &[
    b"INVITE",
    b"ACK",
    b"REGISTER",
    b"SIP/2.0",
    b"SIP/2.0 ",
    b"SIP/",
    b"2.0",
    b" ",
    b"  ",
    b"\t",
    b"\r\n",
    b"\n",
    b"\r",
    b"\r\n ",
    b"\r\n\t",
    b"\r\n\r\n",
    b":",
    b";",
    b",",
    b"=",
    b"<",
    b">",
    b"\"",
    b"\\",
    b"[",
    b"]",
    b"@",
    b"/",
    b"?",
    b"&",
    b"%",
    b"%00",
    b"%4",
    b"sip:",
    b"sips:",
    b"tel:",
    b"Via: ",
    b"v: ",
    b"From: ",
    b"f:",
    b"To: ",
    b"t:",
    b"Call-ID: ",
    b"i:",
    b"CSeq: ",
    b"Max-Forwards: ",
    b"Content-Length: ",
    b"l: ",
    b"Contact: ",
    b"m:",
    b"Route: ",
    b"SIP/2.0/UDP ",
    b"SIP / 2.0 / TCP",
    b"branch=",
    b";branch=z9hG4bK",
    b"tag=",
    b";tag=",
    b"received=",
    b";rport",
    b"0",
    b"1",
    b"70",
    b"-1",
    b"4294967295",
    b"4294967296",
    b"99999999999999999999",
    b"2147483648",
    b"example.com",
    b"192.0.2.1",
    b"[2001:db8::1]",
    b"[::ffff:1.2.3.4]",
    b"::",
    b":5060",
    b":99999",
    b"\0",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xf0\x9f\x98\x80",
    b"\x7f",
    b"\x0c",
    b"\x0b",
    b"a",
    b"alice",
    b"INVITE sip:a@b SIP/2.0\r\n",
    b"SIP/2.0 200 OK\r\n",
];

fn soup(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    match rng.below(4) {
        0 => out.extend_from_slice(b"INVITE sip:bob@example.com SIP/2.0\r\n"),
        1 => out.extend_from_slice(b"SIP/2.0 200 OK\r\n"),
        _ => {}
    }
    for _ in 0..1 + rng.below(120) {
        out.extend_from_slice(rng.pick(FRAGMENTS));
    }
    if rng.chance(50) {
        out.extend_from_slice(b"\r\n\r\n");
    }
    out
}

const INTERESTING: &[u8] = b"\0\xff\x80\r\n \t:;,=<>\"\\[]@%0";

const CONTENT_LENGTHS: &[&str] = &[
    "0",
    "-1",
    "-999",
    "+5",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999",
    "65536",
    "65537",
    "999999999",
    "1000000000",
    "0x10",
    "1e3",
    "",
    " ",
    "5 5",
    "00000000000000000000000000005",
    "\u{663}",
    "\t7\t",
    "3;x",
    "1\r\n 2",
];

fn lines(input: &[u8]) -> Vec<Vec<u8>> {
    input.split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec).collect()
}

/// One random mutation of a message.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    let len = input.len();
    match rng.below(23) {
        0 | 1 => {
            if len > 0 {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
        }
        2 => {
            if len > 0 {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
        }
        3 => {
            if len > 0 {
                let i = rng.below(len);
                input[i] = rng.pick(INTERESTING);
            }
        }
        4 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let junk = rng.bytes(n);
            input.splice(at..at, junk);
        }
        5 => {
            if len > 0 {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(32)).min(len);
                input.drain(at..end);
            }
        }
        6 => input.truncate(rng.below(len + 1)),
        7..=9 => {
            // Duplicate, remove or swap lines.
            let mut ls = lines(input);
            if !ls.is_empty() {
                let i = rng.below(ls.len());
                match rng.below(3) {
                    0 => {
                        let copies = if rng.chance(10) { 200 } else { 1 };
                        for _ in 0..copies {
                            let l = ls[i].clone();
                            ls.insert(i, l);
                        }
                    }
                    1 => {
                        ls.remove(i);
                    }
                    _ => {
                        let j = rng.below(ls.len());
                        ls.swap(i, j);
                    }
                }
                *input = ls.concat();
            }
        }
        10 => {
            // Content-Length extremes.
            let value = rng.pick(CONTENT_LENGTHS);
            let ls = lines(input);
            let mut out = Vec::new();
            let mut done = false;
            for l in ls {
                let lower = l.to_ascii_lowercase();
                if !done && (lower.starts_with(b"content-length") || lower.starts_with(b"l:")) {
                    let colon = l.iter().position(|b| *b == b':').unwrap_or(0);
                    out.extend_from_slice(&l[..=colon]);
                    out.push(b' ');
                    out.extend_from_slice(value.as_bytes());
                    out.extend_from_slice(b"\r\n");
                    done = true;
                } else {
                    out.extend_from_slice(&l);
                }
            }
            if !done {
                let at = lines(&out).first().map_or(0, Vec::len);
                let mut header = b"Content-Length: ".to_vec();
                header.extend_from_slice(value.as_bytes());
                header.extend_from_slice(b"\r\n");
                out.splice(at..at, header);
            }
            *input = out;
        }
        11 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(4);
            input.splice(at..at, std::iter::repeat_n(0u8, n));
        }
        12 => {
            // Invalid UTF-8 in the header section.
            let at = rng.below(len.min(400) + 1);
            let bad: &[u8] = rng.pick(&[&b"\xff"[..], b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf"]);
            input.splice(at..at, bad.iter().copied());
        }
        13 => {
            // Line ends: CRLF -> LF, LF -> CR, CRLF -> LFCR, or CR only.
            let from_to: (&[u8], &[u8]) = rng.pick(&[(&b"\r\n"[..], &b"\n"[..]), (b"\n", b"\r"), (b"\r\n", b"\n\r"), (b"\r\n", b"\r\r\n")]);
            *input = replace_all(input, from_to.0, from_to.1);
        }
        14 => {
            // Continuation abuse: folds anywhere, many folds, a fold first, whitespace-only folds.
            let ls = lines(input);
            let mut out = Vec::new();
            for (i, l) in ls.iter().enumerate() {
                out.extend_from_slice(l);
                if i == 0 || rng.chance(20) {
                    let fold: &[u8] = rng.pick(&[&b" \r\n"[..], b"\t\r\n", b"  x\r\n", b" ;\r\n", b" \r\n \r\n \r\n"]);
                    let times = if rng.chance(5) { 500 } else { 1 };
                    for _ in 0..times {
                        out.extend_from_slice(fold);
                    }
                }
            }
            *input = out;
        }
        15 => {
            // Huge header counts.
            let n = rng.pick(&[127usize, 128, 129, 1000, 5000]);
            let at = lines(input).first().map_or(0, Vec::len);
            let header: &[u8] =
                rng.pick(&[&b"X: y\r\n"[..], b"Via: SIP/2.0/UDP h;branch=z9hG4bKx\r\n", b"l: 0\r\n", b"Route: <sip:a;lr>\r\n"]);
            let block: Vec<u8> = header.repeat(n);
            input.splice(at..at, block);
        }
        16 => {
            // Long lines, within and beyond the message limit.
            let n = rng.pick(&[1000usize, 8192, 65_000, 70_000]);
            let at = lines(input).first().map_or(0, Vec::len);
            let mut header = b"Subject: ".to_vec();
            header.extend(std::iter::repeat_n(rng.pick(b"a ;,\"<"), n));
            header.extend_from_slice(b"\r\n");
            input.splice(at..at, header);
        }
        17 => {
            // Leading CRLFs, or CRLF only.
            let n = rng.pick(&[1usize, 2, 4, 1000]);
            if rng.chance(20) {
                *input = b"\r\n".repeat(n);
            } else {
                input.splice(0..0, b"\r\n".repeat(n));
            }
        }
        18 => {
            // Another message (or part of one) after this one.
            let copy = input.clone();
            input.extend_from_slice(&copy[..rng.below(copy.len() + 1)]);
        }
        19 => {
            // Overwrite a header value with a random fragment.
            let mut ls = lines(input);
            if ls.len() > 1 {
                let i = 1 + rng.below(ls.len() - 1);
                if let Some(colon) = ls[i].iter().position(|b| *b == b':') {
                    let mut l = ls[i][..=colon].to_vec();
                    for _ in 0..1 + rng.below(6) {
                        l.extend_from_slice(rng.pick(FRAGMENTS));
                    }
                    l.extend_from_slice(b"\r\n");
                    ls[i] = l;
                    *input = ls.concat();
                }
            }
        }
        20 => {
            // Replace a header name with a compact, odd-cased or empty one.
            let mut ls = lines(input);
            if ls.len() > 1 {
                let i = 1 + rng.below(ls.len() - 1);
                if let Some(colon) = ls[i].iter().position(|b| *b == b':') {
                    let name: &[u8] =
                        rng.pick(&[&b"v"[..], b"l", b"i", b"f", b"t", b"CSEQ", b"", b" ", b"Via ", b"Max-Forwards", b"content-LENGTH"]);
                    let mut l = name.to_vec();
                    l.extend_from_slice(&ls[i][colon..]);
                    ls[i] = l;
                    *input = ls.concat();
                }
            }
        }
        21 => {
            // Valid multi-byte UTF-8, often in the start line.
            let c: &str = rng.pick(&["é", "р", "電", "😀", "\u{feff}", "\u{2028}"]);
            let first_line = lines(input).first().map_or(0, Vec::len);
            let at = if rng.chance(50) { rng.below(first_line + 1) } else { rng.below(len + 1) };
            input.splice(at..at, c.bytes());
        }
        _ => {
            // Splice in a piece of another part of the message.
            if len > 1 {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                let piece = input[a..b].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, piece);
            }
        }
    }
}

fn replace_all(input: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------------

#[test]
fn random_bytes() {
    let mut rng = Rng(seed() ^ 1);
    let mut runner = Runner::new("random bytes");
    for _ in 0..3000 * scale() {
        let n = rng.pick(&[0usize, 1, 2, 3, 4, 8, 16, 64, 256, 1024, 2048]);
        let len = rng.below(n + 1);
        let input = rng.bytes(len);
        runner.run(&input);
    }
    runner.finish();
}

#[test]
fn sip_fragment_soup() {
    let mut rng = Rng(seed() ^ 2);
    let mut runner = Runner::new("fragment soup");
    for _ in 0..8000 * scale() {
        let input = soup(&mut rng);
        runner.run(&input);
    }
    runner.finish();
}

#[test]
fn mutated_corpus() {
    let mut rng = Rng(seed() ^ 3);
    let mut runner = Runner::new("mutated corpus");
    let files = corpus();
    let per_file = 25_000 * scale() / files.len();
    for (_, bytes) in &files {
        runner.run(bytes);
        for _ in 0..per_file {
            let mut input = bytes.clone();
            for _ in 0..1 + rng.below(4) {
                mutate(&mut rng, &mut input);
            }
            runner.run(&input);
        }
    }
    runner.finish();
}

/// Every prefix of a few messages, as a datagram and to the framer; framing is monotonic: a
/// prefix shorter than the message is Incomplete, any longer one frames the same message.
#[test]
fn every_truncation() {
    let mut runner = Runner::new("truncations");
    let files = corpus();
    let chosen = [
        "builtin/invite",
        "builtin/180",
        "rfc4475/wsinv.dat",
        "rfc4475/dblreq.dat",
        "rfc4475/mpart01.dat",
        "rfc4475/unreason.dat",
        "rfc4475/esc01.dat",
        "rfc5118/ipv6-good.dat",
        "rfc5118/cl-fixed/ipv6-in-sdp.dat",
    ];
    let mut framed_files = 0;
    for (name, bytes) in files.iter().filter(|(n, _)| chosen.contains(&n.as_str())) {
        for cut in 0..=bytes.len() {
            runner.run(&bytes[..cut]);
        }
        let StreamFrame::Message { len } = frame_stream(bytes, MAX_MESSAGE_BYTES) else {
            panic!("{name} does not frame");
        };
        framed_files += 1;
        for cut in 0..=bytes.len() {
            let got = frame_stream(&bytes[..cut], MAX_MESSAGE_BYTES);
            let want = if cut < len { StreamFrame::Incomplete } else { StreamFrame::Message { len } };
            assert_eq!(got, want, "{name} cut at {cut}");
        }
    }
    assert!(framed_files >= 2);
    runner.finish();
}

/// A stream of valid messages with keep-alives between them, cut into two reads at every
/// offset (and into many random reads): the framer must hand out exactly the same messages.
#[test]
fn stream_split_at_every_point() {
    let files = corpus();
    let mut messages: Vec<Vec<u8>> = Vec::new();
    for (_, bytes) in &files {
        // Whole, valid messages with a correct Content-Length, framed as a whole.
        if frame_stream(bytes, MAX_MESSAGE_BYTES) != (StreamFrame::Message { len: bytes.len() }) {
            continue;
        }
        let ok = parse_stream_message(Bytes::copy_from_slice(bytes), &ParseLimits::default()).is_ok_and(|m| m.defect().is_none());
        if ok && messages.len() < 8 {
            messages.push(bytes.clone());
        }
    }
    assert!(messages.len() >= 2, "need at least two framable messages");
    let mut stream = Vec::new();
    let keepalives: [&[u8]; 3] = [b"\r\n\r\n", b"\r\n", b""];
    for (i, m) in messages.iter().enumerate() {
        stream.extend_from_slice(keepalives[i % 3]);
        stream.extend_from_slice(m);
    }

    let read_all = |chunks: &[&[u8]]| -> Vec<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            loop {
                match check_frame(&buf, MAX_MESSAGE_BYTES) {
                    StreamFrame::Incomplete => break,
                    StreamFrame::KeepAlive { len, .. } => {
                        buf.drain(..len);
                    }
                    StreamFrame::Message { len } => {
                        let m = parse_stream_message(Bytes::copy_from_slice(&buf[..len]), &ParseLimits::default())
                            .expect("a framed valid message parses");
                        assert_eq!(m.defect(), None);
                        out.push(buf.drain(..len).collect());
                    }
                    StreamFrame::Invalid { reason, .. } => panic!("valid stream invalid: {reason}"),
                }
            }
        }
        assert!(buf.is_empty(), "{} bytes left over", buf.len());
        out
    };

    for cut in 0..=stream.len() {
        let got = read_all(&[&stream[..cut], &stream[cut..]]);
        assert_eq!(got, messages, "split at {cut}");
    }
    let mut rng = Rng(seed() ^ 4);
    for _ in 0..200 {
        let mut chunks = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let spread = rng.pick(&[2usize, 16, 300, 2000]);
            let n = 1 + rng.below(spread);
            let end = (at + n).min(stream.len());
            chunks.push(&stream[at..end]);
            at = end;
        }
        assert_eq!(read_all(&chunks), messages);
    }
    println!("stream of {} messages, {} bytes: every split point framed the same messages", messages.len(), stream.len());
}

/// Hand-picked extremes.
#[test]
fn extremes() {
    let mut runner = Runner::new("extremes");
    let head = "INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:b@c>\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n";
    let mut cases: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\r\n".to_vec(),
        b"\r\n\r\n".to_vec(),
        b"\n".to_vec(),
        b"\r".to_vec(),
        b"\r\n".repeat(MAX_MESSAGE_BYTES / 2),
        b"\r\n".repeat(MAX_MESSAGE_BYTES / 2 + 1),
        vec![b'a'; MAX_MESSAGE_BYTES],
        vec![b'a'; MAX_MESSAGE_BYTES + 1],
        vec![0; 100],
        b"INVITE".to_vec(),
        b"INVITE ".to_vec(),
        b"INVITE  SIP/2.0\r\n\r\n".to_vec(),
        b" INVITE sip:a@b SIP/2.0\r\n\r\n".to_vec(),
        b"SIP/".to_vec(),
        b"SIP/2.0".to_vec(),
        b"SIP/2.0 ".to_vec(),
        b"SIP/2.0 200".to_vec(),
        b"SIP/2.0 99999 x\r\n\r\n".to_vec(),
        b"SIP/2.0 -200 x\r\n\r\n".to_vec(),
        b"SIP/2.0 +20 x\r\n\r\n".to_vec(),
        b"\xff\xfe\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\n \r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\n\t\r\n \r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\n\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\r\r\r".to_vec(),
        b"INVITE sip:[ SIP/2.0\r\n\r\n".to_vec(),
        b"INVITE sip:[::1 SIP/2.0\r\n\r\n".to_vec(),
        b"INVITE sip:a@[::1]:99999 SIP/2.0\r\n\r\n".to_vec(),
        b"INVITE sip:% SIP/2.0\r\n\r\n".to_vec(),
        b"INVITE sip:a@b;=;;= SIP/2.0\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP [\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nFrom: \"\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nFrom: <\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nFrom: \"\\\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nCSeq: \r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nCSeq: 1\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\nCSeq: INVITE\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\n:\r\n\r\n".to_vec(),
        b"INVITE sip:a@b SIP/2.0\r\n:::\r\n\r\n".to_vec(),
    ];
    for value in CONTENT_LENGTHS {
        cases.push(format!("{head}Content-Length: {value}\r\n\r\nbody").into_bytes());
        cases.push(format!("{head}l:{value}\r\nl:{value}\r\n\r\n").into_bytes());
    }
    for n in [127, 128, 129, 4000] {
        cases.push(format!("{head}{}\r\n", "X: y\r\n".repeat(n)).into_bytes());
    }
    let long = "a".repeat(MAX_MESSAGE_BYTES - head.len() - 20);
    cases.push(format!("{head}Subject: {long}\r\n\r\n").into_bytes());
    cases.push(format!("{head}Subject:{}\r\n\r\n", "\r\n x".repeat(10_000)).into_bytes());
    cases.push(format!("{head}Subject:{}\r\n\r\n", "\r\n ".repeat(10_000)).into_bytes());
    cases.push(format!("{head}Via:{}\r\n\r\n", ",".repeat(30_000)).into_bytes());
    cases.push(format!("{head}Route:{}\r\n\r\n", "<sip:a>,".repeat(5_000)).into_bytes());
    cases.push(format!("{head}From: {}\r\n\r\n", "\"".repeat(30_000)).into_bytes());
    cases.push(format!("{head}To: {}\r\n\r\n", "<".repeat(30_000)).into_bytes());
    cases.push(format!("{head}Contact: {}\r\n\r\n", "\\".repeat(30_000)).into_bytes());
    cases.push(format!("{head}Max-Forwards: {}\r\n\r\n", "9".repeat(30_000)).into_bytes());
    for case in &cases {
        runner.run(case);
    }
    runner.finish();
}

/// Reproducers of past failures, replayed on every run (add each new one here).
#[test]
fn regressions() {
    let mut runner = Runner::new("regressions");
    let cases: &[&[u8]] = &[b"INVITE sip:a@b SIP/2.0\r\n\r\n"];
    for case in cases {
        runner.run(case);
    }
    runner.finish();
}

/// KNOWN BUG 1, found by `mutated_corpus` (truncations of any request) and by cargo-fuzz
/// (3 173 executions into the first run).
/// A request line that is a lone token (no SP) makes `request_line` in `src/parse.rs` take the
/// Request-URI from `parts.next().unwrap_or("")`: a static `""` outside the buffer, whose
/// "offset" in the buffer is garbage.
/// - debug build: `parse_datagram` panics, `assertion failed: offset <= parent.len()`
///   (`lex::offset_in`);
/// - release build: `parse_datagram` returns a message (defect 400 "malformed Request-Line"),
///   then `request_uri_text()` or `format!("{msg:?}")` panics with
///   `range start index 81995329 out of range for slice of length 47` (`message.rs`, `text`).
///
/// Likely fix: `parts.next().unwrap_or(&line[line.len()..])`, as `status_line` does for the
/// reason phrase. Fixed that way; kept as a regression test.
#[test]
fn regression_request_line_without_uri() {
    let cases: &[&[u8]] = &[
        b"I",
        b"INVITE",
        b"INVITE\r\n\r\n",
        b"OPTIONS\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n",
        b"\r\nREGISTER\r\nContent-Length: 0\r\n\r\n",
    ];
    for case in cases {
        let m = parse_datagram(Bytes::copy_from_slice(case), &ParseLimits::default()).expect("a lone token is a (defective) request");
        assert_eq!(m.defect().map(|d| d.status), Some(400));
        assert_eq!(m.request_uri_text(), "");
        check_message(case, &m, &ParseLimits::default());
        check_frame(case, MAX_MESSAGE_BYTES);
    }
}

/// KNOWN BUG 2, found by cargo-fuzz (`parse_datagram` and `frame_stream` targets, within
/// seconds of seeding with intmeth.dat's UTF-8) and then by `mutated_corpus` once it inserted
/// valid multi-byte characters. `request_line` in `src/parse.rs` checks an unknown version with
/// `version[..4].eq_ignore_ascii_case("SIP/")`: when byte 4 falls inside a multi-byte UTF-8
/// character, the slice panics. This is `parse_datagram` itself panicking, in release builds
/// too, on a 22-byte datagram:
/// `end byte index 4 is not a char boundary; it is inside '電' (bytes 3..6) of `SIP電``.
///
/// Likely fix: `version.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("SIP/"))`, or compare
/// bytes. Fixed with `get(..4)`; kept as a regression test.
#[test]
fn regression_version_sliced_inside_a_utf8_char() {
    let cases: &[&[u8]] =
        &[b"INVITE sip:a@b SIP\xe9\x9b\xbb\r\n\r\n", b"A a abc\xd1\x80", b"OPTIONS sip:a@b SIP\xc3\xa9/2.0\r\nContent-Length: 0\r\n\r\n"];
    for case in cases {
        let m = parse_datagram(Bytes::copy_from_slice(case), &ParseLimits::default())
            .expect("a request line with a bad version is a (defective) request");
        assert_eq!(m.defect().map(|d| d.status), Some(400));
        check_message(case, &m, &ParseLimits::default());
        check_frame(case, MAX_MESSAGE_BYTES);
    }
}
