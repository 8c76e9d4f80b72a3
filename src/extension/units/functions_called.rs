//! Functions the planner hook cannot see into. A function in a DP query (in FROM, in an
//! expression, an operator's) may read a table with a privacy unit in its body, where
//! the rows reach the aggregate unbounded (a SQL function that PostgreSQL inlines only
//! after this hook, a PL/pgSQL one never). So where units are declared, a query level
//! with DP aggregates may call only PostgreSQL's built-in functions (except those that
//! run a query given as text), this extension's, and functions their owner declared with
//! `SECURITY LABEL FOR pg_exp_mech ON FUNCTION f(...) IS 'reads_no_tables'`.

use super::labels;
use crate::extension::budget::dp_aggregate;
use pgrx::is_a;
use pgrx::pg_sys::{self, NodeTag, Oid};
use std::ffi::{c_void, CStr};

/// The label that vouches for a function.
pub const READS_NO_TABLES: &str = "reads_no_tables";

/// Built-in functions that run a query given as text.
const RUN_QUERIES: [&str; 7] = [
    "query_to_xml",
    "ts_rewrite",
    "cursor_to_xml",
    "table_to_xml",
    "schema_to_xml",
    "database_to_xml",
    "ts_stat",
];

/// The first function `query` (and every query inside it) calls that may read tables out
/// of sight, as `name(argument types)`.
///
/// # Safety
/// `query` must be a valid Query being planned.
pub unsafe fn opaque_function(query: *mut pg_sys::Query) -> Option<String> {
    let mut found: Option<Oid> = None;
    // SAFETY: the walker's context is `found`.
    unsafe {
        pg_sys::query_tree_walker(
            query,
            Some(walker),
            (&mut found as *mut Option<Oid>).cast(),
            0,
        );
    }
    // SAFETY: a catalog lookup of an existing function.
    found.map(|function| unsafe {
        CStr::from_ptr(pg_sys::format_procedure(function))
            .to_string_lossy()
            .into_owned()
    })
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is opaque_function's Option<Oid>; nodes are cast after their
    // tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            return pg_sys::query_tree_walker(node.cast(), Some(walker), context, 0);
        }
        if pg_sys::check_functions_in_node(node, Some(is_opaque), context) {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(walker), context)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn is_opaque(function: Oid, context: *mut c_void) -> bool {
    if !may_read_tables(function) {
        return false;
    }
    // SAFETY: the context is opaque_function's Option<Oid>.
    unsafe { *(context as *mut Option<Oid>) = Some(function) };
    true
}

/// Whether `function` may read tables out of the hook's sight.
fn may_read_tables(function: Oid) -> bool {
    // SAFETY: catalog lookups by oid.
    unsafe {
        if function.to_u32() < pg_sys::FirstNormalObjectId {
            let name = pg_sys::get_func_name(function);
            return !name.is_null() && {
                let name = CStr::from_ptr(name).to_string_lossy();
                RUN_QUERIES.iter().any(|prefix| name.starts_with(prefix))
            };
        }
        let extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
        if extension != pg_sys::InvalidOid
            && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension
        {
            return false;
        }
        if dp_aggregate(function).is_some() {
            return false;
        }
        !labels::function_labels(function)
            .iter()
            .any(|label| label == READS_NO_TABLES)
    }
}
