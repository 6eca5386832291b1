//! Flush and compaction: freezing memtables and writing them out as segments, oldest
//! first (invariants 2, 3, 6), the locks that quiesce a table, the flushed and lowest
//! unflushed sequence numbers the commit log's checkpoints need, and size-tiered and
//! major compaction (invariant 5).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::{MutexGuard, RwLockWriteGuard};

use super::{Memtables, Table};
use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstones;
use crate::lifecycle::SegmentHandle;
use crate::segment::SegmentIter;
use crate::table::compaction::{choose, Choice, SegmentSummary};
use crate::table::compaction_filter::{decide, FilterDecision};
use crate::table::memtable::Memtable;
use crate::table::merge::{BoxedSource, MergeIter, RangeFilter, TombstonePolicy};

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

    /// Flush frozen memtables, oldest first, after freezing the active one if `force`
    /// or if it is full (invariants 2, 3). Returns how many segments were added.
    pub(crate) fn flush_memtables(&self, force: bool) -> Result<usize> {
        let _one_at_a_time = self.flush_lock.lock();
        {
            let mut m = self.mem.write();
            let flush_bytes = self.config.load().memtable_flush_bytes;
            let full = m.active.approx_bytes() >= flush_bytes;
            if force || full {
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
    pub(crate) fn memtables_write(&self) -> RwLockWriteGuard<'_, Memtables> {
        self.mem.write()
    }

    /// Freeze the active memtable if it holds anything (the caller holds the write lock).
    /// The new active memtable's key filter is sized for `flush_bytes`, the table's
    /// flush size now (it may have changed since the last one was made).
    pub(crate) fn freeze_locked(m: &mut Memtables, flush_bytes: usize) {
        if !m.active.is_empty() {
            let next = Arc::new(Memtable::for_flush_bytes(flush_bytes));
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
                let mut w = self.set.writer()?;
                let name = w.name().clone();
                for e in mt.iter() {
                    w.add(&e.key, &e.value, e.ts, e.tombstone)?;
                }
                w.add_range_tombstones(&mt.range_tombstones())?;
                let stats = w.finish()?;
                self.set
                    .add_guarded(std::slice::from_ref(&name), || self.ctx.install.write())?;
                added += 1;
                tracing::debug!(segment = %name, cells = stats.entry_count, "memtable flushed");
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
        }
        self.flush_ended(None);
        Ok(added)
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

    fn summaries(view: &[SegmentHandle]) -> Vec<SegmentSummary> {
        view.iter()
            .map(|h| {
                let s = h.stats();
                SegmentSummary {
                    id: h.name().id,
                    data_bytes: s.data_len,
                    entry_count: s.entry_count,
                    min_ts: s.min_ts,
                    max_ts: s.max_ts,
                }
            })
            .collect()
    }

    /// One round of size-tiered compaction: returns whether it merged anything.
    ///
    /// A compaction of the table already running (a caller's `compact()`) makes this
    /// round do nothing rather than wait: the worker stays free for flushes, and a close
    /// never waits for the worker behind a long major compaction.
    pub(crate) fn compact_once(&self) -> Result<bool> {
        let Some(_one_at_a_time) = self.compaction_lock.try_lock() else {
            return Ok(false);
        };
        self.ctx.check_unsealed()?;
        let view = self.set.view();
        match choose(&Self::summaries(&view.segments), &self.config().compaction) {
            Choice::DoNothing => Ok(false),
            Choice::Merge(ids) => {
                drop(view);
                self.merge_segments(&ids)?;
                Ok(true)
            }
        }
    }

    /// Major compaction: flush, then merge every segment into one, dropping tombstones
    /// past `gc_grace` (invariant 5) and running the compaction filter, if one is set,
    /// on every live cell (a sole segment is rewritten for it too).
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        let _one_at_a_time = self.compaction_lock.lock();
        self.ctx.check_unsealed()?;
        let ids: Vec<u64> = self
            .set
            .view()
            .segments
            .iter()
            .map(|h| h.name().id)
            .collect();
        let filtered = self.compaction_filter.read().is_some();
        if ids.len() > 1
            || (filtered && !ids.is_empty())
            || self
                .set
                .view()
                .segments
                .iter()
                .any(|h| h.stats().tombstone_count > 0 || !h.range_tombstones().is_empty())
        {
            self.merge_segments(&ids)?;
        }
        // The worker skipped rounds while this ran; flushes meanwhile may want one.
        self.ctx.schedule_compaction(self);
        Ok(())
    }

    /// Merge segments `ids` into one (or none, if nothing survives). The caller holds
    /// the compaction lock.
    pub(super) fn merge_segments(&self, ids: &[u64]) -> Result<()> {
        // Invariant 5 needs the oldest cell outside the merge. Memtables first, then the
        // view, as readers do (invariant 2): a flush completing in between shows its
        // cells in both reads, never in neither.
        let memtables_min = self.memtables().iter().filter_map(|m| m.min_ts()).min();
        #[cfg(test)]
        if let Some(hook) = self.cutoff_hook.lock().take() {
            hook(self);
        }
        let view = self.set.view();
        let (chosen, others): (Vec<&SegmentHandle>, Vec<&SegmentHandle>) = view
            .segments
            .iter()
            .partition(|h| ids.contains(&h.name().id));
        if chosen.len() != ids.len() {
            return Err(Error::InvalidArgument(format!(
                "compaction of {}: some of segments {ids:?} are not live",
                self.name
            )));
        }
        // Invariant 5: the cutoff is below every cell outside the merge.
        let gc = self
            .ctx
            .clock
            .wall_micros()
            .saturating_sub(self.config.load().gc_grace_secs.saturating_mul(1_000_000));
        let cutoff = others
            .iter()
            .map(|h| h.stats().min_ts)
            .chain(memtables_min)
            .fold(gc, u64::min);
        let sources: Vec<BoxedSource<'static>> = chosen
            .iter()
            .map(|h| {
                SegmentIter::new::<&[u8]>((*h).clone(), ..)
                    .map(|it| Box::new(it) as BoxedSource<'static>)
            })
            .collect::<Result<_>>()?;
        let filter = self.compaction_filter.read().clone();
        // The inputs' range tombstones: the cells they delete are dropped; they stay
        // unless under the cutoff, as point tombstones (invariant 5).
        let mut ranges = RangeTombstones::new();
        for h in &chosen {
            ranges.extend(h.range_tombstones());
        }
        let range_filter = RangeFilter {
            ranges: Arc::new(ranges.clone()),
            newest: vec![u64::MAX; sources.len()],
        };
        ranges.retain(|r| r.ts >= cutoff);
        let mut writer = None;
        if !ranges.is_empty() {
            writer
                .insert(self.set.writer()?)
                .add_range_tombstones(&ranges)?;
        }
        let policy = TombstonePolicy::DropOlderThan(cutoff);
        for e in MergeIter::with_ranges(sources, policy, range_filter) {
            let e = e?;
            // A failing filter returns here: the unfinished writer discards its files.
            let (value, tombstone) = match (&filter, e.tombstone) {
                (Some(f), false) => match decide(&**f, &self.name, &e.key, &e.value, e.ts)? {
                    FilterDecision::Keep => (Cow::Borrowed(&e.value[..]), false),
                    // Nothing older outside the merge to hide (invariant 5's cutoff).
                    FilterDecision::Remove if e.ts < cutoff => continue,
                    FilterDecision::Remove => (Cow::Borrowed(&[][..]), true),
                    FilterDecision::Replace(v) => (Cow::Owned(v), false),
                },
                _ => (Cow::Borrowed(&e.value[..]), e.tombstone),
            };
            let w = match &mut writer {
                Some(w) => w,
                None => writer.insert(self.set.writer()?),
            };
            w.add(&e.key, &value, e.ts, tombstone)?;
        }
        let new = match writer {
            Some(w) => {
                let name = w.name().clone();
                w.finish()?;
                vec![name]
            }
            None => Vec::new(),
        };
        drop(chosen);
        drop(others);
        drop(view);
        self.set.replace(ids, &new)?;
        self.compactions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(table = %self.name, merged = ?ids, into = ?new, "compaction done");
        Ok(())
    }
}
