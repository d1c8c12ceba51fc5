//! Client transactions (RFC 3261 §17.1, RFC 6026 §7.2).

use super::support::*;
use crate::{ClientTxId, Event, Received};
use tandem_sip::Method;

const BRANCH: &str = "z9hG4bKclient1";

fn uac_invite(transport: &'static str, extra: &'static str) -> Req<'static> {
    Req { branch: Some(BRANCH), transport, sent_by: "tandem.example.net:5060", extra, ..Req::default() }
}

fn start(h: &mut Harness, at_ms: u64, req: &Req<'_>, flow: tandem_sip::Flow) -> ClientTxId {
    let method = Method::from_name(req.method);
    let tx = h.layer.send_request(h.at(at_ms), method, req.branch.unwrap_or(""), req.bytes(), flow);
    let sent = h.transmits();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, req.bytes());
    assert_eq!(sent[0].flow, flow);
    tx
}

fn expect_response(r: Received, tx: ClientTxId, status: u16) {
    match r {
        Received::Response { tx: got, msg, .. } => {
            assert_eq!(got, tx);
            assert_eq!(msg.status(), Some(status));
        }
        other => panic!("expected the {status} passed up, got {other:?}"),
    }
}

#[test]
fn invite_timer_a_doubles_without_cap_and_timer_b_times_out() {
    let mut h = Harness::new();
    let req = uac_invite("UDP", "");
    let tx = start(&mut h, 0, &req, udp(5060));
    assert_eq!(h.layer.counts(), (0, 1));
    assert_eq!(h.layer.next_timeout(), Some(h.at(500)));
    let timeline = h.run_until(100_000);
    assert_eq!(timeline.transmit_times(), vec![500, 1500, 3500, 7500, 15500, 31500]);
    assert!(timeline.transmits.iter().all(|(_, t)| t.payload == req.bytes()));
    assert_eq!(timeline.events, vec![(32_000, Event::ClientTimeout { tx }), (32_000, Event::ClientTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 6);
    assert_eq!(h.layer.counts(), (0, 0));
    // A late response is now a stray.
    let resp = response(&req.msg(), 180, Some("x"));
    assert!(matches!(h.layer.on_message(h.at(40_000), resp, udp(5060)), Received::StrayResponse { .. }));
}

#[test]
fn invite_over_tcp_has_no_timer_a_but_timer_b() {
    let mut h = Harness::new();
    let req = uac_invite("TCP", "");
    let tx = start(&mut h, 0, &req, tcp(5060, 0));
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(32_000, Event::ClientTimeout { tx }), (32_000, Event::ClientTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 0);
}

#[test]
fn invite_provisional_stops_timers_a_and_b() {
    let mut h = Harness::new();
    let req = uac_invite("UDP", "");
    let flow = udp(5060);
    let tx = start(&mut h, 0, &req, flow);
    assert_eq!(h.run_until(1000).transmit_times(), vec![500]);
    let r = h.layer.on_message(h.at(1000), response(&req.msg(), 100, None), flow);
    expect_response(r, tx, 100);
    assert_eq!(h.layer.next_timeout(), None, "A and B cancelled in Proceeding");
    // Every provisional response is passed up in Proceeding.
    for status in [180, 180, 183] {
        let r = h.layer.on_message(h.at(2000), response(&req.msg(), status, Some("x")), flow);
        expect_response(r, tx, status);
    }
    let timeline = h.run_until(1_000_000);
    assert!(timeline.transmits.is_empty() && timeline.events.is_empty());
    assert_eq!(h.layer.counts(), (0, 1), "an INVITE in Proceeding waits for the TU");
}

#[test]
fn invite_non_2xx_is_acknowledged_by_the_layer() {
    let mut h = Harness::new();
    let routes = "Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>\r\n\
                  Route: <sip:p3.example.com;lr>\r\n";
    let req = Req { uri: "sip:bob@biloxi.example.com;transport=udp", cseq: 42, ..uac_invite("UDP", routes) };
    let flow = udp(5060);
    let tx = start(&mut h, 0, &req, flow);
    let busy = response(&req.msg(), 486, Some("bobtag"));
    let r = h.layer.on_message(h.at(200), busy.clone(), flow);
    expect_response(r, tx, 486);

    let sent = h.transmits();
    assert_eq!(sent.len(), 1, "the ACK");
    assert_eq!(sent[0].flow, flow);
    let ack = parse_bytes(sent[0].payload.clone());
    assert_eq!(ack.method(), Some(&Method::Ack));
    assert_eq!(ack.request_uri_text(), "sip:bob@biloxi.example.com;transport=udp");
    assert_eq!(ack.branch(), Some(BRANCH));
    assert_eq!(ack.top_via_host(), "tandem.example.net");
    assert_eq!(ack.top_via_port(), Some(5060));
    assert_eq!(ack.via_header_count(), 1);
    assert_eq!(ack.cseq(), Some(&tandem_sip::CSeq { seq: 42, method: Method::Ack }));
    assert_eq!(ack.to_tag(), Some("bobtag"));
    assert_eq!(ack.from_tag(), Some("1928301774"));
    assert_eq!(ack.call_id(), req.call_id);
    assert_eq!(ack.content_length(), Some(0));
    assert_eq!(ack.max_forwards(), Some(70));
    let routes: Vec<&str> = ack.route_values().map(|(_, v)| v).collect();
    assert_eq!(routes, vec!["<sip:p1.example.com;lr>", "<sip:p2.example.com;lr>", "<sip:p3.example.com;lr>"]);
    assert!(h.layer.client.get(tx.0).is_some_and(|c| c.request.is_none()), "request dropped");

    // Retransmissions of the final response re-send the same ACK and are absorbed.
    for t in [1000, 3000] {
        assert!(is_absorbed(&h.layer.on_message(h.at(t), busy.clone(), flow)));
        let again = h.transmits();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].payload, sent[0].payload);
    }
    // A provisional after the final response is absorbed.
    assert!(is_absorbed(&h.layer.on_message(h.at(3100), response(&req.msg(), 180, Some("bobtag")), flow)));
    assert_eq!(h.layer.retransmissions(), 2);

    // Timer D: 32 s on UDP, no request retransmission any more.
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(32_200, Event::ClientTerminated { tx })]);
    assert_eq!(h.layer.counts(), (0, 0));
}

#[test]
fn invite_non_2xx_over_tcp_acks_and_terminates() {
    let mut h = Harness::new();
    let req = uac_invite("TCP", "");
    let flow = tcp(5060, 4);
    let tx = start(&mut h, 0, &req, flow);
    let r = h.layer.on_message(h.at(200), response(&req.msg(), 603, Some("t")), flow);
    expect_response(r, tx, 603);
    let sent = h.transmits();
    assert_eq!(sent.len(), 1);
    assert!(first_line(&sent[0].payload).starts_with("ACK sip:bob@biloxi.example.com"));
    assert_eq!(h.events(), vec![Event::ClientTerminated { tx }]);
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.next_timeout(), None);
}

#[test]
fn invite_2xx_and_its_retransmissions_are_passed_up() {
    let mut h = Harness::new();
    let req = uac_invite("UDP", "");
    let flow = udp(5060);
    let tx = start(&mut h, 0, &req, flow);
    h.run_until(600);
    h.layer.on_message(h.at(700), response(&req.msg(), 180, Some("a")), flow);
    let ok = response(&req.msg(), 200, Some("a"));
    expect_response(h.layer.on_message(h.at(1000), ok.clone(), flow), tx, 200);
    assert!(h.transmits().is_empty(), "the layer never ACKs a 2xx");
    assert!(h.layer.client.get(tx.0).is_some_and(|c| c.request.is_none()), "request dropped");
    expect_response(h.layer.on_message(h.at(1500), ok.clone(), flow), tx, 200);
    // A 2xx from another fork too.
    let forked = response(&req.msg(), 200, Some("b"));
    expect_response(h.layer.on_message(h.at(2000), forked, flow), tx, 200);
    // Provisional and non-2xx responses in Accepted are absorbed.
    assert!(is_absorbed(&h.layer.on_message(h.at(2100), response(&req.msg(), 183, Some("a")), flow)));
    assert!(is_absorbed(&h.layer.on_message(h.at(2100), response(&req.msg(), 500, Some("c")), flow)));
    assert!(h.transmits().is_empty());

    // Timer M = 64*T1 after the first 2xx.
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(33_000, Event::ClientTerminated { tx })]);
    assert!(matches!(h.layer.on_message(h.at(40_000), ok, flow), Received::StrayResponse { .. }));
    assert_eq!(h.layer.retransmissions(), 1);
}

#[test]
fn non_invite_timer_e_is_capped_at_t2_and_timer_f_times_out() {
    let mut h = Harness::new();
    let req = Req { method: "OPTIONS", ..uac_invite("UDP", "") };
    let tx = start(&mut h, 0, &req, udp(5060));
    let timeline = h.run_until(100_000);
    assert_eq!(timeline.transmit_times(), vec![500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500]);
    assert_eq!(timeline.events, vec![(32_000, Event::ClientTimeout { tx }), (32_000, Event::ClientTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 10);
}

#[test]
fn non_invite_proceeding_retransmits_every_t2_then_timer_k() {
    let mut h = Harness::new();
    let req = Req { method: "REGISTER", ..uac_invite("UDP", "") };
    let flow = udp(5060);
    let tx = start(&mut h, 0, &req, flow);
    assert_eq!(h.run_until(700).transmit_times(), vec![500]);
    let r = h.layer.on_message(h.at(700), response(&req.msg(), 100, None), flow);
    expect_response(r, tx, 100);
    // E was due at 1.5 s; from then on every T2.
    assert_eq!(h.run_until(10_000).transmit_times(), vec![1500, 5500, 9500]);
    let ok = response(&req.msg(), 200, Some("x"));
    expect_response(h.layer.on_message(h.at(10_000), ok.clone(), flow), tx, 200);
    assert!(h.layer.client.get(tx.0).is_some_and(|c| c.request.is_none()), "request dropped");
    // Completed: retransmitted responses absorbed, nothing sent.
    assert!(is_absorbed(&h.layer.on_message(h.at(11_000), ok.clone(), flow)));
    assert!(h.transmits().is_empty());
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(15_000, Event::ClientTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 4);
}

#[test]
fn non_invite_over_tcp_no_retransmission_and_immediate_end() {
    let mut h = Harness::new();
    let req = Req { method: "OPTIONS", ..uac_invite("TCP", "") };
    let flow = tcp(5060, 2);
    let tx = start(&mut h, 0, &req, flow);
    assert!(h.layer.client.get(tx.0).is_some_and(|c| c.request.is_none()), "not kept on TCP");
    assert!(h.run_until(10_000).transmits.is_empty());
    let ok = response(&req.msg(), 200, Some("x"));
    expect_response(h.layer.on_message(h.at(10_000), ok, flow), tx, 200);
    assert_eq!(h.events(), vec![Event::ClientTerminated { tx }]);

    // And Timer F on TCP.
    let req2 = Req { branch: Some("z9hG4bKsecond"), ..req };
    let tx2 = start(&mut h, 20_000, &req2, flow);
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(52_000, Event::ClientTimeout { tx: tx2 }), (52_000, Event::ClientTerminated { tx: tx2 })]);
}

#[test]
fn responses_match_on_branch_and_cseq_method() {
    let mut h = Harness::new();
    let flow = udp(5060);
    let invite = uac_invite("UDP", "");
    let itx = start(&mut h, 0, &invite, flow);
    // CANCEL carries the INVITE's branch (RFC 3261 §9.1): its own transaction.
    let cancel = Req { method: "CANCEL", ..invite };
    let ctx = start(&mut h, 100, &cancel, flow);
    assert_ne!(itx, ctx);
    expect_response(h.layer.on_message(h.at(200), response(&cancel.msg(), 200, Some("x")), flow), ctx, 200);
    expect_response(h.layer.on_message(h.at(200), response(&invite.msg(), 487, Some("x")), flow), itx, 487);
    assert!(first_line(&h.transmits()[0].payload).starts_with("ACK "));
    // Branch matched case-insensitively.
    let upper = Req { method: "OPTIONS", branch: Some("z9hG4bKMiXeD"), ..invite };
    let otx = start(&mut h, 300, &upper, flow);
    let lower = Req { branch: Some("z9hg4bkmixed"), ..upper };
    expect_response(h.layer.on_message(h.at(400), response(&lower.msg(), 200, Some("x")), flow), otx, 200);
    // Unknown branch, or the right branch with another method: strays.
    let other = Req { branch: Some("z9hG4bKunknown"), ..invite };
    assert!(matches!(h.layer.on_message(h.at(500), response(&other.msg(), 200, Some("x")), flow), Received::StrayResponse { .. }));
    let bye = Req { method: "BYE", ..invite };
    assert!(matches!(h.layer.on_message(h.at(500), response(&bye.msg(), 200, Some("x")), flow), Received::StrayResponse { .. }));
}

#[test]
fn an_ack_given_to_send_request_goes_out_statelessly() {
    let mut h = Harness::new();
    let ack = Req { method: "ACK", ..uac_invite("UDP", "") };
    let tx = h.layer.send_request(h.at(0), Method::Ack, BRANCH, ack.bytes(), udp(5060));
    assert_eq!(h.transmits().len(), 1);
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.next_timeout(), None);
    // The id names nothing: a response to it is a stray.
    assert!(h.layer.client.get(tx.0).is_none());
}

#[test]
fn send_stateless_only_transmits() {
    let mut h = Harness::new();
    h.layer.send_stateless(bytes::Bytes::from_static(b"SIP/2.0 503 x\r\n\r\n"), udp(1));
    let sent = h.transmits();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flow, udp(1));
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.retransmissions(), 0);
}

/// Branches from `client_branch` name their transaction: its responses find it without the
/// table (which stays empty), a CANCEL sharing its INVITE's branch goes through the table, and
/// a response whose branch names a transaction with another key, or one that has ended, is stray.
#[test]
fn branches_from_client_branch_name_their_transaction() {
    let mut h = Harness::new();
    let branch = h.layer.client_branch(0x5eed);
    let invite = Req { branch: Some(&branch), sent_by: "tandem.example.net:5060", ..Req::default() };
    let tx = start(&mut h, 0, &invite, udp(5060));
    assert_eq!(h.layer.client_index.len(), 0, "named by its branch, not indexed");
    let cancel = Req { method: "CANCEL", ..invite };
    let cancel_tx = start(&mut h, 10, &cancel, udp(5060));
    assert_ne!(cancel_tx, tx);
    assert_eq!(h.layer.client_index.len(), 1, "the CANCEL's branch names the INVITE's transaction");
    expect_response(h.layer.on_message(h.at(20), response(&cancel.msg(), 200, None), udp(5060)), cancel_tx, 200);
    expect_response(h.layer.on_message(h.at(30), response(&invite.msg(), 487, Some("t")), udp(5060)), tx, 487);
    let bye = Req { method: "BYE", ..invite };
    assert!(matches!(h.layer.on_message(h.at(40), response(&bye.msg(), 200, None), udp(5060)), Received::StrayResponse { .. }));
    // The branch is matched case-insensitively, as every branch.
    let upper = branch.to_ascii_uppercase();
    let shouted = Req { branch: Some(&upper), ..invite };
    assert!(matches!(h.layer.on_message(h.at(50), response(&shouted.msg(), 487, Some("t")), udp(5060)), Received::Absorbed));
    h.run_until(100_000);
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.client_index.len(), 0, "the CANCEL's entry left with it");
    // Its slot is reused by the next transaction, under another generation: the old branch
    // names nothing any more.
    let next_branch = h.layer.client_branch(0x5eee);
    let next = Req { branch: Some(&next_branch), sent_by: "tandem.example.net:5060", ..Req::default() };
    let next_tx = start(&mut h, 100_000, &next, udp(5060));
    assert_eq!(h.layer.client_index.len(), 0);
    assert!(matches!(h.layer.on_message(h.at(100_010), response(&invite.msg(), 180, None), udp(5060)), Received::StrayResponse { .. }));
    expect_response(h.layer.on_message(h.at(100_020), response(&next.msg(), 180, None), udp(5060)), next_tx, 180);
}

/// A branch made for the next transaction, given to another that starts first, still works:
/// that one is indexed by its key.
#[test]
fn a_branch_made_for_another_transaction_goes_through_the_table() {
    let mut h = Harness::new();
    let early = h.layer.client_branch(1);
    let first = Req { branch: Some("z9hG4bKother"), sent_by: "tandem.example.net:5060", ..Req::default() };
    let first_tx = start(&mut h, 0, &first, udp(5060));
    let late = Req { branch: Some(&early), sent_by: "tandem.example.net:5060", ..Req::default() };
    let late_tx = start(&mut h, 1, &late, udp(5060));
    assert_eq!(h.layer.client_index.len(), 2, "neither branch names its transaction");
    expect_response(h.layer.on_message(h.at(2), response(&late.msg(), 180, None), udp(5060)), late_tx, 180);
    expect_response(h.layer.on_message(h.at(3), response(&first.msg(), 180, None), udp(5060)), first_tx, 180);
}
