//! Top-k selection: one-shot Gumbel for known candidates, and the limited-domain
//! mechanism for items that come from the data (Durfee and Rogers, "Practical
//! Differentially Private Top-k Selection with Pay-what-you-get Composition", NeurIPS 2019).
//!
//! Utilities are in units of their sensitivity Δ (one row moves one item's utility by at
//! most 1 and leaves the others alone).

use super::gumbel::noisy_keys;
use rand::RngCore;
use std::cmp::Ordering;

/// Indices of the `k` largest keys, largest first, without sorting every key: a partial
/// selection (O(n)) then a sort of the k selected (O(k log k)). Keys of −∞ are never
/// selected.
fn largest(keys: &[f64], k: usize) -> Vec<usize> {
    let by_key_descending =
        |a: &usize, b: &usize| keys[*b].partial_cmp(&keys[*a]).unwrap_or(Ordering::Equal);
    let mut indices: Vec<usize> = (0..keys.len())
        .filter(|&i| keys[i] > f64::NEG_INFINITY)
        .collect();
    if k < indices.len() {
        indices.select_nth_unstable_by(k, by_key_descending);
        indices.truncate(k);
    }
    indices.sort_unstable_by(by_key_descending);
    indices
}

/// One-shot top-k: Gumbel noise at `temperature` added once, the `k` best returned best
/// first (all of them, in noisy order, when there are fewer than k).
///
/// With temperature k/ε this has the distribution of k rounds of the exponential
/// mechanism at ε/k each ("peeling"; Durfee and Rogers, Theorem 1), so the ordered list is
/// ε-DP by composition.
pub fn one_shot_top_k<R: RngCore + ?Sized>(
    utilities: &[f64],
    k: usize,
    temperature: f64,
    rng: &mut R,
) -> Vec<usize> {
    let log_weights: Vec<f64> = utilities.iter().map(|u| u / temperature).collect();
    largest(&noisy_keys(&log_weights, rng), k)
}

/// The parameters of the limited-domain mechanism.
#[derive(Debug, Clone, Copy)]
pub struct LimitedDomain {
    /// How many items to return at most.
    pub k: usize,
    /// How many of the top items (by true utility) compete: k̄ ≥ k.
    pub k_bar: usize,
    pub epsilon: f64,
    pub delta: f64,
}

impl LimitedDomain {
    /// The Gumbel temperature, k/ε: each item of the list costs ε/k.
    pub fn temperature(&self) -> f64 {
        self.k as f64 / self.epsilon
    }

    /// How far above the (k̄+1)-th utility the threshold item ⊥ stands:
    /// τ · ln((1 + e^ε) / δ).
    ///
    /// Why this is (ε, δ)-DP, for inputs D and D' = D plus one row on item j (which raises
    /// j's utility by c ∈ [0, 1]). Let T(D) be the top k̄ items in a fixed order (utility,
    /// then the item's hash), b(D) = u_(k̄+1)(D) + offset (u_(k̄+1) = 0 when fewer items).
    ///
    /// 1. Only j changes, so T changes by at most one swap: j may enter and push out one
    ///    item l. Order statistics move by at most c, so b(D') − b(D) ∈ [0, 1].
    /// 2. Run both inputs on S = T(D) ∪ T(D') with their own thresholds. Every competitor,
    ///    ⊥ included, moves by [0, 1] in the same direction: each of the at most k rounds
    ///    is ε/k-DP (range 1 at temperature k/ε), so the two runs on S are ε-DP.
    /// 3. Running on S instead of T(D) changes the output only if j beats ⊥ under D. j is
    ///    not in T(D), so u_j(D) ≤ u_(k̄+1)(D) and P[j beats ⊥] ≤ exp(−offset/τ) = δ_t
    ///    with δ_t = δ/(1 + e^ε). Likewise l under D'.
    ///
    /// Hence P[M(D) ∈ A] ≤ δ_t + e^ε (P[M(D') ∈ A] + δ_t) = e^ε P[M(D') ∈ A] + δ, and the
    /// other way round. An item with a single row (utility ≤ 1) is returned with
    /// probability at most δ_t·e^{ε/k} < δ.
    ///
    /// Per privacy unit (units/rewrite.rs), D' adds one unit that gives each of at most Δ0
    /// items its clamped sum c_j ∈ [0, 1]. Steps 1 and 2 still hold (every utility and the
    /// threshold move by [0, 1], all upwards); in step 3 at most Δ0 items enter T (and at
    /// most Δ0 leave it), so a union bound gives Δ0·δ_t on each side: the plan passes δ/Δ0
    /// as this mechanism's δ. (Their proof, with a union bound over the unit's Δ0 items.)
    pub fn threshold_offset(&self) -> f64 {
        self.temperature() * (softplus(self.epsilon) - self.delta.ln())
    }

    /// The probability bound for returning an item that has a single row: δ_t·e^{ε/k}.
    pub fn single_row_bound(&self) -> f64 {
        (self.delta.ln() - softplus(self.epsilon) + 1.0 / self.temperature()).exp()
    }
}

/// ln(1 + e^x), without overflow for large x (ε may be 1e6).
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// The limited-domain mechanism: the top k̄ items by `utilities` (ties broken by
/// `tie_breaks`, a fixed function of the item) compete with a threshold item ⊥ placed
/// [`LimitedDomain::threshold_offset`] above the (k̄+1)-th utility; the items are returned
/// in noisy order until k are out or ⊥ comes up.
pub fn limited_domain_top_k<R: RngCore + ?Sized>(
    utilities: &[f64],
    tie_breaks: &[u32],
    parameters: &LimitedDomain,
    rng: &mut R,
) -> Vec<usize> {
    assert_eq!(utilities.len(), tie_breaks.len());
    let by_rank = |a: &usize, b: &usize| {
        utilities[*b]
            .partial_cmp(&utilities[*a])
            .unwrap_or(Ordering::Equal)
            .then(tie_breaks[*a].cmp(&tie_breaks[*b]))
    };
    let mut ranked: Vec<usize> = (0..utilities.len()).collect();
    let competing = parameters.k_bar.min(ranked.len());
    if competing < ranked.len() {
        ranked.select_nth_unstable_by(competing, by_rank);
    }
    let next = ranked.get(competing).map_or(0.0, |&i| utilities[i]);
    ranked.truncate(competing);

    // Noisy keys of the competitors and of ⊥ (the last entry), in one draw.
    let temperature = parameters.temperature();
    let mut log_weights: Vec<f64> = ranked.iter().map(|&i| utilities[i] / temperature).collect();
    log_weights.push((next + parameters.threshold_offset()) / temperature);
    let keys = noisy_keys(&log_weights, rng);
    let bottom = keys[ranked.len()];
    let above: Vec<f64> = keys[..ranked.len()]
        .iter()
        .map(|&key| if key > bottom { key } else { f64::NEG_INFINITY })
        .collect();
    largest(&above, parameters.k)
        .into_iter()
        .map(|position| ranked[position])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanisms::gumbel::exponential_mechanism;
    use crate::testing::{
        assert_matches_distribution, ordered_lists, p_value, peeling_probability, SIGNIFICANCE,
    };
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;
    use std::collections::HashMap;

    const DRAWS: usize = 1_000_000;

    /// k rounds of the exponential mechanism, each at `temperature`, without replacement:
    /// the reference the one-shot mechanism must match.
    fn peeling_top_k(
        utilities: &[f64],
        k: usize,
        temperature: f64,
        rng: &mut ChaCha20Rng,
    ) -> Vec<usize> {
        let mut remaining: Vec<usize> = (0..utilities.len()).collect();
        let mut chosen = Vec::new();
        while chosen.len() < k && !remaining.is_empty() {
            let scores: Vec<f64> = remaining.iter().map(|&i| utilities[i]).collect();
            let at = exponential_mechanism(&scores, temperature, rng).unwrap();
            chosen.push(remaining.remove(at));
        }
        chosen
    }

    fn list_counts(lists: &[Vec<usize>], mut sample: impl FnMut() -> Vec<usize>) -> Vec<u64> {
        let index: HashMap<&Vec<usize>, usize> =
            lists.iter().enumerate().map(|(i, l)| (l, i)).collect();
        let mut counts = vec![0u64; lists.len()];
        for _ in 0..DRAWS {
            counts[index[&sample()]] += 1;
        }
        counts
    }

    #[test]
    fn one_shot_top_k_is_peeling() {
        let utilities = [0.0, 1.0, 1.0, 2.5, 3.0];
        let (k, epsilon) = (2, 2.0);
        let temperature = k as f64 / epsilon;
        let lists = ordered_lists(utilities.len(), k);
        let exact: Vec<f64> = lists
            .iter()
            .map(|l| peeling_probability(&utilities, l, temperature))
            .collect();
        // Peeling at ε per round (k times the budget) must be told apart.
        let too_sharp: Vec<f64> = lists
            .iter()
            .map(|l| peeling_probability(&utilities, l, 1.0 / epsilon))
            .collect();

        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let one_shot = list_counts(&lists, || {
            one_shot_top_k(&utilities, k, temperature, &mut rng)
        });
        assert_matches_distribution(&one_shot, &exact, &too_sharp);

        // The reference sampler itself follows the exact peeling distribution.
        let peeled = list_counts(&lists, || {
            peeling_top_k(&utilities, k, temperature, &mut rng)
        });
        assert_matches_distribution(&peeled, &exact, &too_sharp);
    }

    #[test]
    fn one_shot_top_k_returns_everything_when_fewer_than_k() {
        let utilities = [0.0, 2.0, 1.0];
        let lists = ordered_lists(3, 3);
        let exact: Vec<f64> = lists
            .iter()
            .map(|l| peeling_probability(&utilities, l, 5.0))
            .collect();
        let wrong: Vec<f64> = lists
            .iter()
            .map(|l| peeling_probability(&utilities, l, 1.0))
            .collect();
        let mut rng = ChaCha20Rng::seed_from_u64(12);
        let counts = list_counts(&lists, || one_shot_top_k(&utilities, 5, 5.0, &mut rng));
        assert_matches_distribution(&counts, &exact, &wrong);
    }

    #[test]
    fn the_threshold_stays_finite_for_any_epsilon() {
        for epsilon in [1e-9, 1.0, 800.0, 1e6] {
            let parameters = LimitedDomain {
                k: 2,
                k_bar: 2,
                epsilon,
                delta: 1e-9,
            };
            let offset = parameters.threshold_offset();
            assert!(
                offset.is_finite() && offset > 0.0,
                "ε = {epsilon}: {offset}"
            );
            assert!(parameters.single_row_bound() < parameters.delta);
        }
        assert!((softplus(1.0) - (1.0 + 1f64.exp()).ln()).abs() < 1e-15);
    }

    #[test]
    fn largest_is_a_partial_selection_in_order() {
        let keys = [3.0, f64::NEG_INFINITY, 9.0, 1.0, 7.0, 5.0];
        assert_eq!(largest(&keys, 3), [2, 4, 5]);
        assert_eq!(largest(&keys, 10), [2, 4, 5, 0, 3]);
        assert!(largest(&keys, 0).is_empty());
    }

    /// The worst case for a single-row item j: it is the only item, so ⊥ sits at the
    /// lowest possible threshold. Its frequency must stay below δ_t·e^{ε/k} < δ.
    #[test]
    fn a_single_row_item_is_returned_with_probability_below_delta() {
        let parameters = LimitedDomain {
            k: 1,
            k_bar: 1,
            epsilon: 1.0,
            delta: 0.05,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        let returned = (0..DRAWS)
            .filter(|_| !limited_domain_top_k(&[1.0], &[0], &parameters, &mut rng).is_empty())
            .count() as f64;
        let bound = parameters.single_row_bound();
        assert!(bound < parameters.delta);
        // Exact: P[1/τ + G_j > (0 + offset)/τ + G_⊥] = 1 / (1 + e^{(offset − 1)/τ}).
        let temperature = parameters.temperature();
        let exact = 1.0 / (1.0 + ((parameters.threshold_offset() - 1.0) / temperature).exp());
        assert!(exact <= bound);
        let counts = [returned as u64, DRAWS as u64 - returned as u64];
        let n = DRAWS as f64;
        assert!(
            p_value(&counts, &[exact, 1.0 - exact]) >= SIGNIFICANCE,
            "{counts:?} against {exact}"
        );
        // Margin: the frequency is below the bound by more than 4 standard deviations...
        let sd = (bound * (1.0 - bound) / n).sqrt();
        assert!(
            returned / n < bound - 4.0 * sd,
            "{} vs bound {bound}",
            returned / n
        );
        // ...while the threshold of the paper without our (1 + e^ε) factor would not be.
        let naive =
            1.0 / (1.0 + ((temperature * (1.0 / parameters.delta).ln() - 1.0) / temperature).exp());
        assert!(naive > bound + 4.0 * sd, "{naive} vs {bound}");
    }

    #[test]
    fn an_item_far_ahead_is_returned_nearly_always() {
        let parameters = LimitedDomain {
            k: 3,
            k_bar: 3,
            epsilon: 1.0,
            delta: 1e-6,
        };
        // τ = 3, offset = 3 · ln((1 + e)/1e-6) ≈ 45.3 above the 4th utility (2).
        let utilities = [2.0, 1.0, 200.0, 1.0, 2.0, 0.0];
        let tie_breaks = [6, 5, 4, 3, 2, 1];
        let mut rng = ChaCha20Rng::seed_from_u64(14);
        let (mut first, mut alone) = (0, 0);
        for _ in 0..100_000 {
            let list = limited_domain_top_k(&utilities, &tie_breaks, &parameters, &mut rng);
            first += (list.first() == Some(&2)) as u32;
            alone += (list == [2]) as u32;
        }
        assert!(first > 99_990, "{first}");
        // Items near the 4th utility do not clear ⊥ (P ≈ e^{-15} each).
        assert!(alone > 99_990, "{alone}");
    }

    #[test]
    fn only_the_top_k_bar_compete_and_ties_follow_the_tie_break() {
        let parameters = LimitedDomain {
            k: 2,
            k_bar: 2,
            epsilon: 1e6,
            delta: 0.1,
        };
        // Items 0 and 3 tie at 500; tie break 1 < 9 puts item 3 into the top 2 with item 1.
        let utilities = [500.0, 900.0, 10.0, 500.0];
        let tie_breaks = [9, 0, 0, 1];
        let mut rng = ChaCha20Rng::seed_from_u64(15);
        for _ in 0..100 {
            assert_eq!(
                limited_domain_top_k(&utilities, &tie_breaks, &parameters, &mut rng),
                [1]
            );
        }
        let parameters = LimitedDomain {
            k_bar: 3,
            ..parameters
        };
        // Now the 4th utility is 10 and both 500s and the 900 clear ⊥; 3 then 0 by noise.
        let list = limited_domain_top_k(&utilities, &tie_breaks, &parameters, &mut rng);
        assert_eq!(list[0], 1);
        assert!(list[1] == 0 || list[1] == 3);
    }
}
