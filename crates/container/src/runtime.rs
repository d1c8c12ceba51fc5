//! The async side: executors on tokio tasks, each fed by a bounded queue, and the dispatcher
//! that the transports hand received messages to.

use crate::config::ContainerSettings;
use crate::core::{Core, CoreParts, Services};
use crate::executor_for;
use crate::ids::IdSource;
use crate::locals::Locals;
use crate::metrics::{Drop as DropReason, Metrics};
use crate::service::Service;
use crate::store::SessionStore;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tandem_sip::{Flow, Message, Method, ParseError, ResponseBuilder};
use tandem_transport::{
    BlockingUdpReceiver, Doorbell, HeldSends, ListenSpec, Protocol, Received, Sink, TransportConfig, Transports, UdpReceiver,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

// Nearly every input is a message: boxing it would add an allocation per message.
#[allow(clippy::large_enum_variant)]
enum Input {
    Message(Message, Flow),
    FlowClosed(Flow),
    Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen: {0}")]
    Bind(#[from] std::io::Error),
    #[error("route names unknown service {0:?}")]
    UnknownService(String),
    #[error("no listener given")]
    NoListener,
}

/// A running container.
pub struct Container {
    store: Arc<SessionStore>,
    metrics: Arc<Metrics>,
    transports: Transports,
    executors: Vec<JoinHandle<()>>,
    inboxes: Vec<mpsc::Sender<Input>>,
    services: Arc<Services>,
    wakers: Arc<Wakers>,
}

/// How work queued for an executor reaches it: a task on the runtime is woken by its queue;
/// the executor blocked in a UDP read (`container.blocking_udp`: only ever a single executor,
/// so all queued work is its own) by its doorbell.
#[derive(Default)]
struct Wakers {
    bell: OnceLock<Arc<Doorbell>>,
    /// Blocking executors stop at their next wake-up (the container was dropped).
    stopping: AtomicBool,
}

impl Wakers {
    /// After queueing work for an executor: wakes it if it is the one blocked in its reads.
    fn ring(&self) {
        if let Some(bell) = self.bell.get() {
            bell.ring();
        }
    }
}

struct Dispatcher {
    inboxes: Vec<mpsc::Sender<Input>>,
    metrics: Arc<Metrics>,
    transports: OnceLock<Transports>,
    wakers: Arc<Wakers>,
}

impl Dispatcher {
    /// Counts a message dropped for overload, and answers it 503 if it is a request that
    /// takes an answer.
    fn refuse(&self, msg: &Message, flow: Flow) {
        self.metrics.dropped(DropReason::Overload);
        if msg.is_request() && msg.method() != Some(&Method::Ack) && msg.defect().is_none() {
            if let Some(t) = self.transports.get() {
                let tag = format!("{:016x}", rand::thread_rng().next_u64());
                let response = ResponseBuilder::new(msg, 503, "Service Unavailable", Some(&tag)).header("Retry-After", "1").finish();
                self.metrics.message_out(msg.method(), Some(503), flow.transport);
                let _ = t.send(flow, response);
            }
        }
    }
}

/// A new call: an INVITE outside any dialog, what an overloaded executor sheds (RFC 6357: refuse
/// new sessions, finish the ones in progress). Other out-of-dialog requests are not shed: a
/// service may tie them to work in progress (the dating service's media MESSAGEs name the
/// executions they continue), and refusing one could strand that work.
fn is_new_call(msg: &Message) -> bool {
    msg.method() == Some(&Method::Invite) && msg.to_tag().is_none()
}

impl Sink for Dispatcher {
    fn on_message(&self, msg: Message, flow: Flow) {
        let executor = executor_for(msg.call_id(), self.inboxes.len() as u16) as usize;
        let Err(err) = self.inboxes[executor].try_send(Input::Message(msg, flow)) else {
            return self.wakers.ring();
        };
        let (mpsc::error::TrySendError::Full(Input::Message(msg, flow)) | mpsc::error::TrySendError::Closed(Input::Message(msg, flow))) =
            err
        else {
            self.metrics.dropped(DropReason::Overload);
            return;
        };
        // Overload: refuse at once rather than queue without bound (RFC 3261 §21.5.4).
        self.refuse(&msg, flow);
    }

    fn on_parse_error(&self, error: ParseError, flow: Flow) {
        tracing::debug!(%error, remote = %flow.remote, "unparseable input");
        self.metrics.parse_error(false);
    }

    fn on_flow_closed(&self, flow: Flow) {
        for inbox in &self.inboxes {
            if inbox.try_send(Input::FlowClosed(flow)).is_ok() {
                self.wakers.ring();
            }
        }
    }
}

impl Container {
    /// Binds the listeners and starts one executor per configured core.
    pub async fn start(
        settings: ContainerSettings,
        services: Vec<(String, Arc<dyn Service>)>,
        listen: &[ListenSpec],
        transport: TransportConfig,
    ) -> Result<Container, StartError> {
        if listen.is_empty() {
            return Err(StartError::NoListener);
        }
        let services = Arc::new(Services::new(services));
        if let Some(rule) = settings.routes.iter().find(|r| services.id(&r.service).is_none()) {
            return Err(StartError::UnknownService(rule.service.clone()));
        }
        let config = Arc::new(settings.container.clone());
        let executors = match config.executors {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
        .min(u16::MAX as usize);
        let metrics = Arc::new(Metrics::new(executors));
        let store = Arc::new(SessionStore::default());
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..executors).map(|_| mpsc::channel(config.queue_capacity.max(1))).unzip();
        let wakers = Arc::new(Wakers::default());
        let dispatcher = Arc::new(Dispatcher {
            inboxes: senders.clone(),
            metrics: metrics.clone(),
            transports: OnceLock::new(),
            wakers: wakers.clone(),
        });
        let transports = Transports::bind(listen, transport, dispatcher.clone()).await?;
        let _ = dispatcher.transports.set(transports.clone());
        let bound: Vec<_> = transports.local_addrs().into_iter().map(|(p, a)| (p.transport(), a)).collect();
        let locals = Arc::new(Locals::new(&bound, config.advertised_host.as_deref()));
        let routes = Arc::new(settings.routes.clone());
        let root_seed = config.seed.unwrap_or_else(|| rand::rngs::OsRng.next_u64());
        // Work executors post to each other (wake-ups, sends on another executor's dialogs) is
        // internal and bounded by the work in flight: it must never be dropped.
        let (post_senders, post_receivers): (Vec<_>, Vec<_>) = (0..executors).map(|_| mpsc::unbounded_channel()).unzip();
        let post_senders = Arc::new(post_senders);
        // With `udp_readers` = 0 the executors read the UDP sockets themselves: socket j by
        // executor j mod n.
        let mut udp: Vec<Vec<UdpReceiver>> = (0..executors).map(|_| Vec::new()).collect();
        for (j, receiver) in transports.take_udp_receivers().into_iter().enumerate() {
            udp[j % executors].push(receiver);
        }
        // A single executor reading a single socket blocks in that read. With more sockets it
        // would have to wait on several (readiness polling again); with more executors, messages
        // and posts cross between them, and waking a blocked executor (a doorbell datagram: a
        // send and a read) cost more than the reads saved: +25-30 % CPU per message for the
        // dating service with two executors (decision 0003, "Blocking reads").
        let mut blocking = match udp.as_mut_slice() {
            [single] if config.blocking_udp && single.len() == 1 => single.pop().map(UdpReceiver::into_blocking).transpose()?,
            _ => None,
        };
        if let Some(bell) = blocking.as_ref().map(BlockingUdpReceiver::doorbell) {
            let _ = wakers.bell.set(bell);
        }
        let mut tasks = Vec::new();
        for (((index, rx), posts_rx), udp) in receivers.into_iter().enumerate().zip(post_receivers).zip(udp) {
            let mut rng = ChaCha20Rng::seed_from_u64(root_seed);
            rng.set_stream(index as u64);
            let mut core = Core::new(CoreParts {
                executor: index as u16,
                executors: executors as u16,
                config: config.clone(),
                routes: routes.clone(),
                store: store.clone(),
                metrics: metrics.clone(),
                locals: locals.clone(),
                services: services.clone(),
                ids: IdSource::new(rng),
            });
            core.set_reentry(Arc::new(PostReentry(post_senders.clone(), wakers.clone())));
            let links = Links {
                transports: transports.clone(),
                posts: post_senders.clone(),
                dispatcher: dispatcher.clone(),
                overload_delay: config.overload_delay,
                wakers: wakers.clone(),
                held: HeldSends::default(),
            };
            let Some(receiver) = blocking.take() else {
                tasks.push(tokio::spawn(run_executor(core, rx, posts_rx, udp, links)));
                continue;
            };
            // A thread of its own, not the runtime's blocking pool: dropping the runtime must
            // not wait for it. It enters the runtime for what services start there (database
            // queries, connections), and says when it ended through `done`.
            let runtime = tokio::runtime::Handle::current();
            let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
            std::thread::Builder::new().name(format!("tandem-executor-{index}")).spawn(move || {
                let _entered = runtime.enter();
                run_blocking_executor(core, rx, posts_rx, receiver, links);
                let _ = done_tx.send(());
            })?;
            tasks.push(tokio::spawn(async move {
                let _ = done_rx.await;
            }));
        }
        Ok(Container { store, metrics, transports, executors: tasks, inboxes: senders, services, wakers })
    }

    pub fn local_addrs(&self) -> Vec<(Protocol, std::net::SocketAddr)> {
        self.transports.local_addrs()
    }

    pub fn store(&self) -> &Arc<SessionStore> {
        &self.store
    }

    pub fn services(&self) -> &[String] {
        self.services.names()
    }

    /// The Prometheus text exposition of every metric.
    pub fn metrics_text(&self) -> String {
        let text = self.metrics.render(self.store.live_sessions(), self.store.live_app_sessions(), self.transports.open_connections());
        // Services' families go before the OpenMetrics end marker.
        let mut text = match text.strip_suffix("# EOF\n") {
            Some(body) => body.to_string(),
            None => text,
        };
        for service in &self.services.list {
            text.push_str(&service.metrics_text());
        }
        let tls_failed = self.transports.stats().tls_handshake_failed.load(std::sync::atomic::Ordering::Relaxed);
        text.push_str("# HELP tandem_tls_handshake_failures TLS handshakes (in or out) that failed or timed out.\n");
        text.push_str("# TYPE tandem_tls_handshake_failures counter\n");
        text.push_str(&format!("tandem_tls_handshake_failures_total {tls_failed}\n"));
        let stats = self.transports.stats();
        let ws = [
            ("tandem_ws_upgrade_failures", "WebSocket upgrades (in or out) refused, failed or timed out.", &stats.ws_upgrade_failed),
            ("tandem_ws_oversize_closed", "WebSocket connections closed for a message above max_message_bytes.", &stats.ws_oversize_closed),
            ("tandem_stream_idle_closed", "TCP, TLS and WebSocket connections closed after the idle timeout.", &stats.tcp_idle_closed),
            ("tandem_stream_refused", "Stream connections refused by the connection limits.", &stats.tcp_refused),
        ];
        for (name, help, value) in ws {
            let value = value.load(std::sync::atomic::Ordering::Relaxed);
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name}_total {value}\n"));
        }
        text.push_str("# EOF\n");
        text
    }

    /// Stops listening, lets executors finish what is queued, and stops them.
    pub async fn shutdown(mut self) {
        self.transports.shutdown();
        for inbox in &self.inboxes {
            let _ = tokio::time::timeout(Duration::from_secs(1), inbox.send(Input::Stop)).await;
            self.wakers.ring();
        }
        for task in std::mem::take(&mut self.executors) {
            if tokio::time::timeout(Duration::from_secs(2), task).await.is_err() {
                tracing::warn!("executor did not stop in time");
            }
        }
    }
}

/// How many queued inputs (or datagrams) an executor handles before it checks its timers and
/// the work other executors posted; what each input sends is flushed right after it (datagrams
/// leave then; stream messages are held until the executor waits, or [`HOLD_MAX`]).
const BATCH: usize = 64;

/// Stream messages an executor holds back before writing them (see [`flush`]): the messages a
/// batch sends to one connection leave in one write, one system call, one segment and one
/// wake-up of the peer, instead of one each; this bounds how long the first of them waits for
/// the handling of the others (tens of microseconds).
const HOLD_MAX: usize = 16;

/// How often an executor publishes its counters (transactions, retransmissions) for metrics.
const PUBLISH: Duration = Duration::from_millis(250);

type PostMsg = (crate::ServiceId, crate::Post);

/// Completions enter an executor through the same unbounded queue as posts: they are
/// bounded by the work services started (a database pool's size, for instance).
struct PostReentry(Arc<Vec<mpsc::UnboundedSender<PostMsg>>>, Arc<Wakers>);

impl crate::Reentry for PostReentry {
    fn post(&self, executor: u16, service: crate::ServiceId, work: crate::Post) {
        if let Some(tx) = self.0.get(executor as usize) {
            if tx.send((service, work)).is_ok() {
                self.1.ring();
            }
        }
    }
}

impl Drop for Container {
    /// Executors on threads of their own are not stopped with the runtime: without
    /// [`Container::shutdown`], they stop here.
    fn drop(&mut self) {
        self.wakers.stopping.store(true, Ordering::SeqCst);
        self.wakers.ring();
    }
}

struct Links {
    transports: Transports,
    posts: Arc<Vec<mpsc::UnboundedSender<PostMsg>>>,
    /// Hands a message this executor read to the executor owning its Call-ID.
    dispatcher: Arc<Dispatcher>,
    overload_delay: Duration,
    wakers: Arc<Wakers>,
    /// Stream messages sent since the executor last waited, not yet written (see [`flush`]).
    held: HeldSends,
}

/// Ready with the index of a UDP receiver that may have a datagram; pending (with the task's
/// waker registered on every receiver) otherwise.
fn udp_ready(receivers: &[UdpReceiver]) -> impl std::future::Future<Output = usize> + '_ {
    std::future::poll_fn(move |cx| {
        for (i, receiver) in receivers.iter().enumerate() {
            if receiver.poll_ready(cx).is_ready() {
                return std::task::Poll::Ready(i);
            }
        }
        std::task::Poll::Pending
    })
}

async fn run_executor(
    mut core: Core,
    mut rx: mpsc::Receiver<Input>,
    mut posts: mpsc::UnboundedReceiver<PostMsg>,
    mut udp: Vec<UdpReceiver>,
    mut links: Links,
) {
    let sleep = tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    tokio::pin!(sleep);
    // The deadline the sleep is armed for: re-arming it (a timer-wheel re-registration, under
    // the driver's lock when the deadline moves earlier) only when the deadline changed.
    let mut armed: Option<Instant> = None;
    let overload_delay = links.overload_delay;
    // The last UDP batch ended with datagrams still waiting.
    let mut behind = false;
    let mut last_publish = Instant::now();
    // Counters changed since they were last published: publish within PUBLISH even if no
    // further event comes (an idle executor must not leave stale gauges behind).
    let mut dirty = false;
    // When the last event began: the time given to a release's failure handling.
    let mut now = Instant::now();
    loop {
        release(&mut core, &mut links, now);
        let publish_at = dirty.then(|| last_publish + PUBLISH);
        let deadline = [core.next_deadline(), publish_at].into_iter().flatten().min();
        if deadline != armed {
            // With no deadline the sleep stays armed for the old one and is simply not polled
            // (`if deadline.is_some()` below).
            if let Some(d) = deadline {
                sleep.as_mut().reset(tokio::time::Instant::from_std(d));
            }
            armed = deadline;
        }
        now = tokio::select! {
            biased;
            input = rx.recv() => {
                let Some(input) = input.filter(|i| !matches!(i, Input::Stop)) else { break };
                let now = Instant::now();
                handle(&mut core, &mut links, now, input);
                for _ in 1..BATCH {
                    match rx.try_recv() {
                        Ok(input) => handle(&mut core, &mut links, now, input),
                        Err(_) => break,
                    }
                }
                after_batch(&mut core, &mut posts, &mut links, now);
                now
            }
            i = udp_ready(&udp), if !udp.is_empty() => {
                let now = Instant::now();
                // Datagrams that arrived before this instant waited in the socket's buffer
                // for longer than the overload delay. Only an executor that found more than a
                // batch waiting last time can be that far behind (a batch takes milliseconds):
                // the others read without arrival times, which is cheaper.
                let late = if behind { std::time::SystemTime::now().checked_sub(overload_delay) } else { None };
                let Some(receiver) = udp.get_mut(i) else { continue };
                behind = true;
                for _ in 0..BATCH {
                    match receiver.try_recv(late.is_some()) {
                        Received::Message(msg, flow, arrived) => {
                            let late = late.is_some_and(|late| arrived.is_some_and(|a| a < late));
                            on_datagram(&mut core, &mut links, now, msg, flow, late);
                        }
                        Received::Other => {}
                        Received::Empty => {
                            behind = false;
                            break;
                        }
                    }
                }
                after_batch(&mut core, &mut posts, &mut links, now);
                now
            }
            Some((service, work)) = posts.recv() => {
                let now = Instant::now();
                core.run_post(now, service, work);
                flush(&mut core, &mut links, now);
                now
            }
            _ = &mut sleep, if deadline.is_some() => {
                let now = Instant::now();
                // The sleep fired: it must be re-armed even if the next deadline is the same
                // (a deadline not yet due by `Instant::now`, whose tick the wheel rounded down).
                armed = None;
                if core.next_deadline().is_some_and(|d| d <= now) {
                    core.on_timeout(now);
                    flush(&mut core, &mut links, now);
                }
                now
            }
        };
        dirty = true;
        // `now` was read when this event began: the handling since is short against PUBLISH.
        if now.saturating_duration_since(last_publish) >= PUBLISH {
            core.publish_stats();
            last_publish = now;
            dirty = false;
        }
    }
    release(&mut core, &mut links, Instant::now());
    core.publish_stats();
}

/// The longest a blocking executor waits in a read while a deadline is near: timers fire up
/// to this late when no datagram comes (under load, at the next datagram). A constant, so
/// that a busy executor, whose next deadline is always near, never changes the socket's
/// read timeout (a system call).
const TICK: Duration = Duration::from_millis(2);

/// How long a blocking executor may wait in its read before `deadline` needs it: [`TICK`]
/// when it is near; else a whole number of 100 ms (the timeout then changes at most ten
/// times a second), and at most a second, so that an idle executor still looks at its
/// queues now and then.
fn read_timeout(deadline: Option<Instant>, now: Instant) -> Duration {
    const STEP: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(1);
    let Some(left) = deadline.map(|d| d.saturating_duration_since(now)) else { return MAX };
    if left < STEP {
        return TICK;
    }
    (STEP * (left.as_millis() / STEP.as_millis()) as u32).min(MAX)
}

/// One read in this many asks for the datagram's arrival time (`recvmsg`, dearer than
/// `recvfrom`), to find out whether the executor is behind.
const SAMPLE: u32 = 16;

/// The executor loop of `run_executor`, on a thread of its own that blocks reading its one
/// UDP socket: one system call per datagram, where readiness polling takes a wake-up
/// (`epoll_wait`) and a read that finds the socket empty for each datagram that arrives
/// alone. Queued inputs and posts wake it through the socket's doorbell.
fn run_blocking_executor(
    mut core: Core,
    mut rx: mpsc::Receiver<Input>,
    mut posts: mpsc::UnboundedReceiver<PostMsg>,
    mut udp: BlockingUdpReceiver,
    mut links: Links,
) {
    let bell = udp.doorbell();
    let overload_delay = links.overload_delay;
    let mut last_publish = Instant::now();
    let mut dirty = false;
    // Behind: a sampled datagram waited more than half the overload delay in the socket.
    // Every read then asks for the arrival time, and new calls that waited too long are
    // refused, until a datagram is read that waited less.
    let mut behind = false;
    let mut since_sample = SAMPLE;
    let mut now = Instant::now();
    'run: loop {
        if links.wakers.stopping.load(Ordering::Relaxed) {
            break;
        }
        for _ in 0..BATCH {
            match rx.try_recv() {
                Ok(Input::Stop) | Err(mpsc::error::TryRecvError::Disconnected) => break 'run,
                Ok(input) => {
                    handle(&mut core, &mut links, now, input);
                    dirty = true;
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
            }
        }
        // Timers and posts, as after a batch on the runtime; what they change (transactions
        // ended by their timers) is published like the rest.
        dirty |= after_batch(&mut core, &mut posts, &mut links, now);
        if dirty && now.saturating_duration_since(last_publish) >= PUBLISH {
            core.publish_stats();
            last_publish = now;
            dirty = false;
        }
        let publish_at = dirty.then(|| last_publish + PUBLISH);
        let deadline = [core.next_deadline(), publish_at].into_iter().flatten().min();
        release(&mut core, &mut links, now);
        bell.fall_asleep();
        if !rx.is_empty() || !posts.is_empty() || deadline.is_some_and(|d| d <= now) {
            bell.wake_up();
            now = Instant::now();
            continue;
        }
        let sampled = behind || since_sample >= SAMPLE;
        since_sample = if sampled { 0 } else { since_sample + 1 };
        let received = udp.recv(sampled, read_timeout(deadline, now));
        bell.wake_up();
        now = Instant::now();
        let Received::Message(msg, flow, arrived) = received else { continue };
        dirty = true;
        let mut late = false;
        if let (true, Some(arrived)) = (sampled, arrived) {
            let waited = std::time::SystemTime::now().duration_since(arrived).unwrap_or_default();
            behind = waited > overload_delay / 2;
            late = waited > overload_delay;
        }
        on_datagram(&mut core, &mut links, now, msg, flow, late);
    }
    release(&mut core, &mut links, Instant::now());
    core.publish_stats();
}

/// A message an executor read from its socket: refused if it is a new call that waited too
/// long (`late`), handled here if its Call-ID is this executor's, else handed to its owner.
fn on_datagram(core: &mut Core, links: &mut Links, now: Instant, msg: Message, flow: Flow, late: bool) {
    if late && is_new_call(&msg) {
        links.dispatcher.refuse(&msg, flow);
    } else if executor_for(msg.call_id(), core.executors()) == core.executor() {
        core.on_message(now, msg, flow);
        // What it sent leaves now, not after the rest of the batch and the read that finds
        // the socket empty: a message's forwarding delay is its own handling only (the same
        // number of sends either way; stream messages wait for the release before the read).
        flush(core, links, now);
    } else {
        links.dispatcher.on_message(msg, flow);
    }
}

/// After a batch of inputs: what a busy executor must not leave waiting, then the sends.
/// Whether it fired timers or ran posts.
fn after_batch(core: &mut Core, posts: &mut mpsc::UnboundedReceiver<PostMsg>, links: &mut Links, now: Instant) -> bool {
    // Under sustained load the input never runs dry: fire due timers here too.
    let mut worked = core.next_deadline().is_some_and(|d| d <= now);
    if worked {
        core.on_timeout(now);
    }
    // And take work other executors posted (a lock handed over to a waiting transition, a
    // send on one of this executor's dialogs): `biased` polls it only when no input is
    // waiting, which under sustained load can be never — it then waited until the load
    // stopped, and the sessions involved with it.
    for _ in 0..BATCH {
        match posts.try_recv() {
            Ok((service, work)) => {
                core.run_post(now, service, work);
                worked = true;
            }
            Err(_) => break,
        }
    }
    flush(core, links, now);
    worked
}

/// Handles one queued input; what it sent over UDP leaves before the next input is taken (as
/// in the UDP arm), over streams with the batch's other messages for the same connection.
fn handle(core: &mut Core, links: &mut Links, now: Instant, input: Input) {
    match input {
        Input::Message(msg, flow) => core.on_message(now, msg, flow),
        Input::FlowClosed(flow) => core.on_flow_closed(now, flow),
        Input::Stop => {}
    }
    flush(core, links, now);
}

/// Hands what the core queued to the transports: datagrams leave at once, stream messages are
/// held on their connections until [`release`] (or until [`HOLD_MAX`] are held).
fn flush(core: &mut Core, links: &mut Links, now: Instant) {
    loop {
        while let Some(t) = core.poll_transmit() {
            if let Err(e) = links.transports.send_held(t.flow, t.payload, &mut links.held) {
                tracing::debug!(error = %e, remote = %t.flow.remote, "send failed");
                core.on_send_failed(now, t.flow);
            }
        }
        if links.held.messages() >= HOLD_MAX && write_held(core, links, now) {
            continue;
        }
        let posts = core.take_posts();
        if posts.is_empty() {
            return;
        }
        for (executor, service, work) in posts {
            if executor == core.executor() {
                core.run_post(now, service, work);
            } else if let Some(tx) = links.posts.get(executor as usize) {
                if tx.send((service, work)).is_ok() {
                    links.wakers.ring();
                }
            }
        }
    }
}

/// Writes the stream messages [`flush`] held back, before the executor waits for more work;
/// what the core sends about a failed connection is written too.
fn release(core: &mut Core, links: &mut Links, now: Instant) {
    while !links.held.is_empty() && write_held(core, links, now) {
        flush(core, links, now);
    }
}

/// Writes every held stream message and reports each flow whose connection failed to the
/// core (which may queue more sends): whether any failed.
fn write_held(core: &mut Core, links: &mut Links, now: Instant) -> bool {
    let mut failed = false;
    links.transports.release(&mut links.held, |flow| {
        tracing::debug!(remote = %flow.remote, "send failed");
        core.on_send_failed(now, flow);
        failed = true;
    });
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_timeouts_tick_near_a_deadline_and_step_far_from_it() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(read_timeout(None, now), ms(1000), "idle: a look at the queues every second");
        assert_eq!(read_timeout(Some(now), now), TICK);
        assert_eq!(read_timeout(Some(now + ms(99)), now), TICK);
        // Rounded down: the wake-up never comes after the deadline by more than a tick.
        assert_eq!(read_timeout(Some(now + ms(150)), now), ms(100));
        assert_eq!(read_timeout(Some(now + ms(999)), now), ms(900));
        assert_eq!(read_timeout(Some(now + ms(30_000)), now), ms(1000));
    }
}
