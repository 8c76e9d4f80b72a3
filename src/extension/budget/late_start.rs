//! Sessions without the preload: the library loads inside the ExecutorStart of the first
//! statement that calls one of its functions (ExecInitAgg looks them up), after
//! PostgreSQL dispatched that ExecutorStart past a hook not yet installed. Such a query is
//! metered when its run starts, still before any row, so that its plan's refusals (a
//! spelling, a parameter of the rows) come as every later query's do.
//! Cursors, portals and SPI interleave the starts and runs of several queries, so a query
//! is told by its executor state: in a process that loaded the library late, each one the
//! hook metered is noted, and the run of any other is metered then (metering.rs).

use crate::extension::memory::move_into;
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;

thread_local! {
    /// This process loaded the library after it started (not from the preload).
    static LOADED_LATE: Cell<bool> = const { Cell::new(false) };
    /// The executor states of the running queries this process metered, in a process
    /// that loaded the library late.
    static METERED: RefCell<HashSet<usize>> = RefCell::new(HashSet::new());
}

/// Notes how the library was loaded; called from _PG_init.
pub fn install() {
    // SAFETY: a flag PostgreSQL sets while the postmaster loads shared_preload_libraries.
    LOADED_LATE.set(!unsafe { pg_sys::process_shared_preload_libraries_in_progress });
}

/// Notes that the query of `estate` is being metered (forgotten with its memory).
///
/// # Safety
/// `estate` must be a started query's executor state.
pub unsafe fn note_metered(estate: *mut pg_sys::EState) {
    if !LOADED_LATE.get() || !METERED.with(|metered| metered.borrow_mut().insert(estate as usize)) {
        return;
    }
    // SAFETY: the query's memory lives until its end, when the note is dropped with it.
    unsafe { move_into((*estate).es_query_cxt, Noted(estate as usize)) };
}

/// A query's note, dropped with the query's memory.
struct Noted(usize);

impl Drop for Noted {
    fn drop(&mut self) {
        METERED.with(|metered| metered.borrow_mut().remove(&self.0));
    }
}

/// Whether the query of `estate`, about to run, started before the hook could meter it.
pub fn missed(estate: *mut pg_sys::EState) -> bool {
    LOADED_LATE.get()
        && !estate.is_null()
        && !METERED.with(|metered| metered.borrow().contains(&(estate as usize)))
}
