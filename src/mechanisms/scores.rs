//! Per-item scores for selection: S(i) = Σ over the rows of item i of clamp(score, 0, Δ).
//!
//! The table does not know what an item is: the caller hashes items and compares them
//! (the SQL layer with the item type's own PostgreSQL hash and equality functions), which
//! keeps this module free of database types. Scores are kept in units of Δ = max_score,
//! so that every row adds a number in [0, 1] and no sum can overflow.

use crate::mechanisms::prefetch::prefetch;
use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::vec::Vec as AllocVec;

/// What one row adds to its item's score, in units of `max_score`.
///
/// Clamping makes the promised bound true for any data; an error on an out-of-range score
/// would reveal that such a row exists (../shared/PRIVACY.md, section 4). NULL and NaN count 0.
pub fn contribution(score: Option<f64>, max_score: f64) -> f64 {
    match score {
        // max and min rather than clamp, which panics should max_score be below 0 or NaN
        // (validated positive: rows are added outside pgrx's guard).
        Some(s) if !s.is_nan() => s.max(0.0).min(max_score) / max_score,
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

/// An item and its score as the table keeps them (its hash is beside its tag).
#[derive(Debug, Clone, Default)]
struct Entry<I> {
    item: I,
    score: f64,
}

/// Item scores, in an open-addressing table (linear probing) whose slots hold the entries
/// themselves, so that a row whose item is there reads one line beyond the tags: a probe
/// reads one-byte tags (the hash's top 7 bits; 128 KB for 10^5 items, so they stay in
/// the cache) and an entry only where its tag matches (a wrong match one slot in 128). With the entries apart, behind 8-byte slots that name them, a row of a rare item
/// read two lines out of the cache one after the other: `make bench`'s `dp_argmax` over
/// 10^5 items spent a third of its time waiting on them. The items' full hashes and the
/// order they arrived in are kept aside, read only to grow and to list the items. `A`
/// allocates every array (the SQL layer passes PostgreSQL's aggregate memory context).
#[derive(Debug, Clone)]
pub struct ScoreTable<I, A: Allocator + Clone = Global> {
    /// Per slot: 0 when empty, else 0x80 | the hash's top 7 bits. Empty until the first
    /// item (a group's empty state allocates nothing); then a power of two long, at most
    /// seven eighths full while the table is open, so that a probe for an item present
    /// reads at most 4.5 tags on average (Knuth, TAOCP 6.4), in one line of them or two;
    /// three quarters made 10^5 items take 2^18 slots, their entries 8 MB, and ran
    /// slower. A closed table is at most half full ([`ScoreTable::close`]).
    tags: AllocVec<u8, A>,
    /// Per slot: its item and score (a default entry in an empty slot).
    entries: AllocVec<Entry<I>, A>,
    /// Per slot: its item's hash.
    hashes: AllocVec<u32, A>,
    /// The occupied slots, in the order their items arrived.
    arrivals: AllocVec<u32, A>,
    /// False once the candidate set is fixed: rows of other items are then ignored.
    open: bool,
}

impl<I: Default> Default for ScoreTable<I> {
    fn default() -> Self {
        Self::new_in(Global)
    }
}

impl<I: Default> ScoreTable<I> {
    /// An empty table that accepts any item.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The tag of a hash: its top 7 bits, with the high bit set (0 marks an empty slot).
#[inline]
fn tag_of(hash: u32) -> u8 {
    0x80 | (hash >> 25) as u8
}

impl<I: Default, A: Allocator + Clone> ScoreTable<I, A> {
    const FIRST_SLOTS: usize = 4;

    /// An empty table that accepts any item, allocating with `allocator`.
    pub fn new_in(allocator: A) -> Self {
        Self {
            tags: AllocVec::new_in(allocator.clone()),
            entries: AllocVec::new_in(allocator.clone()),
            hashes: AllocVec::new_in(allocator.clone()),
            arrivals: AllocVec::new_in(allocator),
            open: true,
        }
    }

    /// Fixes the candidate set to the items present now: later rows of other items are
    /// ignored, so the set of possible answers does not depend on the data. The slots
    /// are then made at most half full: every row of another item probes until an empty
    /// tag, 2.5 tags on average at half load against 32.5 at seven eighths (Knuth).
    pub fn close(&mut self) {
        self.open = false;
        while 2 * self.len() > self.tags.len() {
            self.grow();
        }
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
        same: impl FnMut(&I) -> bool,
        new_item: impl FnOnce() -> I,
    ) -> bool {
        match self.add_to_item(hash, amount, same) {
            Ok(()) => true,
            Err(at) => self.insert(hash, amount, new_item, at),
        }
    }

    /// [`ScoreTable::add`] for an item the table holds: Ok, its score raised; else the
    /// empty slot where the probe for it ended (meaningless when there are no slots), and
    /// nothing changed. Never allocates or panics (rows counted outside pgrx's guard).
    #[inline(always)]
    pub fn add_to_item(
        &mut self,
        hash: u32,
        amount: f64,
        mut same: impl FnMut(&I) -> bool,
    ) -> Result<(), usize> {
        let mask = self.tags.len().wrapping_sub(1);
        let tag = tag_of(hash);
        let mut at = hash as usize & mask;
        // The entry of the item's first slot, where most items are, is asked for before
        // its tag is read: when the tags are out of the cache too (a table among
        // thousands, one per group), the two misses overlap.
        if let Some(entry) = self.entries.get(at) {
            prefetch(entry);
        }
        // None only before the first item, when there are no slots.
        while let Some(&found) = self.tags.get(at) {
            if found == 0 {
                break;
            }
            if found == tag {
                if let Some(entry) = self.entries.get_mut(at) {
                    if same(&entry.item) {
                        entry.score += amount;
                        return Ok(());
                    }
                }
            }
            at = (at + 1) & mask;
        }
        Err(at)
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
        if self.tags.is_empty() {
            self.resize_slots(Self::FIRST_SLOTS);
            at = hash as usize & (Self::FIRST_SLOTS - 1);
        }
        // The item first: should making it raise an ERROR, no slot is left tagged with
        // an empty entry behind it.
        let item = new_item();
        self.entries[at] = Entry {
            item,
            score: amount,
        };
        self.tags[at] = tag_of(hash);
        self.hashes[at] = hash;
        self.arrivals.push(at as u32);
        if 8 * self.len() > 7 * self.tags.len() {
            self.grow();
        }
        true
    }

    /// Makes the slots `size` long and empty (an empty table's, or one being rebuilt).
    fn resize_slots(&mut self, size: usize) {
        assert!(size <= 1 << 32, "at most 2^32 slots");
        self.tags.clear();
        self.tags.resize(size, 0);
        self.hashes.clear();
        self.hashes.resize(size, 0);
        self.entries.clear();
        self.entries.resize_with(size, Entry::default);
    }

    /// Doubles the slots and places every item again, in the order they arrived.
    fn grow(&mut self) {
        let allocator = self.tags.allocator().clone();
        let mut old = Self::new_in(allocator);
        std::mem::swap(self, &mut old);
        self.open = old.open;
        self.resize_slots(2 * old.tags.len());
        self.arrivals.reserve(old.arrivals.len());
        let mask = self.tags.len() - 1;
        for &slot in &old.arrivals {
            let slot = slot as usize;
            let hash = old.hashes[slot];
            let mut at = hash as usize & mask;
            while self.tags[at] != 0 {
                at = (at + 1) & mask;
            }
            self.tags[at] = old.tags[slot];
            self.hashes[at] = hash;
            self.entries[at] = std::mem::take(&mut old.entries[slot]);
            self.arrivals.push(at as u32);
        }
    }

    /// The items, their hashes and their scores, in the order the items arrived (fixed
    /// for a given sequence of additions).
    pub fn iter(&self) -> impl Iterator<Item = ItemScore<'_, I>> {
        self.arrivals.iter().map(|&slot| {
            let entry = &self.entries[slot as usize];
            ItemScore {
                hash: self.hashes[slot as usize],
                item: &entry.item,
                score: entry.score,
            }
        })
    }

    pub fn len(&self) -> usize {
        self.arrivals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arrivals.is_empty()
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

    /// add_to_item raises the score of an item the table holds and changes nothing for
    /// any other (no slots yet; an absent item whose probe meets others): what add then
    /// does is add's alone (rows added outside pgrx's guard).
    #[test]
    fn adding_to_a_held_item_never_inserts() {
        let mut table: ScoreTable<u32> = ScoreTable::new();
        assert!(table.add_to_item(5, 1.0, |_| true).is_err());
        assert_eq!(table.len(), 0);
        for i in 0..100u32 {
            table.add(i % 7, 1.0, |&j| j == i, || i);
        }
        for i in 0..100u32 {
            assert_eq!(table.add_to_item(i % 7, 0.5, |&j| j == i), Ok(()));
        }
        assert!(table.add_to_item(3, 1.0, |&j| j == 1000).is_err());
        assert_eq!(table.len(), 100);
        assert!(table.iter().all(|e| e.score == 1.5));
        assert!(table.iter().map(|e| *e.item).eq(0..100));
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

    /// Closing makes the slots at most half full (rows of other items probe to an empty
    /// tag) and keeps every item, score and the order they arrived in.
    #[test]
    fn a_closed_table_is_at_most_half_full() {
        let state = RandomState::new();
        let mut table = ScoreTable::new();
        for i in 0..7 {
            add(&mut table, &state, &i.to_string(), i as f64);
        }
        assert_eq!(table.tags.len(), 8, "seven eighths full while open");
        table.close();
        assert_eq!(table.tags.len(), 16);
        assert!(!add(&mut table, &state, "intruder", 1.0));
        assert!(add(&mut table, &state, "3", 1.0));
        let listed: Vec<(String, f64)> = table.iter().map(|e| (e.item.clone(), e.score)).collect();
        let expected: Vec<(String, f64)> = (0..7)
            .map(|i| (i.to_string(), i as f64 + (i == 3) as u8 as f64))
            .collect();
        assert_eq!(listed, expected);
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
        // At most seven eighths full: 10^5 items in 2^17 slots (4 MB of entries), every
        // item's tag and hash kept where its entry is.
        assert_eq!(table.tags.len(), 1 << 17);
        assert_eq!(table.entries.len(), 1 << 17);
        for &slot in &table.arrivals {
            let hash = table.hashes[slot as usize];
            assert_eq!(table.tags[slot as usize], tag_of(hash));
            assert_eq!(hash, hash_of(&state, &table.entries[slot as usize].item));
        }
        let occupied = table.tags.iter().filter(|&&tag| tag != 0).count();
        assert_eq!(occupied, 100_000);
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
