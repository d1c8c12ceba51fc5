use bytes::Bytes;
use std::fmt;

/// A SIP method. Extension methods keep their bytes (a slice of the message buffer).
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Method {
    Invite,
    Ack,
    Bye,
    Cancel,
    Options,
    Register,
    Prack,
    Subscribe,
    Notify,
    Publish,
    Info,
    Refer,
    Message,
    Update,
    Extension(Bytes),
}

impl Method {
    /// Methods are case-sensitive (RFC 3261 §7.1): `invite` is an extension method.
    pub fn from_bytes(token: &[u8], owner: &Bytes) -> Method {
        match token {
            b"INVITE" => Method::Invite,
            b"ACK" => Method::Ack,
            b"BYE" => Method::Bye,
            b"CANCEL" => Method::Cancel,
            b"OPTIONS" => Method::Options,
            b"REGISTER" => Method::Register,
            b"PRACK" => Method::Prack,
            b"SUBSCRIBE" => Method::Subscribe,
            b"NOTIFY" => Method::Notify,
            b"PUBLISH" => Method::Publish,
            b"INFO" => Method::Info,
            b"REFER" => Method::Refer,
            b"MESSAGE" => Method::Message,
            b"UPDATE" => Method::Update,
            other => Method::Extension(owner.slice_ref(other)),
        }
    }

    /// For methods named by the application, not taken from a received buffer.
    pub fn from_name(name: &str) -> Method {
        let owner = Bytes::copy_from_slice(name.as_bytes());
        Method::from_bytes(&owner.clone(), &owner)
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Method::Invite => b"INVITE",
            Method::Ack => b"ACK",
            Method::Bye => b"BYE",
            Method::Cancel => b"CANCEL",
            Method::Options => b"OPTIONS",
            Method::Register => b"REGISTER",
            Method::Prack => b"PRACK",
            Method::Subscribe => b"SUBSCRIBE",
            Method::Notify => b"NOTIFY",
            Method::Publish => b"PUBLISH",
            Method::Info => b"INFO",
            Method::Refer => b"REFER",
            Method::Message => b"MESSAGE",
            Method::Update => b"UPDATE",
            Method::Extension(b) => b,
        }
    }

    /// The method name as text; extension methods are token characters, hence ASCII.
    pub fn as_str(&self) -> &str {
        match self {
            // Checked per use only for extensions: known names are static text (this runs for
            // every transaction key).
            Method::Extension(b) => std::str::from_utf8(b).unwrap_or("?"),
            known => known.metric_label(),
        }
    }

    /// A short label for metrics: extension methods are folded into one label.
    pub fn metric_label(&self) -> &'static str {
        self.standard_index().map_or("other", |i| Method::STANDARD_NAMES[i])
    }

    /// The standard methods' names, each at its [`Method::standard_index`].
    pub const STANDARD_NAMES: [&'static str; 14] = [
        "INVITE",
        "ACK",
        "BYE",
        "CANCEL",
        "OPTIONS",
        "REGISTER",
        "PRACK",
        "SUBSCRIBE",
        "NOTIFY",
        "PUBLISH",
        "INFO",
        "REFER",
        "MESSAGE",
        "UPDATE",
    ];

    /// A standard method's place in [`Method::STANDARD_NAMES`] (for tables indexed by method);
    /// None for an extension method.
    pub fn standard_index(&self) -> Option<usize> {
        Some(match self {
            Method::Invite => 0,
            Method::Ack => 1,
            Method::Bye => 2,
            Method::Cancel => 3,
            Method::Options => 4,
            Method::Register => 5,
            Method::Prack => 6,
            Method::Subscribe => 7,
            Method::Notify => 8,
            Method::Publish => 9,
            Method::Info => 10,
            Method::Refer => 11,
            Method::Message => 12,
            Method::Update => 13,
            Method::Extension(_) => return None,
        })
    }
}

impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
