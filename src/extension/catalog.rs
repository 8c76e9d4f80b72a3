//! Scans of the system catalogs by oid columns.

use pgrx::pg_sys::{self, Oid};

/// Calls `each` on every row of catalog `relation` whose oid columns equal the keys, by
/// `index` (0: a heap scan), under the catalog snapshot.
///
/// # Safety
/// A transaction must be open; the keys must be oid columns that `index` covers.
pub unsafe fn scan(
    relation: u32,
    index: u32,
    keys: &[(i16, Oid)],
    each: impl FnMut(pg_sys::HeapTuple, pg_sys::TupleDesc),
) {
    // SAFETY: as the caller guarantees.
    unsafe { scan_under(relation, index, keys, std::ptr::null_mut(), each) }
}

/// [`scan`] under `snapshot` (NULL: the catalog snapshot; `SnapshotAny`: every version
/// of every row, committed or not).
///
/// # Safety
/// As for [`scan`]; `snapshot` must be NULL or valid for the scan.
pub unsafe fn scan_under(
    relation: u32,
    index: u32,
    keys: &[(i16, Oid)],
    snapshot: pg_sys::Snapshot,
    mut each: impl FnMut(pg_sys::HeapTuple, pg_sys::TupleDesc),
) {
    // SAFETY: as the caller guarantees; the scan and the relation are closed before
    // returning (an error aborts the transaction, which releases both).
    unsafe {
        let catalog = pg_sys::table_open(Oid::from(relation), pg_sys::AccessShareLock as i32);
        let mut scan_keys: Vec<pg_sys::ScanKeyData> = vec![std::mem::zeroed(); keys.len()];
        for (key, &(column, value)) in scan_keys.iter_mut().zip(keys) {
            pg_sys::ScanKeyInit(
                key,
                column,
                pg_sys::BTEqualStrategyNumber as u16,
                Oid::from(pg_sys::F_OIDEQ),
                pg_sys::Datum::from(value),
            );
        }
        let scan = pg_sys::systable_beginscan(
            catalog,
            Oid::from(index),
            index != 0,
            snapshot,
            keys.len() as i32,
            scan_keys.as_mut_ptr(),
        );
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            each(tuple, (*catalog).rd_att);
        }
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(catalog, pg_sys::AccessShareLock as i32);
    }
}
