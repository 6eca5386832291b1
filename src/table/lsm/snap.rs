//! [`TableSnap`]: one table as a read at some sequence number sees it ([`Table::capture`]),
//! and the reads of [`crate::table::view`] through it.

use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

use super::overlay::{side_of, Overlay, SideCursor, CHAIN};
use super::ranges::range_filter;
use super::scan::{sole_segment, Merged};
use super::side_run::{RunCursor, SideRun};
use super::ScanSource;
use super::{MemList, Table};
use crate::error::Result;
use crate::format::{key_hash, key_prefix};
use crate::lifecycle::{SegmentHandle, SegmentSet, View};
use std::ops::Bound;

use crate::range::{self, KeyBounds};
use crate::segment::SegmentIter;
use crate::table::memtable::{Memtable, OwnedMemtableIter, ReadAt, SharedCell};
use crate::table::merge::{BoxedCursor, MemtableCursor, MergeIter, TombstonePolicy};
use crate::table::value::Value;
use crate::table::view::Pin;

/// A scan reads ahead in each memtable, at first, the keys it holds on average in this
/// many of the table's rows, and one more (at most the usual first batch): the merge
/// needs the memtable's next key past each one it takes (the overlay's cap), and a
/// step to it costs a cache miss where a second search of the memtable's map costs
/// several (a dozen or more in the skiplist it was then). (With one node fewer,
/// 1..100-row scans over 1M keys took 1.04 times as long, 20,000 keys in the memtable
/// or E's end state alike.)
const PRIME_ROWS: u64 = 32;

/// May `mems` or `view` hold a cell with an expiry (TTL)? A read of them that finds none
/// need not read the expiry clock, and nothing in them changes with time.
pub(crate) fn may_expire<'a>(mut mems: impl Iterator<Item = &'a Memtable>, view: &View) -> bool {
    mems.any(|m| m.has_expiring()) || view.segments.iter().any(|s| s.stats().expiring_count > 0)
}

impl Table {
    /// This table as a read at the visible sequence number sees it: registered (so the
    /// memtables keep the versions it reads), then the memtables (invariant 2), then the
    /// view, under the store's install lock (visibility invariant 3).
    pub(crate) fn capture(&self) -> (Pin, TableSnap) {
        let _install = self.ctx.install.read();
        let pin = Pin::new(&self.ctx);
        let mut snap = self.snap(0);
        snap.now = self.expiry_now_for(&snap.mems, &snap.view);
        (pin, snap)
    }

    /// The expiry clock's reading, if `mems` or `view` may hold a cell with an expiry
    /// (a read of them judges expiry there); else 0, never consulted (issue 20: the
    /// clock is a system call here, some 1.5 µs a scan, so tables without TTL cells
    /// do not read it).
    pub(crate) fn expiry_now_for(&self, mems: &[Arc<Memtable>], view: &View) -> u64 {
        if may_expire(mems.iter().map(|m| &**m), view) {
            self.ctx.clock.expiry_now()
        } else {
            0
        }
    }

    /// The memtables, then the view, judging expiry at `now`. The caller holds the
    /// install lock and a [`Pin`].
    pub(crate) fn snap(&self, now: u64) -> TableSnap {
        // A memtable empty now holds nothing the read sees, ever: every write at or
        // below the read's number is visible, so applied already. Leaving it out spares
        // each point read through a view a search of it.
        let mut mems = self.memtables();
        mems.retain(|m| !m.is_empty());
        let view = self.set.view();
        TableSnap {
            set: Arc::clone(&self.set),
            mems,
            run: self.side_run_for(&view),
            view,
            now,
        }
    }
}

/// One table as a read at some sequence number sees it: its memtables (newest first,
/// read with that number) and its segment view, taken in that order (invariant 2) under
/// the store's install lock ([`crate::table::visibility`]).
#[derive(Clone)]
pub(crate) struct TableSnap {
    /// The table's segment set (which table this is: a table dropped and created again
    /// has another).
    pub(crate) set: Arc<SegmentSet>,
    pub(crate) mems: MemList,
    pub(crate) view: Arc<View>,
    /// The table's side run of `view`, if it has one (`side_run.rs` invariant 2).
    pub(crate) run: Option<Arc<SideRun>>,
    /// The moment on the expiry clock its reads judge expiry at, fixed at its capture
    /// (so a read view never changes: a cell expiring later is live in it).
    pub(crate) now: u64,
}

impl TableSnap {
    /// A table that did not exist when the read began.
    pub(crate) fn empty(set: Arc<SegmentSet>, now: u64) -> TableSnap {
        TableSnap {
            set,
            mems: MemList::new(),
            view: Arc::new(View::default()),
            run: None,
            now,
        }
    }

    /// The view alone (every memtable empty), judging expiry at `now`.
    pub(crate) fn of_view(set: &Arc<SegmentSet>, now: u64) -> TableSnap {
        TableSnap {
            set: Arc::clone(set),
            mems: MemList::new(),
            view: set.view(),
            run: None,
            now,
        }
    }

    fn best(&self, key: &[u8], h: u64, at: u64) -> Option<SharedCell> {
        Table::best_of(self.mems.iter().map(|m| &**m), key, h, ReadAt::Seq(at))
    }

    pub(crate) fn get(&self, at: u64, key: &[u8]) -> Result<Option<Value>> {
        let view = &self.view;
        let h = key_hash(key);
        let now = self.now;
        let mut best = self.best(key, h, at);
        let place = Table::resolve(view, key, h, &mut best, |w| {
            w.and_then(|w| w.place(view, || now))
        })?;
        Ok(place.and_then(|p| Value::at(view, p, &mut best)))
    }

    pub(crate) fn get_with<R>(
        &self,
        at: u64,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        let h = key_hash(key);
        Table::resolve(&self.view, key, h, &mut self.best(key, h, at), |w| {
            f(w.and_then(|w| (!w.is_dead(|| self.now)).then_some(w.value)))
        })
    }

    pub(crate) fn contains_key(&self, at: u64, key: &[u8]) -> Result<bool> {
        let h = key_hash(key);
        Table::resolve(&self.view, key, h, &mut self.best(key, h, at), |w| {
            w.is_some_and(|w| !w.is_dead(|| self.now))
        })
    }

    pub(crate) fn multi_get<K: AsRef<[u8]>>(
        &self,
        at: u64,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        keys.into_iter().map(|k| self.get(at, k.as_ref())).collect()
    }

    /// The live rows in `bounds` for a read at `at`: the segment's own iterator when
    /// one segment holds keys in `bounds` and no memtable does, else the merge.
    ///
    /// A memtable with no key in `bounds` now never holds a row of this read there:
    /// every write the read sees (numbered at or below `at`) was applied before the read
    /// was registered, and a key written later is numbered above `at` (as for an empty
    /// memtable, [`Table::snap`]). So the range probe decides for the scan's lifetime
    /// (its seeks stay within `bounds`), and a table whose memtables hold nothing in a
    /// scan's range scans as one at rest (issue 19). Segments are left out by their key
    /// spans alike ([`meets`]).
    pub(crate) fn scan(&self, at: u64, bounds: KeyBounds) -> ScanSource {
        self.scan_with(at, bounds, self.run.clone())
    }

    /// [`TableSnap::scan`] of a picture used once: its side run moved into the scan
    /// rather than cloned (each count of a run shared by every scan of the table is a
    /// write to one cache line, which scans on other cores then miss).
    pub(crate) fn into_scan(mut self, at: u64, bounds: KeyBounds) -> ScanSource {
        let run = self.run.take();
        self.scan_with(at, bounds, run)
    }

    /// [`TableSnap::scan`] with `run`, the picture's side run.
    fn scan_with(&self, at: u64, bounds: KeyBounds, run: Option<Arc<SideRun>>) -> ScanSource {
        let segs = &self.view.segments;
        let meeting = Meeting::of(&self.view, &bounds);
        self.prefetch_seeks(&meeting, &bounds.0, run.as_deref());
        let mems = self.mems_in(at, &bounds);
        match meeting.sole() {
            Some(i) if mems.is_empty() && segs[i].range_tombstones().is_empty() => {
                return sole_segment(segs[i].clone(), bounds, self.now);
            }
            _ => {}
        }
        // No range tombstone anywhere: lend the largest segment's rows, merge the
        // memtables and the other segments among themselves, and resolve only at their
        // keys (`overlay.rs`).
        if meeting.any()
            && segs.iter().all(|h| h.range_tombstones().is_empty())
            && mems.iter().all(|m| !m.memtable().has_ranges())
        {
            return self.overlay(mems, &meeting, at, bounds, run);
        }
        let policy = TombstonePolicy::Hide(self.now);
        ScanSource::Merged(self.merge_of(mems, &meeting, at, bounds, policy))
    }

    /// Start loading, in every segment `meeting` keeps whose key span holds the start
    /// `lo` and in the side run `run`, what the scan's seek there reads first, when it
    /// seeks into more than one source (a segment, a memtable or the run): those misses
    /// then overlap one another and the memtables' searches, where each seek used to
    /// wait for its own.
    fn prefetch_seeks(&self, meeting: &Meeting, lo: &Bound<Vec<u8>>, run: Option<&SideRun>) {
        let (Bound::Included(k) | Bound::Excluded(k)) = lo else {
            return;
        };
        let p = key_prefix(k);
        // A segment a side run covers is read there, not sought into.
        let covered = |i: usize| run.is_some_and(|r| r.covers(i));
        let seeks =
            |i: &usize| meeting.keeps(*i) && !covered(*i) && !self.view.leaves_out(*i, k, p);
        let n = self.view.segments.len();
        if self.mems.is_empty() && run.is_none() && (0..n).filter(seeks).nth(1).is_none() {
            return; // one seek: nothing to overlap
        }
        for i in (0..n).filter(seeks) {
            self.view.segments[i].prefetch_seek(k);
        }
        if let Some(r) = run {
            r.prefetch_seek(k);
        }
    }

    /// An [`Overlay`] under `mems` and the segments `meeting` keeps: its base is, of
    /// those whose key span holds the scan's start (or of them all when none does),
    /// the one whose chain of disjoint spans holds the most cells ([`View::chain_cells`]:
    /// a leveled table's deepest level, whose segment there the scan begins in, rather
    /// than a level 0 segment larger than that one), followed by the kept segments of
    /// its chain ([`View::next_disjoint`]), each opened only once the scan runs past
    /// the one before.
    fn overlay(
        &self,
        mems: Mems,
        meeting: &Meeting,
        at: u64,
        bounds: KeyBounds,
        run: Option<Arc<SideRun>>,
    ) -> ScanSource {
        let segs = &self.view.segments;
        let chain = self.base_chain(meeting, &bounds.0);
        let chain_bits = chain.iter().fold(0, |b, &i| b | segment_bit(i));
        let run = run.filter(|r| r.serves(chain_bits, meeting.bits));
        let on_run = run.is_some();
        let side = match run {
            Some(r) => {
                let cells = RunCursor::new(r, range::as_ref(&bounds.0), range::as_ref(&bounds.1));
                side_of(mem_cursors(mems), Some(cells))
            }
            None => side_of(self.side_cursors(mems, &bounds, meeting, &chain), None),
        };
        let rest = chain[1..].iter().map(|&i| segs[i].clone()).collect();
        let picture = self.without_run();
        let mut overlay = Overlay::new(segs[chain[0]].clone(), rest, side, picture, at, bounds);
        // Counted as the seeks it would make without the run: leveled compaction's rule
        // for reads weighs level 0 as before.
        overlay.beside = meeting.count().saturating_sub(chain.len());
        overlay.on_run = on_run;
        ScanSource::Overlay(Box::new(overlay))
    }

    /// The overlay's base and the kept segments of its chain, in key order (see
    /// [`TableSnap::overlay`]).
    fn base_chain(&self, meeting: &Meeting, lo: &Bound<Vec<u8>>) -> SmallVec<[usize; CHAIN + 1]> {
        let base = (0..self.view.segments.len())
            .filter(|&i| meeting.keeps(i))
            .max_by_key(|&i| (meeting.holds_start(&self.view, i, lo), self.view.chain_cells(i)))
            .unwrap_or(0);
        let mut chain: SmallVec<[usize; CHAIN + 1]> = smallvec![base];
        while let Some(next) = self.view.next_disjoint(chain[chain.len() - 1]) {
            if !meeting.keeps(next) {
                break; // past the scan's end, as every segment after it
            }
            chain.push(next);
        }
        chain
    }

    /// This picture without its side run: what an overlay keeps to turn into the general
    /// merge, which reads the segments (no count of the run taken for it).
    fn without_run(&self) -> TableSnap {
        TableSnap {
            set: Arc::clone(&self.set),
            mems: self.mems.clone(),
            view: Arc::clone(&self.view),
            run: None,
            now: self.now,
        }
    }

    /// An iterator over `bounds` read at `at` per memtable holding a key there or a
    /// range tombstone (see [`TableSnap::scan`]); the probe for a key is the
    /// iterator's first batch ([`OwnedMemtableIter::prime`]).
    fn mems_in(&self, at: u64, bounds: &KeyBounds) -> Mems {
        if self.mems.is_empty() {
            // A table at rest: no share of keys to weigh.
            return Mems::new();
        }
        let keys = |m: &Arc<Memtable>| m.len() as u64;
        let total = self.mems.iter().map(keys).sum::<u64>()
            + self.view.segments.iter().map(|s| s.stats().entry_count).sum::<u64>();
        self.mems
            .iter()
            .filter_map(|m| {
                // The bounds borrowed: the iterator copies them once.
                let borrowed = (range::as_ref(&bounds.0), range::as_ref(&bounds.1));
                let mut it = m.range_at(borrowed, at);
                // Its first batch: the keys of the table's next `PRIME_ROWS` it holds
                // on average, and the next one.
                let first = (PRIME_ROWS * keys(m)).div_ceil(total.max(1)) as usize + 1;
                (m.has_ranges() || it.prime(first)).then_some(it)
            })
            .collect()
    }

    /// The merge of a cursor per memtable holding a key in `bounds` (read at `at`) and
    /// per segment over `bounds`.
    pub(crate) fn merged(&self, at: u64, bounds: KeyBounds, policy: TombstonePolicy) -> Merged {
        let meeting = Meeting::of(&self.view, &bounds);
        self.merge_of(self.mems_in(at, &bounds), &meeting, at, bounds, policy)
    }

    /// The merge of `mems` and the segments `meeting` keeps.
    fn merge_of(
        &self,
        mems: Mems,
        meeting: &Meeting,
        at: u64,
        bounds: KeyBounds,
        policy: TombstonePolicy,
    ) -> Merged {
        let tables: Vec<&Arc<Memtable>> = mems.iter().map(|m| m.memtable()).collect();
        let ranges = range_filter(&tables, &self.view, at, &bounds);
        // Winning cells with their tombstones (`Keep`) are what repair and tools read
        // (`Table::scan_cells`): they check every block, as compaction does; live rows
        // (`Hide`) are the table's scans, which trust a checked mapped block as gets do.
        let trust = !matches!(policy, TombstonePolicy::Keep);
        let sources = self.cursors(mems, &bounds, meeting, trust);
        match ranges {
            Some(r) => MergeIter::with_ranges(sources, policy, r),
            None => MergeIter::new(sources, policy),
        }
    }

    /// A cursor per memtable iterator of `mems` and one over `bounds` per segment of
    /// the view that `meeting` keeps; the segments' skip the checksum of a checked
    /// mapped block if `trust` (`SegmentIter::trusting_checked_blocks`).
    fn cursors(
        &self,
        mems: Mems,
        bounds: &KeyBounds,
        meeting: &Meeting,
        trust: bool,
    ) -> Vec<BoxedCursor<'static>> {
        let mems = mems.into_iter().map(|m| Box::new(MemtableCursor(m)) as BoxedCursor);
        let segs = self.walks(bounds, meeting, &[], trust);
        mems.chain(segs.map(|s| Box::new(s) as BoxedCursor)).collect()
    }

    /// The overlay's side sources: a cursor per memtable iterator of `mems`, and one over
    /// `bounds` per segment `meeting` keeps but those at the indexes of `chain` (its
    /// base), each trusting a checked mapped block as the base's walk does.
    fn side_cursors<'a>(
        &'a self,
        mems: Mems,
        bounds: &'a KeyBounds,
        meeting: &'a Meeting,
        chain: &'a [usize],
    ) -> impl Iterator<Item = SideCursor> + 'a {
        let mems = mems.into_iter().map(|m| SideCursor::Mem(MemtableCursor(m)));
        mems.chain(self.walks(bounds, meeting, chain, true).map(SideCursor::Seg))
    }

    /// An iterator over `bounds` per segment of the view that `meeting` keeps but those
    /// at the indexes `except`, skipping the checksum of a checked mapped block if
    /// `trust`.
    fn walks<'a>(
        &'a self,
        bounds: &'a KeyBounds,
        meeting: &'a Meeting,
        except: &'a [usize],
        trust: bool,
    ) -> impl Iterator<Item = SegmentIter<SegmentHandle>> + 'a {
        let segs = self.view.segments.iter().enumerate();
        let kept = segs.filter(move |(i, _)| meeting.keeps(*i) && !except.contains(i));
        kept.map(move |(_, h)| {
            let it = SegmentIter::with_bounds(h.clone(), bounds.0.clone(), bounds.1.clone());
            if trust {
                it.trusting_checked_blocks()
            } else {
                it
            }
        })
    }
}

/// A scan's memtable iterators ([`TableSnap::mems_in`]): one or two hold keys of most
/// ranges (the active memtable, and a frozen one while it flushes).
type Mems = SmallVec<[OwnedMemtableIter; 2]>;

/// The segments of a view a read of some bounds keeps: those that may hold a cell in
/// them ([`meets`]). A bit per segment for the first 64; every segment past them is
/// kept.
pub(crate) struct Meeting {
    bits: u64,
    len: usize,
    /// Every segment holds the read's start in its key span.
    all_hold_start: bool,
}

impl Meeting {
    pub(crate) fn of(view: &View, bounds: &KeyBounds) -> Meeting {
        let segs = &view.segments;
        let len = segs.len();
        // A start within the keys every segment spans: each segment meets the bounds
        // and holds the start, with two comparisons in all (a size-tiered table).
        if let Some((a, b)) = view.common_span() {
            let start_in = match &bounds.0 {
                Bound::Unbounded => true,
                Bound::Included(k) | Bound::Excluded(k) => a <= k && k < b,
            };
            if start_in && range::below(a, &bounds.1) {
                let bits = first_segments(len);
                return Meeting {
                    bits,
                    len,
                    all_hold_start: true,
                };
            }
        }
        let bits = segs
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, h)| meets(h, bounds))
            .fold(0u64, |b, (i, _)| b | 1 << i);
        Meeting {
            bits,
            len,
            all_hold_start: false,
        }
    }

    /// Whether segment `i` is kept.
    pub(crate) fn keeps(&self, i: usize) -> bool {
        i >= 64 || self.bits >> i & 1 == 1
    }

    /// How many segments are.
    fn count(&self) -> usize {
        self.bits.count_ones() as usize + self.len.saturating_sub(64)
    }

    /// Whether any segment is.
    fn any(&self) -> bool {
        self.bits != 0 || self.len > 64
    }

    /// The one segment kept, if exactly one is.
    fn sole(&self) -> Option<usize> {
        (self.len <= 64 && self.bits.count_ones() == 1).then(|| self.bits.trailing_zeros() as usize)
    }

    /// Whether segment `i` of `view`, kept, holds the start `lo` in its key span.
    fn holds_start(&self, view: &View, i: usize, lo: &Bound<Vec<u8>>) -> bool {
        match lo {
            _ if self.all_hold_start => true,
            Bound::Unbounded => true,
            Bound::Included(k) | Bound::Excluded(k) => !view.leaves_out(i, k, key_prefix(k)),
        }
    }
}

/// Segment `i`'s bit in a mask of a view's segments ([`Meeting`], a side run's cover,
/// an overlay's chain): 0 past the 64th, which no mask holds.
pub(super) fn segment_bit(i: usize) -> u64 {
    u32::try_from(i)
        .ok()
        .and_then(|i| 1u64.checked_shl(i))
        .unwrap_or(0)
}

/// A bit for each of a view's first `len` segments, up to 64 (what [`Meeting`] and a
/// side run's cover hold).
pub(super) fn first_segments(len: usize) -> u64 {
    match len {
        64.. => u64::MAX,
        n => (1u64 << n) - 1,
    }
}

/// Whether segment `h` may hold a cell a read of `bounds` sees: its key span meets
/// them, or it holds range tombstones (kept whatever the span of its keys: the general
/// merge reads them from the view, but a segment holding them is never left out).
fn meets(h: &SegmentHandle, bounds: &KeyBounds) -> bool {
    if !h.range_tombstones().is_empty() {
        return true;
    }
    let st = h.stats();
    st.entry_count > 0 && range::above(&st.max_key, &bounds.0) && range::below(&st.min_key, &bounds.1)
}

/// The overlay's side sources with a side run in place of the segments beside its
/// chain: a cursor per memtable iterator of `mems` (the run's cells are lent beside
/// them, `side.rs`).
fn mem_cursors(mems: Mems) -> impl Iterator<Item = SideCursor> {
    mems.into_iter().map(|m| SideCursor::Mem(MemtableCursor(m)))
}
