//! Pure encode/decode of segstore's byte formats over byte slices. Never touches files.
//!
//! Every decoder here is total: any input gives a value or a [`Malformed`] carrying the
//! offset of the bad bytes, never a panic (invariant 6). `docs/format.md` documents the
//! layouts. All integers are little-endian; checksums are crc32c (Castagnoli); a key's
//! hash is xxh3-64 of its bytes ([`key_hash`]); lengths and offsets are [`varint`]s.

pub mod data_block;
pub mod filter;
pub mod footer;
pub mod index_block;
pub mod meta;
pub mod pages;
pub mod ranges;
pub mod record;
pub mod sealed;
pub mod varint;

/// Longest key a segment accepts (64 KiB).
pub const MAX_KEY_LEN: usize = 64 * 1024;
/// Longest value a segment accepts (256 MiB).
pub const MAX_VALUE_LEN: usize = 256 * 1024 * 1024;

/// A decoding failure: where (relative to the slice given, unless noted) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Byte offset of the problem.
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
}

impl Malformed {
    /// Build one.
    pub fn new(offset: u64, reason: impl Into<String>) -> Self {
        Malformed {
            offset,
            reason: reason.into(),
        }
    }

    /// Shift the offset by `base` (turn a slice-relative offset into a file offset).
    pub fn at(mut self, base: u64) -> Self {
        self.offset = self.offset.saturating_add(base);
        self
    }

    /// Into the crate error, naming the file.
    pub fn into_error(self, path: &std::path::Path) -> crate::Error {
        crate::Error::corrupt(path, self.offset, self.reason)
    }
}

/// crc32c of `bytes` (hardware accelerated where available; see `io::crc`).
#[inline]
pub fn checksum(bytes: &[u8]) -> u32 {
    crate::io::crc::crc32c(bytes)
}

/// 64-bit hash of a key: drives the filter and is the key's token for repair.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The home slot of a key hashing to `h` in a hash table of `m` slots (index blocks'
/// and data blocks' tables): the top 32 bits of the hash scaled to `0..m`.
#[inline]
pub(crate) fn home_slot(h: u64, m: usize) -> usize {
    (((h >> 32) * m as u64) >> 32) as usize
}

/// The first 8 bytes of `key` as a big-endian integer, zero-padded. Monotone: if
/// `a < b` byte-wise then `key_prefix(a) <= key_prefix(b)`, so searches compare prefixes
/// first and whole keys only on a tie.
#[inline]
pub fn key_prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(p) => u64::from_be_bytes(*p),
        None => {
            let mut p = [0u8; 8];
            p[..key.len()].copy_from_slice(key);
            u64::from_be_bytes(p)
        }
    }
}

/// Byte-wise key order, with `a_prefix = key_prefix(a)` computed once by the caller.
#[inline]
pub fn cmp_keys(a: &[u8], a_prefix: u64, b: &[u8]) -> std::cmp::Ordering {
    match a_prefix.cmp(&key_prefix(b)) {
        std::cmp::Ordering::Equal => a.cmp(b),
        o => o,
    }
}

/// Byte-wise key order, as `a.cmp(b)` on byte slices, compared as big-endian integers
/// 8 bytes at a time. Slices' `cmp` calls `memcmp` through the PLT, some 30
/// instructions and a few branches for a 16-byte key; the hot comparisons of a scan (a
/// step's bound, a block's binary search, the merge's heads) are of short keys, most of
/// them decided in their first 8 bytes, which this compares inline. ([`cmp_keys`] is
/// the same order where the caller holds one key's prefix already: an index block's
/// binary search.)
#[inline(always)]
pub fn key_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        (Some(p), Some(q)) if p != q => u64::from_be_bytes(*p).cmp(&u64::from_be_bytes(*q)),
        _ => key_order_rest(a, b),
    }
}

/// [`key_order`] where the first words are equal or a key is shorter than 8 bytes. Two
/// keys both longer than 64 bytes go to `memcmp`, faster over long equal runs.
#[inline(never)]
fn key_order_rest(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len().min(b.len()) > 64 {
        return a.cmp(b);
    }
    let (mut x, mut y) = (a, b);
    while let (Some((p, xr)), Some((q, yr))) = (x.split_first_chunk::<8>(), y.split_first_chunk::<8>()) {
        if p != q {
            return u64::from_be_bytes(*p).cmp(&u64::from_be_bytes(*q));
        }
        (x, y) = (xr, yr);
    }
    // Fewer than 8 bytes left in one: a strictly smaller zero-padded prefix is a
    // smaller key (`key_prefix` is monotone); equal ones make the shorter rest a prefix
    // of the longer, which comes first.
    if !x.is_empty() && !y.is_empty() {
        match key_prefix(x).cmp(&key_prefix(y)) {
            std::cmp::Ordering::Equal => {}
            o => return o,
        }
    }
    x.len().cmp(&y.len())
}

/// `key[at..]` becomes `tail`: in place where the lengths match (every step in a fixed
/// block after its first; a copy of a key over one of the same length), with word
/// copies rather than a call to `memcpy` where at most 16 bytes follow the first 8.
///
/// A key's first 8 bytes are then written by one 8-byte store, whatever `at` is: the
/// comparison that follows (`key_order`: the step's bound, the overlay's cap) loads
/// them as one word, and a load that spans two stores still in the store buffer (a
/// tail written from byte 2 on, say, and the bytes before it) cannot take its bytes
/// from them: it waits for them to reach the cache, a stall of every row of a scan
/// (perf: a sixth of the overlay's samples).
#[inline(always)]
pub(crate) fn replace_tail(key: &mut Vec<u8>, at: usize, tail: &[u8]) {
    let n = tail.len();
    let len = at + n;
    if key.len() != len {
        key.truncate(at);
        key.extend_from_slice(tail);
        return;
    }
    match (key.split_first_chunk_mut::<8>(), tail.first_chunk::<8>()) {
        (Some((first, rest)), Some(t)) if at < 8 => {
            // Bytes `..at` kept, `at..8` from the tail's first bytes: one word, built in
            // a register and stored once.
            let keep = u64::MAX.checked_shr(64 - 8 * at as u32).unwrap_or(0);
            let old = u64::from_le_bytes(*first);
            let new = u64::from_le_bytes(*t) << (8 * at);
            *first = ((old & keep) | new).to_le_bytes();
            copy_short(rest, &tail[8 - at..]);
        }
        _ => copy_short(&mut key[at..], tail),
    }
}

/// `dst` becomes `src` (as long): up to 16 bytes with one or two overlapping word
/// copies, longer with `copy_from_slice`.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if (8..=16).contains(&n) && dst.len() == n {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Read a little-endian u16 at `off`, if in bounds.
#[inline]
pub(crate) fn read_u16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes(s.try_into().ok()?))
}

/// Read a little-endian u32 at `off`, if in bounds.
#[inline]
pub(crate) fn read_u32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

/// Read a little-endian u64 at `off`, if in bounds.
#[inline]
pub(crate) fn read_u64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![Just(0u8), Just(1), Just(0xff), any::<u8>()],
            0..12,
        )
    }

    proptest! {
        #[test]
        fn prefix_order_agrees_with_key_order(a in key(), b in key()) {
            prop_assert_eq!(cmp_keys(&a, key_prefix(&a), &b), a.cmp(&b));
            if a < b {
                prop_assert!(key_prefix(&a) <= key_prefix(&b));
            }
        }

        /// Keys sharing a prefix of 0 to 79 bytes (so some compare past the 8-byte
        /// words, some past 64 bytes in common), then differing or ending anywhere.
        #[test]
        fn key_order_is_byte_order(
            common in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..80),
            a in key(),
            b in key(),
        ) {
            let (a, b) = ([&common[..], &a].concat(), [&common[..], &b].concat());
            prop_assert_eq!(key_order(&a, &b), a.cmp(&b));
            prop_assert_eq!(key_order(&b, &a), b.cmp(&a));
            prop_assert_eq!(key_order(&a, &a), std::cmp::Ordering::Equal);
        }

        /// `replace_tail` keeps `key[..at]` and writes `tail` after it, whether the
        /// lengths match (the word copies, from every `at` below and above 8) or not.
        #[test]
        fn replace_tail_keeps_the_head_and_writes_the_tail(
            key in proptest::collection::vec(any::<u8>(), 0..40),
            at in 0usize..30,
            tail in proptest::collection::vec(any::<u8>(), 0..30),
            same_len in any::<bool>(),
        ) {
            let at = at.min(key.len());
            // Half the cases give a tail that ends where the key does (in place).
            let tail = if same_len { vec![0xa5; key.len() - at] } else { tail };
            let tail: Vec<u8> = tail.iter().enumerate().map(|(i, b)| b ^ i as u8).collect();
            let mut got = key.clone();
            replace_tail(&mut got, at, &tail);
            prop_assert_eq!(got, [&key[..at], &tail[..]].concat());
        }
    }
}
