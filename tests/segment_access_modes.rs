//! One suite of segment reader tests, run against every `disk_access_mode`.
//!
//! Each case is a function taking the mode; [`per_mode!`] generates one `#[test]` per
//! (mode, case), named `<mode>::<case>` (so `cargo test mmap_index_only::` runs one
//! backend). Segments use 64-byte index blocks so multi-block paths run on small data.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use std::ops::Bound;
use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use segstore::format::MAX_KEY_LEN;
use segstore::io::registry;
use segstore::segment::{Component, IndexCache, ReaderOptions, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, Error, FileRules, SegmentOptions};

macro_rules! per_mode {
    ($($case:ident),* $(,)?) => {
        per_mode!(@mode auto, Auto, $($case),*);
        per_mode!(@mode mmap, Mmap, $($case),*);
        per_mode!(@mode mmap_index_only, MmapIndexOnly, $($case),*);
        per_mode!(@mode standard, Standard, $($case),*);
    };
    (@mode $m:ident, $variant:ident, $($case:ident),*) => {
        mod $m {
            $(
                #[test]
                fn $case() {
                    super::$case(segstore::DiskAccessMode::$variant)
                }
            )*
        }
    };
}

per_mode!(
    point_gets_hit_and_miss,
    tombstones_and_empty_values,
    max_key_accepted_and_one_more_rejected,
    out_of_order_and_duplicates_rejected_writer_stays_usable,
    dropped_unfinished_writer_leaves_no_files,
    scan_every_bound_combination,
    verify_and_stats,
    empty_segment,
    mappings_counted_while_open_and_released_on_drop,
    concurrent_gets_on_one_reader,
    random_datasets_match_btreemap,
    mode_round_trips_through_toml,
);

/// 300 cells `key00000, key00002, ...`: every 7th a tombstone, every 11th an empty value,
/// the rest values of varying length.
fn standard_model() -> Model {
    (0..300u32)
        .map(|i| {
            let k = format!("key{:05}", i * 2).into_bytes();
            let c = if i % 7 == 3 {
                Cell::tombstone(i as u64 * 10)
            } else if i % 11 == 5 {
                Cell::live(b"", i as u64 * 10)
            } else {
                Cell::live(
                    format!("value-{i}-{}", "x".repeat(i as usize % 40)).as_bytes(),
                    i as u64 * 10 + 1,
                )
            };
            (k, c)
        })
        .collect()
}

fn written(model: &Model) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &seg_name(), &tiny_opts(), model);
    dir
}

/// [`written`] in format 3: for what only it has (the index file and its cache, records
/// read one at a time).
fn written_v3(model: &Model) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &seg_name(), &tiny_opts_v3(), model);
    dir
}

fn point_gets_hit_and_miss(mode: DiskAccessMode) {
    let model = standard_model();
    let dir = written(&model);
    let r = open_in(dir.path(), &seg_name(), mode);
    for (k, c) in &model {
        let got = r.get(k).unwrap();
        assert_eq!(
            got,
            Some(c.entry(k)),
            "{mode}: get {:?}",
            String::from_utf8_lossy(k)
        );
        // The allocation-free form sees the same cell.
        let borrowed = r
            .get_with(k, |rec| {
                (rec.key.to_vec(), rec.value.to_vec(), rec.ts, rec.tombstone)
            })
            .unwrap();
        assert_eq!(
            borrowed,
            Some((k.clone(), c.value.clone(), c.ts, c.tombstone)),
            "{mode}"
        );
        assert!(r.may_contain(k), "{mode}: filter false negative");
    }
    let mut misses: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\x00".to_vec(),
        b"a".to_vec(),
        b"key".to_vec(),          // prefix of every key: before the first
        b"key0000".to_vec(),      // before the first
        b"key00000\x00".to_vec(), // just after the first
        b"key00599".to_vec(),     // after the last (key00598)
        b"key005980".to_vec(),
        b"zzz".to_vec(),
        vec![0xff; 40],
        vec![b'k'; MAX_KEY_LEN + 1], // longer than any key can be
    ];
    // Between every pair of neighbours.
    misses.extend((0..299u32).map(|i| format!("key{:05}", i * 2 + 1).into_bytes()));
    for k in &misses {
        assert_eq!(
            r.get(k).unwrap(),
            None,
            "{mode}: miss {:?}",
            String::from_utf8_lossy(k)
        );
        assert_eq!(r.get_with(k, |_| ()).unwrap(), None, "{mode}");
    }
}

fn tombstones_and_empty_values(mode: DiskAccessMode) {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    model.insert(b"a".to_vec(), Cell::live(b"", 1));
    model.insert(b"b".to_vec(), Cell::tombstone(2));
    model.insert(b"c".to_vec(), Cell::live(b"v", 3));
    model.insert(b"d".to_vec(), Cell::tombstone(u64::MAX));
    write_segment(dir.path(), &seg_name(), &tiny_opts(), &model);
    let r = open_in(dir.path(), &seg_name(), mode);

    let a = r.get(b"a").unwrap().expect("empty value is a hit");
    assert!(
        !a.tombstone && a.value.is_empty() && a.ts == 1,
        "{mode}: {a:?}"
    );
    let b = r
        .get(b"b")
        .unwrap()
        .expect("a tombstone is returned, not hidden");
    assert!(
        b.tombstone && b.value.is_empty() && b.ts == 2,
        "{mode}: {b:?}"
    );
    let d = r.get(b"d").unwrap().unwrap();
    assert!(d.tombstone && d.ts == u64::MAX, "{mode}: {d:?}");
    assert_eq!(
        r.get_with(b"b", |rec| rec.tombstone).unwrap(),
        Some(true),
        "{mode}"
    );

    let all: Vec<_> = r.iter().unwrap().collect::<Result<_, _>>().unwrap();
    let want: Vec<_> = model.iter().map(|(k, c)| c.entry(k)).collect();
    assert_eq!(
        all, want,
        "{mode}: scan returns tombstones and empty values"
    );
    assert_eq!(r.stats().tombstone_count, 2, "{mode}");
    assert_eq!(r.verify().unwrap(), 4, "{mode}");
}

fn max_key_accepted_and_one_more_rejected(mode: DiskAccessMode) {
    let dir = tempfile::tempdir().unwrap();
    let name = seg_name();
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &tiny_opts(), &FileRules::posix()).unwrap();
    let max = vec![b'm'; MAX_KEY_LEN];
    let too_long = vec![b'n'; MAX_KEY_LEN + 1];
    w.add(b"a", b"first", 1, false).unwrap();
    w.add(&max, b"max", 2, false).unwrap();
    match w.add(&too_long, b"no", 3, false) {
        Err(Error::KeyTooLarge { len, max }) => {
            assert_eq!((len, max), (MAX_KEY_LEN + 1, MAX_KEY_LEN), "{mode}")
        }
        other => panic!("{mode}: 64 KiB + 1 key gave {other:?}"),
    }
    // Still usable; the rejected key left no trace.
    w.add(b"z", b"last", 4, false).unwrap();
    assert_eq!(w.len(), 3, "{mode}");
    let stats = w.finish().unwrap();
    assert_eq!(stats.entry_count, 3, "{mode}");

    let r = open_in(dir.path(), &name, mode);
    assert_eq!(r.get(&max).unwrap().unwrap().value, b"max", "{mode}");
    assert_eq!(r.get(&too_long).unwrap(), None, "{mode}");
    assert_eq!(r.get(&max[..MAX_KEY_LEN - 1]).unwrap(), None, "{mode}");
    let keys: Vec<_> = r.iter().unwrap().map(|e| e.unwrap().key).collect();
    assert_eq!(
        keys,
        vec![b"a".to_vec(), max.clone(), b"z".to_vec()],
        "{mode}"
    );
    let from_max: Vec<_> = r
        .scan(max.as_slice()..=max.as_slice())
        .unwrap()
        .map(|e| e.unwrap().key)
        .collect();
    assert_eq!(from_max, vec![max.clone()], "{mode}");
    let after_max: Vec<_> = r
        .scan::<&[u8]>((Bound::Excluded(max.as_slice()), Bound::Unbounded))
        .unwrap()
        .map(|e| e.unwrap().key)
        .collect();
    assert_eq!(after_max, vec![b"z".to_vec()], "{mode}");
    assert_eq!(r.verify().unwrap(), 3, "{mode}");
    assert_eq!(r.stats().max_key, b"z", "{mode}");
}

fn out_of_order_and_duplicates_rejected_writer_stays_usable(mode: DiskAccessMode) {
    let dir = tempfile::tempdir().unwrap();
    let name = seg_name();
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &tiny_opts(), &FileRules::posix()).unwrap();
    w.add(b"k1", b"1", 1, false).unwrap();
    w.add(b"k3", b"3", 3, false).unwrap();
    for (bad, why) in [
        (&b"k2"[..], "out of order"),
        (b"k3", "duplicate"),
        (b"k0", "before first"),
    ] {
        match w.add(bad, b"x", 9, false) {
            Err(Error::OutOfOrder { index }) => assert_eq!(index, 2, "{mode}: {why}"),
            other => panic!("{mode}: {why} key gave {other:?}"),
        }
    }
    assert!(
        matches!(w.add(b"", b"x", 9, false), Err(Error::InvalidArgument(_))),
        "{mode}"
    );
    assert!(
        matches!(w.add(b"k9", b"x", 9, true), Err(Error::InvalidArgument(_))),
        "{mode}: a tombstone with a value"
    );
    w.add(b"k4", b"4", 4, false).unwrap();
    w.add(b"k5", b"", 5, true).unwrap();
    assert_eq!(w.len(), 4, "{mode}");
    w.finish().unwrap();

    let r = open_in(dir.path(), &name, mode);
    let keys: Vec<_> = r.iter().unwrap().map(|e| e.unwrap().key).collect();
    assert_eq!(
        keys,
        [&b"k1"[..], b"k3", b"k4", b"k5"].map(|k| k.to_vec()),
        "{mode}"
    );
    assert_eq!(
        r.get(b"k3").unwrap().unwrap().value,
        b"3",
        "{mode}: duplicate did not replace"
    );
    assert_eq!(r.get(b"k2").unwrap(), None, "{mode}");
    assert_eq!(r.verify().unwrap(), 4, "{mode}");
}

fn dropped_unfinished_writer_leaves_no_files(mode: DiskAccessMode) {
    let dir = tempfile::tempdir().unwrap();
    let name = seg_name();
    // Dropped at once.
    drop(
        SegmentWriter::create(dir.path(), name.clone(), &tiny_opts(), &FileRules::posix()).unwrap(),
    );
    assert_eq!(files(dir.path()), Vec::<String>::new(), "{mode}");

    // Dropped after enough cells that the buffered writers spilled to their temp files,
    // and after a rejected cell.
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &tiny_opts(), &FileRules::posix()).unwrap();
    for i in 0..2_000u32 {
        w.add(format!("key{i:06}").as_bytes(), &[7u8; 100], 1, false)
            .unwrap();
    }
    assert!(w.add(b"a", b"", 1, false).is_err());
    assert!(
        files(dir.path()).iter().all(|f| f.ends_with(".tmp")),
        "{mode}: only temp files while writing: {:?}",
        files(dir.path())
    );
    drop(w);
    assert_eq!(
        files(dir.path()),
        Vec::<String>::new(),
        "{mode}: nothing left behind"
    );
    match SegmentReader::open(dir.path(), &name, mode.resolve()) {
        Err(Error::Io { path, .. }) => {
            assert_eq!(path, name.path(dir.path(), Component::Meta), "{mode}")
        }
        other => panic!("{mode}: opening an unwritten segment gave {other:?}"),
    }

    // The name is free again.
    let mut model = Model::new();
    model.insert(b"k".to_vec(), Cell::live(b"v", 1));
    write_segment(dir.path(), &name, &tiny_opts(), &model);
    let r = open_in(dir.path(), &name, mode);
    assert_eq!(
        r.get(b"k").unwrap(),
        Some(model[&b"k".to_vec()].entry(b"k")),
        "{mode}"
    );
}

fn scan_every_bound_combination(mode: DiskAccessMode) {
    // k0000, k0010, ..., k0990: 100 cells over many 64-byte index blocks.
    let model: Model = (0..100u32)
        .map(|i| {
            (
                format!("k{:04}", i * 10).into_bytes(),
                Cell::live(&i.to_le_bytes(), i as u64),
            )
        })
        .collect();
    let dir = written(&model);
    let r = open_in(dir.path(), &seg_name(), mode);
    let points: Vec<Vec<u8>> = [
        "", "a", "k", "k0000", "k0001", "k0005", "k0010", "k0015", "k0300", "k0305", "k0310",
        "k0500", "k0985", "k0990", "k0991", "k1", "z",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let bounds = |k: &Vec<u8>| [Bound::Included(k.clone()), Bound::Excluded(k.clone())];
    let mut all: Vec<Bound<Vec<u8>>> = vec![Bound::Unbounded];
    all.extend(points.iter().flat_map(bounds));
    let mut nonempty = 0;
    for start in &all {
        for end in &all {
            let want = model_scan(&model, start, end);
            let got = scan_all(&r, start, end)
                .unwrap_or_else(|e| panic!("{mode}: scan {start:?}..{end:?}: {e}"));
            assert_eq!(got, want, "{mode}: scan {start:?}..{end:?}");
            nonempty += !want.is_empty() as usize;
        }
    }
    assert!(
        nonempty > 100 && nonempty < all.len() * all.len(),
        "{mode}: {nonempty}"
    );
    // The RangeBounds forms callers write.
    let n = |it: segstore::Result<segstore::segment::SegmentIter<&SegmentReader>>| {
        it.unwrap()
            .collect::<segstore::Result<Vec<_>>>()
            .unwrap()
            .len()
    };
    assert_eq!(
        n(r.scan(b"k0100".as_slice()..b"k0200".as_slice())),
        10,
        "{mode}"
    );
    assert_eq!(
        n(r.scan(b"k0100".as_slice()..=b"k0200".as_slice())),
        11,
        "{mode}"
    );
    assert_eq!(n(r.scan(..b"k0200".as_slice())), 20, "{mode}");
    assert_eq!(n(r.scan(b"k0955".as_slice()..)), 4, "{mode}");
    assert_eq!(n(r.scan::<&[u8]>(..)), 100, "{mode}");
    assert_eq!(
        n(r.scan(b"k0200".as_slice()..b"k0100".as_slice())),
        0,
        "{mode}: inverted"
    );
    assert_eq!(
        n(r.scan(b"k0200".as_slice()..b"k0200".as_slice())),
        0,
        "{mode}: empty"
    );
    assert_eq!(
        n(r.scan(b"k0201".as_slice()..b"k0209".as_slice())),
        0,
        "{mode}: between keys"
    );
}

fn verify_and_stats(mode: DiskAccessMode) {
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

fn empty_segment(mode: DiskAccessMode) {
    let dir = tempfile::tempdir().unwrap();
    let stats = write_segment(dir.path(), &seg_name(), &tiny_opts(), &Model::new());
    assert_eq!(stats.entry_count, 0, "{mode}");
    let r = open_in(dir.path(), &seg_name(), mode);
    let s = r.stats();
    assert_eq!(
        (s.entry_count, s.tombstone_count, s.min_ts, s.max_ts),
        (0, 0, 0, 0),
        "{mode}"
    );
    assert!(s.min_key.is_empty() && s.max_key.is_empty(), "{mode}");
    assert_eq!((s.data_len, s.index_len), (32, 32), "{mode}: footers only");
    for k in [&b""[..], b"a", b"\xff\xff"] {
        assert_eq!(r.get(k).unwrap(), None, "{mode}");
    }
    assert_eq!(r.iter().unwrap().count(), 0, "{mode}");
    assert_eq!(
        r.scan(b"a".as_slice()..=b"z".as_slice()).unwrap().count(),
        0,
        "{mode}"
    );
    assert_eq!(r.verify().unwrap(), 0, "{mode}");
}

fn mappings_counted_while_open_and_released_on_drop(mode: DiskAccessMode) {
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

fn concurrent_gets_on_one_reader(mode: DiskAccessMode) {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SegmentReader>();
    let model = Arc::new(standard_model());
    let dir = written(&model);
    let r = Arc::new(open_in(dir.path(), &seg_name(), mode));
    let threads: Vec<_> = (0..8usize)
        .map(|t| {
            let (r, model) = (Arc::clone(&r), Arc::clone(&model));
            std::thread::spawn(move || {
                let keys: Vec<_> = model.keys().collect();
                for round in 0..3 {
                    for i in 0..keys.len() {
                        // Each thread walks the keys from a different place.
                        let k = keys[(i * 7 + t * 37 + round) % keys.len()];
                        let got = r.get(k).unwrap();
                        assert_eq!(got.as_ref(), Some(&model[k].entry(k)), "{mode}: thread {t}");
                        let miss = [k.as_slice(), b"\x00"].concat();
                        assert_eq!(r.get(&miss).unwrap(), None, "{mode}: thread {t}");
                    }
                    let n = r
                        .scan(b"key00100".as_slice()..b"key00200".as_slice())
                        .unwrap()
                        .count();
                    assert_eq!(n, 50, "{mode}: thread {t}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(Arc::strong_count(&r), 1);
    assert_eq!(r.verify().unwrap(), 300, "{mode}");
}

/// Small alphabet (with the extreme bytes) so random gets and bounds hit stored keys.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![0u8, 1, b'a', b'b', b'c', 0xfe, 0xff]),
        1..5,
    )
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => key().prop_map(Bound::Included),
        3 => key().prop_map(Bound::Excluded),
    ]
}

fn cell() -> impl Strategy<Value = Cell> {
    (
        // Runs of one byte too, so LZ4 has blocks worth compressing.
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..24),
            (any::<u8>(), 0..60usize).prop_map(|(b, n)| vec![b; n]),
        ],
        any::<u64>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(value, ts, tombstone)| {
            if tombstone {
                Cell::tombstone(ts)
            } else {
                Cell {
                    value,
                    ts,
                    tombstone,
                }
            }
        })
}

type Case = (
    Model,
    SegmentOptions,
    Vec<Vec<u8>>,
    Vec<(Bound<Vec<u8>>, Bound<Vec<u8>>)>,
);

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::btree_map(key(), cell(), 0..120),
        64usize..200,
        prop::sample::select(vec![0u32, 1, 10]),
        prop::collection::vec(key(), 0..40),
        prop::collection::vec((bound(), bound()), 0..12),
        // Every format written: 7, 6, 5 and 4 (data blocks, maybe compressed; 7's and
        // 6's start on pages when a block is a page or more; 7's hold once what all
        // their cells share; 4's keep only their groups' starts) and 3 (records).
        (
            prop::sample::select(vec![3u16, 4, 5, 6, 7, 8]),
            prop_oneof![64usize..400, Just(4096)],
            0u8..3,
        ),
    )
        .prop_map(
            |(model, index_block_size, filter_bits_per_key, gets, scans, format)| {
                let mut opts = SegmentOptions::default();
                opts.index_block_size = index_block_size;
                opts.filter_bits_per_key = filter_bits_per_key;
                (opts.format_version, opts.data_block_size) = (format.0, format.1);
                // 1: LZ4; 2: zstd where the format holds it (6 and 7), else LZ4.
                opts.compression = match format.2 {
                    0 => segstore::Compression::None,
                    2 if format.0 >= 6 => segstore::Compression::Zstd,
                    _ => segstore::Compression::Lz4,
                };
                (model, opts, gets, scans)
            },
        )
}

fn random_datasets_match_btreemap(mode: DiskAccessMode) {
    let mut runner = TestRunner::new(proptest_config(file!()));
    let result = runner.run(&case(), |(model, opts, gets, scans)| {
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), &seg_name(), &opts, &model);
        let r = open_in(dir.path(), &seg_name(), mode);
        for k in model.keys().chain(&gets) {
            let want = model.get(k).map(|c| c.entry(k));
            prop_assert_eq!(r.get(k).unwrap(), want, "{}: get {:?}", mode, k);
        }
        for (start, end) in scans.iter().chain([&(Bound::Unbounded, Bound::Unbounded)]) {
            let want = model_scan(&model, start, end);
            prop_assert_eq!(
                scan_all(&r, start, end).unwrap(),
                want,
                "{}: scan {:?}..{:?}",
                mode,
                start,
                end
            );
        }
        prop_assert_eq!(r.verify().unwrap(), model.len() as u64, "{}", mode);
        prop_assert_eq!(r.stats().entry_count, model.len() as u64, "{}", mode);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{mode}: {e}");
    }
}

#[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
struct StoreConfig {
    #[serde(default)]
    disk_access_mode: DiskAccessMode,
    #[serde(default)]
    segment: SegmentOptions,
}

fn mode_round_trips_through_toml(mode: DiskAccessMode) {
    let text = format!("disk_access_mode = \"{mode}\"\n");
    let cfg: StoreConfig = toml::from_str(&text).unwrap_or_else(|e| panic!("{mode}: {e}"));
    assert_eq!(cfg.disk_access_mode, mode);
    assert_eq!(cfg.segment, SegmentOptions::default(), "{mode}");
    let back = toml::to_string(&cfg).unwrap();
    assert!(back.contains(&text), "{mode}: serialized as {back}");
    assert_eq!(toml::from_str::<StoreConfig>(&back).unwrap(), cfg, "{mode}");
    assert_eq!(mode.as_str().parse::<DiskAccessMode>().unwrap(), mode);
    assert_eq!(mode.to_string(), mode.as_str());
}

#[test]
fn toml_config_with_mmap_index_only_parses() {
    let cfg: StoreConfig = toml::from_str(
        "disk_access_mode = \"mmap_index_only\"\n[segment]\nindex_block_size = 64\n",
    )
    .unwrap();
    assert_eq!(cfg.disk_access_mode, DiskAccessMode::MmapIndexOnly);
    assert_eq!(cfg.segment.index_block_size, 64);
    let r = cfg.disk_access_mode.resolve();
    assert_eq!(
        (r.data, r.index),
        (segstore::AccessMode::Standard, segstore::AccessMode::Mmap)
    );
    // Absent: the default, auto.
    let cfg: StoreConfig = toml::from_str("").unwrap();
    assert_eq!(cfg.disk_access_mode, DiskAccessMode::Auto);
}

#[test]
fn bad_mode_errors_and_lists_the_valid_values() {
    for bad in ["mmap_data", "MMAP", "", "index_only"] {
        let err = toml::from_str::<StoreConfig>(&format!("disk_access_mode = \"{bad}\""))
            .unwrap_err()
            .to_string();
        for valid in segstore::config::DISK_ACCESS_MODES {
            assert!(
                err.contains(valid),
                "toml error for {bad:?} does not list {valid}: {err}"
            );
        }
        let err = bad.parse::<DiskAccessMode>().unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidConfig {
                    setting: "disk_access_mode",
                    ..
                }
            ),
            "{err}"
        );
        for valid in segstore::config::DISK_ACCESS_MODES {
            assert!(err.to_string().contains(valid), "{err}");
        }
    }
    // Not a string at all.
    assert!(toml::from_str::<StoreConfig>("disk_access_mode = 3").is_err());
}

#[test]
fn modes_deserialize_through_plain_serde() {
    use serde::de::value::{Error as DeError, StrDeserializer};
    use serde::de::IntoDeserializer;
    use serde::Deserialize;
    for mode in DiskAccessMode::all() {
        let d: StrDeserializer<'_, DeError> = mode.as_str().into_deserializer();
        assert_eq!(DiskAccessMode::deserialize(d).unwrap(), mode);
    }
    let d: StrDeserializer<'_, DeError> = "bogus".into_deserializer();
    let err = DiskAccessMode::deserialize(d).unwrap_err().to_string();
    for valid in segstore::config::DISK_ACCESS_MODES {
        assert!(err.contains(valid), "{err}");
    }
}

#[test]
fn every_mode_has_a_module_in_per_mode() {
    for m in DiskAccessMode::all() {
        // A new variant stops this from compiling: add it to `per_mode!` as well.
        match m {
            DiskAccessMode::Auto
            | DiskAccessMode::Mmap
            | DiskAccessMode::MmapIndexOnly
            | DiskAccessMode::Standard => {}
        }
    }
    assert_eq!(DiskAccessMode::all().len(), 4);
}

// ------------------------------------------------------------------ index cache

fn open_cached(
    dir: &std::path::Path,
    mode: DiskAccessMode,
    budget: &Arc<IndexCache>,
) -> SegmentReader {
    let mut opts = ReaderOptions::default();
    opts.index_cache = Some(budget.clone());
    SegmentReader::open_with(dir, &seg_name(), mode.resolve(), &opts).unwrap()
}

fn check_all_gets(r: &SegmentReader, model: &Model, what: &str) {
    for (k, c) in model {
        assert_eq!(r.get(k).unwrap(), Some(c.entry(k)), "{what}");
    }
    assert_eq!(r.get(b"key00001").unwrap(), None, "{what}");
}

/// Once warm, a standard-mode reader with an index cache answers from memory: damaging
/// the whole index file on disk changes nothing for it, while a reader without the cache
/// reports the damage. Dropping the reader returns the budget.
#[test]
fn standard_index_cache_serves_lookups_from_memory() {
    let model = standard_model();
    let dir = written_v3(&model);
    let budget = Arc::new(IndexCache::new(1 << 20));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    check_all_gets(&r, &model, "cold");
    let index = component_path(dir.path(), Component::Index);
    let index_len = std::fs::metadata(&index).unwrap().len();
    let s = budget.stats();
    assert!(s.blocks > 10, "tiny blocks: many of them, got {}", s.blocks);
    assert_eq!(s.used_bytes, r.index_cache_bytes());
    assert!(
        s.used_bytes > index_len / 2 && s.used_bytes < index_len,
        "{s:?}"
    );
    assert_eq!(s.refused, 0);

    // Overwrite every byte of the index but its footer, in place.
    let body = index_len as usize - segstore::format::footer::FOOTER_LEN;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&index)
            .unwrap();
        f.write_all_at(&vec![0xAA; body], 0).unwrap();
        f.sync_all().unwrap();
    }
    check_all_gets(&r, &model, "warm, index damaged on disk");
    // `verify` reads the file, not the cache.
    match r.verify() {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, index),
        other => panic!("verify must read the damaged file, got {other:?}"),
    }
    let all = scan_all(&r, &Bound::Unbounded, &Bound::Unbounded).unwrap();
    assert_eq!(all.len(), model.len());
    let mid = model.keys().nth(100).unwrap().clone();
    let tail = scan_all(&r, &Bound::Included(mid), &Bound::Unbounded).unwrap();
    assert_eq!(tail.len(), model.len() - 100);
    let uncached =
        SegmentReader::open(dir.path(), &seg_name(), DiskAccessMode::Standard.resolve()).unwrap();
    let k = model.keys().nth(150).unwrap();
    match uncached.get(k) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, index),
        other => panic!("expected the damaged index to be reported, got {other:?}"),
    }
    drop(r);
    assert_eq!((budget.stats().used_bytes, budget.stats().blocks), (0, 0));
}

/// Past the budget, blocks are read per lookup; answers do not change. Mapped indexes
/// never use the cache.
#[test]
fn index_cache_budget_is_a_ceiling_and_mapped_indexes_skip_it() {
    let model = standard_model();
    let dir = written_v3(&model);
    let budget = Arc::new(IndexCache::new(300));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    check_all_gets(&r, &model, "small budget");
    check_all_gets(&r, &model, "small budget, again");
    let s = budget.stats();
    assert!(s.used_bytes <= 300 && s.blocks >= 1, "{s:?}");
    assert!(s.refused > 0, "{s:?}");
    drop(r);

    // `verify` reads every block but keeps none of them.
    let budget = Arc::new(IndexCache::new(1 << 20));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    assert_eq!(r.verify().unwrap(), model.len() as u64);
    assert_eq!(budget.stats().used_bytes, 0);
    drop(r);

    for mode in [DiskAccessMode::Mmap, DiskAccessMode::MmapIndexOnly] {
        let budget = Arc::new(IndexCache::new(1 << 20));
        let r = open_cached(dir.path(), mode, &budget);
        check_all_gets(&r, &model, mode.as_str());
        assert_eq!(budget.stats().used_bytes, 0, "{mode}");
        assert_eq!(r.index_cache_bytes(), 0, "{mode}");
    }
}

/// A damaged index block is reported the first time it is read and never cached.
#[test]
fn index_cache_never_keeps_a_damaged_block() {
    let model = standard_model();
    let dir = written_v3(&model);
    let index = component_path(dir.path(), Component::Index);
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[10] ^= 0x40;
    std::fs::write(&index, &bytes).unwrap();
    let budget = Arc::new(IndexCache::new(1 << 20));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    let first = model.keys().next().unwrap();
    for _ in 0..2 {
        match r.get(first) {
            Err(Error::Corrupt { path, .. }) => assert_eq!(path, index),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    // The other blocks are fine and cached.
    let last = model.keys().last().unwrap();
    assert_eq!(r.get(last).unwrap(), Some(model[last].entry(last)));
    assert_eq!(budget.stats().blocks, 1);
}

// ------------------------------------------------------------------ crc_check_chance

/// `crc_check_chance` decides whether a point read checks its record's checksum: at 1.0
/// (the default) a damaged value is reported, at 0.0 it is returned as it is on disk
/// (the documented trade-off), in between some reads check. `verify` and scans always
/// check. In every mode.
#[test]
fn crc_check_chance_governs_point_reads_only() {
    let model = standard_model();
    let (key, cell) = model
        .iter()
        .find(|(_, c)| c.value.len() > 20)
        .map(|(k, c)| (k.clone(), c.clone()))
        .unwrap();
    let dir = written(&model);
    let data = component_path(dir.path(), Component::Data);
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes
        .windows(cell.value.len())
        .position(|w| w == &cell.value[..])
        .unwrap();
    bytes[at + 5] ^= 0x20;
    std::fs::write(&data, &bytes).unwrap();
    let mut damaged = cell.clone();
    damaged.value[5] ^= 0x20;

    for mode in DiskAccessMode::all() {
        let open = |chance: f64| {
            let mut opts = ReaderOptions::default();
            opts.crc_check_chance = chance;
            SegmentReader::open_with(dir.path(), &seg_name(), mode.resolve(), &opts).unwrap()
        };
        let corrupt = |r: segstore::Result<_>| match r {
            Err(Error::Corrupt { path, .. }) => path == data,
            _ => false,
        };
        let always = open(1.0);
        assert!(corrupt(always.get(&key).map(|_| ())), "{mode}: 1.0 reports");
        let never = open(0.0);
        assert_eq!(
            never.get(&key).unwrap(),
            Some(damaged.entry(&key)),
            "{mode}: 0.0"
        );
        assert!(
            corrupt(never.verify().map(|_| ())),
            "{mode}: verify still checks"
        );
        let scanned: segstore::Result<Vec<_>> = never.iter().unwrap().collect();
        assert!(corrupt(scanned.map(|_| ())), "{mode}: scans still check");
        // Other cells are unaffected either way.
        let other = model.keys().find(|k| **k != key).unwrap();
        assert_eq!(never.get(other).unwrap(), Some(model[other].entry(other)));

        let half = open(0.5);
        let (mut reported, mut returned) = (0, 0);
        for _ in 0..400 {
            match half.get(&key) {
                Ok(got) => {
                    assert_eq!(got, Some(damaged.entry(&key)));
                    returned += 1;
                }
                Err(e) => {
                    assert!(corrupt(Err::<(), _>(e)), "{mode}");
                    reported += 1;
                }
            }
        }
        assert!(
            (100..=300).contains(&reported) && reported + returned == 400,
            "{mode}: 0.5 checked {reported} of 400 reads"
        );
    }
}

/// Unchecked reads still blame the right file: a damaged key byte or timestamp in the
/// data is reported against the data file (the record's checksum is consulted before
/// blaming the index), and a timestamp outside the segment's range is never returned.
#[test]
fn unchecked_reads_still_blame_the_data_file_for_damaged_records() {
    let model = standard_model();
    let (key, cell) = model
        .iter()
        .find(|(_, c)| c.value.len() > 20 && !c.tombstone)
        .map(|(k, c)| (k.clone(), c.clone()))
        .unwrap();
    let dir = written_v3(&model);
    let data = component_path(dir.path(), Component::Data);
    let pristine = std::fs::read(&data).unwrap();
    let key_at = pristine
        .windows(key.len() + 5)
        .position(|w| w[..key.len()] == key[..] && w[key.len()..] == cell.value[..5])
        .unwrap();
    // The record starts with flags (1 byte) and ts (8 bytes LE); the key follows the two
    // length varints (1 byte each here).
    let rec_at = key_at - 11;
    assert_eq!(
        u64::from_le_bytes(pristine[rec_at + 1..rec_at + 9].try_into().unwrap()),
        cell.ts
    );
    for (what, at, bit) in [
        ("a key byte", key_at + 4, 0x01u8),
        ("the top timestamp byte", rec_at + 8, 0x40),
    ] {
        let mut bytes = pristine.clone();
        bytes[at] ^= bit;
        std::fs::write(&data, &bytes).unwrap();
        for mode in DiskAccessMode::all() {
            let mut opts = ReaderOptions::default();
            opts.crc_check_chance = 0.0;
            let r =
                SegmentReader::open_with(dir.path(), &seg_name(), mode.resolve(), &opts).unwrap();
            match r.get(&key) {
                Err(Error::Corrupt { path, .. }) => assert_eq!(path, data, "{mode}: {what}"),
                other => panic!("{mode}: {what}: expected Corrupt naming the data, got {other:?}"),
            }
        }
    }
    std::fs::write(&data, &pristine).unwrap();
}

/// A mapped scan checks the records ahead of it three at a time. A damaged record fails
/// exactly the scans that reach it, after every row before it, forward and backward;
/// checking ahead into it (from the record before, as part of one batch) fails nothing.
#[test]
fn a_damaged_record_fails_only_the_scans_that_reach_it() {
    // key00 .. key29, equal-sized records (so the one to damage is easy to find).
    let model: Model = (0..30u32)
        .map(|i| {
            (
                format!("key{i:02}").into_bytes(),
                Cell::live(&[b'a' + (i % 26) as u8; 100], 7),
            )
        })
        .collect();
    let dir = written_v3(&model);
    let data = component_path(dir.path(), Component::Data);
    let pristine = std::fs::read(&data).unwrap();
    let rec = (pristine.len() - segstore::format::footer::FOOTER_LEN) / model.len();
    let mut bytes = pristine.clone();
    bytes[10 * rec + rec / 2] ^= 0x10; // a value byte of key10
    std::fs::write(&data, &bytes).unwrap();
    let k = |i: u32| format!("key{i:02}").into_bytes();
    for mode in DiskAccessMode::all() {
        let r = open_in(dir.path(), &seg_name(), mode);
        let rows = |lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, back: bool| {
            let mut it = r.scan((lo, hi)).unwrap();
            let mut n = 0;
            loop {
                match if back { it.next_back() } else { it.next() } {
                    None => return Ok(n),
                    Some(Ok(_)) => n += 1,
                    Some(Err(e)) => return Err((n, e)),
                }
            }
        };
        use Bound::{Excluded, Included, Unbounded};
        // Key09's batch of three checks key10 too; the scan stops at key09 (it reads
        // key09 to see it is past the end), so nothing fails.
        assert_eq!(rows(Unbounded, Included(k(8)), false).unwrap(), 9, "{mode}");
        assert_eq!(
            rows(Included(k(11)), Unbounded, false).unwrap(),
            19,
            "{mode}"
        );
        assert_eq!(
            rows(Excluded(k(10)), Unbounded, true).unwrap(),
            19,
            "{mode}"
        );
        for (lo, back, before) in [
            (Unbounded, false, 10),
            (Included(k(9)), false, 1),
            (Unbounded, true, 19),
        ] {
            match rows(lo.clone(), Unbounded, back) {
                Err((n, Error::Corrupt { path, .. })) => {
                    assert_eq!(
                        (n, &path),
                        (before, &data),
                        "{mode}: from {lo:?}, back {back}"
                    )
                }
                other => {
                    panic!("{mode}: from {lo:?}, back {back}: expected Corrupt, got {other:?}")
                }
            }
        }
    }
    std::fs::write(&data, &pristine).unwrap();
}
