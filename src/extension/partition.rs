//! dp_partition(epsilon, delta): private partition selection for HAVING. The state is
//! PostgreSQL's own row count; the final function keeps the group with the optimal
//! probability for its count (mechanisms::partition).

use super::aggregate::Source;
use super::arguments::{return_datum, CallArguments};
use super::budget::require_metered;
use super::guc;
use crate::extension::aggregate::Call;
use crate::mechanisms::{partition, rng};
use pgrx::pg_sys::{self, Datum};
use pgrx::prelude::*;

crate::version_1_function_record!(pg_finfo_dp_partition_final);

/// Final function of dp_partition: (row count, epsilon, delta) → keep the group?
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_partition_final(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
    // SAFETY: PostgreSQL calls it as the final function of dp_partition (aggregates.sql),
    // with the bigint count as its state.
    unsafe {
        require_metered(fcinfo);
        let call = CallArguments::new(fcinfo);
        // The count starts at 0 (INITCOND) and is never NULL; ε and δ come from the plan
        // (FINALFUNC_EXTRA passes NULLs), which validated them before any row.
        let rows = call.datum(0).map_or(0, |d| d.value() as i64).max(0) as u64;
        let parameters = Call(fcinfo);
        let (Some(Some(epsilon)), Some(Some(delta))) = (parameters.float(0), parameters.float(1))
        else {
            return return_datum(fcinfo, None); // A window use: no plan arguments.
        };
        let keep = rng::with_generator(guc::seeding(), |rng| {
            partition::keep(rows, epsilon, delta, rng)
        });
        Datum::from(keep)
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, error_of, force_parallel_plans, plan, run};
    use crate::mechanisms::partition::keep_probability;
    use crate::testing::chi_square_p_value;
    use pgrx::prelude::*;

    /// Groups of 1 to 8 rows (key n has n rows), and how often each key was kept over
    /// `draws` executions of the HAVING query (each a rescan of a LATERAL subquery).
    fn kept(epsilon: f64, delta: f64, draws: u32) -> Vec<u64> {
        run(&["CREATE TABLE IF NOT EXISTS sizes AS
                 SELECT n FROM generate_series(1, 8) n, generate_series(1, n) copy"]);
        let counts = column(&format!(
            "SELECT count(k.n)::text FROM generate_series(1, 8) n
               LEFT JOIN (SELECT kept.n FROM generate_series(1, {draws}) draw,
                            LATERAL (SELECT n FROM sizes WHERE draw > 0 GROUP BY n
                                     HAVING dp_partition({epsilon}, {delta})) kept) k
                 ON k.n = n.n
              GROUP BY n.n ORDER BY n.n"
        ));
        counts.iter().map(|c| c.parse().unwrap()).collect()
    }

    /// The chi-square p-value of independent binomial counts against probabilities (0
    /// when a count is impossible under them).
    fn p_value(counts: &[u64], probabilities: &[f64], draws: u32) -> f64 {
        let n = draws as f64;
        let mut statistic = 0.0;
        let mut df = 0;
        for (&count, &p) in counts.iter().zip(probabilities) {
            if p <= 0.0 || p >= 1.0 {
                if count as f64 != p * n {
                    return 0.0;
                }
                continue;
            }
            let expected = n * p;
            statistic += (count as f64 - expected).powi(2) / (expected * (1.0 - p));
            df += 1;
        }
        chi_square_p_value(statistic, df)
    }

    #[pg_test]
    fn partition_keeps_groups_with_the_optimal_probability() {
        let (epsilon, delta, draws) = (0.5, 0.05, 4000);
        let counts = kept(epsilon, delta, draws);
        let exact: Vec<f64> = (1..=8)
            .map(|n| keep_probability(n, epsilon, delta))
            .collect();
        // Threshold 1e-4: a correct sampler fails once in 10^4 runs; ε off by 20 % or δ
        // doubled fails almost surely (chi-square above 90 at 4000 draws).
        let p = p_value(&counts, &exact, draws);
        assert!(p > 1e-4, "counts {counts:?} against {exact:?}: p = {p}");
        for (name, wrong) in [
            (
                "epsilon x 1.2",
                (1..=8)
                    .map(|n| keep_probability(n, epsilon * 1.2, delta))
                    .collect::<Vec<_>>(),
            ),
            (
                "delta x 2",
                (1..=8)
                    .map(|n| keep_probability(n, epsilon, delta * 2.0))
                    .collect(),
            ),
        ] {
            let p = p_value(&counts, &wrong, draws);
            assert!(p < 1e-4, "{name}: the test cannot tell it apart (p = {p})");
        }
    }

    #[pg_test]
    fn partition_keeps_a_one_row_group_at_most_delta_and_a_large_group_always() {
        run(&["CREATE TABLE one_and_many AS
                 SELECT 'one' AS key UNION ALL SELECT 'many' FROM generate_series(1, 500)"]);
        let counts = column(
            "SELECT key || ' ' || count(*) FROM generate_series(1, 20000) draw,
                    LATERAL (SELECT key FROM one_and_many WHERE draw > 0 GROUP BY key
                             HAVING dp_partition(1.0, 1e-3)) kept
              GROUP BY key ORDER BY key",
        );
        // π(1) = δ: 20 expected in 20000 draws; 45 is beyond 5 standard deviations.
        let one = counts
            .iter()
            .find_map(|c| c.strip_prefix("one ").map(|n| n.parse::<u64>().unwrap()))
            .unwrap_or(0);
        assert!(one <= 45, "{counts:?}");
        assert!(counts.contains(&"many 20000".to_string()), "{counts:?}");
        assert!((keep_probability(1, 1.0, 1e-3) - 1e-3).abs() < 1e-15);
        assert_eq!(keep_probability(500, 1.0, 1e-3), 1.0);
    }

    #[pg_test]
    fn partition_is_charged_once_validated_first_and_parallel_safe() {
        run(&["CREATE TABLE keyed AS SELECT i % 50 AS key, i::float8 AS v FROM generate_series(1, 30000) i"]);
        let query = "SELECT key FROM keyed GROUP BY key HAVING dp_partition(0.5, 1e-6)";
        force_parallel_plans();
        assert!(plan(query).contains("Gather"), "{}", plan(query));
        // Tests run side by side in one cluster: count this query's own lines (its ε
        // and δ), not the newest dp_partition line, which another test may have written.
        let lines = || {
            column(
                "SELECT count(*)::text FROM dp_ledger WHERE aggregate = 'dp_partition'
                   AND epsilon = 0.5 AND delta = 1e-6",
            )
        };
        let before: u64 = lines()[0].parse().unwrap();
        assert_eq!(
            column(&format!("SELECT count(*)::text FROM ({query}) q")),
            ["50"]
        );
        assert_eq!(lines()[0].parse::<u64>().unwrap(), before + 1);
        for (call, message) in [
            (
                "dp_partition(0, 1e-6)",
                "22023: epsilon must be finite and greater than 0, got 0",
            ),
            (
                "dp_partition(1, 0)",
                "22023: delta must be greater than 0 and less than 1, got 0",
            ),
            (
                "dp_partition(1, NULL)",
                "22023: delta must be greater than 0 and less than 1, got NULL",
            ),
        ] {
            for filter in ["true", "false"] {
                assert_eq!(
                    error_of(&format!(
                        "SELECT key FROM keyed WHERE {filter} GROUP BY key HAVING {call}"
                    )),
                    message,
                    "{call} WHERE {filter}"
                );
            }
        }
    }

    #[pg_test]
    fn public_keys_give_each_empty_group_the_answer_on_empty_input() {
        run(&[
            "CREATE TABLE regions(region text)",
            "INSERT INTO regions VALUES ('north'), ('south')",
            "CREATE TABLE sales(region text, item text, amount float8)",
            "INSERT INTO sales SELECT 'north', 'x', i FROM generate_series(1, 100) i",
        ]);
        // south has no rows: the LEFT JOIN gives it one row of NULLs, which every
        // aggregate skips, so its answer is the mechanism's answer on empty input.
        let empty = |call: &str| {
            column(&format!(
                "SELECT coalesce(({call})::text, 'NULL') FROM regions r LEFT JOIN sales s ON s.region = r.region
                  WHERE r.region = 'south' GROUP BY r.region"
            ))
            .pop()
            .unwrap()
        };
        for _ in 0..10 {
            assert!(["x", "y"]
                .contains(&empty("dp_argmax(s.item, 1, 1.0, 1, ARRAY['x', 'y'])").as_str()));
            assert!(["{x,y}", "{y,x}"]
                .contains(&empty("dp_top_k(s.item, 1, 2, 1.0, 1, ARRAY['x', 'y'])").as_str()));
            let point: f64 = empty("dp_quantile(s.amount, 0.5, 0, 100, 1.0)")
                .parse()
                .unwrap();
            assert!((0.0..=100.0).contains(&point));
            assert_eq!(
                empty("array_length(dp_quantiles(s.amount, ARRAY[0.25, 0.75], 0, 100, 1.0), 1)"),
                "2"
            );
        }
        // The forms whose items come from the data answer NULL: no item, no winner.
        assert_eq!(empty("dp_argmax(s.item, 1, 1.0)"), "NULL");
        assert_eq!(empty("dp_top_k(s.item, 1, 1, 1.0)"), "NULL");
        // The unknown-domain mechanism answers the empty list on empty input.
        assert_eq!(
            empty("dp_top_k_unknown_domain(s.item, 1, 1, 1.0, 1e-6)"),
            "{}"
        );
        // Counting the NULL row of the join: dp_partition is for private keys only, and
        // counts the rows it is given (use FILTER to count matches).
        assert_eq!(
            empty("dp_partition(1.0, 1e-6) FILTER (WHERE s.region IS NOT NULL)"),
            "false"
        );
    }
}
