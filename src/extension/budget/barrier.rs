//! No function of the analyst's sees the rows under a DP aggregate.
//!
//! PostgreSQL pushes a condition of the outer query into a view (below its aggregation)
//! unless the view is a `security_barrier`: an analyst's own function in WHERE would then
//! run on every row of the table under the DP aggregate, and a NOTICE, an error or a side
//! effect tells what it saw. With a security barrier only leakproof operators are pushed
//! down, and those only choose which groups are computed (which the group keys reveal
//! anyway: README, "Grouped queries").
//!
//! So a view whose own query calls a DP aggregate must be a security barrier:
//! - creating or altering a view (CREATE [OR REPLACE] VIEW, ALTER VIEW ... SET/RESET,
//!   CREATE RULE) so that it calls DP aggregates without being one is refused, for every
//!   role: such a view cannot come to exist, whatever path later reaches it (a SQL
//!   function with a BEGIN ATOMIC body, a rule or a policy, which are not parse-analysed
//!   again when they run);
//! - for a role with a budget (or any role under pg_exp_mech.require_budget), every view
//!   a statement reads, and every view those read, is checked again after parse analysis
//!   (a view made before the extension was loaded): the statement is refused before it is
//!   planned.

use super::charge::session_is_budgeted;
use super::identity::dp_aggregate;
use super::statistics::count_again;
use crate::error::Error;
use crate::extension::raise;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_void, CStr};

static mut PREVIOUS_POST_PARSE_ANALYZE: pg_sys::post_parse_analyze_hook_type = None;

static mut PREVIOUS_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Views nest; deeper than this is refused rather than followed.
const MAX_VIEW_DEPTH: u32 = 64;

/// Installs the hook; called from _PG_init.
pub fn install_barrier() {
    // SAFETY: _PG_init runs once per process, single-threaded, before any statement is
    // parsed: nothing else reads or writes the hook meanwhile.
    unsafe {
        PREVIOUS_POST_PARSE_ANALYZE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(check_views_after_analysis);
        PREVIOUS_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(check_views_made);
    }
}

/// After a statement that can make a view call DP aggregates, or drop its barrier: the
/// view must be a security barrier, or the statement fails (and is rolled back).
#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn check_views_made(
    statement: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    parameters: pg_sys::ParamListInfo,
    environment: *mut pg_sys::QueryEnvironment,
    destination: *mut pg_sys::DestReceiver,
    completion: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: PostgreSQL calls the hook with a utility statement to run; the previous
    // hook takes the same arguments. The statement's node is cast after its tag is
    // checked, and its relation is looked up by name after it ran (it exists then).
    unsafe {
        let utility = (*statement).utilityStmt;
        let relation = if pgrx::is_a(utility, pg_sys::NodeTag::T_ViewStmt) {
            (*(utility as *mut pg_sys::ViewStmt)).view
        } else if pgrx::is_a(utility, pg_sys::NodeTag::T_AlterTableStmt) {
            (*(utility as *mut pg_sys::AlterTableStmt)).relation
        } else if pgrx::is_a(utility, pg_sys::NodeTag::T_RuleStmt) {
            (*(utility as *mut pg_sys::RuleStmt)).relation
        } else {
            std::ptr::null_mut()
        };
        // The name is resolved after the statement ran; copy it first, as the statement
        // may be rewritten in place.
        let relation = if relation.is_null() {
            std::ptr::null_mut()
        } else {
            pg_sys::copyObjectImpl(relation.cast()) as *mut pg_sys::RangeVar
        };
        match PREVIOUS_PROCESS_UTILITY {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                previous(
                    statement,
                    query_string,
                    read_only_tree,
                    context,
                    parameters,
                    environment,
                    destination,
                    completion,
                )
            }),
            None => pg_sys::standard_ProcessUtility(
                statement,
                query_string,
                read_only_tree,
                context,
                parameters,
                environment,
                destination,
                completion,
            ),
        }
        if relation.is_null() {
            return;
        }
        let view = pg_sys::RangeVarGetRelidExtended(
            relation,
            pg_sys::AccessShareLock as i32,
            pg_sys::RVROption::RVR_MISSING_OK,
            None,
            std::ptr::null_mut(),
        );
        if view != pg_sys::InvalidOid && pg_sys::get_rel_relkind(view) as u8 == pg_sys::RELKIND_VIEW
        {
            check_view(view, 0, false);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_views_after_analysis(
    parse: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jumble: *mut pg_sys::JumbleState,
) {
    // SAFETY: PostgreSQL calls the hook with the parse state and query it just analysed;
    // the previous hook was set before ours and takes the same arguments.
    unsafe {
        // A new statement: counting resumes if an abort turned it off (statistics.rs).
        count_again();
        if let Some(previous) = PREVIOUS_POST_PARSE_ANALYZE {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(parse, query, jumble));
        }
        if !query.is_null() && session_is_budgeted() {
            check_views(query, 0, pg_sys::InvalidOid);
        }
    }
}

/// Where the walk is: how many views deep, and in which view (whose rule lists the view
/// itself as OLD and NEW, not to be followed).
struct Walk {
    depth: u32,
    view: pg_sys::Oid,
}

/// Refuses a view that `query` reads (directly, or through other views) and that calls
/// DP aggregates without being a security barrier.
///
/// # Safety
/// `query` must be an analysed query.
unsafe fn check_views(query: *mut pg_sys::Query, depth: u32, view: pg_sys::Oid) {
    let mut context = Walk { depth, view };
    // SAFETY: the walker gets the context it expects.
    unsafe {
        pg_sys::query_tree_walker(
            query,
            Some(view_walker),
            (&mut context as *mut Walk).cast(),
            pg_sys::QTW_EXAMINE_RTES_BEFORE as i32,
        );
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn view_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked; the context is check_views'
    // depth.
    unsafe {
        if node.is_null() {
            return false;
        }
        let walk = &*(context as *mut Walk);
        if pgrx::is_a(node, pg_sys::NodeTag::T_RangeTblEntry) {
            let entry = node as *mut pg_sys::RangeTblEntry;
            if (*entry).rtekind == pg_sys::RTEKind::RTE_RELATION
                && (*entry).relkind as u8 == pg_sys::RELKIND_VIEW
                && (*entry).relid != walk.view
            {
                check_view((*entry).relid, walk.depth, true);
            }
            return false;
        }
        if pgrx::is_a(node, pg_sys::NodeTag::T_Query) {
            check_views(node.cast(), walk.depth, walk.view);
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(view_walker), context)
    }
}

/// Refuses `view` if it calls DP aggregates without being a security barrier; with
/// `nested`, the views it reads too.
///
/// # Safety
/// `view` must be the oid of a view.
unsafe fn check_view(view: pg_sys::Oid, depth: u32, nested: bool) {
    // SAFETY: the view is locked by the statement being analysed; its rule's query is a
    // Query; its options, when set, are a ViewOptions.
    unsafe {
        // Parse analysis locked the views it names, not those they read.
        let relation = pg_sys::relation_open(view, pg_sys::AccessShareLock as i32);
        let options = (*relation).rd_options as *mut pg_sys::ViewOptions;
        let barrier = !options.is_null() && (*options).security_barrier;
        let definition = pg_sys::get_view_query(relation);
        let name = CStr::from_ptr((*(*relation).rd_rel).relname.data.as_ptr())
            .to_string_lossy()
            .into_owned();
        pg_sys::relation_close(relation, pg_sys::NoLock as i32);
        if depth >= MAX_VIEW_DEPTH {
            raise(Error::ViewNotBarrier {
                view: name,
                reason: format!("views nest deeper than {MAX_VIEW_DEPTH}"),
            });
        }
        if !barrier && calls_dp_aggregate(definition.cast()) {
            raise(Error::ViewNotBarrier {
                view: name.clone(),
                reason: format!(
                    "it computes differentially private aggregates but is not a security barrier, so functions of a querying role could see the rows under them; create it WITH (security_barrier), or ALTER VIEW {} SET (security_barrier = true)",
                    quote_identifier(&name)
                ),
            });
        }
        if nested {
            check_views(definition, depth + 1, view);
        }
    }
}

fn quote_identifier(name: &str) -> String {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Whether a query (not following other views) calls one of this extension's aggregates.
///
/// # Safety
/// `node` must be NULL or a valid node.
pub unsafe fn calls_dp_aggregate(node: *mut pg_sys::Node) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe { dp_walker(node, std::ptr::null_mut()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn dp_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if pgrx::is_a(node, pg_sys::NodeTag::T_Aggref) {
            if dp_aggregate((*(node as *mut pg_sys::Aggref)).aggfnoid).is_some() {
                return true;
            }
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_WindowFunc) {
            if dp_aggregate((*(node as *mut pg_sys::WindowFunc)).winfnoid).is_some() {
                return true;
            }
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_Query) {
            return pg_sys::query_tree_walker(node.cast(), Some(dp_walker), context, 0);
        }
        pg_sys::expression_tree_walker(node, Some(dp_walker), context)
    }
}
