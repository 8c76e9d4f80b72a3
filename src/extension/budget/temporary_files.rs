//! A budgeted role that may read the temporary files DP statements spill, their memory,
//! or the server's log (which holds what is withheld from the client), is refused.
//!
//! A sort or hash under a DP aggregate that spills writes about 32 bytes a row under
//! `base/pgsql_tmp`, and the analyst chooses `work_mem`. Every role may execute
//! `pg_tablespace_size`, which counts that directory (the fourth review counted rows to
//! within about 12 by bisecting `work_mem`, reading it while a cursor held the files);
//! `pg_ls_tmpdir` lists each file's size to `pg_monitor`, which DBAs give out for
//! monitoring; the file functions read the files themselves where granted (the red team
//! of 2026-11-27). The memory a DP statement uses grows with its rows too, and
//! `pg_backend_memory_contexts` shows it to `pg_read_all_stats` (the hash table of a
//! `dp_partition` view, about 656 bytes a group, withheld groups included: the third
//! round). No hook of PostgreSQL's can refuse a built-in function, so a budgeted
//! role that may execute one of them is refused before any row is read: as its login
//! role, or as any role it may switch to (a membership without INHERIT, or a second
//! session). Not as the current role: a SECURITY DEFINER function's owner is the DBA's
//! bridge, whose privileges the analyst has nowhere else. README's DBA guide, step 6, cannot be forgotten
//! quietly. The other databases' grants are out of sight (README).

use super::charge::role_name;
use crate::error::Error;
use crate::extension::raise;
use crate::extension::versions::may_execute;
use pgrx::pg_sys::{self, Oid};
use std::cell::Cell;

thread_local! {
    /// The login role last found unable to read them, and the generation of the
    /// catalogs it was found in: the lookups took about 5 % of a small budgeted statement
    /// (perf, 2026-11-28).
    static CLEARED: Cell<Option<(Oid, u64)>> = const { Cell::new(None) };
    /// Changes of pg_proc, pg_authid or pg_auth_members seen by this process. A change
    /// that arrives while the check reads the catalogs (a first lock of one processes
    /// invalidations) leaves what it found uncached (the red team of 2026-11-28).
    static GENERATION: Cell<u64> = const { Cell::new(0) };
}

/// Forgets the cleared role when a function's privileges, a role or a membership change.
/// PostgreSQL sends the invalidations of another session's GRANT before this session's
/// next transaction reads the catalogs, so the cache is never older than they would be.
pub fn install_refusal_cache() {
    // SAFETY: _PG_init runs once per process; the callback lives as long as the library.
    unsafe {
        for cache in [
            pg_sys::SysCacheIdentifier::PROCOID,
            pg_sys::SysCacheIdentifier::AUTHOID,
            pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(forget_cleared),
                pg_sys::Datum::from(0usize),
            );
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget_cleared(_argument: pg_sys::Datum, _cache: i32, _hash: u32) {
    GENERATION.set(GENERATION.get() + 1);
}

/// The functions that read `base/pgsql_tmp` or the backend's memory: names, and the
/// argument types of each.
const READERS: &[(&[&str], &[&[Oid]])] = &[
    (
        &["pg_tablespace_size"],
        &[&[pg_sys::NAMEOID], &[pg_sys::OIDOID]],
    ),
    (&["pg_ls_tmpdir"], &[&[], &[pg_sys::OIDOID]]),
    (&["pg_get_backend_memory_contexts"], &[&[]]),
    // The server's log holds what is withheld from the client (row_errors.rs,
    // statistics.rs): its size told a withheld value's length (the fourth round).
    (&["pg_ls_logdir"], &[&[]]),
    (
        &["lo_import"],
        &[&[pg_sys::TEXTOID], &[pg_sys::TEXTOID, pg_sys::OIDOID]],
    ),
    (
        &["pg_stat_file"],
        &[&[pg_sys::TEXTOID], &[pg_sys::TEXTOID, pg_sys::BOOLOID]],
    ),
    (
        &["pg_ls_dir"],
        &[
            &[pg_sys::TEXTOID],
            &[pg_sys::TEXTOID, pg_sys::BOOLOID, pg_sys::BOOLOID],
        ],
    ),
    (
        &["pg_read_file", "pg_read_binary_file"],
        &[
            &[pg_sys::TEXTOID],
            &[pg_sys::TEXTOID, pg_sys::BOOLOID],
            &[pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::INT8OID],
            &[
                pg_sys::TEXTOID,
                pg_sys::INT8OID,
                pg_sys::INT8OID,
                pg_sys::BOOLOID,
            ],
        ],
    ),
];

/// Each reader's name and argument types.
fn readers() -> impl Iterator<Item = (&'static str, &'static [Oid])> {
    READERS.iter().flat_map(|(names, signatures)| {
        (names.iter())
            .flat_map(move |name| signatures.iter().map(move |arguments| (*name, *arguments)))
    })
}

/// Refuses the statement of `role` (the login role, which has a budget) if it may read
/// the temporary files.
pub fn refuse_readable(role: u32) {
    let login = Oid::from(role);
    // SAFETY: catalog lookups inside the statement's transaction.
    unsafe {
        if pg_sys::superuser_arg(login) {
            return;
        }
        // What follows reads the catalogs as committed, and as this transaction changed
        // them; a transaction not yet committed gives its own sessions what the check
        // cannot see. A role WITH ADMIN OPTION revoked a membership from itself, ran the
        // DP statement, read the spill from a second session and rolled back; another
        // session of it granted a group it belongs to a membership and read the spill
        // before it rolled back (the red teams of 2026-11-28). Such a change sends no
        // invalidation before it commits: checked at every statement.
        if changing_now(login) {
            raise(Error::PrivilegesChanging {
                role: role_name(role),
            });
        }
    }
    let generation = GENERATION.get();
    if CLEARED.get() == Some((login, generation)) {
        return;
    }
    // SAFETY: as above.
    unsafe {
        refuse_attributes(login, role);
        // COPY from a file or a program reads any file of the server: the temporary
        // files, the table's own, and the log with what was withheld (the fourth round
        // read a withheld value there).
        for member_of in [c"pg_read_server_files", c"pg_execute_server_program"] {
            let other = pg_sys::get_role_oid(member_of.as_ptr(), true);
            if other != pg_sys::InvalidOid && pg_sys::is_member_of_role(login, other) {
                raise(Error::ServerFilesReadable {
                    role: role_name(role),
                    member_of: member_of.to_string_lossy().into_owned(),
                });
            }
        }
        for (name, arguments) in readers() {
            let Some(function) = lookup(name, arguments) else {
                continue;
            };
            let through = if may_execute(function, login) {
                Some(String::new())
            } else {
                granted_to_a_role_of(function, login)
                    .map(|other| format!(" as a member of role \"{}\"", role_name(other.to_u32())))
            };
            if let Some(through) = through {
                let types: Vec<String> = arguments
                    .iter()
                    .map(|t| {
                        let name = pg_sys::format_type_be(*t);
                        std::ffi::CStr::from_ptr(name)
                            .to_string_lossy()
                            .into_owned()
                    })
                    .collect();
                raise(Error::TemporaryFilesReadable {
                    role: role_name(role),
                    function: format!("{name}({})", types.join(", ")),
                    through,
                });
            }
        }
    }
    CLEARED.set(Some((login, generation)));
}

/// Whether a transaction of another session of `login` inserted a row version of
/// pg_authid or pg_auth_members that it has not committed, or this one updated or
/// deleted one, or a reader's row of pg_proc: every version of their rows, committed or
/// not (SnapshotAny). What this transaction inserted the check reads; what other roles'
/// sessions have not committed only they see. Another session's uncommitted grant of a
/// reader's EXECUTE needs a grant option that the committed privileges already show, or
/// a membership that pg_auth_members shows. (A prepared transaction's rows no session
/// sees before COMMIT PREPARED: a grant after the check, as any other.)
///
/// # Safety
/// A transaction must be open.
unsafe fn changing_now(login: Oid) -> bool {
    // pg_auth_members, a fixed oid in every version (pgrx names no constant for it).
    const AUTH_MEMBERS: u32 = 1261;
    // SAFETY: as the caller guarantees; SnapshotAnyData is PostgreSQL's static snapshot,
    // and each tuple's header is read while the scan holds it.
    unsafe {
        let elsewhere = Elsewhere {
            sessions: transactions_of_other_sessions(login),
            prepared: prepared_transactions_possible(),
        };
        let here = pg_sys::GetTopTransactionIdIfAny() != pg_sys::InvalidTransactionId;
        if elsewhere.sessions.is_empty() && !elsewhere.prepared && !here {
            return false;
        }
        let any = std::ptr::addr_of_mut!(pg_sys::SnapshotAnyData);
        let mut changing = false;
        let mut mark = |tuple: pg_sys::HeapTuple, _: pg_sys::TupleDesc| {
            let header = (*tuple).t_data;
            changing |= inserted_by(header, &elsewhere) || removed_here(header);
        };
        for relation in [pg_sys::AuthIdRelationId.to_u32(), AUTH_MEMBERS] {
            crate::extension::catalog::scan_under(relation, 0, &[], any, &mut mark);
        }
        if changing || !here {
            return changing;
        }
        let mut mark = |tuple: pg_sys::HeapTuple, _: pg_sys::TupleDesc| {
            changing |= removed_here((*tuple).t_data);
        };
        for (name, arguments) in readers() {
            if let Some(function) = lookup(name, arguments) {
                crate::extension::catalog::scan_under(
                    pg_sys::ProcedureRelationId.to_u32(),
                    pg_sys::ProcedureOidIndexId,
                    &[(pg_sys::Anum_pg_proc_oid as i16, function)],
                    any,
                    &mut mark,
                );
            }
        }
        changing
    }
}

/// Refuses a role that has, or may become a role that has, SUPERUSER (which reads every
/// file: superuser status is never inherited, SET ROLE takes it), REPLICATION
/// (pg_basebackup copies the data directory and the log in it) or, on PostgreSQL 15,
/// CREATEROLE (which grants pg_monitor and pg_read_server_files; from 16 on it grants
/// only the roles it administers, which the memberships cover): the red team of
/// 2026-11-28 read the spill through each.
///
/// # Safety
/// A transaction must be open.
unsafe fn refuse_attributes(login: Oid, role: u32) {
    // SAFETY: as the caller guarantees; pg_authid's rows start with FormData_pg_authid.
    unsafe {
        let mut found: Option<(Oid, &'static str, &'static str)> = None;
        crate::extension::catalog::scan(pg_sys::AuthIdRelationId.to_u32(), 0, &[], |tuple, _| {
            let row = &*(pg_sys::GETSTRUCT(tuple) as *const pg_sys::FormData_pg_authid);
            let attribute = if row.rolsuper {
                Some(("SUPERUSER", "reads every file of the server"))
            } else if row.rolreplication {
                Some((
                    "REPLICATION",
                    "may copy the data directory with pg_basebackup",
                ))
            } else if cfg!(feature = "pg15") && row.rolcreaterole {
                Some((
                    "CREATEROLE",
                    "may grant itself pg_monitor or pg_read_server_files",
                ))
            } else {
                None
            };
            if let Some((attribute, reach)) = attribute {
                if found.is_none() && pg_sys::is_member_of_role(login, row.oid) {
                    found = Some((row.oid, attribute, reach));
                }
            }
        });
        if let Some((holder, attribute, reach)) = found {
            let through = if holder == login {
                String::new()
            } else {
                format!("may become role \"{}\", which ", role_name(holder.to_u32()))
            };
            raise(Error::RoleAttributeReads {
                role: role_name(role),
                through,
                attribute,
                reach,
            });
        }
    }
}

/// The top-level transaction ids of the other sessions of `login` that have one, from a
/// fresh look at the backends (not the transaction's snapshot of them).
///
/// # Safety
/// A transaction must be open.
unsafe fn transactions_of_other_sessions(login: Oid) -> Vec<pg_sys::TransactionId> {
    // SAFETY: as the caller guarantees; each entry is read while the snapshot of the
    // backends taken here lives (until the next clear).
    unsafe {
        pg_sys::pgstat_clear_backend_activity_snapshot();
        (1..=pg_sys::pgstat_fetch_stat_numbackends())
            .filter_map(|index| {
                let entry = crate::extension::versions::local_backend(index);
                let entry = entry.as_ref()?;
                let (status, xid) = (&entry.backendStatus, entry.backend_xid);
                (status.st_userid == login
                    && status.st_procpid != pg_sys::MyProcPid
                    && xid != pg_sys::InvalidTransactionId)
                    .then_some(xid)
            })
            .collect()
    }
}

/// The transactions not yet committed whose rows the check must not ignore.
struct Elsewhere {
    /// The top-level ids of the other sessions of the login role.
    sessions: Vec<pg_sys::TransactionId>,
    /// Whether prepared transactions may exist: one has no session, and COMMIT PREPARED
    /// makes its grant, authorised when it was prepared, take effect after the check
    /// (the red team of 2026-11-28 prepared a grant, revoked its own membership and
    /// committed the grant while the DP cursor was open). Any role's counts.
    prepared: bool,
}

/// Whether a transaction `elsewhere`, still in progress, inserted the row version: its
/// sessions see a row this check cannot, or its commit grants what the check did not
/// see.
///
/// # Safety
/// `header` must be a tuple header the caller holds.
unsafe fn inserted_by(header: pg_sys::HeapTupleHeader, elsewhere: &Elsewhere) -> bool {
    // SAFETY: as the caller guarantees; pg_subtrans holds every transaction in progress.
    unsafe {
        let inserted = (*header).t_choice.t_heap.t_xmin;
        if (elsewhere.sessions.is_empty() && !elsewhere.prepared)
            || pg_sys::TransactionIdIsCurrentTransactionId(inserted)
            || !pg_sys::TransactionIdIsInProgress(inserted)
        {
            return false;
        }
        let top = pg_sys::SubTransGetTopmostTransaction(inserted);
        // A prepared transaction runs in no backend: no process has its id.
        elsewhere.sessions.contains(&top)
            || (elsewhere.prepared && pg_sys::BackendXidGetPid(top) == 0)
    }
}

/// Whether max_prepared_transactions (fixed at server start) allows prepared
/// transactions.
fn prepared_transactions_possible() -> bool {
    thread_local! {
        static POSSIBLE: std::cell::OnceCell<bool> = const { std::cell::OnceCell::new() };
    }
    POSSIBLE.with(|possible| {
        *possible.get_or_init(|| {
            // SAFETY: reads a built-in setting by name, which exists (missing_ok false).
            let value = unsafe {
                let text =
                    pg_sys::GetConfigOption(c"max_prepared_transactions".as_ptr(), false, false);
                std::ffi::CStr::from_ptr(text)
                    .to_string_lossy()
                    .into_owned()
            };
            value.trim() != "0"
        })
    })
}

/// Whether this transaction updated or deleted the row version: the check reads what
/// is left, its other sessions the committed row.
///
/// # Safety
/// `header` must be a tuple header the caller holds.
unsafe fn removed_here(header: pg_sys::HeapTupleHeader) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe { pg_sys::TransactionIdIsCurrentTransactionId(updater(header)) }
}

/// The transaction that updated or deleted the row version, or InvalidTransactionId
/// (none, or a lock alone).
///
/// # Safety
/// `header` must be a tuple header the caller holds.
unsafe fn updater(header: pg_sys::HeapTupleHeader) -> pg_sys::TransactionId {
    // SAFETY: as the caller guarantees; HeapTupleGetUpdateXid reads a multixact's
    // updater.
    unsafe {
        let infomask = (*header).t_infomask as u32;
        let locked_only = infomask & pg_sys::HEAP_XMAX_LOCK_ONLY != 0
            || infomask & (pg_sys::HEAP_XMAX_IS_MULTI | pg_sys::HEAP_LOCK_MASK)
                == pg_sys::HEAP_XMAX_EXCL_LOCK;
        if infomask & pg_sys::HEAP_XMAX_INVALID != 0 || locked_only {
            pg_sys::InvalidTransactionId
        } else if infomask & pg_sys::HEAP_XMAX_IS_MULTI != 0 {
            pg_sys::HeapTupleGetUpdateXid(header)
        } else {
            (*header).t_choice.t_heap.t_xmax
        }
    }
}

/// The function `pg_catalog.name(arguments)`, if this version has it.
///
/// # Safety
/// A transaction must be open.
unsafe fn lookup(name: &str, arguments: &[Oid]) -> Option<Oid> {
    // SAFETY: as the caller guarantees; the name list is built in the current context.
    unsafe {
        let qualified = pg_sys::lappend(
            pg_sys::lappend(
                std::ptr::null_mut(),
                pg_sys::makeString(pg_sys::pstrdup(c"pg_catalog".as_ptr())).cast(),
            ),
            pg_sys::makeString(pg_sys::pstrdup(
                std::ffi::CString::new(name).expect("no NUL").as_ptr(),
            ))
            .cast(),
        );
        let function =
            pg_sys::LookupFuncName(qualified, arguments.len() as _, arguments.as_ptr(), true);
        (function != pg_sys::InvalidOid).then_some(function)
    }
}

/// A role named in `function`'s privileges that `login` is a member of, with or without
/// INHERIT (so that it may SET ROLE to it).
///
/// # Safety
/// A transaction must be open.
unsafe fn granted_to_a_role_of(function: Oid, login: Oid) -> Option<Oid> {
    // SAFETY: as the caller guarantees; the tuple is released before returning, the ACL
    // is a detoasted copy or the tuple's own datum, read while the tuple is held.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::PROCOID as _,
            pg_sys::Datum::from(function),
        );
        if tuple.is_null() {
            return None;
        }
        let mut is_null = false;
        let datum = pg_sys::SysCacheGetAttr(
            pg_sys::SysCacheIdentifier::PROCOID as _,
            tuple,
            pg_sys::Anum_pg_proc_proacl as _,
            &mut is_null,
        );
        let mut found = None;
        if !is_null {
            let acl = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *const pg_sys::Acl;
            let mut roles: *mut Oid = std::ptr::null_mut();
            let count = pg_sys::aclmembers(acl, &mut roles);
            for i in 0..count.max(0) as usize {
                let other = *roles.add(i);
                if pg_sys::is_member_of_role(login, other) {
                    found = Some(other);
                    break;
                }
            }
        }
        pg_sys::ReleaseSysCache(tuple);
        found
    }
}
