//! A store's tables: opening a table or its bare segment set, read views, writes
//! across tables, listing and dropping tables.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lifecycle::set::{manifest_path, Frozen};
use crate::lifecycle::{Deleter, Manifest, SegmentSet};
use crate::segment::{validate_name, Component, SegmentName};
use crate::table::registry::Registered;
use crate::table::settings;
use crate::table::{Batch, ReadView, Table, TableConfig, Transaction, WriteBatch};

use super::{SetOpener, Store};

impl Store {
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

    /// A timestamp from the store's write clock: wall-clock microseconds since the Unix
    /// epoch, above every timestamp the store has handed out or seen (in its segments
    /// and replayed log), so a cell written with it (`WriteBatch::put_at`, or a segment
    /// written with `SegmentWriter` for bulk loading) orders after every earlier write
    /// of the store. Each call returns a new, larger value.
    pub fn now(&self) -> Result<u64> {
        let _op = self.check_open()?;
        Ok(self.lsm.ctx().clock.now())
    }

    /// The store's expiry clock: the moment (wall-clock microseconds since the Unix
    /// epoch) a TTL given now counts from and that reads judge expiry at
    /// ([`Table::put_ttl`](crate::Table::put_ttl)). Unlike [`Store::now`] it is not
    /// strictly increasing (a wall clock stepped back steps it back).
    pub fn expiry_now(&self) -> u64 {
        self.lsm.ctx().clock.expiry_now()
    }

    /// `testing` feature: set the expiry clock ([`Store::expiry_now`]) to `micros`, or
    /// back to the wall clock with `None`, so tests move time past a TTL without
    /// sleeping. Writes count TTLs from it, and reads, read views taken after the call,
    /// compaction and repair judge expiry at it.
    #[cfg(feature = "testing")]
    pub fn set_expiry_clock(&self, micros: Option<u64>) {
        self.lsm.ctx().clock.set_expiry_now(micros);
    }

    /// `config`'s checks, and that the store's segment format can hold its
    /// compression.
    fn check_table_config(&self, config: &TableConfig) -> Result<()> {
        config.validate()?;
        self.config.segment.validate_for_table(config.compression)
    }

    /// The LSM table `name` with its own settings, creating it if it does not exist:
    /// `gc_grace`, memtable size, compaction settings... ([`TableConfig`]), so that a
    /// Raft log (`gc_grace` 0) and user data (10 days) share one store. The settings
    /// are persisted in the table's manifest the first time (atomically; a reopen
    /// applies them before replaying the table's commit log records, and
    /// [`Store::table`] of the name then opens it with them too).
    ///
    /// A table that has persisted settings keeps them: a later `table_with` with other
    /// settings (after a reopen, say) returns the table with its persisted settings and
    /// logs a warning; change them with [`Store::set_table_config`]. A table that exists
    /// without settings of its own (created by [`Store::table`]) takes these and
    /// persists them. [`Error::InvalidConfig`] for settings that fail
    /// [`TableConfig::validate`]; [`Error::ReadOnly`] on a read-only store when the
    /// settings would have to be persisted.
    pub fn table_with(&self, name: &str, config: TableConfig) -> Result<Arc<Table>> {
        let _op = self.check_open()?;
        self.check_table_config(&config)?;
        let set = self.opener().open_set(name)?;
        let manifest = manifest_path(&self.dir, name);
        {
            let _ddl = self.ddl.lock();
            match settings::decode(&manifest, &set.settings())? {
                None => {
                    set.store_settings(settings::encode(&config))?;
                    if let Some(t) = self.registry.table(name) {
                        t.set_config(config);
                    }
                }
                Some(kept) if kept != config => tracing::warn!(
                    table = %name,
                    "table_with: the table keeps its persisted settings (Store::set_table_config changes them)"
                ),
                Some(_) => {}
            }
        }
        self.table(name)
    }

    /// Change the persisted settings of table `name` (see [`Store::table_with`]): the
    /// manifest is rewritten with them, atomically, and an open [`Table`] of the name
    /// uses them from its next write, flush or compaction on. [`Error::NotFound`] if
    /// there is no such table; [`Error::InvalidConfig`] for settings that fail
    /// [`TableConfig::validate`].
    pub fn set_table_config(&self, name: &str, config: TableConfig) -> Result<()> {
        let _op = self.check_writable()?;
        self.check_table_config(&config)?;
        validate_name("table", name)?;
        let _ddl = self.ddl.lock();
        let set = self.registry.set(name).ok_or_else(|| Error::NotFound {
            kind: "table",
            name: name.to_string(),
        })?;
        set.store_settings(settings::encode(&config))?;
        if let Some(t) = self.registry.table(name) {
            t.set_config(config);
        }
        Ok(())
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

    /// Begin an optimistic, serializable transaction across the tables of this store:
    /// it reads a [`ReadView`] taken by its first read plus its own writes, buffers puts and
    /// deletes, and its [`commit`](Transaction::commit) writes them as one record if
    /// nothing it read was written meanwhile, else fails with [`Error::Conflict`]
    /// having written nothing. See [`Transaction`] (its module docs state the isolation
    /// level exactly).
    pub fn transaction(&self) -> Result<Transaction> {
        let _op = self.check_open()?;
        Transaction::begin(self.lsm.ctx())
    }

    /// Write a batch across tables of this store atomically: one commit log record, so
    /// all of it or none is applied at replay, and readers see all of it or none. See
    /// [`Batch`]. A table of another store, or a dropped one, fails the whole batch.
    /// Returns the record's sequence number, as [`Table::write`] does (and, as there,
    /// an empty batch writes nothing and returns the highest number written so far,
    /// fsynced first if the batch asks for [`sync`](Batch::sync)).
    pub fn write(&self, batch: &Batch) -> Result<u64> {
        let parts: Vec<(&Table, &WriteBatch)> = batch.parts().collect();
        for (t, _) in &parts {
            if !Arc::ptr_eq(t.ctx(), self.lsm.ctx()) {
                return Err(Error::InvalidArgument(format!(
                    "table {} belongs to another store",
                    t.name()
                )));
            }
        }
        if parts.is_empty() {
            self.lsm.ctx().check_writable()?;
            return crate::table::lsm::write_nothing(self.lsm.ctx(), batch.is_sync());
        }
        crate::table::lsm::write_tables(&parts, batch.is_sync())
    }

    /// Names of the tables.
    pub fn table_names(&self) -> Vec<String> {
        self.registry.names()
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
    pub(super) fn open_set(&self, name: &str) -> Result<Arc<SegmentSet>> {
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
