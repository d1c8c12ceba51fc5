use bytes::Bytes;
use std::ops::Deref;
use tandem_container::{AppSessionId, Request, RequestKind, ResponseEvent, SessionId};
use tandem_sip::{Flow, Message, Method};
use tandem_transaction::ServerTxId;

// What `Event::method` names besides the standard methods, at codes after theirs
// (`Event::method_code`), in the contract language's order.
use tandem_contract::EVENT_METHODS as EVENT_NAMES;

/// How many codes [`Event::method_code`] has.
pub(crate) const METHOD_CODES: usize = Method::STANDARD_NAMES.len() + EVENT_NAMES.len();

/// The name [`Event::method`] returns for an event of method code `code`.
pub(crate) fn method_code_name(code: usize) -> &'static str {
    match Method::STANDARD_NAMES.get(code) {
        Some(name) => name,
        None => EVENT_NAMES[code - Method::STANDARD_NAMES.len()],
    }
}

/// The method code ([`Event::method_code`]) of a response of `status`: `PROVISIONAL`, `OK` or
/// `ERROR`.
pub(crate) fn response_code(status: u16) -> usize {
    let standard = Method::STANDARD_NAMES.len();
    match status {
        ..200 => standard,
        200..300 => standard + 1,
        _ => standard + 2,
    }
}

/// The method code ([`Event::method_code`]) of a timer's event, `TIMER`.
pub(crate) fn timer_code() -> usize {
    Method::STANDARD_NAMES.len() + 3
}

/// A message borrowed from the container, or owned (boxed: events move by value, through
/// `start`, `begin` and into a negotiation, so they are kept a few words long).
#[derive(Debug, Clone)]
pub enum MessageRef<'m> {
    Borrowed(&'m Message),
    Owned(Box<Message>),
}

impl Deref for MessageRef<'_> {
    type Target = Message;

    fn deref(&self) -> &Message {
        match self {
            MessageRef::Borrowed(m) => m,
            MessageRef::Owned(m) => m,
        }
    }
}

impl MessageRef<'_> {
    fn into_owned(self) -> MessageRef<'static> {
        match self {
            MessageRef::Borrowed(m) => MessageRef::Owned(Box::new(m.clone())),
            MessageRef::Owned(m) => MessageRef::Owned(m),
        }
    }
}

/// What triggered a negotiation. The message is borrowed from the container while the
/// negotiation runs within the call that delivered it, and copied only if it has to wait
/// for sessions ([`Event::into_owned`]).
#[derive(Debug, Clone)]
pub enum Trigger<'m> {
    Request {
        msg: MessageRef<'m>,
        tx: Option<ServerTxId>,
        flow: Flow,
        kind: RequestKind,
    },
    Response {
        msg: Option<MessageRef<'m>>,
        status: u16,
    },
    Timer {
        name: &'static str,
    },
    /// The caller cancelled the INVITE (the container already answered 200 and 487).
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct Event<'m> {
    pub trigger: Trigger<'m>,
    /// The SIP session the message arrived on (`None` for an initial request: the session the
    /// transition creates).
    pub session: Option<SessionId>,
    pub app: Option<AppSessionId>,
}

impl<'m> Event<'m> {
    pub(crate) fn from_request(req: &Request<'m>) -> Event<'m> {
        Event {
            trigger: Trigger::Request { msg: MessageRef::Borrowed(req.msg), tx: req.tx, flow: req.flow, kind: req.kind },
            session: req.session,
            app: req.app,
        }
    }

    pub(crate) fn from_response(session: SessionId, response: &ResponseEvent<'m>) -> Event<'m> {
        let msg = match response {
            ResponseEvent::Received(m) => Some(MessageRef::Borrowed(m)),
            _ => None,
        };
        Event { trigger: Trigger::Response { msg, status: response.status() }, session: Some(session), app: None }
    }

    /// A request's event as the container delivered it (to answer or accept it); None for
    /// other events.
    pub(crate) fn request(&self) -> Option<Request<'_>> {
        match &self.trigger {
            Trigger::Request { msg, tx, flow, kind } => Some(Request::new(msg, *tx, *flow, *kind, self.session, self.app)),
            _ => None,
        }
    }

    /// The event with its own copy of the message, to outlive the call that delivered it.
    pub fn into_owned(self) -> Event<'static> {
        let trigger = match self.trigger {
            Trigger::Request { msg, tx, flow, kind } => Trigger::Request { msg: msg.into_owned(), tx, flow, kind },
            Trigger::Response { msg, status } => Trigger::Response { msg: msg.map(MessageRef::into_owned), status },
            Trigger::Timer { name } => Trigger::Timer { name },
            Trigger::Cancelled => Trigger::Cancelled,
        };
        Event { trigger, session: self.session, app: self.app }
    }

    /// `msg.method`: the request method, `OK` / `PROVISIONAL` / `ERROR` for responses,
    /// `TIMER`, or `CANCEL` for a cancelled INVITE.
    pub fn method(&self) -> &str {
        match &self.trigger {
            // The standard methods' names without checking their bytes as UTF-8 again.
            Trigger::Request { msg, .. } => match msg.method() {
                None => "",
                Some(m @ tandem_sip::Method::Extension(_)) => m.as_str(),
                Some(m) => m.metric_label(),
            },
            Trigger::Response { status, .. } if *status < 200 => "PROVISIONAL",
            Trigger::Response { status, .. } if *status < 300 => "OK",
            Trigger::Response { .. } => "ERROR",
            Trigger::Timer { .. } => "TIMER",
            Trigger::Cancelled => "CANCEL",
        }
    }

    /// [`Self::method`] as a code ([`method_code_name`]), for the names it can be without
    /// comparing text; None for an extension method (or a request without one).
    pub(crate) fn method_code(&self) -> Option<usize> {
        Some(match &self.trigger {
            Trigger::Request { msg, .. } => return msg.method().and_then(Method::standard_index),
            Trigger::Response { status, .. } => response_code(*status),
            Trigger::Timer { .. } => timer_code(),
            Trigger::Cancelled => Method::Cancel.standard_index()?,
        })
    }

    /// `msg.cseq`: the method in the message's CSeq (a response's: the request it answers);
    /// empty without a message (timers, timeouts, transport failures).
    pub fn cseq_method(&self) -> &str {
        match self.message().and_then(Message::cseq).map(|c| &c.method) {
            None => "",
            Some(m @ tandem_sip::Method::Extension(_)) => m.as_str(),
            Some(m) => m.metric_label(),
        }
    }

    pub fn status(&self) -> u16 {
        match &self.trigger {
            Trigger::Response { status, .. } => *status,
            _ => 0,
        }
    }

    pub fn message(&self) -> Option<&Message> {
        match &self.trigger {
            Trigger::Request { msg, .. } => Some(msg),
            Trigger::Response { msg, .. } => msg.as_deref(),
            _ => None,
        }
    }

    pub fn body(&self) -> Bytes {
        self.message().map(Message::body).unwrap_or_default()
    }

    /// `msg.payl`: the body as text (trimmed).
    pub fn payload(&self) -> String {
        String::from_utf8_lossy(&self.body()).trim().to_string()
    }

    pub fn timer(&self) -> &str {
        match &self.trigger {
            Trigger::Timer { name } => name,
            _ => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_codes_name_what_method_returns() {
        for code in 0..Method::STANDARD_NAMES.len() {
            let m = Method::from_name(method_code_name(code));
            assert_eq!(m.standard_index(), Some(code));
            assert_eq!(m.metric_label(), method_code_name(code));
        }
        for name in EVENT_NAMES.iter().chain(&["FOO"]) {
            assert_eq!(Method::from_name(name).standard_index(), None, "{name}");
        }
        assert_eq!(METHOD_CODES, 18);
    }
}
