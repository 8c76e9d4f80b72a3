//! Helpers for the SQL-level tests (`#[pg_test]`), which run inside PostgreSQL.

use pgrx::prelude::*;
use std::collections::HashMap;

const EXPECT_ERROR: &str = r#"
CREATE FUNCTION pg_temp.expect_error(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE query;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$"#;

/// "SQLSTATE: message" of the error `query` raises, or "no error". The query runs in a
/// subtransaction (a PL/pgSQL exception block), so the test can go on afterwards.
pub fn error_of(query: &str) -> String {
    let missing =
        Spi::get_one::<bool>("SELECT to_regprocedure('pg_temp.expect_error(text)') IS NULL")
            .expect("a catalog lookup")
            .unwrap_or(true);
    if missing {
        Spi::run(EXPECT_ERROR).expect("helper function");
    }
    Spi::get_one_with_args::<String>("SELECT pg_temp.expect_error($1)", &[query.into()])
        .expect("expect_error runs")
        .expect("expect_error returns a row")
}

// README's DBA guide, step 6: a budgeted role that may read the size of the directory
// where DP statements spill is refused. Done when the test database creates the
// extension (test builds only), not in a test's own transaction, which is never
// committed: a DP statement in a transaction that changed a reader's privileges is
// refused too (temporary_files.rs).
pgrx::extension_sql!(
    "REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name), pg_tablespace_size(oid) FROM PUBLIC;",
    name = "tests_revoke_tablespace_size"
);

/// Runs every statement, failing the test on the first error.
pub fn run(statements: &[&str]) {
    for statement in statements {
        Spi::run(statement).unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// The first column of every row of `query`, as text (NULL as "NULL").
pub fn column(query: &str) -> Vec<String> {
    Spi::connect(|client| {
        client
            .select(query, None, &[])
            .unwrap_or_else(|e| panic!("{query}: {e}"))
            .map(|row| {
                row.get::<String>(1)
                    .unwrap()
                    .unwrap_or_else(|| "NULL".into())
            })
            .collect()
    })
}

/// The first column of `query` under each seed of `seeds` (pg_exp_mech.seed), one seed
/// after another: what tests compare when two ways to the same answers must draw alike.
pub fn column_by_seed(query: &str, seeds: std::ops::RangeInclusive<u64>) -> Vec<String> {
    seeds
        .flat_map(|seed| {
            run(&[&format!("SET pg_exp_mech.seed = {seed}")]);
            column(query)
        })
        .collect()
}

/// How often each answer came out of a query returning one answer (of any type) per row.
pub fn frequencies(query: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for answer in column(&format!("SELECT answer::text FROM ({query}) AS q(answer)")) {
        *counts.entry(answer).or_insert(0) += 1;
    }
    counts
}

/// Counts of `items`, in that order, from `frequencies`; panics on any other answer.
pub fn counts_of(frequencies: &HashMap<String, u64>, items: &[&str]) -> Vec<u64> {
    for answer in frequencies.keys() {
        assert!(
            items.contains(&answer.as_str()),
            "unexpected answer {answer:?}"
        );
    }
    items
        .iter()
        .map(|i| *frequencies.get(*i).unwrap_or(&0))
        .collect()
}

/// The text of `EXPLAIN (COSTS OFF) query`.
pub fn plan(query: &str) -> String {
    column(&format!("EXPLAIN (COSTS OFF) {query}")).join("\n")
}

/// Draws per distribution test at the SQL level.
pub const DRAWS: usize = 20_000;

/// A small scored table. Scores in units of max_score = 2: a 0 (a negative score clamps to
/// 0), b 1, c 2, d 3 (its score of 5 clamps to 2). Also fixes the seed.
pub fn scored_table() {
    run(&[
        "CREATE TABLE scored(item text, score float8)",
        "INSERT INTO scored VALUES ('a', -1), ('b', 2), ('c', 2), ('c', 2),
                                  ('d', 2), ('d', 2), ('d', 5)",
        "SET pg_exp_mech.seed = 20240601",
    ]);
}

/// `draws`: [`DRAWS`] copies of `scored`, one per group g, so that
/// `... FROM draws GROUP BY g` evaluates an aggregate DRAWS times in one query.
pub fn draws_table() {
    scored_table();
    run(&[
        &format!(
            "CREATE TABLE draws AS
             SELECT g, item, score FROM scored, generate_series(1, {DRAWS}) g"
        ),
        "ANALYZE draws",
    ]);
}

/// Forces a parallel plan for the rest of the transaction.
pub fn force_parallel_plans() {
    run(&[
        "SET LOCAL max_parallel_workers_per_gather = 2",
        "SET LOCAL parallel_setup_cost = 0",
        "SET LOCAL parallel_tuple_cost = 0",
        "SET LOCAL min_parallel_table_scan_size = 0",
        "SET LOCAL enable_hashagg = off",
    ]);
}

/// Asserts that `query` runs as a parallel partial aggregation with two workers.
pub fn assert_parallel(query: &str) {
    let explained = plan(query);
    assert!(explained.contains("Partial"), "{explained}");
    assert!(explained.contains("Gather"), "{explained}");
    let launched = column(&format!(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"
    ))
    .join("\n");
    assert!(launched.contains("Workers Launched: 2"), "{launched}");
}

/// Runs `query` as `role` (made here, with SELECT on `tables`) and returns the ledger
/// lines it added for that role and the ε they add up to. Tests run side by side in
/// one cluster: each counts its own role's lines.
pub fn charged(role: &str, query: &str) -> (usize, f64) {
    let ledger = || {
        let totals = column(&format!(
            "SELECT count(*) || ' ' || coalesce(sum(epsilon), 0) FROM dp_ledger
              WHERE kind = 'charge' AND role::text = '{role}'"
        ));
        let (lines, epsilon) = totals[0].split_once(' ').unwrap();
        (
            lines.parse::<usize>().unwrap(),
            epsilon.parse::<f64>().unwrap(),
        )
    };
    run(&["RESET SESSION AUTHORIZATION"]);
    let before = ledger();
    run(&[
        &format!("SET SESSION AUTHORIZATION {role}"),
        query,
        "RESET SESSION AUTHORIZATION",
    ]);
    let after = ledger();
    let epsilon = ((after.1 - before.1) * 1e9).round() / 1e9;
    (after.0 - before.0, epsilon)
}

/// A role without a budget that may read `tables`.
pub fn role(name: &str, tables: &str) {
    run(&[
        &format!("CREATE ROLE {name}"),
        &format!("GRANT SELECT ON {tables} TO {name}"),
        &format!("GRANT CREATE ON SCHEMA public TO {name}"),
    ]);
}
