//! The exchanged messages: a MESSAGE request and its 200 OK, each padded with a text body to
//! exactly the target size, built once per size and sent as the same bytes by Tandem and by
//! the raw baseline.

use bytes::Bytes;
use tandem_sip::Message;

pub const CALL_ID: &str = "transport-bench-1@127.0.0.1";

#[derive(Debug, Clone)]
pub struct Messages {
    pub request: Bytes,
    pub response: Bytes,
}

impl Messages {
    /// `via` is the transport's name in the Via header (UDP, TCP, TLS, ...).
    pub fn new(size: usize, via: &str) -> Messages {
        let common = format!(
            "Via: SIP/2.0/{via} 127.0.0.1:5060;branch=z9hG4bK-transport-bench\r\n\
             From: <sip:a@127.0.0.1>;tag=a1\r\n\
             To: <sip:b@127.0.0.1>{{to_tag}}\r\n\
             Call-ID: {CALL_ID}\r\n\
             CSeq: 1 MESSAGE\r\n"
        );
        let request = format!("MESSAGE sip:b@127.0.0.1 SIP/2.0\r\nMax-Forwards: 70\r\n{}", common.replace("{to_tag}", ""));
        let response = format!("SIP/2.0 200 OK\r\n{}", common.replace("{to_tag}", ";tag=b1"));
        Messages { request: pad(request, size), response: pad(response, size) }
    }
}

/// Appends Content-Type, Content-Length and a body so the whole message is `size` bytes (or
/// as small as the headers allow).
fn pad(head: String, size: usize) -> Bytes {
    let head = format!("{head}Content-Type: text/plain\r\n");
    let mut body = size.saturating_sub(head.len() + "Content-Length: 0\r\n\r\n".len());
    // The Content-Length digits take room from the body.
    while body > 0 && head.len() + format!("Content-Length: {body}\r\n\r\n").len() + body > size {
        body -= 1;
    }
    let mut out = format!("{head}Content-Length: {body}\r\n\r\n").into_bytes();
    out.extend((0..body).map(|i| if i % 64 == 63 { b'\n' } else { b'a' + (i % 26) as u8 }));
    Bytes::from(out)
}

/// The check both implementations make on every response they receive.
pub fn check_response(msg: &Message) -> anyhow::Result<()> {
    anyhow::ensure!(msg.status() == Some(200) && msg.defect().is_none(), "unexpected response: {}", msg.status().unwrap_or(0));
    anyhow::ensure!(msg.call_id() == CALL_ID, "response for another call: {}", msg.call_id());
    Ok(())
}

/// The check both servers make on every request they receive before answering it.
pub fn is_good_request(msg: &Message) -> bool {
    msg.is_request() && msg.defect().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_sip::{parse_datagram, parse_stream_message, ParseLimits};

    #[test]
    fn exact_sizes_and_parseable() {
        for size in [300, 1024, 4096, 16_384, 61_440] {
            let m = Messages::new(size, "TCP");
            assert_eq!(m.request.len(), size);
            assert_eq!(m.response.len(), size);
            let req = parse_stream_message(m.request.clone(), &ParseLimits::default()).unwrap();
            assert!(is_good_request(&req));
            let resp = parse_datagram(m.response.clone(), &ParseLimits::default()).unwrap();
            check_response(&resp).unwrap();
            assert_eq!(tandem_sip::frame_stream(&m.request, 65_536), tandem_sip::StreamFrame::Message { len: size });
        }
    }
}
