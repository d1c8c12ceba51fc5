//! Tandem's SIP message model.
//!
//! A message is parsed once: the received bytes are kept in one [`bytes::Bytes`] and every
//! header, URI part and parameter is a byte range into it. The headers the stack needs on every
//! message (top Via, From/To tags, Call-ID, CSeq, Max-Forwards, Content-Length) are parsed and
//! validated eagerly; the rest lazily, on access. Serialization writes directly into a buffer.
//!
//! Parsing never panics on any input; a request that is framed but invalid comes back as a
//! [`Message`] carrying a [`Defect`] with the status to answer (400, 505, ...), so the stack can
//! still form a response; hopeless input is a [`ParseError`].
// One `unsafe` block, in `Message::text`: a measured need (decision 0001, "Text without a
// second UTF-8 check"); everything else stays safe code.
#![deny(unsafe_code)]

mod builder;
mod flow;
mod framing;
mod header;
mod lex;
mod message;
mod method;
mod name_addr;
mod parse;
mod uri;
mod via;

pub use builder::{MessageWriter, ResponseBuilder};
pub use flow::Flow;
pub use framing::{frame_stream, StreamFrame, MAX_MESSAGE_BYTES};
pub use header::HeaderName;
pub use message::{CSeq, Defect, Header, Message, Span, StartLine};
pub use method::Method;
pub use name_addr::NameAddr;
pub use parse::{parse_datagram, parse_stream_message, ParseError, ParseLimits};
pub use uri::{Scheme, SipUri, Uri};
pub use via::{Transport, Via};
