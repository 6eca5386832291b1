//! Verification, stats read back, and mappings counted in the registry.

use crate::common::*;
use crate::fixtures::{standard_model, written};
use segstore::io::registry;
use segstore::segment::{Component, SegmentReader};
use segstore::DiskAccessMode;

pub(crate) fn verify_and_stats(mode: DiskAccessMode) {
    let model = standard_model();
    let dir = tempfile::tempdir().unwrap();
    let written = write_segment(dir.path(), &seg_name(), &tiny_opts(), &model);
    let r = open_in(dir.path(), &seg_name(), mode);
    let s = r.stats();
    assert_eq!(s, &written, "{mode}: stats read back equal the writer's");
    assert_eq!(s.entry_count, 300, "{mode}");
    assert_eq!(
        s.tombstone_count,
        model.values().filter(|c| c.tombstone).count() as u64,
        "{mode}"
    );
    assert_eq!(
        s.min_ts,
        model.values().map(|c| c.ts).min().unwrap(),
        "{mode}"
    );
    assert_eq!(
        s.max_ts,
        model.values().map(|c| c.ts).max().unwrap(),
        "{mode}"
    );
    assert_eq!(&s.min_key, model.keys().next().unwrap(), "{mode}");
    assert_eq!(&s.max_key, model.keys().next_back().unwrap(), "{mode}");
    let len = |c| {
        std::fs::metadata(component_path(dir.path(), c))
            .unwrap()
            .len()
    };
    assert_eq!(s.data_len, len(Component::Data), "{mode}");
    assert_eq!(s.index_len, len(Component::Index), "{mode}");
    let meta = std::fs::read(component_path(dir.path(), Component::Meta)).unwrap();
    let body = &meta[..meta.len() - segstore::format::footer::FOOTER_LEN];
    let version = segstore::format::footer::FORMAT_VERSION;
    let blocks = segstore::format::meta::Meta::decode(body, version)
        .unwrap()
        .summary
        .len();
    assert!(
        blocks > 10,
        "{mode}: expected many data blocks, got {blocks}"
    );
    assert_eq!(r.verify().unwrap(), 300, "{mode}");
    // verify() twice (index blocks are remembered as checked; records are not).
    assert_eq!(r.verify().unwrap(), 300, "{mode}");
    assert!(r.memory_bytes() > 0, "{mode}");
    assert_eq!(r.name(), &seg_name(), "{mode}");
    assert_eq!(r.dir(), dir.path(), "{mode}");
}

pub(crate) fn mappings_counted_while_open_and_released_on_drop(mode: DiskAccessMode) {
    let model = standard_model();
    let dir = written(&model);
    let under = |d: &std::path::Path| registry().stats_under(d);
    assert_eq!(
        under(dir.path()).maps,
        0,
        "{mode}: nothing mapped before open"
    );
    let r1 = open_in(dir.path(), &seg_name(), mode);
    let want = expected_maps(mode);
    let s = under(dir.path());
    assert_eq!((s.maps, s.files), (want, want), "{mode}: {s:?}");
    let mapped_bytes: u64 = r1.mapped_files().map(|m| m.as_slice().len() as u64).sum();
    assert_eq!(s.bytes, mapped_bytes, "{mode}");
    for m in r1.mapped_files() {
        assert_eq!(
            registry().map_count(m.id()),
            1,
            "{mode}: {}",
            m.path().display()
        );
    }
    // A second reader maps again: counted per mapping, same file identities.
    let r2 = SegmentReader::open(dir.path(), &seg_name(), mode.resolve()).unwrap();
    let s = under(dir.path());
    assert_eq!((s.maps, s.files), (2 * want, want), "{mode}: {s:?}");
    // Reading does not map anything more.
    r2.verify().unwrap();
    r2.iter().unwrap().for_each(|e| drop(e.unwrap()));
    assert_eq!(under(dir.path()).maps, 2 * want, "{mode}");
    drop(r1);
    assert_eq!(under(dir.path()).maps, want, "{mode}");
    drop(r2);
    assert_eq!(
        under(dir.path()),
        segstore::memory::MappingStats::default(),
        "{mode}: all released"
    );
}
