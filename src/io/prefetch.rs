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

/// Ask the CPU to start loading every cache line `t` spans (a node read whole: its
/// lines load together rather than one after another as its fields are read).
#[inline(always)]
pub fn prefetch_lines<T>(t: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = (t as *const T).cast::<i8>();
        let size = std::mem::size_of::<T>();
        // From `t`'s start, then from the start of each next line it reaches into.
        let mut at = 0;
        while at < size {
            // SAFETY: SSE is part of the x86_64 baseline, so the intrinsic's target
            // feature is always present. A prefetch is only a hint: it never faults and
            // reads nothing into a register; `p + at` lies within `t`, a live reference.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    p.wrapping_add(at),
                );
            }
            at = ((p as usize + at) & !63) + 64 - p as usize;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = t;
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
}
