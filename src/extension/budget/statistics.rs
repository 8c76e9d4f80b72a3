//! Statistics counters do not count what a DP plan touches (issue 19, part 1).
//!
//! PostgreSQL counts, per relation and index, the tuples and blocks each scan touched
//! (`pg_stat_get_xact_tuples_fetched`, the `pg_stat_*`, `pg_stat_xact_*` and
//! `pg_statio_*` views, and their sums in `pg_stat_database`), the temporary bytes it
//! wrote, the calls of each function, and, for `pg_stat_statements` and EXPLAIN, the
//! buffers and WAL each statement used. Every one of these is an exact row count of the
//! data under a DP aggregate, readable by PUBLIC. So while a plan with DP aggregates of a
//! budgeted role is planned and runs (start, each run, finish, end), counting is off:
//! - relation counters: `track_counts` off when the executor opens each relation (a
//!   relation opened then is not counted until it is opened again), and each relation
//!   of a scan is opened so again at every run (a cursor's next FETCH after another
//!   statement counted it);
//! - function calls (`track_functions`) and I/O timings (`track_io_timing`) off;
//! - temporary files: not reported (PostgreSQL reports them only with `track_counts`);
//! - the buffer and WAL usage of the backend (`pgBufferUsage`, `pgWalUsage`) and of the
//!   statement (`queryDesc->totaltime`, which pg_stat_statements reads) are put back as
//!   they were, so no diff shows them.
//!
//! Two paths run outside those steps and are covered too:
//! - a parallel worker runs only the part of the plan under its Gather, which may hold no
//!   DP aggregate: a budgeted role's workers are silenced whatever their part holds;
//! - an error or a ROLLBACK skips the executor's end, and PostgreSQL closes (and reports)
//!   the plan's temporary files while it cleans up the transaction: after a silenced plan,
//!   counting stays off from the abort until the next statement starts.
//!
//! What still moves (README, side channels): timing, `pg_class` and planner estimates,
//! the WAL position moved by hint bits, global counters such as `pg_stat_bgwriter`.

use super::charge::session_is_budgeted;
use super::dp_plans::{holds_dp_aggregates, is_fragment};
use super::row_errors::{withheld, withhold_context};
use pgrx::is_a;
use pgrx::pg_sys::{self, NodeTag};
use std::cell::Cell;
use std::ffi::c_void;

static mut PREVIOUS_EXECUTOR_FINISH: pg_sys::ExecutorFinish_hook_type = None;
static mut PREVIOUS_EXECUTOR_END: pg_sys::ExecutorEnd_hook_type = None;
static mut PREVIOUS_EMIT_LOG: pg_sys::emit_log_hook_type = None;

thread_local! {
    /// A silenced plan started in this transaction (cleared at its end).
    static SILENCED_IN_TRANSACTION: Cell<bool> = const { Cell::new(false) };
    /// Counting was turned off at an abort, to be turned on again when the next
    /// statement starts: (track_counts, track_functions, track_io_timing) to restore.
    static OFF_SINCE_ABORT: Cell<Option<Settings>> = const { Cell::new(None) };
    /// How many [`Silence`] guards are alive.
    static SILENCES: Cell<u32> = const { Cell::new(0) };
    /// How many DP aggregation nodes are running ([`below_dp_nodes`]).
    static BELOW_DP: Cell<u32> = const { Cell::new(0) };
    /// The server's `log_min_messages` while a guard is alive (the guards lower it so
    /// that every message reaches [`silenced_messages`]).
    static LOG_MIN_MESSAGES: Cell<std::ffi::c_int> = const { Cell::new(pg_sys::WARNING as _) };
}

/// Installs the executor hooks that run a silenced statement's later steps (its start is
/// silenced by the metering hook), and the transaction callbacks of an abort; called from
/// _PG_init.
pub fn install_statistics() {
    // SAFETY: _PG_init runs once per process, single-threaded, before any statement
    // runs: nothing else reads or writes the hooks meanwhile. The callbacks live as long
    // as the library.
    unsafe {
        pg_sys::RegisterXactCallback(Some(transaction_ended), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(subtransaction_ended), std::ptr::null_mut());
        crate::extension::versions::install_executor_run(silenced_run);
        PREVIOUS_EXECUTOR_FINISH = pg_sys::ExecutorFinish_hook;
        pg_sys::ExecutorFinish_hook = Some(silenced_finish);
        PREVIOUS_EXECUTOR_END = pg_sys::ExecutorEnd_hook;
        pg_sys::ExecutorEnd_hook = Some(silenced_end);
        PREVIOUS_EMIT_LOG = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(silenced_messages);
    }
}

/// Messages below NOTICE that PostgreSQL emits while a silenced statement plans or runs
/// go to the server's log only, not to the client. Settings any role may change send them
/// there: `trace_sort` with `client_min_messages = log` reported how much memory a sort
/// under a DP aggregate used, about 55 bytes a row (red team, 2026-11-27), and
/// `log_temp_files` the size of a spilled sort. The log is the DBA's.
///
/// PostgreSQL calls the hook only for messages it logs, so a guard lowers
/// `log_min_messages` to DEBUG5: a `set_config('client_min_messages', 'debug5', ...)`
/// run inside the statement let DEBUG messages that were not logged reach the client
/// (review of 2026-11-27). Those the server's own setting would not log are dropped here.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn silenced_messages(message: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the message being emitted; the previous hook takes it too.
    unsafe {
        let level = (*message).elevel;
        let silenced = SILENCES.get() > 0 || OFF_SINCE_ABORT.with(|off| off.get().is_some());
        if SILENCES.get() > 0 && BELOW_DP.get() > 0 && level > pg_sys::PGERROR as std::ffi::c_int {
            // A FATAL ends the process where it is raised: no unwinding reaches
            // row_errors.rs.
            withhold_context(message);
        }
        // Below a DP aggregate (or anywhere in a parallel worker of a silenced plan, whose
        // messages the leader rethrows later), NOTICE and WARNING too: the DBA's view
        // may call what complains about a row (`to_tsvector`'s "word is too long to be
        // indexed", once per such row; the fourth review).
        let hidden_below =
            if SILENCES.get() > 0 && (BELOW_DP.get() > 0 || pg_sys::ParallelWorkerNumber >= 0) {
                pg_sys::PGERROR as std::ffi::c_int
            } else {
                pg_sys::NOTICE as std::ffi::c_int
            };
        if silenced && level < hidden_below {
            if !is_logged(level, LOG_MIN_MESSAGES.get()) {
                // Here only because the guard lowered the setting. INFO goes to the
                // client whatever client_min_messages says, as without the guard
                // (outside DP nodes).
                (*message).output_to_server = false;
                if level != pg_sys::INFO as std::ffi::c_int || hidden_below > pg_sys::NOTICE as _ {
                    (*message).output_to_client = false;
                }
                return;
            }
            (*message).output_to_client = false;
        }
        if let Some(previous) = PREVIOUS_EMIT_LOG {
            previous(message);
        }
    }
}

/// Runs a DP aggregation node's step (`step`, its ExecProcNode; metering.rs): what
/// PostgreSQL says meanwhile is said of the rows under it, and so is an error it raises
/// (row_errors.rs).
pub fn below_dp_nodes<T>(step: impl FnOnce() -> T) -> T {
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            BELOW_DP.set(BELOW_DP.get().saturating_sub(1));
        }
    }
    BELOW_DP.set(BELOW_DP.get() + 1);
    let _running = Running;
    withheld(|| SILENCES.get() > 0, step)
}

/// Whether a message of `level` goes to the server's log at `log_min_messages` =
/// `setting` (elog.c's is_log_level_output, for levels below NOTICE: LOG ranks above
/// ERROR there).
fn is_logged(level: std::ffi::c_int, setting: std::ffi::c_int) -> bool {
    const LOG: std::ffi::c_int = pg_sys::LOG as _;
    const LOG_SERVER_ONLY: std::ffi::c_int = pg_sys::LOG_SERVER_ONLY as _;
    if level == LOG || level == LOG_SERVER_ONLY {
        setting == LOG || setting <= pg_sys::PGERROR as std::ffi::c_int
    } else if setting == LOG {
        level >= pg_sys::FATAL as std::ffi::c_int
    } else {
        level >= setting
    }
}

/// Around ExecutorRun: a silenced statement runs silenced (and a query started before
/// the library was loaded is metered first: metering.rs).
unsafe fn silenced_run(query: *mut pg_sys::QueryDesc, run: &mut dyn FnMut()) {
    // SAFETY: PostgreSQL calls the hook with a started query.
    unsafe {
        super::metering::meter_started_unhooked(query);
        let _silence = is_silenced(query).then(|| {
            let silence = Silence::begin(query);
            stop_counting_relations(query);
            silence
        });
        let fragment = is_fragment((*query).plannedstmt);
        // A parallel worker's plan, or a fragment, runs on the rows alone: its errors
        // leave with their text withheld (row_errors.rs).
        let mut run = || {
            if fragment || pg_sys::ParallelWorkerNumber >= 0 {
                withheld(|| SILENCES.get() > 0, &mut *run)
            } else {
                run()
            }
        };
        if !fragment {
            return run();
        }
        // A fragment of a DP statement that Citus runs here: a distributed query that a
        // function of its rows would start from here would run on other nodes, counted
        // there (Citus refuses it unless citus.allow_nested_distributed_execution);
        // and its row count would reach pg_stat_statements' rows at its end.
        crate::extension::guc::with_setting(
            c"citus.allow_nested_distributed_execution",
            c"off",
            run,
        );
        crate::extension::versions::hide_rows_processed((*query).estate);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn silenced_finish(query: *mut pg_sys::QueryDesc) {
    // SAFETY: as in silenced_run.
    unsafe {
        let _silence = is_silenced(query).then(|| Silence::begin(query));
        match PREVIOUS_EXECUTOR_FINISH {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(query)),
            None => pg_sys::standard_ExecutorFinish(query),
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn silenced_end(query: *mut pg_sys::QueryDesc) {
    // SAFETY: as in silenced_run.
    unsafe {
        let _silence = is_silenced(query).then(|| Silence::begin(query));
        match PREVIOUS_EXECUTOR_END {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(query)),
            None => pg_sys::standard_ExecutorEnd(query),
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn transaction_ended(
    event: pg_sys::XactEvent::Type,
    _argument: *mut c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            BELOW_DP.set(0);
            off_until_next_statement();
            SILENCED_IN_TRANSACTION.with(|silenced| silenced.set(false));
        }
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PREPARE => {
            SILENCED_IN_TRANSACTION.with(|silenced| silenced.set(false));
        }
        _ => {}
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn subtransaction_ended(
    event: pg_sys::SubXactEvent::Type,
    _subtransaction: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _argument: *mut c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        off_until_next_statement();
    }
}

/// What a silenced step turns off, as it was.
#[derive(Clone, Copy)]
struct Settings {
    track_counts: bool,
    track_functions: std::ffi::c_int,
    track_io_timing: bool,
    /// None where it was left to PostgreSQL.
    client_min_messages: Option<std::ffi::c_int>,
    log_min_messages: std::ffi::c_int,
}

impl Settings {
    /// Saves the settings, and turns counting off and messages below NOTICE away from
    /// the client: every message passes [`silenced_messages`], which logs only what the
    /// server's own `log_min_messages` logged. `hold_client`: client_min_messages is
    /// also held at NOTICE or above (not at an abort, where PostgreSQL is about to undo a
    /// `SET LOCAL` of it, which restoring it later would bring back: the fifth review).
    ///
    /// # Safety
    /// Backend-local globals: call from the backend's own thread.
    unsafe fn turn_off(hold_client: bool) -> Settings {
        // SAFETY: as the caller guarantees.
        unsafe {
            let saved = Settings {
                track_counts: pg_sys::pgstat_track_counts,
                track_functions: pg_sys::pgstat_track_functions,
                track_io_timing: pg_sys::track_io_timing,
                client_min_messages: hold_client.then_some(pg_sys::client_min_messages),
                log_min_messages: pg_sys::log_min_messages,
            };
            pg_sys::pgstat_track_counts = false;
            pg_sys::pgstat_track_functions = pg_sys::TrackFunctionsLevel::TRACK_FUNC_OFF as _;
            pg_sys::track_io_timing = false;
            // Messages below NOTICE kept from the client by its own setting too (INFO,
            // always sent, carries nothing of the executor's).
            if let Some(client) = saved.client_min_messages {
                pg_sys::client_min_messages = client.max(pg_sys::NOTICE as _);
            }
            if SILENCES.get() == 0 {
                LOG_MIN_MESSAGES.set(saved.log_min_messages);
            }
            pg_sys::log_min_messages = pg_sys::DEBUG5 as _;
            saved
        }
    }

    /// Puts the settings back.
    ///
    /// # Safety
    /// As [`Settings::turn_off`].
    unsafe fn restore(self) {
        // SAFETY: as the caller guarantees.
        unsafe {
            pg_sys::pgstat_track_counts = self.track_counts;
            pg_sys::pgstat_track_functions = self.track_functions;
            pg_sys::track_io_timing = self.track_io_timing;
            // A setting changed meanwhile (`set_config` in the statement) is the
            // session's own, which PostgreSQL's record of it already holds: kept.
            if let Some(client) = self.client_min_messages {
                if pg_sys::client_min_messages == client.max(pg_sys::NOTICE as _) {
                    pg_sys::client_min_messages = client;
                }
            }
            if pg_sys::log_min_messages == pg_sys::DEBUG5 as std::ffi::c_int {
                pg_sys::log_min_messages = self.log_min_messages;
            }
        }
    }
}

/// At an abort after a silenced plan started in the transaction: PostgreSQL is about to
/// close the plan's temporary files (reporting their sizes: a LOG line under
/// `log_temp_files` that reached a client at `client_min_messages = log`, the fourth
/// review) and release its relations; nothing is counted, and no message below NOTICE
/// reaches the client, until the next statement starts ([`count_again`]).
/// The flag stays set until the transaction ends: a cursor of the transaction, opened
/// before a savepoint that rolls back, still closes its files at the transaction's end.
///
/// A subtransaction that aborts inside a silenced step (a PL/pgSQL exception block) is
/// covered by its guard, which puts the settings back: saved here, the silenced ones
/// would have been restored at the next statement.
fn off_until_next_statement() {
    if !SILENCED_IN_TRANSACTION.with(Cell::get)
        || SILENCES.get() > 0
        || OFF_SINCE_ABORT.with(|off| off.get().is_some())
    {
        return;
    }
    // SAFETY: backend-local globals, read and written by this process only.
    let saved = unsafe { Settings::turn_off(false) };
    OFF_SINCE_ABORT.with(|off| off.set(Some(saved)));
}

/// Turns counting on again after [`off_until_next_statement`]: called when a statement
/// is analysed, planned or started.
pub fn count_again() {
    if let Some(saved) = OFF_SINCE_ABORT.with(|off| off.take()) {
        // SAFETY: as in off_until_next_statement.
        unsafe { saved.restore() };
    }
}

/// While alive, nothing is counted; dropped (also when an error unwinds), every counter
/// and setting is put back.
pub struct Silence {
    settings: Settings,
    buffers: pg_sys::BufferUsage,
    wal: pg_sys::WalUsage,
    /// The statement's own totals (pg_stat_statements reads them), when it has them.
    query: *mut pg_sys::QueryDesc,
    totals: Option<(pg_sys::BufferUsage, pg_sys::WalUsage)>,
}

impl Silence {
    /// Stops counting; `query` (or NULL while planning) is the statement whose totals
    /// are kept as they are now.
    ///
    /// # Safety
    /// `query` must be NULL or a valid query descriptor that outlives the guard.
    pub unsafe fn begin(query: *mut pg_sys::QueryDesc) -> Silence {
        count_again();
        if !query.is_null() {
            SILENCED_IN_TRANSACTION.with(|silenced| silenced.set(true));
        }
        // SAFETY: backend-local globals, read and written by this process only; the
        // query descriptor is valid, as the caller guarantees.
        unsafe {
            let silence = Silence {
                buffers: pg_sys::pgBufferUsage,
                wal: pg_sys::pgWalUsage,
                query,
                totals: totals(query).map(|t| ((*t).bufusage, (*t).walusage)),
                settings: Settings::turn_off(true),
            };
            SILENCES.set(SILENCES.get() + 1);
            silence
        }
    }
}

impl Drop for Silence {
    fn drop(&mut self) {
        SILENCES.set(SILENCES.get().saturating_sub(1));
        // SAFETY: as in begin; the query descriptor outlives the guard.
        unsafe {
            self.settings.restore();
            pg_sys::pgBufferUsage = self.buffers;
            pg_sys::pgWalUsage = self.wal;
            // Totals made during this step (pg_stat_statements allocates them at start)
            // held nothing before it.
            if let Some(totals) = totals(self.query) {
                let (buffers, wal) = self.totals.unwrap_or_default();
                (*totals).bufusage = buffers;
                (*totals).walusage = wal;
            }
        }
    }
}

/// The statement's totals, if something (pg_stat_statements) keeps them.
///
/// # Safety
/// `query` must be NULL or a valid query descriptor.
unsafe fn totals(query: *mut pg_sys::QueryDesc) -> Option<*mut pg_sys::Instrumentation> {
    // SAFETY: as the caller guarantees.
    unsafe { (!query.is_null() && !(*query).totaltime.is_null()).then(|| (*query).totaltime) }
}

/// Whether the statement's steps run silenced: a budgeted role's plan with DP aggregates.
/// A parallel worker's plan is only the part under its Gather, which may hold no DP
/// aggregate while the leader's does: every plan of a budgeted role's workers is.
///
/// # Safety
/// `query` must be a valid query descriptor.
pub unsafe fn is_silenced(query: *mut pg_sys::QueryDesc) -> bool {
    // SAFETY: a query descriptor's planned statement, as the caller guarantees.
    unsafe {
        let statement = (*query).plannedstmt;
        ((pg_sys::ParallelWorkerNumber >= 0 || holds_dp_aggregates(statement))
            && session_is_budgeted())
            // A fragment of a DP statement that Citus runs here (citus/fragments.rs),
            // whoever runs it: this node does not know the coordinator's budgets.
            || is_fragment(statement)
    }
}

/// Opens every relation and index a plan reads as the executor does, while counting is
/// off: each is then not counted (a cursor's FETCH after another statement of the
/// transaction opened one would be).
///
/// # Safety
/// `query` must be a started query descriptor, and counting off.
pub unsafe fn stop_counting_relations(query: *mut pg_sys::QueryDesc) {
    // SAFETY: es_relations holds es_range_table_size entries, NULL where not opened.
    unsafe {
        let estate = (*query).estate;
        if estate.is_null() {
            return;
        }
        if !(*estate).es_relations.is_null() {
            for i in 0..(*estate).es_range_table_size as usize {
                let relation = *(*estate).es_relations.add(i);
                if !relation.is_null() {
                    pg_sys::pgstat_init_relation(relation);
                }
            }
        }
        stop_counting_indexes((*query).planstate, std::ptr::null_mut());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn stop_counting_indexes(
    node: *mut pg_sys::PlanState,
    context: *mut c_void,
) -> bool {
    // SAFETY: states are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        let index = if is_a(node.cast(), NodeTag::T_IndexScanState) {
            (*(node as *mut pg_sys::IndexScanState)).iss_RelationDesc
        } else if is_a(node.cast(), NodeTag::T_IndexOnlyScanState) {
            (*(node as *mut pg_sys::IndexOnlyScanState)).ioss_RelationDesc
        } else if is_a(node.cast(), NodeTag::T_BitmapIndexScanState) {
            (*(node as *mut pg_sys::BitmapIndexScanState)).biss_RelationDesc
        } else {
            std::ptr::null_mut()
        };
        if !index.is_null() {
            pg_sys::pgstat_init_relation(index);
        }
        pg_sys::planstate_tree_walker(node, Some(stop_counting_indexes), context)
    }
}
