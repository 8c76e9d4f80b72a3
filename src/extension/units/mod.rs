//! People, not rows: a privacy unit declared once (a security label on the column that
//! holds the person), and every DP aggregate whose input holds rows of a protected table
//! bounded per unit before it sees them (../shared/PRIVACY.md, section 1).
//!
//! - `labels`: the declaration, its catalog lookup and the view `dp_privacy_units`;
//! - `follow`: from a query level with DP aggregates down to the protected table's unit
//!   column, through FROM subqueries (and views) that keep rows apart, or a refusal;
//! - `joins`: protected tables joined on their unit columns, one unit a joined row;
//! - `keys`: units found along foreign keys (order_items → orders);
//! - `grouping_sets`: a level with GROUPING SETS split into one GROUP BY per set;
//! - `rewrite`: the transformation of that level, from input tree to output tree;
//! - `expressions`: the planner expressions the transformation builds;
//! - `functions`: the SQL functions the bounded plan calls;
//! - `functions_called`: the functions a DP query level may call where units are
//!   declared (those the hook cannot see into are refused).
//!
//! Runs in the planner hook, after views are expanded and before PostgreSQL plans, for
//! every role: a superuser's DP aggregate is bounded too.

mod expressions;
mod follow;
mod function_oids;
mod functions;
mod functions_called;
mod grouping_sets;
mod joins;
mod keys;
mod labels;
mod rewrite;
pub(crate) use expressions::int8;
pub(crate) use function_oids::functions;
#[cfg(any(test, feature = "pg_test"))]
mod tests;

pub use function_oids::charged_expression;
pub use functions::new_statement;
pub use labels::{any_declared, install_labels};

use crate::extension::budget::dp_aggregate;
use crate::extension::OrRaise;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgList};
use std::ffi::c_void;

/// Refuses DP aggregates in a session whose library was not preloaded, where units are
/// declared: a statement planned before the library loaded was not bounded.
pub fn refuse_unless_preloaded() {
    if any_declared() {
        crate::extension::raise(crate::error::Error::UnitsUnavailable {
            reason: "pg_exp_mech is not in shared_preload_libraries, so this statement may have been planned without bounding by them: add it there and restart".into(),
        });
    }
}

/// Registers the label provider and the caches' invalidation; called from _PG_init.
pub fn install_units() {
    install_labels();
    function_oids::install_function_cache();
}

/// Bounds by privacy unit every query level of `query` (and of the queries inside it)
/// that finalizes DP aggregates over rows of a protected table; refuses those that
/// cannot be bounded.
///
/// # Safety
/// `query` must be a rewritten query about to be planned, which the planner may modify.
pub unsafe fn bound_by_units(query: *mut pg_sys::Query) {
    let mut enclosing = Vec::new();
    follow::forget_protected_ctes();
    // SAFETY: as the caller guarantees.
    unsafe {
        bound_level(query, &mut enclosing);
        pg_sys::query_tree_walker(query, Some(mark_seen), std::ptr::null_mut(), 0);
    }
}

/// The parse location that marks a DP call this hook has seen (bounded, or found to read
/// no protected row): negative, so no parsed call has it. The metering hook refuses,
/// where units are declared, a DP call without it: one planned out of this hook's sight
/// (the body of a SQL function that the planner inlines after the hook ran).
pub(crate) const SEEN: i32 = -20_261_125;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn mark_seen(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            return pg_sys::query_tree_walker(node.cast(), Some(mark_seen), context, 0);
        }
        if is_a(node, NodeTag::T_Aggref) {
            let aggref = node as *mut pg_sys::Aggref;
            if dp_aggregate((*aggref).aggfnoid).is_some() {
                (*aggref).location = SEEN;
            }
        } else if is_a(node, NodeTag::T_WindowFunc) {
            let function = node as *mut pg_sys::WindowFunc;
            if dp_aggregate((*function).winfnoid).is_some() {
                (*function).location = SEEN;
            }
        }
        pg_sys::expression_tree_walker(node, Some(mark_seen), context)
    }
}

/// Refuses a DP call that the planner hook did not see (`location`), where privacy
/// units are declared, Citus is installed, or the session's role has a budget.
pub fn require_seen(location: i32, aggregate: &str) {
    // A parallel worker's copy of the plan comes through nodeToString, which drops
    // parse locations: the leader, which started the same plan, checked its calls.
    // SAFETY: a process-wide integer PostgreSQL sets when a worker starts.
    if unsafe { pg_sys::ParallelWorkerNumber } >= 0 {
        return;
    }
    if location == SEEN {
        return;
    }
    let reason = format!("{aggregate} was planned out of pg_exp_mech's sight (inside a SQL function that PostgreSQL inlines, or before the library was loaded): call the function's query directly, or make the function not inlinable (for example VOLATILE or SECURITY DEFINER)");
    if any_declared() {
        crate::extension::raise(crate::error::Error::UnitsUnavailable { reason });
    }
    // Nor did the rest of the hook's work reach it (conditions kept above DP views,
    // parameters read once): a budgeted role's call is refused wherever it runs.
    if crate::extension::budget::session_is_budgeted() {
        crate::extension::raise(crate::error::Error::NotMetered {
            reason: format!("for a role with a privacy budget, {reason}"),
        });
    }
    if crate::extension::citus::installed() {
        crate::extension::raise(crate::error::Error::Distributed {
            reason: format!("with Citus installed, {reason}"),
        });
    }
}

/// # Safety
/// `query` must be a valid Query; `enclosing` lists the queries around it, outermost first.
unsafe fn bound_level(query: *mut pg_sys::Query, enclosing: &mut Vec<*mut pg_sys::Query>) {
    // SAFETY: query_tree_walker visits the queries inside this one (FROM subqueries,
    // WITH queries, sublinks); the walker's context is `enclosing`, with this query on top.
    unsafe {
        enclosing.push(query);
        pg_sys::query_tree_walker(
            query,
            Some(inner_queries),
            (enclosing as *mut Vec<*mut pg_sys::Query>).cast(),
            0,
        );
        enclosing.pop();
        let calls = dp_calls(query);
        if calls.is_empty() {
            return;
        }
        if any_declared() {
            if let Some(function) = functions_called::opaque_function(query) {
                crate::extension::raise(crate::error::Error::OpaqueFunction {
                    function,
                    aggregate: calls.name().into(),
                });
            }
        }
        let source = follow::unit_of_query(query, enclosing, calls.name()).or_raise();
        if let Some(source) = source {
            // The calls are found again after flattening, which copies them.
            crate::extension::versions::flatten_grouping(query);
            match grouping_sets::split(query, &source, calls.name()).or_raise() {
                Some(branches) => {
                    for branch in branches {
                        rewrite::bound(branch, &source, &dp_calls(branch)).or_raise();
                    }
                }
                None => rewrite::bound(query, &source, &dp_calls(query)).or_raise(),
            }
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn inner_queries(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is the stack bound_level passed; nodes are cast after their tags
    // are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            bound_level(node.cast(), &mut *(context as *mut Vec<*mut pg_sys::Query>));
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(inner_queries), context)
    }
}

/// The DP aggregate calls a query level finalizes.
#[derive(Default)]
pub struct Calls {
    /// Aggrefs of this level, in its select list and HAVING.
    pub aggregates: Vec<*mut pg_sys::Aggref>,
    /// A DP aggregate of this level used as a window function.
    pub window: Option<&'static str>,
    /// A DP aggregate of this level inside a subquery of it (`SELECT (SELECT
    /// dp_argmax(t.x, ...))`).
    pub nested: Option<&'static str>,
    /// Whether the level also computes aggregates that are not DP (count(*), ...).
    pub others: bool,
}

impl Calls {
    fn is_empty(&self) -> bool {
        self.aggregates.is_empty() && self.window.is_none() && self.nested.is_none()
    }

    /// Whether every row of the level is made of DP releases only: one row (no GROUP BY)
    /// of DP aggregates, no other aggregate. Then the level is public to the query
    /// around it; a grouped level's keys, or an exact count beside the release, are rows
    /// of the protected table.
    ///
    /// # Safety
    /// `query` must be the valid Query these calls were found in.
    pub unsafe fn release_only(&self, query: *mut pg_sys::Query) -> bool {
        // SAFETY: fields of a valid Query.
        unsafe {
            !self.aggregates.is_empty()
                && !self.others
                && self.window.is_none()
                && !(*query).hasWindowFuncs
                && is_empty_list((*query).groupClause)
                && is_empty_list((*query).groupingSets)
        }
    }

    /// The name of one of the calls, for messages.
    pub fn name(&self) -> &'static str {
        self.aggregates
            .first()
            // SAFETY: Aggrefs collected from a valid query.
            .and_then(|&aggref| dp_aggregate(unsafe { (*aggref).aggfnoid }))
            .map(|aggregate| aggregate.name)
            .or(self.window)
            .or(self.nested)
            .unwrap_or("a differentially private aggregate")
    }
}

struct CallsWalk {
    depth: u32,
    calls: Calls,
}

/// The DP aggregate calls of `query`'s own level.
///
/// # Safety
/// `query` must be a valid Query.
pub unsafe fn dp_calls(query: *mut pg_sys::Query) -> Calls {
    let mut walk = CallsWalk {
        depth: 0,
        calls: Calls::default(),
    };
    // SAFETY: the walker reads nodes of the query's select list and HAVING.
    unsafe {
        // The walker itself on each root (expression_tree_walker visits only a node's
        // children: a HAVING that is one call, `HAVING dp_partition(...)`, would be missed).
        let context = (&mut walk as *mut CallsWalk).cast();
        call_walker((*query).targetList.cast(), context);
        call_walker((*query).havingQual, context);
    }
    walk.calls
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn call_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is dp_calls's CallsWalk; nodes are cast after their tags are
    // checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        let walk = &mut *(context as *mut CallsWalk);
        if is_a(node, NodeTag::T_Query) {
            walk.depth += 1;
            pg_sys::query_tree_walker(node.cast(), Some(call_walker), context, 0);
            walk.depth -= 1;
            return false;
        }
        if is_a(node, NodeTag::T_Aggref) {
            let aggref = node as *mut pg_sys::Aggref;
            if (*aggref).agglevelsup == walk.depth {
                if let Some(aggregate) = dp_aggregate((*aggref).aggfnoid) {
                    if walk.depth == 0 {
                        walk.calls.aggregates.push(aggref);
                    } else {
                        walk.calls.nested = Some(aggregate.name);
                    }
                } else {
                    // Another aggregate of this level, even inside a sublink
                    // (`(SELECT array_agg(q.x))` aggregates the level's rows).
                    walk.calls.others = true;
                }
            }
        } else if is_a(node, NodeTag::T_WindowFunc) && walk.depth == 0 {
            if let Some(aggregate) = dp_aggregate((*(node as *mut pg_sys::WindowFunc)).winfnoid) {
                walk.calls.window = Some(aggregate.name);
            }
        }
        pg_sys::expression_tree_walker(node, Some(call_walker), context)
    }
}

/// Whether the list of nodes is empty.
fn is_empty_list(list: *mut pg_sys::List) -> bool {
    // SAFETY: a List of a valid Query, or NIL; only its length is read.
    unsafe { PgList::<c_void>::from_pg(list).is_empty() }
}
