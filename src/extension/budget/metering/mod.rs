//! Metering from the plan: what a statement is charged follows from its plan and its
//! parameters, never from its rows (../shared/PRIVACY.md, section 8).
//!
//! At `ExecutorStart`, before any row is read, the hook finds every aggregation node that
//! finalizes a DP aggregate, reads each call's parameters from the plan (so that a
//! parallel plan's Finalize Aggregate, whose arguments the planner replaced, still knows
//! them), validates them, and charges the session's login role for all of them at once:
//!
//! - one charge per DP aggregate call per node, whatever the number of groups (one row is
//!   in one group: parallel composition), times the node's grouping sets;
//! - a node that may run in every process of a parallel plan (a complete aggregation
//!   below a Gather) is charged once per process that may run it, and each later loop of
//!   the Gather pays for the workers it starts;
//! - each later loop of a node (a rescan) is charged when it starts, in the process that
//!   runs it; a call whose ε or δ is set by the outer row (a correlated subquery) is read
//!   and charged at the start of every loop, the first included;
//! - a budgeted role is refused, before any row is read, an instrumented execution
//!   (EXPLAIN ANALYZE, auto_explain), window use of DP aggregates, and a DP node that
//!   or a plan under it that calls a volatile function (volatile_calls.rs).
//!
//! The final functions take their parameters from here ([`plan_arguments`]) and refuse to
//! run in a node this hook did not meter.

use super::charge::{charge, role_name, session_is_budgeted, session_role, Release};
use super::cost::{charged_arguments, cost, evaluate, release_of, Cost};
use super::held_groups::{may_stream, HeldGroups};
use super::identity::{dp_aggregate, forget_identities};
use super::late_start;
use super::statistics::{below_dp_nodes, count_again, is_silenced, Silence};
use super::volatile_calls::{volatile_call, PerRowCall};
use crate::error::Error;
use crate::extension::arguments::Argument;
use crate::extension::forms::Aggregate;
use crate::extension::{raise, OrRaise};
use crate::extension::{spellings, units};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgList;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::rc::Rc;

/// A node that finalizes DP aggregates: its own ExecProcNode, what each loop releases,
/// and how many loops this process has started.
struct Meter {
    original: pg_sys::ExecProcNodeMtd,
    /// Known when the plan started: the first loop is paid then, each later one at its
    /// start.
    releases: Vec<Release>,
    /// ε or δ set by the outer row of each loop (a correlated subquery's parameter):
    /// evaluated and paid at the start of every loop, the first included.
    per_loop: Vec<LoopCall>,
    loops: u64,
    /// Where a budgeted role's node that may stream holds its groups (held_groups.rs).
    held: Option<Rc<RefCell<HeldGroups>>>,
}

/// A DP aggregate call: the address of the node that finalizes it, and its aggno there.
type Call = (usize, i32);

/// A DP aggregate call whose ε or δ is a parameter of the loop.
#[derive(Clone)]
struct LoopCall {
    /// Where its arguments of the current loop are kept, for the final function.
    call: Option<Call>,
    aggregate: &'static Aggregate,
    arity: usize,
    /// The call's argument expressions (the partial aggregation's, in a parallel plan).
    expressions: Vec<*mut pg_sys::Expr>,
    /// Grouping sets times processes.
    evaluations: u32,
}

thread_local! {
    /// The arguments of each DP aggregate call of the running plans, by the address of
    /// the node that finalizes it and the call's number in it (not by the Aggref, which
    /// overlapping executions of one cached plan share).
    static ARGUMENTS: RefCell<HashMap<Call, Rc<[Argument]>>> = RefCell::new(HashMap::new());
    /// The metered nodes of the running plans, by the address of their PlanState.
    static METERS: RefCell<HashMap<usize, Meter>> = RefCell::new(HashMap::new());
    /// How many plans with DP aggregates this process has started and not yet ended.
    static RUNNING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether a plan with DP aggregates is running in this process (from its start until
/// its memory goes: a cursor's plan runs until the cursor closes).
pub fn dp_plan_running() -> bool {
    RUNNING.with(|running| running.get() > 0)
}

static mut PREVIOUS_EXECUTOR_START: pg_sys::ExecutorStart_hook_type = None;

/// Installs the executor hook; called from _PG_init.
pub fn install_metering() {
    // SAFETY: _PG_init runs once per process, single-threaded, before any statement
    // runs: nothing else reads or writes the hooks meanwhile. The callback lives as long
    // as the library.
    unsafe {
        late_start::install();
        PREVIOUS_EXECUTOR_START = pg_sys::ExecutorStart_hook;
        pg_sys::ExecutorStart_hook = Some(metered_executor_start);
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            Some(forget_identities),
            pg_sys::Datum::from(0usize),
        );
    }
    super::temporary_files::install_refusal_cache();
}

/// The arguments the plan gives the DP aggregate `aggref` finalized by `node`, when a
/// metered plan holds it.
///
/// # Safety
/// `aggref` must be a valid Aggref.
pub unsafe fn plan_arguments(
    node: *mut c_void,
    aggref: *mut pg_sys::Aggref,
) -> Option<Rc<[Argument]>> {
    // SAFETY: as the caller guarantees.
    let call = (node as usize, unsafe { (*aggref).aggno });
    ARGUMENTS.with(|arguments| arguments.borrow().get(&call).cloned())
}

/// Whether `node` (an aggregate's context) is a node this process metered.
pub fn is_metered(node: *mut c_void) -> bool {
    METERS.with(|meters| meters.borrow().contains_key(&(node as usize)))
}

#[pg_guard]
unsafe extern "C-unwind" fn metered_executor_start(
    query: *mut pg_sys::QueryDesc,
    eflags: std::ffi::c_int,
) {
    // SAFETY: PostgreSQL calls the hook with a query descriptor ready to start; the
    // previous hook takes the same arguments.
    unsafe {
        count_again();
        // A statement starts (no plan with DP aggregates runs around it): the privacy
        // units' settings and group key are fixed for everything it runs.
        if !dp_plan_running() {
            units::new_statement();
        }
        // A budgeted role's DP plan opens its relations uncounted (statistics.rs).
        let _silence = is_silenced(query).then(|| Silence::begin(query));
        match PREVIOUS_EXECUTOR_START {
            Some(previous) => {
                pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(query, eflags))
            }
            None => pg_sys::standard_ExecutorStart(query, eflags),
        }
        if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 != 0 {
            return; // Plain EXPLAIN: nothing runs, nothing is released.
        }
        meter(query);
    }
}

/// Meters, when its run starts, a query whose ExecutorStart ran before this library was
/// loaded (late_start.rs).
///
/// # Safety
/// `query` must be a started query descriptor, about to run.
pub unsafe fn meter_started_unhooked(query: *mut pg_sys::QueryDesc) {
    // SAFETY: as the caller guarantees.
    unsafe {
        if late_start::missed((*query).estate) {
            meter(query);
        }
    }
}

/// What the walk of a plan found.
#[derive(Default)]
struct Found {
    /// Every release of the plan's first loops, with its multiplicity folded in.
    releases: Vec<Release>,
    /// A DP aggregate used as a window function.
    window: Option<&'static str>,
    /// A volatile function a DP node or the plan under it calls (volatile_calls.rs).
    volatile_call: Option<PerRowCall>,
    /// The addresses registered for this query, removed when its memory goes (None: no
    /// DP aggregate, nothing metered).
    registered: Option<*mut Registered>,
    visited: HashSet<usize>,
    estate: *mut pg_sys::EState,
}

/// The addresses a query registered in ARGUMENTS and METERS.
#[derive(Default)]
struct Registered {
    calls: Vec<Call>,
    nodes: Vec<usize>,
}

impl Found {
    /// Where to note what this query registers, forgotten with the query's memory (at
    /// ExecutorEnd, or on error, even one raised during this walk).
    fn registered(&mut self) -> &mut Registered {
        let estate = self.estate;
        // SAFETY: the record is the one forget_when_done leaked for this query, alive
        // until the query's memory goes, after this walk.
        unsafe {
            &mut **self
                .registered
                .get_or_insert_with(|| forget_when_done(estate))
        }
    }
}

/// # Safety
/// `query` must be a query descriptor that standard_ExecutorStart has just started.
unsafe fn meter(query: *mut pg_sys::QueryDesc) {
    // SAFETY: a started query has its estate and plan state tree.
    unsafe {
        let estate = (*query).estate;
        let planstate = (*query).planstate;
        if estate.is_null() || planstate.is_null() {
            return;
        }
        late_start::note_metered(estate);
        let mut found = Found {
            estate,
            ..Found::default()
        };
        walk(planstate, 1, &mut found);
        // A SubPlan in a WorkTable Scan's projection (a recursive CTE) is linked into
        // the tree only when the scan first runs; every subplan's state is in
        // es_subplanstates from the start. Only the leader runs such a plan (a recursive
        // union is never parallel): a worker that met one unmetered would refuse it.
        if pg_sys::ParallelWorkerNumber < 0 {
            for subplan in
                PgList::<pg_sys::PlanState>::from_pg((*estate).es_subplanstates).iter_ptr()
            {
                walk(subplan, 1, &mut found);
            }
        }
        if found.registered.is_none() {
            return;
        }
        super::recheck::refuse_dp_in_rechecked_subplans(query);
        // A plan made before this library was loaded missed the planner hook, and so the
        // bounding by privacy unit.
        if !super::shared::preloaded() {
            units::refuse_unless_preloaded();
        }
        // Parallel workers run what the leader already paid for (its multiplicity counts
        // them); they charge only their own rescans.
        if pg_sys::ParallelWorkerNumber >= 0 {
            return;
        }
        if session_is_budgeted() {
            if (*estate).es_instrument != 0 {
                raise(Error::ExplainAnalyzeRefused {
                    role: role_name(session_role()),
                });
            }
            // SERIALIZABLE takes a predicate lock on each tuple a scan reads (fourth
            // review: exact counts from pg_locks, which every role reads).
            if pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as std::ffi::c_int {
                raise(Error::SerializableRefused {
                    role: role_name(session_role()),
                });
            }
            if let Some(aggregate) = found.window {
                raise(Error::WindowRefused {
                    role: role_name(session_role()),
                    aggregate: aggregate.into(),
                });
            }
            match found.volatile_call.take() {
                Some(PerRowCall::Volatile(function)) => raise(Error::VolatileCall {
                    role: role_name(session_role()),
                    function,
                }),
                Some(PerRowCall::NestedAggregate(aggregate)) => raise(Error::NestedAggregate {
                    role: role_name(session_role()),
                    aggregate: aggregate.into(),
                }),
                None => {}
            }
        }
        charge(&found.releases);
    }
}

/// Walks `node` and everything under it (subplans included), `copies` being how many
/// processes may run it.
///
/// # Safety
/// `node` must be a node of a started plan state tree.
unsafe fn walk(node: *mut pg_sys::PlanState, copies: u32, found: &mut Found) {
    // SAFETY: nodes are cast after their tags are checked; their plans are the ones they
    // were made from.
    unsafe {
        if node.is_null() || !found.visited.insert(node as usize) {
            return;
        }
        let plan = (*node).plan;
        // A Gather's workers run a copy of the nodes under it each: (workers planned,
        // workers per loop), the second 1 for a single-copy Gather.
        let gather = if pgrx::is_a(plan.cast(), pg_sys::NodeTag::T_Gather) {
            let gather = plan as *mut pg_sys::Gather;
            let workers = (*gather).num_workers.max(0) as u32;
            Some(if (*gather).single_copy {
                (0, 1)
            } else {
                (workers, workers)
            })
        } else if pgrx::is_a(plan.cast(), pg_sys::NodeTag::T_GatherMerge) {
            let workers = (*(plan as *mut pg_sys::GatherMerge)).num_workers.max(0) as u32;
            Some((workers, workers))
        } else {
            None
        };
        if pgrx::is_a(node.cast(), pg_sys::NodeTag::T_AggState) {
            meter_aggregation(node.cast(), copies, found);
        } else if pgrx::is_a(node.cast(), pg_sys::NodeTag::T_WindowAggState) {
            meter_window(node, copies, found);
        }
        let below = match gather {
            Some((workers, _)) => copies.saturating_mul(workers + 1),
            None => copies,
        };
        let first = found.releases.len();
        if gather.is_some() {
            // Only the leader runs a Gather's own init-plans and subplans; its workers
            // run what is under it.
            walk((*node).lefttree, below, found);
            for list in [(*node).initPlan, (*node).subPlan] {
                for subplan in PgList::<pg_sys::SubPlanState>::from_pg(list).iter_ptr() {
                    walk((*subplan).planstate, copies, found);
                }
            }
        } else {
            let mut context = (below, found as *mut Found);
            pg_sys::planstate_tree_walker(
                node,
                Some(walk_child),
                (&mut context as *mut (u32, *mut Found)).cast(),
            );
        }
        // DP aggregates finalized in the workers (complete aggregations under a Gather,
        // not partial ones): the first loop is paid above, with the workers counted; each
        // later loop of the Gather starts new workers, paid for at its start. The leader's
        // own copy pays its own later loops.
        if let Some((_, per_loop)) = gather {
            // The releases under the Gather were counted `below` times; its workers run
            // `per_loop` copies of each per loop of the Gather.
            let workers: Vec<Release> = found.releases[first..]
                .iter()
                .map(|release| Release {
                    aggregate: release.aggregate,
                    epsilon: release.epsilon / below as f64 * (per_loop * copies) as f64,
                    delta: release.delta / below as f64 * (per_loop * copies) as f64,
                })
                .collect();
            if per_loop > 0 && !workers.is_empty() {
                install_meter(node, workers, Vec::new(), found);
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn walk_child(node: *mut pg_sys::PlanState, context: *mut c_void) -> bool {
    // SAFETY: the context is the (copies, found) pair `walk` passed, alive during the walk.
    unsafe {
        let (copies, found) = *(context as *mut (u32, *mut Found));
        walk(node, copies, &mut *found);
    }
    false
}

/// Meters an aggregation node that finalizes DP aggregates (a partial one finalizes
/// nothing: its Finalize Aggregate is metered).
///
/// # Safety
/// `state` must be a started AggState.
unsafe fn meter_aggregation(state: *mut pg_sys::AggState, copies: u32, found: &mut Found) {
    // SAFETY: the Aggrefs of an AggState are its plan's; the plan is an Agg.
    unsafe {
        if (*state).aggsplit & pg_sys::AGGSPLITOP_SKIPFINAL != 0 {
            return;
        }
        let plan = (*state).ss.ps.plan as *mut pg_sys::Agg;
        let node = &mut (*state).ss.ps as *mut pg_sys::PlanState;
        // What one loop of this node releases in one process: each call once per grouping
        // set. The first loop is paid at the start for every process that may run it.
        let evaluations = grouping_sets(plan);
        let mut calls = NodeCalls::default();
        let mut numbers = HashSet::new();
        for aggref in PgList::<pg_sys::Aggref>::from_pg((*state).aggs).iter_ptr() {
            // A DP call, or Citus's combine of one (its arguments registered by the
            // planner hook: citus/combine.rs).
            let (aggregate, combined) = match dp_aggregate((*aggref).aggfnoid) {
                Some(aggregate) => (aggregate, None),
                None => match crate::extension::citus::combined_call(aggref) {
                    None => continue,
                    Some(Ok((aggregate, expressions))) => (aggregate, Some(expressions)),
                    Some(Err(name)) => raise(Error::NotMetered {
                        reason: format!("Citus's combine of {name} in this plan was not planned by pg_exp_mech's planner hook, which charges for it"),
                    }),
                },
            };
            if !numbers.insert((*aggref).aggno) {
                continue; // One state, one final call: one release.
            }
            spellings::check_released(plan, aggref, combined.as_deref(), aggregate);
            let expressions: Vec<*mut pg_sys::Expr> = if let Some(expressions) = combined {
                expressions
            } else {
                units::require_seen((*aggref).location, aggregate.name);
                let source = if (*state).aggsplit & pg_sys::AGGSPLITOP_COMBINE != 0 {
                    partial_aggref(plan.cast(), aggref)
                } else {
                    Some(aggref)
                };
                match source {
                    Some(source) => PgList::<pg_sys::TargetEntry>::from_pg((*source).args)
                        .iter_ptr()
                        .map(|entry| (*entry).expr)
                        .collect(),
                    None => Vec::new(),
                }
            };
            let arity = if expressions.is_empty() {
                PgList::<pg_sys::Oid>::from_pg((*aggref).aggargtypes).len()
            } else {
                expressions.len()
            };
            let arguments: Rc<[Argument]> = if expressions.is_empty() {
                vec![Argument::Unknown; arity].into()
            } else {
                evaluate(&expressions, found.estate, None).into()
            };
            let charged = charged_arguments(&expressions, &arguments, found.estate, None);
            let call = (node as usize, (*aggref).aggno);
            found.registered().calls.push(call);
            calls.add(
                aggregate,
                arity,
                &charged,
                expressions,
                Some(call),
                evaluations,
            );
            ARGUMENTS.with(|all| all.borrow_mut().insert(call, arguments));
        }
        if !numbers.is_empty()
            && found.volatile_call.is_none()
            && pg_sys::ParallelWorkerNumber < 0
            && session_is_budgeted()
        {
            found.volatile_call = volatile_call(plan.cast(), (*found.estate).es_plannedstmt);
        }
        calls.install(node, copies, found);
    }
}

/// Meters a window node with DP aggregates used as window functions: charged once per
/// loop for each, and refused to budgeted roles (each frame is a release).
///
/// # Safety
/// `node` must be a started WindowAggState.
unsafe fn meter_window(node: *mut pg_sys::PlanState, copies: u32, found: &mut Found) {
    // SAFETY: the plan of a WindowAggState is a WindowAgg, whose target list holds its
    // WindowFuncs.
    unsafe {
        let mut functions: Vec<*mut pg_sys::WindowFunc> = Vec::new();
        pg_sys::expression_tree_walker(
            (*(*node).plan).targetlist.cast(),
            Some(collect_window_functions),
            (&mut functions as *mut Vec<*mut pg_sys::WindowFunc>).cast(),
        );
        let mut calls = NodeCalls::default();
        for function in functions {
            let Some(aggregate) = dp_aggregate((*function).winfnoid) else {
                continue;
            };
            found.window = Some(aggregate.name);
            units::require_seen((*function).location, aggregate.name);
            let expressions: Vec<*mut pg_sys::Expr> =
                PgList::<pg_sys::Expr>::from_pg((*function).args)
                    .iter_ptr()
                    .collect();
            if let Some(&item) = expressions.first() {
                let item_type = pg_sys::exprType(item.cast());
                spellings::check_items(
                    aggregate,
                    expressions.len(),
                    item_type,
                    (*function).inputcollid,
                );
            }
            let arguments = evaluate(&expressions, found.estate, None);
            calls.add(
                aggregate,
                expressions.len(),
                &arguments,
                expressions,
                None,
                1,
            );
        }
        calls.install(node, copies, found);
    }
}

/// The DP calls of one node: what each loop releases, known from the plan, and the calls
/// whose ε or δ each loop sets.
#[derive(Default)]
struct NodeCalls {
    releases: Vec<Release>,
    per_loop: Vec<LoopCall>,
}

impl NodeCalls {
    /// Adds one call, `evaluations` times per loop, after checking its arguments as the
    /// plan gives them.
    ///
    /// # Safety
    /// `expressions` must be the call's argument expressions (or empty when unknown).
    unsafe fn add(
        &mut self,
        aggregate: &'static Aggregate,
        arity: usize,
        arguments: &[Argument],
        expressions: Vec<*mut pg_sys::Expr>,
        call: Option<Call>,
        evaluations: u32,
    ) {
        // SAFETY: as the caller guarantees.
        match unsafe { cost(aggregate, arity, arguments, &expressions) }.or_raise() {
            Cost::Known { epsilon, delta } => self.releases.push(
                Release {
                    aggregate: aggregate.name,
                    epsilon,
                    delta,
                }
                .times(evaluations),
            ),
            Cost::PerLoop => self.per_loop.push(LoopCall {
                call,
                aggregate,
                arity,
                expressions,
                evaluations,
            }),
        }
    }

    /// Meters `node` with these calls (if any), its first loop paid now for the `copies`
    /// processes that may run it.
    ///
    /// # Safety
    /// `node` must be a started node that has not run yet.
    unsafe fn install(self, node: *mut pg_sys::PlanState, copies: u32, found: &mut Found) {
        if self.releases.is_empty() && self.per_loop.is_empty() {
            return;
        }
        found
            .releases
            .extend(self.releases.iter().map(|release| release.times(copies)));
        // SAFETY: as the caller guarantees.
        unsafe { install_meter(node, self.releases, self.per_loop, found) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn collect_window_functions(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is the vector meter_window passed; nodes are cast after their
    // tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if pgrx::is_a(node, pg_sys::NodeTag::T_WindowFunc) {
            (*(context as *mut Vec<*mut pg_sys::WindowFunc>)).push(node.cast());
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(collect_window_functions), context)
    }
}

/// How many grouping sets an aggregation node computes (1 for a plain GROUP BY or none).
///
/// # Safety
/// `plan` must be an Agg plan node.
unsafe fn grouping_sets(plan: *mut pg_sys::Agg) -> u32 {
    // SAFETY: an Agg's chain holds Agg nodes; groupingSets are lists.
    unsafe {
        let own = PgList::<c_void>::from_pg((*plan).groupingSets).len().max(1);
        let chained: usize = PgList::<pg_sys::Agg>::from_pg((*plan).chain)
            .iter_ptr()
            .map(|agg| PgList::<c_void>::from_pg((*agg).groupingSets).len())
            .sum();
        (own + chained) as u32
    }
}

/// The partial Aggref whose states a Finalize Aggregate's `aggref` combines: its one
/// argument is a column of the node below, followed down to the partial aggregation that
/// computes it.
///
/// # Safety
/// `plan` must be the Finalize Agg holding `aggref`.
unsafe fn partial_aggref(
    mut plan: *mut pg_sys::Plan,
    aggref: *mut pg_sys::Aggref,
) -> Option<*mut pg_sys::Aggref> {
    // SAFETY: target lists hold TargetEntries; nodes are cast after their tags are
    // checked; Append and MergeAppend list their children, whose target lists theirs
    // mirror.
    unsafe {
        let entry = PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args).get_ptr(0)?;
        let mut expression = (*entry).expr as *mut pg_sys::Node;
        loop {
            if pgrx::is_a(expression, pg_sys::NodeTag::T_Aggref) {
                return Some(expression.cast());
            }
            if !pgrx::is_a(expression, pg_sys::NodeTag::T_Var) {
                return None;
            }
            let var = expression as *mut pg_sys::Var;
            if (*var).varno != pg_sys::OUTER_VAR {
                return None;
            }
            plan = if pgrx::is_a(plan.cast(), pg_sys::NodeTag::T_Append) {
                PgList::<pg_sys::Plan>::from_pg((*(plan as *mut pg_sys::Append)).appendplans)
                    .get_ptr(0)?
            } else if pgrx::is_a(plan.cast(), pg_sys::NodeTag::T_MergeAppend) {
                PgList::<pg_sys::Plan>::from_pg((*(plan as *mut pg_sys::MergeAppend)).mergeplans)
                    .get_ptr(0)?
            } else {
                (*plan).lefttree
            };
            if plan.is_null() {
                return None;
            }
            let entry = PgList::<pg_sys::TargetEntry>::from_pg((*plan).targetlist)
                .get_ptr((*var).varattno as usize - 1)?;
            expression = (*entry).expr.cast();
        }
    }
}

/// Makes `node` charge `releases` at the start of each loop after the first (the first
/// is charged by [`meter`]), and `per_loop` at the start of every loop.
///
/// # Safety
/// `node` must be a started node that has not run yet.
unsafe fn install_meter(
    node: *mut pg_sys::PlanState,
    releases: Vec<Release>,
    per_loop: Vec<LoopCall>,
    found: &mut Found,
) {
    // SAFETY: the node has not run, so ExecProcNodeFirst has not yet chosen between
    // ExecProcNodeReal and the instrumented call: replacing ExecProcNodeReal puts
    // `metered_exec_proc_node` under both. The Instrumentation (when the query has none)
    // lives in the query's memory, as long as the node; it times nothing and only tells
    // when a loop starts (ExecReScan ends its loop).
    unsafe {
        if (*node).instrument.is_null() {
            (*node).instrument = pgrx::PgMemoryContexts::For((*found.estate).es_query_cxt)
                .switch_to(|_| pg_sys::InstrAlloc(1, 0, false));
        }
        let held = (may_stream(node) && session_is_budgeted())
            .then(|| Rc::new(RefCell::new(HeldGroups::new(node))));
        let meter = Meter {
            original: (*node).ExecProcNodeReal,
            releases,
            per_loop,
            loops: 0,
            held,
        };
        found.registered().nodes.push(node as usize);
        (*node).ExecProcNodeReal = Some(metered_exec_proc_node);
        METERS.with(|meters| meters.borrow_mut().insert(node as usize, meter));
    }
}

/// The metered node's ExecProcNode: at the start of each loop after this process's
/// first, the loop is charged before the node reads a row.
#[pg_guard]
unsafe extern "C-unwind" fn metered_exec_proc_node(
    node: *mut pg_sys::PlanState,
) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: installed by install_meter on this node, whose instrument it set.
    let starts_loop = unsafe { !(*(*node).instrument).running };
    let (original, mut releases, per_loop, held) = METERS.with(|meters| {
        let mut meters = meters.borrow_mut();
        let meter = meters
            .get_mut(&(node as usize))
            .expect("a metered node has its meter");
        let mut releases = Vec::new();
        let mut per_loop = Vec::new();
        if starts_loop {
            meter.loops += 1;
            if meter.loops > 1 {
                releases = meter.releases.clone();
            }
            per_loop = meter.per_loop.clone();
        }
        (meter.original, releases, per_loop, meter.held.clone())
    });
    for call in per_loop {
        // SAFETY: the call's expressions, of this running node's plan; the outer row's
        // parameters are set for this loop.
        let arguments = unsafe { evaluate(&call.expressions, (*node).state, Some(node)) };
        // SAFETY: as above.
        let charged =
            unsafe { charged_arguments(&call.expressions, &arguments, (*node).state, Some(node)) };
        let (epsilon, delta) = release_of(call.aggregate, call.arity, &charged).or_raise();
        releases.push(
            Release {
                aggregate: call.aggregate.name,
                epsilon,
                delta,
            }
            .times(call.evaluations),
        );
        // This loop's final function reads them there (a parallel plan's Finalize
        // Aggregate has no arguments of its own to read them from).
        if let Some(key) = call.call {
            ARGUMENTS.with(|all| all.borrow_mut().insert(key, arguments.into()));
        }
    }
    charge(&releases);
    let original = original.expect("an executor node has an ExecProcNode");
    let step = || {
        // SAFETY: the node's own ExecProcNode, as ExecInitNode set it; an error it raises
        // unwinds through the guard of below_dp_nodes and is raised again at this
        // function's boundary.
        below_dp_nodes(|| unsafe {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| original(node))
        })
    };
    let Some(held) = held else {
        return step();
    };
    // SAFETY: this node's groups, in its running query.
    unsafe {
        let mut held = held.borrow_mut();
        if starts_loop {
            held.fill(step);
        }
        held.next(node)
    }
}

/// A record of what this query registers, whose entries are forgotten when the query's
/// memory goes (at ExecutorEnd, or on error).
///
/// # Safety
/// `estate` must be the query's live executor state.
unsafe fn forget_when_done(estate: *mut pg_sys::EState) -> *mut Registered {
    // SAFETY: the callback record is allocated in the context it watches, as
    // MemoryContextRegisterResetCallback requires; its argument is a leaked Box that the
    // callback takes back exactly once.
    unsafe {
        let memory = (*estate).es_query_cxt;
        let callback = pg_sys::MemoryContextAlloc(
            memory,
            std::mem::size_of::<pg_sys::MemoryContextCallback>(),
        ) as *mut pg_sys::MemoryContextCallback;
        let registered = Box::into_raw(Box::<Registered>::default());
        (*callback).func = Some(forget);
        (*callback).arg = registered.cast();
        (*callback).next = std::ptr::null_mut();
        pg_sys::MemoryContextRegisterResetCallback(memory, callback);
        RUNNING.with(|running| running.set(running.get() + 1));
        registered
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget(entries: *mut c_void) {
    // SAFETY: the Box forget_when_done leaked, taken back once.
    let Registered { calls, nodes } = *unsafe { Box::from_raw(entries as *mut Registered) };
    RUNNING.with(|running| running.set(running.get().saturating_sub(1)));
    ARGUMENTS.with(|all| {
        let mut all = all.borrow_mut();
        for call in calls {
            all.remove(&call);
        }
    });
    METERS.with(|meters| {
        let mut meters = meters.borrow_mut();
        for node in nodes {
            meters.remove(&node);
        }
    });
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;
