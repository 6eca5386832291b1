//! Reading a segment through the resolved access modes.
//!
//! Open reads the meta component whole (statistics, summary, filter), checks both other
//! components' footers and lengths against it, and only then maps what the modes say to
//! map (invariant 6: lengths are validated before mapping). A point lookup hashes the key
//! once and costs: the filter (one cache line), a search of the in-memory summary, one
//! index block (its trailer, one or two hash slots, one entry), one record. Standard mode
//! reads the index block and the record with one positional read each, through a
//! per-thread reused buffer, so a warm `get` allocates nothing (or, with an index cache,
//! reads the index block from memory). Index block checksums are verified on first use
//! and remembered per block with the block's hash slot count, so later lookups start
//! loading the home slot together with the trailer and the filter line (prefetch hints
//! on mapped files). Records are verified on every read unless `crc_check_chance` (see
//! [`ReaderOptions`]) asks for fewer point reads to be checked; scans and
//! [`SegmentReader::verify`] always check.
//! Corruption errors name the file holding the bad bytes: a sound record that disagrees
//! with its index entry is the index's fault.
//!
//! A segment not expected to stay in memory ([`super::PointLookup::Pages`], format 3)
//! looks keys up in its page index instead of the index file: the filter, then the data
//! page that holds the key, whose records are walked in order (`reader/pages.rs`).

use std::cell::Cell;
use std::fs::File;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::block_cache::DataCache;
use super::index_cache::CachedIndex;
use super::residency::{OpenPlan, Opened, ReaderOptions, SegmentResidency};
use super::{Component, SegmentName};
use crate::config::{AccessMode, ResolvedModes};
use crate::error::{Error, Result};
use crate::format::footer::{Footer, Kind, FOOTER_LEN};
use crate::format::index_block::{home_slot_offset, IndexBlock, IndexEntry};
use crate::format::meta::{Meta, SegmentStats, Summary};
use crate::format::record::{self, RecordRef};
use crate::format::{key_hash, Malformed, MAX_KEY_LEN};
use crate::io::data_budget::DataReservation;
use crate::io::mapped::MapAdvice;
use crate::io::{MappedFile, PositionalFile};
use blocks::Unpacked;

pub(super) mod blocks;
mod pages;
mod records;
mod verify;

thread_local! {
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Scratch buffers larger than this are freed after use rather than kept by the thread:
/// the largest index block (`index_block_size` is at most 16 MiB, plus one entry of up
/// to 64 KiB of key) stays, so standard-mode gets never allocate; a buffer grown by a
/// larger value (up to 256 MiB) does not.
const SCRATCH_KEEP: usize = 17 << 20;

/// Borrow this thread's scratch buffer for `f` (re-entrant: a nested call gets a fresh
/// buffer). A buffer grown past [`SCRATCH_KEEP`] is dropped afterwards, so one big read
/// does not pin that much memory in every thread that ever made one.
#[inline]
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut buf = SCRATCH.with(|c| c.take());
    let r = f(&mut buf);
    if buf.capacity() <= SCRATCH_KEEP {
        SCRATCH.with(|c| c.set(buf));
    }
    r
}

/// One component, mapped or read positionally.
#[derive(Debug)]
pub(crate) enum Source {
    Mapped(MappedFile),
    Standard(PositionalFile),
}

impl Source {
    fn open(
        path: &Path,
        kind: Kind,
        expect_len: u64,
        count: u64,
        mode: AccessMode,
    ) -> Result<Source> {
        let file = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        if len != expect_len {
            return Err(Error::corrupt(
                path,
                len.min(expect_len),
                format!("file is {len} bytes, meta says {expect_len}"),
            ));
        }
        let pf = PositionalFile::new(file, path, len)?;
        if len < FOOTER_LEN as u64 {
            return Err(Error::corrupt(
                path,
                0,
                format!("file is {len} bytes, shorter than its footer"),
            ));
        }
        let mut fb = [0u8; FOOTER_LEN];
        pf.read_at(&mut fb, len - FOOTER_LEN as u64)?;
        let footer = Footer::decode(&fb, len, kind).map_err(|m| m.into_error(path))?;
        if footer.count != count {
            return Err(Error::corrupt(
                path,
                len - FOOTER_LEN as u64 + 12,
                format!("footer counts {} entries, meta says {count}", footer.count),
            ));
        }
        Ok(match mode {
            AccessMode::Standard => Source::Standard(pf),
            // Both kinds are read at random by gets: with the kernel's default advice a
            // fault on a file larger than memory reads up to `read_ahead_kb` around it
            // (8 MiB on some disks), so a get read megabytes. Scans ask for what they
            // walk into themselves (`SegmentIter`, `MappedFile::will_need`).
            AccessMode::Mmap => Source::Mapped(MappedFile::open_component(
                pf.file(),
                path,
                len,
                MapAdvice::Random,
            )?),
        })
    }

    pub(crate) fn mode(&self) -> AccessMode {
        match self {
            Source::Mapped(_) => AccessMode::Mmap,
            Source::Standard(_) => AccessMode::Standard,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Source::Mapped(m) => m.path(),
            Source::Standard(p) => p.path(),
        }
    }

    /// Hint that byte `off` will be read soon (mapped files only; a no-op otherwise).
    #[inline(always)]
    pub(crate) fn prefetch(&self, off: u64) {
        if let Source::Mapped(m) = self {
            crate::io::prefetch::prefetch_read(m.as_slice(), off as usize);
        }
    }

    /// Run `f` over bytes `[off, off+len)`, mapped in place or read into scratch.
    #[inline]
    pub(crate) fn with_bytes<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        match self {
            Source::Mapped(m) => {
                let s = usize::try_from(off)
                    .ok()
                    .and_then(|o| m.as_slice().get(o..o.checked_add(len)?))
                    .ok_or_else(|| {
                        Error::corrupt(
                            m.path(),
                            off,
                            format!("{len} bytes at {off} pass the end of the file"),
                        )
                    })?;
                f(s)
            }
            Source::Standard(p) => with_scratch(|buf| {
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                p.read_at(&mut buf[..len], off)?;
                f(&buf[..len])
            }),
        }
    }
}

/// An open segment. `Send + Sync`: any number of threads read at once without a lock.
#[derive(Debug)]
pub struct SegmentReader {
    name: SegmentName,
    dir: PathBuf,
    pub(crate) data: Source,
    index: Source,
    meta: Meta,
    /// The format version of the segment (its meta's footer): 4 stores data blocks.
    format: u16,
    /// Per index block: 0 until its checksum has been verified, then 1 + its number of
    /// hash slots (so later lookups can locate the slot before reading the trailer).
    checked: Box<[AtomicU32]>,
    /// Index blocks kept in memory when the index is read with positional reads.
    cached_index: Option<CachedIndex>,
    /// The store's data block cache, for point reads when the data is read with
    /// positional reads (`block_cache` module).
    data_cache: Option<DataCache>,
    /// The store's cache of decompressed blocks, for point reads of compressed blocks
    /// (`unpacked_cache` module; formats 4 to 8).
    unpacked: Option<Unpacked>,
    /// Whether point reads check record checksums (`crc_check_chance`).
    record_check: RecordCheck,
    /// Point reads and seeks search the page index, not the index file
    /// (`PointLookup::Pages`).
    paged: bool,
    pub(crate) residency: SegmentResidency,
    /// The bytes of a data file `auto` mapped, counted against the data map budget
    /// until the reader (and with it the map, dropped above) goes.
    _data_bytes: Option<DataReservation>,
}

/// How often a point read checks its record's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordCheck {
    Always,
    Never,
    /// Check when a per-thread pseudo-random u64 falls below this.
    Below(u64),
}

impl RecordCheck {
    fn from_chance(c: f64) -> RecordCheck {
        if c.is_nan() || c >= 1.0 {
            // NaN is refused by config validation; a reader never checks less than asked.
            RecordCheck::Always
        } else if c <= 0.0 {
            RecordCheck::Never
        } else {
            RecordCheck::Below((c * u64::MAX as f64) as u64)
        }
    }

    #[inline]
    fn roll(self) -> bool {
        match self {
            RecordCheck::Always => true,
            RecordCheck::Never => false,
            RecordCheck::Below(t) => next_random() < t,
        }
    }
}

/// A per-thread xorshift64* generator: cheap, and only decides which reads to check.
fn next_random() -> u64 {
    thread_local! {
        // Seeded per thread: `RandomState` keys are random per process and differ
        // between the states a thread creates, and the thread id is hashed in too.
        static STATE: Cell<u64> = Cell::new({
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new()
                .hash_one(std::thread::current().id())
                | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

impl SegmentReader {
    /// Open segment `name` in `dir` with the given modes.
    #[track_caller]
    pub fn open(dir: &Path, name: &SegmentName, modes: ResolvedModes) -> Result<SegmentReader> {
        Self::open_with(dir, name, modes, &ReaderOptions::default())
    }

    /// Open segment `name` in `dir` with the given modes and memory options (mapping
    /// budget, `lock_memory`, `huge_pages`; see [`ReaderOptions`]). In the modes that
    /// promise maps (`mmap`, `mmap_index_only`) the open fails where a map cannot be
    /// made: past the budget (`Error::MapBudgetExhausted`), or refused by the kernel
    /// under `lock_memory: all` (`Error::MapRefusedUnderLock`); `auto` reads such files
    /// with standard access instead. Locks and advice are best effort, reported by
    /// [`Self::residency`].
    #[track_caller]
    pub fn open_with(
        dir: &Path,
        name: &SegmentName,
        modes: ResolvedModes,
        opts: &ReaderOptions,
    ) -> Result<SegmentReader> {
        let meta_path = name.path(dir, Component::Meta);
        let bytes = std::fs::read(&meta_path).map_err(|e| Error::io("read", &meta_path, e))?;
        let len = bytes.len() as u64;
        let split = bytes.len().saturating_sub(FOOTER_LEN);
        let footer = Footer::decode(&bytes[split..], len, Kind::Meta)
            .map_err(|m| m.into_error(&meta_path))?;
        let meta =
            Meta::decode(&bytes[..split], footer.version).map_err(|m| m.into_error(&meta_path))?;
        let s = &meta.stats;
        let mut plan = OpenPlan::new(modes, s.data_len, opts)?;
        let (data_path, index_path) = (
            name.path(dir, Component::Data),
            name.path(dir, Component::Index),
        );
        let data = plan.open(plan.data_mode(), |m| {
            Source::open(&data_path, Kind::Data, s.data_len, s.entry_count, m)
        })?;
        let indexed = if footer.version >= 4 {
            0
        } else {
            s.entry_count
        };
        let index = plan.open(plan.index_mode(), |m| {
            Source::open(&index_path, Kind::Index, s.index_len, indexed, m)
        })?;
        let Opened {
            data,
            index,
            mut residency,
            data_bytes,
        } = plan.finish(data, index)?;
        let bytes = s.data_len.saturating_add(s.index_len);
        residency.point_lookup =
            super::residency::point_lookup(&residency, opts, bytes, meta.pages.is_some());
        let paged = residency.point_lookup == super::PointLookup::Pages;
        let checked = (0..meta.summary.len()).map(|_| AtomicU32::new(0)).collect();
        let cached_index = match (&index, &opts.index_cache) {
            // A block segment's summary (formats 4 to 8) lists data blocks: nothing to cache.
            (Source::Standard(_), Some(budget)) if footer.version < 4 => {
                CachedIndex::new(meta.summary.len(), budget)
            }
            _ => None,
        };
        let data_cache = match (&data, &opts.block_cache) {
            (Source::Standard(_), Some(cache)) => Some(DataCache::new(cache)),
            _ => None,
        };
        let unpacked = match &opts.unpacked_cache {
            Some(cache) if footer.version >= 4 => Some(Unpacked::new(cache)),
            _ => None,
        };
        Ok(SegmentReader {
            name: name.clone(),
            dir: dir.to_path_buf(),
            data,
            index,
            meta,
            format: footer.version,
            checked,
            cached_index,
            data_cache,
            unpacked,
            record_check: RecordCheck::from_chance(opts.crc_check_chance),
            paged,
            residency,
            _data_bytes: data_bytes,
        })
    }

    /// The segment's name.
    pub fn name(&self) -> &SegmentName {
        &self.name
    }

    /// The directory it was opened from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Statistics from the meta component.
    pub fn stats(&self) -> &SegmentStats {
        &self.meta.stats
    }

    /// The segment's range tombstones (empty for most segments: a cheap check).
    #[inline]
    pub fn range_tombstones(&self) -> &crate::format::ranges::RangeTombstones {
        &self.meta.ranges
    }

    /// Effective (data, index) access modes.
    pub fn modes(&self) -> (AccessMode, AccessMode) {
        (self.data.mode(), self.index.mode())
    }

    /// Bytes held in memory for the summary, the filter and per-block state (the index
    /// cache's blocks are counted separately: [`Self::index_cache_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.meta.summary.size_bytes()
            + self.meta.pages.as_ref().map_or(0, Summary::size_bytes)
            + self.meta.filter.size_bytes()
            + self.checked.len() * std::mem::size_of::<AtomicU32>()
            + self
                .cached_index
                .as_ref()
                .map_or(0, CachedIndex::overhead_bytes)
    }

    testing_pub! {
    /// The mapped files of this segment (for residency controls and stats).
    pub fn mapped_files(&self) -> impl Iterator<Item = &MappedFile> {
        [&self.data, &self.index]
            .into_iter()
            .filter_map(|s| match s {
                Source::Mapped(m) => Some(m),
                Source::Standard(_) => None,
            })
    }
    }

    /// The data component's bytes when it is mapped (`None` when it is read with
    /// positional reads). Values a mapped [`Self::get_with`] hands out lie inside it, and
    /// stay valid as long as this reader lives.
    #[inline(always)]
    pub(crate) fn mapped_data(&self) -> Option<&[u8]> {
        match &self.data {
            Source::Mapped(m) => Some(m.as_slice()),
            Source::Standard(_) => None,
        }
    }

    /// Length of the data body (records only, footer excluded).
    pub(crate) fn data_body_len(&self) -> u64 {
        self.meta.stats.data_len - FOOTER_LEN as u64
    }

    /// Could `key` be in this segment? False answers come from the filter alone.
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        key.len() <= MAX_KEY_LEN && self.meta.filter.may_contain(key_hash(key))
    }

    /// Start loading the filter's line for the key whose `key_hash` (xxh3-64) is `h`, for a
    /// [`Self::may_contain_hash`] soon after.
    #[inline]
    pub fn prefetch_filter(&self, h: u64) {
        self.meta.filter.prefetch(h);
    }

    /// Could the key whose `key_hash` (xxh3-64) is `h` be in this segment? The filter alone
    /// (no index work); the caller checks the key's length ([`Self::may_contain`]).
    #[inline]
    pub fn may_contain_hash(&self, h: u64) -> bool {
        self.meta.filter.may_contain(h)
    }

    /// Look up `key` and copy its cell out (allocates the value; see
    /// [`Self::get_with`] for the allocation-free form).
    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.get_with(key, |r| Entry::from(r))
    }

    /// Look up `key` and hand the borrowed cell to `f`. Allocation-free once warm, in
    /// every mode. Tombstones are returned (as cells with `tombstone = true`).
    #[inline]
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(RecordRef<'_>) -> R) -> Result<Option<R>> {
        if key.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        // One hash serves the filter and the index block's hash table.
        self.get_hashed(key, key_hash(key), f)
    }

    /// [`Self::get_with`] for a key whose `key_hash` (xxh3-64) is `h` (a table's point read
    /// hashes the key once for every memtable and segment it consults).
    #[inline]
    pub fn get_hashed<R>(
        &self,
        key: &[u8],
        h: u64,
        f: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Option<R>> {
        if key.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        debug_assert_eq!(h, key_hash(key));
        if self.has_blocks() {
            return self.get_in_blocks(key, h, f);
        }
        let found = if let Some(pages) = self.paged() {
            if !self.meta.filter.may_contain(h) {
                return Ok(None);
            }
            self.find_paged(pages, key)?
        } else {
            let block = self.prefetch_lookup(key, h);
            if !self.meta.filter.may_contain(h) {
                return Ok(None);
            }
            let Some(b) = block else {
                return Ok(None);
            };
            self.find_entry(b, key, h)?
        };
        let Some(loc) = found else {
            return Ok(None);
        };
        let check = self.record_check.roll();
        self.read_record(loc, Some(key), check, Via::Cache, f)
            .map(Some)
    }

    /// Start loading what a lookup of `key` (with hash `h`) reads, and return its index
    /// block. The filter's line and the index block's trailer do not depend on each
    /// other: start both loads, then wait for them (on a mapped index, two misses
    /// overlap).
    #[inline(always)]
    fn prefetch_lookup(&self, key: &[u8], h: u64) -> Option<usize> {
        self.meta.filter.prefetch(h);
        let block = self.meta.summary.block_for(key);
        if let Some(b) = block {
            let (off, len) = self.meta.summary.block(b);
            self.index.prefetch(off + u64::from(len).saturating_sub(12));
            // A block seen before: its home slot too, without waiting for the trailer.
            let m = self.checked[b].load(Ordering::Relaxed).saturating_sub(1) as usize;
            if let Some(s) = home_slot_offset(len as usize, m, h) {
                self.index.prefetch(off + s as u64);
            }
        }
        block
    }

    /// Where `key` (with hash `h`) has its record in index block `b`.
    fn find_entry(&self, b: usize, key: &[u8], h: u64) -> Result<Option<Located>> {
        let block_off = self.meta.summary.block(b).0;
        self.with_index_block(b, |blk| {
            Ok(blk
                .find_hashed(key, h)?
                .map(|(start, e)| Located::new(&e, block_off, start)))
        })
    }

    /// Data offset of the first record whose key is >= `key`.
    pub(crate) fn seek(&self, key: &[u8]) -> Result<u64> {
        // A scan often starts at a key the segment holds (resuming after the last key
        // seen, a get then a scan): the block's hash table finds it in a slot and an
        // entry, as a get does, where the binary search reads about log2(n) scattered
        // entries (a third of a 100-row mapped scan's time in a profile). The filter
        // keeps the probe off keys the segment lacks; its line loads beside the block's
        // trailer, which the search needs anyway. Both look in one access to the block
        // (one read where the index is read with positional reads and not cached).
        if let Some(pages) = self.paged() {
            return self.seek_paged(pages, key);
        }
        let (block, h) = if key.len() <= MAX_KEY_LEN {
            let h = key_hash(key);
            let block = self.prefetch_lookup(key, h);
            (block, self.meta.filter.may_contain(h).then_some(h))
        } else {
            (self.meta.summary.block_for(key), None)
        };
        let Some(b) = block else {
            return Ok(0);
        };
        self.with_index_block(b, |blk| {
            // Keys are unique in a segment: the record of `key` is the first >= it.
            if let Some(h) = h {
                if let Some((_, e)) = blk.find_hashed(key, h)? {
                    return Ok(e.data_offset);
                }
            }
            let i = blk.lower_bound(key)?;
            if i < blk.len() {
                Ok(blk.entry(i)?.data_offset)
            } else {
                let e = blk.entry(blk.len() - 1)?;
                Ok(e.data_offset.saturating_add(e.record_len))
            }
        })
    }

    /// The index component's path (for errors).
    pub(super) fn index_path(&self) -> &Path {
        self.index.path()
    }

    /// The index position (block, entry) of the last cell whose key is at or below
    /// `hi`, if any: where a backward scan starts.
    pub(super) fn last_at_or_below(&self, hi: Bound<&[u8]>) -> Result<Option<(usize, usize)>> {
        let n = self.meta.summary.len();
        let last_of = |b: usize| -> Result<Option<(usize, usize)>> {
            let len = self.with_index_block(b, |blk| Ok(blk.len()))?;
            Ok(Some((b, len - 1)))
        };
        let (k, inclusive) = match hi {
            Bound::Unbounded => return if n == 0 { Ok(None) } else { last_of(n - 1) },
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
        };
        let Some(b) = self.meta.summary.block_for(k) else {
            return Ok(None);
        };
        let i = self.with_index_block(b, |blk| {
            let i = blk.lower_bound(k)?;
            let hit = inclusive && i < blk.len() && blk.key_at(i)? == k;
            Ok(if hit { Some(i) } else { i.checked_sub(1) })
        })?;
        match i {
            Some(i) => Ok(Some((b, i))),
            None if b > 0 => last_of(b - 1),
            None => Ok(None),
        }
    }

    /// The keys and record locations of every entry of index block `b`, for a backward
    /// scan: `keys` receives the keys back to back, the result each entry's key end in
    /// `keys` and its location.
    pub(super) fn block_entries(
        &self,
        b: usize,
        keys: &mut Vec<u8>,
        locs: &mut Vec<(usize, Located)>,
    ) -> Result<()> {
        keys.clear();
        locs.clear();
        let block_off = self.meta.summary.block(b).0;
        self.with_index_block(b, |blk| {
            for i in 0..blk.len() {
                let start = blk.entry_start(i)?;
                let e = blk.entry_at(start)?;
                keys.extend_from_slice(e.key);
                locs.push((keys.len(), Located::new(&e, block_off, start)));
            }
            Ok(())
        })
    }

    /// Run `f` over parsed index block `i`, verifying its checksum on first use.
    fn with_index_block<R>(
        &self,
        i: usize,
        f: impl FnOnce(IndexBlock<'_>) -> Result<R, Malformed>,
    ) -> Result<R> {
        let (off, len) = self.meta.summary.block(i);
        let path = self.index.path();
        let refused: Box<[u8]>;
        let held = match (&self.cached_index, &self.index) {
            (Some(c), Source::Standard(p)) => match c.get(i) {
                // Verified when it was inserted.
                Some(b) => Some(b),
                None if c.has_room(len as usize) => {
                    let mut b = vec![0u8; len as usize].into_boxed_slice();
                    p.read_at(&mut b, off)?;
                    IndexBlock::verify(&b).map_err(|m| m.at(off).into_error(path))?;
                    match c.insert(i, b) {
                        Ok(cached) => Some(cached),
                        Err(back) => {
                            refused = back;
                            Some(&refused[..])
                        }
                    }
                }
                None => None,
            },
            _ => None,
        };
        if let Some(b) = held {
            return self.on_block(i, off, b, false, f);
        }
        self.index.with_bytes(off, len as usize, |b| {
            let first_use = self.checked[i].load(Ordering::Relaxed) == 0;
            self.on_block(i, off, b, first_use, f)
        })
    }

    /// Check the bytes `b` of block `i` (at `off` in the index file) if `verify`, parse
    /// them, remember that the block passed, and hand it to `f`.
    #[inline]
    fn on_block<R>(
        &self,
        i: usize,
        off: u64,
        b: &[u8],
        verify: bool,
        f: impl FnOnce(IndexBlock<'_>) -> Result<R, Malformed>,
    ) -> Result<R> {
        let path = self.index.path();
        if verify {
            IndexBlock::verify(b).map_err(|m| m.at(off).into_error(path))?;
        }
        let blk = IndexBlock::parse(b).map_err(|m| m.at(off).into_error(path))?;
        if self.checked[i].load(Ordering::Relaxed) == 0 {
            self.mark_checked(i, &blk);
        }
        f(blk).map_err(|m| m.at(off).into_error(path))
    }

    /// Run `f` over index block `i` as the file holds it now, its checksum checked every
    /// time: what `verify` reads (never the index cache, which it leaves alone).
    fn with_index_block_from_file<R>(
        &self,
        i: usize,
        f: impl FnOnce(IndexBlock<'_>) -> Result<R, Malformed>,
    ) -> Result<R> {
        let (off, len) = self.meta.summary.block(i);
        self.index
            .with_bytes(off, len as usize, |b| self.on_block(i, off, b, true, f))
    }

    /// Remember that block `i` passed its checksum, and its slot count.
    fn mark_checked(&self, i: usize, blk: &IndexBlock<'_>) {
        let v = u32::try_from(blk.slots()).map_or(0, |m| m.saturating_add(1));
        self.checked[i].store(v, Ordering::Relaxed);
    }

    /// Bytes of index blocks this reader keeps in memory (standard-mode index only).
    pub fn index_cache_bytes(&self) -> u64 {
        self.cached_index
            .as_ref()
            .map_or(0, CachedIndex::held_bytes)
    }

    fn meta_path(&self) -> PathBuf {
        self.name.path(&self.dir, Component::Meta)
    }
}

/// Where a positional data read goes (see [`SegmentReader::read_record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// The block cache, if there is one: point reads.
    Cache,
    /// The file itself, past the cache: scans and `verify` (`block_cache` invariant 5).
    File,
}

/// Where a record is: from an index entry (`index_at`: where the entry itself is in the
/// index file), or (`None`) from a walk of the data's own record headers through the
/// page index, whose lengths and keys are the data file's bytes: a disagreement with
/// the record is then the data file's fault, never the index file's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Located {
    pub(super) data_offset: u64,
    pub(super) record_len: u64,
    index_at: Option<u64>,
}

impl Located {
    #[inline]
    fn new(e: &IndexEntry<'_>, block_off: u64, entry_start: usize) -> Self {
        Located {
            data_offset: e.data_offset,
            record_len: e.record_len,
            index_at: Some(block_off + entry_start as u64),
        }
    }
}

use super::iter::Entry;

impl From<RecordRef<'_>> for Entry {
    fn from(r: RecordRef<'_>) -> Self {
        Entry {
            key: r.key.to_vec(),
            value: r.value.to_vec(),
            ts: r.ts,
            tombstone: r.tombstone,
            expires: r.expires,
        }
    }
}
