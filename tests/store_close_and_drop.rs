//! `Store::close(&self)` closes once (a second call is a harmless no-op with an empty
//! report, and releases the directory lock on the first), and a store dropped without
//! close fsyncs the commit log and flushes nothing: under `periodic` sync a power loss
//! right after the drop keeps every acknowledged write, as a close would have.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // counts segment files

use std::path::Path;
use std::sync::Arc;

use segstore::io::PowerLoss;
use segstore::{CommitLogSync, Config, Error, FileRules, Store};

fn periodic(rules: FileRules) -> Config {
    let mut c = Config::default();
    // Never fires during the test: only close, drop and explicit syncs fsync.
    c.commitlog.sync = CommitLogSync::Periodic {
        period_ms: 3_600_000,
    };
    c.file_rules = rules;
    c
}

fn segment_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".db")
        })
        .count()
}

#[test]
fn close_takes_a_shared_store_once_and_releases_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = Arc::new(Store::open(&dir, Config::default()).unwrap());
    let t = store.table("t").unwrap();
    t.put(b"k", b"v").unwrap();
    drop(t);
    // Closed through a shared reference, from another thread.
    let s2 = Arc::clone(&store);
    let report = std::thread::spawn(move || s2.close().unwrap())
        .join()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    // The second close does nothing and says so with an empty report.
    let again = store.close().unwrap();
    assert!(again.is_clean(), "{again:?}");
    assert!(matches!(store.table("t"), Err(Error::Closed)));
    assert!(matches!(store.snapshot("s", None), Err(Error::Closed)));
    // Nothing that writes runs on a closed store (its lock is released).
    assert!(matches!(store.tables().flush(None), Err(Error::Closed)));
    assert!(matches!(store.clear_snapshot("s"), Err(Error::Closed)));
    assert!(matches!(store.drop_table("t"), Err(Error::Closed)));
    // The closed store object still lives, but its lock is gone: reopen in place.
    let reopened = Store::open(&dir, Config::default()).unwrap();
    assert_eq!(
        reopened.table("t").unwrap().get(b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    drop(store); // after close: nothing more happens
    reopened.close().unwrap();
}

/// The acknowledged writes of a store dropped without close survive a power loss right
/// after the drop; the drop wrote no segment. The same writes followed by a power loss
/// *before* the drop are lost, so the test would notice a drop that did not fsync.
#[test]
fn drop_without_close_fsyncs_the_commit_log_and_flushes_nothing() {
    for lose_power_first in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        std::fs::create_dir(&dir).unwrap();
        let sim = PowerLoss::new(&dir, 7);
        let store = Store::open(
            &dir,
            periodic(FileRules::posix().with_power_loss(sim.clone())),
        )
        .unwrap();
        let t = store.table("t").unwrap();
        t.put(b"flushed", b"1").unwrap();
        t.flush().unwrap();
        let segments = segment_files(&dir);
        for i in 0..20u32 {
            t.put(format!("k{i:02}").as_bytes(), b"acked").unwrap();
        }
        t.delete(b"flushed").unwrap();
        drop(t);
        if lose_power_first {
            sim.crash_now();
        }
        drop(store);
        assert_eq!(segment_files(&dir), segments, "the drop flushed nothing");
        sim.recover().unwrap();
        let store = Store::open(&dir, periodic(FileRules::posix())).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..20u32 {
            let got = t.get(format!("k{i:02}").as_bytes()).unwrap();
            if lose_power_first {
                assert_eq!(got, None, "k{i:02}: never fsynced, yet durable");
            } else {
                assert_eq!(got.as_deref(), Some(&b"acked"[..]), "k{i:02} lost");
            }
        }
        let flushed = t.get(b"flushed").unwrap();
        if lose_power_first {
            assert_eq!(flushed.as_deref(), Some(&b"1"[..]));
        } else {
            assert_eq!(flushed, None, "the delete was lost");
        }
        drop(t);
        store.close().unwrap();
    }
}

/// A close waits (up to a second) for point reads still running: a `get_with` closure
/// that is reading a segment's bytes when another thread closes the store finishes
/// with those bytes intact, and the close reports nothing leaked.
#[test]
fn close_waits_for_a_get_with_closure_still_running() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = periodic(FileRules::posix());
    cfg.disk_access_mode = segstore::DiskAccessMode::Mmap;
    let store = Arc::new(Store::open(tmp.path(), cfg).unwrap());
    let t = store.table("t").unwrap();
    t.put(b"k", b"value in a segment").unwrap();
    t.flush().unwrap();
    let inside = Arc::new(std::sync::Barrier::new(2));
    let reader = {
        let (t, inside, store) = (Arc::clone(&t), Arc::clone(&inside), Arc::clone(&store));
        std::thread::spawn(move || {
            t.get_with(b"k", |v| {
                inside.wait();
                // Read the bytes only once the close has begun (the store refuses new
                // work from then on), however the two threads are scheduled.
                while !matches!(store.table("t"), Err(Error::Closed)) {
                    std::thread::yield_now();
                }
                v.map(<[u8]>::to_vec)
            })
            .unwrap()
        })
    };
    inside.wait();
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(
        reader.join().unwrap().as_deref(),
        Some(&b"value in a segment"[..])
    );
    assert!(matches!(t.get(b"k"), Err(Error::Closed)));
}

fn faulty_config(mode: segstore::DiskAccessMode) -> (Config, FileRules) {
    let rules = FileRules::windows_emulation().with_faults(segstore::io::faults::Faults::new());
    let mut cfg = periodic(rules.clone());
    cfg.disk_access_mode = mode;
    cfg.delete_policy = segstore::DeletePolicy::DeferWhileMapped;
    (cfg, rules)
}

/// Every file under `dir` with its bytes (the journal's included), for "nothing
/// changed".
fn tree(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if !p.ends_with("LOCK") {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Issue 18 B. The bug: `SegmentSet::release` swapped in the empty view without the
/// manifest lock, so a `compact()` that had passed its open check swapped a view of
/// live segments back in after the close released it (and mapped them past the close).
/// The scenario: a compaction is held just before its view swap while another thread
/// closes the store. The fix: close waits for flushes and compactions in flight and
/// refuses new ones, and the release takes the manifest lock and freezes the set.
#[test]
fn close_waits_for_a_compaction_in_flight_and_no_view_comes_back() {
    use segstore::io::points::reached;
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, rules) = faulty_config(segstore::DiskAccessMode::Mmap);
    let store = Arc::new(Store::open(tmp.path(), cfg).unwrap());
    let t = store.table("t").unwrap();
    for k in [b"a", b"b"] {
        t.put(k, b"v").unwrap();
        t.flush().unwrap();
    }
    let points = rules.faults().unwrap().points();
    let swaps = points.count("set swaps its view"); // the flushes' swaps
    points.hold("set swaps its view", "", 1);
    let compaction = {
        let (t, rules) = (Arc::clone(&t), rules.clone());
        std::thread::spawn(move || {
            let r = t.compact();
            rules.faults().unwrap().points().mark("compaction returned");
            r
        })
    };
    points.wait_for("set swaps its view", swaps + 1);
    let close = {
        let (store, rules) = (Arc::clone(&store), rules.clone());
        std::thread::spawn(move || {
            let r = store.close();
            rules.faults().unwrap().points().mark("close returned");
            r
        })
    };
    points.wait_until(|a| {
        reached(a, "close returned") || reached(a, "close waits for a flush or compaction")
    });
    points.release("set swaps its view");
    let compacted = compaction.join().unwrap();
    assert!(compacted.is_ok(), "{compacted:?}");
    let report = close.join().unwrap().unwrap();
    assert!(report.is_clean(), "{report:?}");
    let mapped = segstore::io::registry().open_under(tmp.path());
    assert!(mapped.is_empty(), "mapped after close: {mapped:?}");
    let before = tree(tmp.path());
    drop(t);
    drop(store);
    assert_eq!(tree(tmp.path()), before, "files changed after close");
    let store = Store::open(tmp.path(), Config::default()).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(t.get(b"a").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(
        store.segment_stats().len(),
        1,
        "the compaction's one segment"
    );
    store.close().unwrap();
}

/// Issue 18 B and 3. The bug: a compacted-away segment still mapped by a `Value` the
/// application kept was not in the close report (though the journal named its files),
/// and when the value dropped after `close()` had released the directory lock, the
/// same process unlinked the files and rewrote the journal, perhaps under another
/// process's store. The fix: the report lists the deletion, and nothing touches the
/// directory after close; the next open deletes the files.
#[test]
fn a_segment_held_past_close_is_reported_and_left_for_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, _rules) = faulty_config(segstore::DiskAccessMode::Mmap);
    let store = Store::open(tmp.path(), cfg).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"k", b"held by a value").unwrap();
    t.flush().unwrap();
    let first = segment_names(tmp.path());
    let value = t.get(b"k").unwrap().unwrap();
    t.put(b"other", b"v").unwrap();
    t.compact().unwrap();
    let pending = store.pending_deletions();
    assert!(
        first
            .iter()
            .all(|f| pending.iter().any(|p| p.path.ends_with(f))),
        "{first:?} not all in {pending:?}"
    );
    drop(t);
    let report = store.close().unwrap();
    assert!(!report.is_clean());
    for f in &first {
        assert!(
            report.pending_deletions.iter().any(|p| p.path.ends_with(f)),
            "{f} missing from the close report: {report:?}"
        );
    }
    let before = tree(tmp.path());
    assert_eq!(&*value, b"held by a value");
    drop(value); // the last mapping closes after the close
    drop(store);
    assert_eq!(tree(tmp.path()), before, "files changed after close");
    let store = Store::open(tmp.path(), Config::default()).unwrap();
    let left: Vec<String> = segment_names(tmp.path())
        .into_iter()
        .filter(|f| first.contains(f))
        .collect();
    assert!(left.is_empty(), "the next open deletes them: {left:?}");
    let t = store.table("t").unwrap();
    assert_eq!(
        t.get(b"k").unwrap().as_deref(),
        Some(&b"held by a value"[..])
    );
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

fn segment_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("t-"))
        .collect();
    v.sort();
    v
}

/// Review of issue 18 B. The bug: a snapshot that had passed its open check linked its
/// files and published its manifest after `close()` returned (close waited only for
/// flushes and compactions). The scenario: the snapshot is held between its flush and
/// its links while another thread closes. The fix: every operation that may write holds
/// the store's operation gate, which close takes once before it starts.
#[test]
fn close_waits_for_a_snapshot_in_flight() {
    use segstore::io::points::reached;
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, rules) = faulty_config(segstore::DiskAccessMode::Mmap);
    let store = Arc::new(Store::open(tmp.path(), cfg).unwrap());
    let t = store.table("t").unwrap();
    t.put(b"k", b"v").unwrap();
    drop(t);
    let points = rules.faults().unwrap().points();
    points.hold("snapshot links", "", 1);
    let snapshot = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.snapshot("s", None))
    };
    points.wait_for("snapshot links", 1);
    let close = {
        let (store, rules, dir) = (Arc::clone(&store), rules.clone(), tmp.path().to_path_buf());
        std::thread::spawn(move || {
            let report = store.close();
            let after = tree(&dir);
            rules.faults().unwrap().points().mark("close returned");
            (report, after)
        })
    };
    points.wait_until(|a| reached(a, "close returned") || reached(a, "close waits for operations"));
    points.release("snapshot links");
    snapshot.join().unwrap().unwrap();
    let (report, at_close) = close.join().unwrap();
    assert!(report.unwrap().is_clean());
    assert_eq!(
        tree(tmp.path()),
        at_close,
        "the snapshot wrote after close returned"
    );
    drop(store);
    let store = Store::open(tmp.path(), Config::default()).unwrap();
    assert_eq!(store.list_snapshots().unwrap().len(), 1);
    store.close().unwrap();
}
