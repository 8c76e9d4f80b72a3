//! Helpers for aggregate support functions: where they run and what they may do.

use super::raise;
use crate::error::Error;
use pgrx::pg_sys::{self, MemoryContext};

/// The aggregate's memory context; an error when not called by an aggregate.
///
/// # Safety
/// `fcinfo` must be a valid call info.
pub unsafe fn aggregate_memory(fcinfo: pg_sys::FunctionCallInfo, function: &'static str) -> MemoryContext {
    let mut memory: MemoryContext = std::ptr::null_mut();
    if pg_sys::AggCheckCallContext(fcinfo, &mut memory) == 0 {
        raise(Error::NotInAggregate { function });
    }
    memory
}

/// A serialize function hands out the exact state: it must only run as the serial
/// function of a partial aggregation, never as the final function of a home-made
/// aggregate over our transition function.
///
/// # Safety
/// `fcinfo` must be a valid call info.
pub unsafe fn require_serializing(fcinfo: pg_sys::FunctionCallInfo, function: &'static str) {
    let context = (*fcinfo).context;
    let serializing = !context.is_null()
        && pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
        && (*(context as *mut pg_sys::AggState)).aggsplit & pg_sys::AGGSPLITOP_SERIALIZE != 0;
    if !serializing {
        raise(Error::NotInAggregate { function });
    }
}
