//! The k-way merge of sorted sources of cells: memtable iterators, segment iterators,
//! anything yielding `Result<Entry>` in strictly ascending key order.
//!
//! For each key the versions from every source are reconciled by
//! [`crate::table::cell`]'s rule; then the [`TombstonePolicy`] decides what a winning
//! tombstone becomes.
//!
//! # Invariants
//! 1. Output keys are strictly ascending, one cell per key: the winner of all sources'
//!    versions of it. The result does not depend on the order of the sources.
//! 2. A tombstone still shadows older versions in the merged sources before the policy
//!    drops or hides it: dropping happens after reconciliation, never before.
//! 3. The first error from any source is yielded, and the iterator then ends (fused);
//!    a source that is not strictly ascending (descending, read from the back) is an
//!    error too.
//! 4. Read from both ends ([`DoubleEndedIterator`], when the sources are), the output
//!    is the same cells: backward yields the forward output in reverse, and when the
//!    two ends meet every key has been yielded exactly once. Seeks ([`Cursor`] sources)
//!    keep this: after `seek(k)` the front yields the merge's output from `k` up to
//!    where the back stands.
//!
//! 5. With range tombstones ([`MergeIter::with_ranges`]) a winner they delete (its
//!    timestamp at or below the newest range tombstone covering its key) is not
//!    yielded, whatever the policy: the range tombstones are carried beside the cells
//!    (flushes and compactions write them, repair sends them). A [`Cursor`] merge read
//!    through [`MergeIter::next_skipping`] / [`MergeIter::next_back_skipping`] jumps
//!    over a deleted fragment in one seek when no source may hold a cell newer than
//!    the fragment's tombstone there, rather than reading each cell it covers.
//!
//! # Dropping tombstones in compaction
//! [`TombstonePolicy::DropOlderThan`] removes a tombstone for good, so older versions of
//! the key anywhere outside this merge would come back to life. A caller may pass a
//! cutoff only if every source not in the merge that could hold the key (other
//! segments, memtables) holds nothing older than the cutoff: in a major compaction that
//! is just the gc grace cutoff; in a minor one, the minimum of the gc grace cutoff and
//! the `min_ts` of every overlapping segment left out.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::ops::{Bound, Deref};

use crate::error::{Error, Result};
use crate::format::key_order;
use crate::format::ranges::RangeTombstones;
use crate::range;
use crate::segment::{Entry, SegmentIter, SegmentReader};
use crate::table::cell::{cmp_versions, entry_version};
use crate::table::memtable::OwnedMemtableIter;

/// What a winning tombstone becomes in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TombstonePolicy {
    /// Yield it (flushes, and compactions that cannot drop tombstones).
    Keep,
    /// Yield nothing for the key (reads: a deleted key is absent), nor for a cell whose
    /// expiry is at or before this moment on the expiry clock (an expired cell reads as
    /// a tombstone at its timestamp).
    Hide(u64),
    /// Drop tombstones whose timestamp is below the cutoff (compaction past gc grace;
    /// see the module docs for when that is safe); yield the others, and every
    /// tombstone with a local deletion time (made from an expired cell: the caller
    /// purges it by that time, `lsm/compact.rs`).
    DropOlderThan(u64),
}

/// A boxed source, for merging different kinds of iterators.
pub type BoxedSource<'a> = Box<dyn Iterator<Item = Result<Entry>> + Send + 'a>;

/// A source that can also be read from the back and repositioned: what
/// [`MergeIter`]'s [`DoubleEndedIterator`] and seeks need. Its two ends meet (a cell is
/// yielded once, by one end), and seeks are absolute within the source's range: after
/// `seek(lo)` the front yields the cells above `lo` that the back has not yielded;
/// after `seek_back(hi)` the back yields the cells below `hi` that the front has not
/// yielded. Errors of a seek come with the next cell asked for.
pub trait Cursor: DoubleEndedIterator<Item = Result<Entry>> {
    /// Move the front to the first cell above `lo`.
    fn seek(&mut self, lo: Bound<&[u8]>);
    /// Move the back to the last cell below `hi`.
    fn seek_back(&mut self, hi: Bound<&[u8]>);

    /// The front's next cell copied into `into`, whose buffers are reused: what
    /// [`Iterator::next`] yields, for a merge that keeps one [`Entry`] per source
    /// (`Some(Ok(()))`: `into` holds it). The default moves `next`'s cell in; segments
    /// and memtables copy theirs without allocating.
    fn next_into(&mut self, into: &mut Entry) -> Option<Result<()>> {
        self.next().map(|r| r.map(|e| *into = e))
    }
}

impl<C: Cursor + ?Sized> Cursor for Box<C> {
    fn seek(&mut self, lo: Bound<&[u8]>) {
        (**self).seek(lo)
    }
    fn seek_back(&mut self, hi: Bound<&[u8]>) {
        (**self).seek_back(hi)
    }
    fn next_into(&mut self, into: &mut Entry) -> Option<Result<()>> {
        (**self).next_into(into)
    }
}

impl<R: Deref<Target = SegmentReader>> Cursor for SegmentIter<R> {
    fn seek(&mut self, lo: Bound<&[u8]>) {
        self.seek_bound(lo)
    }
    fn seek_back(&mut self, hi: Bound<&[u8]>) {
        self.seek_back_bound(hi)
    }
    fn next_into(&mut self, into: &mut Entry) -> Option<Result<()>> {
        self.next_with(|r| into.set_from(r))
    }
}

/// A memtable's cursor, its cells as `Ok` (a memtable read does not fail).
pub struct MemtableCursor(pub OwnedMemtableIter);

impl Iterator for MemtableCursor {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        self.0.next().map(Ok)
    }
}

impl DoubleEndedIterator for MemtableCursor {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        self.0.next_back().map(Ok)
    }
}

impl Cursor for MemtableCursor {
    fn seek(&mut self, lo: Bound<&[u8]>) {
        self.0.seek_bound(lo)
    }
    fn seek_back(&mut self, hi: Bound<&[u8]>) {
        self.0.seek_back_bound(hi)
    }
    fn next_into(&mut self, into: &mut Entry) -> Option<Result<()>> {
        self.0.next_into(into).then_some(Ok(()))
    }
}

/// A boxed cursor, for merging memtables and segments both ways.
pub type BoxedCursor<'a> = Box<dyn Cursor + Send + 'a>;

/// A cell pulled from a source and waiting in a heap. Ordered by key, then source:
/// the forward heap holds `Reverse<Head>` (smallest key first), the backward heap
/// `Head` (largest first); which of equal keys pops first does not matter.
struct Head {
    entry: Entry,
    src: u32,
    /// Taken from the source's back end (else its front).
    from_back: bool,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        key_order(&self.entry.key, &other.entry.key).then(self.src.cmp(&other.src))
    }
}

/// One source and the cells taken from its ends but not yet in the heap or yielded
/// (set aside when the merge turns around).
struct Slot<I> {
    it: I,
    front: Option<Entry>,
    back: Option<Entry>,
    /// The source's front (back) end returned `None`; cleared by a seek.
    front_end: bool,
    back_end: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// No heap built (at first, and after a seek).
    Unset,
    Forward,
    Backward,
}

/// The merging iterator. See the module docs.
///
/// Forward it is a heap merge of the sources' fronts. If the sources are
/// [`DoubleEndedIterator`]s, so is the merge: backward it merges the sources' backs, by
/// the same rule and tombstone policy; the ends meet, each key yielded once. Turning
/// around sets the heap's cells aside in their sources' slots (a cell a source has
/// yielded from one end is never yielded by its other end, so the merge keeps it) and
/// builds the heap for the other direction. If the sources are [`Cursor`]s the merge can
/// seek ([`MergeIter::seek`], [`MergeIter::seek_back`]): a seek drops every cell set
/// aside and repositions both ends of every source, the moved end to the seek's key and
/// the other to where the merge's other end stands (the last key it yielded, kept in
/// `front_mark` / `back_mark`). A source's ends only know what they themselves
/// yielded, not the cells of theirs the merge's other end took at the meeting point, so
/// the merge's marks are the truth.
pub struct MergeIter<I> {
    sources: Vec<Slot<I>>,
    /// The fronts' cells going forward, the backs' going backward (one is empty).
    fwd: BinaryHeap<Reverse<Head>>,
    back: BinaryHeap<Head>,
    dir: Dir,
    policy: TombstonePolicy,
    error: Option<Error>,
    failed: bool,
    /// Forward, the merge has yielded everything up to this bound (excluded), or was
    /// sought to it; backward, everything down from `back_mark`.
    front_mark: Bound<Vec<u8>>,
    back_mark: Bound<Vec<u8>>,
    ranges: Option<RangeFilter>,
    /// A deleted fragment a skipping step stopped at, to seek past.
    skip: Option<Fragment>,
}

/// A deleted fragment's `(start, end)` (`None`: unbounded).
type Fragment = (Vec<u8>, Option<Vec<u8>>);

/// The range tombstones a merge applies (invariant 5).
pub struct RangeFilter {
    /// Every range tombstone of the merged sources (those covering the merge's range
    /// suffice).
    pub ranges: std::sync::Arc<RangeTombstones>,
    /// Per source, the newest timestamp of a point cell it may hold (`u64::MAX` if
    /// unknown): a fragment at least that new deletes every cell of it there.
    pub newest: Vec<u64>,
}

impl RangeFilter {
    /// Whether `key`'s winner at `ts` is deleted, and if so the fragment that deletes
    /// it when every cell of every source in that fragment is deleted too.
    #[inline]
    fn deletes(&self, key: &[u8], ts: u64) -> Option<Option<Fragment>> {
        let f = self.ranges.cover(key)?;
        if f.ts < ts {
            return None;
        }
        let whole = self.newest.iter().all(|&t| t <= f.ts);
        Some(whole.then(|| (f.start.clone(), f.end.clone())))
    }
}

impl<I: Iterator<Item = Result<Entry>>> MergeIter<I> {
    /// Merge `sources`, each strictly ascending by key, applying `policy`.
    pub fn new(sources: impl IntoIterator<Item = I>, policy: TombstonePolicy) -> Self {
        let sources: Vec<Slot<I>> = sources
            .into_iter()
            .map(|it| Slot {
                it,
                front: None,
                back: None,
                front_end: false,
                back_end: false,
            })
            .collect();
        MergeIter {
            fwd: BinaryHeap::with_capacity(sources.len()),
            back: BinaryHeap::new(),
            sources,
            dir: Dir::Unset,
            policy,
            error: None,
            failed: false,
            front_mark: Bound::Unbounded,
            back_mark: Bound::Unbounded,
            ranges: None,
            skip: None,
        }
    }

    /// Merge `sources` as [`MergeIter::new`] does, leaving out the cells `ranges`
    /// deletes (invariant 5). `ranges.newest` has one entry per source.
    pub fn with_ranges(
        sources: impl IntoIterator<Item = I>,
        policy: TombstonePolicy,
        ranges: RangeFilter,
    ) -> Self {
        let mut m = MergeIter::new(sources, policy);
        if !ranges.ranges.is_empty() {
            m.ranges = Some(ranges);
        }
        m
    }

    /// Put the heap's cells back in their sources' slots.
    fn set_aside(&mut self) {
        let fwd = self.fwd.drain().map(|h| h.0);
        for h in fwd.chain(self.back.drain()) {
            let slot = &mut self.sources[h.src as usize];
            if h.from_back {
                slot.back = Some(h.entry);
            } else {
                slot.front = Some(h.entry);
            }
        }
        self.dir = Dir::Unset;
    }

    /// Check a cell of source `src` against the key it yielded last in this direction
    /// (invariant 3).
    #[inline]
    fn in_order(&mut self, src: usize, e: &Entry, prev: Option<&[u8]>, fwd: bool) -> bool {
        let ok = match prev {
            None => true,
            Some(p) if fwd => e.key.as_slice() > p,
            Some(p) => e.key.as_slice() < p,
        };
        if !ok {
            self.out_of_order(src, fwd);
        }
        ok
    }

    #[cold]
    fn out_of_order(&mut self, src: usize, fwd: bool) {
        let order = if fwd { "ascending" } else { "descending" };
        self.error = Some(Error::InvalidArgument(format!(
            "merge source {src} is not in strictly {order} key order"
        )));
    }

    /// Source `src`'s next cell going forward, into the heap: a cell set aside from its
    /// front, else its front's next, else (its front being exhausted) a cell set aside
    /// from its back. `prev` is the key it gave last.
    #[inline]
    fn pull_front(&mut self, src: usize, prev: Option<&[u8]>) {
        if self.error.is_some() {
            return;
        }
        let slot = &mut self.sources[src];
        let (entry, from_back) = if let Some(e) = slot.front.take() {
            (e, false)
        } else if slot.front_end {
            match slot.back.take() {
                Some(e) => (e, true),
                None => return,
            }
        } else {
            match slot.it.next() {
                Some(Ok(e)) => (e, false),
                Some(Err(e)) => {
                    self.error = Some(e);
                    return;
                }
                None => {
                    slot.front_end = true;
                    match slot.back.take() {
                        Some(e) => (e, true),
                        None => return,
                    }
                }
            }
        };
        if self.in_order(src, &entry, prev, true) {
            self.fwd.push(Reverse(Head {
                entry,
                src: src as u32,
                from_back,
            }));
        }
    }

    /// The next cell off the heap of direction `FWD`.
    #[inline]
    fn pop<const FWD: bool>(&mut self) -> Option<Head> {
        if FWD {
            self.fwd.pop().map(|h| h.0)
        } else {
            self.back.pop()
        }
    }

    /// The key on top of the heap of direction `FWD`.
    #[inline]
    fn peek_key<const FWD: bool>(&self) -> Option<&[u8]> {
        if FWD {
            self.fwd.peek().map(|h| h.0.entry.key.as_slice())
        } else {
            self.back.peek().map(|h| h.entry.key.as_slice())
        }
    }

    /// Pop the next winner off the heap of direction `FWD`, refilling from each source
    /// popped with `refill`, and apply the tombstone policy.
    ///
    /// With `SKIP`, a winner deleted by a fragment that deletes every cell in it ends
    /// the step with `None` and the fragment in `self.skip`, for the caller to seek.
    #[inline]
    fn step<const FWD: bool, const SKIP: bool>(
        &mut self,
        refill: impl Fn(&mut Self, usize, Option<&[u8]>),
    ) -> Option<Result<Entry>> {
        loop {
            if let Some(e) = self.error.take() {
                return Some(Err(e));
            }
            let Head {
                entry: mut winner,
                src,
                ..
            } = self.pop::<FWD>()?;
            refill(self, src as usize, Some(&winner.key));
            while self.peek_key::<FWD>() == Some(winner.key.as_slice()) {
                let Head { entry, src, .. } = self.pop::<FWD>().expect("peeked");
                refill(self, src as usize, Some(&entry.key));
                let wins = cmp_versions(entry_version(&entry), entry_version(&winner)).is_gt();
                if wins {
                    winner = entry;
                }
            }
            if let Some(e) = self.error.take() {
                return Some(Err(e));
            }
            if let Some(rf) = &self.ranges {
                if let Some(whole) = rf.deletes(&winner.key, winner.ts) {
                    if SKIP && whole.is_some() {
                        self.skip = whole;
                        return None;
                    }
                    continue;
                }
            }
            let keep = match self.policy {
                TombstonePolicy::Hide(now) => !winner.is_dead_at(now),
                _ if !winner.tombstone => true,
                TombstonePolicy::Keep => true,
                TombstonePolicy::DropOlderThan(cutoff) => {
                    winner.ts >= cutoff || winner.expires != 0
                }
            };
            if keep {
                let mark = if FWD {
                    &mut self.front_mark
                } else {
                    &mut self.back_mark
                };
                range::mark_excluded(mark, &winner.key);
                return Some(Ok(winner));
            }
        }
    }

    /// One step in direction `FWD`, building its heap first if needed; an error ends
    /// the iterator (invariant 3).
    #[inline]
    fn advance<const FWD: bool, const SKIP: bool>(
        &mut self,
        refill: impl Fn(&mut Self, usize, Option<&[u8]>),
    ) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        let dir = if FWD { Dir::Forward } else { Dir::Backward };
        if self.dir != dir {
            self.set_aside();
            for src in 0..self.sources.len() {
                refill(self, src, None);
            }
            self.dir = dir;
        }
        let r = self.step::<FWD, SKIP>(refill);
        if matches!(r, Some(Err(_))) {
            self.failed = true;
        }
        r
    }
}

impl<I: DoubleEndedIterator<Item = Result<Entry>>> MergeIter<I> {
    /// Source `src`'s next cell going backward, into the heap: the mirror of
    /// `pull_front`.
    fn pull_back(&mut self, src: usize, prev: Option<&[u8]>) {
        if self.error.is_some() {
            return;
        }
        let slot = &mut self.sources[src];
        let (entry, from_back) = if let Some(e) = slot.back.take() {
            (e, true)
        } else if slot.back_end {
            match slot.front.take() {
                Some(e) => (e, false),
                None => return,
            }
        } else {
            match slot.it.next_back() {
                Some(Ok(e)) => (e, true),
                Some(Err(e)) => {
                    self.error = Some(e);
                    return;
                }
                None => {
                    slot.back_end = true;
                    match slot.front.take() {
                        Some(e) => (e, false),
                        None => return,
                    }
                }
            }
        };
        if self.in_order(src, &entry, prev, false) {
            self.back.push(Head {
                entry,
                src: src as u32,
                from_back,
            });
        }
    }
}

impl<I: Cursor> MergeIter<I> {
    /// Move the front to the first key at or above `key` (within the sources' ranges):
    /// forward, or back to keys already yielded. Keys the back end has yielded stay
    /// behind it. Errors come with the next cell. After an error the merge stays done.
    pub fn seek(&mut self, key: &[u8]) {
        self.front_mark = Bound::Included(key.to_vec());
        self.reposition();
    }

    /// Move the front to the first key above `key`: [`MergeIter::seek`], excluding it.
    pub fn seek_after(&mut self, key: &[u8]) {
        self.front_mark = Bound::Excluded(key.to_vec());
        self.reposition();
    }

    /// Move the back to the last key at or below `key`: the mirror of
    /// [`MergeIter::seek`].
    pub fn seek_back(&mut self, key: &[u8]) {
        self.back_mark = Bound::Included(key.to_vec());
        self.reposition();
    }

    /// [`Iterator::next`], jumping over a deleted fragment in one seek where it can
    /// (invariant 5).
    pub fn next_skipping(&mut self) -> Option<Result<Entry>> {
        loop {
            let r = self.advance::<true, true>(Self::pull_front);
            let Some((_, end)) = self.skip.take() else {
                return r;
            };
            match end {
                Some(end) => self.seek(&end),
                None => {
                    self.failed = true; // everything from here on is deleted
                    return None;
                }
            }
        }
    }

    /// [`DoubleEndedIterator::next_back`], jumping over a deleted fragment in one seek
    /// where it can (invariant 5).
    pub fn next_back_skipping(&mut self) -> Option<Result<Entry>> {
        loop {
            let r = self.advance::<false, true>(Self::pull_back);
            let Some((start, _)) = self.skip.take() else {
                return r;
            };
            self.back_mark = Bound::Excluded(start);
            self.reposition();
        }
    }

    /// Drop every cell taken from the sources and move both ends of every source to
    /// the marks.
    fn reposition(&mut self) {
        self.fwd.clear();
        self.back.clear();
        self.dir = Dir::Unset;
        for slot in &mut self.sources {
            slot.front = None;
            slot.back = None;
            slot.front_end = false;
            slot.back_end = false;
            slot.it.seek(range::as_ref(&self.front_mark));
            slot.it.seek_back(range::as_ref(&self.back_mark));
        }
    }
}

impl<I: Iterator<Item = Result<Entry>>> Iterator for MergeIter<I> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        self.advance::<true, false>(Self::pull_front)
    }
}

impl<I: DoubleEndedIterator<Item = Result<Entry>>> DoubleEndedIterator for MergeIter<I> {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        self.advance::<false, false>(Self::pull_back)
    }
}

mod copy;
pub(crate) mod stock;
pub(crate) use copy::{CopyMerge, Places};

#[cfg(test)]
mod tests;
