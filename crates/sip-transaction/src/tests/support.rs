use crate::{Config, Event, Received, ServerTxId, TransactionLayer, Transmit};
use bytes::Bytes;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tandem_sip::{parse_datagram, Flow, Message, ParseLimits, ResponseBuilder, Transport};

pub(super) fn udp(port: u16) -> Flow {
    Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: SocketAddr::from(([192, 0, 2, 1], port)) }
}

pub(super) fn tcp(port: u16, connection: u64) -> Flow {
    Flow { transport: Transport::Tcp, listener: 1, connection, remote: SocketAddr::from(([192, 0, 2, 1], port)) }
}

/// Parses a message written with `\n` or `\r\n` line ends; it must be defect-free.
pub(super) fn parse(text: &str) -> Message {
    let text = text.replace("\r\n", "\n").replace('\n', "\r\n");
    parse_bytes(Bytes::from(text))
}

pub(super) fn parse_bytes(bytes: Bytes) -> Message {
    let msg = parse_datagram(bytes, &ParseLimits::default()).expect("parses");
    assert_eq!(msg.defect(), None, "{msg:?}");
    msg
}

/// A request as a UA would send it; `branch: None` leaves the parameter out (RFC 2543).
#[derive(Clone, Copy)]
pub(super) struct Req<'a> {
    pub method: &'a str,
    pub uri: &'a str,
    pub branch: Option<&'a str>,
    pub transport: &'a str,
    pub sent_by: &'a str,
    pub call_id: &'a str,
    pub cseq: u32,
    pub from_tag: &'a str,
    pub to_tag: Option<&'a str>,
    /// Extra header lines, each ending with `\r\n`.
    pub extra: &'a str,
}

impl Default for Req<'_> {
    fn default() -> Self {
        Req {
            method: "INVITE",
            uri: "sip:bob@biloxi.example.com",
            branch: Some("z9hG4bK776asdhds"),
            transport: "UDP",
            sent_by: "pc33.atlanta.example.com:5060",
            call_id: "a84b4c76e66710@pc33.atlanta.example.com",
            cseq: 314159,
            from_tag: "1928301774",
            to_tag: None,
            extra: "",
        }
    }
}

impl Req<'_> {
    pub(super) fn text(&self) -> String {
        let branch = self.branch.map(|b| format!(";branch={b}")).unwrap_or_default();
        let to_tag = self.to_tag.map(|t| format!(";tag={t}")).unwrap_or_default();
        format!(
            "{m} {uri} SIP/2.0\r\n\
             Via: SIP/2.0/{tr} {sb}{branch}\r\n\
             Max-Forwards: 70\r\n\
             {extra}\
             From: Alice <sip:alice@atlanta.example.com>;tag={ft}\r\n\
             To: Bob <sip:bob@biloxi.example.com>{to_tag}\r\n\
             Call-ID: {cid}\r\n\
             CSeq: {seq} {m}\r\n\
             Content-Length: 0\r\n\r\n",
            m = self.method,
            uri = self.uri,
            tr = self.transport,
            sb = self.sent_by,
            extra = self.extra,
            ft = self.from_tag,
            cid = self.call_id,
            seq = self.cseq,
        )
    }

    pub(super) fn bytes(&self) -> Bytes {
        Bytes::from(self.text())
    }

    pub(super) fn msg(&self) -> Message {
        parse(&self.text())
    }
}

/// A response to `request` (Via, From, To, Call-ID, CSeq copied; To tag added).
pub(super) fn response_bytes(request: &Message, status: u16, to_tag: Option<&str>) -> Bytes {
    ResponseBuilder::new(request, status, "Reason", to_tag).finish()
}

pub(super) fn response(request: &Message, status: u16, to_tag: Option<&str>) -> Message {
    parse_bytes(response_bytes(request, status, to_tag))
}

/// Milliseconds since `base`.
pub(super) fn ms(base: Instant, t: Instant) -> u64 {
    t.duration_since(base).as_millis() as u64
}

/// What a run of the timers produced, stamped in milliseconds since the base instant.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    pub transmits: Vec<(u64, Transmit)>,
    pub events: Vec<(u64, Event)>,
}

impl Timeline {
    pub(super) fn transmit_times(&self) -> Vec<u64> {
        self.transmits.iter().map(|(t, _)| *t).collect()
    }
}

pub(super) struct Harness {
    pub layer: TransactionLayer,
    pub base: Instant,
}

impl Harness {
    pub(super) fn new() -> Self {
        Self::with_config(Config::default())
    }

    pub(super) fn with_config(config: Config) -> Self {
        Harness { layer: TransactionLayer::new(config), base: Instant::now() }
    }

    pub(super) fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    pub(super) fn transmits(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.layer.poll_transmit()).collect()
    }

    pub(super) fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.layer.poll_event()).collect()
    }

    /// Fires the timers one deadline at a time (as a runtime would) up to `until_ms` included.
    pub(super) fn run_until(&mut self, until_ms: u64) -> Timeline {
        let until = self.at(until_ms);
        let mut timeline = Timeline::default();
        while let Some(next) = self.layer.next_timeout().filter(|t| *t <= until) {
            self.layer.on_timeout(next);
            let t = ms(self.base, next);
            assert!(!matches!(self.layer.next_timeout(), Some(n) if n <= next), "a timer due at {t} ms survived on_timeout");
            timeline.transmits.extend(self.transmits().into_iter().map(|x| (t, x)));
            timeline.events.extend(self.events().into_iter().map(|e| (t, e)));
        }
        timeline
    }

    /// Feeds a request that must start a new server transaction; returns its id.
    pub(super) fn new_server_tx(&mut self, at_ms: u64, msg: Message, flow: Flow) -> ServerTxId {
        match self.layer.on_message(self.at(at_ms), msg, flow) {
            Received::Request { tx: Some(tx), cancels: None, .. } => tx,
            other => panic!("expected a new server transaction, got {other:?}"),
        }
    }
}

pub(super) fn is_absorbed(r: &Received) -> bool {
    matches!(r, Received::Absorbed)
}

/// The payload of every transmit, as text.
pub(super) fn texts(transmits: &[Transmit]) -> Vec<String> {
    transmits.iter().map(|t| String::from_utf8_lossy(&t.payload).into_owned()).collect()
}

pub(super) fn first_line(payload: &Bytes) -> String {
    String::from_utf8_lossy(payload).lines().next().unwrap_or("").to_owned()
}
