//! Citus, until its distributed plans are metered: a DP aggregate runs only where the
//! cluster's one budget sees it. Measured before (Citus 13 on PostgreSQL 15): a query
//! grouped by the distribution column went whole to the workers, whose final functions
//! charged their own ledgers, so a role with 0.5 left on the coordinator ran 99 grouped
//! dp_quantile at ε = 1. So, in a database where Citus is installed:
//! - on a worker (`pg_dist_local_group.groupid` ≠ 0) every DP aggregate is refused: an
//!   analyst who connects there, or a fragment a coordinator sends, would be charged to
//!   the worker's own ledger;
//! - on the coordinator a DP aggregate over a Citus table (`pg_dist_partition`:
//!   distributed or reference) is refused, since Citus may push it to the workers;
//!   DP aggregates over the coordinator's local tables run and are charged as anywhere.
//!
//! The catalogs are read by name in pg_catalog, under the catalog snapshot, before
//! Citus plans the query (pg_exp_mech's planner hook runs first when it is listed after
//! citus in shared_preload_libraries, and refuses either way).

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

/// Refuses `query`, which finalizes DP aggregates, where Citus would run them out of the
/// one budget's sight.
///
/// # Safety
/// `query` must be a valid Query being planned.
pub unsafe fn refuse_distributed(query: *mut pg_sys::Query) {
    let Some(local_group) = citus_catalog(c"pg_dist_local_group") else {
        return;
    };
    let mut worker = false;
    // SAFETY: a heap scan of Citus's one-row catalog; its first column is the int4
    // groupid (0 on the coordinator).
    unsafe {
        super::units::scan_catalog(local_group.to_u32(), 0, &[], |tuple, descriptor| {
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
        return;
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
    if let Some(table) = found {
        // SAFETY: a catalog lookup of an existing relation.
        let name = unsafe {
            std::ffi::CStr::from_ptr(pg_sys::get_rel_name(table))
                .to_string_lossy()
                .into_owned()
        };
        raise(Error::Distributed {
            reason: format!("differentially private aggregates over Citus table \"{name}\" are not supported yet: Citus may run them on the workers, whose charges the coordinator's budget does not see; aggregate a local table on the coordinator"),
        });
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn distributed_walker(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is refuse_distributed's pair; nodes are cast after their tags
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
                super::units::scan_catalog(partitions.to_u32(), 0, &[(1, (*rte).relid)], |_, _| {
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
