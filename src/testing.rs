//! Statistics for the tests: Pearson's chi-square test of observed frequencies against an
//! exact distribution. Shared by the pure Rust tests and the SQL (`#[pg_test]`) tests.

/// Significance level of every distribution test: a correct sampler fails with
/// probability 1e-6, and every test also shows that a wrong temperature is rejected.
pub const SIGNIFICANCE: f64 = 1e-6;

/// Cells whose expected count is below this are pooled into one (the usual rule of
/// thumb for the chi-square approximation).
const MIN_EXPECTED: f64 = 5.0;

/// exp(u_i / temperature), normalised, computed stably.
pub fn softmax(utilities: &[f64], temperature: f64) -> Vec<f64> {
    normalise_log_weights(
        &utilities
            .iter()
            .map(|u| u / temperature)
            .collect::<Vec<_>>(),
    )
}

/// exp(w_i) / Σ exp(w_j), computed stably.
pub fn normalise_log_weights(log_weights: &[f64]) -> Vec<f64> {
    let top = log_weights
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = log_weights.iter().map(|w| (w - top).exp()).collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// Every ordered list of `k` distinct indices out of `n` (the outcomes of a top-k).
pub fn ordered_lists(n: usize, k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![vec![]];
    }
    let mut lists = Vec::new();
    for shorter in ordered_lists(n, k - 1) {
        for i in (0..n).filter(|i| !shorter.contains(i)) {
            let mut list = shorter.clone();
            list.push(i);
            lists.push(list);
        }
    }
    lists
}

/// The exact probability of an ordered list under k rounds of the exponential mechanism
/// without replacement ("peeling"), each at `temperature`.
pub fn peeling_probability(utilities: &[f64], list: &[usize], temperature: f64) -> f64 {
    let top = utilities.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weight = |i: usize| ((utilities[i] - top) / temperature).exp();
    let mut remaining: f64 = (0..utilities.len()).map(weight).sum();
    let mut probability = 1.0;
    for &i in list {
        probability *= weight(i) / remaining;
        remaining -= weight(i);
    }
    probability
}

/// The exact distribution of a quantile answer over every grid point 0..=K, by brute force
/// from the definition u(c) = −|(1−α)·#{x < c} − α·#{x > c}| (independent of the run logic
/// of the sampler), for values given by half cell: 2j at grid point j, 2j + 1 between j
/// and j + 1. `strictly_below` = false gives the off-by-one variant #{x ≤ c}, which the
/// tests must tell apart.
pub fn quantile_distribution(
    half_cells: &[u64],
    grid_size: u32,
    alpha: f64,
    temperature: f64,
    strictly_below: bool,
) -> Vec<f64> {
    let log_weights: Vec<f64> = (0..=grid_size as u64)
        .map(|j| {
            let c = 2 * j;
            let below = half_cells
                .iter()
                .filter(|&&x| if strictly_below { x < c } else { x <= c })
                .count() as f64;
            let above = half_cells.iter().filter(|&&x| x > c).count() as f64;
            -((1.0 - alpha) * below - alpha * above).abs() / temperature
        })
        .collect();
    normalise_log_weights(&log_weights)
}

/// Pearson's statistic and degrees of freedom, pooling cells with small expected counts.
pub fn chi_square(counts: &[u64], probabilities: &[f64]) -> (f64, usize) {
    assert_eq!(counts.len(), probabilities.len());
    let n: u64 = counts.iter().sum();
    let n = n as f64;
    let (mut statistic, mut cells) = (0.0, 0usize);
    let (mut pooled_observed, mut pooled_expected) = (0.0, 0.0);
    for (&observed, &p) in counts.iter().zip(probabilities) {
        let expected = n * p;
        if expected < MIN_EXPECTED {
            pooled_observed += observed as f64;
            pooled_expected += expected;
        } else {
            statistic += (observed as f64 - expected).powi(2) / expected;
            cells += 1;
        }
    }
    if pooled_expected >= MIN_EXPECTED || (cells == 0 && pooled_expected > 0.0) {
        statistic += (pooled_observed - pooled_expected).powi(2) / pooled_expected;
        cells += 1;
    } else if pooled_observed > 0.0 {
        // Too rare for the chi-square approximation: an exact Poisson tail instead,
        // P(X ≥ observed) = P(observed, λ), the regularized lower incomplete gamma.
        let tail = 1.0 - regularized_gamma_q(pooled_observed, pooled_expected);
        if tail < SIGNIFICANCE {
            statistic = f64::INFINITY;
        }
    }
    (statistic, cells.saturating_sub(1))
}

/// The exact distribution of permute-and-flip by its definition: every order of the
/// candidates, equally likely; in each, the first candidate that flips heads (with
/// probability exp((u_r − u*)/τ)) is the answer.
pub fn permute_and_flip_distribution(utilities: &[f64], temperature: f64) -> Vec<f64> {
    let best = utilities.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let heads: Vec<f64> = utilities
        .iter()
        .map(|u| ((u - best) / temperature).exp())
        .collect();
    let mut probabilities = vec![0.0; utilities.len()];
    let orders = ordered_lists(utilities.len(), utilities.len());
    let weight = 1.0 / orders.len() as f64;
    for order in &orders {
        let mut tails = 1.0;
        for &r in order {
            probabilities[r] += weight * tails * heads[r];
            tails *= 1.0 - heads[r];
        }
    }
    probabilities
}

/// P(X ≥ statistic) for X chi-square with `df` degrees of freedom.
pub fn chi_square_p_value(statistic: f64, df: usize) -> f64 {
    if df == 0 {
        return if statistic > 0.0 { 0.0 } else { 1.0 };
    }
    regularized_gamma_q(df as f64 / 2.0, statistic / 2.0)
}

/// The p-value of observed counts against an exact distribution.
pub fn p_value(counts: &[u64], probabilities: &[f64]) -> f64 {
    let (statistic, df) = chi_square(counts, probabilities);
    chi_square_p_value(statistic, df)
}

/// Asserts that `counts` fit `exact` and do not fit `wrong` (at [`SIGNIFICANCE`]).
pub fn assert_matches_distribution(counts: &[u64], exact: &[f64], wrong: &[f64]) {
    let fit = p_value(counts, exact);
    assert!(
        fit >= SIGNIFICANCE,
        "frequencies {counts:?} do not fit the exact distribution {exact:?}: p = {fit:e}"
    );
    let misfit = p_value(counts, wrong);
    assert!(
        misfit < SIGNIFICANCE,
        "the test cannot tell the exact distribution from {wrong:?}: p = {misfit:e}"
    );
}

/// Q(a, x) = Γ(a, x) / Γ(a): series for x < a + 1, Lentz's continued fraction otherwise
/// (Numerical Recipes, 3rd ed., section 6.2).
pub fn regularized_gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x.is_infinite() {
        return 0.0;
    }
    let log_prefactor = -x + a * x.ln() - ln_gamma(a);
    if x < a + 1.0 {
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * log_prefactor.exp()
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        h * log_prefactor.exp()
    }
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, n = 9).
fn ln_gamma(x: f64) -> f64 {
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi_square_tail_matches_tables() {
        // Critical values from standard tables.
        let close = |a: f64, b: f64| (a - b).abs() < 1e-4 * b.max(1e-12);
        assert!(close(chi_square_p_value(3.841_458_8, 1), 0.05));
        assert!(close(chi_square_p_value(23.209_251, 10), 0.01));
        assert!(close(chi_square_p_value(124.342_113, 100), 0.05));
        assert!(close(chi_square_p_value(2.0, 2), (-1.0f64).exp()));
        assert!(chi_square_p_value(1e4, 3) < 1e-100);
    }

    #[test]
    fn pooling_and_power() {
        let exact = [0.5, 0.5 - 1e-7, 1e-7];
        assert!(p_value(&[500, 500, 0], &exact) > 0.5);
        assert!(p_value(&[500, 480, 20], &exact) < SIGNIFICANCE);
        assert!(p_value(&[900, 100, 0], &exact) < SIGNIFICANCE);
    }
}
