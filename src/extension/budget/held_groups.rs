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
//!
//! A hashed node's groups leave in a random order (ChaCha20, as every draw): their own
//! order followed the hash table, and one that spilled began with the groups that fit in
//! memory, withheld ones taking room too, so that one statement under `dp_partition`
//! counted the groups it withheld (the red team's fourth round: 356 public keys before
//! the first spill with none withheld, 355 with one). A sorted node's order is that of
//! the keys it releases, which its parent may rely on (a Sort it spares).

use crate::error::Error;
use crate::extension::{guc, raise};
use crate::mechanisms::rng;
use pgrx::pg_sys;
use rand::seq::SliceRandom;

/// How much a node may hold: PostgreSQL's own limit for a hash table
/// (`work_mem * hash_mem_multiplier`), and at least 64 MB (about 10^6 groups of a key and a
/// quantile).
fn limit_kb() -> i32 {
    // SAFETY: reads two settings of this backend.
    let (work_mem, multiplier) = unsafe { (pg_sys::work_mem, pg_sys::hash_mem_multiplier) };
    ((work_mem as f64 * multiplier).min(i32::MAX as f64) as i32).max(64 * 1024)
}

/// The groups of one loop of a node, held in the query's memory.
pub struct HeldGroups {
    /// Copies of the groups' rows, in the query's memory.
    groups: Vec<pg_sys::MinimalTuple>,
    /// The next group to hand out.
    next: usize,
    /// A group read back, before it is copied into the node's own slot.
    slot: *mut pg_sys::TupleTableSlot,
    memory: pg_sys::MemoryContext,
    /// A hashed node's groups leave in a random order.
    shuffled: bool,
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

/// The size of a group's output row as its values are, whatever their storage: each
/// value's length, a text or other varlena's uncompressed and inline, and a row's header.
/// The copy held is the row as stored, where a key read from the table stays compressed or
/// out of line as the group's first row had it: counted as stored, the limit told how
/// that row was stored (the fifth round's LOW).
///
/// # Safety
/// `slot` must hold a valid row of a node's result.
unsafe fn released_size(slot: *mut pg_sys::TupleTableSlot) -> usize {
    /// A MinimalTuple's header: every row counts it.
    const ROW: usize = std::mem::size_of::<pg_sys::MinimalTupleData>();
    // SAFETY: the slot's descriptor describes its values, which slot_getallattrs
    // deforms; a varlena value's raw size is read from its header alone, and a cstring's
    // length from its bytes.
    unsafe {
        pg_sys::slot_getallattrs(slot);
        let descriptor = pgrx::PgTupleDesc::from_pg_unchecked((*slot).tts_tupleDescriptor);
        let count = descriptor.len();
        let values = std::slice::from_raw_parts((*slot).tts_values, count);
        let nulls = std::slice::from_raw_parts((*slot).tts_isnull, count);
        let mut size = ROW;
        for (attribute, (&value, &null)) in descriptor.iter().zip(values.iter().zip(nulls)) {
            if null {
                continue;
            }
            size += match attribute.attlen {
                -1 => pg_sys::toast_raw_datum_size(value),
                -2 => {
                    std::ffi::CStr::from_ptr(value.cast_mut_ptr())
                        .to_bytes()
                        .len()
                        + 1
                }
                length => length.max(0) as usize,
            };
        }
        size
    }
}

impl HeldGroups {
    /// An empty store for the groups of `node`, in the query's memory.
    ///
    /// # Safety
    /// `node` must be a started aggregation node ([`may_stream`]).
    pub unsafe fn new(node: *mut pg_sys::PlanState) -> HeldGroups {
        // SAFETY: the node, its plan and its executor state are valid, as the caller
        // guarantees.
        unsafe {
            let memory = (*(*node).state).es_query_cxt;
            let slot = pgrx::PgMemoryContexts::For(memory).switch_to(|_| {
                pg_sys::MakeSingleTupleTableSlot(
                    (*node).ps_ResultTupleDesc,
                    &pg_sys::TTSOpsMinimalTuple,
                )
            });
            let strategy = (*((*node).plan as *mut pg_sys::Agg)).aggstrategy;
            HeldGroups {
                groups: Vec::new(),
                next: 0,
                slot,
                memory,
                shuffled: strategy != pg_sys::AggStrategy::AGG_SORTED,
            }
        }
    }

    /// At the start of a loop: reads every group of the loop from `next_group` (the
    /// node's own ExecProcNode).
    ///
    /// # Safety
    /// The node's query must be running.
    pub unsafe fn fill(&mut self, mut next_group: impl FnMut() -> *mut pg_sys::TupleTableSlot) {
        // SAFETY: the copies live in the running query's memory; a slot the node returns
        // is valid until its next call.
        unsafe {
            for group in self.groups.drain(..) {
                pg_sys::pfree(group.cast());
            }
            self.next = 0;
            let limit = limit_kb() as usize * 1024;
            let (mut bytes, mut too_large) = (0usize, false);
            loop {
                let slot = next_group();
                if slot.is_null() || (*slot).tts_flags & pg_sys::TTS_FLAG_EMPTY as u16 != 0 {
                    break;
                }
                if too_large {
                    continue;
                }
                let mut should_free = false;
                let tuple = pg_sys::ExecFetchSlotMinimalTuple(slot, &mut should_free);
                let length = (*tuple).t_len as usize;
                let copy = pg_sys::MemoryContextAlloc(self.memory, length);
                std::ptr::copy_nonoverlapping(tuple.cast::<u8>(), copy.cast::<u8>(), length);
                if should_free {
                    pg_sys::pfree(tuple.cast());
                }
                self.groups.push(copy.cast());
                bytes += released_size(slot);
                // How much is held is the size of the groups the client would get, so
                // the refusal depends on them alone; it comes after the node's last row,
                // so that an error of a later row comes first (refused at once, which of
                // the two came told where the failing row lies: the red team's third
                // round).
                too_large = bytes > limit;
            }
            if too_large {
                raise(Error::HeldGroupsTooLarge {
                    limit_kb: limit_kb(),
                });
            }
            if self.shuffled {
                rng::with_generator(guc::seeding(), |generator| self.groups.shuffle(generator));
            }
        }
    }

    /// The next group of the loop in the node's own result slot (of the kind its parent
    /// expects), or NULL after the last.
    ///
    /// # Safety
    /// `node` must be the node whose groups these are, its query running.
    pub unsafe fn next(&mut self, node: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
        // SAFETY: as the caller guarantees; copyslot is ExecCopySlot's own step, and the
        // copy stays in the query's memory while the slot holds it.
        unsafe {
            let Some(&group) = self.groups.get(self.next) else {
                return std::ptr::null_mut();
            };
            self.next += 1;
            pg_sys::ExecStoreMinimalTuple(group, self.slot, false);
            let result = (*node).ps_ResultTupleSlot;
            let copy = (*(*result).tts_ops).copyslot.expect("a slot kind copies");
            copy(result, self.slot);
            result
        }
    }
}
