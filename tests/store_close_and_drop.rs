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
