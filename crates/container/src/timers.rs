//! Application timers of one executor: a heap of deadlines with lazy cancellation.

use crate::ids::{AppSessionId, TimerId};
use crate::service::ServiceId;
use griddle::HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub(crate) struct TimerEntry {
    pub app: AppSessionId,
    pub service: ServiceId,
    pub name: &'static str,
    pub period: Option<Duration>,
}

#[derive(Default)]
pub(crate) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: HashMap<u64, TimerEntry, foldhash::fast::RandomState>,
    next_id: u64,
}

impl TimerQueue {
    pub fn arm(&mut self, at: Instant, entry: TimerEntry) -> TimerId {
        self.next_id += 1;
        let id = self.next_id;
        self.entries.insert(id, entry);
        self.heap.push(Reverse((at, id)));
        TimerId(id)
    }

    pub fn cancel(&mut self, id: TimerId) -> bool {
        self.entries.remove(&id.0).is_some()
    }

    pub fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_cancelled();
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Pops one timer due at `now`; periodic timers are re-armed at their next period.
    pub fn pop_due(&mut self, now: Instant) -> Option<(TimerId, TimerEntry)> {
        self.drop_cancelled();
        let Reverse((at, id)) = *self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        let entry = *self.entries.get(&id)?;
        match entry.period {
            Some(period) => self.heap.push(Reverse((at + period, id))),
            None => {
                self.entries.remove(&id);
            }
        }
        Some((TimerId(id), entry))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn drop_cancelled(&mut self) {
        while let Some(Reverse((_, id))) = self.heap.peek() {
            if self.entries.contains_key(id) {
                return;
            }
            self.heap.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_periodic_and_cancel() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let e = |name, period| TimerEntry { app: AppSessionId(1), service: 0, name, period };
        let a = q.arm(t0 + Duration::from_secs(2), e("once", None));
        let p = q.arm(t0 + Duration::from_secs(1), e("tick", Some(Duration::from_secs(1))));
        let c = q.arm(t0 + Duration::from_millis(500), e("cancelled", None));
        assert!(q.cancel(c));
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(1)));
        assert!(q.pop_due(t0).is_none());
        let fired: Vec<_> = std::iter::from_fn(|| q.pop_due(t0 + Duration::from_secs(2))).map(|(id, e)| (id, e.name)).collect();
        assert_eq!(fired, vec![(p, "tick"), (a, "once"), (p, "tick")]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(3)));
        assert!(q.cancel(p));
        assert_eq!(q.next_deadline(), None);
    }
}
