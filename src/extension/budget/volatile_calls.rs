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
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CStr};

/// pg_aggregate's support functions (attribute numbers, the same from PostgreSQL 11 to
/// 18): transition, final, combine, serial, deserial, and the moving aggregate's
/// transition, inverse and final (a window aggregate's).
const AGGREGATE_FUNCTIONS: [i16; 8] = [4, 5, 6, 7, 8, 9, 10, 11];

/// What the search is given and finds.
struct Search {
    statement: *mut pg_sys::PlannedStmt,
    /// This extension, whose own functions pass.
    extension: Oid,
    /// The volatile function found (`nextval` for an identity column's NextValueExpr), or
    /// the DP aggregate found running once per row or group of the node.
    function: Option<String>,
    nested: Option<&'static str>,
    /// How many of the enclosing plans run once per row or group (a correlated subquery,
    /// a nested loop's inner side, a recursive union's recursive side).
    looping: u32,
    /// Types already searched for domains with volatile checks, and what was found.
    types: HashMap<Oid, bool>,
    /// Functions whose result and OUT parameters' types were searched, and what was found.
    function_types: HashMap<Oid, bool>,
    /// The statement's init-plans by the parameters they set, once a parameter is met;
    /// and the init-plans searched already.
    init_plans: Option<HashMap<i32, i32>>,
    /// Plans searched already (a CTE or a subplan read many times is searched once: its
    /// references may double at every level of a query).
    searched_plans: HashSet<(usize, bool)>,
}

/// What a DP node, or the plan under it, runs once per row or group that it must not.
pub(super) enum PerRowCall {
    /// A volatile function.
    Volatile(String),
    /// A DP aggregate in a correlated subquery or a nested loop's inner side: each run is
    /// charged, and the charges would count the rows or groups that drive it (the red
    /// team's fifth round).
    NestedAggregate(&'static str),
}

/// The first volatile function that `plan` (a node finalizing DP aggregates) or a node
/// under it calls, or a DP aggregate that it runs once per row or group.
///
/// # Safety
/// `plan` must be a Plan of `statement`, a valid planned statement, in a transaction.
pub(super) unsafe fn volatile_call(
    plan: *mut pg_sys::Plan,
    statement: *mut pg_sys::PlannedStmt,
) -> Option<PerRowCall> {
    // SAFETY: as the caller guarantees.
    unsafe {
        let mut search = Search {
            statement,
            extension: pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true),
            function: None,
            nested: None,
            looping: 0,
            types: HashMap::new(),
            function_types: HashMap::new(),
            init_plans: None,
            searched_plans: HashSet::new(),
        };
        plan_calls(plan, &mut search);
        match (search.nested, search.function) {
            (Some(aggregate), _) => Some(PerRowCall::NestedAggregate(aggregate)),
            (None, Some(function)) => Some(PerRowCall::Volatile(function)),
            (None, None) => None,
        }
    }
}

/// Whether `function` is volatile and not this extension's; if so, noted in the search.
///
/// # Safety
/// `context` must be the search's; `function` a function the plan calls (in the catalog).
unsafe fn note_volatile(function: Oid, context: *mut c_void) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe {
        if function == pg_sys::InvalidOid {
            return false;
        }
        if pg_sys::func_volatile(function) as u8 != pg_sys::PROVOLATILE_VOLATILE {
            // A function that returns a domain, or has an OUT parameter of one, checks
            // what it returns (each call of an aggregate's transition function, too).
            return function_types_are_volatile(function, context);
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

/// Whether a function's result type or an OUT parameter's type holds a domain with a
/// volatile check.
///
/// # Safety
/// As for [`note_volatile`].
unsafe fn function_types_are_volatile(function: Oid, context: *mut c_void) -> bool {
    // SAFETY: the pg_proc tuple is released before returning; proallargtypes is an oid[]
    // without NULLs, detoasted before it is read.
    unsafe {
        if let Some(&found) = (*(context as *mut Search)).function_types.get(&function) {
            return found;
        }
        (*(context as *mut Search))
            .function_types
            .insert(function, false);
        let mut types = vec![pg_sys::get_func_rettype(function)];
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::PROCOID as _,
            pg_sys::Datum::from(function),
        );
        if !tuple.is_null() {
            let mut is_null = false;
            let datum = pg_sys::SysCacheGetAttr(
                pg_sys::SysCacheIdentifier::PROCOID as _,
                tuple,
                pg_sys::Anum_pg_proc_proallargtypes as _,
                &mut is_null,
            );
            if !is_null {
                let array =
                    pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<pg_sys::ArrayType>();
                let (mut elements, mut count) = (std::ptr::null_mut(), 0);
                pg_sys::deconstruct_array(
                    array,
                    pg_sys::OIDOID,
                    4,
                    true,
                    pg_sys::TYPALIGN_INT as std::ffi::c_char,
                    &mut elements,
                    std::ptr::null_mut(),
                    &mut count,
                );
                for at in 0..count.max(0) as usize {
                    types.push(Oid::from((*elements.add(at)).value() as u32));
                }
            }
            pg_sys::ReleaseSysCache(tuple);
        }
        let found = types
            .into_iter()
            .any(|type_oid| type_is_volatile(type_oid, context));
        (*(context as *mut Search))
            .function_types
            .insert(function, found);
        found
    }
}

/// The types of a row type's fields; its descriptor (reference-counted, from the type
/// cache) is released before the fields are searched, which may look up other row types.
///
/// # Safety
/// `descriptor` must be a reference-counted descriptor from the type cache.
unsafe fn field_types(descriptor: pg_sys::TupleDesc) -> Vec<Oid> {
    // SAFETY: as the caller guarantees; PgTupleDesc releases it when dropped.
    let descriptor = unsafe { pgrx::PgTupleDesc::from_pg(descriptor) };
    descriptor
        .iter()
        .filter(|attribute| !attribute.attisdropped)
        .map(|attribute| attribute.atttypid)
        .collect()
}

/// Whether an expression's value holds a domain with a volatile check: by its type, and
/// for an anonymous record (`ROW(column)`, a blessed row type) by its fields' types.
///
/// # Safety
/// As for [`note_volatile`]; `node` must be an expression.
unsafe fn expression_type_is_volatile(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: a row expression's arguments are expressions; a blessed record type's
    // descriptor is reference-counted and released when dropped.
    unsafe {
        if is_a(node, NodeTag::T_RowExpr) {
            let fields = PgList::<pg_sys::Node>::from_pg((*node.cast::<pg_sys::RowExpr>()).args);
            if fields
                .iter_ptr()
                .any(|field| type_is_volatile(pg_sys::exprType(field), context))
            {
                return true;
            }
        }
        let type_oid = pg_sys::exprType(node);
        if type_oid == pg_sys::RECORDOID {
            let modifier = pg_sys::exprTypmod(node);
            let descriptor = if modifier >= 0 {
                pg_sys::lookup_rowtype_tupdesc_noerror(type_oid, modifier, true)
            } else {
                std::ptr::null_mut()
            };
            if !descriptor.is_null() {
                return field_types(descriptor)
                    .into_iter()
                    .any(|field| type_is_volatile(field, context));
            }
        }
        type_is_volatile(type_oid, context)
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

/// Whether a value of `type_oid` may run a domain's checks that call a volatile function:
/// a domain's own (and those of the domains it is over), or, for an array, a composite, a
/// range or a multirange, those of its elements' types (an input function such as `array_in` or
/// `record_in`, or `jsonb_populate_record`, checks each element it makes).
///
/// # Safety
/// As for [`note_volatile`]; `type_oid` must be a type's oid.
unsafe fn type_is_volatile(type_oid: Oid, context: *mut c_void) -> bool {
    // SAFETY: the domain reference lives in the current memory context, which releases it
    // (its callback) when reset; its constraints' expressions are planned expressions;
    // the row type's descriptor is reference-counted and released when dropped.
    unsafe {
        // Ranges of ranges nest without end (35,000 levels of an analyst's temporary
        // types overflowed the stack: the red team's fourth round).
        pg_sys::check_stack_depth();
        let search = &mut *(context as *mut Search);
        if let Some(&found) = search.types.get(&type_oid) {
            return found;
        }
        search.types.insert(type_oid, false); // a type met again inside itself
        let kind = pg_sys::get_typtype(type_oid) as u8;
        let found = if kind == pg_sys::TYPTYPE_DOMAIN {
            let constraints = pg_sys::DomainHasConstraints(type_oid) && {
                let reference = pg_sys::palloc0(std::mem::size_of::<pg_sys::DomainConstraintRef>())
                    .cast::<pg_sys::DomainConstraintRef>();
                pg_sys::InitDomainConstraintRef(
                    type_oid,
                    reference,
                    pg_sys::CurrentMemoryContext,
                    false,
                );
                PgList::<pg_sys::DomainConstraintState>::from_pg((*reference).constraints)
                    .iter_ptr()
                    .any(|constraint| walker((*constraint).check_expr.cast(), context))
            };
            constraints || type_is_volatile(pg_sys::getBaseType(type_oid), context)
        } else if kind == pg_sys::TYPTYPE_COMPOSITE {
            field_types(pg_sys::lookup_rowtype_tupdesc(type_oid, -1))
                .into_iter()
                .any(|field| type_is_volatile(field, context))
        } else if kind == pg_sys::TYPTYPE_RANGE {
            type_is_volatile(pg_sys::get_range_subtype(type_oid), context)
        } else if kind == pg_sys::TYPTYPE_MULTIRANGE {
            type_is_volatile(pg_sys::get_multirange_range(type_oid), context)
        } else {
            let element = pg_sys::get_element_type(type_oid);
            element != pg_sys::InvalidOid && type_is_volatile(element, context)
        };
        (*(context as *mut Search)).types.insert(type_oid, found);
        found
    }
}

/// Whether the init-plan that sets parameter `id` (wherever the query level attached it,
/// above the DP node too) calls a volatile function.
///
/// # Safety
/// As for [`note_volatile`].
unsafe fn init_plan_is_volatile(id: i32, context: *mut c_void) -> bool {
    // SAFETY: the statement's plans and their init-plan lists (SubPlans, whose setParam
    // lists hold integers) are valid.
    unsafe {
        let search = &mut *(context as *mut Search);
        let statement = search.statement;
        let plans = search.init_plans.get_or_insert_with(|| {
            let mut plans = HashMap::new();
            let mut pending = vec![(*statement).planTree];
            pending.extend(PgList::<pg_sys::Plan>::from_pg((*statement).subplans).iter_ptr());
            while let Some(plan) = pending.pop() {
                if plan.is_null() {
                    continue;
                }
                for init_plan in PgList::<pg_sys::SubPlan>::from_pg((*plan).initPlan).iter_ptr() {
                    let set = (*init_plan).setParam;
                    for at in 0..if set.is_null() {
                        0
                    } else {
                        (*set).length as usize
                    } {
                        plans.insert((*(*set).elements.add(at)).int_value, (*init_plan).plan_id);
                    }
                }
                pending.extend(children(plan, statement));
            }
            plans
        });
        let Some(&plan_id) = plans.get(&id) else {
            return false;
        };
        plan_calls(subplan(statement, plan_id), search)
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
        pg_sys::check_stack_depth();
        if is_a(node, NodeTag::T_Aggref) {
            // A DP call, or Citus's combine of one on the coordinator.
            let aggref = node.cast::<pg_sys::Aggref>();
            let dp = dp_aggregate((*aggref).aggfnoid).or_else(|| {
                crate::extension::citus::combined_function(aggref).and_then(dp_aggregate)
            });
            let search = &mut *(context as *mut Search);
            if let (Some(aggregate), true) = (dp, search.looping > 0) {
                search.nested = Some(aggregate.name);
                return true;
            }
            let dp = dp.is_some();
            if !dp && aggregate_is_volatile((*aggref).aggfnoid, context) {
                return true;
            }
        } else if is_a(node, NodeTag::T_WindowFunc) && (*node.cast::<pg_sys::WindowFunc>()).winagg {
            // An aggregate over a window: its pg_proc row says IMMUTABLE, whatever its
            // support functions are.
            let function = (*node.cast::<pg_sys::WindowFunc>()).winfnoid;
            if dp_aggregate(function).is_none() && aggregate_is_volatile(function, context) {
                return true;
            }
        } else if pg_sys::check_functions_in_node(node, Some(is_volatile), context) {
            return true;
        }
        if is_a(node, NodeTag::T_NextValueExpr) {
            (*(context as *mut Search)).function = Some("nextval".into());
            return true;
        }
        // What makes a value of a type checks the domains in it.
        let makes_values = [
            NodeTag::T_CoerceToDomain,
            NodeTag::T_CoerceViaIO,
            NodeTag::T_ArrayCoerceExpr,
            NodeTag::T_FuncExpr,
            NodeTag::T_OpExpr,
            NodeTag::T_RowExpr,
            NodeTag::T_ConvertRowtypeExpr,
            NodeTag::T_FieldStore,
            NodeTag::T_SubscriptingRef,
        ];
        if makes_values.iter().any(|&tag| is_a(node, tag))
            && expression_type_is_volatile(node, context)
        {
            return true;
        }
        // A function's column list in FROM, and XMLTABLE's columns, make values of types
        // that no expression names (`jsonb_to_record(j) AS r(a domain)`).
        let column_types = if is_a(node, NodeTag::T_RangeTblFunction) {
            (*node.cast::<pg_sys::RangeTblFunction>()).funccoltypes
        } else if is_a(node, NodeTag::T_TableFunc) {
            (*node.cast::<pg_sys::TableFunc>()).coltypes
        } else {
            std::ptr::null_mut()
        };
        if !column_types.is_null() {
            for at in 0..(*column_types).length as usize {
                if type_is_volatile((*(*column_types).elements.add(at)).oid_value, context) {
                    return true;
                }
            }
        }
        if is_a(node, NodeTag::T_Param) {
            let parameter = node.cast::<pg_sys::Param>();
            if (*parameter).paramkind == pg_sys::ParamKind::PARAM_EXEC
                && init_plan_is_volatile((*parameter).paramid, context)
            {
                return true;
            }
        }
        let search = &mut *(context as *mut Search);
        if is_a(node, NodeTag::T_SubPlan) {
            let sub = node.cast::<pg_sys::SubPlan>();
            // An init-plan sets parameters, once per loop of its node; any other subplan
            // runs once per row or group that reaches it.
            let looping = (*sub).setParam.is_null() as u32;
            search.looping += looping;
            let found = plan_calls(subplan(search.statement, (*sub).plan_id), search);
            search.looping -= looping;
            if found {
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
    // SAFETY: nodes are cast after their tags are checked; their fields hold expressions.
    unsafe {
        if plan.is_null()
            || !search
                .searched_plans
                .insert((plan as usize, search.looping > 0))
        {
            return false;
        }
        pgrx::check_for_interrupts!();
        pg_sys::check_stack_depth();
        let node = plan.cast::<pg_sys::Node>();
        let mut expressions: Vec<*mut pg_sys::Node> = vec![
            (*plan).targetlist.cast(),
            (*plan).qual.cast(),
            (*plan).initPlan.cast(),
        ];
        // Every field that holds expressions: a domain's coercion is not volatile to
        // PostgreSQL, so its check may run in an index condition, a hash key or a run
        // condition (the red team's third round).
        let mut lists: Vec<*mut pg_sys::List> = Vec::new();
        if is_a(node, NodeTag::T_Result) {
            expressions.push((*plan.cast::<pg_sys::Result>()).resconstantqual);
        } else if is_a(node, NodeTag::T_NestLoop)
            || is_a(node, NodeTag::T_MergeJoin)
            || is_a(node, NodeTag::T_HashJoin)
        {
            lists.push((*plan.cast::<pg_sys::Join>()).joinqual);
            if is_a(node, NodeTag::T_MergeJoin) {
                lists.push((*plan.cast::<pg_sys::MergeJoin>()).mergeclauses);
            } else if is_a(node, NodeTag::T_HashJoin) {
                let join = plan.cast::<pg_sys::HashJoin>();
                lists.extend([(*join).hashclauses, (*join).hashkeys]);
            }
        } else if is_a(node, NodeTag::T_Hash) {
            lists.push((*plan.cast::<pg_sys::Hash>()).hashkeys);
        } else if is_a(node, NodeTag::T_Memoize) {
            lists.push((*plan.cast::<pg_sys::Memoize>()).param_exprs);
        } else if is_a(node, NodeTag::T_IndexScan) {
            let scan = plan.cast::<pg_sys::IndexScan>();
            lists.extend([
                (*scan).indexqual,
                (*scan).indexqualorig,
                (*scan).indexorderby,
                (*scan).indexorderbyorig,
            ]);
        } else if is_a(node, NodeTag::T_IndexOnlyScan) {
            let scan = plan.cast::<pg_sys::IndexOnlyScan>();
            lists.extend([
                (*scan).indexqual,
                (*scan).recheckqual,
                (*scan).indexorderby,
                (*scan).indextlist,
            ]);
        } else if is_a(node, NodeTag::T_BitmapIndexScan) {
            let scan = plan.cast::<pg_sys::BitmapIndexScan>();
            lists.extend([(*scan).indexqual, (*scan).indexqualorig]);
        } else if is_a(node, NodeTag::T_BitmapHeapScan) {
            lists.push((*plan.cast::<pg_sys::BitmapHeapScan>()).bitmapqualorig);
        } else if is_a(node, NodeTag::T_TidScan) {
            lists.push((*plan.cast::<pg_sys::TidScan>()).tidquals);
        } else if is_a(node, NodeTag::T_TidRangeScan) {
            lists.push((*plan.cast::<pg_sys::TidRangeScan>()).tidrangequals);
        } else if is_a(node, NodeTag::T_FunctionScan) {
            expressions.push((*plan.cast::<pg_sys::FunctionScan>()).functions.cast());
        } else if is_a(node, NodeTag::T_ValuesScan) {
            expressions.push((*plan.cast::<pg_sys::ValuesScan>()).values_lists.cast());
        } else if is_a(node, NodeTag::T_SampleScan) {
            expressions.push((*plan.cast::<pg_sys::SampleScan>()).tablesample.cast());
        } else if is_a(node, NodeTag::T_TableFuncScan) {
            expressions.push((*plan.cast::<pg_sys::TableFuncScan>()).tablefunc.cast());
        } else if is_a(node, NodeTag::T_ForeignScan) {
            let scan = plan.cast::<pg_sys::ForeignScan>();
            lists.extend([
                (*scan).fdw_exprs,
                (*scan).fdw_scan_tlist,
                (*scan).fdw_recheck_quals,
            ]);
        } else if is_a(node, NodeTag::T_CustomScan) {
            let scan = plan.cast::<pg_sys::CustomScan>();
            lists.extend([(*scan).custom_exprs, (*scan).custom_scan_tlist]);
        } else if is_a(node, NodeTag::T_Limit) {
            let limit = plan.cast::<pg_sys::Limit>();
            expressions.extend([(*limit).limitOffset, (*limit).limitCount]);
        } else if is_a(node, NodeTag::T_WindowAgg) {
            let window = plan.cast::<pg_sys::WindowAgg>();
            expressions.extend([(*window).startOffset, (*window).endOffset]);
            lists.extend([(*window).runCondition, (*window).runConditionOrig]);
        }
        expressions.extend(lists.into_iter().map(|list| list.cast::<pg_sys::Node>()));
        let context = (search as *mut Search).cast();
        if expressions.into_iter().any(|e| walker(e, context)) {
            return true;
        }
        // A nested loop runs its inner side once per outer row, a recursive union its
        // recursive side once per round.
        let rescanned = (is_a(node, NodeTag::T_NestLoop) || is_a(node, NodeTag::T_RecursiveUnion))
            .then(|| (*plan).righttree);
        children(plan, search.statement).into_iter().any(|child| {
            let looping = (Some(child) == rescanned) as u32;
            search.looping += looping;
            let found = plan_calls(child, search);
            search.looping -= looping;
            found
        })
    }
}

/// The plans a plan runs: its children, a subquery's, a CTE's, an Append's, an Agg's
/// chained phases.
///
/// # Safety
/// `plan` must be a Plan of `statement`.
unsafe fn children(
    plan: *mut pg_sys::Plan,
    statement: *mut pg_sys::PlannedStmt,
) -> Vec<*mut pg_sys::Plan> {
    // SAFETY: nodes are cast after their tags are checked; their lists hold Plans.
    unsafe {
        let node = plan.cast::<pg_sys::Node>();
        let mut children = vec![(*plan).lefttree, (*plan).righttree];
        let list = if is_a(node, NodeTag::T_SubqueryScan) {
            children.push((*plan.cast::<pg_sys::SubqueryScan>()).subplan);
            std::ptr::null_mut()
        } else if is_a(node, NodeTag::T_CteScan) {
            children.push(subplan(
                statement,
                (*plan.cast::<pg_sys::CteScan>()).ctePlanId,
            ));
            std::ptr::null_mut()
        } else if is_a(node, NodeTag::T_Append) {
            (*plan.cast::<pg_sys::Append>()).appendplans
        } else if is_a(node, NodeTag::T_MergeAppend) {
            (*plan.cast::<pg_sys::MergeAppend>()).mergeplans
        } else if is_a(node, NodeTag::T_BitmapAnd) {
            (*plan.cast::<pg_sys::BitmapAnd>()).bitmapplans
        } else if is_a(node, NodeTag::T_BitmapOr) {
            (*plan.cast::<pg_sys::BitmapOr>()).bitmapplans
        } else if is_a(node, NodeTag::T_CustomScan) {
            (*plan.cast::<pg_sys::CustomScan>()).custom_plans
        } else if is_a(node, NodeTag::T_Agg) {
            // Grouping sets' other phases, run by this node.
            (*plan.cast::<pg_sys::Agg>()).chain
        } else {
            std::ptr::null_mut()
        };
        children.extend(PgList::<pg_sys::Plan>::from_pg(list).iter_ptr());
        children.retain(|child| !child.is_null());
        children
    }
}
