use super::*;
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
    assert!("udp:localhost".parse::<ListenSpec>().is_err());
}
