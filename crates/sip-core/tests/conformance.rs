//! Every message of the RFC 4475 and RFC 5118 corpora, parsed as a UDP datagram, with the
//! outcome the RFCs ask for at the message layer. Application-level answers (416, 420, 415, ...)
//! are checked by the system tests against a live server.

use bytes::Bytes;
use std::path::PathBuf;
use tandem_sip::{frame_stream, parse_datagram, parse_stream_message, ParseLimits, StreamFrame};

fn corpus_dir() -> PathBuf {
    std::env::var_os("TANDEM_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance"))
}

/// `ok`: parses with no defect; a number: a request whose answer is that status;
/// `drop`: a response with a defect (dropped); `either`: RFC allows rejecting or tolerating.
const EXPECTED: &[(&str, &str)] = &[
    ("rfc4475/wsinv.dat", "ok"),
    ("rfc4475/intmeth.dat", "ok"),
    ("rfc4475/esc01.dat", "ok"),
    ("rfc4475/escnull.dat", "ok"),
    ("rfc4475/esc02.dat", "ok"),
    ("rfc4475/lwsdisp.dat", "ok"),
    ("rfc4475/longreq.dat", "ok"),
    ("rfc4475/dblreq.dat", "ok"),
    ("rfc4475/semiuri.dat", "ok"),
    ("rfc4475/transports.dat", "ok"),
    ("rfc4475/mpart01.dat", "ok"),
    ("rfc4475/unreason.dat", "ok"),
    ("rfc4475/noreason.dat", "ok"),
    ("rfc4475/badinv01.dat", "400"),
    ("rfc4475/clerr.dat", "400"),
    ("rfc4475/ncl.dat", "400"),
    ("rfc4475/scalar02.dat", "400"),
    ("rfc4475/scalarlg.dat", "drop"),
    ("rfc4475/quotbal.dat", "400"),
    ("rfc4475/ltgtruri.dat", "400"),
    ("rfc4475/lwsruri.dat", "400"),
    ("rfc4475/lwsstart.dat", "400"),
    ("rfc4475/trws.dat", "400"),
    ("rfc4475/escruri.dat", "400"),
    ("rfc4475/baddate.dat", "ok"),
    ("rfc4475/regbadct.dat", "either"),
    ("rfc4475/badaspec.dat", "400"),
    ("rfc4475/baddn.dat", "400"),
    ("rfc4475/badvers.dat", "505"),
    ("rfc4475/mismatch01.dat", "400"),
    ("rfc4475/mismatch02.dat", "400"),
    ("rfc4475/bigcode.dat", "drop"),
    ("rfc4475/badbranch.dat", "ok"),
    ("rfc4475/insuf.dat", "400"),
    ("rfc4475/unkscm.dat", "ok"),
    ("rfc4475/novelsc.dat", "ok"),
    ("rfc4475/unksm2.dat", "ok"),
    ("rfc4475/bext01.dat", "ok"),
    ("rfc4475/invut.dat", "ok"),
    ("rfc4475/regaut01.dat", "ok"),
    ("rfc4475/multi01.dat", "400"),
    ("rfc4475/mcl01.dat", "400"),
    ("rfc4475/bcast.dat", "ok"),
    ("rfc4475/zeromf.dat", "ok"),
    ("rfc4475/cparam01.dat", "ok"),
    ("rfc4475/cparam02.dat", "ok"),
    ("rfc4475/regescrt.dat", "ok"),
    ("rfc4475/sdp01.dat", "ok"),
    ("rfc4475/inv2543.dat", "ok"),
    ("rfc4475/extra/test.dat", "400"),
    ("rfc4475/extra/baddn.blankline-terminated.dat", "400"),
    ("rfc5118/ipv6-good.dat", "ok"),
    ("rfc5118/ipv6-bad.dat", "400"),
    ("rfc5118/port-ambiguous.dat", "ok"),
    ("rfc5118/port-unambiguous.dat", "ok"),
    ("rfc5118/via-received-param-with-delim.dat", "ok"),
    ("rfc5118/via-received-param-no-delim.dat", "ok"),
    ("rfc5118/ipv6-in-sdp.dat", "ok"),
    ("rfc5118/mult-ip-in-header.dat", "ok"),
    ("rfc5118/mult-ip-in-sdp.dat", "ok"),
    ("rfc5118/ipv4-mapped-ipv6.dat", "ok"),
    ("rfc5118/ipv6-bug-abnf-3-colons.dat", "either"),
    ("rfc5118/ipv6-correct-abnf-2-colons.dat", "ok"),
    ("rfc5118/cl-fixed/ipv6-in-sdp.dat", "ok"),
    ("rfc5118/cl-fixed/mult-ip-in-sdp.dat", "ok"),
    ("rfc5118/cl-fixed/ipv4-mapped-ipv6.dat", "ok"),
];

fn outcome(bytes: Bytes) -> String {
    match parse_datagram(bytes, &ParseLimits::default()) {
        Err(e) => format!("error: {e}"),
        Ok(m) => match (m.defect(), m.is_request()) {
            (None, _) => "ok".into(),
            (Some(d), true) => d.status.to_string(),
            (Some(_), false) => "drop".into(),
        },
    }
}

#[test]
fn every_corpus_file_has_an_expectation() {
    let dir = corpus_dir();
    if !dir.exists() {
        eprintln!("SKIP: conformance corpus not found at {}", dir.display());
        return;
    }
    let mut files = Vec::new();
    for sub in ["rfc4475", "rfc4475/extra", "rfc5118", "rfc5118/cl-fixed"] {
        for entry in std::fs::read_dir(dir.join(sub)).expect("corpus folder") {
            let name = entry.expect("entry").file_name().into_string().expect("utf8 name");
            if name.ends_with(".dat") {
                files.push(format!("{sub}/{name}"));
            }
        }
    }
    for f in &files {
        assert!(EXPECTED.iter().any(|(name, _)| name == f), "no expectation for {f}");
    }
    assert_eq!(files.len(), EXPECTED.len());
}

#[test]
fn corpus_outcomes_match_the_rfcs() {
    let dir = corpus_dir();
    if !dir.exists() {
        eprintln!("SKIP: conformance corpus not found at {}", dir.display());
        return;
    }
    let mut wrong = Vec::new();
    for (file, expected) in EXPECTED {
        let bytes = Bytes::from(std::fs::read(dir.join(file)).expect("corpus file"));
        let got = outcome(bytes);
        let fine = match *expected {
            "either" => got == "ok" || got == "400",
            e => got == e,
        };
        if !fine {
            wrong.push(format!("{file}: expected {expected}, got {got}"));
        }
    }
    assert!(wrong.is_empty(), "mismatches:\n{}", wrong.join("\n"));
}

#[test]
fn valid_messages_expose_their_core_headers() {
    let dir = corpus_dir();
    if !dir.exists() {
        return;
    }
    let m = parse_datagram(Bytes::from(std::fs::read(dir.join("rfc4475/wsinv.dat")).unwrap()), &ParseLimits::default()).unwrap();
    assert_eq!(m.call_id(), "wsinv.ndaksdj@192.0.2.1");
    assert_eq!(m.cseq().map(|c| c.seq), Some(9));
    assert_eq!(m.max_forwards(), Some(68));
    assert_eq!(m.to_tag(), Some("1918181833n"));
    assert_eq!(m.from_tag(), Some("98asjd8"));
    assert_eq!(m.branch(), Some("390skdjuw"));
    assert_eq!(m.body_len(), 150);
    assert_eq!(m.via_header_count(), 2);
    assert_eq!(m.values_of(tandem_sip::HeaderName::Via).count(), 3);

    let m = parse_datagram(Bytes::from(std::fs::read(dir.join("rfc4475/dblreq.dat")).unwrap()), &ParseLimits::default()).unwrap();
    assert_eq!(m.body_len(), 0, "bytes past Content-Length are not part of the message");
    assert_eq!(m.call_id(), "dblreq.0ha0isndaksdj99sdfafnl3lk233412");
}

/// On a stream, dblreq's trailing INVITE is the next message and clerr waits for more bytes.
#[test]
fn stream_framing_of_the_corpus() {
    let dir = corpus_dir();
    if !dir.exists() {
        return;
    }
    let dbl = std::fs::read(dir.join("rfc4475/dblreq.dat")).unwrap();
    let StreamFrame::Message { len } = frame_stream(&dbl, 65_536) else { panic!("dblreq not framed") };
    assert!(len < dbl.len());
    let first = parse_stream_message(Bytes::copy_from_slice(&dbl[..len]), &ParseLimits::default()).unwrap();
    assert_eq!(first.method().map(|m| m.as_str()), Some("REGISTER"));
    assert_eq!(first.defect(), None);
    let clerr = std::fs::read(dir.join("rfc4475/clerr.dat")).unwrap();
    assert_eq!(frame_stream(&clerr, 65_536), StreamFrame::Incomplete);
}
