//! A DP aggregate's parameters are read once per loop, never once per row.
//!
//! PostgreSQL evaluates an aggregate's arguments on every row. A parameter written as a
//! stable expression (`current_setting('dp.eps')::float8`, `now()`) could then read
//! another value on a later row, after something above the aggregate changed it
//! (`set_config` in the select list, run once per released group): the next group's
//! transition would see a new ε and fail, or a malformed setting would fail its cast,
//! exactly when rows follow a released group. The error would tell which hidden keys
//! hold rows (issue 19, part 3). So, before planning, each such parameter becomes an
//! expression sublink, `(SELECT expr)`: an init-plan, evaluated once when the loop that
//! reads it starts (the metering hook reads it then, before any row) and kept for the
//! loop. Constants and statement parameters (`$1`) are fixed already; expressions of the
//! rows are refused by the metering hook.

use crate::extension::budget::dp_aggregate;
use crate::extension::forms::Aggregate;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgBox, PgList};
use std::ffi::c_void;

/// Refuses, in `query` and every query inside it, a DP aggregate call with ORDER BY, and
/// rewrites the stable parameters of the calls into init-plans when `wrap` (over Citus
/// tables the coordinator evaluates them itself: citus/fragments.rs); whether it calls
/// any DP aggregate.
///
/// # Safety
/// `query` must be a rewritten query about to be planned, which the planner may modify.
pub unsafe fn evaluate_once_per_loop(query: *mut pg_sys::Query, wrap: bool) -> bool {
    let mut found = false;
    // SAFETY: as the caller guarantees.
    unsafe { walk_query(query, &mut found, wrap) };
    found
}

/// What the walker is given: the Query whose expressions it walks, whether a DP
/// aggregate was found, and whether parameters are wrapped.
struct Walk {
    query: *mut pg_sys::Query,
    found: *mut bool,
    wrap: bool,
}

/// # Safety
/// `query` must be a valid Query, and `found` valid during the walk.
unsafe fn walk_query(query: *mut pg_sys::Query, found: *mut bool, wrap: bool) {
    let mut walk = Walk { query, found, wrap };
    // SAFETY: the walker gets the Walk of the Query whose expressions it walks.
    unsafe {
        pg_sys::query_tree_walker(query, Some(walker), (&mut walk as *mut Walk).cast(), 0);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked; the context is the Walk that
    // walk_query passed for the Query that holds this node.
    unsafe {
        if node.is_null() {
            return false;
        }
        let walk = &*(context as *mut Walk);
        if is_a(node, NodeTag::T_Query) {
            walk_query(node.cast(), walk.found, walk.wrap);
            return false;
        }
        if is_a(node, NodeTag::T_Aggref) {
            let aggref = node as *mut pg_sys::Aggref;
            if let Some(aggregate) = dp_aggregate((*aggref).aggfnoid) {
                *walk.found = true;
                // Its sort keys would count as arguments: the form of another arity.
                if !(*aggref).aggorder.is_null() {
                    crate::extension::raise(crate::error::Error::OrderedCall {
                        aggregate: aggregate.name,
                    });
                }
                if walk.wrap && wrap_stable_parameters(aggref, aggregate) {
                    (*walk.query).hasSubLinks = true;
                }
            }
        } else if is_a(node, NodeTag::T_WindowFunc)
            && dp_aggregate((*(node as *mut pg_sys::WindowFunc)).winfnoid).is_some()
        {
            *walk.found = true;
        }
        pg_sys::expression_tree_walker(node, Some(walker), context)
    }
}

/// Replaces each stable parameter of `aggref`, a call of `aggregate`, by an init-plan
/// that computes it; whether any was replaced.
///
/// # Safety
/// `aggref` must be a valid Aggref of a query being planned.
unsafe fn wrap_stable_parameters(aggref: *mut pg_sys::Aggref, aggregate: &Aggregate) -> bool {
    // SAFETY: an Aggref's args are TargetEntries; expressions are tested and copied with
    // PostgreSQL's own functions.
    unsafe {
        // An outer query's aggregate (agglevelsup > 0) reads rows of that level: left to
        // the metering hook, which refuses a parameter of the rows.
        if (*aggref).agglevelsup != 0 {
            return false;
        }
        let entries = PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args);
        let form = aggregate.form(entries.len());
        let first = form.family.row_arguments().len();
        let mut wrapped = false;
        for position in first..form.arity() {
            let Some(entry) = entries.get_ptr(position) else {
                continue;
            };
            let expression = (*entry).expr as *mut pg_sys::Node;
            if is_fixed_or_of_the_rows(expression) {
                continue;
            }
            (*entry).expr = once_per_loop(expression).cast();
            wrapped = true;
        }
        wrapped
    }
}

/// Whether an argument is already the same for the whole statement (a constant, `$1`,
/// an immutable function of them or of an outer row), or cannot be made so: it reads the
/// rows, calls a volatile function or an aggregate (the metering hook refuses those).
///
/// # Safety
/// `expression` must be a valid expression of the query being planned.
unsafe fn is_fixed_or_of_the_rows(expression: *mut pg_sys::Node) -> bool {
    // SAFETY: PostgreSQL's clause tests read the expression (and its sublinks).
    unsafe {
        is_a(expression, NodeTag::T_Const)
            || is_a(expression, NodeTag::T_Param)
            || !pg_sys::contain_mutable_functions(expression)
            || pg_sys::contain_vars_of_level(expression, 0)
            || pg_sys::contain_volatile_functions(expression)
            || pg_sys::contain_agg_clause(expression)
    }
}

/// `(SELECT expression)`: an expression sublink, which the planner makes an init-plan
/// (its only outer references, if any, are of an outer query's row, fixed during a loop).
///
/// # Safety
/// `expression` must be a valid expression of the query being planned, with no column of
/// that query's own rows.
unsafe fn once_per_loop(expression: *mut pg_sys::Node) -> *mut pg_sys::SubLink {
    // SAFETY: nodes made with PostgreSQL's constructors in the planner's memory; the
    // copy's outer references are moved one level out, as the new query sits one level
    // below the aggregate's.
    unsafe {
        let copy = pg_sys::copyObjectImpl(expression.cast()) as *mut pg_sys::Node;
        pg_sys::IncrementVarSublevelsUp(copy, 1, 0);
        let mut select = PgBox::<pg_sys::Query>::alloc_node(NodeTag::T_Query);
        select.commandType = pg_sys::CmdType::CMD_SELECT;
        select.querySource = pg_sys::QuerySource::QSRC_ORIGINAL;
        select.canSetTag = true;
        select.hasSubLinks = pg_sys::contain_subplans(copy);
        select.jointree = pg_sys::makeFromExpr(std::ptr::null_mut(), std::ptr::null_mut());
        let entry = pg_sys::makeTargetEntry(copy.cast(), 1, std::ptr::null_mut(), false);
        select.targetList = pg_sys::lappend(std::ptr::null_mut(), entry.cast());
        let mut sublink = PgBox::<pg_sys::SubLink>::alloc_node(NodeTag::T_SubLink);
        sublink.subLinkType = pg_sys::SubLinkType::EXPR_SUBLINK;
        sublink.subselect = select.into_pg().cast();
        sublink.location = -1;
        sublink.into_pg()
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{error_of, run};
    use pgrx::prelude::*;

    /// ORDER BY inside a DP call made its sort keys count as arguments: a form of
    /// another arity read an int as max_score (NaN), or none matched (a panic, XX000).
    #[pg_test]
    fn ordered_dp_calls_are_refused() {
        run(&["CREATE TABLE pages (page text, n int)"]);
        for (call, name) in [
            ("dp_argmax(page, 1, 1.0 ORDER BY -5)", "dp_argmax"),
            ("dp_argmax(page, 1, 1.0 ORDER BY page)", "dp_argmax"),
            ("dp_quantile(n, 0.5, 0, 10, 1.0 ORDER BY n)", "dp_quantile"),
        ] {
            assert_eq!(
                error_of(&format!("SELECT {call} FROM pages")),
                format!("0A000: ORDER BY inside {name}(...) is not accepted: its answer does not depend on the order of its rows; drop the ORDER BY"),
                "{call}"
            );
        }
        assert_eq!(
            error_of("SELECT page FROM pages GROUP BY page HAVING dp_partition(1, 1e-6 ORDER BY page)"),
            "0A000: ORDER BY inside dp_partition(...) is not accepted: its answer does not depend on the order of its rows; drop the ORDER BY"
        );
    }
}
