//! Formats 4 to 8: point reads through data blocks. The meta's summary lists the data blocks
//! (first key, offset, length), so a point read costs the filter, a search of the
//! summary in memory, and one block: its hash slot, its entry's group head, and the
//! entry. The block's checksum is checked by a point read that checks records
//! (`crc_check_chance`) where the data is read with `pread` or from the block cache, and
//! by the first such read of a mapped block (the reader remembers it, as it remembers
//! format 3's index blocks); the table's scans skip a mapped block checked so, and
//! compaction, `Table::scan_cells` (repair), repair's segment scans and `verify`
//! check every block they read. A compressed block a get decompresses is checked
//! whatever `crc_check_chance` says and kept decompressed for later gets
//! (`unpacked_cache.rs`), which read it there without decompressing or checking, as
//! the table's scans do (`block_walk.rs`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::*;
use crate::format::data_block::{self, DataBlock, Layout};
use crate::segment::{BlockCache, UnpackedCache};

thread_local! {
    /// Where a compressed block is decompressed for a point read.
    static UNPACKED: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

impl SegmentReader {
    /// Whether the segment stores data blocks (formats 4 to 8) rather than records.
    #[inline]
    pub(crate) fn has_blocks(&self) -> bool {
        self.format >= 4
    }

    /// How the segment's data blocks record where their entries start.
    #[inline]
    pub(in crate::segment) fn block_layout(&self) -> Layout {
        Layout::of_version(self.format)
    }

    /// Data blocks in the segment (formats 4 to 8).
    pub(in crate::segment) fn data_blocks(&self) -> usize {
        self.meta.summary.len()
    }

    /// (offset, length) of data block `b` (formats 4 to 8).
    pub(in crate::segment) fn summary_block(&self, b: usize) -> (u64, u32) {
        self.meta.summary.block(b)
    }

    /// The last data block whose summary key (its first key, or from format 7 a
    /// separator) is at or below `key` (formats 4 to 8).
    pub(in crate::segment) fn summary_block_for(&self, key: &[u8]) -> Option<usize> {
        self.meta.summary.block_for(key)
    }

    /// The cell of `key` (`h = key_hash(key)`) in a segment of data blocks, handed to `f`.
    #[inline]
    pub(super) fn get_in_blocks<R>(
        &self,
        key: &[u8],
        h: u64,
        f: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Option<R>> {
        self.meta.filter.prefetch(h);
        let b = self.meta.summary.block_for(key);
        if let Some(b) = b {
            self.prefetch_block(b, h);
        }
        if !self.meta.filter.may_contain(h) {
            return Ok(None);
        }
        let Some(b) = b else {
            return Ok(None);
        };
        if let Some(p) = self.unpacked.as_ref().and_then(|u| u.get(b)) {
            return self.get_in_payload(&p, b, key, h, f);
        }
        // A mapped block whose checksum passed once is not summed again by gets (the
        // whole block, 4 KiB, against one record in format 3: a quarter of a get's
        // time); bytes read with `pread` or from the block cache are checked each time.
        let mapped = matches!(self.data, Source::Mapped(_));
        let seen = mapped && self.block_checked(b);
        let check = !seen && self.record_check.roll();
        let (found, hint) = self.with_data_block(b, Via::Cache, check, |blk| {
            Ok((
                blk.get(key, h)?.map(|c| f(c.with_key(key))),
                slot_hint(&blk),
            ))
        })?;
        if check && mapped {
            self.mark_block_checked(b, hint);
        }
        Ok(found)
    }

    /// [`Self::get_in_blocks`] in block `b`'s decompressed payload `p`, held by the
    /// cache of decompressed blocks (checked when it entered: `unpacked_cache`
    /// invariant 2).
    fn get_in_payload<R>(
        &self,
        p: &[u8],
        b: usize,
        key: &[u8],
        h: u64,
        f: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Option<R>> {
        let found = DataBlock::parse(p, self.block_layout())
            .and_then(|blk| blk.get(key, h))
            .map_err(|m| blame(m, false).at(self.summary_block(b).0))
            .map_err(|m| m.into_error(self.data.path()))?;
        Ok(found.map(|c| f(c.with_key(key))))
    }

    /// Block `b`'s payload, decompressed and checked, if a get kept it: for the table's
    /// scans, which trust a block checked once (`unpacked_cache` invariant 4).
    #[inline]
    pub(in crate::segment) fn unpacked_payload(&self, b: usize) -> Option<Arc<[u8]>> {
        self.unpacked.as_ref().and_then(|u| u.peek(b))
    }

    /// Whether mapped data block `b`'s checksum has passed since the segment was opened.
    #[inline]
    pub(in crate::segment) fn block_checked(&self, b: usize) -> bool {
        self.checked[b].load(Ordering::Relaxed) != 0
    }

    /// Mapped data block `b` passed its checksum: the table's reads trust it from now
    /// on, and gets prefetch its home slots (`prefetch_block`, by `hint`: `slot_hint`).
    #[inline]
    pub(crate) fn mark_block_checked(&self, b: usize, hint: u32) {
        self.checked[b].store(hint, Ordering::Relaxed);
    }

    /// Start loading the end of mapped data block `b` (its checksum, compression byte and
    /// trailer) and, once a get has checked the block and learnt its slot count, the home
    /// slot of the key hashing to `h`: these misses then overlap the filter's instead
    /// of following it (format 3 does the same for its index blocks). A compressed block
    /// is read into a buffer, so for it the hints are wasted, not wrong.
    #[inline(always)]
    pub(in crate::segment) fn prefetch_block(&self, b: usize, h: u64) {
        let (off, len) = self.meta.summary.block(b);
        let end = off + u64::from(len);
        self.data.prefetch(end.saturating_sub(1));
        self.data
            .prefetch(end.saturating_sub(data_block::MAX_STORED_TAIL as u64));
        // `checked` holds `slot_hint` once a read has checked the block.
        let hint = self.checked[b].load(Ordering::Relaxed);
        let m = (hint & 0xffff).saturating_sub(1) as usize;
        let slots = end.checked_sub(u64::from(hint >> 16));
        if let Some(slots) = slots.filter(|_| m != 0) {
            self.data
                .prefetch(slots + crate::format::home_slot(h, m) as u64);
        }
    }

    /// Start loading what a seek to `key` reads first in mapped data blocks (formats 4
    /// to 8; a no-op otherwise): the filter's line, the end of the block the summary
    /// names for `key` ([`Self::prefetch_block`]) and the lines where a binary search of
    /// its entries starts. A table's scan calls it for every segment it will seek into
    /// before the first of those seeks, so their misses overlap instead of following
    /// one another.
    pub(crate) fn prefetch_seek(&self, key: &[u8]) {
        if !self.has_blocks() || !matches!(self.data, Source::Mapped(_)) {
            return;
        }
        let Some(b) = self.summary_block_for(key) else {
            return;
        };
        let h = key_hash(key);
        self.prefetch_filter(h);
        self.prefetch_block(b, h);
        let (off, len) = self.summary_block(b);
        let len = u64::from(len);
        for at in [len / 2, len / 4, len / 4 * 3] {
            self.data.prefetch(off + at);
        }
    }

    /// Start loading the block a get of `key` (`h = key_hash(key)`) would read: its end
    /// and its home slot ([`Self::prefetch_block`]), in mapped data of formats 4 to 8.
    pub(crate) fn prefetch_get(&self, key: &[u8], h: u64) {
        // Data read with `pread` has nothing to prefetch: no summary search for it.
        if !self.has_blocks() || !matches!(self.data, Source::Mapped(_)) {
            return;
        }
        if let Some(b) = self.summary_block_for(key) {
            self.prefetch_block(b, h);
        }
    }

    /// How many of the segment's data blocks a read has checked, and how many it has.
    #[cfg(test)]
    pub(crate) fn blocks_checked(&self) -> (usize, usize) {
        let n = self.data_blocks();
        ((0..n).filter(|&b| self.block_checked(b)).count(), n)
    }

    /// Whether every page of the mapped data is in the page cache (`mincore`; false
    /// where that cannot be asked): a compaction checks its outputs' blocks only then,
    /// so the check never reads from disk what no read asked for.
    pub(crate) fn data_in_page_cache(&self) -> bool {
        let Source::Mapped(m) = &self.data else {
            return false;
        };
        let region = m.whole_region();
        let pages = region.len().div_ceil(crate::io::sys::page_size());
        matches!(crate::io::sys::resident_pages(region), Ok(n) if n == pages)
    }

    /// Data block `b` as stored (payload, compression byte, checksum) in the map
    /// `data` of this segment's data file.
    pub(in crate::segment) fn stored_block<'a>(
        &self,
        data: &'a [u8],
        b: usize,
    ) -> Result<&'a [u8]> {
        let (off, len) = self.summary_block(b);
        usize::try_from(off)
            .ok()
            .and_then(|o| data.get(o..o.checked_add(len as usize)?))
            .ok_or_else(|| Error::corrupt(self.data.path(), off, "data block past the data"))
    }

    /// Check the checksum of every mapped data block stored raw that no read has
    /// checked yet, and remember each as checked, as its first read would (formats 4
    /// to 8; compressed blocks, and data read with `pread`, are left to their reads).
    /// Returns how many blocks it checked. A flush calls it on the segment it has just
    /// written, and a compaction on its outputs whose pages are all still in the page
    /// cache: the table's first scans and gets of the new segment then skip the
    /// whole-block checksum each would pay on first touch (4 KiB summed where a scan
    /// reads a few rows), and damage from the write path shows at the flush or
    /// compaction instead of at some later read.
    pub(crate) fn check_mapped_blocks(&self) -> Result<usize> {
        let Some(data) = self.mapped_data().filter(|_| self.has_blocks()) else {
            return Ok(0);
        };
        let mut buf = Vec::new();
        let mut checked = 0;
        for b in 0..self.data_blocks() {
            let stored = self.stored_block(data, b)?;
            if self.block_checked(b) || !is_raw(stored) {
                continue;
            }
            let off = self.summary_block(b).0;
            let corrupt = |m: Malformed| m.at(off).into_error(self.data.path());
            let (payload, _) = unpack(stored, &mut buf, true).map_err(corrupt)?;
            let blk = DataBlock::parse(payload, self.block_layout()).map_err(corrupt)?;
            self.mark_block_checked(b, slot_hint(&blk));
            checked += 1;
        }
        Ok(checked)
    }

    /// Run `f` over data block `b`, its checksum checked if `check`; errors name the
    /// data file at the bad bytes (at the block's start where it is compressed).
    pub(in crate::segment) fn with_data_block<R>(
        &self,
        b: usize,
        via: Via,
        check: bool,
        f: impl FnOnce(DataBlock<'_>) -> Result<R, Malformed>,
    ) -> Result<R> {
        let (off, len) = self.meta.summary.block(b);
        let path = self.data.path();
        self.data_bytes(off, len as usize, via, |stored| {
            // A point read's compressed block is checked and kept decompressed
            // (`unpacked_cache` invariants 2 and 3).
            let keep = match &self.unpacked {
                Some(u) if via == Via::Cache && !is_raw(stored) => Some(u),
                _ => None,
            };
            let mut buf = UNPACKED.with(|c| c.take());
            let r = unpack(stored, &mut buf, check || keep.is_some())
                .and_then(|(payload, raw)| {
                    let blk = DataBlock::parse(payload, self.block_layout())
                        .map_err(|m| blame(m, raw))?;
                    if let Some(u) = keep {
                        u.keep(b, payload);
                    }
                    f(blk).map_err(|m| blame(m, raw))
                })
                .map_err(|m| m.at(off).into_error(path));
            if buf.capacity() <= SCRATCH_KEEP {
                UNPACKED.with(|c| c.set(buf));
            }
            r
        })
    }
}

/// A stored block's payload, checked if `check`, and whether it is stored raw (so
/// offsets in it are offsets in the block).
pub(in crate::segment) fn unpack<'a>(
    stored: &'a [u8],
    buf: &'a mut Vec<u8>,
    check: bool,
) -> Result<(&'a [u8], bool), Malformed> {
    data_block::unpack_with(stored, buf, check).map(|p| (p, is_raw(stored)))
}

/// Whether a stored block holds its payload as is (its compression byte, before the
/// checksum, is 0).
fn is_raw(stored: &[u8]) -> bool {
    stored.len() >= 5 && stored[stored.len() - 5] == 0
}

/// A reader's handle on the store's cache of decompressed blocks.
#[derive(Debug)]
pub(in crate::segment) struct Unpacked {
    cache: Arc<UnpackedCache>,
    /// The reader's id there, never used by another reader (`unpacked_cache`
    /// invariant 1).
    id: u64,
    /// A get kept a block of this segment: only then do gets look in the cache, so an
    /// uncompressed segment's gets never do.
    kept: AtomicBool,
}

impl Unpacked {
    pub(in crate::segment) fn new(cache: &Arc<UnpackedCache>) -> Unpacked {
        Unpacked {
            cache: Arc::clone(cache),
            id: BlockCache::new_reader_id(),
            kept: AtomicBool::new(false),
        }
    }

    /// Block `b`'s payload, if held.
    #[inline]
    fn get(&self, b: usize) -> Option<Arc<[u8]>> {
        if !self.kept.load(Ordering::Relaxed) {
            return None;
        }
        self.cache.get(self.id, b as u64)
    }

    /// Block `b`'s payload, if held, uncounted (`unpacked_cache` invariant 4).
    #[inline]
    fn peek(&self, b: usize) -> Option<Arc<[u8]>> {
        if !self.kept.load(Ordering::Relaxed) {
            return None;
        }
        self.cache.peek(self.id, b as u64)
    }

    /// Keep block `b`'s payload, decompressed after its checksum passed.
    fn keep(&self, b: usize, payload: &[u8]) {
        self.cache.insert_checked(self.id, b as u64, payload);
        self.kept.store(true, Ordering::Relaxed);
    }
}

/// An error inside a payload: at its offset in a raw block, at the block's start in a
/// compressed one (whose payload offsets are not file offsets).
pub(in crate::segment) fn blame(m: Malformed, raw: bool) -> Malformed {
    if raw {
        m
    } else {
        Malformed::new(
            0,
            format!("{} (at {} of the decompressed block)", m.reason, m.offset),
        )
    }
}

/// What `checked` holds for a mapped block once it passed its checksum (never 0): its
/// slot count + 1, and (from bit 16) how far before the block's end its slots start
/// (the trailer's length differs between blocks of format 7).
pub(in crate::segment) fn slot_hint(blk: &DataBlock<'_>) -> u32 {
    let back = u32::try_from(blk.slots_back()).unwrap_or(0).min(0xffff);
    back << 16 | (blk.slots() as u32 + 1)
}
