//! Fault injection (issue 8): I/O failures injected through `FileRules::with_faults`
//! while the store runs. After each fault the store either completes the operation or
//! returns a typed error, and a reopen without faults finds a consistent store: no
//! acknowledged write lost, no orphan or temp file after close, no live file deleted.
//!
//! - (a) fsync failure in the commit log: that write fails, every later write is
//!   `Error::Poisoned`, and so is a flush (after it flushed); reopen recovers everything
//!   acknowledged before.
//! - (b) ENOSPC, short writes and fsync failures while flushing a segment: the flush
//!   fails, the memtable keeps the data (readable now, replayed after reopen), and no
//!   temp file survives. Writers stalled behind a flush that keeps failing get
//!   `Error::FlushFailed`, never a hang.
//! - (c) rename failures while publishing a segment, replacing a table manifest, the
//!   commit log positions or a snapshot: an error, no half-visible segment.
//! - (d) refused deletes (a random fraction and targeted): completed at close or at the
//!   next open.
//!
//! Each test prints the faults it injected, by kind (`cargo test --test fault_injection
//! -- --nocapture`).
#![allow(clippy::disallowed_methods)] // plants files on purpose, outside the store's I/O boundary

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use segstore::io::rules::{FaultKind, Faults};
use segstore::lifecycle::Deleter;
use segstore::segment::SegmentName;
use segstore::{
    CommitLogConfig, CommitLogSync, CompactionConfig, Config, DeletePolicy, DiskAccessMode, Error,
    FileRules, Store, Table, TableConfig,
};

fn cfg(rules: FileRules) -> Config {
    let mut c = common::test_config(DiskAccessMode::Mmap, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Batch;
    c.commitlog.segment_size = 4096;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 1 << 20;
    c.table.background_compaction = false;
    c.table.compaction = CompactionConfig::default();
    c
}

/// Rules with an (initially empty) fault set; the returned rules share it.
fn rules_with_faults() -> FileRules {
    FileRules::posix().with_faults(Faults::new())
}

fn faults(rules: &FileRules) -> &Faults {
    rules.faults().expect("rules with faults")
}

fn report(test: &str, rules: &FileRules) {
    let counts: Vec<String> = faults(rules)
        .counts()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k:?}={n}"))
        .collect();
    eprintln!("faults injected [{test}]: {}", counts.join(" "));
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn val(i: u32, gen: u32) -> Vec<u8> {
    format!("value-{i}-{gen}-padding-padding").into_bytes()
}

/// Everything in `model` reads back from `t`, and nothing else.
fn check(t: &Table, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(
            t.get(k).unwrap().as_deref(),
            Some(v.as_slice()),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    let n = t.scan(..).unwrap().count();
    assert_eq!(n, model.len());
}

/// No temp file anywhere, no segment file outside the manifests, nothing pending.
fn assert_consistent(store: &Store) {
    let dir = store.dir();
    for sub in [dir.to_path_buf(), dir.join("commitlog")] {
        for f in common::files(&sub) {
            assert!(!f.ends_with(".tmp"), "temp file left: {f}");
            if let Some((seg, _)) = SegmentName::parse_file_name(&f) {
                let live = store.table(&seg.table).unwrap().segments().live_ids();
                assert!(live.contains(&seg.id), "orphan segment file {f}");
            }
        }
    }
    assert!(
        store.deleter().pending().is_empty(),
        "{:?}",
        store.deleter().pending()
    );
}

/// Reopen without faults, check the data and the directory, close cleanly.
fn reopen_and_verify(dir: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let store = Store::open(dir, cfg(FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    check(&t, model);
    assert_consistent(&store);
    // A flush and a compaction work again.
    t.compact().unwrap();
    check(&t, model);
    drop(t);
    let r = store.close().unwrap();
    assert!(r.is_clean(), "{r:?}");
    let store = Store::open(dir, cfg(FileRules::posix())).unwrap();
    assert_consistent(&store);
    assert!(store.close().unwrap().is_clean());
}

fn fill(t: &Table, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, range: std::ops::Range<u32>, gen: u32) {
    for i in range {
        t.put(key(i), val(i, gen)).unwrap();
        model.insert(key(i), val(i, gen));
    }
}

// (a) ------------------------------------------------------------------------------

#[test]
fn commit_log_fsync_failure_poisons_and_reopen_recovers_acknowledged_writes() {
    for close_after in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let rules = rules_with_faults();
        let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
        let t = store.table("t").unwrap();
        let mut model = BTreeMap::new();
        fill(&t, &mut model, 0..40, 0);
        t.flush().unwrap();
        fill(&t, &mut model, 20..60, 1);
        faults(&rules).add(FaultKind::Fsync, "commitlog-", 0, 1);
        let e = t.put(key(1000), b"never acknowledged").unwrap_err();
        assert!(
            matches!(&e, Error::Io { op: "fsync", .. }),
            "the failing write reports the fsync: {e}"
        );
        // Never pretends: every later write is refused, though fsync would work again.
        for i in 0..5 {
            let e = t.put(key(2000 + i), b"x").unwrap_err();
            assert!(matches!(e, Error::Poisoned(_)), "{e}");
        }
        let e = store
            .table("u")
            .and_then(|u| u.put(b"k", b"v"))
            .unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)), "{e}");
        // Acknowledged data still reads.
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_deref(), Some(v.as_slice()));
        }
        drop(t);
        if close_after {
            let e = store.close().unwrap_err();
            assert!(
                matches!(e, Error::Poisoned(_)),
                "close reports the poison: {e}"
            );
        } else {
            drop(store); // like a crash
        }
        report("commit log fsync", &rules);
        assert_eq!(faults(&rules).count(FaultKind::Fsync), 1);
        // The failed write may or may not be in the log (its bytes reached the OS); the
        // refused ones are not.
        let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
        let t = store.table("t").unwrap();
        let maybe = t.get(key(1000)).unwrap().map(|v| v.to_vec());
        for i in 0..5 {
            assert_eq!(t.get(key(2000 + i)).unwrap(), None);
        }
        if let Some(v) = maybe {
            model.insert(key(1000), v);
        }
        drop(t);
        store.close().unwrap();
        reopen_and_verify(tmp.path(), &model);
    }
}

#[test]
fn commit_log_write_failure_poisons() {
    for kind in [FaultKind::NoSpace, FaultKind::ShortWrite] {
        let tmp = tempfile::tempdir().unwrap();
        let rules = rules_with_faults();
        let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
        let t = store.table("t").unwrap();
        let mut model = BTreeMap::new();
        fill(&t, &mut model, 0..30, 0);
        faults(&rules).add(kind, "commitlog-", 0, 1);
        let e = t.put(key(1000), b"never acknowledged").unwrap_err();
        assert!(matches!(&e, Error::Io { op: "write", .. }), "{e}");
        let e = t.put(key(1001), b"x").unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)), "{e}");
        drop(t);
        drop(store);
        report(&format!("commit log {kind:?}"), &rules);
        // A short write leaves a torn record at the tail: replay stops there.
        reopen_and_verify(tmp.path(), &model);
    }
}

// (b) ------------------------------------------------------------------------------

#[test]
fn segment_flush_write_faults_keep_the_memtable() {
    let cases = [
        (FaultKind::NoSpace, "-Data.db"),
        (FaultKind::ShortWrite, "-Data.db"),
        (FaultKind::NoSpace, "-Index.db"),
        (FaultKind::ShortWrite, "-Meta.db"),
        (FaultKind::Fsync, "-Index.db"),
        (FaultKind::Fsync, "-Meta.db"),
    ];
    for (kind, target) in cases {
        for persistent in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let rules = rules_with_faults();
            let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
            let t = store.table("t").unwrap();
            let mut model = BTreeMap::new();
            fill(&t, &mut model, 0..50, 0);
            t.flush().unwrap();
            fill(&t, &mut model, 25..100, 1);
            let times = if persistent { u64::MAX } else { 1 };
            faults(&rules).add(kind, target, 0, times);
            let e = t.flush().unwrap_err();
            assert!(matches!(e, Error::Io { .. }), "{kind:?} {target}: {e}");
            assert!(
                e.to_string().contains(target),
                "the error names the file: {e}"
            );
            // Nothing half-written is visible; the memtable still serves the data.
            assert_eq!(t.segments().live_ids().len(), 1);
            check(&t, &model);
            for f in common::files(store.dir()) {
                assert!(!f.ends_with(".tmp"), "{kind:?}: temp file left: {f}");
            }
            fill(&t, &mut model, 100..110, 2);
            drop(t);
            if persistent {
                // Close tries to flush again, fails, and says so; the log keeps the data.
                assert!(store.close().is_err());
            } else {
                // The next flush (at close) succeeds.
                let r = store.close().unwrap();
                assert!(r.is_clean(), "{r:?}");
            }
            report(&format!("segment flush {kind:?} {target}"), &rules);
            reopen_and_verify(tmp.path(), &model);
        }
    }
}

// (c) ------------------------------------------------------------------------------

#[test]
fn rename_failure_while_publishing_a_segment() {
    // Data is renamed first, so a failure on Index or Meta must take Data back.
    for target in ["-Data.db", "-Index.db", "-Meta.db"] {
        let tmp = tempfile::tempdir().unwrap();
        let rules = rules_with_faults();
        let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
        let t = store.table("t").unwrap();
        let mut model = BTreeMap::new();
        fill(&t, &mut model, 0..50, 0);
        faults(&rules).add(FaultKind::Rename, target, 0, 1);
        let e = t.flush().unwrap_err();
        assert!(matches!(e, Error::Io { op: "rename", .. }), "{e}");
        assert!(t.segments().live_ids().is_empty());
        for f in common::files(store.dir()) {
            assert!(
                SegmentName::parse_file_name(&f).is_none() && !f.ends_with(".tmp"),
                "{target}: half-published file {f}"
            );
        }
        check(&t, &model);
        t.flush().unwrap();
        assert_eq!(t.segments().live_ids().len(), 1);
        check(&t, &model);
        drop(t);
        assert!(store.close().unwrap().is_clean());
        report(&format!("segment publish rename {target}"), &rules);
        reopen_and_verify(tmp.path(), &model);
    }
}

#[test]
fn rename_failure_while_replacing_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = rules_with_faults();
    let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
    let t = store.table("t").unwrap();
    let mut model = BTreeMap::new();
    fill(&t, &mut model, 0..40, 0);
    t.flush().unwrap();
    fill(&t, &mut model, 20..60, 1);
    // A flush whose manifest cannot be replaced.
    faults(&rules).add(FaultKind::Rename, "t.manifest", 0, 1);
    let e = t.flush().unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert_eq!(t.segments().live_ids().len(), 1, "not half visible");
    check(&t, &model);
    // The new segment was retired at once: no file of it remains.
    let live = t.segments().live_ids();
    for f in common::files(store.dir()) {
        assert!(!f.ends_with(".tmp"), "{f}");
        if let Some((seg, _)) = SegmentName::parse_file_name(&f) {
            assert!(live.contains(&seg.id), "unlisted segment file {f}");
        }
    }
    t.flush().unwrap();
    assert_eq!(t.segments().live_ids().len(), 2);
    // A compaction whose manifest cannot be replaced: the old segments stay live.
    faults(&rules).add(FaultKind::Rename, "t.manifest", 0, 1);
    let before = t.segments().live_ids();
    let e = t.compact().unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert_eq!(t.segments().live_ids(), before);
    check(&t, &model);
    // The commit log positions file cannot be replaced: the flush reports it.
    fill(&t, &mut model, 60..70, 2);
    faults(&rules).add(FaultKind::Rename, "positions", 0, 1);
    assert!(t.flush().is_err());
    check(&t, &model);
    drop(t);
    let r = store.close().unwrap();
    assert!(r.is_clean(), "{r:?}");
    report("manifest/positions rename", &rules);
    assert_eq!(faults(&rules).count(FaultKind::Rename), 3);
    reopen_and_verify(tmp.path(), &model);
}

#[test]
fn rename_failure_while_publishing_a_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = rules_with_faults();
    let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
    let t = store.table("t").unwrap();
    let mut model = BTreeMap::new();
    fill(&t, &mut model, 0..40, 0);
    // The manifest is renamed into the staging directory first, then the directory
    // into place (`snapshots/s2` also matches the first: skip it). A failed attempt's
    // staging directory holds hard links of mapped segments, so its deletion waits for
    // their last unmap (at the latest, close), but each attempt stages in a directory of
    // its own: a retry with the same tag succeeds at once.
    for (tag, target, skip) in [("s1", ".tmp/manifest", 0), ("s2", "snapshots/s2", 1)] {
        faults(&rules).add(FaultKind::Rename, target, skip, 1);
        let e = store.snapshot(tag, None).unwrap_err();
        assert!(matches!(e, Error::Io { op: "rename", .. }), "{target}: {e}");
        assert!(store.list_snapshots().unwrap().is_empty(), "{target}");
        store.snapshot(tag, None).unwrap();
        assert_eq!(store.list_snapshots().unwrap().len(), 1, "{target}");
        assert_eq!(store.open_snapshot(tag).unwrap().tables["t"].len(), 1);
        let e = store.snapshot(tag, None).unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{target}: {e}");
        store.clear_snapshot(tag).unwrap();
    }
    store.snapshot("s3", None).unwrap();
    store.clear_snapshot("s3").unwrap();
    drop(t);
    let r = store.close().unwrap();
    assert!(
        r.is_clean(),
        "close finished the staging directories' deletions: {r:?}"
    );
    report("snapshot rename", &rules);
    assert_eq!(faults(&rules).count(FaultKind::Rename), 2);
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    let snaps = tmp.path().join("snapshots");
    if snaps.exists() {
        assert!(
            common::files(&snaps).is_empty(),
            "{:?}",
            common::files(&snaps)
        );
    }
    for tag in ["s1", "s2"] {
        store.snapshot(tag, None).unwrap();
    }
    assert_eq!(store.list_snapshots().unwrap().len(), 2);
    store.clear_all_snapshots().unwrap();
    assert!(store.close().unwrap().is_clean());
    reopen_and_verify(tmp.path(), &model);
}

// (d) ------------------------------------------------------------------------------

#[test]
fn refused_deletes_complete_at_close_or_next_open() {
    for seed in [1u64, 7] {
        let tmp = tempfile::tempdir().unwrap();
        let faults_ = Faults::new()
            .fail(FaultKind::RefuseDelete, "-Data.db", 1, 3)
            .fail(FaultKind::RefuseDelete, "commitlog-", 0, 2);
        let rules = FileRules::windows_emulation_with_refusals(0.3, seed).with_faults(faults_);
        let mut c = cfg(rules.clone());
        c.commitlog.segment_size = 512;
        let store = Store::open(tmp.path(), c).unwrap();
        let t = Arc::new(store.table("t").unwrap());
        let mut model = BTreeMap::new();
        for round in 0..6 {
            fill(&t, &mut model, round * 10..round * 10 + 30, round);
            t.flush().unwrap();
            if round % 2 == 1 {
                t.compact().unwrap();
            }
            check(&t, &model);
        }
        store.deleter().retry_all();
        drop(t);
        let r = store.close().unwrap();
        let counts = rules.counts();
        assert_eq!(
            counts.refused_mapped, 0,
            "a mapped file was never up for deletion"
        );
        eprintln!(
            "seed {seed}: random refusals {}, pending after close {}",
            counts.refused_random,
            r.pending_deletions.len()
        );
        report(&format!("refused deletes seed {seed}"), &rules);
        assert!(faults(&rules).count(FaultKind::RefuseDelete) > 0);
        reopen_and_verify(tmp.path(), &model);
    }
}

// Issue 11, defect 3 --------------------------------------------------------------

/// Writers stalled behind frozen memtables whose flush fails for good (ENOSPC on every
/// segment write) used to wait forever in `wait_for_flushes`. They must get a typed
/// error naming the cause; every write acknowledged before survives; once space is
/// back, a successful flush clears the failure and writes go on.
#[test]
fn writers_stalled_behind_a_failing_flush_get_the_error() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::posix().with_faults(Faults::new().fail(
        FaultKind::NoSpace,
        "-Data.db",
        0,
        u64::MAX,
    ));
    let mut c = cfg(rules.clone());
    c.table.memtable_flush_bytes = 512;
    c.table.max_frozen_memtables = 1;
    let store = Store::open(tmp.path(), c).unwrap();
    let t = store.table("t").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let writers = 3u32;
    for w in 0..writers {
        let (t, tx) = (Arc::clone(&t), tx.clone());
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            for i in 0..2_000u32 {
                let k = key(w * 10_000 + i);
                match t.put(&k, val(i, w)) {
                    Ok(()) => acked.push((k, val(i, w))),
                    Err(e) => {
                        let _ = tx.send((w, Some(e), acked));
                        return;
                    }
                }
            }
            let _ = tx.send((w, None, acked));
        });
    }
    drop(tx);
    let mut model = BTreeMap::new();
    for _ in 0..writers {
        // A hang detector, not a timing assertion: a stalled writer never returns.
        let (w, e, acked) = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a writer stalled behind the failing flush never returned");
        let e = e.unwrap_or_else(|| panic!("writer {w}: 2000 writes with no flush possible"));
        match &e {
            Error::FlushFailed { table, source } => {
                assert_eq!(table, "t");
                assert!(
                    matches!(&**source, Error::Io { source, .. }
                        if source.kind() == std::io::ErrorKind::StorageFull),
                    "writer {w}: the cause is the ENOSPC: {source}"
                );
            }
            other => panic!("writer {w}: expected FlushFailed, got {other}"),
        }
        assert!(e.to_string().contains("-Data.db"), "names the file: {e}");
        model.extend(acked);
    }
    assert!(store.tables().flush(None).is_err());
    assert!(t.flush().is_err());
    check(&t, &model);
    // Space is back: a flush succeeds, the failure is cleared, writes go on.
    faults(&rules).clear();
    t.flush().unwrap();
    fill(&t, &mut model, 50_000..50_050, 9);
    check(&t, &model);
    report("flush ENOSPC with stalled writers", &rules);
    assert!(faults(&rules).count(FaultKind::NoSpace) > 0);
    drop(t);
    assert!(store.close().unwrap().is_clean());
    reopen_and_verify(tmp.path(), &model);
}

/// A flush on a store whose commit log is poisoned used to return `Ok`. It still
/// flushes what the memtables hold (they are the only copy of writes the failed sync
/// may have lost), then reports the poison.
#[test]
fn flush_on_a_poisoned_store_reports_the_poison() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = rules_with_faults();
    let mut c = cfg(rules.clone());
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 60_000 };
    let store = Store::open(tmp.path(), c).unwrap();
    let t = store.table("t").unwrap();
    let mut model = BTreeMap::new();
    fill(&t, &mut model, 0..40, 0);
    faults(&rules).add(FaultKind::Fsync, "commitlog-", 0, 1);
    assert!(store.tables().commit_log().sync().is_err());
    assert!(matches!(t.put(b"x", b"y"), Err(Error::Poisoned(_))));
    let e = t.flush().unwrap_err();
    assert!(matches!(e, Error::Poisoned(_)), "{e}");
    assert_eq!(t.segments().live_ids().len(), 1, "the memtable was flushed");
    let e = store.tables().flush(None).unwrap_err();
    assert!(matches!(e, Error::Poisoned(_)), "{e}");
    check(&t, &model);
    drop(t);
    assert!(matches!(store.close(), Err(Error::Poisoned(_))));
    report("flush on a poisoned store", &rules);
    reopen_and_verify(tmp.path(), &model);
}

// (e) ------------------------------------------------------------------------------

fn entries(range: std::ops::Range<u32>, ts: u64) -> BTreeMap<Vec<u8>, (Vec<u8>, u64)> {
    range.map(|i| (key(i), (val(i, ts as u32), ts))).collect()
}

/// Issue 11, defect 1: a failed journal write must not make the deleter forget that the
/// journal on disk still names deletions that completed. Snapshot `T` is cleared (its
/// files go at once, the journal still names them), the next journal write fails (a
/// compaction's, which only logs the failure; readers still hold the old segments, so
/// no deletion completes after it), `T` is created again, and the process dies without
/// a close: the next open must not apply the old journal to the new `T`.
#[test]
fn a_failed_journal_write_never_lets_a_reused_snapshot_tag_be_deleted_after_a_crash() {
    for kind in [FaultKind::Rename, FaultKind::Fsync, FaultKind::NoSpace] {
        let tmp = tempfile::tempdir().unwrap();
        let rules = rules_with_faults();
        let cfg = |rules| common::test_config(DiskAccessMode::Standard, rules);
        let store = Store::open(tmp.path(), cfg(rules.clone())).unwrap();
        let dir = store.dir().to_path_buf();
        let snap = dir.join("snapshots/T");
        let set = store.segments("t").unwrap();
        let a = common::flush(&set, &entries(0..50, 1));
        let b = common::flush(&set, &entries(50..100, 2));
        store.snapshot("T", None).unwrap();
        store.clear_snapshot("T").unwrap();
        assert!(!snap.exists(), "nothing is mapped: gone at once");

        let readers = set.view().segments.clone();
        faults(&rules).add(kind, "deletions.pending", 0, 1);
        let mut w = set.writer().unwrap();
        let c = w.name().clone();
        for (k, (v, ts)) in entries(0..100, 3) {
            w.add(&k, &v, ts, false).unwrap();
        }
        w.finish().unwrap();
        set.replace(&[a.id, b.id], std::slice::from_ref(&c))
            .unwrap();
        assert_eq!(faults(&rules).count(kind), 1, "{kind:?}");

        store.snapshot("T", None).unwrap();
        let files = common::files(&snap);
        assert!(files.contains(&"manifest".to_string()), "{files:?}");
        drop(readers);
        drop(set);
        drop(store); // crash: no close

        let store = Store::open(&dir, cfg(FileRules::posix())).unwrap();
        assert_eq!(common::files(&snap), files, "{kind:?}");
        let tags: Vec<String> = store
            .list_snapshots()
            .unwrap()
            .into_iter()
            .map(|s| s.tag)
            .collect();
        assert_eq!(tags, ["T"], "{kind:?}");
        let v = store.open_snapshot("T").unwrap();
        for h in &v.tables["t"] {
            h.verify().unwrap();
        }
        drop(v);
        assert!(store.close().unwrap().is_clean());
    }
}

/// Issue 11, defect 1: an announcement whose journal write failed is not durable, so
/// the request that follows must write the journal itself (and fail if it cannot); a
/// request whose journal write failed is withdrawn, and no later retry or close
/// unlinks a file that no journal on disk names.
#[test]
fn deletions_whose_journal_write_failed_are_never_unlinked() {
    for kind in [FaultKind::Rename, FaultKind::Fsync, FaultKind::NoSpace] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for f in ["a", "b"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        let rules =
            FileRules::posix().with_faults(Faults::new().fail(kind, "deletions.pending", 0, 3));
        let d = Deleter::open(dir, rules.clone(), DeletePolicy::Immediate).unwrap();

        assert!(d.announce(&["a"]).is_err());
        let e = d.delete(&["a"]).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{kind:?}: {e}");
        assert!(dir.join("a").exists(), "{kind:?}");
        assert!(!d.is_pending(Path::new("a")));

        assert!(d.delete(&["b"]).is_err());
        assert!(!d.is_pending(Path::new("b")), "{kind:?}: withdrawn");
        assert_eq!(d.retry_all(), 0);
        assert!(
            dir.join("b").exists(),
            "{kind:?}: unlinked without a journal"
        );
        assert_eq!(faults(&rules).count(kind), 3);

        // The faults are spent: the same requests now go through.
        d.delete(&["a", "b"]).unwrap();
        assert!(!dir.join("a").exists() && !dir.join("b").exists());
        assert!(d.close().unwrap().is_empty());
    }
}
