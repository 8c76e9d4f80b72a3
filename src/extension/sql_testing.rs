//! Helpers for the SQL-level tests (`#[pg_test]`), which run inside PostgreSQL.

use pgrx::prelude::*;
use std::collections::HashMap;

const EXPECT_ERROR: &str = r#"
CREATE OR REPLACE FUNCTION pg_temp.expect_error(query text) RETURNS text
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
    Spi::run(EXPECT_ERROR).expect("helper function");
    Spi::get_one_with_args::<String>("SELECT pg_temp.expect_error($1)", &[query.into()])
        .expect("expect_error runs")
        .expect("expect_error returns a row")
}

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
            .map(|row| row.get::<String>(1).unwrap().unwrap_or_else(|| "NULL".into()))
            .collect()
    })
}

/// How often each answer came out of a query returning one answer per row.
pub fn frequencies(query: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for answer in column(query) {
        *counts.entry(answer).or_insert(0) += 1;
    }
    counts
}

/// Counts of `items`, in that order, from `frequencies`; panics on any other answer.
pub fn counts_of(frequencies: &HashMap<String, u64>, items: &[&str]) -> Vec<u64> {
    for answer in frequencies.keys() {
        assert!(items.contains(&answer.as_str()), "unexpected answer {answer:?}");
    }
    items.iter().map(|i| *frequencies.get(*i).unwrap_or(&0)).collect()
}

/// The text of `EXPLAIN (COSTS OFF) query`.
pub fn plan(query: &str) -> String {
    column(&format!("EXPLAIN (COSTS OFF) {query}")).join("\n")
}
