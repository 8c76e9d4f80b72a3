//! SQL-level tests of the inbox (inbox.rs): every place a row leaves there is counted
//! once, whatever reads the state and whenever: a window's final function over a
//! growing and a sliding frame, a hash aggregation that spills to disk, grouping sets,
//! and rescans whose parameters change (the call site's shared locating rule).
//! At ε = 1e6 on a grid of whole numbers each answer is the exact median of its rows.

#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, plan, run};
    use pgrx::prelude::*;

    /// The answers of `query` (two columns: what the answer must be between, as
    /// "lo:hi", and the answer), each checked; how many there were.
    fn check_answers(query: &str) -> usize {
        let rows = column(&format!(
            "SELECT bounds || ' ' || answer FROM ({query}) checked(bounds, answer)"
        ));
        for row in &rows {
            let (bounds, answer) = row.split_once(' ').expect("bounds and answer");
            let (lo, hi) = bounds.split_once(':').expect("lo:hi");
            let (lo, hi, answer): (f64, f64, f64) = (
                lo.parse().unwrap(),
                hi.parse().unwrap(),
                answer.parse().unwrap(),
            );
            assert!(
                lo <= answer && answer <= hi,
                "{answer} outside [{lo}, {hi}]"
            );
        }
        rows.len()
    }

    /// A window's final function reads the state after every row, 200 times, over inboxes
    /// that fill and start again: growing frames (1..k, median k/2 to k/2 + 1) and sliding
    /// frames of 10 rows (median i − 5 to i − 4), in integer, float and numeric values.
    #[pg_test]
    fn a_window_counts_each_row_once_per_frame() {
        run(&["SET pg_exp_mech.quantile_grid_size = 1000"]);
        for value in ["i", "i::float8", "i::numeric"] {
            let growing = format!(
                "SELECT (i / 2.0) || ':' || (i / 2.0 + 1),
                        dp_quantile({value}, 0.5, 0, 1000, 1e6) OVER (ORDER BY i)
                   FROM generate_series(1, 200) i"
            );
            assert_eq!(check_answers(&growing), 200, "{value}");
            let sliding = format!(
                "SELECT CASE WHEN i >= 10 THEN (i - 5) || ':' || (i - 4)
                             ELSE (i / 2.0) || ':' || (i / 2.0 + 1) END,
                        dp_quantile({value}, 0.5, 0, 1000, 1e6)
                          OVER (ORDER BY i ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)
                   FROM generate_series(1, 200) i"
            );
            assert_eq!(check_answers(&sliding), 200, "{value}");
        }
    }

    /// 2,000 groups of 131 values (0..=130 above g · 1000, median g · 1000 + 65), rows
    /// round-robin, in 64 kB of work_mem: the hash aggregation spills (several batches)
    /// and every group is still exact; the same under grouping sets, whose rollup rows
    /// count 131,000 values a group.
    #[pg_test]
    fn spilled_and_grouping_set_states_count_every_row() {
        run(&[
            "SET pg_exp_mech.quantile_grid_size = 2000000",
            "SET max_parallel_workers_per_gather = 0",
            "CREATE TABLE rounds AS SELECT i % 2000 AS g, (i % 2000) * 1000 + i / 2000 AS v
               FROM generate_series(0, 2000 * 131 - 1) i",
            "ANALYZE rounds",
            "SET work_mem = '64kB'",
            // Hashed (a sort would be chosen in so little memory), and both grouping sets
            // below in one pass over the rows (AGG_HASHED with two tables).
            "SET enable_sort = off",
        ]);
        for value in ["v", "v::float8", "v::numeric"] {
            let query = format!(
                "SELECT (g * 1000 + 65) || ':' || (g * 1000 + 65),
                        dp_quantile({value}, 0.5, 0, 2000000, 1e6)
                   FROM rounds GROUP BY g"
            );
            let explained = column(&format!("EXPLAIN (ANALYZE, COSTS OFF) {query}")).join("\n");
            assert!(
                explained.contains("HashAggregate") && !explained.contains("Batches: 1 "),
                "{explained}"
            );
            assert_eq!(check_answers(&query), 2000, "{value}");
        }
        // Rollup over g / 1000: groups 0..999 and 1000..1999, whose medians lie between
        // two groups' values (the 65,500th of 131,000).
        let rolled = "SELECT CASE WHEN g IS NOT NULL THEN (g * 1000 + 65) || ':' || (g * 1000 + 65)
                                  WHEN h = 0 THEN '499130:500000'
                                  ELSE '1499130:1500000' END,
                             dp_quantile(v, 0.5, 0, 2000000, 1e6)
                        FROM (SELECT g / 1000 AS h, g, v FROM rounds) r
                       GROUP BY GROUPING SETS ((h, g), (h))";
        // PostgreSQL hashes grouping sets only where it expects them to fit in memory.
        run(&["SET work_mem = '64MB'"]);
        assert!(plan(rolled).contains("HashAggregate"), "{}", plan(rolled));
        assert_eq!(check_answers(rolled), 2002);
    }

    /// A hash aggregation that spills keeps within its limit (work_mem × hash_mem_multiplier,
    /// 8 MB here), the states' own context included: with blocks doubling up to 8 MB it
    /// held 8,977 kB (21,298 groups), as PostgreSQL caps its own blocks at a sixteenth of
    /// work_mem.
    #[pg_test]
    fn a_spilling_hash_aggregation_keeps_to_its_memory() {
        run(&[
            "SET max_parallel_workers_per_gather = 0",
            "SET enable_sort = off",
            "SET work_mem = '4MB'",
            "SET hash_mem_multiplier = 2",
            "CREATE TABLE spill AS SELECT i % 21298 AS g, (i::bigint * 7919 % 1000000)::float8 AS v
               FROM generate_series(1, 450696) i",
            "ANALYZE spill",
        ]);
        let explained = column(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)
             SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM spill GROUP BY g",
        )
        .join("\n");
        let field = |name: &str| -> u64 {
            (explained.split(name).nth(1))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.trim_end_matches("kB").parse().ok())
                .unwrap_or_else(|| panic!("{name} in {explained}"))
        };
        assert!(field("Batches: ") > 1, "it spills: {explained}");
        let used = field("Memory Usage: ");
        assert!(used <= 8192, "{used} kB over a limit of 8 MB: {explained}");
    }

    /// A correlated subquery rescans its aggregation with another lo each time: the
    /// first groups' locating rule, which rows use while every group shares it, must not
    /// count the next scan's rows (lo 9,000 on a rule of lo 0 would put 10,049 at about
    /// 18,600). Below lo, values count at lo (clamped).
    #[pg_test]
    fn a_rescan_with_other_parameters_locates_by_its_own() {
        run(&[
            "SET pg_exp_mech.quantile_grid_size = 200000",
            "SET max_parallel_workers_per_gather = 0",
            "CREATE TABLE drifted AS SELECT i % 10 AS g, (i % 10 + 1) * 10000 + i / 10 AS v
               FROM generate_series(0, 10 * 101 - 1) i",
        ]);
        // Group g's 101 values run from (g + 1) · 10,000 to that + 100: median + 50.
        // On a grid of lo + j · (200,000 − lo) / 200,000 the answer lies within a step.
        let query = "SELECT greatest((g + 1) * 10000 + 49, lo) || ':' || greatest((g + 1) * 10000 + 51, lo), q
                       FROM (VALUES (0), (9000), (90000)) AS t(lo),
                            LATERAL (SELECT g, dp_quantile(v, 0.5, lo, 200000, 1e6) AS q
                                       FROM drifted GROUP BY g) s";
        assert!(plan(query).contains("HashAggregate"));
        assert_eq!(check_answers(query), 30);
    }
}
