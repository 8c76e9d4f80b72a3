//! Gumbel noise, Gumbel-max sampling and the exponential mechanism.
//!
//! argmax_i (w_i + G_i) with G_i iid standard Gumbel picks i with probability
//! exp(w_i) / Σ_j exp(w_j) (seed `fn make_base_exponential_candidates_gumbel`, OpenDP). It
//! never exponentiates, so scaled scores of 1e15 neither overflow nor underflow
//! (PRIVACY.md section 2).

use rand::RngCore;

/// A uniform draw from the open interval (0, 1): 52 random bits, centred in their cell,
/// so that neither 0 nor 1 can come out and ln(−ln u) is always finite. (With 53 bits,
/// k + 0.5 would need 54 and the top cell would round to exactly 1.)
pub fn open_unit_interval<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 52) as f64;
    ((rng.next_u64() >> 12) as f64 + 0.5) * SCALE
}

/// A standard Gumbel draw, G = −ln(−ln U).
pub fn standard_gumbel<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    -(-open_unit_interval(rng).ln()).ln()
}

/// Noisy keys w_i − max_j w_j + G_i, one per log-weight; −∞ (weight zero) stays −∞.
///
/// Subtracting the maximum first keeps the noise visible when the weights are huge
/// (1e21 + G would round G away and turn every tie into "the first one wins").
pub fn noisy_keys<R: RngCore + ?Sized>(log_weights: &[f64], rng: &mut R) -> Vec<f64> {
    let top = log_weights.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    log_weights
        .iter()
        .map(|&w| {
            debug_assert!(!w.is_nan(), "a log-weight is NaN");
            if w == f64::NEG_INFINITY {
                f64::NEG_INFINITY
            } else {
                (w - top) + standard_gumbel(rng)
            }
        })
        .collect()
}

/// Gumbel-max: index i with probability exp(log_weights[i]) / Σ_j exp(log_weights[j]).
///
/// None when there is no candidate with a positive weight.
pub fn gumbel_max<R: RngCore + ?Sized>(log_weights: &[f64], rng: &mut R) -> Option<usize> {
    let keys = noisy_keys(log_weights, rng);
    let mut best: Option<(usize, f64)> = None;
    for (i, &key) in keys.iter().enumerate() {
        if key > f64::NEG_INFINITY && best.is_none_or(|(_, b)| key > b) {
            best = Some((i, key));
        }
    }
    best.map(|(i, _)| i)
}

/// The exponential mechanism: index i with probability ∝ exp(utilities[i] / temperature).
///
/// With utilities in units of their range and temperature = 1/ε this is ε-DP (the tight,
/// range-based analysis of Dong, Durfee and Rogers 2019; PRIVACY.md section 3).
pub fn exponential_mechanism<R: RngCore + ?Sized>(
    utilities: &[f64],
    temperature: f64,
    rng: &mut R,
) -> Option<usize> {
    let log_weights: Vec<f64> = utilities.iter().map(|u| u / temperature).collect();
    gumbel_max(&log_weights, rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_matches_distribution, softmax};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    const DRAWS: usize = 1_000_000;

    fn frequencies(utilities: &[f64], temperature: f64, seed: u64) -> Vec<u64> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut counts = vec![0u64; utilities.len()];
        for _ in 0..DRAWS {
            counts[exponential_mechanism(utilities, temperature, &mut rng).unwrap()] += 1;
        }
        counts
    }

    /// Checks the sampler against the exact softmax, and checks that the same counts
    /// reject the textbook temperature (2·Δ/ε): the test has the power to fail.
    fn check(utilities: &[f64], epsilon: f64, seed: u64) {
        let counts = frequencies(utilities, 1.0 / epsilon, seed);
        let exact = softmax(utilities, 1.0 / epsilon);
        let textbook = softmax(utilities, 2.0 / epsilon);
        assert_matches_distribution(&counts, &exact, &textbook);
    }

    #[test]
    fn ties_are_equally_likely() {
        check(&[3.0, 3.0, 3.0, 1.0, 0.0], 1.0, 1);
    }

    #[test]
    fn one_dominant_item() {
        check(&[0.0, 0.0, 0.0, 8.0], 1.0, 2);
    }

    #[test]
    fn one_hundred_items() {
        let utilities: Vec<f64> = (0..100).map(|i| i as f64 * 0.05).collect();
        check(&utilities, 1.0, 3);
    }

    #[test]
    fn huge_scores_and_epsilon_stay_finite() {
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let utilities = [1e15, 1e15 - 1.0, 0.0, 1e15];
        let mut winners = [0u32; 4];
        for _ in 0..10_000 {
            let i = exponential_mechanism(&utilities, 1.0 / 1e6, &mut rng).unwrap();
            winners[i] += 1;
        }
        // Only the two tied leaders can win, each about half the time.
        assert_eq!(winners[1] + winners[2], 0);
        assert!(winners[0] > 4_500 && winners[3] > 4_500, "{winners:?}");
        for key in noisy_keys(&[1e21, -1e21, 0.0], &mut rng) {
            assert!(!key.is_nan() && key != f64::INFINITY);
        }
        for epsilon in [1e-12, 1e6] {
            assert!(exponential_mechanism(&[1e15, 0.0], 1.0 / epsilon, &mut rng).is_some());
        }
    }

    #[test]
    fn no_candidate_no_answer() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        assert_eq!(gumbel_max(&[], &mut rng), None);
        assert_eq!(gumbel_max(&[f64::NEG_INFINITY], &mut rng), None);
        assert_eq!(gumbel_max(&[f64::NEG_INFINITY, 0.0], &mut rng), Some(1));
    }

    #[test]
    fn open_unit_interval_excludes_its_ends() {
        struct Constant(u64);
        impl RngCore for Constant {
            fn next_u32(&mut self) -> u32 {
                self.0 as u32
            }
            fn next_u64(&mut self) -> u64 {
                self.0
            }
            fn fill_bytes(&mut self, _: &mut [u8]) {}
        }
        for bits in [0, u64::MAX] {
            let u = open_unit_interval(&mut Constant(bits));
            assert!(u > 0.0 && u < 1.0);
            assert!(standard_gumbel(&mut Constant(bits)).is_finite());
        }
    }
}
