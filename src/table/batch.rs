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
/// as in Cassandra).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    cells: Vec<BatchCell>,
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

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// True when the batch holds no cell.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The cells, with `ts` for those without an explicit timestamp.
    pub(crate) fn cells(&self, ts: u64) -> Vec<RecordRef<'_>> {
        self.cells
            .iter()
            .map(|c| RecordRef {
                key: &c.key,
                value: &c.value,
                ts: c.ts.unwrap_or(ts),
                tombstone: c.tombstone,
            })
            .collect()
    }
}
