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

fn get_long(b: &[u8]) -> Option<(u64, usize)> {
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
