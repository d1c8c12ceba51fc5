//! The registrar's RFC 3261 §10.3 behaviour, over UDP against a real container.

mod common;

use common::{id, Peer, World};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule, Service};
use tandem_services::{Location, Proxy, ProxyConfig, Registrar, RegistrarConfig};
use tandem_sip::{HeaderName, Message, Method, Transport};

struct Setup {
    container: Container,
    server: SocketAddr,
    location: Arc<Location>,
    bob: Peer,
}

async fn setup(world: &World) -> Setup {
    let location = Location::new();
    let config = RegistrarConfig { min_expires: Duration::from_secs(60), max_expires: Duration::from_secs(3600), ..Default::default() };
    let registrar: Arc<dyn Service> = Arc::new(Registrar::new(&config, location.clone()));
    let proxy: Arc<dyn Service> = Arc::new(Proxy::new(&ProxyConfig::default()).unwrap().with_location(location.clone()));
    let settings = ContainerSettings {
        container: ContainerConfig { executors: 1, ..Default::default() },
        routes: vec![RouteRule { method: Some("REGISTER".into()), ..RouteRule::catch_all("registrar") }, RouteRule::catch_all("proxy")],
    };
    let services = vec![("registrar".to_string(), registrar), ("proxy".to_string(), proxy)];
    let container = Container::start(settings, services, &[world.spec()], world.config()).await.unwrap();
    let server = container.local_addrs()[0].1;
    Setup { container, server, location, bob: world.peer("bob").await }
}

/// REGISTER with the given extra headers (Contact lines included) in one Call-ID; the answer.
async fn register(peer: &mut Peer, server: SocketAddr, call_id: &str, cseq: u32, headers: &[&str]) -> Message {
    let aor = format!("<sip:{}@{}>", peer.user, server.ip());
    let from = format!("{aor};tag=r{}", id());
    let extra: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let mut text = peer.request("REGISTER", &format!("sip:{}", server.ip()), &from, &aor, call_id, cseq, &extra, "");
    // `request` adds the peer's own Contact; these tests list theirs explicitly (none: a query).
    text = text.replacen(&format!("Contact: {}\r\n", peer.contact()), "", 1);
    peer.send(peer.flow_to(server), text);
    peer.final_response(Method::Register, call_id).await
}

fn contacts(msg: &Message) -> Vec<String> {
    let mut all: Vec<String> = msg.values_of(HeaderName::Contact).map(|(_, v)| v.to_string()).collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_expire_refresh_and_are_removed() {
    let world = World::new(Transport::Udp);
    let Setup { container, server, location, mut bob } = setup(&world).await;
    let call_id = format!("reg-{}", id());

    // Two contacts: one with its own expires parameter, one with the Expires header clamped
    // to max_expires.
    let ok = register(
        &mut bob,
        server,
        &call_id,
        1,
        &["Contact: <sip:bob@127.0.0.1:7001>;expires=120", "Contact: <sip:bob@127.0.0.1:7002>", "Expires: 99999"],
    )
    .await;
    assert_eq!(ok.status(), Some(200));
    assert_eq!(
        contacts(&ok),
        vec!["<sip:bob@127.0.0.1:7001>;expires=120".to_string(), "<sip:bob@127.0.0.1:7002>;expires=3600".to_string()]
    );
    assert_eq!(location.len(), 2);

    // Below min_expires: 423 with Min-Expires, nothing changes.
    let brief = register(&mut bob, server, &call_id, 2, &["Contact: <sip:bob@127.0.0.1:7003>;expires=5"]).await;
    assert_eq!(brief.status(), Some(423));
    assert_eq!(brief.header_by_name("Min-Expires"), Some("60"));
    assert_eq!(location.len(), 2);

    // An older CSeq in the same Call-ID is out of order: refused.
    let stale = register(&mut bob, server, &call_id, 1, &["Contact: <sip:bob@127.0.0.1:7001>;expires=300"]).await;
    assert_eq!(stale.status(), Some(500));

    // A query (no Contact) lists the bindings; expires=0 removes one.
    let query = register(&mut bob, server, &call_id, 3, &[]).await;
    assert_eq!(contacts(&query).len(), 2);
    let removed = register(&mut bob, server, &call_id, 4, &["Contact: <sip:bob@127.0.0.1:7002>;expires=0"]).await;
    assert_eq!(contacts(&removed), vec!["<sip:bob@127.0.0.1:7001>;expires=120".to_string()]);

    // `*` needs Expires: 0, and then removes everything.
    assert_eq!(register(&mut bob, server, &call_id, 5, &["Contact: *"]).await.status(), Some(400));
    assert_eq!(register(&mut bob, server, &call_id, 6, &["Contact: *", "Expires: 0"]).await.status(), Some(200));
    assert!(location.is_empty());

    // Malformed input gets 400, never a crash.
    assert_eq!(register(&mut bob, server, &call_id, 7, &["Contact: <sip:bob@127.0.0.1>;expires=soon"]).await.status(), Some(400));
    assert_eq!(register(&mut bob, server, &call_id, 8, &["Expires: never"]).await.status(), Some(400));
    bob.transports.shutdown();
    container.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistered_user_of_this_server_gets_480() {
    let world = World::new(Transport::Udp);
    let Setup { container, server, mut bob, .. } = setup(&world).await;
    // The Request-URI names this server (its address and port) and nobody registered: 480.
    let call_id = format!("call-{}", id());
    let ruri = format!("sip:carol@{server}");
    let from = format!("<sip:bob@{}>;tag=x{}", bob.local, id());
    let text = bob.request("INVITE", &ruri, &from, &format!("<{ruri}>"), &call_id, 1, &[], common::SDP);
    bob.send(bob.flow_to(server), text);
    let answer = bob.final_response(Method::Invite, &call_id).await;
    assert_eq!(answer.status(), Some(480));
    bob.transports.shutdown();
    container.shutdown().await;
}
