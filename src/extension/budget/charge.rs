//! The charge every DP final function takes before its result exists.

use super::shared::{preloaded, ACCOUNTS, LEDGER};
use crate::budget::file::LEDGER_PATH;
use crate::budget::ledger::{self, Charge};
use crate::error::Error;
use crate::extension::arguments::aggregate_argument;
use crate::extension::{guc, raise, OrRaise};
use pgrx::pg_sys::{self, Oid};
use std::ffi::CStr;

/// What a final function is about to release.
pub struct Release {
    pub aggregate: &'static str,
    /// ε of this evaluation, as the rows (or the call) gave it.
    pub epsilon: f64,
    /// Where epsilon stands in the aggregate's arguments.
    pub epsilon_position: usize,
    /// δ of an (ε, δ) mechanism, 0 otherwise: recorded, not budgeted.
    pub delta: f64,
}

/// Charges the session's login role for one evaluation, before its result exists.
/// A refusal raises an error, so nothing is returned.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate's final function.
pub unsafe fn charge(fcinfo: pg_sys::FunctionCallInfo, release: Release) {
    if !preloaded() {
        return refuse_unless_unmetered();
    }
    let role = session_role();
    let must_have_budget = budget_required(role);
    if must_have_budget || has_limit(role) {
        // SAFETY: the caller passes a final function's call info.
        if unsafe { plan_is_instrumented(fcinfo) } {
            raise(Error::ExplainAnalyzeRefused {
                role: role_name(role),
            });
        }
        // The charge must be what the statement says, whatever the rows: epsilon must
        // not depend on them.
        // SAFETY: as above.
        let fixed = unsafe { aggregate_argument(fcinfo, release.epsilon_position) }.float();
        if fixed != Some(Some(release.epsilon)) {
            raise(Error::InvalidParameter {
                name: "epsilon",
                value: "an expression of the rows".into(),
                requirement:
                    "a constant or a parameter of the statement for a role with a privacy budget"
                        .into(),
            });
        }
    }
    let charge = Charge {
        time: now(),
        role,
        epsilon: release.epsilon,
        delta: release.delta,
        aggregate: release.aggregate.into(),
        statement: statement_fingerprint(),
    };
    let line = ledger::Record::Charge(charge.clone()).line();
    // Written (fsynced where a limit is at stake) before memory and before the result:
    // what the client may see is always on the ledger.
    let outcome = ACCOUNTS
        .exclusive()
        .accounts
        .charge(&charge, must_have_budget, |durable| {
            LEDGER.with(|file| file.borrow_mut().append(&line, durable))
        });
    outcome
        .map_err(|refusal| refusal.error(|| role_name(role)))
        .or_raise();
}

/// Without the shared accounts nothing can be charged: refuse where budgets are expected.
fn refuse_unless_unmetered() {
    if guc::require_budget() {
        raise(Error::BudgetsUnavailable {
            reason: "pg_exp_mech.require_budget is on, but pg_exp_mech is not in shared_preload_libraries".into(),
        });
    }
    if std::fs::metadata(LEDGER_PATH).is_ok() {
        raise(Error::BudgetsUnavailable {
            reason: format!("this cluster keeps a privacy ledger ({LEDGER_PATH}), but pg_exp_mech is not in shared_preload_libraries"),
        });
    }
}

/// Whether the plan that calls this aggregate is instrumented: its scans' exact row
/// counts are being collected for display.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate's final function.
unsafe fn plan_is_instrumented(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: the caller passes a valid call info; its context, when it is an AggState
    // or a WindowAggState, is the executor's live node, which begins with its PlanState.
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null()
            || !(pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
                || pgrx::is_a(context, pg_sys::NodeTag::T_WindowAggState))
        {
            return false;
        }
        let plan = context as *mut pg_sys::PlanState;
        !(*plan).state.is_null() && (*(*plan).state).es_instrument != 0
    }
}

/// The name of a role, or its number when it no longer exists.
pub fn role_name(role: u32) -> String {
    // SAFETY: GetUserNameFromId with noerr = true returns NULL or a palloc'd C string.
    unsafe {
        let name = pg_sys::GetUserNameFromId(Oid::from(role), true);
        if name.is_null() {
            role.to_string()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

pub fn now() -> i64 {
    // SAFETY: reads the clock; no precondition.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// The login role of the session: SET ROLE does not move charges to another budget.
pub fn session_role() -> u32 {
    // SAFETY: a backend always has a session user once it runs queries.
    unsafe { pg_sys::GetSessionUserId() }.to_u32()
}

/// A fingerprint of the statement being run.
fn statement_fingerprint() -> u64 {
    // SAFETY: debug_query_string is NULL or the NUL-terminated text of the statement
    // being run, which lives until the statement ends.
    unsafe {
        let text = pg_sys::debug_query_string;
        if text.is_null() {
            0
        } else {
            ledger::fingerprint(CStr::from_ptr(text).to_bytes())
        }
    }
}

/// Whether the role that runs the session has a limit (or must have one).
pub fn session_is_budgeted() -> bool {
    let role = session_role();
    budget_required(role) || has_limit(role)
}

/// Whether the role has a limit in the shared accounts.
fn has_limit(role: u32) -> bool {
    preloaded()
        && ACCOUNTS
            .share()
            .accounts
            .get(role)
            .is_some_and(|a| a.limit.is_some())
}

/// pg_exp_mech.require_budget applies to every role but superusers, who bypass every
/// privilege and can read the tables themselves (as with row-level security). They are
/// still charged, and their charges recorded.
fn budget_required(role: u32) -> bool {
    // SAFETY: superuser_arg looks the role up in the catalog; any oid is accepted.
    guc::require_budget() && !unsafe { pg_sys::superuser_arg(Oid::from(role)) }
}
