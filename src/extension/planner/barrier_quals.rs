//! No condition of the analyst's runs on the raw rows under a DP view's aggregates.
//!
//! PostgreSQL pushes a condition written on a security-barrier view into the view's scan
//! when every function that reads the view's columns is leakproof
//! (`contain_leaked_vars`). Pushed there, it runs once per raw row below the aggregate,
//! and what it does there is a channel on the rows, whatever the answer:
//! - a function that reads no column passes: `WHERE country = 'NL' AND country <>
//!   pg_temp.tick()` ran the analyst's `tick()` once per raw row, and its NOTICEs counted
//!   the rows (red team, 2026-11-27); so did such a function reaching the condition from a
//!   pulled-up subquery, a one-row VALUES list, a row-level security policy's equality,
//!   the analyst's own view or DP query over the view (second review), a scalar subquery
//!   in the output list, a multidimensional ARRAY, GREATEST over a type without ordering
//!   (third review);
//! - an init-plan in the condition is computed when a raw row first needs it (21000, or a
//!   row lock of the analyst's, for keys with rows only), and leakproof `starts_with` and
//!   `texteq` raise under a nondeterministic or an undecided collation (fourth and fifth
//!   reviews);
//! - time: a leakproof condition costs what the analyst chooses, once per raw row.
//!   Bounds on its size did not hold: a long array parameter (80 ms a row), an outer
//!   row's value (150 ms), subqueries pulled up into 512 copies (1.2 ms), then 54 nested
//!   `md5` calls within 64 nodes (37 µs a row, timed on a cursor's FETCH after its charge:
//!   29 rows, 1 and none told apart; the fourth to eighth reviews).
//!
//! So every query level that finalizes DP aggregates, other than the statement's own
//! top level, gets `LIMIT ALL`: PostgreSQL pushes no condition into a subquery that has a
//! LIMIT (allpaths.c, `subquery_is_pushdown_safe`), and a LIMIT ALL adds no Limit node.
//! Conditions on a DP view are evaluated on the groups it outputs; the view's own
//! conditions (its owner's) still choose the rows it reads. The cost: a condition on a
//! view's group key no longer narrows the scan (every group is computed, then filtered).

use pgrx::is_a;
use pgrx::pg_sys::{self, NodeTag};
use std::ffi::c_void;

/// Gives each query level inside `query` that finalizes DP aggregates (a DP view, a
/// subquery) `LIMIT ALL`, unless it has a LIMIT or OFFSET already.
///
/// # Safety
/// `query` must be a rewritten query about to be planned, which the planner may modify.
pub unsafe fn keep_conditions_above_dp_views(query: *mut pg_sys::Query) {
    let mut levels = Vec::new();
    // SAFETY: as the caller guarantees.
    unsafe {
        find_dp_levels(query, &mut levels);
        for level in levels {
            if level != query && (*level).limitCount.is_null() && (*level).limitOffset.is_null() {
                // LIMIT ALL, as the parser writes it: a NULL bigint.
                (*level).limitCount = pg_sys::makeConst(
                    pg_sys::INT8OID,
                    -1,
                    pg_sys::InvalidOid,
                    8,
                    pg_sys::Datum::from(0),
                    true,
                    true,
                )
                .cast();
            }
        }
    }
}

/// Adds `query` and every query level inside it that finalizes DP aggregates to `levels`.
///
/// # Safety
/// `query` must be a valid Query.
unsafe fn find_dp_levels(query: *mut pg_sys::Query, levels: &mut Vec<*mut pg_sys::Query>) {
    // SAFETY: fields of a valid Query; the walker reads its nodes.
    unsafe {
        // A DP call of this level may sit in a subquery of it, `(SELECT dp_quantile(x))`.
        let calls = crate::extension::units::dp_calls(query);
        if !calls.aggregates.is_empty() || calls.window.is_some() || calls.nested.is_some() {
            levels.push(query);
        }
        pg_sys::query_tree_walker(
            query,
            Some(levels_walker),
            (levels as *mut Vec<*mut pg_sys::Query>).cast(),
            0,
        );
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn levels_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is find_dp_levels's list; nodes are cast after their tags are
    // checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            find_dp_levels(node.cast(), &mut *(context as *mut Vec<*mut pg_sys::Query>));
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(levels_walker), context)
    }
}
#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, plan, run};
    use pgrx::prelude::*;

    /// The plan's scan of `visits` with its conditions: what runs on raw rows.
    fn raw_scan(query: &str) -> String {
        let explained = plan(query);
        let mut lines = explained
            .lines()
            .skip_while(|line| !line.contains("Scan on visits"));
        let Some(first) = lines.next() else {
            panic!("{query}:\n{explained}");
        };
        let conditions = lines.take_while(|line| !line.contains("->") && line.contains(": "));
        std::iter::once(first)
            .chain(conditions)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// No condition of the analyst's reaches the raw rows under a DP view's aggregate,
    /// leakproof or not, however it is written (each form below reached them once); the
    /// view's own condition still does.
    #[pg_test]
    fn conditions_stay_above_dp_views() {
        run(&[
            "CREATE TABLE visits (country text, age int)",
            "INSERT INTO visits SELECT 'NL', 30 FROM generate_series(1, 5)",
            "INSERT INTO visits SELECT 'BE', 40 FROM generate_series(1, 7)",
            "CREATE FUNCTION checked(c text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN RETURN true; END $$",
            "CREATE VIEW by_country WITH (security_barrier) AS
               SELECT country, dp_argmax(age, 1, 1.0) AS age FROM visits GROUP BY country",
            "CREATE VIEW by_checked_country WITH (security_barrier) AS
               SELECT country, dp_argmax(age, 1, 1.0) AS age FROM visits WHERE checked(country) GROUP BY country",
            "CREATE TABLE ticks (n int)",
            "CREATE FUNCTION tick() RETURNS text LANGUAGE plpgsql VOLATILE AS
               $$ BEGIN INSERT INTO ticks VALUES (1); RETURN ''; END $$",
            "CREATE FUNCTION stick() RETURNS text LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN ''; END $$",
            "CREATE FUNCTION snl() RETURNS text LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN 'NL'; END $$",
            "CREATE VIEW nested_form WITH (security_barrier) AS
               SELECT country, (SELECT dp_argmax(age, 1, 1.0)) AS age FROM visits GROUP BY country",
            "CREATE TABLE mine (n int)",
            "CREATE VIEW own_barrier WITH (security_barrier) AS
               SELECT * FROM by_country WHERE country = 'NL' AND country <> stick()",
            "CREATE ROLE policed",
            "GRANT SELECT ON by_country TO policed",
            "GRANT EXECUTE ON FUNCTION snl() TO policed",
            "CREATE TABLE wanted (c text)",
            "INSERT INTO wanted VALUES ('NL')",
            "ALTER TABLE wanted ENABLE ROW LEVEL SECURITY",
            "CREATE POLICY only_nl ON wanted USING (c = snl())",
            "GRANT SELECT ON wanted TO policed",
            "CREATE COLLATION undetermined (provider = icu, locale = 'und', deterministic = false)",
            "CREATE TABLE big (arr text[], s text)",
            "INSERT INTO big VALUES (ARRAY['zz'], 'x')",
        ]);
        let bare = |query: &str| {
            let scan = raw_scan(query);
            assert!(
                !scan.contains("Filter") && !scan.contains("Cond"),
                "{query}:\n{scan}"
            );
        };
        // The analyst's function, called as often as groups come out (the red team).
        for condition in [
            "country <> tick()",
            "country <> stick()",
            "country <> now()::text",
            "country || '' <> tick()",
        ] {
            let query = format!(
                "SELECT count(*)::text FROM by_country WHERE country = 'NL' AND {condition}"
            );
            bare(&query);
            run(&["TRUNCATE ticks"]);
            assert_eq!(column(&query), ["1"], "{query}");
            let calls: i64 = column("SELECT count(*)::text FROM ticks")[0]
                .parse()
                .unwrap();
            assert!(calls <= 2, "{query}: {calls} calls");
        }
        let md5_chain = (0..54).fold("country".to_string(), |inner, _| format!("md5({inner})"));
        let long = "z".repeat(300);
        let nulls = vec!["NULL"; 1780].join(",");
        for query in [
            // Leakproof, written on the view: it chose the groups computed, and its cost per
            // raw row was the analyst's (the fourth to eighth reviews).
            "SELECT count(*) FROM by_country WHERE country = 'NL'".to_string(),
            "SELECT count(*) FROM by_country WHERE country IN ('NL', 'BE') AND country < 'Z'".into(),
            format!("SELECT count(*) FROM by_country WHERE country = 'NL' AND {md5_chain} <> ''"),
            format!("SELECT count(*) FROM by_country WHERE country = 'NL' AND country < '{long}'"),
            format!("SELECT count(*) FROM by_country WHERE country < ALL ('{{{nulls}}}'::text[])"),
            // Within a plain subquery over the view, and in a join's condition.
            "SELECT count(*) FROM (SELECT * FROM by_country) s WHERE country = 'NL' AND country <> stick()".into(),
            "SELECT count(*) FROM (SELECT * FROM (SELECT country, age FROM by_country) s WHERE country = 'NL') t".into(),
            "SELECT count(*) FROM by_country b JOIN (VALUES ('NL')) v(c) ON b.country = v.c AND b.country <> stick()".into(),
            // The analyst's own security-barrier view over the DP view.
            "SELECT count(*) FROM own_barrier".into(),
            // A pulled-up subquery's output, a one-row VALUES list, a FROM-less subquery.
            "SELECT count(*) FROM (SELECT country, stick() AS t FROM by_country) s WHERE country = 'NL' AND country <> t".into(),
            "SELECT count(*) FROM by_country b, (VALUES (snl())) v(c) WHERE b.country = v.c".into(),
            "SELECT count(*) FROM by_country b, (SELECT snl() AS c) v WHERE b.country = v.c".into(),
            "SELECT count(*) FROM (SELECT ROW(x1, x1, x1, x1) AS x2 FROM (
               SELECT ROW(x0, x0, x0, x0) AS x1 FROM (
                 SELECT md5(country) AS x0 FROM by_country WHERE country = 'NL') s1) s2) s
               WHERE x2 IS NOT NULL".into(),
            // The analyst's own DP query over the DP view.
            "SELECT dp_argmax(x.age, 1, 1.0) FROM by_country x WHERE x.country = 'NL' AND x.country <> stick()".into(),
            // A scalar subquery in the outermost select list, ORDER BY, VALUES, SET or
            // RETURNING (the third review).
            "SELECT (SELECT count(*) FROM by_country WHERE country = 'NL' AND country <> stick())".into(),
            "SELECT 1 ORDER BY (SELECT count(*) FROM by_country WHERE country = 'NL' AND country <> stick())".into(),
            "INSERT INTO mine VALUES ((SELECT count(*) FROM by_country WHERE country = 'NL' AND country <> stick()))".into(),
            "UPDATE mine SET n = (SELECT count(*) FROM by_country WHERE country = 'NL' AND country <> stick())".into(),
            "INSERT INTO mine VALUES (1) RETURNING (SELECT count(*) FROM by_country WHERE country = 'NL' AND country <> stick())".into(),
            // A DP call written in a subquery of its level.
            "SELECT count(*) FROM nested_form WHERE country = 'NL' AND country <> stick()".into(),
            // A multidimensional ARRAY whose dimensions differ (2202E on the rows met).
            "SELECT count(*) FROM by_country WHERE country = 'NL'
               AND ARRAY[ARRAY[1], CASE WHEN country = 'NL' THEN ARRAY[1, 2] ELSE ARRAY[1] END] IS NOT NULL".into(),
            // An init-plan computed when a raw row first needs it; collations that make
            // leakproof calls raise (the fourth and fifth reviews).
            "SELECT count(*) FROM by_country WHERE country = 'NL'
               AND country <> (SELECT c FROM (VALUES ('a'), ('b')) v(c))".into(),
            "SELECT count(*) FROM by_country WHERE country <> CASE WHEN country = 'NL'
               THEN (SELECT c FROM (VALUES ('a'), ('b')) v(c)) ELSE 'q' END".into(),
            "SELECT count(*) FROM by_country WHERE country = 'NL'
               AND starts_with(country COLLATE undetermined, '')".into(),
            "SELECT count(*) FROM (SELECT country, country COLLATE \"C\" AS nc FROM by_country) v,
               (SELECT ''::text COLLATE \"POSIX\" AS c) s
               WHERE v.country = 'NL' AND text_larger(v.nc, v.nc) <> s.c".into(),
            // Values of an enclosing level (the sixth review).
            "SELECT (SELECT count(*) FROM by_country WHERE country = 'NL' AND country < ALL (t.arr)) FROM big t".into(),
            "SELECT s.* FROM big t, LATERAL (SELECT * FROM by_country
               WHERE country = 'NL' AND country < ALL (t.arr) OFFSET 0) s".into(),
            "SELECT (SELECT count(*) FROM by_country
               WHERE country = 'NL' AND country < ALL (array_agg(a.s))) FROM big a".into(),
        ] {
            bare(&query);
        }
        // Prepared, with a generic plan and with a custom one.
        run(&["PREPARE by_key(text) AS SELECT count(*) FROM by_country WHERE country = $1"]);
        for mode in ["force_generic_plan", "force_custom_plan"] {
            run(&[&format!("SET plan_cache_mode = {mode}")]);
            bare("EXECUTE by_key('NL')");
        }
        run(&["RESET plan_cache_mode", "DEALLOCATE by_key"]);
        // A row-level security policy's equality, passed on by the planner.
        run(&["SET ROLE policed"]);
        bare("SELECT count(*) FROM by_country b JOIN wanted w ON b.country = w.c");
        run(&["RESET ROLE"]);
        // The view's own condition (its owner's) still runs on its rows.
        let scan = raw_scan("SELECT count(*) FROM by_checked_country WHERE country = 'NL'");
        assert!(
            scan.contains("checked(country)") && !scan.contains("'NL'"),
            "{scan}"
        );
    }
}
