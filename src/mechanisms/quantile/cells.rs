//! Where a histogram keeps its counts: sparse (sorted run-length counts and pending
//! cells) for a few distinct values, dense (a byte a grid point and carries) for many.

use crate::mechanisms::prefetch::prefetch;
use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::boxed::Box as AllocBox;
use allocator_api2::vec::Vec as AllocVec;
use std::hash::{BuildHasherDefault, Hasher};

/// The cells of a group with few distinct values: run-length counts sorted by cell, and
/// the cells added since they were last merged in. Adding a value is a push; when the
/// pending cells are twice as many as the sorted ones (at least 1,024) they are sorted
/// and merged in, unless at least half of them are distinct
/// ([`SparseCells::merge_unless_distinct`]), so a value is merged about log₃(n/1,024)
/// times (a group of 1,000 values never, until its final function sorts them once) and
/// the memory is 8 bytes per occupied cell plus 4 per pending value, the pending ones
/// fewer than twice the sorted ones, 1,024 or (after a wait) 16,384 (a hash table would
/// take 2-4 times that, rounded up by palloc to powers of two).
#[derive(Debug, Clone)]
#[repr(C)] // what a row touches first, next to its histogram's total (issue 22)
pub(super) struct SparseCells<A: Allocator + Clone> {
    pub(super) pending: AllocVec<u32, A>,
    /// The number of pending cells that triggers a merge (or a wait): twice the sorted
    /// ones, at least PENDING, or twice the cells that waited (kept here so that a row
    /// need not read `sorted`).
    pub(super) merge_at: usize,
    pub(super) sorted: AllocVec<(u32, u32), A>,
}

/// The bits of a 4,096-bit map that `cells` set, one each at a hash of the cell: at most
/// their number of distinct cells.
pub(super) fn bits_set(cells: &[u32]) -> usize {
    let mut bits = [0u64; 64];
    for &cell in cells {
        let bit = ((cell as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize;
        bits[bit / 64] |= 1 << (bit % 64);
    }
    bits.iter().map(|word| word.count_ones() as usize).sum()
}

/// Sorts cells: by radix (at most 8 bits a pass, as many passes as the largest cell
/// needs) once they are many, a comparison sort below that.
pub(super) fn sort_cells<B: Allocator + Clone>(cells: &mut AllocVec<u32, B>) {
    if cells.len() < 64 {
        return cells.sort_unstable();
    }
    let largest = cells.iter().copied().max().unwrap_or(0);
    let mut scratch = AllocVec::new_in(cells.allocator().clone());
    radix_sort(cells, &mut scratch, u32::BITS - largest.leading_zeros());
}

/// A merged count does not fit in 32 bits: the histogram must go dense.
pub(super) struct CountOverflow;

impl<A: Allocator + Clone> SparseCells<A> {
    pub(super) fn new_in(allocator: A) -> Self {
        Self {
            pending: AllocVec::new_in(allocator.clone()),
            merge_at: Self::PENDING,
            sorted: AllocVec::new_in(allocator),
        }
    }

    /// Pending cells that trigger a merge: 4 KiB of them at least.
    pub(super) const PENDING: usize = 1 << 10;

    /// Adds a cell to a histogram of `grid_size`; Ok(true) when the pending cells were
    /// merged in.
    #[inline]
    pub(super) fn push(&mut self, cell: u32, grid_size: u32) -> Result<bool, CountOverflow> {
        self.pending.push(cell);
        if self.pending.len() < self.merge_at {
            return Ok(false);
        }
        self.merge_unless_distinct(grid_size)
    }

    /// Adds cells in bulk (another state's pending cells, in the order they came): as
    /// many pushes, one copy. Ok(true) when the pending cells were merged in.
    pub(super) fn extend(&mut self, cells: &[u32], grid_size: u32) -> Result<bool, CountOverflow> {
        let needed = self.pending.len() + cells.len();
        if needed > self.pending.capacity() {
            // Room for a power of two of cells, as palloc rounds its chunks (AllocSet):
            // a parallel plan's leader appending three thirds of a group of 200 grew it
            // to 67, 134, then 268 cells (1,072 bytes in a 2 KiB chunk); now to 128 and
            // 256, one copy fewer and half the chunk. Still doubling, so O(1) a cell.
            let room = needed.next_power_of_two() - self.pending.len();
            self.pending.reserve_exact(room);
        }
        self.pending.extend_from_slice(cells);
        if self.pending.len() < self.merge_at {
            return Ok(false);
        }
        self.merge_unless_distinct(grid_size)
    }

    /// At `merge_at` pending cells: merges them in (Ok(true)), unless at least half of
    /// them are distinct, as a 4,096-bit map's bits say ([`bits_set`], a lower bound):
    /// then their counts, 8 bytes a cell, would take no less than the 4 bytes a value they
    /// take pending, so they wait until they are twice as many (Ok(false)). A column of
    /// distinct values (floats) merged its first 1,024 values into twice their memory and
    /// sorted them again in its final function (issue 22); now, on a grid of 2^16 points
    /// or more, a group of fewer than 8,192 values in distinct cells (a float column's)
    /// merges none, unless its cells' order defeats the map's hash (the pending room a wait grew is kept after the merge that ends it, so a group just
    /// past that merge can hold up to about twice what it held before, within the sparse
    /// limit). The map's 4,096 bits let no more than 8,192 cells wait on (so a wait leaves
    /// at most 16,384 to come), nor more than the sorted cells at which a histogram of
    /// `grid_size` goes dense (twice as many pending cells take their memory,
    /// Histogram::densify_if). Only where the counts are kept depends on it, never what
    /// they are.
    #[cold]
    fn merge_unless_distinct(&mut self, grid_size: u32) -> Result<bool, CountOverflow> {
        let waiting = self.pending.len();
        let within_sparse_memory = waiting as u64 <= (grid_size as u64 + 1) / 16;
        if within_sparse_memory && 2 * bits_set(&self.pending) >= waiting {
            self.merge_at = 2 * waiting;
            return Ok(false);
        }
        self.compact()?;
        Ok(true)
    }

    /// Sets the sorted counts (and so when pending cells next merge).
    pub(super) fn set_sorted(&mut self, sorted: AllocVec<(u32, u32), A>) {
        self.merge_at = (2 * sorted.len()).max(Self::PENDING);
        self.sorted = sorted;
    }

    /// Merges the pending cells into the sorted counts. On overflow nothing changes.
    pub(super) fn compact(&mut self) -> Result<(), CountOverflow> {
        if self.pending.is_empty() {
            return Ok(());
        }
        sort_cells(&mut self.pending);
        let pending = &self.pending;
        let merged = Self::merged(&self.sorted, || {
            pending
                .chunk_by(|a, b| a == b)
                .map(|run| (run[0], run.len() as u64))
        })?;
        self.set_sorted(merged);
        self.pending.clear();
        Ok(())
    }

    /// The union of `sorted` and the sorted (cell, count) pairs `incoming` streams, in a
    /// vector of exactly its length (counted first: the aggregate's memory context keeps
    /// the blocks of what it once held, so a vector grown or shrunk there leaves them
    /// behind).
    pub(super) fn merged<I: Iterator<Item = (u32, u64)>>(
        sorted: &AllocVec<(u32, u32), A>,
        incoming: impl Fn() -> I,
    ) -> Result<AllocVec<(u32, u32), A>, CountOverflow> {
        let ours = || sorted.iter().map(|&(c, n)| (c, n as u64));
        let length = merge_join(ours(), incoming()).count();
        let mut merged = AllocVec::with_capacity_in(length, sorted.allocator().clone());
        for (cell, count) in merge_join(ours(), incoming()) {
            merged.push((cell, u32::try_from(count).map_err(|_| CountOverflow)?));
        }
        Ok(merged)
    }

    /// Merges sorted (cell, count) pairs into the sorted counts. On overflow nothing
    /// changes.
    pub(super) fn merge_sorted(&mut self, incoming: &[(u32, u64)]) -> Result<(), CountOverflow> {
        let merged = Self::merged(&self.sorted, || incoming.iter().copied())?;
        self.set_sorted(merged);
        Ok(())
    }

    /// The counts by cell, pending cells included, without changing the state (a final
    /// function reads its counts as they are, once its inbox is counted).
    pub(super) fn occupied(&self) -> Vec<(u32, u64)> {
        // A copy on the Rust heap: the aggregate's memory context keeps what it held.
        let mut pending = AllocVec::with_capacity_in(self.pending.len(), Global);
        pending.extend_from_slice(&self.pending);
        sort_cells(&mut pending);
        let incoming = pending
            .chunk_by(|a, b| a == b)
            .map(|run| (run[0], run.len() as u64));
        merge_join(self.sorted.iter().map(|&(c, n)| (c, n as u64)), incoming).collect()
    }

    /// Adds the values of each cell c into `counts[c / block]`.
    pub(super) fn add_block_counts(&self, block: u32, counts: &mut [u64]) {
        let sorted = self.sorted.iter().map(|&(cell, n)| (cell, n as u64));
        for (cell, n) in sorted.chain(self.pending.iter().map(|&cell| (cell, 1))) {
            counts[(cell / block) as usize] += n;
        }
    }

    pub(super) fn allocated_bytes(&self) -> usize {
        self.sorted.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.pending.capacity() * std::mem::size_of::<u32>()
    }
}

/// The union of two streams of (cell, count) sorted by cell, adding the counts of a cell
/// in both.
pub(super) fn merge_join(
    ours: impl Iterator<Item = (u32, u64)>,
    theirs: impl Iterator<Item = (u32, u64)>,
) -> impl Iterator<Item = (u32, u64)> {
    let (mut ours, mut theirs) = (ours.peekable(), theirs.peekable());
    std::iter::from_fn(move || match (ours.peek(), theirs.peek()) {
        (Some(&(a, n)), Some(&(b, m))) if a == b => {
            ours.next();
            theirs.next();
            Some((a, n + m))
        }
        (Some(&(a, _)), Some(&(b, _))) if a < b => ours.next(),
        (Some(_), None) => ours.next(),
        (_, Some(_)) => theirs.next(),
        (None, None) => None,
    })
}

/// A multiplicative hash for cell numbers (the carries of dense counters).
#[derive(Default)]
pub struct CellHasher(u64);

impl Hasher for CellHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(b as u32);
        }
    }
    fn write_u32(&mut self, cell: u32) {
        self.0 = (self.0 ^ cell as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) type Carries<A> = hashbrown::HashMap<u32, u64, BuildHasherDefault<CellHasher>, A>;

/// One byte per grid point: K + 1 bytes (1 MiB at the default K) stay in a CPU's L2
/// cache, where 8-byte counters (8 MiB) made every value a cache miss. Every 256 values
/// of a cell carry into `carries`.
///
/// Values arrive in random cells, and the scan streams through the cache too, so a
/// counter is usually a cache miss (6.9 ns a value in a scan of 10^7 rows, against 1.9
/// in a loop alone). Each cell therefore waits in `recent` for DELAY more values while its
/// counter's line is prefetched, then is counted. (Counting batches of 2^14 cells
/// radix-sorted cost more than the misses it saved, issue 22.)
#[derive(Debug, Clone)]
pub(super) struct DenseCells<A: Allocator + Clone> {
    pub(super) low: AllocVec<u8, A>,
    pub(super) carries: Carries<A>,
    /// The last min(pushed, DELAY) cells pushed, not yet counted, in a ring.
    pub(super) recent: [u32; DELAY],
    pub(super) pushed: usize,
}

/// How many values a cell waits while its counter is fetched: enough rows to cover a
/// miss to memory, few enough to stay in one cache line.
pub(super) const DELAY: usize = 16;

/// Sorts cells below 2^`bits` (the digits may span a few bits more), least significant
/// digit first (LSD radix sort), using `scratch` as the second buffer. The digits are as few as
/// passes of at most 8 bits allow, all counted in one read of the cells (22 bits: three
/// passes of 8); a digit every cell shares is not scattered (issue 22: a
/// draw sorts a group's cells, so a pass saved is a pass per group).
pub(super) fn radix_sort<A: Allocator + Clone>(
    cells: &mut AllocVec<u32, A>,
    scratch: &mut AllocVec<u32, A>,
    bits: u32,
) {
    if bits == 0 || cells.len() < 2 {
        return;
    }
    assert!(bits <= u32::BITS, "cells have 32 bits");
    debug_assert!(cells.len() <= u32::MAX as usize, "counts fit in 32 bits");
    let passes = bits.div_ceil(8) as usize;
    let width = bits.div_ceil(passes as u32);
    let mut counts = match passes {
        1 => digit_counts::<1>(cells, width),
        2 => digit_counts::<2>(cells, width),
        3 => digit_counts::<3>(cells, width),
        _ => digit_counts::<4>(cells, width),
    };
    let mask = (1u32 << width) - 1;
    let length = cells.len() as u32;
    scratch.clear();
    scratch.resize(cells.len(), 0);
    for (pass, count) in counts[..passes].iter_mut().enumerate() {
        let shift = pass as u32 * width;
        let digit = |cell: u32| ((cell >> shift) & mask) as usize;
        // A digit every cell shares holds them all: its count says so, no scan needed.
        if count[digit(cells[0])] == length {
            continue;
        }
        // Each count becomes its bucket's start, in place.
        let mut start = 0;
        for n in &mut count[..=mask as usize] {
            (*n, start) = (start, start + *n);
        }
        let destination = scratch.as_mut_ptr();
        for &cell in cells.iter() {
            let bucket = &mut count[digit(cell)];
            // SAFETY: a bucket starts at the number of cells with a smaller digit and
            // takes as many cells as have its digit, all counted from these cells, so
            // every position is below cells.len() = scratch.len() (no bounds check in
            // the loop a draw spends its listing in).
            unsafe { destination.add(*bucket as usize).write(cell) };
            *bucket += 1;
        }
        std::mem::swap(cells, scratch);
    }
}

/// How many cells have each digit, for each of `PASSES` digits of `width` bits, in one
/// read of the cells.
fn digit_counts<const PASSES: usize>(cells: &[u32], width: u32) -> [[u32; 256]; 4] {
    let mask = (1u32 << width) - 1;
    let mut counts = [[0u32; 256]; 4];
    for &cell in cells {
        for (pass, count) in counts[..PASSES].iter_mut().enumerate() {
            count[((cell >> (pass as u32 * width)) & mask) as usize] += 1;
        }
    }
    counts
}

impl<A: Allocator + Clone> DenseCells<A> {
    pub(super) fn new_in(grid_size: u32, allocator: A) -> Self {
        let mut low = AllocVec::with_capacity_in(grid_size as usize + 1, allocator.clone());
        low.resize(grid_size as usize + 1, 0u8);
        Self {
            low,
            carries: Carries::with_hasher_in(Default::default(), allocator),
            recent: [0; DELAY],
            pushed: 0,
        }
    }

    /// Counts one value in `cell`, DELAY values later.
    #[inline]
    pub(super) fn push(&mut self, cell: u32) {
        prefetch(&self.low[cell as usize]);
        let slot = &mut self.recent[self.pushed % DELAY];
        let waited = std::mem::replace(slot, cell);
        if self.pushed >= DELAY {
            self.count(waited);
        }
        self.pushed += 1;
    }

    /// Counts each of `cells` now: their counters are asked for all at once, then
    /// counted, so that their misses overlap (a batch needs no ring of delayed cells).
    pub(super) fn count_all(&mut self, cells: &[u32]) {
        for batch in cells.chunks(64) {
            for &cell in batch {
                prefetch(&self.low[cell as usize]);
            }
            for &cell in batch {
                self.count(cell);
            }
        }
    }

    #[inline]
    pub(super) fn count(&mut self, cell: u32) {
        let low = &mut self.low[cell as usize];
        *low = low.wrapping_add(1);
        if *low == 0 {
            *self.carries.entry(cell).or_insert(0) += 1;
        }
    }

    /// The cells pushed but not yet counted.
    pub(super) fn pending(&self) -> &[u32] {
        &self.recent[..self.pushed.min(DELAY)]
    }

    /// Adds another dense histogram's counters, carries and pending cells.
    pub(super) fn add_dense(
        &mut self,
        low: &[u8],
        carries: impl Iterator<Item = (u32, u64)>,
        pending: &[u32],
    ) {
        for (cell, (ours, &theirs)) in self.low.iter_mut().zip(low).enumerate() {
            let sum = *ours as u16 + theirs as u16;
            *ours = sum as u8;
            if sum >= 256 {
                *self.carries.entry(cell as u32).or_insert(0) += 1;
            }
        }
        for (cell, carry) in carries {
            *self.carries.entry(cell).or_insert(0) += carry;
        }
        for &cell in pending {
            self.count(cell);
        }
    }

    pub(super) fn add(&mut self, cell: u32, count: u64) {
        let total = self.low[cell as usize] as u64 + count;
        self.low[cell as usize] = (total % 256) as u8;
        if total >= 256 {
            *self.carries.entry(cell).or_insert(0) += total / 256;
        }
    }

    /// The counts by cell, pending cells included, without changing the state and
    /// without a list of every cell.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.iter_from(0)
    }

    /// [`DenseCells::iter`] from cell `first` on.
    pub(super) fn iter_from(&self, first: u32) -> impl Iterator<Item = (u32, u64)> + '_ {
        let mut carries: Vec<(u32, u64)> = self
            .carries
            .iter()
            .filter(|&(&c, _)| c >= first)
            .map(|(&c, &n)| (c, n))
            .collect();
        carries.sort_unstable_by_key(|&(cell, _)| cell);
        let mut carries = carries.into_iter().peekable();
        let mut pending: Vec<u32> = self
            .pending()
            .iter()
            .copied()
            .filter(|&c| c >= first)
            .collect();
        pending.sort_unstable();
        let mut pending = pending.into_iter().peekable();
        let first = (first as usize).min(self.low.len());
        (first..)
            .zip(&self.low[first..])
            .filter_map(move |(cell, &low)| {
                let cell = cell as u32;
                let mut count = low as u64;
                if let Some(&(_, n)) = carries.peek().filter(|&&(c, _)| c == cell) {
                    count += 256 * n;
                    carries.next();
                }
                while pending.next_if_eq(&cell).is_some() {
                    count += 1;
                }
                (count > 0).then_some((cell, count))
            })
    }

    /// Adds the values of each cell c into `counts[c / block]`.
    pub(super) fn add_block_counts(&self, block: u32, counts: &mut [u64]) {
        for (count, low) in counts.iter_mut().zip(self.low.chunks(block as usize)) {
            // A block holds at most 255 · block in its bytes: a u32 (whose adds vectorize).
            *count += low.iter().map(|&n| n as u32).sum::<u32>() as u64;
        }
        for (&cell, &carry) in &self.carries {
            counts[(cell / block) as usize] += 256 * carry;
        }
        for &cell in self.pending() {
            counts[(cell / block) as usize] += 1;
        }
    }

    pub(super) fn allocated_bytes(&self) -> usize {
        self.low.capacity() + self.carries.allocation_size()
    }
}

#[derive(Debug, Clone)]
pub(super) enum Cells<A: Allocator + Clone> {
    Sparse(SparseCells<A>),
    /// Once a sixteenth of the grid is occupied (the sparse form then holds up to 12
    /// bytes a cell, against one byte per grid point here). Boxed: a sparse state, one
    /// of thousands of groups, stays small.
    Dense(AllocBox<DenseCells<A>, A>),
}
