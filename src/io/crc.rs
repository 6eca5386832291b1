//! crc32c for short inputs without lookup tables.
//!
//! The `crc32c` crate is fast on long buffers: it splits them three ways and joins the
//! parts with lookup tables. On a record of a hundred-odd bytes read at random from a
//! large store those tables have usually been evicted, so each point read paid cache
//! misses on them. Inputs up to [`SHORT`] bytes are folded here one 8-byte word at a time
//! with the SSE4.2 `crc32` instruction, which needs no table; longer inputs, and CPUs
//! without SSE4.2, use the crate. Both compute the same Castagnoli CRC (tested).

/// Longest input folded word by word.
pub const SHORT: usize = 512;

/// crc32c (Castagnoli) of `b`.
#[inline]
pub fn crc32c(b: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if b.len() <= SHORT && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: `short_sse42` needs SSE4.2, which the CPU was just seen to have.
        return unsafe { short_sse42(b) };
    }
    crc32c::crc32c(b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(b: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = b.chunks_exact(8);
    let mut crc = u64::from(u32::MAX);
    for w in &mut words {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(x));
    }
    let mut crc = crc as u32;
    for &x in words.remainder() {
        crc = _mm_crc32_u8(crc, x);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    #[test]
    fn known_answers() {
        // RFC 3720 (iSCSI) test vectors for crc32c.
        assert_eq!(super::crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(super::crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(super::crc32c(&inc), 0x46DD_794E);
        assert_eq!(super::crc32c(b""), 0);
        assert_eq!(super::crc32c(b"123456789"), 0xE306_9283);
    }

    proptest! {
        #[test]
        fn matches_the_crate_on_every_length(b in proptest::collection::vec(any::<u8>(), 0..1200)) {
            prop_assert_eq!(super::crc32c(&b), crc32c::crc32c(&b));
        }
    }
}
