//! The accounts in shared memory, loaded from the snapshot and the ledger file once per
//! shared memory (at start-up, and again after a crash restart); the one writer of the
//! ledger (WAL record, then file line); and the replay of WAL records.

use super::wal;
use crate::budget::accounts::{Accounts, Refusal, Slot};
use crate::budget::file::{self, write_snapshot, LedgerFile, LEDGER_PATH, SNAPSHOT_PATH};
use crate::budget::ledger::{self, Entry, Record};
use crate::budget::snapshot::Snapshot;
use crate::extension::guc;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// Rotations since start-up: each process reopens the file after one.
    rotations: u64,
    /// The snapshot on disk covers more of the file than there is: replace it before
    /// the file grows (see `file::load`).
    stale_snapshot: bool,
}

impl Position {
    fn appended(&mut self, lsn: u64, bytes: usize, lines: usize) {
        self.file_through = lsn;
        self.file_length += bytes as u64;
        self.since_snapshot += lines as u64;
    }
}

/// The slots of the table in shared memory, right after [`SharedAccounts`]. The segment
/// is mapped at one address in every process (children inherit it), so the pointer is
/// valid wherever the table is read.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct SharedSlots {
    start: *mut Slot,
    len: usize,
}

impl AsRef<[Slot]> for SharedSlots {
    fn as_ref(&self) -> &[Slot] {
        // SAFETY: `len` initialised slots start at `start` in the segment, and callers
        // reach them only through the lock's guard.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

impl AsMut<[Slot]> for SharedSlots {
    fn as_mut(&mut self) -> &mut [Slot] {
        // SAFETY: as above; a `&mut` is reached only through the exclusive guard.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

/// The table of accounts and where it stands, in shared memory.
#[repr(C)]
pub struct SharedAccounts {
    position: Position,
    pub accounts: Accounts<SharedSlots>,
}

const REGION_NAME: &CStr = c"pg_exp_mech accounts";
const LOCK_NAME: &CStr = c"pg_exp_mech budgets";

/// This process's pointers to the region and its lock, set by the shmem startup hook.
static mut REGION: *mut SharedAccounts = std::ptr::null_mut();
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
/// How many slots were requested (set in the postmaster, inherited by children).
static mut CAPACITY: usize = 0;
/// The ledger read while sizing the table, handed to the first load (postmaster only).
static mut FIRST_READ: Option<Result<LedgerRead, String>> = None;

/// The lock of the shared accounts: `ACCOUNTS.share()` and `ACCOUNTS.exclusive()`.
pub struct AccountsLock;
pub static ACCOUNTS: AccountsLock = AccountsLock;

/// The shared accounts, with the lock held until it is dropped (also when an error
/// unwinds, before PostgreSQL's abort processing).
pub struct Guard<const EXCLUSIVE: bool> {
    region: *mut SharedAccounts,
    lock: *mut pg_sys::LWLock,
}

impl AccountsLock {
    pub fn share(&self) -> Guard<false> {
        Self::acquire(pg_sys::LWLockMode::LW_SHARED)
    }

    pub fn exclusive(&self) -> Guard<true> {
        Self::acquire(pg_sys::LWLockMode::LW_EXCLUSIVE)
    }

    fn acquire<const EXCLUSIVE: bool>(mode: pg_sys::LWLockMode::Type) -> Guard<EXCLUSIVE> {
        // SAFETY: callers check preloaded() first; the startup hook set both pointers in
        // the postmaster before any child was forked.
        unsafe {
            assert!(
                !REGION.is_null(),
                "pg_exp_mech: the shared accounts are not attached"
            );
            pg_sys::LWLockAcquire(LOCK, mode);
            Guard {
                region: REGION,
                lock: LOCK,
            }
        }
    }
}

impl<const EXCLUSIVE: bool> std::ops::Deref for Guard<EXCLUSIVE> {
    type Target = SharedAccounts;
    fn deref(&self) -> &SharedAccounts {
        // SAFETY: the lock is held (shared at least) while the guard lives.
        unsafe { &*self.region }
    }
}

impl std::ops::DerefMut for Guard<true> {
    fn deref_mut(&mut self) -> &mut SharedAccounts {
        // SAFETY: the lock is held exclusively while the guard lives.
        unsafe { &mut *self.region }
    }
}

impl<const EXCLUSIVE: bool> Drop for Guard<EXCLUSIVE> {
    fn drop(&mut self) {
        // SAFETY: this guard acquired the lock and releases it once.
        unsafe { pg_sys::LWLockRelease(self.lock) }
    }
}

/// Whether this process has the shared accounts (pg_exp_mech is preloaded).
static PRELOADED: AtomicBool = AtomicBool::new(false);

static mut PREVIOUS_SHMEM_REQUEST: Option<unsafe extern "C-unwind" fn()> = None;
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
    guc::register_preloaded();
    wal::register();
    // SAFETY: _PG_init runs in the postmaster while shared_preload_libraries are loaded,
    // single-threaded, before any hook is called: nothing else reads or writes the hooks.
    unsafe {
        PREVIOUS_SHMEM_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shared_memory);
        PREVIOUS_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(attach_shared_memory);
    }
    PRELOADED.store(true, Ordering::Relaxed);
}

/// What start-up reads: the accounts, where they stand, whether a torn last line was
/// cut away, and how long the reading took (ms).
type LedgerRead = (BTreeMap<u32, ledger::Account>, Position, bool, f64);

/// Sizes the table: pg_exp_mech.max_roles, or twice the roles the ledger names if that
/// is more, so that no ledger can keep the server from starting and there is room to
/// grow. Runs once in the postmaster (the working directory is the data directory).
#[pg_guard]
unsafe extern "C-unwind" fn request_shared_memory() {
    // SAFETY: set once in init_shared_memory; a previous hook is a valid function.
    if let Some(previous) = unsafe { PREVIOUS_SHMEM_REQUEST } {
        // SAFETY: as above.
        unsafe { previous() };
    }
    let read = read_ledger();
    let roles = read.as_ref().map_or(0, |(accounts, ..)| accounts.len());
    let capacity = guc::max_roles().max(2 * roles);
    // SAFETY: the postmaster is single-threaded here; the statics are set before any
    // child exists, which inherits them.
    unsafe {
        CAPACITY = capacity;
        FIRST_READ = Some(read);
        pg_sys::RequestAddinShmemSpace(region_size(capacity));
        pg_sys::RequestNamedLWLockTranche(LOCK_NAME.as_ptr(), 1);
    }
}

fn region_size(capacity: usize) -> usize {
    std::mem::size_of::<SharedAccounts>() + capacity * std::mem::size_of::<Slot>()
}

/// Creates (or attaches to) the region; a new one is loaded from the snapshot and the
/// ledger lines after it. WAL replay (crash recovery, a standby) then applies the
/// records after those. A last line cut short by a crash is truncated away: its write
/// never completed, so its result never left.
#[pg_guard]
unsafe extern "C-unwind" fn attach_shared_memory() {
    // SAFETY: set once in init_shared_memory; a previous hook is a valid function.
    if let Some(previous) = unsafe { PREVIOUS_SHMEM_STARTUP } {
        // SAFETY: as above.
        unsafe { previous() };
    }
    // SAFETY: AddinShmemInitLock (MainLWLockArray[21], as pgrx's own shared memory
    // uses it) serialises region creation; ShmemInitStruct returns `region_size` bytes
    // reserved by request_shared_memory, zeroed or as another process left them.
    let created = unsafe {
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let region =
            pg_sys::ShmemInitStruct(REGION_NAME.as_ptr(), region_size(CAPACITY), &mut found)
                as *mut SharedAccounts;
        if !found {
            let slots = SharedSlots {
                start: region.add(1) as *mut Slot,
                len: CAPACITY,
            };
            for at in 0..CAPACITY {
                slots.start.add(at).write(Slot::default());
            }
            region.write(SharedAccounts {
                position: Position::default(),
                accounts: Accounts::new(slots),
            });
        }
        REGION = region;
        LOCK = &raw mut (*pg_sys::GetNamedLWLockTranche(LOCK_NAME.as_ptr())).lock;
        pg_sys::LWLockRelease(init_lock);
        !found
    };
    if created {
        load_ledger();
    }
}

/// Loads the ledger into a new region: read while sizing it the first time, read again
/// after a crash restart.
fn load_ledger() {
    // SAFETY: the postmaster is single-threaded; FIRST_READ is taken once.
    let read = unsafe { std::ptr::replace(&raw mut FIRST_READ, None) }.unwrap_or_else(read_ledger);
    let mut shared = ACCOUNTS.exclusive();
    match read {
        Ok((accounts, position, torn, milliseconds)) => {
            if torn {
                log!("pg_exp_mech: dropped a ledger line cut short by a crash");
            }
            shared.position = position;
            let roles = accounts.len();
            if let Err(refusal) = shared.accounts.load(accounts.into_iter()) {
                warning!(
                    "pg_exp_mech: {}; every DP aggregate is refused until the server restarts",
                    refusal.error(String::new)
                );
            }
            log!(
                "pg_exp_mech: loaded {roles} privacy accounts (room for {}) through WAL position {} ({} ledger lines replayed) in {:.1} ms",
                shared.accounts.capacity(),
                ledger::lsn_text(position.through),
                position.since_snapshot,
                milliseconds
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
fn read_ledger() -> Result<LedgerRead, String> {
    let started = std::time::Instant::now();
    let loaded = file::load(SNAPSHOT_PATH.as_ref(), LEDGER_PATH.as_ref())?;
    let position = Position {
        through: loaded.through,
        file_through: loaded.file_through,
        file_length: loaded.file_length,
        since_snapshot: loaded.lines,
        rotations: 0,
        stale_snapshot: loaded.stale_snapshot,
    };
    let milliseconds = started.elapsed().as_secs_f64() * 1e3;
    Ok((loaded.accounts, position, loaded.torn, milliseconds))
}

/// Writes a snapshot once enough lines were written since the last one, so that start-up
/// reads at most about pg_exp_mech.ledger_snapshot_interval lines. A failure only delays
/// the next snapshot.
fn snapshot_if_due(shared: &mut SharedAccounts) {
    // A table that is unreadable or overflowed misses accounts: a snapshot of it would
    // make the next start-up skip the lines that hold them.
    if (shared.position.since_snapshot < guc::ledger_snapshot_interval()
        && !shared.position.stale_snapshot)
        || shared.accounts.unavailable().is_some()
    {
        return;
    }
    shared.position.since_snapshot = 0;
    if !write_current_snapshot(shared) {
        return;
    }
    shared.position.stale_snapshot = false;
    // Rotation: once a snapshot covers the whole file and the file has reached
    // pg_exp_mech.ledger_rotation_size, the file becomes an archive and a new one starts
    // (start-up reads only the snapshot and the new file; dp_ledger reads the archives
    // too). A crash between the rename and the new snapshot leaves the old snapshot,
    // whose offset then lies beyond the new file: start-up reads that file whole and
    // replaces the snapshot (file::load).
    let limit = guc::ledger_rotation_size();
    if limit.is_none_or(|bytes| shared.position.file_length < bytes) {
        return;
    }
    match file::rotate(LEDGER_PATH.as_ref(), shared.position.file_through) {
        Ok(archive) => {
            shared.position.file_length = 0;
            shared.position.rotations += 1;
            log!(
                "pg_exp_mech: the privacy ledger reached {} kB and is archived in {}",
                limit.unwrap_or_default() / 1024,
                archive.display()
            );
            write_current_snapshot(shared);
        }
        Err(reason) => warning!("pg_exp_mech: could not rotate the privacy ledger: {reason}"),
    }
}

/// Writes the snapshot of the accounts as they stand; whether it was written (a failure
/// only delays the next one).
fn write_current_snapshot(shared: &SharedAccounts) -> bool {
    let snapshot = Snapshot {
        through: shared.position.through,
        offset: shared.position.file_length,
        accounts: shared.accounts.iter().collect(),
    };
    match write_snapshot(SNAPSHOT_PATH, &snapshot) {
        Ok(()) => true,
        Err(reason) => {
            warning!("pg_exp_mech: could not write the snapshot of the privacy accounts: {reason}");
            false
        }
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
        // An error inside unwinds as a Rust panic to pgrx's boundary, which reports it
        // after this drop: left in the critical section, PostgreSQL makes it a PANIC.
        if std::thread::panicking() {
            return;
        }
        // SAFETY: undoes enter, in the same process.
        unsafe {
            (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32);
            pg_sys::CritSectionCount -= 1;
        }
    }
}

/// Writes `records` (a statement's charges, or one limit) to WAL as one record, then to
/// the ledger file (fsynced with `durable`: a limit is at stake). Fails only before
/// anything is written; the caller applies the records to the accounts after.
fn write(position: &mut Position, records: &[Record], durable: bool) -> Result<(), String> {
    LEDGER.with(|file| {
        let mut file = file.borrow_mut();
        file.follow(position.rotations);
        file.open()
    })?;
    let section = CriticalSection::enter();
    let lsn = wal::insert(records);
    // Always flushed before its line exists: a line whose record a crash lost would
    // stand for an LSN that WAL after the crash reuses, and replay would skip records.
    wal::flush(lsn);
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

/// Records what a role spent on another cluster, whatever its limit: in WAL (flushed)
/// and in the ledger first.
pub fn carry_over(charge: &ledger::Charge) -> Result<(), Refusal> {
    administer(Record::Charge(charge.clone()))
}

/// Sets (or removes) a role's limit: in WAL (flushed) and in the ledger first.
pub fn set_limit(limit: &ledger::Limit) -> Result<(), Refusal> {
    administer(Record::Limit(limit.clone()))
}

/// A budget administrator's record: in WAL (flushed) and in the ledger, then applied.
fn administer(record: Record) -> Result<(), Refusal> {
    let mut shared = ACCOUNTS.exclusive();
    let SharedAccounts {
        position, accounts, ..
    } = &mut *shared;
    let records = [record];
    let write = || write(position, &records, true);
    match &records[0] {
        Record::Charge(charge) => accounts.carry_over(charge, write)?,
        Record::Limit(limit) => accounts.set_limit(limit, write)?,
    }
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
    if shared.accounts.unavailable() == Some(Refusal::Unreadable) {
        // Skipping the record would lose it once a checkpoint passed it: replay stops
        // here, and resumes from this record once the DBA has repaired the file.
        error!("pg_exp_mech: cannot replay a ledger record at {}: the privacy ledger {LEDGER_PATH} could not be read at start-up (see above); repair it and start the server again", ledger::lsn_text(lsn));
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
        let appended = LEDGER.with(|file| {
            let mut file = file.borrow_mut();
            file.follow(position.rotations);
            file.append(&lines, durable)
        });
        if let Err(reason) = appended {
            error!(
                "pg_exp_mech: could not append a replayed record to the privacy ledger: {reason}"
            );
        }
        position.appended(lsn, lines.len(), entries.len());
    }
    if lsn > position.through {
        for entry in entries {
            if let Err(refusal) = accounts.replay(&entry.record) {
                warning!("pg_exp_mech: {}", refusal.error(String::new));
            }
        }
        position.through = lsn;
    }
    snapshot_if_due(&mut shared);
}
