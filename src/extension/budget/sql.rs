//! The SQL API of budgets: dp_budget_set, dp_budget_remaining, and the views dp_budget
//! and dp_ledger.

use super::charge::{now, role_name, session_role};
use super::shared::{self, preloaded, ACCOUNTS};
use super::wal::in_recovery;
use crate::budget::accounts::Refusal;
use crate::budget::file::{self, LedgerFile, DROPPED_PATH, LEDGER_DIRECTORY, LEDGER_PATH};
use crate::budget::ledger::{lsn_text, Budget, Charge, Entry, Limit, Record, DELTA, EPSILON};
use crate::error::Error;
use crate::extension::{raise, OrRaise};
use pgrx::callconv::{Arg, ArgAbi};
use pgrx::pg_sys::{self, Oid};
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::FromDatum;

pub(super) fn require_preloaded() {
    if !preloaded() {
        raise(Error::BudgetsUnavailable {
            reason: "pg_exp_mech is not in shared_preload_libraries".into(),
        });
    }
}

/// The role a budget administrator's call names: present, existing, with the library
/// preloaded.
pub(super) fn administered_role(role: Option<RegRole>) -> Oid {
    require_preloaded();
    let Some(RegRole(role)) = role else {
        raise(Error::InvalidParameter {
            name: "role",
            value: "NULL".into(),
            requirement: "a role".into(),
        });
    };
    require_existing(role);
    role
}

/// regrole accepts any oid (0::regrole, a dropped role's): an account of no role would
/// sit in the accounts unenforced.
fn require_existing(role: Oid) {
    // SAFETY: a syscache lookup by oid; any oid is accepted.
    let exists = unsafe {
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::AUTHOID as i32,
            pg_sys::Datum::from(role),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    };
    if !exists {
        raise(Error::UnknownRole { oid: role.to_u32() });
    }
}

/// Accounts that could not be loaded are an error to read, not an empty table.
pub(super) fn require_readable(unavailable: Option<Refusal>) {
    if let Some(refusal) = unavailable {
        raise(refusal.error(String::new));
    }
}

/// A role, as the SQL type regrole.
pub struct RegRole(pub Oid);

impl FromDatum for RegRole {
    /// A regrole datum is an oid, passed by value: no pointer is read.
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: Oid) -> Option<Self> {
        (!is_null).then(|| RegRole(Oid::from(datum.value() as u32)))
    }
}

// SAFETY: RegRole is read with FromDatum above, which matches the SQL type regrole
// declared below; pgrx unboxes it only for non-NULL arguments (Option<RegRole> otherwise).
unsafe impl<'fcx> ArgAbi<'fcx> for RegRole {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        // SAFETY: pgrx calls this for a non-NULL argument of the declared type.
        unsafe {
            arg.unbox_arg_using_from_datum()
                .expect("a non-NULL regrole")
        }
    }
}

// SAFETY: the SQL type named here (regrole) is the one FromDatum reads: an oid by value.
unsafe impl SqlTranslatable for RegRole {
    const TYPE_IDENT: &'static str = concat!(module_path!(), "::RegRole");
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
        Ok(SqlMappingRef::literal("regrole"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("regrole")));
}

/// Sets a role's ε and δ limits (ε NULL: no limit); what it has spent is kept. Takes
/// effect at once, for every session, and is not undone by ROLLBACK.
#[pg_extern(volatile, parallel_unsafe)]
fn dp_budget_set(role: Option<RegRole>, epsilon: Option<f64>, delta: default!(Option<f64>, 0)) {
    // EXECUTE is revoked from PUBLIC: PostgreSQL has checked the caller's privilege.
    let role = administered_role(role);
    let limit = match epsilon {
        None => None,
        Some(e) if e.is_finite() && e >= 0.0 => Some(e),
        _ => raise(Error::invalid(
            "epsilon",
            epsilon,
            "finite and at least 0 (NULL removes the limit)",
        )),
    };
    let delta = match delta {
        Some(d) if (0.0..1.0).contains(&d) => d,
        _ => raise(Error::invalid("delta", delta, "at least 0 and less than 1")),
    };
    let limit = limit.map(|epsilon| Budget { epsilon, delta });
    let limit = Limit {
        time: now(),
        role: role.to_u32(),
        limit,
    };
    if in_recovery() {
        raise(Error::OnStandby {
            action: "privacy budgets cannot be set".into(),
        });
    }
    shared::set_limit(&limit)
        .map_err(|refusal| refusal.error(|| role_name(limit.role)))
        .or_raise();
}

/// ε left to the session's login role; NULL when it has no limit.
#[pg_extern(volatile, parallel_safe)]
fn dp_budget_remaining() -> Option<f64> {
    if !preloaded() {
        return None;
    }
    let shared = ACCOUNTS.share();
    require_readable(shared.accounts.unavailable());
    let remaining = shared.accounts.get(session_role())?.remaining()?;
    Some(EPSILON.amount(remaining))
}

/// Whether the current role is a budget administrator: a role that may execute
/// dp_budget_set (superusers, and roles granted EXECUTE). Looked up in the extension's
/// schema, so that no search_path can substitute another function; read from the
/// catalog caches without SPI, so that it works on a standby and in a parallel worker.
///
/// # Safety
/// `fcinfo` is the call info of a function of this extension (which lives in the
/// extension's schema).
unsafe fn is_budget_administrator(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: fcinfo is as the caller promises; catalog lookups with missing_ok; the
    // list and strings are palloc'd in the current memory context, and every pointer is
    // checked before use.
    unsafe {
        let ours = (*(*fcinfo).flinfo).fn_oid;
        let schema = pg_sys::get_namespace_name(pg_sys::get_func_namespace(ours));
        if schema.is_null() {
            return false;
        }
        let name = pg_sys::lappend(
            pg_sys::lappend(std::ptr::null_mut(), pg_sys::makeString(schema).cast()),
            pg_sys::makeString(pg_sys::pstrdup(c"dp_budget_set".as_ptr())).cast(),
        );
        let arguments = [pg_sys::REGROLEOID, pg_sys::FLOAT8OID, pg_sys::FLOAT8OID];
        let function = pg_sys::LookupFuncName(name, 3, arguments.as_ptr(), true);
        function != pg_sys::InvalidOid
            && crate::extension::versions::may_execute(function, pg_sys::GetUserId())
    }
}

/// The rows of the dp_budget view: every role for a budget administrator, the session's
/// login role for anyone else.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn dp_budget_accounts(
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<
    'static,
    (
        name!(role, Oid),
        name!(epsilon_limit, Option<f64>),
        name!(epsilon_spent, f64),
        name!(epsilon_remaining, Option<f64>),
        name!(delta_limit, Option<f64>),
        name!(delta_spent, f64),
        name!(delta_remaining, Option<f64>),
    ),
> {
    if !preloaded() {
        return TableIterator::new(Vec::new());
    }
    // SAFETY: PostgreSQL's call info of this function.
    let everyone = unsafe { is_budget_administrator(fcinfo) };
    let own = session_role();
    let shared = ACCOUNTS.share();
    require_readable(shared.accounts.unavailable());
    let rows: Vec<_> = shared
        .accounts
        .iter()
        .filter(|&(role, _)| everyone || role == own)
        .map(|(role, account)| {
            (
                Oid::from(role),
                account.limit.map(|units| EPSILON.amount(units)),
                EPSILON.amount(account.spent),
                account.remaining().map(|units| EPSILON.amount(units)),
                account.delta_limit.map(|units| DELTA.amount(units)),
                DELTA.amount(account.delta_spent),
                account.delta_remaining().map(|units| DELTA.amount(units)),
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// What the ledger's files hold, or the error that says why they cannot be read.
fn readable<T>(result: Result<T, String>) -> T {
    result
        .map_err(|reason| Error::LedgerRead { reason })
        .or_raise()
}

/// A row of the dp_ledger view.
type LedgerRow = (
    TimestampWithTimeZone,
    Option<Oid>,
    String,
    Option<f64>,
    Option<f64>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
);

/// The rows of the dp_ledger view, budget administrators only: the archives dropped (one
/// row each, where their history went), then every line of each archive, oldest first,
/// then the ledger file's; each says which file keeps it.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn dp_ledger_entries(
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<
    'static,
    (
        name!(at, TimestampWithTimeZone),
        name!(role, Option<Oid>),
        name!(kind, String),
        name!(epsilon, Option<f64>),
        name!(delta, Option<f64>),
        name!(aggregate, Option<String>),
        name!(statement, Option<String>),
        name!(lsn, Option<String>),
        name!(file, String),
    ),
> {
    // SAFETY: PostgreSQL's call info of this function.
    if !unsafe { is_budget_administrator(fcinfo) } {
        raise(Error::NotBudgetAdministrator {
            // SAFETY: a backend running a query always has a current user.
            role: role_name(unsafe { pg_sys::GetUserId() }.to_u32()),
        });
    }
    let at =
        |time: i64| TimestampWithTimeZone::try_from(time).expect("a timestamp the ledger wrote");
    let mut rows: Vec<LedgerRow> = readable(file::read_dropped(DROPPED_PATH))
        .into_iter()
        .map(|dropped| {
            (
                at(dropped.time),
                None,
                "dropped".into(),
                None,
                None,
                None,
                None,
                Some(lsn_text(dropped.through)),
                format!("{LEDGER_DIRECTORY}/{}", dropped.name),
            )
        })
        .collect();
    let mut files: Vec<(String, std::path::PathBuf)> =
        readable(file::archives(LEDGER_DIRECTORY.as_ref()))
            .into_iter()
            .map(|archive| (format!("{LEDGER_DIRECTORY}/{}", archive.name), archive.path))
            .collect();
    files.push((LEDGER_PATH.into(), LEDGER_PATH.into()));
    for (name, path) in files {
        // The reader of start-up replay: a malformed line is an error here too, never
        // silently left out of what a DBA audits.
        let contents = readable(LedgerFile::new(path).read());
        rows.extend(contents.records.into_iter().map(|Entry { lsn, record }| {
            // Lines from before the ledger was WAL-logged have no position.
            let lsn = (lsn != 0).then(|| lsn_text(lsn));
            let (at, role) = (at(record.time()), Some(Oid::from(record.role())));
            match record {
                Record::Limit(Limit { limit, .. }) => (
                    at,
                    role,
                    "limit".into(),
                    limit.map(|l| l.epsilon),
                    limit.map(|l| l.delta),
                    None,
                    None,
                    lsn,
                    name.clone(),
                ),
                Record::Charge(Charge {
                    epsilon,
                    delta,
                    aggregate,
                    statement,
                    ..
                }) => (
                    at,
                    role,
                    "charge".into(),
                    Some(epsilon),
                    Some(delta),
                    Some(aggregate),
                    Some(format!("{statement:016x}")),
                    lsn,
                    name.clone(),
                ),
            }
        }));
    }
    TableIterator::new(rows)
}

/// Removes the ledger's archives whose last line is older than `older_than`, noting each
/// first (dp_ledger shows a `dropped` row for it); how many were removed. Their charges
/// stay in the accounts. Not executable by PUBLIC.
#[pg_extern(volatile, parallel_unsafe)]
fn dp_ledger_drop_archives(older_than: TimestampWithTimeZone) -> i32 {
    require_preloaded();
    let limit = i64::from(older_than);
    let mut dropped = 0;
    for archive in readable(file::archives(LEDGER_DIRECTORY.as_ref())) {
        let last = readable(LedgerFile::new(&archive.path).last_entry());
        if last.is_some_and(|entry| entry.record.time() >= limit) {
            continue;
        }
        let note = file::Dropped {
            time: now(),
            name: archive.name.clone(),
            through: archive.through,
        };
        file::note_dropped(DROPPED_PATH, &note)
            .and_then(|()| {
                std::fs::remove_file(&archive.path)
                    .map_err(|e| format!("{}: {e}", archive.path.display()))
            })
            .map_err(|reason| Error::LedgerWrite { reason })
            .or_raise();
        dropped += 1;
    }
    dropped
}

extension_sql!(
    r#"
REVOKE EXECUTE ON FUNCTION dp_budget_set(regrole, double precision, double precision) FROM PUBLIC;

CREATE VIEW dp_budget AS
SELECT role::regrole AS role, epsilon_limit, epsilon_spent, epsilon_remaining,
       delta_limit, delta_spent, delta_remaining
  FROM dp_budget_accounts();
GRANT SELECT ON dp_budget TO PUBLIC;

CREATE VIEW dp_ledger AS
SELECT at, role::regrole AS role, kind, epsilon, delta, aggregate, statement,
       lsn::pg_lsn AS lsn, file
  FROM dp_ledger_entries();
GRANT SELECT ON dp_ledger TO PUBLIC;
REVOKE EXECUTE ON FUNCTION dp_ledger_drop_archives(timestamp with time zone) FROM PUBLIC;

COMMENT ON FUNCTION dp_budget_set(regrole, double precision, double precision) IS
'Sets the total epsilon, and the total delta (default 0: no (epsilon, delta) mechanism), a role may spend on differentially private aggregates (epsilon NULL: no limit); what it has spent is kept. Takes effect at once and is not undone by ROLLBACK. Not executable by PUBLIC: superusers, and roles granted EXECUTE (budget administrators). Needs pg_exp_mech in shared_preload_libraries.';
COMMENT ON FUNCTION dp_budget_remaining() IS
'Epsilon left to the session''s login role; NULL when it has no limit.';
COMMENT ON FUNCTION dp_budget_accounts() IS
'Rows of the view dp_budget: every role for a budget administrator, the session''s login role for anyone else.';
COMMENT ON FUNCTION dp_ledger_entries() IS
'Rows of the view dp_ledger, for budget administrators only.';
COMMENT ON FUNCTION dp_ledger_drop_archives(timestamp with time zone) IS
'Removes the archives of the privacy ledger (pg_exp_mech/ledger.<LSN>, made by pg_exp_mech.ledger_rotation_size) whose last line is older than the given time; returns how many. Each is noted first, and dp_ledger shows a dropped row for it; the charges stay in the accounts. Not executable by PUBLIC.';
COMMENT ON VIEW dp_budget IS
'Privacy budgets: limit, spent and remaining epsilon and delta per role (a role that is not a budget administrator sees its own row).';
COMMENT ON VIEW dp_ledger IS
'The privacy ledger: every budget change and every charge (time, login role, epsilon, delta, aggregate, fingerprint of the statement, the WAL position of its record, and the file that keeps it: the ledger or one of its archives; a limit row gives the epsilon and delta limits), after a dropped row for each archive removed by dp_ledger_drop_archives (its last WAL position). Budget administrators only; readable on standbys.';
"#,
    name = "budget_objects",
    requires = [
        dp_budget_set,
        dp_budget_remaining,
        dp_budget_accounts,
        dp_ledger_entries,
        dp_ledger_drop_archives
    ],
);
