//! The mechanisms, in plain Rust: no PostgreSQL types, so every one of them is tested
//! without a database.

pub mod gumbel;
pub mod partition;
pub mod permute_and_flip;
pub mod prefetch;
pub mod quantile;
pub mod rng;
pub mod scores;
pub mod top_k;

#[cfg(any(test, feature = "pg_test"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod audit;
#[cfg(test)]
mod per_row_speed;
