//! Moving budgets to a new cluster (pg_upgrade from 15 to 18, a dump and restore): the
//! accounts live in `$PGDATA/pg_exp_mech`, which neither pg_upgrade nor pg_dump carries.
//! `dp_budget_export()` on the old cluster gives the statements that rebuild every
//! account on the new one: what each role has spent, carried over as one ledger line
//! (`dp_budget_carry_over`), then its limits (`dp_budget_set`). Run as a budget
//! administrator; the roles must exist there (pg_dumpall --globals-only).

use super::charge::{now, role_name};
use super::shared::{self, ACCOUNTS};
use super::sql::{administered_role, require_preloaded, require_readable, RegRole};
use super::wal::in_recovery;
use crate::budget::ledger::{Charge, DELTA, EPSILON};
use crate::error::Error;
use crate::extension::{raise, OrRaise};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The aggregate name of a carried-over line in dp_ledger.
const CARRIED_OVER: &str = "carried over";

/// Records that `role` spent `epsilon_spent` and `delta_spent` before the accounts moved
/// to this cluster: one charge, whatever the role's limit (a limit lowered below what
/// was spent stays so), made durable before it returns.
#[pg_extern(volatile, parallel_unsafe)]
fn dp_budget_carry_over(
    role: Option<RegRole>,
    epsilon_spent: Option<f64>,
    delta_spent: default!(Option<f64>, 0),
) {
    // EXECUTE is revoked from PUBLIC: PostgreSQL has checked the caller's privilege.
    let role = administered_role(role);
    let spent = |name: &'static str, value: Option<f64>| match value {
        Some(v) if v.is_finite() && v >= 0.0 => v,
        _ => raise(Error::invalid(name, value, "finite and at least 0")),
    };
    let (epsilon, delta) = (
        spent("epsilon_spent", epsilon_spent),
        spent("delta_spent", delta_spent),
    );
    if in_recovery() {
        raise(Error::OnStandby {
            action: "privacy budgets cannot be carried over".into(),
        });
    }
    let charge = Charge {
        time: now(),
        role: role.to_u32(),
        epsilon,
        delta,
        aggregate: CARRIED_OVER.into(),
        statement: 0,
    };
    shared::carry_over(&charge)
        .map_err(|refusal| refusal.error(|| role_name(role.to_u32())))
        .or_raise();
}

/// The statements that rebuild this cluster's accounts on another one, role by role:
/// what it spent (dp_budget_carry_over), then its limits (dp_budget_set). Numbers in
/// their shortest exact form, so that the new accounts equal these.
#[pg_extern(volatile, parallel_safe)]
fn dp_budget_export() -> SetOfIterator<'static, String> {
    require_preloaded();
    let shared = ACCOUNTS.share();
    require_readable(shared.accounts.unavailable());
    let accounts: Vec<_> = shared.accounts.iter().collect();
    drop(shared);
    // A dropped role's account cannot move by name: said, not exported.
    // SAFETY: catalog lookups by oid; NULL for a role that no longer exists.
    let exists = |role: u32| unsafe { !pg_sys::GetUserNameFromId(role.into(), true).is_null() };
    let mut statements: Vec<String> = accounts
        .iter()
        .filter(|&&(role, _)| !exists(role))
        .map(|&(role, account)| {
            format!(
                "-- role {role} no longer exists: its account (epsilon spent {:?}) is not carried over",
                EPSILON.amount(account.spent)
            )
        })
        .collect();
    let mut accounts: Vec<(String, _)> = accounts
        .into_iter()
        .filter(|&(role, _)| exists(role))
        .map(|(role, account)| (role_literal(role), account))
        .collect();
    accounts.sort_by(|a, b| a.0.cmp(&b.0));
    for (role, account) in accounts {
        let (epsilon, delta) = (
            EPSILON.amount(account.spent),
            DELTA.amount(account.delta_spent),
        );
        if epsilon > 0.0 || delta > 0.0 {
            statements.push(format!(
                "SELECT dp_budget_carry_over({role}, {epsilon:?}, {delta:?});"
            ));
        }
        if let Some(limit) = account.limit {
            let delta_limit = account.delta_limit.map_or(0.0, |units| DELTA.amount(units));
            statements.push(format!(
                "SELECT dp_budget_set({role}, {:?}, {delta_limit:?});",
                EPSILON.amount(limit)
            ));
        }
    }
    SetOfIterator::new(statements)
}

/// A role as a SQL literal that regrole reads back (its name quoted as an identifier).
fn role_literal(role: u32) -> String {
    let name = role_name(role);
    // SAFETY: quote_identifier returns its argument or a palloc'd quoted copy.
    let identifier = unsafe {
        let c_name = std::ffi::CString::new(name).expect("no NUL in a role name");
        std::ffi::CStr::from_ptr(pg_sys::quote_identifier(c_name.as_ptr()))
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: quote_literal_cstr returns a palloc'd literal (E'...' where a backslash
    // needs it), read whatever standard_conforming_strings is where it runs.
    unsafe {
        let c_identifier = std::ffi::CString::new(identifier).expect("no NUL");
        std::ffi::CStr::from_ptr(pg_sys::quote_literal_cstr(c_identifier.as_ptr()))
            .to_string_lossy()
            .into_owned()
    }
}

pgrx::extension_sql!(
    r#"
REVOKE EXECUTE ON FUNCTION dp_budget_carry_over(regrole, double precision, double precision) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION dp_budget_export() FROM PUBLIC;
COMMENT ON FUNCTION dp_budget_carry_over(regrole, double precision, double precision) IS
'Records what a role spent (epsilon, and delta) before its account moved to this cluster: one line of dp_ledger, aggregate ''carried over''. Run the statements of dp_budget_export() from the old cluster. Not executable by PUBLIC.';
COMMENT ON FUNCTION dp_budget_export() IS
'The statements that rebuild every privacy account of this cluster on another (an upgrade from PostgreSQL 15 to 18, a restore): dp_budget_carry_over for what each role spent, then dp_budget_set for its limits. Not executable by PUBLIC.';
"#,
    name = "budget_upgrade",
    requires = [dp_budget_carry_over, dp_budget_export, "budget_objects"],
);
