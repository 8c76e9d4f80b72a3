//! Private quantiles on a public grid (../shared/PRIVACY.md, section 5).
//!
//! Candidates are the grid points c_0 < c_1 < … < c_K: lo + j·(hi − lo)/K for float
//! columns, whole numbers lo + j·step (and hi) for integer columns. Each value, clamped
//! to [lo, hi], is counted exactly where it lies: at a grid point, or strictly between
//! two. The utility of c is u(c) = −|(1−α)·#{x < c} − α·#{x > c}| (seed `The Exponential
//! Mechanism for Medians`; OpenDP's `make_quantile_score_candidates`), whose range under
//! adding or removing one value is 2·max(α, 1−α), so P(c) ∝ exp(ε·u(c) / (2·max(α, 1−α)))
//! is ε-DP. Counting at grid points and between them gives #{x < c} and #{x > c} exactly,
//! so the answer has the law OpenDP's candidates mechanism has on the same grid; counting
//! each value at its nearest grid point instead changed u on coarse grids (8,358 against
//! OpenDP's 1,642 median error on a lognormal column with 101 points at α = 0.9).
//!
//! The state is two histograms (values at each grid point, values between each two);
//! between two occupied places u is constant, so a run of m equal candidates is one
//! weighted candidate (ln m + its scaled utility) and finalize costs O(occupied places),
//! not O(K).

mod cells;
mod counts;
#[cfg(test)]
mod counts_tests;
mod draw;
#[cfg(test)]
mod draw_tests;
mod grid;
mod recursive;
#[cfg(test)]
mod recursive_tests;
#[cfg(test)]
mod tests;

pub use counts::{GridCounts, Histogram, Reader};
pub use draw::*;
pub use grid::*;
pub use recursive::*;
