//! Tests driven by a virtual clock: a base `Instant` plus durations, no sleeps, no sockets.
//! Messages are written as text and parsed with `tandem_sip::parse_datagram`.

mod client;
mod matching;
pub(crate) mod random;
mod server;
mod support;
