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
/// or modifies rows (at its top or in a WITH query), and a DP aggregate sits in a subplan
/// that is not an init-plan.
///
/// # Safety
/// `query` must be a query descriptor that standard_ExecutorStart has just started.
pub unsafe fn refuse_dp_in_rechecked_subplans(query: *mut pg_sys::QueryDesc) {
    // SAFETY: a started query has its plan and plan state tree.
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
        if rechecks && in_correlated_subplan((*query).planstate, false) {
            raise(Error::NotMetered {
                reason: "a differentially private aggregate in a subquery evaluated per row (correlated, or hashed for IN) of a statement that locks or modifies rows (UPDATE, DELETE, MERGE, FOR UPDATE/SHARE, also in WITH) is not allowed: PostgreSQL would run it again, unmetered, to recheck a row that a concurrent transaction changed; compute it in an uncorrelated scalar subquery or in FROM".into(),
            });
        }
    }
}

/// Whether a DP aggregation node lies under `node`, in a correlated subplan (`inside`:
/// `node` already is in one).
///
/// # Safety
/// `node` must be a node of a started plan state tree, or NULL.
unsafe fn in_correlated_subplan(node: *mut pg_sys::PlanState, inside: bool) -> bool {
    // SAFETY: nodes are cast after their tags are checked; subplan lists hold
    // SubPlanStates.
    unsafe {
        if node.is_null() {
            return false;
        }
        if inside && finalizes_dp_aggregates(node) {
            return true;
        }
        for subplan in PgList::<pg_sys::SubPlanState>::from_pg((*node).subPlan).iter_ptr() {
            if in_correlated_subplan((*subplan).planstate, true) {
                return true;
            }
        }
        // Children and init-plans keep `inside` (an init-plan's own correlated subplans
        // are found through its subPlan list).
        let mut context = (inside, false);
        pg_sys::planstate_tree_walker(
            node,
            Some(child),
            (&mut context as *mut (bool, bool)).cast(),
        );
        context.1
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn child(node: *mut pg_sys::PlanState, context: *mut c_void) -> bool {
    // SAFETY: the context is in_correlated_subplan's (inside, found) pair.
    unsafe {
        let context = &mut *(context as *mut (bool, bool));
        context.1 = in_correlated_subplan(node, context.0);
        context.1
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

    const REFUSED: &str = "0A000: a differentially private aggregate in a subquery evaluated per row (correlated, or hashed for IN) of a statement that locks or modifies rows (UPDATE, DELETE, MERGE, FOR UPDATE/SHARE, also in WITH) is not allowed: PostgreSQL would run it again, unmetered, to recheck a row that a concurrent transaction changed; compute it in an uncorrelated scalar subquery or in FROM";

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
            "CREATE TABLE mine (id int PRIMARY KEY, v int)",
            "INSERT INTO mine VALUES (1, 1), (2, 2)",
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
            ] {
                assert_eq!(error_of(&query), REFUSED, "{query}");
            }
        }
        assert_eq!(
            column("SELECT count(*)::text FROM mine WHERE (SELECT count(*) FROM by_country WHERE mine.v > 0) >= 0"),
            ["2"]
        );
        run(&["UPDATE mine SET v = (SELECT dp_argmax(age, 1, 1.0, 1, ARRAY[30]) FROM visits)"]);
        assert_eq!(
            column("SELECT id::text FROM mine WHERE v = 30 ORDER BY id FOR UPDATE"),
            ["1", "2"]
        );
    }
}
