//! A side run: the cells of a view's segments beside its main chain (a leveled
//! table's level 0), merged once into one sorted array in memory, that forward scans
//! read in their place (issue 19 item 3, YCSB E).
//!
//! A scan under writes seeks into every level 0 segment its range meets: each seek is
//! a search of the segment's summary and of a block, a few cache misses, and each of
//! its rows is a step of a block walk and a comparison in the side merge
//! ([`super::overlay`]). In YCSB E's state (two or three level 0 segments beside level
//! 1 and a memtable) these came to about a third of a scan's time, and LMDB reads one
//! B-tree. A side run merges the overlapping segments' cells ahead of the reads, so a
//! scan makes one search of an array and steps along it: the idea of REMIX (Zhong et
//! al., FAST '21), which keeps a sorted view across runs; this one copies the cells,
//! bounded by a budget, rather than pointing into the segments.
//!
//! Invariants:
//! 1. A run holds, for every key some segment it covers holds, the winner of those
//!    segments' cells of the key by [`crate::table::cell`]'s rule (tombstones and
//!    expired cells included), keys strictly ascending: what the side merge would
//!    take from those segments (the merge's invariant 1, over a subset of its
//!    sources, gives the same winner overall).
//! 2. A run is built from one view (`generation`) and read only with a picture of that
//!    view ([`Table::side_run_for`]): views never change, so a run never goes stale
//!    for the scans that use it.
//! 3. A scan reads the run in place of segments only when its base chain holds no
//!    segment the run covers, and every other segment it meets is covered
//!    ([`SideRun::serves`]); otherwise it reads the segments, as without a run.
//! 4. A run is never larger than the table's `side_run_bytes` (cells and bytes
//!    counted); a view whose side segments do not fit gets none. Every table's runs,
//!    held and being built, charge the store's side run budget (`memory.side_run_mb`,
//!    `budget.rs`) no more than it holds: a run that does not fit in what is left is
//!    not built.
//!
//! When a run is built is decided by hints, not locks: a scan without a run of its
//! view asks (`SideRuns::wanted`, one compaction round scheduled), scans that read or
//! ask renew the table's interest ([`INTEREST`] views built ahead), and a view whose
//! run did not fit or failed to build is skipped (`SideRuns::skip`). The table holds
//! one run at a time (`arc_swap`), replaced under the compaction lock. A hint lost to a
//! race costs a build, or a scan read the segments, never a wrong answer: a scan
//! reads a run only of its own view (invariant 2).

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::format::{cmp_keys, key_prefix};
use crate::io::prefetch::prefetch_read;
use crate::lifecycle::{SegmentHandle, View};
use crate::segment::{RecordRef, SegmentIter};
use crate::table::merge::CopyMerge;

use super::overlay::SideCursor;
use super::snap::{first_segments, segment_bit};
use super::Table;

mod budget;
#[cfg(test)]
mod tests;

pub(crate) use budget::{RunBudget, RunCharge};
pub use budget::SideRunBudgetStats;

/// One cell of a run: its key and value at `at` in the run's bytes.
#[derive(Debug, Clone, Copy)]
struct RunCell {
    ts: u64,
    expires: u64,
    at: u32,
    key_len: u32,
    val_len: u32,
    tombstone: bool,
}

/// Bytes a run charges per cell beyond its key and value: the cell and its key's
/// prefix (a fence's eight bytes per [`FENCE`] cells are charged too).
pub(crate) const CELL_BYTES: usize = std::mem::size_of::<RunCell>() + 8;

/// Cells per fence: a search finds the fence before its key among a run's fences, then
/// the key among the [`FENCE`] prefixes after it (a few cache lines), rather than
/// probing cells across the whole array (with 85,000 cells, a binary search over the
/// cells took as long as seeking into the level 0 segment they came from).
const FENCE: usize = 32;

/// Prefixes in a cache line: a fence's group is four lines, prefetched together.
const LINE_PREFIXES: usize = 64 / 8;

/// The merged cells of a view's side segments: see the module docs.
#[derive(Debug)]
pub(crate) struct SideRun {
    /// The view it was built from ([`View::generation`]).
    pub(crate) generation: u64,
    /// The view's segments it covers, a bit per index (views of at most 64 segments).
    covers: u64,
    cells: Vec<RunCell>,
    /// Each cell's key's [`key_prefix`], apart from the cells: what a search reads.
    prefixes: Vec<u64>,
    /// Every [`FENCE`]th prefix.
    fences: Vec<u64>,
    bytes: Vec<u8>,
    /// What it holds of the store's side run budget: what it charges (invariant 4).
    charge: RunCharge,
}

impl SideRun {
    /// The run of `view`'s segments `covers` (its [`side_segments`]), if their merged
    /// cells fit in the bytes `charge` holds (invariant 4); the run keeps of them what
    /// it charges.
    fn build(view: &View, covers: u64, charge: RunCharge) -> Result<Option<SideRun>> {
        let budget = charge.bytes();
        let side = || {
            let segs = view.segments.iter().enumerate();
            segs.filter(move |&(i, _)| covers & segment_bit(i) != 0)
                .map(|(_, h)| h)
        };
        // Their cells' bookkeeping alone past the budget: none, without reading them.
        let cells: u64 = side().map(|h| h.stats().entry_count).sum();
        if cells.saturating_mul(CELL_BYTES as u64) > budget {
            return Ok(None);
        }
        // At most one cell per cell of the segments (fewer where they share keys).
        let most = usize::try_from(cells).unwrap_or(usize::MAX);
        let mut run = SideRun {
            generation: view.generation,
            covers,
            cells: Vec::with_capacity(most),
            prefixes: Vec::with_capacity(most),
            fences: Vec::with_capacity(most.div_ceil(FENCE)),
            bytes: Vec::new(),
            charge,
        };
        // About as many bytes as their data files (less their records' framing, more
        // where blocks are compressed), within the budget: grown a doubling at a time,
        // the bytes of a run of 85,000 cells were reallocated some twenty times. Room
        // the allocator refuses is left to that growth.
        let data: u64 = side().map(|h| h.stats().data_len).sum();
        let _ = run.bytes.try_reserve_exact(usize::try_from(data.min(budget)).unwrap_or(0));
        let mut segs = side();
        let filled = match (segs.next(), segs.next()) {
            (Some(only), None) => run.fill_from(only, budget)?,
            _ => run.fill_merged(side(), budget)?,
        };
        if !filled {
            return Ok(None);
        }
        run.shrink();
        let charged = run.charged();
        run.charge.keep(charged);
        Ok(Some(run))
    }

    /// Push the winners of `segs`' cells (invariant 1) through a merge; false if they
    /// do not fit in `budget`.
    fn fill_merged<'a>(
        &mut self,
        segs: impl Iterator<Item = &'a SegmentHandle>,
        budget: u64,
    ) -> Result<bool> {
        let walks = segs.map(|h| {
            let all = SegmentIter::with_bounds(h.clone(), Bound::Unbounded, Bound::Unbounded);
            SideCursor::Seg(all.trusting_checked_blocks())
        });
        let mut merge = CopyMerge::new(walks);
        loop {
            merge.settle()?;
            let Some(c) = merge.current() else {
                return Ok(true);
            };
            if !self.push(c.as_ref(), budget) {
                return Ok(false);
            }
            merge.take();
        }
    }

    /// Push the cells of the one segment `h` (each key's only cell there, so its
    /// winner: invariant 1), lent by its walk rather than copied through a merge of one
    /// source, which took 40% of a build's instructions. Keys out of strictly ascending
    /// order, which the merge would refuse, are refused here too. False if they do not
    /// fit in `budget`.
    fn fill_from(&mut self, h: &SegmentHandle, budget: u64) -> Result<bool> {
        let mut walk = SegmentIter::with_bounds(h.clone(), Bound::Unbounded, Bound::Unbounded)
            .trusting_checked_blocks();
        loop {
            let pushed = walk.next_with(|r| match self.follows_last(r.key) {
                true => Ok(self.push(r, budget)),
                false => Err(Error::corrupt(
                    h.data.path(),
                    0,
                    "side run: keys out of ascending order",
                )),
            });
            match pushed {
                None => return Ok(true),
                Some(Ok(Ok(true))) => {}
                Some(Ok(Ok(false))) => return Ok(false),
                Some(Err(e)) | Some(Ok(Err(e))) => return Err(e),
            }
        }
    }

    /// Whether `key` comes after the last cell's key (or the run is empty).
    fn follows_last(&self, key: &[u8]) -> bool {
        let (Some(c), Some(&p)) = (self.cells.last(), self.prefixes.last()) else {
            return true;
        };
        cmp_keys(self.key_of(c), p, key).is_lt()
    }

    /// Append cell `r` (keys ascending), unless the run would pass `budget` bytes.
    fn push(&mut self, r: RecordRef<'_>, budget: u64) -> bool {
        let at = self.bytes.len();
        let after = at + r.key.len() + r.value.len();
        let fences = self.fences.len() + usize::from(self.cells.len() % FENCE == 0);
        let charged = (after + (self.cells.len() + 1) * CELL_BYTES + fences * 8) as u64;
        let (Ok(at), Ok(key_len), Ok(val_len)) = (
            u32::try_from(at),
            u32::try_from(r.key.len()),
            u32::try_from(r.value.len()),
        ) else {
            return false;
        };
        if charged > budget || u32::try_from(after).is_err() {
            return false;
        }
        self.bytes.extend_from_slice(r.key);
        self.bytes.extend_from_slice(r.value);
        let prefix = key_prefix(r.key);
        if self.cells.len() % FENCE == 0 {
            self.fences.push(prefix);
        }
        self.prefixes.push(prefix);
        self.cells.push(RunCell {
            ts: r.ts,
            expires: r.expires,
            at,
            key_len,
            val_len,
            tombstone: r.tombstone,
        });
        true
    }

    /// Give back what its arrays hold beyond their cells (their growth's spare room),
    /// so what it charges is what it holds.
    fn shrink(&mut self) {
        self.cells.shrink_to_fit();
        self.prefixes.shrink_to_fit();
        self.fences.shrink_to_fit();
        self.bytes.shrink_to_fit();
    }

    /// Bytes it holds: its cells, keys and values (what `side_run_bytes` bounds).
    pub(crate) fn charged(&self) -> u64 {
        (self.bytes.len() + self.cells.len() * CELL_BYTES + self.fences.len() * 8) as u64
    }

    /// Cells it holds.
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether a scan whose base chain is the segments `chain` (a bit per view index)
    /// and which meets the segments `meets` may read this run in place of every
    /// segment it meets beside its chain (invariant 3).
    #[inline]
    pub(crate) fn serves(&self, chain: u64, meets: u64) -> bool {
        chain & self.covers == 0 && meets & !chain & !self.covers == 0
    }

    /// Whether it covers segment `i` of its view.
    #[inline]
    pub(crate) fn covers(&self, i: usize) -> bool {
        self.covers & segment_bit(i) != 0
    }

    /// Start loading what reading cell `i` reads: its bytes (its cell was prefetched
    /// a step before, so finding them waits on nothing) and the cell after it.
    #[inline]
    fn prefetch(&self, i: usize) {
        if let Some(c) = self.cells.get(i) {
            prefetch_read(&self.bytes, c.at as usize);
            prefetch_read(&self.cells, i + 1);
        }
    }

    #[inline(always)]
    fn record(&self, i: usize) -> RecordRef<'_> {
        let c = &self.cells[i];
        let key_end = (c.at + c.key_len) as usize;
        RecordRef {
            key: &self.bytes[c.at as usize..key_end],
            value: &self.bytes[key_end..key_end + c.val_len as usize],
            ts: c.ts,
            tombstone: c.tombstone,
            expires: c.expires,
        }
    }

    /// The index of the first cell whose key lies above `lo` (a lower bound): the
    /// cells whose prefix is below the key's come first, then those sharing it, in key
    /// order.
    fn first_above(&self, lo: Bound<&[u8]>) -> usize {
        let (k, strict) = match lo {
            Bound::Unbounded => return 0,
            Bound::Included(k) => (k, false),
            Bound::Excluded(k) => (k, true),
        };
        let p = key_prefix(k);
        let (mut at, mut end) = (self.prefix_point(|x| x < p), self.prefix_point(|x| x <= p));
        while at < end {
            let mid = at + (end - at) / 2;
            let o = cmp_keys(k, p, self.key_of(&self.cells[mid]));
            if o.is_gt() || (strict && o.is_eq()) {
                at = mid + 1;
            } else {
                end = mid;
            }
        }
        at
    }

    /// The index of the first cell whose prefix is not `below` (a predicate true up to
    /// some prefix and false after): its fence, then its place among the fence's cells.
    fn prefix_point(&self, below: impl Fn(u64) -> bool) -> usize {
        let Some((lo, hi)) = self.fence_group(&below) else {
            return 0;
        };
        lo + self.prefixes[lo..hi].partition_point(|&x| below(x))
    }

    /// The cells after the last fence `below` holds (see [`Self::prefix_point`]), their
    /// prefixes' lines started loading at once (four of them): the search's probes then
    /// wait for one miss, not one each. `None` where no fence is below.
    #[inline]
    fn fence_group(&self, below: impl Fn(u64) -> bool) -> Option<(usize, usize)> {
        let f = self.fences.partition_point(|&x| below(x));
        let lo = f.checked_sub(1)? * FENCE;
        let hi = (f * FENCE).min(self.prefixes.len());
        for at in (lo..hi).step_by(LINE_PREFIXES) {
            prefetch_read(&self.prefixes, at);
        }
        Some((lo, hi))
    }

    /// Start loading what a search for `key` reads: the prefixes after its fence. A
    /// scan calls it beside the seeks it prefetches, before its memtables' searches,
    /// so these misses overlap theirs.
    pub(crate) fn prefetch_seek(&self, key: &[u8]) {
        let p = key_prefix(key);
        let _ = self.fence_group(|x| x < p);
    }

    /// The index past the last cell whose key lies below `hi` (an upper bound).
    fn past_below(&self, hi: Bound<&[u8]>) -> usize {
        match hi {
            Bound::Unbounded => self.cells.len(),
            Bound::Included(k) => self.first_above(Bound::Excluded(k)),
            Bound::Excluded(k) => self.first_above(Bound::Included(k)),
        }
    }

    fn key_of(&self, c: &RunCell) -> &[u8] {
        &self.bytes[c.at as usize..(c.at + c.key_len) as usize]
    }
}

/// The segments of `view` beside its main chain, a bit per index: the chain holding
/// the most cells ([`View::chain_cells`]), from its first segment (of those, the one
/// with the smallest key) along [`View::next_disjoint`]. `None` when there are none,
/// when the view has more than 64 segments, or when a segment holds range tombstones
/// (scans then merge every source: `TableSnap::scan`).
pub(crate) fn side_segments(view: &View) -> Option<u64> {
    let segs = &view.segments;
    if segs.len() > 64 || segs.iter().any(|h| !h.range_tombstones().is_empty()) {
        return None;
    }
    let first = (0..segs.len()).max_by(|&a, &b| {
        let by_cells = view.chain_cells(a).cmp(&view.chain_cells(b));
        // Of equal chains, the one with the smallest key is the chain's first.
        by_cells.then_with(|| segs[b].stats().min_key.cmp(&segs[a].stats().min_key))
    })?;
    let mut main = segment_bit(first);
    let mut at = first;
    while let Some(next) = view.next_disjoint(at) {
        if main & segment_bit(next) != 0 {
            break; // a cycle cannot happen (keys ascend); guard all the same
        }
        main |= segment_bit(next);
        at = next;
    }
    let side = first_segments(segs.len()) & !main;
    (side != 0).then_some(side)
}

/// A cursor over a run's cells within bounds: what the overlay's side reads in place of
/// the segments the run covers, its cells lent from the run (`side.rs`).
pub(crate) struct RunCursor {
    run: Arc<SideRun>,
    /// The bounds' cells are `lo_at..hi_at`; the front is at `front`, the back
    /// before `back` (the ends meet).
    lo_at: usize,
    hi_at: usize,
    front: usize,
    back: usize,
}

impl RunCursor {
    /// The cells of `run` within `lo`..`hi`.
    pub(crate) fn new(run: Arc<SideRun>, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> RunCursor {
        let lo_at = run.first_above(lo);
        let hi_at = run.past_below(hi).max(lo_at);
        // The search compared no cell where no key shares the start's prefix: the
        // first two cells (and, through `next_into`, the bytes after) start loading.
        prefetch_read(&run.cells, lo_at);
        prefetch_read(&run.cells, lo_at + 1);
        RunCursor {
            run,
            lo_at,
            hi_at,
            front: lo_at,
            back: hi_at,
        }
    }

    /// Whether it holds no cell (within its bounds, from the start).
    pub(crate) fn is_empty(&self) -> bool {
        self.lo_at == self.hi_at
    }

    /// The front's cell, lent from the run (`None` once the ends meet).
    #[inline(always)]
    pub(crate) fn head(&self) -> Option<RecordRef<'_>> {
        (self.front < self.back).then(|| self.run.record(self.front))
    }

    /// Step the front past its cell, which stays readable as [`RunCursor::cell`] of the
    /// index returned (the run never changes); the next cell's bytes start loading.
    #[inline]
    pub(crate) fn advance(&mut self) -> usize {
        let at = self.front;
        self.front += 1;
        // The next cell is read when the scan's walk of its chain reaches its key, a
        // few rows on: its loads overlap that walk.
        self.run.prefetch(self.front);
        at
    }

    /// Cell `at` of the run, one [`RunCursor::advance`] returned.
    #[inline]
    pub(crate) fn cell(&self, at: usize) -> RecordRef<'_> {
        self.run.record(at)
    }
}

/// A table's side run and the hints that decide when one is built (the module docs).
pub(crate) struct SideRuns {
    /// The side run of some view, read only with a picture of that view.
    run: ArcSwapOption<SideRun>,
    /// A scan met segments beside its chain with no side run of its view: the next
    /// compaction round builds one.
    wanted: AtomicBool,
    /// The generation of a view whose side run a round did not build (too large, or a
    /// segment failed to read): its scans do not ask again (`u64::MAX`: none).
    skip: AtomicU64,
    /// Views still to get a side run built ahead of their scans ([`INTEREST`]).
    interest: AtomicU32,
    /// Scans that read the side run.
    scans: CachePadded<AtomicU64>,
}

impl SideRuns {
    pub(crate) fn new() -> SideRuns {
        SideRuns {
            run: ArcSwapOption::empty(),
            wanted: AtomicBool::new(false),
            skip: AtomicU64::new(u64::MAX),
            interest: AtomicU32::new(0),
            scans: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Forget the view skipped as too large: a new budget may fit it.
    pub(crate) fn retry_skipped(&self) {
        self.skip.store(u64::MAX, Ordering::Relaxed);
    }

    /// The run's bytes and cells (0 without one), and the scans that read a run.
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        let run = self.run.load();
        let (bytes, cells) = run.as_ref().map_or((0, 0), |r| (r.charged(), r.len() as u64));
        (bytes, cells, self.scans.load(Ordering::Relaxed))
    }
}

impl Table {
    /// The table's side run of `view`, if it holds one (invariant 2).
    #[inline]
    pub(crate) fn side_run_for(&self, view: &View) -> Option<Arc<SideRun>> {
        let run = self.side_runs.run.load();
        match &*run {
            Some(r) if r.generation == view.generation => Some(Arc::clone(r)),
            _ => None,
        }
    }

    /// A scan of the view of `generation` met segments beside its chain and read them
    /// (no run of its view): the table is scanned ([`INTEREST`]), and the next
    /// compaction round is asked to build a run, if the table keeps one
    /// ([`Table::side_run_bound`] above 0) and a round has not found that view's side
    /// segments too large (or unreadable). Asks once until a round looks.
    pub(crate) fn want_side_run(&self, generation: u64) {
        if self.side_runs.wanted.load(Ordering::Relaxed)
            || self.side_runs.skip.load(Ordering::Relaxed) == generation
            || self.side_run_bound() == 0
        {
            return;
        }
        self.note_side_run_interest();
        if !self.side_runs.wanted.swap(true, Ordering::AcqRel) {
            self.ctx.schedule_compaction(self);
        }
    }

    /// The most bytes the table's run may hold: its `side_run_bytes`, or the store's
    /// whole budget if less (0: the table keeps none, and its scans ask for none).
    fn side_run_bound(&self) -> u64 {
        let store = self.ctx.side_run_budget.limit();
        self.config().side_run_bytes.min(store)
    }

    /// A scan read the side run.
    #[inline]
    pub(crate) fn count_side_run_scan(&self) {
        self.side_runs.scans.fetch_add(1, Ordering::Relaxed);
        self.note_side_run_interest();
    }

    /// A scan read or asked for a side run: the next [`INTEREST`] views get one built
    /// ahead of their scans. (A load first: scans do not all write the same line.)
    #[inline]
    fn note_side_run_interest(&self) {
        if self.side_runs.interest.load(Ordering::Relaxed) != INTEREST {
            self.side_runs.interest.store(INTEREST, Ordering::Relaxed);
        }
    }

    /// After a compaction round found nothing to merge: drop a side run of an older
    /// view (its memory), and build one of the current view if the table keeps one and
    /// a scan asked for it, or scans read or asked for one within the last
    /// [`INTEREST`] views (each view built ahead spends one). A run that cannot be
    /// built (a segment fails to read) is left out: scans read the segments and report
    /// the error themselves. So is one that does not fit in its table's bound or in
    /// what the store's budget has left, until the next view (a flush or compaction).
    pub(crate) fn refresh_side_run(&self) {
        let budget = self.side_run_bound();
        let view = self.set.view();
        // A run of this view within the budget (which a new setting may have cut) stays.
        if budget > 0 && self.side_run_for(&view).is_some_and(|r| r.charged() <= budget) {
            return;
        }
        self.side_runs.run.store(None);
        let asked = self.side_runs.wanted.swap(false, Ordering::AcqRel);
        if budget == 0 || self.side_runs.skip.load(Ordering::Relaxed) == view.generation {
            return;
        }
        let ahead = || {
            let spend = |n: u32| n.checked_sub(1);
            let interest = &self.side_runs.interest;
            interest.fetch_update(Ordering::Relaxed, Ordering::Relaxed, spend).is_ok()
        };
        if !asked && !ahead() {
            return;
        }
        // Not for this view again (its scans would ask after every round): no segment
        // beside its chain, or a view a run cannot serve (range tombstones, too many
        // segments).
        let Some(covers) = side_segments(&view) else {
            self.side_runs.skip.store(view.generation, Ordering::Relaxed);
            return;
        };
        // What the store's budget has left, if less than the table's own bound.
        let store = &self.ctx.side_run_budget;
        let charge = store.reserve_up_to(budget);
        let cut = charge.bytes() < budget;
        match SideRun::build(&view, covers, charge) {
            Ok(Some(run)) => self.side_runs.run.store(Some(Arc::new(run))),
            // Too large: not for this view again either.
            Ok(None) => {
                self.side_runs.skip.store(view.generation, Ordering::Relaxed);
                if cut {
                    store.refuse(budget);
                }
            }
            Err(e) => {
                self.side_runs.skip.store(view.generation, Ordering::Relaxed);
                tracing::warn!(table = %self.name, error = %e, "side run not built");
            }
        }
    }
}

/// Views a table keeps a side run built for, ahead of their scans, after its scans last
/// read or asked for one: a table scanned under writes finds the run of the view a
/// flush installs there when its scans come back, one scanned once in a while stops
/// paying for runs nobody reads.
pub(crate) const INTEREST: u32 = 8;

#[cfg(feature = "testing")]
impl Table {
    /// Build the side run of the current view now, as a compaction round would after a
    /// scan asked (tests: without the round's merges). Whether the table holds one.
    #[doc(hidden)]
    pub fn build_side_run(&self) -> bool {
        let _one_at_a_time = self.compaction_lock.lock();
        self.side_runs.wanted.store(true, Ordering::Release);
        self.refresh_side_run();
        self.side_run_for(&self.set.view()).is_some()
    }
}
