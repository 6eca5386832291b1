//! The memtable: a concurrent sorted map from key to the winning cell of that key,
//! absorbing writes between flushes.
//!
//! Keys are ordered in a `BTreeMap` behind a reader-writer lock (the ordered map): a
//! scan's seek reads a few nodes whose keys lie side by side, and its walk steps along
//! a leaf. Until issue 19's memtable work it was `crossbeam_skiplist`'s lock-free
//! skiplist, whose search and walk follow a pointer per level and per key to a node
//! allocated on its own: a cache miss each, the largest cost of YCSB E's scans and a
//! quarter of a put's (README "Measured", "The memtable's keys in a B-tree").
//!
//! The map's lock is held for one map insert (a key new to the memtable; its node is
//! made before), one search (a point read of a key the point index left out) or one
//! batch of a scan's read-ahead (`iter.rs`), and is taken after a brief spin
//! (`spin::brief_try`). An overwrite of a key present takes no lock of the map: the
//! point index finds its node (invariant 5). Each key's node holds its cell behind a
//! small lock of its own, and nodes are never removed: an overwrite replaces the cell
//! in place, so a concurrent read never finds the key missing and falls through to an
//! older segment (`tests/table_concurrency.rs` checks it).
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
//!    versions later overwritten, plus a fixed per-cell overhead, like Cassandra's
//!    memtable allocator accounting (which does not give back overwritten space either).
//!    The flush threshold compares [`Memtable::applied_bytes`]: those and the cells that
//!    lost to a newer version of their key, which were logged all the same (so writes
//!    with older timestamps, as replication and repair send, still fill the memtable,
//!    and its flush releases their commit log files).
//! 3. [`Memtable::seq_range`] covers the sequence number of every commit log record
//!    whose cells were applied with [`Memtable::apply`]: after this memtable is flushed,
//!    log records in that range are no longer needed for this table.
//! 4. Once a key is present it stays present, and a read of it returns a cell at least
//!    as new as any read of it that finished earlier: a key being overwritten is never
//!    missing, and never goes back to an older cell.
//! 5. Every node is linked into the ordered map first (and counted in `keys`), then
//!    entered into the point index (a table by key hash, sized once, of the same
//!    `Arc`'d nodes: `index.rs`) by the insert that linked it; neither ever removes
//!    one. So the index holds a subset of the map's keys, each with the map's node: a
//!    point read or an overwrite that finds the key in the index has its one node, and
//!    one that does not searches the map (and offers what it finds to the index again).
//!    A key's point reads are a hash lookup instead of a search of O(log n) cache
//!    misses (with 200,000 keys in the memtable's skiplist: 1,172 ns a get before the
//!    index, against 549 ns for a get from a segment). Keys are left out only where
//!    their window of slots is full (about 1% of them in a full memtable) or a racing
//!    insert of the same tag is in flight.
//! 6. A node's lock is taken with the map's read lock held or with no lock of the map
//!    held, and the map's lock is never taken while a node's is held: a scan's batch
//!    reads each node's versions under the map's read lock; an insert and a point read
//!    lock a node after they let go of the map. So the two locks cannot deadlock.
//!
//! # Layout
//! - `mod.rs`: [`Memtable`] (inserts, applying commit log records, point reads through
//!   the point index, sizes), [`SharedCell`], `ReadAt`.
//! - `versions.rs`: a key's versions and the insert that keeps invariant 1.
//! - `value.rs`: [`CellValue`], a cell's value: inline in the node up to
//!   [`INLINE_VALUE`] bytes (read with the node, no allocation), longer ones shared.
//! - `filter.rs`: the key filter point reads test before searching the ordered map (a
//!   key's bits are set before its node is created: no false negative).
//! - `index.rs`: the point index, a table of nodes by key hash that inserts enter.
//! - `iter.rs`: [`MemtableIter`] and [`OwnedMemtableIter`] (double-ended, seekable; its
//!   front reads cells ahead in batches, one search of the ordered map each).
//! - `key.rs`: [`Key`], inline up to 24 bytes and ordered by `format::key_order`, and
//!   the probes searches compare with it.
//! - `tests.rs`: unit and property tests.

use std::collections::{btree_map, BTreeMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::format::key_hash;
use crate::format::ranges::{RangeTombstone, RangeTombstones};
use crate::format::record::RecordRef;
use crate::segment::Entry;
use crate::table::spin::brief_try;
use crate::table::visibility::Visibility;

mod filter;
mod index;
mod iter;
mod key;
mod ranges;
// Not in the `loom` build, whose index hands out clones (`index.rs`).
#[cfg(all(test, not(segstore_loom)))]
mod tests;
mod value;
mod versions;

use filter::KeyFilter;
use index::PointIndex;
pub(crate) use key::Key;
pub use filter::BITS_PER_KEY as FILTER_BITS_PER_KEY;
pub use iter::{MemtableIter, OwnedMemtableIter};
pub use value::{CellValue, INLINE_VALUE};
use versions::{Cell, Versions};

/// A key keeping more older versions than this has them thinned to those the
/// registered reads need (a hot key written while a scan or read view is open).
const THIN_AT: usize = 8;

/// Bytes charged per stored cell on top of key and value (the map's entry, the node,
/// vectors). It is below what a small key really takes: a key of up to 24 bytes is a
/// 224-byte node (its value inline if at most [`INLINE_VALUE`] bytes, else in an
/// allocation of its own beside it) and some 60 bytes of the ordered map's leaves.
pub const CELL_OVERHEAD: usize = 64;

/// The flush threshold [`Memtable::new`] sizes its key filter for (4 MiB: a filter of
/// 80 KiB); a table's memtables are sized from its `memtable_flush_bytes`.
pub const DEFAULT_FILTER_FLUSH_BYTES: usize = 4 << 20;

/// A memtable cell as a point read finds it ([`Memtable::get_shared`]): its value
/// copied if short, shared with the memtable if long ([`CellValue`]).
#[derive(Debug, Clone)]
pub struct SharedCell {
    /// The value (empty for a tombstone).
    pub value: CellValue,
    /// Write timestamp.
    pub ts: u64,
    /// True for a deletion.
    pub tombstone: bool,
    /// 0, or the cell's expiry ([`RecordRef::expires`]).
    pub expires: u64,
}

/// A memtable with this many range tombstone fragments counts as full: each range
/// delete copies them, so many disjoint range deletes between two flushes would cost
/// quadratic time (about a millisecond per delete at this size).
pub const RANGE_FRAGMENTS_FULL: usize = 2048;

/// A key's versions, shared by its entry in the ordered map and its slot in the point
/// index.
type Node = Arc<NodeData>;

/// What a key's node holds: its versions, and its key, which the point index compares
/// (the ordered map holds the key too, in its entry).
#[derive(Debug)]
pub(super) struct NodeData {
    key: Key,
    versions: RwLock<Versions>,
}

impl index::Keyed for NodeData {
    #[inline]
    fn key(&self) -> &[u8] {
        &self.key
    }
}

/// A concurrent sorted memtable. See the module docs.
#[derive(Debug)]
pub struct Memtable {
    /// Every key's node, in key order, behind a lock (the module docs' ordered map).
    /// Nodes are never removed; versions change in place (invariant 4).
    map: RwLock<BTreeMap<Key, Node>>,
    /// Keys in `map`, counted as each is linked (under `map`'s lock, before its node
    /// enters the point index): emptiness and length without the lock.
    keys: AtomicUsize,
    /// The point index: the same nodes by key hash (invariant 5, `index.rs`). Entries
    /// are never removed either.
    index: PointIndex<NodeData>,
    /// Every key of `map`, set before its node is created (`filter.rs`).
    filter: KeyFilter,
    /// Range tombstones, numbered (`ranges.rs`).
    ranges: ranges::MemRanges,
    bytes: AtomicUsize,
    /// Bytes of the cells applied that lost to a newer version (not stored), counted
    /// as `bytes` counts them: with `bytes`, what the flush threshold compares.
    lost: AtomicUsize,
    min_seq: AtomicU64,
    max_seq: AtomicU64,
    min_ts: AtomicU64,
    /// The largest timestamp of a point cell stored (0: none).
    max_ts: AtomicU64,
    /// Set (before the cell is inserted) once a cell with an expiry was given.
    expiring: AtomicBool,
}

impl Default for Memtable {
    fn default() -> Self {
        Memtable::new()
    }
}

impl Memtable {
    /// An empty memtable, its key filter sized for [`DEFAULT_FILTER_FLUSH_BYTES`].
    pub fn new() -> Memtable {
        Memtable::for_flush_bytes(DEFAULT_FILTER_FLUSH_BYTES)
    }

    /// An empty memtable whose key filter is sized for a flush at `flush_bytes`
    /// ([`crate::table::TableConfig::memtable_flush_bytes`]), and whose point index
    /// starts at its fewest slots (1,024: a table's first memtable; the memtables that
    /// follow a frozen one are sized for its keys).
    pub fn for_flush_bytes(flush_bytes: usize) -> Memtable {
        Memtable::with_index(flush_bytes, index::MIN_SLOTS)
    }

    /// An empty memtable to follow `last` (frozen now), flushed at `flush_bytes`: its
    /// point index sized for as many keys as `last` held (`index::slots_after`).
    pub(crate) fn after(last: &Memtable, flush_bytes: usize) -> Memtable {
        let slots = index::slots_after(last.len(), last.index.slots(), flush_bytes);
        Memtable::with_index(flush_bytes, slots)
    }

    fn with_index(flush_bytes: usize, slots: usize) -> Memtable {
        Memtable {
            map: RwLock::new(BTreeMap::new()),
            keys: AtomicUsize::new(0),
            index: PointIndex::with_slots(slots),
            filter: KeyFilter::for_flush_bytes(flush_bytes),
            ranges: ranges::MemRanges::default(),
            bytes: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
            min_seq: AtomicU64::new(u64::MAX),
            max_seq: AtomicU64::new(0),
            min_ts: AtomicU64::new(u64::MAX),
            max_ts: AtomicU64::new(0),
            expiring: AtomicBool::new(false),
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
        if c.expires != 0 && !self.expiring.load(Ordering::Relaxed) {
            self.expiring.store(true, Ordering::Release);
        }
        // An overwrite finds the node without allocating the key again, through the
        // point index. A key the filter rules out has no node (its bits are set before
        // its node is linked): a new key is searched for once, by the insert, and
        // entered into the index, whose slot starts loading here.
        let h = key_hash(c.key);
        self.index.prefetch(h);
        let write = |n: &NodeData| n.versions.write().insert(seq, c, floor, visibility);
        let found = match self.filter.may_contain(h) {
            true => self.with_node(c.key, h, write),
            false => None,
        };
        let stored = match found {
            Some(stored) => stored,
            None => {
                // The key's bits before its node: a reader that can find the node sees
                // them (no false negative, `filter.rs`). A node found above had them set
                // before it was linked.
                self.filter.insert(h);
                let node = self.link(Arc::new(NodeData {
                    key: Key::from_slice(c.key),
                    versions: RwLock::new(Versions {
                        head_seq: seq.unwrap_or(0),
                        head: Cell::from(c),
                        older: Vec::new(),
                    }),
                }));
                // Invariant 5: linked, then indexed (a racing insert of the key got the
                // same node, and one of the two enters it).
                self.index.insert(h, &node);
                write(&node)
            }
        };
        let bytes = c.key.len() + c.value.len() + CELL_OVERHEAD;
        if stored {
            self.min_ts.fetch_min(c.ts, Ordering::AcqRel);
            self.max_ts.fetch_max(c.ts, Ordering::AcqRel);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.lost.fetch_add(bytes, Ordering::Relaxed);
        }
        stored
    }

    /// Link `fresh` into the ordered map as its key's node, or (a racing insert of the
    /// key linked one first) return the node linked. The node is made before the lock
    /// is taken: the lock is held for the map's own insert only.
    fn link(&self, fresh: Node) -> Node {
        let mut map = self.write_map();
        match map.entry(fresh.key.clone()) {
            btree_map::Entry::Occupied(o) => Arc::clone(o.get()),
            btree_map::Entry::Vacant(v) => {
                // Counted before the lock is released, so before the index holds it.
                self.keys.fetch_add(1, Ordering::Release);
                Arc::clone(v.insert(fresh))
            }
        }
    }

    /// The ordered map, locked to write: spinning briefly first, as the lock is held
    /// for one map insert or one batch of a scan (`spin::brief_try`).
    fn write_map(&self) -> RwLockWriteGuard<'_, BTreeMap<Key, Node>> {
        brief_try(|| self.map.try_write()).unwrap_or_else(|| self.map.write())
    }

    /// The ordered map, locked to read, as [`Memtable::write_map`].
    fn read_map(&self) -> RwLockReadGuard<'_, BTreeMap<Key, Node>> {
        brief_try(|| self.map.try_read()).unwrap_or_else(|| self.map.read())
    }

    /// The node of `key` in the ordered map, if linked (tests check invariant 5 with it).
    fn listed(&self, key: &[u8]) -> Option<Node> {
        let map = self.read_map();
        // A probe compares with `key_order` inline (`key.rs`).
        match key::probe(key) {
            Some(p) => map.get(&p).cloned(),
            None => map.get(key).cloned(),
        }
    }

    /// Run `f` on the node of `key`, whose [`key_hash`] is `h` (`None`: no node): found
    /// through the point index, or else in the ordered map, which links every node
    /// (invariant 5). Every key is offered to the index at its insert; a key it left
    /// out (its window was full, or a racing insert of its tag was in flight) is
    /// offered again when found here. `f` runs with no lock of the map held.
    #[inline]
    fn with_node<R>(&self, key: &[u8], h: u64, f: impl FnOnce(&NodeData) -> R) -> Option<R> {
        if let Some(n) = self.index.get(key, h) {
            return Some(f(n.as_ref()));
        }
        let n = self.listed(key)?;
        // Invariant 5: the map's node, never another.
        self.index.insert(h, &n);
        Some(f(&n))
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
                    expires: e.expires,
                },
                u64::MAX,
            );
        }
        self.min_seq.fetch_min(seq, Ordering::AcqRel);
        self.max_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Apply the range tombstones of commit log record `seq` (its point cells go
    /// through [`Memtable::apply`] and the like); `floor` as for
    /// [`Memtable::apply_visible`] (`u64::MAX` at replay: no read is registered).
    pub fn apply_ranges(&self, seq: u64, ranges: &[RangeTombstone], floor: u64) {
        if ranges.is_empty() {
            return;
        }
        let bytes = self.ranges.insert(seq, ranges, floor);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(t) = ranges.iter().map(|r| r.ts).min() {
            self.min_ts.fetch_min(t, Ordering::AcqRel);
        }
        self.min_seq.fetch_min(seq, Ordering::AcqRel);
        self.max_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Whether it is due for its flush at a threshold of `flush_bytes`: the cells
    /// applied to it reach that many bytes ([`Memtable::applied_bytes`], invariant 2),
    /// or it holds [`RANGE_FRAGMENTS_FULL`] range tombstone fragments.
    pub(crate) fn is_full(&self, flush_bytes: usize) -> bool {
        self.applied_bytes() >= flush_bytes || self.range_fragments() >= RANGE_FRAGMENTS_FULL
    }

    /// Fragments of its range tombstones: an insert copies them (copy-on-write), so a
    /// memtable holding [`RANGE_FRAGMENTS_FULL`] of them is flushed as if full.
    pub fn range_fragments(&self) -> usize {
        self.ranges.fragments()
    }

    /// Whether any range tombstone was applied.
    #[inline]
    pub fn has_ranges(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// The newest timestamp of a range tombstone covering `key` that a read at `at`
    /// sees.
    #[inline]
    pub(crate) fn range_cover(&self, key: &[u8], at: ReadAt<'_>) -> Option<u64> {
        if self.ranges.is_empty() {
            return None;
        }
        self.ranges.cover_ts(key, at.seq())
    }

    /// Add the range tombstones a read at `seq` sees to `into`.
    pub(crate) fn add_ranges_at(&self, seq: u64, into: &mut RangeTombstones) {
        self.ranges.add_to(seq, into);
    }

    /// Every range tombstone, as fragments (what a flush writes).
    pub fn range_tombstones(&self) -> RangeTombstones {
        self.ranges.all()
    }

    /// Whether a cell with an expiry (TTL) was inserted: a scan whose sources hold none
    /// does not read the expiry clock.
    #[inline]
    pub fn has_expiring(&self) -> bool {
        self.expiring.load(Ordering::Acquire)
    }

    /// The largest timestamp of a point cell stored (0 with none): a scan skips a
    /// deleted range in one seek when no source holds a cell newer than its tombstone.
    pub fn max_ts(&self) -> u64 {
        self.max_ts.load(Ordering::Acquire)
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
        let t = self.ranges.min_ts().map_or(t, |r| r.min(t));
        (t != u64::MAX || !self.is_empty()).then_some(t)
    }

    /// The newest cell of `key` (a tombstone included: it shadows older segments).
    pub fn get(&self, key: &[u8]) -> Option<Entry> {
        self.with_node(key, key_hash(key), |n| n.versions.read().head.entry(key))
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
        self.get_shared_hashed(key, key_hash(key), at)
    }

    /// [`Memtable::get_shared_at`] for a key whose [`key_hash`] is `h`: the key filter
    /// first, so a memtable that cannot hold the key is not searched.
    #[inline]
    pub(crate) fn get_shared_hashed(
        &self,
        key: &[u8],
        h: u64,
        at: ReadAt<'_>,
    ) -> Option<SharedCell> {
        if self.keys.load(Ordering::Acquire) == 0 || !self.filter.may_contain(h) {
            return None;
        }
        // For `Visible`, loaded under the node's lock: a version forgotten before we
        // took it was below a floor at or below what we load (visibility invariant 2).
        self.with_node(key, h, |n| n.versions.read().at(at.seq()).map(Cell::shared))
            .flatten()
    }

    /// The sequence number of the newest version of `key` (whose [`key_hash`] is `h`)
    /// held here, if any: the key filter first, as [`Memtable::get_shared_hashed`].
    #[inline]
    pub(crate) fn newest_seq_hashed(&self, key: &[u8], h: u64) -> Option<u64> {
        if self.keys.load(Ordering::Acquire) == 0 || !self.filter.may_contain(h) {
            return None;
        }
        self.with_node(key, h, |n| n.versions.read().head_seq)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.load(Ordering::Acquire)
    }

    /// True when nothing is stored: no key and no range tombstone.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.ranges.is_empty()
    }

    /// Could `key`, whose `key_hash` (xxh3-64) is `h`, be present? False answers come from the
    /// key filter alone and are never wrong for a key inserted before (filter.rs).
    #[inline]
    pub fn may_contain_hashed(&self, h: u64) -> bool {
        self.filter.may_contain(h)
    }

    /// Start loading the key filter's line for hash `h` (a read about to test several
    /// memtables' filters starts every load first).
    #[inline]
    pub(crate) fn prefetch_filter(&self, h: u64) {
        self.filter.prefetch(h);
    }

    /// Bytes of the key filter.
    pub fn filter_bytes(&self) -> usize {
        self.filter.num_bits() / 8
    }

    /// Bytes stored (invariant 2): what the memtable holds in memory.
    pub fn approx_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Bytes of every cell applied, stored or lost to a newer version, counted alike:
    /// what the flush threshold compares (invariant 2). A cell that loses was logged
    /// all the same, and its record stays in the commit log until this memtable is
    /// flushed: counted only when stored, a stream of writes with older timestamps
    /// never filled the memtable and kept every log file from its first write on.
    pub fn applied_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed)
    }

    /// Bytes of the point index, a table sized when the memtable is made: 24 KiB for a
    /// table's first memtable, then for the keys the memtable before held, up to 3 MiB
    /// at a 16 MiB flush threshold (`index.rs`). Not part of [`Memtable::approx_bytes`],
    /// so not of the flush threshold: memory on top of it.
    pub fn index_bytes(&self) -> usize {
        self.index.bytes()
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
