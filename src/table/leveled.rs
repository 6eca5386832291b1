//! The leveled compaction policy (LevelDB's, RocksDB's leveled, Cassandra's LCS), as a
//! pure function: [`choose`] looks at the live segments with their levels and key spans
//! and returns which to merge and into which level. The table's worker carries the
//! choice out (`lsm/maintenance.rs`), splitting the output into segments of
//! `target_segment_size`.
//!
//! # Layout
//! Level 0 holds flushed segments, whose key spans overlap. Each level `n >= 1` holds
//! segments whose key spans are pairwise disjoint, about `target_segment_size` each, and
//! about `base_level_size * level_multiplier^(n-1)` bytes in all. A key's cells are
//! then in at most one segment per level `n >= 1`.
//!
//! # The algorithm
//! 1. Level 0 holding `l0_trigger` flushes or more (a flushed segment holds one, a
//!    level 0 merge's output the sum of its inputs': [`LevelSummary::runs`]): merge
//!    every level 0 segment with the level 1 segments the union of their spans
//!    overlaps, into level 1.
//! 2. Otherwise, two or more level 0 segments whose data bytes together are below
//!    `l0_merge_bytes`, and two of which overlap: merge them into one level 0 segment
//!    (segments whose spans are disjoint, as keys written in ascending order leave,
//!    are left for rule 1 to move: a scan meets only those its range does). A scan
//!    seeks into every level 0 segment its range meets, and with random keys that is
//!    all of them: in YCSB E's end state (1M keys, 20,000 in the memtable), 1..100-row
//!    scans took 8.3 to 8.7 µs over one level 0 segment of 244K keys against 11.0 to
//!    12.4 over three of 88K (a scratch program, 2 vCPUs). The cells of each flush are
//!    written once more per later flush until level 0 merges into level 1.
//! 3. Otherwise the level `n >= 1` whose bytes exceed its budget by the largest ratio
//!    (bytes / budget, at least 1) gives one segment: the one whose overlap with level
//!    `n + 1` is the fewest bytes per byte of its own (RocksDB's
//!    `kMinOverlappingRatio`: the cheapest to push down), ties to the smallest id. It is
//!    merged with the level `n + 1` segments its span overlaps, into level `n + 1`.
//! 4. Otherwise nothing.
//!
//! A choice whose segments overlap nothing in the level they go to, nor one another,
//! is carried out by the manifest alone ([`moves_alone`]: RocksDB's trivial move).
//!
//! And one rule for reads ([`choose_for_reads`], asked when those choose nothing):
//! scans seek into every level 0 segment their range meets (with random keys, all of
//! them), about 1 µs each on a 1M-key table, while level 1 is one sorted chain they
//! read in order. Once the seeks scans have made into level 0 since its last merge into
//! level 1, at [`SCAN_SEEK_BYTES`] each, add up to the bytes that merge would read
//! (level 0 and the level 1 segments it overlaps), level 0 merges into level 1 below
//! `l0_trigger`: the reads have then paid as much as the merge costs, so a table that
//! is scanned more than it is written converges to no level 0 at all, and one that is
//! written more never pays more than twice what it would have (LevelDB's seek
//! compaction, `allowed_seeks`, weighed for seeks that hit memory, not a disk; but see
//! the seeks counted per flush below). Before that, two or more level 0 segments, two
//! of which overlap, merge into one level 0 segment once the seeks that merge saves
//! (each scan's into all but one) add up to level 0's bytes (RocksDB's intra-L0
//! compaction, for reads): a fraction of the merge into level 1 (in YCSB E's state,
//! three level 0 segments of 10 MB over 120 MB in level 1). The merged segment holds
//! its inputs' flushes, and a seek into it counts once per flush toward the merge into
//! level 1; once the merge is done, the table keeps the seeks counted before in those
//! units (`1/n` of them for `n` segments merged). So the merge into level 1 comes after
//! as many scans as it would have without the first, with random keys. (An earlier try
//! restarted the count and counted each seek once: the merge into level 1 then took `n`
//! times the scans, and level 0 stayed longer than without the first merge.) Counted
//! per flush, the seeks a merge into level 1 waits for may come to `k` times fewer
//! bytes than it writes, for a level 0 segment of `k` flushes (below `l0_trigger`): a
//! table merged that way, or kept to one level 0 segment by `l0_merge_bytes`, is merged
//! as if it held a segment per flush.
//!
//! # Invariants (property tests below, over simulated compactions)
//! 1. A [`LeveledChoice`] names distinct ids of the input, from levels `to_level - 1`
//!    and `to_level` only, and every segment of `to_level` whose span overlaps the
//!    union of the spans of the chosen upper-level segments; or, with `to_level` 0,
//!    every level 0 segment and nothing else.
//! 2. So, when the output's spans lie inside the union of the inputs' (a merge's do),
//!    levels `n >= 1` stay pairwise disjoint.
//! 3. The choice does not depend on the order of the input.
//!
//! Levels are kept in the table's manifest (`segment <id> <level>`), so they survive a
//! reopen; a segment the manifest gives no level is at level 0.

use std::cmp::Ordering;

pub(crate) use crate::format::ranges::successor;
use crate::format::ranges::{before_end, cmp_ends};

/// A half-open key span `[start, end)`, `end` `None` being past every key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Span {
    /// First key.
    pub start: Vec<u8>,
    /// First key past the span (`None`: unbounded).
    pub end: Option<Vec<u8>>,
}

impl Span {
    /// The span of cells from `min_key` to `max_key` inclusive.
    pub fn of_keys(min_key: &[u8], max_key: &[u8]) -> Span {
        Span {
            start: min_key.to_vec(),
            end: Some(successor(max_key)),
        }
    }

    /// Do the spans share a key?
    pub fn overlaps(&self, other: &Span) -> bool {
        before_end(&self.start, &other.end) && before_end(&other.start, &self.end)
    }

    /// The smallest span holding both.
    pub fn union(&self, other: &Span) -> Span {
        Span {
            start: self.start.clone().min(other.start.clone()),
            end: match cmp_ends(&self.end, &other.end) {
                Ordering::Less => other.end.clone(),
                _ => self.end.clone(),
            },
        }
    }

    /// Does `self` lie inside `outer`?
    pub fn within(&self, outer: &Span) -> bool {
        self.start >= outer.start && cmp_ends(&self.end, &outer.end).is_le()
    }
}

/// What the leveled policy needs to know about a segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LevelSummary {
    /// Segment id within its table.
    pub id: u64,
    /// Its level (0: flushed, spans overlap).
    pub level: u32,
    /// Bytes of its data component.
    pub data_bytes: u64,
    /// Keys its cells and range tombstones cover.
    pub span: Span,
    /// Flushes it holds, at level 0 (rule 1): 1 for a flush's segment, the sum of the
    /// inputs' for a level 0 merge's output (0 reads as 1).
    pub runs: u32,
}

/// The settings [`choose`] reads (from [`crate::table::CompactionConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeveledParams {
    /// Flushes held in level 0 that start its compaction into level 1.
    pub l0_trigger: usize,
    /// Level 0 segments below this many data bytes together merge into one (0: never).
    pub l0_merge_bytes: u64,
    /// Budget of level 1, bytes.
    pub base_level_size: u64,
    /// Each level's budget is this many times the one above.
    pub level_multiplier: u64,
}

impl LeveledParams {
    /// The byte budget of level `n >= 1`.
    pub fn budget(&self, n: u32) -> u64 {
        (1..n).fold(self.base_level_size, |b, _| {
            b.saturating_mul(self.level_multiplier)
        })
    }
}

/// What to compact, and where the output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeveledChoice {
    /// Segments to merge, ascending ids.
    pub ids: Vec<u64>,
    /// The level of every output segment.
    pub to_level: u32,
}

/// The segments of `view` at `level` whose spans overlap `span`.
fn overlapping<'a>(
    view: &'a [LevelSummary],
    level: u32,
    span: &'a Span,
) -> impl Iterator<Item = &'a LevelSummary> + 'a {
    view.iter()
        .filter(move |s| s.level == level && s.span.overlaps(span))
}

/// The choice merging `upper` (segments of `to_level - 1`) with every segment of
/// `to_level` that the union of their spans overlaps (the union, not each span: a
/// segment of `to_level` between two upper ones would end up inside the output).
fn with_overlaps(view: &[LevelSummary], upper: &[&LevelSummary], to_level: u32) -> LeveledChoice {
    let mut ids: Vec<u64> = upper.iter().map(|s| s.id).collect();
    if let Some(first) = upper.first() {
        let union = upper[1..]
            .iter()
            .fold(first.span.clone(), |u, s| u.union(&s.span));
        ids.extend(overlapping(view, to_level, &union).map(|s| s.id));
    }
    ids.sort_unstable();
    ids.dedup();
    LeveledChoice { ids, to_level }
}

/// Choose what to compact (module docs). `view` holds the table's live segments.
pub fn choose(view: &[LevelSummary], params: &LeveledParams) -> Option<LeveledChoice> {
    let l0: Vec<&LevelSummary> = view.iter().filter(|s| s.level == 0).collect();
    let runs: u64 = l0.iter().map(|s| u64::from(s.runs.max(1))).sum();
    if !l0.is_empty() && runs >= params.l0_trigger as u64 {
        return Some(with_overlaps(view, &l0, 1));
    }
    if l0.len() >= 2
        && l0.iter().map(|s| s.data_bytes).sum::<u64>() < params.l0_merge_bytes
        && !disjoint(l0.iter().map(|s| &s.span))
    {
        return Some(level_0_into_one(&l0));
    }
    let deepest = view.iter().map(|s| s.level).max().unwrap_or(0);
    // The most over-budget level: bytes / budget compared as fractions (no floats).
    let mut worst: Option<(u32, u128, u128)> = None;
    for n in 1..=deepest {
        let bytes: u128 = view
            .iter()
            .filter(|s| s.level == n)
            .map(|s| u128::from(s.data_bytes))
            .sum();
        let budget = u128::from(params.budget(n).max(1));
        if bytes <= budget {
            continue;
        }
        if worst.is_none_or(|(_, b, g)| bytes * g > b * budget) {
            worst = Some((n, bytes, budget));
        }
    }
    let (n, _, _) = worst?;
    // The segment of level n cheapest to push down: overlap bytes / own bytes, least.
    let pick = view
        .iter()
        .filter(|s| s.level == n)
        .map(|s| {
            let below: u128 = overlapping(view, n + 1, &s.span)
                .map(|o| u128::from(o.data_bytes))
                .sum();
            (s, below, u128::from(s.data_bytes.max(1)))
        })
        .min_by(|(a, ab, an), (b, bb, bn)| (ab * bn).cmp(&(bb * an)).then(a.id.cmp(&b.id)))
        .map(|(s, _, _)| s)?;
    Some(with_overlaps(view, &[pick], n + 1))
}

/// Whether `choice` can be carried out by giving its segments the level `to_level` in
/// the manifest, rewriting nothing (RocksDB's trivial move): it merges into a level
/// `n >= 1` and holds no segment of that level (none there overlaps the union of its
/// spans, invariant 1), and its segments' spans are pairwise disjoint (level 0's may
/// overlap one another; a deeper level's never do). Level `to_level` then stays
/// pairwise disjoint (invariant 2). Keys written in ascending order (a log, a time
/// series, an auto-increment key) flush into segments that overlap nothing, and each
/// of them used to be rewritten once per level on its way down.
pub fn moves_alone(view: &[LevelSummary], choice: &LeveledChoice) -> bool {
    if choice.to_level == 0 {
        return false;
    }
    let chosen: Vec<&LevelSummary> = view.iter().filter(|s| choice.ids.contains(&s.id)).collect();
    chosen.len() == choice.ids.len()
        && chosen.iter().all(|s| s.level + 1 == choice.to_level)
        && disjoint(chosen.iter().map(|s| &s.span))
}

/// Whether `spans` are pairwise disjoint.
fn disjoint<'a>(spans: impl Iterator<Item = &'a Span>) -> bool {
    let mut spans: Vec<&Span> = spans.collect();
    spans.sort_by(|a, b| a.start.cmp(&b.start));
    spans.windows(2).all(|w| !w[0].overlaps(w[1]))
}

/// Bytes of merge that one scan's seek into a level 0 segment is worth: about what this
/// machine's merges write in the 3 µs such a seek and its rows cost a 1..100-row scan
/// of a 1M-key table (YCSB E's end state: 16 µs a scan over three level 0 segments
/// and level 1, 7 µs over level 1 alone; merges run at some 80 MB/s). Measured again
/// after the scan and merge work of issue 19 (a scratch program, 2 vCPUs, two runs
/// each way): medians of 12.8 and 14.1 µs a scan over E's end state against 7.6 and
/// 6.1 over level 1 and the memtable, so 1.7 to 2.7 µs a seek; a major compaction of
/// that state (155 MB of files) took 0.69 to 0.85 s, some 200 MB/s. That is 340 to 540
/// bytes a seek: this constant merges up to twice later than those figures would.
/// Seeks have become cheaper since: on 2026-12-07, 1..100-row scans took a median of
/// 8.5 µs over three level 0 segments, level 1 and 20,000 memtable keys against 5.6
/// without level 0, 0.95 µs a seek, some 190 bytes of merge at 200 MB/s; this constant
/// merges up to 1.35 times sooner than that would.
pub const SCAN_SEEK_BYTES: u64 = 256;

/// The rule for reads (module docs): merge every level 0 segment with the level 1
/// segments they overlap once `seeks` scans' seeks into level 0, at
/// [`SCAN_SEEK_BYTES`] each and counted once per flush level 0 holds, come to the
/// bytes of that merge; before that, merge two or more level 0 segments, two of which
/// overlap, into one level 0 segment once the seeks that merge would have saved (each
/// scan's into all but one of them) come to level 0's bytes. `None` below both, or
/// with level 0 empty.
pub fn choose_for_reads(view: &[LevelSummary], seeks: u64) -> Option<LeveledChoice> {
    let l0: Vec<&LevelSummary> = view.iter().filter(|s| s.level == 0).collect();
    if l0.is_empty() {
        return None;
    }
    let n = l0.len() as u64;
    let paid = seeks.saturating_mul(SCAN_SEEK_BYTES);
    // A seek into a segment holding `k` flushes counts `k` here, as it would have with
    // the flushes apart: a merge of level 0 into one segment for reads (after which
    // the table keeps `seeks` in these units) does not put off its merge into level 1.
    let flushes: u64 = l0.iter().map(|s| u64::from(s.runs.max(1))).sum();
    let choice = with_overlaps(view, &l0, 1);
    let bytes: u64 = view
        .iter()
        .filter(|s| choice.ids.contains(&s.id))
        .map(|s| s.data_bytes)
        .sum();
    if paid.saturating_mul(flushes) / n >= bytes {
        return Some(choice);
    }
    let l0_bytes: u64 = l0.iter().map(|s| s.data_bytes).sum();
    let saved = paid / n * (n - 1);
    (n >= 2 && saved >= l0_bytes && !disjoint(l0.iter().map(|s| &s.span)))
        .then(|| level_0_into_one(&l0))
}

/// Every level 0 segment merged into one level 0 segment.
fn level_0_into_one(l0: &[&LevelSummary]) -> LeveledChoice {
    let mut ids: Vec<u64> = l0.iter().map(|s| s.id).collect();
    ids.sort_unstable();
    LeveledChoice { ids, to_level: 0 }
}

/// The level an ingested segment of `data_bytes` spanning `span` joins, in a table
/// whose live segments are `view` (the segments the same ingest placed before it
/// included): the deepest level `n >= 1` none of whose segments its span overlaps, up
/// to the deeper of the table's deepest level and the first level whose budget holds
/// it; 0 where each of those levels holds an overlapping segment. RocksDB ingests into
/// the deepest level a file fits without overlap, for the same reason: loaded data
/// counts toward no `l0_trigger`, and a merge rewrites it only when later writes reach
/// its keys.
///
/// Any level is correct for reads and merges, which rank cells by timestamp alone
/// (`lsm/read.rs`, and `lsm/compact.rs` invariant 5: the purge cutoff is below every
/// cell outside a merge, whatever its level); the check of the chosen level keeps
/// invariant 2 (levels `n >= 1` pairwise disjoint).
pub fn ingest_level(
    view: &[LevelSummary],
    span: &Span,
    data_bytes: u64,
    params: &LeveledParams,
) -> u32 {
    let deepest = view.iter().map(|s| s.level).max().unwrap_or(0);
    // The first level whose budget holds the segment (a level's budget grows tenfold
    // from one to the next by default: a few steps at most).
    let mut fits = 1;
    while params.budget(fits) < data_bytes && params.budget(fits) < params.budget(fits + 1) {
        fits += 1;
    }
    (1..=deepest.max(fits))
        .rev()
        .find(|&n| overlapping(view, n, span).next().is_none())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
