//! A generational slab: transactions live in a `Vec`, addressed by `generation << 32 | index`,
//! so lookups by id cost no hashing, ids are never reused while a stale copy could still be
//! held by the TU (the generation changes on every reuse), and iteration order is deterministic.

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// An id that never names a live entry (index `u32::MAX` is never allocated).
pub(crate) const DEAD_ID: u64 = u64::MAX;

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab { entries: Vec::new(), free: Vec::new(), len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            if let Some(entry) = self.entries.get_mut(index as usize) {
                entry.value = Some(value);
                return u64::from(entry.generation) << 32 | u64::from(index);
            }
        }
        let index = self.entries.len() as u32;
        debug_assert!(index < u32::MAX);
        self.entries.push(Entry { generation: 0, value: Some(value) });
        u64::from(index)
    }

    /// The id the next [`Self::insert`] returns (if nothing else is inserted first).
    pub(crate) fn next_id(&self) -> u64 {
        match self.free.last() {
            Some(&index) => self.entries.get(index as usize).map_or(DEAD_ID, |e| u64::from(e.generation) << 32 | u64::from(index)),
            None => self.entries.len() as u64,
        }
    }

    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        let (index, generation) = split(id);
        self.entries.get(index).filter(|e| e.generation == generation).and_then(|e| e.value.as_ref())
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (index, generation) = split(id);
        self.entries.get_mut(index).filter(|e| e.generation == generation).and_then(|e| e.value.as_mut())
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let (index, generation) = split(id);
        let entry = self.entries.get_mut(index).filter(|e| e.generation == generation)?;
        let value = entry.value.take()?;
        entry.generation = entry.generation.wrapping_add(1);
        self.free.push(index as u32);
        self.len -= 1;
        Some(value)
    }

    /// Live entries in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.entries.iter().enumerate().filter_map(|(index, e)| e.value.as_ref().map(|v| (u64::from(e.generation) << 32 | index as u64, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_make_stale_ids_dead() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.remove(a), None);
        let next = slab.next_id();
        let c = slab.insert("c");
        assert_eq!(next, c, "next_id names the slot insert takes");
        assert_eq!(slab.next_id(), 2);
        assert_ne!(a, c, "a reused slot gets a new id");
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.get(c), Some(&"c"));
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.get(DEAD_ID), None);
        let ids: Vec<u64> = slab.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![c, b]);
        assert_eq!(slab.len(), 2);
    }
}
