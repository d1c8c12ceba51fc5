//! One priority queue for every transaction timer, with lazy deletion.
//!
//! Almost every timer is armed `delay` after the current time, with a handful of distinct
//! delays (64·T1, T4, T1, the doubling retransmission intervals). Entries armed with the same
//! kind and delay as time moves forward are already in firing order, so each such pair gets a
//! FIFO lane: arming appends, firing takes the front, and the queue's earliest entry is the
//! earliest lane front. A busy UDP proxy holds hundreds of thousands of entries for RFC 3261's
//! 32 s; a binary heap paid a sift-down through all of them (cache misses at every level) for
//! each entry it fired or dropped. Entries that fit no lane (a clock that stepped back, more
//! distinct delays than lanes) go to a heap beside the lanes; the firing order is exactly one
//! heap's either way.
//!
//! A transaction has two timer slots: `Timeout` (B, D, F, H, I, J, K, L, M) and `Retransmit`
//! (A, E, G, the UAS 2xx retransmission, and the deferred 100 Trying's deadline of an INVITE
//! server transaction in Proceeding, which retransmits nothing then). Arming or disarming a
//! slot bumps its generation; a queue entry is live only while its slot still holds the same
//! generation and deadline, so cancelled timers cost nothing until they surface (or until the
//! queue is compacted).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// Lanes beyond this many distinct (kind, delay) pairs are not made: their entries go to the
/// heap. The transaction layer uses about ten.
const MAX_LANES: usize = 16;

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

/// Entries of one kind armed with one delay, in arming order, which is firing order while
/// the clock does not step back (checked at each append).
struct Lane {
    kind: Kind,
    delay: Duration,
    queue: VecDeque<Entry>,
}

/// Where the queue's earliest entry is.
#[derive(Clone, Copy)]
enum Front {
    Lane(usize),
    Heap,
}

pub(crate) struct Timers {
    lanes: Vec<Lane>,
    /// Entries that fit no lane.
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    /// Slots currently armed, across all transactions: the number of live entries.
    armed: usize,
    /// Entries queued, live or dead.
    queued: usize,
    /// Where the earliest entry is (none when nothing is queued): kept on every change, so a
    /// peek, which the layer makes after every mutation, does not scan the lanes.
    first: Option<Front>,
}

impl Timers {
    pub(crate) fn new() -> Self {
        Timers { lanes: Vec::new(), heap: BinaryHeap::new(), seq: 0, armed: 0, queued: 0, first: None }
    }

    /// Arms (or re-arms) a slot to fire `delay` after `now`. A deadline that overflows
    /// `Instant` is never armed.
    pub(crate) fn arm(&mut self, slots: &mut Slots, kind: Kind, side: Side, id: u64, now: Instant, delay: Duration) {
        self.disarm(slots, kind);
        let Some(deadline) = now.checked_add(delay) else {
            tracing::debug!(id, "timer deadline overflows, not armed");
            return;
        };
        let slot = slots.get_mut(kind);
        slot.deadline = Some(deadline);
        self.armed += 1;
        self.seq += 1;
        self.push(Entry { deadline, kind, seq: self.seq, side, id, generation: slot.generation }, delay);
    }

    fn push(&mut self, entry: Entry, delay: Duration) {
        self.queued += 1;
        let lane = match self.lanes.iter().position(|l| l.delay == delay && l.kind == entry.kind) {
            Some(i) => Some(i),
            None if self.lanes.len() < MAX_LANES => {
                self.lanes.push(Lane { kind: entry.kind, delay, queue: VecDeque::new() });
                Some(self.lanes.len() - 1)
            }
            None => None,
        };
        if let Some(lane) = lane {
            let queue = &mut self.lanes[lane].queue;
            // Same kind, later `seq`: in order unless the deadline went back.
            if queue.back().is_none_or(|last| last.deadline <= entry.deadline) {
                // Only an entry at the front of its lane can be the earliest.
                let front = queue.is_empty();
                queue.push_back(entry);
                if front {
                    self.note_front(Front::Lane(lane), &entry);
                }
                return;
            }
        }
        self.heap.push(Reverse(entry));
        if self.heap.peek().is_some_and(|Reverse(top)| *top == entry) {
            self.note_front(Front::Heap, &entry);
        }
    }

    /// A new entry at the front of its lane or heap: the earliest if it is before the earliest.
    fn note_front(&mut self, at: Front, entry: &Entry) {
        if self.first.and_then(|first| self.entry_at(first)).is_none_or(|first| entry < first) {
            self.first = Some(at);
        }
    }

    fn entry_at(&self, at: Front) -> Option<&Entry> {
        match at {
            Front::Lane(i) => self.lanes.get(i)?.queue.front(),
            Front::Heap => self.heap.peek().map(|Reverse(e)| e),
        }
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

    fn front(&self) -> Option<(Front, &Entry)> {
        let first = self.first?;
        Some((first, self.entry_at(first)?))
    }

    /// Finds the earliest entry by comparing every lane's front and the heap's top.
    fn scan(&self) -> Option<Front> {
        let mut best = self.heap.peek().map(|Reverse(e)| (Front::Heap, e));
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(e) = lane.queue.front() {
                if best.is_none_or(|(_, b)| e < b) {
                    best = Some((Front::Lane(i), e));
                }
            }
        }
        best.map(|(at, _)| at)
    }

    pub(crate) fn peek(&self) -> Option<&Entry> {
        self.front().map(|(_, e)| e)
    }

    fn take(&mut self, front: Front) -> Option<Entry> {
        let entry = match front {
            Front::Lane(i) => self.lanes.get_mut(i).and_then(|lane| lane.queue.pop_front()),
            Front::Heap => self.heap.pop().map(|Reverse(e)| e),
        };
        if entry.is_some() {
            self.queued -= 1;
        }
        self.first = self.scan();
        entry
    }

    /// Removes and returns the earliest entry if it is due at `now` (live or not).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Entry> {
        match self.front() {
            Some((front, e)) if e.deadline <= now => self.take(front),
            _ => None,
        }
    }

    pub(crate) fn pop(&mut self) {
        if let Some((front, _)) = self.front() {
            self.take(front);
        }
    }

    /// Drops dead entries once they outnumber live ones by far (amortized O(1) per arm).
    pub(crate) fn compact_if_needed(&mut self, is_live: impl Fn(&Entry) -> bool) {
        if self.queued > 1024 && self.queued > 4 * self.armed {
            self.compact(is_live);
        }
    }

    fn compact(&mut self, is_live: impl Fn(&Entry) -> bool) {
        self.heap.retain(|Reverse(e)| is_live(e));
        let mut queued = self.heap.len();
        for lane in &mut self.lanes {
            lane.queue.retain(|e| is_live(e));
            queued += lane.queue.len();
        }
        self.queued = queued;
        self.first = self.scan();
    }

    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    #[cfg(test)]
    pub(crate) fn armed(&self) -> usize {
        self.armed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::random::Rng;

    /// The lanes fire exactly what one binary heap of the same entries fires, in the same
    /// order (dead entries included), through arms, re-arms, disarms, compaction, a clock that
    /// sometimes steps back, ties between kinds and more distinct delays than lanes.
    #[test]
    fn lanes_fire_in_the_order_of_one_heap() {
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut now = Instant::now() + Duration::from_secs(100);
            let mut timers = Timers::new();
            let mut oracle: BinaryHeap<Reverse<Entry>> = BinaryHeap::new();
            let mut slots = vec![Slots::default(); 64];
            // Coarse delays and steps, so that deadlines of different kinds often tie; seeds
            // above 20 use more delays than there are lanes.
            let delays: u64 = if seed > 20 { 40 } else { 6 };
            let mut fired = 0usize;
            let mut heap_used = false;
            for _ in 0..3_000 {
                match rng.below(10) {
                    0..=4 => {
                        let id = rng.below(slots.len() as u64);
                        let kind = if rng.below(2) == 0 { Kind::Timeout } else { Kind::Retransmit };
                        let side = if rng.below(2) == 0 { Side::Server } else { Side::Client };
                        let delay = Duration::from_millis(100 * (1 + rng.below(delays)));
                        let slot = &mut slots[id as usize];
                        timers.arm(slot, kind, side, id, now, delay);
                        let armed = *slot.get(kind);
                        let entry = Entry { deadline: now + delay, kind, seq: timers.seq, side, id, generation: armed.generation };
                        oracle.push(Reverse(entry));
                    }
                    5 => {
                        let id = rng.below(slots.len() as u64) as usize;
                        timers.disarm_all(&mut slots[id]);
                    }
                    6..=7 => {
                        now += Duration::from_millis(100 * rng.below(8));
                        if rng.below(20) == 0 {
                            now -= Duration::from_millis(100 * rng.below(30));
                        }
                    }
                    8 => {
                        assert_eq!(timers.peek(), oracle.peek().map(|Reverse(e)| e), "seed {seed}");
                        loop {
                            let expected = match oracle.peek() {
                                Some(Reverse(e)) if e.deadline <= now => oracle.pop().map(|Reverse(e)| e),
                                _ => None,
                            };
                            let got = timers.pop_due(now);
                            assert_eq!(got, expected, "seed {seed}");
                            if got.is_none() {
                                break;
                            }
                            fired += 1;
                        }
                    }
                    _ => {
                        let live = |e: &Entry| slots[e.id as usize].is_live(e);
                        // Compact both the same way, whatever the threshold says.
                        if rng.below(4) == 0 {
                            oracle.retain(|Reverse(e)| live(e));
                            timers.compact(live);
                        } else {
                            timers.pop();
                            oracle.pop();
                        }
                    }
                }
                assert_eq!(timers.queued(), oracle.len(), "seed {seed}");
                assert_eq!(timers.peek(), oracle.peek().map(|Reverse(e)| e), "seed {seed}");
                heap_used |= !timers.heap.is_empty();
            }
            assert!(fired > 100, "seed {seed}: only {fired} entries fired");
            if seed > 20 {
                assert!(heap_used, "seed {seed}: the heap beside the lanes was never used");
            }
            // Drain: everything left comes out in the oracle's order.
            let end = now + Duration::from_secs(3_600);
            while let Some(Reverse(expected)) = oracle.pop() {
                assert_eq!(timers.pop_due(end), Some(expected), "seed {seed}");
            }
            assert_eq!(timers.pop_due(end), None);
        }
    }

    /// With a forward clock and few delays every entry goes to a lane; a clock step back or a
    /// delay beyond the lanes goes to the heap.
    #[test]
    fn out_of_order_and_surplus_delays_go_to_the_heap() {
        let mut timers = Timers::new();
        let mut slots = vec![Slots::default(); 40];
        let now = Instant::now() + Duration::from_secs(10);
        for (i, slot) in slots.iter_mut().enumerate().take(MAX_LANES) {
            timers.arm(slot, Kind::Timeout, Side::Server, i as u64, now, Duration::from_millis(10 * (i as u64 + 1)));
        }
        assert!(timers.heap.is_empty());
        assert_eq!(timers.lanes.len(), MAX_LANES);
        timers.arm(&mut slots[20], Kind::Timeout, Side::Server, 20, now, Duration::from_secs(99));
        assert_eq!(timers.heap.len(), 1, "a delay beyond the lanes");
        timers.arm(&mut slots[21], Kind::Timeout, Side::Server, 21, now - Duration::from_secs(1), Duration::from_millis(10));
        assert_eq!(timers.heap.len(), 2, "a deadline before its lane's last");
        assert_eq!(timers.peek().map(|e| e.id), Some(21));
        assert_eq!(timers.queued(), MAX_LANES + 2);
    }
}
