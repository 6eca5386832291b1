//! Deferred deletion under the Windows rule (invariants 1, 3, 4, 7), run under the
//! Windows emulation, which refuses to delete any file that /proc/self/maps shows mapped.
//! Under `DeferWhileMapped` the deleter must never even try: `refused_mapped` stays 0.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{files, flush, read, test_config};
use segstore::io::registry;
use segstore::io::rules::{FaultKind, Faults};
use segstore::lifecycle::{Deleter, PendingReason};
use segstore::segment::{Component, SegmentIter};
use segstore::{DeletePolicy, DiskAccessMode, Error, FileRules, Store};

fn entries(range: std::ops::Range<u32>, ts: u64) -> BTreeMap<Vec<u8>, (Vec<u8>, u64)> {
    range
        .map(|i| {
            (
                format!("k{i:05}").into_bytes(),
                (format!("v{i}@{ts}").into_bytes(), ts),
            )
        })
        .collect()
}

fn exists(dir: &Path, name: &segstore::segment::SegmentName) -> [bool; 3] {
    Component::ALL.map(|c| name.path(dir, c).exists())
}

#[test]
fn obsolete_segment_waits_for_last_mapping_then_goes_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let store = Store::open(tmp.path(), test_config(DiskAccessMode::Mmap, rules.clone())).unwrap();
    let dir = store.dir().to_path_buf();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..200, 1));
    let b = flush(&set, &entries(100..300, 2));

    // A reader holds a handle and an iterator on segment `a`.
    let held = set
        .view()
        .segments
        .iter()
        .find(|h| h.name() == &a)
        .unwrap()
        .clone();
    let mut it = SegmentIter::new::<&[u8]>(held.clone(), ..).unwrap();
    assert!(it.next().unwrap().is_ok());

    // Compaction replaces a and b with c.
    let merged: BTreeMap<_, _> = entries(0..200, 1)
        .into_iter()
        .chain(entries(100..300, 2))
        .collect();
    let mut w = set.writer().unwrap();
    let c = w.name().clone();
    for (k, (v, ts)) in &merged {
        w.add(k, v, *ts, false).unwrap();
    }
    w.finish().unwrap();
    set.replace(&[a.id, b.id], std::slice::from_ref(&c))
        .unwrap();

    // b had no other handle: gone. a is still held: nothing visible happens yet.
    assert_eq!(exists(&dir, &b), [false; 3]);
    assert_eq!(exists(&dir, &a), [true; 3]);
    assert!(held.segment().is_obsolete());
    assert!(store.deleter().pending().is_empty());
    assert_eq!(read(&set, b"k00150"), Some(b"v150@2".to_vec()));

    drop(held);
    assert_eq!(exists(&dir, &a), [true; 3], "the iterator still holds it");
    assert!(it.next().unwrap().is_ok());
    drop(it);
    // The last mapping closed: deleted on this thread, no polling.
    assert_eq!(exists(&dir, &a), [false; 3]);
    assert!(store.deleter().pending().is_empty());
    assert_eq!(
        rules.counts().refused_mapped,
        0,
        "the deleter tried to delete a mapped file"
    );

    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(registry().stats_under(&dir).maps, 0);
    assert_eq!(
        files(&dir),
        vec![
            "LOCK",
            "commitlog",
            "deletions.pending",
            "t-3-Data.db",
            "t-3-Index.db",
            "t-3-Meta.db",
            "t.manifest"
        ]
    );
}

#[test]
fn cleared_snapshot_waits_for_its_readers_and_for_hard_links_mapped_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let store = Store::open(tmp.path(), test_config(DiskAccessMode::Mmap, rules.clone())).unwrap();
    let dir = store.dir().to_path_buf();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..100, 1));
    store.snapshot("snap1", None).unwrap();
    let snap_dir = dir.join("snapshots/snap1");
    assert!(a.path(&snap_dir, Component::Data).exists());

    // Read the snapshot (maps the hard links), then clear it.
    let view = store.open_snapshot("snap1").unwrap();
    assert_eq!(
        view.tables["t"][0].get(b"k00007").unwrap().unwrap().value,
        b"v7@1"
    );
    store.clear_snapshot("snap1").unwrap();
    assert!(
        store.list_snapshots().unwrap().is_empty(),
        "a cleared snapshot is hidden at once"
    );
    assert!(matches!(
        store.clear_snapshot("snap1"),
        Err(Error::NotFound { .. })
    ));
    assert!(
        a.path(&snap_dir, Component::Data).exists(),
        "mapped: must wait"
    );
    drop(view);
    // The snapshot readers are gone, but the live segment maps the same identity (hard
    // links share it): Windows would still refuse, so the links must still be there.
    assert!(a.path(&snap_dir, Component::Data).exists());
    assert!(
        !a.path(&snap_dir, Component::Meta).exists(),
        "meta is never mapped"
    );

    // Compaction makes `a` obsolete; the live view drops it; now both go.
    let mut w = set.writer().unwrap();
    let b = w.name().clone();
    w.add(b"k", b"v", 9, false).unwrap();
    w.finish().unwrap();
    set.replace(&[a.id], std::slice::from_ref(&b)).unwrap();
    assert!(
        !snap_dir.exists(),
        "snapshot directory removed once its files went"
    );
    assert_eq!(exists(&dir, &a), [false; 3]);
    assert_eq!(rules.counts().refused_mapped, 0);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn deletions_refused_by_the_os_complete_at_the_next_open_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    // A scanner that refuses every deletion.
    let rules = FileRules::windows_emulation_with_refusals(1.0, 7);
    let store = Store::open(
        tmp.path(),
        test_config(DiskAccessMode::Standard, rules.clone()),
    )
    .unwrap();
    let dir = store.dir().to_path_buf();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..50, 1));
    let mut w = set.writer().unwrap();
    let b = w.name().clone();
    w.add(b"k00001", b"new", 5, false).unwrap();
    w.finish().unwrap();
    set.replace(&[a.id], std::slice::from_ref(&b)).unwrap();
    assert_eq!(exists(&dir, &a), [true; 3]);
    assert!(store
        .deleter()
        .pending()
        .iter()
        .all(|p| matches!(p.reason, PendingReason::Refused(_))));
    assert!(rules.counts().refused_random >= 3);
    drop(set);
    drop(store); // crash: no close

    let store = Store::open(
        &dir,
        test_config(DiskAccessMode::Standard, FileRules::windows_emulation()),
    )
    .unwrap();
    assert_eq!(exists(&dir, &a), [false; 3], "journal completed at open");
    assert_eq!(exists(&dir, &b), [true; 3], "the live segment is untouched");
    assert_eq!(
        read(&store.segments("t").unwrap(), b"k00001"),
        Some(b"new".to_vec())
    );
    assert!(store.close().unwrap().is_clean());
}

#[test]
fn orphans_and_temp_files_are_removed_at_open_and_live_files_never() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = || test_config(DiskAccessMode::Auto, FileRules::windows_emulation());
    let store = Store::open(tmp.path(), cfg()).unwrap();
    let dir = store.dir().to_path_buf();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..10, 1));
    // A segment written but never added to the manifest (crash before the manifest).
    let mut w = set.writer().unwrap();
    let orphan = w.name().clone();
    w.add(b"x", b"y", 1, false).unwrap();
    w.finish().unwrap();
    // A writer that crashed mid-way leaves temp files.
    let mut w2 = set.writer().unwrap();
    w2.add(b"x", b"y", 1, false).unwrap();
    let half = w2.name().clone();
    std::mem::forget(w2);
    assert!(dir
        .join(format!("{}.tmp", half.file_name(Component::Data)))
        .exists());
    drop(set);
    drop(store);

    let store = Store::open(&dir, cfg()).unwrap();
    assert_eq!(exists(&dir, &orphan), [false; 3]);
    assert!(!dir
        .join(format!("{}.tmp", half.file_name(Component::Data)))
        .exists());
    assert_eq!(exists(&dir, &a), [true; 3]);
    // New ids never reuse a name seen on disk.
    let w = store.segments("t").unwrap().writer().unwrap();
    assert!(w.name().id > half.id, "{} vs {}", w.name(), half);
    drop(w);
    assert!(store.close().unwrap().is_clean());
}

#[test]
fn a_second_open_gets_locked_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = || test_config(DiskAccessMode::Mmap, FileRules::posix());
    let store = Store::open(tmp.path(), cfg()).unwrap();
    let set = store.segments("t").unwrap();
    flush(&set, &entries(0..10, 1));
    let before = files(store.dir());
    match Store::open(tmp.path(), cfg()) {
        Err(Error::Locked(d)) => assert_eq!(d, store.dir()),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert_eq!(files(store.dir()), before);
    drop(set);
    assert!(store.close().unwrap().is_clean());
    Store::open(tmp.path(), cfg()).unwrap().close().unwrap();
}

#[test]
fn close_reports_leaked_handles_and_mappings_with_where_they_were_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(
        tmp.path(),
        test_config(DiskAccessMode::Mmap, FileRules::windows_emulation()),
    )
    .unwrap();
    let set = store.segments("t").unwrap();
    flush(&set, &entries(0..10, 1));
    let leaked = set.view().segments[0].clone();
    let report = store.close().unwrap();
    assert_eq!(report.leaked_handles.len(), 1, "{report:?}");
    assert!(report.leaked_handles[0]
        .taken_at
        .file()
        .ends_with("lifecycle_deferred_deletion.rs"));
    assert_eq!(report.leaked_mappings.len(), 2, "data and index maps");
    drop(leaked);
    assert_eq!(registry().stats_under(tmp.path()).maps, 0);
}

#[test]
fn the_emulation_takes_its_ground_truth_from_the_os() {
    use segstore::io::rules::FileOp;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(
        tmp.path(),
        test_config(DiskAccessMode::Mmap, FileRules::posix()),
    )
    .unwrap();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..10, 1));
    let rules = FileRules::windows_emulation();
    let data = a.path(store.dir(), Component::Data);
    let link = store.dir().join("hardlink-of-data");
    std::fs::hard_link(&data, &link).unwrap();
    for op in [FileOp::Delete, FileOp::Replace, FileOp::Truncate] {
        let e = rules.check(op, &link).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{op:?}");
    }
    rules
        .check(FileOp::Delete, &a.path(store.dir(), Component::Meta))
        .unwrap();
    drop(set);
    store.close().unwrap();
    rules.check(FileOp::Delete, &link).unwrap();
    std::fs::remove_file(link).unwrap();
}

#[test]
fn snapshot_of_an_empty_table_is_visible() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(
        tmp.path(),
        test_config(DiskAccessMode::Mmap, FileRules::windows_emulation()),
    )
    .unwrap();
    let _set = store.segments("t").unwrap();
    store.snapshot("s2", None).unwrap();
    let d = store.dir().join("snapshots/s2");
    assert!(d.join("manifest").exists());
    assert_eq!(store.list_snapshots().unwrap().len(), 1);
}

/// Two threads snapshotting under one tag at once: exactly one publishes, the other gets
/// `AlreadyExists`, and no staging directory is left once the store closes. (Each round
/// uses a new tag: a cleared tag stays reserved while its hard links of mapped segments
/// wait for deletion, which is the Windows rule at work.)
#[test]
fn concurrent_snapshots_with_one_tag_publish_once() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(
        tmp.path(),
        test_config(DiskAccessMode::Mmap, FileRules::windows_emulation()),
    )
    .unwrap();
    let set = store.segments("t").unwrap();
    flush(&set, &entries(0..50, 1));
    for round in 0..20 {
        let tag = format!("same{round}");
        let results: Vec<segstore::Result<()>> = std::thread::scope(|s| {
            let a = s.spawn(|| store.snapshot(&tag, None));
            let b = s.spawn(|| store.snapshot(&tag, None));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, Error::AlreadyExists { .. }),
                    "round {round}: {e}"
                );
            }
        }
        assert_eq!(store.list_snapshots().unwrap().len(), 1);
        store.clear_snapshot(&tag).unwrap();
    }
    drop(set);
    assert!(store.close().unwrap().is_clean());
    let snaps = tmp.path().join("snapshots");
    assert!(files(&snaps).is_empty(), "{:?}", files(&snaps));
}

/// Issue 11, defect 7: retries go deepest first, so a cleared snapshot's directory is
/// attempted after its files and, once they are gone, deleted rather than reported as
/// pending. Under `Immediate` and the emulation, the files mapped by a reader (and by
/// the live segment they link to) are refused at clear, and retried at close.
#[test]
fn close_deletes_a_cleared_snapshot_directory_after_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let mut cfg = test_config(DiskAccessMode::Mmap, rules.clone());
    cfg.delete_policy = DeletePolicy::Immediate;
    let store = Store::open(tmp.path(), cfg).unwrap();
    let dir = store.dir().to_path_buf();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..100, 1));
    store.snapshot("s", None).unwrap();
    let snap_dir = dir.join("snapshots/s");
    let view = store.open_snapshot("s").unwrap();
    store.clear_snapshot("s").unwrap();
    assert!(store.list_snapshots().unwrap().is_empty());
    assert!(
        a.path(&snap_dir, Component::Data).exists(),
        "mapped: the OS refused"
    );
    assert!(rules.counts().refused_mapped > 0);
    drop(view);
    drop(set);
    let report = store.close().unwrap();
    assert!(report.pending_deletions.is_empty(), "{report:?}");
    assert!(report.is_clean(), "{report:?}");
    assert!(!snap_dir.exists(), "{:?}", files(&snap_dir));
}

/// Issue 11, defect 7, at any depth and at open: the journal lists a directory before
/// its contents (path order), and both `close` and the next open after a crash must
/// still delete the contents first, leaving nothing pending.
#[test]
fn journaled_directories_go_after_their_contents_at_close_and_at_open() {
    for crash in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("doomed/sub")).unwrap();
        std::fs::write(dir.join("doomed/sub/f"), b"x").unwrap();
        std::fs::write(dir.join("doomed/g"), b"x").unwrap();
        let rules = FileRules::posix().with_faults(Faults::new().fail(
            FaultKind::RefuseDelete,
            "doomed/",
            0,
            u64::MAX,
        ));
        let d = Deleter::open(dir, rules.clone(), DeletePolicy::Immediate).unwrap();
        d.delete(&["doomed/sub/f", "doomed/g", "doomed/sub", "doomed"])
            .unwrap();
        assert_eq!(d.pending().len(), 4, "{:?}", d.pending());
        let d = if crash {
            drop(d);
            Deleter::open(dir, FileRules::posix(), DeletePolicy::Immediate).unwrap()
        } else {
            rules.faults().unwrap().clear();
            d
        };
        let left = d.close().unwrap();
        assert!(left.is_empty(), "crash {crash}: {left:?}");
        assert!(!dir.join("doomed").exists(), "crash {crash}");
    }
}

/// Issue 11, defect 8: a flush deletes nothing, so it must not rewrite the journal
/// (every journal write fails from here on; none may be attempted).
#[test]
fn a_flush_with_nothing_to_delete_does_not_rewrite_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation().with_faults(Faults::new());
    let store = Store::open(tmp.path(), test_config(DiskAccessMode::Mmap, rules.clone())).unwrap();
    let dir = store.dir().to_path_buf();
    let set = store.segments("t").unwrap();
    let a = flush(&set, &entries(0..50, 1));
    let b = flush(&set, &entries(50..100, 2));
    let mut w = set.writer().unwrap();
    let c = w.name().clone();
    w.add(b"k", b"v", 3, false).unwrap();
    w.finish().unwrap();
    set.replace(&[a.id, b.id], std::slice::from_ref(&c))
        .unwrap();
    assert!(dir.join("deletions.pending").exists());
    assert_eq!(exists(&dir, &a), [false; 3]);
    let faults = rules.faults().unwrap();
    for kind in [FaultKind::Rename, FaultKind::Fsync, FaultKind::NoSpace] {
        faults.add(kind, "deletions.pending", 0, u64::MAX);
    }
    for round in 0..3u32 {
        flush(
            &set,
            &entries(round * 10..round * 10 + 10, 4 + u64::from(round)),
        );
    }
    assert_eq!(
        faults.counts().iter().map(|(_, n)| n).sum::<u64>(),
        0,
        "a flush wrote the journal: {:?}",
        faults.counts()
    );
    faults.clear();
    drop(set);
    assert!(store.close().unwrap().is_clean());
}

/// Issue 18 item 4. The bug: creating a snapshot under a tag that was cleared while its
/// files were still mapped failed with `AlreadyExists`, though `list_snapshots` no
/// longer showed the tag. Now the error says why the tag is taken and when it is free,
/// and the tag can be taken again as soon as the files are gone.
#[test]
fn a_cleared_tag_whose_files_wait_says_why_and_is_free_once_they_go() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let store = Store::open(tmp.path(), test_config(DiskAccessMode::Mmap, rules)).unwrap();
    let set = store.segments("t").unwrap();
    flush(&set, &entries(0..100, 1));
    store.snapshot("snap1", None).unwrap();
    let view = store.open_snapshot("snap1").unwrap();
    store.clear_snapshot("snap1").unwrap();
    assert!(store.list_snapshots().unwrap().is_empty());
    let pending = store.pending_deletions();
    assert!(
        pending
            .iter()
            .any(|p| p.path.starts_with("snapshots/snap1") && p.reason == PendingReason::Mapped),
        "{pending:?}"
    );
    let err = store.snapshot("snap1", None).unwrap_err();
    match &err {
        Error::SnapshotTagPending { tag, files, why } => {
            assert_eq!(tag, "snap1");
            assert!(*files > 0);
            assert!(why.contains("still mapped"), "{why}");
        }
        other => panic!("expected SnapshotTagPending, got {other:?}"),
    }
    assert!(err.to_string().contains("free again"), "{err}");
    // The snapshot's reader and the live segment (hard links share the identity) both
    // map the files: the tag is free once neither does.
    drop(view);
    drop(set);
    store.drop_table("t").unwrap();
    assert!(
        store.pending_deletions().is_empty(),
        "{:?}",
        store.pending_deletions()
    );
    store.snapshot("snap1", None).unwrap();
    assert_eq!(store.list_snapshots().unwrap().len(), 1);
    store.close().unwrap();
}
