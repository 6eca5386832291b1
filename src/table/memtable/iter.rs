//! Iteration over a memtable: [`MemtableIter`] borrowing it (flush), and
//! [`OwnedMemtableIter`] holding it by `Arc`, double-ended and seekable (scans through
//! the merge), reading at a sequence number.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use parking_lot::RwLock;

use super::versions::Versions;
use super::Memtable;
use crate::range::{self, KeyRange};
use crate::segment::Entry;

impl Memtable {
    /// Cells with keys in `range`, in key order, borrowing the memtable. Writes that
    /// race with the iteration may or may not be seen.
    pub fn range<K: AsRef<[u8]> + ?Sized>(&self, range: impl RangeBounds<K>) -> MemtableIter<'_> {
        MemtableIter {
            inner: self.map.range(owned_bounds(&range)),
        }
    }

    /// Every cell, in key order.
    pub fn iter(&self) -> MemtableIter<'_> {
        self.range::<&[u8]>(..)
    }

    /// Like [`Memtable::range`], but holding the memtable by `Arc`, so the iterator can
    /// outlive the borrow (a scan that keeps a frozen memtable alive), and from both
    /// ends, with seeks. Each step is a search of the skiplist, O(log n).
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
        }
    }
}

impl Memtable {
    /// Whether a key lies in `bounds` (a node, whatever its versions): one skiplist
    /// search. A scan leaves out a memtable with none: it cannot hold a row of the
    /// scan's range, whatever seeks follow (they stay within the range).
    pub(crate) fn has_key_in(&self, bounds: &crate::range::KeyBounds) -> bool {
        self.map
            .lower_bound(range::as_ref(&bounds.0))
            .is_some_and(|e| range::below(e.key(), &bounds.1))
    }
}

fn owned_bounds<K: AsRef<[u8]> + ?Sized>(
    r: &impl RangeBounds<K>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(r.start_bound()), own(r.end_bound()))
}

type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Iterator over a key range of a memtable, borrowing it: each key's newest cell.
pub struct MemtableIter<'a> {
    inner: crossbeam_skiplist::map::Range<'a, Vec<u8>, Bounds, Vec<u8>, RwLock<Versions>>,
}

impl Iterator for MemtableIter<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        self.inner
            .next()
            .map(|e| e.value().read().head.entry(e.key()))
    }
}

/// Iterator over a key range of a memtable held by `Arc`, from either end
/// ([`DoubleEndedIterator`]); the ends meet, each key yielded once. Each end keeps the
/// key it yielded last as a bound, so writes that race with the iteration may or may not
/// be seen, but the order holds. [`OwnedMemtableIter::seek`] and
/// [`OwnedMemtableIter::seek_back`] reposition one end within the range.
pub struct OwnedMemtableIter {
    /// Read at this sequence number.
    at: u64,
    memtable: Arc<Memtable>,
    /// The range given at creation.
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// The front yields keys above this, the back keys below `back`.
    next: Bound<Vec<u8>>,
    back: Bound<Vec<u8>>,
}

impl OwnedMemtableIter {
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
    }

    /// Move the back to the keys below `hi` (within the range).
    pub fn seek_back_bound(&mut self, hi: Bound<&[u8]>) {
        self.back = range::min_upper(&self.end, hi);
    }
}

impl Iterator for OwnedMemtableIter {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        loop {
            let (key, entry) = {
                let e = self.memtable.map.lower_bound(range::as_ref(&self.next))?;
                if !range::below(e.key(), &self.back) {
                    return None;
                }
                let entry = e.value().read().at(self.at).map(|c| c.entry(e.key()));
                (e.key().clone(), entry)
            };
            self.next = Bound::Excluded(key);
            if entry.is_some() {
                return entry;
            }
        }
    }
}

impl DoubleEndedIterator for OwnedMemtableIter {
    fn next_back(&mut self) -> Option<Entry> {
        loop {
            let (key, entry) = {
                let e = self.memtable.map.upper_bound(range::as_ref(&self.back))?;
                if !range::above(e.key(), &self.next) {
                    return None;
                }
                let entry = e.value().read().at(self.at).map(|c| c.entry(e.key()));
                (e.key().clone(), entry)
            };
            self.back = Bound::Excluded(key);
            if entry.is_some() {
                return entry;
            }
        }
    }
}
