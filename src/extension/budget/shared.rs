//! The accounts in shared memory, loaded from the snapshot and the ledger file once per
//! shared memory (at start-up, and again after a crash restart); the one writer of the
//! ledger (WAL record, then file line); and the replay of WAL records.

use super::wal;
use crate::budget::accounts::{Accounts, Refusal};
use crate::budget::file::{read_snapshot, write_snapshot, LedgerFile, LEDGER_PATH, SNAPSHOT_PATH};
use crate::budget::ledger::{self, Entry, Record};
use crate::budget::snapshot::Snapshot;
use crate::extension::guc;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// How many roles the shared accounts hold.
pub const CAPACITY: usize = 4096;

/// Where the accounts stand against WAL and the ledger file.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub struct Position {
    /// The LSN of the last record applied to the accounts.
    through: u64,
    /// The LSN of the last line of the ledger file.
    file_through: u64,
    /// Where the file's last complete line ends.
    file_length: u64,
    /// Lines written since the last snapshot.
    since_snapshot: u64,
}

impl Position {
    fn appended(&mut self, lsn: u64, bytes: usize, lines: usize) {
        self.file_through = lsn;
        self.file_length += bytes as u64;
        self.since_snapshot += lines as u64;
    }
}

/// The accounts, and whether this shared memory has loaded them yet.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub struct SharedAccounts {
    loaded: bool,
    position: Position,
    pub accounts: Accounts<CAPACITY>,
}

// SAFETY: PGRXSharedMemory asks for plain data that is valid when copied byte for byte
// into shared memory: SharedAccounts is `#[repr(C)]` and `Copy`, with no pointers, and
// every access goes through ACCOUNTS' LWLock.
unsafe impl PGRXSharedMemory for SharedAccounts {}

// SAFETY: the name is a static C string, and pg_shmem_init! registers the lock while the
// library is preloaded, before any backend can take it.
pub static ACCOUNTS: PgLwLock<SharedAccounts> = unsafe { PgLwLock::new(c"pg_exp_mech budgets") };

/// Whether this process has the shared accounts (pg_exp_mech is preloaded).
static PRELOADED: AtomicBool = AtomicBool::new(false);

static mut PREVIOUS_SHMEM_STARTUP: Option<unsafe extern "C-unwind" fn()> = None;

thread_local! {
    /// This process's handle on the ledger file (appends go through it).
    static LEDGER: RefCell<LedgerFile> = RefCell::new(LedgerFile::new(LEDGER_PATH));
}

/// Whether budgets can be kept in this process.
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// Reserves the shared accounts and registers the WAL resource manager; called from
/// _PG_init while preloading.
pub fn init_shared_memory() {
    pg_shmem_init!(ACCOUNTS);
    wal::register();
    // SAFETY: _PG_init runs in the postmaster while shared_preload_libraries are loaded,
    // single-threaded, before any hook is called: nothing else reads or writes the hook.
    unsafe {
        // Runs after pgrx's hook (which attaches ACCOUNTS): it is the previous one.
        PREVIOUS_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(load_ledger);
    }
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Loads the accounts into shared memory, once per shared memory: the snapshot, then
/// the ledger lines after it. WAL replay (crash recovery, a standby) then applies the
/// records after those. A last line cut short by a crash is truncated away: its write
/// never completed, so its result never left.
#[pg_guard]
unsafe extern "C-unwind" fn load_ledger() {
    // SAFETY: set once in init_shared_memory before this hook could run; a previous
    // hook is a valid function of the library that installed it.
    if let Some(previous) = unsafe { PREVIOUS_SHMEM_STARTUP } {
        // SAFETY: as above.
        unsafe { previous() };
    }
    let mut shared = ACCOUNTS.exclusive();
    if shared.loaded {
        return;
    }
    shared.loaded = true;
    let started = std::time::Instant::now();
    match read_ledger() {
        Ok((accounts, position, torn)) => {
            if torn {
                log!("pg_exp_mech: dropped a ledger line cut short by a crash");
            }
            shared.position = position;
            let roles = accounts.len();
            if let Err(Refusal::Full { capacity }) = shared.accounts.load(accounts.into_iter()) {
                warning!("pg_exp_mech: the privacy ledger has more than {capacity} roles; every DP aggregate is refused");
            }
            log!(
                "pg_exp_mech: loaded {roles} privacy accounts through WAL position {} ({} ledger lines replayed) in {:.1} ms",
                ledger::lsn_text(position.through),
                position.since_snapshot,
                started.elapsed().as_secs_f64() * 1e3
            );
            snapshot_if_due(&mut shared);
        }
        Err(reason) => {
            shared.accounts.mark_unreadable();
            warning!("pg_exp_mech: the privacy ledger {LEDGER_PATH} cannot be read ({reason}); every DP aggregate is refused until it is repaired");
        }
    }
}

/// The accounts of the snapshot and the ledger lines after it, where they stand, and
/// whether a torn last line was cut away.
#[allow(clippy::type_complexity)]
fn read_ledger() -> Result<(BTreeMap<u32, ledger::Account>, Position, bool), String> {
    let snapshot = read_snapshot(SNAPSHOT_PATH)?;
    let file = LedgerFile::new(LEDGER_PATH);
    let offset = snapshot.as_ref().map_or(0, |s| s.offset);
    let mut contents = file.recover(offset)?;
    if contents.complete < offset {
        // A restored base backup can hold a file copied before the snapshot was: the
        // snapshot has those accounts, and WAL replay appends the lines it lacks.
        contents = file.recover(0)?;
    }
    let through = snapshot.as_ref().map(|s| s.through);
    let mut accounts: BTreeMap<u32, ledger::Account> = snapshot
        .map(|s| s.accounts.into_iter().collect())
        .unwrap_or_default();
    ledger::replay_onto(&mut accounts, &contents.records, through);
    let file_through = file.last_entry()?.map_or(0, |entry| entry.lsn);
    let position = Position {
        through: through.unwrap_or(0).max(file_through),
        file_through,
        file_length: contents.complete,
        since_snapshot: contents.records.len() as u64,
    };
    Ok((accounts, position, contents.torn > 0))
}

/// Writes a snapshot once enough lines were written since the last one, so that start-up
/// reads at most about pg_exp_mech.ledger_snapshot_interval lines. A failure only delays
/// the next snapshot.
fn snapshot_if_due(shared: &mut SharedAccounts) {
    if shared.position.since_snapshot < guc::ledger_snapshot_interval() {
        return;
    }
    let snapshot = Snapshot {
        through: shared.position.through,
        offset: shared.position.file_length,
        accounts: shared.accounts.iter().collect(),
    };
    shared.position.since_snapshot = 0;
    if let Err(reason) = write_snapshot(SNAPSHOT_PATH, &snapshot) {
        warning!("pg_exp_mech: could not write the snapshot of the privacy accounts: {reason}");
    }
}

/// A critical section that also holds off checkpoints from starting: between the WAL
/// record and its ledger line, a checkpoint whose redo point passed the record would let
/// a crash lose the line (replay starts after it). Any error inside is a PANIC: crash
/// recovery then replays the record, so a charge is never half-written.
struct CriticalSection;

impl CriticalSection {
    fn enter() -> Self {
        // SAFETY: MyProc is this backend's PGPROC; CritSectionCount is this process's;
        // the flags are how RecordTransactionCommit holds off a checkpoint in PG15.
        unsafe {
            pg_sys::CritSectionCount += 1;
            (*pg_sys::MyProc).delayChkptFlags |= pg_sys::DELAY_CHKPT_START as i32;
        }
        CriticalSection
    }
}

impl Drop for CriticalSection {
    fn drop(&mut self) {
        // SAFETY: undoes enter, in the same process.
        unsafe {
            (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32);
            pg_sys::CritSectionCount -= 1;
        }
    }
}

/// Writes `records` (a statement's charges, or one limit) to WAL as one record, then to
/// the ledger file, each durably with `durable` (a limit is at stake). Fails only before
/// anything is written; the caller applies the records to the accounts after.
fn write(position: &mut Position, records: &[Record], durable: bool) -> Result<(), String> {
    LEDGER.with(|file| file.borrow_mut().open())?;
    let section = CriticalSection::enter();
    let lsn = wal::insert(records);
    if durable {
        wal::flush(lsn);
    }
    let lines: String = records
        .iter()
        .map(|record| {
            Entry {
                lsn,
                record: record.clone(),
            }
            .line()
        })
        .collect();
    if let Err(reason) = LEDGER.with(|file| file.borrow_mut().append(&lines, durable)) {
        // In the critical section: a PANIC, and crash recovery writes the line.
        error!(
            "pg_exp_mech: could not append to the privacy ledger after its WAL record: {reason}"
        );
    }
    drop(section);
    position.appended(lsn, lines.len(), records.len());
    position.through = lsn;
    Ok(())
}

/// Charges `charges` (one statement's, all of one role): see [`Accounts::charge`]. What
/// is charged is in WAL and in the ledger before this returns.
pub fn charge(charges: &[ledger::Charge], must_have_budget: bool) -> Result<(), Refusal> {
    let mut shared = ACCOUNTS.exclusive();
    let SharedAccounts {
        position, accounts, ..
    } = &mut *shared;
    let records: Vec<Record> = charges.iter().cloned().map(Record::Charge).collect();
    accounts.charge(charges, must_have_budget, |durable| {
        write(position, &records, durable)
    })?;
    snapshot_if_due(&mut shared);
    Ok(())
}

/// Sets (or removes) a role's limit: in WAL (flushed) and in the ledger first.
pub fn set_limit(limit: &ledger::Limit) -> Result<(), Refusal> {
    let mut shared = ACCOUNTS.exclusive();
    let SharedAccounts {
        position, accounts, ..
    } = &mut *shared;
    let records = [Record::Limit(limit.clone())];
    accounts.set_limit(limit, || write(position, &records, true))?;
    snapshot_if_due(&mut shared);
    Ok(())
}

/// Applies the entries of one replayed WAL record (crash recovery, a standby, point-in-
/// time recovery): its lines are appended unless the file has them, and the records are
/// applied unless the accounts have them, so that replay over a base backup that copied
/// some of them counts each once.
pub fn apply_replayed(entries: &[Entry]) {
    let Some(lsn) = entries.first().map(|entry| entry.lsn) else {
        return;
    };
    let mut shared = ACCOUNTS.exclusive();
    if shared.accounts.is_unreadable() {
        // Nothing is charged from a ledger that could not be read; the DBA repairs the
        // file and restarts, and replay applies this record again.
        return;
    }
    let SharedAccounts {
        position, accounts, ..
    } = &mut *shared;
    if lsn > position.file_through {
        let durable = entries.iter().any(|entry| match &entry.record {
            Record::Limit(_) => true,
            Record::Charge(charge) => accounts.get(charge.role).is_some_and(|a| a.limit.is_some()),
        });
        let lines: String = entries.iter().map(Entry::line).collect();
        if let Err(reason) = LEDGER.with(|file| file.borrow_mut().append(&lines, durable)) {
            error!(
                "pg_exp_mech: could not append a replayed record to the privacy ledger: {reason}"
            );
        }
        position.appended(lsn, lines.len(), entries.len());
    }
    if lsn > position.through {
        for entry in entries {
            if let Err(Refusal::Full { capacity }) = accounts.replay(&entry.record) {
                accounts.mark_unreadable();
                warning!("pg_exp_mech: replay found more than {capacity} roles; every DP aggregate is refused until the server restarts");
            }
        }
        position.through = lsn;
    }
    snapshot_if_due(&mut shared);
}
