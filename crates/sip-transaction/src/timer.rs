//! One priority queue for every transaction timer, with lazy deletion.
//!
//! A transaction has two timer slots: `Timeout` (B, D, F, H, I, J, K, L, M) and `Retransmit`
//! (A, E, G, the UAS 2xx retransmission, and the deferred 100 Trying's deadline of an INVITE
//! server transaction in Proceeding, which retransmits nothing then). Arming or disarming a
//! slot bumps its generation; a queue entry is live only while its slot still holds the same
//! generation and deadline, so cancelled timers cost nothing until they surface (or until the
//! queue is compacted).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Which of a transaction's two timers. The order breaks ties between timers due at the same
/// instant: a transaction's timeout fires before its retransmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Timeout = 0,
    Retransmit = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Side {
    Server,
    Client,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Slot {
    pub(crate) deadline: Option<Instant>,
    generation: u32,
}

/// A transaction's timer slots, indexed by [`Kind`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Slots([Slot; 2]);

impl Slots {
    pub(crate) fn get(&self, kind: Kind) -> &Slot {
        match kind {
            Kind::Timeout => &self.0[0],
            Kind::Retransmit => &self.0[1],
        }
    }

    fn get_mut(&mut self, kind: Kind) -> &mut Slot {
        match kind {
            Kind::Timeout => &mut self.0[0],
            Kind::Retransmit => &mut self.0[1],
        }
    }

    pub(crate) fn is_live(&self, entry: &Entry) -> bool {
        let slot = self.get(entry.kind);
        slot.generation == entry.generation && slot.deadline == Some(entry.deadline)
    }
}

/// Field order is the queue order: deadline, then kind, then insertion order (`seq` is unique,
/// so the order is total and replay gives the same firing order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) deadline: Instant,
    pub(crate) kind: Kind,
    seq: u64,
    pub(crate) side: Side,
    pub(crate) id: u64,
    generation: u32,
}

pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    /// Slots currently armed, across all transactions: the number of live entries.
    armed: usize,
}

impl Timers {
    pub(crate) fn new() -> Self {
        Timers { heap: BinaryHeap::new(), seq: 0, armed: 0 }
    }

    /// Arms (or re-arms) a slot. A deadline that overflows `Instant` is never armed.
    pub(crate) fn arm(&mut self, slots: &mut Slots, kind: Kind, side: Side, id: u64, deadline: Option<Instant>) {
        self.disarm(slots, kind);
        let Some(deadline) = deadline else {
            tracing::debug!(id, "timer deadline overflows, not armed");
            return;
        };
        let slot = slots.get_mut(kind);
        slot.deadline = Some(deadline);
        self.armed += 1;
        self.seq += 1;
        self.heap.push(Reverse(Entry { deadline, kind, seq: self.seq, side, id, generation: slot.generation }));
    }

    pub(crate) fn disarm(&mut self, slots: &mut Slots, kind: Kind) {
        let slot = slots.get_mut(kind);
        slot.generation = slot.generation.wrapping_add(1);
        if slot.deadline.take().is_some() {
            self.armed -= 1;
        }
    }

    pub(crate) fn disarm_all(&mut self, slots: &mut Slots) {
        self.disarm(slots, Kind::Timeout);
        self.disarm(slots, Kind::Retransmit);
    }

    pub(crate) fn peek(&self) -> Option<&Entry> {
        self.heap.peek().map(|Reverse(e)| e)
    }

    /// Removes and returns the earliest entry if it is due at `now` (live or not).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Entry> {
        match self.heap.peek() {
            Some(Reverse(e)) if e.deadline <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    pub(crate) fn pop(&mut self) {
        self.heap.pop();
    }

    /// Drops dead entries once they outnumber live ones by far (amortized O(1) per arm).
    pub(crate) fn compact_if_needed(&mut self, is_live: impl Fn(&Entry) -> bool) {
        if self.heap.len() > 1024 && self.heap.len() > 4 * self.armed {
            self.heap.retain(|Reverse(e)| is_live(e));
        }
    }

    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    pub(crate) fn armed(&self) -> usize {
        self.armed
    }
}
