//! Private quantiles on a public grid (PRIVACY.md section 5).
//!
//! Candidates are the grid points c_j = lo + j·(hi − lo)/K, j = 0..=K. Each value, clamped
//! to [lo, hi], counts at its nearest grid point (its cell). The utility of c is
//! u(c) = −|(1−α)·#{x < c} − α·#{x > c}| (seed `The Exponential Mechanism for Medians`;
//! OpenDP's `make_quantile_score_candidates`), whose range under adding or removing one
//! value is 2·max(α, 1−α), so P(c) ∝ exp(ε·u(c) / (2·max(α, 1−α))) is ε-DP.
//!
//! The state is a histogram over occupied cells; between two occupied cells u is constant,
//! so a run of m equal candidates is one weighted candidate (ln m + its scaled utility) and
//! finalize costs O(occupied cells), not O(K).

use super::gumbel::gumbel_max;
use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::vec::Vec as AllocVec;
use rand::{Rng, RngCore};

/// K, the number of grid steps: 2^20 + 1 candidates.
pub const DEFAULT_GRID_SIZE: u32 = 1 << 20;

/// The public grid of candidates.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    pub lo: f64,
    pub hi: f64,
    /// K: grid points 0..=K.
    pub size: u32,
}

impl Grid {
    /// The cell a value counts in: the nearest grid point of the value clamped to
    /// [lo, hi] (halfway between two points: the upper one). NaN must be skipped before.
    pub fn cell(&self, value: f64) -> u32 {
        let fraction = (value.clamp(self.lo, self.hi) - self.lo) / (self.hi - self.lo);
        ((fraction * self.size as f64).round() as u32).min(self.size)
    }

    /// The value of grid point j: a function of j and the public parameters only, so that
    /// no digit of an answer comes from a data value (Mironov 2012).
    /// (The step first: exact on round grids, such as whole numbers with K = hi − lo, and
    /// never overflowing, since step·j ≤ hi − lo.)
    pub fn point(&self, j: u32) -> f64 {
        let step = (self.hi - self.lo) / self.size as f64;
        (self.lo + step * j as f64).clamp(self.lo, self.hi)
    }
}

/// The cells of a group with few distinct values: run-length counts sorted by cell, and
/// the cells added since they were last merged in. Adding a value is a push; when the
/// pending cells are as many as the sorted ones (at least 64) they are sorted and merged
/// in, so a value costs O(log n) amortised and the memory is 8 bytes per occupied cell
/// plus 4 per pending value (a hash table would take 2-4 times that, rounded up by palloc
/// to powers of two).
#[derive(Debug, Clone)]
struct SparseCells<A: Allocator + Clone> {
    sorted: AllocVec<(u32, u32), A>,
    pending: AllocVec<u32, A>,
}

/// A merged count does not fit in 32 bits: the histogram must go dense.
struct CountOverflow;

impl<A: Allocator + Clone> SparseCells<A> {
    fn new_in(allocator: A) -> Self {
        Self {
            sorted: AllocVec::new_in(allocator.clone()),
            pending: AllocVec::new_in(allocator),
        }
    }

    fn push(&mut self, cell: u32) -> Result<(), CountOverflow> {
        self.pending.push(cell);
        if self.pending.len() >= self.sorted.len().max(64) {
            self.compact()?;
        }
        Ok(())
    }

    /// Merges the pending cells into the sorted counts. On overflow nothing changes.
    fn compact(&mut self) -> Result<(), CountOverflow> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.pending.sort_unstable();
        let incoming: Vec<(u32, u64)> = self
            .pending
            .chunk_by(|a, b| a == b)
            .map(|run| (run[0], run.len() as u64))
            .collect();
        self.merge_sorted(&incoming)?;
        self.pending.clear();
        Ok(())
    }

    /// Merges sorted (cell, count) pairs into the sorted counts, in a vector of exactly
    /// the merged length. On overflow nothing changes.
    fn merge_sorted(&mut self, incoming: &[(u32, u64)]) -> Result<(), CountOverflow> {
        let merged_length = merge_join(&self.sorted, incoming).count();
        let mut merged = AllocVec::with_capacity_in(merged_length, self.sorted.allocator().clone());
        for (cell, count) in merge_join(&self.sorted, incoming) {
            merged.push((cell, u32::try_from(count).map_err(|_| CountOverflow)?));
        }
        self.sorted = merged;
        Ok(())
    }

    fn occupied(&self) -> Vec<(u32, u64)> {
        let mut sparse = self.clone();
        // A clone cannot overflow where the original did not: its counts are the same.
        let _ = sparse.compact();
        sparse.sorted.iter().map(|&(cell, count)| (cell, count as u64)).collect()
    }

    fn allocated_bytes(&self) -> usize {
        self.sorted.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.pending.capacity() * std::mem::size_of::<u32>()
    }
}

/// The union of two lists of (cell, count) sorted by cell, adding the counts of a cell in
/// both.
fn merge_join<'a>(
    ours: &'a [(u32, u32)],
    theirs: &'a [(u32, u64)],
) -> impl Iterator<Item = (u32, u64)> + 'a {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || {
        let next = match (ours.get(i), theirs.get(j)) {
            (Some(&(a, n)), Some(&(b, m))) if a == b => {
                j += 1;
                (a, n as u64 + m)
            }
            (Some(&(a, n)), Some(&(b, _))) if a < b => (a, n as u64),
            (Some(&(a, n)), None) => (a, n as u64),
            (_, Some(&(b, m))) => {
                j += 1;
                return Some((b, m));
            }
            (None, None) => return None,
        };
        i += 1;
        Some(next)
    })
}

#[derive(Debug, Clone)]
enum Cells<A: Allocator + Clone> {
    Sparse(SparseCells<A>),
    /// One counter per grid point, once a sixteenth of the grid is occupied (the sparse
    /// form then takes up to 12 bytes a cell, against 8 per grid point here).
    Dense(AllocVec<u64, A>),
}

/// Counts of values per grid cell: memory O(min(n, K)), at most K + 1 counters.
#[derive(Debug, Clone)]
pub struct Histogram<A: Allocator + Clone = Global> {
    cells: Cells<A>,
    grid_size: u32,
    total: u64,
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
            Cells::Dense(counts) => counts[cell as usize] += 1,
            Cells::Sparse(sparse) => {
                let overflow = sparse.push(cell).is_err();
                if overflow || sparse.sorted.len() as u64 > (self.grid_size as u64 + 1) / 16 {
                    self.densify();
                }
            }
        }
    }

    /// Adds counts per cell, sorted by cell (another histogram of the same grid:
    /// histograms of disjoint rows add up).
    pub fn add_counts(&mut self, occupied: &[(u32, u64)]) {
        self.total += occupied.iter().map(|&(_, n)| n).sum::<u64>();
        if let Cells::Sparse(sparse) = &mut self.cells {
            match sparse.compact().and_then(|()| sparse.merge_sorted(occupied)) {
                Ok(()) => {
                    if sparse.sorted.len() as u64 > (self.grid_size as u64 + 1) / 16 {
                        self.densify();
                    }
                    return;
                }
                Err(CountOverflow) => self.densify(),
            }
        }
        if let Cells::Dense(counts) = &mut self.cells {
            for &(cell, count) in occupied {
                counts[cell as usize] += count;
            }
        }
    }

    /// Adds every count of `other` (same grid).
    pub fn merge<B: Allocator + Clone>(&mut self, other: &Histogram<B>) {
        self.add_counts(&other.occupied());
    }

    /// Replaces the sparse cells (sorted and pending) by one counter per grid point.
    fn densify(&mut self) {
        let Cells::Sparse(sparse) = &self.cells else {
            return;
        };
        let mut counts = AllocVec::with_capacity_in(self.grid_size as usize + 1, self.allocator.clone());
        counts.resize(self.grid_size as usize + 1, 0u64);
        for &(cell, count) in &sparse.sorted {
            counts[cell as usize] += count as u64;
        }
        for &cell in &sparse.pending {
            counts[cell as usize] += 1;
        }
        self.cells = Cells::Dense(counts);
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
        match &self.cells {
            Cells::Sparse(sparse) => sparse.occupied(),
            Cells::Dense(counts) => counts
                .iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(|(cell, &n)| (cell as u32, n))
                .collect(),
        }
    }

    /// Bytes held by the histogram's tables (not counting the struct itself).
    pub fn allocated_bytes(&self) -> usize {
        match &self.cells {
            Cells::Dense(counts) => counts.capacity() * std::mem::size_of::<u64>(),
            Cells::Sparse(sparse) => sparse.allocated_bytes(),
        }
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
}

/// The runs of equal utility over the whole grid 0..=K, given the occupied cells by cell:
/// a gap before each occupied cell, the cell itself, and the gap after the last.
pub fn runs(occupied: &[(u32, u64)], grid_size: u32, alpha: f64) -> Vec<Run> {
    let total: u64 = occupied.iter().map(|&(_, n)| n).sum();
    let utility = |below: u64, above: u64| -((1.0 - alpha) * below as f64 - alpha * above as f64).abs();
    let mut runs = Vec::with_capacity(2 * occupied.len() + 1);
    let (mut next, mut below) = (0u32, 0u64);
    for &(cell, count) in occupied {
        if cell > next {
            runs.push(Run { first: next, last: cell - 1, utility: utility(below, total - below) });
        }
        runs.push(Run { first: cell, last: cell, utility: utility(below, total - below - count) });
        below += count;
        next = cell + 1;
    }
    if next <= grid_size {
        runs.push(Run { first: next, last: grid_size, utility: utility(below, 0) });
    }
    runs
}

/// Samples a grid index j with probability ∝ exp(u(c_j) / temperature): Gumbel-max over
/// the runs with log-weight ln(length) + utility/temperature, then a uniform point of the
/// chosen run.
pub fn sample_quantile<R: RngCore + ?Sized>(
    occupied: &[(u32, u64)],
    grid_size: u32,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let runs = runs(occupied, grid_size, alpha);
    let temperature = temperature(alpha, epsilon);
    let log_weights: Vec<f64> = runs
        .iter()
        .map(|run| ((run.last - run.first) as f64 + 1.0).ln() + run.utility / temperature)
        .collect();
    let chosen = runs[gumbel_max(&log_weights, rng).expect("the grid has at least one point")];
    rng.random_range(chosen.first..=chosen.last)
}

/// Answers for several quantiles from one histogram, ε/m each, in the order of `alphas`;
/// the answers are assigned to the alphas in sorted order, so that they are non-decreasing
/// where the alphas are (post-processing, free of privacy cost).
pub fn sample_quantiles<R: RngCore + ?Sized>(
    occupied: &[(u32, u64)],
    grid_size: u32,
    alphas: &[f64],
    epsilon: f64,
    rng: &mut R,
) -> Vec<u32> {
    let share = epsilon / alphas.len() as f64;
    let mut answers: Vec<u32> = alphas
        .iter()
        .map(|&alpha| sample_quantile(occupied, grid_size, alpha, share, rng))
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
    use crate::testing::{assert_matches_distribution, normalise_log_weights, quantile_distribution as exact};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    const DRAWS: usize = 1_000_000;

    fn histogram_of(cells: &[u32], grid_size: u32) -> Histogram {
        let mut histogram = Histogram::new(grid_size);
        for &cell in cells {
            histogram.add(cell);
        }
        histogram
    }

    fn check(cells: &[u32], grid_size: u32, alpha: f64, epsilon: f64, seed: u64) {
        let occupied = histogram_of(cells, grid_size).occupied();
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut counts = vec![0u64; grid_size as usize + 1];
        for _ in 0..DRAWS {
            counts[sample_quantile(&occupied, grid_size, alpha, epsilon, &mut rng) as usize] += 1;
        }
        let t = temperature(alpha, epsilon);
        let right = exact(cells, grid_size, alpha, t, true);
        assert_matches_distribution(&counts, &right, &exact(cells, grid_size, alpha, 2.0 * t, true));
        assert_matches_distribution(&counts, &right, &exact(cells, grid_size, alpha, t, false));
    }

    /// Points on grid points (so #{x < c} and #{x ≤ c} differ), with gaps and ties, on a
    /// coarse grid of 21 points.
    const DATA: [u32; 9] = [2, 2, 2, 5, 5, 9, 13, 13, 20];

    #[test]
    fn median_matches_the_exact_distribution() {
        check(&DATA, 20, 0.5, 1.0, 21);
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
        for _ in 0..100_000 {
            counts[sample_quantile(&[], 10, 0.5, 1.0, &mut rng) as usize] += 1;
        }
        let uniform = vec![1.0 / 11.0; 11];
        let mut skewed: Vec<f64> = vec![0.0; 11];
        skewed[0] = std::f64::consts::LN_2;
        let skewed = normalise_log_weights(&skewed);
        assert_matches_distribution(&counts, &uniform, &skewed);
    }

    #[test]
    fn runs_cover_the_grid_once() {
        let occupied = histogram_of(&DATA, 20).occupied();
        let runs = runs(&occupied, 20, 0.5);
        assert_eq!(runs.first().unwrap().first, 0);
        assert_eq!(runs.last().unwrap().last, 20);
        for pair in runs.windows(2) {
            assert_eq!(pair[0].last + 1, pair[1].first);
        }
        // An occupied last cell leaves no gap after it.
        assert_eq!(runs.iter().filter(|r| r.first == 20).count(), 1);
    }

    #[test]
    fn the_grid_snaps_to_the_nearest_point_and_clamps() {
        let grid = Grid { lo: 0.0, hi: 10.0, size: 10 };
        assert_eq!(grid.cell(3.4), 3);
        assert_eq!(grid.cell(3.5), 4);
        assert_eq!(grid.cell(-5.0), 0);
        assert_eq!(grid.cell(f64::INFINITY), 10);
        assert_eq!(grid.cell(f64::NEG_INFINITY), 0);
        assert_eq!(grid.point(0), 0.0);
        assert_eq!(grid.point(10), 10.0);
        assert_eq!(grid.point(7), 7.0);
        let whole = Grid { lo: 0.0, hi: 100.0, size: 100 };
        assert!((0..=100).all(|j| whole.point(j) == j as f64));
        let huge = Grid { lo: -8e307, hi: 9e307, size: DEFAULT_GRID_SIZE };
        assert!((0..=DEFAULT_GRID_SIZE).step_by(4099).all(|j| huge.point(j).is_finite()));
        let fine = Grid { lo: -1e6, hi: 1e6, size: DEFAULT_GRID_SIZE };
        assert_eq!(fine.cell(fine.point(123_456)), 123_456);
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
        assert!(dense.allocated_bytes() <= 8 * (grid_size as usize + 1) + 64);
        dense.merge(&sparse);
        let occupied = dense.occupied();
        assert_eq!(occupied.len(), grid_size as usize + 1);
        assert_eq!(occupied[20], (20, 3));
        assert_eq!(occupied[21], (21, 2));
        assert_eq!(dense.total(), 2 * 1001 + 51);
    }

    #[test]
    fn sparse_cells_count_exactly_in_little_memory() {
        // 100 values over 40 cells, in an order that forces several compactions.
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
        assert!(histogram.allocated_bytes() <= 40 * 8 + 128 * 4, "{}", histogram.allocated_bytes());
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
        let occupied = histogram_of(&DATA, 20).occupied();
        let mut rng = ChaCha20Rng::seed_from_u64(25);
        for _ in 0..10_000 {
            let answers = sample_quantiles(&occupied, 20, &[0.9, 0.1, 0.5, 0.5], 0.3, &mut rng);
            assert!(answers[1] <= answers[2] && answers[2] <= answers[3] && answers[3] <= answers[0]);
        }
    }

    /// ε is split: the first answer of dp_quantiles at ε follows the distribution of one
    /// quantile at ε/m, before the reordering (here with a single alpha repeated, where
    /// sorting keeps the multiset and the distribution of a uniformly chosen answer).
    #[test]
    fn several_quantiles_spend_epsilon_over_m_each() {
        let occupied = histogram_of(&DATA, 20).occupied();
        let mut rng = ChaCha20Rng::seed_from_u64(26);
        let mut counts = vec![0u64; 21];
        for _ in 0..DRAWS / 2 {
            for answer in sample_quantiles(&occupied, 20, &[0.5, 0.5], 2.0, &mut rng) {
                counts[answer as usize] += 1;
            }
        }
        let t = temperature(0.5, 1.0);
        assert_matches_distribution(&counts, &exact(&DATA, 20, 0.5, t, true), &exact(&DATA, 20, 0.5, t / 2.0, true));
    }
}
