//! Per-item scores for selection: S(i) = Σ over the rows of item i of clamp(score, 0, Δ).
//!
//! The table does not know what an item is: the caller hashes items and compares them
//! (the SQL layer with the item type's own PostgreSQL hash and equality functions), which
//! keeps this module free of database types. Scores are kept in units of Δ = max_score,
//! so that every row adds a number in [0, 1] and no sum can overflow.

use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::vec::Vec as AllocVec;

/// What one row adds to its item's score, in units of `max_score`.
///
/// Clamping makes the promised bound true for any data; an error on an out-of-range score
/// would reveal that such a row exists (../shared/PRIVACY.md, section 4). NULL and NaN count 0.
pub fn contribution(score: Option<f64>, max_score: f64) -> f64 {
    match score {
        Some(s) if !s.is_nan() => s.clamp(0.0, max_score) / max_score,
        _ => 0.0,
    }
}

/// One item, its hash and its score, as [`ScoreTable::iter`] lists them.
#[derive(Debug, Clone, Copy)]
pub struct ItemScore<'a, I> {
    pub hash: u32,
    pub item: &'a I,
    /// Σ of the contributions, in units of max_score.
    pub score: f64,
}

/// An item and its score as the table keeps them (its hash is in its slot).
#[derive(Debug, Clone)]
struct Entry<I> {
    item: I,
    score: f64,
}

/// Item scores: the items in the order they arrived, found through an open-addressing
/// index (linear probing) of their hashes. A probe reads 8-byte slots until one has the
/// row's hash, then the entry it names, and compares inline (hashbrown's probe compared
/// through `dyn FnMut` and read every candidate slot's entry); the entries of the items
/// seen first, often the frequent ones, share cache lines. `A` allocates both arrays (the
/// SQL layer passes PostgreSQL's aggregate memory context).
#[derive(Debug, Clone)]
pub struct ScoreTable<I, A: Allocator + Clone = Global> {
    entries: AllocVec<Entry<I>, A>,
    /// An item's hash in the high 32 bits and 1 + its position in `entries` in the low
    /// ones, 0 for an empty slot: a probe passes other items' slots without reading their
    /// entries (a cache miss each once the entries outgrow the cache). Empty until the
    /// first item (a group's empty state allocates nothing); then a power of two long, at
    /// least twice the entries, so that a probe for an item present reads at most 1.5
    /// slots on average (Knuth, TAOCP 6.4).
    slots: AllocVec<u64, A>,
    /// False once the candidate set is fixed: rows of other items are then ignored.
    open: bool,
}

impl<I> Default for ScoreTable<I> {
    fn default() -> Self {
        Self::new_in(Global)
    }
}

impl<I> ScoreTable<I> {
    /// An empty table that accepts any item.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<I, A: Allocator + Clone> ScoreTable<I, A> {
    const FIRST_SLOTS: usize = 4;

    /// An empty table that accepts any item, allocating with `allocator`.
    pub fn new_in(allocator: A) -> Self {
        Self {
            entries: AllocVec::new_in(allocator.clone()),
            slots: AllocVec::new_in(allocator),
            open: true,
        }
    }

    /// Fixes the candidate set to the items present now: later rows of other items are
    /// ignored, so the set of possible answers does not depend on the data.
    pub fn close(&mut self) {
        self.open = false;
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Adds `amount` to the item with this hash for which `same` holds. A new item is
    /// made by `new_item` (only while the table is open). Returns false when the row was
    /// ignored because its item is not a candidate.
    #[inline]
    pub fn add(
        &mut self,
        hash: u32,
        amount: f64,
        mut same: impl FnMut(&I) -> bool,
        new_item: impl FnOnce() -> I,
    ) -> bool {
        let mask = self.slots.len().wrapping_sub(1);
        let mut at = hash as usize & mask;
        // None only before the first item, when there are no slots.
        while let Some(&slot) = self.slots.get(at) {
            if slot == 0 {
                break;
            }
            if (slot >> 32) as u32 == hash {
                let entry = &mut self.entries[(slot as u32 - 1) as usize];
                if same(&entry.item) {
                    entry.score += amount;
                    return true;
                }
            }
            at = (at + 1) & mask;
        }
        self.insert(hash, amount, new_item, at)
    }

    /// A row of an item not yet in the table, whose probe ended at the empty slot `at`
    /// (or found no slots): kept out of line, so that the path of a row whose item is
    /// there (nearly every row) stays short.
    #[cold]
    #[inline(never)]
    fn insert(
        &mut self,
        hash: u32,
        amount: f64,
        new_item: impl FnOnce() -> I,
        mut at: usize,
    ) -> bool {
        if !self.open {
            return false;
        }
        if self.slots.is_empty() {
            self.slots.resize(Self::FIRST_SLOTS, 0);
            at = hash as usize & (Self::FIRST_SLOTS - 1);
        }
        self.entries.push(Entry {
            item: new_item(),
            score: amount,
        });
        let position = u32::try_from(self.entries.len()).expect("at most 2^32 - 1 items");
        self.slots[at] = (hash as u64) << 32 | position as u64;
        if 2 * self.entries.len() > self.slots.len() {
            self.grow();
        }
        true
    }

    /// Doubles the slots and places every item's slot again.
    fn grow(&mut self) {
        let size = 2 * self.slots.len();
        let mut slots = AllocVec::with_capacity_in(size, self.slots.allocator().clone());
        slots.resize(size, 0);
        let mask = size - 1;
        for &slot in self.slots.iter().filter(|&&slot| slot != 0) {
            let mut at = (slot >> 32) as usize & mask;
            while slots[at] != 0 {
                at = (at + 1) & mask;
            }
            slots[at] = slot;
        }
        self.slots = slots;
    }

    /// The items, their hashes and their scores, in the order the items arrived (fixed
    /// for a given sequence of additions).
    pub fn iter(&self) -> impl Iterator<Item = ItemScore<'_, I>> {
        let mut hashes = AllocVec::with_capacity_in(self.len(), self.slots.allocator().clone());
        hashes.resize(self.len(), 0u32);
        for &slot in self.slots.iter().filter(|&&slot| slot != 0) {
            hashes[(slot as u32 - 1) as usize] = (slot >> 32) as u32;
        }
        self.entries
            .iter()
            .zip(hashes)
            .map(|(entry, hash)| ItemScore {
                hash,
                item: &entry.item,
                score: entry.score,
            })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    fn hash_of(state: &RandomState, item: &str) -> u32 {
        state.hash_one(item) as u32
    }

    fn add(table: &mut ScoreTable<String>, state: &RandomState, item: &str, amount: f64) -> bool {
        table.add(
            hash_of(state, item),
            amount,
            |i| i == item,
            || item.to_string(),
        )
    }

    fn sorted(table: &ScoreTable<String>) -> Vec<(String, f64)> {
        let mut entries: Vec<(String, f64)> =
            table.iter().map(|e| (e.item.clone(), e.score)).collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    #[test]
    fn sums_per_item() {
        let state = RandomState::new();
        let mut table = ScoreTable::new();
        for (item, amount) in [("a", 1.0), ("b", 0.5), ("a", 1.0), ("c", 0.0), ("b", 0.25)] {
            assert!(add(&mut table, &state, item, amount));
        }
        assert_eq!(
            sorted(&table),
            [("a".into(), 2.0), ("b".into(), 0.75), ("c".into(), 0.0)]
        );
    }

    #[test]
    fn colliding_hashes_stay_apart() {
        let mut table = ScoreTable::new();
        for item in ["x", "y", "x"] {
            table.add(7, 1.0, |i: &String| i == item, || item.to_string());
        }
        assert_eq!(sorted(&table), [("x".into(), 2.0), ("y".into(), 1.0)]);
    }

    /// Hashes that agree in their low 20 bits share a probe sequence at every size the
    /// table grows through; every item keeps its own score, in the order it arrived.
    #[test]
    fn items_whose_probes_collide_through_growth() {
        let mut table = ScoreTable::new();
        for round in 1..=2 {
            for i in 0..3000u32 {
                let hash = (i % 7) << 20 | 5;
                table.add(hash, 1.0, |&j: &u32| j == i, || i);
            }
            assert_eq!(table.len(), 3000);
            assert!(table.iter().all(|e| e.score == round as f64));
        }
        assert!(table.iter().map(|e| *e.item).eq(0..3000));
        assert!(
            table.iter().all(|e| e.hash == (e.item % 7) << 20 | 5),
            "hashes kept"
        );
        table.close();
        assert!(!table.add(3 << 20 | 5, 1.0, |_| false, || 9999));
        assert!(
            table.iter().all(|e| e.hash == (e.item % 7) << 20 | 5),
            "closed"
        );
    }

    #[test]
    fn a_closed_table_ignores_other_items() {
        let state = RandomState::new();
        let mut table = ScoreTable::new();
        add(&mut table, &state, "candidate", 0.0);
        table.close();
        assert!(!add(&mut table, &state, "intruder", 1.0));
        assert!(add(&mut table, &state, "candidate", 1.0));
        assert_eq!(sorted(&table), [("candidate".into(), 1.0)]);
    }

    #[test]
    fn many_items() {
        let state = RandomState::new();
        let mut table = ScoreTable::new();
        for round in 0..3 {
            for i in 0..100_000 {
                add(&mut table, &state, &i.to_string(), 1.0);
            }
            assert_eq!(table.len(), 100_000, "round {round}");
        }
        assert!(table.iter().all(|e| e.score == 3.0));
    }

    #[test]
    fn contributions_are_clamped_in_units_of_max_score() {
        assert_eq!(contribution(Some(3.0), 5.0), 0.6);
        assert_eq!(contribution(Some(7.0), 5.0), 1.0);
        assert_eq!(contribution(Some(-2.0), 5.0), 0.0);
        assert_eq!(contribution(Some(f64::INFINITY), 5.0), 1.0);
        assert_eq!(contribution(Some(f64::NEG_INFINITY), 5.0), 0.0);
        assert_eq!(contribution(Some(f64::NAN), 5.0), 0.0);
        assert_eq!(contribution(None, 5.0), 0.0);
    }
}
