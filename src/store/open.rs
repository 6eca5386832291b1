//! Opening a store: [`Store::open`], [`Store::open_read_only`] and the steps between
//! (the module docs of [`crate::store`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::{DiskAccessMode, LockMemory};
use crate::error::{Error, Result};
use crate::io::StoreFs;
use crate::lifecycle::set::Frozen;
use crate::lifecycle::{Deleter, DirLock, LeakTracker, SegmentSet, SetOptions};
use crate::recovery;
use crate::segment::ReaderOptions;
use crate::table::registry::Registry;
use crate::table::Tables;

use super::{Config, SetOpener, Store};

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
        let locks_all = config.memory.lock_memory == LockMemory::All;
        if let (DiskAccessMode::Auto, Some(b), false) =
            (modes.configured, &reader.data_budget, locks_all)
        {
            let st = b.stats();
            tracing::info!(
                limit_bytes = st.limit_bytes,
                available_bytes = ?st.available_bytes,
                "disk_access_mode auto maps data files up to {} MiB in this process ({}% of {} \
                 MiB available), and reads data past that with positional reads",
                st.limit_bytes >> 20,
                config.memory.auto_data_map_percent,
                st.available_bytes.map_or("unknown".to_string(), |a| (a >> 20).to_string())
            );
        }
        let opts = SetOptions {
            modes,
            segment: config.segment.clone(),
            tracker: tracker.clone(),
            reader: reader.clone(),
        };
        let mut sets = BTreeMap::new();
        for (table, max_id) in &recovered.tables {
            let (table, max_id) = (table.clone(), *max_id);
            let set = SegmentSet::open(&dir, &table, opts.clone(), deleter.clone(), max_id + 1)?;
            if read_only {
                // Rule 10 of recovery, in memory: a committed ingest's segments.
                if let Some(ids) = recovered.ingested.missing.get(&table) {
                    set.adopt_unstored(ids)?;
                }
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
            &config,
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
}
