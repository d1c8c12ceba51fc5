//! Server-side matching (RFC 3261 §17.2.3), CANCEL, limits, transport errors, memory.

use super::support::*;
use crate::{ClientTxId, Config, Event, Received, ServerTxId};
use tandem_sip::Method;

#[test]
fn cancel_reports_the_invite_it_matches() {
    let mut h = Harness::new();
    let flow = udp(5060);
    let invite = Req::default();
    let itx = h.new_server_tx(0, invite.msg(), flow);
    let cancel = Req { method: "CANCEL", ..invite };
    let ctx = match h.layer.on_message(h.at(100), cancel.msg(), flow) {
        Received::Request { tx: Some(ctx), cancels, .. } => {
            assert_eq!(cancels, Some(itx));
            ctx
        }
        other => panic!("{other:?}"),
    };
    assert_ne!(ctx, itx);
    assert_eq!(h.layer.counts(), (2, 0));
    // The CANCEL's retransmission is absorbed; its own transaction is non-INVITE.
    assert!(is_absorbed(&h.layer.on_message(h.at(200), cancel.msg(), flow)));
    h.layer.respond(h.at(300), ctx, 200, response_bytes(&cancel.msg(), 200, Some("x")), false);
    assert!(is_absorbed(&h.layer.on_message(h.at(400), cancel.msg(), flow)));
    let sent = h.transmits();
    assert_eq!(sent.len(), 2, "the 200 and its re-send");
    assert_eq!(sent[0].payload, sent[1].payload);

    // A CANCEL with another branch, or another sent-by, matches no INVITE.
    for other in [
        Req { branch: Some("z9hG4bKother"), ..cancel },
        Req { sent_by: "pc34.atlanta.example.com:5060", ..cancel },
        Req { sent_by: "pc33.atlanta.example.com", ..cancel },
    ] {
        match h.layer.on_message(h.at(500), other.msg(), flow) {
            Received::Request { tx: Some(_), cancels: None, .. } => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn rfc2543_requests_match_on_call_id_cseq_from_tag_and_sent_by() {
    for branch in [None, Some("z9hG4bK"), Some("1234abcd")] {
        let mut h = Harness::new();
        let flow = udp(5060);
        let invite = Req { branch, ..Req::default() };
        let tx = h.new_server_tx(0, invite.msg(), flow);
        // Its retransmission is matched.
        assert!(is_absorbed(&h.layer.on_message(h.at(500), invite.msg(), flow)));
        assert_eq!(h.layer.counts(), (1, 0), "branch {branch:?}");
        // A CANCEL of it (same Call-ID, CSeq number, From tag, sent-by) finds it.
        let cancel = Req { method: "CANCEL", ..invite };
        match h.layer.on_message(h.at(600), cancel.msg(), flow) {
            Received::Request { tx: Some(_), cancels: Some(c), .. } => assert_eq!(c, tx),
            other => panic!("{other:?}"),
        }
        // Different CSeq number, From tag, Call-ID or sent-by: new transactions.
        for other in [
            Req { cseq: 2, ..invite },
            Req { from_tag: "other", ..invite },
            Req { call_id: "other-call", ..invite },
            Req { sent_by: "10.0.0.1:5060", ..invite },
        ] {
            h.new_server_tx(700, other.msg(), flow);
        }
        assert_eq!(h.layer.counts(), (6, 0));
        // The ACK of a non-2xx final response (no branch either) is matched and absorbed.
        h.layer.respond(h.at(800), tx, 486, response_bytes(&invite.msg(), 486, Some("t")), false);
        h.transmits();
        let ack = Req { method: "ACK", to_tag: Some("t"), ..invite };
        assert!(is_absorbed(&h.layer.on_message(h.at(900), ack.msg(), flow)));
        assert_eq!(h.layer.next_timeout(), Some(h.at(900 + 5000)), "Timer I running");
    }
}

#[test]
fn rfc2543_ack_of_a_2xx_is_passed_up() {
    // RFC 6026 §7.1: an ACK matching an Accepted transaction goes to the TU.
    let mut h = Harness::new();
    let flow = udp(5060);
    let invite = Req { branch: None, ..Req::default() };
    let tx = h.new_server_tx(0, invite.msg(), flow);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&invite.msg(), 200, Some("t")), true);
    let ack = Req { method: "ACK", to_tag: Some("t"), ..invite };
    assert!(matches!(h.layer.on_message(h.at(100), ack.msg(), flow), Received::Request { tx: None, .. }));
}

#[test]
fn rfc3261_matching_uses_branch_sent_by_and_method() {
    let mut h = Harness::new();
    let flow = udp(5060);
    let invite = Req::default();
    let tx = h.new_server_tx(0, invite.msg(), flow);
    // The branch and host compare case-insensitively.
    let shouted = Req { branch: Some("Z9HG4BK776ASDHDS"), sent_by: "PC33.Atlanta.Example.COM:5060", ..invite };
    assert!(is_absorbed(&h.layer.on_message(h.at(1), shouted.msg(), flow)));
    // The same branch from another sent-by, or with another method, is another transaction.
    let t2 = h.new_server_tx(2, Req { sent_by: "pc33.atlanta.example.com:5070", ..invite }.msg(), flow);
    let t3 = h.new_server_tx(3, Req { method: "INFO", ..invite }.msg(), flow);
    assert!(tx != t2 && t2 != t3 && tx != t3);
    // An ACK with its own branch (the ACK of a 2xx) matches nothing.
    let ack = Req { method: "ACK", branch: Some("z9hG4bKack"), ..invite };
    assert!(matches!(h.layer.on_message(h.at(4), ack.msg(), flow), Received::Request { tx: None, cancels: None, .. }));
    assert_eq!(h.layer.counts(), (3, 0));
}

#[test]
fn max_transactions_refuses_new_server_transactions() {
    let mut h = Harness::with_config(Config { max_transactions: 3, ..Config::default() });
    let flow = udp(5060);
    let a = Req { branch: Some("z9hG4bKa"), ..Req::default() };
    let b = Req { branch: Some("z9hG4bKb"), method: "OPTIONS", ..Req::default() };
    let c = Req { branch: Some("z9hG4bKc"), ..Req::default() };
    let ta = h.new_server_tx(0, a.msg(), flow);
    h.new_server_tx(0, b.msg(), flow);
    h.layer.send_request(h.at(0), Method::Options, "z9hG4bKout", c.bytes(), tcp(1, 1));
    assert_eq!(h.layer.counts(), (2, 1));
    match h.layer.on_message(h.at(1), c.msg(), flow) {
        Received::Overloaded { msg, flow: f } => {
            assert_eq!(msg.branch(), Some("z9hG4bKc"));
            assert_eq!(f, flow);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.layer.counts(), (2, 1), "nothing stored");
    assert_eq!(h.layer.server_index.len(), 2);
    // Retransmissions and ACKs still get through.
    assert!(is_absorbed(&h.layer.on_message(h.at(2), a.msg(), flow)));
    let ack = Req { method: "ACK", branch: Some("z9hG4bKack"), ..Req::default() };
    assert!(matches!(h.layer.on_message(h.at(2), ack.msg(), flow), Received::Request { tx: None, .. }));
    // Client transactions are never refused.
    h.layer.send_request(h.at(3), Method::Options, "z9hG4bKout2", c.bytes(), tcp(1, 1));
    assert_eq!(h.layer.counts(), (2, 2));
    // Room again once a transaction ends.
    h.layer.transport_error(h.at(4), tcp(1, 1));
    h.layer.respond(h.at(4), ta, 500, response_bytes(&a.msg(), 500, None), false);
    h.run_until(100_000);
    assert_eq!(h.layer.counts(), (1, 0));
    h.new_server_tx(100_001, c.msg(), flow);
}

#[test]
fn transport_error_ends_the_transactions_on_the_flow() {
    let mut h = Harness::new();
    let bad = udp(5070);
    let good = udp(5080);
    let req = |branch: &'static str, method: &'static str| Req { branch: Some(branch), method, ..Req::default() };
    let c1 = h.layer.send_request(h.at(0), Method::Invite, "z9hG4bKc1", req("z9hG4bKc1", "INVITE").bytes(), bad);
    let c2 = h.layer.send_request(h.at(0), Method::Options, "z9hG4bKc2", req("z9hG4bKc2", "OPTIONS").bytes(), bad);
    let c3 = h.layer.send_request(h.at(0), Method::Invite, "z9hG4bKc3", req("z9hG4bKc3", "INVITE").bytes(), bad);
    let c4 = h.layer.send_request(h.at(0), Method::Options, "z9hG4bKc4", req("z9hG4bKc4", "OPTIONS").bytes(), good);
    // c1 is in Proceeding (still awaiting), c3 got its final response (not awaiting).
    h.layer.on_message(h.at(10), response(&req("z9hG4bKc1", "INVITE").msg(), 180, Some("t")), bad);
    h.layer.on_message(h.at(10), response(&req("z9hG4bKc3", "INVITE").msg(), 486, Some("t")), bad);
    let s1 = h.new_server_tx(10, req("z9hG4bKs1", "INVITE").msg(), bad);
    let s2 = h.new_server_tx(10, req("z9hG4bKs2", "INVITE").msg(), good);
    h.transmits();
    h.events();
    assert_eq!(h.layer.counts(), (2, 4));

    h.layer.transport_error(h.at(20), bad);
    assert_eq!(
        h.events(),
        vec![
            Event::ClientTransportError { tx: c1 },
            Event::ClientTerminated { tx: c1 },
            Event::ClientTransportError { tx: c2 },
            Event::ClientTerminated { tx: c2 },
            Event::ServerTerminated { tx: s1 },
        ]
    );
    assert_eq!(h.layer.counts(), (1, 2));
    // c3 (Completed) and the other flow's transactions carry on.
    assert!(h.layer.client.get(c3.0).is_some() && h.layer.client.get(c4.0).is_some());
    assert!(h.layer.server.get(s2.0).is_some());
    // Late responses to the ended transactions are strays.
    assert!(matches!(
        h.layer.on_message(h.at(30), response(&req("z9hG4bKc2", "OPTIONS").msg(), 200, None), bad),
        Received::StrayResponse { .. }
    ));
    let timeline = h.run_until(100_000);
    let ended: Vec<&Event> = timeline.events.iter().map(|(_, e)| e).collect();
    assert!(ended.contains(&&Event::ClientTerminated { tx: c3 }));
    assert!(ended.contains(&&Event::ClientTimeout { tx: c4 }));
    assert!(!ended.iter().any(|e| matches!(e,
        Event::ClientTimeout { tx } | Event::ClientTransportError { tx } if *tx == c1 || *tx == c2)));
    assert_eq!(h.layer.counts(), (1, 0), "s2 waits for its TU");
}

#[test]
fn transport_error_matches_the_flow_exactly() {
    let mut h = Harness::new();
    let req = Req { transport: "TCP", ..Req::default() };
    let any = tcp(5060, 0);
    let tx = h.layer.send_request(h.at(0), Method::Invite, "z9hG4bK776asdhds", req.bytes(), any);
    let on_8 = h.layer.send_request(
        h.at(0),
        Method::Options,
        "z9hG4bKx",
        Req { method: "OPTIONS", branch: Some("z9hG4bKx"), ..req }.bytes(),
        tcp(5060, 8),
    );
    h.events();
    // Connection 7 closing touches neither the connection-less flow nor connection 8.
    h.layer.transport_error(h.at(1), tcp(5060, 7));
    assert!(h.events().is_empty());
    // The runtime reports the connection-less flow too (what it sent before connecting).
    h.layer.transport_error(h.at(1), tcp(5060, 0));
    assert_eq!(h.events(), vec![Event::ClientTransportError { tx }, Event::ClientTerminated { tx }]);
    assert!(h.layer.client.get(on_8.0).is_some());
    h.layer.transport_error(h.at(2), tcp(5060, 8));
    assert_eq!(h.events(), vec![Event::ClientTransportError { tx: on_8 }, Event::ClientTerminated { tx: on_8 }]);
}

#[test]
fn memory_is_released_once_every_timer_has_fired() {
    let mut h = Harness::new();
    let flow = udp(5060);
    let mut servers: Vec<(ServerTxId, tandem_sip::Message)> = Vec::new();
    let mut clients: Vec<(ClientTxId, Req<'static>)> = Vec::new();
    let branches: Vec<&'static str> = (0..40).map(|i| &*Box::leak(format!("z9hG4bKmem{i}").into_boxed_str())).collect();
    for (i, branch) in branches.iter().enumerate() {
        let method = ["INVITE", "OPTIONS", "BYE", "CANCEL"][i % 4];
        let r = Req { method, branch: Some(branch), ..Req::default() };
        servers.push((h.new_server_tx(0, r.msg(), flow), r.msg()));
        let m = Method::from_name(method);
        clients.push((h.layer.send_request(h.at(0), m, branch, r.bytes(), flow), r));
    }
    for (i, (tx, msg)) in servers.iter().enumerate() {
        let status = [180, 200, 486, 100][i % 4];
        h.layer.respond(h.at(10), *tx, status, response_bytes(msg, status, Some("t")), i % 3 == 0);
    }
    for (i, (_, r)) in clients.iter().enumerate() {
        let status = [183, 200, 404, 100][i % 4];
        h.layer.on_message(h.at(20), response(&r.msg(), status, Some("t")), flow);
    }
    assert!(h.layer.timers.armed() > 0);
    // The transactions left in Proceeding need their TU: final responses at 40 s.
    let early = h.run_until(40_000);
    assert!(early.transmits.len() > 10, "retransmissions happened");
    for (i, (tx, msg)) in servers.iter().enumerate() {
        h.layer.respond(h.at(40_000), *tx, 500, response_bytes(msg, 500, Some("t")), false);
        if i % 4 == 0 {
            h.layer.on_message(h.at(40_000), Req { method: "ACK", to_tag: Some("t"), ..Req::default() }.msg(), flow);
        }
    }
    for (_, r) in &clients {
        h.layer.on_message(h.at(40_000), response(&r.msg(), 500, Some("t")), flow);
    }
    let late = h.run_until(200_000);
    assert_eq!(h.layer.counts(), (0, 0));
    assert!(h.layer.server_index.is_empty() && h.layer.client_index.is_empty());
    assert_eq!(h.layer.timers.armed(), 0);
    assert_eq!(h.layer.timers.queued(), 0);
    assert_eq!(h.layer.next_timeout(), None);
    let terminated = early
        .events
        .iter()
        .chain(late.events.iter())
        .map(|(_, e)| e)
        .chain(h.events().iter())
        .filter(|e| matches!(e, Event::ServerTerminated { .. } | Event::ClientTerminated { .. }))
        .count();
    assert_eq!(terminated, 80);
}

#[test]
fn dead_timer_entries_are_compacted() {
    let mut h = Harness::new();
    // A live timer at the top of the queue (Timer E at 0.5 s) keeps dead entries behind it
    // from being popped: only compaction can drop them.
    let keeper = Req { method: "OPTIONS", branch: Some("z9hG4bKkeeper"), ..Req::default() };
    h.layer.send_request(h.at(0), Method::Options, "z9hG4bKkeeper", keeper.bytes(), udp(5060));
    let flow = tcp(5060, 1);
    let mut largest = 0;
    // Each OPTIONS over TCP arms Timer F; its 200 ends the transaction at once, leaving a
    // dead entry behind.
    for i in 0..10_000u32 {
        let branch = format!("z9hG4bKcompact{i}");
        let r = Req { method: "OPTIONS", branch: Some(&branch), transport: "TCP", ..Req::default() };
        h.layer.send_request(h.at(1), Method::Options, &branch, r.bytes(), flow);
        let resp = response(&r.msg(), 200, Some("t"));
        assert!(matches!(h.layer.on_message(h.at(2), resp, flow), Received::Response { .. }));
        largest = largest.max(h.layer.timers.queued());
    }
    assert!(largest > 1000, "dead entries did pile up ({largest})");
    assert!(largest <= 1025, "queue grew to {largest}");
    assert_eq!(h.layer.counts(), (0, 1));
    assert_eq!(h.layer.timers.armed(), 2);
    assert_eq!(h.layer.next_timeout(), Some(h.at(500)));
    h.transmits();
}

/// A rough throughput figure (run with `--release -- --ignored --nocapture throughput`): the
/// layer's own cost per message, parsing excluded.
#[test]
#[ignore]
fn throughput_smoke() {
    const N: usize = 50_000;
    let mut h = Harness::new();
    let flow = udp(5060);
    let requests: Vec<(String, tandem_sip::Message)> = (0..N)
        .map(|i| {
            let branch = format!("z9hG4bKperf{i}");
            let call_id = format!("perf-{i}");
            let msg =
                Req { method: if i % 2 == 0 { "INVITE" } else { "MESSAGE" }, branch: Some(&branch), call_id: &call_id, ..Req::default() }
                    .msg();
            (branch, msg)
        })
        .collect();
    let responses: Vec<(bytes::Bytes, tandem_sip::Message)> =
        requests.iter().map(|(_, m)| (response_bytes(m, 200, Some("t")), response(m, 200, Some("t")))).collect();
    let start = std::time::Instant::now();
    let mut messages = 0u64;
    for (i, ((branch, req), (resp_bytes, resp))) in requests.iter().zip(&responses).enumerate() {
        let now = h.at(i as u64 / 10);
        // Server side: request, retransmission, 200.
        let tx = match h.layer.on_message(now, req.clone(), flow) {
            Received::Request { tx: Some(tx), .. } => tx,
            other => panic!("{other:?}"),
        };
        h.layer.on_message(now, req.clone(), flow);
        h.layer.respond(now, tx, 200, resp_bytes.clone(), false);
        // Client side: request out, 200 in.
        let method = req.method().cloned().unwrap_or(Method::Options);
        h.layer.send_request(now, method, branch, req.buffer().clone(), flow);
        h.layer.on_message(now, resp.clone(), flow);
        messages += 5;
        while h.layer.poll_transmit().is_some() {}
        while h.layer.poll_event().is_some() {}
        if i % 1000 == 0 {
            h.layer.on_timeout(now);
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{messages} layer operations in {elapsed:?}: {:.0} per second, counts {:?}",
        messages as f64 / elapsed.as_secs_f64(),
        h.layer.counts()
    );
}
