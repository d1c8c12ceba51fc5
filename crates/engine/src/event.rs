use bytes::Bytes;
use tandem_container::{AppSessionId, Request, RequestKind, ResponseEvent, SessionId};
use tandem_sip::{Flow, Message};
use tandem_transaction::ServerTxId;

/// What triggered a negotiation, owned so it can wait for sessions.
#[derive(Debug, Clone)]
pub enum Trigger {
    Request {
        msg: Message,
        tx: Option<ServerTxId>,
        flow: Flow,
        kind: RequestKind,
    },
    Response {
        msg: Option<Message>,
        status: u16,
    },
    Timer {
        name: &'static str,
    },
    /// The caller cancelled the INVITE (the container already answered 200 and 487).
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub trigger: Trigger,
    /// The SIP session the message arrived on (`None` for an initial request: the session the
    /// transition creates).
    pub session: Option<SessionId>,
    pub app: Option<AppSessionId>,
}

impl Event {
    pub(crate) fn from_request(req: &Request<'_>) -> Event {
        Event {
            trigger: Trigger::Request { msg: req.msg.clone(), tx: req.tx, flow: req.flow, kind: req.kind },
            session: req.session,
            app: req.app,
        }
    }

    pub(crate) fn from_response(session: SessionId, response: &ResponseEvent<'_>) -> Event {
        let msg = match response {
            ResponseEvent::Received(m) => Some((*m).clone()),
            _ => None,
        };
        Event { trigger: Trigger::Response { msg, status: response.status() }, session: Some(session), app: None }
    }

    /// `msg.method`: the request method, `OK` / `PROVISIONAL` / `ERROR` for responses,
    /// `TIMER`, or `CANCEL` for a cancelled INVITE.
    pub fn method(&self) -> &str {
        match &self.trigger {
            Trigger::Request { msg, .. } => msg.method().map_or("", |m| m.as_str()),
            Trigger::Response { status, .. } if *status < 200 => "PROVISIONAL",
            Trigger::Response { status, .. } if *status < 300 => "OK",
            Trigger::Response { .. } => "ERROR",
            Trigger::Timer { .. } => "TIMER",
            Trigger::Cancelled => "CANCEL",
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
            Trigger::Response { msg, .. } => msg.as_ref(),
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
