//! `frame_stream` on arbitrary bytes: lengths within the buffer and the limit, framing is
//! monotonic (a shorter prefix of a framed message is Incomplete), and a framed message parses
//! within the limit into no more than its frame.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tandem_sip::{frame_stream, parse_stream_message, ParseError, ParseLimits, StreamFrame};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the limit: the real one, or one small enough to be hit.
    let (max, data) = match data.split_first() {
        Some((b, rest)) if *b < 16 => (64 + usize::from(*b) * 64, rest),
        Some(_) => (tandem_sip::MAX_MESSAGE_BYTES, data),
        None => (tandem_sip::MAX_MESSAGE_BYTES, data),
    };
    match frame_stream(data, max) {
        StreamFrame::Incomplete => {}
        StreamFrame::KeepAlive { len, double } => {
            assert!(len > 0 && len <= data.len());
            assert!(data[..len].iter().all(|b| matches!(b, b'\r' | b'\n')));
            assert_eq!(double, data[..len].windows(4).any(|w| w == b"\r\n\r\n"));
        }
        StreamFrame::Invalid { head_len, .. } => {
            assert!(head_len.is_none_or(|h| h > 0 && h <= data.len()));
        }
        StreamFrame::Message { len } => {
            assert!(len > 0 && len <= data.len() && len <= max);
            for cut in [len - 1, len / 2, len.saturating_sub(4)] {
                assert_eq!(frame_stream(&data[..cut], max), StreamFrame::Incomplete, "cut {cut}");
            }
            assert_eq!(frame_stream(&data[..len], max), StreamFrame::Message { len });
            let limits = ParseLimits { max_message_bytes: max, ..ParseLimits::default() };
            match parse_stream_message(Bytes::copy_from_slice(&data[..len]), &limits) {
                Ok(m) => {
                    assert!(m.wire_bytes().len() <= len);
                    assert!(m.body_len() <= len);
                }
                Err(ParseError::TooLarge(n)) => panic!("framed {len} bytes, parser: {n} > {max}"),
                Err(_) => {}
            }
        }
    }
});

