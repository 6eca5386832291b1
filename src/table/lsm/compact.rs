//! Compaction: a round of the table's policy (size-tiered, `table::compaction`, or
//! leveled, `table::leveled`), major compaction, and the merge both carry out
//! (invariant 5), its output one segment or segments of the leveled target size
//! (`output.rs`), paced by the table's `write_bytes_per_sec`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::output::Outputs;
use super::{Table, TableConfig};
use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstones;
use crate::lifecycle::SegmentHandle;
use crate::segment::{Entry, RecordRef, SegmentIter, SegmentName};
use crate::table::compaction::{choose, Choice, CompactionStrategy, SegmentSummary};
use crate::table::compaction_filter::{decide, CompactionFilter, FilterDecision};
use crate::table::leveled::{self, LevelSummary, Span};
use crate::table::merge::{BoxedSource, MergeIter, RangeFilter, TombstonePolicy};

/// Shorter waits of the rate limit are saved up rather than slept one by one.
const MIN_PAUSE: Duration = Duration::from_millis(5);

/// Where a merge's output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement {
    /// The level the manifest gives the output (0: none).
    level: u32,
    /// Cut the output into segments of about this many bytes (`None`: one segment).
    target: Option<u64>,
}

/// What a compaction round's policy chose ([`Table::plan_round`]).
enum Plan {
    /// Nothing to do.
    Nothing,
    /// Segments moved to another level by the manifest alone (done).
    Moved,
    /// Merge `ids` into `placement`, each output holding `held` flushes (the
    /// `leveled::choose` rule 1's count); `for_reads`: that many level 0 segments merged
    /// into one for reads.
    Merge {
        ids: Vec<u64>,
        placement: Placement,
        held: u32,
        for_reads: Option<u64>,
    },
}

/// The flushes the segments `ids` of `summaries` hold together.
fn flushes_held(summaries: &[LevelSummary], ids: &[u64]) -> u32 {
    summaries
        .iter()
        .filter(|s| ids.contains(&s.id))
        .map(|s| s.runs.max(1))
        .fold(0u32, u32::saturating_add)
}

/// What a round of background compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Round {
    /// Merged segments: there may be more to do.
    Merged,
    /// The policy chose nothing.
    Nothing,
    /// Another compaction of the table holds its lock; it will look again.
    Busy,
}

impl Placement {
    pub(super) const ONE_SEGMENT: Placement = Placement {
        level: 0,
        target: None,
    };
}

/// The keys a segment's cells and range tombstones cover.
pub(super) fn span_of(h: &SegmentHandle) -> Span {
    let s = h.stats();
    let mut span = (s.entry_count > 0).then(|| Span::of_keys(&s.min_key, &s.max_key));
    let ranges = h.range_tombstones();
    if let (Some(first), Some(last)) = (ranges.fragments().first(), ranges.fragments().last()) {
        let r = Span {
            start: first.start.clone(),
            end: last.end.clone(),
        };
        span = Some(span.map_or_else(|| r.clone(), |s| s.union(&r)));
    }
    span.unwrap_or(Span {
        start: vec![0],
        end: Some(vec![0]),
    })
}

impl Table {
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

    /// The segments of `view` with their levels (the manifest's) and spans.
    pub(super) fn level_summaries(&self, view: &[SegmentHandle]) -> Vec<LevelSummary> {
        let levels = self.set.levels();
        let runs = self.l0_runs.lock();
        view.iter()
            .map(|h| LevelSummary {
                id: h.name().id,
                level: levels.get(&h.name().id).copied().unwrap_or(0),
                data_bytes: h.stats().data_len,
                span: span_of(h),
                runs: runs.get(&h.name().id).copied().unwrap_or(1),
            })
            .collect()
    }

    /// The level of every live segment: the manifest's, 0 for a segment it gives none
    /// (ids ascending).
    pub fn segment_levels(&self) -> Vec<(u64, u32)> {
        let levels = self.set.levels();
        let mut out: Vec<(u64, u32)> = self
            .set
            .view()
            .segments
            .iter()
            .map(|h| (h.name().id, levels.get(&h.name().id).copied().unwrap_or(0)))
            .collect();
        out.sort_unstable();
        out
    }

    /// One round of the table's compaction policy.
    ///
    /// A compaction of the table already running (a caller's `compact()`, or another
    /// compaction thread's round) makes this round [`Round::Busy`] rather than wait:
    /// the thread stays free for other tables, and a close never waits for it behind a
    /// long major compaction. The holder is told to look again ([`Round::Nothing`]
    /// asks [`Table::compaction_rerun`] before it gives up), so a flush whose round
    /// found the table busy is not forgotten.
    pub(crate) fn compact_once(&self) -> Result<Round> {
        let guard = match self.compaction_lock.try_lock() {
            Some(g) => g,
            None => {
                self.compaction_rerun.store(true, Ordering::SeqCst);
                // The holder may have looked and left just before the flag was set.
                match self.compaction_lock.try_lock() {
                    Some(g) => g,
                    None => return Ok(Round::Busy),
                }
            }
        };
        let merged = self.compact_round()?;
        if !merged {
            self.refresh_side_run();
        }
        drop(guard);
        Ok(if merged { Round::Merged } else { Round::Nothing })
    }

    /// Whether a round found the table busy since the last call (and clear it).
    pub(crate) fn compaction_rerun(&self) -> bool {
        self.compaction_rerun.swap(false, Ordering::SeqCst)
    }

    /// Run the table's compaction policy in this thread, round after round, until it
    /// chooses nothing (what the background compactions do after a flush; for tables
    /// with `background_compaction` off, tests and tools). Returns the rounds run.
    pub fn compact_pending(&self) -> Result<usize> {
        self.ctx.check_open()?;
        let _one_at_a_time = self.compaction_lock.lock();
        let mut rounds = 0;
        while self.compact_round()? {
            rounds += 1;
        }
        self.refresh_side_run();
        Ok(rounds)
    }

    /// [`Table::compact_once`] with the compaction lock held.
    fn compact_round(&self) -> Result<bool> {
        self.ctx.check_unsealed()?;
        let (ids, placement, held, for_reads) = match self.plan_round()? {
            Plan::Nothing => return Ok(false),
            Plan::Moved => return Ok(true),
            Plan::Merge {
                ids,
                placement,
                held,
                for_reads,
            } => (ids, placement, held, for_reads),
        };
        let new = self.merge_segments(&ids, placement)?;
        self.note_runs(&ids, &new, held);
        if let Some(n) = for_reads {
            // Level 0's `n` segments are one now, for the seeks scans made into them
            // (each into every one, a flush each, until now). A seek into the one
            // counts once per flush it holds toward the merge into level 1
            // (`leveled::choose_for_reads`): the count goes on in those units, `1/n` of
            // the seeks.
            let _ = self
                .scan_seeks
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v / n));
        }
        Ok(true)
    }

    /// What the table's compaction strategy chooses now (a leveled move that needs no
    /// merge is carried out here).
    fn plan_round(&self) -> Result<Plan> {
        let config = self.config();
        let view = self.set.view();
        match config.compaction.strategy {
            CompactionStrategy::SizeTiered => {
                Ok(match choose(&Self::summaries(&view.segments), &config.compaction) {
                    Choice::DoNothing => Plan::Nothing,
                    Choice::Merge(ids) => Plan::Merge {
                        ids,
                        placement: Placement::ONE_SEGMENT,
                        held: 1,
                        for_reads: None,
                    },
                })
            }
            CompactionStrategy::Leveled => {
                let summaries = self.level_summaries(&view.segments);
                drop(view);
                self.plan_leveled(&summaries, &config)
            }
        }
    }

    /// The leveled policy's choice over `summaries`: its rules for writes, else its
    /// rule for reads, which the scans' seeks since level 0's last merge into level 1
    /// decide (a merge into level 1 starts that count over).
    fn plan_leveled(&self, summaries: &[LevelSummary], config: &TableConfig) -> Result<Plan> {
        let seeks = self.scan_seeks.load(Ordering::Relaxed);
        let (choice, for_reads) = match leveled::choose(summaries, &config.compaction.leveled()) {
            Some(c) => (Some(c), false),
            None => (leveled::choose_for_reads(summaries, seeks), true),
        };
        let Some(c) = choice else {
            return Ok(Plan::Nothing);
        };
        if c.to_level == 1 {
            // Level 0 merges away: the seeks into it are paid for.
            self.scan_seeks.store(0, Ordering::Relaxed);
        }
        // A compaction filter sees every cell its compactions write: a table with one
        // rewrites what it could have moved.
        if leveled::moves_alone(summaries, &c) && self.compaction_filter.read().is_none() {
            self.set.move_to_level(&c.ids, c.to_level)?;
            self.note_runs(&c.ids, &[], 1);
            self.moves.fetch_add(c.ids.len() as u64, Ordering::Relaxed);
            tracing::debug!(table = %self.name, moved = ?c.ids, level = c.to_level, "segments moved");
            return Ok(Plan::Moved);
        }
        let (placement, held) = match c.to_level {
            // Level 0 merged into one segment (one: pieces would be merged again),
            // holding its inputs' flushes.
            0 => (Placement::ONE_SEGMENT, flushes_held(summaries, &c.ids)),
            level => {
                let target = Some(config.compaction.target_segment_size);
                (Placement { level, target }, 1)
            }
        };
        let for_reads = (for_reads && c.to_level != 1).then_some(c.ids.len() as u64);
        Ok(Plan::Merge {
            ids: c.ids,
            placement,
            held,
            for_reads,
        })
    }

    /// The flushes level 0 segments hold (`leveled::choose`'s rule 1): `merged`'s are
    /// gone; each of `new` holds `held` (1, the default, is not kept; only a level 0
    /// merge, whose one output is at level 0, holds more).
    fn note_runs(&self, merged: &[u64], new: &[u64], held: u32) {
        let mut runs = self.l0_runs.lock();
        for id in merged {
            runs.remove(id);
        }
        if held > 1 {
            for &id in new {
                runs.insert(id, held);
            }
        }
    }

    /// Where a major compaction of `ids` puts its output: one segment (size-tiered), or
    /// segments of the target size in the first level whose budget holds them all, and
    /// no higher than the deepest level now (leveled).
    fn major_placement(&self, ids: &[u64]) -> Placement {
        let config = self.config();
        let c = &config.compaction;
        if c.strategy == CompactionStrategy::SizeTiered {
            return Placement::ONE_SEGMENT;
        }
        let view = self.set.view();
        let summaries = self.level_summaries(&view.segments);
        let bytes: u64 = summaries
            .iter()
            .filter(|s| ids.contains(&s.id))
            .map(|s| s.data_bytes)
            .sum();
        let deepest = summaries.iter().map(|s| s.level).max().unwrap_or(0);
        let params = c.leveled();
        let fits = (1..64).find(|&n| params.budget(n) >= bytes).unwrap_or(64);
        Placement {
            level: fits.max(deepest).max(1),
            target: Some(c.target_segment_size),
        }
    }

    /// Major compaction: flush, then merge every segment into one (size-tiered) or into
    /// one level of segments of the target size (leveled), dropping tombstones past
    /// `gc_grace` (invariant 5) and running the compaction filter, if one is set, on
    /// every live cell (a sole segment is rewritten for it too, and for cells expired
    /// since it was written: they become tombstones).
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        let _one_at_a_time = self.compaction_lock.lock();
        self.ctx.check_unsealed()?;
        let view = self.set.view();
        let ids: Vec<u64> = view.segments.iter().map(|h| h.name().id).collect();
        let filtered = self.compaction_filter.read().is_some();
        let now = self.ctx.clock.expiry_now();
        let purgeable = view.segments.iter().any(|h| {
            let s = h.stats();
            s.tombstone_count > 0
                || !h.range_tombstones().is_empty()
                || (s.expiring_count > 0 && s.min_expires <= now)
        });
        drop(view);
        if ids.len() > 1 || (filtered && !ids.is_empty()) || purgeable {
            let new = self.merge_segments(&ids, self.major_placement(&ids))?;
            self.note_runs(&ids, &new, 1);
            // No level 0 is left: the seeks scans made into it are paid for.
            self.scan_seeks.store(0, Ordering::Relaxed);
        }
        // The worker skipped rounds while this ran; flushes meanwhile may want one.
        self.ctx.schedule_compaction(self);
        Ok(())
    }

    /// Merge segments `ids` into segments placed as `placement` says (none, if nothing
    /// survives). The caller holds the compaction lock.
    pub(super) fn merge_segments(&self, ids: &[u64], placement: Placement) -> Result<Vec<u64>> {
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
        // Invariant 5: the cutoff is below every cell outside the merge (every other
        // segment, whatever its level or span, and the memtables).
        let config = self.config();
        let gc = self
            .ctx
            .clock
            .wall_micros()
            .saturating_sub(config.gc_grace_secs.saturating_mul(1_000_000));
        let outside = others
            .iter()
            .map(|h| h.stats().min_ts)
            .chain(memtables_min)
            .fold(u64::MAX, u64::min);
        let cutoff = outside.min(gc);
        // Expiry (TTL): judged at the expiry clock's reading; an expired cell, as a
        // tombstone, is purged once its expiry is `gc_grace` old (Cassandra's local
        // deletion time) and nothing outside is older than it (invariant 5).
        let expiry = Expiry {
            now: self.ctx.clock.expiry_now(),
            grace: config.gc_grace_secs.saturating_mul(1_000_000),
            outside,
        };
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
        let mut out = Outputs::new(
            &self.set,
            placement.target,
            ranges,
            config.compaction.write_bytes_per_sec,
            config.compression,
        );
        let policy = TombstonePolicy::DropOlderThan(cutoff);
        let cells = MergeIter::with_ranges(sources, policy, range_filter);
        self.write_cells(cells, &expiry, filter.as_deref(), cutoff, &mut out)?;
        let new = out.finish()?;
        drop(chosen);
        drop(others);
        drop(view);
        self.set.replace_at_level(ids, &new, placement.level)?;
        self.count_compaction(ids, &new, placement.level);
        Ok(new.iter().map(|n| n.id).collect())
    }

    /// After `ids` were replaced by `new` at `level`: the new segments checked as
    /// written, and the table's compaction count and bytes added to.
    fn count_compaction(&self, ids: &[u64], new: &[SegmentName], level: u32) {
        self.check_written(new, true);
        self.compactions.fetch_add(1, Ordering::Relaxed);
        let written: u64 = self
            .set
            .view()
            .segments
            .iter()
            .filter(|h| new.contains(h.name()))
            .map(|h| h.stats().data_len)
            .sum();
        self.compaction_bytes.fetch_add(written, Ordering::Relaxed);
        tracing::debug!(table = %self.name, merged = ?ids, into = ?new, level, "compaction done");
    }
}

impl Table {
    /// Write the merged `cells` to `out`: expired cells judged by `expiry` (purged, or
    /// kept as tombstones), the compaction filter applied to live ones (a removal below
    /// `cutoff` drops the cell: nothing older outside the merge to hide, invariant 5),
    /// each write paced by the rate limit.
    fn write_cells(
        &self,
        cells: impl Iterator<Item = Result<Entry>>,
        expiry: &Expiry,
        filter: Option<&dyn CompactionFilter>,
        cutoff: u64,
        out: &mut Outputs,
    ) -> Result<()> {
        for e in cells {
            let e = e?;
            match expiry.judge(&e) {
                Judged::Live => {}
                Judged::Purge => continue,
                Judged::Tombstone(t) => {
                    out.add(t)?;
                    self.pace(out)?;
                    continue;
                }
            }
            // A failing filter returns here: the unfinished outputs discard their files.
            let (value, tombstone) = match (filter, e.tombstone) {
                (Some(f), false) => match decide(f, &self.name, &e.key, &e.value, e.ts)? {
                    FilterDecision::Keep => (Cow::Borrowed(&e.value[..]), false),
                    // Nothing older outside the merge to hide (invariant 5's cutoff).
                    FilterDecision::Remove if e.ts < cutoff => continue,
                    FilterDecision::Remove => (Cow::Borrowed(&[][..]), true),
                    FilterDecision::Replace(v) => (Cow::Owned(v), false),
                },
                _ => (Cow::Borrowed(&e.value[..]), e.tombstone),
            };
            // A replaced value keeps the cell's expiry; a removal is a plain tombstone.
            let expires = if tombstone { 0 } else { e.expires };
            out.add(RecordRef {
                key: &e.key,
                value: &value,
                ts: e.ts,
                tombstone,
                expires,
            })?;
            self.pace(out)?;
        }
        Ok(())
    }

    /// The compaction rate limit's pause after a cell written to `out`.
    fn pace(&self, out: &Outputs) -> Result<()> {
        let pause = out.pause();
        if pause >= MIN_PAUSE {
            self.ctx.pace(pause)?;
        }
        Ok(())
    }
}

/// What compaction knows to judge expiring cells (TTL) by.
struct Expiry {
    /// The expiry clock's reading.
    now: u64,
    /// `gc_grace` in microseconds.
    grace: u64,
    /// The oldest timestamp of a cell outside the merge (invariant 5).
    outside: u64,
}

/// What becomes of a merged cell, as far as expiry goes.
enum Judged<'a> {
    /// Not expired, nor a tombstone made from an expired cell: as any cell.
    Live,
    /// A tombstone at the cell's timestamp, its expiry kept as the local deletion time.
    Tombstone(RecordRef<'a>),
    /// Gone: an expired cell (or its tombstone) `gc_grace` past its expiry, with nothing
    /// older outside the merge that it must still hide.
    Purge,
}

impl Expiry {
    fn judge<'a>(&self, e: &'a Entry) -> Judged<'a> {
        let expired = e.expires != 0 && (e.tombstone || e.expires <= self.now);
        if !expired {
            return Judged::Live;
        }
        if e.ts < self.outside && e.expires <= self.now.saturating_sub(self.grace) {
            return Judged::Purge;
        }
        Judged::Tombstone(RecordRef {
            key: &e.key,
            value: &[],
            ts: e.ts,
            tombstone: true,
            expires: e.expires,
        })
    }
}
