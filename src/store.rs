//! The store: one directory, its tables' segment sets, snapshots, the deleter, and
//! recovery at open.
//!
//! Open: take the directory lock (invariant 7); resolve and log `disk_access_mode`;
//! open the deleter, which completes the journal of deletions left by a crash; run the
//! recovery scan (`src/recovery.rs`: temp files, snapshot staging directories,
//! ephemeral snapshots and orphans go to the deleter); open every table's segments;
//! then open the commit log and replay it into the tables' memtables
//! ([`crate::table::tables`]). Close: flush every table and close the commit
//! log, clear ephemeral snapshots, release the views, report handles and mappings still
//! held (leaks), and finish every deletion that can run.
//!
//! Tables: [`Store::table`] gives the LSM [`Table`] of a name (writes through the commit
//! log, memtables, flush, compaction); [`Store::segments`] gives the bare segment set
//! underneath, for code that writes segments itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::config::{DiskAccessMode, MemoryOptions, ResolvedModes, SegmentOptions};
use crate::error::{Error, Result};
use crate::io::budget::BudgetStats;
use crate::io::kstats::SmapsSnapshot;
use crate::io::registry::MappingSite;
use crate::io::residency::ResidencyTotals;
use crate::io::{registry, FileRules, MappingStats, StoreFs};
use crate::lifecycle::set::open_handle;
use crate::lifecycle::{
    DeletePolicy, Deleter, DeleterStats, DirLock, HandleSite, LeakTracker, PendingDeletion,
    SegmentHandle, SegmentSet, SetOptions,
};
use crate::recovery;
use crate::segment::{validate_name, SegmentName};
use crate::segment::{IndexCacheStats, ReaderOptions};
use crate::snapshot::{self, SnapshotInfo};
use crate::table::commitlog::CommitLogConfig;
use crate::table::{Table, TableConfig, Tables};

/// Store settings. Deserialises from TOML/YAML/JSON with snake_case names.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
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

/// What `close` found.
#[derive(Debug, Default)]
pub struct CloseReport {
    /// Segment handles still held by the application (leaks).
    pub leaked_handles: Vec<HandleSite>,
    /// Mappings under this directory still open (leaks, or a snapshot reader of another
    /// store in this process).
    pub leaked_mappings: Vec<MappingSite>,
    /// Deletions that could not complete (they stay journaled for the next open).
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
    /// huge-page bytes.
    pub memory: ResidencyTotals,
    /// The mapping budget: limit, in use, fallbacks.
    pub budget: Option<BudgetStats>,
    /// Index blocks kept in memory for segments whose index is read with positional
    /// reads (`memory.index_cache_mb`): budget, bytes and blocks held, refusals.
    pub index_cache: Option<IndexCacheStats>,
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
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    config: Config,
    modes: ResolvedModes,
    deleter: Deleter,
    tracker: Option<Arc<LeakTracker>>,
    reader: ReaderOptions,
    tables: RwLock<BTreeMap<String, Arc<SegmentSet>>>,
    lsm: Tables,
    closed: AtomicBool,
    _lock: DirLock,
}

impl Store {
    /// Open (creating if needed) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        let dir = dir.as_ref();
        config.segment.validate()?;
        config.commitlog.validate()?;
        config.table.validate()?;
        config.memory.validate()?;
        if !(0.0..=1.0).contains(&config.crc_check_chance) {
            return Err(Error::InvalidConfig {
                setting: "crc_check_chance",
                value: config.crc_check_chance.to_string(),
                reason: "must be a number from 0.0 to 1.0".into(),
            });
        }
        StoreFs::new(dir, &config.file_rules).create_dir_all(dir)?;
        let dir = dir
            .canonicalize()
            .map_err(|e| Error::io("canonicalize", dir, e))?;
        let lock = DirLock::acquire(&StoreFs::new(&dir, &config.file_rules))?;
        let modes = config.disk_access_mode.resolve();
        modes.log();
        let deleter = Deleter::open(&dir, config.file_rules.clone(), config.delete_policy)?;
        let tracker = config.track_leaks.then(|| Arc::new(LeakTracker::default()));
        let max_ids = recovery::recover(&dir, &deleter)?;
        deleter.compact_journal()?;
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
        let mut tables = BTreeMap::new();
        for (table, max_id) in max_ids {
            let set = SegmentSet::open(&dir, &table, opts.clone(), deleter.clone(), max_id + 1)?;
            tables.insert(table, Arc::new(set));
        }
        let tables = RwLock::new(tables);
        let lsm = Tables::open(
            &dir,
            &config.commitlog,
            &config.table,
            &config.file_rules,
            &deleter,
            &|name| open_set(&dir, &tables, &opts, &deleter, name),
        )?;
        Ok(Store {
            dir,
            config,
            modes,
            deleter,
            tracker,
            reader,
            tables,
            lsm,
            closed: AtomicBool::new(false),
            _lock: lock,
        })
    }

    /// The store directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The deleter (for stats and tests).
    pub fn deleter(&self) -> &Deleter {
        &self.deleter
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn set_options(&self) -> SetOptions {
        SetOptions {
            modes: self.modes,
            segment: self.config.segment.clone(),
            tracker: self.tracker.clone(),
            reader: self.reader.clone(),
        }
    }

    /// The segments of table `name`, creating the table if it does not exist.
    pub fn segments(&self, name: &str) -> Result<Arc<SegmentSet>> {
        self.check_open()?;
        open_set(
            &self.dir,
            &self.tables,
            &self.set_options(),
            &self.deleter,
            name,
        )
    }

    /// The LSM table `name` (commit log, memtables, flush, compaction), creating it if
    /// it does not exist. Its segments are [`Store::segments`] of the same name.
    pub fn table(&self, name: &str) -> Result<Arc<Table>> {
        self.check_open()?;
        self.lsm.table(name, || self.segments(name))
    }

    /// The tables and the commit log (flush all, wait for background work, stats).
    pub fn tables(&self) -> &Tables {
        &self.lsm
    }

    /// Names of the tables.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.read().keys().cloned().collect()
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
        self.check_open()?;
        // Memtables first, so the snapshot holds every acknowledged write (Cassandra
        // flushes before a snapshot too).
        self.lsm.flush(table)?;
        let views: Vec<(String, Arc<crate::lifecycle::View>)> = match table {
            Some(t) => {
                let set = self
                    .tables
                    .read()
                    .get(t)
                    .cloned()
                    .ok_or_else(|| Error::NotFound {
                        kind: "table",
                        name: t.to_string(),
                    })?;
                vec![(t.to_string(), set.view())]
            }
            None => self
                .tables
                .read()
                .iter()
                .map(|(n, s)| (n.clone(), s.view()))
                .collect(),
        };
        snapshot::create(&self.dir, tag, &views, ephemeral, &self.deleter)
    }

    /// Visible snapshots with sizes.
    pub fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let live: HashMap<String, BTreeSet<u64>> = self
            .tables
            .read()
            .iter()
            .map(|(n, s)| (n.clone(), s.live_ids().into_iter().collect()))
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
        snapshot::clear(&self.dir, tag, &self.deleter)
    }

    /// Clear every snapshot.
    pub fn clear_all_snapshots(&self) -> Result<()> {
        for tag in snapshot::list_tags(&self.dir, &self.deleter)? {
            self.clear_snapshot(&tag)?;
        }
        Ok(())
    }

    /// Open snapshot `tag` read-only, mapped per `disk_access_mode`.
    pub fn open_snapshot(&self, tag: &str) -> Result<SnapshotView> {
        self.check_open()?;
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
                .tables
                .read()
                .iter()
                .map(|(n, s)| (n.clone(), s.view().segments.len()))
                .collect(),
            memory: per_segment.iter().map(|s| s.memory.totals).sum(),
            budget: self.reader.map_budget.as_ref().map(|b| b.stats()),
            index_cache: self.reader.index_cache.as_ref().map(|c| c.stats()),
        }
    }

    /// One line per live segment: its effective access modes, what was asked and
    /// granted at open, and the kernel's figures for its maps.
    pub fn segment_stats(&self) -> Vec<SegmentStatsView> {
        let smaps = SmapsSnapshot::read();
        let mut out = Vec::new();
        for (table, set) in self.tables.read().iter() {
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

    /// Close: clear ephemeral snapshots, release views, report leaks, finish deletions.
    pub fn close(self) -> Result<CloseReport> {
        self.closed.store(true, Ordering::Release);
        // Flush and close the log first; finish the rest of the close even if that
        // failed (the commit log still holds what was not flushed).
        let tables_closed = self.lsm.close();
        for tag in snapshot::list_tags(&self.dir, &self.deleter)? {
            if snapshot::load(&self.dir, &tag, &self.deleter)?.ephemeral {
                self.clear_snapshot(&tag)?;
            }
        }
        for s in self.tables.read().values() {
            s.release();
        }
        let report = CloseReport {
            leaked_handles: self.tracker.as_ref().map(|t| t.live()).unwrap_or_default(),
            leaked_mappings: registry().open_under(&self.dir),
            pending_deletions: self.deleter.close()?,
        };
        for h in &report.leaked_handles {
            tracing::error!(segment = %h.segment, taken_at = %h.taken_at, "LEAK DETECTED: segment handle still held at close");
        }
        for m in &report.leaked_mappings {
            tracing::error!(path = %m.path.display(), opened_at = %m.opened_at, "LEAK DETECTED: mapping still open at close");
        }
        tables_closed?;
        Ok(report)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) {
            // Not closed: behave like a crash, except that deletions which can run now
            // do (the journal already holds them for the next open). The commit log
            // holds every acknowledged write.
            self.lsm.abandon();
            for s in self.tables.read().values() {
                s.release();
            }
            self.deleter.retry_all();
        }
    }
}

/// The segment set of table `name` from `sets`, opening (creating) it if needed.
fn open_set(
    dir: &Path,
    sets: &RwLock<BTreeMap<String, Arc<SegmentSet>>>,
    opts: &SetOptions,
    deleter: &Deleter,
    name: &str,
) -> Result<Arc<SegmentSet>> {
    validate_name("table", name)?;
    if let Some(s) = sets.read().get(name) {
        return Ok(s.clone());
    }
    let mut t = sets.write();
    if let Some(s) = t.get(name) {
        return Ok(s.clone());
    }
    let set = Arc::new(SegmentSet::open(
        dir,
        name,
        opts.clone(),
        deleter.clone(),
        1,
    )?);
    t.insert(name.to_string(), set.clone());
    Ok(set)
}
