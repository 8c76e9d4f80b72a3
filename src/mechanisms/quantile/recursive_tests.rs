//! Several quantiles from one histogram (recursive.rs): ε/m each, and recursive
//! splitting with and without ties broken, against their exact distributions.

use super::tests::{counts_of, DATA, DRAWS};
use super::*;
use crate::testing::{
    assert_matches_distribution, normalise_log_weights, quantile_distribution as exact,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

#[test]
fn several_quantiles_are_ordered_like_their_alphas() {
    let histogram = counts_of(&DATA, 20);
    let mut rng = ChaCha20Rng::seed_from_u64(25);
    for _ in 0..10_000 {
        let answers = sample_quantiles(&histogram, &[0.9, 0.1, 0.5, 0.5], 0.3, &mut rng);
        assert!(answers[1] <= answers[2] && answers[2] <= answers[3] && answers[3] <= answers[0]);
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
            joint[(coarse(l) * points + coarse(j)) * points + coarse(r)] += p / placements as f64;
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
