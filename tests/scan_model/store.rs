//! The store of a case: its config from the setup, and its one table `t`.

use std::path::Path;
use std::sync::Arc;

use segstore::{
    CompactionStrategy, Compression, Config, DiskAccessMode, FileRules, Store, Table, TableConfig,
};

use crate::common;
use crate::model::START_CLOCK;
use crate::ops::Setup;

/// Open the store in `dir` with the expiry clock at [`START_CLOCK`], and its table.
pub(crate) fn open(dir: &Path, s: &Setup) -> (Store, Arc<Table>) {
    let store = Store::open(dir, config(s)).unwrap();
    store.set_expiry_clock(Some(START_CLOCK));
    let t = store.table_with("t", table_config(s)).unwrap();
    (store, t)
}

fn config(s: &Setup) -> Config {
    let mode = match s.mmap {
        true => DiskAccessMode::Mmap,
        false => DiskAccessMode::Standard,
    };
    let mut c = common::test_config(mode, FileRules::posix());
    c.segment.format_version = s.format;
    c.segment.data_block_size = s.block;
    c.segment.compression = match s.compression {
        0 => Compression::None,
        1 => Compression::Lz4,
        _ => Compression::Zstd,
    };
    c.table = unattended();
    c
}

/// Memtables frozen, flushed and compacted by the case's own operations only; every
/// tombstone kept, so a cell at an explicit old timestamp never outlives the tombstone
/// that beat it (the model keeps every tombstone).
fn unattended() -> TableConfig {
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.gc_grace_secs = u64::MAX;
    t.memtable_flush_bytes = 64 << 20;
    t.max_frozen_memtables = 16;
    t
}

/// Leveled with 1 KiB segments, a 2 KiB level 1 and a compaction at every second
/// flush (chains of disjoint segments soon), or size-tiered from two segments.
fn table_config(s: &Setup) -> TableConfig {
    let mut t = unattended();
    let c = &mut t.compaction;
    if s.leveled {
        c.strategy = CompactionStrategy::Leveled;
        c.target_segment_size = 1024;
        c.base_level_size = 2048;
        c.level_multiplier = 2;
        c.l0_trigger = 2;
    } else {
        c.strategy = CompactionStrategy::SizeTiered;
        c.min_threshold = 2;
        c.min_segment_size = 1;
    }
    t
}
