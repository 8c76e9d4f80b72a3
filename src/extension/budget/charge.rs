//! Charging the session's login role, and who must have a budget.

use super::metering::is_metered;
use super::shared::{self, preloaded, ACCOUNTS};
use super::wal::in_recovery;
use crate::budget::file::LEDGER_PATH;
use crate::budget::ledger::{self, Charge};
use crate::error::Error;
use crate::extension::{guc, raise, OrRaise};
use pgrx::pg_sys::{self, Oid};
use std::ffi::CStr;

/// What one loop of a plan node releases through one DP aggregate call: ε and δ with the
/// node's multiplicity (grouping sets, parallel copies) folded in.
#[derive(Debug, Clone)]
pub struct Release {
    pub aggregate: &'static str,
    pub epsilon: f64,
    /// δ of an (ε, δ) mechanism, 0 otherwise.
    pub delta: f64,
}

impl Release {
    /// The release of `copies` evaluations.
    pub fn times(&self, copies: u32) -> Release {
        Release {
            aggregate: self.aggregate,
            epsilon: self.epsilon * copies as f64,
            delta: self.delta * copies as f64,
        }
    }
}

/// Charges the session's login role for `releases` together (all or none), one ledger
/// line each, before any row is read. A refusal raises an error.
pub fn charge(releases: &[Release]) {
    if releases.is_empty() {
        return;
    }
    if !preloaded() {
        return refuse_unless_unmetered();
    }
    let role = session_role();
    let must_have_budget = budget_required(role);
    if in_recovery() {
        // A standby cannot write WAL: a budgeted role is refused before any row is read;
        // any other runs unrecorded (README: standbys). A table that misses accounts
        // cannot tell who is budgeted: refused.
        let unavailable = ACCOUNTS.share().accounts.unavailable();
        if let Some(refusal) = unavailable {
            raise(refusal.error(|| role_name(role)));
        }
        let which = if has_limit(role) {
            "which has a privacy budget"
        } else if must_have_budget {
            "which must have a privacy budget (pg_exp_mech.require_budget is on)"
        } else {
            ""
        };
        if !which.is_empty() {
            raise(Error::OnStandby {
                action: format!(
                    "differentially private aggregates of role \"{}\", {which}, cannot be charged",
                    role_name(role)
                ),
            });
        }
        return;
    }
    if must_have_budget || has_limit(role) {
        super::temporary_files::refuse_readable(role);
    }
    let time = now();
    let statement = statement_fingerprint();
    let charges: Vec<Charge> = releases
        .iter()
        .map(|release| Charge {
            time,
            role,
            epsilon: release.epsilon,
            delta: release.delta,
            aggregate: release.aggregate.into(),
            statement,
        })
        .collect();
    // In WAL and in the ledger (flushed where a limit is at stake) before memory and
    // before any row: what the client may see is always recorded.
    shared::charge(&charges, must_have_budget)
        .map_err(|refusal| refusal.error(|| role_name(role)))
        .or_raise();
}

/// A final function runs only in a node the metering hook charged. Without the hook (the
/// library was loaded by this very statement, not preloaded) nothing can be charged:
/// refused where budgets are expected.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate's final function.
pub unsafe fn require_metered(fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: the caller passes a final function's call info; its context is the node.
    let node = unsafe { (*fcinfo).context };
    if is_metered(node.cast()) {
        return;
    }
    if preloaded() {
        raise(Error::NotMetered {
            reason: "a differentially private aggregate ran in a plan node that pg_exp_mech could not meter before the statement started (its node was not reachable from the plan)".into(),
        });
    }
    crate::extension::units::refuse_unless_preloaded();
    refuse_unless_unmetered();
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
