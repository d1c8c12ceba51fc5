//! The RFC 3261 §17 transaction layer, updated by RFC 6026, as a deterministic state machine.
//!
//! Like `quinn-proto`, this crate does no I/O and never reads the clock: the runtime feeds it
//! received messages and the current time, and drains what it must send ([`Transmit`]), what
//! the transaction user must hear of ([`Event`]) and when it next wants to be woken
//! ([`TransactionLayer::next_timeout`]). Replaying the same inputs gives the same outputs, which
//! the replication work depends on.
//!
//! Memory is bounded on purpose: a transaction keeps only what it may have to retransmit (its
//! request until a final response; its last response while absorbing retransmissions; the ACK
//! of a non-2xx final response) and forgets the rest.
//!
//! # Behaviour
//!
//! - Server matching (§17.2.3): branch (magic cookie plus at least one character) + top Via
//!   sent-by + method, ACK matching its INVITE; otherwise (RFC 2543) Call-ID + CSeq number +
//!   From tag + sent-by + method. Branches and hosts compare case-insensitively (§7.3.1).
//!   Client matching (§17.1.3): top Via branch + CSeq method.
//! - Reliable transports: no Timer A, E or G; Timers D, I, J and K are zero, so the
//!   transaction ends at once. Timers B, F, H, L and M run on every transport.
//! - Timer D is `max(32 s, 64*T1)` on unreliable transports (32 s with the default T1).
//! - The UAS 2xx retransmission asked with `retransmit_2xx` runs on every transport (§13.3.1.4:
//!   "independent of whatever transport protocols are used").
//! - An INVITE client transaction passes every 2xx up, in Accepted and also in Completed (a
//!   2xx after a non-2xx final response still makes a dialog the TU must ACK and end).
//! - The layer sends no automatic 100 Trying for INVITE: the TU does, at once or when
//!   [`Event::TryingDue`] says that it asked for a deferred one
//!   ([`TransactionLayer::defer_trying`]) and responded with nothing meanwhile.
//! - Timers live in one queue with lazy deletion; [`TransactionLayer::next_timeout`] is always
//!   the earliest live deadline. Ties fire in a fixed order (a transaction's timeout before
//!   its retransmission, then insertion order), so replays fire identically.
#![forbid(unsafe_code)]

mod key;
mod slab;
#[cfg(test)]
mod tests;
mod timer;
mod tx_map;

pub use tx_map::{TxKey, TxMap};

use bytes::Bytes;
use griddle::hash_map::RawEntryMut;
use griddle::HashMap;
use slab::Slab;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_sip::{Flow, HeaderName, Message, MessageWriter, Method, ParseLimits};
use timer::{Kind, Side, Slots, Timers};
use tracing::{debug, trace};

/// RFC 3261 timer values (Table 4).
#[derive(Debug, Clone, Copy)]
pub struct TimerConfig {
    pub t1: Duration,
    pub t2: Duration,
    pub t4: Duration,
}

impl Default for TimerConfig {
    fn default() -> Self {
        TimerConfig { t1: Duration::from_millis(500), t2: Duration::from_secs(4), t4: Duration::from_secs(5) }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub timers: TimerConfig,
    /// Upper bound on live transactions (server + client). Beyond it, new server transactions
    /// are refused: [`Received::Overloaded`], for which the runtime answers 503 statelessly.
    pub max_transactions: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { timers: TimerConfig::default(), max_transactions: 200_000 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerTxId(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientTxId(pub u64);

/// Bytes to send on a flow.
#[derive(Debug, Clone)]
pub struct Transmit {
    pub flow: Flow,
    pub payload: Bytes,
}

/// What a received message means for the transaction user (TU).
#[derive(Debug)]
pub enum Received {
    /// A request for the TU. `tx` is the new server transaction (`None` for an ACK, which has
    /// none: an ACK to a 2xx is passed up; an ACK to a non-2xx final response is absorbed).
    /// For a CANCEL, `cancels` names the INVITE server transaction it matches, if any.
    Request { tx: Option<ServerTxId>, msg: Message, flow: Flow, cancels: Option<ServerTxId> },
    /// A response that matched a client transaction and must go to the TU (provisional, the
    /// first final, and every 2xx to an INVITE: RFC 6026 passes 2xx retransmissions up).
    Response { tx: ClientTxId, msg: Message, flow: Flow },
    /// A response that matched no client transaction (RFC 3261 §18.1.2: a proxy forwards it
    /// statelessly; a UA core may use it to re-ACK a retransmitted 2xx).
    StrayResponse { msg: Message, flow: Flow },
    /// A retransmission handled inside the layer (a response may have been re-sent).
    Absorbed,
    /// No room for another transaction: the runtime should answer 503 statelessly.
    Overloaded { msg: Message, flow: Flow },
}

/// [`Received`] without the message, from [`TransactionLayer::on_message_ref`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    Request { tx: Option<ServerTxId>, cancels: Option<ServerTxId> },
    Response { tx: ClientTxId },
    StrayResponse,
    Absorbed,
    Overloaded,
}

/// Things the TU must learn of outside a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Timer B or F fired: the client transaction got no final response (the TU acts as if
    /// it had received a 408).
    ClientTimeout { tx: ClientTxId },
    /// Sending on the transaction's flow failed (reported through
    /// [`TransactionLayer::transport_error`]): the TU acts as if it had received a 503.
    ClientTransportError { tx: ClientTxId },
    /// A 2xx sent with [`TransactionLayer::respond`] on an INVITE server transaction was not
    /// acknowledged within 64*T1 (RFC 3261 §13.3.1.4): the UAS should end the dialog with BYE.
    AckTimeout { tx: ServerTxId },
    /// A server transaction ended (for TUs that track them, e.g. a proxy's response context).
    ServerTerminated { tx: ServerTxId },
    /// A client transaction ended.
    ClientTerminated { tx: ClientTxId },
    /// The delay given to [`TransactionLayer::defer_trying`] passed and the INVITE server
    /// transaction has sent no response yet: the TU should send its 100 Trying now.
    TryingDue { tx: ServerTxId },
}

/// Timer D's floor on unreliable transports (RFC 3261 Table 4: "> 32 s for UDP").
const TIMER_D_MIN: Duration = Duration::from_secs(32);
/// Floor of a retransmission interval, so that a zero T1 cannot make `on_timeout` spin.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Server transaction states (RFC 3261 §17.2, with RFC 6026's Accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    /// Non-INVITE, no response sent yet.
    Trying,
    Proceeding,
    Completed,
    /// INVITE only: the ACK of a non-2xx final response arrived.
    Confirmed,
    /// INVITE only: a 2xx was sent.
    Accepted,
}

/// Where a UAS 2xx retransmission (RFC 3261 §13.3.1.4) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckWait {
    /// No 2xx retransmission was asked for.
    NotAsked,
    Waiting,
    Received,
}

struct ServerTx {
    key: Arc<str>,
    flow: Flow,
    invite: bool,
    state: ServerState,
    ack: AckWait,
    /// What a retransmitted request (or Timer G / the 2xx timer) re-sends; `None` when nothing
    /// is to be re-sent any more.
    last_response: Option<Bytes>,
    interval: Duration,
    timers: Slots,
}

/// Client transaction states (RFC 3261 §17.1, with RFC 6026's Accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    /// INVITE, no response yet.
    Calling,
    /// Non-INVITE, no response yet.
    Trying,
    Proceeding,
    Completed,
    /// INVITE only: a 2xx arrived.
    Accepted,
}

impl ClientState {
    fn awaits_final(self) -> bool {
        matches!(self, ClientState::Calling | ClientState::Trying | ClientState::Proceeding)
    }
}

struct ClientTx {
    key: Arc<str>,
    /// In `client_index`: its branch does not name it ([`TransactionLayer::client_branch`]).
    indexed: bool,
    flow: Flow,
    invite: bool,
    state: ClientState,
    /// Kept until a final response: for retransmissions (unreliable transports) and, for an
    /// INVITE, to build the ACK of a non-2xx final response.
    request: Option<Bytes>,
    /// The ACK of a non-2xx final response, re-sent on each retransmission of that response.
    ack: Option<Bytes>,
    interval: Duration,
    timers: Slots,
}

/// The transaction layer of one executor. Not `Sync`: each executor owns one.
pub struct TransactionLayer {
    config: Config,
    server: Slab<ServerTx>,
    // foldhash, seeded per process: SipHash was 3 % of a proxied call; keys come from the
    // network, so the seed stays random.
    server_index: HashMap<Arc<str>, u64, foldhash::fast::RandomState>,
    client: Slab<ClientTx>,
    /// Client transactions whose branch does not name them (a CANCEL shares its INVITE's
    /// branch; a branch not made by [`Self::client_branch`]).
    client_index: HashMap<Arc<str>, u64, foldhash::fast::RandomState>,
    timers: Timers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    retransmissions: u64,
    /// Reused to build the key of every received message without allocating.
    scratch: String,
}

impl TransactionLayer {
    pub fn new(config: Config) -> Self {
        TransactionLayer {
            config,
            server: Slab::new(),
            server_index: HashMap::default(),
            client: Slab::new(),
            client_index: HashMap::default(),
            timers: Timers::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            retransmissions: 0,
            scratch: String::with_capacity(256),
        }
    }

    /// Feeds a received, defect-free message (requests and responses).
    pub fn on_message(&mut self, now: Instant, msg: Message, flow: Flow) -> Received {
        match self.on_message_ref(now, &msg, flow) {
            Matched::Request { tx, cancels } => Received::Request { tx, msg, flow, cancels },
            Matched::Response { tx } => Received::Response { tx, msg, flow },
            Matched::StrayResponse => Received::StrayResponse { msg, flow },
            Matched::Absorbed => Received::Absorbed,
            Matched::Overloaded => Received::Overloaded { msg, flow },
        }
    }

    /// [`Self::on_message`] for a TU that keeps the message: the same verdict, without moving
    /// the message in and out (a few hundred bytes copied twice per message).
    pub fn on_message_ref(&mut self, now: Instant, msg: &Message, flow: Flow) -> Matched {
        let matched = if msg.is_request() { self.on_request(now, msg, flow) } else { self.on_response(now, msg) };
        self.settle_timers();
        matched
    }

    /// Sends a response on a server transaction. For an INVITE server transaction and a 2xx,
    /// `retransmit_2xx` asks the layer to retransmit it (T1 doubling up to T2) until
    /// [`Self::ack_received`] or 64*T1 ([`Event::AckTimeout`]) — what a UAS core must do; a proxy
    /// forwarding a 2xx passes `false`. The retransmission happens on every transport, reliable
    /// ones included, as RFC 3261 §13.3.1.4 asks (the ACK is end to end). A response for an
    /// unknown or ended transaction is dropped (with a debug log): stateless responses go
    /// through [`Self::send_stateless`].
    ///
    /// An INVITE server transaction takes provisional responses and one final response; once
    /// it is Accepted, further 2xx responses (retransmissions by the TU, or 2xx from other
    /// branches that a proxy forwards) are sent too (RFC 6026 §7.1). Anything else is ignored.
    pub fn respond(&mut self, now: Instant, tx: ServerTxId, status: u16, response: Bytes, retransmit_2xx: bool) {
        self.respond_inner(now, tx.0, status, response, retransmit_2xx);
        self.settle_timers();
    }

    /// The UAS core got the ACK for the 2xx sent on `tx`: stop retransmitting it.
    pub fn ack_received(&mut self, tx: ServerTxId) {
        match self.server.get_mut(tx.0) {
            // Also before any retransmission was asked for: a later request for one is moot.
            Some(stx) if stx.state == ServerState::Accepted && stx.ack != AckWait::Received => {
                trace!(tx = tx.0, "2xx acknowledged");
                stx.ack = AckWait::Received;
                stx.last_response = None;
                self.timers.disarm(&mut stx.timers, Kind::Retransmit);
            }
            _ => trace!(tx = tx.0, "ack_received: no 2xx awaiting an ACK"),
        }
        self.settle_timers();
    }

    /// Asks for [`Event::TryingDue`] at `now + delay` unless a response is sent on `tx` first:
    /// a TU that expects a response soon (a proxy whose callee usually rings or answers at once)
    /// sends a 100 Trying only when none came. RFC 3261 §17.2.1 lets an INVITE server
    /// transaction omit the 100 when the TU responds within 200 ms, so `delay` should stay
    /// below that. Ignored unless `tx` is an INVITE server transaction that has sent nothing.
    pub fn defer_trying(&mut self, now: Instant, tx: ServerTxId, delay: Duration) {
        match self.server.get_mut(tx.0) {
            // A Proceeding INVITE transaction has no retransmission timer (G starts in
            // Completed, the 2xx one in Accepted): its slot holds the deadline meanwhile.
            Some(stx) if stx.invite && stx.state == ServerState::Proceeding && stx.last_response.is_none() => {
                self.timers.arm(&mut stx.timers, Kind::Retransmit, Side::Server, tx.0, now, delay);
            }
            _ => trace!(tx = tx.0, "defer_trying: not an INVITE transaction awaiting its first response"),
        }
        self.settle_timers();
    }

    /// A branch for the request of the next client transaction ([`Self::send_request`]): it
    /// names that transaction, so that its responses find it without a hash-table look-up.
    /// `unique` makes it unique across space and time (RFC 3261 §8.1.1.7): a random number
    /// from the caller's seeded source. Any other branch works too, through a table.
    pub fn client_branch(&self, unique: u64) -> String {
        key::client_branch(unique, self.client.next_id())
    }

    /// Starts a client transaction for `request` (already serialized, with its top Via and
    /// `branch`). INVITE gets an INVITE client transaction; ACK must not come here (see
    /// [`Self::send_stateless`]): an ACK given here is sent statelessly and the id returned
    /// names no transaction.
    pub fn send_request(&mut self, now: Instant, method: Method, branch: &str, request: Bytes, flow: Flow) -> ClientTxId {
        if method == Method::Ack {
            debug!("send_request given an ACK: sent statelessly");
            self.send_stateless(request, flow);
            return ClientTxId(slab::DEAD_ID);
        }
        let timers = self.config.timers;
        let invite = method == Method::Invite;
        let reliable = flow.is_reliable();
        key::client_key(&mut self.scratch, method.as_str(), branch);
        let key: Arc<str> = Arc::from(self.scratch.as_str());
        // A branch from `client_branch` names this transaction unless another started between
        // (or it is a CANCEL's, whose branch names its INVITE's transaction).
        let indexed = key::branch_id(branch) != Some(self.client.next_id());
        let id = self.client.insert(ClientTx {
            key: key.clone(),
            indexed,
            flow,
            invite,
            state: if invite { ClientState::Calling } else { ClientState::Trying },
            // A reliable non-INVITE never needs its request again.
            request: (invite || !reliable).then(|| request.clone()),
            ack: None,
            interval: timers.t1,
            timers: Slots::default(),
        });
        if indexed {
            if let Some(previous) = self.client_index.insert(key, id) {
                debug!(previous, id, "client transaction key already in use: the new transaction takes it over");
            }
        }
        trace!(tx = id, %method, branch, "client transaction started");
        self.transmits.push_back(Transmit { flow, payload: request });
        if let Some(tx) = self.client.get_mut(id) {
            // Timer B or F.
            self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Client, id, now, timers.t1.saturating_mul(64));
            if !reliable {
                // Timer A or E.
                self.timers.arm(&mut tx.timers, Kind::Retransmit, Side::Client, id, now, timers.t1.max(MIN_INTERVAL));
            }
        }
        self.settle_timers();
        ClientTxId(id)
    }

    /// Sends bytes outside any transaction: ACK for a 2xx, statelessly forwarded responses and
    /// requests, stateless error responses.
    pub fn send_stateless(&mut self, payload: Bytes, flow: Flow) {
        self.transmits.push_back(Transmit { flow, payload });
    }

    /// The runtime could not send on `flow` (connection refused, no route, ...).
    ///
    /// Hits the transactions whose flow equals `flow` exactly: a transaction started on a
    /// connection-oriented flow without a connection (`connection: 0`) is reached by reporting
    /// that flow too. Costs a scan of all transactions (a rare event).
    pub fn transport_error(&mut self, _now: Instant, flow: Flow) {
        let clients: Vec<u64> = self.client.iter().filter(|(_, tx)| tx.state.awaits_final() && tx.flow == flow).map(|(id, _)| id).collect();
        let servers: Vec<u64> = self.server.iter().filter(|(_, tx)| tx.flow == flow).map(|(id, _)| id).collect();
        debug!(?flow, clients = clients.len(), servers = servers.len(), "transport error");
        for id in clients {
            self.events.push_back(Event::ClientTransportError { tx: ClientTxId(id) });
            self.terminate_client(id);
        }
        for id in servers {
            self.terminate_server(id);
        }
        self.settle_timers();
    }

    /// Fires every timer due at `now`.
    pub fn on_timeout(&mut self, now: Instant) {
        while let Some(entry) = self.timers.pop_due(now) {
            match entry.side {
                Side::Server => self.fire_server(now, entry),
                Side::Client => self.fire_client(now, entry),
            }
        }
        self.settle_timers();
    }

    /// When [`Self::on_timeout`] should next be called.
    pub fn next_timeout(&self) -> Option<Instant> {
        // `settle_timers` keeps the top of the queue live after every mutation.
        self.timers.peek().map(|e| e.deadline)
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Live transactions, for metrics: (server, client).
    pub fn counts(&self) -> (usize, usize) {
        (self.server.len(), self.client.len())
    }

    /// Retransmissions sent so far (requests and responses), for metrics.
    pub fn retransmissions(&self) -> u64 {
        self.retransmissions
    }

    // ---- server side ----

    fn on_request(&mut self, now: Instant, msg: &Message, flow: Flow) -> Matched {
        let Some(method) = msg.method() else {
            return Matched::StrayResponse;
        };
        let is_ack = *method == Method::Ack;
        let is_invite = *method == Method::Invite;
        let is_cancel = *method == Method::Cancel;
        let key_method = if is_ack { "INVITE" } else { method.as_str() };
        key::server_key(&mut self.scratch, msg, key_method);
        // Hashed once for the look-up and, for a new transaction, the insertion.
        let hash = self.server_index.hasher().hash_one(self.scratch.as_str());
        if let Some((_, &id)) = self.server_index.raw_entry().from_key_hashed_nocheck(hash, self.scratch.as_str()) {
            return self.server_retransmission(now, id, is_ack);
        }
        if is_ack {
            trace!("ACK matching no server transaction: to the TU");
            return Matched::Request { tx: None, cancels: None };
        }
        if self.server.len() + self.client.len() >= self.config.max_transactions {
            debug!(limit = self.config.max_transactions, "transaction limit reached: request refused");
            return Matched::Overloaded;
        }
        let key: Arc<str> = Arc::from(self.scratch.as_str());
        let cancels = if is_cancel {
            key::server_key(&mut self.scratch, msg, "INVITE");
            self.server_index.get(self.scratch.as_str()).map(|&id| ServerTxId(id))
        } else {
            None
        };
        let id = self.server.insert(ServerTx {
            key: key.clone(),
            flow,
            invite: is_invite,
            state: if is_invite { ServerState::Proceeding } else { ServerState::Trying },
            ack: AckWait::NotAsked,
            last_response: None,
            interval: self.config.timers.t1,
            timers: Slots::default(),
        });
        match self.server_index.raw_entry_mut().from_key_hashed_nocheck(hash, &*key) {
            RawEntryMut::Vacant(entry) => {
                entry.insert_hashed_nocheck(hash, key, id);
            }
            // Not reached: the look-up above found no transaction with this key.
            RawEntryMut::Occupied(mut entry) => {
                entry.insert(id);
            }
        }
        trace!(tx = id, ?msg, "server transaction started");
        Matched::Request { tx: Some(ServerTxId(id)), cancels }
    }

    /// A request matching a live server transaction: a retransmission, or the ACK of an INVITE.
    fn server_retransmission(&mut self, now: Instant, id: u64, is_ack: bool) -> Matched {
        let t4 = self.config.timers.t4;
        let Some(tx) = self.server.get_mut(id) else {
            debug!(tx = id, "server index names a removed transaction");
            return Matched::Absorbed;
        };
        if !is_ack {
            // Proceeding: the last provisional; Completed: the final response; Accepted: the
            // 2xx when the TU asked for its retransmission. Trying/Confirmed: nothing.
            if let Some(response) = &tx.last_response {
                trace!(tx = id, "request retransmission: response re-sent");
                self.transmits.push_back(Transmit { flow: tx.flow, payload: response.clone() });
                self.retransmissions += 1;
            } else {
                trace!(tx = id, "request retransmission absorbed");
            }
            return Matched::Absorbed;
        }
        match tx.state {
            ServerState::Completed => {
                trace!(tx = id, "ACK of the non-2xx final response: Confirmed");
                tx.state = ServerState::Confirmed;
                tx.last_response = None;
                self.timers.disarm_all(&mut tx.timers);
                if tx.flow.is_reliable() {
                    // Timer I is 0 on reliable transports.
                    self.terminate_server(id);
                } else {
                    self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Server, id, now, t4);
                }
                Matched::Absorbed
            }
            // RFC 6026 §7.1: an ACK matching an Accepted transaction goes to the TU (only
            // RFC 2543 ACKs can, a 2xx's ACK having its own branch).
            ServerState::Accepted => Matched::Request { tx: None, cancels: None },
            _ => {
                trace!(tx = id, state = ?tx.state, "ACK absorbed");
                Matched::Absorbed
            }
        }
    }

    fn respond_inner(&mut self, now: Instant, id: u64, status: u16, response: Bytes, retransmit_2xx: bool) {
        let timers = self.config.timers;
        let Some(tx) = self.server.get_mut(id) else {
            debug!(tx = id, status, "response for an unknown or ended server transaction dropped");
            return;
        };
        if !(100..=699).contains(&status) {
            debug!(tx = id, status, "invalid status code: response dropped");
            return;
        }
        let provisional = status < 200;
        let success = (200..300).contains(&status);
        let reliable = tx.flow.is_reliable();
        let t1 = timers.t1.max(MIN_INTERVAL);
        let sixty_four_t1 = timers.t1.saturating_mul(64);
        let mut terminate = false;
        if tx.invite && tx.state == ServerState::Proceeding && tx.timers.get(Kind::Retransmit).deadline.is_some() {
            // The deferred 100 Trying's deadline: any response makes it moot.
            self.timers.disarm(&mut tx.timers, Kind::Retransmit);
        }
        let mut send = |payload: Bytes| self.transmits.push_back(Transmit { flow: tx.flow, payload });
        match tx.state {
            ServerState::Trying | ServerState::Proceeding if provisional => {
                send(response.clone());
                tx.state = ServerState::Proceeding;
                tx.last_response = Some(response);
            }
            ServerState::Proceeding if tx.invite && success => {
                send(response.clone());
                tx.state = ServerState::Accepted;
                self.timers.disarm_all(&mut tx.timers);
                // Timer L (RFC 6026), which also bounds the wait for the ACK.
                self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Server, id, now, sixty_four_t1);
                if retransmit_2xx {
                    tx.ack = AckWait::Waiting;
                    tx.last_response = Some(response);
                    tx.interval = t1;
                    self.timers.arm(&mut tx.timers, Kind::Retransmit, Side::Server, id, now, t1);
                } else {
                    tx.last_response = None;
                }
            }
            ServerState::Proceeding if tx.invite => {
                send(response.clone());
                tx.state = ServerState::Completed;
                tx.last_response = Some(response);
                // Timer H.
                self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Server, id, now, sixty_four_t1);
                if !reliable {
                    // Timer G.
                    tx.interval = t1;
                    self.timers.arm(&mut tx.timers, Kind::Retransmit, Side::Server, id, now, t1);
                }
            }
            ServerState::Trying | ServerState::Proceeding => {
                send(response.clone());
                tx.state = ServerState::Completed;
                if reliable {
                    // Timer J is 0 on reliable transports.
                    tx.last_response = None;
                    terminate = true;
                } else {
                    tx.last_response = Some(response);
                    self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Server, id, now, sixty_four_t1);
                }
            }
            ServerState::Accepted if success => {
                send(response.clone());
                match tx.ack {
                    AckWait::NotAsked if retransmit_2xx => {
                        tx.ack = AckWait::Waiting;
                        tx.last_response = Some(response);
                        tx.interval = t1;
                        self.timers.arm(&mut tx.timers, Kind::Retransmit, Side::Server, id, now, t1);
                    }
                    AckWait::Waiting if retransmit_2xx => tx.last_response = Some(response),
                    _ => {}
                }
            }
            state => debug!(tx = id, status, ?state, "response not allowed in this state: dropped"),
        }
        trace!(tx = id, status, state = ?tx.state, "respond");
        if terminate {
            self.terminate_server(id);
        }
    }

    fn fire_server(&mut self, now: Instant, entry: timer::Entry) {
        let t2 = self.config.timers.t2;
        let id = entry.id;
        let Some(tx) = self.server.get_mut(id) else {
            return;
        };
        if !tx.timers.is_live(&entry) {
            return;
        }
        self.timers.disarm(&mut tx.timers, entry.kind);
        match entry.kind {
            // H (Completed), I (Confirmed), J (non-INVITE Completed), L (Accepted).
            Kind::Timeout => {
                if tx.state == ServerState::Accepted && tx.ack == AckWait::Waiting {
                    debug!(tx = id, "no ACK for the 2xx within 64*T1");
                    self.events.push_back(Event::AckTimeout { tx: ServerTxId(id) });
                }
                trace!(tx = id, state = ?tx.state, "server transaction timer expired");
                self.terminate_server(id);
            }
            // G (Completed), the UAS 2xx retransmission (Accepted), or the deferred 100
            // Trying (Proceeding, nothing sent: `respond` disarms it).
            Kind::Retransmit => {
                if tx.state == ServerState::Proceeding {
                    if tx.invite && tx.last_response.is_none() {
                        trace!(tx = id, "no response yet: 100 Trying due");
                        self.events.push_back(Event::TryingDue { tx: ServerTxId(id) });
                    }
                    return;
                }
                if !matches!(tx.state, ServerState::Completed | ServerState::Accepted) {
                    return;
                }
                let Some(response) = tx.last_response.clone() else {
                    return;
                };
                trace!(tx = id, "response retransmitted");
                self.transmits.push_back(Transmit { flow: tx.flow, payload: response });
                self.retransmissions += 1;
                tx.interval = tx.interval.saturating_mul(2).min(t2).max(MIN_INTERVAL);
                self.timers.arm(&mut tx.timers, Kind::Retransmit, Side::Server, id, now, tx.interval);
            }
        }
    }

    fn terminate_server(&mut self, id: u64) {
        let Some(mut tx) = self.server.remove(id) else {
            return;
        };
        self.timers.disarm_all(&mut tx.timers);
        remove_if_names(&mut self.server_index, &tx.key, id);
        trace!(tx = id, "server transaction terminated");
        self.events.push_back(Event::ServerTerminated { tx: ServerTxId(id) });
    }

    // ---- client side ----

    fn on_response(&mut self, now: Instant, msg: &Message) -> Matched {
        let (Some(status), Some(cseq), Some(branch)) = (msg.status(), msg.cseq(), msg.branch()) else {
            trace!(?msg, "response without branch or CSeq: stray");
            return Matched::StrayResponse;
        };
        key::client_key(&mut self.scratch, cseq.method.as_str(), branch);
        let named = key::branch_id(branch).filter(|&id| self.client.get(id).is_some_and(|tx| *tx.key == *self.scratch));
        let Some(id) = named.or_else(|| self.client_index.get(self.scratch.as_str()).copied()) else {
            trace!(?msg, "response matching no client transaction: stray");
            return Matched::StrayResponse;
        };
        let Some(tx) = self.client.get_mut(id) else {
            debug!(tx = id, "client index names a removed transaction");
            return Matched::StrayResponse;
        };
        if !(100..=699).contains(&status) {
            debug!(tx = id, status, "invalid status code: response dropped");
            return Matched::Absorbed;
        }
        let timers = self.config.timers;
        let provisional = status < 200;
        let success = (200..300).contains(&status);
        let reliable = tx.flow.is_reliable();
        let mut terminate = false;
        let pass_up = if tx.invite {
            match tx.state {
                ClientState::Calling | ClientState::Proceeding if provisional => {
                    if tx.state == ClientState::Calling {
                        // Timers A and B only run in Calling.
                        tx.state = ClientState::Proceeding;
                        self.timers.disarm_all(&mut tx.timers);
                    }
                    true
                }
                ClientState::Calling | ClientState::Proceeding if success => {
                    tx.state = ClientState::Accepted;
                    tx.request = None;
                    self.timers.disarm_all(&mut tx.timers);
                    // Timer M (RFC 6026).
                    self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Client, id, now, timers.t1.saturating_mul(64));
                    true
                }
                ClientState::Calling | ClientState::Proceeding => {
                    tx.state = ClientState::Completed;
                    self.timers.disarm_all(&mut tx.timers);
                    let ack = tx.request.take().and_then(|req| build_ack(&req, msg));
                    match ack {
                        Some(ack) => {
                            self.transmits.push_back(Transmit { flow: tx.flow, payload: ack.clone() });
                            if !reliable {
                                tx.ack = Some(ack);
                            }
                        }
                        None => debug!(tx = id, "could not build the ACK: request unparsable"),
                    }
                    if reliable {
                        // Timer D is 0 on reliable transports.
                        terminate = true;
                    } else {
                        self.timers.arm(
                            &mut tx.timers,
                            Kind::Timeout,
                            Side::Client,
                            id,
                            now,
                            TIMER_D_MIN.max(timers.t1.saturating_mul(64)),
                        );
                    }
                    true
                }
                ClientState::Completed if !provisional && !success => {
                    if let Some(ack) = &tx.ack {
                        trace!(tx = id, "final response retransmission: ACK re-sent");
                        self.transmits.push_back(Transmit { flow: tx.flow, payload: ack.clone() });
                        self.retransmissions += 1;
                    }
                    false
                }
                // RFC 6026 §8.4: every 2xx goes up (they may come from different forks).
                ClientState::Completed | ClientState::Accepted if success => true,
                _ => false,
            }
        } else {
            match tx.state {
                ClientState::Trying | ClientState::Proceeding if provisional => {
                    // Timer E keeps running; from now on it fires every T2.
                    tx.state = ClientState::Proceeding;
                    true
                }
                ClientState::Trying | ClientState::Proceeding => {
                    tx.state = ClientState::Completed;
                    tx.request = None;
                    self.timers.disarm_all(&mut tx.timers);
                    if reliable {
                        // Timer K is 0 on reliable transports.
                        terminate = true;
                    } else {
                        self.timers.arm(&mut tx.timers, Kind::Timeout, Side::Client, id, now, timers.t4);
                    }
                    true
                }
                _ => false,
            }
        };
        trace!(tx = id, status, state = ?tx.state, pass_up, "response to a client transaction");
        if terminate {
            self.terminate_client(id);
        }
        if pass_up {
            Matched::Response { tx: ClientTxId(id) }
        } else {
            Matched::Absorbed
        }
    }

    fn fire_client(&mut self, now: Instant, entry: timer::Entry) {
        let timers = self.config.timers;
        let id = entry.id;
        let Some(tx) = self.client.get_mut(id) else {
            return;
        };
        if !tx.timers.is_live(&entry) {
            return;
        }
        self.timers.disarm(&mut tx.timers, entry.kind);
        match entry.kind {
            // B, F (awaiting a final response), D, K, M.
            Kind::Timeout => {
                if tx.state.awaits_final() {
                    debug!(tx = id, "client transaction timed out");
                    self.events.push_back(Event::ClientTimeout { tx: ClientTxId(id) });
                }
                trace!(tx = id, state = ?tx.state, "client transaction timer expired");
                self.terminate_client(id);
            }
            // A (Calling), E (Trying, Proceeding).
            Kind::Retransmit => {
                let retransmitting = if tx.invite { tx.state == ClientState::Calling } else { tx.state.awaits_final() };
                if !retransmitting {
                    return;
                }
                let Some(request) = tx.request.clone() else {
                    return;
                };
                trace!(tx = id, "request retransmitted");
                self.transmits.push_back(Transmit { flow: tx.flow, payload: request });
                self.retransmissions += 1;
                tx.interval = if tx.invite {
                    tx.interval.saturating_mul(2)
                } else if tx.state == ClientState::Proceeding {
                    timers.t2
                } else {
                    tx.interval.saturating_mul(2).min(timers.t2)
                }
                .max(MIN_INTERVAL);
                self.timers.arm(&mut tx.timers, Kind::Retransmit, Side::Client, id, now, tx.interval);
            }
        }
    }

    fn terminate_client(&mut self, id: u64) {
        let Some(mut tx) = self.client.remove(id) else {
            return;
        };
        self.timers.disarm_all(&mut tx.timers);
        if tx.indexed {
            remove_if_names(&mut self.client_index, &tx.key, id);
        }
        trace!(tx = id, "client transaction terminated");
        self.events.push_back(Event::ClientTerminated { tx: ClientTxId(id) });
    }

    // ---- timers ----

    /// Drops dead entries from the top of the timer queue (so that [`Self::next_timeout`] is
    /// exact) and compacts the queue when dead entries pile up.
    fn settle_timers(&mut self) {
        let (server, client) = (&self.server, &self.client);
        let live = |e: &timer::Entry| match e.side {
            Side::Server => server.get(e.id).is_some_and(|tx| tx.timers.is_live(e)),
            Side::Client => client.get(e.id).is_some_and(|tx| tx.timers.is_live(e)),
        };
        while let Some(top) = self.timers.peek() {
            if live(top) {
                break;
            }
            self.timers.pop();
        }
        self.timers.compact_if_needed(live);
    }
}

/// The ACK of a non-2xx final response (RFC 3261 §17.1.1.3): Request-URI, top Via, Route,
/// From, Call-ID and CSeq number of the request, To of the response, CSeq method ACK.
/// Removes `key` from `index` if it names transaction `id` (a newer transaction may have taken
/// the key over): one hash and one probe.
fn remove_if_names(index: &mut HashMap<Arc<str>, u64, foldhash::fast::RandomState>, key: &str, id: u64) {
    if let RawEntryMut::Occupied(entry) = index.raw_entry_mut().from_key(key) {
        if *entry.get() == id {
            entry.remove();
        }
    }
}

fn build_ack(request: &Bytes, response: &Message) -> Option<Bytes> {
    let limits = ParseLimits { max_message_bytes: usize::MAX, max_headers: usize::MAX };
    let req = tandem_sip::parse_datagram(request.clone(), &limits).ok()?;
    let seq = req.cseq()?.seq.to_string();
    let (_, via) = req.top_via_location()?;
    let mut w = MessageWriter::with_capacity(request.len().min(2048) + 128).request_line(&Method::Ack, req.request_uri_text());
    w.header("Via", req.text(via));
    w.header("Max-Forwards", "70");
    w.copy_headers_named(&req, HeaderName::Route);
    w.copy_headers_named(&req, HeaderName::From);
    w.copy_headers_named(response, HeaderName::To);
    w.copy_headers_named(&req, HeaderName::CallId);
    w.header_parts("CSeq", &[&seq, " ACK"]);
    Some(w.finish())
}
