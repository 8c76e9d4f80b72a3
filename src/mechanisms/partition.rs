//! Differentially private partition selection: whether a group's key may be released.
//!
//! The keys of a GROUP BY are data too: a key seen in one row identifies that row. When
//! every row is in one group, adding or removing a row changes one group's count by one,
//! so keeping a group of n rows with probability π(n) makes the set of released keys
//! (ε, δ)-DP if π(n) ≤ e^ε·π(n−1) + δ and 1 − π(n−1) ≤ e^ε·(1 − π(n)) + δ. The largest such
//! π, which keeps the most groups, is the recursion of Desfontaines, Voss, Gipson and
//! Mandayam, "Differentially private partition selection" (PETS 2022), computed here in
//! closed form. A group of one row is kept with probability exactly δ (π(1) = δ, as
//! π(0) = 0 ≤ T below): a key seen once is released with probability at most δ.

use rand::Rng;

/// π(rows): the probability of keeping a group of `rows` rows, the largest that keeps the
/// released keys (ε, δ)-DP. O(1), with `epsilon` > 0 and 0 < `delta` < 1.
///
/// The recursion is π(0) = 0, π(n) = min(e^ε·π(n−1) + δ, 1 − e^−ε·(1 − π(n−1) − δ), 1).
/// - The first branch is the smaller one while π(n−1) ≤ T = (1 − δ)/(1 + e^ε):
///   e^ε·p + δ ≤ 1 − e^−ε·(1 − p − δ) ⟺ p·(e^ε − e^−ε) ≤ (1 − e^−ε)·(1 − δ) ⟺ p ≤ T.
///   There e^ε·p + δ ≤ (e^ε + δ)/(1 + e^ε) < 1, so the 1 never binds, and the sum of the
///   geometric series gives π(n) = δ·(e^(nε) − 1)/(e^ε − 1).
/// - π only grows, so after the last such step n* the second branch holds for good:
///   q = 1 − π follows q(n) = e^−ε·(q(n−1) − δ), whose fixed point is −δ/(e^ε − 1), so
///   q(n* + m) = e^(−mε)·q(n*) − δ·(1 − e^(−mε))/(e^ε − 1), and π = 1 once q ≤ 0 (1 is a
///   fixed point: the second branch exceeds 1 there).
pub fn keep_probability(rows: u64, epsilon: f64, delta: f64) -> f64 {
    debug_assert!(epsilon > 0.0 && delta > 0.0 && delta < 1.0);
    let last_growing = last_growing_step(epsilon, delta);
    if rows <= last_growing {
        return (delta * growth(rows, epsilon)).min(1.0);
    }
    let q = 1.0 - delta * growth(last_growing, epsilon);
    let decay = -((rows - last_growing) as f64 * epsilon);
    // (1 − e^(−mε))/(e^ε − 1) = e^−ε·(1 − e^(−mε))/(1 − e^−ε), in terms that do not
    // overflow for large ε and keep their digits for small ε.
    let spent = delta * (-epsilon).exp() * decay.exp_m1() / (-epsilon).exp_m1();
    let remaining = decay.exp() * q - spent;
    (1.0 - remaining).clamp(0.0, 1.0)
}

/// Keeps a group of `rows` rows with probability exactly [`keep_probability`].
pub fn keep(rows: u64, epsilon: f64, delta: f64, rng: &mut impl Rng) -> bool {
    bernoulli(keep_probability(rows, epsilon, delta), rng)
}

/// (e^(nε) − 1)/(e^ε − 1) = 1 + e^ε + … + e^((n−1)ε), written as
/// e^((n−1)ε)·(1 − e^(−nε))/(1 − e^−ε): accurate for small ε, and finite whenever the
/// result is (n ≤ n* + 1 keeps it below 1/δ).
fn growth(steps: u64, epsilon: f64) -> f64 {
    if steps == 0 {
        return 0.0;
    }
    ((steps - 1) as f64 * epsilon).exp() * (-(steps as f64) * epsilon).exp_m1()
        / (-epsilon).exp_m1()
}

/// n*: the last n at which the first branch of the recursion applies, that is the largest
/// n with δ·growth(n − 1) ≤ T.
fn last_growing_step(epsilon: f64, delta: f64) -> u64 {
    // T = (1 − δ)·e^−ε/(1 + e^−ε), without overflowing e^ε.
    let threshold = (1.0 - delta) * (-epsilon).exp() / (1.0 + (-epsilon).exp());
    let below = |m: u64| delta * growth(m, epsilon) <= threshold;
    // δ·(e^(mε) − 1)/(e^ε − 1) ≤ T ⟺ m ≤ ln(1 + R)/ε with R = T·(e^ε − 1)/δ, taken in
    // logarithms because R overflows for small δ and large ε.
    let ln_r =
        (-delta).ln_1p() - (-epsilon).exp().ln_1p() + (-(-epsilon).exp_m1()).ln() - delta.ln();
    let ln_1p_r = if ln_r > 0.0 {
        ln_r + (-ln_r).exp().ln_1p()
    } else {
        ln_r.exp().ln_1p()
    };
    // Rounding can put the estimate one off: settle it on the condition itself.
    let mut m = (ln_1p_r / epsilon).floor() as u64;
    while m > 0 && !below(m) {
        m -= 1;
    }
    while m < u64::MAX && below(m + 1) {
        m += 1;
    }
    m.saturating_add(1)
}

/// True with probability exactly `probability`: u < p for a uniform u in [0, 1) whose
/// binary digits are drawn 64 at a time, only as far as needed to tell u from p (one word
/// but once in 2^64). A 52- or 53-bit uniform would round p to a multiple of 2^-53 and
/// could keep a one-row group more often than δ.
fn bernoulli(probability: f64, rng: &mut impl Rng) -> bool {
    if probability <= 0.0 {
        return false;
    }
    if probability >= 1.0 {
        return true;
    }
    // p = mantissa·2^-scale exactly, so p has no binary digit beyond position `scale`.
    let bits = probability.to_bits();
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, scale) = match (bits >> 52) as i64 {
        0 => (fraction, 1074),
        biased => (fraction | (1 << 52), 1075 - biased),
    };
    let mut position = 0;
    while position < scale {
        position += 64;
        // Digits position − 63 ..= position of p: ⌊p·2^position⌋ mod 2^64.
        let shift = position - scale;
        let word = match shift {
            0.. => mantissa << shift,
            -63..0 => mantissa >> -shift,
            _ => 0,
        };
        let draw = rng.next_u64();
        if draw != word {
            return draw < word;
        }
    }
    // u agrees with every digit of p so far and p has no more: u ≥ p.
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_matches_distribution;
    use rand::{RngCore, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    const EPSILONS: [f64; 7] = [1e-4, 0.01, 0.1, 0.5, 1.0, 3.0, 10.0];
    const DELTAS: [f64; 5] = [1e-12, 1e-9, 1e-6, 1e-3, 0.1];
    const MAX_STEPS: usize = 1_000_000;

    /// π(n), π(n + 1), … by the recursion itself, from π(n) = `first`, until π reaches 1
    /// or after `steps` steps.
    fn recursion(epsilon: f64, delta: f64, first: f64, steps: usize) -> Vec<f64> {
        let (grow, shrink) = (epsilon.exp(), (-epsilon).exp());
        let mut pi = vec![first];
        while pi.len() <= steps && *pi.last().unwrap() < 1.0 {
            let p = *pi.last().unwrap();
            pi.push(
                (grow * p + delta)
                    .min(1.0 - shrink * (1.0 - p - delta))
                    .min(1.0),
            );
        }
        pi
    }

    fn relative_error(closed: f64, recursive: f64) -> f64 {
        if recursive == 0.0 {
            closed.abs()
        } else {
            (closed - recursive).abs() / recursive
        }
    }

    #[test]
    fn closed_form_equals_the_recursion() {
        let mut worst = 0.0f64;
        for epsilon in EPSILONS {
            for delta in DELTAS {
                let pi = recursion(epsilon, delta, 0.0, MAX_STEPS);
                assert_eq!(*pi.last().unwrap(), 1.0, "ε = {epsilon}, δ = {delta}");
                for (rows, &expected) in pi.iter().enumerate() {
                    let error =
                        relative_error(keep_probability(rows as u64, epsilon, delta), expected);
                    assert!(
                        error <= 1e-9,
                        "ε = {epsilon}, δ = {delta}, rows = {rows}: relative error {error:e}"
                    );
                    worst = worst.max(error);
                }
                for rows in [pi.len() as u64, 1_000_000_000, u64::MAX] {
                    assert_eq!(keep_probability(rows, epsilon, delta), 1.0);
                }
            }
        }
        // Far tighter than the bound above; most of it is the recursion's own rounding.
        assert!(worst <= 1e-11, "worst relative error {worst:e}");
    }

    /// The extreme parameters: recursions of 10^9 steps, checked from 0 and from a few
    /// steps before the change of branch (restarted from the closed form there).
    #[test]
    fn closed_form_equals_the_recursion_at_extreme_parameters() {
        for epsilon in [1e-6, 1e-4, 20.0, 50.0, 700.0] {
            for delta in [1e-300, 1e-9, 0.5, 1.0 - 1e-9] {
                let last_growing = last_growing_step(epsilon, delta);
                let start = last_growing.saturating_sub(5);
                for first in [0, start] {
                    let pi_first = keep_probability(first, epsilon, delta);
                    let pi = recursion(epsilon, delta, pi_first, 100_000);
                    for (step, &expected) in pi.iter().enumerate() {
                        let rows = first + step as u64;
                        let error =
                            relative_error(keep_probability(rows, epsilon, delta), expected);
                        assert!(
                            error <= 1e-9,
                            "ε = {epsilon}, δ = {delta}, rows = {rows}: relative error {error:e}"
                        );
                    }
                }
                assert_eq!(keep_probability(u64::MAX, epsilon, delta), 1.0);
            }
        }
    }

    #[test]
    fn one_row_is_kept_with_probability_delta_and_more_rows_never_less() {
        for epsilon in EPSILONS.into_iter().chain([1e-6, 50.0, 1e3, 1e6]) {
            for delta in DELTAS.into_iter().chain([1e-300, 0.9]) {
                assert_eq!(keep_probability(0, epsilon, delta), 0.0);
                assert_eq!(keep_probability(1, epsilon, delta), delta);
                // Every count near 0 and near the change of branch, then powers of two.
                let last_growing = last_growing_step(epsilon, delta);
                let mut counts: Vec<u64> = (0..100_000)
                    .chain(
                        last_growing.saturating_sub(100_000)..last_growing.saturating_add(100_000),
                    )
                    .chain((0..64).map(|power| 1u64 << power))
                    .chain([u64::MAX])
                    .collect();
                counts.sort_unstable();
                counts.dedup();
                let mut previous = 0.0;
                for rows in counts {
                    let pi = keep_probability(rows, epsilon, delta);
                    assert!(
                        (0.0..=1.0).contains(&pi) && pi >= previous,
                        "ε = {epsilon}, δ = {delta}: π({rows}) = {pi} after {previous}"
                    );
                    previous = pi;
                }
            }
        }
    }

    #[test]
    fn every_adjacent_pair_meets_the_privacy_constraints() {
        for epsilon in EPSILONS {
            let grow = epsilon.exp();
            // Rounding near 1 moves π by a few units in the last place, scaled by e^ε.
            let slack = 8.0 * f64::EPSILON * grow;
            for delta in DELTAS {
                let mut previous = keep_probability(0, epsilon, delta);
                for rows in 1..MAX_STEPS as u64 {
                    let pi = keep_probability(rows, epsilon, delta);
                    let added = grow * previous + delta;
                    assert!(
                        pi <= added * (1.0 + 1e-12) + slack,
                        "ε = {epsilon}, δ = {delta}: π({rows}) = {pi} > e^ε·π(n−1) + δ = {added}"
                    );
                    let removed = grow * (1.0 - pi) + delta;
                    assert!(
                        1.0 - previous <= removed * (1.0 + 1e-12) + slack,
                        "ε = {epsilon}, δ = {delta}, rows = {rows}: 1 − π(n−1) = {} > {removed}",
                        1.0 - previous
                    );
                    if previous == 1.0 {
                        break;
                    }
                    previous = pi;
                }
            }
        }
    }

    #[test]
    fn keep_frequencies_match_the_probability() {
        const DRAWS: usize = 1_000_000;
        let cases: [(f64, f64, &[u64]); 2] = [(1.0, 1e-3, &[5, 6, 7, 8]), (0.1, 1e-6, &[90, 110])];
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        for (epsilon, delta, counts) in cases {
            for &rows in counts {
                let pi = keep_probability(rows, epsilon, delta);
                assert!((0.05..=0.95).contains(&pi), "π({rows}) = {pi}");
                let kept = (0..DRAWS)
                    .filter(|_| keep(rows, epsilon, delta, &mut rng))
                    .count() as u64;
                // The probability of ε·1.1 must be told apart: the test has the power to fail.
                let wrong = keep_probability(rows, epsilon * 1.1, delta);
                assert_matches_distribution(
                    &[kept, DRAWS as u64 - kept],
                    &[pi, 1.0 - pi],
                    &[wrong, 1.0 - wrong],
                );
            }
        }
    }

    #[test]
    fn no_rows_never_kept_many_rows_always_kept() {
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        for _ in 0..100_000 {
            assert!(!keep(0, 1.0, 0.5, &mut rng));
            assert!(keep(100, 1.0, 1e-3, &mut rng));
            assert!(keep(u64::MAX, 1e-6, 1e-300, &mut rng));
        }
    }

    /// A generator that returns the given words, then zeros.
    struct Words(Vec<u64>);

    impl RngCore for Words {
        fn next_u32(&mut self) -> u32 {
            self.next_u64() as u32
        }
        fn next_u64(&mut self) -> u64 {
            if self.0.is_empty() {
                0
            } else {
                self.0.remove(0)
            }
        }
        fn fill_bytes(&mut self, _: &mut [u8]) {}
    }

    #[test]
    fn bernoulli_compares_every_digit() {
        let half = 1u64 << 63;
        // u = 0 is below every positive p, even a subnormal one, and u → 1 below none.
        for p in [f64::MIN_POSITIVE / 4.0, 1e-300, 1e-9, 0.5] {
            assert!(bernoulli(p, &mut Words(vec![])));
            assert!(!bernoulli(p, &mut Words(vec![u64::MAX; 20])));
        }
        assert!(bernoulli(1.0, &mut Words(vec![u64::MAX; 20])));
        assert!(!bernoulli(0.0, &mut Words(vec![])));
        // u = 1/2 exactly is not below 1/2; just below it is.
        assert!(!bernoulli(0.5, &mut Words(vec![half])));
        assert!(bernoulli(0.5, &mut Words(vec![half - 1, u64::MAX])));
        // The last digit of 1/2 + 2^-53 counts.
        let above_half = 0.5 + f64::EPSILON / 2.0;
        assert!(!bernoulli(above_half, &mut Words(vec![half + (1 << 11)])));
        assert!(bernoulli(
            above_half,
            &mut Words(vec![half + (1 << 11) - 1, u64::MAX])
        ));
        // 2^-70 lies in the second word: 2^58 there.
        let tiny = 2f64.powi(-70);
        assert!(bernoulli(tiny, &mut Words(vec![0, (1 << 58) - 1])));
        assert!(!bernoulli(tiny, &mut Words(vec![0, 1 << 58])));
        assert!(!bernoulli(tiny, &mut Words(vec![1])));
    }
}
