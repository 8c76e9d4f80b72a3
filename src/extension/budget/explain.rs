//! EXPLAIN ANALYZE shows exact row counts under a DP aggregate: refuse it to roles with
//! a budget (as pg_diffix does for its restricted roles). Two checks:
//! - after parse analysis, an EXPLAIN (ANALYZE) whose statement (views expanded) calls
//!   one of our aggregates is refused before anything runs (this module);
//! - at run time, the charge refuses when the aggregate's own plan is instrumented, which
//!   is when the row counts of the scans under it would be shown (EXPLAIN ANALYZE
//!   EXECUTE, CREATE TABLE AS, auto_explain with log_analyze).
//!
//! No hook wraps the execution of other statements, so their errors reach the client
//! untouched.

use super::charge::{role_name, session_is_budgeted, session_role};
use crate::error::Error;
use crate::extension::raise;
use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use std::ffi::{c_void, CStr};

static mut PREVIOUS_POST_PARSE_ANALYZE: pg_sys::post_parse_analyze_hook_type = None;

/// Installs the hook; called from _PG_init.
pub fn install_explain_guard() {
    // SAFETY: _PG_init runs once per process, single-threaded, before any statement is
    // parsed: nothing else reads or writes the hook meanwhile.
    unsafe {
        PREVIOUS_POST_PARSE_ANALYZE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(refuse_explain_analyze);
    }
}

#[cfg(not(feature = "pg13"))]
#[pg_guard]
unsafe extern "C-unwind" fn refuse_explain_analyze(
    parse: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jumble: *mut pg_sys::JumbleState,
) {
    // SAFETY: PostgreSQL calls the hook with the parse state and query it just analysed;
    // the previous hook was set before ours and takes the same arguments.
    unsafe {
        if let Some(previous) = PREVIOUS_POST_PARSE_ANALYZE {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(parse, query, jumble));
        }
        check_explain_analyze(query);
    }
}

#[cfg(feature = "pg13")]
#[pg_guard]
unsafe extern "C-unwind" fn refuse_explain_analyze(
    parse: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
) {
    // SAFETY: as above.
    unsafe {
        if let Some(previous) = PREVIOUS_POST_PARSE_ANALYZE {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(parse, query));
        }
        check_explain_analyze(query);
    }
}

/// # Safety
/// `query` must be NULL or a query fresh from parse analysis.
unsafe fn check_explain_analyze(query: *mut pg_sys::Query) {
    // SAFETY: the nodes read are those of an analysed query: a utility statement's node
    // is checked to be an ExplainStmt before it is cast, and its options are DefElems.
    unsafe {
        if query.is_null() || (*query).commandType != pg_sys::CmdType::CMD_UTILITY {
            return;
        }
        let statement = (*query).utilityStmt;
        if statement.is_null() || !pgrx::is_a(statement, pg_sys::NodeTag::T_ExplainStmt) {
            return;
        }
        let explain = statement as *mut pg_sys::ExplainStmt;
        let options = pgrx::PgList::<pg_sys::DefElem>::from_pg((*explain).options);
        let analyze = options.iter_ptr().any(|option| {
            CStr::from_ptr((*option).defname).to_bytes() == b"analyze"
                && pg_sys::defGetBoolean(option)
        });
        if analyze && session_is_budgeted() && calls_dp_aggregate((*explain).query) {
            raise(Error::ExplainAnalyzeRefused {
                role: role_name(session_role()),
            });
        }
    }
}

/// Whether a query, with its views expanded, calls an aggregate of this extension.
///
/// # Safety
/// `query` must be NULL or a valid node.
unsafe fn calls_dp_aggregate(query: *mut pg_sys::Node) -> bool {
    // SAFETY: the node is checked to be a Query before it is cast; the rewriter works on
    // a copy, so the statement being explained is left as it was.
    unsafe {
        if query.is_null() || !pgrx::is_a(query, pg_sys::NodeTag::T_Query) {
            return false;
        }
        if (*(query as *mut pg_sys::Query)).commandType == pg_sys::CmdType::CMD_UTILITY {
            return false; // EXECUTE, CREATE TABLE AS, ...: left to the run-time check.
        }
        let mut extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
        let copy = pg_sys::copyObjectImpl(query as *const c_void) as *mut pg_sys::Query;
        let rewritten = pgrx::PgList::<pg_sys::Query>::from_pg(pg_sys::QueryRewrite(copy));
        let context = &mut extension as *mut Oid as *mut c_void;
        let found = rewritten
            .iter_ptr()
            .any(|query| pg_sys::query_tree_walker(query, Some(dp_aggregate_walker), context, 0));
        found
    }
}

/// # Safety
/// Called by PostgreSQL's tree walkers with a node of the tree (or NULL) and the context
/// [`calls_dp_aggregate`] passed: a pointer to the extension's oid.
#[pg_guard]
unsafe extern "C-unwind" fn dp_aggregate_walker(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: as the function's contract says; each node is cast only after its tag is
    // checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if pgrx::is_a(node, pg_sys::NodeTag::T_Aggref) {
            let function = (*(node as *mut pg_sys::Aggref)).aggfnoid;
            let extension = *(context as *mut Oid);
            if pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension {
                return true;
            }
        }
        if pgrx::is_a(node, pg_sys::NodeTag::T_Query) {
            return pg_sys::query_tree_walker(
                node as *mut pg_sys::Query,
                Some(dp_aggregate_walker),
                context,
                0,
            );
        }
        pg_sys::expression_tree_walker(node, Some(dp_aggregate_walker), context)
    }
}
