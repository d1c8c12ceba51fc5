//! A small ordered set for the keys and sessions one negotiation handles: a transition touches
//! a handful of sessions, so a sorted inline vector beats a `BTreeSet` (which allocates a node
//! per set) on the per-message path. Only what the engine uses is provided.

use smallvec::SmallVec;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SortedSet<T: Ord + Copy>(SmallVec<[T; 4]>);

impl<T: Ord + Copy> Default for SortedSet<T> {
    fn default() -> Self {
        SortedSet(SmallVec::new())
    }
}

impl<T: Ord + Copy> SortedSet<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value`; false if it was there already.
    pub fn insert(&mut self, value: T) -> bool {
        // A handful of values, often coming in order or again: scanning from the end is
        // cheaper than a binary search.
        let mut at = self.0.len();
        while let Some(v) = at.checked_sub(1).map(|i| self.0[i]) {
            if v < value {
                break;
            }
            if v == value {
                return false;
            }
            at -= 1;
        }
        self.0.insert(at, value);
        true
    }

    pub fn remove(&mut self, value: &T) -> bool {
        match self.0.binary_search(value) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, value: &T) -> bool {
        self.0.iter().any(|v| v == value)
    }

    #[cfg(test)]
    pub fn pop_first(&mut self) -> Option<T> {
        if self.0.is_empty() {
            None
        } else {
            Some(self.0.remove(0))
        }
    }

    /// Makes this set a copy of `other` (a handful of values: pushed one by one, cheaper than
    /// the general `clone_from`).
    pub fn copy_from(&mut self, other: &SortedSet<T>) {
        self.0.clear();
        for &v in &other.0 {
            self.0.push(v);
        }
    }

    /// Removes the first `n` values (all of them if there are fewer).
    pub fn remove_first(&mut self, n: usize) {
        if n >= self.0.len() {
            self.0.clear();
        } else {
            self.0.drain(..n);
        }
    }

    pub fn first(&self) -> Option<&T> {
        self.0.first()
    }

    pub fn last(&self) -> Option<&T> {
        self.0.last()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// The values not in `other`, in order.
    pub fn difference<'s>(&'s self, other: &'s SortedSet<T>) -> impl Iterator<Item = &'s T> + 's {
        self.0.iter().filter(move |v| !other.contains(v))
    }

    /// The values at or above `from`, in order.
    pub fn at_or_above(&self, from: &T) -> &[T] {
        let at = self.0.partition_point(|v| v < from);
        &self.0[at..]
    }
}

impl<T: Ord + Copy> Extend<T> for SortedSet<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for v in iter {
            self.insert(v);
        }
    }
}

impl<T: Ord + Copy> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut set = SortedSet::new();
        set.extend(iter);
        set
    }
}

impl<T: Ord + Copy, const N: usize> From<[T; N]> for SortedSet<T> {
    fn from(values: [T; N]) -> Self {
        values.into_iter().collect()
    }
}

impl<T: Ord + Copy> IntoIterator for SortedSet<T> {
    type Item = T;
    type IntoIter = smallvec::IntoIter<[T; 4]>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'s, T: Ord + Copy> IntoIterator for &'s SortedSet<T> {
    type Item = &'s T;
    type IntoIter = std::slice::Iter<'s, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_sorted_and_unique() {
        let mut s: SortedSet<u32> = [5, 1, 3].into();
        assert!(!s.insert(3));
        assert!(s.insert(2));
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![1, 2, 3, 5]);
        assert_eq!(s.at_or_above(&3), &[3, 5]);
        assert_eq!(s.pop_first(), Some(1));
        let mut t: SortedSet<u32> = [1, 2, 3].into();
        t.remove_first(2);
        assert_eq!(t.iter().copied().collect::<Vec<_>>(), vec![3]);
        t.remove_first(5);
        assert_eq!(t.len(), 0);
        t.copy_from(&s);
        assert_eq!(t, s);
        assert!(s.remove(&5));
        assert_eq!(s.difference(&[3].into()).copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!((s.first(), s.last(), s.len()), (Some(&2), Some(&3), 2));
    }

    #[test]
    fn matches_a_btree_set_past_the_inline_capacity() {
        let mut s = SortedSet::new();
        let mut model = std::collections::BTreeSet::new();
        // Appends at the end, inserts in front and in the middle, repeats.
        for v in [4u32, 9, 12, 1, 7, 12, 20, 0, 9, 15, 3] {
            assert_eq!(s.insert(v), model.insert(v), "insert {v}");
            assert_eq!(s.iter().copied().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
        }
    }
}
