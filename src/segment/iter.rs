//! Range scans over a segment: seek with the index, then walk the data file in order.
//! Mapped data is decoded in place; standard data is read into a buffer owned by the
//! iterator, in chunks that grow from 4 KiB to 64 KiB as the scan goes on.

use std::ops::{Bound, Deref, RangeBounds};

use super::reader::{Located, SegmentReader, Source, Via};
use super::walk_stock::Walk;
use crate::error::{Error, Result};
use crate::format::record::{self, RecordRef, MAX_HEADER_LEN};
use crate::format::Malformed;
use crate::io::MappedFile;
use crate::range::{self, UpperBound};

/// Standard-mode read-ahead: the first read of a scan is `FIRST_CHUNK` bytes (a short scan
/// should not pay for 64 KiB), each later one twice the last, up to `CHUNK`.
const FIRST_CHUNK: usize = 4 * 1024;
const CHUNK: usize = 64 * 1024;
/// Mapped scans: bytes past the front whose cache lines are requested at each check of
/// the records ahead (three records of a hundred-odd bytes, and the next three's).
const PREFETCH_AHEAD: usize = 2048;
/// Mapped data: how far past its first record the front walks before it asks the kernel
/// to read ahead (a short scan reads what its faults read, like a get), and the first
/// window it asks for then; each later window doubles, up to [`MAX_READ_AHEAD`].
const FIRST_READ_AHEAD: usize = 16 << 10;
/// The largest window the front asks the kernel to read ahead.
const MAX_READ_AHEAD: usize = 1 << 20;

/// An owned cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// Key.
    pub key: Vec<u8>,
    /// Value (empty for tombstones).
    pub value: Vec<u8>,
    /// Write timestamp, microseconds.
    pub ts: u64,
    /// Deletion marker.
    pub tombstone: bool,
    /// 0, or the expiry of a live cell (or the local deletion time of a tombstone made
    /// from an expired cell): the store's expiry clock, microseconds
    /// ([`RecordRef::expires`]).
    pub expires: u64,
}

impl Entry {
    /// The cell as a [`RecordRef`].
    pub fn as_ref(&self) -> RecordRef<'_> {
        RecordRef {
            key: &self.key,
            value: &self.value,
            ts: self.ts,
            tombstone: self.tombstone,
            expires: self.expires,
        }
    }

    /// Make this a copy of `r`, reusing the buffers: a merge that refills one `Entry`
    /// per source allocates nothing once they have grown to the longest key and value.
    #[inline]
    pub fn set_from(&mut self, r: RecordRef<'_>) {
        crate::format::replace_tail(&mut self.key, 0, r.key);
        self.value.clear();
        self.value.extend_from_slice(r.value);
        self.ts = r.ts;
        self.tombstone = r.tombstone;
        self.expires = r.expires;
    }

    /// Whether the cell reads as absent at `now` (expiry clock, microseconds): a
    /// tombstone, or a cell whose expiry is at or before `now`.
    #[inline]
    pub fn is_dead_at(&self, now: u64) -> bool {
        self.tombstone || (self.expires != 0 && self.expires <= now)
    }
}

/// Iterator over the cells of one segment in key order, from either end. Generic over
/// how it holds the reader: `&SegmentReader`, `Arc<SegmentReader>`, or a lifecycle
/// handle that keeps the segment (and so its mappings) alive while the iterator lives.
///
/// Forward, it walks the data file from the record the index gives for the range's
/// start. Backward ([`DoubleEndedIterator`]), it walks the index entries from the last
/// key in the range down, block by block, and reads each record through its entry (its
/// checksum checked, its key compared with the entry's). The two ends meet: a cell is
/// yielded once, by whichever end reaches it first.
///
/// [`SegmentIter::seek`] and [`SegmentIter::seek_back`] reposition one end within the
/// range (either way: a seek is absolute), without touching the other. After an error
/// the iterator is done.
pub struct SegmentIter<R: Deref<Target = SegmentReader>> {
    reader: R,
    /// The range given at creation, kept apart once a seek moves `lo` or `hi` (`None`:
    /// `lo` or `hi` still is it), so an iterator that never seeks holds one copy of its
    /// bounds: a scan's setup allocated and freed the second for every segment.
    start: Option<Bound<Vec<u8>>>,
    end: Option<Bound<Vec<u8>>>,
    /// The range after seeks: the front yields nothing below `lo`, the back nothing
    /// above `hi`; each end checks the other's bound too.
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    /// The front's next data offset, once found (`None`: find it from `lo`).
    pos: Option<u64>,
    /// The record at `pos` equals an excluded `lo`: skip it.
    skip_equal: bool,
    /// Mapped data: the records the front walks to below this offset passed their
    /// checksums already (checked ahead, three at a time: [`record::checked_run`]).
    /// Reset by a seek.
    checked_to: u64,
    /// Mapped data: the lines below this offset were requested already.
    prefetched_to: u64,
    /// Mapped data: where the front next asks the kernel to read ahead.
    read_ahead: ReadAhead,
    /// The front stops here: the data offset of the last cell the back yielded (the
    /// end of the back's next cell once the back has found its place; else the end of
    /// the data).
    end_pos: u64,
    /// The length of the data body (records only), read once rather than through the
    /// reader (behind a handle) on every row.
    body: u64,
    back: Back,
    /// Index block `back_block` as keys and locations, while the back walks it.
    back_block: Option<usize>,
    back_keys: Vec<u8>,
    back_locs: Vec<(usize, Located)>,
    buf: Vec<u8>,
    buf_start: u64,
    chunk: usize,
    failed: bool,
    /// Format 4 and later: both ends walk data blocks instead (the fields above are
    /// unused).
    blocks: Walk,
}

/// Where the back end of a [`SegmentIter`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Back {
    /// Not found yet: the last entry at or below `hi`.
    Unresolved,
    /// The next entry to yield backward: (index block, entry within it).
    At(usize, usize),
    /// The next entry to yield backward is the last of this index block.
    LastOf(usize),
    /// Before the first entry.
    Exhausted,
}

impl SegmentReader {
    /// Cells with keys in `range`, in key order.
    pub fn scan<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
    ) -> Result<SegmentIter<&SegmentReader>> {
        SegmentIter::new(self, range)
    }

    /// Every cell, in key order.
    pub fn iter(&self) -> Result<SegmentIter<&SegmentReader>> {
        SegmentIter::new::<&[u8]>(self, ..)
    }
}

fn owned(b: Bound<&impl AsRef<[u8]>>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The front's read-ahead over mapped data: past the first [`FIRST_READ_AHEAD`] bytes,
/// it asks the kernel for the next window whenever the front is halfway through the
/// last one, so the reads of a long scan overlap its work (the map is advised random).
#[derive(Debug)]
struct ReadAhead {
    /// Ask when the front reaches this offset (`None`: not placed yet, at the first
    /// record after creation or a seek).
    at: Option<u64>,
    /// The window the next request asks for.
    len: usize,
}

impl Default for ReadAhead {
    fn default() -> Self {
        ReadAhead {
            at: None,
            len: FIRST_READ_AHEAD,
        }
    }
}

impl ReadAhead {
    fn step(&mut self, m: &MappedFile, pos: u64) {
        match self.at {
            None => self.at = Some(pos + FIRST_READ_AHEAD as u64),
            Some(at) if pos >= at => {
                m.will_need(pos as usize, self.len);
                self.at = Some(pos + self.len as u64 / 2);
                self.len = (self.len * 2).min(MAX_READ_AHEAD);
            }
            Some(_) => {}
        }
    }
}

impl<R: Deref<Target = SegmentReader>> SegmentIter<R> {
    /// Cells of `reader` with keys in `range`.
    pub fn new<K: AsRef<[u8]>>(reader: R, range: impl RangeBounds<K>) -> Result<Self> {
        let (start, end) = (owned(range.start_bound()), owned(range.end_bound()));
        let mut it = Self::with_bounds(reader, start, end);
        it.find_front()?;
        Ok(it)
    }

    /// Cells of `reader` between owned bounds. Finds its place lazily: errors come with
    /// the first cell asked for.
    pub(crate) fn with_bounds(reader: R, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Self {
        let end_pos = reader.data_body_len();
        let blocks = Walk::of(&reader);
        SegmentIter {
            blocks,
            reader,
            lo: start,
            hi: end,
            start: None,
            end: None,
            pos: None,
            skip_equal: false,
            checked_to: 0,
            prefetched_to: 0,
            read_ahead: ReadAhead::default(),
            end_pos,
            body: end_pos,
            back: Back::Unresolved,
            back_block: None,
            back_keys: Vec::new(),
            back_locs: Vec::new(),
            buf: Vec::new(),
            buf_start: 0,
            chunk: FIRST_CHUNK,
            failed: false,
        }
    }

    /// Let this scan skip the checksum of a mapped data block (format 4 and later) that
    /// a read has checked since the segment was opened, as gets do: for the table's
    /// scans of live rows. Compaction, `Table::scan_cells` (repair), repair's segment
    /// scans and `verify` check every block.
    pub(crate) fn trusting_checked_blocks(mut self) -> Self {
        if let Some(b) = self.blocks.get_mut() {
            b.trust = true;
        }
        self
    }

    /// Move the front to the first cell whose key is at least `key` (and in the range):
    /// forward past cells, or back to cells already yielded. Cells the back end has
    /// yielded stay behind it. Costs one index lookup, at the next [`Iterator::next`].
    pub fn seek(&mut self, key: &[u8]) {
        self.seek_bound(Bound::Included(key));
    }

    /// Move the back to the last cell whose key is at most `key` (and in the range),
    /// for [`DoubleEndedIterator::next_back`]. Cells the front has yielded stay behind
    /// it.
    pub fn seek_back(&mut self, key: &[u8]) {
        self.seek_back_bound(Bound::Included(key));
    }

    /// Move the front to the cells above `lo` (within the range).
    pub fn seek_bound(&mut self, lo: Bound<&[u8]>) {
        let start = self.start.get_or_insert_with(|| self.lo.clone());
        self.lo = range::max_lower(start, lo);
        if let Some(w) = self.blocks.get_mut() {
            w.reset_front();
        }
        self.pos = None;
        self.skip_equal = false;
        self.checked_to = 0;
        self.prefetched_to = 0;
        self.read_ahead = ReadAhead::default();
    }

    /// Move the back to the cells below `hi` (within the range).
    pub fn seek_back_bound(&mut self, hi: Bound<&[u8]>) {
        let end = self.end.get_or_insert_with(|| self.hi.clone());
        self.hi = range::min_upper(end, hi);
        if let Some(w) = self.blocks.get_mut() {
            w.reset_back(&self.reader);
        }
        self.back = Back::Unresolved;
        self.end_pos = self.body;
    }

    /// The front's data offset, finding it from `lo` after creation or a seek.
    fn find_front(&mut self) -> Result<u64> {
        if self.blocks.get().is_some() {
            return Ok(0); // found by the block walk's first step
        }
        if let Some(p) = self.pos {
            return Ok(p);
        }
        let (p, skip) = match &self.lo {
            Bound::Unbounded => (0, false),
            Bound::Included(k) => (self.reader.seek(k)?, false),
            Bound::Excluded(k) => (self.reader.seek(k)?, true),
        };
        self.pos = Some(p);
        self.skip_equal = skip;
        Ok(p)
    }

    /// Make `buf` hold `[pos, pos + need)`, reading at least a chunk (within the data).
    fn fill(&mut self, pos: u64, need: usize) -> Result<()> {
        if let Some(skip) = pos.checked_sub(self.buf_start) {
            if skip as usize + need <= self.buf.len() {
                return Ok(());
            }
        }
        let Source::Standard(p) = &self.reader.data else {
            return Ok(());
        };
        let body = self.reader.data_body_len();
        let want = need
            .max(self.chunk)
            .min(body.saturating_sub(pos) as usize)
            .max(need);
        self.chunk = (self.chunk * 2).min(CHUNK);
        self.buf.resize(want, 0);
        p.read_at(&mut self.buf, pos)?;
        self.buf_start = pos;
        Ok(())
    }

    /// Turn a step's result into an item; an error ends the iterator.
    fn item<T>(&mut self, r: Result<Option<T>>) -> Option<Result<T>> {
        match r {
            Ok(t) => t.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    /// The next cell, handed to `f` borrowed from the map or from the iterator's buffer:
    /// the allocation-free form of [`Iterator::next`], as [`SegmentReader::get_with`] is
    /// of `get`. `None` at the end; after an error the iterator is done.
    #[inline(always)]
    pub fn next_with<T>(&mut self, f: impl FnOnce(RecordRef<'_>) -> T) -> Option<Result<T>> {
        if self.failed {
            return None;
        }
        let r = match self.blocks.get_mut() {
            Some(w) => w.next(&self.reader, &self.lo, &self.hi, f),
            None => self.next_record(None, f),
        };
        self.item(r)
    }

    /// Like [`SegmentIter::next_with`], but `None` at the first cell not below `cap`,
    /// an upper bound at or below the iterator's own: the front stays on that cell, which
    /// the next step yields if `cap` no longer holds it back. A table scan's overlay
    /// lends the rows below the next key its memtables hold this way, the bound checked
    /// where the walk checks its own (`table/lsm/overlay.rs`).
    #[inline(always)]
    pub(crate) fn next_below_with<T>(
        &mut self,
        cap: Bound<&[u8]>,
        f: impl FnOnce(RecordRef<'_>) -> T,
    ) -> Option<Result<T>> {
        if self.failed {
            return None;
        }
        let r = match self.blocks.get_mut() {
            Some(w) => w.next(&self.reader, &self.lo, &cap, f),
            None => self.next_record(Some(cap), f),
        };
        self.item(r)
    }

    /// The next cell from the back, handed to `f` borrowed: the allocation-free form of
    /// [`DoubleEndedIterator::next_back`]. `None` once the ends meet; after an error the
    /// iterator is done.
    pub fn next_back_with<T>(&mut self, f: impl FnOnce(RecordRef<'_>) -> T) -> Option<Result<T>> {
        if self.failed {
            return None;
        }
        let r = match self.blocks.get_mut() {
            Some(w) => w.next_back(&self.reader, &self.lo, &self.hi, f),
            None => self.next_back_record(f),
        };
        self.item(r)
    }

    /// The front's next cell below `cap` (the iterator's upper bound if `None`).
    fn next_record<T>(
        &mut self,
        cap: Option<Bound<&[u8]>>,
        f: impl FnOnce(RecordRef<'_>) -> T,
    ) -> Result<Option<T>> {
        let body = self.body;
        loop {
            let pos = self.find_front()?;
            if pos >= self.end_pos || pos >= body {
                return Ok(None);
            }
            let remaining = (body - pos) as usize;
            let (r, used) = match &self.reader.data {
                Source::Mapped(m) => {
                    let s = m
                        .as_slice()
                        .get(pos as usize..body as usize)
                        .ok_or_else(|| {
                            Error::corrupt(m.path(), pos, "scan position past the data")
                        })?;
                    // Check the next three records' checksums side by side once the
                    // front has passed the last ones checked (up to where it stops).
                    // Offsets below `checked_to` are reached only by walking record
                    // by record from where the check began.
                    self.read_ahead.step(m, pos);
                    if pos >= self.checked_to {
                        // Start loading this run's lines and the next's together:
                        // otherwise each record's header waits for the line the last
                        // record's length pointed into.
                        let from = self
                            .prefetched_to
                            .saturating_sub(pos)
                            .min(PREFETCH_AHEAD as u64);
                        for ahead in (from as usize..PREFETCH_AHEAD).step_by(64) {
                            crate::io::prefetch::prefetch_read(s, ahead);
                        }
                        self.prefetched_to = pos + PREFETCH_AHEAD as u64;
                        let upto = self.end_pos.min(body).saturating_sub(pos) as usize;
                        self.checked_to = pos + record::checked_run(&s[..upto.min(s.len())]) as u64;
                    }
                    let checked = pos < self.checked_to;
                    record::decode_with(s, !checked).map_err(|e| e.at(pos).into_error(m.path()))?
                }
                Source::Standard(_) => {
                    let corrupt =
                        |this: &Self, e: Malformed| e.at(pos).into_error(this.reader.data.path());
                    self.fill(pos, MAX_HEADER_LEN.min(remaining))?;
                    let at = (pos - self.buf_start) as usize;
                    let total = record::total_len(&self.buf[at..]).map_err(|e| corrupt(self, e))?;
                    if total > remaining {
                        return Err(Error::corrupt(
                            self.reader.data.path(),
                            pos,
                            format!("record of {total} bytes passes the end of the data"),
                        ));
                    }
                    self.fill(pos, total)?;
                    let at = (pos - self.buf_start) as usize;
                    record::decode(&self.buf[at..at + total]).map_err(|e| corrupt(self, e))?
                }
            };
            if std::mem::take(&mut self.skip_equal) && !range::above(r.key, &self.lo) {
                self.pos = Some(pos + used as u64);
                continue;
            }
            // Past the upper bound: stay here (a seek may move the bound).
            let admitted = match cap {
                Some(cap) => cap.admits(r.key),
                None => self.hi.admits(r.key),
            };
            if !admitted {
                return Ok(None);
            }
            self.pos = Some(pos + used as u64);
            return Ok(Some(f(r)));
        }
    }

    /// Make sure the entries of index block `b` are loaded for the back.
    fn load_back_block(&mut self, b: usize) -> Result<()> {
        if self.back_block != Some(b) {
            self.back_block = None;
            self.reader
                .block_entries(b, &mut self.back_keys, &mut self.back_locs)?;
            self.back_block = Some(b);
            self.read_back_block_ahead();
        }
        Ok(())
    }

    /// Mapped data, walking back: ask the kernel for the data a newly loaded index block
    /// points into (one contiguous run), which the back then reads record by record.
    fn read_back_block_ahead(&self) {
        if let (Source::Mapped(m), Some(first), Some(last)) = (
            &self.reader.data,
            self.back_locs.first(),
            self.back_locs.last(),
        ) {
            let (from, to) = (first.1.data_offset, last.1.data_offset + last.1.record_len);
            m.will_need(from as usize, to.saturating_sub(from) as usize);
        }
    }

    /// Entry `i` of the loaded back block: its key's end in `back_keys`, its location.
    fn back_loc(&self, i: usize) -> Result<(usize, Located)> {
        self.back_locs.get(i).copied().ok_or_else(|| {
            Error::corrupt(
                self.reader.index_path(),
                0,
                format!("index entry {i} is missing from its block"),
            )
        })
    }

    /// Find the back's place after creation or a seek: the last entry at or below
    /// `hi`; the front may go up to and including it.
    fn find_back(&mut self) -> Result<()> {
        if self.back != Back::Unresolved {
            return Ok(());
        }
        match self.reader.last_at_or_below(range::as_ref(&self.hi))? {
            Some((b, i)) => {
                self.load_back_block(b)?;
                let loc = self.back_loc(i)?.1;
                self.end_pos = loc.data_offset.saturating_add(loc.record_len);
                self.back = Back::At(b, i);
            }
            None => {
                self.end_pos = 0;
                self.back = Back::Exhausted;
            }
        }
        Ok(())
    }

    fn next_back_record<T>(&mut self, f: impl FnOnce(RecordRef<'_>) -> T) -> Result<Option<T>> {
        let front = self.find_front()?;
        self.find_back()?;
        let (b, i) = match self.back {
            Back::At(b, i) => {
                self.load_back_block(b)?;
                (b, i)
            }
            Back::LastOf(b) => {
                self.load_back_block(b)?;
                // A parsed block holds at least one entry.
                let i = self.back_locs.len().saturating_sub(1);
                self.back = Back::At(b, i);
                (b, i)
            }
            Back::Unresolved | Back::Exhausted => return Ok(None),
        };
        let (key_end, loc) = self.back_loc(i)?;
        // The front has passed this cell: the ends met.
        if loc.data_offset < front {
            return Ok(None);
        }
        let key_start = i.checked_sub(1).map_or(0, |p| self.back_locs[p].0);
        let key = &self.back_keys[key_start..key_end];
        // Below the lower bound: stay here (a seek may move the bound). The key comes
        // from the index block (checked by its own checksum), so the record past the
        // range is not read at all: damage there fails no scan that ends before it.
        if !range::above(key, &self.lo) {
            return Ok(None);
        }
        let got = self
            .reader
            .read_record(loc, Some(key), true, Via::File, f)?;
        self.end_pos = loc.data_offset;
        self.back = if i > 0 {
            Back::At(b, i - 1)
        } else if b > 0 {
            Back::LastOf(b - 1)
        } else {
            Back::Exhausted
        };
        Ok(Some(got))
    }
}

impl<R: Deref<Target = SegmentReader>> Iterator for SegmentIter<R> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_with(|r| Entry::from(r))
    }
}

impl<R: Deref<Target = SegmentReader>> DoubleEndedIterator for SegmentIter<R> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.next_back_with(|r| Entry::from(r))
    }
}
