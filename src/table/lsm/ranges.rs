//! Range deletes: [`Table::delete_range`], and how the reads apply range tombstones.
//!
//! A range tombstone lives where the write that made it went: the memtable (numbered
//! by its commit log record, `memtable/ranges.rs`), then the segment a flush writes
//! (the meta's range tombstone block), then a compaction's output until it is purged.
//!
//! - A point read folds the newest range tombstone covering its key, from every
//!   memtable it reads and every segment of its view, into the memtables' winner as a
//!   point tombstone at that timestamp ([`shadow`]): the segments' cells then lose to
//!   it exactly as to a point tombstone (rule 2 of `cell.rs`: a tie goes to the
//!   deletion), and a segment whose cells are all older is not searched. Tables
//!   without range tombstones pay one emptiness check per memtable and segment.
//! - A scan collects the range tombstones of its sources that meet its range
//!   ([`range_filter`]) and the merge leaves out the cells they delete; where no source
//!   may hold a newer cell inside a deleted fragment, the scan seeks past the fragment
//!   instead of reading each cell (`merge` invariant 5).
//! - [`Table::range_tombstones`] is the table's whole set, for repair.
//! - Compaction drops the cells its inputs' range tombstones delete and keeps the
//!   range tombstones, purging one under the cutoff rule of point tombstones
//!   (`maintenance.rs`).

use std::sync::Arc;

use super::Table;
use crate::error::Result;
use crate::format::ranges::RangeTombstones;
use crate::lifecycle::View;
use crate::range::{KeyBounds, KeyRange};
use crate::table::batch::WriteBatch;
use crate::table::memtable::{CellValue, Memtable, SharedCell};
use crate::table::merge::RangeFilter;

impl Table {
    /// Delete every key in `range` with one range tombstone (one commit log record,
    /// one small entry in the memtable, later a few bytes in a segment's meta), not a
    /// tombstone per key: deleting a million keys costs what deleting one does. Every
    /// cell of the range written before it is hidden from reads and scans at once, and
    /// dropped by compaction; cells written after it survive. The range is any
    /// [`KeyRange`] (`b"a"..b"m"`, `..=k`, `(Bound::Excluded(a), Bound::Unbounded)`,
    /// a prefix's range as [`Table::scan_prefix`] takes it...). Returns the write's sequence number (see
    /// [`Table::write`]). An empty or inverted range is [`crate::Error::InvalidArgument`]
    /// and writes nothing.
    pub fn delete_range(&self, range: impl KeyRange) -> Result<u64> {
        self.write(WriteBatch::new().delete_range(range))
    }

    /// [`Table::delete_range`] with an explicit timestamp (microseconds): it deletes
    /// the cells of the range at or below `ts`.
    pub fn delete_range_at(&self, range: impl KeyRange, ts: u64) -> Result<u64> {
        self.write(WriteBatch::new().delete_range_at(range, ts))
    }

    /// Every range tombstone of the table as one set (disjoint fragments, each at the
    /// newest timestamp covering it): the union of every memtable's and every segment's
    /// of the current view, as one picture of the table (never half
    /// of a batch). Repair compares and streams it ([`crate::repair`]); purged range
    /// tombstones are gone from it, as purged point tombstones are from
    /// [`Table::scan_cells`].
    pub fn range_tombstones(&self) -> Result<RangeTombstones> {
        self.ctx.check_open()?;
        let (pin, snap) = self.capture();
        let mut all = RangeTombstones::new();
        for m in snap.mems.iter().filter(|m| m.has_ranges()) {
            m.add_ranges_at(pin.seq(), &mut all);
        }
        for s in &snap.view.segments {
            all.extend(s.range_tombstones());
        }
        Ok(all)
    }
}

/// Make `best` the winner of itself and a range tombstone at `cover` covering the key:
/// the range tombstone as a point tombstone if it is at least as new (a tie goes to the
/// deletion). In place: a cell is not moved for nothing (it holds a short value).
#[inline]
pub(super) fn shadow(best: &mut Option<SharedCell>, cover: Option<u64>) {
    let Some(ts) = cover else {
        return;
    };
    if best.as_ref().is_some_and(|b| b.ts > ts) {
        return;
    }
    *best = Some(SharedCell {
        value: CellValue::EMPTY,
        ts,
        tombstone: true,
        expires: 0,
    });
}

/// The newest range tombstone covering `key` among `view`'s segments.
#[inline]
pub(super) fn view_cover(view: &View, key: &[u8]) -> Option<u64> {
    let mut cover = None;
    for s in &view.segments {
        let r = s.range_tombstones();
        if !r.is_empty() {
            cover = cover.max(r.cover_ts(key));
        }
    }
    cover
}

/// The range tombstones a scan of `bounds` at `at` over `mems` and `view` applies, and
/// per source (memtables first, then segments, as the scan orders them) the newest
/// timestamp of a cell it holds; `None` when no source holds a range tombstone.
pub(super) fn range_filter(
    mems: &[&Arc<Memtable>],
    view: &View,
    at: u64,
    bounds: &KeyBounds,
) -> Option<RangeFilter> {
    let any = mems.iter().any(|m| m.has_ranges())
        || view
            .segments
            .iter()
            .any(|s| !s.range_tombstones().is_empty());
    if !any {
        return None;
    }
    let (lo, hi) = plain_bounds(bounds);
    let mut all = RangeTombstones::new();
    for m in mems.iter().filter(|m| m.has_ranges()) {
        let mut mine = RangeTombstones::new();
        m.add_ranges_at(at, &mut mine);
        all.extend(&mine.overlapping_set(&lo, hi.as_deref()));
    }
    for s in &view.segments {
        let r = s.range_tombstones();
        if !r.is_empty() {
            all.extend(&r.overlapping_set(&lo, hi.as_deref()));
        }
    }
    if all.is_empty() {
        return None;
    }
    let newest = mems
        .iter()
        .map(|m| m.max_ts())
        .chain(view.segments.iter().map(|s| s.stats().max_ts))
        .collect();
    Some(RangeFilter {
        ranges: Arc::new(all),
        newest,
    })
}

/// `bounds` as `[lo, hi)` over keys, loosely (an excluded start or included end kept
/// as the key itself widens the range by one key: only used to pick the range
/// tombstones that may matter).
fn plain_bounds(bounds: &KeyBounds) -> (Vec<u8>, Option<Vec<u8>>) {
    use std::ops::Bound;
    let lo = match &bounds.0 {
        Bound::Included(k) | Bound::Excluded(k) => k.clone(),
        Bound::Unbounded => Vec::new(),
    };
    let hi = match &bounds.1 {
        Bound::Included(k) => {
            let mut k = k.clone();
            k.push(0);
            Some(k)
        }
        Bound::Excluded(k) => Some(k.clone()),
        Bound::Unbounded => None,
    };
    (lo, hi)
}
