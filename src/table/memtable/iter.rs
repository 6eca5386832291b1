//! Iteration over a memtable: [`MemtableIter`] borrowing it (flush), and
//! [`OwnedMemtableIter`] holding it by `Arc`, double-ended and seekable (scans through
//! the merge), reading at a sequence number.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use smallvec::SmallVec;

use super::{key, Key, Memtable, Node};
use crate::io::prefetch::prefetch_lines;
use crate::range::{self, KeyRange};
use crate::segment::{Entry, RecordRef};
use crate::shelf::Shelf;
use crate::table::merge::stock;

impl Memtable {
    /// Cells with keys in `range`, in key order, borrowing the memtable. Writes that
    /// race with the iteration may or may not be seen.
    pub fn range<K: AsRef<[u8]> + ?Sized>(&self, range: impl RangeBounds<K>) -> MemtableIter<'_> {
        MemtableIter {
            memtable: self,
            front: Front::new(range.start_bound().map(|k| k.as_ref()), AHEAD_MAX),
            end: range.end_bound().map(|k| k.as_ref().to_vec()),
        }
    }

    /// Every cell, in key order.
    pub fn iter(&self) -> MemtableIter<'_> {
        self.range::<&[u8]>(..)
    }

    /// Like [`Memtable::range`], but holding the memtable by `Arc`, so the iterator can
    /// outlive the borrow (a scan that keeps a frozen memtable alive), and from both
    /// ends, with seeks. A step back is a search of the ordered map, O(log n); forward
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
            front: Front::new(range::as_ref(&start), AHEAD_FIRST),
            back: end.clone(),
            start,
            end,
        }
    }
}

/// Iterator over a key range of a memtable, borrowing it: each key's newest cell, read
/// ahead in batches of [`AHEAD_MAX`] nodes (a flush walks the whole memtable).
pub struct MemtableIter<'a> {
    memtable: &'a Memtable,
    front: Front,
    end: Bound<Vec<u8>>,
}

impl Iterator for MemtableIter<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let e = self.front.next_ahead(self.memtable, u64::MAX, &self.end)?;
        Some(Entry::from(self.front.record(&e)))
    }
}

/// Nodes the front's first batch walks. A scan through the overlay (`lsm/overlay.rs`)
/// meets a memtable cell every few rows of a segment once updates pile up; reading
/// ahead copies a key (inline up to 24 bytes) and a short value ([`COPY_MAX`]), so a
/// first batch of 8 costs less than the second search a batch of 2 left most scans
/// (measured when values were shared, not copied). callgrind, 50-row
/// scans over 200k keys in one segment, instructions per scan, batches of 2 (with the
/// cells copied) / 4 / 8: 56,045 / 53,395 / 52,119 with 20,000 memtable updates (YCSB
/// E's density), 48,962 / 47,192 / 47,960 with 6,000. A table's scans size it down by
/// the memtable's share of the table's keys ([`OwnedMemtableIter::prime`]): with
/// 10,000 keys in each of three memtables over 1M, eight nodes each were some 21 cache
/// misses a scan did not need.
const AHEAD_FIRST: usize = 8;

/// The most nodes one batch walks: each later batch walks twice the one before, so a
/// long scan searches the ordered map a logarithmic number of times.
const AHEAD_MAX: usize = 64;

/// Iterator over a key range of a memtable held by `Arc`, from either end
/// ([`DoubleEndedIterator`]); the ends meet, each key yielded once. Each end keeps the
/// key it yielded last as a bound, so writes that race with the iteration may or may not
/// be seen, but the order holds. [`OwnedMemtableIter::seek`] and
/// [`OwnedMemtableIter::seek_back`] reposition one end within the range.
///
/// The front does not search the ordered map for every cell (issue 19 item 3): a search
/// finds the first node past its bound, and the walk from there reads a batch of cells
/// ahead (`Front`); the bound then stands after the last node walked. The back yields
/// from the front's batch once the map holds nothing between the two bounds.
pub struct OwnedMemtableIter {
    /// Read at this sequence number.
    at: u64,
    memtable: Arc<Memtable>,
    /// The range given at creation.
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    front: Front,
    /// The back has yielded the keys from here on.
    back: Bound<Vec<u8>>,
}

/// An iterator's front: the bound it has walked the keys up to (yielded, or waiting in
/// `ahead`), and the cells read ahead.
struct Front {
    next: Bound<Vec<u8>>,
    /// Cells read but not yielded, in key order, all below the back's bound.
    ahead: VecDeque<Ahead>,
    /// A cell buffer from the thread's stock (`merge/stock.rs`), whole so it goes back
    /// as it came: its value holds the short values of the cells in `ahead`
    /// ([`Held::Copied`]), at most a batch of [`AHEAD_MAX`] values of [`COPY_MAX`]
    /// bytes (16 KiB), cleared when `ahead` runs empty. Its key buffer became `next`'s
    /// bytes when the front was made, and takes `next`'s back when it is dropped.
    stocked: Entry,
    /// Nodes the next batch walks.
    batch: usize,
}

/// A cell read ahead: its key (inline up to 24 bytes, as in the node) and its value,
/// made an [`Entry`] (or copied into a scan's buffers) only when yielded.
struct Ahead {
    key: Key,
    value: Held,
    ts: u64,
    tombstone: bool,
    expires: u64,
}

/// Values up to this size are copied when read ahead, longer ones shared. Sharing a
/// value writes its count, an atomic increment on a line the insert wrote, and x86
/// runs the locked increments of a batch one after another, each a cache miss; the
/// copy's loads overlap. perf, YCSB E's phase: the increments were a third of the
/// memtable's share of a scan. A value longer than this is shared: copying it twice
/// (here, then into the scan's buffer) costs more than the increment.
const COPY_MAX: usize = 256;

/// Where a cell read ahead keeps its value.
enum Held {
    /// `len` bytes from `at` in the front's buffer.
    Copied { at: u32, len: u32 },
    /// Shared with the memtable.
    Shared(Arc<[u8]>),
}

/// The most read-ahead queues a thread keeps ([`Front`]'s): one per memtable of a few
/// scans.
const QUEUES_KEPT: usize = 8;

thread_local! {
    static QUEUES_LOCAL: RefCell<Vec<VecDeque<Ahead>>> = const { RefCell::new(Vec::new()) };
}

/// Read-ahead queues the thread's last scans used, empty, their capacity kept (at most
/// a batch of [`AHEAD_MAX`] cells): a scan's memtable allocates none.
static QUEUES: Shelf<VecDeque<Ahead>> = Shelf::new(&QUEUES_LOCAL, QUEUES_KEPT);

impl Drop for Front {
    /// The buffers go back to the thread's stocks: the cell buffer (with the bound's
    /// bytes as its key buffer, whence they came) and the queue.
    fn drop(&mut self) {
        if let Bound::Included(k) | Bound::Excluded(k) =
            std::mem::replace(&mut self.next, Bound::Unbounded)
        {
            self.stocked.key = k;
        }
        stock::give(std::mem::take(&mut self.stocked));
        let mut ahead = std::mem::take(&mut self.ahead);
        ahead.clear();
        if ahead.capacity() <= AHEAD_MAX {
            QUEUES.give(ahead);
        }
    }
}

impl Ahead {
    /// Cell `cell` of node `key` (the version the read sees), its value copied to the
    /// end of `bytes` if short (see [`COPY_MAX`]).
    fn read(key: &Key, cell: &super::Cell, bytes: &mut Vec<u8>) -> Ahead {
        let (value, ts, tombstone, expires) = cell.parts();
        let value = match value.shared() {
            Some(v) if v.len() > COPY_MAX => Held::Shared(Arc::clone(v)),
            _ => {
                // Both fit in u32: `bytes` holds at most a batch of short values.
                let at = bytes.len() as u32;
                bytes.extend_from_slice(value);
                Held::Copied {
                    at,
                    len: value.len() as u32,
                }
            }
        };
        Ahead {
            key: key.clone(),
            value,
            ts,
            tombstone,
            expires,
        }
    }

    /// The cell as a record, borrowed (a short value from `bytes`, the front's
    /// buffer): what [`Iterator::next`] copies into an [`Entry`] and
    /// [`OwnedMemtableIter::next_into`] into its buffers.
    fn record<'a>(&'a self, bytes: &'a [u8]) -> RecordRef<'a> {
        let value = match &self.value {
            Held::Copied { at, len } => &bytes[*at as usize..(*at + *len) as usize],
            Held::Shared(v) => v,
        };
        RecordRef {
            key: &self.key,
            value,
            ts: self.ts,
            tombstone: self.tombstone,
            expires: self.expires,
        }
    }
}

impl Front {
    /// A front from `next`. The buffers come from the thread's stocks, so a scan
    /// allocates none: the cell buffer the thread's last scans grew (the bound's bytes
    /// go in its key buffer, which read-ahead does not use) and a queue.
    fn new(next: Bound<&[u8]>, batch: usize) -> Front {
        let mut stocked = stock::take();
        let next = next.map(|k| {
            let mut v = std::mem::take(&mut stocked.key);
            v.extend_from_slice(k);
            v
        });
        Front {
            next,
            ahead: QUEUES.take().unwrap_or_default(),
            stocked,
            batch,
        }
    }

    /// `e`, a cell this front read ahead, as a record (a short value from its buffer).
    fn record<'a>(&'a self, e: &'a Ahead) -> RecordRef<'a> {
        e.record(&self.stocked.value)
    }

    /// Start again from `next`, keeping the buffers.
    fn restart(&mut self, next: Bound<Vec<u8>>, batch: usize) {
        self.next = next;
        self.ahead.clear();
        self.stocked.value.clear();
        self.batch = batch;
    }

    /// The next cell as read ahead, reading the next batch when none is left. Its
    /// short value stays in the front's buffer until the next call.
    fn next_ahead(&mut self, m: &Memtable, at: u64, back: &Bound<Vec<u8>>) -> Option<Ahead> {
        loop {
            if let Some(e) = self.ahead.pop_front() {
                return Some(e);
            }
            self.stocked.value.clear();
            if !self.read_ahead(m, at, back) {
                return None;
            }
        }
    }

    /// Walk up to `batch` nodes of `m` from the bound (one search of the ordered map,
    /// then the leaves' neighbours), keeping the cells visible at `at` in `ahead`;
    /// false when no node is left below `back`. The map's lock is held for the batch.
    fn read_ahead(&mut self, m: &Memtable, at: u64, back: &Bound<Vec<u8>>) -> bool {
        let map = m.read_map();
        let from = range::as_ref(&self.next);
        // A probe compares with `key_order` inline (`key.rs`).
        let probe = key::probe_bound(from);
        let nodes: &mut dyn Iterator<Item = (&Key, &Node)> = match &probe {
            Some(p) => &mut map.range::<Key, _>((p.as_ref(), Bound::Unbounded)),
            None => &mut map.range::<[u8], _>((from, Bound::Unbounded)),
        };
        // The batch's nodes first, a load of each one's lines started (its versions and
        // a short value sit behind the node's `Arc`, shared with the point index): the
        // misses then overlap instead of following one another, as the node locks taken
        // below would keep them (a locked instruction waits for the loads before it).
        let mut walked: SmallVec<[(&Key, &Node); AHEAD_MAX]> = SmallVec::new();
        for (k, n) in nodes.take(self.batch) {
            if !range::below(k, back) {
                break;
            }
            prefetch_lines(&**n);
            walked.push((k, n));
        }
        let Some(&(last, _)) = walked.last() else {
            return false;
        };
        // Room for the whole batch at once: pushed a cell at a time, a scan's first
        // batch allocated the queue for four cells and then again for eight.
        self.ahead.reserve(walked.len());
        for &(k, n) in &walked {
            if let Some(c) = n.versions.read().at(at) {
                self.ahead.push_back(Ahead::read(k, c, &mut self.stocked.value));
            }
        }
        range::exclude(&mut self.next, last);
        self.batch = (self.batch * 2).min(AHEAD_MAX);
        true
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
    /// walks fewer it will not reach.
    pub(crate) fn prime(&mut self, first: usize) -> bool {
        self.front.batch = first.clamp(1, AHEAD_FIRST);
        self.front.read_ahead(&self.memtable, self.at, &self.back)
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
        let next = range::max_lower(&self.start, lo);
        self.front.restart(next, AHEAD_FIRST);
    }

    /// Move the back to the keys below `hi` (within the range).
    pub fn seek_back_bound(&mut self, hi: Bound<&[u8]>) {
        self.back = range::min_upper(&self.end, hi);
        // Cells read ahead at or past the new back are dropped, and the front's bound
        // moves back to the first of them: a later seek may move the back past them
        // again, and the front must then find them. (Between the last cell yielded and
        // the first dropped the front walked no visible cell, or it would be kept.)
        let back = &self.back;
        let f = &mut self.front;
        if let Some(i) = f.ahead.iter().position(|e| !range::below(&e.key, back)) {
            if let Some(first) = f.ahead.split_off(i).into_iter().next() {
                f.next = Bound::Included(first.key.to_vec());
            }
        }
    }

    /// The front's next cell, copied into `into` (its buffers reused): what
    /// [`Iterator::next`] yields, without allocating. False at the end.
    pub fn next_into(&mut self, into: &mut Entry) -> bool {
        let Some(e) = self.front.next_ahead(&self.memtable, self.at, &self.back) else {
            return false;
        };
        into.set_from(self.front.record(&e));
        true
    }

    /// The last key below the back's bound and above the front's, with its cell visible
    /// at `at` (`None` for the cell: no version that old).
    fn last_between(&self) -> Option<(Vec<u8>, Option<Entry>)> {
        let map = self.memtable.read_map();
        let to = range::as_ref(&self.back);
        // A probe compares with `key_order` inline (`key.rs`).
        let (k, n) = match key::probe_bound(to) {
            Some(p) => map.range::<Key, _>((Bound::Unbounded, p.as_ref())).next_back(),
            None => map.range::<[u8], _>((Bound::Unbounded, to)).next_back(),
        }?;
        if !range::above(k, &self.front.next) {
            return None;
        }
        let entry = n.versions.read().at(self.at).map(|c| c.entry(k));
        Some((k.to_vec(), entry))
    }
}

impl Iterator for OwnedMemtableIter {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let e = self.front.next_ahead(&self.memtable, self.at, &self.back)?;
        Some(Entry::from(self.front.record(&e)))
    }
}

impl DoubleEndedIterator for OwnedMemtableIter {
    fn next_back(&mut self) -> Option<Entry> {
        loop {
            let Some((key, entry)) = self.last_between() else {
                // Nothing left between the bounds but what the front read ahead. The
                // front's bound moves back to the cell taken, so that a seek moving the
                // back past it again lets the front find it, as it would have before
                // reading ahead.
                let e = self.front.ahead.pop_back()?;
                self.back = Bound::Excluded(e.key.to_vec());
                self.front.next = Bound::Included(e.key.to_vec());
                return Some(Entry::from(self.front.record(&e)));
            };
            self.back = Bound::Excluded(key);
            if entry.is_some() {
                return entry;
            }
        }
    }
}
