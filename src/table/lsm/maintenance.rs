//! Flush: freezing memtables and writing them out as segments, oldest first
//! (invariants 2, 3, 6), the locks that quiesce a table, and the flushed and lowest
//! unflushed sequence numbers the commit log's checkpoints need. Compaction is
//! `compact.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::{Memtables, Table};
use crate::error::{Error, Result};
use crate::segment::SegmentName;
use crate::table::memtable::Memtable;

impl Table {
    /// Flush every memtable (the active one included) into segments, then release the
    /// commit log files this makes obsolete. On a store whose commit log is poisoned
    /// the memtables are still flushed (they may hold the only copy of writes a failed
    /// sync lost), then [`Error::Poisoned`] is returned: the store stays read-only.
    pub fn flush(&self) -> Result<()> {
        self.ctx.check_open()?;
        self.flush_memtables(true)?;
        self.ctx.checkpoint()?;
        self.ctx.schedule_compaction(self);
        self.ctx.log.check_poisoned()?;
        // A table whose manifest durability is unknown refuses changes, even when there
        // was nothing to flush.
        self.set.check_poisoned()
    }

    /// Whether the active memtable is due for its flush ([`Memtable::is_full`] at the
    /// table's `memtable_flush_bytes`): a store opening checks it after replay.
    pub(crate) fn memtable_full(&self) -> bool {
        let flush_bytes = self.config.load().memtable_flush_bytes;
        self.mem.read().active.is_full(flush_bytes)
    }

    /// Flush frozen memtables, oldest first, after freezing the active one if `force`
    /// or if it is full (invariants 2, 3). Returns how many segments were added.
    pub(crate) fn flush_memtables(&self, force: bool) -> Result<usize> {
        let _one_at_a_time = self.flush_lock.lock();
        {
            let mut m = self.mem.write();
            let flush_bytes = self.config.load().memtable_flush_bytes;
            if force || m.active.is_full(flush_bytes) {
                Self::freeze_locked(&mut m, flush_bytes);
            }
        }
        self.flush_frozen_locked()
    }

    /// Hold this table's flush and compaction locks: its segments change only by the
    /// holder's own flushes ([`Table::flush_frozen_locked`]) until the guards drop.
    pub(crate) fn quiesce(&self) -> (MutexGuard<'_, ()>, MutexGuard<'_, ()>) {
        (self.flush_lock.lock(), self.compaction_lock.lock())
    }

    /// [`Table::quiesce`] if neither lock is held now.
    pub(crate) fn try_quiesce(&self) -> Option<(MutexGuard<'_, ()>, MutexGuard<'_, ()>)> {
        let flush = self.flush_lock.try_lock()?;
        Some((flush, self.compaction_lock.try_lock()?))
    }

    /// The memtables under the write lock: no write of this table in flight.
    pub(crate) fn memtables_write(&self) -> super::memset::MemWrite<'_> {
        self.mem.write()
    }

    /// Freeze the active memtable if it holds anything (the caller holds the write lock).
    /// The new active memtable's key filter is sized for `flush_bytes`, the table's
    /// flush size now (it may have changed since the last one was made), and its point
    /// index for the keys the frozen one holds.
    pub(crate) fn freeze_locked(m: &mut Memtables, flush_bytes: usize) {
        if !m.active.is_empty() {
            let next = Arc::new(Memtable::after(&m.active, flush_bytes));
            let old = std::mem::replace(&mut m.active, next);
            m.frozen.push(old);
        }
    }

    /// Flush the frozen memtables, oldest first (the caller holds the flush lock).
    /// Returns how many segments were added.
    pub(crate) fn flush_frozen_locked(&self) -> Result<usize> {
        self.ctx.check_unsealed()?;
        let mut added = 0;
        loop {
            let Some(mt) = self.mem.read().frozen.first().cloned() else {
                break;
            };
            let mut flushed = None;
            if !mt.is_empty() {
                // Visibility invariant 3: no segment holds a cell readers may not see.
                if let Some((_, max)) = mt.seq_range() {
                    self.ctx.visibility.wait_visible(max);
                }
                // Under `periodic` the memtable may hold records not yet durable in the
                // log. A segment must not outlive a power loss that takes them: a batch
                // across tables would come back in this table only. (A poisoned log
                // cannot sync; its memtables are flushed anyway, see `flush`.)
                match self.ctx.log.sync() {
                    Ok(()) | Err(Error::Poisoned(_)) => {}
                    Err(e) => return Err(e),
                }
                let mut w = self.set.writer_with(self.config().compression)?;
                let name = w.name().clone();
                for e in mt.iter() {
                    w.add_expiring(&e.key, &e.value, e.ts, e.tombstone, e.expires)?;
                }
                w.add_range_tombstones(&mt.range_tombstones())?;
                let stats = w.finish()?;
                self.set
                    .add_guarded(std::slice::from_ref(&name), || self.ctx.install.write())?;
                added += 1;
                self.flush_bytes.fetch_add(stats.data_len, Ordering::Relaxed);
                tracing::debug!(segment = %name, cells = stats.entry_count, "memtable flushed");
                flushed = Some(name);
            }
            {
                let mut m = self.mem.write();
                if m.frozen.first().is_some_and(|f| Arc::ptr_eq(f, &mt)) {
                    m.frozen.remove(0);
                }
                // Invariant 6: no write is in flight, the flushed cells are in the view.
                if m.frozen.is_empty() && m.active.is_empty() {
                    self.maybe_cells.store(false, Ordering::Release);
                }
            }
            if let Some((_, max)) = mt.seq_range() {
                self.flushed_seq.fetch_max(max, Ordering::AcqRel);
            }
            self.flushes.fetch_add(1, Ordering::Relaxed);
            self.flush_ended(None);
            // After the flush is done and told: a writer waiting for room does not wait
            // for the check too.
            if let Some(name) = flushed {
                self.check_written(std::slice::from_ref(&name), false);
            }
        }
        self.flush_ended(None);
        Ok(added)
    }

    /// Check the blocks of the segments `names`, just written and installed, while
    /// their pages are in the page cache
    /// ([`crate::segment::SegmentReader::check_mapped_blocks`]), so the first reads of
    /// each block do not: a flush's segment always (a memtable's worth, just written),
    /// a compaction's only if every page of it still is (`resident_only`). A block that
    /// fails is left unchecked: the read that meets it reports the damage, as before.
    pub(super) fn check_written(&self, names: &[SegmentName], resident_only: bool) {
        let written: Vec<_> = self.set.with_view(|v| {
            v.segments
                .iter()
                .filter(|s| names.contains(s.name()))
                .cloned()
                .collect()
        });
        for h in written {
            if resident_only && !h.data_in_page_cache() {
                continue;
            }
            if let Err(e) = h.check_mapped_blocks() {
                tracing::error!(segment = %h.name(), error = %e, "a segment just written failed its check");
            }
        }
    }

    /// Freeze the active memtable without flushing it: it stays readable as a frozen
    /// memtable until the next flush writes it out (writers wait once
    /// `max_frozen_memtables` are frozen). For tests and tools that need cells spread
    /// over several memtables (`testing` feature only).
    #[cfg(feature = "testing")]
    pub fn freeze_memtable(&self) {
        let flush_bytes = self.config.load().memtable_flush_bytes;
        Self::freeze_locked(&mut self.mem.write(), flush_bytes);
    }

    /// Every record of this table numbered at or below this is in a segment.
    pub fn flushed_seq(&self) -> u64 {
        self.flushed_seq.load(Ordering::Acquire)
    }

    /// The lowest commit log sequence number any memtable of this table holds. Takes
    /// the write lock, so no write is in flight (invariant 1).
    pub(crate) fn min_unflushed_seq(&self) -> Option<u64> {
        let m = self.mem.write();
        std::iter::once(&m.active)
            .chain(&m.frozen)
            .filter_map(|mt| mt.seq_range().map(|r| r.0))
            .min()
    }
}
