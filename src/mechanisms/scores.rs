//! Per-item scores for selection: S(i) = Σ over the rows of item i of clamp(score, 0, Δ).
//!
//! The table does not know what an item is: the caller hashes items and compares them
//! (the SQL layer with the item type's own PostgreSQL hash and equality functions), which
//! keeps this module free of database types. Scores are kept in units of Δ = max_score,
//! so that every row adds a number in [0, 1] and no sum can overflow.

use allocator_api2::alloc::{Allocator, Global};
use hashbrown::HashTable;

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

/// One item and its score.
#[derive(Debug, Clone)]
pub struct ItemScore<I> {
    pub hash: u32,
    pub item: I,
    /// Σ of the contributions, in units of max_score.
    pub score: f64,
}

/// Item scores in a hash table whose slots hold the item's hash, the item and its score,
/// so that finding an item touches one slot (and the item itself, to compare it). `A`
/// allocates the table (the SQL layer passes PostgreSQL's aggregate memory context).
#[derive(Debug, Clone)]
pub struct ScoreTable<I, A: Allocator + Clone = Global> {
    table: HashTable<ItemScore<I>, A>,
    /// False once the candidate set is fixed: rows of other items are then ignored.
    open: bool,
}

impl<I> Default for ScoreTable<I> {
    fn default() -> Self {
        Self::new_in(Global)
    }
}

/// hashbrown keys its buckets on the low bits and its control bytes on the top 7 bits of
/// a 64-bit hash; item hashes have 32 bits, so place them in both halves.
fn spread(hash: u32) -> u64 {
    ((hash as u64) << 32) | hash as u64
}

impl<I> ScoreTable<I> {
    /// An empty table that accepts any item.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<I, A: Allocator + Clone> ScoreTable<I, A> {
    /// An empty table that accepts any item, allocating with `allocator`.
    pub fn new_in(allocator: A) -> Self {
        Self {
            table: HashTable::new_in(allocator),
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
    pub fn add(
        &mut self,
        hash: u32,
        amount: f64,
        mut same: impl FnMut(&I) -> bool,
        new_item: impl FnOnce() -> I,
    ) -> bool {
        if let Some(entry) = self.table.find_mut(spread(hash), |entry| {
            entry.hash == hash && same(&entry.item)
        }) {
            entry.score += amount;
            return true;
        }
        if !self.open {
            return false;
        }
        let entry = ItemScore {
            hash,
            item: new_item(),
            score: amount,
        };
        self.table
            .insert_unique(spread(hash), entry, |entry| spread(entry.hash));
        true
    }

    /// The items and their scores, in the table's order (fixed for a given sequence of
    /// additions).
    pub fn iter(&self) -> impl Iterator<Item = &ItemScore<I>> {
        self.table.iter()
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
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
