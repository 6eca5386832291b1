//! The write path: [`Table::put`], [`Table::delete`], [`Table::write`] and
//! [`write_tables`], the one path every write takes (invariants 1 and 6), with the
//! backpressure that makes writers wait for flushes, and refusing writes to a dropped
//! table.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};
use smallvec::SmallVec;

use super::Table;
use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstone;
use crate::table::batch::{Cells, ExpiryContext, WriteBatch};
use crate::table::commitlog::format::PartRef;
use crate::table::tables::Context;
use crate::table::visibility::Visibility;

impl Table {
    /// Set `key` to `value`, timestamped by the store's clock.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.write(WriteBatch::new().put(key, value)).map(drop)
    }

    /// Set `key` to `value` for `ttl`, timestamped by the store's clock: from now plus
    /// `ttl` on (the store's expiry clock) reads see it deleted at its timestamp, and
    /// compaction turns it into a tombstone ([`WriteBatch::put_ttl`]). A TTL of zero or
    /// above [`MAX_TTL`](crate::MAX_TTL) (20 years) is
    /// [`Error::InvalidArgument`] naming it.
    pub fn put_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        crate::table::batch::ttl_micros(ttl)?;
        self.write(WriteBatch::new().put_ttl(key, value, ttl))
            .map(drop)
    }

    /// Delete `key`, timestamped by the store's clock.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.write(WriteBatch::new().delete(key)).map(drop)
    }

    /// Write a batch: one commit log record, then the memtable (invariant 1). Returns
    /// the record's sequence number once the commit log's sync mode acknowledges it;
    /// [`Store::wait_durable`](crate::Store::wait_durable) and
    /// [`Store::on_durable`](crate::Store::on_durable) take it. An empty batch writes
    /// nothing and returns the highest number written so far (fsynced through it
    /// first if the batch asks for [`sync`](WriteBatch::sync)).
    ///
    /// While [`TableConfig::max_frozen_memtables`](super::TableConfig::max_frozen_memtables)
    /// frozen memtables await their flush, the write waits first (backpressure). If a
    /// flush attempt ends in failure while it waits (a full disk, say), the write is
    /// refused with [`Error::FlushFailed`] naming the cause, and nothing of it is logged
    /// or applied; the next write retries the flush, and writes go on as soon as one
    /// succeeds.
    pub fn write(&self, batch: &WriteBatch) -> Result<u64> {
        write_tables(&[(self, batch)], batch.is_sync())
    }

    /// Is a drop of this table in progress (or done)?
    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// Refuse writes (a drop) or accept them again (a drop that failed). Refusing
    /// waits until no write, flush or compaction of the table is in flight (their
    /// segment set, frozen first, refuses what they would still change), so every
    /// record of the table is below the commit log's next sequence number.
    pub(crate) fn set_dropped(&self, dropped: bool) {
        self.dropped.store(dropped, Ordering::Release);
        if dropped {
            // Writers waiting for a flush see it at once.
            {
                let _waiters = self.flush_state.lock();
                self.stall.notify_all();
            }
            drop(self.flush_lock.lock());
            drop(self.compaction_lock.lock());
            drop(self.mem.write());
        }
    }

    /// Backpressure: wait while too many frozen memtables await their flush, asking the
    /// worker for one. A flush attempt that ends in failure during the wait ends it
    /// with that failure (a failure from before the wait only makes it ask again).
    fn wait_for_flushes(&self) -> Result<()> {
        let mut st = self.flush_state.lock();
        let start = st.attempts;
        while self.mem.read().frozen.len() >= self.config.load().max_frozen_memtables {
            self.ctx.check_open()?;
            if self.dropped.load(Ordering::Acquire) {
                return Err(Error::Dropped {
                    table: self.name.clone(),
                });
            }
            if st.attempts > start {
                if let Some(cause) = &st.failure {
                    return Err(Error::FlushFailed {
                        table: self.name.clone(),
                        source: Arc::clone(cause),
                    });
                }
            }
            self.ctx.schedule_flush(self);
            self.stall.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Record a flush attempt's outcome and wake the writers waiting for it.
    pub(super) fn flush_ended(&self, failure: Option<Error>) {
        let mut st = self.flush_state.lock();
        st.attempts += 1;
        st.failure = failure.map(Arc::new);
        self.stall.notify_all();
    }

    /// A background flush (or the checkpoint after it) failed: writers waiting for it
    /// get `e` ([`Table::write`]).
    pub(crate) fn flush_failed(&self, e: Error) {
        self.flush_ended(Some(e));
    }
}

/// Write the cells of one table or several, of one store, as one commit log record:
/// all of it or none at replay, and to readers (a read sees it once every table has
/// applied it: [`crate::table::visibility`]). With `sync` the record is fsynced before
/// this returns, whatever the sync mode. Returns the record's sequence number; with
/// nothing to write, the highest number written so far, fsynced first with `sync` (an
/// empty synced batch is how a caller asks for everything before it to be durable).
///
/// Each table's memtable read lock is taken in name order (so two batches never wait
/// for each other) and held across the log append and the apply (invariant 1); a table
/// with too many frozen memtables makes the write release everything and wait first.
///
/// Every write holds the store's commit lock shared from before its timestamp is taken
/// until it is visible ([`write_tables_checked`] holds it exclusively).
pub(crate) fn write_tables(parts: &[(&Table, &WriteBatch)], sync: bool) -> Result<u64> {
    write_tables_inner(parts, sync, None)
}

/// [`write_tables`] for a transaction's commit ([`crate::table::txn`]): under the
/// store's commit lock held exclusively, so no other write is in flight (every write
/// numbered before this one is applied and visible), `check` runs first, and only if
/// it passes is the batch numbered, timestamped (after every write before it: the
/// clock is strictly increasing), logged and applied, all before any other write may
/// start. If `check` fails nothing is written and its error is returned. After a wait
/// for flushes (backpressure) the lock is taken and `check` run again.
pub(crate) fn write_tables_checked(
    parts: &[(&Table, &WriteBatch)],
    sync: bool,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<u64> {
    write_tables_inner(parts, sync, Some(check))
}

fn write_tables_inner(
    parts: &[(&Table, &WriteBatch)],
    sync: bool,
    mut check: Option<&mut dyn FnMut() -> Result<()>>,
) -> Result<u64> {
    let Some((first, _)) = parts.first() else {
        return Err(Error::InvalidArgument("a write names no table".into()));
    };
    let ctx = &first.ctx;
    let parts = ordered_parts(ctx, parts)?;
    if parts.is_empty() {
        if let Some(check) = check.as_mut() {
            let _exclusive = ctx.commit.write();
            check()?;
        }
        return write_nothing(ctx, sync);
    }
    let uses_clock = parts.iter().any(|(_, b)| b.uses_clock());
    // Times this write took timestamps and saw a later-timestamped write numbered first.
    let mut overtaken = 0;
    loop {
        let commit = hold_commit(ctx, check.as_deref_mut(), overtaken, &first.name)?;
        // One timestamp for the whole batch (one more per range delete:
        // `WriteBatch::ts_span`), taken again after a wait.
        let span = parts.iter().map(|(_, b)| b.ts_span()).max().unwrap_or(1);
        let ts = ctx.clock.now_span(span);
        ctx.point("write timestamped", Path::new(&first.name));
        let guards = match lock_memtables(&parts)? {
            Ok(guards) => guards,
            Err(stalled) => {
                drop(commit);
                stalled.wait_for_flushes()?;
                continue;
            }
        };
        let (cells, ranges) = stamp(ctx, &parts, ts);
        let records: Parts<PartRef<'_>> = parts
            .iter()
            .zip(&cells)
            .zip(&ranges)
            .map(|(((t, _), c), r)| (t.name.as_str(), &c[..], &r[..]))
            .collect();
        // A `sync` write under `periodic` is fsynced after it is applied, so other
        // writers' visibility never waits for its fsync (under `batch` and `group` the
        // append syncs before anything is applied, as always).
        let clock_ts = uses_clock.then_some((ts, ts + span - 1));
        let Some(seq) = ctx
            .log
            .append_ordered(&records, Some(&ctx.visibility), clock_ts)?
        else {
            // Commit log invariant 8: a write timestamped after this one was numbered
            // first; take new timestamps (nothing was written).
            overtaken += 1;
            continue;
        };
        // Finished (visible) however this ends, a panic included: a number left
        // pending would stop every later write and flush. (A panic inside the apply
        // would be a bug; it can leave part of the batch visible.)
        let finish = Finish(&ctx.visibility, seq);
        let full = apply(ctx, &parts, &guards, (&cells, &ranges), seq);
        drop(guards);
        // Visible once every earlier number is too; acknowledged only then.
        drop(finish);
        ctx.visibility.wait_visible(seq);
        // Visible: the check of a commit that takes the lock next sees this write.
        drop(commit);
        for t in full {
            ctx.schedule_flush(t);
        }
        if sync {
            ctx.log.sync_periodic_through(seq)?;
        }
        return Ok(seq);
    }
}

/// What a write holds per part: a write of one table (a put, most batches) keeps it
/// inline, so that a put allocates none of the lists it goes through.
type Parts<T> = SmallVec<[T; 1]>;

/// Each part's cells and range tombstones, timestamped from `ts` (and given their
/// expiry: a TTL counts from the store's expiry clock, read only for a cell with one).
fn stamp<'p>(
    ctx: &Context,
    parts: &[&'p Part<'p>],
    ts: u64,
) -> (Parts<Cells<'p>>, Parts<Vec<RangeTombstone>>) {
    let now = || ctx.clock.expiry_now();
    let cells = parts
        .iter()
        .map(|(t, b)| {
            let x = ExpiryContext {
                now: &now,
                default_ttl: t.config.load().default_ttl_micros(),
            };
            b.cells(ts, &x)
        })
        .collect();
    let ranges = parts.iter().map(|(_, b)| b.ranges(ts)).collect();
    (cells, ranges)
}

/// One part of a write: a table and its batch.
type Part<'p> = (&'p Table, &'p WriteBatch);

/// The parts of a write that hold something, in table name order (the order memtable
/// locks are taken in), once every table is of `ctx`'s store, the store takes writes,
/// every batch is valid and no table appears twice.
fn ordered_parts<'p>(ctx: &Arc<Context>, parts: &'p [Part<'p>]) -> Result<Parts<&'p Part<'p>>> {
    let first = &parts[0].0.name;
    for (t, _) in parts {
        if !Arc::ptr_eq(&t.ctx, ctx) {
            return Err(Error::InvalidArgument(format!(
                "table {} belongs to another store than table {first}",
                t.name
            )));
        }
    }
    ctx.check_writable()?;
    for (_, b) in parts {
        b.check()?;
    }
    let mut parts: Parts<&Part<'p>> = parts.iter().filter(|(_, b)| !b.is_empty()).collect();
    parts.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if let Some(w) = parts.windows(2).find(|w| w[0].0.name == w[1].0.name) {
        return Err(Error::InvalidArgument(format!(
            "table {} appears twice in one batch",
            w[0].0.name
        )));
    }
    Ok(parts)
}

/// The store's commit lock as a write holds it.
enum CommitHold<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// Take the commit lock: shared for a plain write, exclusive for a checked one (whose
/// `check` then runs, and its error ends the write) and for a plain write overtaken
/// twice (no other write is then in flight, so its next timestamps are numbered in
/// order: commit log invariant 8).
fn hold_commit<'a>(
    ctx: &'a Context,
    check: Option<&mut (dyn FnMut() -> Result<()> + '_)>,
    overtaken: u32,
    table: &str,
) -> Result<CommitHold<'a>> {
    Ok(match check {
        None if overtaken >= 2 => {
            // Tests see an overtaken write fall back to the exclusive lock.
            ctx.point("write takes the commit lock exclusively", Path::new(table));
            CommitHold::Exclusive(ctx.commit.write())
        }
        None => match ctx.commit.try_read() {
            Some(g) => CommitHold::Shared(g),
            None => {
                // A commit holds it (or waits for it): tests see this write wait.
                ctx.point("write waits for the commit lock", Path::new(table));
                CommitHold::Shared(ctx.commit.read())
            }
        },
        Some(check) => {
            let g = ctx.commit.write();
            check()?;
            ctx.point("commit checked", Path::new(table));
            CommitHold::Exclusive(g)
        }
    })
}

/// Each part's memtable read lock, in order; `Err(table)` (nothing held) for the
/// first table with too many frozen memtables, whose flushes the write must wait for.
fn lock_memtables<'p>(
    parts: &[&'p Part<'p>],
) -> Result<std::result::Result<Parts<super::memset::MemRead<'p>>, &'p Table>> {
    let mut guards = Parts::with_capacity(parts.len());
    for (t, _) in parts {
        let m = t.mem.read();
        if t.dropped.load(Ordering::Acquire) {
            return Err(Error::Dropped {
                table: t.name.clone(),
            });
        }
        if m.frozen.len() >= t.config.load().max_frozen_memtables {
            return Ok(Err(*t));
        }
        guards.push(m);
    }
    Ok(Ok(guards))
}

/// Apply record `seq` (each part's `cells` and `ranges`) to the active memtables,
/// under their locks. Returns the tables whose memtable is now full (to flush).
fn apply<'p>(
    ctx: &Context,
    parts: &[&'p Part<'p>],
    guards: &[super::memset::MemRead<'_>],
    (cells, ranges): (&[Cells<'_>], &[Vec<RangeTombstone>]),
    seq: u64,
) -> Vec<&'p Table> {
    let mut full = Vec::new();
    for ((((t, _), m), c), r) in parts.iter().zip(guards).zip(cells).zip(ranges) {
        m.active.apply_visible(seq, c, &ctx.visibility);
        if !r.is_empty() {
            m.active.apply_ranges(seq, r, ctx.visibility.floor());
        }
        // Invariant 6: before the write is acknowledged, inside the read lock.
        if !t.maybe_cells.load(Ordering::Relaxed) {
            t.maybe_cells.store(true, Ordering::Release);
        }
        if m.active.is_full(t.config.load().memtable_flush_bytes) {
            full.push(*t);
        }
    }
    full
}

/// An empty write: the highest number written so far, fsynced through it first with
/// `sync` (in every mode: under `batch` and `group` a record still in its leader's
/// fsync is waited for).
pub(crate) fn write_nothing(ctx: &Context, sync: bool) -> Result<u64> {
    let seq = ctx.log.written_seq();
    if sync {
        ctx.log.wait_durable(seq)?;
    }
    Ok(seq)
}

/// Finishes a write's sequence number when dropped ([`write_tables`]).
struct Finish<'a>(&'a Visibility, u64);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}
