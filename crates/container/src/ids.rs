//! Identifiers: session IDs are 128 random bits from the executor's CSPRNG (unguessable, and
//! reproducible from the seed for replicas); tags and branches likewise.

use rand::RngCore;
use rand_chacha::ChaCha20Rng;
use std::fmt;
use std::str::FromStr;

macro_rules! id_type {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u128);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:032x}", self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:032x})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;

            /// 32 hex digits, as written by `Display` (surrounding white space ignored).
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                let s = s.trim();
                if s.len() != 32 {
                    return Err(InvalidId);
                }
                u128::from_str_radix(s, 16).map($name).map_err(|_| InvalidId)
            }
        }
    };
}

id_type!(SessionId, "Identifies a SIP session; transmissible as text (e.g. in a message body).");
id_type!(AppSessionId, "Identifies an application session.");

/// Hashes an ID (or a lock key derived from one) by folding its bits: IDs are already uniform
/// random, so SipHash's cost (a visible share of a contract transition, which looks sessions up
/// a dozen times) buys nothing. Collisions cannot be forced: only the server creates IDs; a
/// peer can at most name one to look up.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // One multiply-xorshift: tables that shard by some bits of the key still spread
        // evenly over the rest.
        let h = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by the ID types; a plain FNV-1a keeps any other key correct.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ ((v >> 64) as u64);
    }

    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// Build hasher for maps keyed by session IDs.
pub type IdHashBuilder = std::hash::BuildHasherDefault<IdHasher>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a session ID (32 hexadecimal digits expected)")]
pub struct InvalidId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(pub u64);

/// The executor's source of identifiers and randomness.
pub struct IdSource {
    rng: ChaCha20Rng,
}

impl IdSource {
    pub fn new(rng: ChaCha20Rng) -> Self {
        IdSource { rng }
    }

    pub fn u128(&mut self) -> u128 {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        u128::from_le_bytes(b)
    }

    pub fn u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// 16 lowercase hex digits, for tags.
    pub fn tag(&mut self) -> String {
        let mut s = String::with_capacity(16);
        push_hex16(&mut s, self.u64());
        s
    }
}

/// `format!("{:016x}")` without the formatting machinery (a tag per dialog).
fn push_hex16(s: &mut String, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        s.push(char::from(HEX[((v >> (shift * 4)) & 0xf) as usize]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn ids_round_trip_and_are_seeded() {
        let mut a = IdSource::new(ChaCha20Rng::seed_from_u64(7));
        let mut b = IdSource::new(ChaCha20Rng::seed_from_u64(7));
        let id = SessionId(a.u128());
        assert_eq!(id, SessionId(b.u128()));
        assert_eq!(id.to_string().parse::<SessionId>(), Ok(id));
        assert_eq!(format!(" {id}\r\n").parse::<SessionId>(), Ok(id));
        assert!("xyz".parse::<SessionId>().is_err());
        assert_ne!(a.u128(), id.0);
        let (v, mut hex) = (0x0123_4567_89ab_cdef_u64, String::new());
        push_hex16(&mut hex, v);
        assert_eq!(hex, format!("{v:016x}"));
        hex.clear();
        push_hex16(&mut hex, 0xa);
        assert_eq!(hex, "000000000000000a");
        let mut c = IdSource::new(ChaCha20Rng::seed_from_u64(9));
        let mut d = IdSource::new(ChaCha20Rng::seed_from_u64(9));
        assert_eq!(c.tag(), format!("{:016x}", d.u64()));
    }
}
