//! A group's inbox: where a quantile row leaves its place, so that a row reads none of
//! its group's state (issue 22).
//!
//! With thousands of groups, a row that counted its value in its state read two lines of
//! that state and wrote a third (its pending cells), each out of the cache, and the states
//! spread PostgreSQL's own key tuples over megabytes. Here a group's `internal` datum is
//! the next free slot of its inbox, a block of [`INBOX_CELLS`] places (as half cells,
//! `Place::half_cell`) followed by the state's address. A row locates its
//! value by the rule every group shares ([`RowRule`], in the transition's `fn_extra`),
//! writes the slot and returns the next one: one line, which it writes. When the inbox is
//! full (its datum says no room is left), the guarded transition counts the inbox into the
//! state and starts it again. Whatever reads a state first counts the places left in its
//! inbox ([`QuantileState::of_datum`](super::QuantileState)): a final function too, which
//! may since that changes where the values are counted, never what is counted.

use super::{Locating, QuantileState};
use crate::extension::forms::ValueType;
use crate::extension::quantile_arguments::ValueGrid;
use crate::mechanisms::quantile::Place;
use pgrx::pg_sys;

/// Places an inbox holds: 62 of 4 bytes and the state's address make 256 bytes, one
/// palloc chunk of that size.
pub(super) const INBOX_CELLS: usize = 62;

/// A group's inbox, in the aggregate's memory context beside its state.
#[repr(C)]
pub(super) struct Inbox {
    cells: [u32; INBOX_CELLS],
    state: *mut QuantileState,
}

const INBOX_BYTES: usize = std::mem::size_of::<Inbox>();
const _: () = assert!(INBOX_BYTES == 256);

/// A slot datum: the slot's address below bit 56, the places it has room for above.
const ROOM_SHIFT: u32 = 56;
const ADDRESS: usize = (1 << ROOM_SHIFT) - 1;

impl Inbox {
    /// A new, empty inbox of `state`, in `memory`.
    ///
    /// # Safety
    /// `memory` must be a valid memory context that outlives every use of the inbox, and
    /// `state` the state it serves.
    pub(super) unsafe fn new_in(
        memory: pg_sys::MemoryContext,
        state: *mut QuantileState,
    ) -> *mut Inbox {
        // SAFETY: as the caller guarantees; palloc raises an ERROR rather than failing,
        // and MAXALIGN suffices for an Inbox (u32s and a pointer).
        unsafe {
            let inbox = pg_sys::MemoryContextAlloc(memory, INBOX_BYTES) as *mut Inbox;
            // The slot datum's top byte is the room left: user space lies below 2^56
            // (x86-64 and AArch64, five-level paging too), checked once a group.
            assert!((inbox as usize) < 1 << ROOM_SHIFT, "an address below 2^56");
            (*inbox).state = state;
            inbox
        }
    }

    /// The datum of an empty inbox: its first slot, with room for every place.
    pub(super) fn first_slot(inbox: *mut Inbox) -> pg_sys::Datum {
        pg_sys::Datum::from(inbox as usize | INBOX_CELLS << ROOM_SHIFT)
    }

    /// The inbox a slot datum lies in and how many places it holds before that slot.
    ///
    /// # Safety
    /// `slot` must be a datum a quantile transition returned.
    pub(super) unsafe fn of_slot(slot: pg_sys::Datum) -> (*mut Inbox, usize) {
        let (address, room) = (slot.value() & ADDRESS, slot.value() >> ROOM_SHIFT);
        let held = INBOX_CELLS - room;
        ((address - 4 * held) as *mut Inbox, held)
    }

    /// The state this inbox serves.
    ///
    /// # Safety
    /// `inbox` must be a live inbox.
    pub(super) unsafe fn state(inbox: *mut Inbox) -> *mut QuantileState {
        // SAFETY: as the caller guarantees.
        unsafe { (*inbox).state }
    }

    /// The places in slots `from..to`.
    ///
    /// # Safety
    /// `inbox` must be a live inbox, and `from <= to <= INBOX_CELLS`.
    pub(super) unsafe fn places<'a>(inbox: *mut Inbox, from: usize, to: usize) -> &'a [u32] {
        // SAFETY: as the caller guarantees.
        unsafe { &(&(*inbox).cells)[from..to] }
    }
}

/// What a row needs to find its place without its state: the locating rule every group
/// of one transition call site shares. Kept in the transition's `fn_extra` (the query's
/// memory); made from the first group's parameters. A group made from other parameters
/// turns the shortcut off for the call site: `fn_extra` outlives a rescan, and a
/// correlated subquery or LATERAL rescans its aggregation with another lo or hi
/// (inbox_tests: `a_rescan_with_other_parameters_locates_by_its_own`).
#[derive(Clone, Copy)]
pub(super) struct RowRule {
    pub(super) locating: Locating,
    grid: ValueGrid,
    value_type: ValueType,
    /// A group's parameters differed from the first's: every row takes the guarded path.
    shared: bool,
}

impl RowRule {
    /// The rule of the transition call `fcinfo` when its groups share one.
    ///
    /// # Safety
    /// `fcinfo` must be a quantile transition's call info.
    #[inline(always)]
    pub(super) unsafe fn of_call<'a>(fcinfo: pg_sys::FunctionCallInfo) -> Option<&'a RowRule> {
        // SAFETY: a transition's call info has its function's FmgrInfo, whose fn_extra is
        // NULL or the RowRule `note_group` put there (no other code uses it).
        unsafe {
            let rule = (*(*fcinfo).flinfo).fn_extra as *const RowRule;
            rule.as_ref().filter(|rule| rule.shared)
        }
    }

    /// Records a new group's parameters for the call site of `fcinfo`.
    ///
    /// # Safety
    /// `fcinfo` must be a quantile transition's call info.
    pub(super) unsafe fn note_group(fcinfo: pg_sys::FunctionCallInfo, state: &QuantileState) {
        let parameters = &state.parameters;
        // SAFETY: as in of_call; fn_mcxt lives as long as the FmgrInfo.
        unsafe {
            let flinfo = (*fcinfo).flinfo;
            let rule = (*flinfo).fn_extra as *mut RowRule;
            match rule.as_mut() {
                Some(rule) => {
                    if rule.grid != parameters.grid || rule.value_type != parameters.value_type {
                        rule.shared = false;
                    }
                }
                None => {
                    let rule = pg_sys::MemoryContextAlloc(
                        (*flinfo).fn_mcxt,
                        std::mem::size_of::<RowRule>(),
                    ) as *mut RowRule;
                    rule.write(RowRule {
                        locating: state.locating,
                        grid: parameters.grid,
                        value_type: parameters.value_type,
                        shared: true,
                    });
                    (*flinfo).fn_extra = rule.cast();
                }
            }
        }
    }
}

/// Leaves `place` in the inbox at `slot`: the next slot, or None when the inbox is full
/// (nothing written). Writes the slot and reads nothing of the inbox, whose line is out
/// of the cache when thousands of groups take turns: the datum itself carries the room
/// left, in its top byte (an address of user space is below 2^56).
///
/// # Safety
/// `slot` must be a datum a quantile transition returned.
#[inline(always)]
pub(super) unsafe fn leave(slot: pg_sys::Datum, place: Place) -> Option<pg_sys::Datum> {
    let slot = slot.value();
    if slot >> ROOM_SHIFT == 0 {
        return None;
    }
    // SAFETY: a slot of a live inbox with room: one of its INBOX_CELLS places.
    unsafe { ((slot & ADDRESS) as *mut u32).write(place.half_cell() as u32) };
    // One slot on, one place less of room.
    Some(pg_sys::Datum::from(slot + 4 - (1 << ROOM_SHIFT)))
}
