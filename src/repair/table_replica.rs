//! [`TableReplica`]: a [`Replica`] over one LSM [`Table`] of a [`Store`].
//!
//! - Reads ([`RowSource::rows`]) merge the table's memtables and segments with
//!   [`Table::scan_cells`]: one winning cell per key, tombstones included, so a missed
//!   delete is a difference like any other (repair invariant R1); cells the table's
//!   range tombstones delete are left out. [`RowSource::range_tombstones`] is
//!   [`Table::range_tombstones`].
//! - [`Replica::apply`] writes the received cells through the table's ordinary write
//!   path (commit log, then memtable) with their own timestamps and tombstones
//!   ([`WriteBatch::put_at`], [`WriteBatch::delete_at`]), so a repaired cell is as
//!   durable as any write and wins or loses by the one cell rule
//!   ([`crate::newer_wins`]). Large applies are split into several commit log records;
//!   a crash in between leaves a prefix applied, which the next repair completes.
//!   [`Replica::apply_range_tombstones`] writes each fragment received with
//!   [`WriteBatch::delete_range_at`] at its own timestamp, the same way.
//! - [`Replica::snapshot_ephemeral`] is [`Store::snapshot_ephemeral`] of this table,
//!   which flushes the table's memtables first: the snapshot, and so the sequential
//!   tree, holds every write acknowledged before it.
//! - [`Replica::open_snapshot`] reads the snapshot's segments (newest wins, tombstones
//!   kept); the snapshot's files stay open, mapped per `disk_access_mode`, until the
//!   source is dropped.

use std::sync::Arc;

use crate::error::Result;
use crate::format::ranges::RangeTombstones;
use crate::store::Store;
use crate::table::{Table, WriteBatch};

use super::merkle::{ranges_contain, TokenRange};
use super::report::SnapshotStatus;
use super::segment_replica::{snapshot_status, SnapshotRows};
use super::session::{Replica, RowIter, RowSource};
use super::{cmp_versions, token, ReplicaId, Row};

/// Most cells in one commit log record written by [`Replica::apply`].
const APPLY_BATCH_CELLS: usize = 1024;
/// An apply record is closed once its keys and values pass this many bytes.
const APPLY_BATCH_BYTES: usize = 4 << 20;

/// A replica of one LSM table of a store.
///
/// ```
/// use segstore::repair::{LocalTransport, Parallelism, RepairOptions, RepairSession, ReplicaId, TableReplica};
/// use segstore::{Config, Store};
///
/// # fn main() -> segstore::Result<()> {
/// let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
/// let (sa, sb) = (Store::open(da.path(), Config::default())?, Store::open(db.path(), Config::default())?);
/// let a = TableReplica::new(ReplicaId(1), &sa, "users")?;
/// let b = TableReplica::new(ReplicaId(2), &sb, "users")?;
/// a.lsm().put(b"ada", b"v1")?;
/// b.lsm().delete(b"bob")?;
///
/// let mut opts = RepairOptions::default();
/// opts.parallelism = Parallelism::Sequential;
/// let report = RepairSession::run(&[&a, &b], &LocalTransport::new(), &opts)?;
/// assert!(report.converged());
/// assert_eq!(b.lsm().get(b"ada")?.as_deref(), Some(&b"v1"[..]));
/// assert!(a.get(b"bob")?.unwrap().tombstone);
///
/// drop((a, b));
/// assert!(sa.close()?.is_clean() && sb.close()?.is_clean());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TableReplica<'a> {
    id: ReplicaId,
    store: &'a Store,
    table: Arc<Table>,
    settings: String,
}

impl<'a> TableReplica<'a> {
    /// Replica `id` of the LSM table `table` (created if missing) of `store`.
    pub fn new(id: ReplicaId, store: &'a Store, table: &str) -> Result<TableReplica<'a>> {
        Ok(TableReplica {
            id,
            table: store.table(table)?,
            store,
            settings: String::new(),
        })
    }

    /// Describe further settings that must agree across replicas (a schema string);
    /// replicas whose settings differ are refused by repair
    /// ([`crate::Error::RepairMismatch`]).
    pub fn with_settings(mut self, settings: impl Into<String>) -> Self {
        self.settings = settings.into();
        self
    }

    /// The table (to write, read, flush or compact it).
    pub fn lsm(&self) -> &Arc<Table> {
        &self.table
    }

    /// The store.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The winning cell of `key`, a tombstone included ([`Table::get_cell`]).
    pub fn get(&self, key: &[u8]) -> Result<Option<Row>> {
        self.table.get_cell(key)
    }

    /// Every winning cell in key order, tombstones included.
    pub fn scan(&self) -> Result<Vec<Row>> {
        self.table.scan_cells(..)?.collect()
    }
}

impl RowSource for TableReplica<'_> {
    fn rows(&self, ranges: &[TokenRange]) -> Result<RowIter<'_>> {
        let now = self.store.expiry_now();
        let cells = self
            .table
            .scan_cells(..)?
            .map(move |r| r.map(|r| super::as_of(r, now)));
        if ranges == [TokenRange::FULL] {
            return Ok(Box::new(cells));
        }
        let ranges = ranges.to_vec();
        Ok(Box::new(cells.filter(move |r| {
            r.as_ref()
                .map_or(true, |r| ranges_contain(&ranges, token(&r.key)))
        })))
    }

    fn range_tombstones(&self) -> Result<RangeTombstones> {
        self.table.range_tombstones()
    }
}

impl Replica for TableReplica<'_> {
    fn id(&self) -> ReplicaId {
        self.id
    }

    fn table(&self) -> &str {
        self.table.name()
    }

    /// The cell rule, the token function and `gc_grace_secs` (replicas that purge
    /// tombstones at different ages could resurrect each other's deletes), plus
    /// [`TableReplica::with_settings`]. Memtable and compaction tuning may differ.
    fn table_config_fingerprint(&self) -> u64 {
        let desc = format!(
            "segstore lsm table v1; cells: newest ts, then tombstone, then larger value; token xxh3-64; gc_grace_secs={}; {}",
            self.table.config().gc_grace_secs,
            self.settings
        );
        xxhash_rust::xxh3::xxh3_64(desc.as_bytes())
    }

    fn apply(&self, mut rows: Vec<Row>) -> Result<()> {
        // Per key, the winner first; keep only it (rows from several senders overlap).
        rows.sort_unstable_by(|a, b| a.key.cmp(&b.key).then_with(|| cmp_versions(b, a)));
        rows.dedup_by(|cur, prev| cur.key == prev.key);
        let mut batch = WriteBatch::new();
        let mut bytes = 0;
        for r in rows {
            bytes += r.key.len() + r.value.len();
            // Its own timestamp and expiry (a tombstone's local deletion time).
            batch.put_cell(&r);
            if batch.len() >= APPLY_BATCH_CELLS || bytes >= APPLY_BATCH_BYTES {
                self.table.write(&batch)?;
                batch = WriteBatch::new();
                bytes = 0;
            }
        }
        self.table.write(&batch).map(drop)
    }

    fn apply_range_tombstones(&self, set: &RangeTombstones) -> Result<()> {
        use std::ops::Bound;
        for chunk in set.fragments().chunks(APPLY_BATCH_CELLS) {
            let mut batch = WriteBatch::new();
            for f in chunk {
                let end = f.end.clone().map_or(Bound::Unbounded, Bound::Excluded);
                batch.delete_range_at((Bound::Included(f.start.clone()), end), f.ts);
            }
            self.table.write(&batch)?;
        }
        Ok(())
    }

    fn snapshot_ephemeral(&self, tag: &str) -> Result<()> {
        // The store flushes the table's memtables before linking its segments.
        self.store.snapshot_ephemeral(tag, Some(self.table.name()))
    }

    fn open_snapshot(&self, tag: &str) -> Result<Box<dyn RowSource + '_>> {
        Ok(Box::new(SnapshotRows::open(
            self.store,
            tag,
            self.table.name(),
        )?))
    }

    fn clear_snapshot(&self, tag: &str) -> Result<()> {
        self.store.clear_snapshot(tag)
    }

    fn snapshot_status(&self, tag: &str) -> SnapshotStatus {
        snapshot_status(self.store, tag)
    }
}
