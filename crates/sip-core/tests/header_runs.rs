//! `MessageWriter::copy_header_run` writes exactly what `copy_header` per header writes, for
//! every message of the conformance corpora and for hand-made header forms (compact and
//! lower-case names, no or extra white space, folding, bare LF, empty values).

use bytes::Bytes;
use std::path::PathBuf;
use tandem_sip::{parse_datagram, MessageWriter, Method};

fn corpus_dir() -> PathBuf {
    std::env::var_os("TANDEM_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance"))
}

fn check(bytes: Vec<u8>) -> bool {
    let Ok(msg) = parse_datagram(Bytes::from(bytes), &Default::default()) else {
        return false;
    };
    let headers = msg.headers();
    for from in 0..=headers.len() {
        for to in from..=headers.len() {
            let mut one = MessageWriter::with_capacity(64).request_line(&Method::Options, "sip:x");
            for h in &headers[from..to] {
                one.copy_header(&msg, h);
            }
            let mut run = MessageWriter::with_capacity(64).request_line(&Method::Options, "sip:x");
            run.copy_header_run(&msg, &headers[from..to]);
            assert_eq!(run.finish(), one.finish(), "{msg:?} headers {from}..{to}");
        }
    }
    true
}

#[test]
fn runs_copy_what_single_copies_write() {
    let made = [
        "INVITE sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nv: SIP/2.0/UDP g;branch=z9hG4bK2\r\nFrom: <sip:a@h>;tag=1\r\nTO: <sip:b@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nX-A: 1\r\nx-b:2\r\nX-C:  3\r\nX-D: 4 \r\nX-E:\r\nX-F: \r\nX-G: a\r\n b\r\nSubject : s\r\nContent-Length: 0\r\n\r\n",
        "SIP/2.0 200 OK\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\nFrom: <sip:a@h>;tag=1\nTo: <sip:b@h>;tag=2\nCall-ID: c\nCSeq: 1 INVITE\nContact: <sip:b@h>\nContent-Length: 0\n\n",
        "SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>;tag=2\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
    ];
    for m in made {
        assert!(check(m.as_bytes().to_vec()));
    }
    let dir = corpus_dir();
    let mut checked = 0;
    for sub in ["rfc4475", "rfc5118"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "dat") {
                checked += usize::from(check(std::fs::read(e.path()).unwrap()));
            }
        }
    }
    if checked == 0 {
        eprintln!("SKIP: conformance corpus not found at {}", dir.display());
    }
}
