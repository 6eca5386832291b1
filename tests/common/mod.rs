//! Helpers shared by integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use segstore::io::FileRules;
use segstore::lifecycle::SegmentSet;
use segstore::segment::SegmentName;
use segstore::{Config, DeletePolicy, DiskAccessMode, SegmentOptions};

/// A config for tests: tiny blocks, leak tracking, deferral, the given rules and mode.
pub fn test_config(mode: DiskAccessMode, rules: FileRules) -> Config {
    Config {
        disk_access_mode: mode,
        segment: SegmentOptions {
            index_block_size: 64,
            filter_bits_per_key: 10,
        },
        delete_policy: DeletePolicy::DeferWhileMapped,
        track_leaks: true,
        file_rules: rules,
        ..Config::default()
    }
}

/// Write `entries` (key -> (value, ts)) as one new segment of `set` and add it.
pub fn flush(set: &SegmentSet, entries: &BTreeMap<Vec<u8>, (Vec<u8>, u64)>) -> SegmentName {
    let mut w = set.writer().unwrap();
    for (k, (v, ts)) in entries {
        w.add(k, v, *ts, false).unwrap();
    }
    let stats_name = writer_name(&w);
    w.finish().unwrap();
    set.add(std::slice::from_ref(&stats_name)).unwrap();
    stats_name
}

/// The name a writer will publish under.
pub fn writer_name(w: &segstore::segment::SegmentWriter) -> SegmentName {
    w.name().clone()
}

/// Newest value of `key` across the set's current view.
pub fn read(set: &SegmentSet, key: &[u8]) -> Option<Vec<u8>> {
    let view = set.view();
    let mut best: Option<(u64, Vec<u8>)> = None;
    for h in &view.segments {
        if let Some((ts, v)) = h.get_with(key, |r| (r.ts, r.value.to_vec())).unwrap() {
            if best.as_ref().is_none_or(|(bt, _)| ts > *bt) {
                best = Some((ts, v));
            }
        }
    }
    best.map(|(_, v)| v)
}

/// Files directly in `dir` (names), sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
