//! Helpers shared by integration tests: store configs and segment-set helpers for the
//! lifecycle, table and repair tests; a `BTreeMap` model of a segment, writing it, and
//! opening it in a mode while checking the mapping count for the segment tests; and
//! ([`kill`]) the kill tests' child runner; ([`log`]) capturing what is logged.

#![allow(dead_code)] // each test file uses a different subset

pub mod corruption;
pub mod kill;
pub mod log;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use proptest::test_runner::Config as ProptestConfig;
use segstore::lifecycle::SegmentSet;
use segstore::segment::{
    Component, Entry, SegmentName, SegmentReader, SegmentStats, SegmentWriter,
};
use segstore::{Config, DeletePolicy, DiskAccessMode, FileRules, SegmentOptions};

/// A seeded xorshift64 generator: reproducible workloads without a dependency (the
/// seed must not be 0).
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A config for tests: tiny blocks, leak tracking, deferral, the given rules and mode.
pub fn test_config(mode: DiskAccessMode, rules: FileRules) -> Config {
    let mut c = Config::default();
    c.disk_access_mode = mode;
    c.segment.index_block_size = 64;
    c.segment.filter_bits_per_key = 10;
    // The store suites run on the newest format (data blocks); format 3 keeps its own
    // suites (`tiny_opts_v3`), and the random-dataset test writes formats 3, 4 and 5.
    c.segment.format_version = segstore::format::footer::FORMAT_VERSION;
    c.delete_policy = DeletePolicy::DeferWhileMapped;
    c.track_leaks = true;
    c.file_rules = rules;
    c
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
pub fn writer_name(w: &SegmentWriter) -> SegmentName {
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

/// One cell of the model (the key is the map key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub value: Vec<u8>,
    pub ts: u64,
    pub tombstone: bool,
}

impl Cell {
    pub fn live(value: &[u8], ts: u64) -> Cell {
        Cell {
            value: value.to_vec(),
            ts,
            tombstone: false,
        }
    }

    pub fn tombstone(ts: u64) -> Cell {
        Cell {
            value: Vec::new(),
            ts,
            tombstone: true,
        }
    }

    pub fn entry(&self, key: &[u8]) -> Entry {
        Entry {
            key: key.to_vec(),
            value: self.value.clone(),
            ts: self.ts,
            tombstone: self.tombstone,
            expires: 0,
        }
    }
}

/// What a segment should hold.
pub type Model = BTreeMap<Vec<u8>, Cell>;

/// Index and data blocks of 64 bytes, so a few dozen cells already span many blocks.
pub fn tiny_opts() -> SegmentOptions {
    let mut c = SegmentOptions::default();
    c.index_block_size = 64;
    c.data_block_size = 64;
    c.format_version = segstore::format::footer::FORMAT_VERSION;
    c.filter_bits_per_key = 10;
    c
}

/// [`tiny_opts`] writing format 3 (records, index blocks, the page index; the default):
/// for the tests of what only that format has.
pub fn tiny_opts_v3() -> SegmentOptions {
    let mut c = tiny_opts();
    c.format_version = 3;
    c
}

/// The segment name the tests use.
pub fn seg_name() -> SegmentName {
    SegmentName::new("t", 1).unwrap()
}

/// Proptest settings: 64 cases unless `PROPTEST_CASES` says otherwise (so
/// `PROPTEST_CASES=5000 cargo test --release` runs deeper).
pub fn proptest_config(source_file: &'static str) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 64;
    }
    c.source_file = Some(source_file);
    c
}

/// Write `model` as segment `name` in `dir`.
pub fn write_segment(
    dir: &Path,
    name: &SegmentName,
    opts: &SegmentOptions,
    model: &Model,
) -> SegmentStats {
    let mut w = SegmentWriter::create(dir, name.clone(), opts, &FileRules::posix()).unwrap();
    for (k, c) in model {
        w.add(k, &c.value, c.ts, c.tombstone).unwrap();
    }
    w.finish().unwrap()
}

/// Mappings a reader opened in `mode` holds on this platform: data + index in `mmap`,
/// the index only in `auto` (64-bit) and `mmap_index_only`, none in `standard`.
pub fn expected_maps(mode: DiskAccessMode) -> usize {
    match mode {
        DiskAccessMode::Mmap => 2,
        DiskAccessMode::Auto if cfg!(target_pointer_width = "64") => 1,
        DiskAccessMode::Auto => 0,
        DiskAccessMode::MmapIndexOnly => 1,
        DiskAccessMode::Standard => 0,
    }
}

/// Open in `mode`, checking the effective modes and the mapping count under `dir`
/// (the caller must hold no other reader of `dir`).
pub fn open_in(dir: &Path, name: &SegmentName, mode: DiskAccessMode) -> SegmentReader {
    let r = SegmentReader::open(dir, name, mode.resolve())
        .unwrap_or_else(|e| panic!("{mode}: open failed: {e}"));
    let res = mode.resolve();
    assert_eq!(r.modes(), (res.data, res.index), "{mode}: effective modes");
    let maps = segstore::io::registry().stats_under(dir);
    assert_eq!(
        maps.maps,
        expected_maps(mode),
        "{mode}: mappings while open"
    );
    assert_eq!(r.mapped_files().count(), expected_maps(mode), "{mode}");
    r
}

/// The cells of `model` within the bounds, in order (never panics on inverted ranges,
/// unlike `BTreeMap::range`).
pub fn model_scan(model: &Model, start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> Vec<Entry> {
    model
        .iter()
        .filter(|(k, _)| in_bounds(k, start, end))
        .map(|(k, c)| c.entry(k))
        .collect()
}

/// Is `k` within the bounds?
pub fn in_bounds(k: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let after_start = match start {
        Bound::Included(s) => k >= s.as_slice(),
        Bound::Excluded(s) => k > s.as_slice(),
        Bound::Unbounded => true,
    };
    let before_end = match end {
        Bound::Included(e) => k <= e.as_slice(),
        Bound::Excluded(e) => k < e.as_slice(),
        Bound::Unbounded => true,
    };
    after_start && before_end
}

/// Everything a scan over the bounds yields, failing on the first error. Also walks the
/// same range with the allocation-free `next_with` and checks it sees the same cells.
pub fn scan_all(
    r: &SegmentReader,
    start: &Bound<Vec<u8>>,
    end: &Bound<Vec<u8>>,
) -> segstore::Result<Vec<Entry>> {
    let owned: Vec<Entry> = r
        .scan::<Vec<u8>>((start.clone(), end.clone()))?
        .collect::<segstore::Result<_>>()?;
    let mut it = r.scan::<Vec<u8>>((start.clone(), end.clone()))?;
    let mut borrowed = Vec::new();
    while let Some(e) = it.next_with(|rec| Entry {
        key: rec.key.to_vec(),
        value: rec.value.to_vec(),
        ts: rec.ts,
        tombstone: rec.tombstone,
        expires: 0,
    }) {
        borrowed.push(e?);
    }
    assert_eq!(borrowed, owned, "next_with and next disagree");
    assert!(
        it.next_with(|_| ()).is_none(),
        "a finished scan stays finished"
    );
    // Backward (through the index entries) the same cells, in reverse.
    let mut back: Vec<Entry> = r
        .scan::<Vec<u8>>((start.clone(), end.clone()))?
        .rev()
        .collect::<segstore::Result<_>>()?;
    back.reverse();
    assert_eq!(back, owned, "a backward scan disagrees");
    // From both ends at once: each cell once, where the ends meet.
    let mut it = r.scan::<Vec<u8>>((start.clone(), end.clone()))?;
    let (mut front, mut back) = (Vec::new(), Vec::new());
    loop {
        let step = if (front.len() + back.len()) % 3 == 2 {
            it.next_back().map(|e| back.push(e))
        } else {
            it.next().map(|e| front.push(e))
        };
        if step.is_none() && it.next_back().map(|e| back.push(e)).is_none() {
            break;
        }
    }
    let mut both: Vec<Entry> = front.into_iter().collect::<segstore::Result<_>>()?;
    both.extend(
        back.into_iter()
            .rev()
            .collect::<segstore::Result<Vec<_>>>()?,
    );
    assert_eq!(both, owned, "scanning from both ends disagrees");
    Ok(owned)
}

/// Path of component `c` of the test segment in `dir`.
pub fn component_path(dir: &Path, c: Component) -> std::path::PathBuf {
    seg_name().path(dir, c)
}

/// Check leveled compaction's layout of `set` (`table::leveled` invariant 2): the
/// segments of each level 1 or more hold disjoint key spans (cells and range
/// tombstones). Returns the levels, segment ids and data bytes: `(level, id, bytes)`.
pub fn check_levels(set: &SegmentSet) -> Vec<(u32, u64, u64)> {
    use segstore::table::leveled::Span;
    let levels = set.levels();
    let view = set.view();
    let mut out = Vec::new();
    let mut spans: Vec<(u32, u64, Span)> = Vec::new();
    for h in &view.segments {
        let s = h.stats();
        let id = h.name().id;
        let level = levels.get(&id).copied().unwrap_or(0);
        out.push((level, id, s.data_len));
        if level == 0 {
            continue;
        }
        let mut span = (s.entry_count > 0).then(|| Span::of_keys(&s.min_key, &s.max_key));
        for r in h.range_tombstones().fragments() {
            let r = Span {
                start: r.start.clone(),
                end: r.end.clone(),
            };
            span = Some(span.map_or(r.clone(), |s| s.union(&r)));
        }
        if let Some(span) = span {
            for (l, other, o) in &spans {
                assert!(
                    *l != level || !o.overlaps(&span),
                    "segments {other} and {id} of level {level} overlap: {o:?} {span:?}"
                );
            }
            spans.push((level, id, span));
        }
    }
    out.sort_unstable();
    out
}

/// The file rules of a power-loss run: the Windows emulation (`windows`) or POSIX, hard
/// links refused (`no_links`: snapshots and ingests copy instead), over `sim`.
pub fn power_loss_rules(windows: bool, no_links: bool, sim: &segstore::io::PowerLoss) -> FileRules {
    use segstore::io::rules::{FaultKind, Faults};
    let base = if windows {
        FileRules::windows_emulation()
    } else {
        FileRules::posix()
    };
    let base = if no_links {
        base.with_faults(Faults::new().fail(FaultKind::Link, "", 0, u64::MAX))
    } else {
        base
    };
    base.with_power_loss(sim.clone())
}
