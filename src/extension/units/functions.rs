//! The SQL functions a bounded plan calls. The planner hook writes the calls
//! (rewrite.rs); they are public so that the analyst's plan can run them, and harmless
//! when called directly.

use crate::extension::guc;
use crate::mechanisms::rng;
use pgrx::prelude::*;
use rand::{Rng, RngCore};
use std::cell::Cell;
use std::hash::Hasher;

thread_local! {
    /// The key of the hash that chooses each unit's groups: drawn once per statement
    /// (when the first plan with DP aggregates starts), from the ChaCha20 generator.
    static GROUP_KEY: Cell<Option<i64>> = const { Cell::new(None) };
    /// Numbers the rows whose unit is NULL, each a unit of its own.
    static NULL_UNITS: Cell<i64> = const { Cell::new(0) };
}

thread_local! {
    /// L, m and Δ0 as they were when the statement started.
    static SETTINGS: Cell<Settings> = const { Cell::new(Settings { groups: 1, values: 1, items: 1 }) };
}

/// The bounds a statement reads once.
#[derive(Clone, Copy)]
struct Settings {
    /// L: groups of one GROUP BY per unit.
    groups: i64,
    /// m: values per unit and group of a quantile.
    values: i64,
    /// Δ0: items per unit and group of dp_top_k_unknown_domain.
    items: i64,
}

impl Settings {
    fn now() -> Settings {
        Settings {
            groups: guc::max_groups_per_unit(),
            values: guc::max_values_per_unit(),
            items: guc::max_items_per_unit(),
        }
    }
}

/// A statement starts (no plan with DP aggregates runs): its groups are chosen with a
/// new key, and L, m and Δ0 are read now, once. While its plan runs they cannot be SET, but a
/// function's SET clause is undone on exit without a check; the plan reads these copies,
/// so that its filter and each group's share of ε always agree.
pub fn new_statement() {
    GROUP_KEY.with(|key| key.set(None));
    SETTINGS.with(|settings| settings.set(Settings::now()));
}

/// The bounds of the running statement.
fn settings() -> Settings {
    if crate::extension::budget::dp_plan_running() {
        SETTINGS.with(Cell::get)
    } else {
        Settings::now()
    }
}

/// ε (or δ) of one group: the statement's `total` over `divisor`, the number of releases
/// one unit takes part in (L groups, m values each). The metering hook charges `total`.
/// STABLE, not IMMUTABLE: the planner must not fold the call into its quotient, which the
/// metering hook would then charge.
#[pg_extern(stable, parallel_safe)]
fn dp_unit_share(total: Option<f64>, divisor: i64) -> Option<f64> {
    total.map(|total| total / divisor.max(1) as f64)
}

/// One row's score before its unit's scores for an item are summed, in units of
/// `max_score`: clamped to [0, max_score] as the aggregates read it (NULL and NaN count
/// 0), then divided by it. A unit's sum is then at most its number of rows: PostgreSQL's
/// sum, which raises an ERROR past the largest double, never overflows (two rows of
/// 1e308 would otherwise have made one unit's rows fail the statement). Never an ERROR:
/// an invalid max_score (the aggregate refuses it whatever the rows) reads 0.
#[pg_extern(immutable, parallel_safe)]
fn dp_unit_score(score: Option<f64>, max_score: Option<f64>) -> f64 {
    match (score, max_score) {
        (Some(score), Some(max_score))
            if score > 0.0 && max_score.is_finite() && max_score > 0.0 =>
        {
            score.min(max_score) / max_score
        }
        _ => 0.0,
    }
}

/// A numeric score as the numeric overloads read it (converted without error, beyond
/// double precision's range ±Infinity), then as [`dp_unit_score`].
#[pg_extern(immutable, parallel_safe)]
fn dp_unit_numeric_score(score: Option<pgrx::AnyNumeric>, max_score: Option<f64>) -> f64 {
    // SAFETY: a non-NULL numeric datum.
    let score = score.map(|score| unsafe {
        crate::extension::arguments::numeric_to_f64(
            pgrx::IntoDatum::into_datum(score).expect("a non-NULL numeric"),
        )
    });
    dp_unit_score(score, max_score)
}

/// A unit's score for an item, back from units of `max_score` (its sum of
/// [`dp_unit_score`]) and clamped to max_score, which the aggregate's own clamp then
/// keeps. Never an ERROR (PostgreSQL's float8mul raises one on overflow and underflow).
#[pg_extern(immutable, parallel_safe)]
fn dp_unit_total(units: Option<f64>, max_score: Option<f64>) -> f64 {
    match (units, max_score) {
        (Some(units), Some(max_score)) if max_score.is_finite() && max_score > 0.0 => {
            units.clamp(0.0, 1.0) * max_score
        }
        _ => 0.0,
    }
}

/// The place of a (unit, group) pair in its unit's order of groups: a keyed hash (SipHash
/// under the statement's secret key, drawn from ChaCha20) of PostgreSQL's hashes of the
/// unit and of the group. Each unit keeps its first L groups: a uniform choice that
/// depends only on its own groups and the key. (PostgreSQL's hashes alone would order one
/// unit's groups alike for every unit.) A NULL unit's row is a unit of one group, kept
/// whatever its place. PARALLEL RESTRICTED: the leader alone computes it, so that every
/// row of a unit sees the same key.
#[pg_extern(volatile, parallel_restricted)]
fn dp_unit_group_order(unit_hash: Option<i64>, group_hash: Option<i64>) -> i64 {
    let key = GROUP_KEY.with(|key| {
        key.get().unwrap_or_else(|| {
            let drawn = rng::with_generator(guc::seeding(), |rng| rng.next_u64() as i64);
            key.set(Some(drawn));
            drawn
        })
    });
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    hasher.write_i64(key);
    hasher.write_i64(unit_hash.unwrap_or(0));
    hasher.write_i64(group_hash.unwrap_or(0));
    hasher.finish() as i64
}

/// A uniform priority from ChaCha20, for sampling a unit's values (never random()).
#[pg_extern(volatile, parallel_restricted)]
fn dp_unit_priority() -> f64 {
    rng::with_generator(guc::seeding(), |rng| rng.random::<f64>())
}

/// A number no other row has, for a row whose unit is NULL (the plan calls it only for
/// those), so that it is a unit of its own. No argument: a call that Citus sends to a
/// worker as text cannot resolve to an analyst's overload (citus/fragments.rs).
#[pg_extern(volatile, parallel_restricted)]
fn dp_unit_of_null() -> i64 {
    NULL_UNITS.with(|n| {
        n.set(n.get() + 1);
        n.get()
    })
}

/// L, as the running statement read it when it started.
#[pg_extern(stable, parallel_safe)]
fn dp_max_groups_per_unit() -> i64 {
    settings().groups
}

/// m, as the running statement read it when it started.
#[pg_extern(stable, parallel_safe)]
fn dp_max_values_per_unit() -> i64 {
    settings().values
}

/// Δ0, as the running statement read it when it started.
#[pg_extern(stable, parallel_safe)]
fn dp_max_items_per_unit() -> i64 {
    settings().items
}

pgrx::extension_sql!(
    r#"
COMMENT ON FUNCTION dp_unit_share(double precision, bigint) IS
  'epsilon (or delta) of one group of an aggregate bounded by privacy units: total / divisor. Written into plans by pg_exp_mech; the statement is charged the total.';
COMMENT ON FUNCTION dp_unit_score(double precision, double precision) IS
  'A row''s score as the selection aggregates read it (NULL, NaN and negative count 0, clamped to max_score), in units of max_score, before a unit''s scores are summed. Written into plans by pg_exp_mech.';
COMMENT ON FUNCTION dp_unit_numeric_score(numeric, double precision) IS
  'A numeric score as the selection aggregates read it, in double precision (NULL, NaN and negative count 0, clamped to max_score), in units of max_score. Written into plans by pg_exp_mech.';
COMMENT ON FUNCTION dp_unit_total(double precision, double precision) IS
  'A privacy unit''s score for an item: its sum of dp_unit_score, clamped to 1, times max_score. Written into plans by pg_exp_mech.';
COMMENT ON FUNCTION dp_unit_group_order(bigint, bigint) IS
  'The place of a (privacy unit, group) pair in its unit''s random order of groups (SipHash under the statement''s secret key); each unit keeps its first L groups. Written into plans by pg_exp_mech.';
COMMENT ON FUNCTION dp_unit_priority() IS
  'A uniform random priority (ChaCha20) that samples a privacy unit''s values. Written into plans by pg_exp_mech.';
COMMENT ON FUNCTION dp_unit_of_null() IS
  'A number of its own for a row whose privacy unit is NULL (the plan calls it for those rows only). Written into plans by pg_exp_mech.';
COMMENT ON FUNCTION dp_max_groups_per_unit() IS
  'L, the setting pg_exp_mech.max_groups_per_unit: groups of one GROUP BY each privacy unit contributes to.';
COMMENT ON FUNCTION dp_max_values_per_unit() IS
  'm, the setting pg_exp_mech.max_values_per_unit: values each privacy unit gives one group of a quantile.';
COMMENT ON FUNCTION dp_max_items_per_unit() IS
  'The setting pg_exp_mech.max_items_per_unit: items each privacy unit gives one group of dp_top_k_unknown_domain.';
"#,
    name = "privacy_unit_functions",
    requires = [
        dp_unit_share,
        dp_unit_score,
        dp_unit_numeric_score,
        dp_unit_total,
        dp_unit_group_order,
        dp_unit_priority,
        dp_unit_of_null,
        dp_max_groups_per_unit,
        dp_max_values_per_unit,
        dp_max_items_per_unit
    ],
);
