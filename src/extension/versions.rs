//! Where PostgreSQL's interfaces differ between the versions pg_exp_mech builds for (15
//! and 18 are tested): one function per difference, so that no other module needs a
//! `cfg`. Each says what changed and in which release.

use pgrx::pg_sys::{self, Oid};
use std::ffi::c_void;

/// A node mutator: PostgreSQL 16 typed the callbacks of the tree walkers and mutators
/// (and made the walkers macros over `*_impl` functions); 15 takes an untyped pointer.
pub type Mutator = unsafe extern "C-unwind" fn(*mut pg_sys::Node, *mut c_void) -> *mut pg_sys::Node;

/// `expression_tree_mutator`.
///
/// # Safety
/// `node` must be a valid expression tree and `context` what `mutator` expects.
pub unsafe fn mutate_children(
    node: *mut pg_sys::Node,
    mutator: Mutator,
    context: *mut c_void,
) -> *mut pg_sys::Node {
    // SAFETY: as the caller guarantees; before 16 the callback is the same function,
    // called with the same two arguments, behind an untyped pointer.
    unsafe {
        #[cfg(feature = "pg15")]
        let mutator = std::mem::transmute::<
            Mutator,
            unsafe extern "C-unwind" fn() -> *mut pg_sys::Node,
        >(mutator);
        pg_sys::expression_tree_mutator(node, Some(mutator), context)
    }
}

/// `query_tree_mutator`: a copy of `query` whose expressions went through `mutator`.
///
/// # Safety
/// As [`mutate_children`]'s, for a valid Query.
pub unsafe fn mutate_query(
    query: *mut pg_sys::Query,
    mutator: Mutator,
    context: *mut c_void,
) -> *mut pg_sys::Query {
    // SAFETY: as mutate_children's.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            let mutator = std::mem::transmute::<
                Mutator,
                unsafe extern "C-unwind" fn() -> *mut pg_sys::Node,
            >(mutator);
            pg_sys::query_tree_mutator(query, Some(mutator), context, 0)
        }
        #[cfg(not(feature = "pg15"))]
        pg_sys::query_tree_mutator_impl(query, Some(mutator), context, 0)
    }
}

/// Whether the current user may execute `function`: PostgreSQL 16 replaced
/// `pg_proc_aclcheck` by `object_aclcheck`.
///
/// # Safety
/// A transaction must be open.
pub unsafe fn may_execute(function: Oid) -> bool {
    // SAFETY: catalog lookups inside the transaction.
    unsafe {
        #[cfg(feature = "pg15")]
        let result = pg_sys::pg_proc_aclcheck(function, pg_sys::GetUserId(), pg_sys::ACL_EXECUTE);
        #[cfg(not(feature = "pg15"))]
        let result = pg_sys::object_aclcheck(
            pg_sys::ProcedureRelationId,
            function,
            pg_sys::GetUserId(),
            pg_sys::ACL_EXECUTE.into(),
        );
        result == pg_sys::AclResult::ACLCHECK_OK
    }
}

/// `XLogRegisterData`: PostgreSQL 18 takes a `const void *` and a `uint32`.
///
/// # Safety
/// Between `XLogBeginInsert` and `XLogInsert`; `data` must outlive the insert.
pub unsafe fn register_wal_data(data: &[u8]) {
    // SAFETY: as the caller guarantees; PostgreSQL only reads the bytes.
    unsafe {
        #[cfg(feature = "pg15")]
        pg_sys::XLogRegisterData(data.as_ptr() as *mut std::ffi::c_char, data.len() as i32);
        #[cfg(not(feature = "pg15"))]
        pg_sys::XLogRegisterData(data.as_ptr().cast(), data.len() as u32);
    }
}

/// What an ExecutorRun hook does around the run: `run` calls the previous hook (or
/// PostgreSQL's own function) with the hook's arguments.
pub type AroundRun = unsafe fn(*mut pg_sys::QueryDesc, &mut dyn FnMut());

static mut AROUND_RUN: Option<AroundRun> = None;
static mut PREVIOUS_EXECUTOR_RUN: pg_sys::ExecutorRun_hook_type = None;

/// Installs an ExecutorRun hook that runs `around`: PostgreSQL 18 dropped the hook's
/// `execute_once` argument.
///
/// # Safety
/// From _PG_init, once, before any statement runs.
pub unsafe fn install_executor_run(around: AroundRun) {
    // SAFETY: as the caller guarantees: nothing else reads or writes the hooks meanwhile.
    unsafe {
        AROUND_RUN = Some(around);
        PREVIOUS_EXECUTOR_RUN = pg_sys::ExecutorRun_hook;
        pg_sys::ExecutorRun_hook = Some(executor_run);
    }
}

#[cfg(feature = "pg15")]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn executor_run(
    query: *mut pg_sys::QueryDesc,
    direction: pg_sys::ScanDirection::Type,
    count: u64,
    execute_once: bool,
) {
    // SAFETY: PostgreSQL calls the hook with a started query; the previous hook takes the
    // same arguments; the hooks were set in _PG_init.
    unsafe {
        let mut run = || match PREVIOUS_EXECUTOR_RUN {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                previous(query, direction, count, execute_once)
            }),
            None => pg_sys::standard_ExecutorRun(query, direction, count, execute_once),
        };
        AROUND_RUN.expect("installed with the hook")(query, &mut run)
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn executor_run(
    query: *mut pg_sys::QueryDesc,
    direction: pg_sys::ScanDirection::Type,
    count: u64,
) {
    // SAFETY: as above.
    unsafe {
        let mut run = || match PREVIOUS_EXECUTOR_RUN {
            Some(previous) => {
                pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(query, direction, count))
            }
            None => pg_sys::standard_ExecutorRun(query, direction, count),
        };
        AROUND_RUN.expect("installed with the hook")(query, &mut run)
    }
}

/// Moves `from`'s permission checks to `to`, which takes over its range table:
/// PostgreSQL 16 moved them from the range-table entries to `Query.rteperminfos`, which
/// the entries index.
///
/// # Safety
/// Both must be valid Queries; `to.rtable` must be `from`'s former range table.
pub unsafe fn move_permissions(from: *mut pg_sys::Query, to: *mut pg_sys::Query) {
    // SAFETY: as the caller guarantees.
    unsafe {
        #[cfg(not(feature = "pg15"))]
        {
            (*to).rteperminfos = (*from).rteperminfos;
            (*from).rteperminfos = std::ptr::null_mut();
        }
        #[cfg(feature = "pg15")]
        let _ = (from, to);
    }
}

/// Forgets `query`'s permission checks (its range table was replaced by subqueries that
/// carry their own).
///
/// # Safety
/// `query` must be a valid Query whose range table has no relation left.
pub unsafe fn clear_permissions(query: *mut pg_sys::Query) {
    // SAFETY: as the caller guarantees.
    unsafe {
        #[cfg(not(feature = "pg15"))]
        {
            (*query).rteperminfos = std::ptr::null_mut();
        }
        #[cfg(feature = "pg15")]
        let _ = query;
    }
}

/// Gives a relation entry that the planner hook added a permission record that checks
/// nothing (the table is read for the privacy unit only): before 16 the entry's own
/// `requiredPerms` of 0 says so; from 16 the entry must index a record.
///
/// # Safety
/// `rte` must be the last entry of `query`'s range table, a relation.
pub unsafe fn add_unchecked_permission(query: *mut pg_sys::Query, rte: *mut pg_sys::RangeTblEntry) {
    // SAFETY: as the caller guarantees; addRTEPermissionInfo appends a record with no
    // required permission and sets the entry's index.
    unsafe {
        #[cfg(not(feature = "pg15"))]
        {
            let info = pg_sys::addRTEPermissionInfo(&mut (*query).rteperminfos, rte);
            (*info).requiredPerms = 0;
        }
        #[cfg(feature = "pg15")]
        let _ = (query, rte);
    }
}
