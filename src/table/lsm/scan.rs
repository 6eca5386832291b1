//! Range scans: [`Table::scan`], [`Table::scan_prefix`] and [`Table::scan_cells`], and
//! the iterators they return, [`Scan`] (live rows) and [`Cells`] (winning cells,
//! tombstones included): a merge of a cursor per memtable and per segment, or the
//! segment's own iterator for a table at rest in one segment.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::overlay::Overlay;
use super::snap::TableSnap;
use super::Table;
use crate::error::Result;
use crate::lifecycle::SegmentHandle;
use crate::range::{prefix_range, KeyBounds, KeyRange};
use crate::segment::{Entry, RecordRef, SegmentIter};
use crate::table::cell::is_dead;
use crate::table::merge::{BoxedCursor, MergeIter, TombstonePolicy};
use crate::table::view::Pin;

impl Table {
    /// Live keys and values in `range`, in key order; from the back too
    /// ([`DoubleEndedIterator`]: `scan(..).rev()`), and repositioned by
    /// [`Scan::seek`] / [`Scan::seek_back`]. `range` is any range of byte keys:
    /// `..`, `b"a"..b"b"`, `"a"..="b"`, `key.clone()..`, `..=&k[..]`, or a pair of
    /// `Bound`s ([`KeyRange`]). The scan sees the memtables and segments of the moment it
    /// starts; it holds segment handles until dropped.
    pub fn scan(&self, range: impl KeyRange) -> Result<Scan> {
        self.ctx.check_open()?;
        let bounds = range.into_key_bounds();
        // Invariant 6 (this module's): every memtable empty, so the view holds every
        // acknowledged write of the table, and only whole batches (a segment holds
        // whole memtables); no memtable is read, so no sequence number is registered
        // and no install lock taken (as `multi_get`).
        if !self.maybe_cells.load(Ordering::Acquire) {
            // A table at rest, one segment: its handle alone (one reference count; the
            // view is not cloned).
            let sole = self.set.with_view(|v| match &v.segments[..] {
                [s] if s.range_tombstones().is_empty() => Some(s.clone()),
                _ => None,
            });
            if let Some(h) = sole {
                // The clock only if the segment holds a cell with an expiry.
                let now = match h.stats().expiring_count {
                    0 => 0,
                    _ => self.ctx.clock.expiry_now(),
                };
                return Ok(Scan::new(sole_segment(h, bounds, now), ScanPin::None));
            }
            let mut snap = TableSnap::of_view(&self.set, 0);
            snap.now = self.expiry_now_for(&[], &snap.view);
            snap.run = self.side_run_for(&snap.view);
            let src = self.counted(snap.into_scan(u64::MAX, bounds));
            return Ok(Scan::new(src, ScanPin::None));
        }
        let (pin, snap) = self.capture();
        let src = self.counted(snap.into_scan(pin.seq(), bounds));
        Ok(Scan::new(src, ScanPin::Own { _pin: pin }))
    }

    /// `src`, its seeks beside its base chain counted toward leveled compaction's rule
    /// for reads (`leveled::choose_for_reads`); the table's compaction is asked to look
    /// each time the count passes a multiple of [`SEEKS_PER_LOOK`].
    fn counted(&self, src: ScanSource) -> ScanSource {
        if let ScanSource::Overlay(o) = &src {
            if o.on_run {
                self.count_side_run_scan();
            } else if o.beside > 0 {
                self.want_side_run(o.generation());
            }
            let n = o.beside as u64;
            if n > 0 {
                let before = self.scan_seeks.fetch_add(n, Ordering::Relaxed);
                if (before + n) / SEEKS_PER_LOOK != before / SEEKS_PER_LOOK {
                    self.ctx.schedule_compaction(self);
                }
            }
        }
        src
    }

    /// Live keys that start with `prefix`, and their values, in key order: the range
    /// `[prefix, successor)`, where the successor drops the prefix's trailing `0xFF`
    /// bytes and increments its last byte (no upper bound if every byte is `0xFF`;
    /// every key for an empty prefix). A [`Scan`] like any other: reversible, seekable
    /// within the prefix.
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<Scan> {
        self.scan(prefix_range(prefix.as_ref()))
    }

    /// The winning cell of every key in `range`, in key order, tombstones included
    /// (what [`Table::get_cell`] answers, for a range: repair and tools). Like
    /// [`Table::scan`], it sees the memtables and segments of the moment it starts, and
    /// reverses and seeks.
    pub fn scan_cells(&self, range: impl KeyRange) -> Result<Cells> {
        let (inner, pin) = self.merged(range.into_key_bounds(), TombstonePolicy::Keep)?;
        Ok(Cells {
            inner,
            _pin: ScanPin::Own { _pin: pin },
        })
    }

    /// The merge of the memtables and the view over `bounds`, as one picture of the
    /// table ([`Table::capture`]): never half of a batch.
    fn merged(&self, bounds: KeyBounds, policy: TombstonePolicy) -> Result<(Merged, Pin)> {
        self.ctx.check_open()?;
        let (pin, snap) = self.capture();
        Ok((snap.merged(pin.seq(), bounds, policy), pin))
    }
}

pub(super) type Merged = MergeIter<BoxedCursor<'static>>;

/// Scans' seeks beside their base chain between two requests for a compaction round
/// ([`Table::counted`]): a round is cheap to ask for, but not after every scan.
const SEEKS_PER_LOOK: u64 = 4096;

/// A range scan over a table: live (key, value) pairs in key order, from either end.
///
/// The ends meet: once `next` and `next_back` have between them yielded every key of the
/// range, both return `None`. [`Scan::seek`] moves the front to the first key at or
/// above a key, forward or back (a seek is absolute within the scan's range), and
/// [`Scan::seek_back`] moves the back to the last key at or below one; a seek keeps the
/// scan's sources (segment handles, memtables) and repositions each of them, and costs
/// one index lookup per segment at the next step. Keys yielded by the other end stay
/// behind it. After an error the scan is done.
pub struct Scan {
    inner: ScanSource,
    /// Keeps the memtable versions the scan reads.
    _pin: ScanPin,
}

/// The registered read that keeps a scan's memtable versions, held for its drop (which
/// lets them go).
pub(crate) enum ScanPin {
    /// It reads no memtable.
    None,
    /// Its own (a table's scan: no allocation for it).
    Own { _pin: Pin },
    /// A read view's, shared by its reads.
    Shared { _pin: Arc<Pin> },
}

/// Where a scan's rows come from.
pub(crate) enum ScanSource {
    /// The merge of the memtables and segments.
    Merged(Merged),
    /// A single segment and no memtable cell in the range (a compacted table at rest,
    /// or a table with one segment whose key span meets the range): the segment's own
    /// iterator, tombstones and cells expired at the `u64` (the scan's moment on the
    /// expiry clock) skipped; no merge, and `next_with` lends each row straight from the
    /// map.
    Segment(SegmentIter<SegmentHandle>, u64),
    /// No range tombstone anywhere, and more than one segment or memtables holding
    /// some of the range: forward steps lend the base segment's rows and merge only
    /// at the keys the others hold; a step back or a seek turns it into `Merged`.
    Overlay(Box<Overlay>),
}

/// The rows of a table's only segment in `bounds`, read through its handle (the
/// iterator derefs the handle on every row: one pointer away from the reader).
pub(super) fn sole_segment(h: SegmentHandle, bounds: KeyBounds, now: u64) -> ScanSource {
    ScanSource::Segment(
        SegmentIter::with_bounds(h, bounds.0, bounds.1).trusting_checked_blocks(),
        now,
    )
}

impl Scan {
    pub(crate) fn new(inner: ScanSource, pin: ScanPin) -> Scan {
        Scan { inner, _pin: pin }
    }

    /// Move the front to the first live key at or above `key` (within the scan's
    /// range): the next [`Iterator::next`] yields it.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        self.settle();
        match &mut self.inner {
            ScanSource::Merged(m) => m.seek(key.as_ref()),
            ScanSource::Segment(it, _) => it.seek(key.as_ref()),
            ScanSource::Overlay(_) => {} // settled above
        }
    }

    /// Move the back to the last live key at or below `key` (within the scan's range):
    /// the next [`DoubleEndedIterator::next_back`] yields it.
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        self.settle();
        match &mut self.inner {
            ScanSource::Merged(m) => m.seek_back(key.as_ref()),
            ScanSource::Segment(it, _) => it.seek_back(key.as_ref()),
            ScanSource::Overlay(_) => {} // settled above
        }
    }

    /// Turn an overlay into the general merge over the same picture (for a step back
    /// or a seek, which it does not serve), its front where the overlay's was.
    fn settle(&mut self) {
        if !matches!(self.inner, ScanSource::Overlay(_)) {
            return;
        }
        let none = MergeIter::new(Vec::<BoxedCursor<'static>>::new(), TombstonePolicy::Keep);
        if let ScanSource::Overlay(o) = std::mem::replace(&mut self.inner, ScanSource::Merged(none))
        {
            self.inner = ScanSource::Merged(o.into_merge());
        }
    }

    /// The next row, handed to `f` borrowed (key, value): the allocation-free form of
    /// [`Iterator::next`] where the table is one segment (a compacted table: the bytes
    /// come straight from the map, or the scan's buffer in `standard` mode; keys its
    /// memtables hold are merged first); otherwise the merged row is lent. `None` at
    /// the end; after an error the scan is done.
    pub fn next_with<T>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> T) -> Option<Result<T>> {
        self.step_with::<true, T>(f)
    }

    /// The next row from the back, handed to `f` borrowed: the allocation-free form of
    /// [`DoubleEndedIterator::next_back`] (see [`Scan::next_with`]).
    pub fn next_back_with<T>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> T) -> Option<Result<T>> {
        self.step_with::<false, T>(f)
    }

    fn step_with<const FWD: bool, T>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8]) -> T,
    ) -> Option<Result<T>> {
        if !FWD {
            self.settle();
        }
        match &mut self.inner {
            ScanSource::Overlay(o) => o.next_with(f),
            ScanSource::Merged(m) => {
                let r = if FWD {
                    m.next_skipping()
                } else {
                    m.next_back_skipping()
                };
                r.map(|r| r.map(|e| f(&e.key, &e.value)))
            }
            // Without a cell with an expiry (`now` 0) the check is the tombstone flag
            // alone, as before TTL.
            ScanSource::Segment(it, 0) => Self::sole_step::<FWD, false, T>(it, 0, f),
            ScanSource::Segment(it, now) => {
                let now = *now;
                Self::sole_step::<FWD, true, T>(it, now, f)
            }
        }
    }
}

impl Scan {
    /// The next live row of a sole segment, lent to `f`; with `TTL`, a cell expired at
    /// `now` is skipped as a tombstone is.
    #[inline(always)]
    fn sole_step<const FWD: bool, const TTL: bool, T>(
        it: &mut SegmentIter<SegmentHandle>,
        now: u64,
        f: impl FnOnce(&[u8], &[u8]) -> T,
    ) -> Option<Result<T>> {
        let mut f = Some(f);
        loop {
            let lend = |r: RecordRef<'_>| {
                // `f` runs once, on the first live row (a tombstone or an expired cell
                // keeps it).
                if r.tombstone || (TTL && is_dead(false, r.expires, || now)) {
                    return None;
                }
                f.take().map(|f| f(r.key, r.value))
            };
            let got = if FWD {
                it.next_with(lend)
            } else {
                it.next_back_with(lend)
            };
            match got? {
                Ok(Some(t)) => return Some(Ok(t)),
                Ok(None) => continue, // a tombstone: the key is deleted
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            ScanSource::Merged(m) => m.next_skipping().map(|r| r.map(|e| (e.key, e.value))),
            ScanSource::Segment(..) | ScanSource::Overlay(_) => {
                self.next_with(|k, v| (k.to_vec(), v.to_vec()))
            }
        }
    }
}

impl DoubleEndedIterator for Scan {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.settle();
        match &mut self.inner {
            ScanSource::Merged(m) => m.next_back_skipping().map(|r| r.map(|e| (e.key, e.value))),
            ScanSource::Segment(..) | ScanSource::Overlay(_) => {
                self.next_back_with(|k, v| (k.to_vec(), v.to_vec()))
            }
        }
    }
}

/// A range scan over a table's winning cells, tombstones included, in key order, from
/// either end; seeks as [`Scan`] does.
pub struct Cells {
    inner: Merged,
    /// Keeps the memtable versions the scan reads.
    _pin: ScanPin,
}

impl Cells {
    pub(crate) fn new(inner: Merged, pin: ScanPin) -> Cells {
        Cells { inner, _pin: pin }
    }

    /// Move the front to the first key at or above `key` (see [`Scan::seek`]).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        self.inner.seek(key.as_ref())
    }

    /// Move the back to the last key at or below `key` (see [`Scan::seek_back`]).
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        self.inner.seek_back(key.as_ref())
    }
}

impl Iterator for Cells {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next_skipping()
    }
}

impl DoubleEndedIterator for Cells {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back_skipping()
    }
}
