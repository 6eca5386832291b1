//! The store: one directory, its tables' segment sets, snapshots, the deleter, and
//! recovery at open.
//!
//! Open: take the directory lock (invariant 7); resolve and log `disk_access_mode`;
//! open the deleter, which completes the journal of deletions left by a crash; run the
//! recovery scan (`src/recovery.rs`: temp files, snapshot staging directories,
//! ephemeral snapshots, orphans and what a drop left go to the deleter); open every
//! table's segments; then open the commit log and replay it into the tables' memtables
//! ([`crate::table::tables`]). Close ([`Store::close`], once; later calls do nothing):
//! flush every table and close the commit log, clear ephemeral snapshots, release the
//! views, report handles and mappings still held (leaks), finish every deletion that
//! can run, and release the directory lock. Drop without close: the commit log's final
//! fsync and nothing else (see [`Store`]).
//!
//! Tables: [`Store::table`] gives the LSM [`Table`] of a name (writes through the commit
//! log, memtables, flush, compaction); [`Store::segments`] gives the bare segment set
//! underneath, for code that writes segments itself; [`Store::drop_table`] removes one.
//!
//! Also: [`Store::open_read_only`] (a shared lock, no writes at all) and
//! [`Store::checkpoint`] (a consistent copy in another directory that opens as a store).
//!
//! Layout: this file holds [`Config`], the report and stats types and the [`Store`]
//! struct; one `impl Store` per concern lives under `store/`: `open.rs` (open and
//! recovery), `tables.rs` (tables, segment sets, read views, writes, drops),
//! `snapshots.rs` (snapshots and checkpoints), `stats.rs`, `close.rs` (close and drop);
//! `builder.rs` is [`ConfigBuilder`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::config::{DiskAccessMode, MemoryOptions, ResolvedModes, SegmentOptions};
use crate::error::{Error, Result};
use crate::io::budget::BudgetStats;
use crate::io::data_budget::DataMapStats;
use crate::io::registry::MappingSite;
use crate::io::residency::ResidencyTotals;
use crate::io::{FileRules, MappingStats};
use crate::lifecycle::{
    DeletePolicy, Deleter, DeleterStats, DirLock, HandleSite, LeakTracker, PendingDeletion,
    SegmentHandle, SetOptions,
};
use crate::segment::{BlockCacheStats, IndexCacheStats, ReaderOptions, UnpackedCacheStats};
use crate::table::lsm::SideRunBudgetStats;
use crate::table::commitlog::CommitLogConfig;
use crate::table::registry::Registry;
use crate::table::{TableConfig, Tables};

mod builder;
mod close;
mod durability;
mod ingest;
mod open;
mod snapshots;
mod stats;
mod tables;
pub use builder::ConfigBuilder;

/// Store settings. Deserialises from TOML/YAML/JSON with snake_case names. Build one with
/// [`Config::builder`], or start from `Config::default()` and set fields; checked by
/// [`Config::validate`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// How segment files are read.
    pub disk_access_mode: DiskAccessMode,
    /// Format of new segments.
    pub segment: SegmentOptions,
    /// When files may be unlinked (Windows always defers while mapped).
    pub delete_policy: DeletePolicy,
    /// Record where handles are taken and report those still held at close. On by
    /// default in debug builds.
    pub track_leaks: bool,
    /// The commit log: sync mode and file size.
    pub commitlog: CommitLogConfig,
    /// Memtables, flushing, compaction.
    pub table: TableConfig,
    /// Threads running background compactions (at least 1, default 2), beside the one
    /// thread that runs flushes: a flush never waits behind a merge, and one table's
    /// long merge does not hold up another's.
    pub compaction_threads: usize,
    /// Memory residency: `lock_memory`, `huge_pages`, `map_budget_percent`,
    /// `index_cache_mb`, `block_cache_mb`, `unpacked_cache_mb`, `auto_data_map_percent`,
    /// `side_run_mb`.
    pub memory: MemoryOptions,
    /// Probability (0.0 to 1.0, default 1.0) that a point read checks the checksum of the
    /// record it returns, as Cassandra's `crc_check_chance`. Below 1.0 a damaged value
    /// or deletion flag can reach a `get` unnoticed; the record's structure, lengths,
    /// key and timestamp range are still checked (a record failing those is checked whole
    /// and reported against the file at fault). Index blocks are checked when first read
    /// whatever this is; scans, compaction, repair and `verify` check every record.
    /// Checking reads the whole record, so on a mapped store whose callers read only part
    /// of each value it costs memory traffic as well as CPU.
    pub crc_check_chance: f64,
    /// File rules (the Windows emulation in tests). Not part of a config file.
    #[serde(skip)]
    pub file_rules: FileRules,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disk_access_mode: DiskAccessMode::default(),
            segment: SegmentOptions::default(),
            delete_policy: DeletePolicy::default(),
            track_leaks: cfg!(debug_assertions),
            commitlog: CommitLogConfig::default(),
            table: TableConfig::default(),
            compaction_threads: 2,
            memory: MemoryOptions::default(),
            crc_check_chance: 1.0,
            file_rules: FileRules::default(),
        }
    }
}

/// What `close` found. A second [`Store::close`] returns an empty one.
#[derive(Debug, Default)]
pub struct CloseReport {
    /// Segment handles still held by the application (leaks).
    pub leaked_handles: Vec<HandleSite>,
    /// Mappings under this directory still open (leaks, or a snapshot reader of another
    /// store in this process).
    pub leaked_mappings: Vec<MappingSite>,
    /// Deletions that could not complete, and obsolete segments whose files a handle
    /// still held at close ([`PendingReason::Held`](crate::lifecycle::PendingReason)):
    /// the journal names them and the next open deletes them. Nothing in the directory
    /// is touched after close returns.
    pub pending_deletions: Vec<PendingDeletion>,
}

impl CloseReport {
    /// True when nothing leaked and nothing is left to delete.
    pub fn is_clean(&self) -> bool {
        self.leaked_handles.is_empty()
            && self.leaked_mappings.is_empty()
            && self.pending_deletions.is_empty()
    }
}

/// Counts across the store. Fields may be added: read them by name.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct StoreStats {
    /// The resolved access modes.
    pub modes: ResolvedModes,
    /// Mappings of files under this directory.
    pub mappings: MappingStats,
    /// The deleter's counters.
    pub deletions: DeleterStats,
    /// Live segments per table.
    pub segments: BTreeMap<String, usize>,
    /// Residency of the live segments' maps, from the kernel: resident, locked and
    /// huge-page bytes; and what the residency settings could not do: maps refused under
    /// `lock_memory: all` and read with standard access (`map_fallbacks`), indexes that
    /// `lock_memory: index` could not lock because they are not mapped
    /// (`indexes_not_locked`).
    pub memory: ResidencyTotals,
    /// The mapping budget: limit, in use, fallbacks.
    pub budget: Option<BudgetStats>,
    /// The bytes of data files `auto` may map (`memory.auto_data_map_percent` of the
    /// memory available to the process), has mapped, and the segments whose data did
    /// not fit. `None` when the reader options carry no data map budget.
    pub data_budget: Option<DataMapStats>,
    /// Index blocks kept in memory for segments whose index is read with positional
    /// reads (`memory.index_cache_mb`): budget, bytes and blocks held, refusals.
    pub index_cache: Option<IndexCacheStats>,
    /// Data chunks kept in memory for point reads of data read with positional reads
    /// (`memory.block_cache_mb`): budget, bytes and chunks held, hits, misses, reads of
    /// records larger than a chunk that went past it. `None` when disabled (0).
    pub block_cache: Option<BlockCacheStats>,
    /// Decompressed data blocks kept for point reads of compressed segments
    /// (`memory.unpacked_cache_mb`): budget, bytes and blocks held, hits, misses. `None`
    /// when disabled (0).
    pub unpacked_cache: Option<UnpackedCacheStats>,
    /// Every table's side runs (level 0 merged in memory for scans) against the store's
    /// budget for them (`memory.side_run_mb`): limit, bytes held, runs not built for
    /// want of room.
    pub side_runs: SideRunBudgetStats,
    /// Reads registered at a sequence number: read views, and scans and `multi_get`s in
    /// progress on tables whose memtables hold cells (a read of segments alone keeps no
    /// memtable version and is not registered). While one is open, memtables keep older
    /// versions of keys written since.
    pub read_views: usize,
    /// The highest commit log sequence number readers see.
    pub visible_seq: u64,
}

/// Per-segment stats (see [`Store::segment_stats`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SegmentStatsView {
    /// Table.
    pub table: String,
    /// Segment id.
    pub id: u64,
    /// Effective access mode of the data file.
    pub data: crate::config::AccessMode,
    /// Effective access mode of the index file.
    pub index: crate::config::AccessMode,
    /// Cells.
    pub entries: u64,
    /// Kernel figures per map.
    pub memory: crate::segment::SegmentMemory,
    /// Bytes of this segment's index blocks held in the index cache.
    pub index_cache_bytes: u64,
    /// What its point reads search: the index file or the page index.
    pub point_lookup: crate::segment::PointLookup,
}

/// A snapshot opened read-only.
#[derive(Debug)]
pub struct SnapshotView {
    /// Tag.
    pub tag: String,
    /// Segment handles per table, newest first.
    pub tables: BTreeMap<String, Vec<SegmentHandle>>,
}

/// An open store directory.
///
/// Close it with [`Store::close`] (it takes `&self`, so a store shared across threads
/// can be closed where it is; closing twice is harmless). A store dropped without a
/// close does exactly this: refuses further use, stops the background worker, closes
/// the commit log (its final fsync, so every write acknowledged so far, under
/// `periodic` sync too, is as durable as a close would have made it, unless that fsync
/// fails, which is logged), releases its views and retries deletions that can run now.
/// It flushes no memtable, writes no positions and clears no ephemeral snapshot: the
/// next open replays the commit log and finishes the rest, as after a crash.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    config: Config,
    modes: ResolvedModes,
    deleter: Deleter,
    tracker: Option<Arc<LeakTracker>>,
    reader: ReaderOptions,
    /// The one registry of tables (segment sets, and the tables opened in this run),
    /// shared with `lsm`.
    registry: Arc<Registry>,
    lsm: Tables,
    /// Serialises creating a table's segment set and dropping a table.
    ddl: Mutex<()>,
    closed: AtomicBool,
    /// Held shared by every operation that may write into the directory (a snapshot,
    /// a checkpoint, a drop, creating a table), for its whole run; close takes it
    /// exclusively once, after setting `closed`, so none is left running after close.
    ops: RwLock<()>,
    read_only: bool,
    /// First segment id of a later table of each dropped name (positions' `dropped`).
    dropped: Mutex<BTreeMap<String, u64>>,
    /// Held until close.
    lock: Mutex<Option<DirLock>>,
}

/// Opens (creating) segment sets by name for the store and for replay.
struct SetOpener<'a> {
    dir: &'a Path,
    registry: &'a Registry,
    ddl: &'a Mutex<()>,
    opts: SetOptions,
    deleter: &'a Deleter,
    read_only: bool,
    dropped: &'a Mutex<BTreeMap<String, u64>>,
}

impl Store {
    /// Was it opened with [`Store::open_read_only`]?
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The store directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Deletions not done yet, with why each waits: files still mapped (a cleared
    /// snapshot a reader still maps, an obsolete segment), refused by the OS and retried,
    /// or announced and still held by a handle. Each deferral and its completion is also
    /// logged (`info`). Empty on a healthy store at rest; on a read-only store, what the
    /// journal of the last writer names.
    pub fn pending_deletions(&self) -> Vec<PendingDeletion> {
        self.deleter.pending_and_held()
    }

    testing_pub! {
        /// The deleter (its stats are in [`Store::stats`]).
        pub fn deleter(&self) -> &Deleter {
            &self.deleter
        }
    }

    /// Open: the returned guard keeps a close from completing until it drops (hold
    /// it for the whole operation; invariant 10). Recursive: an operation may call
    /// another.
    fn check_open(&self) -> Result<RwLockReadGuard<'_, ()>> {
        let op = self.ops.read_recursive();
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(op)
        }
    }

    /// Open, and not read-only; the guard as [`Store::check_open`]'s.
    fn check_writable(&self) -> Result<RwLockReadGuard<'_, ()>> {
        let op = self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(op)
    }

    fn set_options(&self) -> SetOptions {
        SetOptions {
            modes: self.modes,
            segment: self.config.segment.clone(),
            tracker: self.tracker.clone(),
            reader: self.reader.clone(),
        }
    }

    fn opener(&self) -> SetOpener<'_> {
        SetOpener {
            dir: &self.dir,
            registry: &self.registry,
            ddl: &self.ddl,
            opts: self.set_options(),
            deleter: &self.deleter,
            read_only: self.read_only,
            dropped: &self.dropped,
        }
    }

    testing_pub! {
        /// The tables and the commit log (flush all, wait for background work, stats).
        pub fn tables(&self) -> &Tables {
            &self.lsm
        }
    }
}
