//! Model checking of the negotiation protocol with shuttle: the real lock table and the real
//! planning decision, driven by executors that discover the sessions they need one at a time
//! in arbitrary order (as navigation does), park when a session is taken and are resumed by
//! the releasing executor. Shuttle explores thread interleavings; a deadlock (every executor
//! blocked) or a broken invariant fails the test.
//!
//! Each session also has a cell (its `SipSession` mutex): a transition holding logical locks
//! reads and writes its sessions only through their cells, and some tasks take the engine's
//! in-place path (`MachineService::run_in_place`): the cells locked (the first waited for,
//! the others only tried), no logical lock of them held by anyone, then written, with no
//! logical lock taken; otherwise they negotiate like the rest. The invariant: a session never
//! changes under a transition that holds its logical lock, and no update is lost.

use crate::locks::tests::k;
use crate::locks::{Acquire, Key, LockTable, Ticket};
use crate::plan::plan;
use crate::sorted_set::SortedSet;
use shuttle::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use shuttle::sync::mpsc::{channel, Receiver, Sender};
use shuttle::sync::{Arc, Mutex};

struct Task {
    ticket: Ticket,
    executor: usize,
    /// Keys in the order evaluation discovers them.
    discovery: Vec<Key>,
    held: SortedSet<Key>,
    to_acquire: SortedSet<Key>,
    backoffs: usize,
    /// Tries the in-place path first.
    in_place: bool,
}

struct World {
    locks: LockTable<Box<Task>>,
    inboxes: Vec<Sender<Option<Box<Task>>>>,
    total: usize,
    /// The sessions' keys, by session index.
    keys: Vec<Key>,
    in_use: Vec<AtomicBool>,
    done: AtomicUsize,
    /// The sessions' cells: a count of the transitions that wrote each.
    cells: Vec<Mutex<usize>>,
    /// Writes made, to compare with the cells' counts.
    writes: AtomicUsize,
}

impl World {
    /// The engine's `drive` loop, on the model: acquire in order, evaluate, plan.
    fn drive(&self, mut task: Box<Task>) {
        loop {
            while let Some(k) = task.to_acquire.pop_first() {
                if task.held.contains(&k) {
                    continue;
                }
                assert!(task.held.last().is_none_or(|m| *m < k), "acquisition out of order");
                let ticket = task.ticket;
                match self.locks.acquire(k, ticket, task) {
                    Acquire::Acquired(t) => {
                        task = t;
                        task.held.insert(k);
                    }
                    Acquire::Queued => return,
                }
            }
            // "Evaluation": the next discovered key not held yet.
            match task.discovery.iter().find(|k| !task.held.contains(k)).copied() {
                Some(need) => {
                    let released = plan(&mut task.held, &mut task.to_acquire, &SortedSet::from([need]));
                    if !released.is_empty() {
                        task.backoffs += 1;
                    }
                    for k in released {
                        self.release(k, task.ticket);
                    }
                }
                None => return self.run(*task),
            }
        }
    }

    fn session(&self, k: &Key) -> usize {
        self.keys.iter().position(|x| x == k).expect("a scenario key")
    }

    fn run(&self, task: Task) {
        let session = |k: &Key| self.session(k);
        for k in &task.held {
            let was = self.in_use[session(k)].swap(true, Ordering::SeqCst);
            assert!(!was, "two transitions hold session {} at once", session(k));
        }
        // Reads its sessions (each through its cell), then writes what it read plus one: a
        // session that changed in between is one changed under its logical lock.
        let read: Vec<usize> = task.held.iter().map(|k| *cell(&self.cells[session(k)])).collect();
        shuttle::thread::yield_now();
        for (k, was) in task.held.iter().zip(read) {
            let mut c = cell(&self.cells[session(k)]);
            assert_eq!(*c, was, "session {} changed under its logical lock", session(k));
            *c += 1;
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        for k in &task.held {
            self.in_use[session(k)].store(false, Ordering::SeqCst);
        }
        assert!(task.backoffs <= 64, "a negotiation backed off without bound");
        for k in &task.held {
            self.release(*k, task.ticket);
        }
        self.finished();
    }

    /// The in-place path: the task back if it must negotiate instead.
    fn run_in_place(&self, task: Box<Task>) -> Option<Box<Task>> {
        let sessions: Vec<usize> = task.discovery.iter().map(|k| self.session(k)).collect();
        let mut cells = vec![cell(&self.cells[sessions[0]])];
        for &s in &sessions[1..] {
            match self.cells[s].try_lock() {
                Ok(c) => cells.push(c),
                Err(_) => return Some(task),
            }
        }
        if task.discovery.iter().any(|k| self.locks.holder(*k).is_some()) {
            return Some(task);
        }
        shuttle::thread::yield_now();
        for c in &mut cells {
            **c += 1;
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        drop(cells);
        self.finished();
        None
    }

    fn finished(&self) {
        if self.done.fetch_add(1, Ordering::SeqCst) + 1 == self.total {
            for inbox in &self.inboxes {
                let _ = inbox.send(None);
            }
        }
    }

    fn start(&self, task: Box<Task>) {
        let task = match task.in_place {
            true => self.run_in_place(task),
            false => Some(task),
        };
        if let Some(task) = task {
            self.drive(task);
        }
    }

    fn release(&self, k: Key, ticket: Ticket) {
        if let Some((k, mut next)) = self.locks.release(k, ticket) {
            next.held.insert(k);
            let executor = next.executor;
            let _ = self.inboxes[executor].send(Some(next));
        }
    }
}

fn cell(m: &Mutex<usize>) -> shuttle::sync::MutexGuard<'_, usize> {
    // A poisoned cell means a test thread panicked: the test fails either way.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `executors` threads run `tasks` (each a discovery order of sessions, indices into `keys`)
/// and then serve resumptions until every task everywhere has committed.
fn scenario(executors: usize, keys: &[Key], tasks: Vec<(usize, Vec<usize>)>) {
    scenario_with(executors, keys, tasks.into_iter().map(|(e, d)| (e, d, false)).collect());
}

/// [`scenario`] with tasks that try the in-place path first (`true`).
fn scenario_with(executors: usize, keys: &[Key], tasks: Vec<(usize, Vec<usize>, bool)>) {
    let total = tasks.len();
    #[allow(clippy::type_complexity)]
    let (senders, receivers): (Vec<Sender<Option<Box<Task>>>>, Vec<Receiver<Option<Box<Task>>>>) =
        (0..executors).map(|_| channel()).unzip();
    let world = Arc::new(World {
        locks: LockTable::default(),
        inboxes: senders,
        total,
        keys: keys.to_vec(),
        in_use: keys.iter().map(|_| AtomicBool::new(false)).collect(),
        done: AtomicUsize::new(0),
        cells: keys.iter().map(|_| Mutex::new(0)).collect(),
        writes: AtomicUsize::new(0),
    });
    let mut per_executor: Vec<Vec<Box<Task>>> = (0..executors).map(|_| Vec::new()).collect();
    for (i, (executor, discovery, in_place)) in tasks.into_iter().enumerate() {
        per_executor[executor].push(Box::new(Task {
            ticket: i as u64 + 1,
            executor,
            discovery: discovery.iter().map(|&i| keys[i]).collect(),
            held: SortedSet::new(),
            to_acquire: SortedSet::new(),
            backoffs: 0,
            in_place,
        }));
    }
    let handles: Vec<_> = per_executor
        .into_iter()
        .zip(receivers)
        .map(|(mine, inbox)| {
            let world = world.clone();
            shuttle::thread::spawn(move || {
                for task in mine {
                    world.start(task);
                }
                // Resumptions arrive here until the last commit says stop; a stuck protocol
                // leaves every executor blocked, which shuttle reports as a deadlock.
                while let Ok(Some(task)) = inbox.recv() {
                    world.drive(task);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("executor thread");
    }
    assert_eq!(world.done.load(Ordering::SeqCst), total);
    assert_eq!(world.locks.held(), 0, "every lock released");
    let counted: usize = world.cells.iter().map(|c| *cell(c)).sum();
    assert_eq!(counted, world.writes.load(Ordering::SeqCst), "an update was lost");
}

/// `n` sessions, each in a stripe of its own (in session order).
fn own_stripes(n: u128) -> Vec<Key> {
    (0..n).map(|i| k(i + 1, i)).collect()
}

#[test]
fn rendezvous_pairs_two_executors() {
    // Like T7: each task needs its own session and a peer's, discovered own-first.
    shuttle::check_random(
        || scenario(2, &own_stripes(4), vec![(0, vec![0, 1]), (1, vec![1, 0]), (0, vec![2, 3]), (1, vec![3, 2]), (1, vec![1, 2])]),
        3000,
    );
}

#[test]
fn discovery_against_the_order_backs_off_and_still_finishes() {
    shuttle::check_random(
        || scenario(3, &own_stripes(4), vec![(0, vec![3, 2, 1, 0]), (1, vec![0, 3]), (2, vec![2, 0, 3]), (0, vec![1, 3])]),
        3000,
    );
}

#[test]
fn sessions_sharing_stripes_still_finish() {
    // Sessions 0 and 1 share a stripe, as do 2 and 3: a task holding one of them excludes
    // the other's, and a task needing both takes the stripe once per key.
    let keys = [k(1, 0), k(1, 1), k(2, 0), k(2, 1)];
    shuttle::check_random(
        move || scenario(3, &keys, vec![(0, vec![3, 0]), (1, vec![1, 2]), (2, vec![2, 1, 0]), (0, vec![0, 1]), (1, vec![3])]),
        3000,
    );
}

#[test]
fn exhaustive_small_configuration() {
    // Every interleaving up to the bound, on the smallest configuration with a cycle of wants.
    shuttle::check_dfs(|| scenario(2, &own_stripes(2), vec![(0, vec![1, 0]), (1, vec![0, 1])]), Some(200_000));
}

#[test]
fn in_place_transitions_never_change_a_session_under_a_logical_lock() {
    // Like T4/T11 in place (own session first, then its media leg or peer) against T7-like
    // negotiations over the same sessions, from both executors.
    shuttle::check_random(
        || {
            scenario_with(
                2,
                &own_stripes(4),
                vec![
                    (0, vec![0, 1], true),
                    (1, vec![1, 0], false),
                    (1, vec![1, 2], true),
                    (0, vec![2, 1], false),
                    (0, vec![3, 2], true),
                    (1, vec![0], true),
                ],
            )
        },
        3000,
    );
}

#[test]
fn in_place_exhaustive_small_configuration() {
    shuttle::check_dfs(|| scenario_with(2, &own_stripes(2), vec![(0, vec![0, 1], true), (1, vec![1, 0], false)]), Some(200_000));
    shuttle::check_dfs(|| scenario_with(2, &own_stripes(2), vec![(0, vec![0, 1], true), (1, vec![1, 0], true)]), Some(200_000));
}
