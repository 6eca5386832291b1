//! The store-wide side of the tables: one commit log for every table, the write clock,
//! the positions file, and the background threads that flush and compact
//! (`worker.rs`).
//!
//! # Open
//! 1. Load `commitlog/positions` ([`super::positions`]).
//! 2. Replay the commit log from `replay_from`, applying each record to a fresh
//!    memtable of its table unless the table's flushed position already covers it.
//! 3. Create a [`Table`] per replayed table (its segment set opened through the store),
//!    checkpoint (which releases log files of earlier runs that nothing needs), start
//!    the background threads, and schedule flushes of full memtables and compaction
//!    checks.
//!
//! # Checkpoint (after every flush)
//! Under the positions lock: the lowest unflushed sequence number is the minimum of the
//! log's next number (read first) and every memtable's lowest number (each read under
//! its table's write lock, so no write is between log and memtable). The positions file
//! is replaced durably, and only then are the log files wholly below that number handed
//! to the store's [`Deleter`] (commit log invariant 5).
//!
//! # Close
//! Refuse new writes, stop the background threads, flush every table, checkpoint, roll the
//! log to an empty file and release the older ones (none holds an unflushed record), close
//! the log (final fsync). A store dropped without close stops the worker and closes the log
//! (its final fsync, so that a write acknowledged under `periodic` sync is as durable
//! as a close would have made it) and flushes nothing: replay at the next open brings
//! the memtables back.
//!
//! # Drop of a table
//! The table refuses writes and waits for those in flight (and its segment set, frozen
//! by the store first, refuses flushes and compactions), so every record of it is below
//! the log's next sequence number `n`. Under the positions lock it leaves the registry,
//! and the positions file is replaced with its `flushed` entry gone and a `dropped`
//! line (`n - 1` and the first segment id a later table of the name may use): the
//! drop's commit point. Replay skips the table's records up to `n - 1` from then on; the
//! store deletes the files. A `dropped` line goes once the name is in use again by a
//! table that replay no longer needs it for (its number is below `replay_from`).
//!
//! # Read-only
//! A read-only open ([`crate::Store::open_read_only`]) replays into memtables and writes nothing: no new log
//! file ([`CommitLog::open_read_only`]), no checkpoint, no worker. Writes, flushes and
//! checkpoints fail with [`Error::ReadOnly`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

use super::commitlog::CommitLog;
use super::lsm::{RunBudget, Table, TableConfig};
use super::memtable::Memtable;
use super::positions::{DroppedTable, Positions};
use super::registry::Registry;
use super::settings;
use super::visibility::Visibility;
use super::worker::{self, Lane, Pool};
use crate::error::{Error, Result};
use crate::io::StoreFs;
use crate::lifecycle::{Deleter, SegmentSet};

/// Directory of the commit log inside a store directory.
pub use crate::layout::COMMITLOG_DIR;

/// Write timestamps: wall-clock microseconds, strictly increasing within a process and
/// never below a timestamp seen at open (so a clock stepped back across a restart does
/// not make new writes lose to old ones).
///
/// It also reads the expiry clock ([`Clock::expiry_now`]): the moment TTLs count from
/// and expiry is judged at.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    last: AtomicU64,
    /// `testing` feature: the expiry clock's reading set by a test (0: the wall clock).
    #[cfg(feature = "testing")]
    expiry_override: AtomicU64,
}

impl Clock {
    /// The expiry clock: wall-clock microseconds since the Unix epoch (not the write
    /// clock's strictly increasing timestamps: a TTL counts from the local moment of the
    /// write whatever the cell's timestamp, as Cassandra's local expiration time does),
    /// or under the `testing` feature the time a test set ([`Clock::set_expiry_now`]).
    #[inline]
    pub(crate) fn expiry_now(&self) -> u64 {
        #[cfg(feature = "testing")]
        {
            let t = self.expiry_override.load(Ordering::Acquire);
            if t != 0 {
                return t;
            }
        }
        self.wall_micros()
    }

    /// `testing` feature: make the expiry clock read `micros` (`None`: the wall clock
    /// again).
    #[cfg(feature = "testing")]
    pub(crate) fn set_expiry_now(&self, micros: Option<u64>) {
        self.expiry_override.store(
            micros.unwrap_or(0).max(u64::from(micros.is_some())),
            Ordering::Release,
        );
    }

    pub(crate) fn wall_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }

    /// A timestamp above every one handed out or observed.
    pub(crate) fn now(&self) -> u64 {
        self.now_span(1)
    }

    /// `n` (at least 1) consecutive timestamps above every one handed out or observed:
    /// returns the first; the next call hands out timestamps above the last of them.
    pub(crate) fn now_span(&self, n: u64) -> u64 {
        let n = n.max(1);
        let wall = self.wall_micros();
        let prev = self
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
                Some(wall.max(l.saturating_add(1)).saturating_add(n - 1))
            })
            .unwrap_or(0);
        wall.max(prev.saturating_add(1))
    }

    /// The largest timestamp handed out or observed so far.
    pub(crate) fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// Never hand out a timestamp at or below `ts`.
    pub(crate) fn observe(&self, ts: u64) {
        self.last.fetch_max(ts, Ordering::AcqRel);
    }
}

/// What every table shares.
pub(crate) struct Context {
    pub(crate) log: CommitLog,
    pub(crate) config: TableConfig,
    pub(crate) clock: Clock,
    /// The store's directory (tables' settings files live there).
    store_dir: PathBuf,
    log_dir: PathBuf,
    fs: StoreFs,
    deleter: Deleter,
    /// The store's one registry of tables (shared with [`crate::Store`]).
    pub(crate) registry: Arc<Registry>,
    positions: Mutex<Positions>,
    /// The background threads' queues.
    pub(crate) pool: Pool,
    closed: AtomicBool,
    /// Set once close has flushed: from then on no flush or compaction starts (each
    /// checks under its table's lock), so none writes a file after the close.
    sealed: AtomicBool,
    /// Opened read-only: nothing is written.
    read_only: bool,
    /// A positions write failed: the file on disk may differ from `positions`, so the
    /// next checkpoint writes whatever it finds.
    positions_dirty: AtomicBool,
    /// Which sequence numbers readers see, and the live read views.
    pub(crate) visibility: Visibility,
    /// Held shared while a read captures memtables and views, exclusively by a flush
    /// around its view swap (visibility invariant 3).
    pub(crate) install: RwLock<()>,
    /// Held shared while a `Table` is created, exclusively by `Tables::flush_then`, so
    /// the tables it quiesces are all the tables there are until its closure returns.
    pub(crate) opening: RwLock<()>,
    /// Held shared by every write from before its timestamp until it is visible,
    /// exclusively by a transaction's commit across its conflict check and its write
    /// (`lsm::write_tables_checked`, [`crate::table::txn`]).
    pub(crate) commit: RwLock<()>,
    /// The bytes every table's side runs may hold together (`memory.side_run_mb`).
    pub(crate) side_run_budget: Arc<RunBudget>,
}

impl Context {
    /// Pass pause point `point` (`testing` feature; a branch on `None` otherwise).
    pub(crate) fn point(&self, point: &str, path: &Path) {
        self.fs.rules().point(point, path);
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Open, and not read-only.
    pub(crate) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// `Err(Closed)` once the close has flushed: a flush or compaction that got past
    /// [`Context::check_open`] before the close asks again under its table's lock.
    pub(crate) fn check_unsealed(&self) -> Result<()> {
        if self.sealed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn push(&self, lane: Lane, t: &Table) {
        if !self.read_only {
            self.pool.push(lane, t.name().to_string());
        }
    }

    /// Ask the flush thread to flush `t` (once, however many writers ask).
    pub(crate) fn schedule_flush(&self, t: &Table) {
        if !t.flush_queued.swap(true, Ordering::AcqRel) {
            self.push(Lane::Flush, t);
        }
    }

    /// Ask the compaction threads to run `t`'s compaction policy.
    pub(crate) fn schedule_compaction(&self, t: &Table) {
        if t.config().background_compaction && !t.compaction_queued.swap(true, Ordering::AcqRel) {
            self.push(Lane::Compaction, t);
        }
    }

    /// Wait `d` for a compaction's rate limit ([`Pool::pace`]).
    pub(crate) fn pace(&self, d: std::time::Duration) -> Result<()> {
        self.pool.pace(d)
    }

    pub(crate) fn table(&self, name: &str) -> Option<Arc<Table>> {
        self.registry.table(name)
    }

    /// The settings a table over `set` opens with: its manifest's, else the store's;
    /// `InvalidConfig` if the store's segment format cannot hold its compression (zstd
    /// persisted, then the store opened with `format_version` 5), rather than a flush
    /// failing later.
    pub(crate) fn table_config(&self, set: &SegmentSet) -> Result<TableConfig> {
        let manifest = crate::lifecycle::set::manifest_path(&self.store_dir, set.table());
        let c = settings::decode(&manifest, &set.settings())?.unwrap_or_else(|| self.config.clone());
        set.segment_options().validate_for_table(c.compression)?;
        Ok(c)
    }

    /// Persist the positions and release obsolete commit log files (module docs).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let mut pos = self.positions.lock();
        let mut lowest = self.log.next_seq();
        let tables: Vec<Arc<Table>> = self.registry.tables();
        let mut next = pos.clone();
        for t in &tables {
            if let Some(s) = t.min_unflushed_seq() {
                lowest = lowest.min(s);
            }
            next.flushed.insert(t.name().to_string(), t.flushed_seq());
        }
        next.replay_from = lowest;
        // A dropped table's line is needed while replay may meet its records, and while
        // no live table of the name carries its first id (module docs).
        next.dropped
            .retain(|name, d| d.through_seq >= lowest || !tables.iter().any(|t| t.name() == name));
        if next != *pos || self.positions_dirty.load(Ordering::Acquire) {
            // Every sequence number the new positions name must be durable in the log
            // first: a log tail lost to a power failure (allowed under `periodic`) would
            // otherwise let the next run hand out those numbers again, and replay would
            // skip new records of a table whose `flushed` mark covers them.
            self.log.sync()?;
            if let Err(e) = next.store(&self.log_dir, &self.fs) {
                self.positions_dirty.store(true, Ordering::Release);
                return Err(e);
            }
            self.positions_dirty.store(false, Ordering::Release);
            *pos = next;
        }
        drop(pos);
        let released = self.log.release_obsolete(lowest, &|p: &Path| {
            if let Err(e) = self.deleter.delete(&[p]) {
                tracing::warn!(file = %p.display(), error = %e, "could not queue deletion of a commit log file; replay will skip it");
            }
        });
        if released > 0 {
            tracing::debug!(released, lowest, "commit log files released");
        }
        Ok(())
    }
}

/// The tables of a store. See the module docs.
pub struct Tables {
    ctx: Arc<Context>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables")
            .field("tables", &self.names())
            .finish_non_exhaustive()
    }
}

impl Tables {
    /// Open the commit log under `store_dir` and replay it (module docs). `open_set`
    /// opens (creating if needed) a table's segment set.
    pub(crate) fn open(
        store_dir: &Path,
        config: &crate::Config,
        deleter: &Deleter,
        registry: Arc<Registry>,
        open_set: &dyn Fn(&str) -> Result<Arc<SegmentSet>>,
    ) -> Result<Tables> {
        Self::open_inner(store_dir, config, deleter, registry, open_set, false)
    }

    /// As [`Tables::open`], writing nothing (module docs, "Read-only"). `open_set` must
    /// not create tables either.
    pub(crate) fn open_read_only(
        store_dir: &Path,
        config: &crate::Config,
        deleter: &Deleter,
        registry: Arc<Registry>,
        open_set: &dyn Fn(&str) -> Result<Arc<SegmentSet>>,
    ) -> Result<Tables> {
        Self::open_inner(store_dir, config, deleter, registry, open_set, true)
    }

    /// The two entry points: the store's `Config` (its commit log, table defaults,
    /// compaction threads and file rules) and the mode that tells them apart.
    fn open_inner(
        store_dir: &Path,
        store_config: &crate::Config,
        deleter: &Deleter,
        registry: Arc<Registry>,
        open_set: &dyn Fn(&str) -> Result<Arc<SegmentSet>>,
        read_only: bool,
    ) -> Result<Tables> {
        let log_config = &store_config.commitlog;
        let rules = &store_config.file_rules;
        let config = &store_config.table;
        config.validate()?;
        let log_dir = store_dir.join(COMMITLOG_DIR);
        let positions = Positions::load(&log_dir)?;
        let clock = Clock::default();
        let mut replayed: BTreeMap<String, Memtable> = BTreeMap::new();
        // A record of several tables (a cross-table batch) is applied to each table whose
        // segments do not hold it yet: all of it is in the store afterwards, or none.
        let apply = |rec: crate::table::LogRecord| {
            for part in &rec.parts {
                let flushed = positions.flushed.get(&part.table).copied().unwrap_or(0);
                let dead = positions
                    .dropped
                    .get(&part.table)
                    .map_or(0, |d| d.through_seq);
                if rec.seq > flushed.max(dead) {
                    for c in &part.cells {
                        clock.observe(c.ts);
                    }
                    for r in &part.ranges {
                        clock.observe(r.ts);
                    }
                    let m = replayed
                        .entry(part.table.clone())
                        .or_insert_with(|| Memtable::for_flush_bytes(config.memtable_flush_bytes));
                    m.apply_entries(rec.seq, &part.cells);
                    m.apply_ranges(rec.seq, &part.ranges, u64::MAX);
                }
            }
            Ok(())
        };
        let (log, outcome) = if read_only {
            CommitLog::open_read_only(&log_dir, log_config, positions.replay_from, apply)?
        } else {
            CommitLog::open_with_rules(&log_dir, log_config, positions.replay_from, rules, apply)?
        };
        if !outcome.stops.is_empty() {
            tracing::warn!(
                stops = outcome.stops.len(),
                "commit log replay stopped early in {} file(s); see the warnings above",
                outcome.stops.len()
            );
        }
        // The clock starts above every timestamp of every table's segments, opened as a
        // `Table` in this run or not (`Store::now` is store-wide).
        for (_, set) in registry.sets() {
            set.with_view(|v| {
                for h in &v.segments {
                    clock.observe(h.stats().max_ts);
                }
            });
        }
        // Everything replayed is visible.
        let log_next_seq = log.next_seq();
        let ctx = Arc::new(Context {
            log,
            config: config.clone(),
            clock,
            store_dir: store_dir.to_path_buf(),
            log_dir,
            fs: deleter.fs().clone(),
            deleter: deleter.clone(),
            registry,
            positions: Mutex::new(positions),
            pool: Pool::default(),
            closed: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            read_only,
            positions_dirty: AtomicBool::new(false),
            visibility: Visibility::new(log_next_seq - 1),
            install: RwLock::new(()),
            opening: RwLock::new(()),
            commit: RwLock::new(()),
            side_run_budget: Arc::new(RunBudget::new(
                store_config.memory.side_run_mb.saturating_mul(1 << 20),
            )),
        });
        // From here on an error drops `out`, whose drop clears the tables (each holds
        // the context: a cycle that would otherwise keep their segments mapped).
        let out = Tables {
            ctx,
            workers: Mutex::new(Vec::new()),
        };
        let ctx = &out.ctx;
        let mut created = Vec::new();
        for (name, mem) in replayed {
            let set = open_set(&name)?;
            let flushed = ctx
                .positions
                .lock()
                .flushed
                .get(&name)
                .copied()
                .unwrap_or(0);
            let t = Arc::new(Table::new(
                &name,
                Arc::clone(&set),
                Arc::clone(ctx),
                mem,
                flushed,
                ctx.table_config(&set)?,
            ));
            match ctx.registry.write().get_mut(&name) {
                Some(r) if Arc::ptr_eq(&r.set, &set) => r.table = Some(Arc::clone(&t)),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "table {name}: its segment set left the registry during replay"
                    )))
                }
            }
            created.push(t);
        }
        if read_only {
            return Ok(out);
        }
        ctx.checkpoint()?;
        *out.workers.lock() = worker::spawn(ctx, store_config.compaction_threads, store_dir)?;
        for t in &created {
            if t.memtable_full() {
                ctx.schedule_flush(t);
            }
            ctx.schedule_compaction(t);
        }
        Ok(out)
    }

    /// What every table shares.
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The table `name`, creating it (and its segment set, through `open_set`) if needed.
    pub fn table(
        &self,
        name: &str,
        open_set: impl FnOnce() -> Result<Arc<SegmentSet>>,
    ) -> Result<Arc<Table>> {
        self.ctx.check_open()?;
        crate::segment::validate_name("table", name)?;
        if let Some(t) = self.ctx.table(name) {
            return Ok(t);
        }
        let set = open_set()?;
        let config = self.ctx.table_config(&set)?;
        // Before the registry lock: the positions lock is taken first wherever both are
        // (checkpoint, drop), never under the registry's.
        let flushed = self
            .ctx
            .positions
            .lock()
            .flushed
            .get(name)
            .copied()
            .unwrap_or(0);
        // A snapshot or checkpoint of every table waits for this (`flush_then`).
        let _opening = self.ctx.opening.read();
        let mut registry = self.ctx.registry.write();
        let entry = match registry.get_mut(name) {
            Some(r) if Arc::ptr_eq(&r.set, &set) && !set.is_dropped() => r,
            // Dropped between `open_set` and now: never wrap a dropped set.
            _ => {
                return Err(Error::Dropped {
                    table: name.to_string(),
                })
            }
        };
        if let Some(t) = &entry.table {
            return Ok(Arc::clone(t));
        }
        let t = Arc::new(Table::new(
            name,
            set,
            Arc::clone(&self.ctx),
            // The table's own flush size (its key filter is sized for it; later memtables
            // take this one's size).
            Memtable::for_flush_bytes(config.memtable_flush_bytes),
            flushed,
            config,
        ));
        entry.table = Some(Arc::clone(&t));
        drop(registry);
        self.ctx.schedule_compaction(&t);
        Ok(t)
    }

    /// The table `name` if it was opened in this run.
    pub fn get(&self, name: &str) -> Option<Arc<Table>> {
        self.ctx.table(name)
    }

    /// Names of the tables opened in this run.
    pub fn names(&self) -> Vec<String> {
        self.ctx
            .registry
            .entries()
            .into_iter()
            .filter(|(_, r)| r.table.is_some())
            .map(|(n, _)| n)
            .collect()
    }

    /// The commit log.
    pub fn commit_log(&self) -> &CommitLog {
        &self.ctx.log
    }

    /// Flush every table (or only `only`), and checkpoint. If the commit log is
    /// poisoned, [`Error::Poisoned`] after flushing (see [`Table::flush`]).
    pub fn flush(&self, only: Option<&str>) -> Result<()> {
        self.ctx.check_writable()?;
        self.flush_tables(only)
    }

    /// Flush every table (or `only` that one) as of one moment, then run `f` while no
    /// flush or compaction can change any of their segments: what `f` reads of the
    /// segment sets (a snapshot's or a checkpoint's views) holds every write
    /// acknowledged before the call, and of a batch across tables written meanwhile all
    /// or nothing. Each table's flush and compaction locks are taken in name order, then
    /// every memtable is frozen under all the memtable write locks at once (no write is
    /// between two tables then), the frozen memtables are flushed, and `f` runs.
    pub(crate) fn flush_then<R>(&self, only: Option<&str>, f: impl FnOnce() -> R) -> Result<R> {
        self.ctx.check_writable()?;
        // No table is created meanwhile: one opened after the list below would flush on
        // its own and could hold its part of a batch whose other part stays in a frozen
        // table's memtable.
        let opening = self.ctx.opening.write();
        let tables: Vec<Arc<Table>> = self
            .ctx
            .registry
            .tables()
            .into_iter()
            .filter(|t| only.is_none_or(|n| t.name() == n))
            .collect();
        let r = {
            let _quiet: Vec<_> = tables.iter().map(|t| t.quiesce()).collect();
            {
                let mut mems: Vec<_> = tables.iter().map(|t| t.memtables_write()).collect();
                for (m, t) in mems.iter_mut().zip(&tables) {
                    Table::freeze_locked(m, t.config().memtable_flush_bytes);
                }
            }
            for t in &tables {
                t.flush_frozen_locked()?;
            }
            f()
        };
        drop(opening);
        self.ctx.checkpoint()?;
        for t in &tables {
            self.ctx.schedule_compaction(t);
        }
        self.ctx.log.check_poisoned()?;
        Ok(r)
    }

    fn flush_tables(&self, only: Option<&str>) -> Result<()> {
        let tables: Vec<Arc<Table>> = self.ctx.registry.tables();
        for t in tables.iter().filter(|t| only.is_none_or(|n| t.name() == n)) {
            if t.is_dropped() {
                continue; // being dropped: its records go with it (replay skips them)
            }
            t.flush_memtables(true)?;
        }
        self.ctx.checkpoint()?;
        self.ctx.log.check_poisoned()
    }

    /// Wait until the background threads have nothing queued or running (tests,
    /// tools).
    pub fn wait_idle(&self) {
        self.ctx.pool.wait_idle();
    }

    fn stop_worker(&self) {
        self.ctx.pool.stop();
        for h in std::mem::take(&mut *self.workers.lock()) {
            let _ = h.join();
        }
    }

    /// Close (module docs). Tables held elsewhere refuse further use.
    pub fn close(&self) -> Result<()> {
        if self.ctx.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_worker();
        let flushed = if self.ctx.read_only {
            Ok(())
        } else {
            self.flush_tables(None).and_then(|()| self.retire_log())
        };
        let closed = self.ctx.log.close();
        self.seal();
        self.ctx.registry.forget_tables();
        flushed.and(closed)
    }

    /// With every table flushed, leave no file of flushed records behind: roll the log
    /// to an empty file and hand the older ones to the deleter (the store's close
    /// finishes their deletion). A crash in between leaves them obsolete, released by
    /// the next open's first checkpoint, as after any flush.
    fn retire_log(&self) -> Result<()> {
        if self.ctx.log.roll_if_written()? {
            self.ctx.checkpoint()?;
        }
        Ok(())
    }

    /// No flush or compaction runs from now on: refuse new ones, wait for those in
    /// flight (a user's `compact()` that passed its open check before the close).
    fn seal(&self) {
        self.ctx.sealed.store(true, Ordering::Release);
        for t in self.ctx.registry.tables() {
            if t.try_quiesce().is_none() {
                self.ctx
                    .fs
                    .rules()
                    .point("close waits for a flush or compaction", Path::new(t.name()));
                drop(t.quiesce());
            }
        }
    }

    /// Stop without flushing, but close the log, whose final fsync makes every
    /// acknowledged write durable (module docs). Once only; a no-op after
    /// [`Tables::close`].
    pub(crate) fn abandon(&self) {
        if self.ctx.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stop_worker();
        if let Err(e) = self.ctx.log.close() {
            tracing::error!(error = %e, "store dropped without close: the final fsync of the commit log failed; writes acknowledged since the last sync may be lost to a power failure");
        }
        self.seal();
        self.ctx.registry.forget_tables();
    }

    /// Drop table `name` (module docs, "Drop of a table"); its segment set is frozen
    /// already. `first_id` is the first segment id a later table of the name may use.
    /// On an error before the positions file was replaced nothing changed (the table
    /// takes writes again). If its replacement may have taken effect (the directory
    /// fsync failed after the rename), the drop is in doubt: the table stays refusing
    /// writes, flushes and compactions until the store is reopened, which completes the
    /// drop or keeps the table whole, whichever file is on disk, and the error is
    /// [`Error::Poisoned`].
    pub(crate) fn drop_table(&self, name: &str, first_id: u64) -> Result<()> {
        self.ctx.check_open()?;
        if self.ctx.read_only {
            return Err(Error::ReadOnly);
        }
        let table = self.ctx.table(name);
        if let Some(t) = &table {
            t.set_dropped(true);
        }
        let mut pos = self.ctx.positions.lock();
        let through_seq = self.ctx.log.next_seq().saturating_sub(1);
        // The records the drop covers must be durable before it is: otherwise a log tail
        // lost to a power failure lets the next run reuse their numbers for a new table
        // of the name, whose records replay would then skip.
        if let Err(e) = self.ctx.log.sync() {
            drop(pos);
            if let Some(t) = &table {
                t.set_dropped(false);
            }
            return Err(e);
        }
        let mut next = pos.clone();
        next.flushed.remove(name);
        next.dropped.insert(
            name.to_string(),
            DroppedTable {
                through_seq,
                first_id,
            },
        );
        if let Err(e) = next.store(&self.ctx.log_dir, &self.ctx.fs) {
            self.ctx.positions_dirty.store(true, Ordering::Release);
            drop(pos);
            if matches!(
                e,
                Error::Io {
                    op: "fsync dir",
                    ..
                }
            ) {
                return Err(Error::Poisoned(format!(
                    "table {name}: drop not known durable ({e}); the table refuses changes \
                     until the store is reopened, which completes the drop or keeps the \
                     table, whichever the positions file on disk says"
                )));
            }
            if let Some(t) = &table {
                t.set_dropped(false);
            }
            return Err(e);
        }
        self.ctx.positions_dirty.store(false, Ordering::Release);
        *pos = next;
        self.ctx.registry.forget_table(name);
        Ok(())
    }
}

impl Drop for Tables {
    fn drop(&mut self) {
        self.abandon();
    }
}
