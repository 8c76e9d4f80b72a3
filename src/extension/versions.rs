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

/// Whether `role` may execute `function`: PostgreSQL 16 replaced `pg_proc_aclcheck` by
/// `object_aclcheck`.
///
/// # Safety
/// A transaction must be open.
pub unsafe fn may_execute(function: Oid, role: Oid) -> bool {
    // SAFETY: catalog lookups inside the transaction.
    unsafe {
        #[cfg(feature = "pg15")]
        let result = pg_sys::pg_proc_aclcheck(function, role, pg_sys::ACL_EXECUTE);
        #[cfg(not(feature = "pg15"))]
        let result = pg_sys::object_aclcheck(
            pg_sys::ProcedureRelationId,
            function,
            role,
            pg_sys::ACL_EXECUTE.into(),
        );
        result == pg_sys::AclResult::ACLCHECK_OK
    }
}

/// The status of the `index`-th backend (from 1) in this transaction's snapshot of them:
/// PostgreSQL 18 renamed the function.
///
/// # Safety
/// A transaction must be open; `index` within pgstat_fetch_stat_numbackends().
pub unsafe fn local_backend(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    // SAFETY: as the caller guarantees.
    unsafe {
        #[cfg(feature = "pg15")]
        let status = pg_sys::pgstat_fetch_stat_local_beentry(index);
        #[cfg(not(feature = "pg15"))]
        let status = pg_sys::pgstat_get_local_beentry_by_index(index);
        status
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
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as the caller guarantees.
    unsafe {
        (*to).rteperminfos = (*from).rteperminfos;
        (*from).rteperminfos = std::ptr::null_mut();
    }
    #[cfg(feature = "pg15")]
    let _ = (from, to);
}

/// Forgets `query`'s permission checks (its range table was replaced by subqueries that
/// carry their own).
///
/// # Safety
/// `query` must be a valid Query whose range table has no relation left.
pub unsafe fn clear_permissions(query: *mut pg_sys::Query) {
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as the caller guarantees.
    unsafe {
        (*query).rteperminfos = std::ptr::null_mut();
    }
    #[cfg(feature = "pg15")]
    let _ = query;
}

/// Entry `rti`'s permission check: (required permissions, the role it is checked as,
/// InvalidOid for the current user). PostgreSQL 16 moved it from the entry to
/// `Query.rteperminfos`.
///
/// # Safety
/// `rti` must be an entry of `query`'s range table.
pub unsafe fn permission_of(query: *mut pg_sys::Query, rti: i32) -> (u64, Oid) {
    // SAFETY: as the caller guarantees.
    unsafe {
        let rte = pg_sys::rt_fetch(rti as u32, (*query).rtable);
        #[cfg(feature = "pg15")]
        return ((*rte).requiredPerms as u64, (*rte).checkAsUser);
        #[cfg(not(feature = "pg15"))]
        {
            if (*rte).perminfoindex == 0 {
                return (0, pg_sys::InvalidOid);
            }
            let info = pg_sys::getRTEPermissionInfo((*query).rteperminfos, rte);
            ((*info).requiredPerms as u64, (*info).checkAsUser)
        }
    }
}

/// Requires SELECT on `columns` of relation entry `rte`, the last of `query`'s range
/// table, checked as `checker` (InvalidOid: the current user).
///
/// # Safety
/// `rte` must be the last entry of `query`'s range table, a relation; `columns` its
/// column numbers (0 is skipped).
pub unsafe fn add_select_permission(
    query: *mut pg_sys::Query,
    rte: *mut pg_sys::RangeTblEntry,
    checker: Oid,
    columns: &[i16],
) {
    // SAFETY: as the caller guarantees; bitmapsets made in the planner's memory.
    unsafe {
        let mut selected = std::ptr::null_mut();
        for &column in columns.iter().filter(|&&c| c > 0) {
            selected = pg_sys::bms_add_member(
                selected,
                column as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber,
            );
        }
        #[cfg(feature = "pg15")]
        {
            let _ = query;
            (*rte).requiredPerms = pg_sys::ACL_SELECT;
            (*rte).checkAsUser = checker;
            (*rte).selectedCols = selected;
        }
        #[cfg(not(feature = "pg15"))]
        {
            let info = pg_sys::addRTEPermissionInfo(&mut (*query).rteperminfos, rte);
            (*info).requiredPerms = pg_sys::ACL_SELECT.into();
            (*info).checkAsUser = checker;
            (*info).selectedCols = selected;
        }
    }
}

/// Puts the grouped expressions back where the select list and HAVING name them, and
/// drops the grouping step's range-table entry: PostgreSQL 18 made grouped expressions
/// Vars of an RTE_GROUP entry, which the planner would look for at the level the planner
/// hook moves the range table away from. As PostgreSQL itself does when it drops a GROUP
/// BY (subselect.c, simplify_EXISTS_query): the entry becomes an RTE_RESULT in place.
///
/// # Safety
/// `query` must be a valid Query being planned.
pub unsafe fn flatten_grouping(query: *mut pg_sys::Query) {
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as the caller guarantees; flatten_group_exprs with no planner root.
    unsafe {
        let q = &mut *query;
        if !q.hasGroupRTE {
            return;
        }
        q.targetList =
            pg_sys::flatten_group_exprs(std::ptr::null_mut(), query, q.targetList.cast()).cast();
        q.havingQual = pg_sys::flatten_group_exprs(std::ptr::null_mut(), query, q.havingQual);
        for rte in pgrx::PgList::<pg_sys::RangeTblEntry>::from_pg(q.rtable).iter_ptr() {
            if (*rte).rtekind == pg_sys::RTEKind::RTE_GROUP {
                (*rte).rtekind = pg_sys::RTEKind::RTE_RESULT;
                (*rte).groupexprs = std::ptr::null_mut();
            }
        }
        q.hasGroupRTE = false;
    }
    #[cfg(feature = "pg15")]
    let _ = query;
}

/// Marks the Vars of `expression`, an expression that `query`'s planner hook adds above
/// the level's joins (the unit and what names it), with the outer joins that can null
/// them: PostgreSQL 16 records that in `Var.varnullingrels` and checks it.
///
/// # Safety
/// `expression` must be an expression over `query`'s range table, owned by the caller.
pub unsafe fn mark_nullable(query: *mut pg_sys::Query, expression: *mut pg_sys::Node) {
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as the caller guarantees; the walker's context is the query.
    unsafe {
        mark_var(expression, query.cast());
    }
    #[cfg(feature = "pg15")]
    let _ = (query, expression);
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn mark_var(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is the Query; nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if pgrx::is_a(node, pg_sys::NodeTag::T_Var) {
            let var = node as *mut pg_sys::Var;
            if (*var).varlevelsup == 0 {
                let query = context as *mut pg_sys::Query;
                (*var).varnullingrels =
                    nulling_joins((*query).jointree.cast(), (*var).varno, std::ptr::null_mut())
                        .unwrap_or(std::ptr::null_mut());
            }
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(mark_var), context)
    }
}

/// The outer joins of the join tree `node` whose nullable side holds entry `rti`, added
/// to `above`; None when `node` does not hold it.
#[cfg(not(feature = "pg15"))]
unsafe fn nulling_joins(
    node: *mut pg_sys::Node,
    rti: i32,
    above: *mut pg_sys::Bitmapset,
) -> Option<*mut pg_sys::Bitmapset> {
    use pg_sys::JoinType::{JOIN_FULL, JOIN_LEFT, JOIN_RIGHT};
    // SAFETY: join tree nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            None
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_RangeTblRef) {
            ((*(node as *mut pg_sys::RangeTblRef)).rtindex == rti).then_some(above)
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_JoinExpr) {
            let join = node as *mut pg_sys::JoinExpr;
            let with = |nulls: bool| {
                if nulls {
                    pg_sys::bms_add_member(pg_sys::bms_copy(above), (*join).rtindex)
                } else {
                    pg_sys::bms_copy(above)
                }
            };
            let kind = (*join).jointype;
            nulling_joins(
                (*join).larg,
                rti,
                with(kind == JOIN_RIGHT || kind == JOIN_FULL),
            )
            .or_else(|| {
                nulling_joins(
                    (*join).rarg,
                    rti,
                    with(kind == JOIN_LEFT || kind == JOIN_FULL),
                )
            })
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_FromExpr) {
            pgrx::PgList::<pg_sys::Node>::from_pg((*(node as *mut pg_sys::FromExpr)).fromlist)
                .iter_ptr()
                .find_map(|item| nulling_joins(item, rti, above))
        } else {
            None
        }
    }
}

/// Hides the rows a statement processed from pg_stat_statements, which reads them at the
/// statement's end: PostgreSQL 17 added `es_total_processed`, summed over the runs, which
/// pg_stat_statements reads from then on (the portal still reads the run's
/// `es_processed`). Citus, the only user, needs 16 or later: nothing to hide on 15.
///
/// # Safety
/// `estate` must be NULL or the state of a query that just ran.
pub unsafe fn hide_rows_processed(estate: *mut pg_sys::EState) {
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as the caller guarantees.
    unsafe {
        if !estate.is_null() {
            (*estate).es_total_processed = 0;
        }
    }
    #[cfg(feature = "pg15")]
    let _ = estate;
}
