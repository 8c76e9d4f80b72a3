//! Several quantiles from one histogram: ε/m each, or recursive splitting.

use super::counts::GridCounts;
use super::draw::*;
use super::grid::Place;
use allocator_api2::alloc::Allocator;
use rand::{Rng, RngCore};

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
pub(super) fn break_ties<R: RngCore + ?Sized>(
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
pub(super) struct Subproblem<'a> {
    pub(super) alphas: Vec<(usize, f64)>,
    pub(super) first: u32,
    pub(super) last: u32,
    pub(super) occupied: &'a [(u64, u64)],
}

impl Subproblem<'_> {
    pub(super) fn solve<R: RngCore + ?Sized>(self, epsilon: f64, answers: &mut [u32], rng: &mut R) {
        if self.alphas.is_empty() {
            return;
        }
        let middle = self.alphas.len() / 2;
        let (position, alpha) = self.alphas[middle];
        let total = self.occupied.iter().map(|&(_, count)| count).sum();
        let answer = sample_listed(
            self.occupied,
            total,
            self.first,
            self.last,
            alpha,
            epsilon,
            rng,
        );
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
