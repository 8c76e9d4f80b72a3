//! EvalPlanQual: when a row that UPDATE, DELETE, MERGE or SELECT ... FOR UPDATE/SHARE
//! reads was changed by a concurrent transaction, PostgreSQL rechecks the new version by
//! running the plan again in an executor state of its own (execMain.c,
//! EvalPlanQualStart), never passing ExecutorStart, where the metering hook charges.
//! Init-plans keep the values the metered run computed; correlated subplans run again.
//! A DP aggregate there would reach its final function unmetered and be refused then, but
//! only for the groups that exist: the refusal would tell whether rows exist (red team,
//! 2026-11-27: `... AND (SELECT count(*) FROM dp_view WHERE key = 'K' AND t.v > 0) >= 0
//! FOR UPDATE` failed exactly when key K had rows). So such a statement is refused when
//! it starts, from its plan alone.

use super::identity::dp_aggregate;
use crate::error::Error;
use crate::extension::raise;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgList};
use std::ffi::c_void;

/// Refuses the statement of `query` when a concurrent update could make PostgreSQL run
/// one of its DP aggregates again outside the metering hook's sight: the statement locks
/// or modifies rows (at its top or in a WITH query), and a DP aggregate sits where a
/// recheck reaches it: in a subplan evaluated per row, in a WITH query, or in the plan
/// itself, unless under a scan whose rows the recheck takes from the row it saved (a
/// FROM subquery with its own row mark; a branch of a UNION ALL has none: a second
/// review reran one so, and the refusal came for the keys that exist).
///
/// # Safety
/// `query` must be a query descriptor that standard_ExecutorStart has just started.
pub unsafe fn refuse_dp_in_rechecked_subplans(query: *mut pg_sys::QueryDesc) {
    // SAFETY: a started query has its plan and plan state tree; row marks are
    // PlanRowMarks.
    unsafe {
        let statement = (*query).plannedstmt;
        let rechecks = !(*statement).rowMarks.is_null()
            || (*statement).hasModifyingCTE
            || matches!(
                (*statement).commandType,
                pg_sys::CmdType::CMD_UPDATE
                    | pg_sys::CmdType::CMD_DELETE
                    | pg_sys::CmdType::CMD_MERGE
            );
        if !rechecks {
            return;
        }
        let marked: Vec<u32> = PgList::<pg_sys::PlanRowMark>::from_pg((*statement).rowMarks)
            .iter_ptr()
            .map(|mark| (*mark).rti)
            .collect();
        if reached_by_recheck((*query).planstate, false, false, &marked) {
            raise(Error::NotMetered {
                reason: "a differentially private aggregate that a statement locking or modifying rows (UPDATE, DELETE, MERGE, FOR UPDATE/SHARE, also in WITH) would run again to recheck a row that a concurrent transaction changed (in a subquery evaluated per row, a WITH query or a UNION ALL branch) is not allowed: PostgreSQL would run it unmetered; compute it in an uncorrelated scalar subquery, or read it from a view or subquery in FROM".into(),
            });
        }
    }
}

/// Whether a DP aggregation node under `node` is one a recheck runs again. A recheck
/// reruns what lies under a ModifyTable or LockRows node (`rechecked`), subplans evaluated
/// per row there (`inside`: their init-plans too) and the WITH queries its CTE scans read;
/// WITH queries are walked to find a modifying one.
///
/// # Safety
/// `node` must be a node of a started plan state tree, or NULL; `marked` the range table
/// indexes of the statement's row marks.
unsafe fn reached_by_recheck(
    node: *mut pg_sys::PlanState,
    rechecked: bool,
    inside: bool,
    marked: &[u32],
) -> bool {
    // SAFETY: nodes are cast after their tags are checked; plan lists hold
    // SubPlanStates; the lists are put back before anything else reads them.
    unsafe {
        if node.is_null() {
            return false;
        }
        if rechecked && finalizes_dp_aggregates(node) {
            return true;
        }
        let rechecked = rechecked
            || is_a(node.cast(), NodeTag::T_ModifyTableState)
            || is_a(node.cast(), NodeTag::T_LockRowsState);
        let plan = (*node).plan;
        if rechecked {
            let scan = matches!(
                (*plan).type_,
                NodeTag::T_SubqueryScan | NodeTag::T_FunctionScan | NodeTag::T_CteScan
            );
            if scan && marked.contains(&(*(plan as *mut pg_sys::Scan)).scanrelid) {
                return false; // The recheck reads the row it saved.
            }
            if is_a(node.cast(), NodeTag::T_CteScanState) {
                let cte = (*(node as *mut pg_sys::CteScanState)).cteplanstate;
                if reached_by_recheck(cte, true, true, marked) {
                    return true;
                }
            }
        }
        for subplan in PgList::<pg_sys::SubPlanState>::from_pg((*node).initPlan).iter_ptr() {
            let cte = (*(*subplan).subplan).subLinkType == pg_sys::SubLinkType::CTE_SUBLINK;
            if (cte || (rechecked && inside))
                && reached_by_recheck((*subplan).planstate, rechecked, inside, marked)
            {
                return true;
            }
        }
        for subplan in PgList::<pg_sys::SubPlanState>::from_pg((*node).subPlan).iter_ptr() {
            if reached_by_recheck((*subplan).planstate, rechecked, true, marked) {
                return true;
            }
        }
        // The children (the walker would also walk the lists read above).
        let lists = ((*node).initPlan, (*node).subPlan);
        (*node).initPlan = std::ptr::null_mut();
        (*node).subPlan = std::ptr::null_mut();
        let mut context = Children {
            rechecked,
            inside,
            marked,
            found: false,
        };
        pg_sys::planstate_tree_walker(node, Some(child), (&mut context as *mut Children).cast());
        ((*node).initPlan, (*node).subPlan) = lists;
        context.found
    }
}

/// The walker's context for a node's children.
struct Children<'a> {
    rechecked: bool,
    inside: bool,
    marked: &'a [u32],
    found: bool,
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn child(node: *mut pg_sys::PlanState, context: *mut c_void) -> bool {
    // SAFETY: the context is reached_by_recheck's Children.
    unsafe {
        let context = &mut *(context as *mut Children);
        context.found = reached_by_recheck(node, context.rechecked, context.inside, context.marked);
        context.found
    }
}

/// Whether `node` is an aggregation or window node that calls a DP aggregate.
///
/// # Safety
/// As [`in_correlated_subplan`]'s.
unsafe fn finalizes_dp_aggregates(node: *mut pg_sys::PlanState) -> bool {
    // SAFETY: an AggState's aggs are Aggrefs; a WindowAggState's plan is a WindowAgg,
    // whose functions are in its target list.
    unsafe {
        if is_a(node.cast(), NodeTag::T_AggState) {
            let state = node as *mut pg_sys::AggState;
            return PgList::<pg_sys::Aggref>::from_pg((*state).aggs)
                .iter_ptr()
                .any(|aggref| dp_aggregate((*aggref).aggfnoid).is_some());
        }
        if is_a(node.cast(), NodeTag::T_WindowAggState) {
            let mut found = false;
            pg_sys::expression_tree_walker(
                (*(*node).plan).targetlist.cast(),
                Some(dp_window_function),
                (&mut found as *mut bool).cast(),
            );
            return found;
        }
        false
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn dp_window_function(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is finalizes_dp_aggregates's flag; nodes are cast after their
    // tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_WindowFunc)
            && dp_aggregate((*(node as *mut pg_sys::WindowFunc)).winfnoid).is_some()
        {
            *(context as *mut bool) = true;
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(dp_window_function), context)
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, error_of, run};
    use pgrx::prelude::*;

    const REFUSED: &str = "0A000: a differentially private aggregate that a statement locking or modifying rows (UPDATE, DELETE, MERGE, FOR UPDATE/SHARE, also in WITH) would run again to recheck a row that a concurrent transaction changed (in a subquery evaluated per row, a WITH query or a UNION ALL branch) is not allowed: PostgreSQL would run it unmetered; compute it in an uncorrelated scalar subquery, or read it from a view or subquery in FROM";

    /// Refused from the plan, with rows or without, before a concurrent update could make
    /// PostgreSQL recheck a row (and run the subplan unmetered, failing only for the groups
    /// that exist); uncorrelated subqueries (init-plans keep their metered values) and
    /// plain reads still run.
    #[pg_test]
    fn dp_aggregates_in_rechecked_subplans_are_refused() {
        run(&[
            "CREATE TABLE visits (country text, age int)",
            "INSERT INTO visits SELECT 'NL', 30 FROM generate_series(1, 5)",
            "CREATE VIEW by_country WITH (security_barrier) AS
               SELECT country, dp_argmax(age, 1, 1.0) AS age FROM visits GROUP BY country",
            "CREATE TABLE mine (id int PRIMARY KEY, v int, c text)",
            "INSERT INTO mine VALUES (1, 1, 'zz'), (2, 2, 'NL')",
        ]);
        for country in ["NL", "Atlantis"] {
            for query in [
                format!("SELECT id FROM mine WHERE (SELECT count(*) FROM by_country WHERE country = '{country}' AND mine.v > 0) >= 0 FOR UPDATE"),
                format!("SELECT id FROM mine WHERE (SELECT count(*) FROM by_country WHERE country = '{country}' AND mine.v > 0) >= 0 FOR SHARE"),
                format!("UPDATE mine SET v = v WHERE (SELECT count(*) FROM by_country WHERE country = '{country}' AND mine.v > 0) >= 0"),
                format!("DELETE FROM mine WHERE (SELECT max(age) FROM by_country WHERE country = '{country}' AND mine.v > 0) < 0"),
                format!("UPDATE mine SET v = (SELECT dp_argmax(age, 1, 1.0, 1, ARRAY[30]) FROM visits WHERE country = '{country}' AND mine.v > 0)"),
                format!("WITH u AS (UPDATE mine SET v = v WHERE (SELECT count(*) FROM by_country WHERE country = '{country}' AND mine.v > 0) >= 0 RETURNING 1) SELECT count(*) FROM u"),
                format!("UPDATE mine SET v = v WHERE v::text NOT IN (SELECT country FROM by_country WHERE country = '{country}')"),
                // A branch of a UNION ALL has no row mark of its own: rerun.
                format!("UPDATE mine SET v = v FROM (SELECT country FROM by_country WHERE country = '{country}' UNION ALL SELECT 'zz') s WHERE s.country = mine.c"),
                format!("SELECT id FROM mine WHERE c IN (SELECT country FROM by_country WHERE country = '{country}' UNION ALL SELECT 'zz') FOR UPDATE"),
                format!("WITH d AS MATERIALIZED (SELECT country FROM by_country WHERE country = '{country}') SELECT id FROM mine WHERE c IN (SELECT country FROM d UNION ALL SELECT 'zz') FOR UPDATE"),
            ] {
                assert_eq!(error_of(&query), REFUSED, "{query}");
            }
        }
        assert_eq!(
            column("SELECT count(*)::text FROM mine WHERE (SELECT count(*) FROM by_country WHERE mine.v > 0) >= 0"),
            ["2"]
        );
        // A view in FROM: the recheck reads the row it saved.
        run(&[
            "UPDATE mine SET v = b.age FROM by_country b WHERE b.country = mine.c",
            "WITH u AS (UPDATE mine SET v = v RETURNING c) SELECT count(*) FROM by_country b JOIN u ON b.country = u.c",
        ]);
        run(&["UPDATE mine SET v = (SELECT dp_argmax(age, 1, 1.0, 1, ARRAY[30]) FROM visits)"]);
        assert_eq!(
            column("SELECT id::text FROM mine WHERE v = 30 ORDER BY id FOR UPDATE"),
            ["1", "2"]
        );
    }
}
