//! Privacy audit (tests only). For hard pairs of neighbouring inputs, D and D' with one
//! row added, each mechanism is drawn 10^6 times on both, and for every output y the
//! privacy loss ln((P[y | D] − δ) / P[y | D']), in both directions, is bounded from below
//! with confidence. A mechanism fails when that lower bound exceeds ε for some y.
//!
//! The privacy-unit audit (extension/units/tests.rs) draws through SQL and counts here.
//!
//! Each audit also runs a broken twin (half the temperature, or a wrong utility) and
//! requires the audit to catch it: an audit that cannot fail proves nothing.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

const DRAWS: u64 = 1_000_000;

/// Width of the Wilson intervals, in standard deviations: each fails with probability
/// 5.7e-7, so all of an audit's intervals (at most 4 per output, 50 outputs) hold together
/// with probability above 0.9998. The seeds are fixed, so the outcome is reproducible.
const Z: f64 = 5.0;

/// The Wilson score interval of a binomial proportion.
fn wilson(count: u64, draws: u64) -> (f64, f64) {
    let (n, p) = (draws as f64, count as f64 / draws as f64);
    let centre = (p + Z * Z / (2.0 * n)) / (1.0 + Z * Z / n);
    let half = Z / (1.0 + Z * Z / n) * (p * (1.0 - p) / n + Z * Z / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The largest lower confidence bound of the privacy loss over outputs and directions.
#[derive(Debug)]
pub(crate) struct Finding {
    loss: f64,
    output: String,
}

fn frequencies<K: Hash + Eq>(mut sample: impl FnMut() -> K) -> HashMap<K, u64> {
    let mut counts = HashMap::new();
    for _ in 0..DRAWS {
        *counts.entry(sample()).or_insert(0) += 1;
    }
    counts
}

fn audit<K: Hash + Eq + Debug + Clone>(
    on_input: impl FnMut() -> K,
    on_neighbour: impl FnMut() -> K,
    delta: f64,
) -> Finding {
    audit_counts(
        &frequencies(on_input),
        &frequencies(on_neighbour),
        DRAWS,
        delta,
    )
}

/// The audit of outputs already counted, `draws` on each input (the SQL-level audits
/// draw through PostgreSQL).
pub(crate) fn audit_counts<K: Hash + Eq + Debug>(
    a: &HashMap<K, u64>,
    b: &HashMap<K, u64>,
    draws: u64,
    delta: f64,
) -> Finding {
    let mut worst = Finding {
        loss: f64::NEG_INFINITY,
        output: String::new(),
    };
    for output in a.keys().chain(b.keys()) {
        let (a_low, a_high) = wilson(*a.get(output).unwrap_or(&0), draws);
        let (b_low, b_high) = wilson(*b.get(output).unwrap_or(&0), draws);
        for (low, high) in [(a_low, b_high), (b_low, a_high)] {
            if low > delta {
                let loss = ((low - delta) / high).ln();
                if loss > worst.loss {
                    worst = Finding {
                        loss,
                        output: format!("{output:?}"),
                    };
                }
            }
        }
    }
    worst
}

pub(crate) fn assert_private(finding: Finding, epsilon: f64) {
    eprintln!(
        "audit: loss bound {:.3} (ε = {epsilon}) at {}",
        finding.loss, finding.output
    );
    assert!(
        finding.loss <= epsilon,
        "privacy loss of at least {} > ε = {epsilon} at output {}",
        finding.loss,
        finding.output
    );
}

pub(crate) fn assert_caught(finding: Finding, epsilon: f64) {
    eprintln!(
        "audit of a broken twin: loss bound {:.3} (ε = {epsilon}) at {}",
        finding.loss, finding.output
    );
    assert!(
        finding.loss > epsilon,
        "the audit cannot see a broken mechanism: loss bound {} ≤ ε = {epsilon}",
        finding.loss
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanisms::gumbel::exponential_mechanism;
    use crate::mechanisms::permute_and_flip::permute_and_flip;
    use crate::mechanisms::quantile::{
        sample_quantile, sample_quantiles_recursive, temperature, GridCounts, IntegerGrid, Place,
    };
    use crate::mechanisms::top_k::{limited_domain_top_k, one_shot_top_k, LimitedDomain};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    const EPSILON: f64 = 1.0;

    /// dp_argmax: the added row decides item 0's chances (scores in units of max_score).
    /// Item 0 is unlikely on D, which makes its loss on D' close to ε (0.94 exactly).
    const ARGMAX_D: [f64; 10] = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    const ARGMAX_NEIGHBOUR: [f64; 10] = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];

    /// A selection mechanism of dp_argmax: (utilities, temperature, generator).
    type Select = fn(&[f64], f64, &mut ChaCha20Rng) -> Option<usize>;

    fn argmax_audit(select: Select, temperature: f64, neighbour: &[f64]) -> Finding {
        let mut rng = ChaCha20Rng::seed_from_u64(101);
        let mut rng2 = ChaCha20Rng::seed_from_u64(102);
        audit(
            || select(&ARGMAX_D, temperature, &mut rng),
            || select(neighbour, temperature, &mut rng2),
            0.0,
        )
    }

    #[test]
    fn audit_argmax() {
        // The exponential mechanism (Gumbel-max) and permute-and-flip, at temperature
        // max_score/ε; each must be caught at half that temperature and with a score
        // left unclamped (a row of 3 where max_score = 1).
        let mut unclamped = ARGMAX_NEIGHBOUR;
        unclamped[0] = 3.0;
        for select in [exponential_mechanism as Select, permute_and_flip as Select] {
            assert_private(
                argmax_audit(select, 1.0 / EPSILON, &ARGMAX_NEIGHBOUR),
                EPSILON,
            );
            assert_caught(
                argmax_audit(select, 0.5 / EPSILON, &ARGMAX_NEIGHBOUR),
                EPSILON,
            );
            assert_caught(argmax_audit(select, 1.0 / EPSILON, &unclamped), EPSILON);
        }
    }

    /// dp_top_k, k = 2: item 0 leads and gains a row. Lists that avoid it pay in both
    /// rounds' normalisers: exact loss 0.67 ε at temperature k/ε, 1.68 ε at 1/ε.
    #[test]
    fn audit_one_shot_top_k() {
        let d = [2.0, 0.0, 1.0];
        let neighbour = [3.0, 0.0, 1.0];
        let k = 2;
        let run = |temperature: f64| {
            let mut rng = ChaCha20Rng::seed_from_u64(103);
            let mut rng2 = ChaCha20Rng::seed_from_u64(104);
            audit(
                || one_shot_top_k(&d, k, temperature, &mut rng),
                || one_shot_top_k(&neighbour, k, temperature, &mut rng2),
                0.0,
            )
        };
        assert_private(run(k as f64 / EPSILON), EPSILON);
        // Noise for one selection instead of k: the list costs k·ε.
        assert_caught(run(1.0 / EPSILON), EPSILON);
    }

    /// The quantile audits' pair on a grid of 11 points: D = eight values at 0 and one at
    /// 1, D' adds one at 10.
    fn quantile_pair() -> (GridCounts, GridCounts) {
        let histogram = |cells: &[u32]| {
            let mut histogram = GridCounts::new(10);
            cells.iter().for_each(|&c| histogram.add(Place::At(c)));
            histogram
        };
        (
            histogram(&[0, 0, 0, 0, 0, 0, 0, 0, 1]),
            histogram(&[0, 0, 0, 0, 0, 0, 0, 0, 1, 10]),
        )
    }

    /// The audit of a quantile mechanism `sample(counts, ε, generator)` on `pair` at
    /// ε·scale, each side with its own fixed seed.
    fn quantile_audit<K: Hash + Eq + Debug + Clone>(
        (d, neighbour): &(GridCounts, GridCounts),
        seeds: (u64, u64),
        scale: f64,
        sample: impl Fn(&GridCounts, f64, &mut ChaCha20Rng) -> K,
    ) -> Finding {
        let mut rng = ChaCha20Rng::seed_from_u64(seeds.0);
        let mut rng2 = ChaCha20Rng::seed_from_u64(seeds.1);
        audit(
            || sample(d, EPSILON * scale, &mut rng),
            || sample(neighbour, EPSILON * scale, &mut rng2),
            0.0,
        )
    }

    /// dp_quantile at α = 0.9 on the quantile pair. Exact loss 0.89 ε; without the factor
    /// 2·max(α, 1−α) it is 1.64 ε.
    #[test]
    fn audit_quantile() {
        let alpha = 0.9;
        let pair = quantile_pair();
        // sample_quantile at ε' has temperature 2·max(α, 1−α)/ε'; ε' = ε·scale gives
        // temperature right / scale.
        let run = |scale: f64| {
            quantile_audit(&pair, (105, 106), scale, |counts, epsilon, rng| {
                sample_quantile(counts, alpha, epsilon, rng)
            })
        };
        assert_private(run(1.0), EPSILON);
        assert_caught(run(2.0), EPSILON);
        // The wrong range: exp(ε·u) without 2·max(α, 1−α).
        assert_caught(run(temperature(alpha, EPSILON) * EPSILON), EPSILON);
    }

    /// The integer audits' pair on the whole-number grid 0, 10, ..., 100 (the grid of a
    /// range wider than its size): D = eight values at 0 and one at 5, between 0 and 10;
    /// D' adds 97, between 90 and 100.
    fn integer_pair() -> (GridCounts, GridCounts) {
        let grid = IntegerGrid::new(0, 100, 10);
        let counts = |values: &[i64]| {
            let mut counts = GridCounts::new(grid.size);
            values.iter().for_each(|&v| counts.add(grid.locate(v)));
            counts
        };
        (
            counts(&[0, 0, 0, 0, 0, 0, 0, 0, 5]),
            counts(&[0, 0, 0, 0, 0, 0, 0, 0, 5, 97]),
        )
    }

    /// dp_quantile at α = 0.9 over integers with values between grid points, on the
    /// integer pair. The loss stays within ε; half the temperature is caught.
    #[test]
    fn audit_quantile_between_grid_points() {
        let alpha = 0.9;
        let pair = integer_pair();
        let run = |scale: f64| {
            quantile_audit(&pair, (109, 110), scale, |counts, epsilon, rng| {
                sample_quantile(counts, alpha, epsilon, rng)
            })
        };
        assert_private(run(1.0), EPSILON);
        assert_caught(run(2.0), EPSILON);
    }

    /// dp_quantiles by recursive splitting, α = 0.1, 0.5, 0.9 (two levels) on the same
    /// pair as dp_quantile: the added value at 10 moves every level's utilities. Each
    /// level at the whole ε instead of ε/2 (levels not composed) must be caught.
    #[test]
    fn audit_recursive_quantiles() {
        let pair = quantile_pair();
        let alphas = [0.1, 0.5, 0.9];
        let run = |scale: f64| {
            quantile_audit(&pair, (107, 108), scale, |counts, epsilon, rng| {
                sample_quantiles_recursive(counts, &alphas, epsilon, rng)
            })
        };
        assert_private(run(1.0), EPSILON);
        assert_caught(run(2.0), EPSILON);
    }

    /// Recursive dp_quantiles, α = 0.1, 0.5, 0.9, on the integer pair (values between grid
    /// points, spread over the refined gaps before splitting). The loss must stay within
    /// ε (0.40 measured).
    /// This pair is easier than audit_recursive_quantiles' (its twin at 2ε reaches only
    /// 0.68), so the audit's power on the recursion is shown there, not here.
    #[test]
    fn audit_recursive_quantiles_between_grid_points() {
        let alphas = [0.1, 0.5, 0.9];
        let finding = quantile_audit(&integer_pair(), (111, 112), 1.0, |counts, epsilon, rng| {
            sample_quantiles_recursive(counts, &alphas, epsilon, rng)
        });
        assert_private(finding, EPSILON);
    }

    /// dp_top_k_unknown_domain at δ = 0.05: on D item 0 has no row (it is absent), on D'
    /// one. Its answer [0] must stay within e^ε·0 + δ; the threshold of the paper without
    /// our (1 + e^ε) factor must not.
    #[test]
    fn audit_limited_domain() {
        let parameters = LimitedDomain {
            k: 1,
            k_bar: 1,
            epsilon: EPSILON,
            delta: 0.05,
        };
        let run = |parameters: LimitedDomain| {
            let mut rng = ChaCha20Rng::seed_from_u64(107);
            let mut rng2 = ChaCha20Rng::seed_from_u64(108);
            audit(
                || limited_domain_top_k(&[], &[], &parameters, &mut rng),
                || limited_domain_top_k(&[1.0], &[7], &parameters, &mut rng2),
                parameters.delta,
            )
        };
        assert_private(run(parameters), EPSILON);
        // With δ·(1 + e^ε) in place of δ the offset becomes τ·ln(1/δ): the naive
        // threshold, which returns the single-row item too often for δ.
        let naive_delta = parameters.delta * (1.0 + EPSILON.exp());
        let naive = LimitedDomain {
            delta: naive_delta,
            ..parameters
        };
        let caught = {
            let mut rng = ChaCha20Rng::seed_from_u64(107);
            let mut rng2 = ChaCha20Rng::seed_from_u64(108);
            audit(
                || limited_domain_top_k(&[], &[], &naive, &mut rng),
                || limited_domain_top_k(&[1.0], &[7], &naive, &mut rng2),
                parameters.delta,
            )
        };
        assert_caught(caught, EPSILON);

        // Items present on both sides, the added row lifting the third above ⊥'s reach.
        let wide = LimitedDomain {
            k: 2,
            k_bar: 2,
            epsilon: EPSILON,
            delta: 1e-3,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(109);
        let mut rng2 = ChaCha20Rng::seed_from_u64(110);
        let finding = audit(
            || limited_domain_top_k(&[20.0, 20.0, 19.0], &[1, 2, 3], &wide, &mut rng),
            || limited_domain_top_k(&[20.0, 20.0, 20.0], &[1, 2, 3], &wide, &mut rng2),
            wide.delta,
        );
        assert_private(finding, EPSILON);
    }

    #[test]
    fn wilson_intervals_cover_the_proportion() {
        let (low, high) = wilson(500_000, DRAWS);
        assert!(low < 0.5 && high > 0.5 && high - low < 0.006);
        assert_eq!(wilson(0, DRAWS).0, 0.0);
        assert!(wilson(0, DRAWS).1 < 3e-5);
    }
}
