//! Optimistic, serializable transactions across the tables of one store
//! ([`crate::Store::transaction`]).
//!
//! A [`Transaction`] reads a [`ReadView`] taken by its first read, merged with its own
//! buffered writes (read-your-writes: `reads.rs`), and buffers puts and deletes on any
//! table of the store. [`Transaction::commit`] checks what it read (`conflict.rs`) and
//! writes its buffered cells as one commit log record, or returns
//! [`Error::Conflict`] having written nothing. Dropping a transaction without
//! committing it writes nothing.
//!
//! # Isolation
//! *Committed transactions and plain writes are serializable, in commit log sequence
//! order*: a committed transaction that wrote something behaves as if all its reads and
//! writes happened at once at its commit's sequence number; a read-only one as if at
//! its view's number ([`Transaction::read_seq`]). Plain writes ([`Table::put`],
//! [`Table::write`], [`crate::Store::write`]) are one-operation transactions at their
//! own numbers. This is what the commit checks:
//!
//! - The *read set*: every key read from the store by [`Transaction::get`],
//!   [`Transaction::get_with`], [`Transaction::contains_key`] or
//!   [`Transaction::multi_get`] (a key answered from the transaction's own writes was
//!   not read from the store and is not in it), and every *scanned interval*: for a
//!   scan over `range`, from the range's start to the last row its front yielded, from
//!   the last row its back yielded to the range's end, and the whole range once either
//!   end has returned `None`. Rows past where a scan stopped were not read.
//! - Under the store's commit lock, held exclusively (no other write is in flight, every
//!   write numbered before is applied and visible), each key is read again at the
//!   latest state and compared with the value the view gave (kept in the read set as a
//!   [`Value`](crate::Value), sharing its bytes), and each scanned interval is scanned
//!   through the view and at the latest state. If
//!   any answer differs the commit fails with [`Error::Conflict`] naming the table and
//!   the first key that differs (for an interval, the key written inside it). Else the
//!   buffered cells are timestamped (after every earlier write: the clock is strictly
//!   increasing), logged as one record and applied before the lock is released.
//!
//! So the check is by value: a write after the view that did not change what the
//! transaction read (the same value written again, a delete of a key that was absent,
//! a write with an older explicit timestamp that lost) is no conflict, and the
//! transaction is still serializable at its commit (its reads give the same answers
//! there). A scanned interval covers keys the transaction itself wrote too: a change to
//! such a key by someone else inside a scanned interval is a conflict.
//!
//! *Blind writes do not conflict*: two transactions that both write a key neither read
//! both commit, and the later commit (higher sequence number, later timestamp) wins,
//! as two plain puts would. Snapshot isolation would abort one of them (first committer
//! wins); serializability does not need it, and this is not snapshot isolation either:
//! write skew (each reads what the other writes) is prevented, since the reads are
//! checked.
//!
//! *A plain write racing a transaction* is never refused or delayed by the check's
//! outcome: it waits only while a commit holds the lock (its check, append and apply).
//! If it is numbered after the transaction's view and before its commit and changes
//! something the transaction read, the commit fails with [`Error::Conflict`]; numbered
//! after the commit, it simply comes later.
//!
//! *Every read of a transaction, committed or not, sees one consistent picture*: the
//! view plus its own writes. A transaction that will fail its commit never reads half
//! of another write. The view is taken by the first read (or
//! [`Transaction::read_seq`]), not by [`crate::Store::transaction`]: a write
//! acknowledged before the first read is seen, whenever the transaction began. One that
//! reads nothing takes no view, checks nothing, and commits as an atomic batch
//! ([`crate::Store::write`], under the commit lock shared).
//!
//! *Explicit timestamps* ([`WriteBatch::put_at`]) are outside the guarantee: cells are
//! reconciled by timestamp, so a plain write with a timestamp ahead of the clock beats
//! a later commit's cells.
//!
//! *Durability* is the commit log's sync mode, as for any write, or an fsync before
//! `commit` returns with [`Transaction::sync`]; the returned number goes to
//! [`crate::Store::wait_durable`]. Under `batch` and `group` the commit holds the lock
//! across its own fsync, so commits do not share fsyncs with writes running meanwhile.
//!
//! # Costs
//! Every plain write takes the commit lock shared (a read of an uncontended
//! `RwLock`). A view costs about 1,600 instructions to take and drop (more with more
//! tables: it holds each table's picture), which a transaction that only writes never
//! pays. A commit looks up each key it read in the table's memtables: when no
//! flush or compaction changed the table's segments since the view and no memtable
//! holds a version of the key (or a range tombstone over it) numbered after the view,
//! nothing can have changed what it read, and no segment is read (when no memtable
//! holds any record numbered after the view, no key is even looked up). Otherwise it
//! reads the key once more and compares the values. It scans each interval it
//! scanned twice (view and latest), under the exclusive lock, so a transaction that
//! scanned much holds off every write for as long as the scans take; keep transactions'
//! reads small. The view's memtable versions are
//! kept while the transaction lives ([`ReadView`]).
//!
//! # Range deletes
//! [`Transaction::delete_range`] buffers a range per table beside the point writes and
//! drops the point writes it covers (the last operation wins, as in a batch); a point
//! write after it is kept. Reads apply it: a key it covers and the transaction did not
//! write again reads as deleted without reading the store (so it joins no read set),
//! and a scan leaves out the view's rows in it (they were read, as far as the scan
//! got: its intervals still join the read set). The commit writes each range as one
//! range tombstone, before the point writes, which so survive it
//! ([`WriteBatch::delete_range`]). Deleting a range reads nothing: it is a blind
//! write and conflicts with nothing.
//!
//! # Not yet
//! A transaction's scan does not seek.

use std::cell::{OnceCell, RefCell};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::batch::WriteBatch;
use super::lsm::{write_tables, write_tables_checked, Table};
use super::tables::Context;
use super::view::ReadView;
use crate::error::{Error, Result};
use crate::format::ranges::{RangeTombstone, RangeTombstones};
use crate::range::KeyRange;

mod conflict;
mod reads;

pub use reads::TransactionScan;

/// A table's buffered writes: the last operation per key, `None` for a delete.
type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// An optimistic transaction over the tables of one store: see the module docs.
/// Created by [`crate::Store::transaction`]. Reads take `&self`; puts and deletes
/// `&mut self`. Not shareable across threads (its read set is recorded as it reads),
/// but it can be sent to another.
///
/// ```
/// # fn main() -> segstore::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = segstore::Store::open(dir.path(), segstore::Config::default())?;
/// let accounts = store.table("accounts")?;
/// accounts.put(b"alice", b"100")?;
/// loop {
///     let mut tx = store.transaction()?;
///     let alice: u64 = match tx.get(&accounts, b"alice")? {
///         Some(v) => std::str::from_utf8(&v).unwrap().parse().unwrap(),
///         None => 0,
///     };
///     tx.put(&accounts, b"alice", (alice - 10).to_string())?;
///     tx.put(&accounts, b"bob", b"10")?;
///     match tx.commit() {
///         Ok(_seq) => break,
///         Err(segstore::Error::Conflict { .. }) => continue, // someone wrote alice: retry
///         Err(e) => return Err(e),
///     }
/// }
/// assert_eq!(accounts.get(b"alice")?.as_deref(), Some(&b"90"[..]));
/// # drop(accounts);
/// # store.close()?;
/// # Ok(())
/// # }
/// ```
pub struct Transaction {
    ctx: Arc<Context>,
    /// The view every read goes through, taken at the first read (or
    /// [`Transaction::read_seq`]): a transaction that only writes never takes one.
    view: OnceCell<ReadView>,
    /// Per table (in the order first written), its buffered writes.
    writes: Vec<(Arc<Table>, Writes)>,
    /// Per table, its buffered range deletes (timestamps unused).
    ranges: Vec<(Arc<Table>, RangeTombstones)>,
    /// The TTL (microseconds) of buffered puts given one, by (index in `writes`, key).
    ttls: BTreeMap<(usize, Vec<u8>), u64>,
    reads: RefCell<conflict::ReadSet>,
    sync: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("read_seq", &self.view.get().map(ReadView::seq))
            .field(
                "writes",
                &self
                    .writes
                    .iter()
                    .map(|(t, w)| (t.name(), w.len()))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Transaction {
    /// Begin: the view every read goes through is taken by the first read.
    pub(crate) fn begin(ctx: &Arc<Context>) -> Result<Transaction> {
        ctx.check_open()?;
        Ok(Transaction {
            ctx: Arc::clone(ctx),
            view: OnceCell::new(),
            writes: Vec::new(),
            ranges: Vec::new(),
            ttls: BTreeMap::new(),
            reads: RefCell::new(conflict::ReadSet::default()),
            sync: false,
        })
    }

    /// The sequence number of the view it reads: every write numbered at or below it,
    /// nothing above, plus its own writes. The view is taken by the transaction's first
    /// read; called before any, this takes it now (so every later read sees this
    /// number's picture).
    pub fn read_seq(&self) -> u64 {
        self.view().seq()
    }

    /// The view its reads go through, taken now if no read has taken it yet.
    fn view(&self) -> &ReadView {
        self.view.get_or_init(|| ReadView::capture(&self.ctx))
    }

    /// Set `key` to `value` in `table` when the transaction commits. Reads of the
    /// transaction see it at once.
    pub fn put(
        &mut self,
        table: &Arc<Table>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.buffer(table, key.as_ref(), Some(value.as_ref().to_vec()))
    }

    /// Set `key` to `value` in `table` for `ttl` when the transaction commits
    /// ([`Table::put_ttl`]): the TTL counts from the commit, so the transaction's own
    /// reads see the value. A TTL of zero or above
    /// [`MAX_TTL`](crate::MAX_TTL) is [`Error::InvalidArgument`] and
    /// buffers nothing.
    pub fn put_ttl(
        &mut self,
        table: &Arc<Table>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) -> Result<()> {
        let us = crate::table::batch::ttl_micros(ttl)?;
        let key = key.as_ref();
        self.buffer(table, key, Some(value.as_ref().to_vec()))?;
        let i = self.slot(table)?;
        self.ttls.insert((i, key.to_vec()), us);
        Ok(())
    }

    /// Delete `key` from `table` when the transaction commits.
    pub fn delete(&mut self, table: &Arc<Table>, key: impl AsRef<[u8]>) -> Result<()> {
        self.buffer(table, key.as_ref(), None)
    }

    /// Delete every key of `range` in `table` when the transaction commits, as one
    /// range tombstone ([`Table::delete_range`]); the transaction's earlier writes in
    /// the range are dropped, later ones kept (module docs). An empty or inverted range
    /// is [`Error::InvalidArgument`] and buffers nothing.
    pub fn delete_range(&mut self, table: &Arc<Table>, range: impl KeyRange) -> Result<()> {
        let r = RangeTombstone::from_bounds(&range.into_key_bounds(), 0)?;
        let i = self.slot(table)?;
        self.writes[i].1.retain(|k, _| !r.contains(k));
        self.ttls.retain(|(j, k), _| *j != i || !r.contains(k));
        match self.ranges.iter_mut().find(|(t, _)| Arc::ptr_eq(t, table)) {
            Some((_, set)) => set.insert(&r),
            None => self
                .ranges
                .push((Arc::clone(table), RangeTombstones::from_list([&r]))),
        }
        Ok(())
    }

    /// With `true`, [`Transaction::commit`] returns only once the commit log is fsynced
    /// through the commit ([`WriteBatch::sync`]). Default `false`.
    pub fn sync(&mut self, sync: bool) -> &mut Self {
        self.sync = sync;
        self
    }

    /// Number of buffered writes (the last operation per key, and each range
    /// delete's fragments), over every table.
    pub fn len(&self) -> usize {
        let ranges: usize = self.ranges.iter().map(|(_, r)| r.len()).sum();
        self.writes.iter().map(|(_, w)| w.len()).sum::<usize>() + ranges
    }

    /// True when nothing is buffered: a commit would write nothing, check nothing and
    /// return the view's number.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn buffer(&mut self, table: &Arc<Table>, key: &[u8], value: Option<Vec<u8>>) -> Result<()> {
        let i = self.slot(table)?;
        self.writes[i].1.insert(key.to_vec(), value);
        if !self.ttls.is_empty() {
            self.ttls.remove(&(i, key.to_vec()));
        }
        Ok(())
    }

    /// The index of `table`'s buffered writes, made if needed.
    fn slot(&mut self, table: &Arc<Table>) -> Result<usize> {
        self.same_store(table)?;
        let i = match self.writes.iter().position(|(t, _)| Arc::ptr_eq(t, table)) {
            Some(i) => i,
            None => {
                if let Some((t, _)) = self.writes.iter().find(|(t, _)| t.name() == table.name()) {
                    return Err(Error::InvalidArgument(format!(
                        "table {} was dropped and created again during the transaction",
                        t.name()
                    )));
                }
                self.writes.push((Arc::clone(table), Writes::new()));
                self.writes.len() - 1
            }
        };
        Ok(i)
    }

    fn same_store(&self, table: &Table) -> Result<()> {
        if Arc::ptr_eq(table.ctx(), &self.ctx) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "table {} belongs to another store than this transaction",
                table.name()
            )))
        }
    }

    /// The buffered range deletes of `table`, if any.
    fn ranges_of(&self, table: &Arc<Table>) -> Option<&RangeTombstones> {
        self.ranges
            .iter()
            .find(|(t, _)| Arc::ptr_eq(t, table))
            .map(|(_, r)| r)
    }

    /// The buffered writes of `table`, if any.
    fn writes_of(&self, table: &Arc<Table>) -> Option<&Writes> {
        self.writes
            .iter()
            .find(|(t, _)| Arc::ptr_eq(t, table))
            .map(|(_, w)| w)
    }

    /// Check what the transaction read and write what it buffered, as one commit log
    /// record (all of it or none at replay and to readers; see the module docs).
    /// Returns the record's sequence number, or, for a transaction that wrote nothing,
    /// its view's number ([`Transaction::read_seq`]) without any check: it read one
    /// consistent picture, and is serialized there.
    ///
    /// [`Error::Conflict`] if something it read was changed by a write numbered after
    /// its view: nothing is written, and the caller may run the transaction again. The
    /// errors of [`crate::Store::write`] otherwise (a dropped table, a closed or
    /// poisoned store, a failed flush under backpressure), also with nothing written.
    pub fn commit(self) -> Result<u64> {
        if self.is_empty() {
            return Ok(self.read_seq());
        }
        let Transaction {
            writes,
            ranges,
            reads,
            view,
            sync,
            mut ttls,
            ..
        } = self;
        // The buffered bytes move into the batches, uncopied.
        let batches: Vec<(Arc<Table>, WriteBatch)> = writes
            .into_iter()
            .enumerate()
            .map(|(i, (t, w))| {
                let mut b = WriteBatch::new();
                // Ranges first: the point writes kept are later than them.
                let mine = ranges.iter().find(|(r, _)| Arc::ptr_eq(r, &t));
                for r in mine.map_or(&[][..], |(_, r)| r.fragments()) {
                    let end = r.end.clone().map_or(Bound::Unbounded, Bound::Excluded);
                    b.delete_range((Bound::Included(r.start.clone()), end));
                }
                for (k, v) in w {
                    let ttl = match ttls.is_empty() {
                        true => None,
                        false => ttls.remove(&(i, k.clone())),
                    };
                    match v {
                        Some(v) => b.push_owned(k, v, false),
                        None => b.push_owned(k, Vec::new(), true),
                    };
                    if let Some(us) = ttl {
                        b.set_ttl(std::time::Duration::from_micros(us));
                    }
                }
                (t, b)
            })
            .collect();
        let parts: Vec<(&Table, &WriteBatch)> = batches.iter().map(|(t, b)| (&**t, b)).collect();
        let reads = reads.into_inner();
        match view.into_inner() {
            // Every read went through the view, so one that read something took it.
            Some(view) if !reads.is_empty() => {
                write_tables_checked(&parts, sync, &mut || reads.check(&view))
            }
            // Read nothing: nothing to check, and as any atomic batch it needs no
            // exclusive lock (blind writes conflict with nothing).
            _ => write_tables(&parts, sync),
        }
    }
}
