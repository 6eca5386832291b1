//! Point gets, scans and concurrent reads: what a reader returns.

use std::ops::Bound;
use std::sync::Arc;

use crate::common::*;
use crate::fixtures::{standard_model, written};
use segstore::format::MAX_KEY_LEN;
use segstore::segment::SegmentReader;
use segstore::DiskAccessMode;

pub(crate) fn point_gets_hit_and_miss(mode: DiskAccessMode) {
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

pub(crate) fn tombstones_and_empty_values(mode: DiskAccessMode) {
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

pub(crate) fn scan_every_bound_combination(mode: DiskAccessMode) {
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

pub(crate) fn empty_segment(mode: DiskAccessMode) {
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

pub(crate) fn concurrent_gets_on_one_reader(mode: DiskAccessMode) {
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
