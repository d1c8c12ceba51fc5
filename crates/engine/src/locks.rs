//! Logical session locks with FIFO hand-over. A transition that finds a session taken does
//! not block its thread: it leaves its parked negotiation in the session's queue and returns;
//! the holder, on release, hands the session to the first waiter and gets that negotiation
//! back to resume it (on the waiter's executor). FIFO hand-over means no waiter is overtaken
//! forever: no starvation.
//!
//! The table is sharded by key; each operation holds one shard's mutex for a few map
//! operations, never while waiting. Under `cfg(test)` the mutex is shuttle's, so the model
//! tests explore interleavings of these operations.

use std::collections::hash_map::Entry::{Occupied, Vacant};
use std::collections::{HashMap, VecDeque};

#[cfg(not(test))]
use parking_lot::Mutex;
#[cfg(test)]
use shuttle::sync::Mutex;

/// Who holds a lock: a negotiation's ticket (unique per negotiation).
pub type Ticket = u64;

/// A lock key: a session ID's bits, or [`GLOBAL`] for the service-wide lock.
pub type Key = u128;

/// The key of the service-wide lock used by the `global` negotiator.
pub const GLOBAL: Key = 0;

const SHARDS: usize = 16;

pub enum Acquire<W> {
    /// Taken (or already held by this ticket): the waiter is handed back.
    Acquired(W),
    /// The lock is taken: the waiter was queued and will be handed the lock.
    Queued,
}

struct Entry<W> {
    owner: Ticket,
    /// Boxed: most locks are taken and released with nobody waiting, and an entry without
    /// waiters is then three words smaller to insert and has nothing to drop.
    #[allow(clippy::box_collection)]
    waiters: Option<Box<VecDeque<(Ticket, W)>>>,
}

pub struct LockTable<W> {
    shards: Vec<Mutex<HashMap<Key, Entry<W>, tandem_container::IdHashBuilder>>>,
}

impl<W> Default for LockTable<W> {
    fn default() -> Self {
        LockTable { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::default())).collect() }
    }
}

#[cfg(not(test))]
fn guard<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

#[cfg(test)]
fn guard<T>(m: &Mutex<T>) -> shuttle::sync::MutexGuard<'_, T> {
    // A poisoned shard means a test thread panicked: the test fails either way.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<W> LockTable<W> {
    fn shard(&self, key: Key) -> &Mutex<HashMap<Key, Entry<W>, tandem_container::IdHashBuilder>> {
        &self.shards[(key as usize ^ (key >> 64) as usize) % SHARDS]
    }

    /// Takes `key` for `ticket`, or queues `waiter` behind the current holder.
    pub fn acquire(&self, key: Key, ticket: Ticket, waiter: W) -> Acquire<W> {
        let mut shard = guard(self.shard(key));
        let entry = shard.entry(key).or_insert_with(|| Entry { owner: 0, waiters: None });
        if entry.owner == 0 || entry.owner == ticket {
            entry.owner = ticket;
            Acquire::Acquired(waiter)
        } else {
            entry.waiters.get_or_insert_default().push_back((ticket, waiter));
            Acquire::Queued
        }
    }

    /// Takes `key` for `ticket` if it is free (or already held by `ticket`); never queues,
    /// so the caller need not hand over a waiter unless it must wait ([`Self::acquire`]).
    pub fn try_take(&self, key: Key, ticket: Ticket) -> bool {
        let mut shard = guard(self.shard(key));
        // One hash look-up: the usual case makes the entry.
        match shard.entry(key) {
            Occupied(mut held) => {
                let entry = held.get_mut();
                if entry.owner == 0 || entry.owner == ticket {
                    entry.owner = ticket;
                    true
                } else {
                    false
                }
            }
            Vacant(free) => {
                free.insert(Entry { owner: ticket, waiters: None });
                true
            }
        }
    }

    /// Releases `key` held by `ticket`; returns the next waiter, who now holds it.
    pub fn release(&self, key: Key, ticket: Ticket) -> Option<W> {
        let mut shard = guard(self.shard(key));
        // One hash look-up: the usual case (nobody waits) removes the entry.
        let Occupied(mut held) = shard.entry(key) else { return None };
        let entry = held.get_mut();
        debug_assert_eq!(entry.owner, ticket, "released a lock it does not hold");
        if entry.owner != ticket {
            return None;
        }
        match entry.waiters.as_mut().and_then(|w| w.pop_front()) {
            Some((next, waiter)) => {
                entry.owner = next;
                Some(waiter)
            }
            None => {
                held.remove();
                None
            }
        }
    }

    pub fn holder(&self, key: Key) -> Option<Ticket> {
        guard(self.shard(key)).get(&key).map(|e| e.owner).filter(|o| *o != 0)
    }

    /// Locks currently held (for metrics and leak checks in tests).
    pub fn held(&self) -> usize {
        self.shards.iter().map(|s| guard(s).values().filter(|e| e.owner != 0).count()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_hand_over() {
        shuttle::check_random(
            || {
                let t: LockTable<&str> = LockTable::default();
                assert!(matches!(t.acquire(5, 1, "a"), Acquire::Acquired("a")));
                assert!(matches!(t.acquire(5, 1, "a"), Acquire::Acquired("a")));
                assert!(matches!(t.acquire(5, 2, "b"), Acquire::Queued));
                assert!(matches!(t.acquire(5, 3, "c"), Acquire::Queued));
                assert!(!t.try_take(5, 4));
                assert!(t.try_take(6, 4));
                assert!(t.try_take(6, 4));
                assert_eq!(t.release(6, 4), None);
                assert_eq!(t.release(5, 1), Some("b"));
                assert_eq!(t.holder(5), Some(2));
                assert_eq!(t.release(5, 2), Some("c"));
                assert_eq!(t.release(5, 3), None);
                assert_eq!(t.holder(5), None);
                assert_eq!(t.held(), 0);
            },
            1,
        );
    }
}
