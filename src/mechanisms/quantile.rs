//! Private quantiles on a public grid (../shared/PRIVACY.md, section 5).
//!
//! Candidates are the grid points c_0 < c_1 < … < c_K: lo + j·(hi − lo)/K for float
//! columns, whole numbers lo + j·step (and hi) for integer columns. Each value, clamped
//! to [lo, hi], is counted exactly where it lies: at a grid point, or strictly between
//! two. The utility of c is u(c) = −|(1−α)·#{x < c} − α·#{x > c}| (seed `The Exponential
//! Mechanism for Medians`; OpenDP's `make_quantile_score_candidates`), whose range under
//! adding or removing one value is 2·max(α, 1−α), so P(c) ∝ exp(ε·u(c) / (2·max(α, 1−α)))
//! is ε-DP. Counting at grid points and between them gives #{x < c} and #{x > c} exactly,
//! so the answer has the law OpenDP's candidates mechanism has on the same grid; counting
//! each value at its nearest grid point instead changed u on coarse grids (8,358 against
//! OpenDP's 1,642 median error on a lognormal column with 101 points at α = 0.9).
//!
//! The state is two histograms (values at each grid point, values between each two);
//! between two occupied places u is constant, so a run of m equal candidates is one
//! weighted candidate (ln m + its scaled utility) and finalize costs O(occupied places),
//! not O(K).

use super::gumbel::{lazy_gumbel_max, streamed_lazy_gumbel_max, CONTENDING};
use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::boxed::Box as AllocBox;
use allocator_api2::vec::Vec as AllocVec;
use rand::{Rng, RngCore};
use std::hash::{BuildHasherDefault, Hasher};

/// K, the number of grid steps: 2^20 + 1 candidates.
pub const DEFAULT_GRID_SIZE: u32 = 1 << 20;

/// Where a value lies on a grid of K + 1 points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Exactly at grid point j (0..=K).
    At(u32),
    /// Strictly between grid points j and j + 1 (j in 0..K).
    Between(u32),
}

impl Place {
    /// The place's rank among all places: 2j at grid point j, 2j + 1 between j and j + 1.
    pub fn half_cell(self) -> u64 {
        match self {
            Place::At(j) => 2 * j as u64,
            Place::Between(j) => 2 * j as u64 + 1,
        }
    }

    /// The place of a half cell.
    pub fn of_half_cell(half_cell: u64) -> Self {
        let j = (half_cell / 2) as u32;
        if half_cell.is_multiple_of(2) {
            Place::At(j)
        } else {
            Place::Between(j)
        }
    }
}

/// The public grid of candidates of a float column.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    pub lo: f64,
    pub hi: f64,
    /// K: grid points 0..=K.
    pub size: u32,
}

impl Grid {
    /// Where a value (clamped to [lo, hi]) lies. NaN must be skipped before.
    pub fn locate(&self, value: f64) -> Place {
        self.locator().locate(value)
    }

    /// The locating rule with its scale computed once, for the per-row path.
    pub fn locator(&self) -> Locator {
        let step = (self.hi - self.lo) / self.size as f64;
        // How far, in steps, the computed offset of a value and the computed grid points
        // can stray from their exact values: each is a few roundings (relative error
        // 2^-53 each) of numbers at most |lo| + |hi| (in units: that over the step) or K.
        let rounding = f64::EPSILON / 2.0;
        let slack = 16.0 * rounding * (self.size as f64 + (self.lo.abs() + self.hi.abs()) / step);
        Locator {
            grid: *self,
            step,
            points_per_unit: self.size as f64 / (self.hi - self.lo),
            slack: if slack.is_finite() && slack < 0.25 {
                slack
            } else {
                0.5
            },
        }
    }

    /// The value of grid point j: a function of j and the public parameters only, so that
    /// no digit of an answer comes from a data value (Mironov 2012).
    pub fn point(&self, j: u32) -> f64 {
        self.locator().point(j)
    }
}

/// [`Grid::locate`] without a division per value.
#[derive(Debug, Clone, Copy)]
pub struct Locator {
    grid: Grid,
    step: f64,
    points_per_unit: f64,
    /// A bound, in steps, on the rounding of a value's offset and of the grid points
    /// around it (0.5: no shortcut, every value is compared with its points).
    slack: f64,
}

impl Locator {
    /// [`Grid::point`]. (The step first: exact on round grids, such as whole numbers with
    /// K = hi − lo, and never overflowing, since step·j ≤ hi − lo.) The last point is hi
    /// itself: lo + step·K can round below it (0.8999999999999999 for lo 0.2, hi 0.9,
    /// K = 2^20), and a value clamped to hi must lie at a grid point, never beyond the
    /// last one.
    #[inline]
    pub fn point(&self, j: u32) -> f64 {
        if j >= self.grid.size {
            return self.grid.hi;
        }
        (self.grid.lo + self.step * j as f64).clamp(self.grid.lo, self.grid.hi)
    }

    /// The last grid point at or below `value` is j: the place is At(j) if the value
    /// equals it, Between(j) otherwise. The points are computed as [`Locator::point`]
    /// computes answers, so "at" means equal to the candidate an answer would report.
    /// The offset in steps guesses j; rounding can miss by one; where grid points are
    /// closer than the precision of the values (a tiny step far from zero), a binary
    /// search finds it.
    #[inline]
    pub fn locate(&self, value: f64) -> Place {
        let value = value.clamp(self.grid.lo, self.grid.hi);
        let size = self.grid.size;
        let offset = (value - self.grid.lo) * self.points_per_unit;
        let guess = (offset as u32).min(size);
        // Well inside a cell (by more than the rounding of the offset and of the points
        // around it), the value lies strictly between points guess and guess + 1, as the
        // comparisons below would find: no point need be computed.
        let inside = offset - guess as f64;
        if inside > self.slack && inside < 1.0 - self.slack && guess < size {
            return Place::Between(guess);
        }
        // The per-row path: the guess is right, two points computed.
        let at_guess = self.point(guess);
        if at_guess <= value {
            if guess == size {
                return Place::At(size); // value = hi
            }
            if value < self.point(guess + 1) {
                return Self::place(guess, at_guess, value);
            }
        }
        self.locate_slowly(value, guess)
    }

    /// The place of `value`, given the last grid point j at or below it.
    #[inline]
    fn place(j: u32, point: f64, value: f64) -> Place {
        if point == value {
            Place::At(j)
        } else {
            Place::Between(j)
        }
    }

    /// [`Locator::locate`] where the guess missed: one step either way, or a binary
    /// search for the last grid point at or below the value.
    #[cold]
    fn locate_slowly(&self, value: f64, guess: u32) -> Place {
        let size = self.grid.size;
        let last_at_or_below =
            |j: u32| self.point(j) <= value && (j == size || value < self.point(j + 1));
        let j = if guess > 0 && last_at_or_below(guess - 1) {
            guess - 1
        } else if guess < size && last_at_or_below(guess + 1) {
            guess + 1
        } else {
            let (mut low, mut high) = (0u32, size); // point(low) <= value, invariant
            while low < high {
                let middle = low + (high - low).div_ceil(2);
                if self.point(middle) <= value {
                    low = middle;
                } else {
                    high = middle - 1;
                }
            }
            low
        };
        // value < hi = point(K) unless j = K, so Between(j) has j < K.
        debug_assert!(j == size || value < self.point(j + 1));
        Self::place(j, self.point(j), value)
    }
}

/// The public grid of candidates of an integer column: whole numbers lo, lo + step, …,
/// and hi, with step 1 when hi − lo is at most the grid size K, and otherwise the
/// smallest step that keeps the points within K + 1 (the last step may be shorter).
/// Exact in integer arithmetic over the whole bigint range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IntegerGrid {
    pub lo: i64,
    pub hi: i64,
    pub step: u64,
    /// The number of steps: grid points 0..=size.
    pub size: u32,
}

impl IntegerGrid {
    /// The grid from lo to hi (lo < hi) with at most `max_size` steps.
    pub fn new(lo: i64, hi: i64, max_size: u32) -> Self {
        let width = (hi as i128 - lo as i128) as u128;
        let step = width.div_ceil(max_size as u128);
        IntegerGrid {
            lo,
            hi,
            step: step as u64,
            size: width.div_ceil(step) as u32,
        }
    }

    /// Where a value (clamped to [lo, hi]) lies.
    #[inline]
    pub fn locate(&self, value: i64) -> Place {
        let value = value.clamp(self.lo, self.hi);
        if value == self.hi {
            return Place::At(self.size);
        }
        // value − lo in [0, 2^64): exact as a wrapping difference read unsigned.
        let offset = value.wrapping_sub(self.lo) as u64;
        if self.step == 1 {
            return Place::At(offset as u32); // whole numbers: every value is a point
        }
        let (j, remainder) = (offset / self.step, offset % self.step);
        if remainder == 0 {
            Place::At(j as u32)
        } else {
            Place::Between(j as u32)
        }
    }

    /// The value of grid point j.
    pub fn point(&self, j: u32) -> i64 {
        if j >= self.size {
            return self.hi;
        }
        (self.lo as i128 + j as i128 * self.step as i128) as i64
    }
}

/// The cells of a group with few distinct values: run-length counts sorted by cell, and
/// the cells added since they were last merged in. Adding a value is a push; when the
/// pending cells are twice as many as the sorted ones (at least 1,024) they are sorted
/// and merged in, so a value is merged about log₃(n/1,024) times (a group of 1,000
/// values never, until its final function sorts them once) and the memory is 8 bytes
/// per occupied cell plus 4 per pending value, at most 4 KiB more than the sorted
/// counts (a hash table would take 2-4 times that, rounded up by palloc to powers of
/// two).
#[derive(Debug, Clone)]
#[repr(C)] // what a row touches first, next to its histogram's total (issue 22)
struct SparseCells<A: Allocator + Clone> {
    pending: AllocVec<u32, A>,
    /// The number of pending cells that triggers a merge: twice the sorted ones, at least
    /// PENDING (kept here so that a row need not read `sorted`).
    merge_at: usize,
    sorted: AllocVec<(u32, u32), A>,
}

/// Sorts cells: by radix (8 bits a pass, as many passes as the largest cell needs) once
/// they are many, a comparison sort below that.
fn sort_cells<B: Allocator + Clone>(cells: &mut AllocVec<u32, B>) {
    if cells.len() < 256 {
        return cells.sort_unstable();
    }
    let largest = cells.iter().copied().max().unwrap_or(0);
    let mut scratch = AllocVec::new_in(cells.allocator().clone());
    radix_sort(cells, &mut scratch, u32::BITS - largest.leading_zeros());
}

/// A merged count does not fit in 32 bits: the histogram must go dense.
struct CountOverflow;

impl<A: Allocator + Clone> SparseCells<A> {
    fn new_in(allocator: A) -> Self {
        Self {
            pending: AllocVec::new_in(allocator.clone()),
            merge_at: Self::PENDING,
            sorted: AllocVec::new_in(allocator),
        }
    }

    /// Pending cells that trigger a merge: 4 KiB of them at least.
    const PENDING: usize = 1 << 10;

    /// Adds a cell; Ok(true) when the pending cells were merged in.
    #[inline]
    fn push(&mut self, cell: u32) -> Result<bool, CountOverflow> {
        self.pending.push(cell);
        if self.pending.len() < self.merge_at {
            return Ok(false);
        }
        self.compact()?;
        Ok(true)
    }

    /// Sets the sorted counts (and so when pending cells next merge).
    fn set_sorted(&mut self, sorted: AllocVec<(u32, u32), A>) {
        self.merge_at = (2 * sorted.len()).max(Self::PENDING);
        self.sorted = sorted;
    }

    /// Merges the pending cells into the sorted counts. On overflow nothing changes.
    fn compact(&mut self) -> Result<(), CountOverflow> {
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
    fn merged<I: Iterator<Item = (u32, u64)>>(
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
    fn merge_sorted(&mut self, incoming: &[(u32, u64)]) -> Result<(), CountOverflow> {
        let merged = Self::merged(&self.sorted, || incoming.iter().copied())?;
        self.set_sorted(merged);
        Ok(())
    }

    /// The counts by cell, pending cells included, without changing the state (a final
    /// function must not).
    fn occupied(&self) -> Vec<(u32, u64)> {
        // A copy on the Rust heap: the aggregate's memory context keeps what it held.
        let mut pending = AllocVec::with_capacity_in(self.pending.len(), Global);
        pending.extend_from_slice(&self.pending);
        sort_cells(&mut pending);
        let incoming = pending
            .chunk_by(|a, b| a == b)
            .map(|run| (run[0], run.len() as u64));
        merge_join(self.sorted.iter().map(|&(c, n)| (c, n as u64)), incoming).collect()
    }

    fn allocated_bytes(&self) -> usize {
        self.sorted.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.pending.capacity() * std::mem::size_of::<u32>()
    }
}

/// The union of two streams of (cell, count) sorted by cell, adding the counts of a cell
/// in both.
fn merge_join(
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

type Carries<A> = hashbrown::HashMap<u32, u64, BuildHasherDefault<CellHasher>, A>;

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
struct DenseCells<A: Allocator + Clone> {
    low: AllocVec<u8, A>,
    carries: Carries<A>,
    /// The last min(pushed, DELAY) cells pushed, not yet counted, in a ring.
    recent: [u32; DELAY],
    pushed: usize,
}

/// How many values a cell waits while its counter is fetched: enough rows to cover a
/// miss to memory, few enough to stay in one cache line.
const DELAY: usize = 16;

/// Asks the CPU to bring `counter`'s line into its cache; nothing else.
#[inline(always)]
fn prefetch(counter: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing, faults on nothing, and SSE (which
    // provides it) is part of every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            counter as *const u8 as *const i8,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = counter;
}

/// Sorts cells (less than 2^32) by their low `bits` bits, 8 at a time, least
/// significant first (LSD radix sort), using `scratch` as the second buffer.
fn radix_sort<A: Allocator + Clone>(
    cells: &mut AllocVec<u32, A>,
    scratch: &mut AllocVec<u32, A>,
    bits: u32,
) {
    scratch.clear();
    scratch.resize(cells.len(), 0);
    let mut shift = 0;
    while shift < bits {
        let mut starts = [0usize; 257];
        for &cell in cells.iter() {
            starts[((cell >> shift) & 0xFF) as usize + 1] += 1;
        }
        for digit in 1..257 {
            starts[digit] += starts[digit - 1];
        }
        for &cell in cells.iter() {
            let digit = ((cell >> shift) & 0xFF) as usize;
            scratch[starts[digit]] = cell;
            starts[digit] += 1;
        }
        std::mem::swap(cells, scratch);
        shift += 8;
    }
}

impl<A: Allocator + Clone> DenseCells<A> {
    fn new_in(grid_size: u32, allocator: A) -> Self {
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
    fn push(&mut self, cell: u32) {
        prefetch(&self.low[cell as usize]);
        let slot = &mut self.recent[self.pushed % DELAY];
        let waited = std::mem::replace(slot, cell);
        if self.pushed >= DELAY {
            self.count(waited);
        }
        self.pushed += 1;
    }

    #[inline]
    fn count(&mut self, cell: u32) {
        let low = &mut self.low[cell as usize];
        *low = low.wrapping_add(1);
        if *low == 0 {
            *self.carries.entry(cell).or_insert(0) += 1;
        }
    }

    /// The cells pushed but not yet counted.
    fn pending(&self) -> &[u32] {
        &self.recent[..self.pushed.min(DELAY)]
    }

    /// Adds another dense histogram's counters, carries and pending cells.
    fn add_dense(
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

    fn add(&mut self, cell: u32, count: u64) {
        let total = self.low[cell as usize] as u64 + count;
        self.low[cell as usize] = (total % 256) as u8;
        if total >= 256 {
            *self.carries.entry(cell).or_insert(0) += total / 256;
        }
    }

    /// The counts by cell, pending cells included, without changing the state (a final
    /// function must not) and without a list of every cell.
    fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let mut carries: Vec<(u32, u64)> = self.carries.iter().map(|(&c, &n)| (c, n)).collect();
        carries.sort_unstable_by_key(|&(cell, _)| cell);
        let mut carries = carries.into_iter().peekable();
        let mut pending = self.pending().to_vec();
        pending.sort_unstable();
        let mut pending = pending.into_iter().peekable();
        self.low.iter().enumerate().filter_map(move |(cell, &low)| {
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

    fn allocated_bytes(&self) -> usize {
        self.low.capacity() + self.carries.allocation_size()
    }
}

#[derive(Debug, Clone)]
enum Cells<A: Allocator + Clone> {
    Sparse(SparseCells<A>),
    /// Once a sixteenth of the grid is occupied (the sparse form then holds up to 12
    /// bytes a cell, against one byte per grid point here). Boxed: a sparse state, one
    /// of thousands of groups, stays small.
    Dense(AllocBox<DenseCells<A>, A>),
}

/// Counts of values per grid cell: memory O(min(n, K)), at most K + 1 bytes plus the
/// carries of cells holding 256 values or more.
#[derive(Debug, Clone)]
#[repr(C)] // the fields a row touches first (issue 22)
pub struct Histogram<A: Allocator + Clone = Global> {
    total: u64,
    cells: Cells<A>,
    grid_size: u32,
    allocator: A,
}

impl Histogram<Global> {
    pub fn new(grid_size: u32) -> Self {
        Self::new_in(grid_size, Global)
    }
}

impl<A: Allocator + Clone> Histogram<A> {
    pub fn new_in(grid_size: u32, allocator: A) -> Self {
        Self {
            cells: Cells::Sparse(SparseCells::new_in(allocator.clone())),
            grid_size,
            total: 0,
            allocator,
        }
    }

    /// Counts one value in `cell`.
    pub fn add(&mut self, cell: u32) {
        debug_assert!(cell <= self.grid_size);
        self.total += 1;
        match &mut self.cells {
            Cells::Dense(dense) => dense.push(cell),
            // Only a merge can make the sorted counts too many.
            Cells::Sparse(sparse) => match sparse.push(cell) {
                Ok(false) => {}
                Ok(true) if sparse.sorted.len() as u64 <= (self.grid_size as u64 + 1) / 16 => {}
                _ => self.densify(),
            },
        }
    }

    /// Adds counts per cell, sorted by cell (another histogram of the same grid:
    /// histograms of disjoint rows add up).
    pub fn add_counts(&mut self, occupied: &[(u32, u64)]) {
        self.total += occupied.iter().map(|&(_, n)| n).sum::<u64>();
        if let Cells::Sparse(sparse) = &mut self.cells {
            match sparse
                .compact()
                .and_then(|()| sparse.merge_sorted(occupied))
            {
                Ok(()) => {
                    if sparse.sorted.len() as u64 > (self.grid_size as u64 + 1) / 16 {
                        self.densify();
                    }
                    return;
                }
                Err(CountOverflow) => self.densify(),
            }
        }
        if let Cells::Dense(dense) = &mut self.cells {
            for &(cell, count) in occupied {
                dense.add(cell, count);
            }
        }
    }

    /// Adds every count of `other` (same grid). Two dense histograms add counter by
    /// counter (O(K), no list of a million cells in between).
    pub fn merge<B: Allocator + Clone>(&mut self, other: &Histogram<B>) {
        let Cells::Dense(theirs) = &other.cells else {
            return self.add_counts(&other.occupied());
        };
        self.densify();
        self.total += other.total;
        let Cells::Dense(ours) = &mut self.cells else {
            unreachable!("just made dense");
        };
        ours.add_dense(
            &theirs.low,
            theirs.carries.iter().map(|(&c, &n)| (c, n)),
            theirs.pending(),
        );
    }

    /// The histogram as bytes (little-endian): a tag, then the occupied cells and counts
    /// (sparse), or the byte counters, the carries and the pending cells (dense).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        let put_u32 = |bytes: &mut Vec<u8>, n: u32| bytes.extend_from_slice(&n.to_le_bytes());
        match &self.cells {
            Cells::Sparse(sparse) => {
                let occupied = sparse.occupied();
                bytes.push(0);
                put_u32(&mut bytes, occupied.len() as u32);
                for (cell, count) in occupied {
                    put_u32(&mut bytes, cell);
                    bytes.extend_from_slice(&count.to_le_bytes());
                }
            }
            Cells::Dense(dense) => {
                bytes.push(1);
                bytes.extend_from_slice(&dense.low);
                put_u32(&mut bytes, dense.carries.len() as u32);
                for (&cell, &carry) in &dense.carries {
                    put_u32(&mut bytes, cell);
                    bytes.extend_from_slice(&carry.to_le_bytes());
                }
                put_u32(&mut bytes, dense.pending().len() as u32);
                for &cell in dense.pending() {
                    put_u32(&mut bytes, cell);
                }
            }
        }
        bytes
    }

    /// A histogram from [`Histogram::to_bytes`] of the same grid. Panics on bytes it did
    /// not write.
    pub fn from_bytes(grid_size: u32, bytes: &[u8], allocator: A) -> Self {
        let mut reader = Reader(bytes);
        let mut histogram = Self::new_in(grid_size, allocator);
        match reader.take(1)[0] {
            0 => {
                let count = reader.u32() as usize;
                let occupied: Vec<(u32, u64)> =
                    (0..count).map(|_| (reader.u32(), reader.u64())).collect();
                histogram.add_counts(&occupied);
            }
            _ => {
                let low = reader.take(grid_size as usize + 1);
                let carries: Vec<(u32, u64)> = (0..reader.u32())
                    .map(|_| (reader.u32(), reader.u64()))
                    .collect();
                let pending: Vec<u32> = (0..reader.u32()).map(|_| reader.u32()).collect();
                histogram.total = low.iter().map(|&n| n as u64).sum::<u64>()
                    + 256 * carries.iter().map(|&(_, n)| n).sum::<u64>()
                    + pending.len() as u64;
                histogram.densify();
                let Cells::Dense(dense) = &mut histogram.cells else {
                    unreachable!("just made dense");
                };
                dense.add_dense(low, carries.into_iter(), &pending);
            }
        }
        histogram
    }

    /// Replaces the sparse cells (sorted and pending) by dense counters.
    fn densify(&mut self) {
        let Cells::Sparse(sparse) = &self.cells else {
            return;
        };
        let mut dense = DenseCells::new_in(self.grid_size, self.allocator.clone());
        for &(cell, count) in &sparse.sorted {
            dense.add(cell, count as u64);
        }
        for &cell in &sparse.pending {
            dense.add(cell, 1);
        }
        self.cells = Cells::Dense(AllocBox::new_in(dense, self.allocator.clone()));
    }

    /// The number of values counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn grid_size(&self) -> u32 {
        self.grid_size
    }

    /// The occupied cells and their counts, by cell: O(occupied) (the dense form is only
    /// used once a sixteenth of the grid is occupied).
    pub fn occupied(&self) -> Vec<(u32, u64)> {
        self.iter_occupied().collect()
    }

    /// [`Histogram::occupied`] as an iterator: no list of a million cells for a dense
    /// histogram.
    pub fn iter_occupied(&self) -> Box<dyn Iterator<Item = (u32, u64)> + '_> {
        match &self.cells {
            Cells::Sparse(sparse) => Box::new(sparse.occupied().into_iter()),
            Cells::Dense(dense) => Box::new(dense.iter()),
        }
    }

    /// Bytes held by the histogram's tables (not counting the struct itself).
    pub fn allocated_bytes(&self) -> usize {
        match &self.cells {
            Cells::Dense(dense) => dense.allocated_bytes(),
            Cells::Sparse(sparse) => sparse.allocated_bytes(),
        }
    }
}

/// Counts of values where they lie on a grid of K + 1 points: at each grid point, and
/// strictly between each two. Two histograms, each dense only when a sixteenth of its
/// places is occupied, so that a column whose values fall between grid points (most float
/// columns) or on them (whole numbers on a whole-number grid) holds about K + 1 one-byte
/// counters, as one histogram of nearest points did.
#[derive(Debug, Clone)]
#[repr(C)] // float values fall between points: that histogram first (issue 22)
pub struct GridCounts<A: Allocator + Clone = Global> {
    between: Histogram<A>,
    at: Histogram<A>,
}

impl GridCounts<Global> {
    pub fn new(grid_size: u32) -> Self {
        Self::new_in(grid_size, Global)
    }
}

impl<A: Allocator + Clone> GridCounts<A> {
    pub fn new_in(grid_size: u32, allocator: A) -> Self {
        Self {
            at: Histogram::new_in(grid_size, allocator.clone()),
            // Places between j and j + 1 for j = 0..K: K cells, numbered 0..=K − 1.
            between: Histogram::new_in(grid_size.saturating_sub(1), allocator),
        }
    }

    /// Counts one value at `place`.
    #[inline]
    pub fn add(&mut self, place: Place) {
        match place {
            Place::At(j) => self.at.add(j),
            Place::Between(j) => self.between.add(j),
        }
    }

    /// Adds every count of `other` (same grid).
    pub fn merge<B: Allocator + Clone>(&mut self, other: &GridCounts<B>) {
        self.at.merge(&other.at);
        self.between.merge(&other.between);
    }

    /// The number of values counted.
    pub fn total(&self) -> u64 {
        self.at.total() + self.between.total()
    }

    /// K: grid points 0..=K.
    pub fn grid_size(&self) -> u32 {
        self.at.grid_size()
    }

    /// The occupied places as (half cell, count), by half cell ([`Place::half_cell`]).
    pub fn iter_occupied(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut at = self
            .at
            .iter_occupied()
            .map(|(j, n)| (Place::At(j).half_cell(), n))
            .peekable();
        let mut between = self
            .between
            .iter_occupied()
            .map(|(j, n)| (Place::Between(j).half_cell(), n))
            .peekable();
        std::iter::from_fn(move || match (at.peek(), between.peek()) {
            (Some(a), Some(b)) if a.0 < b.0 => at.next(),
            (_, Some(_)) => between.next(),
            (Some(_), None) => at.next(),
            (None, None) => None,
        })
    }

    /// [`GridCounts::iter_occupied`] as a list when both histograms are sparse (at most a
    /// sixteenth of the grid each); None when one is dense.
    pub fn sparse_occupied(&self) -> Option<Vec<(u64, u64)>> {
        let (Cells::Sparse(at), Cells::Sparse(between)) = (&self.at.cells, &self.between.cells)
        else {
            return None;
        };
        debug_assert!(self.grid_size() <= 1 << 24, "half cells fit in u32");
        // Both histograms' pending cells as half cells (below 2^26: K ≤ 2^24), sorted
        // once together, then merged with their sorted counts. A copy on the Rust heap:
        // a final function must not change the state.
        let mut pending: AllocVec<u32, Global> =
            AllocVec::with_capacity_in(at.pending.len() + between.pending.len(), Global);
        pending.extend(at.pending.iter().map(|&j| 2 * j));
        pending.extend(between.pending.iter().map(|&j| 2 * j + 1));
        sort_cells(&mut pending);
        let sorted = merge_join(
            at.sorted.iter().map(|&(j, n)| (2 * j, n as u64)),
            between.sorted.iter().map(|&(j, n)| (2 * j + 1, n as u64)),
        );
        let incoming = pending
            .chunk_by(|a, b| a == b)
            .map(|run| (run[0], run.len() as u64));
        Some(
            merge_join(sorted, incoming)
                .map(|(half_cell, n)| (half_cell as u64, n))
                .collect(),
        )
    }

    /// [`GridCounts::iter_occupied`] as a list.
    #[cfg(test)]
    pub fn occupied(&self) -> Vec<(u64, u64)> {
        self.iter_occupied().collect()
    }

    /// Both histograms' encodings, each after its length.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for histogram in [&self.at, &self.between] {
            let encoded = histogram.to_bytes();
            bytes.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&encoded);
        }
        bytes
    }

    /// Counts from [`GridCounts::to_bytes`] of the same grid. Panics on bytes it did not
    /// write.
    pub fn from_bytes(grid_size: u32, bytes: &[u8], allocator: A) -> Self {
        let mut reader = Reader(bytes);
        let mut histogram = |size: u32| {
            let length = reader.u64() as usize;
            Histogram::from_bytes(size, reader.take(length), allocator.clone())
        };
        let at = histogram(grid_size);
        let between = histogram(grid_size.saturating_sub(1));
        Self { at, between }
    }
}

/// Reads the fields [`Histogram::to_bytes`] wrote.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(length);
        self.0 = rest;
        taken
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }
}

/// The temperature of the quantile utility: its range 2·max(α, 1−α) over ε.
pub fn temperature(alpha: f64, epsilon: f64) -> f64 {
    2.0 * alpha.max(1.0 - alpha) / epsilon
}

/// A run of grid points [first, last] that share one utility.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub first: u32,
    pub last: u32,
    pub utility: f64,
    /// Whether (1−α)·#{x < c} − α·#{x > c} ≥ 0 here. That difference never decreases
    /// along the grid (nor does its rounding: each operation rounds monotonically), so
    /// from the first run past it the utility −|difference| never increases.
    past_crossing: bool,
}

impl Run {
    fn length(&self) -> u32 {
        self.last - self.first + 1
    }

    /// ln(length): the log-weight of the run as one candidate, beyond its utility.
    fn log_length(&self) -> f64 {
        match self.length() {
            1 => 0.0,
            length => (length as f64).ln(),
        }
    }

    /// ln 2·⌈log₂ length⌉ ≥ ln(length), without a logarithm.
    fn log_length_bound(&self) -> f64 {
        let bits = u32::BITS - (self.length() - 1).leading_zeros();
        bits as f64 * std::f64::consts::LN_2
    }
}

/// The runs of equal utility over the whole grid 0..=K, given the occupied places by
/// half cell ([`Place::half_cell`]) and their total. A stream, so that a dense histogram
/// never becomes a list of runs.
pub fn runs(
    occupied: impl Iterator<Item = (u64, u64)>,
    total: u64,
    grid_size: u32,
    alpha: f64,
) -> impl Iterator<Item = Run> {
    runs_between(occupied, total, 0, grid_size, alpha)
}

/// The runs of equal utility over the grid points first..=last, given the occupied
/// places in that range (by half cell) and their total: before each occupied place, the
/// points not yet covered, which see it above them; a point with values at it, alone; and
/// the points after the last place. #{x < c} counts the places before c's own half cell,
/// #{x > c} those after it.
pub fn runs_between(
    occupied: impl Iterator<Item = (u64, u64)>,
    total: u64,
    first: u32,
    last: u32,
    alpha: f64,
) -> impl Iterator<Item = Run> {
    // Counts convert through i64 (one instruction; u64 takes a dozen), the same value for
    // any count below 2^63.
    let run = move |first: u32, last: u32, below: u64, above: u64| {
        let difference = (1.0 - alpha) * below as i64 as f64 - alpha * above as i64 as f64;
        Run {
            first,
            last,
            utility: -difference.abs(),
            past_crossing: difference >= 0.0,
        }
    };
    let (mut next, mut below) = (first, 0u64);
    let mut occupied = occupied.map(Some).chain(std::iter::once(None));
    let mut point_run: Option<Run> = None;
    std::iter::from_fn(move || loop {
        if let Some(run) = point_run.take() {
            return Some(run);
        }
        match occupied.next()? {
            Some((half_cell, count)) => {
                let place = Place::of_half_cell(half_cell);
                // The points before the place that no run covers yet: up to j − 1 for a
                // value at j, up to j for a value between j and j + 1.
                let (gap_end, point) = match place {
                    Place::At(j) => (j, j),
                    Place::Between(j) => (j + 1, j),
                };
                let gap = (gap_end > next).then(|| run(next, gap_end - 1, below, total - below));
                if let Place::At(j) = place {
                    point_run = Some(run(j, j, below, total - below - count));
                }
                below += count;
                next = next.max(point + 1);
                if gap.is_some() {
                    return gap;
                }
            }
            None => {
                return (next <= last).then(|| {
                    let after = run(next, last, below, 0);
                    next = last + 1;
                    after
                });
            }
        }
    })
}

/// Samples a grid index j with probability ∝ exp(u(c_j) / temperature): Gumbel-max over
/// the runs with log-weight ln(length) + utility/temperature, then a uniform point of the
/// chosen run.
pub fn sample_quantile<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let (total, grid_size) = (counts.total(), counts.grid_size());
    // The draw reads the places twice: a sparse histogram's are listed once (both halves
    // sorted together), a dense one's streamed from its counters each time.
    match counts.sparse_occupied() {
        Some(occupied) => sample_between(
            || occupied.iter().copied(),
            total,
            0,
            grid_size,
            alpha,
            epsilon,
            rng,
        ),
        None => sample_between(
            || counts.iter_occupied(),
            total,
            0,
            grid_size,
            alpha,
            epsilon,
            rng,
        ),
    }
}

/// Samples a grid index in first..=last for the α-quantile of the occupied places given
/// (all within that range, `total` values in all), at ε.
fn sample_between<I: Iterator<Item = (u64, u64)>, R: RngCore + ?Sized>(
    occupied: impl Fn() -> I,
    total: u64,
    first: u32,
    last: u32,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let range = (first, last, MAX_LISTED);
    sample_listing_at_most(occupied, total, range, alpha, epsilon, rng)
}

/// [`sample_between`], listing at most `max_listed` contenders (`range`: first, last and
/// that bound).
fn sample_listing_at_most<I: Iterator<Item = (u64, u64)>, R: RngCore + ?Sized>(
    occupied: impl Fn() -> I,
    total: u64,
    (first, last, max_listed): (u32, u32, usize),
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let temperature = temperature(alpha, epsilon);
    // Gumbel-max over the runs, log-weight w = ln(length) + u/T, shifted by the largest
    // u/T (a lower bound of the largest w, since ln(length) ≥ 0): the same argmax. The
    // first pass finds the largest utility `top`; the second lists the contenders:
    // ln(length) ≤ ln 2·⌈log₂ length⌉ bounds w, and a run whose bound falls more than
    // CONTENDING below top/T cannot win (gumbel.rs). The race keys only the contenders
    // whose noise could carry them past the leader (lazy_gumbel_max).
    //
    // Past the crossing utilities only fall (Run::past_crossing): the first pass stops at
    // the first run past it that does not raise `top`, the second once no later run can
    // contend (its length is at most the range's). For a median, about one pass in all.
    let runs = || runs_between(occupied(), total, first, last, alpha);
    let mut top = f64::NEG_INFINITY;
    for run in runs() {
        // Utilities are never NaN: a plain comparison, not f64::max's NaN handling.
        if run.utility > top {
            top = run.utility;
        } else if run.past_crossing {
            break;
        }
    }
    // (u − top)/T: 0 for the best run at any temperature (ε up to f64::MAX).
    let scaled = |run: &Run| (run.utility - top) / temperature;
    let longest = Run {
        first,
        last,
        utility: top,
        past_crossing: false,
    }
    .log_length_bound();
    let contending = || {
        runs()
            .take_while(|run| !(run.past_crossing && scaled(run) + longest < -CONTENDING))
            .filter_map(|run| {
                let bound = scaled(&run) + run.log_length_bound();
                (bound >= -CONTENDING).then_some((run, bound))
            })
    };
    let exact = |run: &Run| scaled(run) + run.log_length();
    // Listed when they are few (the leader keyed first: fewest logarithms); streamed when
    // a tiny ε·n makes most of the grid contend, so that no list of millions is made.
    let listed: Vec<(Run, f64)> = contending().take(max_listed + 1).collect();
    let chosen = if listed.len() <= max_listed {
        lazy_gumbel_max(&listed, exact, rng).map(|winner| listed[winner].0)
    } else {
        drop(listed);
        streamed_lazy_gumbel_max(contending(), exact, rng)
    }
    .expect("the range has at least one point");
    rng.random_range(chosen.first..=chosen.last)
}

/// The most contenders a draw lists (128 KiB of them); beyond, it streams them.
const MAX_LISTED: usize = 1 << 12;

/// How many levels the recursive method splits ε over for m quantiles: ⌈log₂(m + 1)⌉.
pub fn recursive_levels(m: usize) -> u32 {
    (usize::BITS - m.leading_zeros()).max(1)
}

/// Answers for several quantiles from one histogram by recursive splitting (Kaplan,
/// Schnapp and Stemmer, "Differentially Private Approximate Quantiles", ICML 2022): the
/// middle quantile is sampled on all values; the values at or below its answer and the
/// grid points up to it serve the quantiles below it, with α rescaled to α/α_mid, and
/// those above serve the ones above, with (α − α_mid)/(1 − α_mid); and so on.
///
/// Rescaling assumes the values at or below an answer are about α_mid of them, which
/// fails where many values share one place (half of Adult's hours are 40). So ties are
/// broken at random first: each grid point is cut into R refined points and each value
/// at it placed at one of them, uniformly and independently; each value between grid
/// points j and j + 1 is placed likewise in one of the R gaps that follow j's refined
/// points. Answers on the refined grid are reported as the grid point they belong to (so
/// a refined candidate reporting c_j may count a value a little above c_j as below it:
/// the rank error of a tie, which is what the refinement trades for balanced splits).
///
/// Privacy: the random placement is per value and independent of the others, so the
/// refined values of neighbouring inputs are neighbours (couple the placements of the
/// common values); reporting the grid point is post-processing. On the refined values,
/// each level's subproblems see disjoint sets of values, split by answers already
/// released, so one row added or removed changes one subproblem per level, which is
/// ε/L-DP (its own exponential mechanism, with the temperature of its rescaled α);
/// L = ⌈log₂(m + 1)⌉ levels compose to ε. Answers come out non-decreasing in α, in the
/// order of `alphas`.
pub fn sample_quantiles_recursive<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alphas: &[f64],
    epsilon: f64,
    rng: &mut R,
) -> Vec<u32> {
    // One quantile has no split to come: it is dp_quantile at the whole ε.
    let refinement = match alphas.len() {
        1 => 1,
        _ => refinement(counts.grid_size()),
    };
    sample_quantiles_refined(counts, alphas, epsilon, refinement, rng)
}

/// Refined points per grid point: up to 1,024, as many as keep the refined grid within
/// 2^31 points.
pub fn refinement(grid_size: u32) -> u32 {
    ((1u64 << 31) / (grid_size as u64 + 1)).clamp(1, 1 << 10) as u32
}

/// [`sample_quantiles_recursive`] with `refinement` refined points per grid point (1:
/// ties are not broken).
pub fn sample_quantiles_refined<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alphas: &[f64],
    epsilon: f64,
    refinement: u32,
    rng: &mut R,
) -> Vec<u32> {
    let mut sorted: Vec<(usize, f64)> = alphas.iter().copied().enumerate().collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    let refined = break_ties(counts.iter_occupied(), refinement, rng);
    let level_epsilon = epsilon / recursive_levels(alphas.len()) as f64;
    let mut answers = vec![0; alphas.len()];
    let problem = Subproblem {
        alphas: sorted,
        first: 0,
        last: (counts.grid_size() + 1) * refinement - 1,
        occupied: &refined,
    };
    problem.solve(level_epsilon, &mut answers, rng);
    answers.iter().map(|&point| point / refinement).collect()
}

/// The occupied places on the refined grid, by half cell: each value at grid point j
/// placed uniformly at random at one of the refined points j·R .. j·R + R − 1, each value
/// between j and j + 1 just after one of them.
fn break_ties<R: RngCore + ?Sized>(
    occupied: impl Iterator<Item = (u64, u64)>,
    refinement: u32,
    rng: &mut R,
) -> Vec<(u64, u64)> {
    let refinement64 = refinement as u64;
    let mut refined = Vec::new();
    let mut places: Vec<u64> = Vec::new();
    for (half_cell, count) in occupied {
        // Half cell 2j + b becomes 2·(j·R + r) + b.
        let (base, side) = (half_cell / 2 * refinement64, half_cell % 2);
        let refined_half_cell = |r: u64| 2 * (base + r) + side;
        if refinement == 1 {
            refined.push((refined_half_cell(0), count));
            continue;
        }
        if count >= refinement64 {
            let mut counts = vec![0u64; refinement as usize];
            for _ in 0..count {
                counts[rng.random_range(0..refinement) as usize] += 1;
            }
            refined.extend(
                (0..refinement64)
                    .zip(counts)
                    .filter(|&(_, c)| c > 0)
                    .map(|(r, c)| (refined_half_cell(r), c)),
            );
        } else {
            places.clear();
            places.extend((0..count).map(|_| rng.random_range(0..refinement64)));
            places.sort_unstable();
            for &place in &places {
                let at = refined_half_cell(place);
                match refined.last_mut() {
                    Some((last, c)) if *last == at => *c += 1,
                    _ => refined.push((at, 1)),
                }
            }
        }
    }
    // A point's values and the values after it interleave once refined.
    refined.sort_unstable_by_key(|&(half_cell, _)| half_cell);
    refined
}

/// Quantiles (original position, α relative to this subproblem's values) to answer
/// from the values in `occupied` (by half cell), on the grid points first..=last.
struct Subproblem<'a> {
    alphas: Vec<(usize, f64)>,
    first: u32,
    last: u32,
    occupied: &'a [(u64, u64)],
}

impl Subproblem<'_> {
    fn solve<R: RngCore + ?Sized>(self, epsilon: f64, answers: &mut [u32], rng: &mut R) {
        if self.alphas.is_empty() {
            return;
        }
        let middle = self.alphas.len() / 2;
        let (position, alpha) = self.alphas[middle];
        let total = self.occupied.iter().map(|&(_, count)| count).sum();
        let places = || self.occupied.iter().copied();
        let answer = sample_between(places, total, self.first, self.last, alpha, epsilon, rng);
        answers[position] = answer;
        // Values at or below the answer go below, those above it above.
        let split = self
            .occupied
            .partition_point(|&(half_cell, _)| half_cell <= Place::At(answer).half_cell());
        // Rescaled to the values on each side (public: a function of the αs only).
        let rescale = |p: f64, numerator: f64, denominator: f64| {
            if denominator > 0.0 {
                (numerator / denominator).clamp(0.0, 1.0)
            } else {
                p.clamp(0.0, 1.0)
            }
        };
        let below = Subproblem {
            alphas: self.alphas[..middle]
                .iter()
                .map(|&(at, p)| (at, rescale(p, p, alpha)))
                .collect(),
            first: self.first,
            last: answer,
            occupied: &self.occupied[..split],
        };
        let above = Subproblem {
            alphas: self.alphas[middle + 1..]
                .iter()
                .map(|&(at, p)| (at, rescale(p, p - alpha, 1.0 - alpha)))
                .collect(),
            first: answer,
            last: self.last,
            occupied: &self.occupied[split..],
        };
        below.solve(epsilon, answers, rng);
        above.solve(epsilon, answers, rng);
    }
}

/// Answers for several quantiles from one histogram, ε/m each, in the order of `alphas`;
/// the answers are assigned to the alphas in sorted order, so that they are non-decreasing
/// where the alphas are (post-processing, free of privacy cost).
pub fn sample_quantiles<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alphas: &[f64],
    epsilon: f64,
    rng: &mut R,
) -> Vec<u32> {
    let share = epsilon / alphas.len() as f64;
    let mut answers: Vec<u32> = alphas
        .iter()
        .map(|&alpha| sample_quantile(counts, alpha, share, rng))
        .collect();
    answers.sort_unstable();
    let mut by_alpha: Vec<usize> = (0..alphas.len()).collect();
    by_alpha.sort_by(|&a, &b| alphas[a].total_cmp(&alphas[b]));
    let mut ordered = vec![0; alphas.len()];
    for (rank, &position) in by_alpha.iter().enumerate() {
        ordered[position] = answers[rank];
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        assert_matches_distribution, normalise_log_weights, quantile_distribution as exact,
    };
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    const DRAWS: usize = 1_000_000;

    /// Counts of values at the places given by half cell ([`Place::half_cell`]).
    fn counts_of(half_cells: &[u64], grid_size: u32) -> GridCounts {
        let mut counts = GridCounts::new(grid_size);
        for &half_cell in half_cells {
            counts.add(Place::of_half_cell(half_cell));
        }
        counts
    }

    fn check(cells: &[u64], grid_size: u32, alpha: f64, epsilon: f64, seed: u64) {
        check_with(cells, grid_size, alpha, epsilon, seed, |histogram, rng| {
            sample_quantile(histogram, alpha, epsilon, rng)
        });
    }

    /// [`check`] of a given sampler.
    fn check_with(
        cells: &[u64],
        grid_size: u32,
        alpha: f64,
        epsilon: f64,
        seed: u64,
        sample: impl Fn(&GridCounts, &mut ChaCha20Rng) -> u32,
    ) {
        let histogram = counts_of(cells, grid_size);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut counts = vec![0u64; grid_size as usize + 1];
        for _ in 0..DRAWS {
            counts[sample(&histogram, &mut rng) as usize] += 1;
        }
        let t = temperature(alpha, epsilon);
        let right = exact(cells, grid_size, alpha, t, true);
        assert_matches_distribution(
            &counts,
            &right,
            &exact(cells, grid_size, alpha, 2.0 * t, true),
        );
        assert_matches_distribution(&counts, &right, &exact(cells, grid_size, alpha, t, false));
    }

    /// Values on grid points (so #{x < c} and #{x ≤ c} differ) and between them, with
    /// gaps and ties, on a coarse grid of 21 points, by half cell: 2j at point j, 2j + 1
    /// between j and j + 1.
    const DATA: [u64; 10] = [4, 4, 5, 5, 10, 19, 26, 26, 27, 40];

    #[test]
    fn median_matches_the_exact_distribution() {
        check(&DATA, 20, 0.5, 1.0, 21);
    }

    #[test]
    fn streamed_contenders_match_the_exact_distribution() {
        // Listing none: every draw streams its contenders, as when a tiny ε·n makes more
        // than MAX_LISTED runs contend.
        for (alpha, seed) in [(0.5, 24), (0.1, 25)] {
            check_with(&DATA, 20, alpha, 1.0, seed, |histogram, rng| {
                let range = (0, 20, 0);
                let total = histogram.total();
                let places = || histogram.iter_occupied();
                sample_listing_at_most(places, total, range, alpha, 1.0, rng)
            });
        }
    }

    #[test]
    fn the_largest_epsilon_still_draws() {
        // 1/ε is subnormal: the best run must still weigh e^0, never 0·∞.
        let mut rng = ChaCha20Rng::seed_from_u64(26);
        assert!(sample_quantile(&GridCounts::new(10), 0.5, f64::MAX, &mut rng) <= 10);
        // Points 6 to 9 have 5 values below and 5 above (utility 0); any other loses.
        for _ in 0..100 {
            let median = sample_quantile(&counts_of(&DATA, 20), 0.5, f64::MAX, &mut rng);
            assert!((6..=9).contains(&median), "{median}");
        }
        let quartiles =
            sample_quantiles_recursive(&counts_of(&DATA, 20), &[0.25, 0.75], f64::MAX, &mut rng);
        assert_eq!(quartiles.len(), 2);
    }

    #[test]
    fn low_quantile_matches_the_exact_distribution() {
        check(&DATA, 20, 0.1, 2.0, 22);
    }

    #[test]
    fn high_quantile_matches_the_exact_distribution() {
        check(&DATA, 20, 0.9, 2.0, 23);
    }

    #[test]
    fn empty_input_is_uniform_over_the_grid() {
        let mut rng = ChaCha20Rng::seed_from_u64(24);
        let mut counts = vec![0u64; 11];
        let empty = GridCounts::new(10);
        for _ in 0..100_000 {
            counts[sample_quantile(&empty, 0.5, 1.0, &mut rng) as usize] += 1;
        }
        let uniform = vec![1.0 / 11.0; 11];
        let mut skewed: Vec<f64> = vec![0.0; 11];
        skewed[0] = std::f64::consts::LN_2;
        let skewed = normalise_log_weights(&skewed);
        assert_matches_distribution(&counts, &uniform, &skewed);
    }

    #[test]
    fn runs_cover_the_grid_once() {
        let histogram = counts_of(&DATA, 20);
        let runs: Vec<Run> = runs(histogram.iter_occupied(), histogram.total(), 20, 0.5).collect();
        assert_eq!(runs.first().unwrap().first, 0);
        assert_eq!(runs.last().unwrap().last, 20);
        for pair in runs.windows(2) {
            assert_eq!(pair[0].last + 1, pair[1].first);
        }
        // An occupied last cell leaves no gap after it.
        assert_eq!(runs.iter().filter(|r| r.first == 20).count(), 1);
    }

    #[test]
    fn values_are_located_at_grid_points_or_strictly_between_and_clamped() {
        let grid = Grid {
            lo: 0.0,
            hi: 10.0,
            size: 10,
        };
        assert_eq!(grid.locate(3.0), Place::At(3));
        assert_eq!(grid.locate(3.4), Place::Between(3));
        assert_eq!(grid.locate(3.9999), Place::Between(3));
        assert_eq!(grid.locate(-5.0), Place::At(0));
        assert_eq!(grid.locate(f64::INFINITY), Place::At(10));
        assert_eq!(grid.locate(f64::NEG_INFINITY), Place::At(0));
        assert_eq!(grid.locate(9.5), Place::Between(9));
        assert_eq!(grid.point(0), 0.0);
        assert_eq!(grid.point(10), 10.0);
        assert_eq!(grid.point(7), 7.0);
        let whole = Grid {
            lo: 0.0,
            hi: 100.0,
            size: 100,
        };
        assert!((0..=100).all(|j| whole.point(j) == j as f64));
        let huge = Grid {
            lo: -8e307,
            hi: 9e307,
            size: DEFAULT_GRID_SIZE,
        };
        assert!((0..=DEFAULT_GRID_SIZE)
            .step_by(4099)
            .all(|j| huge.point(j).is_finite()));
        // On an irregular grid every point is located at itself and the values just
        // beside it between it and its neighbour, whatever the rounding of the guess.
        for grid in [
            Grid {
                lo: -1e6,
                hi: 1e6,
                size: DEFAULT_GRID_SIZE,
            },
            Grid {
                lo: 0.1,
                hi: 0.7,
                size: 3 * 7 * 11 * 13,
            },
            // Points closer than the precision of the values: found by binary search.
            Grid {
                lo: 1e15,
                hi: 1e15 + 1.0,
                size: DEFAULT_GRID_SIZE,
            },
            // lo + step·K rounds below hi here.
            Grid {
                lo: 0.2,
                hi: 0.9,
                size: DEFAULT_GRID_SIZE,
            },
        ] {
            let locator = grid.locator();
            for j in (0..=grid.size).step_by(97).chain([grid.size]) {
                let point = grid.point(j);
                let Place::At(at) = locator.locate(point) else {
                    panic!("{grid:?}: point {j} is not at a point");
                };
                assert_eq!(grid.point(at), point, "{grid:?}: {j}");
                if j < grid.size && grid.point(j + 1) > point.next_up() {
                    assert_eq!(locator.locate(point.next_up()), Place::Between(at));
                }
            }
        }
    }

    /// Where lo + step·K rounds below hi, hi is still the last grid point: values at or
    /// beyond it are counted there, also once the histograms are dense and after they
    /// travel as bytes (a place beyond the last cell would index out of the counters).
    #[test]
    fn the_last_grid_point_is_hi_exactly() {
        let grid = Grid {
            lo: 0.2,
            hi: 0.9,
            size: DEFAULT_GRID_SIZE,
        };
        let size = f64::from(DEFAULT_GRID_SIZE);
        assert!(0.2 + ((0.9 - 0.2) / size) * size < 0.9);
        assert_eq!(grid.point(DEFAULT_GRID_SIZE), 0.9);
        assert_eq!(grid.locate(0.9), Place::At(DEFAULT_GRID_SIZE));
        assert_eq!(grid.locate(5.0), Place::At(DEFAULT_GRID_SIZE));
        assert_eq!(
            grid.locate(0.9f64.next_down()),
            Place::Between(DEFAULT_GRID_SIZE - 1)
        );
        let locator = grid.locator();
        let mut counts = GridCounts::new(grid.size);
        for i in 0..200_000u32 {
            counts.add(locator.locate(0.2 + 0.7 * (i as f64 + 0.5) / 200_000.0));
        }
        counts.add(locator.locate(7.0));
        assert!(matches!(counts.between.cells, Cells::Dense(_)));
        let copy = GridCounts::from_bytes(grid.size, &counts.to_bytes(), Global);
        assert_eq!(copy.occupied(), counts.occupied());
        assert_eq!(copy.total(), 200_001);
        let last = *copy.occupied().last().unwrap();
        assert_eq!(last, (Place::At(DEFAULT_GRID_SIZE).half_cell(), 1));
    }

    #[test]
    fn integer_grids_are_whole_numbers_located_exactly() {
        let ages = IntegerGrid::new(0, 100, DEFAULT_GRID_SIZE);
        assert_eq!((ages.step, ages.size), (1, 100));
        assert_eq!(ages.locate(37), Place::At(37));
        assert_eq!(ages.locate(-3), Place::At(0));
        assert_eq!(ages.locate(250), Place::At(100));
        assert_eq!(ages.point(37), 37);
        // A range wider than the grid: the smallest step that fits, a shorter last step.
        let wide = IntegerGrid::new(-10, 95, 10);
        assert_eq!((wide.step, wide.size), (11, 10));
        assert_eq!(wide.point(9), 89);
        assert_eq!(wide.point(10), 95);
        assert_eq!(wide.locate(89), Place::At(9));
        assert_eq!(wide.locate(90), Place::Between(9));
        assert_eq!(wide.locate(95), Place::At(10));
        assert_eq!(wide.locate(2), Place::Between(1));
        assert_eq!(wide.locate(1), Place::At(1));
        let everything = IntegerGrid::new(i64::MIN, i64::MAX, DEFAULT_GRID_SIZE);
        assert_eq!(everything.size, DEFAULT_GRID_SIZE);
        assert_eq!(everything.locate(i64::MIN), Place::At(0));
        assert_eq!(everything.locate(i64::MAX), Place::At(DEFAULT_GRID_SIZE));
        assert_eq!(everything.point(DEFAULT_GRID_SIZE), i64::MAX);
        assert_eq!(
            everything.locate(everything.point(12_345)),
            Place::At(12_345)
        );
        assert_eq!(
            everything.locate(everything.point(12_345) + 1),
            Place::Between(12_345)
        );
    }

    /// The utility of every grid point, from the places the values were counted at,
    /// equals the utility from the raw values themselves (OpenDP's counting), on a
    /// coarse grid where values fall on points, between them and outside [lo, hi].
    #[test]
    fn utilities_from_places_equal_those_from_raw_values() {
        for (lo, hi) in [(0.0, 1.0), (0.2, 0.9), (-3.3, 9.9)] {
            utilities_match_raw_values(Grid { lo, hi, size: 10 });
        }
    }

    fn utilities_match_raw_values(grid: Grid) {
        let (lo, hi) = (grid.lo, grid.hi);
        let mut rng = ChaCha20Rng::seed_from_u64(30);
        let width = hi - lo;
        let mut values: Vec<f64> = (0..200)
            .map(|_| rng.random_range(lo - 0.2 * width..hi + 0.2 * width))
            .collect();
        values.extend((0..=10).map(|j| grid.point(j)));
        values.extend([grid.point(3), grid.point(3), hi, lo]);
        let mut counts = GridCounts::new(grid.size);
        values.iter().for_each(|&v| counts.add(grid.locate(v)));
        for alpha in [0.1, 0.5, 0.9] {
            let runs: Vec<Run> = runs(counts.iter_occupied(), counts.total(), 10, alpha).collect();
            for j in 0..=10 {
                let c = grid.point(j);
                let clamped = values.iter().map(|v| v.clamp(lo, hi));
                let below = clamped.clone().filter(|&x| x < c).count() as f64;
                let above = clamped.filter(|&x| x > c).count() as f64;
                let raw = -((1.0 - alpha) * below - alpha * above).abs();
                let run = runs.iter().find(|r| r.first <= j && j <= r.last).unwrap();
                assert!(
                    (run.utility - raw).abs() < 1e-9,
                    "{grid:?} alpha {alpha}, point {j}"
                );
            }
        }
    }

    #[test]
    fn the_histogram_goes_dense_and_stays_exact() {
        let grid_size = 1000;
        let mut sparse = Histogram::new(grid_size);
        let mut dense = Histogram::new(grid_size);
        for cell in (0..=grid_size).step_by(20) {
            sparse.add(cell);
        }
        for cell in 0..=grid_size {
            dense.add(cell);
            dense.add(cell);
        }
        assert!(matches!(sparse.cells, Cells::Sparse(_)));
        assert!(matches!(dense.cells, Cells::Dense(_)));
        assert!(dense.allocated_bytes() <= grid_size as usize + 1 + 64);
        dense.merge(&sparse);
        let occupied = dense.occupied();
        assert_eq!(occupied.len(), grid_size as usize + 1);
        assert_eq!(occupied[20], (20, 3));
        assert_eq!(occupied[21], (21, 2));
        assert_eq!(dense.total(), 2 * 1001 + 51);
    }

    /// The shortcut of Locator::locate (a value well inside a cell) gives the place the
    /// comparisons with the grid points give, on grids whose points round (a step that is
    /// not a binary fraction, points far from zero, points closer than the precision of
    /// the values), for values drawn near points, near cell middles and anywhere.
    #[test]
    fn locating_by_the_offset_agrees_with_the_grid_points() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let grids = [
            (0.0, 1e6, 1 << 20),
            (0.2, 0.9, 1 << 20),
            (-1e15, 1e15, 1 << 24),
            (1e15, 1e15 + 1.0, 1 << 20),
            (0.0, 100.0, 100),
            (-3.0, 7.0, 1),
            (0.1, 0.3, 3),
        ];
        for (lo, hi, size) in grids {
            let grid = Grid { lo, hi, size };
            let locator = grid.locator();
            // The place by comparisons only: the last point at or below the value.
            let compared = |value: f64| {
                let value = value.clamp(lo, hi);
                let (mut low, mut high) = (0u32, size);
                while low < high {
                    let middle = low + (high - low).div_ceil(2);
                    if grid.point(middle) <= value {
                        low = middle;
                    } else {
                        high = middle - 1;
                    }
                }
                if grid.point(low) == value {
                    Place::At(low)
                } else {
                    Place::Between(low)
                }
            };
            for _ in 0..200_000 {
                let j = rng.random_range(0..=size);
                let point = grid.point(j);
                let value = match rng.random_range(0..4) {
                    0 => point,
                    1 => f64::from_bits(
                        point
                            .to_bits()
                            .wrapping_add(rng.random_range(0..4))
                            .wrapping_sub(2),
                    ),
                    2 => point + (hi - lo) / size as f64 * rng.random::<f64>(),
                    _ => lo - 1.0 + (hi - lo + 2.0) * rng.random::<f64>(),
                };
                if value.is_nan() {
                    continue; // (the bits below 0.0's); NaN is skipped before locating
                }
                assert_eq!(
                    locator.locate(value),
                    compared(value),
                    "{value} on ({lo}, {hi}, {size})"
                );
            }
        }
    }

    #[test]
    fn sparse_cells_count_exactly_in_little_memory() {
        // 10,000 values over 40 cells, in an order that forces several compactions.
        let mut histogram = Histogram::new(DEFAULT_GRID_SIZE);
        let mut expected = std::collections::BTreeMap::new();
        for i in 0..10_000u32 {
            let cell = (i * 7919) % 40 * 1000;
            histogram.add(cell);
            *expected.entry(cell).or_insert(0u64) += 1;
        }
        let expected: Vec<(u32, u64)> = expected.into_iter().collect();
        assert_eq!(histogram.occupied(), expected);
        assert_eq!(histogram.total(), 10_000);
        assert!(matches!(histogram.cells, Cells::Sparse(_)));
        assert!(
            histogram.allocated_bytes() <= 40 * 8 + 1024 * 4,
            "{}",
            histogram.allocated_bytes()
        );
        // Merging sparse histograms adds them up.
        let mut other = Histogram::new(DEFAULT_GRID_SIZE);
        other.add(5);
        other.add(0);
        histogram.merge(&other);
        assert_eq!(histogram.occupied()[0], (0, expected[0].1 + 1));
        assert_eq!(histogram.occupied()[1], (5, 1));
        assert_eq!(histogram.total(), 10_002);
    }

    #[test]
    fn dense_counters_carry_every_256() {
        let mut histogram = Histogram::new(100);
        for cell in 0..=100 {
            histogram.add(cell); // dense beyond a sixteenth of the grid
        }
        for _ in 0..1000 {
            histogram.add(7);
        }
        histogram.add_counts(&[(7, 300), (9, 256), (100, 1)]);
        let occupied = histogram.occupied();
        assert_eq!(occupied[7], (7, 1301));
        assert_eq!(occupied[9], (9, 257));
        assert_eq!(occupied[100], (100, 2));
        assert_eq!(histogram.total(), 101 + 1000 + 557);
        assert_eq!(
            occupied.iter().map(|&(_, n)| n).sum::<u64>(),
            histogram.total()
        );
    }

    #[test]
    fn dense_counters_count_exactly() {
        // Many values, spread and repeated, against a plain count (a grid of 2^18 goes
        // dense at 2^14 occupied cells).
        let grid_size = 1 << 18;
        let mut histogram = Histogram::new(grid_size);
        let mut expected = vec![0u64; grid_size as usize + 1];
        for i in 0..(3 * (1u64 << 14) + 12_345) {
            let cell = ((i * 2_654_435_761) % (grid_size as u64 + 1)) as u32 % 70_001;
            histogram.add(cell);
            expected[cell as usize] += 1;
        }
        assert!(matches!(histogram.cells, Cells::Dense(_)));
        let expected: Vec<(u32, u64)> = expected
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(c, &n)| (c as u32, n))
            .collect();
        assert_eq!(histogram.occupied(), expected);
        let mut cells = AllocVec::new_in(Global);
        cells.extend([70_000u32, 3, 65_536, 255, 256, 3, 0]);
        let mut scratch = AllocVec::new_in(Global);
        radix_sort(&mut cells, &mut scratch, 17);
        assert_eq!(cells.as_slice(), [0, 3, 3, 255, 256, 65_536, 70_000]);
    }

    #[test]
    fn histograms_travel_as_bytes_and_merge() {
        let grid_size = 1 << 12;
        let fill = |range: std::ops::Range<u32>, step: u32| {
            let mut histogram = Histogram::new(grid_size);
            for i in range.step_by(step as usize) {
                histogram.add((i * 7) % (grid_size + 1));
            }
            histogram
        };
        let sparse = fill(0..300, 3);
        let dense = fill(0..(3 * (1 << 14) + 700), 1);
        let also_dense = fill(1000..60_000, 1);
        assert!(matches!(dense.cells, Cells::Dense(_)) && matches!(sparse.cells, Cells::Sparse(_)));
        for histogram in [&sparse, &dense] {
            let copy = Histogram::from_bytes(grid_size, &histogram.to_bytes(), Global);
            assert_eq!(copy.occupied(), histogram.occupied());
            assert_eq!(copy.total(), histogram.total());
        }
        // Pending cells travel last, after their number, and are counted when read.
        let Cells::Dense(cells) = &dense.cells else {
            unreachable!("dense");
        };
        let pending = cells.pending().len();
        assert_eq!(pending, DELAY);
        let mut bytes = dense.to_bytes();
        let at = bytes.len() - 4 * pending - 4;
        bytes[at..at + 4].copy_from_slice(&(pending as u32 + 2).to_le_bytes());
        for cell in [5u32, 5] {
            bytes.extend_from_slice(&cell.to_le_bytes());
        }
        let mut with_pending = dense.clone();
        with_pending.add(5);
        with_pending.add(5);
        let copy = Histogram::from_bytes(grid_size, &bytes, Global);
        assert_eq!(copy.occupied(), with_pending.occupied());
        assert_eq!(copy.total(), dense.total() + 2);
        // Merging, whatever the forms, equals adding the occupied lists.
        let expected = |a: &Histogram, b: &Histogram| {
            let mut plain = Histogram::new(grid_size);
            plain.add_counts(&a.occupied());
            plain.add_counts(&b.occupied());
            plain.occupied()
        };
        for (a, b) in [(&dense, &also_dense), (&sparse, &dense), (&dense, &sparse)] {
            let mut merged = a.clone();
            merged.merge(b);
            assert_eq!(merged.occupied(), expected(a, b));
            assert_eq!(merged.total(), a.total() + b.total());
        }
    }

    #[test]
    fn a_count_beyond_32_bits_goes_dense() {
        let mut histogram = Histogram::new(100);
        histogram.add(3);
        histogram.add_counts(&[(3, u32::MAX as u64), (50, 2)]);
        assert!(matches!(histogram.cells, Cells::Dense(_)));
        assert_eq!(histogram.occupied(), [(3, u32::MAX as u64 + 1), (50, 2)]);
        assert_eq!(histogram.total(), u32::MAX as u64 + 3);
    }

    #[test]
    fn several_quantiles_are_ordered_like_their_alphas() {
        let histogram = counts_of(&DATA, 20);
        let mut rng = ChaCha20Rng::seed_from_u64(25);
        for _ in 0..10_000 {
            let answers = sample_quantiles(&histogram, &[0.9, 0.1, 0.5, 0.5], 0.3, &mut rng);
            assert!(
                answers[1] <= answers[2] && answers[2] <= answers[3] && answers[3] <= answers[0]
            );
        }
    }

    /// ε is split: the first answer of dp_quantiles at ε follows the distribution of one
    /// quantile at ε/m, before the reordering (here with a single alpha repeated, where
    /// sorting keeps the multiset and the distribution of a uniformly chosen answer).
    /// The exact distribution of one subproblem's answer over first..=last: values
    /// `cells` (all in that range), brute force over every grid point.
    fn exact_between(cells: &[u64], first: u32, last: u32, alpha: f64, epsilon: f64) -> Vec<f64> {
        let t = temperature(alpha, epsilon);
        let log_weights: Vec<f64> = (first..=last)
            .map(|c| {
                let c = Place::At(c).half_cell();
                let below = cells.iter().filter(|&&x| x < c).count() as f64;
                let above = cells.iter().filter(|&&x| x > c).count() as f64;
                -((1.0 - alpha) * below - alpha * above).abs() / t
            })
            .collect();
        normalise_log_weights(&log_weights)
    }

    /// The exact joint distribution of the recursive method's answers (l, j, r) for the
    /// quartiles 0.25, 0.5, 0.75: the median at `level` ε on all values, then each half
    /// at `level` ε asking for its α of `halves` (0.5 and 0.5 when rescaled: 0.25 / 0.5
    /// and (0.75 − 0.5) / (1 − 0.5)), indexed (l·(K+1) + j)·(K+1) + r.
    fn exact_quartiles(cells: &[u64], grid_size: u32, level: f64, halves: [f64; 2]) -> Vec<f64> {
        let points = grid_size as usize + 1;
        let mut joint = vec![0.0; points * points * points];
        let middle = exact_between(cells, 0, grid_size, 0.5, level);
        for (j, p_middle) in middle.iter().enumerate() {
            let j32 = j as u32;
            let split = Place::At(j32).half_cell();
            let below: Vec<u64> = cells.iter().copied().filter(|&x| x <= split).collect();
            let above: Vec<u64> = cells.iter().copied().filter(|&x| x > split).collect();
            let left = exact_between(&below, 0, j32, halves[0], level);
            let right = exact_between(&above, j32, grid_size, halves[1], level);
            for (l, p_left) in left.iter().enumerate() {
                for (r, p_right) in right.iter().enumerate() {
                    joint[(l * points + j) * points + j + r] += p_middle * p_left * p_right;
                }
            }
        }
        joint
    }

    #[test]
    fn recursive_quartiles_match_their_exact_joint_distribution() {
        // A coarse grid of 9 points with ties at grid points and between them (by half
        // cell): 729 outcomes.
        let cells = [2, 2, 3, 3, 8, 8, 9, 12, 14, 15, 16, 16];
        let (grid_size, epsilon) = (8, 4.0);
        let histogram = counts_of(&cells, grid_size);
        let mut rng = ChaCha20Rng::seed_from_u64(27);
        let points = grid_size as usize + 1;
        let mut counts = vec![0u64; points * points * points];
        for _ in 0..DRAWS {
            // In the order given, not sorted: answers come back in that order.
            // Ties left as they are (refinement 1): the recursion itself.
            let answers =
                sample_quantiles_refined(&histogram, &[0.75, 0.25, 0.5], epsilon, 1, &mut rng);
            let (l, j, r) = (
                answers[1] as usize,
                answers[2] as usize,
                answers[0] as usize,
            );
            assert!(l <= j && j <= r, "non-decreasing: {answers:?}");
            counts[(l * points + j) * points + r] += 1;
        }
        // Two levels at ε/2 each.
        let exact = exact_quartiles(&cells, grid_size, epsilon / 2.0, [0.5, 0.5]);
        // Spending ε/3 per quantile at three levels' worth (the split's temperature)
        // must be rejected.
        assert_matches_distribution(
            &counts,
            &exact,
            &exact_quartiles(&cells, grid_size, epsilon / 3.0, [0.5, 0.5]),
        );
        // So must rescaling forgotten (each half's median asked as its raw α).
        let unscaled = exact_quartiles(&cells, grid_size, epsilon / 2.0, [0.25, 0.75]);
        assert_matches_distribution(&counts, &exact, &unscaled);
    }

    /// The exact joint distribution of the coarse answers (l, j, r) with ties broken on
    /// `refinement` refined points: the average over every placement of the values
    /// (each equally likely), each mapped back to its grid point.
    fn exact_quartiles_refined(
        cells: &[u64],
        grid_size: u32,
        epsilon: f64,
        refinement: u32,
    ) -> Vec<f64> {
        let points = grid_size as usize + 1;
        let refined_size = (grid_size + 1) * refinement - 1;
        let refined_points = refined_size as usize + 1;
        let placements = (refinement as usize).pow(cells.len() as u32);
        let mut joint = vec![0.0; points * points * points];
        for placement in 0..placements {
            let mut digits = placement;
            let refined: Vec<u64> = cells
                .iter()
                .map(|&cell| {
                    let at = (digits % refinement as usize) as u64;
                    digits /= refinement as usize;
                    2 * (cell / 2 * refinement as u64 + at) + cell % 2
                })
                .collect();
            let exact = exact_quartiles(&refined, refined_size, epsilon / 2.0, [0.5, 0.5]);
            for (index, p) in exact.iter().enumerate() {
                if *p == 0.0 {
                    continue;
                }
                let r = index % refined_points;
                let j = index / refined_points % refined_points;
                let l = index / refined_points / refined_points;
                let coarse = |point: usize| point / refinement as usize;
                joint[(coarse(l) * points + coarse(j)) * points + coarse(r)] +=
                    p / placements as f64;
            }
        }
        joint
    }

    #[test]
    fn recursive_quartiles_with_ties_broken_match_their_exact_distribution() {
        // Three grid points, two refined points each, values stacked at them and between
        // them (by half cell): the exact law averages over the 2^7 placements of the 7
        // values.
        let cells = [0, 1, 1, 2, 2, 3, 4];
        let (grid_size, epsilon, refinement) = (2, 3.0, 2);
        let histogram = counts_of(&cells, grid_size);
        let mut rng = ChaCha20Rng::seed_from_u64(29);
        let points = grid_size as usize + 1;
        let mut counts = vec![0u64; points * points * points];
        for _ in 0..DRAWS {
            let answers = sample_quantiles_refined(
                &histogram,
                &[0.25, 0.5, 0.75],
                epsilon,
                refinement,
                &mut rng,
            );
            counts[(answers[0] as usize * points + answers[1] as usize) * points
                + answers[2] as usize] += 1;
        }
        let exact = exact_quartiles_refined(&cells, grid_size, epsilon, refinement);
        // Ties left unbroken give another law, which the draws must reject.
        assert_matches_distribution(
            &counts,
            &exact,
            &exact_quartiles(&cells, grid_size, epsilon / 2.0, [0.5, 0.5]),
        );
        assert_eq!(refinement_of_default(), 1 << 10);
    }

    fn refinement_of_default() -> u32 {
        refinement(DEFAULT_GRID_SIZE)
    }

    #[test]
    fn recursive_levels_are_the_depth_of_the_split() {
        let levels: Vec<u32> = [1, 2, 3, 4, 7, 8, 9, 19, 99]
            .iter()
            .map(|&m| recursive_levels(m))
            .collect();
        assert_eq!(levels, [1, 2, 2, 3, 3, 4, 4, 5, 7]);
        // One quantile is the single-quantile mechanism at the whole ε (no tie to break
        // for a split that never comes).
        let histogram = counts_of(&DATA, 20);
        let mut rng = ChaCha20Rng::seed_from_u64(28);
        let mut counts = vec![0u64; 21];
        for _ in 0..DRAWS / 4 {
            counts[sample_quantiles_recursive(&histogram, &[0.5], 1.0, &mut rng)[0] as usize] += 1;
        }
        let t = temperature(0.5, 1.0);
        assert_matches_distribution(
            &counts,
            &exact(&DATA, 20, 0.5, t, true),
            &exact(&DATA, 20, 0.5, 2.0 * t, true),
        );
    }

    #[test]
    fn several_quantiles_spend_epsilon_over_m_each() {
        let histogram = counts_of(&DATA, 20);
        let mut rng = ChaCha20Rng::seed_from_u64(26);
        let mut counts = vec![0u64; 21];
        for _ in 0..DRAWS / 2 {
            for answer in sample_quantiles(&histogram, &[0.5, 0.5], 2.0, &mut rng) {
                counts[answer as usize] += 1;
            }
        }
        let t = temperature(0.5, 1.0);
        assert_matches_distribution(
            &counts,
            &exact(&DATA, 20, 0.5, t, true),
            &exact(&DATA, 20, 0.5, t / 2.0, true),
        );
    }
}
