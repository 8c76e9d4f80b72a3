//! The planner hook: what pg_exp_mech changes in a query before PostgreSQL plans it.
//!
//! Kept apart from execution (the metering hook reads the plan this produces):
//! - `parameters`: a DP aggregate's parameters that a stable expression computes
//!   (`current_setting('dp.eps')::float8`) become init-plans, evaluated once per loop
//!   instead of once per row;
//! - every DP aggregate over rows of a table with a privacy unit is bounded per unit
//!   (`units`: the rewrite lives there);
//! - conditions that call functions that are not leakproof stay above the DP views they
//!   filter (`barrier_quals`);
//! - a budgeted role's DP statement is planned with statistics counters off, and without
//!   partitionwise aggregation;
//! - under Citus, DP aggregates are finalized on the coordinator, where the one budget
//!   meters them (`citus`).

mod barrier_quals;
mod parameters;

use crate::extension::budget::{count_again, session_is_budgeted, Silence};
use crate::extension::citus;
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREVIOUS_PLANNER: pg_sys::planner_hook_type = None;

/// Installs the hook; called from _PG_init.
pub fn install_planner() {
    // SAFETY: _PG_init runs once per process, single-threaded, before any statement is
    // planned: nothing else reads or writes the hook meanwhile.
    unsafe {
        PREVIOUS_PLANNER = pg_sys::planner_hook;
        pg_sys::planner_hook = Some(plan_query);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn plan_query(
    parse: *mut pg_sys::Query,
    query_string: *const std::ffi::c_char,
    cursor_options: std::ffi::c_int,
    bound_parameters: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: PostgreSQL calls the hook with a rewritten query that the planner may
    // scribble on (plancache hands it a copy); the previous hook takes the same arguments.
    unsafe {
        count_again();
        // Over Citus tables the coordinator evaluates the parameters once, before Citus
        // plans (citus/fragments.rs); ORDER BY in a call is refused either way.
        let distributed = citus::dp_over_citus_tables(parse);
        let dp = parameters::evaluate_once_per_loop(parse, !distributed) || distributed;
        // After the parameters became init-plans: the share of each group wraps them.
        if dp {
            crate::extension::units::bound_by_units(parse);
            barrier_quals::keep_conditions_above_dp_views(parse);
        }
        let (parse, prepared) = if distributed {
            let (parse, prepared) = citus::prepare(parse, bound_parameters);
            (parse, Some(prepared))
        } else {
            (parse, None)
        };
        // Planning may read the data (the planner reads an index's extremes to estimate
        // a range): not counted for a budgeted role's DP statement (statistics.rs).
        // A fragment of a DP statement that Citus sends to a worker: not counted either.
        let budgeted = dp && session_is_budgeted();
        let silenced = budgeted || citus::is_fragment(parse);
        let _silence = silenced.then(|| Silence::begin(std::ptr::null_mut()));
        // Partitionwise, each partition's DP node finalizes its own groups under an
        // Append, which hands out one partition's groups before it reads the next
        // partition's rows: an error of the DBA's expression told in which partition the
        // failing row lies (the red team of 2026-11-27; held_groups.rs holds the groups
        // of one node).
        let plan = || match PREVIOUS_PLANNER {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                previous(parse, query_string, cursor_options, bound_parameters)
            }),
            None => pg_sys::standard_planner(parse, query_string, cursor_options, bound_parameters),
        };
        let planned = if budgeted {
            crate::extension::guc::with_setting(c"enable_partitionwise_aggregate", c"off", plan)
        } else {
            plan()
        };
        if let Some(prepared) = prepared {
            prepared.finish(planned);
        }
        planned
    }
}
