//! Write batches: cells for one table, logged as one commit log record and so applied
//! atomically at replay.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstone;
use crate::format::record::RecordRef;
use crate::range::KeyRange;

/// The longest TTL accepted: 20 years (Cassandra's maximum, 630,720,000 seconds).
pub const MAX_TTL: Duration = Duration::from_secs(630_720_000);

/// Check a TTL: at least one microsecond and at most [`MAX_TTL`]; its microseconds.
pub fn ttl_micros(ttl: Duration) -> Result<u64> {
    let us = ttl.as_micros();
    if us == 0 || ttl > MAX_TTL {
        return Err(Error::InvalidArgument(format!(
            "TTL of {ttl:?}: a TTL is at least 1 microsecond and at most {MAX_TTL:?} (20 years)"
        )));
    }
    Ok(us as u64)
}

/// How a cell of a batch expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    /// The table's default TTL, if it has one (a put naming no TTL), or none (a delete).
    Default,
    /// This many microseconds after the write's moment on the expiry clock.
    Ttl(u64),
    /// This absolute expiry (0: none), whatever the table's default: repair's cells.
    At(u64),
}

/// What a write knows of time and the table when it builds a batch's cells: the
/// expiry clock's reading (asked only if some cell needs it) and the table's default
/// TTL in microseconds (0: none).
pub(crate) struct ExpiryContext<'a> {
    pub(crate) now: &'a dyn Fn() -> u64,
    pub(crate) default_ttl: u64,
}

/// A batch's cells as a write logs and applies them ([`WriteBatch::cells`]): a put's one
/// cell inline, not allocated.
pub(crate) type Cells<'a> = smallvec::SmallVec<[RecordRef<'a>; 1]>;

/// Batches of at most this many cells find a key's later operations by a linear look-back.
const SMALL_BATCH: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
struct BatchCell {
    key: Vec<u8>,
    value: Vec<u8>,
    ts: Option<u64>,
    tombstone: bool,
    expiry: Expiry,
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
    ranges: Vec<BatchRange>,
    /// Why a range given to the batch was refused (reported by the write).
    invalid: Option<String>,
    sync: bool,
}

/// A range delete of a batch: its tombstone (timestamp set at write unless explicit)
/// and how many cells were given before it (its place in the batch's order).
#[derive(Debug, Clone, PartialEq, Eq)]
struct BatchRange {
    tombstone: RangeTombstone,
    ts: Option<u64>,
    after: usize,
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

    /// Set `key` to `value` for `ttl`: from the write's moment plus `ttl` on, reads see
    /// the key as deleted at the write's timestamp (Cassandra's expiring cell; the
    /// table's default TTL does not apply). A TTL of zero or above [`MAX_TTL`] makes the
    /// write fail with [`Error::InvalidArgument`] naming it, writing nothing.
    pub fn put_ttl(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> &mut Self {
        self.push(key.as_ref(), value.as_ref(), None, false);
        self.set_ttl(ttl)
    }

    /// [`WriteBatch::put_ttl`] with an explicit timestamp.
    pub fn put_ttl_at(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ts: u64,
        ttl: Duration,
    ) -> &mut Self {
        self.push(key.as_ref(), value.as_ref(), Some(ts), false);
        self.set_ttl(ttl)
    }

    /// The last cell pushed expires after `ttl` (or the batch is refused).
    pub(crate) fn set_ttl(&mut self, ttl: Duration) -> &mut Self {
        match ttl_micros(ttl) {
            Ok(us) => self.cells.last_mut().expect("just pushed").expiry = Expiry::Ttl(us),
            Err(e) => {
                self.invalid.get_or_insert_with(|| e.to_string());
            }
        }
        self
    }

    /// A cell exactly as given: its own timestamp and expiry (0: none; on a tombstone,
    /// its local deletion time), the table's default TTL not applied (repair streams
    /// cells with it).
    pub(crate) fn put_cell(&mut self, c: &crate::segment::Entry) -> &mut Self {
        self.push(&c.key, &c.value, Some(c.ts), c.tombstone);
        self.cells.last_mut().expect("just pushed").expiry = Expiry::At(c.expires);
        self
    }

    /// Delete `key` with an explicit timestamp.
    pub fn delete_at(&mut self, key: impl AsRef<[u8]>, ts: u64) -> &mut Self {
        self.push(key.as_ref(), b"", Some(ts), true)
    }

    /// Delete every key in `range` (any [`KeyRange`]: `b"a"..b"m"`, `"log/"..`, a
    /// prefix range...) with one range tombstone, not a tombstone per key: it shadows
    /// every cell of those keys written before it, and operations on keys of the range
    /// given to the batch after it survive it (the last operation wins). An empty or
    /// inverted range makes the write fail with [`Error::InvalidArgument`], writing
    /// nothing.
    pub fn delete_range(&mut self, range: impl KeyRange) -> &mut Self {
        self.push_range(range, None)
    }

    /// [`WriteBatch::delete_range`] with an explicit timestamp: it shadows the cells of
    /// the range at or below `ts` (replication, repair, tests).
    pub fn delete_range_at(&mut self, range: impl KeyRange, ts: u64) -> &mut Self {
        self.push_range(range, Some(ts))
    }

    fn push_range(&mut self, range: impl KeyRange, ts: Option<u64>) -> &mut Self {
        match RangeTombstone::from_bounds(&range.into_key_bounds(), ts.unwrap_or(0)) {
            Ok(tombstone) => self.ranges.push(BatchRange {
                tombstone,
                ts,
                after: self.cells.len(),
            }),
            Err(e) => {
                self.invalid.get_or_insert_with(|| e.to_string());
            }
        }
        self
    }

    /// A range given to the batch was refused: the write fails with this.
    pub(crate) fn check(&self) -> Result<()> {
        match &self.invalid {
            Some(why) => Err(Error::InvalidArgument(why.clone())),
            None => Ok(()),
        }
    }

    /// How many timestamps the batch takes: one, plus one per range delete without an
    /// explicit timestamp (the operations after such a range delete are written one
    /// microsecond later than it, so they survive it; those before it share its
    /// timestamp and lose to it, as a tie between a deletion and a write does).
    pub(crate) fn ts_span(&self) -> u64 {
        1 + self.ranges.iter().filter(|r| r.ts.is_none()).count() as u64
    }

    /// Does any operation take its timestamp from the clock (none given explicitly)?
    pub(crate) fn uses_clock(&self) -> bool {
        self.cells.iter().any(|c| c.ts.is_none()) || self.ranges.iter().any(|r| r.ts.is_none())
    }

    /// The range tombstones, with timestamps from `ts` for those without an explicit
    /// one (see [`WriteBatch::ts_span`]).
    pub(crate) fn ranges(&self, ts: u64) -> Vec<RangeTombstone> {
        let mut k = 0;
        self.ranges
            .iter()
            .map(|r| {
                let mut t = r.tombstone.clone();
                t.ts = r.ts.unwrap_or_else(|| {
                    k += 1;
                    ts + k - 1
                });
                t
            })
            .collect()
    }

    fn push(&mut self, key: &[u8], value: &[u8], ts: Option<u64>, tombstone: bool) -> &mut Self {
        self.push_owned(key.to_vec(), value.to_vec(), tombstone)
            .cells
            .last_mut()
            .expect("just pushed")
            .ts = ts;
        self
    }

    /// Add an untimestamped put (`tombstone` false) or delete of owned bytes, without
    /// copying them (a transaction's commit moves its buffered writes in).
    pub(crate) fn push_owned(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
        tombstone: bool,
    ) -> &mut Self {
        self.cells.push(BatchCell {
            key,
            value,
            ts: None,
            tombstone,
            expiry: Expiry::Default,
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

    /// Number of operations (cells and range deletes).
    pub fn len(&self) -> usize {
        self.cells.len() + self.ranges.len()
    }

    /// True when the batch holds no operation (a refused range counts as one: its
    /// write reports it).
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.ranges.is_empty() && self.invalid.is_none()
    }

    /// The cells, with `ts` for those without an explicit timestamp. Of the cells of one
    /// key without an explicit timestamp only the last is kept: they would share the
    /// batch's timestamp, where the tie rules (tombstone first, then the larger value)
    /// and not their order would decide, so `put k; delete k; put k` would end deleted.
    /// The last operation on a key wins, at write and so at read and at replay (the log
    /// holds only it). Cells with explicit timestamps are all kept: the newest wins.
    ///
    /// A cell given after `n` range deletes without explicit timestamps is written at
    /// `ts + n` ([`WriteBatch::ts_span`]).
    ///
    /// A put with a TTL (or, naming none, under the table's default TTL) expires at the
    /// expiry clock's reading (`x.now`, asked once, only if some cell expires) plus it.
    pub(crate) fn cells(&self, ts: u64, x: &ExpiryContext<'_>) -> Cells<'_> {
        let mut now = None;
        let mut expires = |e: Expiry, tombstone: bool| {
            let ttl = match e {
                Expiry::At(at) => return at,
                Expiry::Default if tombstone => return 0,
                Expiry::Default => x.default_ttl,
                Expiry::Ttl(us) => us,
            };
            if ttl == 0 {
                return 0;
            }
            let now = *now.get_or_insert_with(|| (x.now)());
            now.saturating_add(ttl).max(1)
        };
        // Of one key only the last untimestamped cell is kept: a linear look-back for
        // small batches (a put is a batch of one: no set to allocate), a set past that.
        let small = self.cells.len() <= SMALL_BATCH;
        let mut later: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        let mut out: Cells<'_> = Cells::with_capacity(self.cells.len());
        // Range deletes without a timestamp, by the number of cells given before each.
        let marks: Vec<usize> = self
            .ranges
            .iter()
            .filter(|r| r.ts.is_none())
            .map(|r| r.after)
            .collect();
        for (i, c) in self.cells.iter().enumerate().rev() {
            let overridden = c.ts.is_none()
                && if small {
                    self.cells[i + 1..]
                        .iter()
                        .any(|d| d.ts.is_none() && d.key == c.key)
                } else {
                    !later.insert(&c.key)
                };
            if overridden {
                continue; // a later operation on this key overrides it
            }
            let phase = marks.partition_point(|&after| after <= i) as u64;
            out.push(RecordRef {
                key: &c.key,
                value: &c.value,
                ts: c.ts.unwrap_or(ts + phase),
                tombstone: c.tombstone,
                expires: expires(c.expiry, c.tombstone),
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

    /// Delete every key of `range` in `table` with one range tombstone
    /// ([`WriteBatch::delete_range`]).
    pub fn delete_range(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        range: impl KeyRange,
    ) -> &mut Self {
        self.part(table).delete_range(range);
        self
    }

    /// [`Batch::delete_range`] with an explicit timestamp.
    pub fn delete_range_at(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        range: impl KeyRange,
        ts: u64,
    ) -> &mut Self {
        self.part(table).delete_range_at(range, ts);
        self
    }

    /// Set `key` to `value` in `table` for `ttl` ([`WriteBatch::put_ttl`]).
    pub fn put_ttl(
        &mut self,
        table: &std::sync::Arc<crate::table::Table>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> &mut Self {
        self.part(table).put_ttl(key, value, ttl);
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

    /// Number of operations, over every table.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|(_, b)| b.len()).sum()
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(|(_, b)| b.is_empty())
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
