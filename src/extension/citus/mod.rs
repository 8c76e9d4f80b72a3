//! Citus: one budget for the cluster, the coordinator's.
//!
//! In a database where Citus is installed:
//! - on a worker (`pg_dist_local_group.groupid` ≠ 0) every DP aggregate is refused: an
//!   analyst who connects there, or a fragment a coordinator sent, would be charged to the
//!   worker's own ledger (measured under Citus 13: a query grouped by the distribution
//!   column went whole to the workers, and a role with 0.5 left on the coordinator ran 99
//!   grouped dp_quantile at ε = 1);
//! - on the coordinator, a statement whose DP aggregates read Citus tables
//!   (`pg_dist_partition`: distributed or reference) is planned so that the coordinator
//!   finalizes them, and is metered there from its plan (coordinator.rs).
//!
//! The catalogs are read by name in pg_catalog, under the catalog snapshot, before
//! Citus plans the query (pg_exp_mech's planner hook runs first when it is listed after
//! citus in shared_preload_libraries).

mod combine;
mod coordinator;
mod fragments;

pub use combine::{combined_call, combined_function, in_partial_aggregation, in_planned_combine};
pub use coordinator::prepare;
pub use fragments::{calls_fragment_marker, install, is_fragment};

use crate::error::Error;
use crate::extension::raise;
use pgrx::is_a;
use pgrx::pg_sys::{self, NodeTag, Oid};
use std::ffi::c_void;

/// A catalog relation of Citus in pg_catalog, if Citus is installed in this database.
fn citus_catalog(name: &std::ffi::CStr) -> Option<Oid> {
    if !installed() {
        return None;
    }
    // SAFETY: catalog lookups by name in pg_catalog (never through search_path).
    unsafe {
        let oid = pg_sys::get_relname_relid(name.as_ptr(), pg_sys::PG_CATALOG_NAMESPACE.into());
        (oid != pg_sys::InvalidOid).then_some(oid)
    }
}

/// Whether Citus is installed in this database: then a DP call the planner hook did not
/// see (in the body of a SQL function that PostgreSQL inlines later) is refused when its
/// plan starts, as where privacy units are declared.
pub fn installed() -> bool {
    // SAFETY: a catalog lookup by name.
    unsafe { pg_sys::get_extension_oid(c"citus".as_ptr(), true) != pg_sys::InvalidOid }
}

/// Whether `query` calls DP aggregates over Citus tables: then it is prepared for
/// Citus's planner ([`prepare`]). On a worker, a query that calls DP aggregates is
/// refused.
///
/// # Safety
/// `query` must be a valid Query being planned.
pub unsafe fn dp_over_citus_tables(query: *mut pg_sys::Query) -> bool {
    let Some(local_group) = citus_catalog(c"pg_dist_local_group") else {
        return false;
    };
    let mut dp = false;
    // SAFETY: the walker's context is `dp`; it reads Aggrefs and WindowFuncs.
    unsafe {
        pg_sys::query_tree_walker(query, Some(dp_walker), (&mut dp as *mut bool).cast(), 0);
    }
    if !dp {
        return false;
    }
    let mut worker = false;
    // SAFETY: a heap scan of Citus's one-row catalog; its first column is the int4
    // groupid (0 on the coordinator).
    unsafe {
        super::catalog::scan(local_group.to_u32(), 0, &[], |tuple, descriptor| {
            let mut null = false;
            let group = pg_sys::heap_getattr(tuple, 1, descriptor, &mut null);
            worker |= !null && group.value() as i32 != 0;
        });
    }
    if worker {
        raise(Error::Distributed {
            reason: "differentially private aggregates run on the Citus coordinator only: this node is a worker, whose plans would be charged to its own privacy ledger, not the cluster's budget; connect to the coordinator".into(),
        });
    }
    let Some(partitions) = citus_catalog(c"pg_dist_partition") else {
        return false;
    };
    let mut found: Option<Oid> = None;
    let mut walk = (partitions, &mut found);
    // SAFETY: the walker's context is `walk`; it reads range-table entries.
    unsafe {
        pg_sys::query_tree_walker(
            query,
            Some(distributed_walker),
            (&mut walk as *mut (Oid, &mut Option<Oid>)).cast(),
            pg_sys::QTW_EXAMINE_RTES_BEFORE as i32,
        );
    }
    found.is_some()
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn dp_walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    // SAFETY: the context is dp_over_citus_tables's flag; tags are checked before casts.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            return pg_sys::query_tree_walker(node.cast(), Some(dp_walker), context, 0);
        }
        let function = if is_a(node, NodeTag::T_Aggref) {
            Some((*(node as *mut pg_sys::Aggref)).aggfnoid)
        } else if is_a(node, NodeTag::T_WindowFunc) {
            Some((*(node as *mut pg_sys::WindowFunc)).winfnoid)
        } else {
            None
        };
        if function
            .is_some_and(|function| crate::extension::budget::dp_aggregate(function).is_some())
        {
            *(context as *mut bool) = true;
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(dp_walker), context)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn distributed_walker(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is dp_over_citus_tables's pair; nodes are cast after their tags
    // are checked; pg_dist_partition is scanned by its first column, logicalrelid.
    unsafe {
        if node.is_null() {
            return false;
        }
        let (partitions, found) = &mut *(context as *mut (Oid, &mut Option<Oid>));
        if is_a(node, NodeTag::T_Query) {
            return pg_sys::query_tree_walker(
                node.cast(),
                Some(distributed_walker),
                context,
                pg_sys::QTW_EXAMINE_RTES_BEFORE as i32,
            );
        }
        if is_a(node, NodeTag::T_RangeTblEntry) {
            let rte = node as *mut pg_sys::RangeTblEntry;
            if (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION {
                let mut citus_table = false;
                super::catalog::scan(partitions.to_u32(), 0, &[(1, (*rte).relid)], |_, _| {
                    citus_table = true
                });
                if citus_table {
                    **found = Some((*rte).relid);
                    return true;
                }
            }
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(distributed_walker), context)
    }
}
