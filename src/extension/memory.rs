//! Allocation in a PostgreSQL memory context, for the tables of the aggregate states.
//!
//! With the tables in the aggregate's memory context, PostgreSQL sees their size (hash
//! aggregation's memory limit, `pg_backend_memory_contexts`) and frees them with the
//! context even when a query is cancelled.

use allocator_api2::alloc::{AllocError, Allocator};
use pgrx::pg_sys;
use std::alloc::Layout;
use std::ptr::NonNull;

/// palloc's alignment (MAXALIGN).
const PALLOC_ALIGNMENT: usize = pg_sys::MAXIMUM_ALIGNOF as usize;

/// Allocates in one memory context, which outlives every allocation (see
/// [`ContextAllocator::new`]).
#[derive(Debug, Clone, Copy)]
pub struct ContextAllocator(pg_sys::MemoryContext);

impl ContextAllocator {
    /// # Safety
    /// `context` must be a valid memory context that outlives every block allocated
    /// through this allocator (and whatever holds them).
    pub unsafe fn new(context: pg_sys::MemoryContext) -> Self {
        Self(context)
    }
}

// SAFETY: blocks come from palloc in a context that outlives them (ContextAllocator::new's
// contract), aligned as the layout asks (over-aligned ones by hand, below), at least
// `layout.size()` long, and are freed only through `deallocate` with their layout.
unsafe impl Allocator for ContextAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        // palloc returns MAXALIGN'd memory. A stricter alignment (hashbrown's control
        // bytes want 16) over-allocates and keeps palloc's pointer just before the block.
        let over_aligned = layout.align() > PALLOC_ALIGNMENT;
        let extra = if over_aligned {
            layout.align() + PALLOC_ALIGNMENT
        } else {
            0
        };
        let size = (layout.size() + extra).max(1);
        // MCXT_ALLOC_HUGE: a dense quantile histogram may exceed 1 GB with a large grid.
        // Out of memory raises a PostgreSQL ERROR, which pgrx turns into an unwind.
        // SAFETY: the context is valid (ContextAllocator::new's contract).
        let raw = unsafe {
            pg_sys::MemoryContextAllocExtended(self.0, size, pg_sys::MCXT_ALLOC_HUGE as i32)
        } as *mut u8;
        let start = if over_aligned {
            let aligned = (raw as usize + PALLOC_ALIGNMENT).next_multiple_of(layout.align());
            let aligned = raw.wrapping_add(aligned - raw as usize);
            // SAFETY: `aligned` is at least PALLOC_ALIGNMENT (a pointer's size and
            // alignment) past `raw` within the block, so the word before it is ours.
            unsafe { (aligned as *mut *mut u8).sub(1).write(raw) };
            aligned
        } else {
            raw
        };
        let start = NonNull::new(start).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(start, layout.size()))
    }

    unsafe fn deallocate(&self, block: NonNull<u8>, layout: Layout) {
        // SAFETY: `block` came from `allocate` with this layout: an over-aligned block
        // keeps palloc's pointer in the word before it, any other is palloc's pointer.
        unsafe {
            let raw = if layout.align() > PALLOC_ALIGNMENT {
                *(block.as_ptr() as *mut *mut u8).sub(1)
            } else {
                block.as_ptr()
            };
            pg_sys::pfree(raw.cast());
        }
    }
}
