//! A budgeted role's DP aggregation node computes nothing volatile once per group.
//!
//! The node evaluates its HAVING and its output list once per group, in its own order,
//! before held_groups.rs shuffles the groups it releases. A view that output
//! `nextval(...)` or `clock_timestamp()` per group gave that order back (`ORDER BY` that
//! column), and a hashed node's order counted the groups it withheld (the red team's
//! fifth round); `clock_timestamp()` also timed each group's draw, and a sequence read
//! in HAVING counted the withheld groups. So a volatile function there, or in a
//! subquery run once per group, is refused to a budgeted role when the plan starts,
//! before any row: the refusal follows from the plan alone. The DP calls' own arguments
//! are evaluated per row as the rows arrive, before any group, and are not searched.

use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgList};
use std::ffi::{c_void, CStr};

/// What the search is given and finds.
struct Search {
    statement: *mut pg_sys::PlannedStmt,
    /// In a subquery's plan, where aggregate calls run per group of the DP node too.
    in_subquery: bool,
    /// The volatile function found (`nextval` for an identity column's NextValueExpr).
    function: Option<String>,
}

/// The first volatile function that `plan` (a node finalizing DP aggregates) calls once
/// per group: in its HAVING, its output list outside aggregate calls, or a subquery's
/// plan that those run.
///
/// # Safety
/// `plan` must be an Agg of `statement`, a valid planned statement.
pub(super) unsafe fn volatile_per_group(
    plan: *mut pg_sys::Plan,
    statement: *mut pg_sys::PlannedStmt,
) -> Option<String> {
    let mut search = Search {
        statement,
        in_subquery: false,
        function: None,
    };
    // SAFETY: an Agg's output list and HAVING are expression lists of the statement.
    unsafe {
        for list in [(*plan).targetlist, (*plan).qual] {
            if walker(list.cast(), (&mut search as *mut Search).cast()) {
                break;
            }
        }
    }
    search.function
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn is_volatile(function: pg_sys::Oid, context: *mut c_void) -> bool {
    // SAFETY: the context is the walk's Search; a function a running plan calls is in
    // the catalog, where func_volatile and get_func_name look it up.
    unsafe {
        if pg_sys::func_volatile(function) as u8 != pg_sys::PROVOLATILE_VOLATILE {
            return false;
        }
        let name = pg_sys::get_func_name(function);
        (*(context as *mut Search)).function = Some(if name.is_null() {
            format!("function {}", u32::from(function))
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        });
        true
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked; the context is the Search of
    // volatile_per_group; a SubPlan's plan_id numbers the statement's subplans from 1.
    unsafe {
        if node.is_null() {
            return false;
        }
        let search = &mut *(context as *mut Search);
        // The node's own aggregate calls read their arguments per row, before any group
        // is released; their final functions (a DP draw) are not searched.
        if !search.in_subquery
            && (is_a(node, NodeTag::T_Aggref) || is_a(node, NodeTag::T_GroupingFunc))
        {
            return false;
        }
        if pg_sys::check_functions_in_node(node, Some(is_volatile), context) {
            return true;
        }
        if is_a(node, NodeTag::T_NextValueExpr) {
            search.function = Some("nextval".into());
            return true;
        }
        if is_a(node, NodeTag::T_SubPlan) {
            let id = (*(node as *mut pg_sys::SubPlan)).plan_id;
            let plans = PgList::<pg_sys::Plan>::from_pg((*search.statement).subplans);
            if let Some(plan) = usize::try_from(id - 1)
                .ok()
                .and_then(|at| plans.get_ptr(at))
            {
                let outer = std::mem::replace(&mut search.in_subquery, true);
                let found = plan_calls(plan, search);
                search.in_subquery = outer;
                if found {
                    return true;
                }
            }
        }
        pg_sys::expression_tree_walker(node, Some(walker), context)
    }
}

/// Whether a subquery's plan calls a volatile function anywhere: every expression a node
/// of it evaluates, its children's, and those of the subqueries and CTEs it runs.
///
/// # Safety
/// `plan` must be NULL or a Plan of the search's statement.
unsafe fn plan_calls(plan: *mut pg_sys::Plan, search: &mut Search) -> bool {
    // SAFETY: nodes are cast after their tags are checked; their lists hold expressions
    // (or Plans, for the children).
    unsafe {
        if plan.is_null() {
            return false;
        }
        let node = plan.cast::<pg_sys::Node>();
        let mut expressions = vec![(*plan).targetlist, (*plan).qual, (*plan).initPlan]
            .into_iter()
            .map(|list| list.cast::<pg_sys::Node>())
            .collect::<Vec<_>>();
        let mut children = vec![(*plan).lefttree, (*plan).righttree];
        let mut lists = Vec::new();
        if is_a(node, NodeTag::T_Result) {
            expressions.push((*plan.cast::<pg_sys::Result>()).resconstantqual);
        } else if is_a(node, NodeTag::T_NestLoop)
            || is_a(node, NodeTag::T_MergeJoin)
            || is_a(node, NodeTag::T_HashJoin)
        {
            expressions.push((*plan.cast::<pg_sys::Join>()).joinqual.cast());
        } else if is_a(node, NodeTag::T_FunctionScan) {
            expressions.push((*plan.cast::<pg_sys::FunctionScan>()).functions.cast());
        } else if is_a(node, NodeTag::T_ValuesScan) {
            expressions.push((*plan.cast::<pg_sys::ValuesScan>()).values_lists.cast());
        } else if is_a(node, NodeTag::T_SampleScan) {
            expressions.push((*plan.cast::<pg_sys::SampleScan>()).tablesample.cast());
        } else if is_a(node, NodeTag::T_TableFuncScan) {
            expressions.push((*plan.cast::<pg_sys::TableFuncScan>()).tablefunc.cast());
        } else if is_a(node, NodeTag::T_Limit) {
            let limit = plan.cast::<pg_sys::Limit>();
            expressions.extend([(*limit).limitOffset, (*limit).limitCount]);
        } else if is_a(node, NodeTag::T_WindowAgg) {
            let window = plan.cast::<pg_sys::WindowAgg>();
            expressions.extend([(*window).startOffset, (*window).endOffset]);
        } else if is_a(node, NodeTag::T_SubqueryScan) {
            children.push((*plan.cast::<pg_sys::SubqueryScan>()).subplan);
        } else if is_a(node, NodeTag::T_CteScan) {
            let id = (*plan.cast::<pg_sys::CteScan>()).ctePlanId;
            let plans = PgList::<pg_sys::Plan>::from_pg((*search.statement).subplans);
            if let Some(cte) = usize::try_from(id - 1)
                .ok()
                .and_then(|at| plans.get_ptr(at))
            {
                children.push(cte);
            }
        } else if is_a(node, NodeTag::T_Append) {
            lists.push((*plan.cast::<pg_sys::Append>()).appendplans);
        } else if is_a(node, NodeTag::T_MergeAppend) {
            lists.push((*plan.cast::<pg_sys::MergeAppend>()).mergeplans);
        } else if is_a(node, NodeTag::T_CustomScan) {
            lists.push((*plan.cast::<pg_sys::CustomScan>()).custom_plans);
        }
        for list in lists {
            children.extend(PgList::<pg_sys::Plan>::from_pg(list).iter_ptr());
        }
        let context = (search as *mut Search).cast();
        expressions.into_iter().any(|e| walker(e, context))
            || children.into_iter().any(|child| plan_calls(child, search))
    }
}
