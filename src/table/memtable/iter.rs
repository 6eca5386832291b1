//! Iteration over a memtable: [`MemtableIter`] borrowing it (flush), and
//! [`OwnedMemtableIter`] holding it by `Arc`, double-ended and seekable (scans through
//! the merge), reading at a sequence number.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crossbeam_epoch as epoch;
use crossbeam_skiplist::base::RefRange;

use super::{key, Key, Memtable, Node, SharedCell};
use crate::io::prefetch::prefetch_read;
use crate::range::{self, KeyRange};
use crate::segment::{Entry, RecordRef};

impl Memtable {
    /// Cells with keys in `range`, in key order, borrowing the memtable. Writes that
    /// race with the iteration may or may not be seen.
    pub fn range<K: AsRef<[u8]> + ?Sized>(&self, range: impl RangeBounds<K>) -> MemtableIter<'_> {
        MemtableIter {
            inner: self.map.ref_range(owned_bounds(&range)),
        }
    }

    /// Every cell, in key order.
    pub fn iter(&self) -> MemtableIter<'_> {
        self.range::<&[u8]>(..)
    }

    /// Like [`Memtable::range`], but holding the memtable by `Arc`, so the iterator can
    /// outlive the borrow (a scan that keeps a frozen memtable alive), and from both
    /// ends, with seeks. A step back is a search of the skiplist, O(log n); forward
    /// steps search once per batch of nodes read ahead (see [`OwnedMemtableIter`]).
    pub fn range_owned(self: &Arc<Self>, range: impl KeyRange) -> OwnedMemtableIter {
        self.range_at(range, u64::MAX)
    }

    /// Like [`Memtable::range_owned`], for a read at sequence number `at`: each key's
    /// newest version numbered at or below `at`; keys with none are skipped.
    pub(crate) fn range_at(self: &Arc<Self>, range: impl KeyRange, at: u64) -> OwnedMemtableIter {
        let (start, end) = range.into_key_bounds();
        OwnedMemtableIter {
            at,
            memtable: Arc::clone(self),
            next: start.clone(),
            back: end.clone(),
            start,
            end,
            ahead: VecDeque::new(),
            batch: AHEAD_FIRST,
        }
    }
}

fn owned_bounds<K: AsRef<[u8]> + ?Sized>(r: &impl RangeBounds<K>) -> (Bound<Key>, Bound<Key>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(Key::from_slice(k.as_ref())),
        Bound::Excluded(k) => Bound::Excluded(Key::from_slice(k.as_ref())),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(r.start_bound()), own(r.end_bound()))
}

type Bounds = (Bound<Key>, Bound<Key>);

/// Iterator over a key range of a memtable, borrowing it: each key's newest cell.
pub struct MemtableIter<'a> {
    inner: RefRange<'a, Key, Bounds, Key, Node>,
}

impl Iterator for MemtableIter<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let guard = &epoch::pin();
        let e = self.inner.next(guard)?;
        let entry = e.value().versions.read().head.entry(e.key());
        e.release(guard);
        Some(entry)
    }
}

impl Drop for MemtableIter<'_> {
    fn drop(&mut self) {
        // The range holds counted references to its ends' nodes.
        self.inner.drop_impl(&epoch::pin());
    }
}

/// Nodes the front's first batch walks. A scan through the overlay (`lsm/overlay.rs`)
/// meets a memtable cell every few rows of a segment once updates pile up; reading
/// ahead copies a key (inline up to 24 bytes) and shares the value, so a first batch of
/// 8 costs less than the second search a batch of 2 left most scans. callgrind, 50-row
/// scans over 200k keys in one segment, instructions per scan, batches of 2 (with the
/// cells copied) / 4 / 8: 56,045 / 53,395 / 52,119 with 20,000 memtable updates (YCSB
/// E's density), 48,962 / 47,192 / 47,960 with 6,000. A table's scans size it down by
/// the memtable's share of the table's keys ([`OwnedMemtableIter::prime`]): with
/// 10,000 keys in each of three memtables over 1M, eight nodes each were some 21 cache
/// misses a scan did not need.
const AHEAD_FIRST: usize = 8;

/// The most nodes one batch walks: each later batch walks twice the one before, so a
/// long scan searches the skiplist a logarithmic number of times.
const AHEAD_MAX: usize = 64;

/// Iterator over a key range of a memtable held by `Arc`, from either end
/// ([`DoubleEndedIterator`]); the ends meet, each key yielded once. Each end keeps the
/// key it yielded last as a bound, so writes that race with the iteration may or may not
/// be seen, but the order holds. [`OwnedMemtableIter::seek`] and
/// [`OwnedMemtableIter::seek_back`] reposition one end within the range.
///
/// The front does not search the skiplist for every cell (O(log n) cache misses each,
/// issue 19 item 3): a search finds the first node past its bound, and the walk along
/// the bottom level from there reads a batch of cells ahead (`ahead`); the bound then
/// stands after the last node walked. The back yields from `ahead` once the skiplist
/// holds nothing between the two bounds.
pub struct OwnedMemtableIter {
    /// Read at this sequence number.
    at: u64,
    memtable: Arc<Memtable>,
    /// The range given at creation.
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// The front has walked the keys up to this bound (yielded, or waiting in `ahead`),
    /// the back has yielded the keys from `back` on.
    next: Bound<Vec<u8>>,
    back: Bound<Vec<u8>>,
    /// Cells the front has read but not yielded, in key order, all below `back`.
    ahead: VecDeque<Ahead>,
    /// Nodes the next batch walks.
    batch: usize,
}

/// A cell read ahead: its key (inline up to 24 bytes, as in the node) and its value
/// shared with the memtable, so reading ahead copies no value bytes and allocates
/// nothing for short keys; made an [`Entry`] only when yielded.
struct Ahead {
    key: Key,
    cell: SharedCell,
}

impl Ahead {
    fn entry(self) -> Entry {
        Entry {
            key: self.key.to_vec(),
            value: self.cell.value.to_vec(),
            ts: self.cell.ts,
            tombstone: self.cell.tombstone,
            expires: self.cell.expires,
        }
    }
}

impl OwnedMemtableIter {
    /// The memtable iterated.
    pub(crate) fn memtable(&self) -> &Arc<Memtable> {
        &self.memtable
    }

    /// Read the front's first batch now, of `first` nodes (1 to the usual first batch;
    /// later batches double from it); false when no node (whatever its versions) lies
    /// in the range. A scan leaves out a memtable with none: it cannot hold a row of
    /// the scan's range, whatever seeks follow (they stay within the range). A
    /// memtable holding few of the table's keys is primed with fewer nodes, so a scan
    /// walks fewer it will not reach (each a cache miss after the one before).
    pub(crate) fn prime(&mut self, first: usize) -> bool {
        self.batch = first.clamp(1, AHEAD_FIRST);
        self.read_ahead()
    }

    /// Move the front to the first key at or above `key` (within the range; keys the
    /// back has yielded stay behind it).
    pub fn seek(&mut self, key: &[u8]) {
        self.seek_bound(Bound::Included(key));
    }

    /// Move the back to the last key at or below `key` (within the range; keys the front
    /// has yielded stay behind it).
    pub fn seek_back(&mut self, key: &[u8]) {
        self.seek_back_bound(Bound::Included(key));
    }

    /// Move the front to the keys above `lo` (within the range).
    pub fn seek_bound(&mut self, lo: Bound<&[u8]>) {
        self.next = range::max_lower(&self.start, lo);
        self.ahead.clear();
        self.batch = AHEAD_FIRST;
    }

    /// Move the back to the keys below `hi` (within the range).
    pub fn seek_back_bound(&mut self, hi: Bound<&[u8]>) {
        self.back = range::min_upper(&self.end, hi);
        // Cells read ahead at or past the new back are dropped, and the front's bound
        // moves back to the first of them: a later seek may move the back past them
        // again, and the front must then find them. (Between the last cell yielded and
        // the first dropped the front walked no visible cell, or it would be kept.)
        let back = &self.back;
        if let Some(i) = self.ahead.iter().position(|e| !range::below(&e.key, back)) {
            if let Some(first) = self.ahead.split_off(i).into_iter().next() {
                self.next = Bound::Included(first.key.to_vec());
            }
        }
    }

    /// Walk up to `batch` nodes from the front's bound (one search, then a step along
    /// the bottom level per node), keeping the cells visible at `at` in `ahead`; false
    /// when no node is left below `back`.
    fn read_ahead(&mut self) -> bool {
        let map = &self.memtable.map;
        let guard = &epoch::pin();
        let from = range::as_ref(&self.next);
        // A probe compares with `key_order` inline (`key.rs`).
        let found = match key::probe_bound(from) {
            Some(p) => map.lower_bound(p.as_ref(), guard),
            None => map.lower_bound(from, guard),
        };
        let Some(mut e) = found else {
            return false;
        };
        let mut last = None;
        // Room for the whole batch at once: pushed a cell at a time, a scan's first
        // batch allocated the queue for four cells and then again for eight.
        self.ahead.reserve(self.batch);
        for _ in 0..self.batch {
            if !range::below(e.key(), &self.back) {
                break;
            }
            // The next node first, and a load of its versions started (they sit behind
            // the node's `Arc`, shared with the point index): that miss then overlaps
            // this node's work instead of following the next step's.
            let step = e.next();
            if let Some(n) = &step {
                prefetch_read(std::slice::from_ref(&**n.value()), 0);
            }
            if let Some(c) = e.value().versions.read().at(self.at) {
                self.ahead.push_back(Ahead {
                    key: Key::from_slice(e.key()),
                    cell: c.shared(),
                });
            }
            last = Some(e);
            match step {
                Some(n) => e = n,
                None => break,
            }
        }
        match last {
            Some(l) => {
                range::exclude(&mut self.next, l.key());
                self.batch = (self.batch * 2).min(AHEAD_MAX);
                true
            }
            None => false,
        }
    }
}

impl OwnedMemtableIter {
    /// The front's next cell, copied into `into` (its buffers reused): what
    /// [`Iterator::next`] yields, without allocating. False at the end.
    pub fn next_into(&mut self, into: &mut Entry) -> bool {
        let Some(e) = self.next_ahead() else {
            return false;
        };
        into.set_from(RecordRef {
            key: &e.key,
            value: &e.cell.value,
            ts: e.cell.ts,
            tombstone: e.cell.tombstone,
            expires: e.cell.expires,
        });
        true
    }

    /// The front's next cell as read ahead, reading the next batch when none is left.
    fn next_ahead(&mut self) -> Option<Ahead> {
        loop {
            if let Some(e) = self.ahead.pop_front() {
                return Some(e);
            }
            if !self.read_ahead() {
                return None;
            }
        }
    }
}

impl Iterator for OwnedMemtableIter {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        self.next_ahead().map(Ahead::entry)
    }
}

impl DoubleEndedIterator for OwnedMemtableIter {
    fn next_back(&mut self) -> Option<Entry> {
        loop {
            let found = {
                let guard = &epoch::pin();
                let map = &self.memtable.map;
                let to = range::as_ref(&self.back);
                let e = match key::probe_bound(to) {
                    Some(p) => map.upper_bound(p.as_ref(), guard),
                    None => map.upper_bound(to, guard),
                };
                match e {
                    Some(e) if range::above(e.key(), &self.next) => {
                        let entry = e.value().versions.read().at(self.at).map(|c| c.entry(e.key()));
                        Some((e.key().to_vec(), entry))
                    }
                    _ => None,
                }
            };
            let Some((key, entry)) = found else {
                // Nothing left between the bounds but what the front read ahead. The
                // front's bound moves back to the cell taken, so that a seek moving the
                // back past it again lets the front find it, as it would have before
                // reading ahead.
                let e = self.ahead.pop_back()?;
                self.back = Bound::Excluded(e.key.to_vec());
                self.next = Bound::Included(e.key.to_vec());
                return Some(e.entry());
            };
            self.back = Bound::Excluded(key);
            if entry.is_some() {
                return entry;
            }
        }
    }
}
