//! Format 8's fixed entries (issue 19 item 6): a block whose cells are all live, none
//! expiring, with one key length and one value length (format 7 holds both, `KEY |
//! VAL`) stores each as the same number of bytes, so it needs no entry heads and no
//! table of starts: entry `i` starts at `i * width`.
//!
//! ```text
//! entry, FIXED:  key[plen..]  ts - base_ts (tsw bytes LE)  value
//! payload end, FIXED (then as format 7: [key_len u16] [val_len u32] base_ts n interval held):
//!   ... slots
//!   prefix    plen bytes   the first `plen` bytes of every key
//!   plen      u8           the first and last keys' common prefix, at most 255 and
//!                          less than the key length
//!   tsw       u8           0 ..= 8: bytes of the largest timestamp delta (0 exactly with TS)
//! ```
//!
//! On the YCSB runner's bulk load (16-byte random keys sharing two bytes in a block of
//! 10M, 100-byte values, one timestamp) a format 7 entry spends a head byte and a
//! two-byte start beside its suffix and value: 35 such cells take 4,164 bytes stored,
//! more than a page, where fixed they take 4,063. A writer makes a block fixed exactly
//! when its cells allow it (`held::choose`), so a block still has one encoding.

use super::held::{Held, Shared, FIXED, KEY, TS, VAL};
use super::{BlockCell, DataBlock, Malformed, Shape};
use crate::format::key_order;
use crate::io::prefetch::prefetch_read;
use std::cmp::Ordering;

/// Bytes the trailer of a fixed block holds beside the prefix: `plen` and `tsw`.
pub const TRAILER: usize = 2;

/// The prefix a fixed block of keys of `key_len` bytes whose first and last share
/// `lcp` holds once: less than the key, so every entry keeps a byte of its own.
pub fn prefix_len(lcp: usize, key_len: usize) -> usize {
    lcp.min(key_len.saturating_sub(1)).min(u8::MAX as usize)
}

/// Bytes of `d` written little-endian without its high zero bytes.
pub fn ts_width(d: u64) -> usize {
    (64 - d.leading_zeros() as usize).div_ceil(8)
}

/// Make `h` (holding `KEY | VAL`) fixed for cells sharing `s`.
pub(super) fn hold(h: &mut Held, s: &Shared) {
    h.flags |= FIXED;
    set_shape(h, prefix_len(s.lcp, h.key_len), ts_width(s.max_ts - s.min_ts));
}

/// Give fixed `h` (its lengths known) a held prefix of `plen` bytes and timestamp
/// deltas of `tsw`, and so its entries' width.
fn set_shape(h: &mut Held, plen: usize, tsw: usize) {
    (h.plen, h.tsw) = (plen, tsw);
    h.width = h.key_len - plen + tsw + h.val_len;
}

/// Append the prefix, `plen` and `tsw` of fixed `h`, whose block's first key is `first`.
pub(super) fn put_trailer(h: &Held, first: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&first[..h.plen]);
    out.extend_from_slice(&[h.plen as u8, h.tsw as u8]);
}

/// Read the prefix, `plen` and `tsw` of a fixed block's trailer, which end at `at` in
/// `b`, into `h` (its lengths read): where the prefix starts, the end of the slots.
pub(super) fn trailer(b: &[u8], at: usize, h: &mut Held) -> Result<usize, Malformed> {
    let bad = |off: usize, why: String| Err(Malformed::new(off as u64, why));
    if h.flags & (KEY | VAL) != KEY | VAL {
        return bad(b.len() - 1, format!("fixed entries without held lengths: {:#04x}", h.flags));
    }
    let Some(p) = at.checked_sub(TRAILER) else {
        return bad(0, format!("data block payload of {} bytes", b.len()));
    };
    let (plen, tsw) = (b[p] as usize, b[p + 1] as usize);
    if tsw > 8 || (tsw == 0) != (h.flags & TS != 0) {
        return bad(p + 1, format!("fixed timestamp width {tsw} with held fields {:#04x}", h.flags));
    }
    if plen >= h.key_len {
        return bad(p, format!("prefix of {plen} bytes held for keys of {}", h.key_len));
    }
    let Some(prefix_at) = p.checked_sub(plen) else {
        return bad(p, format!("prefix of {plen} bytes in a payload of {}", b.len()));
    };
    h.prefix_at = prefix_at;
    set_shape(h, plen, tsw);
    Ok(prefix_at)
}

impl<'a> DataBlock<'a> {
    /// Whether the block's entries are fixed (format 8).
    #[inline(always)]
    pub(super) fn is_fixed(&self) -> bool {
        self.s.held.flags & FIXED != 0
    }

    /// The prefix every key of a fixed block shares, held in its trailer.
    #[inline(always)]
    fn fixed_prefix(&self) -> &'a [u8] {
        let h = &self.s.held;
        &self.b[h.prefix_at..h.prefix_at + h.plen]
    }

    /// The fixed entry starting at `at`.
    #[inline(always)]
    pub(super) fn decode_fixed(&self, at: usize) -> Result<BlockCell<'a>, Malformed> {
        let h = &self.s.held;
        let end = at.wrapping_add(h.width);
        let Some(e) = self.b[..self.s.entries_end].get(at..end) else {
            return Err(Malformed::new(at as u64, "entry past the block's entries".to_string()));
        };
        let Some((suffix, ts, value)) = split_fixed(e, h.key_len - h.plen, h.tsw, self.s.base_ts)
        else {
            return Err(Malformed::new(at as u64, "timestamp overflows".to_string()));
        };
        Ok(BlockCell {
            prefix: self.fixed_prefix(),
            suffix,
            value,
            ts,
            tombstone: false,
            expires: 0,
            at,
            end,
        })
    }

    /// Fixed entry `i` (`i < len()`).
    #[inline(always)]
    pub(super) fn fixed_entry(&self, i: usize) -> Result<BlockCell<'a>, Malformed> {
        self.decode_fixed(i * self.s.held.width)
    }

    /// [`DataBlock::find`] of a fixed block: a key of another length or prefix is in
    /// none of its entries, and a probed entry's key is compared in place, so only the
    /// entry found is decoded.
    #[inline]
    pub(super) fn fixed_find(
        &self,
        key: &[u8],
        mut s: usize,
    ) -> Result<Option<(usize, BlockCell<'a>)>, Malformed> {
        let h = &self.s.held;
        if key.len() != h.key_len || key[..h.plen] != *self.fixed_prefix() {
            return Ok(None);
        }
        let (rest, entries) = (&key[h.plen..], &self.b[..self.s.entries_end]);
        for _ in 0..self.s.m {
            let o = match self.b[self.s.slots_at + s] as usize {
                0 => return Ok(None),
                o if o > self.s.n => return Err(self.bad_slot(s, o)),
                o => o - 1,
            };
            let at = o * h.width;
            if entries.get(at..at + rest.len()) == Some(rest) {
                return Ok(Some((o, self.decode_fixed(at)?)));
            }
            s = if s + 1 == self.s.m { 0 } else { s + 1 };
        }
        Ok(None)
    }

    /// [`DataBlock::lower_bound`] of a fixed block: a key that differs from the held
    /// prefix within it lies below or above every entry at once; otherwise a binary
    /// search compares the rest of the key with the probed entries' suffixes in place,
    /// decoding none (a scan's seek into a segment that lacks its key).
    pub(super) fn fixed_lower_bound(&self, key: &[u8]) -> Result<usize, Malformed> {
        let (h, prefix) = (&self.s.held, self.fixed_prefix());
        let head = &key[..key.len().min(h.plen)];
        match key_order(head, &prefix[..head.len()]) {
            Ordering::Less => return Ok(0),
            Ordering::Greater => return Ok(self.s.n),
            // A key the prefix begins with, and no longer than it: below every entry.
            Ordering::Equal if key.len() <= h.plen => return Ok(0),
            Ordering::Equal => {}
        }
        let (rest, suffix_len) = (&key[h.plen..], h.key_len - h.plen);
        let entries = &self.b[..self.s.entries_end];
        let (mut lo, mut hi) = (0, self.s.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let at = mid * h.width;
            // Both entries the next step may read start loading while this one's
            // compare waits for its line.
            prefetch_read(entries, (lo + mid) / 2 * h.width);
            prefetch_read(entries, (mid + 1 + hi) / 2 * h.width);
            let Some(suffix) = entries.get(at..at + suffix_len) else {
                return Err(Malformed::new(at as u64, "entry past the block's entries".to_string()));
            };
            match key_order(suffix, rest) {
                Ordering::Less => lo = mid + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }
}

/// What a forward walk over a fixed block needs at each step, taken from its [`Shape`]
/// once when the walk enters the block: a step then decodes its entry from the payload
/// and `at` alone, where [`DataBlock::cell_following`] would have the whole shape (some
/// 160 bytes) copied into a [`DataBlock`] for every row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedSteps {
    payload_len: usize,
    entries_end: usize,
    width: usize,
    suffix_len: usize,
    plen: usize,
    prefix_at: usize,
    tsw: usize,
    base_ts: u64,
}

/// One fixed entry, borrowed from its payload ([`FixedSteps::row`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedRow<'a> {
    /// The key past the block's held prefix.
    pub suffix: &'a [u8],
    /// Write timestamp.
    pub ts: u64,
    /// The value.
    pub value: &'a [u8],
    /// Where the next entry starts.
    pub end: usize,
}

impl Shape {
    /// The steps of a fixed block (`None` for any other).
    pub fn fixed_steps(&self) -> Option<FixedSteps> {
        let h = &self.held;
        (h.flags & FIXED != 0).then(|| FixedSteps {
            payload_len: self.payload_len,
            entries_end: self.entries_end,
            width: h.width,
            suffix_len: h.key_len - h.plen,
            plen: h.plen,
            prefix_at: h.prefix_at,
            tsw: h.tsw,
            base_ts: self.base_ts,
        })
    }
}

impl FixedSteps {
    /// Bytes of the prefix every key of the block shares.
    #[inline(always)]
    pub fn plen(&self) -> usize {
        self.plen
    }

    /// That prefix, in the block's payload `b`.
    #[inline(always)]
    pub fn prefix<'a>(&self, b: &'a [u8]) -> Option<&'a [u8]> {
        b.get(self.prefix_at..self.prefix_at + self.plen)
    }

    /// The entry starting at `at` in payload `b`, as [`DataBlock::decode_fixed`] reads
    /// it: `None` for a payload of another length, an entry past the entries or a
    /// timestamp that overflows, which the caller leaves to that general decode to
    /// report.
    #[inline(always)]
    pub fn row<'a>(&self, b: &'a [u8], at: usize) -> Option<FixedRow<'a>> {
        if b.len() != self.payload_len {
            return None;
        }
        let end = at.checked_add(self.width).filter(|&e| e <= self.entries_end)?;
        let e = b.get(at..end)?;
        let (suffix, ts, value) = split_fixed(e, self.suffix_len, self.tsw, self.base_ts)?;
        Some(FixedRow {
            suffix,
            ts,
            value,
            end,
        })
    }
}

/// Fixed entry `e` (its whole width) split into the key's suffix (`suffix_len`
/// bytes), its timestamp (`base_ts` plus a delta of `tsw` bytes) and its value; `None`
/// where the timestamp overflows (or `e` is too short, which a block's shape rules out).
#[inline(always)]
fn split_fixed(
    e: &[u8],
    suffix_len: usize,
    tsw: usize,
    base_ts: u64,
) -> Option<(&[u8], u64, &[u8])> {
    let (suffix, rest) = e.split_at_checked(suffix_len)?;
    let value = rest.get(tsw..)?;
    let ts = base_ts.checked_add(le_delta(rest, tsw))?;
    Some((suffix, ts, value))
}

/// The timestamp delta of a fixed entry: the first `w` bytes of `rest` (0 to 8,
/// little-endian; the value follows them), read with one unaligned load and a mask
/// where eight bytes are there (a value of at least 8 - `w` bytes), not a copy of
/// variable length (a call to `memcpy` for every entry decoded).
#[inline(always)]
fn le_delta(rest: &[u8], w: usize) -> u64 {
    match rest.first_chunk::<8>() {
        Some(b) if w > 0 => u64::from_le_bytes(*b) & (u64::MAX >> (64 - 8 * w)),
        _ => rest[..w].iter().rev().fold(0, |d, &b| d << 8 | u64::from(b)),
    }
}
