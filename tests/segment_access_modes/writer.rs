//! The writer: key limits, order checks, and what an unfinished writer leaves.

use std::ops::Bound;

use crate::common::*;
use segstore::format::MAX_KEY_LEN;
use segstore::segment::{Component, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, Error, FileRules};

pub(crate) fn max_key_accepted_and_one_more_rejected(mode: DiskAccessMode) {
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

pub(crate) fn out_of_order_and_duplicates_rejected_writer_stays_usable(mode: DiskAccessMode) {
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

pub(crate) fn dropped_unfinished_writer_leaves_no_files(mode: DiskAccessMode) {
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
