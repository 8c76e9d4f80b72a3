//! SQL-level tests of metering from the plan: charges per statement, per loop and per
//! plan shape, parallel plans, refusals.

#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{
        charged, column, error_of, force_parallel_plans, plan, role, run,
    };
    use pgrx::prelude::*;

    /// A table `name` of 20,000 rows in 1,000 groups g (and 7 groups h), readable by the
    /// role `name`_analyst.
    fn grouped_table(name: &str) {
        run(&[&format!(
            "CREATE TABLE {name} AS
               SELECT i % 1000 AS g, i % 7 AS h, (i * 37 % 1001)::float8 AS v
                 FROM generate_series(1, 20000) i"
        )]);
        role(&format!("{name}_analyst"), name);
    }

    fn grouped(table: &str) -> String {
        format!("SELECT g, dp_quantile(v, 0.5, 0, 1000, 0.25) FROM {table} GROUP BY g")
    }

    #[pg_test]
    fn metering_charges_a_group_by_once_whatever_its_plan() {
        grouped_table("by_plan");
        let role = "by_plan_analyst";
        let grouped_query = grouped("by_plan");
        let grouped_query = grouped_query.as_str();
        // Hashed, sorted, hashed and spilled to disk in batches, parallel.
        for (settings, expect) in [
            ("SET LOCAL enable_sort = off", "HashAggregate"),
            ("SET LOCAL enable_hashagg = off", "GroupAggregate"),
            ("SET LOCAL work_mem = '64kB'", "HashAggregate"),
        ] {
            run(&[
                "RESET enable_sort",
                "RESET enable_hashagg",
                "RESET work_mem",
                settings,
            ]);
            assert!(
                plan(grouped_query).contains(expect),
                "{settings}: {}",
                plan(grouped_query)
            );
            assert_eq!(charged(role, grouped_query), (1, 0.25), "{settings}");
        }
        let spilled = column(&format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {grouped_query}"
        ));
        assert!(
            spilled
                .iter()
                .any(|line| line.contains("Batches:") && !line.contains("Batches: 1 ")),
            "{spilled:?}"
        );
        run(&[
            "RESET enable_sort",
            "RESET enable_hashagg",
            "RESET work_mem",
        ]);
        force_parallel_plans();
        assert!(
            plan(grouped_query).contains("Gather"),
            "{}",
            plan(grouped_query)
        );
        assert_eq!(charged(role, grouped_query), (1, 0.25), "parallel");
        // No group at all: the same charge.
        assert_eq!(
            charged(role, &format!("{grouped_query} HAVING false")),
            (1, 0.25)
        );
        assert_eq!(
            charged(
                role,
                "SELECT g, dp_quantile(v, 0.5, 0, 1000, 0.25) FROM by_plan WHERE v < 0 GROUP BY g"
            ),
            (1, 0.25)
        );
    }

    #[pg_test]
    fn metering_charges_each_grouping_set() {
        grouped_table("by_sets");
        let role = "by_sets_analyst";
        let call = "dp_quantile(v, 0.5, 0, 1000, 0.25)";
        assert_eq!(
            charged(
                role,
                &format!("SELECT g, h, {call} FROM by_sets GROUP BY GROUPING SETS ((g), (h), ())")
            ),
            (1, 0.75)
        );
        assert_eq!(
            charged(
                role,
                &format!("SELECT g, h, {call} FROM by_sets GROUP BY ROLLUP (g, h)")
            ),
            (1, 0.75)
        );
        assert_eq!(
            charged(
                role,
                &format!("SELECT g, h, {call} FROM by_sets GROUP BY CUBE (g, h)")
            ),
            (1, 1.0)
        );
        // Mixed: some sets hashed, some sorted.
        run(&["SET LOCAL enable_hashagg = on"]);
        let mixed = format!("SELECT g, h, {call} FROM by_sets GROUP BY GROUPING SETS ((g), (h))");
        assert!(
            plan(&mixed).contains("MixedAggregate") || plan(&mixed).contains("HashAggregate"),
            "{}",
            plan(&mixed)
        );
        assert_eq!(charged(role, &mixed), (1, 0.5));
    }

    #[pg_test]
    fn metering_charges_each_rescan_each_call_and_what_a_cursor_started() {
        grouped_table("by_loops");
        let role = "by_loops_analyst";
        let grouped_query = grouped("by_loops");
        let grouped_query = grouped_query.as_str();
        // A correlated subquery, run once per outer row: three loops.
        assert_eq!(
            charged(role, "SELECT (SELECT dp_argmax(h, 1, 0.5) FROM by_loops WHERE g > s) FROM generate_series(1, 3) s"),
            (3, 1.5)
        );
        // epsilon set by the outer row: read and paid at the start of every loop.
        assert_eq!(
            charged(
                role,
                "SELECT e, (SELECT dp_argmax(h, 1, e) FROM by_loops WHERE g >= 0)
                   FROM unnest(ARRAY[0.5, 0.25]::float8[]) e"
            ),
            (2, 0.75)
        );
        assert_eq!(
            error_of("SELECT (SELECT dp_argmax(h, 1, e) FROM by_loops) FROM unnest(ARRAY[0.5, -1]::float8[]) e"),
            "22023: epsilon must be finite and greater than 0, got -1"
        );
        // LATERAL: one loop per outer row, each a plain GROUP BY.
        assert_eq!(
            charged(role, "SELECT * FROM generate_series(1, 4) s, LATERAL (SELECT h, dp_quantile(v, 0.5, 0, 1000, 0.125) FROM by_loops WHERE g = s GROUP BY h) q"),
            (4, 0.5)
        );
        // Two calls in one select list, and one view twice.
        assert_eq!(
            charged(
                role,
                "SELECT dp_argmax(h, 1, 0.5), dp_argmax(h, 1, 0.5) FROM by_loops"
            ),
            (2, 1.0)
        );
        run(&[
            "CREATE VIEW top_h WITH (security_barrier) AS SELECT dp_argmax(h, 1, 0.25) FROM by_loops",
            "GRANT SELECT ON top_h TO by_loops_analyst",
        ]);
        assert_eq!(charged(role, "SELECT * FROM top_h a, top_h b"), (2, 0.5));
        // A cursor closed after one FETCH: what its plan started.
        assert_eq!(
            charged(
                role,
                &format!("DECLARE c CURSOR FOR {grouped_query}; FETCH 1 FROM c; CLOSE c")
            ),
            (1, 0.25)
        );
        // A window use (not budgeted here): once per DP window function.
        assert_eq!(
            charged(
                role,
                "SELECT dp_argmax(h, 1, 0.5) OVER (PARTITION BY g) FROM by_loops LIMIT 1"
            ),
            (1, 0.5)
        );
        // A plain EXPLAIN runs nothing and charges nothing.
        assert_eq!(charged(role, &format!("EXPLAIN {grouped_query}")), (0, 0.0));
    }

    #[pg_test]
    fn metering_charges_each_process_that_finalizes_a_copy() {
        run(&[
            "CREATE TABLE probed AS SELECT (i % 3)::int AS x FROM generate_series(1, 300000) i",
            "CREATE TABLE probing AS SELECT (i % 3)::int AS x FROM generate_series(1, 100) i",
            "ANALYZE probed",
            "ANALYZE probing",
        ]);
        role("copies_analyst", "probed, probing");
        force_parallel_plans();
        run(&["SET LOCAL enable_parallel_hash = off"]);
        // The inner side of a parallel hash join is built in full by every process: each
        // of them finalizes its own dp_argmax, a release each.
        let query = "SELECT count(*) FROM probed b
                       JOIN (SELECT dp_argmax(x, 1, 0.5) AS w FROM probing) s ON b.x = s.w";
        let plan_text = plan(query);
        let gather = plan_text.find("Gather").expect("a parallel plan");
        assert!(
            plan_text[gather..].contains("  ->  Aggregate"),
            "{plan_text}"
        );
        assert!(plan_text.contains("Workers Planned: 2"), "{plan_text}");
        assert_eq!(
            charged("copies_analyst", query),
            (1, 1.5),
            "workers planned + 1"
        );
        // An init-plan of the parallel plan runs in the leader only: paid once.
        let init_plan =
            "SELECT count(*) FROM probed WHERE x >= (SELECT dp_argmax(x, 1, 0.5) FROM probing)";
        assert!(plan(init_plan).contains("InitPlan"), "{}", plan(init_plan));
        assert_eq!(charged("copies_analyst", init_plan), (1, 0.5));
        // A stable expression (a setting) is read when the loop starts, not before.
        run(&["SET LOCAL dp.epsilon = '0.25'"]);
        assert_eq!(
            charged(
                "copies_analyst",
                "SELECT dp_argmax(x, 1, current_setting('dp.epsilon')::float8) FROM probing"
            ),
            (1, 0.25)
        );
    }

    #[pg_test]
    fn metering_charges_a_subquery_in_a_recursive_query_per_loop() {
        grouped_table("recursive");
        // The SubPlan sits in the WorkTable Scan's projection, linked in only when the
        // scan first runs: metered from es_subplanstates, one release per loop (three
        // iterations; the first loop is paid when the plan starts).
        let query = "WITH RECURSIVE r(n, x) AS (SELECT 1, 0
                       UNION ALL SELECT n + 1, (SELECT dp_argmax(h, 1, 0.25) FROM recursive WHERE n > 0)
                       FROM r WHERE n < 4)
                     SELECT count(*) FROM r";
        assert_eq!(charged("recursive_analyst", query), (3, 0.75));
    }

    #[pg_test]
    fn metering_reads_a_stable_parameter_once_per_loop() {
        grouped_table("stable");
        run(&[
            "SET LOCAL dp.eps = '0.25'",
            "SET LOCAL enable_hashagg = off",
        ]);
        let grouped =
            "SELECT g, dp_quantile(v, 0.5, 0, 1000, current_setting('dp.eps')::float8) AS q
                         FROM stable WHERE g < 5 GROUP BY g";
        // An init-plan, evaluated once when the loop starts.
        assert!(plan(grouped).contains("InitPlan"), "{}", plan(grouped));
        // A setting changed after the first group leaves the later groups' epsilon as
        // it was: no error, whatever the groups (and a malformed value neither).
        for value in ["0.5", "abc"] {
            assert_eq!(
                error_of(&format!(
                    "SELECT g, q IS NOT NULL, set_config('dp.eps', '{value}', true) FROM ({grouped}) s"
                )),
                "no error"
            );
            run(&["SET LOCAL dp.eps = '0.25'"]);
        }
        assert_eq!(
            charged(
                "stable_analyst",
                &format!("SELECT g, q, set_config('dp.eps', '0.5', true) FROM ({grouped}) s")
            ),
            (1, 0.25)
        );
        // The settings the aggregates read cannot change while such a plan runs.
        // (PostgreSQL quotes an enum's value, not an integer's.)
        for (setting, shown) in [
            ("pg_exp_mech.quantile_grid_size', '10", "10"),
            (
                "pg_exp_mech.argmax_mechanism', 'permute_and_flip",
                "\"permute_and_flip\"",
            ),
            ("pg_exp_mech.quantiles_method', 'split", "\"split\""),
        ] {
            let name = setting.split('\'').next().unwrap();
            assert_eq!(
                error_of(&format!(
                    "SELECT g, set_config('{setting}', true) FROM ({grouped}) s"
                )),
                format!("55P02: invalid value for parameter \"{name}\": {shown}")
            );
            // Outside one, they can.
            run(&[&format!("SELECT set_config('{setting}', true)")]);
        }
    }

    #[pg_test]
    fn metering_reads_parameters_from_parallel_plans() {
        run(&[
            "CREATE ROLE parallel_analyst",
            "SELECT dp_budget_set('parallel_analyst', 100)",
            "CREATE TABLE wide AS SELECT i % 3 AS item, (i % 100)::float8 AS v FROM generate_series(1, 30000) i",
            "GRANT SELECT ON wide TO parallel_analyst",
        ]);
        force_parallel_plans();
        run(&["SET SESSION AUTHORIZATION parallel_analyst"]);
        let empty = "SELECT dp_argmax(item, 1, 0.5, 1, ARRAY[7, 8]) FROM wide WHERE v > 1000";
        let plan_text = plan(empty);
        assert!(
            plan_text.contains("Finalize Aggregate") && plan_text.contains("Partial"),
            "{plan_text}"
        );
        // Empty input in a parallel plan: the documented answer (a uniform candidate), charged.
        for _ in 0..20 {
            let answer = column(&format!("SELECT coalesce(({empty})::text, 'NULL')"));
            assert!(answer == ["7"] || answer == ["8"], "{answer:?}");
        }
        // epsilon from an init-plan, read when the loop starts: the same answer.
        let from_init_plan =
            "SELECT dp_quantile(v, 0.5, 0, 100, (SELECT 0.5::float8)) FROM wide WHERE v > 1000";
        assert!(plan(from_init_plan).contains("Finalize Aggregate"));
        assert_eq!(
            column(&format!("SELECT (({from_init_plan}) IS NOT NULL)::text")),
            ["true"]
        );
        let median = "SELECT dp_quantile(v, 0.5, 0, 100, 1) FROM wide WHERE v > 1000";
        assert!(plan(median).contains("Finalize Aggregate"));
        assert_eq!(
            column(&format!("SELECT (({median}) IS NOT NULL)::text")),
            ["true"]
        );
        assert_eq!(
            column("SELECT (dp_argmax(item, 1, 0.5) IS NOT NULL)::text FROM wide"),
            ["true"]
        );
        assert_eq!(column("SELECT epsilon_spent::text FROM dp_budget"), ["12"]);
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn metering_refuses_window_use_to_budgeted_roles() {
        run(&[
            "CREATE ROLE window_analyst",
            "SELECT dp_budget_set('window_analyst', 10)",
            "CREATE TABLE w AS SELECT i % 3 AS item FROM generate_series(1, 100) i",
            "GRANT SELECT ON w TO window_analyst",
            "SET SESSION AUTHORIZATION window_analyst",
        ]);
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, 0.5) OVER () FROM w WHERE false"),
            "42501: dp_argmax cannot be used as a window function by role \"window_analyst\", which has a privacy budget: each frame would be a release; aggregate with GROUP BY instead"
        );
        assert_eq!(column("SELECT epsilon_spent::text FROM dp_budget"), ["0"]);
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn metering_limits_delta_beside_epsilon() {
        run(&[
            "CREATE ROLE delta_analyst",
            "SELECT dp_budget_set('delta_analyst', 10, 2.5e-6)",
            "CREATE TABLE d AS SELECT i % 3 AS item FROM generate_series(1, 100) i",
            "GRANT SELECT ON d TO delta_analyst",
            "SET SESSION AUTHORIZATION delta_analyst",
        ]);
        let query = "SELECT dp_top_k_unknown_domain(item, 1, 1, 0.1, 1e-6) FROM d";
        run(&[query, query]);
        assert_eq!(
            error_of(query),
            "53400: privacy budget of role \"delta_analyst\" exceeded: dp_top_k_unknown_domain needs delta 1e-06, 5e-07 of 2.5e-06 remain"
        );
        assert_eq!(
            column(
                "SELECT epsilon_spent || ' ' || delta_spent || ' ' || delta_limit FROM dp_budget"
            ),
            ["0.2 2e-06 2.5e-06"]
        );
        // A budget set without delta allows none: (epsilon, delta) mechanisms are refused.
        run(&[
            "RESET SESSION AUTHORIZATION",
            "SELECT dp_budget_set('delta_analyst', 10)",
            "SET SESSION AUTHORIZATION delta_analyst",
        ]);
        assert!(error_of(query).starts_with("53400: privacy budget of role \"delta_analyst\" exceeded: dp_top_k_unknown_domain needs delta 1e-06, 0 of 0 remain"));
        // Pure epsilon-DP aggregates need no delta.
        assert_eq!(
            column("SELECT (dp_argmax(item, 1, 0.5) IS NOT NULL)::text FROM d"),
            ["true"]
        );
        run(&["RESET SESSION AUTHORIZATION"]);
    }
}
