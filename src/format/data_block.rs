//! Data blocks (format 4, issue 19 item 6): the cells of a data file in groups that
//! share key prefixes, with one checksum per block and optional LZ4 compression.
//!
//! Format 3 spends 15 bytes on every record (flags, an 8-byte timestamp, two lengths, a
//! 4-byte checksum) and about 32 more in the index file; RocksDB and fjall spend about
//! 6 bytes a key in all. A block holds what a record repeated once for all its cells:
//!
//! ```text
//! stored block:
//!   payload     the bytes below, or their LZ4 block compression
//!   [raw_len    u32 LE   payload length: only when compressed]
//!   compression u8       0 none, 1 LZ4 (lz4_flex's block format), 2 zstd (format 6 on)
//!   crc         u32 LE   crc32c of everything above in this block
//!
//! payload:
//!   entry*
//!   starts      format 5: where each entry starts, u16 LE if the payload is at most
//!               65,535 bytes long, else u32 LE (Layout::Entries)
//!               format 4: u32 LE per group, where its first entry starts
//!               (Layout::Groups)
//!   slots       u8 per hash slot: 0 empty, else the entry's ordinal + 1
//!   base_ts     u64 LE   the smallest timestamp of the block's cells
//!   n           u16 LE   entries, 1 ..= MAX_ENTRIES
//!   m           u16 LE   hash slots: n + n / 3 + 1
//!   interval    u8       entries per group, >= 1
//!   (format 7 ends otherwise, holding once what every entry shares: `held.rs`;
//!   format 8 may store entries of one width with no heads and no starts: `fixed.rs`)
//!
//! entry (format 7 leaves out the fields its block holds):
//!   head        u8       bit 0 tombstone, bit 1 expires, bits 2..8 the shared length
//!                        (63: the shared length is 63 + the varint that follows)
//!   [shared     varint   only when bits 2..8 are 63]
//!   suffix_len  varint
//!   val_len     varint   0 ..= MAX_VALUE_LEN (0 for tombstones)
//!   ts          varint   ts - base_ts
//!   [expires    varint   bit 1 only: zigzag(expires - ts), the expiry never 0]
//!   suffix, value
//! ```
//!
//! Entries are in strictly ascending key order and cut into groups of `interval`
//! entries. A key is the first `shared` bytes of its group's first key (whose `shared`
//! is 0) followed by its suffix: relative to the group's head rather than to the entry
//! before, so any entry decodes from its group's head alone (LevelDB's restart points,
//! with the prefix taken from the restart key). A point read of format 5 goes from the
//! slot to the entry's start and its group head's; format 4 kept only the heads'
//! starts, so a point read skipped up to `interval - 1` entries to reach its own, which
//! cost about half of a get (`cell_at` and `entry` were 45% of a YCSB C profile).
//!
//! The hash table holds every entry: for a key with hash `h = key_hash(key)` (the
//! filter's hash), the home slot is `((h >> 32) * m) >> 32`; collisions probe the next
//! slots (wrapping), an empty slot ends the search, and a slot's entry is compared in
//! full. `m = n + n / 3 + 1`, and at most [`MAX_ENTRIES`] entries fit a u8 ordinal.
//! Varints take their shortest form and shared lengths are the longest common prefix
//! with the head, so a block's cells have exactly one encoding (`verify` checks it).
//! Offsets in a payload's errors are payload offsets: block offsets for a block stored
//! as is, not file offsets of anything for a compressed one.
//! Seeks binary-search the group heads, then the group's entries where every entry's start
//! is stored (format 5 on); format 4's seeks walk the group.

use std::cmp::Ordering;

use super::record::{RecordRef, EXPIRES, TOMBSTONE};
use super::{checksum, read_u16, read_u32, read_u64, varint, Malformed, MAX_KEY_LEN};
use super::{home_slot, MAX_VALUE_LEN};

mod build;
mod cells;
mod fixed;
mod held;
#[cfg(test)]
mod tests;
mod trailer;
mod unpack;
mod verify;
mod zstd_block;

pub use build::{pack, BlockBuilder};
pub use cells::Cells;
pub use fixed::{FixedRow, FixedSteps};
use trailer::{trailer, trailer_len, Trailer};
pub use unpack::{unpack, unpack_with};
use held::Held;

/// Most entries a block holds: slot values are ordinals + 1 in a u8, 255 unused.
pub const MAX_ENTRIES: usize = 254;
/// Entries per group a writer uses unless told otherwise (LevelDB's restart interval).
pub const DEFAULT_INTERVAL: usize = 16;
/// Fixed bytes at the end of a payload: base_ts, n, m, interval.
const TRAILER: usize = 8 + 2 + 2 + 1;
/// Bytes after a payload: the compression byte and the checksum.
const PACKED: usize = 1 + 4;
/// Bytes before a raw block's end that a get prefetches: the payload's trailer (13
/// bytes in formats 4 to 6, 11 to 17 in format 7, and in format 8's fixed blocks 2 more
/// and the held prefix, which this covers up to 8 bytes), the compression byte and the
/// checksum.
pub const MAX_STORED_TAIL: usize = 17 + fixed::TRAILER + 8 + PACKED;
/// Largest payload a compressed block may claim: the largest block a writer cuts
/// (`data_block_size` at most 16 MiB) and one largest cell past it, with room for the
/// block's index. Larger payloads are stored uncompressed.
const MAX_RAW_LEN: usize = (1 << 24) + MAX_VALUE_LEN + MAX_KEY_LEN + (1 << 16);
/// Formats 6 and 7 may pad the data file with fewer than this many zero bytes before a data
/// block so that it starts on a page of this size: a block that fits in a page is then
/// read with one (a fault of a mapped file, a chunk of the block cache) where an
/// unaligned one straddles two.
pub const PAGE: u64 = 4096;
/// A shared length at or past this is written as this plus a varint.
const SHARED_INLINE: usize = 63;

pub use crate::config::Compression;

/// How a payload is laid out: which entries' starts the table before its hash slots
/// holds, and whether its trailer may hold fields for all its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Format 4: the start of each group's first entry, a u32 each.
    Groups,
    /// Formats 5 and 6: the start of every entry, a u16 each in a payload of at most
    /// 65,535 bytes, else a u32 each.
    Entries,
    /// Format 7: [`Layout::Entries`], and a key length, a value length or a timestamp
    /// that every entry shares is held once, in the trailer (`held.rs`).
    Held,
    /// Format 8: [`Layout::Held`], and a block whose entries all take the same bytes
    /// (live cells of one key length and one value length, no expiry) stores them
    /// without heads or a table of starts (`fixed.rs`).
    Fixed,
}

impl Layout {
    /// The layout of segment format `version` (4 or later).
    pub fn of_version(version: u16) -> Layout {
        match version {
            ..=4 => Layout::Groups,
            5 | 6 => Layout::Entries,
            7 => Layout::Held,
            _ => Layout::Fixed,
        }
    }

    /// Whether a block of this layout may hold fields for all its entries (format 7 on).
    pub fn holds(self) -> bool {
        matches!(self, Layout::Held | Layout::Fixed)
    }
}

/// Bytes of each start in the table of a `len`-byte payload of `layout`.
fn start_width(layout: Layout, len: usize) -> usize {
    match layout {
        Layout::Entries | Layout::Held | Layout::Fixed if len <= u16::MAX as usize => 2,
        _ => 4,
    }
}

impl Compression {
    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd => 2,
        }
    }
}

fn hash_slots(n: usize) -> usize {
    n + n / 3 + 1
}

#[inline]
fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

#[inline]
fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// The varint at `*p` in `b`, `*p` moved past it; `None` if it is truncated, too long,
/// or not in its shortest form (one cell, one encoding: `verify` is canonical).
#[inline(always)]
fn field(b: &[u8], p: &mut usize) -> Option<u64> {
    let (v, used) = b
        .get(*p..)
        .and_then(varint::get)
        .filter(|&(v, used)| used == 1 || used == varint::len(v))?;
    *p += used;
    Some(v)
}

/// [`field`], or the error naming `what` was truncated or bad there.
#[inline(always)]
fn field_or(b: &[u8], p: &mut usize, what: &'static str) -> Result<u64, Malformed> {
    match field(b, p) {
        Some(v) => Ok(v),
        None => Err(bad_field(*p, what)),
    }
}

#[cold]
#[inline(never)]
fn bad_field(at: usize, what: &'static str) -> Malformed {
    Malformed::new(at as u64, what.to_string())
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A parsed block payload (from [`unpack`]). Parsing checks the trailer; entries are
/// checked as they are read, every one by [`DataBlock::verify`].
#[derive(Debug, Clone, Copy)]
pub struct DataBlock<'a> {
    b: &'a [u8],
    s: Shape,
}

/// What parsing a payload's trailer learnt, kept by a scan so that each step does not
/// parse its block again ([`DataBlock::with_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    payload_len: usize,
    entries_end: usize,
    /// Where the table of starts begins: one every `stride` entries, `width` bytes each.
    starts_at: usize,
    stride: usize,
    width: usize,
    slots_at: usize,
    base_ts: u64,
    n: usize,
    m: usize,
    interval: usize,
    /// Format 7's fields held for all entries (none for formats 4 to 6).
    held: Held,
    layout: Layout,
}

/// One entry of a block, borrowed: its key is `prefix` followed by `suffix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCell<'a> {
    /// The key's bytes shared with its group's first key.
    pub prefix: &'a [u8],
    /// The rest of the key.
    pub suffix: &'a [u8],
    /// Value (empty for tombstones).
    pub value: &'a [u8],
    /// Write timestamp.
    pub ts: u64,
    /// Deletion marker.
    pub tombstone: bool,
    /// 0, or the expiry ([`RecordRef::expires`]).
    pub expires: u64,
    /// Where the entry starts in the payload.
    pub at: usize,
    /// Where the next entry starts.
    pub end: usize,
}

/// Where a group's head key lies in its block's payload, and which entries the group
/// holds: see [`DataBlock::cell_following`]. Valid for that block only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadKey {
    /// The group's first entry (its head) and the first entry past the group.
    first: usize,
    next: usize,
    start: usize,
    end: usize,
}

impl HeadKey {
    /// The group's first entry (its head): names the group within its block.
    #[inline]
    pub fn first(&self) -> usize {
        self.first
    }

    /// The key of `head`, the first entry of group `group` of a block whose groups hold
    /// `interval` entries (its suffix is its key).
    fn of(group: usize, interval: usize, head: &BlockCell<'_>) -> HeadKey {
        let end = head.end - head.value.len();
        let first = group * interval;
        HeadKey {
            first,
            next: first + interval,
            start: end - head.suffix.len(),
            end,
        }
    }
}

impl<'a> BlockCell<'a> {
    /// Byte-wise order of this cell's key against `key`.
    #[inline]
    pub fn cmp_key(&self, key: &[u8]) -> Ordering {
        let p = self.prefix.len().min(key.len());
        match super::key_order(&self.prefix[..p], &key[..p]) {
            Ordering::Equal if p < self.prefix.len() => Ordering::Greater,
            Ordering::Equal => super::key_order(self.suffix, &key[p..]),
            o => o,
        }
    }

    /// Key length.
    pub fn key_len(&self) -> usize {
        self.prefix.len() + self.suffix.len()
    }

    /// Write the key into `out` (cleared first).
    #[inline(always)]
    pub fn key_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.prefix);
        out.extend_from_slice(self.suffix);
    }

    /// The cell as a record whose key is `key` (the caller's copy of this cell's key).
    pub fn with_key<'k>(&self, key: &'k [u8]) -> RecordRef<'k>
    where
        'a: 'k,
    {
        RecordRef {
            key,
            value: self.value,
            ts: self.ts,
            tombstone: self.tombstone,
            expires: self.expires,
        }
    }
}

impl<'a> DataBlock<'a> {
    /// Parse a payload of `layout` (its segment's format): its trailer, and that its
    /// regions fit.
    pub fn parse(b: &'a [u8], layout: Layout) -> Result<Self, Malformed> {
        let len = b.len();
        let Trailer {
            base_ts,
            n,
            m,
            interval,
            held,
            at: t,
            end,
        } = match layout {
            Layout::Held | Layout::Fixed => held::trailer(b, layout)?,
            _ => trailer(b)?,
        };
        let bad = |at: usize, why: String| Err(Malformed::new(at as u64, why));
        if n == 0 || n > MAX_ENTRIES {
            return bad(t + 8, format!("data block of {n} entries"));
        }
        if m != hash_slots(n) {
            return bad(t + 10, format!("{m} hash slots for {n} entries"));
        }
        if interval == 0 || interval > MAX_ENTRIES {
            let at = if layout.holds() { t + 9 } else { t + 12 };
            return bad(at, format!("group interval {interval}"));
        }
        let stride = match layout {
            Layout::Groups => interval,
            Layout::Entries | Layout::Held | Layout::Fixed => 1,
        };
        // A fixed block has no table of starts.
        let fixed = held.flags & held::FIXED != 0;
        let rows = if fixed { 0 } else { n.div_ceil(stride) };
        let width = start_width(layout, len);
        let slots_at = end - m.min(end);
        let Some(starts_at) = slots_at.checked_sub(rows * width).filter(|_| m <= end) else {
            return bad(t + 8, format!("{rows} starts and {m} slots in {end} bytes"));
        };
        if fixed && n * held.width != starts_at {
            let why = format!("{starts_at} bytes of entries for {n} of {} bytes", held.width);
            return bad(starts_at, why);
        }
        let s = Shape {
            payload_len: len,
            entries_end: starts_at,
            starts_at,
            stride,
            width,
            slots_at,
            base_ts,
            n,
            m,
            interval,
            held,
            layout,
        };
        Ok(DataBlock { b, s })
    }

    /// What parsing learnt, for [`Self::with_shape`].
    pub fn shape(&self) -> Shape {
        self.s
    }

    /// The block `b` whose trailer, parsed before, gave `s`: `b` is that payload (the
    /// same bytes, moved or mapped again). `None` for one of another length, so reads
    /// stay in bounds whatever `b` is.
    #[inline]
    pub fn with_shape(b: &'a [u8], s: Shape) -> Option<Self> {
        (b.len() == s.payload_len).then_some(DataBlock { b, s })
    }

    /// Entries in the block.
    pub fn len(&self) -> usize {
        self.s.n
    }

    /// Hash slots.
    pub fn slots(&self) -> usize {
        self.s.m
    }

    /// Bytes from the start of the hash slots to the end of the block stored as is.
    pub fn slots_back(&self) -> usize {
        self.s.payload_len - self.s.slots_at + PACKED
    }

    /// Entries per group.
    pub fn interval(&self) -> usize {
        self.s.interval
    }

    /// Never true: a block holds at least one entry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes of the entries region (the rest of the payload is the block's index).
    pub fn entries_len(&self) -> usize {
        self.s.entries_end
    }

    /// The entry starting at `at`, its key's first `prefix` bytes given (its group
    /// head's, or empty for a head).
    #[inline]
    pub fn cell_at(&self, at: usize, head: &'a [u8]) -> Result<BlockCell<'a>, Malformed> {
        self.decode(at, head)
    }

    /// [`Self::cell_at`], inlined where it runs once a row (a scan's step).
    #[inline(always)]
    fn decode(&self, at: usize, head: &'a [u8]) -> Result<BlockCell<'a>, Malformed> {
        if self.is_fixed() {
            return self.decode_fixed(at);
        }
        let b = &self.b[..self.s.entries_end];
        let bad = |off: usize, why: &str| Malformed::new(off as u64, why.to_string());
        let first = *b.get(at).ok_or_else(|| bad(at, "entry past the block's entries"))?;
        let mut p = at + 1;
        let mut shared = (first >> 2) as u64;
        if shared == SHARED_INLINE as u64 {
            shared = shared.saturating_add(field_or(b, &mut p, "truncated or bad shared length")?);
        }
        // A field the block holds was checked with the trailer (a held key length is
        // 1 ..= MAX_KEY_LEN, a held value length at most MAX_VALUE_LEN): only what an
        // entry carries itself is checked here.
        let once = self.s.held;
        let suffix_len = if once.flags & held::KEY == 0 {
            let suffix_len = field_or(b, &mut p, "truncated or bad key suffix length")?;
            let key_len = shared.saturating_add(suffix_len);
            if key_len == 0 || key_len > MAX_KEY_LEN as u64 {
                return Err(bad(at, &format!("key length {key_len} out of range")));
            }
            suffix_len
        } else {
            let k = once.key_len as u64;
            k.checked_sub(shared).ok_or_else(|| bad(at, "shares more than the held key length"))?
        };
        let tombstone = first & TOMBSTONE != 0;
        let val_len = match once.flags & held::VAL {
            0 => {
                let v = field_or(b, &mut p, "truncated or bad value length")?;
                if v > MAX_VALUE_LEN as u64 || (tombstone && v != 0) {
                    return Err(bad(at, &format!("value length {v} out of range")));
                }
                v
            }
            _ if tombstone => 0,
            _ => once.val_len as u64,
        };
        let ts = match once.flags & held::TS {
            0 => {
                let d = field_or(b, &mut p, "truncated or bad timestamp")?;
                self.s.base_ts.checked_add(d).ok_or_else(|| bad(at, "timestamp overflows"))?
            }
            _ => self.s.base_ts,
        };
        let expires = match first & EXPIRES {
            0 => 0,
            _ => {
                let zig = field_or(b, &mut p, "truncated or bad expiry")?;
                match ts.wrapping_add(unzigzag(zig) as u64) {
                    0 => return Err(bad(at, "expiry flag with an expiry of 0")),
                    e => e,
                }
            }
        };
        if shared > head.len() as u64 {
            return Err(bad(at, &format!("shares {shared} bytes of a {}-byte key", head.len())));
        }
        let key_end = p.checked_add(suffix_len as usize);
        let end = key_end.and_then(|k| k.checked_add(val_len as usize));
        let (Some(key_end), Some(end)) = (key_end, end.filter(|&e| e <= b.len())) else {
            return Err(bad(at, "entry runs past the block's entries"));
        };
        Ok(BlockCell {
            prefix: &head[..shared as usize],
            suffix: &b[p..key_end],
            value: &b[key_end..end],
            ts,
            tombstone,
            expires,
            at,
            end,
        })
    }

    /// What the table of starts says of entry `i` (a multiple of `stride`), unchecked,
    /// and where it says it.
    #[inline]
    fn start_entry(&self, i: usize) -> (Option<usize>, usize) {
        let off = self.s.starts_at + i / self.s.stride * self.s.width;
        let at = match self.s.width {
            2 => read_u16(self.b, off).map(usize::from),
            _ => read_u32(self.b, off).map(|a| a as usize),
        };
        (at, off)
    }

    /// Where entry `i` (a multiple of `stride`) starts, within the entries.
    #[inline]
    fn start(&self, i: usize) -> Result<usize, Malformed> {
        if self.is_fixed() {
            return Ok(i * self.s.held.width);
        }
        let (at, off) = self.start_entry(i);
        at.filter(|&a| a < self.s.entries_end).ok_or_else(|| {
            Malformed::new(off as u64, format!("entry {i} starts past the entries"))
        })
    }

    /// The first entry of group `g`, whose key is whole.
    fn head(&self, g: usize) -> Result<BlockCell<'a>, Malformed> {
        self.cell_at(self.start(g * self.s.interval)?, &[])
    }

    /// Entry `i` (`i < len()`): from its own start (format 5), else walked to from its
    /// group's head (format 4).
    #[inline]
    pub fn entry(&self, i: usize) -> Result<BlockCell<'a>, Malformed> {
        if i >= self.s.n {
            return Err(Malformed::new(0, format!("entry {i} of a block of {}", self.s.n)));
        }
        if self.is_fixed() {
            return self.fixed_entry(i);
        }
        let k = i % self.s.interval;
        if k != 0 && self.s.stride == 1 {
            // Start loading the entry while its group head is decoded.
            let at = self.start(i)?;
            crate::io::prefetch::prefetch_read(self.b, at);
            let head = self.head(i / self.s.interval)?;
            return self.cell_at(at, head.suffix);
        }
        let head = self.head(i / self.s.interval)?;
        if k == 0 {
            return Ok(head);
        }
        self.skip(head, k)
    }

    /// Entry `i`, which starts at `at` (the end of entry `i - 1`): a walk's next step.
    /// `head` remembers, across the steps of one walk over this block, which group's
    /// head key lies where in the payload, so a step decodes its group's head once
    /// (when it enters the group) rather than at every entry.
    #[inline(always)]
    pub fn cell_following(
        &self,
        i: usize,
        at: usize,
        head: &mut Option<HeadKey>,
    ) -> Result<BlockCell<'a>, Malformed> {
        if self.is_fixed() {
            return self.decode_fixed(at);
        }
        // Most steps stay in the group of the step before: no division to find it.
        if let Some(h) = *head {
            if i > h.first && i < h.next {
                return self.decode(at, &self.b[h.start..h.end]);
            }
        }
        let g = i / self.s.interval;
        let c = self.head(g)?;
        let h = HeadKey::of(g, self.s.interval, &c);
        *head = Some(h);
        if i == h.first {
            return Ok(c);
        }
        self.cell_at(at, &self.b[h.start..h.end])
    }

    /// The entry `k` places after `head` (a group's first entry) in its group.
    fn skip(&self, head: BlockCell<'a>, k: usize) -> Result<BlockCell<'a>, Malformed> {
        let mut c = head;
        for _ in 0..k {
            c = self.cell_at(c.end, head.suffix)?;
        }
        Ok(c)
    }

    /// The entry whose key is `key` (`h = key_hash(key)`), if any.
    #[inline]
    pub fn get(&self, key: &[u8], h: u64) -> Result<Option<BlockCell<'a>>, Malformed> {
        Ok(self.find(key, h)?.map(|(_, c)| c))
    }

    /// The ordinal and entry whose key is `key` (`h = key_hash(key)`), if any: through
    /// the hash table, so a seek to a stored key skips the binary search.
    #[inline]
    pub fn find(&self, key: &[u8], h: u64) -> Result<Option<(usize, BlockCell<'a>)>, Malformed> {
        let mut s = home_slot(h, self.s.m);
        if self.is_fixed() {
            return self.fixed_find(key, s);
        }
        for _ in 0..self.s.m {
            match self.b[self.s.slots_at + s] as usize {
                0 => return Ok(None),
                o if o > self.s.n => return Err(self.bad_slot(s, o)),
                o => {
                    let c = self.entry(o - 1)?;
                    if c.cmp_key(key) == Ordering::Equal {
                        return Ok(Some((o - 1, c)));
                    }
                }
            }
            s = if s + 1 == self.s.m { 0 } else { s + 1 };
        }
        Ok(None)
    }

    /// Hash slot `s` names entry `o` (counting from 1), past the block's entries.
    #[cold]
    fn bad_slot(&self, s: usize, o: usize) -> Malformed {
        let at = (self.s.slots_at + s) as u64;
        Malformed::new(at, format!("slot names entry {o} of {}", self.s.n))
    }

    /// The ordinal of the first entry whose key is at or above `key` (`len()` if none).
    pub fn lower_bound(&self, key: &[u8]) -> Result<usize, Malformed> {
        if self.is_fixed() {
            return self.fixed_lower_bound(key);
        }
        // The last group whose head is at or below `key`.
        let (mut lo, mut hi) = (0, self.s.n.div_ceil(self.s.interval));
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            match self.head(mid)?.cmp_key(key) {
                Ordering::Greater => hi = mid,
                _ => lo = mid,
            }
        }
        let head = self.head(lo)?;
        let first = lo * self.s.interval;
        if self.s.stride == 1 && head.cmp_key(key) == Ordering::Less {
            // Every entry's start is stored (format 5 on): binary-search the group past
            // its head, as a walk decoded half the group on average (about 1,700
            // instructions of a scan's first lookup in a flushed segment).
            let (mut lo, mut hi) = (first + 1, (first + self.s.interval).min(self.s.n));
            while lo < hi {
                let mid = (lo + hi) / 2;
                match self.cell_at(self.start(mid)?, head.suffix)?.cmp_key(key) {
                    Ordering::Less => lo = mid + 1,
                    _ => hi = mid,
                }
            }
            return Ok(lo);
        }
        let mut c = head;
        let mut i = first;
        loop {
            if c.cmp_key(key) != Ordering::Less {
                return Ok(i);
            }
            i += 1;
            if i == self.s.n || i % self.s.interval == 0 {
                return Ok(i);
            }
            c = self.cell_at(c.end, head.suffix)?;
        }
    }
}
