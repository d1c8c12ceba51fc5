use super::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

#[derive(Default)]
struct Collect {
    messages: Mutex<Vec<(Message, Flow)>>,
    errors: Mutex<Vec<ParseError>>,
    closed: Mutex<Vec<Flow>>,
}

impl Sink for Collect {
    fn on_message(&self, msg: Message, flow: Flow) {
        self.messages.lock().push((msg, flow));
    }
    fn on_parse_error(&self, error: ParseError, _flow: Flow) {
        self.errors.lock().push(error);
    }
    fn on_flow_closed(&self, flow: Flow) {
        self.closed.lock().push(flow);
    }
}

const OPTIONS: &str = "OPTIONS sip:u@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:u@127.0.0.1>\r\nCall-ID: c1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";

async fn start(config: TransportConfig) -> (Transports, Arc<Collect>) {
    let sink = Arc::new(Collect::default());
    let specs: Vec<ListenSpec> = vec!["udp:127.0.0.1:0".parse().unwrap(), "tcp:127.0.0.1:0".parse().unwrap()];
    let t = Transports::bind(&specs, config, sink.clone()).await.unwrap();
    (t, sink)
}

/// An endpoint with a TCP client connected to it, and the flow of the client's first message.
async fn tcp_client(config: TransportConfig) -> (Transports, Arc<Collect>, TcpStream, Flow) {
    let (t, sink) = start(config).await;
    let server = t.local_addrs()[1].1;
    let mut client = TcpStream::connect(server).await.unwrap();
    client.write_all(OPTIONS.as_bytes()).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let flow = sink.messages.lock()[0].1;
    (t, sink, client, flow)
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached");
}

#[tokio::test]
async fn udp_round_trip_and_symmetric_send() {
    let (t, sink) = start(TransportConfig::default()).await;
    let server = t.local_addrs()[0].1;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(OPTIONS.as_bytes(), server).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let (msg, flow) = sink.messages.lock()[0].clone();
    assert_eq!(msg.call_id(), "c1");
    assert_eq!(flow.remote, client.local_addr().unwrap());
    t.send(flow, Bytes::from_static(b"SIP/2.0 200 OK\r\n\r\n")).unwrap();
    let mut buf = [0u8; 100];
    let (n, from) = client.recv_from(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"SIP/2.0 200 OK\r\n\r\n");
    assert_eq!(from, server);
    client.send_to(b"\x00\x01garbage", server).await.unwrap();
    wait_for(|| sink.errors.lock().len() == 1).await;
    t.shutdown();
}

#[tokio::test]
async fn tcp_frames_split_and_pipelined_messages() {
    let (t, sink) = start(TransportConfig::default()).await;
    let server = t.local_addrs()[1].1;
    let mut stream = TcpStream::connect(server).await.unwrap();
    let two = format!("{OPTIONS}{}", OPTIONS.replace("c1", "c2"));
    let (a, b) = two.as_bytes().split_at(37);
    stream.write_all(a).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream.write_all(b).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 2).await;
    let flow = sink.messages.lock()[1].1;
    assert_eq!(sink.messages.lock()[1].0.call_id(), "c2");
    assert_ne!(flow.connection, 0);
    t.send(flow, Bytes::from_static(b"pong")).unwrap();
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"pong");
    // A keep-alive ping is answered with a pong.
    stream.write_all(b"\r\n\r\n").await.unwrap();
    let mut pong = [0u8; 2];
    stream.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"\r\n");
    t.shutdown();
}

#[tokio::test]
async fn tcp_unframeable_stream_is_reported_and_closed() {
    let (t, sink) = start(TransportConfig::default()).await;
    let server = t.local_addrs()[1].1;
    let mut stream = TcpStream::connect(server).await.unwrap();
    let bad = OPTIONS.replace("Content-Length: 0", "Content-Length: -5");
    stream.write_all(bad.as_bytes()).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    assert!(sink.messages.lock()[0].0.defect().is_some());
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await.unwrap().unwrap();
    assert_eq!(n, 0, "connection closed");
    wait_for(|| sink.closed.lock().len() == 1).await;
    wait_for(|| t.open_connections() == 0).await;
}

#[tokio::test]
async fn tcp_limits_and_idle_timeout() {
    let config = TransportConfig { tcp_max_connections_per_peer: 2, tcp_idle_timeout: Duration::from_millis(300), ..Default::default() };
    let (t, _sink) = start(config).await;
    let server = t.local_addrs()[1].1;
    let mut kept = Vec::new();
    for _ in 0..3 {
        kept.push(TcpStream::connect(server).await.unwrap());
    }
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(2), kept[2].read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0, "third connection from one peer is refused");
    assert_eq!(t.stats().tcp_refused.load(Ordering::Relaxed), 1);
    // Idle connections are closed after the timeout.
    let n = tokio::time::timeout(Duration::from_secs(2), kept[0].read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0);
    wait_for(|| t.open_connections() == 0).await;
    assert!(t.stats().tcp_idle_closed.load(Ordering::Relaxed) >= 2);
}

/// A connection that keeps sending is not idle: its reader's timer fires at the first
/// deadline, finds reads since, and is re-armed; once the peer goes quiet it closes.
#[tokio::test]
async fn tcp_reads_keep_a_connection_from_idling_out() {
    let config = TransportConfig { tcp_idle_timeout: Duration::from_millis(300), ..Default::default() };
    let (t, _sink) = start(config).await;
    let server = t.local_addrs()[1].1;
    let mut conn = TcpStream::connect(server).await.unwrap();
    wait_for(|| t.open_connections() == 1).await;
    // A single CRLF is a keep-alive that takes no answer (RFC 5626 §4.4.1 answers CRLFCRLF).
    for _ in 0..9 {
        conn.write_all(b"\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(t.open_connections(), 1, "open past three idle timeouts while it kept sending");
    assert_eq!(t.stats().tcp_idle_closed.load(Ordering::Relaxed), 0);
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0, "closed once quiet");
    assert_eq!(t.stats().tcp_idle_closed.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn tcp_outgoing_connection_and_failure() {
    let (t, sink) = start(TransportConfig::default()).await;
    let peer = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let remote = peer.local_addr().unwrap();
    let flow = Flow { transport: Transport::Tcp, listener: 1, connection: 0, remote };
    t.send(flow, Bytes::from_static(b"hello")).unwrap();
    t.send(flow, Bytes::from_static(b" again")).unwrap();
    let (mut s, _) = peer.accept().await.unwrap();
    let mut buf = [0u8; 11];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello again");
    drop(peer);
    // Nothing listens on this port any more: the connect fails and the flow is reported closed.
    let dead = Flow { transport: Transport::Tcp, listener: 1, connection: 0, remote: "127.0.0.1:1".parse().unwrap() };
    t.send(dead, Bytes::from_static(b"x")).unwrap();
    wait_for(|| sink.closed.lock().iter().any(|f| f.remote == dead.remote)).await;
}

#[test]
fn listen_specs() {
    let s: ListenSpec = "tcp:[::1]:5060".parse().unwrap();
    assert_eq!((s.protocol, s.addr.port()), (Protocol::Tcp, 5060));
    assert_eq!(s.to_string(), "tcp:[::1]:5060");
    assert!("sctp:127.0.0.1:1".parse::<ListenSpec>().is_err());
    assert_eq!("WSS:127.0.0.1:8443".parse::<ListenSpec>().unwrap().protocol, Protocol::Wss);
    assert!("udp:localhost".parse::<ListenSpec>().is_err());
}

// ---- TLS ----

/// A development CA and a leaf for 127.0.0.1 signed by it: (ca PEM, leaf chain PEM, key PEM).
fn test_pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

fn tls_config(pki: &(String, String, String)) -> TlsConfig {
    let (ca, chain, key) = pki;
    let p = std::path::Path::new("test");
    TlsConfig {
        server: Some(server_config(chain.as_bytes(), key.as_bytes(), p, p).unwrap()),
        client: Some(client_config(Some((ca.as_bytes(), p)), false).unwrap()),
    }
}

async fn start_tls(config: TransportConfig) -> (Transports, Arc<Collect>, SocketAddr) {
    let sink = Arc::new(Collect::default());
    let specs: Vec<ListenSpec> = vec!["tcp:127.0.0.1:0".parse().unwrap(), "tls:127.0.0.1:0".parse().unwrap()];
    let t = Transports::bind(&specs, config, sink.clone()).await.unwrap();
    let addr = t.local_addrs()[1].1;
    (t, sink, addr)
}

async fn tls_client(ca: &str, server: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
    let config = client_config(Some((ca.as_bytes(), std::path::Path::new("ca"))), false).unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = TcpStream::connect(server).await.unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(server.ip().into());
    connector.connect(name, tcp).await.unwrap()
}

#[tokio::test]
async fn tls_round_trip_in_and_out() {
    let pki = test_pki();
    let (t, sink, server) = start_tls(TransportConfig { tls: tls_config(&pki), ..Default::default() }).await;
    assert_eq!(t.local_addrs()[1].0, Protocol::Tls);
    assert_eq!(t.listener_for(Transport::Tls).map(|(i, _)| i), Some(1));
    // Incoming: a TLS client's message is framed like TCP's, answered on the same connection.
    let mut client = tls_client(&pki.0, server).await;
    client.write_all(OPTIONS.as_bytes()).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let flow = sink.messages.lock()[0].1;
    assert_eq!((flow.transport, flow.listener), (Transport::Tls, 1));
    t.send(flow, Bytes::from_static(b"SIP/2.0 200 OK\r\n\r\n")).unwrap();
    let mut buf = [0u8; 18];
    client.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"SIP/2.0 200 OK\r\n\r\n");

    // Outgoing: another transport instance connects to it over TLS, reusing one connection.
    let (peer, peer_sink, _) = start_tls(TransportConfig { tls: tls_config(&pki), ..Default::default() }).await;
    let out = Flow { transport: Transport::Tls, listener: 0, connection: 0, remote: server };
    peer.send(out, Bytes::from(OPTIONS.replace("c1", "c2"))).unwrap();
    peer.send(out, Bytes::from(OPTIONS.replace("c1", "c3"))).unwrap();
    wait_for(|| sink.messages.lock().len() == 3).await;
    assert_eq!(sink.messages.lock()[2].0.call_id(), "c3");
    assert_eq!(peer.open_connections(), 1, "the second message reused the connection");
    let back = sink.messages.lock()[2].1;
    t.send(back, Bytes::from(OPTIONS.replace("c1", "c4"))).unwrap();
    wait_for(|| peer_sink.messages.lock().len() == 1).await;
    assert_eq!(peer_sink.messages.lock()[0].1.transport, Transport::Tls);
    assert_eq!(t.stats().tls_handshake_failed.load(Ordering::Relaxed), 0);
    t.shutdown();
    peer.shutdown();
}

#[tokio::test]
async fn tls_untrusted_server_and_missing_client_config() {
    let pki = test_pki();
    let (t, sink, server) = start_tls(TransportConfig { tls: tls_config(&pki), ..Default::default() }).await;
    // The peer trusts another CA: the handshake fails, the flow is reported closed.
    let other = test_pki();
    let (peer, peer_sink, _) = start_tls(TransportConfig { tls: tls_config(&other), ..Default::default() }).await;
    let out = Flow { transport: Transport::Tls, listener: 0, connection: 0, remote: server };
    peer.send(out, Bytes::from(OPTIONS)).unwrap();
    wait_for(|| peer_sink.closed.lock().iter().any(|f| f.remote == server)).await;
    assert_eq!(peer.stats().tls_handshake_failed.load(Ordering::Relaxed), 1);
    wait_for(|| peer.open_connections() == 0).await;
    // The insecure option accepts it.
    let p = std::path::Path::new("test");
    let insecure = TlsConfig { server: tls_config(&other).server, client: Some(client_config(None, true).unwrap()) };
    let (peer2, _s, _) = start_tls(TransportConfig { tls: insecure, ..Default::default() }).await;
    peer2.send(out, Bytes::from(OPTIONS)).unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    // Without a client configuration, outgoing TLS is refused at once.
    let server_only = TlsConfig { server: Some(server_config(pki.1.as_bytes(), pki.2.as_bytes(), p, p).unwrap()), client: None };
    let (peer3, _s3, _) = start_tls(TransportConfig { tls: server_only, ..Default::default() }).await;
    assert_eq!(peer3.send(out, Bytes::from(OPTIONS)), Err(SendError::NoTlsClient));
    // Without a server configuration, a TLS listener cannot be bound.
    let specs: Vec<ListenSpec> = vec!["tls:127.0.0.1:0".parse().unwrap()];
    let err = Transports::bind(&specs, TransportConfig::default(), Arc::new(Collect::default())).await.err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    for x in [t, peer, peer2, peer3] {
        x.shutdown();
    }
}

#[tokio::test]
async fn tls_truncated_handshake_and_garbage_do_not_block_others() {
    let pki = test_pki();
    let config = TransportConfig { tls: tls_config(&pki), tls_handshake_timeout: Duration::from_millis(500), ..Default::default() };
    let (t, sink, server) = start_tls(config).await;
    // Half a ClientHello (record header announcing 512 bytes, then a few), then silence.
    let mut stalled = TcpStream::connect(server).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]).await.unwrap();
    // Garbage instead of a ClientHello.
    let mut garbage = TcpStream::connect(server).await.unwrap();
    garbage.write_all(OPTIONS.as_bytes()).await.unwrap();
    // Meanwhile a proper client is served at once.
    let started = std::time::Instant::now();
    let mut client = tls_client(&pki.0, server).await;
    client.write_all(OPTIONS.as_bytes()).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    assert!(started.elapsed() < Duration::from_millis(400), "served while another handshake stalls");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), garbage.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert!(n == 0 || !buf[..n].starts_with(b"SIP"), "garbage gets no SIP answer");
    // The stalled handshake is dropped after the timeout.
    let n = tokio::time::timeout(Duration::from_secs(3), stalled.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0, "stalled handshake closed");
    wait_for(|| t.stats().tls_handshake_failed.load(Ordering::Relaxed) == 2).await;
    // Only the good connection is left, and it still works.
    wait_for(|| t.open_connections() == 1).await;
    let flow = sink.messages.lock()[0].1;
    t.send(flow, Bytes::from_static(b"pong")).unwrap();
    let mut pong = [0u8; 4];
    client.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    assert_eq!(sink.messages.lock().len(), 1, "nothing from the bad connections reached the stack");
    t.shutdown();
}

#[test]
fn tls_listen_spec_and_pem_errors() {
    let s: ListenSpec = "tls:127.0.0.1:5061".parse().unwrap();
    assert_eq!((s.protocol, s.addr.port()), (Protocol::Tls, 5061));
    assert_eq!(s.to_string(), "tls:127.0.0.1:5061");
    assert_eq!(Protocol::Tls.transport(), Transport::Tls);
    let p = std::path::Path::new("x.pem");
    assert!(matches!(server_config(b"", b"", p, p), Err(TlsError::NoCertificate(_))));
    let pki = test_pki();
    assert!(matches!(server_config(pki.1.as_bytes(), b"nope", p, p), Err(TlsError::NoPrivateKey(_))));
    let missing = TlsConfig::from_files(Some(std::path::Path::new("/nonexistent/cert.pem")), Some(p), None, false);
    assert!(matches!(missing, Err(TlsError::Io { .. })));
    assert!(TlsConfig::from_files(None, None, None, false).unwrap().client.is_none());
}

// ---- WebSocket (RFC 7118) ----

async fn start_ws(config: TransportConfig) -> (Transports, Arc<Collect>, SocketAddr, SocketAddr) {
    let sink = Arc::new(Collect::default());
    let specs: Vec<ListenSpec> = vec!["ws:127.0.0.1:0".parse().unwrap(), "wss:127.0.0.1:0".parse().unwrap()];
    let t = Transports::bind(&specs, config, sink.clone()).await.unwrap();
    let (ws, wss) = (t.local_addrs()[0].1, t.local_addrs()[1].1);
    (t, sink, ws, wss)
}

/// A raw HTTP upgrade request offering `protocols` (none: no Sec-WebSocket-Protocol header).
fn upgrade_request(protocols: Option<&str>) -> String {
    let offer = protocols.map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n")).unwrap_or_default();
    format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}\r\n"
    )
}

async fn read_http_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn ws_and_wss_round_trip_in_and_out() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let pki = test_pki();
    let config = || TransportConfig { tls: tls_config(&pki), ..Default::default() };
    let (t, sink, ws_addr, wss_addr) = start_ws(config()).await;
    assert_eq!(t.local_addrs().iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![Protocol::Ws, Protocol::Wss]);

    // Incoming, from a plain WebSocket client (tungstenite's, as a browser would): one SIP
    // message per WebSocket message, the answer on the same connection as a text frame.
    let mut request = format!("ws://{ws_addr}/").into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", "sip".parse().unwrap());
    let (mut client, response) = tokio_tungstenite::client_async(request, TcpStream::connect(ws_addr).await.unwrap()).await.unwrap();
    assert_eq!(response.headers().get("sec-websocket-protocol").unwrap(), "sip");
    client.send(WsMessage::text(OPTIONS)).await.unwrap();
    client.send(WsMessage::binary(OPTIONS.replace("c1", "c2").into_bytes())).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 2).await;
    let flow = sink.messages.lock()[1].1;
    assert_eq!((flow.transport, flow.listener), (Transport::Ws, 0));
    assert_eq!(sink.messages.lock()[1].0.call_id(), "c2");
    t.send(flow, Bytes::from_static(b"SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n")).unwrap();
    match tokio::time::timeout(Duration::from_secs(2), client.next()).await.unwrap().unwrap().unwrap() {
        WsMessage::Text(text) => assert!(text.as_str().starts_with("SIP/2.0 200 OK")),
        other => panic!("expected a text frame, got {other:?}"),
    }

    // Outgoing: another instance sends over WS and over WSS (a connection each, reused).
    let (peer, peer_sink, _, _) = start_ws(config()).await;
    for (transport, remote, call) in [(Transport::Ws, ws_addr, "c3"), (Transport::Wss, wss_addr, "c4"), (Transport::Wss, wss_addr, "c5")] {
        let out = Flow { transport, listener: 0, connection: 0, remote };
        peer.send(out, Bytes::from(OPTIONS.replace("c1", call))).unwrap();
    }
    wait_for(|| sink.messages.lock().len() == 5).await;
    let transports: Vec<_> = sink.messages.lock()[2..].iter().map(|(m, f)| (m.call_id().to_string(), f.transport)).collect();
    assert!(transports.contains(&("c3".into(), Transport::Ws)) && transports.contains(&("c5".into(), Transport::Wss)));
    assert_eq!(peer.open_connections(), 2, "one WS and one WSS connection");
    // The server answers on the connection the request came in on.
    let back = sink.messages.lock().iter().find(|(m, _)| m.call_id() == "c4").unwrap().1;
    t.send(back, Bytes::from(OPTIONS.replace("c1", "c6"))).unwrap();
    wait_for(|| peer_sink.messages.lock().len() == 1).await;
    assert_eq!(peer_sink.messages.lock()[0].1.transport, Transport::Wss);
    assert_eq!(t.stats().ws_upgrade_failed.load(Ordering::Relaxed), 0);
    t.shutdown();
    peer.shutdown();
}

#[tokio::test]
async fn ws_refuses_upgrades_without_sip_and_plain_http() {
    let pki = test_pki();
    let (t, sink, ws_addr, _) = start_ws(TransportConfig { tls: tls_config(&pki), ..Default::default() }).await;
    for offer in [None, Some("chat, superchat")] {
        let mut stream = TcpStream::connect(ws_addr).await.unwrap();
        stream.write_all(upgrade_request(offer).as_bytes()).await.unwrap();
        let head = read_http_head(&mut stream).await;
        assert!(head.starts_with("HTTP/1.1 400"), "{offer:?}: {head}");
    }
    // A plain HTTP request, and SIP sent without any upgrade, are refused too.
    for text in ["GET / HTTP/1.1\r\nHost: x\r\n\r\n", OPTIONS] {
        let mut stream = TcpStream::connect(ws_addr).await.unwrap();
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut buf = [0u8; 256];
        let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await.unwrap();
    }
    // An upgrade offering sip among others is accepted.
    let mut stream = TcpStream::connect(ws_addr).await.unwrap();
    stream.write_all(upgrade_request(Some("chat, sip")).as_bytes()).await.unwrap();
    let head = read_http_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 101") && head.to_ascii_lowercase().contains("sec-websocket-protocol: sip"), "{head}");
    wait_for(|| t.stats().ws_upgrade_failed.load(Ordering::Relaxed) == 4).await;
    assert!(sink.messages.lock().is_empty());
    t.shutdown();
}

#[tokio::test]
async fn ws_oversized_message_stalled_upgrade_and_idle_connection_are_closed() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let config = TransportConfig {
        max_message_bytes: 4096,
        tcp_idle_timeout: Duration::from_millis(400),
        tls_handshake_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let sink = Arc::new(Collect::default());
    let t = Transports::bind(&["ws:127.0.0.1:0".parse().unwrap()], config, sink.clone()).await.unwrap();
    let addr = t.local_addrs()[0].1;
    let connect = || async {
        let mut request = format!("ws://{addr}/").into_client_request().unwrap();
        request.headers_mut().insert("sec-websocket-protocol", "sip".parse().unwrap());
        tokio_tungstenite::client_async(request, TcpStream::connect(addr).await.unwrap()).await.unwrap().0
    };
    // A message above max_message_bytes closes its connection; nothing reaches the sink.
    let mut big = connect().await;
    let huge = format!("{OPTIONS}{}", "x".repeat(10_000));
    let _ = big.send(WsMessage::text(huge)).await;
    wait_for(|| t.stats().ws_oversize_closed.load(Ordering::Relaxed) == 1).await;
    // An upgrade that never completes is dropped after the handshake timeout.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    wait_for(|| t.stats().ws_upgrade_failed.load(Ordering::Relaxed) == 1).await;
    // A connection that upgraded but stays silent is closed after the idle timeout.
    let _idle = connect().await;
    wait_for(|| t.stats().tcp_idle_closed.load(Ordering::Relaxed) >= 1).await;
    wait_for(|| t.open_connections() == 0).await;
    // Meanwhile, a well-behaved client is served.
    let mut good = connect().await;
    good.send(WsMessage::text(OPTIONS)).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    assert!(sink.errors.lock().is_empty());
    t.shutdown();
}

// ---- in-process ----

#[tokio::test]
async fn in_process_hand_over_both_ways_without_sockets() {
    let hub = InProcessHub::new();
    let config = || TransportConfig { in_process: Some(hub.clone()), ..Default::default() };
    let (a_sink, b_sink) = (Arc::new(Collect::default()), Arc::new(Collect::default()));
    let a = Transports::bind(&["inproc:127.0.0.1:7001".parse().unwrap()], config(), a_sink.clone()).await.unwrap();
    let b = Transports::bind(&["udp:127.0.0.1:0".parse().unwrap(), "inproc:127.0.0.1:7002".parse().unwrap()], config(), b_sink.clone())
        .await
        .unwrap();
    assert_eq!(b.local_addrs()[1], (Protocol::InProc, "127.0.0.1:7002".parse().unwrap()));
    // The name is taken while b lives.
    let taken = Transports::bind(&["inproc:127.0.0.1:7002".parse().unwrap()], config(), Arc::new(Collect::default())).await;
    assert_eq!(taken.err().map(|e| e.kind()), Some(std::io::ErrorKind::AddrInUse));

    // a → b: delivered at once (on the sending thread), the very same buffer.
    let payload = Bytes::from(OPTIONS);
    let to_b = Flow { transport: Transport::InProc, listener: 0, connection: 0, remote: "127.0.0.1:7002".parse().unwrap() };
    a.send(to_b, payload.clone()).unwrap();
    let (msg, flow) = b_sink.messages.lock()[0].clone();
    assert_eq!(msg.wire_bytes().as_ptr(), payload.as_ptr(), "handed over, not copied");
    assert_eq!((flow.transport, flow.listener, flow.remote), (Transport::InProc, 1, "127.0.0.1:7001".parse().unwrap()));
    // b answers on the flow it received.
    b.send(flow, Bytes::from_static(b"SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n")).unwrap();
    assert_eq!(a_sink.messages.lock()[0].0.status(), Some(200));
    // Garbage is reported as a parse error, like on any transport.
    a.send(to_b, Bytes::from_static(b"\x00\x01 not sip")).unwrap();
    assert_eq!(b_sink.errors.lock().len(), 1);

    // No such endpoint, or one that shut down: an error, not a panic.
    let nowhere = Flow { remote: "127.0.0.1:7999".parse().unwrap(), ..to_b };
    assert_eq!(a.send(nowhere, payload.clone()), Err(SendError::NoPeer));
    b.shutdown();
    assert_eq!(a.send(to_b, payload.clone()), Err(SendError::NoPeer));
    assert_eq!(hub.endpoints(), vec!["127.0.0.1:7001".parse().unwrap()]);
    // A listener without a hub is a configuration error.
    let err = Transports::bind(&["inproc:127.0.0.1:7003".parse().unwrap()], TransportConfig::default(), a_sink.clone()).await.err();
    assert_eq!(err.map(|e| e.kind()), Some(std::io::ErrorKind::InvalidInput));
    a.shutdown();
}

#[tokio::test]
async fn udp_first_datagrams_of_a_fresh_listener_are_sent() {
    // tokio's try_send_to refused until the reactor had seen the socket writable: the first
    // datagram of a new listener was dropped about a third of the time.
    let receiver = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: receiver.local_addr().unwrap() };
    for round in 0..20 {
        let (t, _sink) = start(TransportConfig::default()).await;
        t.send(to, Bytes::from(format!("ping {round}"))).unwrap();
        let mut buf = [0u8; 32];
        let (n, _) = tokio::time::timeout(Duration::from_secs(2), receiver.recv_from(&mut buf)).await.expect("datagram lost").unwrap();
        assert_eq!(&buf[..n], format!("ping {round}").as_bytes());
        assert_eq!(t.stats().udp_send_dropped.load(Ordering::Relaxed), 0);
        t.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_direct_writes_keep_order_under_backpressure_and_bound_the_queue() {
    let (t, _sink, mut client, flow) = tcp_client(TransportConfig { tcp_write_queue: 64, ..Default::default() }).await;
    // The client does not read yet: the kernel buffers fill, later sends are queued, and
    // beyond the queue limit sending fails instead of growing without bound.
    let chunk = 60_000;
    let (mut sent, mut refused) = (0usize, 0usize);
    for i in 0..400u32 {
        let mut payload = vec![b'a' + (i % 26) as u8; chunk];
        payload[..4].copy_from_slice(&i.to_be_bytes());
        match t.send(flow, Bytes::from(payload)) {
            Ok(()) if refused == 0 => sent += 1,
            Ok(()) => panic!("message {i} accepted after the queue was full"),
            Err(SendError::QueueFull) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(refused > 0, "400 x 60 kB never filled a 64-message queue");
    assert_eq!(t.stats().tcp_queue_full.load(Ordering::Relaxed), refused as u64);
    // Everything accepted arrives, whole and in order.
    let mut buf = vec![0u8; chunk];
    for i in 0..sent as u32 {
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]), i, "message order");
        assert!(buf[4..].iter().all(|&b| b == b'a' + (i % 26) as u8), "message {i} intact");
    }
    // Once drained, direct sends work again.
    t.send(flow, Bytes::from_static(b"pong")).unwrap();
    let mut pong = [0u8; 4];
    client.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    t.shutdown();
}

/// Held stream sends are written only on release, all together and in order, also when a
/// direct send to the same connection comes between; the write queue's limit counts them.
#[tokio::test]
async fn held_sends_leave_on_release_in_order_and_count_against_the_queue() {
    let (t, _sink, mut client, flow) = tcp_client(TransportConfig { tcp_write_queue: 8, ..Default::default() }).await;
    let mut held = HeldSends::default();
    for i in 0..5u8 {
        t.send_held(flow, Bytes::from(vec![b'0' + i; 3]), &mut held).unwrap();
    }
    assert_eq!(held.messages(), 5);
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await;
    assert!(early.is_err(), "held messages were written before the release: {early:?}");
    t.release(&mut held, |f| panic!("{f:?} reported failed"));
    assert!(held.is_empty() && held.messages() == 0);
    let mut got = vec![0u8; 15];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"000111222333444");
    // A direct send writes what was held before it, first.
    t.send_held(flow, Bytes::from_static(b"held"), &mut held).unwrap();
    t.send(flow, Bytes::from_static(b"sent")).unwrap();
    let mut got = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"heldsent");
    t.release(&mut held, |f| panic!("{f:?} reported failed"));
    // Held messages count against the write queue's limit (8).
    let refused = (0..10).filter(|_| t.send_held(flow, Bytes::from_static(b"x"), &mut held).is_err()).count();
    assert_eq!(refused, 2);
    t.release(&mut held, |f| panic!("{f:?} reported failed"));
    let mut got = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"xxxxxxxx");
    // UDP is not held: it goes at once.
    let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let udp = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: peer.local_addr().unwrap() };
    t.send_held(udp, Bytes::from_static(b"now"), &mut held).unwrap();
    assert!(held.is_empty());
    let n = tokio::time::timeout(Duration::from_secs(5), peer.recv(&mut buf)).await.unwrap().unwrap();
    assert_eq!(&buf[..n], b"now");
    t.shutdown();
}

/// A WebSocket client over TLS offering the `sip` subprotocol.
async fn wss_client(ca: &str, server: SocketAddr) -> tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("wss://{server}/").into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", "sip".parse().unwrap());
    tokio_tungstenite::client_async(request, tls_client(ca, server).await).await.unwrap().0
}

/// Held sends over TLS (encrypted when held, written on release) and WSS (one WebSocket
/// message each) arrive whole and in order after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_sends_over_tls_and_wss_arrive_in_order() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let pki = test_pki();
    let config = || TransportConfig { tls: tls_config(&pki), ..Default::default() };
    let (t, sink, server) = start_tls(config()).await;
    let mut client = tls_client(&pki.0, server).await;
    client.write_all(OPTIONS.as_bytes()).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let flow = sink.messages.lock()[0].1;
    let mut held = HeldSends::default();
    for part in ["one", "two", "six"] {
        t.send_held(flow, Bytes::from_static(part.as_bytes()), &mut held).unwrap();
    }
    t.release(&mut held, |f| panic!("{f:?} reported failed"));
    let mut got = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"onetwosix");
    t.shutdown();

    let (t, sink, _, wss_addr) = start_ws(config()).await;
    let mut client = wss_client(&pki.0, wss_addr).await;
    client.send(WsMessage::text(OPTIONS)).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let flow = sink.messages.lock()[0].1;
    for part in ["one", "two", "six"] {
        t.send_held(flow, Bytes::from_static(part.as_bytes()), &mut held).unwrap();
    }
    t.release(&mut held, |f| panic!("{f:?} reported failed"));
    for part in ["one", "two", "six"] {
        match tokio::time::timeout(Duration::from_secs(5), client.next()).await.unwrap().unwrap().unwrap() {
            WsMessage::Text(text) => assert_eq!(text.as_str(), part),
            other => panic!("expected {part}, got {other:?}"),
        }
    }
    t.shutdown();
}

/// A connection that fails while messages are held on it is reported by the release.
#[tokio::test]
async fn held_sends_on_a_failed_connection_are_reported_on_release() {
    let (t, _sink, client, flow) = tcp_client(TransportConfig::default()).await;
    let mut held = HeldSends::default();
    t.send_held(flow, Bytes::from_static(b"lost"), &mut held).unwrap();
    drop(client);
    // Once the server has read the close, holding more is refused.
    let mut probe = HeldSends::default();
    wait_for(|| t.send_held(flow, Bytes::from_static(b"probe"), &mut probe).is_err()).await;
    t.release(&mut probe, |_| {});
    let mut failed = Vec::new();
    t.release(&mut held, |f| failed.push(f));
    assert_eq!(failed, vec![flow]);
    t.shutdown();
}

/// Shutting an endpoint down closes its connections, outgoing (written directly) and accepted
/// alike: the peers read end of stream. Before, a direct writer outlived its aborted reader
/// and kept the socket open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_outgoing_and_accepted_connections() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer_addr = listener.local_addr().unwrap();
    let (t, sink) = start(TransportConfig::default()).await;
    let flow = Flow { transport: Transport::Tcp, listener: 1, connection: 0, remote: peer_addr };
    t.send(flow, Bytes::from_static(OPTIONS.as_bytes())).unwrap();
    let (mut outgoing, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept()).await.unwrap().unwrap();
    let mut buf = vec![0u8; OPTIONS.len()];
    outgoing.read_exact(&mut buf).await.unwrap();
    let tcp_addr = t.local_addrs().iter().find(|(p, _)| *p == Protocol::Tcp).unwrap().1;
    let mut accepted = TcpStream::connect(tcp_addr).await.unwrap();
    accepted.write_all(OPTIONS.as_bytes()).await.unwrap();
    // Wait until the server has read our OPTIONS: closing a socket with unread data makes the
    // kernel answer with RST instead of FIN, and the read below would see a reset.
    wait_for(|| t.open_connections() == 2 && sink.messages.lock().len() == 1).await;
    t.shutdown();
    for stream in [&mut outgoing, &mut accepted] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0))), "connection left open after shutdown: {read:?}");
    }
}

/// Senders encrypt and frame on their own thread over TLS and WSS too: with a peer that does
/// not read, what the socket does not take waits in order, up to the write queue's limit, and
/// beyond it sending fails; once the peer reads, everything accepted arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_wss_direct_writes_keep_order_under_backpressure_and_bound_the_queue() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let pki = test_pki();
    let config = || TransportConfig { tls: tls_config(&pki), tcp_write_queue: 64, ..Default::default() };
    let chunk = 60_000;
    let payload = |i: u32| {
        let mut body = vec![b'a' + (i % 26) as u8; chunk];
        body[..4].copy_from_slice(&i.to_be_bytes());
        Bytes::from(body)
    };
    let check = |i: u32, got: &[u8]| {
        assert_eq!(got.len(), chunk, "message {i} whole");
        assert_eq!(u32::from_be_bytes([got[0], got[1], got[2], got[3]]), i, "message order");
        assert!(got[4..].iter().all(|&b| b == b'a' + (i % 26) as u8), "message {i} intact");
    };
    // Sends until refused; returns how many were accepted.
    let flood = |t: &Transports, flow: Flow| {
        let (mut sent, mut refused) = (0u32, 0u32);
        for i in 0..400u32 {
            match t.send(flow, payload(i)) {
                Ok(()) if refused == 0 => sent += 1,
                Ok(()) => panic!("message {i} accepted after the queue was full"),
                Err(SendError::QueueFull) => refused += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(refused > 0, "400 x 60 kB never filled a 64-message queue");
        sent
    };

    // TLS.
    let (t, sink, server) = start_tls(config()).await;
    let mut client = tls_client(&pki.0, server).await;
    client.write_all(OPTIONS.as_bytes()).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let sent = flood(&t, sink.messages.lock()[0].1);
    let mut buf = vec![0u8; chunk];
    for i in 0..sent {
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut buf)).await.unwrap().unwrap();
        check(i, &buf);
    }
    t.send(sink.messages.lock()[0].1, Bytes::from_static(b"pong")).unwrap();
    let mut pong = [0u8; 4];
    client.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    t.shutdown();

    // WSS: one WebSocket message per SIP message.
    let (t, sink, _, wss_addr) = start_ws(config()).await;
    let mut client = wss_client(&pki.0, wss_addr).await;
    client.send(WsMessage::text(OPTIONS)).await.unwrap();
    wait_for(|| sink.messages.lock().len() == 1).await;
    let sent = flood(&t, sink.messages.lock()[0].1);
    for i in 0..sent {
        match tokio::time::timeout(Duration::from_secs(10), client.next()).await.unwrap().unwrap().unwrap() {
            WsMessage::Text(text) => check(i, text.as_bytes()),
            WsMessage::Binary(bytes) => check(i, &bytes),
            other => panic!("expected message {i}, got {other:?}"),
        }
    }
    t.shutdown();
}

/// The next datagram waiting on `receiver`, waiting up to a second for one to arrive.
async fn next_datagram(receiver: &mut UdpReceiver, timestamped: bool) -> Received {
    for _ in 0..100 {
        match receiver.try_recv(timestamped) {
            Received::Empty => tokio::time::sleep(Duration::from_millis(10)).await,
            other => return other,
        }
    }
    Received::Empty
}

/// With `udp_readers` = 0 no task reads UDP: the owner reads through the receivers, which
/// report parse errors to the sink as the reader tasks do.
#[tokio::test]
async fn udp_read_by_the_owner() {
    let (t, sink) = start(TransportConfig { udp_readers: 0, ..Default::default() }).await;
    let server = t.local_addrs()[0].1;
    let mut receivers = t.take_udp_receivers();
    assert_eq!(receivers.len(), 1, "one receiver per UDP listener");
    assert!(t.take_udp_receivers().is_empty(), "taken once");
    let receiver = &mut receivers[0];
    assert!(matches!(receiver.try_recv(false), Received::Empty));
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let before = std::time::SystemTime::now();
    client.send_to(OPTIONS.as_bytes(), server).await.unwrap();
    client.send_to(OPTIONS.as_bytes(), server).await.unwrap();
    client.send_to(b"\x00\x01garbage", server).await.unwrap();
    std::future::poll_fn(|cx| receiver.poll_ready(cx)).await;
    let Received::Message(msg, flow, arrived) = receiver.try_recv(true) else { panic!("a message") };
    assert_eq!((msg.call_id(), flow.remote, flow.listener), ("c1", client.local_addr().unwrap(), 0));
    let arrived = arrived.expect("an arrival time when asked for");
    assert!(arrived >= before - Duration::from_millis(1) && arrived <= std::time::SystemTime::now(), "{arrived:?}");
    let next = next_datagram(receiver, false).await;
    assert!(matches!(next, Received::Message(_, _, None)), "no arrival time unless asked for");
    let other = next_datagram(receiver, true).await;
    assert!(matches!(other, Received::Other));
    assert_eq!(sink.errors.lock().len(), 1, "the garbage was reported to the sink");
    assert!(sink.messages.lock().is_empty(), "messages are the owner's, not the sink's");
    assert!(matches!(receiver.try_recv(true), Received::Empty));
    t.shutdown();
}

/// A receiver switched to blocking reads: a datagram is read in one call, the read waits no
/// longer than its timeout, the doorbell wakes a reader blocked without a datagram, the
/// doorbell's own datagram is not a message, and the socket still sends (without blocking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_blocking_reads_wake_on_the_doorbell() {
    let (t, sink) = start(TransportConfig { udp_readers: 0, ..Default::default() }).await;
    let server = t.local_addrs()[0].1;
    let mut receiver = t.take_udp_receivers().pop().unwrap().into_blocking().unwrap();
    let bell = receiver.doorbell();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let client_addr = client.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        // Nothing waiting: the read returns empty after its timeout, not before.
        let started = std::time::Instant::now();
        assert!(matches!(receiver.recv(false, Duration::from_millis(50)), Received::Empty));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(45), "returned after {waited:?}");
        // A datagram: a message, with its arrival time when asked for.
        let Received::Message(msg, flow, arrived) = receiver.recv(true, Duration::from_secs(5)) else { panic!("a message") };
        assert_eq!((msg.call_id(), flow.remote, flow.listener), ("c1", client_addr, 0));
        assert!(arrived.is_some(), "an arrival time when asked for");
        // Asleep with a long timeout: the doorbell wakes it at once, as an empty read.
        receiver.doorbell().fall_asleep();
        let started = std::time::Instant::now();
        assert!(matches!(receiver.recv(false, Duration::from_secs(10)), Received::Empty));
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    client.send_to(OPTIONS.as_bytes(), server).unwrap();
    // Ring until the reader has fallen asleep and been woken (a ring while it is awake is a
    // no-op, as it must be).
    while !reader.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
        bell.ring();
    }
    let woken_after = reader.join().unwrap();
    assert!(woken_after < Duration::from_secs(5), "woken after {woken_after:?}");
    assert!(sink.messages.lock().is_empty() && sink.errors.lock().is_empty(), "the doorbell is no message nor error");
    let flow = Flow { transport: Transport::Udp, listener: 0, connection: 0, remote: client_addr };
    t.send(flow, Bytes::from_static(b"SIP/2.0 200 OK\r\n\r\n")).unwrap();
    let mut buf = [0u8; 100];
    let (n, from) = client.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"SIP/2.0 200 OK\r\n\r\n"[..], server));
    t.shutdown();
}
