//! DP aggregates over Citus tables, finalized on the coordinator only.
//!
//! Before Citus plans a statement whose DP aggregates read Citus tables ([`prepare`]),
//! and after ([`Prepared::finish`]):
//! - Citus splits the aggregates into partial states on the workers and a combine on the
//!   coordinator where it can (combine.rs: every DP call with fixed types), else ships
//!   the rows (`citus.allow_aggregate_worker_combine_on_internal_types` off: its split
//!   checks argument types exactly, which our polymorphic forms fail); it must not route
//!   the statement whole to one worker (`citus.enable_fast_path_router_planner`, and
//!   `citus.enable_router_execution` where Citus can do without), for this planning only;
//! - each call's parameters become constants, evaluated here once, and its row values are
//!   marked for the workers' statistics (fragments.rs);
//! - the bounds of privacy units (L, m, Δ0) become constants of the plan: the workers,
//!   which bound each unit next to its rows when the table is distributed by its unit
//!   column, would read their own settings, and the coordinator charges with its own;
//! - each plain column in GROUP BY becomes `COALESCE(column, column)`, which Citus does
//!   not take for the distribution column, so it never pushes the grouping, and with it
//!   the final functions, down to the workers;
//! - after planning, each call of the statement's own level must be finalized by the
//!   coordinator's plan (else it is refused; a call in a subquery may be planned apart,
//!   when Citus plans the subquery as a statement of its own, through this hook); the
//!   parameters of each call the plan finalizes, which Citus ships from the workers as
//!   columns, are the statement's constants again, and each of Citus's combines gets its
//!   call registered (combine.rs): the metering hook then charges the statement once, on
//!   the coordinator's ledger, from the plan, as on a single server.
//!
//! A worker never finalizes a DP aggregate: its planner hook refuses every DP call
//! (mod.rs), and a final function runs only in a node the metering hook metered. So
//! there is no channel for an analyst to forge.

use super::combine;
use crate::error::Error;
use crate::extension::arguments::is_same_on_every_row;
use crate::extension::budget::dp_aggregate;
use crate::extension::{guc, raise, versions};
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;
use pgrx::{is_a, PgList};
use std::ffi::{c_void, CStr};

/// Citus splits an aggregate with an internal state into partial states on the workers
/// (combine.rs) only if this is on: on when every DP call has fixed types, which Citus's
/// split checks; else off, and Citus ships the rows to the coordinator.
const SPLIT: &CStr = c"citus.allow_aggregate_worker_combine_on_internal_types";

/// Off for every DP statement: the fast path routes a statement whole to one worker.
const FAST_PATH: &CStr = c"citus.enable_fast_path_router_planner";

/// Off for every DP statement: a repartition job's fragments read the rows of a join's
/// sides as queries of Citus's own, which no marker reaches (fragments.rs).
const REPARTITION: &CStr = c"citus.enable_repartition_joins";

/// Off for a statement that finalizes DP calls itself and holds no other query: else
/// Citus would route it whole to the one worker that holds its rows. Citus needs the
/// router to plan the rest of a statement whose subqueries it planned apart (a view's
/// query: planned through this hook as a statement of its own).
const ROUTER: &CStr = c"citus.enable_router_execution";

/// Parse locations that tag the top-level DP calls while Citus plans (below the SEEN
/// mark of units/mod.rs, so no parsed call has one).
const FIRST_TAG: i32 = -30_261_125;

/// One top-level DP call: its tag and a copy of it as the statement wrote it.
struct TaggedCall {
    tag: i32,
    original: *mut pg_sys::Aggref,
    /// A call of the statement's own level, which the coordinator's plan must finalize
    /// (one below may be planned apart, as a subplan of Citus, whose planning finishes it).
    top: bool,
    found: bool,
}

/// What [`prepare`] changed, to be finished once Citus has planned.
pub struct Prepared {
    calls: Vec<TaggedCall>,
    settings_level: i32,
}

/// What a census of a statement's DP calls found: each call with the query level that
/// holds it (0 for the statement's own), and the levels that finalize DP calls.
#[derive(Default)]
struct Census {
    /// Whether the statement holds another query (a subquery, a WITH query, a sublink).
    nested: bool,
    /// Every query of the statement, its own first.
    all: Vec<*mut pg_sys::Query>,
    levels: Vec<*mut pg_sys::Query>,
    calls: Vec<(*mut pg_sys::Aggref, usize)>,
    grouping: Vec<*mut pg_sys::Query>,
}

/// Prepares `query`, which finalizes DP aggregates over Citus tables, for Citus's
/// planner (see the module's comment): the query to plan, and what to finish after.
///
/// # Safety
/// `query` must be a rewritten query about to be planned, which the planner may modify.
pub unsafe fn prepare(
    query: *mut pg_sys::Query,
    bound: pg_sys::ParamListInfo,
) -> (*mut pg_sys::Query, Prepared) {
    refuse_shadowing_functions();
    // SAFETY: as the caller guarantees; the copies replace the query.
    let query = unsafe { super::fragments::fix_polymorphic_hashes(fix_unit_bounds(query)) };
    let mut census = Census {
        levels: vec![query],
        all: vec![query],
        ..Census::default()
    };
    // SAFETY: the walker's context is the census; the query is valid.
    unsafe {
        pg_sys::query_tree_walker(
            query,
            Some(census_walker),
            (&mut census as *mut Census).cast(),
            0,
        );
    }
    let mut calls = Vec::new();
    let marker = crate::extension::units::functions().fragment;
    for (number, &(aggref, depth)) in census.calls.iter().enumerate() {
        let tag = FIRST_TAG - number as i32;
        // SAFETY: an Aggref of the query; the copy lives in the planner's memory.
        unsafe {
            super::fragments::fix_parameters(aggref, bound, marker);
            (*aggref).location = tag;
            calls.push(TaggedCall {
                tag,
                original: pg_sys::copyObjectImpl(aggref.cast()).cast(),
                top: depth == 0,
                found: false,
            });
        }
    }
    let others: Vec<_> = census
        .all
        .iter()
        .copied()
        .filter(|level| !census.grouping.contains(level))
        .collect();
    // SAFETY: levels of the query.
    unsafe { super::fragments::mark_levels(&others, marker) };
    for level in census.grouping {
        // SAFETY: a level of the query.
        unsafe { wrap_group_keys(level) };
    }
    // SAFETY: the copies of the calls, made above.
    unsafe { refuse_ambiguous_combines(&calls) };
    // SAFETY: a new GUC nesting level, unwound by finish or by the transaction's abort.
    let settings_level = unsafe { pg_sys::NewGUCNestLevel() };
    // SAFETY: the copies are of DP calls, whose aggregates exist.
    let split = calls
        .iter()
        .all(|call| unsafe { combine::has_fixed_types((*call.original).aggfnoid) });
    let router = (!census.nested && calls.iter().any(|call| call.top)).then_some((ROUTER, c"off"));
    let settings = [
        (SPLIT, if split { c"on" } else { c"off" }),
        (FAST_PATH, c"off"),
        (REPARTITION, c"off"),
    ];
    for (name, value) in settings.into_iter().chain(router) {
        // SAFETY: user-settable settings of Citus, set for this level only.
        unsafe {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
        }
    }
    (
        query,
        Prepared {
            calls,
            settings_level,
        },
    )
}

/// Refuses, before anything is charged, where a function that is not pg_exp_mech's has the
/// name of one that pg_exp_mech writes into the queries Citus sends to the workers: they
/// are called there by name (each with one fixed signature, so no overload is a better
/// match), and another function of the name with extra defaulted arguments would make
/// the call ambiguous, failing on the workers after the statement was charged.
fn refuse_shadowing_functions() {
    let others = Spi::get_one::<String>(
        "SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.oid) FROM pg_catalog.pg_proc p
          WHERE p.pronamespace = (SELECT extnamespace FROM pg_catalog.pg_extension WHERE extname = 'pg_exp_mech')
            AND p.proname IN ('dp_fragment', 'dp_unit_of_null', 'dp_unit_share', 'dp_unit_score',
                              'dp_unit_numeric_score', 'dp_unit_total', 'dp_unit_group_order',
                              'dp_unit_priority')
            AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                             WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                               AND d.objid = p.oid AND d.deptype = 'e')",
    );
    if let Ok(Some(others)) = others {
        raise(Error::Distributed {
            reason: format!("{others} in pg_exp_mech's schema would stand for pg_exp_mech's own functions in the queries Citus sends to the workers: drop them, and let no role but its owner create functions in that schema"),
        });
    }
}

/// The bounds of privacy units as they are now.
struct Bounds {
    functions: [(pg_sys::Oid, i64); 3],
}

/// A copy of `query` whose calls of dp_max_groups_per_unit(), dp_max_values_per_unit()
/// and dp_max_items_per_unit() are constants: what the coordinator charges for and what
/// the workers filter with then agree, wherever Citus evaluates them.
///
/// # Safety
/// `query` must be a valid Query.
unsafe fn fix_unit_bounds(query: *mut pg_sys::Query) -> *mut pg_sys::Query {
    let known = crate::extension::units::functions();
    let mut bounds = Bounds {
        functions: [
            (known.max_groups, guc::max_groups_per_unit()),
            (known.max_values, guc::max_values_per_unit()),
            (known.max_items, guc::max_items_per_unit()),
        ],
    };
    // SAFETY: the mutator's context is `bounds`.
    unsafe { versions::mutate_query(query, bounds_mutator, (&mut bounds as *mut Bounds).cast()) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn bounds_mutator(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> *mut pg_sys::Node {
    // SAFETY: the context is fix_unit_bounds's Bounds; nodes are cast after their tags
    // are checked.
    unsafe {
        if node.is_null() {
            return node;
        }
        if is_a(node, NodeTag::T_Query) {
            return versions::mutate_query(node.cast(), bounds_mutator, context).cast();
        }
        if is_a(node, NodeTag::T_FuncExpr) {
            let function = (*(node as *mut pg_sys::FuncExpr)).funcid;
            let bounds = &*(context as *mut Bounds);
            if let Some(&(_, value)) = bounds.functions.iter().find(|(oid, _)| *oid == function) {
                return crate::extension::units::int8(value).cast();
            }
        }
        versions::mutate_children(node, bounds_mutator, context)
    }
}

impl Prepared {
    /// Restores Citus's settings, checks that the coordinator finalizes every call in
    /// `planned`, and gives each its parameters as the statement wrote them.
    ///
    /// # Safety
    /// `planned` must be the plan Citus made of the prepared query.
    pub unsafe fn finish(mut self, planned: *mut pg_sys::PlannedStmt) {
        // SAFETY: the level prepare opened, closed before anything else runs.
        unsafe { pg_sys::AtEOXact_GUC(true, self.settings_level) };
        // SAFETY: the plan tree Citus returned, walked where the coordinator runs it.
        unsafe {
            let mut walk = PlanWalk {
                calls: &mut self.calls,
                combines: Vec::new(),
            };
            walk_plan((*planned).planTree, &mut walk);
            for plan in PgList::<pg_sys::Plan>::from_pg((*planned).subplans).iter_ptr() {
                walk_plan(plan, &mut walk);
            }
            // Citus builds its combines anew (no parse location to tell them apart), in
            // the order of the statement's calls (target list, then HAVING): the n-th
            // combine of an aggregate is its n-th call of the statement's level. A wrong
            // match could only be refused: the final function checks that the rows'
            // epsilon is the one charged.
            let PlanWalk { calls, combines } = walk;
            for combine in combines {
                let call = calls.iter_mut().find(|call| {
                    call.top && !call.found && combine::register(combine, call.original)
                });
                match call {
                    Some(call) => call.found = true,
                    None => raise(Error::Distributed {
                        reason: "Citus combines a DP aggregate that pg_exp_mech cannot match with a call of the statement".into(),
                    }),
                }
            }
        }
        // A generic plan of a prepared statement that Citus could not plan without the
        // parameters' values: a scan that raises Citus's error if it ever runs (Citus
        // prices it out of use, and PostgreSQL plans each execution with the values).
        // SAFETY: the plan Citus returned has a plan tree; a CustomScan has its methods.
        unsafe {
            let tree = (*planned).planTree;
            if is_a(tree.cast(), NodeTag::T_CustomScan) {
                let methods = (*(tree as *mut pg_sys::CustomScan)).methods;
                if !methods.is_null()
                    && CStr::from_ptr((*methods).CustomName) == c"Citus Delayed Error"
                {
                    return;
                }
            }
        }
        if let Some(call) = self.calls.iter().find(|call| call.top && !call.found) {
            // SAFETY: the copy made in prepare.
            let name = dp_aggregate(unsafe { (*call.original).aggfnoid })
                .map_or("a DP aggregate", |a| a.name);
            raise(Error::Distributed {
                reason: format!("Citus planned {name} outside the coordinator's own plan (on its workers, or as a task of its own), where pg_exp_mech cannot meter it before it runs; group by a column that is not the distribution column, read the table directly rather than through a WITH query, or aggregate a local table"),
            });
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn census_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is prepare's Census; nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        let census = &mut *(context as *mut Census);
        if is_a(node, NodeTag::T_Query) {
            census.nested = true;
            census.all.push(node.cast());
            census.levels.push(node.cast());
            pg_sys::query_tree_walker(node.cast(), Some(census_walker), context, 0);
            census.levels.pop();
            return false;
        }
        if is_a(node, NodeTag::T_Aggref) {
            let aggref = node as *mut pg_sys::Aggref;
            if dp_aggregate((*aggref).aggfnoid).is_some() {
                // The level that finalizes the call (an outer one's, in a sublink).
                let depth = census.levels.len() - 1 - (*aggref).agglevelsup as usize;
                let level = census.levels[depth];
                census.calls.push((aggref, depth));
                if !census.grouping.contains(&level) {
                    census.grouping.push(level);
                }
            }
        }
        pg_sys::expression_tree_walker(node, Some(census_walker), context)
    }
}

/// Writes each plain column of a level's GROUP BY as `COALESCE(column, column)`, which is
/// the column's value: Citus pushes a grouping by the distribution column (and the
/// aggregates with it) down to the workers, and takes only a bare column for it (the
/// planner folds a relabelling to the same type away, not this). The written entry is the
/// group's output; other references to the column read it from a row of the group,
/// which has the same value. No function call: Citus sends it to the workers as text,
/// where an analyst's overload could answer a call.
///
/// # Safety
/// `query` must be a valid Query.
unsafe fn wrap_group_keys(query: *mut pg_sys::Query) {
    // SAFETY: group clauses point into the target list by their sortgroupref; nodes made
    // with PostgreSQL's constructors.
    unsafe {
        for clause in PgList::<pg_sys::SortGroupClause>::from_pg((*query).groupClause).iter_ptr() {
            let entry = pg_sys::get_sortgroupclause_tle(clause, (*query).targetList);
            let expression = (*entry).expr as *mut pg_sys::Node;
            if !is_a(expression, NodeTag::T_Var) {
                continue;
            }
            let coalesce = pg_sys::palloc0(std::mem::size_of::<pg_sys::CoalesceExpr>())
                as *mut pg_sys::CoalesceExpr;
            (*coalesce).xpr.type_ = NodeTag::T_CoalesceExpr;
            (*coalesce).coalescetype = pg_sys::exprType(expression);
            (*coalesce).coalescecollid = pg_sys::exprCollation(expression);
            let copy = pg_sys::copyObjectImpl(expression.cast()) as *mut pg_sys::Node;
            (*coalesce).args = pg_sys::lappend(
                pg_sys::lappend(std::ptr::null_mut(), expression.cast()),
                copy.cast(),
            );
            (*coalesce).location = -1;
            (*entry).expr = coalesce.cast();
            // The column elsewhere at this level (outside aggregates) reads the group's
            // key too: Citus sends the workers `(column)::text ... GROUP BY COALESCE(...)`
            // otherwise, which they refuse.
            let mut key = (expression, coalesce as *mut pg_sys::Node);
            let context = (&mut key as *mut (*mut pg_sys::Node, *mut pg_sys::Node)).cast();
            for other in PgList::<pg_sys::TargetEntry>::from_pg((*query).targetList).iter_ptr() {
                if other != entry {
                    (*other).expr = key_mutator((*other).expr.cast(), context).cast();
                }
            }
            (*query).havingQual = key_mutator((*query).havingQual, context);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn key_mutator(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> *mut pg_sys::Node {
    // SAFETY: the context is wrap_group_keys's (column, key) pair; aggregates' arguments
    // and other queries are left as they are.
    unsafe {
        if node.is_null() || is_a(node, NodeTag::T_Aggref) || is_a(node, NodeTag::T_Query) {
            return node;
        }
        let (column, key) = *(context as *mut (*mut pg_sys::Node, *mut pg_sys::Node));
        if pg_sys::equal(node.cast(), column.cast()) {
            return pg_sys::copyObjectImpl(key.cast()).cast();
        }
        versions::mutate_children(node, key_mutator, context)
    }
}

/// Refuses two calls at the statement's level of one aggregate with different
/// parameters, when Citus would split them: its combines carry no trace of their calls,
/// and are matched with them in order (finish), which the planner may change (a window's
/// ORDER BY over one of them). With equal parameters any match is right: each state
/// carries its own rows.
///
/// # Safety
/// `calls` must hold the copies prepare made.
unsafe fn refuse_ambiguous_combines(calls: &[TaggedCall]) {
    // SAFETY: the copies are Aggrefs whose arguments are TargetEntries.
    unsafe {
        let parameters = |call: &TaggedCall| -> Vec<*mut pg_sys::Node> {
            PgList::<pg_sys::TargetEntry>::from_pg((*call.original).args)
                .iter_ptr()
                .map(|entry| (*entry).expr.cast::<pg_sys::Node>())
                .filter(|&expression| is_a(expression, NodeTag::T_Const))
                .collect()
        };
        let top: Vec<&TaggedCall> = calls.iter().filter(|call| call.top).collect();
        for (i, first) in top.iter().enumerate() {
            for second in &top[i + 1..] {
                let function = (*first.original).aggfnoid;
                if function != (*second.original).aggfnoid || !combine::has_fixed_types(function) {
                    continue;
                }
                let (a, b) = (parameters(first), parameters(second));
                let same = a.len() == b.len()
                    && a.iter()
                        .zip(&b)
                        .all(|(&x, &y)| pg_sys::equal(x.cast(), y.cast()));
                if !same {
                    let name = dp_aggregate(function).map_or("a DP aggregate", |a| a.name);
                    raise(Error::Distributed {
                        reason: format!("over Citus tables, the calls of {name} in one statement must have the same parameters (Citus combines them without telling them apart): run them in separate statements, or use dp_quantiles for several alphas"),
                    });
                }
            }
        }
    }
}

/// What a walk of the coordinator's plan finds.
struct PlanWalk<'a> {
    calls: &'a mut Vec<TaggedCall>,
    /// Citus's combines of DP aggregates, in the plan's order.
    combines: Vec<*mut pg_sys::Aggref>,
}

/// Finds the tagged calls, and Citus's combines, in the coordinator's plan below `plan`.
///
/// # Safety
/// `plan` must be NULL or a node of a finished plan.
unsafe fn walk_plan(plan: *mut pg_sys::Plan, walk: &mut PlanWalk) {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if plan.is_null() {
            return;
        }
        for list in [(*plan).targetlist, (*plan).qual] {
            pg_sys::expression_tree_walker(
                list.cast(),
                Some(restore_parameters),
                (walk as *mut PlanWalk).cast(),
            );
        }
        walk_plan((*plan).lefttree, walk);
        walk_plan((*plan).righttree, walk);
        let children = if is_a(plan.cast(), NodeTag::T_Append) {
            (*(plan as *mut pg_sys::Append)).appendplans
        } else if is_a(plan.cast(), NodeTag::T_MergeAppend) {
            (*(plan as *mut pg_sys::MergeAppend)).mergeplans
        } else if is_a(plan.cast(), NodeTag::T_SubqueryScan) {
            walk_plan((*(plan as *mut pg_sys::SubqueryScan)).subplan, walk);
            std::ptr::null_mut()
        } else {
            std::ptr::null_mut()
        };
        for child in PgList::<pg_sys::Plan>::from_pg(children).iter_ptr() {
            walk_plan(child, walk);
        }
    }
}

/// A tagged call of ours in the coordinator's plan: its parameters (arguments the same on
/// every row) become the statement's expressions again, in place of the columns Citus
/// pulled for them; its location becomes the planner hook's mark. Citus's combines are
/// noted, to be matched with their calls.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn restore_parameters(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is walk_plan's PlanWalk; nodes are cast after their tags are
    // checked; the originals are prepare's copies.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Aggref) {
            let aggref = node as *mut pg_sys::Aggref;
            let walk = &mut *(context as *mut PlanWalk);
            if combine::combined_function(aggref).is_some() {
                walk.combines.push(aggref);
                return false;
            }
            if let Some(call) = walk.calls.iter_mut().find(|call| {
                call.tag == (*aggref).location && (*call.original).aggfnoid == (*aggref).aggfnoid
            }) {
                let originals = PgList::<pg_sys::TargetEntry>::from_pg((*call.original).args);
                let arguments = PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args);
                if originals.len() == arguments.len() {
                    for (original, argument) in originals.iter_ptr().zip(arguments.iter_ptr()) {
                        let expression = (*original).expr as *mut pg_sys::Node;
                        if is_same_on_every_row(expression) && !contains_columns(expression) {
                            let copy = pg_sys::copyObjectImpl(expression.cast());
                            (*argument).expr = pg_sys::expression_planner(copy.cast());
                        }
                    }
                    call.found = true;
                }
                (*aggref).location = crate::extension::units::SEEN;
            }
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(restore_parameters), context)
    }
}

/// Whether an expression reads a column of any query level (a correlated one included).
///
/// # Safety
/// `node` must be a valid expression.
unsafe fn contains_columns(node: *mut pg_sys::Node) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe { !pg_sys::pull_vars_of_level(node, 0).is_null() || contains_outer_columns(node) }
}

/// # Safety
/// `node` must be a valid expression.
unsafe fn contains_outer_columns(node: *mut pg_sys::Node) -> bool {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
        // SAFETY: tags are checked before casts.
        unsafe {
            if node.is_null() {
                return false;
            }
            if is_a(node, NodeTag::T_Var) || is_a(node, NodeTag::T_PlaceHolderVar) {
                return true;
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe { walker(node, std::ptr::null_mut()) }
}
