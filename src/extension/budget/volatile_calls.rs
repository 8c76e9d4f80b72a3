//! A budgeted role's DP aggregation node, and the plan under it, call no volatile
//! function.
//!
//! What such a node evaluates runs once per row (its calls' arguments and filters, the
//! scans, joins and conditions under it) or once per group (its output list, its HAVING,
//! an ordered-set aggregate's direct arguments, a final function), before the groups it
//! releases are shuffled (held_groups.rs). A volatile function there may have side
//! effects that follow the rows: `nextval(...)` per group gave back the node's hash order,
//! which counted the groups it withheld (the red team's fifth round), and per row counted
//! the rows a filter kept; `clock_timestamp()` timed each group; `pg_notify`, a write to a
//! table or an advisory lock would count too. So a budgeted role's DP node that calls
//! one, itself or through a subquery, a domain's check or a non-DP aggregate's support
//! function, is refused when the plan starts, before any row: the refusal follows from
//! the plan alone. pg_exp_mech's own functions (the privacy units' random priorities),
//! and Citus's combine of a DP aggregate on the coordinator, are written to this model
//! and pass.

use super::identity::dp_aggregate;
use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::{is_a, PgList};
use std::ffi::{c_void, CStr};

/// pg_aggregate's support functions (attribute numbers, the same from PostgreSQL 11 to
/// 18): transition, final, combine, serial and deserial.
const AGGREGATE_FUNCTIONS: [i16; 5] = [4, 5, 6, 7, 8];

/// What the search is given and finds.
struct Search {
    statement: *mut pg_sys::PlannedStmt,
    /// This extension, whose own functions pass.
    extension: Oid,
    /// The volatile function found (`nextval` for an identity column's NextValueExpr).
    function: Option<String>,
}

/// The first volatile function that `plan` (a node finalizing DP aggregates) or a node
/// under it calls.
///
/// # Safety
/// `plan` must be a Plan of `statement`, a valid planned statement, in a transaction.
pub(super) unsafe fn volatile_call(
    plan: *mut pg_sys::Plan,
    statement: *mut pg_sys::PlannedStmt,
) -> Option<String> {
    // SAFETY: as the caller guarantees.
    unsafe {
        let mut search = Search {
            statement,
            extension: pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true),
            function: None,
        };
        plan_calls(plan, &mut search);
        search.function
    }
}

/// Whether `function` is volatile and not this extension's; if so, noted in the search.
///
/// # Safety
/// `context` must be the search's; `function` a function the plan calls (in the catalog).
unsafe fn note_volatile(function: Oid, context: *mut c_void) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe {
        if function == pg_sys::InvalidOid
            || pg_sys::func_volatile(function) as u8 != pg_sys::PROVOLATILE_VOLATILE
        {
            return false;
        }
        let search = &mut *(context as *mut Search);
        if pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == search.extension {
            return false;
        }
        let name = pg_sys::get_func_name(function);
        search.function = Some(if name.is_null() {
            format!("{}", u32::from(function))
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        });
        true
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn is_volatile(function: Oid, context: *mut c_void) -> bool {
    // SAFETY: check_functions_in_node passes the walker's context, the search.
    unsafe { note_volatile(function, context) }
}

/// Whether a non-DP aggregate has a volatile support function (they run per row or per
/// group; a DP aggregate's own are the draw, written to this model).
///
/// # Safety
/// As for [`note_volatile`]; `aggregate` must be an aggregate's oid.
unsafe fn aggregate_is_volatile(aggregate: Oid, context: *mut c_void) -> bool {
    // SAFETY: the tuple is released before returning; its attributes are regprocs.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::AGGFNOID as _,
            pg_sys::Datum::from(aggregate),
        );
        if tuple.is_null() {
            return false;
        }
        let mut found = false;
        for attribute in AGGREGATE_FUNCTIONS {
            let mut is_null = false;
            let datum = pg_sys::SysCacheGetAttr(
                pg_sys::SysCacheIdentifier::AGGFNOID as _,
                tuple,
                attribute,
                &mut is_null,
            );
            let function = Oid::from(datum.value() as u32);
            if !is_null && note_volatile(function, context) {
                found = true;
                break;
            }
        }
        pg_sys::ReleaseSysCache(tuple);
        found
    }
}

/// Whether a domain's constraints (those of the domains it is over included) call a
/// volatile function: each value coerced to it runs them.
///
/// # Safety
/// As for [`note_volatile`]; `domain` must be a type's oid.
unsafe fn domain_is_volatile(domain: Oid, context: *mut c_void) -> bool {
    // SAFETY: the reference lives in the current memory context, which releases it (its
    // callback) when reset; its constraints' expressions are planned expressions.
    unsafe {
        if !pg_sys::DomainHasConstraints(domain) {
            return false;
        }
        let reference = pg_sys::palloc0(std::mem::size_of::<pg_sys::DomainConstraintRef>())
            .cast::<pg_sys::DomainConstraintRef>();
        pg_sys::InitDomainConstraintRef(domain, reference, pg_sys::CurrentMemoryContext, false);
        PgList::<pg_sys::DomainConstraintState>::from_pg((*reference).constraints)
            .iter_ptr()
            .any(|constraint| walker((*constraint).check_expr.cast(), context))
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked; the context is the Search of
    // volatile_call; a SubPlan's plan_id numbers the statement's subplans from 1.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Aggref) {
            // A DP call, or Citus's combine of one on the coordinator.
            let aggref = node.cast::<pg_sys::Aggref>();
            let dp = dp_aggregate((*aggref).aggfnoid).is_some()
                || crate::extension::citus::combined_function(aggref).is_some();
            if !dp && aggregate_is_volatile((*aggref).aggfnoid, context) {
                return true;
            }
        } else if pg_sys::check_functions_in_node(node, Some(is_volatile), context) {
            return true;
        }
        let search = &mut *(context as *mut Search);
        if is_a(node, NodeTag::T_NextValueExpr) {
            search.function = Some("nextval".into());
            return true;
        }
        if is_a(node, NodeTag::T_CoerceToDomain)
            && domain_is_volatile((*node.cast::<pg_sys::CoerceToDomain>()).resulttype, context)
        {
            return true;
        }
        if is_a(node, NodeTag::T_SubPlan) {
            let id = (*node.cast::<pg_sys::SubPlan>()).plan_id;
            if plan_calls(subplan(search.statement, id), search) {
                return true;
            }
        }
        pg_sys::expression_tree_walker(node, Some(walker), context)
    }
}

/// The statement's subplan numbered `id` (from 1), or NULL.
///
/// # Safety
/// `statement` must be a valid planned statement.
unsafe fn subplan(statement: *mut pg_sys::PlannedStmt, id: i32) -> *mut pg_sys::Plan {
    // SAFETY: as the caller guarantees; its subplans are Plans.
    let plans = unsafe { PgList::<pg_sys::Plan>::from_pg((*statement).subplans) };
    usize::try_from(id - 1)
        .ok()
        .and_then(|at| plans.get_ptr(at))
        .unwrap_or(std::ptr::null_mut())
}

/// Whether a plan calls a volatile function: every expression a node of it evaluates,
/// its init-plans', its children's, and those of the subqueries and CTEs it runs.
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
        let mut expressions: Vec<*mut pg_sys::Node> = vec![
            (*plan).targetlist.cast(),
            (*plan).qual.cast(),
            (*plan).initPlan.cast(),
        ];
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
        } else if is_a(node, NodeTag::T_ForeignScan) {
            expressions.push((*plan.cast::<pg_sys::ForeignScan>()).fdw_exprs.cast());
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
            children.push(subplan(search.statement, id));
        } else if is_a(node, NodeTag::T_Append) {
            lists.push((*plan.cast::<pg_sys::Append>()).appendplans);
        } else if is_a(node, NodeTag::T_MergeAppend) {
            lists.push((*plan.cast::<pg_sys::MergeAppend>()).mergeplans);
        } else if is_a(node, NodeTag::T_BitmapAnd) {
            lists.push((*plan.cast::<pg_sys::BitmapAnd>()).bitmapplans);
        } else if is_a(node, NodeTag::T_BitmapOr) {
            lists.push((*plan.cast::<pg_sys::BitmapOr>()).bitmapplans);
        } else if is_a(node, NodeTag::T_CustomScan) {
            let custom = plan.cast::<pg_sys::CustomScan>();
            expressions.push((*custom).custom_exprs.cast());
            lists.push((*custom).custom_plans);
        }
        for list in lists {
            children.extend(PgList::<pg_sys::Plan>::from_pg(list).iter_ptr());
        }
        let context = (search as *mut Search).cast();
        expressions.into_iter().any(|e| walker(e, context))
            || children.into_iter().any(|child| plan_calls(child, search))
    }
}
