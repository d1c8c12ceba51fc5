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

/// A branch for a client transaction that names it: the magic cookie, 16 hex digits of
/// `unique`, `-` and the transaction's id in hex. Responses carry the branch back, so they find
/// their transaction by [`branch_id`] and one key comparison, without a hash-table look-up (what
/// Kamailio's tm does with the hash index and label in its branches).
pub(crate) fn client_branch(unique: u64, id: u64) -> String {
    let id_digits = ((64 - id.leading_zeros()).div_ceil(4)).max(1) as usize;
    let mut out = [0u8; BRANCH_PREFIX + 16];
    out[..MAGIC_COOKIE.len()].copy_from_slice(MAGIC_COOKIE);
    write_hex(&mut out[MAGIC_COOKIE.len()..BRANCH_PREFIX - 1], unique);
    out[BRANCH_PREFIX - 1] = b'-';
    write_hex(&mut out[BRANCH_PREFIX..BRANCH_PREFIX + id_digits], id);
    // ASCII only: never fails.
    std::str::from_utf8(&out[..BRANCH_PREFIX + id_digits]).unwrap_or_default().to_owned()
}

/// The cookie, 16 hex digits and `-`: where a named branch's id starts.
const BRANCH_PREFIX: usize = 7 + 16 + 1;

/// The id a branch made by [`client_branch`] names; `None` for any other branch. Only a hint:
/// the transaction found must still have the response's key.
pub(crate) fn branch_id(branch: &str) -> Option<u64> {
    let b = branch.as_bytes();
    let id = b.get(BRANCH_PREFIX..).filter(|id| !id.is_empty() && id.len() <= 16 && b[BRANCH_PREFIX - 1] == b'-')?;
    id.iter().try_fold(0u64, |n, &c| {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(digit))
    })
}

/// `v`'s last `out.len()` hex digits, lowercase.
fn write_hex(out: &mut [u8], v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = out.len();
    for (i, o) in out.iter_mut().enumerate() {
        *o = HEX[((v >> ((n - 1 - i) * 4)) & 0xf) as usize];
    }
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

    #[test]
    fn client_branches_name_their_transaction() {
        for id in [0, 1, 0xf, 0x10, 0x1_0000_0002, u64::MAX - 1] {
            let branch = client_branch(0x0123_4567_89ab_cdef, id);
            assert!(is_rfc3261_branch(&branch), "{branch}");
            assert!(branch.starts_with("z9hG4bK0123456789abcdef-"), "{branch}");
            assert_eq!(branch_id(&branch), Some(id), "{branch}");
            assert_eq!(branch_id(&branch.to_ascii_uppercase()), Some(id), "case-insensitive, as branches are");
        }
        assert_eq!(client_branch(1, 0x2a), "z9hG4bK0000000000000001-2a");
        for other in [
            "z9hG4bK776asdhds",
            "z9hG4bK0123456789abcdef",
            "z9hG4bK0123456789abcdef-",
            "z9hG4bK0123456789abcde-1",
            "z9hG4bK0123456789abcdef-1x",
            "z9hG4bK0123456789abcdef-00000000000000001",
            "z9hG4bK-1",
            "z9hG4",
        ] {
            assert_eq!(branch_id(other), None, "{other}");
        }
    }
}
