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
//!   compression u8       0 none, 1 LZ4 (lz4_flex's block format)
//!   crc         u32 LE   crc32c of everything above in this block
//!
//! payload:
//!   entry*
//!   restarts    u32 LE per group: where the group's first entry starts
//!   slots       u8 per hash slot: 0 empty, else the entry's ordinal + 1
//!   base_ts     u64 LE   the smallest timestamp of the block's cells
//!   n           u16 LE   entries, 1 ..= MAX_ENTRIES
//!   m           u16 LE   hash slots: n + n / 3 + 1
//!   interval    u8       entries per group, >= 1
//!
//! entry:
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
//! before, so any entry decodes from its group's head alone, and a point read skips
//! at most `interval - 1` headers to reach it (LevelDB's restart points, with the
//! prefix taken from the restart key).
//!
//! The hash table holds every entry: for a key with hash `h = key_hash(key)` (the
//! filter's hash), the home slot is `((h >> 32) * m) >> 32`; collisions probe the next
//! slots (wrapping), an empty slot ends the search, and a slot's entry is compared in
//! full. `m = n + n / 3 + 1`, and at most [`MAX_ENTRIES`] entries fit a u8 ordinal.
//! Varints take their shortest form and shared lengths are the longest common prefix
//! with the head, so a block's cells have exactly one encoding (`verify` checks it).
//! Offsets in a payload's errors are payload offsets: block offsets for a block stored
//! as is, not file offsets of anything for a compressed one.
//! Seeks binary-search the group heads, then walk one group.

use std::cmp::Ordering;

use super::record::{flags_of, RecordRef, EXPIRES, TOMBSTONE};
use super::{checksum, read_u16, read_u32, read_u64, varint, Malformed, MAX_KEY_LEN};
use super::{home_slot, MAX_VALUE_LEN};

#[cfg(test)]
mod tests;
mod verify;

/// Most entries a block holds: slot values are ordinals + 1 in a u8, 255 unused.
pub const MAX_ENTRIES: usize = 254;
/// Entries per group a writer uses unless told otherwise (LevelDB's restart interval).
pub const DEFAULT_INTERVAL: usize = 16;
/// Fixed bytes at the end of a payload: base_ts, n, m, interval.
const TRAILER: usize = 8 + 2 + 2 + 1;
/// Largest payload a compressed block may claim: the largest block a writer cuts
/// (`data_block_size` at most 16 MiB) and one largest cell past it, with room for the
/// block's index. Larger payloads are stored uncompressed.
const MAX_RAW_LEN: usize = (1 << 24) + MAX_VALUE_LEN + MAX_KEY_LEN + (1 << 16);
/// A shared length at or past this is written as this plus a varint.
const SHARED_INLINE: usize = 63;

pub use crate::config::Compression;

impl Compression {
    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
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

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// One staged cell of a [`BlockBuilder`]: where its key and value end in the
/// builder's buffers, and the rest of the cell.
#[derive(Debug, Clone, Copy)]
struct Staged {
    key_end: usize,
    val_end: usize,
    ts: u64,
    flags: u8,
    expires: u64,
    hash: u64,
}

/// Builds one data block at a time: cells are staged (the block's smallest timestamp
/// must be known before any is encoded), then [`BlockBuilder::finish`] writes them.
#[derive(Debug)]
pub struct BlockBuilder {
    interval: usize,
    keys: Vec<u8>,
    vals: Vec<u8>,
    cells: Vec<Staged>,
    payload: Vec<u8>,
    packed: Vec<u8>,
}

impl Default for BlockBuilder {
    fn default() -> Self {
        BlockBuilder::new(DEFAULT_INTERVAL)
    }
}

impl BlockBuilder {
    /// A builder cutting groups of `interval` entries (at least 1).
    pub fn new(interval: usize) -> Self {
        BlockBuilder {
            interval: interval.clamp(1, MAX_ENTRIES),
            keys: Vec::new(),
            vals: Vec::new(),
            cells: Vec::new(),
            payload: Vec::new(),
            packed: Vec::new(),
        }
    }

    /// Stage a cell whose key hashes to `h` (`key_hash`). Keys must arrive in strictly
    /// ascending order, at most [`MAX_ENTRIES`] per block (the writer checks both).
    pub fn add(&mut self, r: &RecordRef<'_>, h: u64) {
        assert!(self.cells.len() < MAX_ENTRIES, "a data block holds {MAX_ENTRIES} cells");
        debug_assert!(!r.key.is_empty() && r.key.len() <= MAX_KEY_LEN);
        debug_assert!(!r.tombstone || r.value.is_empty());
        debug_assert!(self.last_key().is_none_or(|k| k < r.key));
        self.keys.extend_from_slice(r.key);
        self.vals.extend_from_slice(r.value);
        self.cells.push(Staged {
            key_end: self.keys.len(),
            val_end: self.vals.len(),
            ts: r.ts,
            flags: flags_of(r.tombstone, r.expires),
            expires: r.expires,
            hash: h,
        });
    }

    /// Cells staged.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Nothing staged.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Whether another cell may be staged.
    pub fn has_room(&self) -> bool {
        self.cells.len() < MAX_ENTRIES
    }

    /// Bytes staged (keys and values), what a writer compares with its block size.
    pub fn staged_bytes(&self) -> usize {
        self.keys.len() + self.vals.len()
    }

    /// The last key staged.
    pub fn last_key(&self) -> Option<&[u8]> {
        let i = self.cells.len().checked_sub(1)?;
        let start = i.checked_sub(1).map_or(0, |p| self.cells[p].key_end);
        Some(&self.keys[start..self.cells[i].key_end])
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = i.checked_sub(1).map_or(0, |p| self.cells[p].key_end);
        &self.keys[start..self.cells[i].key_end]
    }

    fn value(&self, i: usize) -> &[u8] {
        let start = i.checked_sub(1).map_or(0, |p| self.cells[p].val_end);
        &self.vals[start..self.cells[i].val_end]
    }

    /// Append the stored block of the staged cells to `out` (nothing if none is staged)
    /// and start the next block; returns the bytes appended.
    pub fn finish(&mut self, compression: Compression, out: &mut Vec<u8>) -> usize {
        if self.cells.is_empty() {
            return 0;
        }
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        self.encode_payload(&mut payload);
        let start = out.len();
        pack(&payload, compression, &mut self.packed, out);
        self.payload = payload;
        self.keys.clear();
        self.vals.clear();
        self.cells.clear();
        out.len() - start
    }

    fn encode_payload(&self, out: &mut Vec<u8>) {
        let n = self.cells.len();
        let base_ts = self.cells.iter().map(|c| c.ts).min().unwrap_or(0);
        let mut restarts = Vec::with_capacity(n.div_ceil(self.interval));
        let mut head = 0..0;
        for i in 0..n {
            let c = self.cells[i];
            let key = self.key(i);
            let shared = if i % self.interval == 0 {
                restarts.push(out.len() as u32);
                let start = i.checked_sub(1).map_or(0, |p| self.cells[p].key_end);
                head = start..c.key_end;
                0
            } else {
                common_prefix(&self.keys[head.clone()], key)
            };
            let value = self.value(i);
            out.push(c.flags | (shared.min(SHARED_INLINE) as u8) << 2);
            if shared >= SHARED_INLINE {
                varint::put(out, (shared - SHARED_INLINE) as u64);
            }
            varint::put(out, (key.len() - shared) as u64);
            varint::put(out, value.len() as u64);
            varint::put(out, c.ts - base_ts);
            if c.flags & EXPIRES != 0 {
                varint::put(out, zigzag(c.expires.wrapping_sub(c.ts) as i64));
            }
            out.extend_from_slice(&key[shared..]);
            out.extend_from_slice(value);
        }
        for r in restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        let m = hash_slots(n);
        let hashes: Vec<u64> = self.cells.iter().map(|c| c.hash).collect();
        let slots = verify::table(&hashes, m);
        out.extend_from_slice(&slots);
        out.extend_from_slice(&base_ts.to_le_bytes());
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(&(m as u16).to_le_bytes());
        out.push(self.interval as u8);
    }
}

/// Append `payload` to `out` as a stored block, compressed if asked and worth it
/// (`scratch` holds the compressed bytes meanwhile).
pub fn pack(payload: &[u8], compression: Compression, scratch: &mut Vec<u8>, out: &mut Vec<u8>) {
    let start = out.len();
    let compressed = match compression {
        Compression::None => false,
        Compression::Lz4 if payload.len() > MAX_RAW_LEN => false,
        Compression::Lz4 => {
            scratch.resize(lz4_flex::block::get_maximum_output_size(payload.len()), 0);
            match lz4_flex::block::compress_into(payload, scratch) {
                Ok(len) if len < payload.len() - payload.len() / 8 => {
                    out.extend_from_slice(&scratch[..len]);
                    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    true
                }
                _ => false,
            }
        }
    };
    let code = if compressed {
        Compression::Lz4.code()
    } else {
        out.extend_from_slice(payload);
        Compression::None.code()
    };
    out.push(code);
    let crc = checksum(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Check a stored block's checksum and return its payload: `stored` itself less its
/// trailer, or (compressed) the payload decompressed into `buf`. Offsets in errors are
/// relative to `stored`.
pub fn unpack<'a>(stored: &'a [u8], buf: &'a mut Vec<u8>) -> Result<&'a [u8], Malformed> {
    unpack_with(stored, buf, true)
}

/// [`unpack`], the checksum checked only if `check` (a point read that
/// `crc_check_chance` lets skip it; the payload's decoders stay total either way).
#[inline]
pub fn unpack_with<'a>(
    stored: &'a [u8],
    buf: &'a mut Vec<u8>,
    check: bool,
) -> Result<&'a [u8], Malformed> {
    let len = stored.len();
    if len < 5 {
        return Err(Malformed::new(0, format!("data block of {len} bytes")));
    }
    let crc = read_u32(stored, len - 4).unwrap_or(0);
    if check && checksum(&stored[..len - 4]) != crc {
        return Err(Malformed::new(0, "data block checksum mismatch"));
    }
    match stored[len - 5] {
        0 => Ok(&stored[..len - 5]),
        1 => decompress(&stored[..len - 5], buf),
        c => Err(Malformed::new(
            len as u64 - 5,
            format!("unknown data block compression {c}"),
        )),
    }
}

fn decompress<'a>(b: &[u8], buf: &'a mut Vec<u8>) -> Result<&'a [u8], Malformed> {
    let Some(at) = b.len().checked_sub(4) else {
        return Err(Malformed::new(0, "compressed data block without its length"));
    };
    let raw = read_u32(b, at).unwrap_or(0) as usize;
    // LZ4 expands at most 255-fold: a larger claim is damage, not worth allocating.
    if raw > MAX_RAW_LEN || raw > at.saturating_mul(255).saturating_add(16) {
        return Err(Malformed::new(at as u64, format!("block of {raw} bytes")));
    }
    buf.clear();
    buf.resize(raw, 0);
    match lz4_flex::block::decompress_into(&b[..at], buf) {
        Ok(got) if got == raw => Ok(&buf[..]),
        Ok(got) => Err(Malformed::new(
            0,
            format!("block decompressed to {got} bytes, says {raw}"),
        )),
        Err(e) => Err(Malformed::new(
            0,
            format!("LZ4 block does not decompress to its {raw} bytes: {e}"),
        )),
    }
}

/// A parsed block payload (from [`unpack`]). Parsing checks the trailer; entries are
/// checked as they are read, every one by [`DataBlock::verify`].
#[derive(Debug, Clone, Copy)]
pub struct DataBlock<'a> {
    b: &'a [u8],
    entries_end: usize,
    restarts_at: usize,
    slots_at: usize,
    base_ts: u64,
    n: usize,
    m: usize,
    interval: usize,
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

impl<'a> BlockCell<'a> {
    /// Byte-wise order of this cell's key against `key`.
    #[inline]
    pub fn cmp_key(&self, key: &[u8]) -> Ordering {
        let p = self.prefix.len().min(key.len());
        match self.prefix[..p].cmp(&key[..p]) {
            Ordering::Equal if p < self.prefix.len() => Ordering::Greater,
            Ordering::Equal => self.suffix.cmp(&key[p..]),
            o => o,
        }
    }

    /// Key length.
    pub fn key_len(&self) -> usize {
        self.prefix.len() + self.suffix.len()
    }

    /// Write the key into `out` (cleared first).
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
    /// Parse a payload's trailer and check that its regions fit.
    pub fn parse(b: &'a [u8]) -> Result<Self, Malformed> {
        let len = b.len();
        let Some(t) = len.checked_sub(TRAILER) else {
            return Err(Malformed::new(0, format!("data block payload of {len} bytes")));
        };
        let base_ts = read_u64(b, t).unwrap_or(0);
        let n = read_u16(b, t + 8).unwrap_or(0) as usize;
        let m = read_u16(b, t + 10).unwrap_or(0) as usize;
        let interval = b[t + 12] as usize;
        let bad = |at: usize, why: String| Err(Malformed::new(at as u64, why));
        if n == 0 || n > MAX_ENTRIES {
            return bad(t + 8, format!("data block of {n} entries"));
        }
        if m != hash_slots(n) {
            return bad(t + 10, format!("{m} hash slots for {n} entries"));
        }
        if interval == 0 || interval > MAX_ENTRIES {
            return bad(t + 12, format!("group interval {interval}"));
        }
        let groups = n.div_ceil(interval);
        let slots_at = t - m.min(t);
        let Some(restarts_at) = slots_at.checked_sub(groups * 4).filter(|_| m <= t) else {
            return bad(t + 8, format!("{groups} groups and {m} slots in {t} bytes"));
        };
        Ok(DataBlock {
            b,
            entries_end: restarts_at,
            restarts_at,
            slots_at,
            base_ts,
            n,
            m,
            interval,
        })
    }

    /// Entries in the block.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Entries per group.
    pub fn interval(&self) -> usize {
        self.interval
    }

    /// Never true: a block holds at least one entry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes of the entries region (the rest of the payload is the block's index).
    pub fn entries_len(&self) -> usize {
        self.entries_end
    }

    /// The entry starting at `at`, its key's first `prefix` bytes given (its group
    /// head's, or empty for a head).
    #[inline]
    pub fn cell_at(&self, at: usize, head: &'a [u8]) -> Result<BlockCell<'a>, Malformed> {
        let b = &self.b[..self.entries_end];
        let bad = |off: usize, why: &str| Malformed::new(off as u64, why.to_string());
        let first = *b.get(at).ok_or_else(|| bad(at, "entry past the block's entries"))?;
        let mut p = at + 1;
        let mut next = |what: &str| -> Result<u64, Malformed> {
            // Only the shortest encoding: one cell, one form (`verify` is canonical).
            let (v, used) = b
                .get(p..)
                .and_then(varint::get)
                .filter(|&(v, used)| used == 1 || used == varint::len(v))
                .ok_or_else(|| bad(p, what))?;
            p += used;
            Ok(v)
        };
        let mut shared = (first >> 2) as u64;
        if shared == SHARED_INLINE as u64 {
            shared = shared.saturating_add(next("truncated or bad shared length")?);
        }
        let suffix_len = next("truncated or bad key suffix length")?;
        let val_len = next("truncated or bad value length")?;
        let ts_delta = next("truncated or bad timestamp")?;
        let zig = if first & EXPIRES != 0 { next("truncated or bad expiry")? } else { 0 };
        if shared > head.len() as u64 {
            return Err(bad(at, &format!("shares {shared} bytes of a {}-byte key", head.len())));
        }
        let key_len = shared.saturating_add(suffix_len);
        if key_len == 0 || key_len > MAX_KEY_LEN as u64 {
            return Err(bad(at, &format!("key length {key_len} out of range")));
        }
        if val_len > MAX_VALUE_LEN as u64 || (first & TOMBSTONE != 0 && val_len != 0) {
            return Err(bad(at, &format!("value length {val_len} out of range")));
        }
        let ts = self.base_ts.checked_add(ts_delta).ok_or_else(|| bad(at, "timestamp overflows"))?;
        let expires = ts.wrapping_add(unzigzag(zig) as u64);
        if first & EXPIRES != 0 && expires == 0 {
            return Err(bad(at, "expiry flag with an expiry of 0"));
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
            tombstone: first & TOMBSTONE != 0,
            expires: if first & EXPIRES != 0 { expires } else { 0 },
            at,
            end,
        })
    }

    /// The first entry of group `g`, whose key is whole.
    fn head(&self, g: usize) -> Result<BlockCell<'a>, Malformed> {
        let off = self.restarts_at + g * 4;
        let at = read_u32(self.b, off).map(|a| a as usize);
        let at = at.filter(|&a| a < self.entries_end).ok_or_else(|| {
            Malformed::new(off as u64, format!("group {g} starts past the entries"))
        })?;
        self.cell_at(at, &[])
    }

    /// Entry `i` (`i < len()`).
    pub fn entry(&self, i: usize) -> Result<BlockCell<'a>, Malformed> {
        if i >= self.n {
            return Err(Malformed::new(0, format!("entry {i} of a block of {}", self.n)));
        }
        self.skip(self.head(i / self.interval)?, i % self.interval)
    }

    /// Entry `i`, which starts at `at` (the end of entry `i - 1`): a walk's next step,
    /// which decodes the group head only to take its key.
    #[inline]
    pub fn cell_following(&self, i: usize, at: usize) -> Result<BlockCell<'a>, Malformed> {
        let head = self.head(i / self.interval)?;
        if i % self.interval == 0 {
            return Ok(head);
        }
        self.cell_at(at, head.suffix)
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
        let mut s = home_slot(h, self.m);
        for _ in 0..self.m {
            match self.b[self.slots_at + s] as usize {
                0 => return Ok(None),
                o if o > self.n => {
                    let at = (self.slots_at + s) as u64;
                    return Err(Malformed::new(at, format!("slot names entry {o} of {}", self.n)));
                }
                o => {
                    let c = self.entry(o - 1)?;
                    if c.cmp_key(key) == Ordering::Equal {
                        return Ok(Some(c));
                    }
                }
            }
            s = if s + 1 == self.m { 0 } else { s + 1 };
        }
        Ok(None)
    }

    /// The ordinal of the first entry whose key is at or above `key` (`len()` if none).
    pub fn lower_bound(&self, key: &[u8]) -> Result<usize, Malformed> {
        // The last group whose head is at or below `key`.
        let (mut lo, mut hi) = (0, self.n.div_ceil(self.interval));
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            match self.head(mid)?.cmp_key(key) {
                Ordering::Greater => hi = mid,
                _ => lo = mid,
            }
        }
        let head = self.head(lo)?;
        let mut c = head;
        let mut i = lo * self.interval;
        loop {
            if c.cmp_key(key) != Ordering::Less {
                return Ok(i);
            }
            i += 1;
            if i == self.n || i % self.interval == 0 {
                return Ok(i);
            }
            c = self.cell_at(c.end, head.suffix)?;
        }
    }

    /// The entries from ordinal `i` on, in order.
    pub fn cells_from(&self, i: usize) -> Cells<'a> {
        Cells {
            blk: *self,
            next: i,
            at: None,
            head: &[],
        }
    }
}

/// The entries of a block in order, from some ordinal on ([`DataBlock::cells_from`]).
#[derive(Debug, Clone)]
pub struct Cells<'a> {
    blk: DataBlock<'a>,
    next: usize,
    /// Where entry `next` starts, once known (within the current group).
    at: Option<usize>,
    /// The current group's first key.
    head: &'a [u8],
}

impl<'a> Iterator for Cells<'a> {
    type Item = Result<(usize, BlockCell<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        let i = self.next;
        if i >= self.blk.n {
            return None;
        }
        match self.step(i) {
            Ok(c) => {
                self.next = i + 1;
                self.at = Some(c.end);
                Some(Ok((i, c)))
            }
            Err(e) => {
                self.next = self.blk.n;
                Some(Err(e))
            }
        }
    }
}

impl<'a> Cells<'a> {
    fn step(&mut self, i: usize) -> Result<BlockCell<'a>, Malformed> {
        let within = i % self.blk.interval;
        match self.at {
            Some(at) if within != 0 => self.blk.cell_at(at, self.head),
            _ => {
                let head = self.blk.head(i / self.blk.interval)?;
                self.head = head.suffix;
                self.blk.skip(head, within)
            }
        }
    }
}
