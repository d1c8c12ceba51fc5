//! Logical session locks with FIFO hand-over. A transition that finds a session taken does
//! not block its thread: it leaves its parked negotiation in the lock's queue and returns;
//! the holder, on release, hands the lock to the first waiter and gets that negotiation back
//! to resume it (on the waiter's executor). FIFO hand-over means no waiter is overtaken
//! forever: no starvation.
//!
//! Keys are striped: a fixed array of stripes, a key's stripe being its top bits. Taking and
//! releasing a free lock is then one uncontended mutex and a few word writes, where a map of
//! held keys cost a hash insert and remove per key (about a fifth of the engine's cost per
//! message over the hand-optimized dating service, decision 0004). Two keys of one stripe
//! share its lock: a conservative exclusion, rare with random session IDs and few
//! transitions in flight. Because the stripe is the key's top bits, stripes come in key
//! order: a negotiation that acquires keys in increasing order (as the engine does) holds a
//! stripe again when its next key falls in it (the owner takes it without waiting), and waits
//! only for stripes after every stripe it holds, so no cycle of waits forms.
//!
//! Each stripe has its own mutex, held for a few word operations, never while waiting. Under
//! `cfg(test)` the mutex is shuttle's, so the model tests explore interleavings of these
//! operations.

use std::collections::VecDeque;

#[cfg(not(test))]
use parking_lot::Mutex;
#[cfg(test)]
use shuttle::sync::Mutex;

/// Who holds a lock: a negotiation's ticket (unique per negotiation, never 0).
pub type Ticket = u64;

/// A lock key: a session ID's bits mixed (see `engine::key`), or [`GLOBAL`] for the
/// service-wide lock.
pub type Key = u128;

/// The key of the service-wide lock used by the `global` negotiator.
pub const GLOBAL: Key = 0;

/// Stripes: 4096 (a few dozen bytes each) in the engine; 16 in the model tests, whose keys
/// are placed in chosen stripes and shuttle models each mutex.
#[cfg(not(test))]
const STRIPE_BITS: u32 = 12;
#[cfg(test)]
pub(crate) const STRIPE_BITS: u32 = 4;

/// The stripe of `key`: its top bits, so that stripes are in key order.
pub(crate) fn stripe_of(key: Key) -> usize {
    (key >> (Key::BITS - STRIPE_BITS)) as usize
}

pub enum Acquire<W> {
    /// Taken (or its stripe already held by this ticket): the waiter is handed back.
    Acquired(W),
    /// The lock is taken: the waiter was queued and will be handed the lock.
    Queued,
}

/// A negotiation waiting for a stripe, and the key of it that it asked for.
struct Waiter<W> {
    ticket: Ticket,
    key: Key,
    waiter: W,
}

struct Stripe<W> {
    /// 0: free.
    owner: Ticket,
    /// How many keys of this stripe the owner holds: the stripe is released with the last.
    holds: u32,
    /// Boxed: most locks are taken and released with nobody waiting; a stripe without
    /// waiters then has nothing to drop.
    #[allow(clippy::box_collection)]
    waiters: Option<Box<VecDeque<Waiter<W>>>>,
}

impl<W> Stripe<W> {
    /// Takes one more key of this stripe for `ticket` if the stripe is free or already its.
    fn take(&mut self, ticket: Ticket) -> bool {
        if self.owner != 0 && self.owner != ticket {
            return false;
        }
        self.owner = ticket;
        self.holds += 1;
        true
    }
}

pub struct LockTable<W> {
    stripes: Box<[Mutex<Stripe<W>>]>,
}

impl<W> Default for LockTable<W> {
    fn default() -> Self {
        LockTable { stripes: (0..1usize << STRIPE_BITS).map(|_| Mutex::new(Stripe { owner: 0, holds: 0, waiters: None })).collect() }
    }
}

#[cfg(not(test))]
fn guard<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

#[cfg(test)]
fn guard<T>(m: &Mutex<T>) -> shuttle::sync::MutexGuard<'_, T> {
    // A poisoned stripe means a test thread panicked: the test fails either way.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<W> LockTable<W> {
    fn stripe(&self, key: Key) -> &Mutex<Stripe<W>> {
        &self.stripes[stripe_of(key)]
    }

    /// Takes `key` for `ticket`, or queues `waiter` behind the current holder. A ticket takes
    /// each key once (and releases it once): the engine knows what it holds.
    pub fn acquire(&self, key: Key, ticket: Ticket, waiter: W) -> Acquire<W> {
        let mut stripe = guard(self.stripe(key));
        if stripe.take(ticket) {
            Acquire::Acquired(waiter)
        } else {
            stripe.waiters.get_or_insert_default().push_back(Waiter { ticket, key, waiter });
            Acquire::Queued
        }
    }

    /// Takes `key` for `ticket` if it is free (or its stripe already held by `ticket`); never
    /// queues, so the caller need not hand over a waiter unless it must wait
    /// ([`Self::acquire`]).
    pub fn try_take(&self, key: Key, ticket: Ticket) -> bool {
        guard(self.stripe(key)).take(ticket)
    }

    /// Releases `key` held by `ticket`; returns the next waiter if the stripe passed to it,
    /// with the key it waited for (which it now holds: not necessarily `key`, another key of
    /// the stripe).
    pub fn release(&self, key: Key, ticket: Ticket) -> Option<(Key, W)> {
        let mut stripe = guard(self.stripe(key));
        debug_assert!(stripe.owner == ticket && stripe.holds > 0, "released a lock it does not hold");
        if stripe.owner != ticket || stripe.holds == 0 {
            return None;
        }
        stripe.holds -= 1;
        if stripe.holds != 0 {
            return None;
        }
        match stripe.waiters.as_mut().and_then(|w| w.pop_front()) {
            Some(next) => {
                stripe.owner = next.ticket;
                stripe.holds = 1;
                Some((next.key, next.waiter))
            }
            None => {
                stripe.owner = 0;
                None
            }
        }
    }

    /// The ticket holding `key`'s stripe, if any.
    pub fn holder(&self, key: Key) -> Option<Ticket> {
        Some(guard(self.stripe(key)).owner).filter(|o| *o != 0)
    }

    /// Keys currently held (for metrics and leak checks in tests).
    pub fn held(&self) -> usize {
        self.stripes.iter().map(|s| guard(s).holds as usize).sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Key `j` of stripe `s`.
    pub(crate) fn k(s: u128, j: u128) -> Key {
        s << (Key::BITS - STRIPE_BITS) | j
    }

    #[test]
    fn fifo_hand_over() {
        shuttle::check_random(
            || {
                let t: LockTable<&str> = LockTable::default();
                let (five, six) = (k(5, 5), k(6, 6));
                assert!(matches!(t.acquire(five, 1, "a"), Acquire::Acquired("a")));
                assert!(matches!(t.acquire(five, 2, "b"), Acquire::Queued));
                assert!(matches!(t.acquire(five, 3, "c"), Acquire::Queued));
                assert!(!t.try_take(five, 4));
                assert!(t.try_take(six, 4));
                assert_eq!(t.held(), 2);
                assert_eq!(t.release(six, 4), None);
                assert_eq!(t.release(five, 1), Some((five, "b")));
                assert_eq!(t.holder(five), Some(2));
                assert_eq!(t.release(five, 2), Some((five, "c")));
                assert_eq!(t.release(five, 3), None);
                assert_eq!(t.holder(five), None);
                assert_eq!(t.held(), 0);
            },
            1,
        );
    }

    #[test]
    fn keys_of_one_stripe_share_its_lock() {
        shuttle::check_random(
            || {
                let t: LockTable<&str> = LockTable::default();
                let (a, b, c) = (k(3, 1), k(3, 2), k(3, 3));
                // The owner takes a second key of its stripe without waiting...
                assert!(t.try_take(a, 1));
                assert!(matches!(t.acquire(b, 1, "1"), Acquire::Acquired("1")));
                // ...another ticket waits for any key of it...
                assert!(!t.try_take(c, 2));
                assert!(matches!(t.acquire(c, 2, "2"), Acquire::Queued));
                assert_eq!(t.held(), 2);
                // ...until the owner released every key it took there.
                assert_eq!(t.release(b, 1), None);
                assert_eq!(t.holder(c), Some(1));
                assert_eq!(t.release(a, 1), Some((c, "2")));
                assert_eq!(t.holder(a), Some(2));
                assert_eq!(t.held(), 1);
                assert_eq!(t.release(c, 2), None);
                assert_eq!(t.held(), 0);
                assert!(t.try_take(k(3, 9), 3));
            },
            1,
        );
    }
}
