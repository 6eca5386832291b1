//! The memtable: a concurrent sorted map from key to the winning cell of that key,
//! absorbing writes between flushes.
//!
//! Built on `crossbeam_skiplist::SkipMap`: lock-free search and insertion of keys,
//! iteration in key order while writers run. Each key's node holds its cell behind a
//! small lock of its own, and nodes are never removed: an overwrite replaces the cell in
//! place. (`SkipMap::compare_insert` would not do: it unlinks the old node *before*
//! linking the new one, so a concurrent read can find the key missing, and a table read
//! then falls through to an older segment. `tests/table_concurrency.rs` caught that.)
//!
//! # Versions
//! A key's node holds versions, newest first: `(seq, cell)` where `cell` is the winner of
//! every cell inserted for the key with a commit log sequence number at or below `seq`.
//! A read at sequence number `s` takes the newest version numbered at or below `s`
//! ([`Memtable::get_shared_at`], [`Memtable::range_at`]): read views and plain reads
//! that must not see a batch not yet visible ([`crate::table::visibility`]). An insert
//! may forget the versions older than the key's newest version at or below the `floor`
//! it is given (no reader needs them: visibility invariant 2). An overwritten key keeps
//! its previous version until its next write (a plain read may still be reading at the
//! number before the overwrite became visible), and more while a read older than its
//! writes is registered; past [`THIN_AT`] older versions an insert keeps only those the
//! registered reads need, so a hot key written under a long scan does not pile up.
//!
//! # Invariants
//! 1. A key's newest version holds the winner, under [`crate::table::cell`]'s rule,
//!    of every cell inserted for it, and each version the winner of the cells numbered
//!    at or below its number. Inserts are commutative, so concurrent writers and
//!    commit log replay in any order converge on the same memtable. (An insert finds or
//!    creates the key's node, then, under the node's lock, adds a version at its number
//!    if the new cell beats the version below it, and folds the cell into every newer
//!    version.)
//! 2. [`Memtable::approx_bytes`] never decreases. It counts every cell stored, including
//!    versions later overwritten, plus a fixed per-cell overhead. It is what the flush
//!    threshold compares against, like Cassandra's memtable allocator accounting (which
//!    does not give back overwritten space either).
//! 3. [`Memtable::seq_range`] covers the sequence number of every commit log record
//!    whose cells were applied with [`Memtable::apply`]: after this memtable is flushed,
//!    log records in that range are no longer needed for this table.
//! 4. Once a key is present it stays present, and a read of it returns a cell at least
//!    as new as any read of it that finished earlier: a key being overwritten is never
//!    missing, and never goes back to an older cell.

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_skiplist::SkipMap;
use parking_lot::RwLock;

use crate::format::record::RecordRef;
use crate::range::{self, KeyRange};
use crate::segment::Entry;
use crate::table::cell::cmp_versions;
use crate::table::visibility::Visibility;

/// A key keeping more older versions than this has them thinned to those the
/// registered reads need (a hot key written while a scan or read view is open).
const THIN_AT: usize = 8;

/// Bytes charged per stored cell on top of key and value (skiplist node, vectors).
pub const CELL_OVERHEAD: usize = 64;

/// A stored cell. The value is an `Arc<[u8]>` so a point read can hand it out without
/// copying ([`Memtable::get_shared`]): a reader keeps the bytes it got even if the cell
/// is overwritten in place meanwhile.
#[derive(Debug, Clone)]
struct Cell {
    value: Arc<[u8]>,
    ts: u64,
    tombstone: bool,
}

impl Cell {
    fn entry(&self, key: &[u8]) -> Entry {
        Entry {
            key: key.to_vec(),
            value: self.value.to_vec(),
            ts: self.ts,
            tombstone: self.tombstone,
        }
    }

    fn shared(&self) -> SharedCell {
        SharedCell {
            value: Arc::clone(&self.value),
            ts: self.ts,
            tombstone: self.tombstone,
        }
    }
}

/// The bytes of `value`, shared; empty values (every tombstone) share one allocation.
fn share(value: &[u8]) -> Arc<[u8]> {
    static EMPTY: OnceLock<Arc<[u8]>> = OnceLock::new();
    if value.is_empty() {
        Arc::clone(EMPTY.get_or_init(|| Arc::from(&[][..])))
    } else {
        Arc::from(value)
    }
}

/// A memtable cell handed out without copying its value ([`Memtable::get_shared`]).
#[derive(Debug, Clone)]
pub struct SharedCell {
    /// The value (empty for a tombstone), shared with the memtable.
    pub value: Arc<[u8]>,
    /// Write timestamp.
    pub ts: u64,
    /// True for a deletion.
    pub tombstone: bool,
}

/// A key's versions (module docs), newest first: `head` numbered `head_seq`, then
/// `older` in decreasing sequence numbers. `older` is empty (no allocation) unless a
/// read view holds an older version.
#[derive(Debug)]
struct Versions {
    head_seq: u64,
    head: Cell,
    older: Vec<(u64, Cell)>,
}

impl Versions {
    /// The cell a read at sequence number `at` sees.
    #[inline]
    fn at(&self, at: u64) -> Option<&Cell> {
        if self.head_seq <= at {
            return Some(&self.head);
        }
        self.older.iter().find(|(s, _)| *s <= at).map(|(_, c)| c)
    }

    /// Insert `c`, numbered `seq`; forget versions no reader at or above `floor` needs,
    /// and, once more than [`THIN_AT`] are kept, those no registered read (`visibility`)
    /// needs. Returns whether the cell was stored.
    fn insert(
        &mut self,
        seq: Option<u64>,
        c: RecordRef<'_>,
        floor: u64,
        visibility: Option<&Visibility>,
    ) -> bool {
        let seq = seq.unwrap_or(self.head_seq);
        let beats = |cell: &Cell| {
            cmp_versions(
                c.ts,
                c.tombstone,
                c.value,
                cell.ts,
                cell.tombstone,
                &cell.value,
            )
        };
        // The version below (or at) `seq`: index 0 is the head, i + 1 is older[i].
        let below = if self.head_seq <= seq {
            Some(0)
        } else {
            self.older
                .iter()
                .position(|(s, _)| *s <= seq)
                .map(|i| i + 1)
        };
        let base = below.map(|i| {
            if i == 0 {
                (self.head_seq, &self.head)
            } else {
                (self.older[i - 1].0, &self.older[i - 1].1)
            }
        });
        let stored = match base.map(|(s, cell)| (s, beats(cell))) {
            Some((_, std::cmp::Ordering::Less)) => false,
            // An identical cell already there.
            Some((_, std::cmp::Ordering::Equal)) => true,
            Some((s, std::cmp::Ordering::Greater)) if s == seq => {
                // A second cell of the key in the same batch.
                let i = below.unwrap_or(0);
                let slot = if i == 0 {
                    &mut self.head
                } else {
                    &mut self.older[i - 1].1
                };
                *slot = Cell::from(c);
                self.fold_newer(i, c);
                true
            }
            _ => {
                let i = below.unwrap_or(1 + self.older.len());
                // Usually one older version, and only until the next write of the key.
                self.older.reserve_exact(1);
                if i == 0 {
                    let old = std::mem::replace(&mut self.head, Cell::from(c));
                    let old_seq = std::mem::replace(&mut self.head_seq, seq);
                    self.older.insert(0, (old_seq, old));
                } else {
                    self.older.insert(i - 1, (seq, Cell::from(c)));
                    self.fold_newer(i, c);
                }
                true
            }
        };
        self.forget_below(floor);
        if self.older.len() > THIN_AT {
            if let Some(v) = visibility {
                let (visible, views) = v.needed();
                self.thin(visible, &views);
            }
        }
        stored
    }

    /// Keep only the versions some read may still ask for: each registered read at `r`
    /// (`views`, ascending) reads the newest version at or below `r`; reads not yet
    /// registered read at `visible` or later, so they need the newest version at or
    /// below `visible` and every newer one. Dropping any other version changes no
    /// read's answer. The caller loaded `visible` and `views` together, under the
    /// visibility lock (a read registering later gets a number at or above `visible`).
    fn thin(&mut self, visible: u64, views: &[u64]) {
        let mut newer = self.head_seq;
        let mut below_visible = self.head_seq <= visible;
        self.older.retain(|(s, _)| {
            let keep =
                *s > visible || !below_visible || views.iter().any(|&r| *s <= r && r < newer);
            below_visible |= *s <= visible;
            newer = *s;
            keep
        });
    }

    /// Fold `c` into the versions newer than index `i` (0 = head): each holds the
    /// winner of every cell at or below its number, `c` included.
    fn fold_newer(&mut self, i: usize, c: RecordRef<'_>) {
        let wins = |cell: &Cell| {
            cmp_versions(
                c.ts,
                c.tombstone,
                c.value,
                cell.ts,
                cell.tombstone,
                &cell.value,
            )
            .is_gt()
        };
        for j in (0..i).rev() {
            let slot = if j == 0 {
                &mut self.head
            } else {
                &mut self.older[j - 1].1
            };
            if wins(slot) {
                *slot = Cell::from(c);
            }
        }
    }

    /// Keep the newest version at or below `floor` and every newer one.
    fn forget_below(&mut self, floor: u64) {
        if self.older.is_empty() {
            return;
        }
        if self.head_seq <= floor {
            self.older.clear();
        } else if let Some(i) = self.older.iter().position(|(s, _)| *s <= floor) {
            self.older.truncate(i + 1);
        }
    }
}

impl From<RecordRef<'_>> for Cell {
    fn from(c: RecordRef<'_>) -> Cell {
        Cell {
            value: share(c.value),
            ts: c.ts,
            tombstone: c.tombstone,
        }
    }
}

/// A concurrent sorted memtable. See the module docs.
#[derive(Debug)]
pub struct Memtable {
    /// Nodes are never removed; versions change in place (invariant 4).
    map: SkipMap<Vec<u8>, RwLock<Versions>>,
    bytes: AtomicUsize,
    min_seq: AtomicU64,
    max_seq: AtomicU64,
    min_ts: AtomicU64,
}

impl Default for Memtable {
    fn default() -> Self {
        Memtable::new()
    }
}

impl Memtable {
    /// An empty memtable.
    pub fn new() -> Memtable {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            min_seq: AtomicU64::new(u64::MAX),
            max_seq: AtomicU64::new(0),
            min_ts: AtomicU64::new(u64::MAX),
        }
    }

    /// Insert one cell, as the newest version of its key; it is kept only if it wins
    /// over the present cell of its key (invariant 1). Returns whether it was stored.
    /// The caller has checked the cell ([`crate::table::validate_cell`]; the commit log
    /// does on append).
    pub fn insert(&self, c: RecordRef<'_>) -> bool {
        self.insert_version(None, c, u64::MAX, None)
    }

    /// Insert one cell numbered `seq`, forgetting versions older than the key's newest
    /// at or below `floor` (module docs). Returns whether the cell was stored.
    pub(crate) fn insert_at(&self, seq: u64, c: RecordRef<'_>, floor: u64) -> bool {
        self.insert_version(Some(seq), c, floor, None)
    }

    /// Insert at `seq`, or (`None`) into the key's newest version.
    fn insert_version(
        &self,
        seq: Option<u64>,
        c: RecordRef<'_>,
        floor: u64,
        visibility: Option<&Visibility>,
    ) -> bool {
        // An overwrite finds the node without allocating the key again.
        let e = match self.map.get(c.key) {
            Some(e) => e,
            None => self.map.get_or_insert_with(c.key.to_vec(), || {
                RwLock::new(Versions {
                    head_seq: seq.unwrap_or(0),
                    head: Cell::from(c),
                    older: Vec::new(),
                })
            }),
        };
        let stored = e.value().write().insert(seq, c, floor, visibility);
        if stored {
            self.min_ts.fetch_min(c.ts, Ordering::AcqRel);
            self.bytes.fetch_add(
                c.key.len() + c.value.len() + CELL_OVERHEAD,
                Ordering::Relaxed,
            );
        }
        stored
    }

    /// Apply the cells of commit log record `seq` (invariant 3), keeping only each
    /// key's newest version.
    pub fn apply(&self, seq: u64, cells: &[RecordRef<'_>]) {
        for c in cells {
            self.insert_version(Some(seq), *c, u64::MAX, None);
        }
        self.min_seq.fetch_min(seq, Ordering::AcqRel);
        self.max_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Apply the cells of commit log record `seq` (a write of the store, whose
    /// registered reads `visibility` knows), forgetting versions no read needs.
    pub(crate) fn apply_visible(&self, seq: u64, cells: &[RecordRef<'_>], visibility: &Visibility) {
        let floor = visibility.floor();
        for c in cells {
            self.insert_version(Some(seq), *c, floor, Some(visibility));
        }
        self.min_seq.fetch_min(seq, Ordering::AcqRel);
        self.max_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Apply cells given as owned entries (commit log replay).
    pub fn apply_entries(&self, seq: u64, cells: &[Entry]) {
        for e in cells {
            self.insert_at(
                seq,
                RecordRef {
                    key: &e.key,
                    value: &e.value,
                    ts: e.ts,
                    tombstone: e.tombstone,
                },
                u64::MAX,
            );
        }
        self.min_seq.fetch_min(seq, Ordering::AcqRel);
        self.max_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Lowest and highest commit log sequence numbers applied, if any.
    pub fn seq_range(&self) -> Option<(u64, u64)> {
        let max = self.max_seq.load(Ordering::Acquire);
        (max != 0).then(|| (self.min_seq.load(Ordering::Acquire), max))
    }

    /// The smallest timestamp of any cell stored, if any (a compaction may drop a
    /// tombstone only if no memtable holds anything older; see `merge`).
    pub fn min_ts(&self) -> Option<u64> {
        let t = self.min_ts.load(Ordering::Acquire);
        (t != u64::MAX || !self.is_empty()).then_some(t)
    }

    /// The newest cell of `key` (a tombstone included: it shadows older segments).
    pub fn get(&self, key: &[u8]) -> Option<Entry> {
        self.map.get(key).map(|e| e.value().read().head.entry(key))
    }

    /// The newest cell of `key` like [`Memtable::get`], its value shared rather than
    /// copied: no allocation.
    #[inline]
    pub fn get_shared(&self, key: &[u8]) -> Option<SharedCell> {
        self.get_shared_at(key, ReadAt::Newest)
    }

    /// The cell of `key` a read at `at` sees, its value shared: no allocation.
    #[inline]
    pub(crate) fn get_shared_at(&self, key: &[u8], at: ReadAt<'_>) -> Option<SharedCell> {
        if self.map.is_empty() {
            return None;
        }
        let e = self.map.get(key)?;
        let versions = e.value().read();
        // For `Visible`, loaded under the node's lock: a version forgotten before we
        // took it was below a floor at or below what we load (visibility invariant 2).
        versions.at(at.seq()).map(Cell::shared)
    }

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

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no key is present.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes stored, for the flush threshold (invariant 2).
    pub fn approx_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
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

/// Which versions a memtable read sees.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReadAt<'a> {
    /// Each key's newest version (flush, tests).
    Newest,
    /// What is visible when the key is read (plain point reads).
    Visible(&'a Visibility),
    /// A read view's sequence number.
    Seq(u64),
}

impl ReadAt<'_> {
    #[inline]
    fn seq(self) -> u64 {
        match self {
            ReadAt::Newest => u64::MAX,
            ReadAt::Visible(v) => v.visible(),
            ReadAt::Seq(s) => s,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn put(m: &Memtable, k: &[u8], v: &[u8], ts: u64) -> bool {
        m.insert(RecordRef {
            key: k,
            value: v,
            ts,
            tombstone: false,
        })
    }

    fn del(m: &Memtable, k: &[u8], ts: u64) -> bool {
        m.insert(RecordRef {
            key: k,
            value: b"",
            ts,
            tombstone: true,
        })
    }

    #[test]
    fn newest_wins_and_ties_are_deterministic() {
        let m = Memtable::new();
        assert!(put(&m, b"k", b"v2", 2));
        assert!(!put(&m, b"k", b"v1", 1), "older write loses");
        assert_eq!(m.get(b"k").unwrap().value, b"v2");
        assert!(put(&m, b"k", b"v3", 3));
        assert!(put(&m, b"k", b"v4", 3), "tie: larger value wins");
        assert!(!put(&m, b"k", b"v0", 3), "tie: smaller value loses");
        assert!(del(&m, b"k", 3), "tie: tombstone wins");
        assert!(
            !put(&m, b"k", b"zz", 3),
            "tie: live cell loses to tombstone"
        );
        let e = m.get(b"k").unwrap();
        assert!(e.tombstone && e.ts == 3);
        assert!(put(&m, b"k", b"back", 4));
        assert_eq!(m.len(), 1);
        assert_eq!(m.get(b"nope"), None);
    }

    #[test]
    fn ranges_are_in_key_order_and_bounded() {
        let m = Arc::new(Memtable::new());
        for i in (0..100u32).rev() {
            put(&m, format!("k{i:03}").as_bytes(), b"v", 1);
        }
        let keys = |it: &mut dyn Iterator<Item = Entry>| -> Vec<String> {
            it.map(|e| String::from_utf8(e.key).unwrap()).collect()
        };
        let all = keys(&mut m.iter());
        assert_eq!(all.len(), 100);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        let r = keys(&mut m.range(b"k010".as_slice()..b"k020".as_slice()));
        assert_eq!(r.first().unwrap(), "k010");
        assert_eq!(r.len(), 10);
        let r = keys(&mut m.range::<[u8]>((
            Bound::Excluded(b"k010".as_slice()),
            Bound::Included(b"k020".as_slice()),
        )));
        assert_eq!((r.first().unwrap().as_str(), r.len()), ("k011", 10));
        // The owned iterator agrees and can outlive the borrow.
        let mut it = m.range_owned(b"k010".as_slice()..b"k020".as_slice());
        let owned = keys(&mut it);
        assert_eq!(
            owned,
            keys(&mut m.range(b"k010".as_slice()..b"k020".as_slice()))
        );
        assert_eq!(it.next(), None);
        assert_eq!(keys(&mut m.range_owned(..)), all);
    }

    #[test]
    fn bytes_and_sequence_numbers_are_tracked() {
        let m = Memtable::new();
        assert_eq!((m.approx_bytes(), m.seq_range()), (0, None));
        m.apply(
            7,
            &[RecordRef {
                key: b"abc",
                value: b"12345",
                ts: 1,
                tombstone: false,
            }],
        );
        assert_eq!(m.approx_bytes(), 8 + CELL_OVERHEAD);
        put(&m, b"abc", b"1", 0); // loses: not stored, not charged
        assert_eq!(m.approx_bytes(), 8 + CELL_OVERHEAD);
        m.apply_entries(
            3,
            &[Entry {
                key: b"x".to_vec(),
                value: vec![],
                ts: 9,
                tombstone: true,
            }],
        );
        assert_eq!(m.seq_range(), Some((3, 7)));
        assert_eq!(m.min_ts(), Some(1));
        assert_eq!(m.approx_bytes(), 9 + 2 * CELL_OVERHEAD);
    }

    #[test]
    fn concurrent_writers_converge_on_the_winner() {
        let m = Arc::new(Memtable::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let key = format!("k{}", i % 16);
                        // Timestamps collide across threads; values break ties.
                        let ts = (i * 7 + t * 13) % 50;
                        if (i + t) % 5 == 0 {
                            del(&m, key.as_bytes(), ts);
                        } else {
                            put(&m, key.as_bytes(), format!("v{t}-{i}").as_bytes(), ts);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Recompute the winners sequentially.
        let mut model: BTreeMap<Vec<u8>, (u64, bool, Vec<u8>)> = BTreeMap::new();
        for t in 0..4u64 {
            for i in 0..2000u64 {
                let key = format!("k{}", i % 16).into_bytes();
                let ts = (i * 7 + t * 13) % 50;
                let c = if (i + t) % 5 == 0 {
                    (ts, true, vec![])
                } else {
                    (ts, false, format!("v{t}-{i}").into_bytes())
                };
                let slot = model.entry(key).or_insert(c.clone());
                if c > *slot {
                    *slot = c;
                }
            }
        }
        let got: Vec<_> = m
            .iter()
            .map(|e| (e.key, (e.ts, e.tombstone, e.value)))
            .collect();
        assert_eq!(got, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_key_being_overwritten_is_never_missing_or_older() {
        // A reader must always find the key, with a value at least as new as the last
        // one it saw, while a writer replaces it (invariant 4).
        let m = Arc::new(Memtable::new());
        put(&m, b"k", &0u64.to_be_bytes(), 1);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut last = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let e = m.get(b"k").expect("key missing while overwritten");
                        assert!(e.ts >= last, "went back from ts {last} to {}", e.ts);
                        last = e.ts;
                        let scanned = m
                            .range::<&[u8]>(..)
                            .next()
                            .expect("key missing from a scan");
                        assert!(scanned.ts >= last);
                        last = scanned.ts;
                    }
                })
            })
            .collect();
        for ts in 2..50_000u64 {
            put(&m, b"k", &ts.to_be_bytes(), ts);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(m.len(), 1);
        assert_eq!(m.get(b"k").unwrap().ts, 49_999);
    }

    /// The winner of `cells` numbered at or below `at`, as (ts, tombstone, value).
    fn model_at(
        cells: &[(u64, u8, u64, bool, u8)],
        key: u8,
        at: u64,
    ) -> Option<(u64, bool, Vec<u8>)> {
        cells
            .iter()
            .filter(|c| c.1 == key && c.0 <= at)
            .map(|c| (c.2, c.3, if c.3 { vec![] } else { vec![c.4] }))
            .max()
    }

    #[test]
    fn reads_at_a_sequence_number_see_only_what_was_numbered_at_or_below_it() {
        let m = Arc::new(Memtable::new());
        let cell = |v: &'static [u8], ts| RecordRef {
            key: b"k",
            value: v,
            ts,
            tombstone: false,
        };
        m.insert_at(5, cell(b"five", 50), 0);
        m.insert_at(9, cell(b"nine", 90), 0);
        // Numbered 7 but applied last (a concurrent writer), and older by timestamp
        // than what 9 wrote: it shows at 7 and 8 only.
        m.insert_at(7, cell(b"seven", 70), 0);
        let at = |s| {
            m.get_shared_at(b"k", ReadAt::Seq(s))
                .map(|c| c.value.to_vec())
        };
        assert_eq!(at(4), None);
        assert_eq!(at(5).as_deref(), Some(&b"five"[..]));
        assert_eq!(at(8).as_deref(), Some(&b"seven"[..]));
        assert_eq!(at(9).as_deref(), Some(&b"nine"[..]));
        let scan = |s| m.range_at(.., s).map(|e| e.value).collect::<Vec<_>>();
        assert_eq!(scan(4), Vec::<Vec<u8>>::new());
        assert_eq!(scan(7), vec![b"seven".to_vec()]);
        // A floor of 8 forgets what no read at 8 or above needs: 5, not 7.
        m.insert_at(10, cell(b"ten", 100), 8);
        assert_eq!(at(8).as_deref(), Some(&b"seven"[..]));
        assert_eq!(at(10).as_deref(), Some(&b"ten"[..]));
        assert_eq!(at(5), None, "version 5 forgotten below the floor");
        // Two cells of the key in one batch: the winner of both.
        m.insert_at(11, cell(b"a", 110), 10);
        m.insert_at(11, cell(b"b", 110), 10);
        assert_eq!(at(11).as_deref(), Some(&b"b"[..]));
        assert_eq!(m.get(b"k").unwrap().value, b"b");
    }

    #[test]
    fn a_hot_key_under_open_reads_keeps_only_the_versions_they_need() {
        let vis = Visibility::new(0);
        let m = Memtable::new();
        let write = |seq: u64| {
            let v = seq.to_string();
            vis.begin(seq);
            let c = RecordRef {
                key: b"k",
                value: v.as_bytes(),
                ts: seq,
                tombstone: false,
            };
            m.apply_visible(seq, &[c], &vis);
            vis.finish(seq);
        };
        let read = |at: ReadAt<'_>| {
            m.get_shared_at(b"k", at)
                .map(|c| String::from_utf8(c.value.to_vec()).unwrap())
        };
        write(1);
        let first = vis.register();
        for s in 2..=5_000 {
            write(s);
        }
        let second = vis.register();
        for s in 5_001..=10_000 {
            write(s);
        }
        let kept = m.map.get(&b"k"[..]).unwrap().value().read().older.len();
        assert!(kept <= THIN_AT + 2, "{kept} older versions kept");
        assert_eq!(read(ReadAt::Seq(first)).as_deref(), Some("1"));
        assert_eq!(read(ReadAt::Seq(second)).as_deref(), Some("5000"));
        assert_eq!(read(ReadAt::Visible(&vis)).as_deref(), Some("10000"));
        vis.release(first);
        vis.release(second);
        write(10_001);
        assert!(m.map.get(&b"k"[..]).unwrap().value().read().older.len() <= 1);
    }

    proptest! {
        /// Writes in number order, reads registered and released between them: every
        /// registered read, and a read at the visible number, sees the winner of the
        /// cells numbered at or below its number, however the versions were thinned.
        #[test]
        fn thinned_versions_serve_every_registered_read(
            ops in proptest::collection::vec((0u8..10, 0u8..2, 0u64..6, any::<bool>(), 0u8..4), 1..120),
        ) {
            let vis = Visibility::new(0);
            let m = Memtable::new();
            let mut cells: Vec<(u64, u8, u64, bool, u8)> = Vec::new();
            let mut views: Vec<u64> = Vec::new();
            let mut seq = 0u64;
            for (op, k, ts, t, v) in ops {
                match op {
                    0 => views.push(vis.register()),
                    1 if !views.is_empty() => vis.release(views.remove(0)),
                    _ => {
                        seq += 1;
                        vis.begin(seq);
                        let (key, val) = ([k], [v]);
                        let c = RecordRef { key: &key, value: if t { &[] } else { &val }, ts, tombstone: t };
                        m.apply_visible(seq, &[c], &vis);
                        vis.finish(seq);
                        cells.push((seq, k, ts, t, v));
                    }
                }
                for &r in views.iter().chain(std::iter::once(&vis.visible())) {
                    for k in 0u8..2 {
                        let got = m.get_shared_at(&[k], ReadAt::Seq(r)).map(|c| (c.ts, c.tombstone, c.value.to_vec()));
                        prop_assert_eq!(got, model_at(&cells, k, r), "key {} at {}", k, r);
                    }
                }
            }
        }

        /// Cells numbered in any order, inserted in any order: a read at every number
        /// sees the winner of the cells numbered at or below it; with a floor, reads
        /// at or above the floor still do.
        #[test]
        fn versions_match_a_model_at_every_sequence_number(
            cells in proptest::collection::vec((1u64..20, 0u8..3, 0u64..6, any::<bool>(), 0u8..4), 1..30),
            seed: u64,
            floor in 0u64..20,
        ) {
            let m = Arc::new(Memtable::new());
            let mut order: Vec<usize> = (0..cells.len()).collect();
            let mut s = seed | 1;
            for i in (1..order.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                order.swap(i, (s % (i as u64 + 1)) as usize);
            }
            for &i in &order {
                let (seq, k, ts, t, v) = cells[i];
                let key = [k];
                let val = [v];
                m.insert_at(seq, RecordRef { key: &key, value: if t { &[] } else { &val }, ts, tombstone: t }, 0);
            }
            for at in 0..21u64 {
                for k in 0u8..3 {
                    let got = m.get_shared_at(&[k], ReadAt::Seq(at)).map(|c| (c.ts, c.tombstone, c.value.to_vec()));
                    prop_assert_eq!(got, model_at(&cells, k, at), "key {} at {}", k, at);
                }
                let scanned: Vec<_> = m.range_at(.., at).map(|e| (e.key[0], (e.ts, e.tombstone, e.value))).collect();
                let want: Vec<_> = (0u8..3).filter_map(|k| model_at(&cells, k, at).map(|c| (k, c))).collect();
                prop_assert_eq!(scanned, want);
            }
            // Inserting in number order with a floor keeps reads at or above it right.
            let m = Memtable::new();
            let mut sorted = cells.clone();
            sorted.sort_by_key(|c| c.0);
            for &(seq, k, ts, t, v) in &sorted {
                let (key, val) = ([k], [v]);
                m.insert_at(seq, RecordRef { key: &key, value: if t { &[] } else { &val }, ts, tombstone: t }, floor);
            }
            for at in floor..21 {
                for k in 0u8..3 {
                    let got = m.get_shared_at(&[k], ReadAt::Seq(at)).map(|c| (c.ts, c.tombstone, c.value.to_vec()));
                    prop_assert_eq!(got, model_at(&cells, k, at), "floor {}: key {} at {}", floor, k, at);
                }
            }
        }

        #[test]
        fn any_insert_order_gives_the_same_memtable(
            cells in proptest::collection::vec((0u8..6, 0u64..4, any::<bool>(), 0u8..3), 1..40),
            seed: u64,
        ) {
            let cells: Vec<(Vec<u8>, u64, bool, Vec<u8>)> = cells.into_iter()
                .map(|(k, ts, t, v)| (vec![b'a' + k], ts, t, if t { vec![] } else { vec![v] }))
                .collect();
            let fill = |order: &[usize]| {
                let m = Memtable::new();
                for &i in order {
                    let (k, ts, t, v) = &cells[i];
                    m.insert(RecordRef { key: k, value: v, ts: *ts, tombstone: *t });
                }
                m.iter().collect::<Vec<_>>()
            };
            let fwd: Vec<usize> = (0..cells.len()).collect();
            let mut shuffled = fwd.clone();
            let mut s = seed | 1;
            for i in (1..shuffled.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                shuffled.swap(i, (s % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(fill(&fwd), fill(&shuffled));
        }
    }
}
