//! Conditions on a DP view stay above its DP aggregates when they call anything that is
//! not leakproof.
//!
//! PostgreSQL pushes a condition written on a security-barrier view into the view's scan
//! when every function that reads the view's columns is leakproof
//! (`contain_leaked_vars`): a function that reads no column passes, wherever it sits.
//! `WHERE country = 'NL' AND country <> pg_temp.tick()` thus ran the analyst's `tick()`
//! once per raw row under the aggregate: its NOTICEs counted the rows (red team,
//! 2026-11-27). PostgreSQL never pushes a condition into a subquery that has a LIMIT
//! (allpaths.c, `subquery_is_pushdown_safe`), so a view over DP aggregates read by a
//! statement whose conditions call such a function gets `LIMIT ALL`: no limit, and no
//! condition below it. Leakproof conditions (built-in comparisons of columns with
//! constants) are still pushed, which only chooses the groups computed.

use crate::extension::budget::dp_aggregate;
use pgrx::is_a;
use pgrx::pg_sys::{self, NodeTag};
use std::ffi::c_void;

/// Keeps every condition of `query` (and of the queries inside it) above the DP views it
/// reads, when any condition of the statement calls a function that is not leakproof.
///
/// # Safety
/// `query` must be a rewritten query about to be planned, which the planner may modify.
pub unsafe fn keep_leaky_conditions_above_dp_views(query: *mut pg_sys::Query) {
    let mut scan = Scan::default();
    // SAFETY: as the caller guarantees.
    unsafe {
        scan_query(query, &mut scan);
        if !scan.leaky {
            return;
        }
        for subquery in scan.dp_views {
            if (*subquery).limitCount.is_null() && (*subquery).limitOffset.is_null() {
                // LIMIT ALL, as the parser writes it: a NULL bigint.
                (*subquery).limitCount = pg_sys::makeConst(
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

/// What the scan found: the subqueries of security-barrier views that call DP
/// aggregates, and whether a condition outside them is not leakproof.
#[derive(Default)]
struct Scan {
    dp_views: Vec<*mut pg_sys::Query>,
    leaky: bool,
}

/// # Safety
/// `query` must be a valid Query.
unsafe fn scan_query(query: *mut pg_sys::Query, scan: &mut Scan) {
    // SAFETY: fields of a valid Query; its range table holds RangeTblEntries.
    unsafe {
        for condition in [(*query).jointree.cast(), (*query).havingQual] {
            scan.leaky |= leaky(condition);
        }
        for rte in pgrx::PgList::<pg_sys::RangeTblEntry>::from_pg((*query).rtable).iter_ptr() {
            if (*rte).rtekind != pg_sys::RTEKind::RTE_SUBQUERY || (*rte).subquery.is_null() {
                continue;
            }
            if (*rte).security_barrier && calls_dp_aggregates((*rte).subquery) {
                // The view's own conditions are its owner's.
                scan.dp_views.push((*rte).subquery);
            } else {
                scan_query((*rte).subquery, scan);
            }
        }
        // WITH queries and sublinks.
        pg_sys::query_tree_walker(
            query,
            Some(scan_walker),
            (scan as *mut Scan).cast(),
            pg_sys::QTW_IGNORE_RT_SUBQUERIES as i32,
        );
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn scan_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is scan_query's Scan; nodes are cast after their tags are
    // checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            scan_query(node.cast(), &mut *(context as *mut Scan));
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(scan_walker), context)
    }
}

/// Whether `condition` (a join tree or an expression, sublinks left out) calls a function
/// that is not leakproof, or evaluates what can raise an ERROR without calling one (a
/// domain's check, XML).
///
/// # Safety
/// `condition` must be a valid node, or NULL.
unsafe fn leaky(condition: *mut pg_sys::Node) -> bool {
    // SAFETY: the walker reads the nodes of a valid tree.
    unsafe { leaky_walker(condition, std::ptr::null_mut()) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn leaky_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast by check_functions_in_node after it checks their tags.
    unsafe {
        if node.is_null() || is_a(node, NodeTag::T_Query) {
            return false;
        }
        if is_a(node, NodeTag::T_CoerceToDomain)
            || is_a(node, NodeTag::T_XmlExpr)
            || is_a(node, NodeTag::T_NextValueExpr)
            || pg_sys::check_functions_in_node(node, Some(not_leakproof), std::ptr::null_mut())
        {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(leaky_walker), context)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn not_leakproof(function: pg_sys::Oid, _context: *mut c_void) -> bool {
    // SAFETY: a catalog lookup of a function the statement calls.
    !unsafe { pg_sys::get_func_leakproof(function) }
}

/// Whether `query`, or a query inside it, calls a DP aggregate.
///
/// # Safety
/// `query` must be a valid Query.
unsafe fn calls_dp_aggregates(query: *mut pg_sys::Query) -> bool {
    // SAFETY: the walker reads the nodes of a valid Query.
    unsafe { pg_sys::query_tree_walker(query, Some(dp_walker), std::ptr::null_mut(), 0) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn dp_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            return pg_sys::query_tree_walker(node.cast(), Some(dp_walker), context, 0);
        }
        if is_a(node, NodeTag::T_Aggref)
            && dp_aggregate((*(node as *mut pg_sys::Aggref)).aggfnoid).is_some()
        {
            return true;
        }
        if is_a(node, NodeTag::T_WindowFunc)
            && dp_aggregate((*(node as *mut pg_sys::WindowFunc)).winfnoid).is_some()
        {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(dp_walker), context)
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, plan, run};
    use pgrx::prelude::*;

    /// The analyst's function that reads no column is not pushed below the view's DP
    /// aggregate (where it ran once per raw row: 5 calls for 5 rows of NL), whether
    /// stable or volatile; leakproof conditions still choose the groups computed.
    #[pg_test]
    fn conditions_that_leak_stay_above_dp_views() {
        run(&[
            "CREATE TABLE visits (country text, age int)",
            "INSERT INTO visits SELECT 'NL', 30 FROM generate_series(1, 5)",
            "INSERT INTO visits SELECT 'BE', 40 FROM generate_series(1, 7)",
            "CREATE VIEW by_country WITH (security_barrier) AS
               SELECT country, dp_argmax(age, 1, 1.0) AS age FROM visits GROUP BY country",
            "CREATE TABLE ticks (n int)",
            "CREATE FUNCTION tick() RETURNS text LANGUAGE plpgsql VOLATILE AS
               $$ BEGIN INSERT INTO ticks VALUES (1); RETURN ''; END $$",
            "CREATE FUNCTION stable_tick() RETURNS text LANGUAGE plpgsql STABLE AS
               $$ BEGIN RETURN ''; END $$",
        ]);
        for condition in [
            "country <> tick()",
            "country <> stable_tick()",
            "country <> now()::text",
            "country || '' <> tick()",
        ] {
            let query = format!(
                "SELECT count(*)::text FROM by_country WHERE country = 'NL' AND {condition}"
            );
            let explained = plan(&query);
            let scan = explained
                .lines()
                .skip_while(|line| !line.contains("Scan on visits"))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                !scan.contains("tick") && !scan.contains("now()"),
                "{query}:\n{explained}"
            );
            run(&["TRUNCATE ticks"]);
            assert_eq!(column(&query), ["1"], "{query}");
            let calls: i64 = column("SELECT count(*)::text FROM ticks")[0]
                .parse()
                .unwrap();
            assert!(calls <= 2, "{query}: {calls} calls");
        }
        // Within a plain subquery over the view, and in a join's condition.
        for query in [
            "SELECT count(*)::text FROM (SELECT * FROM by_country) s WHERE country = 'NL' AND country <> tick()",
            "SELECT count(*)::text FROM by_country b JOIN (VALUES ('NL')) v(c) ON b.country = v.c AND b.country <> tick()",
        ] {
            run(&["TRUNCATE ticks"]);
            assert_eq!(column(query), ["1"], "{query}");
            let calls: i64 = column("SELECT count(*)::text FROM ticks")[0].parse().unwrap();
            assert!(calls <= 2, "{query}: {calls} calls");
        }
        // Leakproof: still pushed into the view's scan.
        let explained = plan("SELECT count(*) FROM by_country WHERE country = 'NL'");
        let scan = explained
            .lines()
            .skip_while(|line| !line.contains("Scan on visits"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(scan.contains("'NL'"), "{explained}");
    }
}
