//! The size-tiered compaction policy (Cassandra's STCS), as a pure function, and the
//! settings of compaction ([`CompactionConfig`]; the leveled policy is
//! [`crate::table::leveled`]).
//!
//! [`choose`] looks at summaries of the live segments that are not being compacted and
//! returns which to merge; a worker (phase 2) carries the choice out. Keeping the policy
//! free of I/O and of the lifecycle types makes it testable with plain values.
//!
//! # The algorithm
//! 1. Sort the segments by data size (then id, for determinism).
//! 2. Bucket them: each segment joins the first bucket whose average size `avg`
//!    satisfies `avg * bucket_low < size < avg * bucket_high`, or, if the segment is
//!    smaller than `min_segment_size`, the first bucket whose average is also below it
//!    (all small segments form one tier). Otherwise it starts a bucket. The average is
//!    updated as segments join.
//! 3. Buckets with at least `min_threshold` segments are candidates; each is trimmed to
//!    its `max_threshold` smallest segments.
//! 4. The candidate with the smallest average size wins: Cassandra breaks ties between
//!    equally hot buckets the same way, and without read statistics every bucket is
//!    equally hot. Compacting small tiers first keeps the segment count low cheaply.
//!
//! # Invariants (each is a property test below)
//! 1. A [`Choice::Merge`] names between `min_threshold` and `max_threshold` distinct ids,
//!    all from the input, all from one bucket of [`buckets`].
//! 2. [`choose`] returns [`Choice::DoNothing`] exactly when no bucket reaches
//!    `min_threshold`.
//! 3. The choice does not depend on the order of the input.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the policy needs to know about a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SegmentSummary {
    /// Segment id within its table.
    pub id: u64,
    /// Bytes of its data component.
    pub data_bytes: u64,
    /// Cells in it (tombstones included).
    pub entry_count: u64,
    /// Smallest write timestamp.
    pub min_ts: u64,
    /// Largest write timestamp.
    pub max_ts: u64,
}

/// Which policy a table's background compactions follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionStrategy {
    /// Size-tiered (Cassandra's STCS, `table::compaction::choose`): few rewrites of
    /// each cell (low write amplification), more segments a read may search and more
    /// space held by overwritten cells until their tier merges.
    SizeTiered,
    /// Leveled (LevelDB, RocksDB, Cassandra's LCS, `table::leveled`; the default, as
    /// in RocksDB and fjall): at most one segment per level holds a key and little
    /// space goes to overwritten cells, at the price of rewriting each cell about
    /// `level_multiplier` times per level. A scan merges fewer segments (issue 19:
    /// YCSB E 1.6 times size-tiered's rate; README "Measured").
    #[default]
    Leveled,
}

impl CompactionStrategy {
    /// The name a configuration file and a table manifest use.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionStrategy::SizeTiered => "size_tiered",
            CompactionStrategy::Leveled => "leveled",
        }
    }
}

/// Settings of compaction: the policy, size-tiered's (Cassandra's names and defaults),
/// leveled's (RocksDB's defaults), and the rate limit both observe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CompactionConfig {
    /// The policy background compactions follow.
    pub strategy: CompactionStrategy,
    /// Fewest segments in a bucket before it is compacted (at least 2).
    pub min_threshold: usize,
    /// Most segments merged at once (at least `min_threshold`).
    pub max_threshold: usize,
    /// A segment joins a bucket if larger than `bucket_low` times its average...
    pub bucket_low: f64,
    /// ...and smaller than `bucket_high` times it.
    pub bucket_high: f64,
    /// Segments smaller than this all share one bucket.
    pub min_segment_size: u64,
    /// Leveled: a compaction's output is cut into segments of about this many data
    /// bytes (at least 1024).
    pub target_segment_size: u64,
    /// Leveled: this many flushes held in level 0 start a compaction into level 1 (at
    /// least 1). A flush's segment holds one; a segment that `l0_merge_bytes` merged
    /// holds those of its inputs (known while the table is open: after a reopen, every
    /// level 0 segment counts as one).
    pub l0_trigger: usize,
    /// Leveled: while level 0's segments hold fewer than this many data bytes together,
    /// a second one (a flush) merges them into one level 0 segment, so scans and gets
    /// search one there instead of one per flush. 0, the default: never (level 0 holds
    /// a segment per flush, as LevelDB's). Scans under writes gain (YCSB E 14% to 16%
    /// faster at 64 MiB); writes pay: each flush's cells are rewritten once more per
    /// later flush until level 0 merges into level 1, and that work runs beside the
    /// reads (README, Measured).
    pub l0_merge_bytes: u64,
    /// Leveled: the byte budget of level 1 (at least `target_segment_size`).
    pub base_level_size: u64,
    /// Leveled: each level's budget is this many times the one above (at least 2).
    pub level_multiplier: u64,
    /// Bytes per second compactions of the table may write, both policies and major
    /// compactions alike (0: no limit). Flushes are never limited.
    pub write_bytes_per_sec: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_threshold: 4,
            max_threshold: 32,
            bucket_low: 0.5,
            bucket_high: 1.5,
            min_segment_size: 50 * 1024 * 1024,
            strategy: CompactionStrategy::default(),
            target_segment_size: 64 * 1024 * 1024,
            l0_trigger: 4,
            l0_merge_bytes: 0,
            base_level_size: 256 * 1024 * 1024,
            level_multiplier: 10,
            write_bytes_per_sec: 0,
        }
    }
}

impl CompactionConfig {
    /// Leveled compaction's settings, as [`crate::table::leveled::choose`] reads them.
    pub(crate) fn leveled(&self) -> crate::table::leveled::LeveledParams {
        crate::table::leveled::LeveledParams {
            l0_trigger: self.l0_trigger,
            l0_merge_bytes: self.l0_merge_bytes,
            base_level_size: self.base_level_size,
            level_multiplier: self.level_multiplier,
        }
    }

    /// Check the settings, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting, value: String, reason: &str| {
            Err(Error::InvalidConfig {
                setting,
                value,
                reason: reason.into(),
            })
        };
        if self.min_threshold < 2 {
            return bad(
                "min_threshold",
                self.min_threshold.to_string(),
                "must be at least 2",
            );
        }
        if self.max_threshold < self.min_threshold {
            return bad(
                "max_threshold",
                self.max_threshold.to_string(),
                "must be at least min_threshold",
            );
        }
        if !(self.bucket_low > 0.0 && self.bucket_low <= 1.0) {
            return bad(
                "bucket_low",
                self.bucket_low.to_string(),
                "must be in (0, 1]",
            );
        }
        if !(self.bucket_high >= 1.0 && self.bucket_high.is_finite())
            || self.bucket_high <= self.bucket_low
        {
            return bad(
                "bucket_high",
                self.bucket_high.to_string(),
                "must be finite, at least 1 and above bucket_low",
            );
        }
        if self.target_segment_size < 1024 {
            return bad(
                "target_segment_size",
                self.target_segment_size.to_string(),
                "must be at least 1024",
            );
        }
        if self.l0_trigger == 0 {
            return bad("l0_trigger", "0".into(), "must be at least 1");
        }
        if self.base_level_size < self.target_segment_size {
            return bad(
                "base_level_size",
                self.base_level_size.to_string(),
                "must be at least target_segment_size",
            );
        }
        if self.level_multiplier < 2 {
            return bad(
                "level_multiplier",
                self.level_multiplier.to_string(),
                "must be at least 2",
            );
        }
        Ok(())
    }
}

/// What to compact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Nothing is worth compacting.
    DoNothing,
    /// Merge these segments (ids, smallest first) into one.
    Merge(Vec<u64>),
}

/// The buckets of the algorithm's step 2, each sorted by size then id, in order of
/// creation (ascending sizes).
pub fn buckets<'a>(
    view: &'a [SegmentSummary],
    config: &CompactionConfig,
) -> Vec<Vec<&'a SegmentSummary>> {
    let mut sorted: Vec<&SegmentSummary> = view.iter().collect();
    sorted.sort_by_key(|s| (s.data_bytes, s.id));
    let min_size = config.min_segment_size as f64;
    let mut out: Vec<(f64, Vec<&SegmentSummary>)> = Vec::new();
    for s in sorted {
        let size = s.data_bytes as f64;
        let joins = |avg: f64| {
            (size > avg * config.bucket_low && size < avg * config.bucket_high)
                || (size < min_size && avg < min_size)
        };
        match out.iter_mut().find(|(avg, _)| joins(*avg)) {
            Some((avg, members)) => {
                let n = members.len() as f64;
                *avg = (*avg * n + size) / (n + 1.0);
                members.push(s);
            }
            None => out.push((size, vec![s])),
        }
    }
    out.into_iter().map(|(_, m)| m).collect()
}

/// Choose the segments to compact. `view` holds the table's live segments that are not
/// already being compacted. See the module docs.
pub fn choose(view: &[SegmentSummary], config: &CompactionConfig) -> Choice {
    let mut best: Option<(f64, Vec<&SegmentSummary>)> = None;
    for mut bucket in buckets(view, config) {
        if bucket.len() < config.min_threshold {
            continue;
        }
        bucket.truncate(config.max_threshold);
        let avg = bucket.iter().map(|s| s.data_bytes as f64).sum::<f64>() / bucket.len() as f64;
        if best.as_ref().is_none_or(|(b, _)| avg < *b) {
            best = Some((avg, bucket));
        }
    }
    match best {
        Some((_, bucket)) => Choice::Merge(bucket.iter().map(|s| s.id).collect()),
        None => Choice::DoNothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(id: u64, data_bytes: u64) -> SegmentSummary {
        SegmentSummary {
            id,
            data_bytes,
            entry_count: data_bytes / 10,
            min_ts: id,
            max_ts: id + 1,
        }
    }

    fn cfg(min_segment_size: u64) -> CompactionConfig {
        CompactionConfig {
            min_segment_size,
            ..CompactionConfig::default()
        }
    }

    #[test]
    fn nothing_below_min_threshold() {
        let v = [seg(1, 100), seg(2, 110), seg(3, 90)];
        assert_eq!(choose(&v, &cfg(0)), Choice::DoNothing);
        assert_eq!(choose(&[], &cfg(0)), Choice::DoNothing);
    }

    #[test]
    fn similar_sizes_form_a_tier_and_outliers_do_not_join() {
        let v = [
            seg(1, 1000),
            seg(2, 1100),
            seg(3, 900),
            seg(4, 1050),
            seg(5, 100_000),
            seg(6, 10),
        ];
        assert_eq!(choose(&v, &cfg(0)), Choice::Merge(vec![3, 1, 4, 2]));
    }

    #[test]
    fn small_segments_share_one_bucket() {
        // Sizes 1..=4 KiB differ by 4x but are all below min_segment_size.
        let v = [seg(1, 1024), seg(2, 2048), seg(3, 3072), seg(4, 4096)];
        assert_eq!(choose(&v, &cfg(0)), Choice::DoNothing);
        assert_eq!(choose(&v, &cfg(1 << 20)), Choice::Merge(vec![1, 2, 3, 4]));
    }

    #[test]
    fn the_smallest_eligible_tier_wins_and_is_trimmed() {
        let mut v: Vec<_> = (0..40).map(|i| seg(i, 10_000 + i)).collect();
        v.extend((100..105).map(|i| seg(i, 1000)));
        let c = CompactionConfig {
            max_threshold: 8,
            ..cfg(0)
        };
        assert_eq!(choose(&v, &c), Choice::Merge(vec![100, 101, 102, 103, 104]));
        v.retain(|s| s.id < 100);
        assert_eq!(choose(&v, &c), Choice::Merge((0..8).collect()));
    }

    #[test]
    fn config_is_validated() {
        CompactionConfig::default().validate().unwrap();
        for bad in [
            CompactionConfig {
                min_threshold: 1,
                ..Default::default()
            },
            CompactionConfig {
                max_threshold: 3,
                ..Default::default()
            },
            CompactionConfig {
                bucket_low: 0.0,
                ..Default::default()
            },
            CompactionConfig {
                bucket_high: 0.9,
                ..Default::default()
            },
            CompactionConfig {
                bucket_low: 1.0,
                bucket_high: 1.0,
                ..Default::default()
            },
            CompactionConfig {
                target_segment_size: 100,
                ..Default::default()
            },
            CompactionConfig {
                l0_trigger: 0,
                ..Default::default()
            },
            CompactionConfig {
                base_level_size: 1 << 20,
                ..Default::default()
            },
            CompactionConfig {
                level_multiplier: 1,
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    fn view_strategy() -> impl Strategy<Value = Vec<SegmentSummary>> {
        // Sizes spread over a few orders of magnitude so several tiers appear.
        proptest::collection::vec((0u32..20, 1u64..1000), 0..60).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (exp, mant))| seg(i as u64, mant << (exp / 2)))
                .collect()
        })
    }

    fn config_strategy() -> impl Strategy<Value = CompactionConfig> {
        (2usize..6, 0usize..30, 0.2f64..1.0, 1.0f64..3.0, 0u64..5000).prop_map(
            |(min, extra, low, high, min_size)| CompactionConfig {
                min_threshold: min,
                max_threshold: min + extra,
                bucket_low: low,
                bucket_high: high.max(low + 0.01),
                min_segment_size: min_size,
                ..CompactionConfig::default()
            },
        )
    }

    proptest! {
        #[test]
        fn properties(view in view_strategy(), config in config_strategy(), seed: u64) {
            config.validate().unwrap();
            let bs = buckets(&view, &config);
            prop_assert_eq!(bs.iter().map(Vec::len).sum::<usize>(), view.len());
            let eligible = bs.iter().any(|b| b.len() >= config.min_threshold);
            match choose(&view, &config) {
                Choice::DoNothing => prop_assert!(!eligible, "invariant 2"),
                Choice::Merge(ids) => {
                    prop_assert!(eligible, "invariant 2");
                    // invariant 1
                    prop_assert!(ids.len() >= config.min_threshold);
                    prop_assert!(ids.len() <= config.max_threshold);
                    let mut uniq = ids.clone();
                    uniq.sort_unstable();
                    uniq.dedup();
                    prop_assert_eq!(uniq.len(), ids.len());
                    prop_assert!(ids.iter().all(|id| view.iter().any(|s| s.id == *id)));
                    prop_assert!(bs.iter().any(|b| ids.iter().all(|id| b.iter().any(|s| s.id == *id))));
                    // invariant 3: shuffle the input, same choice
                    let mut shuffled = view.clone();
                    let mut s = seed | 1;
                    for i in (1..shuffled.len()).rev() {
                        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                        shuffled.swap(i, (s % (i as u64 + 1)) as usize);
                    }
                    prop_assert_eq!(choose(&shuffled, &config), Choice::Merge(ids));
                }
            }
        }
    }
}
