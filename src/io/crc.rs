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

/// crc32c of three inputs at once. The `crc32` instruction takes three cycles and can
/// start one per cycle, so folding one input leaves the unit idle two cycles in three:
/// here the three inputs' words are folded in turn, their dependency chains overlapping
/// (a scan checks the next three records this way).
#[inline]
pub fn crc32c_x3(a: &[u8], b: &[u8], c: &[u8]) -> [u32; 3] {
    #[cfg(target_arch = "x86_64")]
    if a.len().max(b.len()).max(c.len()) <= SHORT && std::arch::is_x86_feature_detected!("sse4.2")
    {
        // SAFETY: `three_sse42` needs SSE4.2, which the CPU was just seen to have.
        return unsafe { three_sse42(a, b, c) };
    }
    [crc32c(a), crc32c(b), crc32c(c)]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(b: &[u8]) -> u32 {
    !fold_sse42(u32::MAX, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn three_sse42(a: &[u8], b: &[u8], c: &[u8]) -> [u32; 3] {
    use std::arch::x86_64::_mm_crc32_u64;
    let words = a.len().min(b.len()).min(c.len()) / 8;
    let (mut x, mut y, mut z) = (
        u64::from(u32::MAX),
        u64::from(u32::MAX),
        u64::from(u32::MAX),
    );
    for i in 0..words {
        x = _mm_crc32_u64(x, word(a, i));
        y = _mm_crc32_u64(y, word(b, i));
        z = _mm_crc32_u64(z, word(c, i));
    }
    let done = words * 8;
    [
        !fold_sse42(x as u32, &a[done..]),
        !fold_sse42(y as u32, &b[done..]),
        !fold_sse42(z as u32, &c[done..]),
    ]
}

/// Word `i` of `b` (little-endian); `b` holds at least `8 * (i + 1)` bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn word(b: &[u8], i: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[8 * i..8 * i + 8]);
    u64::from_le_bytes(x)
}

/// Fold `b` into the running (uninverted) `crc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn fold_sse42(crc: u32, b: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut words = b.chunks_exact(8);
    let mut crc = u64::from(crc);
    for w in &mut words {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(x));
    }
    // The 0 to 7 bytes left in at most three steps (4, 2, 1), not one per byte: each
    // step waits for the last, so a 127-byte record takes 18 dependent steps, not 22.
    let mut crc = crc as u32;
    let mut rest = words.remainder();
    if let Some((x, r)) = rest.split_first_chunk::<4>() {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(*x));
        rest = r;
    }
    if let Some((x, r)) = rest.split_first_chunk::<2>() {
        crc = _mm_crc32_u16(crc, u16::from_le_bytes(*x));
        rest = r;
    }
    if let Some(&x) = rest.first() {
        crc = _mm_crc32_u8(crc, x);
    }
    crc
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

    #[test]
    fn every_short_length_and_tail_matches_the_crate() {
        // Every remainder (0 to 7 bytes after the words) at several word counts, and
        // both sides of `SHORT`.
        let b: Vec<u8> = (0..super::SHORT as u32 + 11)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in (0..=80).chain(super::SHORT - 8..=super::SHORT + 8) {
            for start in 0..3 {
                let s = &b[start..start + len];
                assert_eq!(super::crc32c(s), crc32c::crc32c(s), "length {len} at {start}");
            }
        }
    }

    #[test]
    fn three_at_once_match_one_at_a_time() {
        let b: Vec<u8> = (0..1100u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8).collect();
        // Equal and unequal lengths, each input the shortest in turn, empty ones, and
        // one past `SHORT` (the fallback).
        let lens = [
            (0, 0, 0),
            (127, 127, 127),
            (127, 9, 200),
            (5, 130, 64),
            (64, 64, 3),
            (600, 8, 8),
        ];
        for (la, lb, lc) in lens {
            let (a, bb, c) = (&b[1..1 + la], &b[2..2 + lb], &b[3..3 + lc]);
            assert_eq!(
                super::crc32c_x3(a, bb, c),
                [crc32c::crc32c(a), crc32c::crc32c(bb), crc32c::crc32c(c)],
                "lengths {la} {lb} {lc}"
            );
        }
    }

    proptest! {
        #[test]
        fn three_at_once_match_the_crate(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..300),
            c in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            prop_assert_eq!(
                super::crc32c_x3(&a, &b, &c),
                [crc32c::crc32c(&a), crc32c::crc32c(&b), crc32c::crc32c(&c)]
            );
        }

        #[test]
        fn matches_the_crate_on_every_length(b in proptest::collection::vec(any::<u8>(), 0..1200)) {
            prop_assert_eq!(super::crc32c(&b), crc32c::crc32c(&b));
        }
    }
}
