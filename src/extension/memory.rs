//! Allocation in a PostgreSQL memory context, for the aggregate states and their tables.
//!
//! With the states in the aggregate's memory context, PostgreSQL sees their size (hash
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
        let over_aligned = layout.align() > PALLOC_ALIGNMENT;
        let size = palloc_size(layout).max(1);
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

/// A value and the callback that drops it, in one block of a memory context.
#[repr(C)]
struct InContext<T> {
    callback: pg_sys::MemoryContextCallback,
    value: T,
}

/// The bytes [`move_into`] asks palloc for, to hold a `T` and its callback (palloc
/// rounds a request up to a power of two: 512 bytes take a 512-byte chunk, 513 a
/// 1,024-byte one).
pub const fn request_size<T>() -> usize {
    palloc_size(Layout::new::<InContext<T>>())
}

/// The bytes palloc is asked for to hold a block of `layout`. palloc returns MAXALIGN'd
/// memory; a stricter alignment (hashbrown's control bytes want 16, a quantile state 64)
/// over-allocates and keeps palloc's pointer just before the block. The first aligned
/// address at least a word past palloc's lies at most `align` past it, so `align` more
/// bytes hold the block.
const fn palloc_size(layout: Layout) -> usize {
    if layout.align() > PALLOC_ALIGNMENT {
        layout.size() + layout.align()
    } else {
        layout.size()
    }
}

/// Moves `value` into `memory` and returns where it lies there; it is dropped when the
/// context is reset or deleted. PostgreSQL runs a context's reset callbacks before it
/// frees the context's own blocks (but after it deletes its children), so the value may
/// still free what it holds in the context itself, as our states do, and nothing in a
/// child context.
///
/// An aggregate state lives here rather than in pgrx's `Internal::insert`, which boxes it
/// on the Rust heap: there PostgreSQL does not see it, so hash aggregation's work_mem
/// limit and EXPLAIN ANALYZE's Memory Usage missed a few hundred bytes a group (a
/// query of 10^6 small groups, hundreds of megabytes), and each group paid a malloc and a
/// free besides its palloc.
///
/// # Safety
/// `memory` must be a valid memory context, and nothing may use the value after the
/// context is reset or deleted.
pub unsafe fn move_into<T>(memory: pg_sys::MemoryContext, value: T) -> NonNull<T> {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn drop_value<T>(value: *mut std::ffi::c_void) {
        // SAFETY: `value` is the one move_into registered, initialised, and a context
        // runs each of its callbacks once.
        unsafe { std::ptr::drop_in_place(value.cast::<T>()) }
    }
    // SAFETY: the caller vouches for the context, which frees the block itself.
    let block = unsafe { ContextAllocator::new(memory) }
        .allocate(Layout::new::<InContext<T>>())
        .expect("palloc raises an ERROR rather than failing")
        .cast::<InContext<T>>();
    // SAFETY: the block is ours, aligned and large enough for InContext<T>; the value is
    // written before the callback that drops it is registered.
    unsafe {
        let block = block.as_ptr();
        let value_at = &raw mut (*block).value;
        value_at.write(value);
        let callback = &raw mut (*block).callback;
        callback.write(pg_sys::MemoryContextCallback {
            func: Some(drop_value::<T>),
            arg: value_at.cast(),
            next: std::ptr::null_mut(),
        });
        pg_sys::MemoryContextRegisterResetCallback(memory, callback);
        NonNull::new_unchecked(value_at)
    }
}

/// The child of `parent` named `name` (the same pointer), made if there is none yet, its
/// blocks sized as PostgreSQL sizes a hash aggregation's: a
/// context of the aggregate's own for what the extension keeps there (its blocks apart
/// from PostgreSQL's, still counted in the parent's memory and freed with it: a parent's
/// reset deletes its children).
///
/// # Safety
/// `parent` must be a valid memory context; `name` lives for the process.
pub unsafe fn child_context(
    parent: pg_sys::MemoryContext,
    name: &'static std::ffi::CStr,
) -> pg_sys::MemoryContext {
    // SAFETY: a valid context's children form a list of valid contexts.
    unsafe {
        let mut child = (*parent).firstchild;
        while !child.is_null() {
            if std::ptr::eq((*child).name, name.as_ptr()) {
                return child;
            }
            child = (*child).nextchild;
        }
        // Blocks no larger than a sixteenth of work_mem, as PostgreSQL makes a hash
        // aggregation's own context (CreateWorkExprContext): it decides to spill by the
        // blocks held, children's too, and one doubled block of up to 8 MB overshot a
        // small limit.
        let mut max_block = pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize;
        while 16 * max_block > pg_sys::work_mem.max(64) as usize * 1024 {
            max_block >>= 1;
        }
        pg_sys::AllocSetContextCreateInternal(
            parent,
            name.as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            max_block.max(pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize),
        )
    }
}
