//! Privacy budgets: a per-role ε limit that every DP aggregate charges before its result
//! can reach the client.
//!
//! The ledger is an append-only file in the data directory (`pg_exp_mech/ledger`, one
//! line per charge or limit, see ledger.rs), mirrored in shared memory. Why not a table:
//! a row written in the analyst's transaction would vanish with a ROLLBACK, an error later
//! in the transaction or a cancelled statement, after the result was seen. Instead:
//! - one LWLock serialises check-and-charge, so concurrent sessions cannot overspend;
//! - the line is written (and fsynced for a role with a limit) before the aggregate
//!   returns, so a crash after a result left cannot lose its charge;
//! - the postmaster replays the file into shared memory at start-up and after a crash.
//! This needs `shared_preload_libraries = 'pg_exp_mech'`.

use super::arguments::aggregate_argument;
use super::{guc, raise};
use crate::error::Error;
use crate::ledger::{self, epsilon_of, Account, Record};
use pgrx::callconv::{Arg, ArgAbi};
use pgrx::lwlock::PgLwLock;
use pgrx::pg_sys::{self, Oid};
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, FromDatum, PGRXSharedMemory};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};

/// The ledger, relative to the data directory (every backend's working directory).
const LEDGER_DIRECTORY: &str = "pg_exp_mech";
const LEDGER: &str = "pg_exp_mech/ledger";

/// How many roles the shared accounts hold.
const CAPACITY: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct SharedAccount {
    role: u32,
    has_limit: bool,
    limit: u64,
    spent: u64,
}

impl SharedAccount {
    fn account(&self) -> Account {
        Account {
            limit: self.has_limit.then_some(self.limit),
            spent: self.spent,
        }
    }

    fn store(&mut self, account: Account) {
        self.has_limit = account.limit.is_some();
        self.limit = account.limit.unwrap_or(0);
        self.spent = account.spent;
    }
}

/// Every role's account, in shared memory.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct SharedAccounts {
    loaded: bool,
    /// The ledger could not be read at start-up: every charge is refused until it is
    /// repaired (never silently start from zero).
    unreadable: bool,
    count: u32,
    accounts: [SharedAccount; CAPACITY],
}

unsafe impl PGRXSharedMemory for SharedAccounts {}

impl Default for SharedAccounts {
    fn default() -> Self {
        Self {
            loaded: false,
            unreadable: false,
            count: 0,
            accounts: [SharedAccount::default(); CAPACITY],
        }
    }
}

impl SharedAccounts {
    fn find(&self, role: u32) -> Option<&SharedAccount> {
        self.accounts[..self.count as usize].iter().find(|a| a.role == role)
    }

    fn find_or_insert(&mut self, role: u32) -> Result<&mut SharedAccount, Error> {
        let count = self.count as usize;
        if let Some(at) = self.accounts[..count].iter().position(|a| a.role == role) {
            return Ok(&mut self.accounts[at]);
        }
        if count == CAPACITY {
            return Err(Error::TooManyRoles { capacity: CAPACITY });
        }
        self.count += 1;
        self.accounts[count] = SharedAccount {
            role,
            ..Default::default()
        };
        Ok(&mut self.accounts[count])
    }
}

static ACCOUNTS: PgLwLock<SharedAccounts> = unsafe { PgLwLock::new(c"pg_exp_mech budgets") };

/// Whether this process has the shared accounts (pg_exp_mech is preloaded).
static PRELOADED: AtomicBool = AtomicBool::new(false);

static mut PREVIOUS_SHMEM_STARTUP: Option<unsafe extern "C-unwind" fn()> = None;

/// Reserves the shared accounts; called from _PG_init while preloading.
pub fn init_shared_memory() {
    pg_shmem_init!(ACCOUNTS);
    unsafe {
        // Runs after pgrx's hook (which attaches ACCOUNTS): it is the previous one.
        PREVIOUS_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(load_ledger);
    }
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Replays the ledger into shared memory, once per shared memory (at start-up, and again
/// after a crash restart). A last line cut short by a crash is truncated away: its write
/// never completed, so its result never left.
#[pg_guard]
unsafe extern "C-unwind" fn load_ledger() {
    if let Some(previous) = PREVIOUS_SHMEM_STARTUP {
        previous();
    }
    let mut shared = ACCOUNTS.exclusive();
    if shared.loaded {
        return;
    }
    shared.loaded = true;
    match read_ledger() {
        Ok(accounts) if accounts.len() <= CAPACITY => {
            for (role, account) in accounts {
                let slot = shared.find_or_insert(role).expect("within capacity");
                slot.store(account);
            }
        }
        Ok(_) => {
            shared.unreadable = true;
            warning!("pg_exp_mech: the privacy ledger has more than {CAPACITY} roles; every DP aggregate is refused");
        }
        Err(reason) => {
            shared.unreadable = true;
            warning!("pg_exp_mech: the privacy ledger {LEDGER} cannot be read ({reason}); every DP aggregate is refused until it is repaired");
        }
    }
}

fn read_ledger() -> Result<BTreeMap<u32, Account>, String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(LEDGER_DIRECTORY)
        .map_err(|e| format!("{LEDGER_DIRECTORY}: {e}"))?;
    let text = match fs::read(LEDGER) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|e| e.to_string())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e.to_string()),
    };
    let (accounts, complete) = ledger::replay(&text)?;
    if complete < text.len() {
        OpenOptions::new()
            .write(true)
            .open(LEDGER)
            .and_then(|file| file.set_len(complete as u64))
            .map_err(|e| format!("truncating a torn last line: {e}"))?;
        log!("pg_exp_mech: dropped a ledger line cut short by a crash");
    }
    Ok(accounts)
}

thread_local! {
    static LEDGER_FILE: RefCell<Option<File>> = const { RefCell::new(None) };
}

/// Appends a record; with `sync`, waits until it is on disk. Called with the LWLock held.
fn append(record: &Record, sync: bool) -> Result<(), Error> {
    LEDGER_FILE.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            let file = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(LEDGER)
                .map_err(|e| Error::LedgerWrite { reason: format!("{LEDGER}: {e}") })?;
            *slot = Some(file);
        }
        let file = slot.as_mut().expect("just opened");
        file.write_all(record.line().as_bytes())
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) })
            .map_err(|e| Error::LedgerWrite { reason: e.to_string() })
    })
}

fn role_name(role: u32) -> String {
    unsafe {
        let name = pg_sys::GetUserNameFromId(Oid::from(role), true);
        if name.is_null() {
            role.to_string()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

fn now() -> i64 {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// The login role of the session: SET ROLE does not move charges to another budget.
fn session_role() -> u32 {
    unsafe { pg_sys::GetSessionUserId() }.to_u32()
}

/// A fingerprint of the statement being run.
fn statement_fingerprint() -> u64 {
    unsafe {
        let text = pg_sys::debug_query_string;
        if text.is_null() {
            0
        } else {
            ledger::fingerprint(CStr::from_ptr(text).to_bytes())
        }
    }
}

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

/// Why a charge inside the lock failed (turned into an Error once the lock is released:
/// no catalog lookup while an LWLock is held).
enum Refusal {
    Error(Error),
    NoBudget,
    Exceeded { remaining: u64, limit: u64 },
}

/// Charges the session's login role for one evaluation, before its result exists.
/// Every DP final function calls this; a refusal raises an error, so nothing is returned.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate's final function.
pub unsafe fn charge(fcinfo: pg_sys::FunctionCallInfo, release: Release) {
    if !PRELOADED.load(Ordering::Relaxed) {
        return refuse_unless_unmetered();
    }
    let role = session_role();
    let limited = ACCOUNTS.share().find(role).is_some_and(|a| a.has_limit);
    let must_have_budget = budget_required(role);
    if limited || must_have_budget {
        if plan_is_instrumented(fcinfo) {
            raise(Error::ExplainAnalyzeRefused { role: role_name(role) });
        }
        // The charge must be what the statement says, whatever the rows: epsilon must
        // not depend on them.
        let fixed = aggregate_argument(fcinfo, release.epsilon_position).float();
        if fixed != Some(Some(release.epsilon)) {
            raise(Error::InvalidParameter {
                name: "epsilon",
                value: "an expression of the rows".into(),
                requirement: "a constant or a parameter of the statement for a role with a privacy budget".into(),
            });
        }
    }
    let record = Record::Charge {
        time: now(),
        role,
        epsilon: release.epsilon,
        delta: release.delta,
        aggregate: release.aggregate.into(),
        statement: statement_fingerprint(),
    };
    let units = ledger::charge_units(release.epsilon);
    let outcome = {
        let mut shared = ACCOUNTS.exclusive();
        (|| {
            if shared.unreadable {
                return Err(Refusal::Error(Error::BudgetsUnavailable {
                    reason: format!("the privacy ledger {LEDGER} could not be read at start-up (see the server log)"),
                }));
            }
            let slot = shared.find_or_insert(role).map_err(Refusal::Error)?;
            let mut account = slot.account();
            if account.limit.is_none() && must_have_budget {
                return Err(Refusal::NoBudget);
            }
            if !account.allows(units) {
                return Err(Refusal::Exceeded {
                    remaining: account.remaining().unwrap_or(0),
                    limit: account.limit.unwrap_or(0),
                });
            }
            // Written (fsynced where a limit is at stake) before memory and before the
            // result: what the client may see is always on the ledger.
            append(&record, account.limit.is_some()).map_err(Refusal::Error)?;
            account.apply(&record);
            slot.store(account);
            Ok(())
        })()
    };
    match outcome {
        Ok(()) => {}
        Err(Refusal::Error(error)) => raise(error),
        Err(Refusal::NoBudget) => raise(Error::NoBudget { role: role_name(role) }),
        Err(Refusal::Exceeded { remaining, limit }) => raise(Error::BudgetExceeded {
            role: role_name(role),
            aggregate: release.aggregate,
            epsilon: release.epsilon,
            remaining: epsilon_of(remaining),
            limit: epsilon_of(limit),
        }),
    }
}

/// Without the shared accounts nothing can be charged: refuse where budgets are expected.
fn refuse_unless_unmetered() {
    if guc::require_budget() {
        raise(Error::BudgetsUnavailable {
            reason: "pg_exp_mech.require_budget is on, but pg_exp_mech is not in shared_preload_libraries".into(),
        });
    }
    if fs::metadata(LEDGER).is_ok() {
        raise(Error::BudgetsUnavailable {
            reason: format!("this cluster keeps a privacy ledger ({LEDGER}), but pg_exp_mech is not in shared_preload_libraries"),
        });
    }
}

fn require_preloaded() {
    if !PRELOADED.load(Ordering::Relaxed) {
        raise(Error::BudgetsUnavailable {
            reason: "pg_exp_mech is not in shared_preload_libraries".into(),
        });
    }
}

/// A role, as the SQL type regrole.
pub struct RegRole(pub Oid);

impl FromDatum for RegRole {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: Oid) -> Option<Self> {
        (!is_null).then(|| RegRole(Oid::from(datum.value() as u32)))
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for RegRole {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        unsafe { arg.unbox_arg_using_from_datum().expect("a non-NULL regrole") }
    }
}

unsafe impl SqlTranslatable for RegRole {
    const TYPE_IDENT: &'static str = concat!(module_path!(), "::RegRole");
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("regrole"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("regrole")));
}

/// Sets a role's ε limit (NULL: no limit); what it has spent is kept. Takes effect at
/// once, for every session, and is not undone by ROLLBACK.
#[pg_extern(volatile, parallel_unsafe)]
fn dp_budget_set(role: Option<RegRole>, epsilon: Option<f64>) {
    // EXECUTE is revoked from PUBLIC: PostgreSQL has checked the caller's privilege.
    require_preloaded();
    let Some(RegRole(role)) = role else {
        raise(Error::InvalidParameter {
            name: "role",
            value: "NULL".into(),
            requirement: "a role".into(),
        });
    };
    let limit = match epsilon {
        None => None,
        Some(e) if e.is_finite() && e >= 0.0 => Some(e),
        _ => raise(Error::invalid(
            "epsilon",
            epsilon,
            "finite and at least 0 (NULL removes the limit)",
        )),
    };
    let record = Record::Limit {
        time: now(),
        role: role.to_u32(),
        limit,
    };
    let outcome = {
        let mut shared = ACCOUNTS.exclusive();
        (|| {
            if shared.unreadable {
                return Err(Error::BudgetsUnavailable {
                    reason: format!("the privacy ledger {LEDGER} could not be read at start-up"),
                });
            }
            let slot = shared.find_or_insert(role.to_u32())?;
            append(&record, true)?;
            let mut account = slot.account();
            account.apply(&record);
            slot.store(account);
            Ok(())
        })()
    };
    outcome.unwrap_or_else(|e| raise(e));
}

/// ε left to the session's login role; NULL when it has no limit.
#[pg_extern(volatile, parallel_safe)]
fn dp_budget_remaining() -> Option<f64> {
    if !PRELOADED.load(Ordering::Relaxed) {
        return None;
    }
    let shared = ACCOUNTS.share();
    let remaining = shared.find(session_role())?.account().remaining()?;
    Some(epsilon_of(remaining))
}

/// Whether the current role is a budget administrator: a role that may execute
/// dp_budget_set (superusers, and roles granted EXECUTE). Fully qualified, so that no
/// search_path can substitute another function.
fn is_budget_administrator() -> bool {
    Spi::get_one::<bool>(
        "SELECT pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
           FROM pg_catalog.pg_proc p
           JOIN pg_catalog.pg_extension e ON e.extnamespace = p.pronamespace
          WHERE e.extname = 'pg_exp_mech' AND p.proname = 'dp_budget_set'",
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// The rows of the dp_budget view: every role for a budget administrator, the session's
/// login role for anyone else.
#[pg_extern(volatile, parallel_safe)]
fn dp_budget_accounts() -> TableIterator<
    'static,
    (
        name!(role, Oid),
        name!(epsilon_limit, Option<f64>),
        name!(epsilon_spent, f64),
        name!(epsilon_remaining, Option<f64>),
    ),
> {
    if !PRELOADED.load(Ordering::Relaxed) {
        return TableIterator::new(Vec::new());
    }
    let everyone = is_budget_administrator();
    let own = session_role();
    let shared = ACCOUNTS.share();
    let rows: Vec<_> = shared.accounts[..shared.count as usize]
        .iter()
        .filter(|slot| everyone || slot.role == own)
        .map(|slot| {
            let account = slot.account();
            (
                Oid::from(slot.role),
                account.limit.map(epsilon_of),
                epsilon_of(account.spent),
                account.remaining().map(epsilon_of),
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// The rows of the dp_ledger view: budget administrators only.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn dp_ledger_entries() -> TableIterator<
    'static,
    (
        name!(at, TimestampWithTimeZone),
        name!(role, Oid),
        name!(kind, String),
        name!(epsilon, Option<f64>),
        name!(delta, Option<f64>),
        name!(aggregate, Option<String>),
        name!(statement, Option<String>),
    ),
> {
    if !is_budget_administrator() {
        raise(Error::NotBudgetAdministrator {
            role: role_name(unsafe { pg_sys::GetUserId() }.to_u32()),
        });
    }
    let text = fs::read_to_string(LEDGER).unwrap_or_default();
    let at = |time: i64| TimestampWithTimeZone::try_from(time).expect("a timestamp the ledger wrote");
    let rows: Vec<_> = ledger::complete_lines(&text)
        .lines()
        .filter_map(|line| Record::parse(line).ok())
        .map(|record| match record {
            Record::Limit { time, role, limit } => {
                (at(time), Oid::from(role), "limit".into(), limit, None, None, None)
            }
            Record::Charge {
                time,
                role,
                epsilon,
                delta,
                aggregate,
                statement,
            } => (
                at(time),
                Oid::from(role),
                "charge".into(),
                Some(epsilon),
                Some(delta),
                Some(aggregate),
                Some(format!("{statement:016x}")),
            ),
        })
        .collect();
    TableIterator::new(rows)
}

extension_sql!(
    r#"
REVOKE EXECUTE ON FUNCTION dp_budget_set(regrole, double precision) FROM PUBLIC;

CREATE VIEW dp_budget AS
SELECT role::regrole AS role, epsilon_limit, epsilon_spent, epsilon_remaining
  FROM dp_budget_accounts();
GRANT SELECT ON dp_budget TO PUBLIC;

CREATE VIEW dp_ledger AS
SELECT at, role::regrole AS role, kind, epsilon, delta, aggregate, statement
  FROM dp_ledger_entries();
GRANT SELECT ON dp_ledger TO PUBLIC;

COMMENT ON FUNCTION dp_budget_set(regrole, double precision) IS
'Sets the total epsilon a role may spend on differentially private aggregates (NULL: no limit); what it has spent is kept. Takes effect at once and is not undone by ROLLBACK. Not executable by PUBLIC: superusers, and roles granted EXECUTE (budget administrators). Needs pg_exp_mech in shared_preload_libraries.';
COMMENT ON FUNCTION dp_budget_remaining() IS
'Epsilon left to the session''s login role; NULL when it has no limit.';
COMMENT ON FUNCTION dp_budget_accounts() IS
'Rows of the view dp_budget: every role for a budget administrator, the session''s login role for anyone else.';
COMMENT ON FUNCTION dp_ledger_entries() IS
'Rows of the view dp_ledger, for budget administrators only.';
COMMENT ON VIEW dp_budget IS
'Privacy budgets: limit, spent and remaining epsilon per role (a role that is not a budget administrator sees its own row).';
COMMENT ON VIEW dp_ledger IS
'The privacy ledger: every budget change and every charge (time, login role, epsilon, delta, aggregate, fingerprint of the statement). Budget administrators only.';
"#,
    name = "budget_objects",
    requires = [
        dp_budget_set,
        dp_budget_remaining,
        dp_budget_accounts,
        dp_ledger_entries
    ],
);

/// EXPLAIN ANALYZE shows exact row counts under a DP aggregate: refuse it to roles with
/// a budget (as pg_diffix does for its restricted roles). Two checks:
/// - after parse analysis, an EXPLAIN (ANALYZE) whose statement (views expanded) calls
///   one of our aggregates is refused before anything runs;
/// - at run time, charge() refuses when the aggregate's own plan is instrumented, which is
///   when the row counts of the scans under it would be shown (EXPLAIN ANALYZE EXECUTE,
///   CREATE TABLE AS, auto_explain with log_analyze).
/// No hook wraps the execution of other statements, so their errors reach the client
/// untouched.
pub fn install_explain_guard() {
    unsafe {
        PREVIOUS_POST_PARSE_ANALYZE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(refuse_explain_analyze);
    }
}

static mut PREVIOUS_POST_PARSE_ANALYZE: pg_sys::post_parse_analyze_hook_type = None;

#[cfg(not(feature = "pg13"))]
#[pg_guard]
unsafe extern "C-unwind" fn refuse_explain_analyze(
    parse: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jumble: *mut pg_sys::JumbleState,
) {
    if let Some(previous) = PREVIOUS_POST_PARSE_ANALYZE {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(parse, query, jumble));
    }
    check_explain_analyze(query);
}

#[cfg(feature = "pg13")]
#[pg_guard]
unsafe extern "C-unwind" fn refuse_explain_analyze(parse: *mut pg_sys::ParseState, query: *mut pg_sys::Query) {
    if let Some(previous) = PREVIOUS_POST_PARSE_ANALYZE {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(parse, query));
    }
    check_explain_analyze(query);
}

unsafe fn check_explain_analyze(query: *mut pg_sys::Query) {
    if query.is_null() || (*query).commandType != pg_sys::CmdType::CMD_UTILITY {
        return;
    }
    let statement = (*query).utilityStmt;
    if statement.is_null() || !pgrx::is_a(statement, pg_sys::NodeTag::T_ExplainStmt) {
        return;
    }
    let explain = statement as *mut pg_sys::ExplainStmt;
    let options = pgrx::PgList::<pg_sys::DefElem>::from_pg((*explain).options);
    let analyze = options.iter_ptr().any(|option| {
        CStr::from_ptr((*option).defname).to_bytes() == b"analyze" && pg_sys::defGetBoolean(option)
    });
    if analyze && session_is_budgeted() && calls_dp_aggregate((*explain).query) {
        raise(Error::ExplainAnalyzeRefused {
            role: role_name(session_role()),
        });
    }
}

/// Whether the plan that calls this aggregate is instrumented: its scans' exact row
/// counts are being collected for display.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate's final function.
unsafe fn plan_is_instrumented(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    let context = (*fcinfo).context;
    if context.is_null()
        || !(pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
            || pgrx::is_a(context, pg_sys::NodeTag::T_WindowAggState))
    {
        return false;
    }
    // AggState and WindowAggState both begin with their PlanState.
    let plan = context as *mut pg_sys::PlanState;
    !(*plan).state.is_null() && (*(*plan).state).es_instrument != 0
}

/// Whether the role that runs the session has a limit (or must have one).
fn session_is_budgeted() -> bool {
    let role = session_role();
    budget_required(role)
        || (PRELOADED.load(Ordering::Relaxed) && ACCOUNTS.share().find(role).is_some_and(|a| a.has_limit))
}

/// pg_exp_mech.require_budget applies to every role but superusers, who bypass every
/// privilege and can read the tables themselves (as with row-level security). They are
/// still charged, and their charges recorded.
fn budget_required(role: u32) -> bool {
    guc::require_budget() && !unsafe { pg_sys::superuser_arg(Oid::from(role)) }
}

/// Whether a query, with its views expanded, calls an aggregate of this extension.
unsafe fn calls_dp_aggregate(query: *mut pg_sys::Node) -> bool {
    if query.is_null() || !pgrx::is_a(query, pg_sys::NodeTag::T_Query) {
        return false;
    }
    if (*(query as *mut pg_sys::Query)).commandType == pg_sys::CmdType::CMD_UTILITY {
        return false; // EXECUTE, CREATE TABLE AS, ...: left to the run-time check.
    }
    let extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
    let copy = pg_sys::copyObjectImpl(query as *const std::ffi::c_void) as *mut pg_sys::Query;
    let rewritten = pgrx::PgList::<pg_sys::Query>::from_pg(pg_sys::QueryRewrite(copy));
    let mut context = extension;
    let found = rewritten.iter_ptr().any(|query| {
        pg_sys::query_tree_walker(
            query,
            Some(dp_aggregate_walker),
            &mut context as *mut Oid as *mut std::ffi::c_void,
            0,
        )
    });
    found
}

#[pg_guard]
unsafe extern "C-unwind" fn dp_aggregate_walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    if node.is_null() {
        return false;
    }
    if pgrx::is_a(node, pg_sys::NodeTag::T_Aggref) {
        let function = (*(node as *mut pg_sys::Aggref)).aggfnoid;
        let extension = *(context as *mut Oid);
        if pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension {
            return true;
        }
    }
    if pgrx::is_a(node, pg_sys::NodeTag::T_Query) {
        return pg_sys::query_tree_walker(node as *mut pg_sys::Query, Some(dp_aggregate_walker), context, 0);
    }
    pg_sys::expression_tree_walker(node, Some(dp_aggregate_walker), context)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, error_of, run};
    use pgrx::prelude::*;

    /// A login role with a fresh budget, a table it cannot read, and DP views over it.
    fn analyst(name: &str, budget: f64) {
        run(&[
            &format!("CREATE ROLE {name} LOGIN"),
            "CREATE TABLE IF NOT EXISTS secret AS SELECT i % 7 AS item, i AS value FROM generate_series(1, 1000) i",
            "CREATE OR REPLACE VIEW top_item AS SELECT dp_argmax(item, 1, 0.25) FROM secret",
            "CREATE OR REPLACE VIEW by_item AS SELECT item, dp_quantile(value, 0.5, 0, 1000, 0.125) FROM secret GROUP BY item",
            &format!("GRANT SELECT ON top_item, by_item TO {name}"),
            &format!("SELECT dp_budget_set('{name}', {budget})"),
        ]);
    }

    fn spent(name: &str) -> String {
        column(&format!("SELECT epsilon_spent::text FROM dp_budget WHERE role = '{name}'::regrole"))
            .pop()
            .unwrap_or_else(|| "no row".into())
    }

    #[pg_test]
    fn budget_charges_every_evaluation() {
        analyst("charged_analyst", 100.0);
        run(&["SET SESSION AUTHORIZATION charged_analyst"]);
        run(&["SELECT * FROM top_item"]);
        assert_eq!(spent("charged_analyst"), "0.25");
        // A correlated subquery evaluates the view three times: three charges.
        run(&["SELECT (SELECT * FROM top_item WHERE g > 0) FROM generate_series(1, 3) g"]);
        assert_eq!(spent("charged_analyst"), "1");
        // A GROUP BY is charged once per group (7 groups at 0.125).
        assert_eq!(column("SELECT count(*)::text FROM by_item"), ["7"]);
        assert_eq!(spent("charged_analyst"), "1.875");
        // Two identical calls are two draws and two charges (the aggregates are VOLATILE).
        run(&["SELECT a.*, b.* FROM top_item a, top_item b"]);
        assert_eq!(spent("charged_analyst"), "2.375");
        assert_eq!(column("SELECT dp_budget_remaining()::text"), ["97.625"]);
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_refuses_beyond_the_limit_and_charges_nothing_then() {
        analyst("thrifty_analyst", 0.6);
        run(&["SET SESSION AUTHORIZATION thrifty_analyst"]);
        run(&["SELECT * FROM top_item"]);
        run(&["SELECT * FROM top_item"]);
        assert_eq!(
            error_of("SELECT * FROM top_item"),
            "53400: privacy budget of role \"thrifty_analyst\" exceeded: dp_argmax needs epsilon 0.25, 0.1 of 0.6 remain"
        );
        assert_eq!(spent("thrifty_analyst"), "0.5");
        // A parameter error happens before any charge.
        assert!(error_of("SELECT dp_argmax(x, 1, -1) FROM (VALUES (1)) v(x)").starts_with("22023"));
        assert_eq!(spent("thrifty_analyst"), "0.5");
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_an_error_later_does_not_refund() {
        analyst("rolled_back_analyst", 10.0);
        run(&["SET SESSION AUTHORIZATION rolled_back_analyst"]);
        // The answer reaches PL/pgSQL, then an error rolls the subtransaction back: the
        // charge stays (ROLLBACK of a whole transaction: tests/test_budgets.sh).
        run(&["DO $$
               DECLARE answer int;
               BEGIN
                   SELECT * INTO answer FROM top_item;
                   RAISE EXCEPTION 'the answer was %', answer;
               EXCEPTION WHEN raise_exception THEN NULL;
               END $$"]);
        assert_eq!(spent("rolled_back_analyst"), "0.25");
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_views_and_ledger_are_guarded() {
        analyst("curious_analyst", 1.0);
        analyst("other_analyst", 2.0);
        run(&["SET SESSION AUTHORIZATION curious_analyst"]);
        assert_eq!(column("SELECT role::text FROM dp_budget"), ["curious_analyst"]);
        assert_eq!(
            error_of("SELECT dp_budget_set('curious_analyst', 1000)"),
            "42501: permission denied for function dp_budget_set"
        );
        assert_eq!(
            error_of("SELECT * FROM dp_ledger"),
            "42501: permission denied for the privacy ledger: role \"curious_analyst\" is not a budget administrator (one that may execute dp_budget_set)"
        );
        assert_eq!(
            error_of("SELECT * FROM dp_ledger_entries()"),
            "42501: permission denied for the privacy ledger: role \"curious_analyst\" is not a budget administrator (one that may execute dp_budget_set)"
        );
        // The ledger is a file behind a view: there is no row to write or delete.
        assert_eq!(error_of("DELETE FROM dp_ledger"), "55000: cannot delete from view \"dp_ledger\"");
        assert_eq!(
            error_of("INSERT INTO dp_ledger (kind) VALUES ('limit')"),
            "55000: cannot insert into view \"dp_ledger\""
        );
        assert_eq!(
            error_of("SET pg_exp_mech.require_budget = off"),
            "42501: permission denied to set parameter \"pg_exp_mech.require_budget\""
        );
        // EXPLAIN ANALYZE would show exact counts; plain EXPLAIN is allowed.
        assert_eq!(
            error_of("EXPLAIN ANALYZE SELECT * FROM top_item"),
            "42501: EXPLAIN ANALYZE of a statement with differentially private aggregates is not allowed for role \"curious_analyst\", which has a privacy budget: it would show exact row counts"
        );
        assert!(error_of("EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM by_item").starts_with("42501"));
        assert_eq!(error_of("EXPLAIN SELECT * FROM top_item"), "no error");
        run(&["RESET SESSION AUTHORIZATION"]);
        // A role granted EXECUTE is a budget administrator: it sees every row and the ledger.
        run(&["GRANT EXECUTE ON FUNCTION dp_budget_set(regrole, float8) TO other_analyst",
              "SET SESSION AUTHORIZATION other_analyst"]);
        let roles = column("SELECT role::text FROM dp_budget WHERE role::text LIKE '%_analyst' ORDER BY 1");
        assert!(roles.contains(&"curious_analyst".to_string()) && roles.contains(&"other_analyst".to_string()));
        assert_eq!(error_of("SELECT count(*) FROM dp_ledger"), "no error");
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_follows_the_login_role_through_set_role() {
        analyst("login_analyst", 1.0);
        analyst("borrowed_analyst", 50.0);
        run(&[
            "GRANT borrowed_analyst TO login_analyst",
            "SET SESSION AUTHORIZATION login_analyst",
            "SET ROLE borrowed_analyst",
        ]);
        run(&["SELECT * FROM top_item"]);
        run(&["RESET ROLE", "RESET SESSION AUTHORIZATION"]);
        assert_eq!(spent("login_analyst"), "0.25");
        assert_eq!(spent("borrowed_analyst"), "0");
    }

    #[pg_test]
    fn budget_needs_a_fixed_epsilon() {
        analyst("column_epsilon_analyst", 10.0);
        run(&[
            "CREATE TABLE epsilons AS SELECT 0.5::float8 AS e, 1 AS item",
            "GRANT SELECT ON epsilons TO column_epsilon_analyst",
            "SET SESSION AUTHORIZATION column_epsilon_analyst",
        ]);
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, e) FROM epsilons"),
            "22023: epsilon must be a constant or a parameter of the statement for a role with a privacy budget, got an expression of the rows"
        );
        assert_eq!(column("SELECT dp_argmax(item, 1, 0.5)::text FROM epsilons"), ["1"]);
        run(&["RESET SESSION AUTHORIZATION"]);
    }

    #[pg_test]
    fn budget_required_spares_superusers() {
        run(&["SET pg_exp_mech.require_budget = on"]);
        assert_eq!(error_of("SELECT dp_argmax(x, 1, 1.0) FROM (VALUES (1)) v(x)"), "no error");
        run(&["RESET pg_exp_mech.require_budget"]);
    }

    #[pg_test]
    fn budget_can_be_required() {
        run(&[
            "CREATE ROLE unbudgeted_analyst",
            "CREATE TABLE IF NOT EXISTS secret AS SELECT i % 7 AS item, i AS value FROM generate_series(1, 1000) i",
            "GRANT SELECT ON secret TO unbudgeted_analyst",
            "SET SESSION AUTHORIZATION unbudgeted_analyst",
        ]);
        assert_eq!(error_of("SELECT dp_argmax(item, 1, 1.0) FROM secret WHERE false"), "no error");
        run(&["RESET SESSION AUTHORIZATION", "SET pg_exp_mech.require_budget = on",
              "SET SESSION AUTHORIZATION unbudgeted_analyst"]);
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, 1.0) FROM secret"),
            "42501: role \"unbudgeted_analyst\" has no privacy budget, and pg_exp_mech.require_budget is on"
        );
        run(&["RESET SESSION AUTHORIZATION", "RESET pg_exp_mech.require_budget"]);
    }

    #[pg_test]
    fn budget_set_validates_its_arguments() {
        run(&["CREATE ROLE limited_analyst"]);
        for (call, message) in [
            ("dp_budget_set('limited_analyst', -1)", "22023: epsilon must be finite and at least 0 (NULL removes the limit), got -1"),
            ("dp_budget_set('limited_analyst', 'NaN')", "22023: epsilon must be finite and at least 0 (NULL removes the limit), got NaN"),
            ("dp_budget_set('limited_analyst', 'Infinity')", "22023: epsilon must be finite and at least 0 (NULL removes the limit), got Infinity"),
            ("dp_budget_set(NULL, 1)", "22023: role must be a role, got NULL"),
            ("dp_budget_set('no_such_role', 1)", "42704: role \"no_such_role\" does not exist"),
        ] {
            assert_eq!(error_of(&format!("SELECT {call}")), message, "{call}");
        }
        run(&["SELECT dp_budget_set('limited_analyst', 0.5)", "SELECT dp_budget_set('limited_analyst', NULL)"]);
        assert_eq!(
            column("SELECT coalesce(epsilon_limit::text, 'none') FROM dp_budget WHERE role = 'limited_analyst'::regrole"),
            ["none"]
        );
    }
}
