//! Write batches: cells for one table, logged as one commit log record and so applied
//! atomically at replay.

use crate::format::record::RecordRef;

#[derive(Debug, Clone, PartialEq, Eq)]
struct BatchCell {
    key: Vec<u8>,
    value: Vec<u8>,
    ts: Option<u64>,
    tombstone: bool,
}

/// Puts and deletes for one table, written together by
/// [`Table::write`](crate::table::Table::write). Keys and values are anything
/// `AsRef<[u8]>` (`&[u8]`, `b"x"`, `"x"`, `Vec<u8>`, `&Vec<u8>`, `String`), copied into
/// the batch. Cells without an explicit timestamp
/// get the batch's timestamp, taken from the store's clock at write time (one per batch,
/// as in Cassandra), and of several such operations on one key the last wins (a batch
/// that deletes a key and puts it again leaves it put).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    cells: Vec<BatchCell>,
    sync: bool,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Set `key` to `value`.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push(key.as_ref(), value.as_ref(), None, false)
    }

    /// Delete `key` (write a tombstone).
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        self.push(key.as_ref(), b"", None, true)
    }

    /// Set `key` to `value` with an explicit timestamp in microseconds (replication,
    /// repair, tests). The newest timestamp wins, whatever the order of arrival.
    pub fn put_at(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ts: u64) -> &mut Self {
        self.push(key.as_ref(), value.as_ref(), Some(ts), false)
    }

    /// Delete `key` with an explicit timestamp.
    pub fn delete_at(&mut self, key: impl AsRef<[u8]>, ts: u64) -> &mut Self {
        self.push(key.as_ref(), b"", Some(ts), true)
    }

    fn push(&mut self, key: &[u8], value: &[u8], ts: Option<u64>, tombstone: bool) -> &mut Self {
        self.cells.push(BatchCell {
            key: key.to_vec(),
            value: value.to_vec(),
            ts,
            tombstone,
        });
        self
    }

    /// With `true`, the write returns only once the commit log is fsynced, whatever
    /// its sync mode: a per-write durability choice for a store running `periodic`
    /// (under `batch` and `group` every write is synced anyway). Default `false`.
    /// Under `periodic` the write is applied (and visible to readers) before its fsync,
    /// so other writers never wait for it; if that fsync fails the write returns the
    /// error though readers may already see it, and the commit log is poisoned (every
    /// later write fails) as after any failed fsync.
    pub fn sync(&mut self, sync: bool) -> &mut Self {
        self.sync = sync;
        self
    }

    /// Whether the write waits for an fsync ([`WriteBatch::sync`]).
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// True when the batch holds no cell.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The cells, with `ts` for those without an explicit timestamp. Of the cells of one
    /// key without an explicit timestamp only the last is kept: they would share the
    /// batch's timestamp, where the tie rules (tombstone first, then the larger value)
    /// and not their order would decide, so `put k; delete k; put k` would end deleted.
    /// The last operation on a key wins, at write and so at read and at replay (the log
    /// holds only it). Cells with explicit timestamps are all kept: the newest wins.
    pub(crate) fn cells(&self, ts: u64) -> Vec<RecordRef<'_>> {
        let mut later: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        let mut out: Vec<RecordRef<'_>> = Vec::with_capacity(self.cells.len());
        for c in self.cells.iter().rev() {
            if c.ts.is_none() && !later.insert(&c.key) {
                continue; // a later operation on this key overrides it
            }
            out.push(RecordRef {
                key: &c.key,
                value: &c.value,
                ts: c.ts.unwrap_or(ts),
                tombstone: c.tombstone,
            });
        }
        out.reverse();
        out
    }
}

/// Puts and deletes across the tables of one store, written by
/// [`Store::write`](crate::Store::write) as one commit log record: all of it is applied
/// at replay or none, and readers (plain reads, scans, read views) see all of it or none.
/// Cells without an explicit timestamp get one timestamp for the whole batch; of several
/// such operations on one key of a table, the last wins.
///
/// ```
/// # fn main() -> segstore::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = segstore::Store::open(dir.path(), segstore::Config::default())?;
/// let accounts = store.table("accounts")?;
/// let ledger = store.table("ledger")?;
/// let mut batch = segstore::Batch::new();
/// batch
///     .put(&accounts, b"alice", b"90")
///     .put(&accounts, b"bob", b"110")
///     .put(&ledger, b"0001", b"alice->bob 10");
/// store.write(&batch)?;
/// assert_eq!(ledger.get(b"0001")?.as_deref(), Some(&b"alice->bob 10"[..]));
/// # drop((accounts, ledger));
/// # store.close()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Batch {
    parts: Vec<(std::sync::Arc<crate::table::Table>, WriteBatch)>,
    sync: bool,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// The part of the batch for `table`.
    fn part(&mut self, table: &std::sync::Arc<crate::table::Table>) -> &mut WriteBatch {
        let i = match self
            .parts
            .iter()
            .position(|(t, _)| std::sync::Arc::ptr_eq(t, table))
        {
            Some(i) => i,
            None => {
                self.parts
                    .push((std::sync::Arc::clone(table), WriteBatch::new()));
                self.parts.len() - 1
            }
        };
        &mut self.parts[i].1
    }

    /// Set `key` to `value` in `table`.
    pub fn put(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.part(table).put(key, value);
        self
    }

    /// Delete `key` from `table`.
    pub fn delete(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        key: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.part(table).delete(key);
        self
    }

    /// Set `key` to `value` in `table` with an explicit timestamp (microseconds).
    pub fn put_at(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ts: u64,
    ) -> &mut Self {
        self.part(table).put_at(key, value, ts);
        self
    }

    /// Delete `key` from `table` with an explicit timestamp.
    pub fn delete_at(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        key: impl AsRef<[u8]>,
        ts: u64,
    ) -> &mut Self {
        self.part(table).delete_at(key, ts);
        self
    }

    /// Fsync the commit log before the write returns ([`WriteBatch::sync`]).
    pub fn sync(&mut self, sync: bool) -> &mut Self {
        self.sync = sync;
        self
    }

    /// Number of cells, over every table.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|(_, b)| b.len()).sum()
    }

    /// True when the batch holds no cell.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each table's cells.
    pub(crate) fn parts(&self) -> impl Iterator<Item = (&crate::table::Table, &WriteBatch)> {
        self.parts.iter().map(|(t, b)| (&**t, b))
    }

    /// Whether the write waits for an fsync.
    pub(crate) fn is_sync(&self) -> bool {
        self.sync
    }
}
