//! LEB128 unsigned varints: 7 bits per byte, least significant group first, the high bit
//! set on every byte but the last; at most 10 bytes for a u64.

/// Append `v` as a varint.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decode a varint at the start of `b`: (value, bytes used). `None` if truncated or
/// longer than 10 bytes / overflowing 64 bits.
#[inline]
pub fn get(b: &[u8]) -> Option<(u64, usize)> {
    match b.first() {
        Some(&byte) if byte < 0x80 => Some((byte as u64, 1)),
        _ => get_long(b),
    }
}

/// A varint of two or more bytes: from one 8-byte load where the slice has 8 bytes and
/// the varint ends within them (a timestamp delta, a length past 127: what a scan
/// decodes on nearly every row), else byte by byte.
#[inline]
fn get_long(b: &[u8]) -> Option<(u64, usize)> {
    if let Some(w) = b.first_chunk::<8>() {
        let x = u64::from_le_bytes(*w);
        // The high bit clear marks a varint's last byte.
        let ends = !x & 0x8080_8080_8080_8080;
        if ends != 0 {
            let used = (ends.trailing_zeros() / 8 + 1) as usize;
            return Some((gather(x, used), used));
        }
    }
    get_slow(b)
}

/// The value of the varint of `used` bytes (1 to 8) at the low end of `x`: the 7-bit
/// groups of those bytes packed together, least significant first.
#[inline]
fn gather(x: u64, used: usize) -> u64 {
    let x = match used {
        8 => x,
        _ => x & ((1u64 << (8 * used)) - 1),
    } & 0x7f7f_7f7f_7f7f_7f7f;
    // Pack the 7-bit groups pairwise: 14 bits per 16, 28 per 32, then 56.
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

fn get_slow(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(10) {
        let part = (byte & 0x7f) as u64;
        if i == 9 && part > 1 {
            return None;
        }
        v |= part << (7 * i);
        if byte < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Bytes `v` takes as a varint.
#[inline]
pub fn len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(v: u64) {
            let mut b = Vec::new();
            put(&mut b, v);
            prop_assert_eq!(b.len(), len(v));
            prop_assert_eq!(get(&b), Some((v, b.len())));
            prop_assert_eq!(get(&b[..b.len() - 1]), None);
        }

        #[test]
        fn never_panics(b: Vec<u8>) {
            let _ = get(&b);
        }

        /// The one-load decoder answers as the byte-by-byte one on any bytes: varints
        /// of every length, with bytes after them or cut short.
        #[test]
        fn fast_path_agrees(v: u64, shift in 0u32..64, tail: Vec<u8>, cut in 0usize..12) {
            let mut b = Vec::new();
            // Shifted so that varints of every length, 1 to 10 bytes, come up alike.
            put(&mut b, v >> shift);
            b.extend_from_slice(&tail);
            b.truncate(b.len().saturating_sub(cut).max(1));
            prop_assert_eq!(get(&b), get_slow(&b));
        }

        #[test]
        fn fast_path_agrees_on_noise(b: Vec<u8>) {
            prop_assert_eq!(get(&b), get_slow(&b));
        }
    }

    #[test]
    fn rejects_overflow() {
        assert_eq!(get(&[0xff; 10]), None);
        assert_eq!(
            get(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Some((u64::MAX, 10))
        );
    }
}
