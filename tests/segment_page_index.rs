//! The page index (format version 3, `format::pages`): point reads and seeks that
//! search it instead of the index file.
//!
//! 1. Under proptest, in every access mode (standard with and without a block cache),
//!    gets of present and absent keys, and scans from any bound, return exactly the
//!    model's cells through the page index, as through the index file; records larger
//!    than a page and records crossing pages included.
//! 2. `PointLookup::Auto` picks the page index where `auto` could not map the data
//!    (the data map budget is spent) and where data is read positionally through a
//!    block cache, and the index file where data is mapped, or read without a cache.
//! 3. A version 2 segment (no page index) still opens, reads and verifies, searching
//!    its index file whatever is asked.
//! 4. `verify` refuses a page index that disagrees with the records, and a record
//!    damaged where a walk compares its key fails the read instead of hiding the cell.
#![allow(clippy::disallowed_methods)] // rewrites segment files on purpose, outside the store

mod common;

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use common::{Cell, Model};
use proptest::prelude::*;
use segstore::format::footer::{Footer, Kind, FOOTER_LEN};
use segstore::format::meta::Meta;
use segstore::memory::DataMapBudget;
use segstore::segment::{BlockCache, Component, PointLookup, ReaderOptions, SegmentReader};
use segstore::{DiskAccessMode, Error};

fn opts(lookup: PointLookup, cache: bool) -> ReaderOptions {
    let mut o = ReaderOptions::default();
    o.point_lookup = lookup;
    if cache {
        o.block_cache = BlockCache::new(64 << 10).map(Arc::new);
    }
    o
}

fn open(dir: &Path, mode: DiskAccessMode, o: &ReaderOptions) -> SegmentReader {
    SegmentReader::open_with(dir, &common::seg_name(), mode.resolve(), o).unwrap()
}

/// Keys of 1 to 12 bytes over a small alphabet (so absent probes fall between them);
/// values mostly small, some past a page; some tombstones.
fn model() -> impl Strategy<Value = Model> {
    let key = prop::collection::vec(prop_oneof![Just(b'a'), Just(b'k'), Just(0xff)], 1..12);
    let cell = prop_oneof![
        6 => (0usize..300, any::<u64>()).prop_map(|(n, ts)| Cell::live(&vec![b'v'; n], ts >> 1)),
        1 => (4000usize..9000, any::<u64>()).prop_map(|(n, ts)| Cell::live(&vec![7; n], ts >> 1)),
        1 => any::<u64>().prop_map(|ts| Cell::tombstone(ts >> 1)),
    ];
    prop::collection::btree_map(key, cell, 0..120)
}

fn bound(k: Option<(Vec<u8>, bool)>) -> Bound<Vec<u8>> {
    match k {
        None => Bound::Unbounded,
        Some((k, true)) => Bound::Included(k),
        Some((k, false)) => Bound::Excluded(k),
    }
}

proptest! {
    #![proptest_config(common::proptest_config(file!()))]

    #[test]
    fn page_index_reads_what_the_model_holds(
        model in model(),
        probes in prop::collection::vec(prop::collection::vec(prop_oneof![Just(b'a'), Just(b'k'), Just(0xff), Just(0)], 1..13), 0..40),
        start in prop::option::of((prop::collection::vec(prop_oneof![Just(b'a'), Just(b'k')], 1..6), any::<bool>())),
    ) {
        let dir = tempfile::tempdir().unwrap();
        common::write_segment(dir.path(), &common::seg_name(), &common::tiny_opts_v3(), &model);
        for mode in DiskAccessMode::all() {
            for cache in [false, true] {
                let r = open(dir.path(), mode, &opts(PointLookup::Pages, cache));
                prop_assert_eq!(r.residency().point_lookup, PointLookup::Pages);
                for (k, c) in &model {
                    prop_assert_eq!(r.get(k).unwrap(), Some(c.entry(k)), "{} get {:?}", mode, k);
                }
                for p in &probes {
                    let want = model.get(p).map(|c| c.entry(p));
                    prop_assert_eq!(r.get(p).unwrap(), want, "{} probe {:?}", mode, p);
                }
                let (lo, hi) = (bound(start.clone()), Bound::Unbounded);
                let got = common::scan_all(&r, &lo, &hi).unwrap();
                prop_assert_eq!(got, common::model_scan(&model, &lo, &hi), "{} scan", mode);
                prop_assert_eq!(r.verify().unwrap(), model.len() as u64);
            }
        }
    }
}

/// Segment 1 of `n` keys, with values of 100 bytes: several dozen pages.
fn written(dir: &Path, n: u32) -> Model {
    let model: Model = (0..n)
        .map(|i| {
            let k = format!("key{i:06}").into_bytes();
            (k, Cell::live(&[i as u8; 100], u64::from(i) + 1))
        })
        .collect();
    common::write_segment(dir, &common::seg_name(), &common::tiny_opts_v3(), &model);
    model
}

#[test]
fn auto_picks_pages_where_data_is_not_mapped_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let model = written(dir.path(), 2000);
    let with_budget = |limit: u64| {
        let mut o = ReaderOptions::default();
        o.data_budget = Some(Arc::new(DataMapBudget::with_limit(limit)));
        o
    };
    let cases = [
        ("fits", with_budget(u64::MAX / 4), PointLookup::Index),
        ("does not fit", with_budget(1), PointLookup::Pages),
        (
            "auto_data_map_percent 0",
            with_budget(0),
            PointLookup::Index,
        ),
        ("no budget", ReaderOptions::default(), PointLookup::Index),
    ];
    for (what, o, want) in cases {
        let r = open(dir.path(), DiskAccessMode::Auto, &o);
        assert_eq!(r.residency().point_lookup, want, "{what}");
        for (k, c) in model.iter().step_by(7) {
            assert_eq!(r.get(k).unwrap(), Some(c.entry(k)), "{what}");
        }
    }
    // Data read positionally through a block cache: its chunk is the page.
    for (mode, cache, want) in [
        (DiskAccessMode::Standard, true, PointLookup::Pages),
        (DiskAccessMode::MmapIndexOnly, true, PointLookup::Pages),
        (DiskAccessMode::Standard, false, PointLookup::Index),
        (DiskAccessMode::Mmap, true, PointLookup::Index),
    ] {
        let r = open(dir.path(), mode, &opts(PointLookup::Auto, cache));
        assert_eq!(
            r.residency().point_lookup,
            want,
            "{mode}, block cache {cache}"
        );
    }
    // Asked for explicitly, in a mode with no budget at all.
    for (asked, want) in [
        (PointLookup::Pages, PointLookup::Pages),
        (PointLookup::Index, PointLookup::Index),
    ] {
        let r = open(dir.path(), DiskAccessMode::Mmap, &opts(asked, false));
        assert_eq!(r.residency().point_lookup, want);
    }
}

fn read_files(dir: &Path) -> [Vec<u8>; 3] {
    [Component::Data, Component::Index, Component::Meta]
        .map(|c| std::fs::read(common::component_path(dir, c)).unwrap())
}

fn with_footer(mut body: Vec<u8>, version: u16, kind: Kind, count: u64) -> Vec<u8> {
    let f = Footer::new(version, kind, count, body.len() as u64);
    body.extend_from_slice(&f.encode());
    body
}

/// Rewrite the test segment in `dir` with `edit` applied to its meta, every
/// component's footer saying `version`.
fn rewrite(dir: &Path, version: u16, edit: impl FnOnce(&mut Meta)) {
    let [data, index, meta] = read_files(dir);
    let footer = |b: &[u8]| Footer::decode(&b[b.len() - FOOTER_LEN..], b.len() as u64, Kind::Meta);
    let mut m = Meta::decode(
        &meta[..meta.len() - FOOTER_LEN],
        footer(&meta).unwrap().version,
    )
    .unwrap();
    edit(&mut m);
    let n = m.stats.entry_count;
    let mut body = Vec::new();
    m.encode(version, &mut body);
    let strip = |b: Vec<u8>| b[..b.len() - FOOTER_LEN].to_vec();
    let files = [
        (
            Component::Data,
            with_footer(strip(data), version, Kind::Data, n),
        ),
        (
            Component::Index,
            with_footer(strip(index), version, Kind::Index, n),
        ),
        (Component::Meta, with_footer(body, version, Kind::Meta, 0)),
    ];
    for (c, bytes) in files {
        std::fs::write(common::component_path(dir, c), bytes).unwrap();
    }
}

#[test]
fn a_version_2_segment_reads_through_its_index_file() {
    let dir = tempfile::tempdir().unwrap();
    let model = written(dir.path(), 500);
    rewrite(dir.path(), 2, |m| m.pages = None);
    assert_eq!(
        read_files(dir.path())[2][read_files(dir.path())[2].len() - 24..][..2],
        2u16.to_le_bytes()
    );
    for mode in DiskAccessMode::all() {
        let r = open(dir.path(), mode, &opts(PointLookup::Pages, true));
        assert_eq!(r.residency().point_lookup, PointLookup::Index, "{mode}");
        for (k, c) in &model {
            assert_eq!(r.get(k).unwrap(), Some(c.entry(k)), "{mode}");
        }
        assert_eq!(r.verify().unwrap(), 500, "{mode}");
    }
}

#[test]
fn a_version_2_meta_labelled_version_3_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 50);
    rewrite(dir.path(), 3, |m| m.pages = None);
    for mode in DiskAccessMode::all() {
        let e = SegmentReader::open(dir.path(), &common::seg_name(), mode.resolve()).unwrap_err();
        match e {
            Error::Corrupt { path, .. } => {
                assert_eq!(path, common::component_path(dir.path(), Component::Meta))
            }
            other => panic!("{mode}: {other}"),
        }
    }
}

#[test]
fn verify_refuses_a_page_index_that_disagrees_with_the_records() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 500);
    // Drop the second entry: still well formed (offsets ascend, keys ascend), but the
    // first entry's span now covers two pages.
    rewrite(dir.path(), 3, |m| {
        let p = m.pages.take().unwrap();
        let mut b = segstore::format::pages::PagesBuilder::default();
        for i in (0..p.len()).filter(|&i| i != 1) {
            b.record(p.first_key(i), p.block(i).0);
        }
        m.pages = Some(b.finish(m.stats.data_len - FOOTER_LEN as u64));
    });
    let r = open(
        dir.path(),
        DiskAccessMode::Mmap,
        &opts(PointLookup::Pages, false),
    );
    match r.verify() {
        Err(Error::Corrupt { path, reason, .. }) => {
            assert_eq!(path, common::component_path(dir.path(), Component::Meta));
            assert!(reason.contains("page index"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_damaged_key_on_the_walk_fails_the_read_instead_of_hiding_the_cell() {
    let dir = tempfile::tempdir().unwrap();
    let model = written(dir.path(), 300);
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let data_path = common::component_path(dir.path(), Component::Data);
    let mut data = std::fs::read(&data_path).unwrap();
    // Raise the key of record 40 ("key000040" -> "key900040"): a walk looking for
    // record 41 stops there, above it.
    let victim = keys[40];
    let at = data
        .windows(victim.len())
        .position(|w| w == victim.as_slice())
        .unwrap();
    data[at + 3] = b'9';
    std::fs::write(&data_path, &data).unwrap();
    for mode in DiskAccessMode::all() {
        let r = open(dir.path(), mode, &opts(PointLookup::Pages, true));
        for k in &keys[39..45] {
            match r.get(k) {
                Ok(got) => assert_eq!(got, Some(model[*k].entry(k)), "{mode}: {k:?}"),
                Err(Error::Corrupt { path, .. }) => assert_eq!(path, data_path, "{mode}"),
                Err(e) => panic!("{mode}: {e}"),
            }
        }
        // A scan starting there fails rather than skipping a record.
        let r2 = r.scan(keys[41].as_slice()..);
        assert!(
            r2.is_err() || r2.unwrap().any(|e| e.is_err()),
            "{mode}: the scan passed the damage"
        );
    }
}
