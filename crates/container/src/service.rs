//! What a service implements. The container calls one method per event; the service answers
//! through the [`Context`], which is its only way to send, create sessions or arm timers.

use crate::context::Context;
use crate::ids::{AppSessionId, SessionId, TimerId};
use tandem_sip::{Flow, Message, Method};
use tandem_transaction::ServerTxId;

/// How a request reached the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Outside any dialog, chosen by the routing rules.
    Initial,
    /// Inside a dialog of one of the service's SIP sessions (`Request::session` is set).
    InDialog,
    /// Addressed to the service through a Route header it record-routed (a proxy's
    /// subsequent requests); the container has removed that Route value already.
    Routed,
}

/// A received request as a service sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub msg: &'a Message,
    /// The server transaction to answer on (`None` for ACK).
    pub tx: Option<ServerTxId>,
    pub flow: Flow,
    pub kind: RequestKind,
    pub session: Option<SessionId>,
    pub app: Option<AppSessionId>,
    /// Index of the Route header value the container consumed (routed requests).
    pub(crate) consumed_route: Option<(usize, tandem_sip::Span)>,
}

impl<'a> Request<'a> {
    /// A request as the container would present it (for engines that replay a request
    /// after waiting for sessions).
    pub fn new(
        msg: &'a Message,
        tx: Option<ServerTxId>,
        flow: Flow,
        kind: RequestKind,
        session: Option<SessionId>,
        app: Option<AppSessionId>,
    ) -> Self {
        Request { msg, tx, flow, kind, session, app, consumed_route: None }
    }

    pub fn method(&self) -> &Method {
        self.msg.method().unwrap_or(&Method::Options)
    }

    pub(crate) fn with_consumed_route(mut self, consumed_route: Option<(usize, tandem_sip::Span)>) -> Self {
        self.consumed_route = consumed_route;
        self
    }

    /// An owned copy (the message is reference-counted, not copied) to act on later, e.g.
    /// from a [`crate::Completion`] once an asynchronous lookup is done.
    pub fn detach(&self) -> DetachedRequest {
        DetachedRequest {
            msg: self.msg.clone(),
            tx: self.tx,
            flow: self.flow,
            kind: self.kind,
            session: self.session,
            app: self.app,
            consumed_route: self.consumed_route,
        }
    }

    /// The URI a proxy routes on: the first Route value the container did not consume, else
    /// the Request-URI.
    pub fn next_hop_uri(&self) -> Option<tandem_sip::Uri<'a>> {
        let msg: &'a Message = self.msg;
        let consumed = self.consumed_route.map(|(_, s)| s);
        match msg.route_values().find(|(_, v)| msg.span_of(v) != consumed) {
            Some((_, value)) => tandem_sip::NameAddr::parse(value)?.uri(),
            None => msg.request_uri(),
        }
    }
}

/// A [`Request`] kept past its handler.
#[derive(Debug, Clone)]
pub struct DetachedRequest {
    msg: Message,
    tx: Option<ServerTxId>,
    flow: Flow,
    kind: RequestKind,
    session: Option<SessionId>,
    app: Option<AppSessionId>,
    consumed_route: Option<(usize, tandem_sip::Span)>,
}

impl DetachedRequest {
    pub fn request(&self) -> Request<'_> {
        Request {
            msg: &self.msg,
            tx: self.tx,
            flow: self.flow,
            kind: self.kind,
            session: self.session,
            app: self.app,
            consumed_route: self.consumed_route,
        }
    }
}

/// What came back for a request a service sent on a SIP session.
#[derive(Debug, Clone, Copy)]
pub enum ResponseEvent<'a> {
    Received(&'a Message),
    /// No final response in time (as if 408).
    Timeout,
    /// The transport failed (as if 503).
    TransportError,
}

impl ResponseEvent<'_> {
    pub fn status(&self) -> u16 {
        match self {
            ResponseEvent::Received(m) => m.status().unwrap_or(500),
            ResponseEvent::Timeout => 408,
            ResponseEvent::TransportError => 503,
        }
    }

    pub fn method(&self) -> Option<&Method> {
        match self {
            ResponseEvent::Received(m) => m.transaction_method(),
            _ => None,
        }
    }
}

/// A user-agent service's capabilities; the container enforces RFC 3261 §8.2 with them
/// before the handler runs (405, 420, 415, 406, 416).
#[derive(Debug, Clone, Copy)]
pub struct UaProfile {
    pub allowed_methods: &'static [&'static str],
    /// Body types the service understands in requests; empty: any (a B2BUA passes bodies
    /// through without reading them).
    pub accepted_bodies: &'static [&'static str],
    /// Option tags it supports (for `Require`).
    pub supported_extensions: &'static [&'static str],
    /// The body type it answers INVITEs with (checked against `Accept`).
    pub answer_body: Option<&'static str>,
}

pub trait Service: Send + Sync + 'static {
    /// `Some` for a user agent (the container applies the §8.2 checks), `None` for a proxy,
    /// which sees every request as it came.
    fn user_agent(&self) -> Option<&UaProfile> {
        None
    }

    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>);

    /// A response (or its failure) to a request the service sent on `session`.
    fn on_response(&self, _ctx: &mut Context<'_>, _session: SessionId, _response: ResponseEvent<'_>) {}

    fn on_timer(&self, _ctx: &mut Context<'_>, _app: AppSessionId, _timer: TimerId, _name: &'static str) {}

    /// The caller cancelled an INVITE the service had not answered; the container already
    /// answered 487 and terminated the session.
    fn on_cancelled(&self, _ctx: &mut Context<'_>, _session: SessionId) {}

    /// A 2xx the service sent was never acknowledged (RFC 3261 §13.3.1.4: send BYE).
    fn on_ack_timeout(&self, ctx: &mut Context<'_>, session: SessionId) {
        let _ = ctx.send_bye(session);
    }

    /// The application session expired; it is invalidated right after this returns.
    fn on_expired(&self, _ctx: &mut Context<'_>, _app: AppSessionId) {}

    /// Extra Prometheus text the service exports with the container's metrics.
    fn metrics_text(&self) -> String {
        String::new()
    }
}

/// Index of a service in the container's service table.
pub type ServiceId = u16;
