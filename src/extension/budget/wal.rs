//! The ledger's WAL records: a custom resource manager (PostgreSQL 15's
//! `RegisterCustomRmgr`). Every limit and every charge is one WAL record, so that crash
//! recovery, streaming standbys and point-in-time recovery apply it through [`redo`]:
//! standbys keep the primary's accounts, and a promoted standby keeps every charge it
//! received. The records are not transactional: a ROLLBACK does not undo them.

use super::shared::apply_replayed;
use crate::budget::ledger::{self, Record};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_char, CStr};

/// The resource manager's id, written in every record: it must never change, and no
/// other preloaded extension may use it. 128 is PostgreSQL's id for experiments, which
/// any extension in development may take; this one is chosen apart from it.
pub const RESOURCE_MANAGER_ID: u8 = 171;
const RESOURCE_MANAGER_NAME: &CStr = c"pg_exp_mech";

/// The kinds of record (the high four bits of xl_info; the low four are PostgreSQL's).
const LIMIT: u8 = 0x10;
const CHARGE: u8 = 0x20;

/// Registers the resource manager; called from _PG_init while preloading (the only time
/// PostgreSQL accepts it), in the postmaster, so the startup process has it for redo.
pub fn register() {
    let mut manager = pg_sys::RmgrData {
        rm_name: RESOURCE_MANAGER_NAME.as_ptr(),
        rm_redo: Some(redo),
        rm_desc: Some(describe),
        rm_identify: Some(identify),
        ..Default::default()
    };
    // SAFETY: called while shared_preload_libraries load; PostgreSQL copies the struct,
    // whose name is a static C string and whose functions live as long as the library.
    unsafe { pg_sys::RegisterCustomRmgr(RESOURCE_MANAGER_ID, &raw mut manager) };
}

/// Inserts one record holding `records` (a statement's charges, or one limit) and
/// returns the end of it: the LSN the ledger lines carry.
pub fn insert(records: &[Record]) -> u64 {
    let kind = match records.first() {
        Some(Record::Limit(_)) => LIMIT,
        _ => CHARGE,
    };
    let payload: String = records.iter().map(Record::line).collect();
    // SAFETY: XLogBeginInsert, XLogRegisterData and XLogInsert are called in this order
    // with nothing between; the payload outlives XLogInsert, which copies it.
    unsafe {
        pg_sys::XLogBeginInsert();
        crate::extension::versions::register_wal_data(payload.as_bytes());
        pg_sys::XLogInsert(RESOURCE_MANAGER_ID, kind)
    }
}

/// Waits until WAL up to `lsn` is on disk.
pub fn flush(lsn: u64) {
    // SAFETY: any LSN up to the end of inserted WAL may be flushed.
    unsafe { pg_sys::XLogFlush(lsn) }
}

/// Whether this server replays WAL (a standby, or a server in crash or archive
/// recovery): it cannot write a record.
pub fn in_recovery() -> bool {
    // SAFETY: reads shared state; callable in any backend.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// The payload of a record being read, as text.
///
/// # Safety
/// `record` is PostgreSQL's reader positioned on one of this resource manager's records.
unsafe fn payload(record: *mut pg_sys::XLogReaderState) -> String {
    // SAFETY: as the caller promises, the decoded record and its main data are valid.
    unsafe {
        let decoded = (*record).record;
        let data = (*decoded).main_data as *const u8;
        let bytes = std::slice::from_raw_parts(data, (*decoded).main_data_len as usize);
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// Applies one record: appended to the ledger file and applied to the accounts, each
/// unless already there (a base backup may have copied its line).
#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL calls redo with its reader on a record of this manager.
    let (lsn, text) = unsafe { ((*record).EndRecPtr, payload(record)) };
    match ledger::parse_payload(&text, lsn) {
        Ok(entries) => apply_replayed(&entries),
        // A record this release cannot read (written by another one): stopping replay
        // is the only way not to lose a charge.
        Err(reason) => error!(
            "pg_exp_mech: cannot replay a ledger record at {}: {reason}",
            ledger::lsn_text(lsn)
        ),
    }
}

/// The record for pg_waldump-like output and error contexts: its ledger lines.
#[pg_guard]
unsafe extern "C-unwind" fn describe(
    buffer: pg_sys::StringInfo,
    record: *mut pg_sys::XLogReaderState,
) {
    // SAFETY: PostgreSQL passes its reader on a record of this manager.
    let text = unsafe { payload(record) };
    let text = std::ffi::CString::new(text.trim_end().replace('\n', "; ")).unwrap_or_default();
    // SAFETY: buffer is PostgreSQL's StringInfo, text a NUL-terminated string.
    unsafe { pg_sys::appendStringInfoString(buffer, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    match info & !(pg_sys::XLR_INFO_MASK as u8) {
        LIMIT => c"LIMIT".as_ptr(),
        CHARGE => c"CHARGE".as_ptr(),
        _ => std::ptr::null(),
    }
}
