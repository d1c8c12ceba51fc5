//! Overload where executors read UDP themselves (`transport.udp_readers` = 0): a new call (an
//! INVITE outside a dialog) that waited in the socket's buffer longer than
//! `container.overload_delay` is refused with 503 and Retry-After; calls that did not wait
//! that long are served, and other requests are never shed.
//!
//! On the runtime (`container.blocking_udp` = false), the burst is sent from the test's own
//! thread on a current-thread runtime, so the executor task cannot run until all of it is
//! waiting in the socket: it then reads a first batch without arrival times, finds more
//! waiting, and reads the rest with them. An executor blocking in its reads runs on a thread
//! of its own: there the service stalls on the burst's first request, as a busy executor
//! would, while the rest of the burst queues behind it.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_container::{Container, ContainerConfig, ContainerSettings, Context, Request, ResponseEvent, RouteRule, Service, SessionId};
use tandem_services::{Uas, UasConfig};
use tandem_sip::{parse_datagram, ParseLimits};
use tandem_transport::TransportConfig;

const BURST: usize = 300;

/// The UAS, whose first request keeps the executor busy for 300 ms.
struct StallsFirst {
    uas: Uas,
    stalled: std::sync::atomic::AtomicBool,
}

impl Service for StallsFirst {
    fn on_request(&self, ctx: &mut Context<'_>, req: &Request<'_>) {
        if !self.stalled.swap(true, std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(300));
        }
        self.uas.on_request(ctx, req)
    }

    fn on_response(&self, ctx: &mut Context<'_>, session: SessionId, response: ResponseEvent<'_>) {
        self.uas.on_response(ctx, session, response)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Reads {
    /// The executor task polls the socket on the runtime.
    Polled,
    /// The executor thread blocks in its reads.
    Blocking,
}

impl Reads {
    fn name(self) -> &'static str {
        match self {
            Reads::Polled => "polled reads",
            Reads::Blocking => "blocking reads",
        }
    }
}

async fn burst(method: &str, overload_delay: Duration, reads: Reads) -> HashMap<u16, usize> {
    let settings = ContainerSettings {
        container: ContainerConfig { executors: 1, overload_delay, blocking_udp: reads == Reads::Blocking, ..Default::default() },
        routes: vec![RouteRule::catch_all("uas")],
    };
    let uas: Arc<dyn Service> = match reads {
        Reads::Polled => Arc::new(Uas::new(&UasConfig::default())),
        Reads::Blocking => Arc::new(StallsFirst { uas: Uas::new(&UasConfig::default()), stalled: Default::default() }),
    };
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
    // Polled: the first batch is read without arrival times, the rest all waited. Blocking:
    // the first request stalls the executor for 300 ms, longer than the delay.
    for (reads, delay) in [(Reads::Polled, Duration::ZERO), (Reads::Blocking, Duration::from_millis(100))] {
        let statuses = burst("INVITE", delay, reads).await;
        assert!(statuses.get(&503).copied().unwrap_or(0) > 0, "the late part of the burst was refused ({}): {statuses:?}", reads.name());
        assert!(statuses.get(&200).copied().unwrap_or(0) > 0, "the first batch was served: {statuses:?}");
        assert_eq!(statuses.len(), 2, "only 200s and 503s: {statuses:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_calls_within_the_overload_delay_is_served() {
    for reads in [Reads::Polled, Reads::Blocking] {
        let statuses = burst("INVITE", Duration::from_secs(30), reads).await;
        assert_eq!(statuses.get(&200).copied(), Some(BURST), "nothing refused: {statuses:?}");
    }
}

/// Out-of-dialog requests other than INVITE may continue work in progress (the dating
/// service's MESSAGEs): they are handled however late.
#[tokio::test(flavor = "current_thread")]
async fn other_requests_are_not_shed() {
    for reads in [Reads::Polled, Reads::Blocking] {
        let statuses = burst("OPTIONS", Duration::ZERO, reads).await;
        assert_eq!(statuses.get(&200).copied(), Some(BURST), "nothing refused: {statuses:?}");
    }
}
