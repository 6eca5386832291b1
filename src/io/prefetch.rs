//! Software prefetch: a hint that lets independent cache misses of one lookup overlap
//! (the filter's line, the index block's trailer) instead of queueing one after another.

/// Ask the CPU to start loading the cache line holding `b[at]` (nothing if `at` is out
/// of bounds, or on targets without a prefetch instruction in their baseline).
#[inline(always)]
pub fn prefetch_read<T>(b: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(p) = b.get(at) {
        // SAFETY: SSE is part of the x86_64 baseline, so the intrinsic's target feature
        // is always present. A prefetch is only a hint: it never faults, never reads
        // into a register and has no effect on program state, and `p` points into a
        // live slice anyway (a mapped page that is not resident is simply not fetched).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (p as *const T).cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (b, at);
}

/// Ask the CPU to start loading the cache line holding `a`'s reference counts (and the
/// start of its value): what cloning it (an atomic increment, which waits for that
/// line before anything after it runs) and reading it touch first.
#[inline(always)]
pub fn prefetch_arc<T: ?Sized>(a: &std::sync::Arc<T>) {
    // The counts are the two words before the value (`ArcInner`'s layout for a value
    // aligned to at most 8 bytes; for others, a line near them). Only an address is
    // computed (`wrapping_sub`: no dereference, no out-of-bounds offset).
    let counts = std::sync::Arc::as_ptr(a)
        .cast::<u8>()
        .wrapping_sub(2 * std::mem::size_of::<usize>());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline, so the intrinsic's target feature is
    // always present. A prefetch is only a hint: it never faults (whatever the
    // address), never reads into a register and has no effect on program state.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            counts.cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = counts;
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefetch_is_harmless_in_and_out_of_bounds() {
        let v = vec![7u8; 100];
        super::prefetch_read(&v, 0);
        super::prefetch_read(&v, 99);
        super::prefetch_read(&v, 100);
        super::prefetch_read::<u64>(&[], 0);
        assert_eq!(v, vec![7u8; 100]);
    }

    #[test]
    fn prefetch_arc_leaves_the_counts_and_value_alone() {
        let v: std::sync::Arc<[u8]> = std::sync::Arc::from(&b"value"[..]);
        let empty: std::sync::Arc<[u8]> = std::sync::Arc::from(&b""[..]);
        let word = std::sync::Arc::new(7u64);
        super::prefetch_arc(&v);
        super::prefetch_arc(&empty);
        super::prefetch_arc(&word);
        assert_eq!((&v[..], std::sync::Arc::strong_count(&v)), (&b"value"[..], 1));
        assert_eq!((empty.len(), *word), (0, 7));
    }
}
