//! `parse_datagram` (and `parse_stream_message`) on arbitrary bytes: no panic, and the same
//! span and accessor invariants as `crates/sip-core/tests/random_input.rs`. A failed assertion
//! is a crash for libFuzzer, saved under `fuzz/artifacts/parse_datagram/`.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tandem_sip::{parse_datagram, parse_stream_message, HeaderName, Message, ParseLimits, ResponseBuilder};

fuzz_target!(|data: &[u8]| {
    let limits = ParseLimits::default();
    if let Ok(m) = parse_datagram(Bytes::copy_from_slice(data), &limits) {
        check(data, &m, &limits);
    }
    let tight = ParseLimits { max_headers: 4, ..limits };
    if let Ok(m) = parse_datagram(Bytes::copy_from_slice(data), &tight) {
        check(data, &m, &tight);
    }
    if let Ok(m) = parse_stream_message(Bytes::copy_from_slice(data), &limits) {
        check(data, &m, &limits);
    }
});

fn check(input: &[u8], m: &Message, limits: &ParseLimits) {
    assert!(input.len() <= limits.max_message_bytes);
    let wire = m.wire_bytes();
    let body = m.body();
    assert!(wire.len() <= input.len());
    assert_eq!(body.len(), m.body_len());
    assert!(wire.ends_with(&body));
    let body_start = wire.len() - body.len();
    assert!(m.headers().len() <= limits.max_headers);
    for h in m.headers() {
        assert!(h.name_span.start < h.name_span.end);
        assert!(h.name_span.range().end <= body_start);
        assert!(h.value.start <= h.value.end && h.value.range().end <= body_start);
        let _ = (m.header_value(h), m.header_name_text(h));
    }
    let mut sink = 0usize;
    sink += m.method().map_or(0, |x| x.as_str().len());
    sink += usize::from(m.status().unwrap_or(0)) + m.reason().len();
    if let Some(uri) = m.request_uri() {
        if let Some(sip) = uri.as_sip() {
            sink += sip.user_base().map_or(0, str::len) + usize::from(sip.has_lr());
            sink += usize::from(sip.host_ip().is_some());
        }
    }
    for name in [HeaderName::Via, HeaderName::Contact, HeaderName::Route, HeaderName::RecordRoute, HeaderName::Other] {
        sink += m.values_of(name).map(|(i, v)| i + v.len()).sum::<usize>();
    }
    sink += m.call_id().len() + m.from_tag().map_or(0, str::len) + m.to_tag().map_or(0, str::len);
    for addr in [m.from_addr(), m.to_addr(), m.contact()].into_iter().flatten() {
        sink += addr.tag().map_or(0, str::len) + usize::from(addr.uri().is_some());
    }
    if let Some(via) = m.top_via() {
        sink += via.branch().map_or(0, str::len) + via.received().map_or(0, str::len);
        sink += via.rport().map_or(0, |p| usize::from(p.unwrap_or(0)));
    }
    sink += m.branch().map_or(0, str::len) + m.top_via_host().len();
    sink += format!("{m:?}").len();
    std::hint::black_box(sink);
    if m.defect().is_none() {
        assert!(!m.call_id().is_empty() && m.cseq().is_some() && m.top_via().is_some());
        if let Some(n) = m.content_length() {
            assert_eq!(m.body_len(), n as usize);
        }
    }
    if m.is_request() {
        let response = ResponseBuilder::new(m, 400, "Bad Request", Some("t")).finish();
        let parsed = parse_datagram(response, &ParseLimits::default());
        if m.defect().is_none() {
            let r = parsed.expect("our response to a valid request parses");
            assert_eq!(r.defect(), None);
            assert_eq!(r.call_id(), m.call_id());
        }
    }
}
