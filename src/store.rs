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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::config::{DiskAccessMode, MemoryOptions, ResolvedModes, SegmentOptions};
use crate::error::{Error, Result};
use crate::io::budget::BudgetStats;
use crate::io::kstats::SmapsSnapshot;
use crate::io::registry::MappingSite;
use crate::io::residency::ResidencyTotals;
use crate::io::{registry, FileRules, MappingStats, StoreFs};
use crate::lifecycle::set::{manifest_path, open_handle, Frozen};
use crate::lifecycle::{
    DeletePolicy, Deleter, DeleterStats, DirLock, HandleSite, LeakTracker, Manifest,
    PendingDeletion, SegmentHandle, SegmentSet, SetOptions, View,
};
use crate::recovery;
use crate::segment::{validate_name, Component, SegmentName};
use crate::segment::{IndexCacheStats, ReaderOptions};
use crate::snapshot::{self, SnapshotInfo};
use crate::table::commitlog::CommitLogConfig;
use crate::table::registry::{Registered, Registry};
use crate::table::{Batch, ReadView, Table, TableConfig, Tables, WriteBatch};

mod builder;
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
    /// Memory residency: `lock_memory`, `huge_pages`, `map_budget_percent`,
    /// `index_cache_mb`.
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

/// Counts across the store.
#[derive(Debug, Clone, serde::Serialize)]
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
    /// Index blocks kept in memory for segments whose index is read with positional
    /// reads (`memory.index_cache_mb`): budget, bytes and blocks held, refusals.
    pub index_cache: Option<IndexCacheStats>,
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
    /// Open (creating if needed) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        Self::open_inner(dir.as_ref(), config, false)
    }

    /// Open the store in `dir` read-only: for reads while no process has it open for
    /// writing, or of a copy that must stay as it is.
    ///
    /// Takes a shared lock on `LOCK` (several read-only opens at a time, in one process
    /// or many; [`Error::Locked`] while it is open for writing, and a writer gets
    /// `Locked` while any read-only open holds it). Writes nothing at all: no recovery
    /// deletions (temp files, orphans and what the journal names stay; what recovery
    /// would delete is not read), no journal rewrite, no new commit log file, no
    /// positions, no background work. The commit log is replayed into memtables, so
    /// reads see every write the last writer acknowledged. Writes, flushes, compactions,
    /// snapshots, checkpoints and drops fail with [`Error::ReadOnly`]; a table that does
    /// not exist is [`Error::NotFound`]. `dir` must be a store (a missing `LOCK` file is
    /// [`Error::NotFound`]). Close and drop write nothing either.
    pub fn open_read_only(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        Self::open_inner(dir.as_ref(), config, true)
    }

    fn open_inner(dir: &Path, config: Config, read_only: bool) -> Result<Store> {
        config.validate()?;
        if !read_only {
            StoreFs::new(dir, &config.file_rules).create_dir_all(dir)?;
        }
        let dir = dir
            .canonicalize()
            .map_err(|e| Error::io("canonicalize", dir, e))?;
        let lock = if read_only {
            DirLock::acquire_shared(&dir)?
        } else {
            DirLock::acquire(&StoreFs::new(&dir, &config.file_rules))?
        };
        let modes = config.disk_access_mode.resolve();
        modes.log();
        crate::segment::warn_index_lock_at_open(&modes, config.memory.lock_memory);
        let deleter = if read_only {
            Deleter::open_read_only(&dir, config.file_rules.clone(), config.delete_policy)?
        } else {
            Deleter::open(&dir, config.file_rules.clone(), config.delete_policy)?
        };
        let tracker = config.track_leaks.then(|| Arc::new(LeakTracker::default()));
        let recovered = if read_only {
            recovery::scan(&dir, &deleter)?
        } else {
            let r = recovery::recover(&dir, &deleter)?;
            deleter.compact_journal()?;
            r
        };
        let reader = ReaderOptions {
            crc_check_chance: config.crc_check_chance,
            ..ReaderOptions::from_config(&config.memory)?
        };
        let opts = SetOptions {
            modes,
            segment: config.segment.clone(),
            tracker: tracker.clone(),
            reader: reader.clone(),
        };
        let mut sets = BTreeMap::new();
        for (table, max_id) in recovered.tables {
            let set = SegmentSet::open(&dir, &table, opts.clone(), deleter.clone(), max_id + 1)?;
            if read_only {
                set.freeze(Some(Frozen::ReadOnly));
            }
            sets.insert(table, Arc::new(set));
        }
        let registry = Arc::new(Registry::new(sets));
        let ddl = Mutex::new(());
        let dropped = Mutex::new(
            recovered
                .dropped
                .iter()
                .map(|(t, d)| (t.clone(), d.first_id))
                .collect(),
        );
        let opener = SetOpener {
            dir: &dir,
            registry: &registry,
            ddl: &ddl,
            opts,
            deleter: &deleter,
            read_only,
            dropped: &dropped,
        };
        let open = if read_only {
            Tables::open_read_only
        } else {
            Tables::open
        };
        let lsm = open(
            &dir,
            &config.commitlog,
            &config.table,
            &config.file_rules,
            &deleter,
            Arc::clone(&registry),
            &|name| opener.open_set(name),
        )?;
        Ok(Store {
            dir,
            config,
            modes,
            deleter,
            tracker,
            reader,
            registry,
            lsm,
            ddl,
            closed: AtomicBool::new(false),
            ops: RwLock::new(()),
            read_only,
            dropped,
            lock: Mutex::new(Some(lock)),
        })
    }

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

    /// Set `closed` and wait for the operations that began before (once only: `false`
    /// if the store was closed already).
    fn begin_close(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        if self.ops.try_write().is_none() {
            self.deleter
                .rules()
                .point("close waits for operations", &self.dir);
            drop(self.ops.write());
        }
        true
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

    /// The segments of table `name`, creating the table if it does not exist
    /// ([`Error::NotFound`] on a read-only store).
    pub fn segments(&self, name: &str) -> Result<Arc<SegmentSet>> {
        let _op = self.check_open()?;
        self.opener().open_set(name)
    }

    /// The LSM table `name` (commit log, memtables, flush, compaction), creating it if
    /// it does not exist ([`Error::NotFound`] on a read-only store). Its segments are
    /// [`Store::segments`] of the same name.
    pub fn table(&self, name: &str) -> Result<Arc<Table>> {
        let _op = self.check_open()?;
        self.lsm.table(name, || self.segments(name))
    }

    testing_pub! {
        /// The tables and the commit log (flush all, wait for background work, stats).
        pub fn tables(&self) -> &Tables {
            &self.lsm
        }
    }

    /// A consistent read of every table at this moment: every write acknowledged before
    /// the call, nothing written after, never part of a batch without the rest. See
    /// [`ReadView`] (keep the word snapshot for the on-disk snapshots of
    /// [`Store::snapshot`]).
    ///
    /// ```
    /// # fn main() -> segstore::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = segstore::Store::open(dir.path(), segstore::Config::default())?;
    /// let users = store.table("users")?;
    /// users.put(b"alice", b"31")?;
    /// let view = store.read_view()?;
    /// users.put(b"alice", b"32")?;
    /// users.flush()?; // flushes and compactions do not change what a view reads
    /// assert_eq!(view.get(&users, b"alice")?.as_deref(), Some(&b"31"[..]));
    /// assert_eq!(users.get(b"alice")?.as_deref(), Some(&b"32"[..]));
    /// # drop((view, users));
    /// # store.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_view(&self) -> Result<ReadView> {
        self.lsm.ctx().check_open()?;
        Ok(ReadView::capture(self.lsm.ctx()))
    }

    /// Write a batch across tables of this store atomically: one commit log record, so
    /// all of it or none is applied at replay, and readers see all of it or none. See
    /// [`Batch`]. A table of another store, or a dropped one, fails the whole batch.
    pub fn write(&self, batch: &Batch) -> Result<()> {
        let parts: Vec<(&Table, &WriteBatch)> = batch.parts().collect();
        for (t, _) in &parts {
            if !Arc::ptr_eq(t.ctx(), self.lsm.ctx()) {
                return Err(Error::InvalidArgument(format!(
                    "table {} belongs to another store",
                    t.name()
                )));
            }
        }
        crate::table::lsm::write_tables(&parts, batch.is_sync())
    }

    /// Names of the tables.
    pub fn table_names(&self) -> Vec<String> {
        self.registry.names()
    }

    /// Snapshot every table (or only `table`) under `tag`.
    pub fn snapshot(&self, tag: &str, table: Option<&str>) -> Result<()> {
        self.snapshot_inner(tag, table, false)
    }

    /// An ephemeral snapshot (cleared automatically at close and at next open).
    pub fn snapshot_ephemeral(&self, tag: &str, table: Option<&str>) -> Result<()> {
        self.snapshot_inner(tag, table, true)
    }

    fn snapshot_inner(&self, tag: &str, table: Option<&str>, ephemeral: bool) -> Result<()> {
        let _op = self.check_writable()?;
        // Memtables first, so the snapshot holds every acknowledged write (Cassandra
        // flushes before a snapshot too).
        // All tables as of one moment: a batch across tables is in it whole or not at
        // all.
        let views: Vec<(String, Arc<crate::lifecycle::View>)> =
            self.lsm.flush_then(table, || match table {
                Some(t) => {
                    let set = self.registry.set(t).ok_or_else(|| Error::NotFound {
                        kind: "table",
                        name: t.to_string(),
                    })?;
                    Ok::<_, Error>(vec![(t.to_string(), set.view())])
                }
                None => Ok(self
                    .registry
                    .sets()
                    .into_iter()
                    .map(|(n, s)| (n, s.view()))
                    .collect()),
            })??;
        self.deleter.rules().point("snapshot links", &self.dir);
        snapshot::create(&self.dir, tag, &views, ephemeral, &self.deleter)
    }

    /// Visible snapshots with sizes.
    pub fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let live: HashMap<String, BTreeSet<u64>> = self
            .registry
            .sets()
            .into_iter()
            .map(|(n, s)| (n, s.live_ids().into_iter().collect()))
            .collect();
        let is_live = |t: &str, id: u64| live.get(t).is_some_and(|s| s.contains(&id));
        snapshot::list_tags(&self.dir, &self.deleter)?
            .iter()
            .map(|tag| snapshot::info(&self.dir, tag, &self.deleter, &is_live))
            .collect()
    }

    /// Clear snapshot `tag` (an error names a missing tag). Files still mapped are
    /// deleted when their last mapping closes.
    pub fn clear_snapshot(&self, tag: &str) -> Result<()> {
        let _op = self.check_writable()?;
        snapshot::clear(&self.dir, tag, &self.deleter)
    }

    /// Clear every snapshot.
    pub fn clear_all_snapshots(&self) -> Result<()> {
        let _op = self.check_writable()?;
        for tag in snapshot::list_tags(&self.dir, &self.deleter)? {
            self.clear_snapshot(&tag)?;
        }
        Ok(())
    }

    /// Open snapshot `tag` read-only, mapped per `disk_access_mode`.
    pub fn open_snapshot(&self, tag: &str) -> Result<SnapshotView> {
        let _op = self.check_open()?;
        let m = snapshot::load(&self.dir, tag, &self.deleter)?;
        let dir = snapshot::snapshot_dir(&self.dir, tag);
        let opts = self.set_options();
        let mut tables = BTreeMap::new();
        for (table, ids) in &m.tables {
            let mut hs = Vec::new();
            for &id in ids.iter().rev() {
                hs.push(open_handle(
                    &dir,
                    &SegmentName::new(table, id)?,
                    &opts,
                    &self.deleter,
                )?);
            }
            tables.insert(table.clone(), hs);
        }
        Ok(SnapshotView {
            tag: tag.to_string(),
            tables,
        })
    }

    /// Counts across the store. Memory figures are read from the kernel now
    /// (`/proc/self/smaps`, `mincore`), once for all segments.
    pub fn stats(&self) -> StoreStats {
        let per_segment = self.segment_stats();
        StoreStats {
            modes: self.modes,
            mappings: registry().stats_under(&self.dir),
            deletions: self.deleter.stats(),
            segments: self
                .registry
                .sets()
                .into_iter()
                .map(|(n, s)| (n, s.view().segments.len()))
                .collect(),
            memory: per_segment.iter().map(|s| s.memory.totals).sum(),
            budget: self.reader.map_budget.as_ref().map(|b| b.stats()),
            index_cache: self.reader.index_cache.as_ref().map(|c| c.stats()),
            read_views: self.lsm.ctx().visibility.views(),
            visible_seq: self.lsm.ctx().visibility.visible(),
        }
    }

    /// One line per live segment: its effective access modes, what was asked and
    /// granted at open, and the kernel's figures for its maps.
    pub fn segment_stats(&self) -> Vec<SegmentStatsView> {
        let smaps = SmapsSnapshot::read();
        let mut out = Vec::new();
        for (table, set) in &self.registry.sets() {
            for h in &set.view().segments {
                let (data, index) = h.modes();
                out.push(SegmentStatsView {
                    table: table.clone(),
                    id: h.name().id,
                    data,
                    index,
                    entries: h.stats().entry_count,
                    memory: h.memory_report_in(smaps.as_ref()),
                    index_cache_bytes: h.index_cache_bytes(),
                });
            }
        }
        out
    }

    /// Drop table `name`: its data, its segment files and its manifest.
    ///
    /// The table stops taking writes at once (its flushes and compactions too) and
    /// leaves the store: [`Store::table_names`] no longer lists it, and a later
    /// [`Store::table`] of the name creates a new, empty table (whose segment ids start
    /// past the dropped one's, so no file name is reused). A [`Table`] or segment set
    /// of it still held keeps reading what it held (memtables and segments) until
    /// dropped; its writes, flushes and compactions fail with [`Error::Dropped`]. The
    /// segments are retired as compaction retires its inputs (journaled at once,
    /// deleted when their last handle drops: at once, unless such a handle, a scan, a
    /// snapshot being taken or a checkpoint still reads them), and the manifest is
    /// deleted through the deleter.
    ///
    /// Crash safety: the drop's commit point is the durable replacement of
    /// `commitlog/positions` with a `dropped` line for the table (replay then skips its
    /// records). A crash before it leaves the table whole; after it, the next open
    /// deletes whatever of the table is left (recovery rule 8, `src/recovery.rs`), in
    /// any order, and the store opens without it. If writing the positions file fails
    /// the error is returned and the table is back in this run (taking writes again),
    /// but the file on disk may be the new one until the next checkpoint rewrites it:
    /// a crash in between completes the drop at the next open. Once the drop is
    /// committed it returns `Ok` even if queuing the file deletions failed (logged;
    /// the next open, or a new table of the name, finishes them).
    ///
    /// [`Error::NotFound`] if there is no such table, [`Error::ReadOnly`],
    /// [`Error::Closed`].
    pub fn drop_table(&self, name: &str) -> Result<()> {
        let _op = self.check_writable()?;
        validate_name("table", name)?;
        // Held throughout: no set of this name is created meanwhile.
        let _ddl = self.ddl.lock();
        let set = self.registry.set(name).ok_or_else(|| Error::NotFound {
            kind: "table",
            name: name.to_string(),
        })?;
        // Every id the set handed out is below its next id; +1 keeps a manifest of the
        // dropped table (whose next_id is at most that) below the first id too.
        let first_id = set.freeze(Some(Frozen::Dropped)) + 1;
        if let Err(e) = self.lsm.drop_table(name, first_id) {
            // In doubt (Poisoned): stay frozen, nothing deleted, until reopened.
            if !matches!(e, Error::Poisoned(_)) {
                set.freeze(None);
            }
            return Err(e);
        }
        self.registry.remove(name);
        self.dropped.lock().insert(name.to_string(), first_id);
        // The live segments go as compaction's inputs do: journaled now, unlinked when
        // their last handle drops (the set's own view, with the last `Table` of it, or a
        // scan, snapshot or checkpoint still reading them). Then the manifest.
        let view = set.view();
        let mut announce = Vec::new();
        for h in &view.segments {
            announce.extend_from_slice(h.segment().component_paths());
            h.segment().mark_obsolete();
        }
        if let Err(e) = self.deleter.announce(&announce) {
            tracing::warn!(table = %name, error = %e, "could not journal a dropped table's segments; they go when their last handle drops, or at the next open");
        }
        let live: Vec<u64> = view.segments.iter().map(|h| h.name().id).collect();
        drop(view);
        if let Err(e) = delete_dropped(&self.dir, &self.deleter, name, first_id, &live) {
            tracing::warn!(table = %name, error = %e, "table dropped, but its manifest could not be queued for deletion; the next open (or a new table of the name) deletes it");
        }
        Ok(())
    }

    /// A consistent copy of the store in `dest`, which `Store::open(dest, ..)` opens as
    /// a store holding every write acknowledged before the call.
    ///
    /// Flushes every table, then, holding the views of that moment (so no segment is
    /// deleted meanwhile), hard-links every live segment's components (copies them,
    /// fsynced, where a link fails: another file system, or no hard links), writes each
    /// table's manifest and a `LOCK` file, into a staging directory beside `dest`
    /// (`.<dest name>.checkpoint-<n>.tmp`), fsyncs it, and renames it to `dest`, then
    /// fsyncs `dest`'s parent. No commit log and no positions file: the copy replays
    /// nothing. Snapshots and pending deletions are not copied. All file operations go
    /// through the I/O boundary with the store's file rules.
    ///
    /// `dest` must not exist, or be an empty directory, and must lie outside the store
    /// directory: otherwise [`Error::AlreadyExists`] (kind `"checkpoint destination"`)
    /// or [`Error::InvalidArgument`]; [`Error::ReadOnly`] on a read-only store (its
    /// memtables cannot be flushed). Writes after the call may or may not be in the
    /// copy. On an error `dest` is as it was; a staging directory may be left beside it
    /// (the store's deleter serves its own directory only), which is the caller's to
    /// remove.
    pub fn checkpoint(&self, dest: impl AsRef<Path>) -> Result<()> {
        let _op = self.check_writable()?;
        let dest = std::path::absolute(dest.as_ref())
            .map_err(|e| Error::io("resolve", dest.as_ref(), e))?;
        let taken = || Error::AlreadyExists {
            kind: "checkpoint destination",
            name: dest.display().to_string(),
        };
        match std::fs::read_dir(&dest) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(taken());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Err(taken()),
            Err(e) => return Err(Error::io("list", &dest, e)),
        }
        let (Some(parent), Some(file_name)) = (dest.parent(), dest.file_name()) else {
            return Err(Error::InvalidArgument(format!(
                "checkpoint destination {} has no parent directory",
                dest.display()
            )));
        };
        let real_parent = parent.canonicalize().ok();
        if dest.starts_with(&self.dir) || real_parent.is_some_and(|p| p.starts_with(&self.dir)) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint destination {} lies inside the store directory {}",
                dest.display(),
                self.dir.display()
            )));
        }
        // Every acknowledged write into a segment, then the views that hold them.
        // As of one moment for every table (a batch across tables whole or absent).
        let views: Vec<(String, Arc<View>)> = self.lsm.flush_then(None, || {
            self.registry
                .sets()
                .into_iter()
                .map(|(n, s)| (n, s.view()))
                .collect()
        })?;
        let fs = StoreFs::new(parent, &self.config.file_rules);
        fs.create_dir_all(parent)?;
        static ATTEMPT: AtomicU64 = AtomicU64::new(0);
        let staging = loop {
            let n = ATTEMPT.fetch_add(1, Ordering::Relaxed);
            let s = parent.join(format!(
                ".{}.checkpoint-{}-{n}.tmp",
                file_name.to_string_lossy(),
                std::process::id()
            ));
            if std::fs::symlink_metadata(&s).is_err() {
                break s;
            }
        };
        fs.create_dir(&staging)?;
        let staged = (|| {
            for (table, view) in &views {
                let mut manifest = Manifest {
                    table: table.clone(),
                    next_id: 1,
                    ..Manifest::default()
                };
                for h in &view.segments {
                    for c in Component::ALL {
                        let src = h.name().path(h.dir(), c);
                        let dst = staging.join(h.name().file_name(c));
                        if fs.hard_link(&src, &dst).is_err() {
                            fs.copy_durable(&src, &dst)?;
                        }
                    }
                    manifest.segments.insert(h.name().id);
                    manifest.next_id = manifest.next_id.max(h.name().id + 1);
                }
                // Publishing fsyncs the staging directory: the links above are durable.
                manifest.store(&manifest_path(&staging, table), &fs)?;
            }
            drop(fs.open_lock_file(&staging.join(crate::layout::LOCK_FILE))?);
            // Not redundant with the manifests' publishes, which fsync this directory
            // before the `LOCK` file exists (and not at all without tables): without it
            // a power loss after the rename can leave a copy with no `LOCK`, which
            // `Store::open_read_only` refuses as not a store. Caught by
            // `power_lost_during_a_checkpoint_leaves_no_destination_or_a_whole_one`.
            fs.fsync_dir(&staging)
        })();
        if let Err(e) = staged {
            tracing::warn!(staging = %staging.display(), error = %e, "checkpoint failed; its staging directory is left for the caller to remove");
            return Err(e);
        }
        drop(views);
        fs.rename(&staging, &dest).map_err(|e| {
            tracing::warn!(staging = %staging.display(), error = %e, "checkpoint not renamed into place; its staging directory is left for the caller to remove");
            let occupied = std::fs::read_dir(&dest).is_ok_and(|mut d| d.next().is_some());
            if occupied {
                taken()
            } else {
                e
            }
        })?;
        fs.fsync_dir(parent)
    }

    /// Close: flush the tables and close the commit log, clear ephemeral snapshots,
    /// release views, report leaks, finish deletions, release the directory lock.
    ///
    /// Takes `&self`; the store refuses every later use with [`Error::Closed`]. Only
    /// the first call closes: a later one (or one racing with it) does nothing and
    /// returns an empty report, so an error is reported once, by the call that closed.
    /// Every step runs even if an earlier one failed; the first error is returned. On a
    /// read-only store nothing is written, and no pending deletion is reported (the
    /// journal's are the last writer's, left for the next writable open).
    pub fn close(&self) -> Result<CloseReport> {
        if !self.begin_close() {
            return Ok(CloseReport::default());
        }
        // Flush and close the log first; finish the rest of the close even if that
        // failed (the commit log still holds what was not flushed).
        let tables_closed = self.lsm.close();
        let snapshots_cleared = if self.read_only {
            Ok(())
        } else {
            self.clear_ephemeral_snapshots()
        };
        for (_, s) in self.registry.sets() {
            s.release();
        }
        let pending = if self.read_only {
            Ok(Vec::new())
        } else {
            self.deleter.close()
        };
        let report = CloseReport {
            leaked_handles: self.tracker.as_ref().map(|t| t.live()).unwrap_or_default(),
            leaked_mappings: registry().open_under(&self.dir),
            pending_deletions: pending.as_ref().map(Vec::clone).unwrap_or_default(),
        };
        for h in &report.leaked_handles {
            tracing::error!(segment = %h.segment, taken_at = %h.taken_at, "LEAK DETECTED: segment handle still held at close");
        }
        for m in &report.leaked_mappings {
            tracing::error!(path = %m.path.display(), opened_at = %m.opened_at, "LEAK DETECTED: mapping still open at close");
        }
        self.lock.lock().take();
        tables_closed?;
        snapshots_cleared?;
        pending?;
        Ok(report)
    }

    fn clear_ephemeral_snapshots(&self) -> Result<()> {
        let mut first = Ok(());
        for tag in snapshot::list_tags(&self.dir, &self.deleter)? {
            let r =
                snapshot::load(&self.dir, &tag, &self.deleter).and_then(|m| match m.ephemeral {
                    true => snapshot::clear(&self.dir, &tag, &self.deleter),
                    false => Ok(()),
                });
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Store {
    /// See [`Store`]: the commit log's final fsync, nothing flushed.
    fn drop(&mut self) {
        if self.begin_close() {
            // Like a crash, except that the commit log is fsynced and closed (every
            // acknowledged write durable) and deletions which can run now do (the
            // journal already holds them for the next open).
            self.lsm.abandon();
            for (_, s) in self.registry.sets() {
                s.release();
            }
            if !self.read_only {
                self.deleter.retry_all();
                // Nothing touches the directory once the lock goes with the store.
                self.deleter.seal();
            }
        }
    }
}

/// Delete the manifest of dropped table `name` if it is still there and is the dropped
/// table's (its `next_id` is below `first_id`), after the segments it names other than
/// `retired` (those retire with their handles), in one journaled request.
fn delete_dropped(
    dir: &Path,
    deleter: &Deleter,
    name: &str,
    first_id: u64,
    retired: &[u64],
) -> Result<()> {
    let mpath = manifest_path(dir, name);
    if !mpath.exists() || deleter.is_pending(&mpath) {
        return Ok(());
    }
    let m = Manifest::load(&mpath)?;
    if m.next_id >= first_id {
        return Ok(());
    }
    let mut paths = Vec::new();
    for id in m.segments.into_iter().filter(|id| !retired.contains(id)) {
        let seg = SegmentName::new(name, id)?;
        paths.extend(Component::ALL.map(|c| seg.path(dir, c)));
    }
    paths.push(mpath);
    deleter.delete(&paths)
}

impl SetOpener<'_> {
    /// The segment set of table `name`, opening (creating) it if needed.
    fn open_set(&self, name: &str) -> Result<Arc<SegmentSet>> {
        validate_name("table", name)?;
        // A set being dropped is frozen: wait for the drop below, then look again.
        if let Some(s) = self.registry.set(name).filter(|s| !s.is_dropped()) {
            return Ok(s);
        }
        if self.read_only {
            return self.registry.set(name).ok_or_else(|| Error::NotFound {
                kind: "table",
                name: name.to_string(),
            });
        }
        let _ddl = self.ddl.lock();
        if let Some(s) = self.registry.set(name) {
            // Live, or a drop in doubt (frozen until reopened).
            return Ok(s);
        }
        let first_id = self.dropped.lock().get(name).copied();
        if let Some(first_id) = first_id {
            // A table of this name was dropped: finish deleting its files if that
            // failed before, and make sure no journaled deletion of its manifest can
            // ever apply to the new one.
            delete_dropped(self.dir, self.deleter, name, first_id, &[])?;
            self.deleter.reserve(&manifest_path(self.dir, name))?;
        }
        let set = Arc::new(SegmentSet::open(
            self.dir,
            name,
            self.opts.clone(),
            self.deleter.clone(),
            first_id.unwrap_or(1),
        )?);
        self.registry.write().insert(
            name.to_string(),
            Registered {
                set: Arc::clone(&set),
                table: None,
            },
        );
        Ok(set)
    }
}
