//! Server transactions (RFC 3261 §17.2, RFC 6026 §7.1).

use super::support::*;
use crate::{Event, Received, ServerTxId};
use std::time::Duration;

fn g_schedule(start_ms: u64, end_ms: u64) -> Vec<u64> {
    // T1 = 500 ms doubling up to T2 = 4 s.
    let mut out = Vec::new();
    let (mut t, mut interval) = (start_ms + 500, 500);
    while t < end_ms {
        out.push(t);
        interval = (interval * 2).min(4000);
        t += interval;
    }
    out
}

#[test]
fn g_schedule_helper_matches_the_rfc() {
    assert_eq!(g_schedule(0, 32_000), vec![500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500]);
}

#[test]
fn invite_non_2xx_over_udp_is_retransmitted_by_timer_g_until_timer_h() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    assert_eq!(h.layer.counts(), (1, 0));
    assert_eq!(h.layer.next_timeout(), None, "no timer in Proceeding");

    h.layer.respond(h.at(1000), tx, 486, response_bytes(&invite, 486, Some("x")), false);
    let sent = h.transmits();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flow, flow);
    assert!(first_line(&sent[0].payload).starts_with("SIP/2.0 486"));
    assert_eq!(h.layer.next_timeout(), Some(h.at(1500)));

    let timeline = h.run_until(60_000);
    assert_eq!(timeline.transmit_times(), g_schedule(1000, 33_000));
    assert_eq!(timeline.transmit_times(), vec![1500, 2500, 4500, 8500, 12500, 16500, 20500, 24500, 28500, 32500]);
    assert!(timeline.transmits.iter().all(|(_, t)| t.payload == sent[0].payload && t.flow == flow));
    assert_eq!(timeline.events, vec![(33_000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 10);
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.next_timeout(), None);
}

#[test]
fn invite_ack_confirms_stops_timer_g_and_timer_i_terminates() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    let final_response = response_bytes(&invite, 404, Some("x"));
    h.layer.respond(h.at(0), tx, 404, final_response.clone(), false);
    assert_eq!(h.transmits().len(), 1);

    // A retransmitted INVITE in Completed re-sends the final response.
    let r = h.layer.on_message(h.at(700), invite.clone(), flow);
    assert!(is_absorbed(&r));
    let resent = h.transmits();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].payload, final_response);

    let timeline = h.run_until(2000);
    assert_eq!(timeline.transmit_times(), vec![500, 1500]);

    let ack = Req { method: "ACK", to_tag: Some("x"), ..Req::default() }.msg();
    let r = h.layer.on_message(h.at(2000), ack.clone(), flow);
    assert!(is_absorbed(&r), "the ACK of a non-2xx is absorbed: {r:?}");
    assert_eq!(h.layer.next_timeout(), Some(h.at(7000)), "Timer I = T4");
    // ACK and INVITE retransmissions in Confirmed are absorbed silently.
    assert!(is_absorbed(&h.layer.on_message(h.at(3000), ack, flow)));
    assert!(is_absorbed(&h.layer.on_message(h.at(3000), invite, flow)));
    assert!(h.transmits().is_empty());

    let timeline = h.run_until(60_000);
    assert!(timeline.transmits.is_empty(), "Timer G stopped");
    assert_eq!(timeline.events, vec![(7000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 3);
    assert_eq!(h.layer.counts(), (0, 0));
}

#[test]
fn invite_non_2xx_over_tcp_is_not_retransmitted() {
    let mut h = Harness::new();
    let req = Req { transport: "TCP", ..Req::default() };
    let invite = req.msg();
    let flow = tcp(40000, 7);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    h.layer.respond(h.at(0), tx, 480, response_bytes(&invite, 480, Some("x")), false);
    assert_eq!(h.transmits().len(), 1);
    assert_eq!(h.layer.next_timeout(), Some(h.at(32_000)), "only Timer H");

    // The ACK ends it at once (Timer I is 0 on reliable transports).
    let ack = Req { method: "ACK", to_tag: Some("x"), ..req }.msg();
    assert!(is_absorbed(&h.layer.on_message(h.at(100), ack, flow)));
    assert_eq!(h.events(), vec![Event::ServerTerminated { tx }]);
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.next_timeout(), None);

    // Without an ACK, Timer H ends it after 64*T1 with no retransmission.
    let tx = h.new_server_tx(1000, invite.clone(), flow);
    h.layer.respond(h.at(1000), tx, 480, response_bytes(&invite, 480, Some("x")), false);
    h.transmits();
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(33_000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 0);
}

#[test]
fn invite_retransmission_in_proceeding_resends_the_last_provisional() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);

    // Nothing sent yet: absorbed silently.
    assert!(is_absorbed(&h.layer.on_message(h.at(500), invite.clone(), flow)));
    assert!(h.transmits().is_empty());

    let trying = response_bytes(&invite, 100, None);
    h.layer.respond(h.at(600), tx, 100, trying.clone(), false);
    assert_eq!(h.transmits()[0].payload, trying);
    assert!(is_absorbed(&h.layer.on_message(h.at(1500), invite.clone(), flow)));
    let sent = h.transmits();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, trying);

    let ringing = response_bytes(&invite, 180, Some("x"));
    h.layer.respond(h.at(2000), tx, 180, ringing.clone(), false);
    h.transmits();
    assert!(is_absorbed(&h.layer.on_message(h.at(3500), invite.clone(), flow)));
    assert_eq!(texts(&h.transmits()), texts(&[crate::Transmit { flow, payload: ringing }]));
    assert_eq!(h.layer.retransmissions(), 2);
    assert_eq!(h.layer.next_timeout(), None, "Proceeding has no timer");
    assert_eq!(h.layer.counts(), (1, 0));
}

#[test]
fn uas_2xx_is_retransmitted_until_ack_received() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    let ok = response_bytes(&invite, 200, Some("x"));
    h.layer.respond(h.at(0), tx, 200, ok.clone(), true);
    assert_eq!(h.transmits().len(), 1);

    let timeline = h.run_until(8000);
    assert_eq!(timeline.transmit_times(), vec![500, 1500, 3500, 7500]);
    assert!(timeline.transmits.iter().all(|(_, t)| t.payload == ok));

    // A retransmitted INVITE in Accepted is absorbed and the 2xx re-sent.
    assert!(is_absorbed(&h.layer.on_message(h.at(8000), invite.clone(), flow)));
    assert_eq!(h.transmits()[0].payload, ok);

    // The ACK of a 2xx has its own branch: it reaches the TU outside the transaction.
    let ack = Req { method: "ACK", branch: Some("z9hG4bKnewbranch"), to_tag: Some("x"), ..Req::default() }.msg();
    match h.layer.on_message(h.at(8100), ack, flow) {
        Received::Request { tx: None, cancels: None, msg, .. } => assert_eq!(msg.method(), Some(&tandem_sip::Method::Ack)),
        other => panic!("unexpected {other:?}"),
    }
    h.layer.ack_received(tx);
    assert_eq!(h.layer.next_timeout(), Some(h.at(32_000)), "only Timer L left");

    // After the ACK, INVITE retransmissions are absorbed without a response.
    assert!(is_absorbed(&h.layer.on_message(h.at(9000), invite, flow)));
    assert!(h.transmits().is_empty());
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(32_000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 5);
    assert_eq!(h.layer.counts(), (0, 0));
}

#[test]
fn uas_2xx_without_ack_raises_ack_timeout() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&invite, 200, Some("x")), true);
    h.transmits();
    let timeline = h.run_until(100_000);
    assert_eq!(timeline.transmit_times(), g_schedule(0, 32_000));
    assert_eq!(timeline.events, vec![(32_000, Event::AckTimeout { tx }), (32_000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 10);
}

#[test]
fn uas_2xx_is_retransmitted_on_reliable_transports_too() {
    // RFC 3261 §13.3.1.4 does not exempt reliable transports: the 2xx is end to end.
    let mut h = Harness::new();
    let req = Req { transport: "TCP", ..Req::default() };
    let invite = req.msg();
    let flow = tcp(40000, 3);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&invite, 200, Some("x")), true);
    h.transmits();
    let timeline = h.run_until(4000);
    assert_eq!(timeline.transmit_times(), vec![500, 1500, 3500]);
    h.layer.ack_received(tx);
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(32_000, Event::ServerTerminated { tx })]);
}

#[test]
fn proxy_2xx_is_not_retransmitted_and_more_2xx_pass_through() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&invite, 200, Some("a")), false);
    assert_eq!(h.transmits().len(), 1);
    assert_eq!(h.layer.next_timeout(), Some(h.at(32_000)), "Timer L only");

    // INVITE retransmission absorbed silently; a second 2xx (another fork) is sent.
    assert!(is_absorbed(&h.layer.on_message(h.at(500), invite.clone(), flow)));
    assert!(h.transmits().is_empty());
    let other_fork = response_bytes(&invite, 200, Some("b"));
    h.layer.respond(h.at(600), tx, 200, other_fork.clone(), false);
    assert_eq!(h.transmits()[0].payload, other_fork);
    // Non-2xx after a 2xx is not allowed: dropped.
    h.layer.respond(h.at(700), tx, 486, response_bytes(&invite, 486, Some("c")), false);
    assert!(h.transmits().is_empty());

    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(32_000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 0);
}

#[test]
fn non_invite_over_udp_absorbs_then_resends_then_timer_j() {
    let mut h = Harness::new();
    let req = Req { method: "BYE", to_tag: Some("x"), ..Req::default() };
    let bye = req.msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, bye.clone(), flow);
    assert_eq!(h.layer.next_timeout(), None);

    // Trying: retransmissions absorbed, nothing sent.
    assert!(is_absorbed(&h.layer.on_message(h.at(500), bye.clone(), flow)));
    assert!(h.transmits().is_empty());

    let trying = response_bytes(&bye, 100, None);
    h.layer.respond(h.at(600), tx, 100, trying.clone(), false);
    assert_eq!(h.transmits()[0].payload, trying);
    assert!(is_absorbed(&h.layer.on_message(h.at(1500), bye.clone(), flow)));
    assert_eq!(h.transmits()[0].payload, trying, "Proceeding re-sends the provisional");

    let ok = response_bytes(&bye, 200, None);
    h.layer.respond(h.at(2000), tx, 200, ok.clone(), false);
    assert_eq!(h.transmits()[0].payload, ok);
    assert!(is_absorbed(&h.layer.on_message(h.at(3500), bye.clone(), flow)));
    assert_eq!(h.transmits()[0].payload, ok, "Completed re-sends the final");
    // A second final response is not allowed.
    h.layer.respond(h.at(3600), tx, 500, response_bytes(&bye, 500, None), false);
    assert!(h.transmits().is_empty());

    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty(), "no retransmission timer on the server side");
    assert_eq!(timeline.events, vec![(34_000, Event::ServerTerminated { tx })]);
    assert_eq!(h.layer.retransmissions(), 2);

    // Once terminated, the same request starts a new transaction.
    let tx2 = h.new_server_tx(40_000, bye, flow);
    assert_ne!(tx2, tx);
}

#[test]
fn non_invite_over_tcp_terminates_on_the_final_response() {
    let mut h = Harness::new();
    let bye = Req { method: "OPTIONS", transport: "TCP", ..Req::default() }.msg();
    let flow = tcp(40000, 9);
    let tx = h.new_server_tx(0, bye.clone(), flow);
    h.layer.respond(h.at(10), tx, 200, response_bytes(&bye, 200, Some("x")), false);
    assert_eq!(h.transmits().len(), 1);
    assert_eq!(h.events(), vec![Event::ServerTerminated { tx }]);
    assert_eq!(h.layer.counts(), (0, 0));
    assert_eq!(h.layer.next_timeout(), None);
}

#[test]
fn responses_on_unknown_or_ended_transactions_are_dropped() {
    let mut h = Harness::new();
    h.layer.respond(h.at(0), ServerTxId(12345), 200, bytes::Bytes::from_static(b"x"), true);
    h.layer.respond(h.at(0), ServerTxId(u64::MAX), 200, bytes::Bytes::from_static(b"x"), true);
    h.layer.ack_received(ServerTxId(7));
    assert!(h.transmits().is_empty());
    assert!(h.events().is_empty());
    assert_eq!(h.layer.next_timeout(), None);

    // An ended transaction's id stays dead even when its slot is reused.
    let bye = Req { method: "OPTIONS", transport: "TCP", ..Req::default() }.msg();
    let flow = tcp(40000, 9);
    let tx = h.new_server_tx(0, bye.clone(), flow);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&bye, 200, None), false);
    h.transmits();
    let tx2 = h.new_server_tx(1, bye.clone(), flow);
    assert_ne!(tx, tx2);
    h.layer.respond(h.at(2), tx, 500, response_bytes(&bye, 500, None), false);
    assert!(h.transmits().is_empty(), "stale id: dropped");
    h.layer.respond(h.at(3), tx2, 200, response_bytes(&bye, 200, None), false);
    assert_eq!(h.transmits().len(), 1);
}

#[test]
fn invalid_status_is_dropped() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let tx = h.new_server_tx(0, invite.clone(), udp(5060));
    h.layer.respond(h.at(0), tx, 99, bytes::Bytes::from_static(b"x"), false);
    h.layer.respond(h.at(0), tx, 700, bytes::Bytes::from_static(b"x"), false);
    assert!(h.transmits().is_empty());
    assert_eq!(h.layer.counts(), (1, 0));
}

#[test]
fn an_ack_before_the_retransmission_was_asked_for_makes_it_moot() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    // ack_received before any 2xx: nothing to stop, nothing remembered.
    h.layer.ack_received(tx);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&invite, 200, Some("a")), false);
    h.layer.ack_received(tx);
    // The TU re-sends the 2xx asking for retransmission: sent once, not retransmitted.
    h.layer.respond(h.at(100), tx, 200, response_bytes(&invite, 200, Some("a")), true);
    assert_eq!(h.transmits().len(), 2);
    let timeline = h.run_until(100_000);
    assert!(timeline.transmits.is_empty());
    assert_eq!(timeline.events, vec![(32_000, Event::ServerTerminated { tx })]);
}

#[test]
fn a_2xx_retransmission_can_start_once_accepted() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    h.layer.respond(h.at(0), tx, 200, response_bytes(&invite, 200, Some("a")), false);
    h.layer.respond(h.at(1000), tx, 200, response_bytes(&invite, 200, Some("a")), true);
    assert_eq!(h.transmits().len(), 2);
    let timeline = h.run_until(100_000);
    // From 1 s: 1.5, 2.5, 4.5, 8.5, ... until Timer L at 32 s (set by the first 2xx).
    assert_eq!(timeline.transmit_times(), vec![1500, 2500, 4500, 8500, 12500, 16500, 20500, 24500, 28500]);
    assert_eq!(timeline.events, vec![(32_000, Event::AckTimeout { tx }), (32_000, Event::ServerTerminated { tx })]);
}

// ---- deferred 100 Trying (RFC 3261 §17.2.1) ----

#[test]
fn a_deferred_trying_falls_due_when_nothing_was_sent() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let flow = udp(5060);
    let tx = h.new_server_tx(0, invite.clone(), flow);
    h.layer.defer_trying(h.at(0), tx, Duration::from_millis(100));
    assert_eq!(h.layer.next_timeout(), Some(h.at(100)));
    let timeline = h.run_until(150);
    assert!(timeline.transmits.is_empty(), "the layer builds no 100: the TU does");
    assert_eq!(timeline.events, vec![(100, Event::TryingDue { tx })]);

    // The TU's 100 then behaves as any provisional: re-sent on a retransmitted INVITE.
    h.layer.respond(h.at(101), tx, 100, response_bytes(&invite, 100, None), false);
    assert_eq!(h.transmits().len(), 1);
    assert!(is_absorbed(&h.layer.on_message(h.at(500), invite.clone(), flow)));
    assert!(first_line(&h.transmits()[0].payload).starts_with("SIP/2.0 100"));
    assert_eq!(h.layer.next_timeout(), None, "nothing else is armed in Proceeding");
}

#[test]
fn any_response_before_the_deadline_cancels_the_deferred_trying() {
    // A provisional (the callee rings), a 2xx, and a non-2xx over UDP and over TCP: after each,
    // nothing falls due and the transaction's own timers run as without the deferral.
    for (status, flow, next) in
        [(180, udp(5060), None), (200, udp(5060), Some(32_050)), (486, udp(5060), Some(550)), (486, tcp(40000, 3), Some(32_050))]
    {
        let mut h = Harness::new();
        let req = Req { transport: if flow.is_reliable() { "TCP" } else { "UDP" }, ..Req::default() };
        let invite = req.msg();
        let tx = h.new_server_tx(0, invite.clone(), flow);
        h.layer.defer_trying(h.at(0), tx, Duration::from_millis(100));
        h.layer.respond(h.at(50), tx, status, response_bytes(&invite, status, Some("x")), false);
        assert_eq!(h.transmits().len(), 1);
        assert_eq!(h.layer.next_timeout(), next.map(|ms| h.at(ms)), "{status} on {flow:?}");
        let timeline = h.run_until(40_000);
        assert!(timeline.events.iter().all(|(_, e)| !matches!(e, Event::TryingDue { .. })), "{status}: {:?}", timeline.events);
        if flow.is_reliable() {
            assert!(timeline.transmits.is_empty(), "no Timer G on TCP, and the deadline did not turn into one");
        }
    }
}

#[test]
fn a_deferred_trying_is_ignored_once_a_response_went_out() {
    let mut h = Harness::new();
    let invite = Req::default().msg();
    let tx = h.new_server_tx(0, invite.clone(), udp(5060));
    h.layer.respond(h.at(0), tx, 100, response_bytes(&invite, 100, None), false);
    h.layer.defer_trying(h.at(0), tx, Duration::from_millis(100));
    assert_eq!(h.layer.next_timeout(), None);
    // Nor on a non-INVITE transaction.
    let options = Req { method: "OPTIONS", branch: Some("z9hG4bKopt"), ..Req::default() }.msg();
    let tx = h.new_server_tx(0, options, udp(5060));
    h.layer.defer_trying(h.at(0), tx, Duration::from_millis(100));
    assert_eq!(h.layer.next_timeout(), None);
}
