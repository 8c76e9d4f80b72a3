//! A budgeted role's DP aggregation node hands out its groups only once it has read all
//! its rows.
//!
//! Under sorted grouping (GroupAggregate, which the analyst gets with `SET enable_hashagg
//! = off`, or the sorted phases of grouping sets) a node sends each group as soon as the
//! group's rows are read, and a hashed one that spilled sends its first batch's groups
//! before it reads the others. So the groups that reached the client before an error of
//! the DBA's expression told in which group, in key order, the failing row lies (the red
//! team of 2026-11-27, with a cursor's `FETCH 1`), and the time between two groups
//! followed the second one's rows. Held here, the groups leave after the last row was
//! read: an error comes before any group, and the time of the first FETCH is the whole
//! node's.

use crate::error::Error;
use crate::extension::raise;
use pgrx::pg_sys;

/// How much a node may hold: PostgreSQL's own limit for a hash table
/// (`work_mem * hash_mem_multiplier`), and at least 64 MB (about 10^6 groups of a key and a
/// quantile).
fn limit_kb() -> i32 {
    // SAFETY: reads two settings of this backend.
    let (work_mem, multiplier) = unsafe { (pg_sys::work_mem, pg_sys::hash_mem_multiplier) };
    ((work_mem as f64 * multiplier).min(i32::MAX as f64) as i32).max(64 * 1024)
}

/// The groups of one loop of a node, held in the query's memory.
#[derive(Clone, Copy)]
pub struct HeldGroups {
    store: *mut pg_sys::Tuplestorestate,
    /// A group read back from the store, before it is copied into the node's own slot.
    slot: *mut pg_sys::TupleTableSlot,
}

/// Whether `node` may send a group before it read its last row: an aggregation node that
/// finalizes (not a parallel worker's partial one, whose groups go to the leader's node)
/// and groups its rows.
///
/// # Safety
/// `node` must be a valid plan state.
pub unsafe fn may_stream(node: *mut pg_sys::PlanState) -> bool {
    // SAFETY: an AggState's plan is an Agg, as the caller's node is valid.
    unsafe {
        if !pgrx::is_a(node.cast(), pg_sys::NodeTag::T_AggState) {
            return false;
        }
        let agg = (*node).plan as *mut pg_sys::Agg;
        (*agg).aggstrategy != pg_sys::AggStrategy::AGG_PLAIN
            && (*agg).aggsplit & pg_sys::AGGSPLITOP_SKIPFINAL == 0
    }
}

impl HeldGroups {
    /// An empty store for the groups of `node`, in the query's memory.
    ///
    /// # Safety
    /// `node` must be a started aggregation node ([`may_stream`]).
    pub unsafe fn new(node: *mut pg_sys::PlanState) -> HeldGroups {
        // SAFETY: the node and its executor state are valid, as the caller guarantees.
        unsafe {
            let memory = (*(*node).state).es_query_cxt;
            pgrx::PgMemoryContexts::For(memory).switch_to(|_| {
                let store = pg_sys::tuplestore_begin_heap(false, false, limit_kb());
                let slot = pg_sys::MakeSingleTupleTableSlot(
                    (*node).ps_ResultTupleDesc,
                    &pg_sys::TTSOpsMinimalTuple,
                );
                HeldGroups { store, slot }
            })
        }
    }

    /// At the start of a loop: reads every group of the loop from `next_group` (the
    /// node's own ExecProcNode) into the store.
    ///
    /// # Safety
    /// The node's query must be running.
    pub unsafe fn fill(&self, mut next_group: impl FnMut() -> *mut pg_sys::TupleTableSlot) {
        // SAFETY: the store lives in the running query's memory; a slot the node returns
        // is valid until its next call.
        unsafe {
            pg_sys::tuplestore_clear(self.store);
            let mut too_large = false;
            loop {
                let slot = next_group();
                if slot.is_null() || (*slot).tts_flags & pg_sys::TTS_FLAG_EMPTY as u16 != 0 {
                    break;
                }
                if too_large {
                    continue;
                }
                pg_sys::tuplestore_puttupleslot(self.store, slot);
                // Held in memory only: a store that spilled would hold a temporary file,
                // which an abort can close before the query's memory goes (a cursor's
                // FETCH that failed in a savepoint), and ending the store then would
                // close it twice. How much is held is the size of the groups the client
                // would get, so the refusal depends on them alone; it comes after the
                // node's last row, so that an error of a later row comes first (refused
                // at once, which of the two came told where the failing row lies: the
                // red team's third round).
                too_large = !pg_sys::tuplestore_in_memory(self.store);
            }
            if too_large {
                raise(Error::HeldGroupsTooLarge {
                    limit_kb: limit_kb(),
                });
            }
        }
    }

    /// The next group of the loop in the node's own result slot (of the kind its parent
    /// expects), or NULL after the last.
    ///
    /// # Safety
    /// `node` must be the node whose groups these are, its query running.
    pub unsafe fn next(&self, node: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
        // SAFETY: as the caller guarantees; copyslot is ExecCopySlot's own step.
        unsafe {
            if !pg_sys::tuplestore_gettupleslot(self.store, true, false, self.slot) {
                return std::ptr::null_mut();
            }
            let result = (*node).ps_ResultTupleSlot;
            let copy = (*(*result).tts_ops).copyslot.expect("a slot kind copies");
            copy(result, self.slot);
            result
        }
    }
}
