//! The ordered negotiation protocol's one decision, shared by the engine and its model test:
//! given what a negotiation holds and the keys evaluation says it wants, what to release and
//! what to acquire next. Keys are acquired in increasing order only, so waiting never closes
//! a cycle (no deadlock); a key wanted below one already held forces a back-off.

use crate::locks::Key;
use crate::sorted_set::SortedSet;

/// Updates `held` and `to_acquire` for `wanted`; returns the keys to release now (a back-off
/// when not empty). Afterwards every key of `to_acquire` is greater than every key held.
pub(crate) fn plan(held: &mut SortedSet<Key>, to_acquire: &mut SortedSet<Key>, wanted: &SortedSet<Key>) -> Vec<Key> {
    let wanted: SortedSet<Key> = wanted.difference(held).copied().collect();
    let Some(&first) = wanted.first() else { return Vec::new() };
    let released: Vec<Key> = held.at_or_above(&first).to_vec();
    for k in &released {
        held.remove(k);
        to_acquire.insert(*k);
    }
    to_acquire.extend(wanted);
    debug_assert!(held.last().is_none_or(|h| to_acquire.first().is_none_or(|a| a > h)));
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_wants_need_no_back_off() {
        let mut held = SortedSet::from([1, 3]);
        let mut todo = SortedSet::new();
        assert!(plan(&mut held, &mut todo, &SortedSet::from([5, 3, 7])).is_empty());
        assert_eq!(todo, SortedSet::from([5, 7]));
    }

    #[test]
    fn a_lower_key_releases_everything_above_it() {
        let mut held = SortedSet::from([1, 4, 6]);
        let mut todo = SortedSet::new();
        assert_eq!(plan(&mut held, &mut todo, &SortedSet::from([2])), vec![4, 6]);
        assert_eq!(held, SortedSet::from([1]));
        assert_eq!(todo, SortedSet::from([2, 4, 6]));
    }
}
