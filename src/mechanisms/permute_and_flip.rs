//! Permute-and-flip (McKenna and Sheldon, "Permute-and-Flip: A new mechanism for
//! differentially private selection", NeurIPS 2020): visit the candidates in random order
//! and stop at candidate r with probability exp((u_r − u*)/τ), u* the best utility. It is
//! never worse than the exponential mechanism in expected utility, and up to twice as
//! good. It has the same distribution as report-noisy-max with exponential noise,
//! argmax_r (u_r/τ + E_r) with E_r iid standard exponential (Ding, Kifer, Steinke, Wang,
//! Xiao and Zhang, "The permute-and-flip mechanism is identical to report-noisy-max with
//! exponential noise", 2021), which is how it is sampled here: one pass, no permutation,
//! and the same combine structure as Gumbel-max.
//!
//! Privacy: with scores monotone under adding or removing a row (every score moves the
//! same way), τ = Δ/ε makes it ε-DP, as for the exponential mechanism (OpenDP's
//! `make_noisy_max` with a monotonic metric). The guarantee is pure ε-DP; unlike the
//! exponential mechanism it is not "bounded range", which matters only when releases are
//! composed under zCDP.

use super::gumbel::{noisy_max_streamed, open_unit_interval};
use rand::RngCore;

/// A standard exponential draw, E = −ln U.
pub fn standard_exponential<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    -open_unit_interval(rng).ln()
}

/// The range of [`standard_exponential`]: u lies in [2^-53, 1 − 2^-53], so E lies in
/// (0, 53·ln 2] = (0, 36.7368]: a candidate more than that below the best can never win.
const CONTENDING: f64 = 36.75;

/// Permute-and-flip: index r with the probability of permute-and-flip at temperature
/// `temperature` (exp((u_r − u*)/τ) the chance to stop at r). None without candidates.
pub fn permute_and_flip<R: RngCore + ?Sized>(
    utilities: &[f64],
    temperature: f64,
    rng: &mut R,
) -> Option<usize> {
    noisy_max_streamed(
        || utilities.iter().map(|u| u / temperature).enumerate(),
        standard_exponential::<R>,
        CONTENDING,
        rng,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        assert_matches_distribution, permute_and_flip_distribution as exact, softmax,
    };
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn frequencies(utilities: &[f64], temperature: f64, seed: u64) -> Vec<u64> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut counts = vec![0u64; utilities.len()];
        for _ in 0..1_000_000 {
            counts[permute_and_flip(utilities, temperature, &mut rng).unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn the_exact_distribution_sums_to_one_and_favours_the_best() {
        let p = exact(&[0.0, 1.0, 2.0, 3.0], 1.0);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let em = softmax(&[0.0, 1.0, 2.0, 3.0], 1.0);
        assert!(
            p[3] > em[3],
            "permute-and-flip names the best more often: {p:?} {em:?}"
        );
    }

    #[test]
    fn draws_follow_permute_and_flip_not_the_exponential_mechanism() {
        // 10^6 draws each; the same counts must reject the exponential mechanism's
        // distribution (softmax) and permute-and-flip at half the temperature.
        for (utilities, temperature, seed) in [
            (vec![0.0, 1.0, 2.0, 3.0], 1.0, 11),
            (vec![2.0, 2.0, 1.0, 0.0, 0.5], 0.7, 12),
            (vec![5.0, 0.0, 4.5], 2.0, 13),
        ] {
            let counts = frequencies(&utilities, temperature, seed);
            let right = exact(&utilities, temperature);
            assert_matches_distribution(&counts, &right, &softmax(&utilities, temperature));
            assert_matches_distribution(&counts, &right, &exact(&utilities, temperature / 2.0));
        }
    }

    #[test]
    fn far_behind_candidates_never_win_and_none_is_none() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        for _ in 0..10_000 {
            assert_eq!(permute_and_flip(&[0.0, 1e3], 1.0, &mut rng), Some(1));
        }
        assert_eq!(permute_and_flip(&[], 1.0, &mut rng), None);
        assert!(standard_exponential(&mut rng) > 0.0);
    }
}
