//! The transaction-stateful proxy core (RFC 3261 §16): forwarding with Via, Record-Route,
//! Max-Forwards and loose routing; relaying responses upstream; CANCEL; stateless forwarding
//! of ACKs for 2xx and of responses that outlived their transaction.

use crate::core::{ClientOwner, CoreState, ServerOwner};
use crate::locals::{Destination, LocalListener};
use crate::metrics::Drop as DropReason;
use crate::service::{Request, ServiceId};
use crate::ContainerError;
use bytes::Bytes;
use smallvec::SmallVec;
use std::time::Instant;
use tandem_sip::{Flow, HeaderName, Message, MessageWriter, Method, NameAddr, Span, Transport, Via};
use tandem_transaction::{ClientTxId, ServerTxId};

/// A proxied request awaiting its final response.
pub(crate) struct ProxyContext {
    /// The request as received, to answer it when every branch fails; dropped once a final
    /// response went upstream (the context lives on while 2xx retransmissions may come).
    upstream: Option<Message>,
    branches: SmallVec<[ProxyBranch; 1]>,
    final_sent: bool,
    /// Where to go next when the branch fails at the transport or times out.
    failover: Option<Box<Failover>>,
}

/// RFC 3263 §4.3: the remaining targets of a located next hop, and how the request was
/// being forwarded, to retry the next target when the current one fails.
struct Failover {
    alternatives: Vec<Destination>,
    request_uri: Option<String>,
    record_route: bool,
    service: ServiceId,
    flow: Flow,
    consumed_route: Option<(usize, Span)>,
}

struct ProxyBranch {
    tx: ClientTxId,
    /// The forwarded INVITE, kept until a final response to build a CANCEL from.
    invite: Option<Bytes>,
    flow: Flow,
}

/// Options of one forwarding decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProxyOptions<'a> {
    /// Where to send; by default the first remaining Route, else the Request-URI.
    pub destination: Option<Destination>,
    /// Where to send when the Route or Request-URI designates this server itself (e.g. a
    /// mid-dialog request from a UA that ignored Record-Route): typically the next hop.
    pub fallback: Option<Destination>,
    /// Stay on the path of the dialog (initial requests).
    pub record_route: bool,
    /// A new Request-URI (retargeting, RFC 3261 §16.5: e.g. a registered contact for the
    /// address of record the request was sent to); absent: the Request-URI as received.
    pub request_uri: Option<&'a str>,
    /// Further targets, in order, tried one after the other when the branch to `destination`
    /// fails at the transport or times out (the rest of an RFC 3263 target list).
    pub alternatives: &'a [Destination],
    /// The request's own next hop (first remaining Route, else the Request-URI, as
    /// [`Request::next_hop_uri`] finds it) when the caller already located it, so it is not
    /// parsed again; absent: located here when needed.
    pub located: Option<Destination>,
}

impl CoreState {
    pub(crate) fn proxy_request(
        &mut self,
        now: Instant,
        req: &Request<'_>,
        service: ServiceId,
        options: ProxyOptions<'_>,
    ) -> Result<(), ContainerError> {
        let msg = req.msg;
        let method = req.method().clone();
        let max_forwards = msg.max_forwards().unwrap_or(70);
        if max_forwards == 0 {
            return self.answer_upstream(now, req, 483, None);
        }
        let unsupported: Vec<&str> = msg.values_of(HeaderName::ProxyRequire).map(|(_, v)| v).collect();
        if !unsupported.is_empty() && method != Method::Ack {
            let list = unsupported.join(", ");
            if let Some(tx) = req.tx {
                self.reply_with(now, tx, msg, 420, &[("Unsupported", &list)], None);
            }
            return Ok(());
        }
        // The request's own next hop (Route, else Request-URI) only matters without a given
        // destination: not parsed for the initial requests of a proxy with a next hop.
        let dest = match options.destination {
            Some(d) => d,
            None => {
                let natural = options.located.or_else(|| next_hop_of(msg, req.consumed_route));
                let is_self = natural.is_some_and(|d| {
                    self.locals
                        .listeners
                        .iter()
                        .any(|l| l.addr == d.addr || (l.addr.ip().is_unspecified() && l.addr.port() == d.addr.port()))
                });
                match (natural, options.fallback) {
                    (Some(d), _) if !is_self => d,
                    (_, Some(d)) => d,
                    (_, None) if is_self => return self.answer_upstream(now, req, 482, Some("the request is addressed to this proxy")),
                    (_, None) => return self.answer_upstream(now, req, 503, Some("cannot resolve the target (IP addresses only)")),
                }
            }
        };
        let Some(listener) = self.locals.for_transport(dest.transport).cloned() else {
            return self.answer_upstream(now, req, 503, Some("no listener for the target's transport"));
        };
        let branch = self.layer.client_branch(self.ids.u64());
        let service_name = self.service_name(service);
        let record_route = record_route_parts(&listener, service_name);
        let record_route = (options.record_route && method != Method::Ack).then_some(&record_route[..]);
        let request_uri = options.request_uri.unwrap_or_else(|| msg.request_uri_text());
        let forwarded = forwarded_request(msg, request_uri, &listener, &branch, max_forwards - 1, record_route, req.consumed_route);
        let flow = Flow { transport: dest.transport, listener: listener.index, connection: 0, remote: dest.addr };
        self.metrics.message_out(Some(&method), None, dest.transport);
        let Some(server_tx) = req.tx else {
            // ACK for a 2xx: forwarded statelessly (RFC 3261 §16.11).
            self.layer.send_stateless(forwarded, flow);
            return Ok(());
        };
        let trying = method == Method::Invite && !self.proxies.contains_key(&server_tx);
        let client_tx = self.layer.send_request(now, method.clone(), &branch, forwarded.clone(), flow);
        // The 100 only stops the caller's retransmissions (T1 = 500 ms away): it leaves after
        // the forwarded INVITE, whose departure is set-up delay, and only if nothing was
        // relayed upstream within `trying_delay` (`proxy_trying_due`).
        if trying {
            let delay = self.config.trying_delay;
            if delay.is_zero() {
                self.reply(now, server_tx, msg, 100, None);
            } else {
                self.layer.defer_trying(now, server_tx, delay);
            }
        }
        self.client_owner.insert(client_tx, ClientOwner::Proxy { server_tx: Some(server_tx) });
        self.server_owner.insert(server_tx, ServerOwner::Proxy);
        let Some(context) = self.proxies.get_or_insert_with(server_tx, || ProxyContext {
            upstream: Some(msg.clone()),
            branches: SmallVec::new(),
            final_sent: false,
            failover: None,
        }) else {
            // Only the id `send_request` returns for an ACK names no slot, never a server id.
            return Ok(());
        };
        if !options.alternatives.is_empty() {
            context.failover = Some(Box::new(Failover {
                alternatives: options.alternatives.to_vec(),
                request_uri: options.request_uri.map(str::to_owned),
                record_route: options.record_route,
                service,
                flow: req.flow,
                consumed_route: req.consumed_route,
            }));
        }
        context.branches.push(ProxyBranch { tx: client_tx, invite: (method == Method::Invite).then_some(forwarded), flow });
        Ok(())
    }

    fn service_name(&self, service: ServiceId) -> &str {
        self.service_names.get(service as usize).map_or("", String::as_str)
    }

    fn answer_upstream(&mut self, now: Instant, req: &Request<'_>, status: u16, warning: Option<&str>) -> Result<(), ContainerError> {
        match req.tx {
            Some(tx) => {
                self.reply(now, tx, req.msg, status, warning);
                Ok(())
            }
            None => {
                self.metrics.dropped(DropReason::SendFailed);
                Err(ContainerError::Unroutable)
            }
        }
    }

    /// A response on a proxied branch: relayed upstream without our Via (100 Trying is
    /// hop-by-hop; after a final response only further 2xx to an INVITE are relayed).
    pub(crate) fn proxy_relay(&mut self, now: Instant, client_tx: ClientTxId, server_tx: Option<ServerTxId>, msg: &Message) {
        let status = msg.status().unwrap_or(0);
        let Some(server_tx) = server_tx.filter(|_| status > 100) else {
            return;
        };
        let Some(context) = self.proxies.get_mut(&server_tx) else {
            self.forward_stray_response(msg);
            return;
        };
        let is_invite = msg.transaction_method() == Some(&Method::Invite);
        if status >= 200 {
            if context.final_sent && !(is_invite && status < 300) {
                return;
            }
            context.final_sent = true;
            context.upstream = None;
            for b in context.branches.iter_mut().filter(|b| b.tx == client_tx) {
                b.invite = None;
            }
        }
        let relayed = without_top_via(msg);
        self.metrics.message_out(msg.transaction_method(), Some(status), msg.top_via_transport().unwrap_or(Transport::Udp));
        self.layer.respond(now, server_tx, status, relayed, false);
    }

    /// Nothing was relayed upstream within `container.trying_delay`: the caller hears 100 Trying
    /// (RFC 3261 §17.2.1), which stops its retransmissions. The layer reports this only while
    /// nothing was sent on the transaction, so no final response went up (`upstream` is kept
    /// until one does).
    pub(crate) fn proxy_trying_due(&mut self, now: Instant, server_tx: ServerTxId) {
        let Some(upstream) = self.proxies.get(&server_tx).and_then(|c| c.upstream.clone()) else {
            return;
        };
        self.reply(now, server_tx, &upstream, 100, None);
    }

    /// A branch timed out or its transport failed: answer upstream when no branch is left.
    pub(crate) fn proxy_branch_failed(&mut self, now: Instant, client_tx: ClientTxId, server_tx: ServerTxId, status: u16) {
        let Some(context) = self.proxies.get_mut(&server_tx) else {
            return;
        };
        context.branches.retain(|b| b.tx != client_tx);
        if context.final_sent || !context.branches.is_empty() {
            return;
        }
        if let (Some(mut failover), Some(upstream)) = (context.failover.take(), context.upstream.clone()) {
            if !failover.alternatives.is_empty() {
                let next = failover.alternatives.remove(0);
                tracing::debug!(status, next = %next.addr, "branch failed, trying the next target");
                let req = Request::new(&upstream, Some(server_tx), failover.flow, crate::RequestKind::Initial, None, None)
                    .with_consumed_route(failover.consumed_route);
                let options = ProxyOptions {
                    destination: Some(next),
                    fallback: None,
                    record_route: failover.record_route,
                    request_uri: failover.request_uri.as_deref(),
                    alternatives: &failover.alternatives,
                    located: None,
                };
                if self.proxy_request(now, &req, failover.service, options).is_ok() {
                    return;
                }
            }
        }
        let Some(context) = self.proxies.get_mut(&server_tx) else {
            return;
        };
        if context.final_sent {
            return;
        }
        context.final_sent = true;
        if let Some(upstream) = context.upstream.take() {
            self.reply(now, server_tx, &upstream, status, None);
        }
    }

    /// CANCEL received for a proxied INVITE: cancel every branch without a final response.
    pub(crate) fn proxy_cancel(&mut self, now: Instant, invite_tx: ServerTxId, _cancel: &Message) {
        let Some(context) = self.proxies.get_mut(&invite_tx) else {
            return;
        };
        // A cancelled request is not retried elsewhere.
        context.failover = None;
        let pending: Vec<(Bytes, Flow)> = context.branches.iter_mut().filter_map(|b| b.invite.take().map(|i| (i, b.flow))).collect();
        for (invite, flow) in pending {
            let Ok(parsed) = tandem_sip::parse_datagram(invite, &Default::default()) else {
                continue;
            };
            let Some(branch) = parsed.branch().map(str::to_owned) else {
                continue;
            };
            let cancel = cancel_for(&parsed);
            self.metrics.message_out(Some(&Method::Cancel), None, flow.transport);
            let tx = self.layer.send_request(now, Method::Cancel, &branch, cancel, flow);
            self.client_owner.insert(tx, ClientOwner::Proxy { server_tx: None });
        }
    }

    /// A response that matched no transaction: if the top Via is ours, forward it statelessly
    /// to the next Via (RFC 3261 §16.7 and §18.2.2); otherwise drop it.
    pub(crate) fn forward_stray_response(&mut self, msg: &Message) {
        let ours = msg.top_via().is_some_and(|v| {
            let port = v.port.unwrap_or(5060);
            self.locals
                .listeners
                .iter()
                .any(|l| l.addr.port() == port && l.host_port.rsplit_once(':').is_some_and(|(h, _)| h.eq_ignore_ascii_case(v.host)))
        });
        let next = msg.values_of(HeaderName::Via).nth(1).and_then(|(_, v)| Via::parse(v)).and_then(|v| via_destination(&v));
        let (true, Some(dest)) = (ours, next) else {
            self.metrics.dropped(DropReason::Stray);
            return;
        };
        let Some(listener) = self.locals.for_transport(dest.transport) else {
            return;
        };
        let flow = Flow { transport: dest.transport, listener: listener.index, connection: 0, remote: dest.addr };
        self.metrics.message_out(msg.transaction_method(), msg.status(), dest.transport);
        self.layer.send_stateless(without_top_via(msg), flow);
    }
}

/// The destination of a request: the first Route value left, else the Request-URI.
fn next_hop_of(msg: &Message, consumed: Option<(usize, Span)>) -> Option<Destination> {
    let consumed_span = consumed.map(|(_, s)| s);
    let route = msg.route_values().find(|(_, v)| msg.span_of(v) != consumed_span).map(|(_, v)| v);
    match route {
        Some(value) => Destination::from_uri(&NameAddr::parse(value)?.uri()?),
        None => Destination::from_uri(&msg.request_uri()?),
    }
}

/// Where a response goes by a Via value: `received` and `rport` when present (RFC 3581).
fn via_destination(via: &Via<'_>) -> Option<Destination> {
    let host = via.received().unwrap_or(via.host);
    let ip = tandem_sip::SipUri { secure: false, user: None, host, port: None, params: "", headers: None }.host_ip()?;
    let port = via.rport().flatten().or(via.port).unwrap_or(5060);
    let transport = match via.transport {
        t @ (Transport::Tcp | Transport::Tls | Transport::Ws | Transport::Wss) => t,
        _ => Transport::Udp,
    };
    Some(Destination { transport, addr: std::net::SocketAddr::new(ip, port) })
}

/// Our Record-Route value, `<sip:HOST:PORT;transport=T;lr;tsvc=SERVICE>`, in parts written
/// straight into the message (a `format!` and its allocations per initial request before).
fn record_route_parts<'a>(listener: &'a LocalListener, service_name: &'a str) -> [&'a str; 7] {
    ["<sip:", &listener.host_port, ";transport=", listener.transport.as_lowercase_str(), ";lr;tsvc=", service_name, ">"]
}

/// The request as forwarded: our Via on top, Record-Route when asked, Max-Forwards
/// decremented, the Route value that named us removed; everything else copied as received.
fn forwarded_request(
    msg: &Message,
    request_uri: &str,
    listener: &LocalListener,
    branch: &str,
    max_forwards: u32,
    record_route: Option<&[&str]>,
    consumed: Option<(usize, Span)>,
) -> Bytes {
    let method = msg.method().cloned().unwrap_or(Method::Options);
    let mut w = MessageWriter::with_capacity(msg.wire_bytes().len() + 256).request_line(&method, request_uri);
    w.header_parts("Via", &["SIP/2.0/", listener.transport.as_str(), " ", &listener.host_port, ";branch=", branch]);
    if let Some(rr) = record_route {
        w.header_parts("Record-Route", rr);
    }
    if spliced_headers(&mut w, msg, max_forwards, consumed).is_some() {
        return w.into_bytes();
    }
    copied_headers(w, msg, max_forwards, consumed)
}

/// The header section and body of a forwarded request, header by header: any shape.
fn copied_headers(mut w: MessageWriter, msg: &Message, max_forwards: u32, consumed: Option<(usize, Span)>) -> Bytes {
    let mut wrote_max_forwards = false;
    let headers = msg.headers();
    // Headers copied as received, in runs between the ones rewritten here.
    let mut run_start = 0;
    for (i, h) in headers.iter().enumerate() {
        let consumed_route = h.name == HeaderName::Route && consumed.is_some_and(|(index, _)| index == i);
        if !matches!(h.name, HeaderName::ContentLength | HeaderName::MaxForwards) && !consumed_route {
            continue;
        }
        w.copy_header_run(msg, headers.get(run_start..i).unwrap_or_default());
        run_start = i + 1;
        match h.name {
            HeaderName::ContentLength => {}
            HeaderName::MaxForwards => {
                w.header_u32("Max-Forwards", max_forwards);
                wrote_max_forwards = true;
            }
            _ => {
                let rest = remaining_values(msg, h.value, consumed.map(|(_, s)| s).unwrap_or_default());
                if !rest.is_empty() {
                    w.header("Route", rest);
                }
            }
        }
    }
    w.copy_header_run(msg, headers.get(run_start..).unwrap_or_default());
    if !wrote_max_forwards {
        w.header_u32("Max-Forwards", max_forwards);
    }
    w.finish_with_body(None, &msg.body())
}

/// A header value without its first comma-separated value `first`.
fn remaining_values(msg: &Message, value: Span, first: Span) -> &str {
    let rest = msg.text(Span { start: first.end.min(value.end), end: value.end });
    rest.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace())
}

/// A response with its top Via value removed (for relaying upstream).
fn without_top_via(msg: &Message) -> Bytes {
    without_top_via_line(msg).unwrap_or_else(|| rebuild_without_top_via(msg))
}

/// [`without_top_via`] header by header: any shape.
fn rebuild_without_top_via(msg: &Message) -> Bytes {
    let top = msg.top_via_location();
    let mut w = MessageWriter::with_capacity(msg.wire_bytes().len()).status_line(msg.status().unwrap_or(500), msg.reason());
    let headers = msg.headers();
    // Headers copied as received, in runs between the ones rewritten here.
    let mut run_start = 0;
    for (i, h) in headers.iter().enumerate() {
        let top_via = match top {
            Some((index, first)) if h.name == HeaderName::Via && index == i => Some(first),
            _ => None,
        };
        if h.name != HeaderName::ContentLength && top_via.is_none() {
            continue;
        }
        w.copy_header_run(msg, headers.get(run_start..i).unwrap_or_default());
        run_start = i + 1;
        if let Some(first) = top_via {
            let rest = remaining_values(msg, h.value, first);
            if !rest.is_empty() {
                w.header("Via", rest);
            }
        }
    }
    w.copy_header_run(msg, headers.get(run_start..).unwrap_or_default());
    w.finish_with_body(None, &msg.body())
}

/// [`without_top_via`] for the usual shapes, by splicing: when the response gives its
/// Content-Length (the parser checked it against the body), the relayed response is the
/// received bytes without our Via value. Rebuilding it header by header cost ~1k
/// instructions more per response (`bench/proxy_instructions.sh`).
fn without_top_via_line(msg: &Message) -> Option<Bytes> {
    msg.content_length()?;
    let (index, first) = msg.top_via_location()?;
    let (cut_start, cut_end) = first_value_cut(msg, index, HeaderName::Via, first)?;
    let wire = msg.wire_bytes();
    let mut w = MessageWriter::with_capacity(wire.len());
    write_spliced(&mut w, &wire, 0, &[(cut_start, cut_end, b"")])?;
    Some(w.into_bytes())
}

/// The request's header section and body, spliced after what `w` holds: copied as received
/// but for the Max-Forwards value (now `max_forwards`) and the `consumed` Route value. `None`
/// (nothing written) when the request lacks Max-Forwards or Content-Length: the caller then
/// copies header by header, adding them. Copying header by header cost ~0.6k instructions
/// more per request (`bench/proxy_instructions.sh`).
fn spliced_headers(w: &mut MessageWriter, msg: &Message, max_forwards: u32, consumed: Option<(usize, Span)>) -> Option<()> {
    msg.content_length()?;
    let headers = msg.headers();
    let max_forwards_value = headers.iter().find(|h| h.name == HeaderName::MaxForwards)?.value;
    let route_cut = match consumed {
        Some((index, value)) => Some(first_value_cut(msg, index, HeaderName::Route, value)?),
        None => None,
    };
    let mut digits = itoa::Buffer::new();
    let mut edits: SmallVec<[(usize, usize, &[u8]); 2]> = SmallVec::new();
    edits.push((max_forwards_value.start as usize, max_forwards_value.end as usize, digits.format(max_forwards).as_bytes()));
    if let Some((start, end)) = route_cut {
        edits.push((start, end, b""));
    }
    edits.sort_unstable_by_key(|e| e.0);
    write_spliced(w, &msg.wire_bytes(), headers.first()?.name_span.start as usize, &edits)
}

/// Writes `wire[from..]` with each `(start, end, replacement)` edit applied. `None`, with
/// nothing written, unless the edits are in order, do not overlap and lie in `from..`.
fn write_spliced(w: &mut MessageWriter, wire: &[u8], from: usize, edits: &[(usize, usize, &[u8])]) -> Option<()> {
    let mut pos = from;
    // Checked before anything is written, so that `None` leaves `w` as it was.
    if edits.iter().any(|&(start, end, _)| start < pos || end < start || end > wire.len()) || edits.windows(2).any(|e| e[0].1 > e[1].0) {
        return None;
    }
    for &(start, end, replacement) in edits {
        w.raw(wire.get(pos..start)?).raw(replacement);
        pos = end;
    }
    w.raw(wire.get(pos..)?);
    Some(())
}

/// The bytes to cut to remove the first value `value` of header `index` (of kind `name`):
/// its whole line when it is the header's only value, else the value and the comma and white
/// space after it (SIPp's `[last_Via:]` puts every Via value on one line).
fn first_value_cut(msg: &Message, index: usize, name: HeaderName, value: Span) -> Option<(usize, usize)> {
    let header = msg.headers().get(index).filter(|h| h.name == name && h.value.start == value.start)?;
    if header.value == value {
        let value_end = header.value.end as usize;
        let line_end = value_end + msg.buffer().get(value_end..)?.iter().position(|c| *c == b'\n')? + 1;
        return Some((header.name_span.start as usize, line_end));
    }
    let rest = remaining_values(msg, header.value, value);
    Some((value.start as usize, msg.span_of(rest).filter(|_| !rest.is_empty())?.start as usize))
}

/// CANCEL for a forwarded INVITE (RFC 3261 §9.1): same Request-URI, Call-ID, From, To, CSeq
/// number, the single top Via, and the Route headers.
pub(crate) fn cancel_for(invite: &Message) -> Bytes {
    let mut w = MessageWriter::with_capacity(512).request_line(&Method::Cancel, invite.request_uri_text());
    if let Some((index, first)) = invite.top_via_location() {
        let _ = index;
        w.header("Via", invite.text(first));
    }
    w.header_u32("Max-Forwards", 70);
    w.copy_headers_named(invite, HeaderName::Route);
    w.copy_headers_named(invite, HeaderName::From);
    w.copy_headers_named(invite, HeaderName::To);
    w.copy_headers_named(invite, HeaderName::CallId);
    let seq = invite.cseq().map_or(0, |c| c.seq);
    w.header_parts("CSeq", &[itoa::Buffer::new().format(seq), " CANCEL"]);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Message {
        tandem_sip::parse_datagram(Bytes::from(s.replace('\n', "\r\n")), &Default::default()).unwrap()
    }

    fn listener() -> LocalListener {
        LocalListener { index: 0, transport: Transport::Udp, addr: "127.0.0.1:5060".parse().unwrap(), host_port: "127.0.0.1:5060".into() }
    }

    #[test]
    fn forwarding_rewrites_only_what_a_proxy_must() {
        let msg = parse("INVITE sip:bob@127.0.0.1:5070 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nRoute: <sip:127.0.0.1:5060;lr>, <sip:10.0.0.9;lr>\nMax-Forwards: 5\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>\nCall-ID: c\nCSeq: 1 INVITE\nContent-Type: application/sdp\nContent-Length: 4\n\nv=0\n");
        let (index, value) = msg.route_values().next().unwrap();
        let consumed = Some((index, msg.span_of(value).unwrap()));
        let out =
            forwarded_request(&msg, msg.request_uri_text(), &listener(), "z9hG4bKnew", 4, Some(&["<sip:127.0.0.1:5060;lr>"]), consumed);
        let fwd = tandem_sip::parse_datagram(out, &Default::default()).unwrap();
        assert_eq!(fwd.defect(), None);
        assert_eq!(fwd.branch(), Some("z9hG4bKnew"));
        assert_eq!(fwd.via_header_count(), 2);
        assert_eq!(fwd.max_forwards(), Some(4));
        assert_eq!(fwd.route_values().map(|(_, v)| v).collect::<Vec<_>>(), vec!["<sip:10.0.0.9;lr>"]);
        assert_eq!(fwd.header(HeaderName::RecordRoute), Some("<sip:127.0.0.1:5060;lr>"));
        assert_eq!(&fwd.body()[..], b"v=0\r");
        assert_eq!(next_hop_of(&msg, consumed).unwrap().addr, "10.0.0.9:5060".parse().unwrap());
    }

    /// A message's headers in order, as (name, value), without those named in `skip`.
    fn headers_except(m: &Message, skip: &[HeaderName]) -> Vec<(String, String)> {
        m.headers().iter().filter(|h| !skip.contains(&h.name)).map(|h| (format!("{:?}", h.name), m.header_value(h).to_owned())).collect()
    }

    /// The spliced header section and the copied one carry the same request: every header
    /// but the consumed Route value in order, Max-Forwards decremented, Content-Length, body.
    #[test]
    fn spliced_forwarding_is_the_copied_one() {
        let requests = [
            "INVITE sip:bob@127.0.0.1:5070 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nRoute: <sip:127.0.0.1:5060;lr>, <sip:10.0.0.9;lr>\nMax-Forwards: 5\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>\nCall-ID: c\nCSeq: 1 INVITE\nContent-Type: application/sdp\nContent-Length: 4\n\nv=0\n",
            "BYE sip:bob@127.0.0.1:5070 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nRoute: <sip:127.0.0.1:5060;lr>\nRoute: <sip:10.0.0.9;lr>\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 2 BYE\nl: 0\nMax-Forwards:   70  \n\n",
            "ACK sip:bob@127.0.0.1:5070 SIP/2.0\nMax-Forwards: 1\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 1 ACK\nContent-Length: 0\n\ntrailing bytes past Content-Length",
        ];
        let view = |m: &Message| {
            let headers = headers_except(m, &[HeaderName::ContentLength, HeaderName::MaxForwards]);
            (m.method().cloned(), m.request_uri_text().to_owned(), headers, m.max_forwards(), m.content_length(), m.body())
        };
        for text in requests {
            let msg = parse(text);
            let consumed = msg.route_values().next().map(|(index, value)| (index, msg.span_of(value).unwrap()));
            let start = || {
                let mut w = MessageWriter::with_capacity(512).request_line(msg.method().unwrap(), msg.request_uri_text());
                w.header("Via", "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKnew");
                w
            };
            let max_forwards = msg.max_forwards().unwrap() - 1;
            let mut w = start();
            spliced_headers(&mut w, &msg, max_forwards, consumed).expect("the usual shape is spliced");
            let forwarded = |b: Bytes| tandem_sip::parse_datagram(b, &Default::default()).unwrap();
            let (s, c) = (forwarded(w.into_bytes()), forwarded(copied_headers(start(), &msg, max_forwards, consumed)));
            assert_eq!(s.defect(), None, "{text}");
            assert_eq!(view(&s), view(&c), "{text}");
            assert_eq!(s.max_forwards(), Some(max_forwards));
            assert_eq!(s.branch(), Some("z9hG4bKnew"));
        }
        // No Max-Forwards (or no Content-Length): copied, with them added; nothing was spliced.
        let without = parse("OPTIONS sip:bob@127.0.0.1:5070 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>\nCall-ID: c\nCSeq: 1 OPTIONS\nContent-Length: 0\n\n");
        let mut w = MessageWriter::with_capacity(64);
        assert!(spliced_headers(&mut w, &without, 69, None).is_none());
        assert!(w.into_bytes().is_empty());
        let out = forwarded_request(&without, without.request_uri_text(), &listener(), "z9hG4bKnew", 69, None, None);
        assert_eq!(tandem_sip::parse_datagram(out, &Default::default()).unwrap().max_forwards(), Some(69));
    }

    #[test]
    fn record_route_value_as_before() {
        let l = listener();
        for t in [
            Transport::Udp,
            Transport::Tcp,
            Transport::Tls,
            Transport::Sctp,
            Transport::Ws,
            Transport::Wss,
            Transport::InProc,
            Transport::Other,
        ] {
            assert_eq!(t.as_lowercase_str(), t.as_str().to_ascii_lowercase());
        }
        let formatted = format!("<sip:{};transport={};lr;tsvc={}>", l.host_port, l.transport.as_str().to_ascii_lowercase(), "proxy");
        assert_eq!(record_route_parts(&l, "proxy").concat(), formatted);
    }

    #[test]
    fn relaying_removes_our_via_value_only() {
        let msg = parse("SIP/2.0 180 Ringing\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp, SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 1 INVITE\nContent-Length: 0\n\n");
        let out = tandem_sip::parse_datagram(without_top_via(&msg), &Default::default()).unwrap();
        assert_eq!(out.branch(), Some("z9hG4bKa"));
        assert_eq!(out.status(), Some(180));
        let via = Via::parse("SIP/2.0/UDP 192.0.2.1:5062;received=127.0.0.1;rport=40000;branch=z9hG4bKx").unwrap();
        assert_eq!(via_destination(&via).unwrap().addr, "127.0.0.1:40000".parse().unwrap());
    }

    /// The spliced relay and the rebuilt one carry the same response: status, every header
    /// but our Via value in order, Content-Length and body; the splice keeps the bytes as
    /// received.
    #[test]
    fn spliced_relay_is_the_rebuilt_one() {
        let responses = [
            "SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 1 INVITE\nContent-Type: application/sdp\nContent-Length: 4\n\nv=0\n",
            "SIP/2.0 180 Ringing\nFrom: <sip:a@x>;tag=1\nv:   SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp  \nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nTo: <sip:bob@y>;tag=2\nl: 0\nCall-ID: c\nCSeq: 1 INVITE\n\n",
            "SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp , SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa,SIP/2.0/TCP h;branch=z9hG4bKb\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 1 INVITE\nContent-Length: 0\n\n",
            "SIP/2.0 486 Busy Here\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 1 INVITE\nContent-Length: 0\n\ntrailing bytes past Content-Length",
        ];
        let view = |m: &Message| {
            (m.status(), m.reason().to_owned(), headers_except(m, &[HeaderName::ContentLength]), m.content_length(), m.body())
        };
        for text in responses {
            let msg = parse(text);
            let spliced = without_top_via_line(&msg).expect("the usual shape is spliced");
            let relayed = |b: Bytes| tandem_sip::parse_datagram(b, &Default::default()).unwrap();
            let (s, r) = (relayed(spliced.clone()), relayed(rebuild_without_top_via(&msg)));
            assert_eq!(s.defect(), None);
            assert_eq!(view(&s), view(&r), "{text}");
            assert_eq!(s.branch(), Some("z9hG4bKa"));
            assert!(!String::from_utf8_lossy(&spliced).contains("z9hG4bKp"));
        }
        // No Content-Length (allowed over UDP): rebuilt, with one.
        let without_length = parse("SIP/2.0 180 Ringing\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>;tag=2\nCall-ID: c\nCSeq: 1 INVITE\n\n");
        assert!(without_length.content_length().is_none() && without_top_via_line(&without_length).is_none());
        assert_eq!(tandem_sip::parse_datagram(without_top_via(&without_length), &Default::default()).unwrap().content_length(), Some(0));
    }

    #[test]
    fn cancel_mirrors_the_invite() {
        let invite = parse("INVITE sip:bob@127.0.0.1:5070 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKp\nVia: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKa\nFrom: <sip:a@x>;tag=1\nTo: <sip:bob@y>\nCall-ID: c\nCSeq: 7 INVITE\nContent-Length: 0\n\n");
        let cancel = tandem_sip::parse_datagram(cancel_for(&invite), &Default::default()).unwrap();
        assert_eq!(cancel.defect(), None);
        assert_eq!((cancel.branch(), cancel.via_header_count()), (Some("z9hG4bKp"), 1));
        assert_eq!(cancel.cseq().map(|c| (c.seq, c.method.clone())), Some((7, Method::Cancel)));
        assert_eq!(cancel.request_uri_text(), "sip:bob@127.0.0.1:5070");
    }
}
