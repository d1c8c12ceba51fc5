//! Model checking of the negotiation protocol with shuttle: the real lock table and the real
//! planning decision, driven by executors that discover the sessions they need one at a time
//! in arbitrary order (as navigation does), park when a session is taken and are resumed by
//! the releasing executor. Shuttle explores thread interleavings; a deadlock (every executor
//! blocked) or a broken invariant fails the test.

use crate::locks::tests::k;
use crate::locks::{Acquire, Key, LockTable, Ticket};
use crate::plan::plan;
use crate::sorted_set::SortedSet;
use shuttle::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use shuttle::sync::mpsc::{channel, Receiver, Sender};
use shuttle::sync::Arc;

struct Task {
    ticket: Ticket,
    executor: usize,
    /// Keys in the order evaluation discovers them.
    discovery: Vec<Key>,
    held: SortedSet<Key>,
    to_acquire: SortedSet<Key>,
    backoffs: usize,
}

struct World {
    locks: LockTable<Box<Task>>,
    inboxes: Vec<Sender<Option<Box<Task>>>>,
    total: usize,
    /// The sessions' keys, by session index.
    keys: Vec<Key>,
    in_use: Vec<AtomicBool>,
    done: AtomicUsize,
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

    fn run(&self, task: Task) {
        let session = |k: &Key| self.keys.iter().position(|x| x == k).expect("a scenario key");
        for k in &task.held {
            let was = self.in_use[session(k)].swap(true, Ordering::SeqCst);
            assert!(!was, "two transitions hold session {} at once", session(k));
        }
        shuttle::thread::yield_now();
        for k in &task.held {
            self.in_use[session(k)].store(false, Ordering::SeqCst);
        }
        assert!(task.backoffs <= 64, "a negotiation backed off without bound");
        for k in &task.held {
            self.release(*k, task.ticket);
        }
        if self.done.fetch_add(1, Ordering::SeqCst) + 1 == self.total {
            for inbox in &self.inboxes {
                let _ = inbox.send(None);
            }
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

/// `executors` threads run `tasks` (each a discovery order of sessions, indices into `keys`)
/// and then serve resumptions until every task everywhere has committed.
fn scenario(executors: usize, keys: &[Key], tasks: Vec<(usize, Vec<usize>)>) {
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
    });
    let mut per_executor: Vec<Vec<Box<Task>>> = (0..executors).map(|_| Vec::new()).collect();
    for (i, (executor, discovery)) in tasks.into_iter().enumerate() {
        per_executor[executor].push(Box::new(Task {
            ticket: i as u64 + 1,
            executor,
            discovery: discovery.iter().map(|&i| keys[i]).collect(),
            held: SortedSet::new(),
            to_acquire: SortedSet::new(),
            backoffs: 0,
        }));
    }
    let handles: Vec<_> = per_executor
        .into_iter()
        .zip(receivers)
        .map(|(mine, inbox)| {
            let world = world.clone();
            shuttle::thread::spawn(move || {
                for task in mine {
                    world.drive(task);
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
