//! Every built-in service, unchanged, on every transport: one suite, parameterized by transport.
//!
//! Each case starts the service in a real container (and, for the proxy and the B2BUA, a `uas`
//! container behind it on the same transport) and plays a SIP user agent against it from a
//! real `Transports` endpoint of that transport: UDP (read by reader tasks, and read by the
//! executors themselves), TCP, TLS, WS, WSS and in-process. The
//! services are built exactly as `tandem run` builds them; only the listen specs differ.
//!
//! Scenarios: `uas` (OPTIONS, then INVITE / 200 with SDP / ACK / BYE / 200), `proxy` in front of
//! a uas (the same call, ACK and BYE along the Record-Route), `b2bua_nt` in front of a uas,
//! and `registrar` + `proxy` (bob REGISTERs, alice calls sip:bob@server, bob answers over the
//! binding — the connection he registered on, for connection-oriented transports).

mod common;

use common::{World, WAIT};
use std::sync::Arc;
use std::time::Duration;
use tandem_container::{Container, ContainerConfig, ContainerSettings, RouteRule, Service};
use tandem_services::{B2bua, B2buaConfig, Location, Proxy, ProxyConfig, Registrar, RegistrarConfig, Uas, UasConfig};
use tandem_sip::Transport;

fn uas() -> Arc<dyn Service> {
    Arc::new(Uas::new(&UasConfig { hold: Duration::from_secs(60), ..Default::default() }))
}

async fn uas_case(world: World) {
    let (container, server) = world.container("uas", uas()).await;
    let mut alice = world.peer("alice").await;
    alice.options(server).await;
    let call = alice.call(server, &format!("sip:service@{server}")).await;
    alice.hang_up(server, &call).await;
    alice.transports.shutdown();
    container.shutdown().await;
}

async fn proxy_case(world: World) {
    let (behind, uas_addr) = world.container("uas", uas()).await;
    let config = ProxyConfig { next_hop: Some(world.hop(uas_addr)), record_route: Some(true) };
    let (container, server) = world.container("proxy", Arc::new(Proxy::new(&config).unwrap())).await;
    let mut alice = world.peer("alice").await;
    let call = alice.call(server, &format!("sip:service@{uas_addr}")).await;
    assert_eq!(call.routes.len(), 1, "the proxy record-routed: {:?}", call.routes);
    alice.hang_up(server, &call).await;
    alice.transports.shutdown();
    container.shutdown().await;
    behind.shutdown().await;
}

async fn b2bua_case(world: World) {
    let (behind, uas_addr) = world.container("uas", uas()).await;
    let config = B2buaConfig { next_hop: Some(world.hop(uas_addr)), ..Default::default() };
    let (container, server) = world.container("b2bua_nt", Arc::new(B2bua::new(&config).unwrap())).await;
    let mut alice = world.peer("alice").await;
    let call = alice.call(server, &format!("sip:service@{server}")).await;
    alice.hang_up(server, &call).await;
    alice.transports.shutdown();
    container.shutdown().await;
    behind.shutdown().await;
}

async fn registrar_case(world: World) {
    let location = Location::new();
    let registrar: Arc<dyn Service> = Arc::new(Registrar::new(&RegistrarConfig::default(), location.clone()));
    let proxy: Arc<dyn Service> = Arc::new(Proxy::new(&ProxyConfig::default()).unwrap().with_location(location.clone()));
    let settings = ContainerSettings {
        container: ContainerConfig { executors: 2, ..Default::default() },
        routes: vec![RouteRule { method: Some("REGISTER".into()), ..RouteRule::catch_all("registrar") }, RouteRule::catch_all("proxy")],
    };
    let services = vec![("registrar".to_string(), registrar), ("proxy".to_string(), proxy)];
    let container = Container::start(settings, services, &[world.spec()], world.config()).await.unwrap();
    let server = container.local_addrs()[0].1;
    let (mut alice, mut bob) = (world.peer("alice").await, world.peer("bob").await);
    bob.register(server).await;
    assert_eq!(location.len(), 1);
    let bob_side = tokio::spawn(async move {
        bob.answer_and_wait_for_bye().await;
        bob
    });
    let call = alice.call(server, &format!("sip:bob@{}", server.ip())).await;
    alice.hang_up(server, &call).await;
    let bob = tokio::time::timeout(WAIT, bob_side).await.expect("bob saw the whole call").unwrap();
    alice.transports.shutdown();
    bob.transports.shutdown();
    container.shutdown().await;
}

macro_rules! on_every_transport {
    ($($module:ident => $world:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn uas() {
                uas_case($world).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn proxy() {
                proxy_case($world).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn b2bua_nt() {
                b2bua_case($world).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn registrar_and_proxy() {
                registrar_case($world).await;
            }
        }
    )*};
}

on_every_transport! {
    udp => World::new(Transport::Udp),
    udp_read_by_executors => World::udp_read_by_executors(),
    tcp => World::new(Transport::Tcp),
    tls => World::new(Transport::Tls),
    ws => World::new(Transport::Ws),
    wss => World::new(Transport::Wss),
    in_process => World::new(Transport::InProc),
}
