//! Which planned statements hold DP aggregates, or are fragments of a DP statement that
//! Citus sent a worker: their expressions, in every node and subplan, are searched once
//! when the executor starts (statistics.rs silences those plans).

use super::identity::dp_aggregate;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgList};
use std::ffi::c_void;

/// Whether a planned statement is a fragment of a DP statement over Citus tables: a
/// read-only plan that calls dp_fragment, where Citus is installed (a statement that
/// writes is always counted: autovacuum needs its counts).
///
/// # Safety
/// `statement` must be NULL or a valid planned statement.
pub(super) unsafe fn is_fragment(statement: *mut pg_sys::PlannedStmt) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe {
        !statement.is_null()
            && (*statement).commandType == pg_sys::CmdType::CMD_SELECT
            && !(*statement).hasModifyingCTE
            && holds(statement, crate::extension::citus::calls_fragment_marker)
            && crate::extension::citus::installed()
    }
}

/// Whether a planned statement calls a DP aggregate anywhere (subplans included).
///
/// # Safety
/// `statement` must be NULL or a valid planned statement.
pub(super) unsafe fn holds_dp_aggregates(statement: *mut pg_sys::PlannedStmt) -> bool {
    /// # Safety
    /// `node` must be NULL or a valid expression tree.
    unsafe fn calls(node: *mut pg_sys::Node) -> bool {
        // SAFETY: as the caller guarantees.
        unsafe { calls_dp_aggregate(node, std::ptr::null_mut()) }
    }
    // SAFETY: as the caller guarantees.
    unsafe { holds(statement, calls) }
}

/// Whether an expression of a planned statement satisfies `calls` (subplans included).
///
/// # Safety
/// `statement` must be NULL or a valid planned statement.
unsafe fn holds(
    statement: *mut pg_sys::PlannedStmt,
    calls: unsafe fn(*mut pg_sys::Node) -> bool,
) -> bool {
    // SAFETY: a planned statement's plan tree and subplans are Plan nodes.
    unsafe {
        if statement.is_null() {
            return false;
        }
        plan_holds((*statement).planTree, calls)
            || PgList::<pg_sys::Plan>::from_pg((*statement).subplans)
                .iter_ptr()
                .any(|plan| plan_holds(plan, calls))
    }
}

/// # Safety
/// `plan` must be NULL or a valid Plan.
unsafe fn plan_holds(plan: *mut pg_sys::Plan, calls: unsafe fn(*mut pg_sys::Node) -> bool) -> bool {
    // SAFETY: nodes are cast after their tags are checked; the lists hold Plans.
    unsafe {
        if plan.is_null() {
            return false;
        }
        let mut found = false;
        for expressions in [(*plan).targetlist, (*plan).qual] {
            found |= calls(expressions.cast());
        }
        let lists = if is_a(plan.cast(), NodeTag::T_Append) {
            vec![(*(plan as *mut pg_sys::Append)).appendplans]
        } else if is_a(plan.cast(), NodeTag::T_MergeAppend) {
            vec![(*(plan as *mut pg_sys::MergeAppend)).mergeplans]
        } else if is_a(plan.cast(), NodeTag::T_BitmapAnd) {
            vec![(*(plan as *mut pg_sys::BitmapAnd)).bitmapplans]
        } else if is_a(plan.cast(), NodeTag::T_BitmapOr) {
            vec![(*(plan as *mut pg_sys::BitmapOr)).bitmapplans]
        } else if is_a(plan.cast(), NodeTag::T_CustomScan) {
            vec![(*(plan as *mut pg_sys::CustomScan)).custom_plans]
        } else {
            Vec::new()
        };
        let subquery = if is_a(plan.cast(), NodeTag::T_SubqueryScan) {
            (*(plan as *mut pg_sys::SubqueryScan)).subplan
        } else {
            std::ptr::null_mut()
        };
        found
            || plan_holds((*plan).lefttree, calls)
            || plan_holds((*plan).righttree, calls)
            || plan_holds(subquery, calls)
            || lists.into_iter().any(|list| {
                PgList::<pg_sys::Plan>::from_pg(list)
                    .iter_ptr()
                    .any(|child| plan_holds(child, calls))
            })
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn calls_dp_aggregate(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        let function = if is_a(node, NodeTag::T_Aggref) {
            Some((*(node as *mut pg_sys::Aggref)).aggfnoid)
        } else if is_a(node, NodeTag::T_WindowFunc) {
            Some((*(node as *mut pg_sys::WindowFunc)).winfnoid)
        } else {
            None
        };
        if function.is_some_and(|f| dp_aggregate(f).is_some()) {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(calls_dp_aggregate), context)
    }
}
