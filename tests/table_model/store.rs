//! The store under test: the tables every check reads, their settings, and `gamma`'s
//! compaction filter.

use std::path::Path;
use std::sync::Arc;

use segstore::{
    CommitLogConfig, CommitLogSync, CompactionStrategy, Config, DiskAccessMode, FileRules,
    FilterDecision, Store, TableConfig,
};

use crate::common;

/// The tables every check reads.
pub(crate) const TABLES: [&str; 3] = ["alpha", "beta", "gamma"];

/// `gamma`'s filter, as the store runs it and as the model applies it.
pub(crate) fn gamma_filter(value: &[u8]) -> FilterDecision {
    match value.last() {
        Some(b'7') => FilterDecision::Remove,
        Some(b'3') => FilterDecision::Replace([value, b"!"].concat()),
        _ => FilterDecision::Keep,
    }
}

/// Open the store with `gamma`'s own settings and its filter.
pub(crate) fn open(dir: &Path, mode: DiskAccessMode, now: u64) -> Store {
    let s = Store::open(dir, cfg(mode)).unwrap();
    s.set_expiry_clock(Some(now));
    let mut own = cfg(mode).table;
    own.background_compaction = false;
    let g = s.table_with("gamma", own).unwrap();
    s.table_with("beta", leveled(mode)).unwrap();
    g.set_compaction_filter(Some(Arc::new(|_: &str, _: &[u8], v: &[u8], _: u64| {
        gamma_filter(v)
    })));
    s
}

/// `beta`'s settings: leveled compaction with segments of 1 KiB, level 1 of 1 KiB,
/// each level twice the one above, a compaction at every second flush; in `standard`
/// and `auto`, level 0 merged into one segment below 8 KiB (`l0_merge_bytes`) and
/// into level 1 at every fourth flush, so the model covers level 0 merges too.
fn leveled(mode: DiskAccessMode) -> TableConfig {
    let mut t = cfg(mode).table;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.target_segment_size = 1024;
    t.compaction.base_level_size = 1024;
    t.compaction.level_multiplier = 2;
    t.compaction.l0_trigger = 2;
    if matches!(mode, DiskAccessMode::Standard | DiskAccessMode::Auto) {
        t.compaction.l0_trigger = 4;
        t.compaction.l0_merge_bytes = 8192;
    }
    t
}

pub fn cfg(mode: DiskAccessMode) -> Config {
    let mut c = common::test_config(mode, FileRules::posix());
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 4096;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 2500;
    // The explicit timestamps (1..50 µs after the epoch) are far past any gc grace: a
    // compaction may purge an old tombstone and let an older cell written after it
    // come back, which the model does not follow. Nothing is purged here (purging is
    // tested on its own: tests/table_range_delete.rs, tests/table_behaviour.rs).
    c.table.gc_grace_secs = u64::MAX / 1_000_000;
    c.table.max_frozen_memtables = 2;
    // Size-tiered here (alpha, gamma), leveled in `beta`: both policies run.
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c.table.compaction.min_threshold = 3;
    c.table.compaction.max_threshold = 6;
    c.table.compaction.min_segment_size = 1 << 20;
    c
}
