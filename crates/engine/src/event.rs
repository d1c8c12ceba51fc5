use bytes::Bytes;
use std::borrow::Cow;
use tandem_container::{AppSessionId, Request, RequestKind, ResponseEvent, SessionId};
use tandem_sip::{Flow, Message};
use tandem_transaction::ServerTxId;

/// What triggered a negotiation. The message is borrowed from the container while the
/// negotiation runs within the call that delivered it, and copied only if it has to wait
/// for sessions ([`Event::into_owned`]).
#[derive(Debug, Clone)]
pub enum Trigger<'m> {
    Request {
        msg: Cow<'m, Message>,
        tx: Option<ServerTxId>,
        flow: Flow,
        kind: RequestKind,
    },
    Response {
        msg: Option<Cow<'m, Message>>,
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
            trigger: Trigger::Request { msg: Cow::Borrowed(req.msg), tx: req.tx, flow: req.flow, kind: req.kind },
            session: req.session,
            app: req.app,
        }
    }

    pub(crate) fn from_response(session: SessionId, response: &ResponseEvent<'m>) -> Event<'m> {
        let msg = match response {
            ResponseEvent::Received(m) => Some(Cow::Borrowed(*m)),
            _ => None,
        };
        Event { trigger: Trigger::Response { msg, status: response.status() }, session: Some(session), app: None }
    }

    /// The event with its own copy of the message, to outlive the call that delivered it.
    pub fn into_owned(self) -> Event<'static> {
        let trigger = match self.trigger {
            Trigger::Request { msg, tx, flow, kind } => Trigger::Request { msg: Cow::Owned(msg.into_owned()), tx, flow, kind },
            Trigger::Response { msg, status } => Trigger::Response { msg: msg.map(|m| Cow::Owned(m.into_owned())), status },
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
