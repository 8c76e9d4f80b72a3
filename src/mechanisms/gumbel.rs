//! Gumbel noise, Gumbel-max sampling and the exponential mechanism.
//!
//! argmax_i (w_i + G_i) with G_i iid standard Gumbel picks i with probability
//! exp(w_i) / Σ_j exp(w_j) (seed `fn make_base_exponential_candidates_gumbel`, OpenDP). It
//! never exponentiates, so scaled scores of 1e15 neither overflow nor underflow
//! (../shared/PRIVACY.md, section 2).

use rand::RngCore;

/// A uniform draw from the open interval (0, 1): 52 random bits, centred in their cell,
/// so that neither 0 nor 1 can come out and ln(−ln u) is always finite. (With 53 bits,
/// k + 0.5 would need 54 and the top cell would round to exactly 1.)
pub fn open_unit_interval<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    uniform_of_word(rng.next_u64())
}

/// [`open_unit_interval`] of the 64-bit word it reads: u = (k + ½)·2^-52, k its top 52 bits.
fn uniform_of_word(word: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 52) as f64;
    ((word >> 12) as f64 + 0.5) * SCALE
}

/// A standard Gumbel draw, G = −ln(−ln U).
pub fn standard_gumbel<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    gumbel_of_word(rng.next_u64())
}

/// [`standard_gumbel`] of the 64-bit word it reads.
fn gumbel_of_word(word: u64) -> f64 {
    -(-uniform_of_word(word).ln()).ln()
}

/// Whether the noise a word gives stays at or below `gap` > 0, told without a logarithm:
/// −ln U ≥ 1 − U, so 1 − U ≥ e^−gap gives G = −ln(−ln U) ≤ gap; and e^−gap ≤ 2^−n for the
/// whole number n ≤ gap·log₂e. 1 − U = (2^53 − 2k − 1)·2^-53 exactly, an integer compare.
fn noise_at_most(gap: f64, word: u64) -> bool {
    // Truncation is the floor here (n < 1 is refused either way), and needs no libm.
    let n = (gap * std::f64::consts::LOG2_E - 1e-9) as i64;
    if n < 1 {
        return false;
    }
    if n >= 53 {
        return true; // 1 − U ≥ 2^-53 ≥ 2^-n
    }
    let one_minus_u = (1u64 << 53) - 2 * (word >> 12) - 1;
    one_minus_u >= 1u64 << (53 - n as u32)
}

/// Noisy keys w_i − max_j w_j + G_i, one per log-weight; −∞ (weight zero) stays −∞.
///
/// Subtracting the maximum first keeps the noise visible when the weights are huge
/// (1e21 + G would round G away and turn every tie into "the first one wins").
pub fn noisy_keys<R: RngCore + ?Sized>(log_weights: &[f64], rng: &mut R) -> Vec<f64> {
    let top = log_weights
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
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

/// The range of [`standard_gumbel`]: u lies in [2^-53, 1 − 2^-53], so
/// G = −ln(−ln u) lies in [−ln(53·ln 2), −ln(−ln(1 − 2^-53))] = [−3.6038, 36.7368].
const GUMBEL_LOWEST: f64 = -3.61;
const GUMBEL_HIGHEST: f64 = 36.75;

/// How far below the largest log-weight a candidate can still win a Gumbel race: its key
/// is at most w − max + 36.75, the leader's at least −3.61.
pub const CONTENDING: f64 = GUMBEL_HIGHEST - GUMBEL_LOWEST;

/// Gumbel-max: index i with probability exp(log_weights[i]) / Σ_j exp(log_weights[j]).
///
/// Candidates more than [`CONTENDING`] below the largest log-weight cannot win with this
/// generator's noise, so their noise is not drawn: the same distribution, at two
/// logarithms per contender rather than per candidate. None when there is no candidate
/// with a positive weight.
pub fn gumbel_max<R: RngCore + ?Sized>(log_weights: &[f64], rng: &mut R) -> Option<usize> {
    gumbel_max_streamed(|| log_weights.iter().copied().enumerate(), rng)
}

/// [`gumbel_max`] over candidates streamed twice by `candidates` (the same sequence of
/// (candidate, log-weight) each time): once for the largest log-weight, once for the race,
/// so that no list of candidates need exist.
pub fn gumbel_max_streamed<T, I, R>(candidates: impl Fn() -> I, rng: &mut R) -> Option<T>
where
    I: Iterator<Item = (T, f64)>,
    R: RngCore + ?Sized,
{
    noisy_max_streamed(candidates, standard_gumbel, CONTENDING, rng)
}

/// Report noisy max: the candidate with the largest log-weight plus `noise`, over
/// candidates streamed twice by `candidates`. Candidates more than `contending` below the
/// largest log-weight cannot win with this noise (its range), so their noise is not
/// drawn. None when there is no candidate with a positive weight.
pub fn noisy_max_streamed<T, I, R>(
    candidates: impl Fn() -> I,
    noise: fn(&mut R) -> f64,
    contending: f64,
    rng: &mut R,
) -> Option<T>
where
    I: Iterator<Item = (T, f64)>,
    R: RngCore + ?Sized,
{
    let top = candidates()
        .map(|(_, w)| w)
        .fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        return None;
    }
    let mut best: Option<(T, f64)> = None;
    for (candidate, w) in candidates() {
        debug_assert!(!w.is_nan(), "a log-weight is NaN");
        if w - top < -contending {
            continue;
        }
        let key = (w - top) + noise(rng);
        if best.as_ref().is_none_or(|(_, b)| key > *b) {
            best = Some((candidate, key));
        }
    }
    best.map(|(candidate, _)| candidate)
}

/// How far a contender's bound must fall below the leader's key before its noise is
/// judged without logarithms: far more than the rounding of keys of modest size.
const BOUND_MARGIN: f64 = 1e-6;

/// Gumbel-max over contenders given with a cheap upper bound of their log-weight (modest
/// numbers: shifted so that the largest is near 0), whose exact log-weight `exact` and noise
/// cost logarithms. Each contender gets one word of `rng`, in order, as a full race (every
/// contender keyed, w + G) would draw them; the one with the largest bound is keyed first,
/// and another is keyed only if its noise could lift its bound past the leader's key
/// ([`noise_at_most`]): about Σ 2·e^−(gap) contenders rather than all. The winner is the
/// one the full race with the same words picks (the first of equal keys; a test checks it
/// draw by draw), so the distribution is Gumbel-max's. None when there is no contender.
pub fn lazy_gumbel_max<T, R: RngCore + ?Sized>(
    contenders: &[(T, f64)],
    exact: impl Fn(&T) -> f64,
    rng: &mut R,
) -> Option<usize> {
    let words: Vec<u64> = contenders.iter().map(|_| rng.next_u64()).collect();
    let leader =
        (0..contenders.len()).max_by(|&a, &b| contenders[a].1.total_cmp(&contenders[b].1))?;
    let key = |i: usize| {
        let w = exact(&contenders[i].0);
        debug_assert!(
            w <= contenders[i].1 + BOUND_MARGIN / 2.0,
            "a bound below its weight"
        );
        w + gumbel_of_word(words[i])
    };
    let (mut best, mut best_key) = (leader, key(leader));
    for (i, &(_, bound)) in contenders.iter().enumerate() {
        let gap = best_key - bound - BOUND_MARGIN;
        if i == leader || (gap > 0.0 && noise_at_most(gap, words[i])) {
            continue;
        }
        let k = key(i);
        if k > best_key || (k == best_key && i < best) {
            (best, best_key) = (i, k);
        }
    }
    Some(best)
}

/// [`lazy_gumbel_max`] over a stream, in constant memory: each contender is keyed, in
/// order, only if its noise could lift its bound past the best key so far (more are keyed
/// than when the leader goes first). The same winner as the full race with the same words.
pub fn streamed_lazy_gumbel_max<T, R: RngCore + ?Sized>(
    contenders: impl Iterator<Item = (T, f64)>,
    exact: impl Fn(&T) -> f64,
    rng: &mut R,
) -> Option<T> {
    let mut best: Option<(T, f64)> = None;
    for (candidate, bound) in contenders {
        let word = rng.next_u64();
        if let Some((_, best_key)) = &best {
            let gap = best_key - bound - BOUND_MARGIN;
            if gap > 0.0 && noise_at_most(gap, word) {
                continue;
            }
        }
        let key = exact(&candidate) + gumbel_of_word(word);
        if best.as_ref().is_none_or(|(_, b)| key > *b) {
            best = Some((candidate, key));
        }
    }
    best.map(|(candidate, _)| candidate)
}

/// The exponential mechanism: index i with probability ∝ exp(utilities[i] / temperature).
///
/// With utilities in units of their range and temperature = 1/ε this is ε-DP (the tight,
/// range-based analysis of Dong, Durfee and Rogers 2019; ../shared/PRIVACY.md, section 3).
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
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    const DRAWS: usize = 1_000_000;

    /// A generator that always returns the same word, for the extreme draws.
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
    fn the_gumbel_noise_stays_in_its_range() {
        // The extreme uniform draws give the extreme noise: u near 0 the lowest, u near 1
        // the highest.
        let lowest = standard_gumbel(&mut Constant(0));
        let highest = standard_gumbel(&mut Constant(u64::MAX));
        assert!(
            lowest > GUMBEL_LOWEST && lowest < GUMBEL_LOWEST + 0.01,
            "{lowest}"
        );
        assert!(
            highest < GUMBEL_HIGHEST && highest > GUMBEL_HIGHEST - 0.02,
            "{highest}"
        );
        // A candidate just beyond CONTENDING never wins, one just within can.
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        assert!((0..100_000).all(|_| gumbel_max(&[0.0, -CONTENDING - 1e-9], &mut rng) == Some(0)));
    }

    #[test]
    fn no_candidate_no_answer() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        assert_eq!(gumbel_max(&[], &mut rng), None);
        assert_eq!(gumbel_max(&[f64::NEG_INFINITY], &mut rng), None);
        assert_eq!(gumbel_max(&[f64::NEG_INFINITY, 0.0], &mut rng), Some(1));
    }

    /// A full race over the same words: every contender keyed, the first of equal keys.
    fn full_race(exact: &[f64], rng: &mut ChaCha20Rng) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, &w) in exact.iter().enumerate() {
            let key = w + standard_gumbel(rng);
            if best.is_none_or(|(_, b)| key > b) {
                best = Some((i, key));
            }
        }
        best.map(|(i, _)| i)
    }

    #[test]
    fn the_lazy_race_picks_the_full_race_winner_draw_by_draw() {
        let mut instances = ChaCha20Rng::seed_from_u64(7);
        let mut keyed = 0usize;
        let mut contenders_seen = 0usize;
        for seed in 0..200_000u64 {
            let n = instances.random_range(0..=64usize);
            let spread = [0.5, 5.0, 40.0][instances.random_range(0..3)];
            let exact: Vec<f64> = (0..n)
                .map(|_| -instances.random::<f64>() * spread)
                .collect();
            // Bounds: exact, or above it by up to ln 2 (as ln(length) ≤ ln 2·⌈log₂ length⌉).
            let contenders: Vec<(usize, f64)> = exact
                .iter()
                .enumerate()
                .map(|(i, &w)| match instances.random_range(0..3) {
                    0 => (i, w),
                    _ => (i, w + instances.random::<f64>() * std::f64::consts::LN_2),
                })
                .collect();
            let count = std::cell::Cell::new(0);
            let lazy = lazy_gumbel_max(
                &contenders,
                |&i| {
                    count.set(count.get() + 1);
                    exact[i]
                },
                &mut ChaCha20Rng::seed_from_u64(seed),
            );
            let full = full_race(&exact, &mut ChaCha20Rng::seed_from_u64(seed));
            assert_eq!(lazy, full, "seed {seed}, exact {exact:?}");
            let streamed = streamed_lazy_gumbel_max(
                contenders.iter().copied(),
                |&i| exact[i],
                &mut ChaCha20Rng::seed_from_u64(seed),
            );
            assert_eq!(streamed, full, "seed {seed}, exact {exact:?}");
            keyed += count.get();
            contenders_seen += n;
        }
        // The point of it: most contenders are never keyed.
        assert!(
            keyed * 3 < contenders_seen,
            "{keyed} of {contenders_seen} keyed"
        );
    }

    #[test]
    fn noise_at_most_never_errs() {
        // Whenever it says G ≤ gap, the computed noise is ≤ gap: at the extreme words and
        // around the thresholds 2^-n it switches at.
        let mut words = vec![0, 1 << 12, u64::MAX, u64::MAX - (1 << 12)];
        for n in 1..60u32 {
            let k = (1u64 << 52).saturating_sub(1u64 << n.min(52) >> 1);
            for delta in [0u64, 1, 2] {
                words.push(k.saturating_sub(delta) << 12);
                words.push((k + delta).min((1 << 52) - 1) << 12);
            }
        }
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        words.extend((0..100_000).map(|_| rng.next_u64()));
        for word in words {
            let noise = gumbel_of_word(word);
            for gap in [
                0.01, 0.5, 0.7, 1.0, 2.0, 5.0, 10.0, 20.0, 36.0, 36.7, 37.0, 50.0,
            ] {
                if noise_at_most(gap, word) {
                    assert!(noise <= gap, "word {word:#x}, gap {gap}, noise {noise}");
                }
            }
        }
    }

    #[test]
    fn open_unit_interval_excludes_its_ends() {
        for bits in [0, u64::MAX] {
            let u = open_unit_interval(&mut Constant(bits));
            assert!(u > 0.0 && u < 1.0);
            assert!(standard_gumbel(&mut Constant(bits)).is_finite());
        }
    }
}
