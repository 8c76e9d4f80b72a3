//! A hint to the CPU that a value will be read soon: the per-row paths ask for the line
//! a row will touch before they wait on another one, so that the two misses overlap.

/// Asks the CPU to bring `value`'s line into its cache; nothing else.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing, faults on nothing, and SSE (which
    // provides it) is part of every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            value as *const T as *const i8,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
