//! Overload where executors read UDP themselves (`transport.udp_readers` = 0): a new call (an
//! INVITE outside a dialog) that waited in the socket's buffer longer than
//! `container.overload_delay` is refused with 503 and Retry-After; calls that did not wait
//! that long are served, and other requests are never shed.
//!
//! The burst is sent from the test's own thread on a current-thread runtime, so the executor
//! task cannot run until all of it is waiting in the socket: it then reads a first batch
//! without arrival times, finds more waiting, and reads the rest with them.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule};
use tandem_services::{Uas, UasConfig};
use tandem_sip::{parse_datagram, ParseLimits};
use tandem_transport::TransportConfig;

const BURST: usize = 300;

async fn burst(method: &str, overload_delay: Duration) -> HashMap<u16, usize> {
    let settings = ContainerSettings {
        container: ContainerConfig { executors: 1, overload_delay, ..Default::default() },
        routes: vec![RouteRule::catch_all("uas")],
    };
    let uas = Arc::new(Uas::new(&UasConfig::default()));
    let transport = TransportConfig { udp_readers: 0, ..Default::default() };
    let container = Container::start(settings, vec![("uas".into(), uas)], &["udp:127.0.0.1:0".parse().unwrap()], transport).await.unwrap();
    let server = container.local_addrs()[0].1;
    // The kernel turns packet timestamping on by deferred work once the first socket asks for
    // it: datagrams that arrive before then carry no arrival time and are stamped when read (so
    // never late). Give it time to run before the burst.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Room for every answer: they come while this task sleeps between reads.
    socket2::SockRef::from(&client).set_recv_buffer_size(4 << 20).unwrap();
    let local = client.local_addr().unwrap();
    for i in 0..BURST {
        let text = format!(
            "{method} sip:service@{server} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-burst-{i}\r\nMax-Forwards: 70\r\n\
             From: <sip:load@{local}>;tag=b{i}\r\nTo: <sip:service@{server}>\r\nCall-ID: burst-{i}\r\nCSeq: 1 {method}\r\n\
             Contact: <sip:load@{local}>\r\nContent-Length: 0\r\n\r\n"
        );
        client.send_to(text.as_bytes(), server).unwrap();
    }
    // Let the executor run, then collect one final answer per request.
    client.set_nonblocking(true).unwrap();
    let mut statuses = HashMap::new();
    let mut answered = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = vec![0u8; 65536];
    while answered.len() < BURST && Instant::now() < deadline {
        match client.recv_from(&mut buf) {
            Ok((len, _)) => {
                let msg = parse_datagram(bytes::Bytes::copy_from_slice(&buf[..len]), &ParseLimits::default()).unwrap();
                let status = msg.status().unwrap();
                if status >= 200 && answered.insert(msg.call_id().to_string()) {
                    if status == 503 {
                        assert!(msg.header_by_name("Retry-After").is_some(), "a 503 for overload says when to retry");
                    }
                    *statuses.entry(status).or_insert(0) += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(e) => panic!("receive: {e}"),
        }
    }
    assert_eq!(answered.len(), BURST, "every request of the burst got one final answer: {statuses:?}");
    container.shutdown().await;
    statuses
}

#[tokio::test(flavor = "current_thread")]
async fn new_calls_that_waited_too_long_are_refused_with_503() {
    let statuses = burst("INVITE", Duration::ZERO).await;
    assert!(statuses.get(&503).copied().unwrap_or(0) > 0, "the late part of the burst was refused: {statuses:?}");
    assert!(statuses.get(&200).copied().unwrap_or(0) > 0, "the first batch was served: {statuses:?}");
    assert_eq!(statuses.len(), 2, "only 200s and 503s: {statuses:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_calls_within_the_overload_delay_is_served() {
    let statuses = burst("INVITE", Duration::from_secs(30)).await;
    assert_eq!(statuses.get(&200).copied(), Some(BURST), "nothing refused: {statuses:?}");
}

/// Out-of-dialog requests other than INVITE may continue work in progress (the dating
/// service's MESSAGEs): they are handled however late.
#[tokio::test(flavor = "current_thread")]
async fn other_requests_are_not_shed() {
    let statuses = burst("OPTIONS", Duration::ZERO).await;
    assert_eq!(statuses.get(&200).copied(), Some(BURST), "nothing refused: {statuses:?}");
}
