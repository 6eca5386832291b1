//! The metadata component (`-Meta.db`): statistics, the sparse summary of index blocks,
//! and the filter. Read whole into memory at open.
//!
//! ```text
//! body:
//!   entry_count, tombstone_count, min_ts, max_ts, data_len, index_len   varints
//!   min_key, max_key                                                    varint len + bytes
//!   block_count varint; per block: key (varint len + bytes), offset varint, len varint
//!     (format 7: the offset's distance from the previous block's end, and a data
//!     block's key after the first is a separator, see below)
//!   filter_len varint, filter bytes (see filter.rs)
//!   page index (version 3 only): page_count varint; per entry: first_key (varint len +
//!     bytes), offset delta varint
//!   [range tombstones (see ranges.rs), present only when the segment holds any]
//!   [0 u8, expiring_count varint (>= 1), min_expires varint (>= 1): present only when
//!    the segment holds a cell with an expiry (TTL)]
//!   crc u32 LE of the body above
//! footer (kind 3, count 0)
//! ```
//!
//! `data_len` and `index_len` are the lengths of the data and index files, footers
//! included. The summary's blocks follow each other from offset 0 and cover the index
//! body (to format 3) or the data body (from format 4) exactly, but that from format 6
//! a data block may follow fewer than `data_block::PAGE` bytes of padding; their keys
//! are strictly ascending. A block's key is its first key, but from format 7 a data
//! block's after the first is [`separator`]: the shortest prefix of its first key above
//! the last key of the block before (RocksDB's index keys are such separators), so the
//! summary keeps what tells blocks apart rather than whole keys (on the YCSB runner's
//! 16-byte random keys about 3 bytes of 16). With no cells, `min_ts`,
//! `max_ts` and both keys are zero or empty and there are no blocks.
//!
//! The page index (format version 3) is described in `pages.rs`.
//!
//! The expiry block (TTL) starts with a 0 byte, which no range tombstone block starts
//! with (it is written only when non-empty: its count is at least 1). A meta without
//! it (every segment written before TTL, and every segment holding no expiring cell)
//! has `expiring_count` and `min_expires` 0. A build from before TTL refuses a meta
//! holding it (an empty range block, then "trailing bytes in meta body"), never
//! misreads it.

use super::filter::Filter;
use super::footer::FOOTER_LEN;
use super::ranges::RangeTombstones;
use super::{checksum, key_prefix, read_u32, varint, Malformed};

/// Statistics of one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SegmentStats {
    /// Records (including tombstones).
    pub entry_count: u64,
    /// Tombstones among them.
    pub tombstone_count: u64,
    /// Smallest write timestamp.
    pub min_ts: u64,
    /// Largest write timestamp.
    pub max_ts: u64,
    /// Length of the data file.
    pub data_len: u64,
    /// Length of the index file.
    pub index_len: u64,
    /// Smallest key.
    pub min_key: Vec<u8>,
    /// Largest key.
    pub max_key: Vec<u8>,
    /// Cells with an expiry (TTL): live expiring cells and tombstones made from expired
    /// ones.
    pub expiring_count: u64,
    /// The smallest expiry among them (0 with none): a major compaction rewrites a sole
    /// segment once it is past, to turn expired cells into tombstones.
    pub min_expires: u64,
}

impl SegmentStats {
    /// Statistics of no cell yet, ready for [`SegmentStats::count_cell`].
    pub fn counting() -> SegmentStats {
        SegmentStats {
            min_ts: u64::MAX,
            ..SegmentStats::default()
        }
    }

    /// Count one more cell, whose key follows every key counted so far: what a writer
    /// records and `verify` counts again from the cells (`max_key` is the caller's).
    pub fn count_cell(&mut self, key: &[u8], ts: u64, tombstone: bool, expires: u64) {
        if self.entry_count == 0 {
            self.min_key = key.to_vec();
        }
        self.entry_count += 1;
        self.tombstone_count += tombstone as u64;
        if expires != 0 {
            self.expiring_count += 1;
            self.min_expires = match self.min_expires {
                0 => expires,
                m => m.min(expires),
            };
        }
        self.min_ts = self.min_ts.min(ts);
        self.max_ts = self.max_ts.max(ts);
    }
}

/// The sparse summary: first key and location of every index block, packed for cache
/// friendliness. Searches run over a dense array of 8-byte key prefixes (in memory only,
/// derived from the keys), touching the full keys only when prefixes tie. Equality
/// ignores the radix index, which is derived state.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    prefixes: Vec<u64>,
    keys: Vec<u8>,
    /// End of each block's first key in `keys`. A `usize`, not a `u32`: 65,536 blocks
    /// with 64 KiB first keys pass 4 GiB, and a narrower offset would wrap.
    key_ends: Vec<usize>,
    blocks: Vec<(u64, u32)>,
    /// Radix index over `radix_bits` bits of the prefixes, taken just below the
    /// `radix_shift` leading bits that every block's prefix shares: `radix[t]` is the
    /// first block whose bucket is >= t (empty until [`Summary::build_radix`]).
    radix: Vec<u32>,
    radix_bits: u32,
    radix_shift: u32,
}

/// Bucket of prefix `p` for a radix of `bits` bits below the `shift` shared leading bits.
#[inline]
fn radix_bucket(p: u64, shift: u32, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        // bits >= 1 implies shift <= 63.
        ((p << shift) >> (64 - bits)) as usize
    }
}

/// Whether format `version`'s summary gives data blocks [`separator`]s and offsets as
/// distances from the block before.
pub fn separated(version: u16) -> bool {
    version >= 7
}

/// The summary key of format 7 for a data block whose first key is `first`, following
/// one whose last is `below` (`below < first`): the shortest prefix of `first` above
/// `below`, so at or below every key of its block and above every key before it.
pub fn separator<'a>(below: &[u8], first: &'a [u8]) -> &'a [u8] {
    let shared = below.iter().zip(first).take_while(|(a, b)| a == b).count();
    &first[..(shared + 1).min(first.len())]
}

impl PartialEq for Summary {
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.key_ends == other.key_ends && self.blocks == other.blocks
    }
}

impl Eq for Summary {}

impl Summary {
    /// Add a block (in order).
    pub fn push(&mut self, first_key: &[u8], offset: u64, len: u32) {
        self.prefixes.push(key_prefix(first_key));
        self.keys.extend_from_slice(first_key);
        self.key_ends.push(self.keys.len());
        self.blocks.push((offset, len));
    }

    /// Number of index blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Key of block `i`: its first key, or from format 7 a data block's [`separator`]
    /// (at or below its first key, above every key before it).
    #[inline]
    pub fn first_key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.keys[start..self.key_ends[i]]
    }

    /// (offset, length) of block `i` in the index file.
    #[inline]
    pub fn block(&self, i: usize) -> (u64, u32) {
        self.blocks[i]
    }

    /// Build the radix index that narrows [`Self::block_for`] to about one block: 2^bits
    /// buckets (the next power of two at or above the block count, at most 2^16) over the
    /// bits just below those that the first and last block's prefixes share, so keys with
    /// a common prefix (big-endian integers, `user:` names) still spread over the
    /// buckets. Call once all blocks are pushed; until then searches cover every block.
    pub fn build_radix(&mut self) {
        let n = self.prefixes.len();
        if u32::try_from(n).is_err() {
            // Bucket bounds are u32 block indexes: past 2^32 blocks, search without them.
            return;
        }
        let (first, last) = match (self.prefixes.first(), self.prefixes.last()) {
            (Some(&f), Some(&l)) => (f, l),
            _ => (0, 0),
        };
        // Every prefix lies in [first, last], so all share these leading bits.
        let shift = (first ^ last).leading_zeros();
        let bits = n
            .next_power_of_two()
            .trailing_zeros()
            .min(16)
            .min(64 - shift);
        let mut radix = Vec::with_capacity((1usize << bits) + 1);
        let mut i = 0usize;
        for t in 0..=(1usize << bits) {
            while i < n && radix_bucket(self.prefixes[i], shift, bits) < t {
                i += 1;
            }
            radix.push(i as u32);
        }
        self.radix = radix;
        self.radix_bits = bits;
        self.radix_shift = shift;
    }

    /// The block that would hold `key`: the last whose key ([`Self::first_key`]) is <=
    /// `key`.
    #[inline]
    pub fn block_for(&self, key: &[u8]) -> Option<usize> {
        let p = key_prefix(key);
        let (lo, hi) = match (
            self.radix.is_empty(),
            self.prefixes.first(),
            self.prefixes.last(),
        ) {
            (false, Some(&first), Some(&last)) => {
                if p < first {
                    // A smaller prefix means a smaller key: before the first block.
                    return None;
                }
                if p > last {
                    return Some(self.prefixes.len() - 1);
                }
                // first <= p <= last: p shares the leading bits the buckets skip.
                let t = radix_bucket(p, self.radix_shift, self.radix_bits);
                (self.radix[t] as usize, self.radix[t + 1] as usize)
            }
            _ => (0, self.prefixes.len()),
        };
        let prefixes = &self.prefixes[lo..hi];
        if prefixes.is_empty() {
            return lo.checked_sub(1);
        }
        // Branch-free search for the last block whose prefix is <= p.
        let (mut base, mut size) = (0usize, prefixes.len());
        while size > 1 {
            let half = size / 2;
            let mid = base + half;
            base = if prefixes[mid] <= p { mid } else { base };
            size -= half;
        }
        match prefixes[base].cmp(&p) {
            std::cmp::Ordering::Less => Some(lo + base),
            std::cmp::Ordering::Greater => (lo + base).checked_sub(1), // base == 0
            std::cmp::Ordering::Equal => {
                // Prefixes tie (keys sharing their first 8 bytes): among the run of equal
                // prefixes ending at `base`, compare whole keys.
                let (mut a, mut b) = (prefixes[..=base].partition_point(|&x| x < p), base + 1);
                while a < b {
                    let mid = a + (b - a) / 2;
                    if self.first_key(lo + mid) <= key {
                        a = mid + 1;
                    } else {
                        b = mid;
                    }
                }
                (lo + a).checked_sub(1)
            }
        }
    }

    /// Bytes of memory held.
    pub fn size_bytes(&self) -> usize {
        self.prefixes.len() * 8
            + self.keys.len()
            + self.key_ends.len() * std::mem::size_of::<usize>()
            + self.blocks.len() * 16
            + self.radix.len() * 4
    }
}

/// Everything in a meta component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Statistics.
    pub stats: SegmentStats,
    /// Index block summary.
    pub summary: Summary,
    /// Key filter.
    pub filter: Filter,
    /// The page index (format version 3; `None` in version 2 metas): per data page a
    /// record starts in, the first such record's key, offset and span, in the same
    /// packed form as the summary.
    pub pages: Option<Summary>,
    /// Range tombstones (an optional block after the filter: a meta without it, as
    /// written before range deletes, has none; a build older than range deletes
    /// refuses a meta holding it as "trailing bytes", never misreads it).
    pub ranges: RangeTombstones,
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint::put(out, b.len() as u64);
    out.extend_from_slice(b);
}

impl Meta {
    /// Encode the body and its checksum for format `version` (the caller appends the
    /// footer of that version).
    pub fn encode(&self, version: u16, out: &mut Vec<u8>) {
        let start = out.len();
        let s = &self.stats;
        for v in [
            s.entry_count,
            s.tombstone_count,
            s.min_ts,
            s.max_ts,
            s.data_len,
            s.index_len,
        ] {
            varint::put(out, v);
        }
        put_bytes(out, &s.min_key);
        put_bytes(out, &s.max_key);
        varint::put(out, self.summary.len() as u64);
        let mut end = 0;
        for i in 0..self.summary.len() {
            put_bytes(out, self.summary.first_key(i));
            let (off, len) = self.summary.block(i);
            // Blocks ascend (the writer's are; a hand-built summary that does not
            // encodes a meta its reader refuses, never a panic).
            let at = if separated(version) { off.saturating_sub(end) } else { off };
            varint::put(out, at);
            varint::put(out, len as u64);
            end = off + u64::from(len);
        }
        let mut fb = Vec::new();
        self.filter.encode(&mut fb);
        put_bytes(out, &fb);
        if let Some(pages) = &self.pages {
            super::pages::encode(pages, out);
        }
        if !self.ranges.is_empty() {
            self.ranges.encode(out);
        }
        if s.expiring_count != 0 {
            out.push(0);
            varint::put(out, s.expiring_count);
            varint::put(out, s.min_expires);
        }
        let crc = checksum(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Decode a body (everything before the footer) of format `version` (the footer's),
    /// checking the checksum, that the summary is ordered and tiles the file it indexes
    /// (from format 6 with gaps of less than a page before data blocks; from format 7
    /// offsets are distances from the block before), and that the
    /// page index is ordered and inside the data body.
    pub fn decode(b: &[u8], version: u16) -> Result<Meta, Malformed> {
        if b.len() < 4 {
            return Err(Malformed::new(0, "meta body too short"));
        }
        let body = b.len() - 4;
        if read_u32(b, body) != Some(checksum(&b[..body])) {
            return Err(Malformed::new(body as u64, "meta checksum mismatch"));
        }
        let mut c = Cursor {
            b: &b[..body],
            pos: 0,
        };
        let mut nums = [0u64; 6];
        for n in nums.iter_mut() {
            *n = c.varint("statistics")?;
        }
        let [entry_count, tombstone_count, min_ts, max_ts, data_len, index_len] = nums;
        let min_key = c.bytes("min key")?.to_vec();
        let max_key = c.bytes("max key")?.to_vec();
        let nblocks = c.varint("block count")?;
        if nblocks > entry_count || nblocks > (body as u64) {
            return Err(Malformed::new(
                c.pos as u64,
                format!("block count {nblocks} implausible"),
            ));
        }
        let mut summary = Summary::default();
        let mut expect_off = 0u64;
        for i in 0..nblocks as usize {
            let at = c.pos as u64;
            let key = c.bytes("summary key")?;
            let off = c.varint("block offset")?;
            let off = if separated(version) { expect_off.saturating_add(off) } else { off };
            let len = c.varint("block length")?;
            // Format 6 may pad before a data block to start it on a page.
            let gap = off.wrapping_sub(expect_off);
            let padded = version >= 6 && off >= expect_off && gap < super::data_block::PAGE;
            if (off != expect_off && !padded) || len == 0 || len > u32::MAX as u64 {
                return Err(Malformed::new(at, format!("index block {i} at {off}+{len} does not follow the previous one (expected offset {expect_off})")));
            }
            if i > 0 && summary.first_key(i - 1) >= key {
                return Err(Malformed::new(
                    at,
                    format!("summary key of block {i} out of order"),
                ));
            }
            summary.push(key, off, len as u32);
            expect_off = off + len;
        }
        check_tiling(version, expect_off, nblocks, data_len, index_len, c.pos)?;
        summary.build_radix();
        let at = c.pos as u64;
        let filter = Filter::decode(c.bytes("filter")?).map_err(|m| m.at(at))?;
        let pages = if version == 3 {
            let body_len = data_len.saturating_sub(FOOTER_LEN as u64);
            Some(super::pages::decode(&mut c, entry_count, body_len, &min_key)?)
        } else {
            None
        };
        let mut ranges = RangeTombstones::new();
        if c.pos < body && c.b[c.pos] != 0 {
            let at = c.pos;
            let (r, n) = RangeTombstones::decode(&c.b[at..]).map_err(|m| m.at(at as u64))?;
            ranges = r;
            c.pos += n;
        }
        let (mut expiring_count, mut min_expires) = (0, 0);
        if c.pos < body && c.b[c.pos] == 0 {
            let at = c.pos as u64;
            c.pos += 1;
            expiring_count = c.varint("expiring cell count")?;
            min_expires = c.varint("smallest expiry")?;
            if expiring_count == 0 || min_expires == 0 || expiring_count > entry_count {
                return Err(Malformed::new(at, "expiry statistics out of range"));
            }
        }
        if c.pos != body {
            return Err(Malformed::new(c.pos as u64, "trailing bytes in meta body"));
        }
        Ok(Meta {
            stats: SegmentStats {
                entry_count,
                tombstone_count,
                min_ts,
                max_ts,
                data_len,
                index_len,
                min_key,
                max_key,
                expiring_count,
                min_expires,
            },
            summary,
            filter,
            pages,
            ranges,
        })
    }
}

/// The summary's blocks (ending at `blocks_end`) cover exactly what they index: the
/// index body up to version 3, the data body from version 4, whose index file holds
/// its footer only.
fn check_tiling(
    version: u16,
    blocks_end: u64,
    nblocks: u64,
    data_len: u64,
    index_len: u64,
    at: usize,
) -> Result<(), Malformed> {
    let footer = super::footer::FOOTER_LEN as u64;
    let (what, len) = if version >= 4 {
        if index_len != footer {
            let why = format!("index file of {index_len} bytes in format {version}");
            return Err(Malformed::new(at as u64, why));
        }
        ("data", data_len)
    } else {
        ("index", index_len)
    };
    if blocks_end != len.saturating_sub(footer) && !(nblocks == 0 && len == footer) {
        let why = format!(
            "{what} blocks cover {blocks_end} bytes, {what} body is {}",
            len.saturating_sub(footer)
        );
        return Err(Malformed::new(at as u64, why));
    }
    Ok(())
}

/// A reading position in a meta body.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn varint(&mut self, what: &str) -> Result<u64, Malformed> {
        let (v, n) = varint::get(&self.b[self.pos..])
            .ok_or_else(|| Malformed::new(self.pos as u64, format!("bad varint in {what}")))?;
        self.pos += n;
        Ok(v)
    }

    pub(super) fn bytes(&mut self, what: &str) -> Result<&'a [u8], Malformed> {
        let at = self.pos;
        let n = self.varint(what)? as usize;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| Malformed::new(at as u64, format!("{what} runs past the end")))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn block_for_is_the_last_block_starting_at_or_before_the_key(
            firsts in proptest::collection::btree_set(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(0xff)], 0..10), 0..40),
            probes in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(0xff)], 0..10), 0..40),
        ) {
            let firsts: Vec<Vec<u8>> = firsts.into_iter().collect();
            let mut s = Summary::default();
            for (i, k) in firsts.iter().enumerate() {
                s.push(k, i as u64 * 10, 10);
            }
            let mut indexed = s.clone();
            indexed.build_radix();
            for p in probes.iter().chain(&firsts) {
                let want = firsts.iter().rposition(|f| f <= p);
                prop_assert_eq!(s.block_for(p), want, "{:?}", p);
                prop_assert_eq!(indexed.block_for(p), want, "radix: {:?}", p);
            }
        }

        /// A separator is the shortest prefix of the key above it that is above the key
        /// below: nothing between the two blocks' keys is sent to the wrong block.
        #[test]
        fn separators_are_the_shortest_prefix_between(
            keys in proptest::collection::btree_set(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), any::<u8>()], 1..12),
                2..3),
        ) {
            let (below, first) = (keys.first().unwrap(), keys.last().unwrap());
            let s = separator(below, first);
            prop_assert!(first.starts_with(s));
            prop_assert!(below.as_slice() < s && s <= first.as_slice());
            prop_assert!(below.as_slice() >= &s[..s.len() - 1], "no shorter prefix is above");
        }

        #[test]
        fn block_for_with_integer_keys_sharing_leading_bits(
            base in any::<u64>(),
            span_bits in 0u32..40,
            firsts in proptest::collection::btree_set(any::<u64>(), 1..300),
            probes in proptest::collection::vec(any::<u64>(), 0..100),
            tail in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mask = if span_bits == 0 { 0 } else { u64::MAX >> (64 - span_bits) };
            let key = |x: u64| {
                let mut k = (base & !mask | x & mask).to_be_bytes().to_vec();
                k.extend_from_slice(&tail);
                k
            };
            let firsts: Vec<Vec<u8>> = firsts
                .iter()
                .map(|&x| key(x))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut s = Summary::default();
            for (i, k) in firsts.iter().enumerate() {
                s.push(k, i as u64 * 10, 10);
            }
            s.build_radix();
            let outside = [0u64.to_be_bytes().to_vec(), u64::MAX.to_be_bytes().to_vec(), vec![], vec![0xff; 9]];
            for p in probes.iter().map(|&x| key(x)).chain(firsts.iter().cloned()).chain(outside) {
                let want = firsts.iter().rposition(|f| f <= &p);
                prop_assert_eq!(s.block_for(&p), want, "{:?}", p);
            }
        }
    }

    /// `key_ends` were `u32`: past 4 GiB of first keys (65,536 blocks with 64 KiB keys)
    /// they wrapped, and `first_key` returned the wrong key or panicked.
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    #[test]
    fn first_keys_past_4_gib_of_summary_keys() {
        // The keys are zeroed memory that is never written: the test takes address
        // space (4 GiB, then 8 GiB after the push grows it), not RAM. Skipped where even
        // that could be refused.
        let total = crate::io::memlimit::physical_memory().unwrap_or(0);
        if total < 8 << 30 {
            eprintln!("skipped: needs 8 GiB of memory to reserve address space");
            return;
        }
        let big = u32::MAX as usize;
        // One block whose first key is u32::MAX zero bytes.
        let mut s = Summary {
            keys: vec![0u8; big],
            ..Summary::default()
        };
        s.prefixes.push(0);
        s.key_ends.push(big as _);
        s.blocks.push((0, 1));
        s.push(b"\x01next", 1, 1);
        assert_eq!(s.first_key(0).len(), big);
        assert_eq!(s.first_key(1), b"\x01next");
        assert_eq!(s.block_for(b"\x01next"), Some(1));
        assert_eq!(s.block_for(b"\x00zzz"), Some(0));
    }

    /// Keys that share their leading bytes (big-endian integers) still spread over the
    /// buckets: a lookup searches a handful of blocks, not all of them.
    #[test]
    fn radix_spreads_keys_with_a_common_prefix() {
        let mut s = Summary::default();
        let n = 7_000u64;
        for i in 0..n {
            let mut k = (i * 270).to_be_bytes().to_vec();
            k.extend_from_slice(&[7; 8]);
            s.push(&k, i * 4096, 4096);
        }
        s.build_radix();
        let widest = s.radix.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(widest <= 2, "a bucket holds {widest} of {n} blocks");
        assert_eq!(s.block_for(&(270u64 * 5 + 3).to_be_bytes()), Some(5));
    }
}
