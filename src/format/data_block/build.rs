//! Building data blocks: cells are staged, then encoded and packed (optionally LZ4)
//! into a stored block (the layout is in the parent module's documentation).

use super::held::{self, Held, Same, Shared};
use super::{
    common_prefix, hash_slots, start_width, verify, zigzag, Compression, Layout, DEFAULT_INTERVAL,
    MAX_ENTRIES, MAX_RAW_LEN, SHARED_INLINE,
};
use super::{trailer_len, PACKED};
use crate::format::record::{flags_of, RecordRef, EXPIRES};
use crate::format::{checksum, varint, MAX_KEY_LEN};

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
    /// The length shared with the group's head.
    shared: usize,
}

/// What an entry takes but for the fields a block may hold once (its suffix length,
/// value length and timestamp delta), those two lengths' bytes, and its shared length:
/// see [`BlockBuilder::stored_len`].
#[derive(Debug, Clone, Copy)]
struct EntrySize {
    shared: usize,
    fixed: usize,
    klen: usize,
    vlen: usize,
}

/// What the staged entries take, and what they share (so a format 7 block may hold it
/// once): enough to know the block's stored length before it is encoded.
#[derive(Debug, Clone, Copy)]
struct Tally {
    /// The entries' bytes but for their suffix lengths, value lengths and timestamp
    /// deltas ([`EntrySize::fixed`]).
    fixed: usize,
    /// The suffix lengths' and value lengths' bytes.
    klen: usize,
    vlen: usize,
    /// The smallest and largest timestamps staged.
    base_ts: u64,
    max_ts: u64,
    /// The timestamp deltas' bytes, from `base_ts`.
    ts_bytes: usize,
    /// The keys' lengths, and the live cells' values'.
    keys: Same,
    vals: Same,
    /// Every cell is live, without expiry.
    plain: bool,
    /// The first and last keys' common prefix.
    lcp: usize,
}

impl Tally {
    const EMPTY: Tally = Tally {
        fixed: 0,
        klen: 0,
        vlen: 0,
        base_ts: u64::MAX,
        max_ts: 0,
        ts_bytes: 0,
        keys: Same::Unseen,
        vals: Same::Unseen,
        plain: true,
        lcp: 0,
    };

    /// The fields a block of `layout` holds once for these entries.
    fn held(&self, layout: Layout) -> Held {
        let shared = Shared {
            keys: self.keys,
            vals: self.vals,
            min_ts: self.base_ts,
            max_ts: self.max_ts,
            plain: self.plain,
            lcp: self.lcp,
        };
        held::choose(layout, &shared)
    }

    /// The bytes of these `n` entries in a block of `layout` holding `h`, and its
    /// trailer's.
    fn entries(&self, layout: Layout, h: &Held, n: usize) -> (usize, usize) {
        if h.flags & held::FIXED != 0 {
            return (n * h.width, trailer_len(layout, h));
        }
        let mut bytes = self.fixed;
        bytes += if h.flags & held::KEY == 0 { self.klen } else { 0 };
        bytes += if h.flags & held::VAL == 0 { self.vlen } else { 0 };
        bytes += if h.flags & held::TS == 0 { self.ts_bytes } else { 0 };
        (bytes, trailer_len(layout, h))
    }
}

/// Builds one data block at a time: cells are staged (the block's smallest timestamp
/// must be known before any is encoded), then [`BlockBuilder::finish`] writes them.
#[derive(Debug, Clone)]
pub struct BlockBuilder {
    interval: usize,
    layout: Layout,
    keys: Vec<u8>,
    vals: Vec<u8>,
    cells: Vec<Staged>,
    payload: Vec<u8>,
    packed: Vec<u8>,
    /// What the staged entries take.
    tally: Tally,
}

impl Default for BlockBuilder {
    fn default() -> Self {
        BlockBuilder::new(DEFAULT_INTERVAL, Layout::Entries)
    }
}

impl BlockBuilder {
    /// A builder cutting groups of `interval` entries (at least 1), writing `layout`.
    pub fn new(interval: usize, layout: Layout) -> Self {
        BlockBuilder {
            interval: interval.clamp(1, MAX_ENTRIES),
            layout,
            keys: Vec::new(),
            vals: Vec::new(),
            cells: Vec::new(),
            payload: Vec::new(),
            packed: Vec::new(),
            tally: Tally::EMPTY,
        }
    }

    /// Stage a cell whose key hashes to `h` (`key_hash`). Keys must arrive in strictly
    /// ascending order, at most [`MAX_ENTRIES`] per block (the writer checks both).
    pub fn add(&mut self, r: &RecordRef<'_>, h: u64) {
        assert!(self.cells.len() < MAX_ENTRIES, "a data block holds {MAX_ENTRIES} cells");
        debug_assert!(!r.key.is_empty() && r.key.len() <= MAX_KEY_LEN);
        debug_assert!(!r.tombstone || r.value.is_empty());
        debug_assert!(self.last_key().is_none_or(|k| k < r.key));
        let sized = self.size_of(r);
        self.tally = self.tally_with(r, sized);
        self.keys.extend_from_slice(r.key);
        self.vals.extend_from_slice(r.value);
        self.cells.push(Staged {
            key_end: self.keys.len(),
            val_end: self.vals.len(),
            ts: r.ts,
            flags: flags_of(r.tombstone, r.expires),
            expires: r.expires,
            hash: h,
            shared: sized.shared,
        });
    }

    /// Bytes [`Self::finish`] would append uncompressed for the cells staged: what a
    /// writer compares with its block size (exact, so it can cut a block at a page).
    pub fn stored_len(&self) -> usize {
        self.stored(self.cells.len(), &self.tally)
    }

    /// [`Self::stored_len`] once `r` is staged too, without staging it.
    pub fn stored_len_with(&self, r: &RecordRef<'_>) -> usize {
        self.stored(self.cells.len() + 1, &self.tally_with(r, self.size_of(r)))
    }

    /// The stored length of `n` entries of `tally`, uncompressed.
    fn stored(&self, n: usize, tally: &Tally) -> usize {
        if n == 0 {
            return 0;
        }
        let m = hash_slots(n);
        let h = tally.held(self.layout);
        let (entries, trailer) = tally.entries(self.layout, &h, n);
        let table = match self.layout {
            _ if h.flags & held::FIXED != 0 => 0,
            Layout::Groups => 4 * n.div_ceil(self.interval),
            _ => n * start_width(self.layout, entries + 2 * n + m + trailer),
        };
        entries + table + m + trailer + PACKED
    }

    /// The tally once `r`, of size `sized`, is staged too.
    fn tally_with(&self, r: &RecordRef<'_>, sized: EntrySize) -> Tally {
        let t = self.tally;
        let (base_ts, ts_bytes) = self.ts_after(r.ts);
        Tally {
            fixed: t.fixed + sized.fixed,
            klen: t.klen + sized.klen,
            vlen: t.vlen + sized.vlen,
            base_ts,
            max_ts: t.max_ts.max(r.ts),
            ts_bytes,
            keys: t.keys.and(r.key.len()),
            vals: if r.tombstone { t.vals } else { t.vals.and(r.value.len()) },
            plain: t.plain && !r.tombstone && r.expires == 0,
            lcp: match self.cells.is_empty() {
                true => r.key.len(),
                false => t.lcp.min(common_prefix(self.key(0), r.key)),
            },
        }
    }

    /// How `r` would be encoded as the next entry, but for its timestamp delta.
    fn size_of(&self, r: &RecordRef<'_>) -> EntrySize {
        let n = self.cells.len();
        let shared = if n % self.interval == 0 {
            0
        } else {
            common_prefix(self.key(n - n % self.interval), r.key)
        };
        let mut fixed = 1 + r.key.len() - shared + r.value.len();
        if shared >= SHARED_INLINE {
            fixed += varint::len((shared - SHARED_INLINE) as u64);
        }
        if r.expires != 0 {
            fixed += varint::len(zigzag(r.expires.wrapping_sub(r.ts) as i64));
        }
        EntrySize {
            shared,
            fixed,
            klen: varint::len((r.key.len() - shared) as u64),
            vlen: varint::len(r.value.len() as u64),
        }
    }

    /// The base timestamp and the timestamp deltas' bytes once a cell of `ts` is staged.
    fn ts_after(&self, ts: u64) -> (u64, usize) {
        let t = &self.tally;
        if ts >= t.base_ts {
            (t.base_ts, t.ts_bytes + varint::len(ts - t.base_ts))
        } else {
            let deltas = self.cells.iter().map(|c| varint::len(c.ts - ts)).sum::<usize>();
            (ts, deltas + 1)
        }
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
        self.tally = Tally::EMPTY;
        out.len() - start
    }

    fn encode_payload(&self, out: &mut Vec<u8>) {
        let n = self.cells.len();
        let base_ts = self.tally.base_ts;
        let once = self.tally.held(self.layout);
        if once.flags & held::FIXED != 0 {
            return self.encode_fixed(&once, out);
        }
        let mut starts = Vec::with_capacity(n);
        for i in 0..n {
            let c = self.cells[i];
            let key = self.key(i);
            starts.push(out.len() as u32);
            let shared = c.shared;
            let value = self.value(i);
            out.push(c.flags | (shared.min(SHARED_INLINE) as u8) << 2);
            if shared >= SHARED_INLINE {
                varint::put(out, (shared - SHARED_INLINE) as u64);
            }
            if once.flags & held::KEY == 0 {
                varint::put(out, (key.len() - shared) as u64);
            }
            if once.flags & held::VAL == 0 {
                varint::put(out, value.len() as u64);
            }
            if once.flags & held::TS == 0 {
                varint::put(out, c.ts - base_ts);
            }
            if c.flags & EXPIRES != 0 {
                varint::put(out, zigzag(c.expires.wrapping_sub(c.ts) as i64));
            }
            out.extend_from_slice(&key[shared..]);
            out.extend_from_slice(value);
        }
        let m = hash_slots(n);
        match self.layout {
            Layout::Groups => {
                for s in starts.iter().step_by(self.interval) {
                    out.extend_from_slice(&s.to_le_bytes());
                }
            }
            Layout::Entries | Layout::Held | Layout::Fixed => {
                let trailer = trailer_len(self.layout, &once);
                let w = start_width(self.layout, out.len() + 2 * n + m + trailer);
                for s in starts {
                    out.extend_from_slice(&s.to_le_bytes()[..w]);
                }
            }
        }
        self.put_slots(m, out);
        if self.layout.holds() {
            once.put_trailer(self.key(0), base_ts, n, self.interval, out);
            return;
        }
        out.extend_from_slice(&base_ts.to_le_bytes());
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(&(m as u16).to_le_bytes());
        out.push(self.interval as u8);
    }
}

impl BlockBuilder {
    /// Append the hash table of the staged keys, `m` slots.
    fn put_slots(&self, m: usize, out: &mut Vec<u8>) {
        let hashes: Vec<u64> = self.cells.iter().map(|c| c.hash).collect();
        out.extend_from_slice(&verify::table(&hashes, m));
    }

    /// [`Self::encode_payload`] of a block holding `once`, whose entries are fixed
    /// (`fixed.rs`): each its key past the held prefix, its timestamp delta and its
    /// value, then the hash slots and the trailer.
    fn encode_fixed(&self, once: &Held, out: &mut Vec<u8>) {
        let (n, base_ts) = (self.cells.len(), self.tally.base_ts);
        for i in 0..n {
            out.extend_from_slice(&self.key(i)[once.plen..]);
            out.extend_from_slice(&(self.cells[i].ts - base_ts).to_le_bytes()[..once.tsw]);
            out.extend_from_slice(self.value(i));
        }
        self.put_slots(hash_slots(n), out);
        once.put_trailer(self.key(0), base_ts, n, self.interval, out);
    }
}

/// Append `payload` to `out` as a stored block, compressed if asked and worth it
/// (`scratch` holds the compressed bytes meanwhile).
pub fn pack(payload: &[u8], compression: Compression, scratch: &mut Vec<u8>, out: &mut Vec<u8>) {
    let start = out.len();
    let len = match compression {
        Compression::None => None,
        _ if payload.len() > MAX_RAW_LEN => None,
        Compression::Lz4 => {
            scratch.resize(lz4_flex::block::get_maximum_output_size(payload.len()), 0);
            lz4_flex::block::compress_into(payload, scratch).ok()
        }
        Compression::Zstd => super::zstd_block::compress(payload, scratch).then_some(scratch.len()),
    };
    let code = match len {
        // Kept only when it shrinks the block by an eighth or more.
        Some(len) if len < payload.len() - payload.len() / 8 => {
            out.extend_from_slice(&scratch[..len]);
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            compression.code()
        }
        _ => {
            out.extend_from_slice(payload);
            Compression::None.code()
        }
    };
    out.push(code);
    let crc = checksum(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}
