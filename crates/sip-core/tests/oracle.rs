//! Cross-check of Tandem's SIP parser against an independent one: rsipstack 0.7.14's `sip`
//! module (a dev-dependency only; see docs/decisions/0002-parser-oracle-and-fuzzing.md).
//!
//! Inputs: every file of the conformance corpora, and a few hundred generated valid messages
//! (seeded, hence deterministic) that vary header order, compact forms, folding, header-name
//! case, LWS, IPv6 hosts and parameters. Each parser gives a verdict:
//! - ours accepts when `parse_datagram` returns a message with no `defect()`;
//! - the oracle accepts when `SipMessage::try_from` succeeds and its typed accessors for the
//!   headers every stack needs (top Via, From, To, Call-ID, CSeq) succeed.
//!
//! Where both accept they must agree on method / status code, Request-URI, Call-ID, CSeq number
//! and method, From tag, To tag, top Via branch and sent-by host, Max-Forwards and body length.
//! Generated messages are also checked against the values they were built from: ours must
//! match those exactly (no allow-list for that).
//!
//! Every disagreement must be listed in [`KNOWN`] with its reason, keyed by corpus file or, for
//! generated messages, by a feature of the message (`gen:<feature>`). An entry that matches
//! nothing fails the test too, so the list stays exact. Run with `--nocapture` for the table.

use bytes::Bytes;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use tandem_sip::{parse_datagram, ParseLimits};

// ---------------------------------------------------------------------------------------------
// Known, justified disagreements.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Aspect {
    /// We accept, the oracle rejects.
    OracleRejects,
    /// The oracle accepts, we reject (or drop, for a response).
    OracleAccepts,
    Method,
    Status,
    RequestUri,
    CallId,
    CSeqSeq,
    CSeqMethod,
    FromTag,
    ToTag,
    Branch,
    ViaHost,
    MaxForwards,
    BodyLen,
}

struct Known {
    /// A corpus file (`rfc4475/ncl.dat`) or a generated-message feature (`gen:lws@equal`).
    case: &'static str,
    aspect: Aspect,
    why: &'static str,
}

const fn known(case: &'static str, aspect: Aspect, why: &'static str) -> Known {
    Known { case, aspect, why }
}

/// Every disagreement between our parser and the oracle, with the reason. Our verdicts were
/// checked against the RFC text in each case: where the RFC allows either answer, the entry says
/// so; otherwise the oracle is the one that is wrong.
const KNOWN: &[Known] = &[
    // --- RFC 4475 §3.1.2: invalid messages the oracle accepts (it validates little). ---
    known("rfc4475/badinv01.dat", Aspect::OracleAccepts,
        "§3.1.2.1: `Via: SIP/2.0/UDP 192.0.2.15;;,;,,` has empty params/values; RFC: 400. The oracle skips empty params."),
    known("rfc4475/clerr.dat", Aspect::OracleAccepts,
        "§3.1.2.2: Content-Length 9999 > bytes in the UDP datagram; RFC: 400 on UDP. The oracle truncates the body silently."),
    known("rfc4475/ncl.dat", Aspect::OracleAccepts,
        "§3.1.2.3: negative Content-Length (-999); RFC: reject (400). The oracle's `parse().unwrap_or(0)` turns it into 0."),
    known("rfc4475/ltgtruri.dat", Aspect::OracleAccepts,
        "§3.1.2.7: Request-URI enclosed in <>; RFC: 400. The oracle strips the brackets."),
    known("rfc4475/trws.dat", Aspect::OracleAccepts,
        "§3.1.2.10: trailing SP after SIP-Version; RFC: 400, or liberal recovery. Both answers are allowed; we reject."),
    known("rfc4475/escruri.dat", Aspect::OracleAccepts,
        "§3.1.2.11: escaped headers (?Route=) in the Request-URI; RFC: 400, or ignore the headers. Both allowed; we reject."),
    known("rfc4475/badaspec.dat", Aspect::OracleAccepts,
        "§3.1.2.14: spaces inside <addr-spec> in To; RFC: 400 (or liberal recovery). The oracle drops the To URI check."),
    known("rfc4475/quotbal.dat", Aspect::OracleAccepts,
        "§3.1.2.6: unterminated quoted display name in To; RFC: 400 (or liberal recovery). Both allowed; we reject."),
    known("rfc4475/extra/baddn.blankline-terminated.dat", Aspect::OracleAccepts,
        "§3.1.2.15: non-token characters (comma) in unquoted display names; RFC: 400 (or liberal recovery). The oracle does not check display names."),
    known("rfc4475/badvers.dat", Aspect::OracleAccepts,
        "§3.1.2.16: SIP/7.0; RFC: 505 Version Not Supported. The oracle keeps the unknown version and does not reject."),
    known("rfc4475/mismatch01.dat", Aspect::OracleAccepts,
        "§3.1.2.17: CSeq method (INVITE) differs from the request method (OPTIONS); RFC: 400. The oracle does not compare them."),
    known("rfc4475/multi01.dat", Aspect::OracleAccepts,
        "§3.3.8: several values in single-value headers (two CSeq, From, To, Call-ID); RFC: 400. The oracle takes the first."),
    known("rfc4475/mcl01.dat", Aspect::OracleAccepts,
        "§3.3.9: two Content-Length headers; RFC: 400. The oracle takes the last one it saw."),
    // --- Valid messages the oracle rejects or misreads. ---
    known("rfc4475/intmeth.dat", Aspect::OracleRejects,
        "§3.1.1.2: extension method `!interesting-Method...` is a valid token (RFC 3261 §25.1 extension-method); the oracle only knows 14 methods."),
    known("rfc4475/esc02.dat", Aspect::OracleRejects,
        "§3.1.1.5: method RE%47IST%45R is a valid extension method (not REGISTER); the oracle rejects unknown methods."),
    known("rfc4475/esc01.dat", Aspect::RequestUri,
        "§3.1.1.3: the oracle re-escapes `%` when it prints the URI (`sips%253Auser...`); we keep the received text `sips%3Auser%40example.com`."),
    known("rfc4475/wsinv.dat", Aspect::FromTag,
        "§3.1.1.1: `;\\r\\n  tag = 98asjd8`: EQUAL allows LWS (RFC 3261 §25.1); the oracle does not trim it and loses the tag."),
    known("rfc4475/wsinv.dat", Aspect::ToTag,
        "§3.1.1.1: `;   tag    = 1918181833n`: same LWS-around-EQUAL case; the oracle loses the tag."),
    known("rfc4475/inv2543.dat", Aspect::BodyLen,
        "§3.4.1: no Content-Length on UDP, so the body runs to the end of the datagram (RFC 3261 §18.3); the oracle assumes 0."),
    // --- RFC 5118. ---
    known("rfc5118/ipv6-bad.dat", Aspect::OracleAccepts,
        "§4.2: `sip:2001:db8::10` (IPv6 without []); RFC 5118: invalid, reject. The oracle reads host `2001` and accepts."),
    // --- Generated (valid) messages: features the oracle gets wrong. ---
    known("gen:ext-method", Aspect::OracleRejects,
        "extension methods (RFC 3261 §25.1 extension-method = token) are rejected by the oracle, as for intmeth.dat."),
    known("gen:lws@equal/From", Aspect::FromTag,
        "LWS around `=` (EQUAL = SWS \"=\" SWS) makes the oracle lose the tag, as for wsinv.dat."),
    known("gen:lws@equal/To", Aspect::ToTag,
        "LWS around `=` makes the oracle lose the tag, as for wsinv.dat."),
    known("gen:lws@equal/Via", Aspect::Branch,
        "LWS around `=` in `branch = z9hG4bK...` makes the oracle lose the branch."),
    known("gen:fold@equal/From", Aspect::FromTag,
        "a fold next to `=` is LWS around EQUAL; the oracle loses the tag."),
    known("gen:fold@equal/To", Aspect::ToTag,
        "a fold next to `=` is LWS around EQUAL; the oracle loses the tag."),
    known("gen:fold@equal/Via", Aspect::Branch,
        "a fold next to `=` is LWS around EQUAL; the oracle loses the branch."),
    known("gen:no-content-length", Aspect::BodyLen,
        "no Content-Length in a datagram: the body runs to the end (RFC 3261 §18.3); the oracle assumes 0, as for inv2543.dat."),
    known("gen:fold@after-colon/Call-ID", Aspect::CallId,
        "a fold right after `Call-ID:` is SWS (HCOLON), not part of the value; the oracle keeps a leading space in the Call-ID."),
    known("gen:via-transport-foo", Aspect::OracleRejects,
        "an unknown Via transport is valid (other-transport = token, RFC 3261 §25.1); the oracle rejects `SIP/2.0/FOO`."),
    known("gen:ruri-transport-param", Aspect::RequestUri,
        "the oracle re-prints `;transport=tcp` as `;transport=TCP`: equivalent (RFC 3261 §19.1.4) but not the received text."),
    known("gen:escaped-user", Aspect::RequestUri,
        "`%` escapes in the user part are re-escaped by the oracle when printing the URI (as for esc01.dat)."),
];

// ---------------------------------------------------------------------------------------------
// What each parser says about a message.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq)]
struct Fields {
    method: Option<String>,
    status: Option<u16>,
    request_uri: Option<String>,
    call_id: String,
    cseq_seq: u32,
    cseq_method: String,
    from_tag: Option<String>,
    to_tag: Option<String>,
    branch: Option<String>,
    via_host: String,
    max_forwards: Option<u32>,
    body_len: usize,
}

#[derive(Debug, Clone)]
enum Verdict {
    Accept(Fields),
    Reject(String),
}

impl Verdict {
    fn label(&self) -> String {
        match self {
            Verdict::Accept(_) => "accept".into(),
            Verdict::Reject(why) => why.clone(),
        }
    }
}

fn ours(bytes: &[u8]) -> Verdict {
    let m = match parse_datagram(Bytes::copy_from_slice(bytes), &ParseLimits::default()) {
        Ok(m) => m,
        Err(e) => return Verdict::Reject(format!("error: {e}")),
    };
    match m.defect() {
        Some(d) if m.is_request() => return Verdict::Reject(format!("{} {}", d.status, d.reason)),
        Some(d) => return Verdict::Reject(format!("drop: {}", d.reason)),
        None => {}
    }
    let cseq = m.cseq().unwrap_or_else(|| panic!("accepted without a CSeq: {m:?}"));
    Verdict::Accept(Fields {
        method: m.method().map(|x| x.as_str().to_string()),
        status: m.status(),
        request_uri: m.is_request().then(|| m.request_uri_text().to_string()),
        call_id: m.call_id().to_string(),
        cseq_seq: cseq.seq,
        cseq_method: cseq.method.as_str().to_string(),
        from_tag: m.from_tag().map(str::to_string),
        to_tag: m.to_tag().map(str::to_string),
        branch: m.branch().map(str::to_string),
        via_host: m.top_via_host().to_string(),
        max_forwards: m.max_forwards(),
        body_len: m.body_len(),
    })
}

fn short(e: impl std::fmt::Display) -> String {
    let s = e.to_string();
    let line = s.lines().next().unwrap_or("").trim();
    let mut out: String = line.chars().take(70).collect();
    if line.chars().count() > 70 {
        out.push('…');
    }
    out
}

fn oracle(bytes: &[u8]) -> Verdict {
    use rsipstack::sip::prelude::*;
    use rsipstack::sip::SipMessage;
    let msg = match SipMessage::try_from(Bytes::copy_from_slice(bytes)) {
        Ok(m) => m,
        Err(e) => return Verdict::Reject(format!("reject: {}", short(e))),
    };
    let fields = (|| -> Result<Fields, String> {
        let via = msg.top_via_header().map_err(short)?.typed().map_err(short)?;
        let from = msg.from_header().map_err(short)?.typed().map_err(short)?;
        let to = msg.to_header().map_err(short)?.typed().map_err(short)?;
        let call_id = msg.call_id_header().map_err(short)?.value().to_string();
        let cseq = msg.cseq_header().map_err(short)?.typed().map_err(short)?;
        // The oracle has no typed Max-Forwards; read its raw value as a number.
        let max_forwards = msg.max_forwards_header().ok().and_then(|h| h.value().trim().parse::<u32>().ok());
        let (method, status, request_uri, body_len) = match &msg {
            SipMessage::Request(r) => (Some(r.method.to_string()), None, Some(r.uri.to_string()), r.body.len()),
            SipMessage::Response(r) => (None, Some(r.status_code.code()), None, r.body.len()),
        };
        Ok(Fields {
            method,
            status,
            request_uri,
            call_id,
            cseq_seq: cseq.seq,
            cseq_method: cseq.method.to_string(),
            from_tag: from.tag().map(|t| t.value().to_string()),
            to_tag: to.tag().map(|t| t.value().to_string()),
            branch: via.branch().map(|b| b.value().to_string()),
            via_host: via.uri.host_with_port.host.to_string(),
            max_forwards,
            body_len,
        })
    })();
    match fields {
        Ok(f) => Verdict::Accept(f),
        Err(e) => Verdict::Reject(format!("reject: {e}")),
    }
}

/// Replaces each bracketed IPv6 literal by its canonical form (the oracle prints parsed
/// addresses, e.g. `[2001:db8::192.0.2.1]` as `[2001:db8::c000:201]`).
fn canonical_ipv6(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close) => match after[..close].parse::<Ipv6Addr>() {
                Ok(ip) => {
                    let _ = write!(out, "[{ip}]");
                    rest = &after[close + 1..];
                }
                Err(_) => {
                    out.push('[');
                    rest = after;
                }
            },
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Aspects on which two accepted readings differ. `exact` compares texts byte for byte (ours
/// against the generated truth); otherwise IPv6 literals are canonicalized and the Via host is
/// compared case-insensitively (hosts are case-insensitive, RFC 3261 §19.1.4).
fn diff(a: &Fields, b: &Fields, exact: bool) -> Vec<Aspect> {
    let mut out = Vec::new();
    let uri_eq = |x: &Option<String>, y: &Option<String>| match (x, y) {
        (Some(x), Some(y)) if !exact => canonical_ipv6(x) == canonical_ipv6(y),
        _ => x == y,
    };
    let host_eq = |x: &str, y: &str| {
        if exact {
            x == y
        } else {
            canonical_ipv6(x).eq_ignore_ascii_case(&canonical_ipv6(y))
        }
    };
    let checks = [
        (a.method == b.method, Aspect::Method),
        (a.status == b.status, Aspect::Status),
        (uri_eq(&a.request_uri, &b.request_uri), Aspect::RequestUri),
        (a.call_id == b.call_id, Aspect::CallId),
        (a.cseq_seq == b.cseq_seq, Aspect::CSeqSeq),
        (a.cseq_method == b.cseq_method, Aspect::CSeqMethod),
        (a.from_tag == b.from_tag, Aspect::FromTag),
        (a.to_tag == b.to_tag, Aspect::ToTag),
        (a.branch == b.branch, Aspect::Branch),
        (host_eq(&a.via_host, &b.via_host), Aspect::ViaHost),
        (a.max_forwards == b.max_forwards, Aspect::MaxForwards),
        (a.body_len == b.body_len, Aspect::BodyLen),
    ];
    for (same, aspect) in checks {
        if !same {
            out.push(aspect);
        }
    }
    out
}

fn disagreements(ours: &Verdict, oracle: &Verdict) -> Vec<Aspect> {
    match (ours, oracle) {
        (Verdict::Accept(a), Verdict::Accept(b)) => diff(a, b, false),
        (Verdict::Accept(_), Verdict::Reject(_)) => vec![Aspect::OracleRejects],
        (Verdict::Reject(_), Verdict::Accept(_)) => vec![Aspect::OracleAccepts],
        (Verdict::Reject(_), Verdict::Reject(_)) => vec![],
    }
}

/// Checks each case's disagreements against [`KNOWN`]; returns the unexplained ones and counts
/// how often each entry was needed.
struct Ledger {
    used: Vec<usize>,
    unexplained: Vec<String>,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger { used: vec![0; KNOWN.len()], unexplained: Vec::new() }
    }

    /// `keys`: the corpus file, or `gen:<feature>` for each feature of a generated message.
    /// Returns a short agreement label for the table.
    fn account(&mut self, case: &str, keys: &[String], found: &[Aspect], detail: &str) -> String {
        if found.is_empty() {
            return "agree".into();
        }
        let mut labels = Vec::new();
        for aspect in found {
            let matching: Vec<usize> = KNOWN
                .iter()
                .enumerate()
                .filter(|(_, k)| k.aspect == *aspect && keys.iter().any(|key| key == k.case))
                .map(|(i, _)| i)
                .collect();
            if matching.is_empty() {
                self.unexplained.push(format!("{case}: {aspect:?} not in the allow-list\n{detail}"));
                labels.push(format!("UNEXPECTED {aspect:?}"));
            } else {
                for i in matching {
                    self.used[i] += 1;
                }
                labels.push(format!("known {aspect:?}"));
            }
        }
        labels.join(", ")
    }
}

fn describe(ours: &Verdict, oracle: &Verdict, bytes: &[u8]) -> String {
    format!("  ours:   {ours:?}\n  oracle: {oracle:?}\n  input:  {:?}", String::from_utf8_lossy(bytes))
}

// ---------------------------------------------------------------------------------------------
// The corpus.
// ---------------------------------------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    std::env::var_os("TANDEM_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance"))
}

fn corpus_files() -> Option<Vec<(String, Vec<u8>)>> {
    let dir = corpus_dir();
    if !dir.exists() {
        return None;
    }
    let mut files = Vec::new();
    for sub in ["rfc4475", "rfc4475/extra", "rfc5118", "rfc5118/cl-fixed"] {
        for entry in std::fs::read_dir(dir.join(sub)).expect("corpus folder") {
            let path = entry.expect("corpus entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).expect("utf-8 file name").to_string();
            if name.ends_with(".dat") {
                let bytes = std::fs::read(&path).expect("corpus file");
                files.push((format!("{sub}/{name}"), bytes));
            }
        }
    }
    files.sort();
    Some(files)
}

// ---------------------------------------------------------------------------------------------
// Generated valid messages.
// ---------------------------------------------------------------------------------------------

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
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Where RFC 3261 allows linear white space inside a header value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// HCOLON = *( SP / HTAB ) ":" SWS: after the colon (usually one SP).
    AfterColon,
    /// SLASH = SWS "/" SWS (Via sent-protocol).
    Slash,
    /// SEMI = SWS ";" SWS (header parameters, not URI parameters).
    Semi,
    /// EQUAL = SWS "=" SWS (generic-param).
    Equal,
    /// COMMA = SWS "," SWS (between Via values).
    Comma,
    /// LAQUOT = SWS "<" (after a display name).
    Laquot,
    /// Required LWS: Via sent-protocol before sent-by, CSeq number before method,
    /// between display-name tokens and `<`.
    Sep,
}

impl Ctx {
    fn name(self) -> &'static str {
        match self {
            Ctx::AfterColon => "after-colon",
            Ctx::Slash => "slash",
            Ctx::Semi => "semi",
            Ctx::Equal => "equal",
            Ctx::Comma => "comma",
            Ctx::Laquot => "laquot",
            Ctx::Sep => "sep",
        }
    }
}

enum Part {
    Text(String),
    /// A place where LWS may go, with what is written there by default.
    Lws(Ctx, &'static str),
}

#[derive(Default)]
struct Value(Vec<Part>);

impl Value {
    fn t(mut self, s: &str) -> Value {
        self.0.push(Part::Text(s.to_string()));
        self
    }
    fn lws(mut self, ctx: Ctx, default: &'static str) -> Value {
        self.0.push(Part::Lws(ctx, default));
        self
    }
    fn opt(self, ctx: Ctx) -> Value {
        self.lws(ctx, "")
    }
    fn append(mut self, other: Value) -> Value {
        self.0.extend(other.0);
        self
    }
}

struct GenHeader {
    full: &'static str,
    compact: Option<&'static str>,
    value: Value,
}

fn hdr(full: &'static str, compact: Option<&'static str>, value: Value) -> GenHeader {
    GenHeader { full, compact, value }
}

/// Per-message choices of how to write it.
struct Style {
    compact: bool,
    name_case: bool,
    ws_before_colon: bool,
    lws: Vec<Ctx>,
    fold: bool,
    shuffle: bool,
}

struct GenCase {
    id: String,
    features: BTreeSet<String>,
    bytes: Vec<u8>,
    truth: Fields,
}

const TOKEN_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~";

/// A token of `min` to `min + spread - 1` characters.
fn token(rng: &mut Rng, features: &mut BTreeSet<String>, min: usize, spread: usize) -> String {
    let len = min + rng.below(spread);
    let punct = rng.chance(15);
    let alphabet = if punct { TOKEN_CHARS } else { &TOKEN_CHARS[..62] };
    let s: String = (0..len).map(|_| rng.pick(alphabet) as char).collect();
    if s.bytes().any(|b| !b.is_ascii_alphanumeric()) {
        features.insert("token-punct".into());
    }
    s
}

/// A host as written, and the feature it exercises.
fn host(rng: &mut Rng, features: &mut BTreeSet<String>, role: &str) -> String {
    const DOMAINS: &[&str] = &["example.com", "atlanta.example.com", "Biloxi.Example.NET", "host-7.example.org", "a.b-c.d3.example"];
    const V4: &[&str] = &["192.0.2.33", "198.51.100.7", "10.0.0.1"];
    const V6: &[&str] =
        &["[2001:db8::10]", "[2001:DB8:0:0:0:0:0:9]", "[::1]", "[::ffff:192.0.2.10]", "[2001:db8::192.0.2.1]", "[fe80::1:2:3:4]"];
    match rng.below(10) {
        0..=4 => rng.pick(DOMAINS).to_string(),
        5..=6 => rng.pick(V4).to_string(),
        _ => {
            features.insert(format!("{role}-ipv6"));
            rng.pick(V6).to_string()
        }
    }
}

const METHODS: &[&str] = &[
    "INVITE",
    "ACK",
    "BYE",
    "CANCEL",
    "OPTIONS",
    "REGISTER",
    "PRACK",
    "SUBSCRIBE",
    "NOTIFY",
    "PUBLISH",
    "INFO",
    "REFER",
    "MESSAGE",
    "UPDATE",
];

fn request_uri(rng: &mut Rng, f: &mut BTreeSet<String>) -> String {
    if rng.chance(4) {
        f.insert("ruri-tel".into());
        return rng.pick(&["tel:+1-555-123-4567", "tel:+358-555-1234567;postd=pp22"]).to_string();
    }
    let mut s = String::new();
    if rng.chance(10) {
        f.insert("sips".into());
        s.push_str("sips:");
    } else {
        s.push_str("sip:");
    }
    match rng.below(10) {
        0..=5 => {
            s.push_str(rng.pick(&["alice", "bob.smith", "+15551234567", "u_1-x"]));
            s.push('@');
        }
        6 => {
            f.insert("escaped-user".into());
            s.push_str(rng.pick(&["al%69ce", "I%20have%20spaces"]));
            s.push('@');
        }
        7 => {
            f.insert("user-semicolon".into());
            s.push_str("user;par=u%40example.net@");
            f.insert("escaped-user".into());
        }
        8 => {
            f.insert("user-password".into());
            s.push_str("alice:secret@");
        }
        _ => {}
    }
    s.push_str(&host(rng, f, "ruri"));
    if rng.chance(25) {
        f.insert("ruri-port".into());
        s.push_str(rng.pick(&[":5060", ":5070", ":65535", ":1"]));
    }
    if rng.chance(30) {
        f.insert("ruri-params".into());
        let mut used = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let p = rng.pick(&[";transport=tcp", ";lr", ";maddr=192.0.2.9", ";ttl=5", ";user=phone", ";x-custom=abc", ";novalue"]);
            if !used.contains(&p) {
                used.push(p);
                s.push_str(p);
            }
        }
        if used.contains(&";transport=tcp") {
            f.insert("ruri-transport-param".into());
        }
    }
    s
}

/// `;name=value` header parameters (SEMI and EQUAL allow LWS).
fn param(name: &str, value: Option<&str>) -> Value {
    let v = Value::default().opt(Ctx::Semi).t(";").opt(Ctx::Semi).t(name);
    match value {
        Some(val) => v.opt(Ctx::Equal).t("=").opt(Ctx::Equal).t(val),
        None => v,
    }
}

/// Header params with the one that matters (`tag`, `branch`) somewhere among others.
fn params_with(
    rng: &mut Rng,
    f: &mut BTreeSet<String>,
    key: Option<(&str, &str)>,
    extras: &[(&'static str, Option<&'static str>)],
    feature_not_first: &str,
) -> Value {
    let mut list: Vec<(String, Option<String>)> = Vec::new();
    for _ in 0..rng.below(3) {
        let (n, v) = rng.pick(extras);
        if !list.iter().any(|(x, _)| x == n) {
            list.push((n.to_string(), v.map(str::to_string)));
        }
    }
    if let Some((n, v)) = key {
        let at = rng.below(list.len() + 1);
        if at > 0 {
            f.insert(feature_not_first.into());
        }
        list.insert(at, (n.to_string(), Some(v.to_string())));
    }
    list.iter().fold(Value::default(), |acc, (n, v)| acc.append(param(n, v.as_deref())))
}

fn via_value(rng: &mut Rng, f: &mut BTreeSet<String>, branch: &str, top: bool) -> (Value, String) {
    let transport = match rng.below(20) {
        0..=9 => "UDP",
        10..=13 => "TCP",
        14 => "TLS",
        15 => "SCTP",
        16 => "WS",
        17 => "WSS",
        18 => {
            if top {
                f.insert("via-transport-tls-sctp".into());
            }
            "TLS-SCTP"
        }
        _ => {
            if top {
                f.insert("via-transport-foo".into());
            }
            "FOO"
        }
    };
    let host = host(rng, f, if top { "via" } else { "via2" });
    let mut sent_by = host.clone();
    if rng.chance(40) {
        if top {
            f.insert("via-port".into());
        }
        sent_by.push_str(rng.pick(&[":5060", ":5061", ":49152"]));
    }
    let extras: &[(&'static str, Option<&'static str>)] = &[
        ("rport", None),
        ("received", Some("192.0.2.1")),
        ("received", Some("[2001:db8::9:255]")),
        ("received", Some("2001:db8::9:255")),
        ("ttl", Some("16")),
        ("maddr", Some("224.2.0.1")),
        ("x-ext", None),
        ("x-q", Some("\"quoted value\"")),
    ];
    let params = params_with(rng, f, Some(("branch", branch)), extras, "branch-not-first");
    let v = Value::default()
        .t("SIP")
        .opt(Ctx::Slash)
        .t("/")
        .opt(Ctx::Slash)
        .t("2.0")
        .opt(Ctx::Slash)
        .t("/")
        .opt(Ctx::Slash)
        .t(transport)
        .lws(Ctx::Sep, " ")
        .t(&sent_by)
        .append(params);
    (v, host)
}

/// A From/To value carrying `tag` (if any) among other parameters.
fn addr_value(rng: &mut Rng, f: &mut BTreeSet<String>, user: &str, tag: Option<String>) -> Value {
    let host = host(rng, f, "addr");
    let mut uri = format!("sip:{user}@{host}");
    let display = rng.below(5);
    let uri_params = rng.chance(15);
    let addr_spec = display == 0 && !uri_params && rng.chance(40);
    let mut v = Value::default();
    match display {
        1 => {
            v = v.t(rng.pick(&["Alice", "Bob Smith", "Mr.-Watson"])).lws(Ctx::Sep, " ");
            f.insert("display-token".into());
        }
        2 => {
            v = v.t("\"Alice Liddell\"").opt(Ctx::Laquot);
            f.insert("display-quoted".into());
        }
        3 => {
            v = v.t("\"J Rosenberg \\\\\\\"\"").opt(Ctx::Laquot);
            f.insert("display-quoted-escapes".into());
        }
        _ => {}
    }
    if uri_params {
        f.insert("addr-uri-params".into());
        uri.push_str(rng.pick(&[";transport=tcp", ";lr", ";user=phone"]));
    }
    if addr_spec {
        f.insert("addr-spec".into());
        v = v.t(&uri);
    } else {
        v = v.t(&format!("<{uri}>"));
    }
    let key = tag.as_deref().map(|t| ("tag", t));
    let extras: &[(&'static str, Option<&'static str>)] = &[("x-p", Some("1")), ("x-flag", None), ("x-q", Some("\"a b\""))];
    v.append(params_with(rng, f, key, extras, "tag-not-first"))
}

fn sdp_body(rng: &mut Rng) -> Vec<u8> {
    let mut b = String::new();
    b.push_str("v=0\r\n");
    let _ = write!(b, "o=alice 2890844526 {} IN IP4 192.0.2.4\r\n", rng.below(100000));
    b.push_str("s=-\r\nc=IN IP4 192.0.2.4\r\nt=0 0\r\n");
    for _ in 0..rng.below(4) {
        let _ = write!(b, "m=audio {} RTP/AVP 0 8 97\r\n", 49152 + rng.below(1000));
    }
    b.into_bytes()
}

fn render(style: &Style, rng: &mut Rng, f: &mut BTreeSet<String>, h: &GenHeader) -> String {
    let mut name = match h.compact {
        Some(c) if style.compact && rng.chance(60) => {
            f.insert(format!("compact-{c}"));
            c.to_string()
        }
        _ => h.full.to_string(),
    };
    if style.name_case {
        let mixed: String = name.chars().map(|c| if rng.chance(50) { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() }).collect();
        if mixed != name {
            f.insert("name-case".into());
        }
        name = mixed;
    }
    let mut line = name;
    if style.ws_before_colon {
        f.insert("ws-before-colon".into());
        line.push_str(rng.pick(&[" ", "\t", "   "]));
    }
    line.push(':');
    let mut value = vec![Part::Lws(Ctx::AfterColon, " ")];
    value.extend(h.value.0.iter().map(|p| match p {
        Part::Text(s) => Part::Text(s.clone()),
        Part::Lws(c, d) => Part::Lws(*c, d),
    }));
    for part in &value {
        match part {
            Part::Text(s) => line.push_str(s),
            Part::Lws(ctx, default) => {
                if style.fold && rng.chance(15) {
                    f.insert(format!("fold@{}", ctx.name()));
                    f.insert(format!("fold@{}/{}", ctx.name(), h.full));
                    line.push_str(rng.pick(&["\r\n ", "\r\n\t", " \r\n  "]));
                } else if style.lws.contains(ctx) && rng.chance(60) {
                    let ws = rng.pick(&[" ", "  ", "\t", " \t "]);
                    if ws != *default {
                        f.insert(format!("lws@{}", ctx.name()));
                        f.insert(format!("lws@{}/{}", ctx.name(), h.full));
                    }
                    line.push_str(ws);
                } else {
                    line.push_str(default);
                }
            }
        }
    }
    line.push_str("\r\n");
    line
}

fn generate(seed: u64, index: usize) -> GenCase {
    let mut rng = Rng(seed ^ (index as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut f = BTreeSet::new();
    let ctxs = [Ctx::AfterColon, Ctx::Slash, Ctx::Semi, Ctx::Equal, Ctx::Comma, Ctx::Laquot, Ctx::Sep];
    let style = Style {
        compact: rng.chance(35),
        name_case: rng.chance(20),
        ws_before_colon: rng.chance(10),
        lws: ctxs.iter().copied().filter(|_| rng.chance(20)).collect(),
        fold: rng.chance(20),
        shuffle: rng.chance(40),
    };
    let is_request = rng.chance(70);
    let mut truth = Fields::default();

    // Start line.
    let start = if is_request {
        let method = if rng.chance(6) {
            f.insert("ext-method".into());
            rng.pick(&["FOOBAR", "X-PING", "NEWMETHOD"]).to_string()
        } else {
            rng.pick(METHODS).to_string()
        };
        let uri = request_uri(&mut rng, &mut f);
        truth.method = Some(method.clone());
        truth.request_uri = Some(uri.clone());
        truth.cseq_method = method.clone();
        format!("{method} {uri} SIP/2.0\r\n")
    } else {
        let (code, reason) = rng.pick(&[
            (100u16, "Trying"),
            (180, "Ringing"),
            (183, "Session Progress"),
            (200, "OK"),
            (202, "Accepted"),
            (302, "Moved Temporarily"),
            (401, "Unauthorized"),
            (404, "Not Found"),
            (486, "Busy Here"),
            (487, "Request Terminated"),
            (503, "Service Unavailable"),
            (603, "Decline"),
            (499, "Custom Extension Code"),
        ]);
        let reason = match rng.below(10) {
            0 => {
                f.insert("empty-reason".into());
                ""
            }
            1 => {
                f.insert("utf8-reason".into());
                "Всё хорошо"
            }
            _ => reason,
        };
        truth.status = Some(code);
        truth.cseq_method = rng.pick(METHODS).to_string();
        format!("SIP/2.0 {code} {reason}\r\n")
    };

    // Core headers.
    let mut headers: Vec<(bool, GenHeader)> = Vec::new(); // (is_via, header)
    let branch = format!("z9hG4bK{}", token(&mut rng, &mut f, 4, 12));
    let (mut via, via_host) = via_value(&mut rng, &mut f, &branch, true);
    truth.branch = Some(branch);
    truth.via_host = via_host;
    if rng.chance(15) {
        f.insert("via-comma-list".into());
        let second = format!("z9hG4bK{}", token(&mut rng, &mut f, 8, 1));
        let (v2, _) = via_value(&mut rng, &mut f, &second, false);
        via = via.opt(Ctx::Comma).t(",").opt(Ctx::Comma).append(v2);
    }
    headers.push((true, hdr("Via", Some("v"), via)));
    if rng.chance(20) {
        f.insert("via-multi-header".into());
        let second = format!("z9hG4bK{}", token(&mut rng, &mut f, 8, 1));
        let (v2, _) = via_value(&mut rng, &mut f, &second, false);
        headers.push((true, hdr("Via", Some("v"), v2)));
    }
    if is_request && rng.chance(90) {
        let n = rng.below(256) as u32;
        let text = if rng.chance(15) {
            f.insert("leading-zeros".into());
            format!("{n:04}")
        } else {
            n.to_string()
        };
        truth.max_forwards = Some(n);
        headers.push((false, hdr("Max-Forwards", None, Value::default().t(&text))));
    }
    let from_tag = token(&mut rng, &mut f, 1, 16);
    truth.from_tag = Some(from_tag.clone());
    let from = addr_value(&mut rng, &mut f, "alice", Some(from_tag));
    headers.push((false, hdr("From", Some("f"), from)));
    let to_tag = if (!is_request && truth.status != Some(100)) || (is_request && rng.chance(30)) {
        Some(token(&mut rng, &mut f, 1, 16))
    } else {
        None
    };
    truth.to_tag = to_tag.clone();
    let to = addr_value(&mut rng, &mut f, "bob", to_tag);
    headers.push((false, hdr("To", Some("t"), to)));
    let call_id = match rng.below(6) {
        0 => "f81d4fae-7dec-11d0-a765-00a0c91e6bf6".to_string(),
        1 => {
            f.insert("callid-punct".into());
            "a8f-3.x_y!z%41+`'~()<>:\\\"/[]?{}@192.0.2.1".to_string()
        }
        _ => format!("{}@{}", token(&mut rng, &mut f, 6, 20), rng.pick(&["host.example.com", "192.0.2.1", "[2001:db8::1]"])),
    };
    truth.call_id = call_id.clone();
    headers.push((false, hdr("Call-ID", Some("i"), Value::default().t(&call_id))));
    let seq = if rng.chance(5) {
        f.insert("cseq-max".into());
        (1u32 << 31) - 1
    } else {
        rng.below(100_000) as u32
    };
    truth.cseq_seq = seq;
    let seq_text = if rng.chance(10) {
        f.insert("leading-zeros".into());
        format!("{seq:08}")
    } else {
        seq.to_string()
    };
    let cseq = Value::default().t(&seq_text).lws(Ctx::Sep, " ").t(&truth.cseq_method.clone());
    headers.push((false, hdr("CSeq", None, cseq)));

    // Other headers.
    if rng.chance(60) {
        let contact = format!("<sip:alice@{}>", host(&mut rng, &mut f, "contact"));
        let v = Value::default().t(&contact).append(param("expires", Some("3600")));
        headers.push((false, hdr("Contact", Some("m"), v)));
    }
    for (full, compact, value) in [
        ("Supported", Some("k"), "timer, 100rel"),
        ("User-Agent", None, "Tandem-oracle/1.0 (test)"),
        ("Allow", None, "INVITE, ACK, CANCEL, OPTIONS, BYE"),
        ("Route", None, "<sip:proxy.example.com;lr>"),
        ("Subject", Some("s"), "lunch?"),
        ("X-Ext!~", None, "anything ; goes, here"),
        ("Date", None, "Sat, 13 Nov 2010 23:29:00 GMT"),
    ] {
        if rng.chance(20) {
            headers.push((false, hdr(full, compact, Value::default().t(value))));
        }
    }
    if rng.chance(5) {
        f.insert("empty-header-value".into());
        headers.push((false, hdr("Subject", None, Value::default())));
    }
    let body = if rng.chance(40) { sdp_body(&mut rng) } else { Vec::new() };
    truth.body_len = body.len();
    if !body.is_empty() {
        headers.push((false, hdr("Content-Type", Some("c"), Value::default().t("application/sdp"))));
    }
    if rng.chance(10) {
        f.insert("no-content-length".into());
    } else {
        let text = if rng.chance(10) {
            f.insert("leading-zeros".into());
            format!("{:05}", body.len())
        } else {
            body.len().to_string()
        };
        headers.push((false, hdr("Content-Length", Some("l"), Value::default().t(&text))));
    }

    if style.shuffle {
        f.insert("shuffled".into());
        // Shuffle the other headers (Fisher-Yates), then put the Via headers back at random
        // places, keeping their relative order (the top Via stays the first Via).
        let (vias, mut others): (Vec<_>, Vec<_>) = headers.into_iter().partition(|(v, _)| *v);
        for i in (1..others.len()).rev() {
            let j = rng.below(i + 1);
            others.swap(i, j);
        }
        let mut min = 0;
        for via in vias {
            let at = min + rng.below(others.len() - min + 1);
            others.insert(at, via);
            min = at + 1;
        }
        headers = others;
    }

    let mut text = start;
    for (_, h) in &headers {
        text.push_str(&render(&style, &mut rng, &mut f, h));
    }
    text.push_str("\r\n");
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(&body);
    GenCase { id: format!("gen#{index:04}"), features: f, bytes, truth }
}

// ---------------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------------

const SEED: u64 = 0x7A4D_E11C_0FFE_E001;
const GENERATED: usize = 2000;

fn table(head: [&str; 4], rows: &[[String; 4]]) -> String {
    let mut widths = head.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: [&str; 4]| {
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            let _ = write!(out, "| {cell}{} ", " ".repeat(pad));
        }
        out.push_str("|\n");
    };
    line(&mut out, head);
    let rule = widths.map(|w| "-".repeat(w));
    line(&mut out, [&rule[0], &rule[1], &rule[2], &rule[3]]);
    for row in rows {
        line(&mut out, [&row[0], &row[1], &row[2], &row[3]]);
    }
    out
}

/// Fails on unexplained disagreements, and on allow-list entries (of this test's kind) that no
/// longer match anything.
fn settle(ledger: &Ledger, generated: bool) {
    let mut problems = ledger.unexplained.clone();
    for (i, k) in KNOWN.iter().enumerate() {
        if k.case.starts_with("gen:") == generated && ledger.used[i] == 0 {
            problems.push(format!("allow-list entry no longer needed (remove it): {} {:?}", k.case, k.aspect));
        }
    }
    let mut legend = String::new();
    for (i, k) in KNOWN.iter().enumerate() {
        if k.case.starts_with("gen:") == generated && ledger.used[i] > 0 {
            let _ = writeln!(legend, "  {} {:?} (x{}): {}", k.case, k.aspect, ledger.used[i], k.why);
        }
    }
    println!("known disagreements:\n{legend}");
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n\n"));
}

#[test]
fn corpus_agrees_with_the_oracle() {
    let Some(files) = corpus_files() else {
        eprintln!("SKIP: conformance corpus not found at {}", corpus_dir().display());
        return;
    };
    assert!(files.len() >= 60, "expected the whole corpus, found {} files", files.len());
    let mut ledger = Ledger::new();
    let mut rows = Vec::new();
    let mut compared = 0;
    for (name, bytes) in &files {
        let (o, r) = (ours(bytes), oracle(bytes));
        if matches!((&o, &r), (Verdict::Accept(_), Verdict::Accept(_))) {
            compared += 1;
        }
        let found = disagreements(&o, &r);
        let agreement = ledger.account(name, std::slice::from_ref(name), &found, &describe(&o, &r, bytes));
        rows.push([name.clone(), o.label(), r.label(), agreement]);
    }
    println!("{}", table(["file", "ours", "oracle", "agreement"], &rows));
    println!("{} files, {compared} accepted by both and compared field by field", files.len());
    // Guards against a vacuous pass (e.g. an oracle that rejects everything).
    assert!(compared >= 30, "only {compared} corpus files were compared field by field");
    settle(&ledger, false);
}

#[test]
fn generated_messages_agree_with_the_oracle_and_the_truth() {
    let mut ledger = Ledger::new();
    let mut wrong = Vec::new();
    let mut agree = 0;
    // feature -> (cases, oracle accepted, fully agreed)
    let mut per_feature: std::collections::BTreeMap<String, [usize; 3]> = Default::default();
    let mut examples = Vec::new();
    for i in 0..GENERATED {
        let case = generate(SEED, i);
        let (o, r) = (ours(&case.bytes), oracle(&case.bytes));
        let detail = describe(&o, &r, &case.bytes);
        match &o {
            Verdict::Accept(f) => {
                let off = diff(f, &case.truth, true);
                if !off.is_empty() {
                    wrong.push(format!(
                        "{} {:?}: ours differs from the truth on {off:?}\n  truth:  {:?}\n{detail}",
                        case.id, case.features, case.truth
                    ));
                }
            }
            Verdict::Reject(why) => wrong.push(format!("{} {:?}: ours rejects a valid message ({why})\n{detail}", case.id, case.features)),
        }
        let found = disagreements(&o, &r);
        let keys: Vec<String> = case.features.iter().map(|f| format!("gen:{f}")).collect();
        let label = ledger.account(&case.id, &keys, &found, &detail);
        if found.is_empty() {
            agree += 1;
        } else if examples.len() < 12 {
            examples.push([case.id.clone(), o.label(), r.label(), label]);
        }
        // Per-header variants (`lws@equal/From`) only key the allow-list; the table shows the
        // generic feature.
        let generic = case.features.iter().filter(|f| !f.contains('/'));
        for feature in generic.map(String::as_str).chain(["(all)"]) {
            let e = per_feature.entry(feature.to_string()).or_default();
            e[0] += 1;
            e[1] += usize::from(matches!(r, Verdict::Accept(_)));
            e[2] += usize::from(found.is_empty());
        }
    }
    let rows: Vec<[String; 4]> = per_feature
        .iter()
        .map(|(feature, [n, accepted, agreed])| {
            [feature.clone(), format!("{n} accepted"), format!("{accepted} accepted"), format!("{agreed}/{n} agree")]
        })
        .collect();
    println!("generated messages by feature (seed {SEED:#x}):\n{}", table(["feature", "ours", "oracle", "agreement"], &rows));
    println!("first disagreements:\n{}", table(["case", "ours", "oracle", "agreement"], &examples));
    println!("{GENERATED} generated, {agree} agree with the oracle on everything");
    assert!(wrong.is_empty(), "{} generated message(s) misread by our parser:\n{}", wrong.len(), wrong.join("\n\n"));
    // Guards against a vacuous pass: most generated messages must be compared in full.
    assert!(agree * 2 >= GENERATED, "only {agree}/{GENERATED} generated messages agree with the oracle");
    settle(&ledger, true);
}

/// The generator itself is deterministic: same seed, same bytes.
#[test]
fn generator_is_deterministic() {
    for i in [0, 1, 17, GENERATED - 1] {
        assert_eq!(generate(SEED, i).bytes, generate(SEED, i).bytes);
    }
    assert_ne!(generate(SEED, 0).bytes, generate(SEED, 1).bytes);
}
