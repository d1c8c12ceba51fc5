//! Transaction keys, written into a reused scratch `String` so that matching a message costs no
//! allocation; only a new transaction copies its key into an `Arc<str>`.
//!
//! Branches and hosts are compared case-insensitively (RFC 3261 §7.3.1: parameter values and
//! host names are case-insensitive), so they are lowercased; Call-ID and tags are kept as is.
//! Parts are separated by a space, which none of them can contain (tokens, a host, a Call-ID
//! without LWS), and each kind of key starts with its own letter.

use tandem_sip::Message;

const MAGIC_COOKIE: &[u8] = b"z9hG4bK";

/// A branch that identifies the transaction (RFC 3261 §17.2.3): the magic cookie followed by
/// at least one more character.
pub(crate) fn is_rfc3261_branch(branch: &str) -> bool {
    branch.len() > MAGIC_COOKIE.len() && branch.as_bytes().get(..MAGIC_COOKIE.len()).is_some_and(|p| p.eq_ignore_ascii_case(MAGIC_COOKIE))
}

fn push_lower(out: &mut String, s: &str) {
    let start = out.len();
    out.push_str(s);
    if let Some(tail) = out.get_mut(start..) {
        tail.make_ascii_lowercase();
    }
}

/// The server transaction key of a request, as if its method were `method` (the caller maps
/// ACK to INVITE, and looks a CANCEL's INVITE up with `INVITE`).
///
/// RFC 3261 requests: `b METHOD branch host[:port]`. RFC 2543 requests (no usable branch):
/// `l METHOD call-id cseq-number from-tag host[:port]`.
pub(crate) fn server_key(out: &mut String, msg: &Message, method: &str) {
    out.clear();
    match msg.branch().filter(|b| is_rfc3261_branch(b)) {
        Some(branch) => {
            out.push_str("b ");
            out.push_str(method);
            out.push(' ');
            push_lower(out, branch);
        }
        None => {
            out.push_str("l ");
            out.push_str(method);
            out.push(' ');
            out.push_str(msg.call_id());
            out.push(' ');
            out.push_str(itoa::Buffer::new().format(msg.cseq().map_or(0, |c| c.seq)));
            out.push(' ');
            out.push_str(msg.from_tag().unwrap_or(""));
        }
    }
    out.push(' ');
    push_lower(out, msg.top_via_host());
    if let Some(port) = msg.top_via_port() {
        out.push(':');
        out.push_str(itoa::Buffer::new().format(port));
    }
}

/// The client transaction key (RFC 3261 §17.1.3): `METHOD branch`, the method being the
/// request's (for a response, its CSeq method).
pub(crate) fn client_key(out: &mut String, method: &str, branch: &str) {
    out.clear();
    out.push_str(method);
    out.push(' ');
    push_lower(out, branch);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie() {
        assert!(is_rfc3261_branch("z9hG4bK776asdhds"));
        assert!(is_rfc3261_branch("Z9HG4BKx"));
        assert!(!is_rfc3261_branch("z9hG4bK"));
        assert!(!is_rfc3261_branch("z9hG4b"));
        assert!(!is_rfc3261_branch("776asdhds"));
        assert!(!is_rfc3261_branch("é9hG4bKxx"));
    }

    #[test]
    fn client_keys_lowercase_the_branch() {
        let mut s = String::new();
        client_key(&mut s, "INVITE", "z9hG4bKAbC");
        assert_eq!(s, "INVITE z9hg4bkabc");
    }
}
