//! A table: the LSM tree of one table name. Writes go to the store's commit log, then to
//! the active memtable; full memtables are frozen and flushed into segments by the
//! store's background worker; size-tiered compaction merges segments.
//!
//! # Invariants
//! 1. A write is applied to a memtable only after the commit log acknowledged it, and
//!    under this table's memtable read lock held across both steps. Freezing the active
//!    memtable and measuring the lowest unflushed sequence number take the write lock,
//!    so no write is ever between "logged" and "in a memtable" when they look.
//! 2. A frozen memtable stays readable until the segment holding its cells is in the
//!    view (`SegmentSet::add`); only then is it dropped. Readers take the memtables
//!    first and the view second, so a flush completing in between shows the cells twice
//!    (identical, reconciled) and never zero times.
//! 3. Memtables are flushed oldest first, one flush at a time per table, so after a
//!    flush every record of this table up to the flushed memtable's highest sequence
//!    number is in a segment ([`Table::flushed_seq`]).
//! 4. Reads reconcile every source with the one cell rule ([`crate::table::cell`]):
//!    a point read consults every memtable and every segment that may hold the key,
//!    skipping a segment only when its `max_ts` is below the best timestamp found.
//! 5. Compaction drops a tombstone only if it is older than `gc_grace` and than every
//!    cell outside the compaction (segments left out, memtables) — see
//!    [`crate::table::merge`]. It reads the memtables before the view, as readers do,
//!    so a flush meanwhile cannot hide cells from both reads. Cells written later with
//!    an explicit timestamp older than `gc_grace` may resurrect deleted data, as in
//!    Cassandra.
//! 6. `maybe_cells` is true whenever a memtable holds a cell: a writer sets it after
//!    applying its cells and before acknowledging, inside the memtable read lock; a
//!    flush clears it under the write lock (no write in flight) only when every memtable
//!    is empty, which is after the flushed cells' segment joined the view. So a point read
//!    that loads it false (acquire) before loading the view sees every acknowledged write
//!    in that view, and skips the memtables and their lock.
//!
//! # Backpressure and failed flushes
//! A write first waits while `max_frozen_memtables` frozen memtables await their flush.
//! Each background flush attempt records its outcome on the table; a waiting writer
//! that sees an attempt end in failure after it began waiting gets
//! [`Error::FlushFailed`] (with the flush's error as its source) and its write is not
//! made. A flush failure is not poisoning: nothing durable was damaged (the commit log
//! holds the data, the segment's temp files are removed), so every stalled write asks
//! for another attempt, and the first one that succeeds lets writes go on.
//!
//! # Iteration
//! [`Table::scan`] (live rows), [`Table::scan_cells`] (winning cells, tombstones
//! included) and [`Table::scan_prefix`] merge a cursor per memtable and per segment
//! ([`crate::table::merge`]) with the same reconciliation as point reads. Ranges are
//! [`KeyRange`]s: `..`, `b"a"..b"b"`, `"a"..="b"`, `k.clone()..`, `(Bound, Bound)`, over
//! any `AsRef<[u8]>` key, so no call needs a turbofish. Keys of `get`, `put`, `delete`,
//! `get_cell` and [`WriteBatch`] are `impl AsRef<[u8]>` too.
//!
//! A [`Scan`] (and [`Cells`]) is a [`DoubleEndedIterator`]: `scan(..).rev()` walks
//! backward, and `next` and `next_back` may be mixed, meeting in the middle with every
//! key yielded once. [`Scan::seek`] moves the front to the first key at or above a key,
//! [`Scan::seek_back`] the back to the last key at or below one; a seek is absolute
//! within the scan's range (it can go back to keys already yielded), never crosses what
//! the other end has yielded, and repositions every source in place: a memtable cursor
//! by its key bound, a segment cursor by one index lookup at its next step. Segments
//! are walked forward through the data file and backward through the index entries,
//! each record read and checked through its entry.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock, RwLockWriteGuard};
use serde::{Deserialize, Serialize};

use super::batch::WriteBatch;
use super::compaction::{choose, Choice, CompactionConfig, SegmentSummary};
use super::memtable::{Memtable, ReadAt, SharedCell};
use super::merge::{BoxedCursor, BoxedSource, MemtableCursor, MergeIter, TombstonePolicy};
use super::tables::Context;
use super::value::{Place, Value};
use super::view::Pin;
use crate::error::{Error, Result};
use crate::lifecycle::{SegmentHandle, SegmentSet, View};
use crate::range::{prefix_range, KeyBounds, KeyRange};
use crate::segment::{Entry, RecordRef, SegmentIter};
use crate::table::cell::cmp_versions;

/// Settings of the tables of a store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TableConfig {
    /// Freeze and flush the active memtable once it holds this many bytes
    /// (`Memtable::approx_bytes`).
    pub memtable_flush_bytes: usize,
    /// Writers wait while this many frozen memtables await their flush (at least 1);
    /// a flush failing meanwhile refuses their writes with [`Error::FlushFailed`].
    pub max_frozen_memtables: usize,
    /// Size-tiered compaction.
    pub compaction: CompactionConfig,
    /// Tombstones younger than this many seconds are kept by compaction (Cassandra's
    /// `gc_grace_seconds`, default 10 days): repair must run more often than this. In a
    /// configuration file it is a duration like the commit log's: `gc_grace = "10d"`
    /// (whole seconds; units `s`, `m`, `h`, `d`, ...); the older `gc_grace_secs =
    /// 864000` is still read.
    #[serde(rename = "gc_grace", alias = "gc_grace_secs", with = "grace_text")]
    pub gc_grace_secs: u64,
    /// Run size-tiered compaction in the background after flushes.
    pub background_compaction: bool,
}

/// `gc_grace` in a configuration file: duration text in whole seconds (written in the
/// largest exact unit of `d`, `h`, `m`, `s`), or a number of seconds (the older
/// `gc_grace_secs`).
mod grace_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::table::commitlog::config::duration_text;

    pub fn serialize<S: Serializer>(secs: &u64, s: S) -> std::result::Result<S::Ok, S::Error> {
        let text = [(86_400, "d"), (3_600, "h"), (60, "m")]
            .into_iter()
            .find(|(unit, _)| *secs != 0 && secs % unit == 0)
            .map_or_else(|| format!("{secs}s"), |(unit, u)| format!("{}{u}", secs / unit));
        s.serialize_str(&text)
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Grace {
        Secs(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
        match Grace::deserialize(d)? {
            Grace::Secs(s) => Ok(s),
            Grace::Text(t) => {
                let dur = duration_text::parse(&t)
                    .map_err(|e| serde::de::Error::custom(format!("gc_grace: {e}")))?;
                if dur.subsec_nanos() != 0 {
                    return Err(serde::de::Error::custom(format!(
                        "gc_grace {t:?}: must be a whole number of seconds"
                    )));
                }
                Ok(dur.as_secs())
            }
        }
    }
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            memtable_flush_bytes: 64 * 1024 * 1024,
            max_frozen_memtables: 2,
            compaction: CompactionConfig::default(),
            gc_grace_secs: 864_000,
            background_compaction: true,
        }
    }
}

impl TableConfig {
    /// Check the settings, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        self.compaction.validate()?;
        if self.max_frozen_memtables == 0 {
            return Err(Error::InvalidConfig {
                setting: "max_frozen_memtables",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// Counters of one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// Keys in the active memtable.
    pub memtable_keys: usize,
    /// Bytes charged to the active memtable.
    pub memtable_bytes: usize,
    /// Frozen memtables waiting for their flush.
    pub frozen_memtables: usize,
    /// Live segments.
    pub segments: usize,
    /// Every record of this table numbered at or below this is in a segment.
    pub flushed_seq: u64,
    /// Flushes completed since open.
    pub flushes: u64,
    /// Compactions completed since open.
    pub compactions: u64,
}

/// A test hook run with the table at a chosen point.
#[cfg(test)]
type TableHook = Box<dyn FnOnce(&Table) + Send>;

/// How the background flushes of a table went, for writers waiting on them.
#[derive(Default)]
struct FlushState {
    /// Flush attempts ended since open, successful or not.
    attempts: u64,
    /// Why the last attempt failed; `None` once one succeeds.
    failure: Option<Arc<Error>>,
}

pub(crate) struct Memtables {
    active: Arc<Memtable>,
    /// Oldest first.
    frozen: Vec<Arc<Memtable>>,
}

/// One table. Obtained from [`crate::Store::table`]; shareable across threads.
pub struct Table {
    name: String,
    set: Arc<SegmentSet>,
    ctx: Arc<Context>,
    mem: RwLock<Memtables>,
    /// False only while every memtable is empty, so point reads can skip the memtable
    /// lock (invariant 6). Set by writers inside the memtable read lock; cleared only
    /// under the write lock.
    maybe_cells: AtomicBool,
    flush_lock: Mutex<()>,
    compaction_lock: Mutex<()>,
    flushed_seq: AtomicU64,
    flush_state: Mutex<FlushState>,
    /// Signalled when a flush attempt ends (either way).
    stall: Condvar,
    flushes: AtomicU64,
    compactions: AtomicU64,
    pub(crate) flush_queued: AtomicBool,
    pub(crate) compaction_queued: AtomicBool,
    /// Dropped ([`crate::Store::drop_table`]): writes are refused; read under the
    /// memtable read lock, so once a drop has taken the write lock no write is left.
    dropped: AtomicBool,
    /// Runs once inside compaction, between its reads of the memtables and the view
    /// (tests of invariant 5 against a concurrent flush).
    #[cfg(test)]
    cutoff_hook: Mutex<Option<TableHook>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Table {
    /// A table over `set` whose active memtable starts as `replayed` (commit log replay).
    pub(crate) fn new(
        name: &str,
        set: Arc<SegmentSet>,
        ctx: Arc<Context>,
        replayed: Memtable,
        flushed_seq: u64,
    ) -> Table {
        set.with_view(|v| {
            for h in &v.segments {
                ctx.clock.observe(h.stats().max_ts);
            }
        });
        Table {
            name: name.to_string(),
            set,
            ctx,
            maybe_cells: AtomicBool::new(!replayed.is_empty()),
            mem: RwLock::new(Memtables {
                active: Arc::new(replayed),
                frozen: Vec::new(),
            }),
            flush_lock: Mutex::new(()),
            compaction_lock: Mutex::new(()),
            flushed_seq: AtomicU64::new(flushed_seq),
            flush_state: Mutex::new(FlushState::default()),
            stall: Condvar::new(),
            flushes: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            flush_queued: AtomicBool::new(false),
            compaction_queued: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            #[cfg(test)]
            cutoff_hook: Mutex::new(None),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The settings of the store's tables.
    pub fn config(&self) -> &TableConfig {
        &self.ctx.config
    }

    /// The table's segments (manifest and view).
    pub fn segments(&self) -> &Arc<SegmentSet> {
        &self.set
    }

    /// Set `key` to `value`, timestamped by the store's clock.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.write(WriteBatch::new().put(key, value))
    }

    /// Delete `key`, timestamped by the store's clock.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.write(WriteBatch::new().delete(key))
    }

    /// Write a batch: one commit log record, then the memtable (invariant 1). Returns
    /// once the commit log's sync mode acknowledges it.
    ///
    /// While [`TableConfig::max_frozen_memtables`] frozen memtables await their flush,
    /// the write waits first (backpressure). If a flush attempt ends in failure while it
    /// waits (a full disk, say), the write is refused with [`Error::FlushFailed`] naming
    /// the cause, and nothing of it is logged or applied; the next write retries the
    /// flush, and writes go on as soon as one succeeds.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        write_tables(&[(self, batch)], batch.is_sync())
    }

    /// The store's context (a cross-table batch checks its tables share one).
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Is a drop of this table in progress (or done)?
    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// Refuse writes (a drop) or accept them again (a drop that failed). Refusing
    /// waits until no write, flush or compaction of the table is in flight (their
    /// segment set, frozen first, refuses what they would still change), so every
    /// record of the table is below the commit log's next sequence number.
    pub(crate) fn set_dropped(&self, dropped: bool) {
        self.dropped.store(dropped, Ordering::Release);
        if dropped {
            // Writers waiting for a flush see it at once.
            {
                let _waiters = self.flush_state.lock();
                self.stall.notify_all();
            }
            drop(self.flush_lock.lock());
            drop(self.compaction_lock.lock());
            drop(self.mem.write());
        }
    }

    /// Backpressure: wait while too many frozen memtables await their flush, asking the
    /// worker for one. A flush attempt that ends in failure during the wait ends it
    /// with that failure (a failure from before the wait only makes it ask again).
    fn wait_for_flushes(&self) -> Result<()> {
        let mut st = self.flush_state.lock();
        let start = st.attempts;
        while self.mem.read().frozen.len() >= self.ctx.config.max_frozen_memtables {
            self.ctx.check_open()?;
            if self.dropped.load(Ordering::Acquire) {
                return Err(Error::Dropped {
                    table: self.name.clone(),
                });
            }
            if st.attempts > start {
                if let Some(cause) = &st.failure {
                    return Err(Error::FlushFailed {
                        table: self.name.clone(),
                        source: Arc::clone(cause),
                    });
                }
            }
            self.ctx.schedule_flush(self);
            self.stall.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Record a flush attempt's outcome and wake the writers waiting for it.
    fn flush_ended(&self, failure: Option<Error>) {
        let mut st = self.flush_state.lock();
        st.attempts += 1;
        st.failure = failure.map(Arc::new);
        self.stall.notify_all();
    }

    /// A background flush (or the checkpoint after it) failed: writers waiting for it
    /// get `e` ([`Table::write`]).
    pub(crate) fn flush_failed(&self, e: Error) {
        self.flush_ended(Some(e));
    }

    /// The active memtable, then the frozen ones, newest first.
    pub(crate) fn memtables(&self) -> Vec<Arc<Memtable>> {
        let m = self.mem.read();
        let mut v = Vec::with_capacity(1 + m.frozen.len());
        v.push(Arc::clone(&m.active));
        v.extend(m.frozen.iter().rev().cloned());
        v
    }

    /// The value of `key`, or `None` if it is absent or deleted. The value is not
    /// copied: it shares the memtable's bytes, or borrows the segment's mapped bytes and
    /// keeps that segment mapped while it lives (see [`Value`]); only a value read with
    /// positional reads (`standard` mode) is copied once.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let best = self.memtable_best(key);
        // With the view borrowed (no lock, no count): a miss costs no reference count, a
        // mapped hit clones the view for the value to hold.
        self.set.with_view_arc(|view| {
            if let ([h], None) = (&view.segments[..], &best) {
                return Self::sole_value(view, h, key);
            }
            let place = Self::resolve(view, key, best, |w| w.and_then(|w| w.place(view)))?;
            Ok(place.map(|p| Value::at(view, p)))
        })
    }

    /// [`Table::get`] where `h` is the view's only segment and no memtable holds a cell
    /// of the key (a compacted table at rest, the common case): a path of its own,
    /// without [`Table::resolve`]'s closures, which cost a filter-answered miss (26 ns
    /// on the bare segment) some 20 instructions and 2% to 5% of its speed.
    #[inline(always)]
    fn sole_value(view: &Arc<View>, h: &SegmentHandle, key: &[u8]) -> Result<Option<Value>> {
        let place = h.get_with(key, |r| (!r.tombstone).then(|| Value::place(view, 0, r.value)))?;
        Ok(place.flatten().map(|p| Value::at(view, p)))
    }

    /// Run `f` on the value of `key` (`None` if it is absent or deleted) without
    /// copying it: memtable bytes, or segment bytes straight from the map (or from the
    /// reader's per-thread buffer in `standard` mode). A warm read of a segment
    /// allocates nothing. No lock of the table is held while `f` runs, and nothing
    /// waits for it: `f` may read, write, flush or compact this table. Segments that a
    /// compaction replaces while `f` runs stay mapped (and on disk) until it returns.
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let best = self.memtable_best(key);
        // `f` runs while the view is borrowed through an `arc_swap` guard
        // (`lifecycle::view`): no lock and no shared reference count (a count every
        // reader shares is a cache line the cores pass around on every get). Nothing
        // waits for a borrow, so `f` may do anything, write or flush this table
        // included; a segment compacted away meanwhile stays mapped, and on disk, until
        // `f` returns.
        self.set.with_view_arc(move |view| {
            Self::resolve(view, key, best, |w| {
                f(w.and_then(|w| (!w.tombstone).then_some(w.value)))
            })
        })
    }

    /// Whether `key` has a live value, without copying it. Segments whose filter rules
    /// the key out are not read.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let best = self.memtable_best(key);
        self.set
            .with_view(|view| Self::resolve(view, key, best, |w| w.is_some_and(|w| !w.tombstone)))
    }

    /// The values of `keys`, in order, like [`Table::get`] for each. The memtables and
    /// the view are taken once for all of them.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        self.ctx.check_open()?;
        // Invariant 6 (this module's): every memtable empty, so one view holds every
        // acknowledged write of the table, and only whole batches (a segment holds
        // whole memtables).
        if !self.maybe_cells.load(Ordering::Acquire) {
            let snap = TableSnap {
                set: Arc::clone(&self.set),
                mems: Vec::new(),
                view: self.set.view(),
            };
            return snap.multi_get(u64::MAX, keys);
        }
        // One picture of the table for every key: never half of a batch.
        let (pin, snap) = self.capture();
        snap.multi_get(pin.seq(), keys)
    }

    /// The winning cell of `key`, tombstones included (invariant 4).
    pub fn get_cell(&self, key: impl AsRef<[u8]>) -> Result<Option<Entry>> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let best = self.memtable_best(key);
        self.set.with_view(|view| {
            Self::resolve(view, key, best, |w| {
                w.map(|w| Entry {
                    key: key.to_vec(),
                    value: w.value.to_vec(),
                    ts: w.ts,
                    tombstone: w.tombstone,
                })
            })
        })
    }

    /// The winning memtable cell of `key`, reading the memtables under the read lock
    /// (no allocation; the lock is released before anything else runs).
    #[inline]
    fn memtable_best(&self, key: &[u8]) -> Option<SharedCell> {
        // Invariant 6: nothing in any memtable, no lock needed (the read-mostly case).
        if !self.maybe_cells.load(Ordering::Acquire) {
            return None;
        }
        let m = self.mem.read();
        Self::best_of(
            std::iter::once(&*m.active).chain(m.frozen.iter().rev().map(|f| &**f)),
            key,
            ReadAt::Visible(&self.ctx.visibility),
        )
    }

    /// The winner among the cells `memtables` hold for `key`.
    #[inline]
    fn best_of<'a>(
        memtables: impl Iterator<Item = &'a Memtable>,
        key: &[u8],
        at: ReadAt<'_>,
    ) -> Option<SharedCell> {
        let mut best: Option<SharedCell> = None;
        for m in memtables {
            if let Some(c) = m.get_shared_at(key, at) {
                if best.as_ref().is_none_or(|b| {
                    cmp_versions(c.ts, c.tombstone, &c.value, b.ts, b.tombstone, &b.value).is_gt()
                }) {
                    best = Some(c);
                }
            }
        }
        best
    }

    /// The point read (invariant 4): the winner of `best` (from the memtables, read
    /// before `view`, invariant 2) and the cells of `key` in `view`'s segments, handed to
    /// `f` (`None` if no source holds the key). `f` runs exactly once.
    ///
    /// A segment cell that beats everything read so far is final when no later segment
    /// may hold a cell as new (their `max_ts` are all below its timestamp): `f` then runs
    /// on the bytes where the reader found them (the map, or its scratch buffer), inside
    /// the segment read, with nothing copied. That is every hit of a fully compacted
    /// table. Otherwise the cell is copied and the search goes on.
    #[inline]
    fn resolve<R>(
        view: &View,
        key: &[u8],
        mut best: Option<SharedCell>,
        f: impl FnOnce(Option<Winner<'_>>) -> R,
    ) -> Result<R> {
        let mut f = Some(f);
        if let ([h], None) = (&view.segments[..], &best) {
            // The common case, a fully compacted table whose memtables hold nothing of
            // the key: the one segment's cell, if any, wins. (A path of its own: through
            // the loop below, a warm hit measured some 10% slower in
            // `benches/table_get.rs`.)
            let found = h.get_with(key, |r| {
                f.take().map(|f| {
                    f(Some(Winner {
                        value: r.value,
                        ts: r.ts,
                        tombstone: r.tombstone,
                        origin: Origin::Segment(0),
                    }))
                })
            })?;
            if let Some(Some(r)) = found {
                return Ok(r);
            }
        } else {
            for (i, h) in view.segments.iter().enumerate() {
                if best.as_ref().is_some_and(|b| h.stats().max_ts < b.ts) {
                    continue;
                }
                let later = &view.segments[i + 1..];
                let step = h.get_with(key, |r| {
                    if let Some(b) = &best {
                        if !cmp_versions(r.ts, r.tombstone, r.value, b.ts, b.tombstone, &b.value)
                            .is_gt()
                        {
                            return Step::Lost;
                        }
                    }
                    if later.iter().all(|o| o.stats().max_ts < r.ts) {
                        if let Some(f) = f.take() {
                            return Step::Done(f(Some(Winner {
                                value: r.value,
                                ts: r.ts,
                                tombstone: r.tombstone,
                                origin: Origin::Segment(i),
                            })));
                        }
                    }
                    Step::Leads(SharedCell {
                        value: Arc::from(r.value),
                        ts: r.ts,
                        tombstone: r.tombstone,
                    })
                })?;
                match step {
                    None | Some(Step::Lost) => {}
                    Some(Step::Leads(c)) => best = Some(c),
                    Some(Step::Done(r)) => return Ok(r),
                }
            }
        }
        let Some(f) = f else {
            unreachable!("`f` is taken only by a segment read that then returns its result");
        };
        Ok(f(best.as_ref().map(|b| Winner {
            value: &b.value,
            ts: b.ts,
            tombstone: b.tombstone,
            origin: Origin::Shared(&b.value),
        })))
    }

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
            let sole = self
                .set
                .with_view(|v| (v.segments.len() == 1).then(|| v.segments[0].clone()));
            if let Some(h) = sole {
                return Ok(Scan::new(sole_segment(h, bounds), None));
            }
            let view = self.set.view();
            let snap = TableSnap {
                set: Arc::clone(&self.set),
                mems: Vec::new(),
                view,
            };
            return Ok(Scan::new(snap.scan(u64::MAX, bounds), None));
        }
        let (pin, snap) = self.capture();
        Ok(Scan::new(snap.scan(pin.seq(), bounds), Some(pin)))
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
        Ok(Cells { inner, _pin: pin })
    }

    /// The merge of the memtables and the view over `bounds`, as one picture of the
    /// table ([`Table::capture`]): never half of a batch.
    fn merged(&self, bounds: KeyBounds, policy: TombstonePolicy) -> Result<(Merged, Arc<Pin>)> {
        self.ctx.check_open()?;
        let (pin, snap) = self.capture();
        Ok((snap.merged(pin.seq(), bounds, policy), pin))
    }

    /// This table as a read at the visible sequence number sees it: registered (so the
    /// memtables keep the versions it reads), then the memtables (invariant 2), then the
    /// view, under the store's install lock (visibility invariant 3).
    pub(crate) fn capture(&self) -> (Arc<Pin>, TableSnap) {
        let _install = self.ctx.install.read();
        let pin = Arc::new(Pin::new(&self.ctx));
        let snap = self.snap();
        (pin, snap)
    }

    /// The memtables, then the view. The caller holds the install lock and a [`Pin`].
    pub(crate) fn snap(&self) -> TableSnap {
        // A memtable empty now holds nothing the read sees, ever: every write at or
        // below the read's number is visible, so applied already. Leaving it out spares
        // each point read through a view a search of it.
        let mut mems = self.memtables();
        mems.retain(|m| !m.is_empty());
        TableSnap {
            set: Arc::clone(&self.set),
            mems,
            view: self.set.view(),
        }
    }

    /// Flush every memtable (the active one included) into segments, then release the
    /// commit log files this makes obsolete. On a store whose commit log is poisoned
    /// the memtables are still flushed (they may hold the only copy of writes a failed
    /// sync lost), then [`Error::Poisoned`] is returned: the store stays read-only.
    pub fn flush(&self) -> Result<()> {
        self.ctx.check_open()?;
        self.flush_memtables(true)?;
        self.ctx.checkpoint()?;
        self.ctx.schedule_compaction(self);
        self.ctx.log.check_poisoned()?;
        // A table whose manifest durability is unknown refuses changes, even when there
        // was nothing to flush.
        self.set.check_poisoned()
    }

    /// Flush frozen memtables, oldest first, after freezing the active one if `force`
    /// or if it is full (invariants 2, 3). Returns how many segments were added.
    pub(crate) fn flush_memtables(&self, force: bool) -> Result<usize> {
        let _one_at_a_time = self.flush_lock.lock();
        {
            let mut m = self.mem.write();
            let full = m.active.approx_bytes() >= self.ctx.config.memtable_flush_bytes;
            if force || full {
                Self::freeze_locked(&mut m);
            }
        }
        self.flush_frozen_locked()
    }

    /// Hold this table's flush and compaction locks: its segments change only by the
    /// holder's own flushes ([`Table::flush_frozen_locked`]) until the guards drop.
    pub(crate) fn quiesce(&self) -> (MutexGuard<'_, ()>, MutexGuard<'_, ()>) {
        (self.flush_lock.lock(), self.compaction_lock.lock())
    }

    /// [`Table::quiesce`] if neither lock is held now.
    pub(crate) fn try_quiesce(&self) -> Option<(MutexGuard<'_, ()>, MutexGuard<'_, ()>)> {
        let flush = self.flush_lock.try_lock()?;
        Some((flush, self.compaction_lock.try_lock()?))
    }

    /// The memtables under the write lock: no write of this table in flight.
    pub(crate) fn memtables_write(&self) -> RwLockWriteGuard<'_, Memtables> {
        self.mem.write()
    }

    /// Freeze the active memtable if it holds anything (the caller holds the write lock).
    pub(crate) fn freeze_locked(m: &mut Memtables) {
        if !m.active.is_empty() {
            let old = std::mem::replace(&mut m.active, Arc::new(Memtable::new()));
            m.frozen.push(old);
        }
    }

    /// Flush the frozen memtables, oldest first (the caller holds the flush lock).
    /// Returns how many segments were added.
    pub(crate) fn flush_frozen_locked(&self) -> Result<usize> {
        self.ctx.check_unsealed()?;
        let mut added = 0;
        loop {
            let Some(mt) = self.mem.read().frozen.first().cloned() else {
                break;
            };
            if !mt.is_empty() {
                // Visibility invariant 3: no segment holds a cell readers may not see.
                if let Some((_, max)) = mt.seq_range() {
                    self.ctx.visibility.wait_visible(max);
                }
                // Under `periodic` the memtable may hold records not yet durable in the
                // log. A segment must not outlive a power loss that takes them: a batch
                // across tables would come back in this table only. (A poisoned log
                // cannot sync; its memtables are flushed anyway, see `flush`.)
                match self.ctx.log.sync() {
                    Ok(()) | Err(Error::Poisoned(_)) => {}
                    Err(e) => return Err(e),
                }
                let mut w = self.set.writer()?;
                let name = w.name().clone();
                for e in mt.iter() {
                    w.add(&e.key, &e.value, e.ts, e.tombstone)?;
                }
                let stats = w.finish()?;
                self.set
                    .add_guarded(std::slice::from_ref(&name), || self.ctx.install.write())?;
                added += 1;
                tracing::debug!(segment = %name, cells = stats.entry_count, "memtable flushed");
            }
            {
                let mut m = self.mem.write();
                if m.frozen.first().is_some_and(|f| Arc::ptr_eq(f, &mt)) {
                    m.frozen.remove(0);
                }
                // Invariant 6: no write is in flight, the flushed cells are in the view.
                if m.frozen.is_empty() && m.active.is_empty() {
                    self.maybe_cells.store(false, Ordering::Release);
                }
            }
            if let Some((_, max)) = mt.seq_range() {
                self.flushed_seq.fetch_max(max, Ordering::AcqRel);
            }
            self.flushes.fetch_add(1, Ordering::Relaxed);
            self.flush_ended(None);
        }
        self.flush_ended(None);
        Ok(added)
    }

    /// Freeze the active memtable without flushing it: it stays readable as a frozen
    /// memtable until the next flush writes it out (writers wait once
    /// `max_frozen_memtables` are frozen). For tests and tools that need cells spread
    /// over several memtables (`testing` feature only).
    #[cfg(feature = "testing")]
    pub fn freeze_memtable(&self) {
        Self::freeze_locked(&mut self.mem.write());
    }

    /// Every record of this table numbered at or below this is in a segment.
    pub fn flushed_seq(&self) -> u64 {
        self.flushed_seq.load(Ordering::Acquire)
    }

    /// The lowest commit log sequence number any memtable of this table holds. Takes
    /// the write lock, so no write is in flight (invariant 1).
    pub(crate) fn min_unflushed_seq(&self) -> Option<u64> {
        let m = self.mem.write();
        std::iter::once(&m.active)
            .chain(&m.frozen)
            .filter_map(|mt| mt.seq_range().map(|r| r.0))
            .min()
    }

    fn summaries(view: &[SegmentHandle]) -> Vec<SegmentSummary> {
        view.iter()
            .map(|h| {
                let s = h.stats();
                SegmentSummary {
                    id: h.name().id,
                    data_bytes: s.data_len,
                    entry_count: s.entry_count,
                    min_ts: s.min_ts,
                    max_ts: s.max_ts,
                }
            })
            .collect()
    }

    /// One round of size-tiered compaction: returns whether it merged anything.
    ///
    /// A compaction of the table already running (a caller's `compact()`) makes this
    /// round do nothing rather than wait: the worker stays free for flushes, and a close
    /// never waits for the worker behind a long major compaction.
    pub(crate) fn compact_once(&self) -> Result<bool> {
        let Some(_one_at_a_time) = self.compaction_lock.try_lock() else {
            return Ok(false);
        };
        self.ctx.check_unsealed()?;
        let view = self.set.view();
        match choose(
            &Self::summaries(&view.segments),
            &self.ctx.config.compaction,
        ) {
            Choice::DoNothing => Ok(false),
            Choice::Merge(ids) => {
                drop(view);
                self.merge_segments(&ids)?;
                Ok(true)
            }
        }
    }

    /// Major compaction: flush, then merge every segment into one, dropping tombstones
    /// past `gc_grace` (invariant 5).
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        let _one_at_a_time = self.compaction_lock.lock();
        self.ctx.check_unsealed()?;
        let ids: Vec<u64> = self
            .set
            .view()
            .segments
            .iter()
            .map(|h| h.name().id)
            .collect();
        if ids.len() > 1
            || self
                .set
                .view()
                .segments
                .iter()
                .any(|h| h.stats().tombstone_count > 0)
        {
            self.merge_segments(&ids)?;
        }
        // The worker skipped rounds while this ran; flushes meanwhile may want one.
        self.ctx.schedule_compaction(self);
        Ok(())
    }

    /// Merge segments `ids` into one (or none, if nothing survives). The caller holds
    /// the compaction lock.
    fn merge_segments(&self, ids: &[u64]) -> Result<()> {
        // Invariant 5 needs the oldest cell outside the merge. Memtables first, then the
        // view, as readers do (invariant 2): a flush completing in between shows its
        // cells in both reads, never in neither.
        let memtables_min = self.memtables().iter().filter_map(|m| m.min_ts()).min();
        #[cfg(test)]
        if let Some(hook) = self.cutoff_hook.lock().take() {
            hook(self);
        }
        let view = self.set.view();
        let (chosen, others): (Vec<&SegmentHandle>, Vec<&SegmentHandle>) = view
            .segments
            .iter()
            .partition(|h| ids.contains(&h.name().id));
        if chosen.len() != ids.len() {
            return Err(Error::InvalidArgument(format!(
                "compaction of {}: some of segments {ids:?} are not live",
                self.name
            )));
        }
        // Invariant 5: the cutoff is below every cell outside the merge.
        let gc = self
            .ctx
            .clock
            .wall_micros()
            .saturating_sub(self.ctx.config.gc_grace_secs.saturating_mul(1_000_000));
        let cutoff = others
            .iter()
            .map(|h| h.stats().min_ts)
            .chain(memtables_min)
            .fold(gc, u64::min);
        let sources: Vec<BoxedSource<'static>> = chosen
            .iter()
            .map(|h| {
                SegmentIter::new::<&[u8]>((*h).clone(), ..)
                    .map(|it| Box::new(it) as BoxedSource<'static>)
            })
            .collect::<Result<_>>()?;
        let mut writer = None;
        for e in MergeIter::new(sources, TombstonePolicy::DropOlderThan(cutoff)) {
            let e = e?;
            let w = match &mut writer {
                Some(w) => w,
                None => writer.insert(self.set.writer()?),
            };
            w.add(&e.key, &e.value, e.ts, e.tombstone)?;
        }
        let new = match writer {
            Some(w) => {
                let name = w.name().clone();
                w.finish()?;
                vec![name]
            }
            None => Vec::new(),
        };
        drop(chosen);
        drop(others);
        drop(view);
        self.set.replace(ids, &new)?;
        self.compactions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(table = %self.name, merged = ?ids, into = ?new, "compaction done");
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> TableStats {
        let m = self.mem.read();
        TableStats {
            memtable_keys: m.active.len(),
            memtable_bytes: m.active.approx_bytes(),
            frozen_memtables: m.frozen.len(),
            segments: self.set.view().segments.len(),
            flushed_seq: self.flushed_seq(),
            flushes: self.flushes.load(Ordering::Relaxed),
            compactions: self.compactions.load(Ordering::Relaxed),
        }
    }
}

/// Write the cells of one table or several, of one store, as one commit log record:
/// all of it or none at replay, and to readers (a read sees it once every table has
/// applied it: [`crate::table::visibility`]). With `sync` the record is fsynced before
/// this returns, whatever the sync mode.
///
/// Each table's memtable read lock is taken in name order (so two batches never wait
/// for each other) and held across the log append and the apply (invariant 1); a table
/// with too many frozen memtables makes the write release everything and wait first.
pub(crate) fn write_tables(parts: &[(&Table, &WriteBatch)], sync: bool) -> Result<()> {
    let Some((first, _)) = parts.first() else {
        return Ok(());
    };
    let ctx = &first.ctx;
    for (t, _) in parts {
        if !Arc::ptr_eq(&t.ctx, ctx) {
            return Err(Error::InvalidArgument(format!(
                "table {} belongs to another store than table {}",
                t.name, first.name
            )));
        }
    }
    ctx.check_writable()?;
    let mut parts: Vec<&(&Table, &WriteBatch)> =
        parts.iter().filter(|(_, b)| !b.is_empty()).collect();
    if parts.is_empty() {
        return Ok(());
    }
    parts.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if let Some(w) = parts.windows(2).find(|w| w[0].0.name == w[1].0.name) {
        return Err(Error::InvalidArgument(format!(
            "table {} appears twice in one batch",
            w[0].0.name
        )));
    }
    loop {
        // One timestamp for the whole batch, taken again after a wait.
        let ts = ctx.clock.now();
        let mut guards = Vec::with_capacity(parts.len());
        let mut stalled = None;
        for (t, _) in &parts {
            let m = t.mem.read();
            if t.dropped.load(Ordering::Acquire) {
                return Err(Error::Dropped {
                    table: t.name.clone(),
                });
            }
            if m.frozen.len() >= ctx.config.max_frozen_memtables {
                stalled = Some(*t);
                break;
            }
            guards.push(m);
        }
        if let Some(t) = stalled {
            drop(guards);
            t.wait_for_flushes()?;
            continue;
        }
        let cells: Vec<_> = parts.iter().map(|(_, b)| b.cells(ts)).collect();
        let records: Vec<(&str, &[_])> = parts
            .iter()
            .zip(&cells)
            .map(|((t, _), c)| (t.name.as_str(), &c[..]))
            .collect();
        // A `sync` write under `periodic` is fsynced after it is applied, so other
        // writers' visibility never waits for its fsync (under `batch` and `group` the
        // append syncs before anything is applied, as always).
        let seq = ctx.log.append_parts(&records, Some(&ctx.visibility))?;
        // Finished (visible) however this ends, a panic included: a number left
        // pending would stop every later write and flush. (A panic inside the apply
        // would be a bug; it can leave part of the batch visible.)
        let finish = Finish(&ctx.visibility, seq);
        let mut full = Vec::new();
        for (((t, _), m), c) in parts.iter().zip(&guards).zip(&cells) {
            m.active.apply_visible(seq, c, &ctx.visibility);
            // Invariant 6: before the write is acknowledged, inside the read lock.
            if !t.maybe_cells.load(Ordering::Relaxed) {
                t.maybe_cells.store(true, Ordering::Release);
            }
            if m.active.approx_bytes() >= ctx.config.memtable_flush_bytes {
                full.push(*t);
            }
        }
        drop(guards);
        // Visible once every earlier number is too; acknowledged only then.
        drop(finish);
        ctx.visibility.wait_visible(seq);
        for t in full {
            ctx.schedule_flush(t);
        }
        if sync {
            ctx.log.sync_periodic_through(seq)?;
        }
        return Ok(());
    }
}

/// Finishes a write's sequence number when dropped ([`write_tables`]).
struct Finish<'a>(&'a super::visibility::Visibility, u64);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// The winning cell of a point read, borrowed from where it was found.
struct Winner<'a> {
    value: &'a [u8],
    ts: u64,
    tombstone: bool,
    origin: Origin<'a>,
}

impl Winner<'_> {
    /// Where the live value can be held as a [`Value`] (`None` for a tombstone), `view`
    /// being the view the read went through: shared or in place, copied only from a
    /// scratch buffer.
    fn place(&self, view: &View) -> Option<Place> {
        (!self.tombstone).then(|| match self.origin {
            Origin::Shared(b) => Place::Shared(Arc::clone(b)),
            Origin::Segment(i) => Value::place(view, i, self.value),
        })
    }
}

/// Where a point read's winning value lives.
enum Origin<'a> {
    /// Memtable bytes, or a copy of a segment's.
    Shared(&'a Arc<[u8]>),
    /// Segment `i` of the view read, in place (mapped, or the reader's scratch buffer).
    Segment(usize),
}

/// One segment's answer during a point read.
enum Step<R> {
    /// Its cell loses to the best so far.
    Lost,
    /// Its cell wins so far, but a later segment may hold a newer one.
    Leads(SharedCell),
    /// Its cell is the winner; `f` ran on it.
    Done(R),
}

type Merged = MergeIter<BoxedCursor<'static>>;

/// One table as a read at some sequence number sees it: its memtables (newest first,
/// read with that number) and its segment view, taken in that order (invariant 2) under
/// the store's install lock ([`crate::table::visibility`]).
#[derive(Clone)]
pub(crate) struct TableSnap {
    /// The table's segment set (which table this is: a table dropped and created again
    /// has another).
    pub(crate) set: Arc<SegmentSet>,
    pub(crate) mems: Vec<Arc<Memtable>>,
    pub(crate) view: Arc<View>,
}

impl TableSnap {
    /// A table that did not exist when the read began.
    pub(crate) fn empty(set: Arc<SegmentSet>) -> TableSnap {
        TableSnap {
            set,
            mems: Vec::new(),
            view: Arc::new(View::default()),
        }
    }

    fn best(&self, key: &[u8], at: u64) -> Option<SharedCell> {
        Table::best_of(self.mems.iter().map(|m| &**m), key, ReadAt::Seq(at))
    }

    pub(crate) fn get(&self, at: u64, key: &[u8]) -> Result<Option<Value>> {
        let view = &self.view;
        let place = Table::resolve(view, key, self.best(key, at), |w| {
            w.and_then(|w| w.place(view))
        })?;
        Ok(place.map(|p| Value::at(view, p)))
    }

    pub(crate) fn get_with<R>(
        &self,
        at: u64,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        Table::resolve(&self.view, key, self.best(key, at), |w| {
            f(w.and_then(|w| (!w.tombstone).then_some(w.value)))
        })
    }

    pub(crate) fn contains_key(&self, at: u64, key: &[u8]) -> Result<bool> {
        Table::resolve(&self.view, key, self.best(key, at), |w| {
            w.is_some_and(|w| !w.tombstone)
        })
    }

    pub(crate) fn multi_get<K: AsRef<[u8]>>(
        &self,
        at: u64,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        keys.into_iter().map(|k| self.get(at, k.as_ref())).collect()
    }

    /// The merge of a cursor per memtable (read at `at`) and per segment over `bounds`.
    /// The live rows in `bounds` for a read at `at`: the segment's own iterator when the
    /// table is one segment and no memtable holds a cell (none can hold one the read
    /// sees later: it was registered before the memtables were taken), else the merge.
    pub(crate) fn scan(&self, at: u64, bounds: KeyBounds) -> ScanSource {
        match &self.view.segments[..] {
            [h] if self.mems.iter().all(|m| m.is_empty()) => sole_segment(h.clone(), bounds),
            _ => ScanSource::Merged(self.merged(at, bounds, TombstonePolicy::Hide)),
        }
    }

    pub(crate) fn merged(&self, at: u64, bounds: KeyBounds, policy: TombstonePolicy) -> Merged {
        let mut sources: Vec<BoxedCursor<'static>> = Vec::new();
        // An empty memtable holds nothing this read may see (see `scan`).
        for m in self.mems.iter().filter(|m| !m.is_empty()) {
            sources.push(Box::new(MemtableCursor(m.range_at(bounds.clone(), at))));
        }
        for h in &self.view.segments {
            sources.push(Box::new(SegmentIter::with_bounds(
                h.clone(),
                bounds.0.clone(),
                bounds.1.clone(),
            )));
        }
        MergeIter::new(sources, policy)
    }
}

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
    /// Keeps the memtable versions the scan reads (`None`: it reads no memtable).
    _pin: Option<Arc<Pin>>,
}

/// Where a scan's rows come from.
pub(crate) enum ScanSource {
    /// The merge of the memtables and segments.
    Merged(Merged),
    /// A single segment and no memtable cell (a compacted table at rest): the segment's
    /// own iterator, tombstones skipped; no merge, and `next_with` lends each row
    /// straight from the map.
    Segment(SegmentIter<SegmentHandle>),
}

/// The rows of a table's only segment in `bounds`, read through its handle (the
/// iterator derefs the handle on every row: one pointer away from the reader).
fn sole_segment(h: SegmentHandle, bounds: KeyBounds) -> ScanSource {
    ScanSource::Segment(SegmentIter::with_bounds(h, bounds.0, bounds.1))
}

impl Scan {
    pub(crate) fn new(inner: ScanSource, pin: Option<Arc<Pin>>) -> Scan {
        Scan { inner, _pin: pin }
    }

    /// Move the front to the first live key at or above `key` (within the scan's
    /// range): the next [`Iterator::next`] yields it.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        match &mut self.inner {
            ScanSource::Merged(m) => m.seek(key.as_ref()),
            ScanSource::Segment(it) => it.seek(key.as_ref()),
        }
    }

    /// Move the back to the last live key at or below `key` (within the scan's range):
    /// the next [`DoubleEndedIterator::next_back`] yields it.
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        match &mut self.inner {
            ScanSource::Merged(m) => m.seek_back(key.as_ref()),
            ScanSource::Segment(it) => it.seek_back(key.as_ref()),
        }
    }

    /// The next row, handed to `f` borrowed (key, value): the allocation-free form of
    /// [`Iterator::next`] where the table is one segment with empty memtables (a
    /// compacted table at rest: the bytes come straight from the map, or the scan's
    /// buffer in `standard` mode); otherwise the merged row is lent. `None` at the end;
    /// after an error the scan is done.
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
        match &mut self.inner {
            ScanSource::Merged(m) => {
                let r = if FWD { m.next() } else { m.next_back() };
                r.map(|r| r.map(|e| f(&e.key, &e.value)))
            }
            ScanSource::Segment(it) => {
                let mut f = Some(f);
                loop {
                    let lend = |r: RecordRef<'_>| {
                        // `f` runs once, on the first live row (a tombstone keeps it).
                        if r.tombstone {
                            return None;
                        }
                        f.take().map(|f| f(r.key, r.value))
                    };
                    let got = if FWD { it.next_with(lend) } else { it.next_back_with(lend) };
                    match got? {
                        Ok(Some(t)) => return Some(Ok(t)),
                        Ok(None) => continue, // a tombstone: the key is deleted
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            ScanSource::Merged(m) => m.next().map(|r| r.map(|e| (e.key, e.value))),
            ScanSource::Segment(_) => self.next_with(|k, v| (k.to_vec(), v.to_vec())),
        }
    }
}

impl DoubleEndedIterator for Scan {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            ScanSource::Merged(m) => m.next_back().map(|r| r.map(|e| (e.key, e.value))),
            ScanSource::Segment(_) => self.next_back_with(|k, v| (k.to_vec(), v.to_vec())),
        }
    }
}

/// A range scan over a table's winning cells, tombstones included, in key order, from
/// either end; seeks as [`Scan`] does.
pub struct Cells {
    inner: Merged,
    /// Keeps the memtable versions the scan reads.
    _pin: Arc<Pin>,
}

impl Cells {
    pub(crate) fn new(inner: Merged, pin: Arc<Pin>) -> Cells {
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
        self.inner.next()
    }
}

impl DoubleEndedIterator for Cells {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::FileRules;
    use crate::{Config, Store};

    /// Zero-copy point reads see every source: a segment, a frozen memtable (waiting for
    /// its flush) and the active one, newest timestamp winning wherever it is.
    #[test]
    fn point_reads_see_frozen_memtables() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            file_rules: FileRules::posix(),
            table: TableConfig {
                background_compaction: false,
                ..TableConfig::default()
            },
            ..Config::default()
        };
        let store = Store::open(dir.path(), config).unwrap();
        let t = store.table("t").unwrap();
        let put = |k: &[u8], v: &[u8], ts| t.write(WriteBatch::new().put_at(k, v, ts)).unwrap();
        for k in [b"a", b"b", b"c", b"d"] {
            put(k, b"segment", 10);
        }
        t.flush().unwrap();
        put(b"b", b"frozen", 20);
        put(b"c", b"frozen", 20);
        t.write(WriteBatch::new().delete_at(b"d", 20)).unwrap();
        {
            let mut m = t.mem.write();
            let old = std::mem::replace(&mut m.active, Arc::new(Memtable::new()));
            m.frozen.push(old);
        }
        put(b"c", b"active", 30);
        // Older than the frozen cell: loses.
        put(b"b", b"stale", 15);
        assert_eq!(t.stats().frozen_memtables, 1);
        let want: [(&[u8], Option<&[u8]>); 5] = [
            (b"a", Some(b"segment")),
            (b"b", Some(b"frozen")),
            (b"c", Some(b"active")),
            (b"d", None),
            (b"e", None),
        ];
        let check = |t: &Table| {
            let keys = want.map(|(k, _)| k);
            let many = t.multi_get(keys).unwrap();
            for ((k, v), got) in want.iter().zip(many) {
                assert_eq!(t.get(k).unwrap().as_deref(), *v, "{k:?}");
                assert_eq!(got.as_deref(), *v, "{k:?}");
                assert!(t.get_with(k, |g| g == *v).unwrap(), "{k:?}");
                assert_eq!(t.contains_key(k).unwrap(), v.is_some(), "{k:?}");
            }
        };
        check(&t);
        let shared = t.get(b"b").unwrap().unwrap();
        assert!(!shared.is_mapped());
        // The frozen memtable flushed into a segment, then everything merged.
        t.flush_memtables(false).unwrap();
        assert_eq!(t.stats().frozen_memtables, 0);
        check(&t);
        t.compact().unwrap();
        check(&t);
        assert_eq!(shared, b"frozen", "a shared value outlives its memtable");
        drop((t, shared));
        store.close().unwrap();
    }

    /// Issue 11, defect 4: compaction read the view before the memtables, the reverse of
    /// the read path, so a flush in between moved cells out of the memtables into a
    /// segment that neither read saw, and a tombstone shadowing them was dropped: the
    /// deleted value came back.
    #[test]
    fn flush_between_the_cutoff_reads_never_drops_a_needed_tombstone() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            file_rules: FileRules::posix(),
            table: TableConfig {
                gc_grace_secs: 0,
                background_compaction: false,
                ..TableConfig::default()
            },
            ..Config::default()
        };
        let store = Store::open(dir.path(), config).unwrap();
        let t = store.table("t").unwrap();
        // A tombstone in a segment of its own, then an older value of the same key (a
        // repair, say) still in the memtable.
        t.write(WriteBatch::new().delete_at(b"k", 2_000)).unwrap();
        t.flush().unwrap();
        let tomb_segment = t.segments().live_ids();
        assert_eq!(tomb_segment.len(), 1);
        t.write(WriteBatch::new().put_at(b"k", b"old", 1_000))
            .unwrap();
        assert_eq!(t.get(b"k").unwrap(), None);
        // The flush lands exactly between compaction's two reads.
        *t.cutoff_hook.lock() = Some(Box::new(|t: &Table| {
            t.flush_memtables(true).unwrap();
        }));
        {
            let _g = t.compaction_lock.lock();
            t.merge_segments(&tomb_segment).unwrap();
        }
        assert!(t.cutoff_hook.lock().is_none(), "the hook ran");
        assert_eq!(
            t.stats().segments,
            2,
            "the value's segment and the tombstone's"
        );
        assert_eq!(t.get(b"k").unwrap(), None, "the deleted value came back");
        drop(t);
        store.close().unwrap();
    }
}
