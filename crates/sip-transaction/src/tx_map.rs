//! Values a transaction user keeps per transaction, addressed by the transaction's id.
//!
//! A transaction id is a slot of the layer's slab and a generation, and the slab reuses freed
//! slots first, so the slots in use stay dense. A `TxMap` stores each value at its id's slot,
//! tagged with the id's generation: a look-up is an index and a comparison, with no hashing and
//! no probing through a table of hundreds of thousands of entries (a UDP proxy keeps each call's
//! transactions for RFC 3261's 32 s). Storage grows in fixed chunks, so growing never moves
//! what is stored (the whole-table move that decision 0007 removed from the hash maps).
//! A value left behind by a transaction that ended is replaced by the next transaction of its
//! slot, and no id of another generation ever sees it.

use crate::{ClientTxId, ServerTxId};
use std::marker::PhantomData;

/// Slots per chunk of storage.
const CHUNK: usize = 1024;

/// A transaction id as a slot and a generation.
pub trait TxKey: Copy {
    fn raw(self) -> u64;
}

impl TxKey for ServerTxId {
    fn raw(self) -> u64 {
        self.0
    }
}

impl TxKey for ClientTxId {
    fn raw(self) -> u64 {
        self.0
    }
}

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

pub struct TxMap<K, V> {
    chunks: Vec<Vec<Option<(u32, V)>>>,
    key: PhantomData<K>,
}

impl<K: TxKey, V> Default for TxMap<K, V> {
    fn default() -> Self {
        TxMap { chunks: Vec::new(), key: PhantomData }
    }
}

impl<K: TxKey, V> TxMap<K, V> {
    /// Values stored (including those left behind by ended transactions); counted, for tests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.chunks.iter().flatten().filter(|slot| slot.is_some()).count()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot_mut(&mut self, index: usize) -> Option<&mut Option<(u32, V)>> {
        self.chunks.get_mut(index / CHUNK)?.get_mut(index % CHUNK)
    }

    /// The slot of `index`, storage grown to hold it; none for the id that names no
    /// transaction ([`crate::TransactionLayer::send_request`] given an ACK returns it).
    fn slot_grown(&mut self, index: usize) -> Option<&mut Option<(u32, V)>> {
        if index as u64 == crate::slab::DEAD_ID & 0xffff_ffff {
            return None;
        }
        while self.chunks.len() <= index / CHUNK {
            let mut chunk = Vec::with_capacity(CHUNK);
            chunk.resize_with(CHUNK, || None);
            self.chunks.push(chunk);
        }
        self.slot_mut(index)
    }

    /// Stores `value` for `key`; returns the value `key` had. A value of an earlier transaction
    /// of the same slot is dropped, and so is a value for the id that names no transaction.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let (index, generation) = split(key.raw());
        match self.slot_grown(index)?.replace((generation, value)) {
            Some((g, v)) if g == generation => Some(v),
            _ => None,
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        let (index, generation) = split(key.raw());
        match self.chunks.get(index / CHUNK)?.get(index % CHUNK)? {
            Some((g, v)) if *g == generation => Some(v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let (index, generation) = split(key.raw());
        match self.slot_mut(index)? {
            Some((g, v)) if *g == generation => Some(v),
            _ => None,
        }
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let (index, generation) = split(key.raw());
        let slot = self.slot_mut(index)?;
        match slot {
            Some((g, _)) if *g == generation => slot.take().map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value of `key`, stored first from `make` if it has none (an earlier transaction's
    /// value is replaced); none for the id that names no transaction.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> Option<&mut V> {
        let (index, generation) = split(key.raw());
        let slot = self.slot_grown(index)?;
        if !matches!(slot, Some((g, _)) if *g == generation) {
            *slot = Some((generation, make()));
        }
        slot.as_mut().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn id(index: u64, generation: u64) -> ServerTxId {
        ServerTxId(generation << 32 | index)
    }

    #[test]
    fn a_value_is_seen_only_by_its_own_generation() {
        let mut map: TxMap<ServerTxId, &str> = TxMap::default();
        assert_eq!(map.insert(id(3, 0), "first"), None);
        assert_eq!(map.get(&id(3, 0)), Some(&"first"));
        assert_eq!(map.get(&id(3, 1)), None, "a later transaction of the slot");
        assert_eq!(map.remove(&id(3, 1)), None);
        assert_eq!(map.len(), 1);
        // The slot's next transaction replaces a value left behind.
        assert_eq!(map.insert(id(3, 1), "second"), None);
        assert_eq!(map.len(), 1);
        assert_eq!(map.get(&id(3, 0)), None);
        assert_eq!(map.insert(id(3, 1), "third"), Some("second"));
        assert_eq!(map.remove(&id(3, 1)), Some("third"));
        assert!(map.is_empty());
        assert_eq!(map.get(&id(5_000, 0)), None, "beyond the storage");
        assert_eq!(map.get_or_insert_with(id(5_000, 2), || "made").copied(), Some("made"));
        assert_eq!(map.get_or_insert_with(id(5_000, 2), || "not made").copied(), Some("made"));
        assert_eq!(map.len(), 1);
        // The id that names no transaction stores nothing (and allocates nothing).
        let dead = ServerTxId(crate::slab::DEAD_ID);
        assert_eq!(map.insert(dead, "dead"), None);
        assert_eq!(map.get(&dead), None);
        assert_eq!(map.get_or_insert_with(dead, || "dead"), None);
        assert_eq!((map.len(), map.chunks.len()), (1, 5_000 / CHUNK + 1));
    }

    /// Random operations against a `HashMap` of the same ids, with slots reused the way the
    /// layer's slab reuses them (a new generation per reuse).
    #[test]
    fn agrees_with_a_hash_map() {
        let mut rng = crate::tests::random::Rng(0x9E37_79B9_7F4A_7C15);
        let mut next = move |n: u64| rng.below(n);
        let mut map: TxMap<ServerTxId, u64> = TxMap::default();
        let mut oracle: HashMap<ServerTxId, u64> = HashMap::new();
        let mut generations = vec![0u64; 3_000];
        for step in 0..200_000u64 {
            let index = next(generations.len() as u64);
            let key = id(index, generations[index as usize]);
            match next(6) {
                0 | 1 => assert_eq!(map.insert(key, step), oracle.insert(key, step)),
                2 => assert_eq!(map.remove(&key), oracle.remove(&key)),
                3 => {
                    // The transaction ends: its value may be left behind (the oracle forgets it,
                    // as no id will name it again).
                    if next(2) == 0 {
                        assert_eq!(map.remove(&key), oracle.remove(&key));
                    } else {
                        oracle.remove(&key);
                    }
                    generations[index as usize] += 1;
                }
                4 => assert_eq!(map.get_or_insert_with(key, || step).copied(), Some(*oracle.entry(key).or_insert(step))),
                _ => assert_eq!(map.get(&key), oracle.get(&key)),
            }
        }
        for (index, &generation) in generations.iter().enumerate() {
            let key = id(index as u64, generation);
            assert_eq!(map.get(&key), oracle.get(&key));
        }
    }
}
