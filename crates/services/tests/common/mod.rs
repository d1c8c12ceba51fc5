//! A scripted SIP user agent on a real `Transports` endpoint, and containers to play it
//! against, for the services' integration tests.
#![allow(dead_code)]

use bytes::Bytes;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule, Service};
use tandem_sip::{Flow, HeaderName, Message, Method, ParseError, Transport};
use tandem_transport::{client_config, server_config, InProcessHub, ListenSpec, Sink, TlsConfig, TransportConfig, Transports};
use tokio::sync::mpsc;

pub const WAIT: Duration = Duration::from_secs(5);
pub const SDP: &str = "v=0\r\no=alice 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n";

/// What every endpoint of one case shares: certificates for TLS and WSS, the in-process hub.
pub struct World {
    pub transport: Transport,
    tls: TlsConfig,
    hub: InProcessHub,
    /// `TransportConfig::udp_readers` of the containers (peers keep a reader task).
    udp_readers: usize,
}

static NEXT_NAME: AtomicU16 = AtomicU16::new(41000);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl World {
    pub fn new(transport: Transport) -> World {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        let p = Path::new("test");
        let tls = TlsConfig {
            server: Some(server_config(leaf.pem().as_bytes(), key.serialize_pem().as_bytes(), p, p).unwrap()),
            client: Some(client_config(Some((ca.pem().as_bytes(), p)), false).unwrap()),
        };
        World { transport, tls, hub: InProcessHub::new(), udp_readers: TransportConfig::default().udp_readers }
    }

    /// UDP, with the containers' executors reading their sockets themselves (`tandem run`'s
    /// default) instead of reader tasks.
    pub fn udp_read_by_executors() -> World {
        World { udp_readers: 0, ..World::new(Transport::Udp) }
    }

    /// The transport configuration of this case's containers.
    pub fn config(&self) -> TransportConfig {
        TransportConfig { udp_readers: self.udp_readers, ..self.peer_config() }
    }

    fn peer_config(&self) -> TransportConfig {
        TransportConfig { tls: self.tls.clone(), in_process: Some(self.hub.clone()), ..Default::default() }
    }

    /// A listen spec of this case's transport: an ephemeral port, or a fresh in-process name.
    pub fn spec(&self) -> ListenSpec {
        let text = match self.transport {
            Transport::InProc => format!("inproc:127.0.0.1:{}", NEXT_NAME.fetch_add(1, Ordering::Relaxed)),
            t => format!("{}:127.0.0.1:0", t.as_str().to_ascii_lowercase()),
        };
        text.parse().unwrap()
    }

    /// `PROTO:IP:PORT` of a container, as a next hop.
    pub fn hop(&self, addr: SocketAddr) -> String {
        format!("{}:{addr}", self.transport.as_str().to_ascii_lowercase())
    }

    pub async fn container(&self, service: &str, instance: Arc<dyn Service>) -> (Container, SocketAddr) {
        let settings = ContainerSettings {
            container: ContainerConfig { executors: 2, ..Default::default() },
            routes: vec![RouteRule::catch_all(service)],
        };
        let container = Container::start(settings, vec![(service.to_string(), instance)], &[self.spec()], self.config()).await.unwrap();
        let addr = container.local_addrs()[0].1;
        (container, addr)
    }

    pub async fn peer(&self, user: &'static str) -> Peer {
        let (tx, rx) = mpsc::unbounded_channel();
        let transports = Transports::bind(&[self.spec()], self.peer_config(), Arc::new(Inbox(tx))).await.unwrap();
        let local = transports.local_addrs()[0].1;
        Peer { user, transport: self.transport, transports, rx, local }
    }
}

struct Inbox(mpsc::UnboundedSender<(Message, Flow)>);

impl Sink for Inbox {
    fn on_message(&self, msg: Message, flow: Flow) {
        let _ = self.0.send((msg, flow));
    }
    fn on_parse_error(&self, error: ParseError, flow: Flow) {
        panic!("unparseable message from {}: {error}", flow.remote);
    }
}

/// A scripted user agent on one `Transports` endpoint.
pub struct Peer {
    pub user: &'static str,
    pub transport: Transport,
    pub transports: Transports,
    rx: mpsc::UnboundedReceiver<(Message, Flow)>,
    pub local: SocketAddr,
}

/// A dialog as the caller sees it after the 200 OK.
pub struct Call {
    pub call_id: String,
    pub from: String,
    pub to: String,
    pub remote_target: String,
    pub routes: Vec<String>,
}

pub fn id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl Peer {
    pub fn flow_to(&self, remote: SocketAddr) -> Flow {
        Flow { transport: self.transport, listener: 0, connection: 0, remote }
    }

    pub fn t(&self) -> String {
        self.transport.as_str().to_ascii_lowercase()
    }

    pub fn contact(&self) -> String {
        format!("<sip:{}@{};transport={}>", self.user, self.local, self.t())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &self,
        method: &str,
        ruri: &str,
        from: &str,
        to: &str,
        call_id: &str,
        cseq: u32,
        extra: &[String],
        body: &str,
    ) -> String {
        let mut text = format!(
            "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/{} {};branch=z9hG4bK{}{};rport\r\nMax-Forwards: 70\r\nFrom: {from}\r\nTo: {to}\r\n\
             Call-ID: {call_id}\r\nCSeq: {cseq} {method}\r\nContact: {}\r\n",
            self.transport.as_str(),
            self.local,
            self.user,
            id(),
            self.contact()
        );
        for h in extra {
            text.push_str(h);
            text.push_str("\r\n");
        }
        if !body.is_empty() {
            text.push_str("Content-Type: application/sdp\r\n");
        }
        text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        text
    }

    pub fn send(&self, to: Flow, text: String) {
        self.transports.send(to, Bytes::from(text)).unwrap();
    }

    /// The next message for which `want` holds (others, e.g. 100 Trying, are skipped).
    pub async fn expect(&mut self, what: &str, want: impl Fn(&Message) -> bool) -> (Message, Flow) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((msg, flow))) if want(&msg) => return (msg, flow),
                Ok(Some(_)) => continue,
                _ => panic!("{} over {:?}: no {what} within {WAIT:?}", self.user, self.transport),
            }
        }
    }

    pub async fn final_response(&mut self, method: Method, call_id: &str) -> Message {
        let what = format!("final response to {method}");
        self.expect(&what, |m| m.status().is_some_and(|s| s >= 200) && m.transaction_method() == Some(&method) && m.call_id() == call_id)
            .await
            .0
    }

    /// OPTIONS to `server`: 200.
    pub async fn options(&mut self, server: SocketAddr) {
        let call_id = format!("options-{}", id());
        let from = format!("<sip:{}@{}>;tag=o{}", self.user, self.local, id());
        let text =
            self.request("OPTIONS", &format!("sip:service@{server}"), &from, &format!("<sip:service@{server}>"), &call_id, 1, &[], "");
        self.send(self.flow_to(server), text);
        let response = self.final_response(Method::Options, &call_id).await;
        assert_eq!(response.status(), Some(200), "OPTIONS over {:?}", self.transport);
    }

    /// INVITE `ruri` through `server`, wait for the 200 with SDP, ACK it.
    pub async fn call(&mut self, server: SocketAddr, ruri: &str) -> Call {
        let call_id = format!("call-{}", id());
        let from = format!("<sip:{}@{}>;tag=a{}", self.user, self.local, id());
        let to = format!("<{ruri}>");
        let text = self.request("INVITE", ruri, &from, &to, &call_id, 1, &[], SDP);
        self.send(self.flow_to(server), text);
        let ok = self.final_response(Method::Invite, &call_id).await;
        assert_eq!(ok.status(), Some(200), "INVITE over {:?}: {}", self.transport, String::from_utf8_lossy(&ok.wire_bytes()));
        assert!(ok.body_len() > 0, "the 200 carries an SDP answer");
        let remote_target = ok.contact().map(|c| c.uri_text.to_string()).expect("a Contact in the 200");
        let mut routes: Vec<String> = ok.record_route_values().map(|(_, v)| v.to_string()).collect();
        routes.reverse();
        let call = Call { call_id, from, to: ok.to_value().to_string(), remote_target, routes };
        let ack = self.in_dialog("ACK", &call, 1, "");
        self.send(self.flow_to(server), ack);
        call
    }

    pub fn in_dialog(&self, method: &str, call: &Call, cseq: u32, body: &str) -> String {
        let routes: Vec<String> = call.routes.iter().map(|r| format!("Route: {r}")).collect();
        self.request(method, &call.remote_target, &call.from, &call.to, &call.call_id, cseq, &routes, body)
    }

    /// BYE along the dialog's route (via `server`): 200.
    pub async fn hang_up(&mut self, server: SocketAddr, call: &Call) {
        let bye = self.in_dialog("BYE", call, 2, "");
        self.send(self.flow_to(server), bye);
        let response = self.final_response(Method::Bye, &call.call_id).await;
        assert_eq!(response.status(), Some(200), "BYE over {:?}", self.transport);
    }

    /// REGISTER at `server`: 200 listing our contact.
    pub async fn register(&mut self, server: SocketAddr) {
        let call_id = format!("reg-{}", id());
        let aor = format!("<sip:{}@{}>", self.user, server.ip());
        let from = format!("{aor};tag=r{}", id());
        let text = self.request("REGISTER", &format!("sip:{}", server.ip()), &from, &aor, &call_id, 1, &["Expires: 600".into()], "");
        self.send(self.flow_to(server), text);
        let ok = self.final_response(Method::Register, &call_id).await;
        assert_eq!(ok.status(), Some(200), "REGISTER over {:?}", self.transport);
        let contact = ok.contact().expect("the 200 lists the binding");
        assert_eq!(contact.uri_text, format!("sip:{}@{};transport={}", self.user, self.local, self.t()));
    }

    /// Answers the next INVITE with 200 + SDP, then the BYE that ends it with 200.
    pub async fn answer_and_wait_for_bye(&mut self) {
        let (invite, flow) = self.expect("INVITE", |m| m.method() == Some(&Method::Invite)).await;
        let ok = self.response_to(&invite, 200, SDP);
        self.transports.send(flow, Bytes::from(ok)).unwrap();
        self.expect("ACK", |m| m.method() == Some(&Method::Ack) && m.call_id() == invite.call_id()).await;
        let (bye, flow) = self.expect("BYE", |m| m.method() == Some(&Method::Bye) && m.call_id() == invite.call_id()).await;
        let ok = self.response_to(&bye, 200, "");
        self.transports.send(flow, Bytes::from(ok)).unwrap();
    }

    pub fn response_to(&self, req: &Message, status: u16, body: &str) -> String {
        let mut text = format!("SIP/2.0 {status} OK\r\n");
        for (_, via) in req.values_of(HeaderName::Via) {
            text.push_str(&format!("Via: {via}\r\n"));
        }
        for (_, rr) in req.record_route_values() {
            text.push_str(&format!("Record-Route: {rr}\r\n"));
        }
        let to = req.to_value();
        let to = if req.to_tag().is_some() { to.to_string() } else { format!("{to};tag=b{}", id()) };
        text.push_str(&format!("From: {}\r\nTo: {to}\r\nCall-ID: {}\r\n", req.from_value(), req.call_id()));
        let cseq = req.cseq().map(|c| format!("{} {}", c.seq, c.method.as_str())).unwrap_or_default();
        text.push_str(&format!("CSeq: {cseq}\r\nContact: {}\r\n", self.contact()));
        if !body.is_empty() {
            text.push_str("Content-Type: application/sdp\r\n");
        }
        text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        text
    }
}
