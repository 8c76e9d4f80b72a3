//! Privacy budgets, the SQL side: a per-role ε limit that every DP aggregate charges
//! before its result can reach the client. The rules and the ledger are plain Rust in
//! `crate::budget`; here is what needs PostgreSQL.
//!
//! The ledger is an append-only file in the data directory (`pg_exp_mech/ledger`),
//! mirrored in shared memory. Why not a table: a row written in the analyst's transaction
//! would vanish with a ROLLBACK, an error later in the transaction or a cancelled
//! statement, after the result was seen. Instead:
//! - one LWLock serialises check-and-charge, so concurrent sessions cannot overspend;
//! - the line is written (and fsynced for a role with a limit) when the plan starts,
//!   before any row is read, so a crash after a result left cannot lose its charge;
//! - the postmaster replays the file into shared memory at start-up and after a crash.
//!
//! This needs `shared_preload_libraries = 'pg_exp_mech'`.
//!
//! - `shared`: the accounts in shared memory, loaded at start-up;
//! - `metering`: the charge of a plan, taken when it starts (and at each rescan);
//! - `late_start`: a query that started before the library was loaded, metered when its
//!   run starts;
//! - `cost`: what one DP aggregate call is charged, from its arguments in the plan;
//! - `identity`: which functions are this extension's aggregates;
//! - `barrier`: no function of the analyst's sees the rows under a DP aggregate;
//! - `charge`: the charge itself, and who must have a budget;
//! - `held_groups`: a budgeted role's DP node hands out its groups once it read every row;
//! - `statistics`: no statistics counter counts what a budgeted role's DP plan touches;
//! - `dp_plans`: which planned statements hold DP aggregates or are Citus fragments of one;
//! - `row_errors`: an error raised by the rows under a DP aggregate keeps its SQLSTATE,
//!   not its text;
//! - `temporary_files`: a budgeted role that may read the temporary files DP statements
//!   spill is refused;
//! - `volatile_calls`: a budgeted role's DP node, and the plan under it, call no volatile
//!   function;
//! - `wal`: the ledger's WAL records and their redo, for recovery and standbys;
//! - `sql`: dp_budget_set, dp_budget_remaining, the views dp_budget and dp_ledger.

mod barrier;
mod charge;
mod cost;
mod dp_plans;
mod held_groups;
mod identity;
mod late_start;
mod metering;
mod recheck;
mod row_errors;
mod shared;
mod sql;
mod statistics;
mod temporary_files;
mod upgrade;
mod volatile_calls;
mod wal;

pub use barrier::install_barrier;
pub use charge::require_metered;
pub use charge::session_is_budgeted;
pub use identity::dp_aggregate;
pub use metering::{dp_plan_running, install_metering, plan_arguments};
pub use row_errors::OWN_ERRORS;
pub use shared::init_shared_memory;
pub use statistics::{count_again, install_statistics, Silence};

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, error_of, run};
    use pgrx::prelude::*;

    /// A login role with a fresh budget, a table it cannot read, and DP views over it.
    fn analyst(name: &str, budget: f64) {
        run(&[
            &format!("CREATE ROLE {name} LOGIN"),
            "CREATE TABLE IF NOT EXISTS secret AS SELECT i % 7 AS item, i AS value FROM generate_series(1, 1000) i",
            "CREATE OR REPLACE VIEW top_item WITH (security_barrier) AS SELECT dp_argmax(item, 1, 0.25) FROM secret",
            "CREATE OR REPLACE VIEW by_item WITH (security_barrier) AS SELECT item, dp_quantile(value, 0.5, 0, 1000, 0.125) FROM secret GROUP BY item",
            &format!("GRANT SELECT ON top_item, by_item TO {name}"),
            &format!("SELECT dp_budget_set('{name}', {budget})"),
        ]);
    }

    fn spent(name: &str) -> String {
        column(&format!(
            "SELECT epsilon_spent::text FROM dp_budget WHERE role = '{name}'::regrole"
        ))
        .pop()
        .unwrap_or_else(|| "no row".into())
    }

    #[pg_test]
    fn budget_charges_every_evaluation() {
        analyst("charged_analyst", 100.0);
        run(&["SET SESSION AUTHORIZATION charged_analyst"]);
        run(&["SELECT * FROM top_item"]);
        assert_eq!(spent("charged_analyst"), "0.25");
        // A correlated subquery evaluates the view three times: three charges.
        run(&["SELECT (SELECT * FROM top_item WHERE g > 0) FROM generate_series(1, 3) g"]);
        assert_eq!(spent("charged_analyst"), "1");
        // A GROUP BY is charged once, whatever the number of groups (7 here): one row is
        // in one group (parallel composition).
        assert_eq!(column("SELECT count(*)::text FROM by_item"), ["7"]);
        assert_eq!(spent("charged_analyst"), "1.125");
        // A filter that keeps no group is charged the same.
        assert_eq!(
            column("SELECT count(*)::text FROM by_item WHERE item = -1"),
            ["0"]
        );
        assert_eq!(spent("charged_analyst"), "1.25");
        // Two identical calls are two draws and two charges (the aggregates are VOLATILE).
        run(&["SELECT a.*, b.* FROM top_item a, top_item b"]);
        assert_eq!(spent("charged_analyst"), "1.75");
        assert_eq!(column("SELECT dp_budget_remaining()::text"), ["98.25"]);
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_refuses_beyond_the_limit_and_charges_nothing_then() {
        analyst("thrifty_analyst", 0.6);
        run(&["SET SESSION AUTHORIZATION thrifty_analyst"]);
        run(&["SELECT * FROM top_item"]);
        run(&["SELECT * FROM top_item"]);
        assert_eq!(
            error_of("SELECT * FROM top_item"),
            "53400: privacy budget of role \"thrifty_analyst\" exceeded: dp_argmax needs epsilon 0.25, 0.1 of 0.6 remain"
        );
        assert_eq!(spent("thrifty_analyst"), "0.5");
        // A parameter error happens before any charge, with rows or without.
        assert!(error_of("SELECT dp_argmax(x, 1, -1) FROM (VALUES (1)) v(x)").starts_with("22023"));
        assert!(
            error_of("SELECT dp_argmax(x, 1, 0.01, 0) FROM (VALUES (1)) v(x) WHERE x > 1")
                .starts_with("22023: max_score")
        );
        assert_eq!(spent("thrifty_analyst"), "0.5");
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_an_error_later_does_not_refund() {
        analyst("rolled_back_analyst", 10.0);
        run(&["SET SESSION AUTHORIZATION rolled_back_analyst"]);
        // The answer reaches PL/pgSQL, then an error rolls the subtransaction back: the
        // charge stays (ROLLBACK of a whole transaction: tests/test_budgets.sh).
        run(&["DO $$
               DECLARE answer int;
               BEGIN
                   SELECT * INTO answer FROM top_item;
                   RAISE EXCEPTION 'the answer was %', answer;
               EXCEPTION WHEN raise_exception THEN NULL;
               END $$"]);
        assert_eq!(spent("rolled_back_analyst"), "0.25");
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_views_and_ledger_are_guarded() {
        analyst("curious_analyst", 1.0);
        analyst("other_analyst", 2.0);
        run(&["SET SESSION AUTHORIZATION curious_analyst"]);
        assert_eq!(
            column("SELECT role::text FROM dp_budget"),
            ["curious_analyst"]
        );
        assert_eq!(
            error_of("SELECT dp_budget_set('curious_analyst', 1000)"),
            "42501: permission denied for function dp_budget_set"
        );
        assert_eq!(
            error_of("SELECT * FROM dp_ledger"),
            "42501: permission denied for the privacy ledger: role \"curious_analyst\" is not a budget administrator (one that may execute dp_budget_set)"
        );
        assert_eq!(
            error_of("SELECT * FROM dp_ledger_entries()"),
            "42501: permission denied for the privacy ledger: role \"curious_analyst\" is not a budget administrator (one that may execute dp_budget_set)"
        );
        // The ledger is a file behind a view: there is no row to write or delete.
        assert_eq!(
            error_of("DELETE FROM dp_ledger"),
            "55000: cannot delete from view \"dp_ledger\""
        );
        assert_eq!(
            error_of("INSERT INTO dp_ledger (kind) VALUES ('limit')"),
            "55000: cannot insert into view \"dp_ledger\""
        );
        assert_eq!(
            error_of("SET pg_exp_mech.require_budget = off"),
            "42501: permission denied to set parameter \"pg_exp_mech.require_budget\""
        );
        // EXPLAIN ANALYZE would show exact counts, however the plan is reached; plain
        // EXPLAIN is allowed.
        assert_eq!(
            error_of("EXPLAIN ANALYZE SELECT * FROM top_item"),
            "42501: EXPLAIN ANALYZE (or any instrumented execution) of a plan with differentially private aggregates is not allowed for role \"curious_analyst\", which has a privacy budget: it would show exact row counts"
        );
        for explained in [
            "EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM by_item WHERE item = -1",
            "EXPLAIN (ANALYZE) EXECUTE by_item_plan",
            "EXPLAIN (ANALYZE) CREATE TEMP TABLE copied AS SELECT * FROM by_item",
        ] {
            run(&[
                "PREPARE by_item_plan AS SELECT * FROM by_item WHERE item = -1",
                "CREATE OR REPLACE FUNCTION pg_temp.inlined() RETURNS SETOF by_item LANGUAGE sql STABLE AS 'SELECT * FROM by_item'",
            ]);
            assert!(
                error_of(explained).starts_with("42501: EXPLAIN ANALYZE"),
                "{explained}"
            );
            run(&["DEALLOCATE by_item_plan"]);
        }
        // A SQL function that PostgreSQL inlines after the planner hook ran: refused
        // however it runs (instrumented or not), the hook's work never reached its call.
        run(&["CREATE OR REPLACE FUNCTION pg_temp.inlined() RETURNS SETOF by_item LANGUAGE sql STABLE AS 'SELECT * FROM by_item'"]);
        for inlined in [
            "EXPLAIN (ANALYZE) SELECT * FROM pg_temp.inlined()",
            "SELECT * FROM pg_temp.inlined()",
        ] {
            assert_eq!(
                error_of(inlined),
                "0A000: for a role with a privacy budget, dp_quantile was planned out of pg_exp_mech's sight (inside a SQL function that PostgreSQL inlines, or before the library was loaded): call the function's query directly, or make the function not inlinable (for example VOLATILE or SECURITY DEFINER)",
                "{inlined}"
            );
        }
        assert_eq!(error_of("EXPLAIN SELECT * FROM top_item"), "no error");
        run(&["RESET SESSION AUTHORIZATION"]);
        // A role granted EXECUTE is a budget administrator: it sees every row and the ledger.
        run(&[
            "GRANT EXECUTE ON FUNCTION dp_budget_set(regrole, float8, float8) TO other_analyst",
            "SET SESSION AUTHORIZATION other_analyst",
        ]);
        let roles =
            column("SELECT role::text FROM dp_budget WHERE role::text LIKE '%_analyst' ORDER BY 1");
        assert!(
            roles.contains(&"curious_analyst".to_string())
                && roles.contains(&"other_analyst".to_string())
        );
        assert_eq!(error_of("SELECT count(*) FROM dp_ledger"), "no error");
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_follows_the_login_role_through_set_role() {
        analyst("login_analyst", 1.0);
        analyst("borrowed_analyst", 50.0);
        run(&[
            "GRANT borrowed_analyst TO login_analyst",
            "SET SESSION AUTHORIZATION login_analyst",
            "SET ROLE borrowed_analyst",
        ]);
        run(&["SELECT * FROM top_item"]);
        run(&["RESET ROLE", "RESET SESSION AUTHORIZATION"]);
        assert_eq!(spent("login_analyst"), "0.25");
        assert_eq!(spent("borrowed_analyst"), "0");
    }

    #[pg_test]
    fn budget_needs_a_fixed_epsilon() {
        analyst("column_epsilon_analyst", 10.0);
        run(&[
            "CREATE TABLE epsilons AS SELECT 0.5::float8 AS e, 1 AS item",
            "GRANT SELECT ON epsilons TO column_epsilon_analyst",
            "SET SESSION AUTHORIZATION column_epsilon_analyst",
        ]);
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, e) FROM epsilons"),
            "22023: epsilon must be a constant or a parameter of the statement, got an expression of the rows"
        );
        // Without rows too: the plan says it.
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, e) FROM epsilons WHERE false"),
            "22023: epsilon must be a constant or a parameter of the statement, got an expression of the rows"
        );
        assert_eq!(
            column("SELECT dp_argmax(item, 1, 0.5)::text FROM epsilons"),
            ["1"]
        );
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_required_spares_superusers() {
        run(&["SET pg_exp_mech.require_budget = on"]);
        assert_eq!(
            error_of("SELECT dp_argmax(x, 1, 1.0) FROM (VALUES (1)) v(x)"),
            "no error"
        );
        run(&["RESET pg_exp_mech.require_budget"]);
    }

    #[pg_test]
    fn budget_can_be_required() {
        run(&[
            "CREATE ROLE unbudgeted_analyst",
            "CREATE TABLE IF NOT EXISTS secret AS SELECT i % 7 AS item, i AS value FROM generate_series(1, 1000) i",
            "GRANT SELECT ON secret TO unbudgeted_analyst",
            "SET SESSION AUTHORIZATION unbudgeted_analyst",
        ]);
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, 1.0) FROM secret WHERE false"),
            "no error"
        );
        run(&[
            "RESET SESSION AUTHORIZATION",
            "SET pg_exp_mech.require_budget = on",
            "SET SESSION AUTHORIZATION unbudgeted_analyst",
        ]);
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, 1.0) FROM secret"),
            "42501: role \"unbudgeted_analyst\" has no privacy budget, and pg_exp_mech.require_budget is on"
        );
        run(&[
            "RESET SESSION AUTHORIZATION",
            "RESET pg_exp_mech.require_budget",
        ]);
    }

    #[pg_test]
    fn budget_set_validates_its_arguments() {
        run(&["CREATE ROLE limited_analyst"]);
        for (call, message) in [
            ("dp_budget_set('limited_analyst', -1)", "22023: epsilon must be finite and at least 0 (NULL removes the limit), got -1"),
            ("dp_budget_set('limited_analyst', 'NaN')", "22023: epsilon must be finite and at least 0 (NULL removes the limit), got NaN"),
            ("dp_budget_set('limited_analyst', 'Infinity')", "22023: epsilon must be finite and at least 0 (NULL removes the limit), got Infinity"),
            ("dp_budget_set(NULL, 1)", "22023: role must be a role, got NULL"),
            ("dp_budget_set('limited_analyst', 1, -1e-9)", "22023: delta must be at least 0 and less than 1, got -1e-09"),
            ("dp_budget_set('limited_analyst', 1, 1)", "22023: delta must be at least 0 and less than 1, got 1"),
            ("dp_budget_set('no_such_role', 1)", "42704: role \"no_such_role\" does not exist"),
            ("dp_budget_set(0::regrole, 1)", "42704: role with OID 0 does not exist"),
            ("dp_budget_set(4000000000::oid::regrole, 1)", "42704: role with OID 4000000000 does not exist"),
        ] {
            assert_eq!(error_of(&format!("SELECT {call}")), message, "{call}");
        }
        run(&[
            "SELECT dp_budget_set('limited_analyst', 0.5)",
            "SELECT dp_budget_set('limited_analyst', NULL)",
        ]);
        assert_eq!(
            column("SELECT coalesce(epsilon_limit::text, 'none') FROM dp_budget WHERE role = 'limited_analyst'::regrole"),
            ["none"]
        );
    }

    /// What a role spent carries over as one ledger line; the export rebuilds every
    /// account (spent, then limits) in statements that read back exactly.
    #[pg_test]
    fn budget_carries_over_and_exports() {
        run(&["CREATE ROLE \"Moved Analyst\"", "CREATE ROLE plain_analyst"]);
        for (call, message) in [
            (
                "dp_budget_carry_over(NULL, 1)",
                "22023: role must be a role, got NULL",
            ),
            (
                "dp_budget_carry_over('plain_analyst', -1)",
                "22023: epsilon_spent must be finite and at least 0, got -1",
            ),
            (
                "dp_budget_carry_over('plain_analyst', 'NaN')",
                "22023: epsilon_spent must be finite and at least 0, got NaN",
            ),
            (
                "dp_budget_carry_over('plain_analyst', 1, 'Infinity')",
                "22023: delta_spent must be finite and at least 0, got Infinity",
            ),
            (
                "dp_budget_carry_over(0::regrole, 1)",
                "42704: role with OID 0 does not exist",
            ),
        ] {
            assert_eq!(error_of(&format!("SELECT {call}")), message, "{call}");
        }
        run(&[
            "SELECT dp_budget_carry_over('\"Moved Analyst\"', 0.30000000000000004, 1e-7)",
            "SELECT dp_budget_set('\"Moved Analyst\"', 0.25, 1e-6)",
            "SELECT dp_budget_set('plain_analyst', 2)",
        ]);
        // Accounts count in units of 10⁻¹² rounded up, so what is carried over is never
        // less than what was spent; a limit below it leaves nothing to spend.
        assert_eq!(
            column("SELECT epsilon_spent || ' ' || epsilon_remaining || ' ' || delta_spent FROM dp_budget WHERE role = '\"Moved Analyst\"'::regrole"),
            ["0.300000000001 0 1e-07"]
        );
        assert_eq!(
            column("SELECT aggregate || ' ' || epsilon FROM dp_ledger WHERE role = '\"Moved Analyst\"'::regrole AND kind = 'charge'"),
            ["carried over 0.30000000000000004"]
        );
        let exported = column("SELECT s FROM dp_budget_export() s");
        assert!(
            exported.contains(
                &"SELECT dp_budget_carry_over('\"Moved Analyst\"', 0.300000000001, 1e-7);"
                    .to_string()
            ),
            "{exported:?}"
        );
        assert!(
            exported
                .contains(&"SELECT dp_budget_set('\"Moved Analyst\"', 0.25, 1e-6);".to_string()),
            "{exported:?}"
        );
        assert!(
            exported.contains(&"SELECT dp_budget_set('plain_analyst', 2.0, 0.0);".to_string()),
            "{exported:?}"
        );
        run(&["SET ROLE plain_analyst"]);
        assert_eq!(
            error_of("SELECT dp_budget_export()"),
            "42501: permission denied for function dp_budget_export"
        );
        run(&["RESET ROLE"]);
    }
}
