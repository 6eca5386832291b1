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
//!    (identical, reconciled) and never zero times. Point reads load the list of
//!    memtables without the lock (`memset.rs`: republished under the write lock by
//!    every change), with the same order: the list first, the view second.
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
//! [`KeyRange`](crate::range::KeyRange)s: `..`, `b"a"..b"b"`, `"a"..="b"`, `k.clone()..`, `(Bound, Bound)`, over
//! any `AsRef<[u8]>` key, so no call needs a turbofish. Keys of `get`, `put`, `delete`,
//! `get_cell` and [`WriteBatch`](crate::table::batch::WriteBatch) are `impl AsRef<[u8]>` too.
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
//!
//! # Layout
//! One `impl Table` per concern, each in its own file:
//! - `mod.rs`: the [`Table`] struct and its state, [`TableStats`], the constructor and
//!   accessors; re-exports.
//! - `config.rs`: [`TableConfig`] and how `gc_grace` is read from configuration files.
//! - `write.rs`: [`Table::put`], [`Table::delete`], [`Table::write`] and `write_tables`,
//!   the one write path (invariants 1, 6); backpressure; refusing writes to a dropped
//!   table.
//! - `read.rs`: point reads ([`Table::get`], [`Table::get_with`], [`Table::contains_key`],
//!   [`Table::multi_get`], [`Table::get_cell`]) and `resolve`, the reconciliation of
//!   memtables and segments they share (invariant 4).
//! - `scan.rs`: [`Table::scan`], [`Table::scan_prefix`], [`Table::scan_cells`] and the
//!   iterators [`Scan`] and [`Cells`]. `overlay.rs`: a forward scan that lends the largest
//!   segment's rows and merges only at the keys the memtables and other segments hold.
//! - `snap.rs`: `TableSnap`, the table as a read at one sequence number sees it
//!   (`Table::capture`), and the reads of [`crate::table::view`] through it.
//! - `ingest.rs`: [`Table::ingest`] and `ingest_tables` (also `Store::ingest`): segment
//!   files adopted into several tables at once, committed by the ingest journal.
//! - `maintenance.rs`: flush (invariants 2, 3), quiescing, the flushed and lowest
//!   unflushed sequence numbers. `memset.rs`: the memtables' lock, and the list point
//!   reads load without it.
//! - `compact.rs`: a round of the table's compaction policy (size-tiered or leveled),
//!   major compaction, and the merge they share (invariant 5).
//! - `output.rs`: a merge's output segments (cut at the leveled target size, range
//!   tombstones clipped to each) and the pacing of the compaction rate limit.
//! - `tests.rs`: unit tests that reach into the table's internals.
//!
//! Range tombstones, when they come, get a file of their own here (`range_tombstones.rs`,
//! say), beside the read, scan and compaction code that consults them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, RwLock};
use serde::Serialize;

use super::compaction_filter::CompactionFilter;
use super::memtable::Memtable;
use super::tables::Context;
use crate::error::Error;
use crate::lifecycle::SegmentSet;

mod compact;
mod config;
mod ingest;
mod maintenance;
mod memset;
mod output;
mod overlay;
mod ranges;
mod read;
mod scan;
mod side;
mod side_run;
mod snap;
#[cfg(test)]
mod tests;
mod write;

pub(crate) use compact::Round;
pub(crate) use ingest::ingest_tables;
pub use config::TableConfig;
pub(crate) use config::DEFAULT_SIDE_RUN_BYTES;
#[cfg(feature = "testing")]
pub use read::set_key_range_skip;
pub(crate) use scan::{ScanPin, ScanSource};
pub use scan::{Cells, Scan};
pub(crate) use side_run::RunBudget;
pub use side_run::SideRunBudgetStats;
pub(crate) use snap::{may_expire, TableSnap};
pub(crate) use write::{write_nothing, write_tables, write_tables_checked};

/// Counters of one table. Fields may be added: read them by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TableStats {
    /// Keys in the active memtable.
    pub memtable_keys: usize,
    /// Bytes charged to the active memtable.
    pub memtable_bytes: usize,
    /// Bytes of the active memtable's point index (a table sized when the memtable is
    /// made, for the keys the one before it held: 24 KiB to 3 MiB at a 16 MiB
    /// `memtable_flush_bytes`), on top of `memtable_bytes` and outside the flush
    /// threshold.
    pub memtable_index_bytes: usize,
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
    /// Data bytes (the data components of segments) flushes wrote since open.
    pub flush_bytes: u64,
    /// Data bytes compactions wrote since open (with `flush_bytes`, the table's write
    /// amplification: everything written over what flushes wrote).
    pub compaction_bytes: u64,
    /// Segments leveled compaction moved down a level since open without rewriting
    /// them: they overlapped nothing in the level below nor one another (keys written
    /// in ascending order). Moves count toward neither `compactions` nor
    /// `compaction_bytes`.
    pub moves: u64,
    /// Seeks scans made into segments beside their base chain (a leveled table's
    /// level 0) since level 0 last merged into level 1, divided by the segments merged
    /// whenever level 0 merged into one segment for reads (so counted per flush a
    /// segment holds). Leveled compaction merges level 0 into level 1 once these, at
    /// 256 bytes each (`leveled::SCAN_SEEK_BYTES`) and counted once per flush level 0
    /// holds, come to that merge's bytes; overlapping level 0 segments into one once
    /// the seeks that saves come to level 0's bytes.
    pub scan_seeks: u64,
    /// Bytes of the table's side run (0: none): the cells of the segments beside its
    /// largest chain of disjoint segments (a leveled table's level 0), merged in
    /// memory for scans, at most `side_run_bytes`. README "Level 0 in memory for scans".
    pub side_run_bytes: u64,
    /// Cells the side run holds.
    pub side_run_cells: u64,
    /// Scans that read the side run in place of segments, since open.
    pub side_run_scans: u64,
}

/// A test hook run with the table at a chosen point.
#[cfg(test)]
type TableHook = Box<dyn FnOnce(&Table) + Send>;

/// A table's memtables as a read takes them ([`Table::memtables`]): held inline up to
/// the active one and three frozen (the default `max_frozen_memtables`), so a scan's
/// capture allocates no list of them.
pub(crate) type MemList = smallvec::SmallVec<[Arc<Memtable>; 4]>;

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
    /// This table's settings: its `<table>.settings` file, else the store's
    /// `Config::table`; replaced whole by `Store::set_table_config`.
    config: ArcSwap<TableConfig>,
    /// Run on every live cell compactions write ([`Table::set_compaction_filter`]).
    compaction_filter: RwLock<Option<Arc<dyn CompactionFilter>>>,
    mem: memset::MemSet,
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
    flush_bytes: AtomicU64,
    compaction_bytes: AtomicU64,
    moves: AtomicU64,
    pub(crate) flush_queued: AtomicBool,
    pub(crate) compaction_queued: AtomicBool,
    /// A background round found the compaction lock held: its holder looks again.
    compaction_rerun: AtomicBool,
    /// Segments scans have sought into beside their base chain (a leveled table's
    /// level 0) since level 0 last merged into level 1, divided by the segments merged
    /// at each merge of level 0 into one segment for reads: what leveled compaction's
    /// rule for reads weighs against those merges' bytes (`leveled::choose_for_reads`).
    scan_seeks: CachePadded<AtomicU64>,
    /// Flushes a level 0 segment merged by leveled compaction holds, for those holding
    /// more than one (`leveled::choose`'s rule 1; not kept across a reopen).
    l0_runs: Mutex<std::collections::HashMap<u64, u32>>,
    /// Its side run and the hints that decide when one is built (`side_run.rs`).
    side_runs: side_run::SideRuns,
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
        config: TableConfig,
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
            config: ArcSwap::from_pointee(config),
            compaction_filter: RwLock::new(None),
            maybe_cells: AtomicBool::new(!replayed.is_empty()),
            mem: memset::MemSet::new(Memtables {
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
            flush_bytes: AtomicU64::new(0),
            compaction_bytes: AtomicU64::new(0),
            moves: AtomicU64::new(0),
            flush_queued: AtomicBool::new(false),
            compaction_queued: AtomicBool::new(false),
            compaction_rerun: AtomicBool::new(false),
            scan_seeks: CachePadded::new(AtomicU64::new(0)),
            l0_runs: Mutex::new(std::collections::HashMap::new()),
            side_runs: side_run::SideRuns::new(),
            dropped: AtomicBool::new(false),
            #[cfg(test)]
            cutoff_hook: Mutex::new(None),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This table's settings: those [`Store::table_with`](crate::Store::table_with) or
    /// [`Store::set_table_config`](crate::Store::set_table_config) persisted for it,
    /// else the store's `Config::table`. A snapshot of them: a later
    /// `set_table_config` does not change what this returned.
    pub fn config(&self) -> Arc<TableConfig> {
        self.config.load_full()
    }

    /// Run `filter` on every live cell this table's compactions write from now on
    /// (`None`: none). Not persisted: set it again after every open. See
    /// [`CompactionFilter`] for what each decision
    /// writes and how a failing filter is reported.
    ///
    /// ```
    /// # fn main() -> segstore::Result<()> {
    /// use segstore::FilterDecision;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = segstore::Store::open(dir.path(), segstore::Config::default())?;
    /// let sessions = store.table("sessions")?;
    /// // Drop sessions whose value says they ended, at their next compaction.
    /// sessions.set_compaction_filter(Some(std::sync::Arc::new(
    ///     |_table: &str, _key: &[u8], value: &[u8], _ts: u64| {
    ///         if value.starts_with(b"ended") {
    ///             FilterDecision::Remove
    ///         } else {
    ///             FilterDecision::Keep
    ///         }
    ///     },
    /// )));
    /// sessions.put(b"s1", b"ended 2026-12-01")?;
    /// sessions.put(b"s2", b"active")?;
    /// sessions.flush()?;
    /// sessions.compact()?;
    /// assert!(sessions.get(b"s1")?.is_none());
    /// assert!(sessions.get(b"s2")?.is_some());
    /// # drop(sessions);
    /// # store.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_compaction_filter(&self, filter: Option<Arc<dyn CompactionFilter>>) {
        *self.compaction_filter.write() = filter;
    }

    /// Replace this table's settings (persisted by the caller first).
    pub(crate) fn set_config(&self, config: TableConfig) {
        self.config.store(Arc::new(config));
        // A new `side_run_bytes` may fit a view's side run that did not fit before.
        self.side_runs.retry_skipped();
    }

    /// The table's segments (manifest and view).
    pub fn segments(&self) -> &Arc<SegmentSet> {
        &self.set
    }

    /// The store's context (a cross-table batch checks its tables share one).
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The active memtable, then the frozen ones, newest first.
    pub(crate) fn memtables(&self) -> MemList {
        let m = self.mem.read();
        let mut v = MemList::with_capacity(1 + m.frozen.len());
        v.push(Arc::clone(&m.active));
        v.extend(m.frozen.iter().rev().cloned());
        v
    }

    /// Counters.
    pub fn stats(&self) -> TableStats {
        let (side_run_bytes, side_run_cells, side_run_scans) = self.side_runs.stats();
        let m = self.mem.read();
        TableStats {
            memtable_keys: m.active.len(),
            memtable_bytes: m.active.approx_bytes(),
            memtable_index_bytes: m.active.index_bytes(),
            frozen_memtables: m.frozen.len(),
            segments: self.set.view().segments.len(),
            flushed_seq: self.flushed_seq(),
            flushes: self.flushes.load(Ordering::Relaxed),
            compactions: self.compactions.load(Ordering::Relaxed),
            flush_bytes: self.flush_bytes.load(Ordering::Relaxed),
            compaction_bytes: self.compaction_bytes.load(Ordering::Relaxed),
            moves: self.moves.load(Ordering::Relaxed),
            scan_seeks: self.scan_seeks.load(Ordering::Relaxed),
            side_run_bytes,
            side_run_cells,
            side_run_scans,
        }
    }
}
