//! The accounts in shared memory, loaded from the ledger file once per shared memory
//! (at start-up, and again after a crash restart), and the backend's handle on the file.

use crate::budget::accounts::{Accounts, Refusal};
use crate::budget::file::{LedgerFile, LEDGER_PATH};
use crate::budget::ledger;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// How many roles the shared accounts hold.
pub const CAPACITY: usize = 4096;

/// The accounts, and whether this shared memory has loaded them yet.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub struct SharedAccounts {
    loaded: bool,
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
    /// This backend's handle on the ledger file (appends go through it).
    pub static LEDGER: RefCell<LedgerFile> = RefCell::new(LedgerFile::new(LEDGER_PATH));
}

/// Whether budgets can be kept in this process.
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// Reserves the shared accounts; called from _PG_init while preloading.
pub fn init_shared_memory() {
    pg_shmem_init!(ACCOUNTS);
    // SAFETY: _PG_init runs in the postmaster while shared_preload_libraries are loaded,
    // single-threaded, before any hook is called: nothing else reads or writes the hook.
    unsafe {
        // Runs after pgrx's hook (which attaches ACCOUNTS): it is the previous one.
        PREVIOUS_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(load_ledger);
    }
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Replays the ledger into shared memory, once per shared memory. A last line cut short
/// by a crash is truncated away: its write never completed, so its result never left.
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
    let file = LedgerFile::new(LEDGER_PATH);
    match file.recover() {
        Ok(contents) => {
            if contents.torn > 0 {
                log!("pg_exp_mech: dropped a ledger line cut short by a crash");
            }
            let accounts = ledger::replay(&contents.records);
            if let Err(Refusal::Full { capacity }) = shared.accounts.load(accounts.into_iter()) {
                warning!("pg_exp_mech: the privacy ledger has more than {capacity} roles; every DP aggregate is refused");
            }
        }
        Err(reason) => {
            shared.accounts.mark_unreadable();
            warning!("pg_exp_mech: the privacy ledger {LEDGER_PATH} cannot be read ({reason}); every DP aggregate is refused until it is repaired");
        }
    }
}
