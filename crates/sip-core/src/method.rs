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
        match self {
            Method::Invite => "INVITE",
            Method::Ack => "ACK",
            Method::Bye => "BYE",
            Method::Cancel => "CANCEL",
            Method::Options => "OPTIONS",
            Method::Register => "REGISTER",
            Method::Prack => "PRACK",
            Method::Subscribe => "SUBSCRIBE",
            Method::Notify => "NOTIFY",
            Method::Publish => "PUBLISH",
            Method::Info => "INFO",
            Method::Refer => "REFER",
            Method::Message => "MESSAGE",
            Method::Update => "UPDATE",
            Method::Extension(_) => "other",
        }
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
