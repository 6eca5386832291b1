//! Table behaviours: commit log files released after flushes (also of writes that lose
//! to a newer version, and none of flushed records left by a close), tombstone purging (and keeping a tombstone that still
//! shadows a segment left out of a minor compaction),
//! explicit timestamps across memtable and segments, snapshots that include unflushed
//! writes, a torn commit log tail after a crash, concurrent writers and readers with
//! background flushes and compactions, and deferred deletion under the Windows rules.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use std::path::Path;
use std::sync::Arc;

use segstore::{
    CommitLogConfig, CommitLogSync, CompactionConfig, CompactionStrategy, Config, DeletePolicy,
    DiskAccessMode, Error, FileRules, Store, TableConfig, WriteBatch,
};

fn cfg(rules: FileRules) -> Config {
    let mut c = common::test_config(DiskAccessMode::Mmap, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 1024;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 1 << 20;
    c.table.background_compaction = false;
    c
}

fn log_files(dir: &Path) -> usize {
    log_lengths(dir).len()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

#[test]
fn flushes_release_commit_log_files_through_the_deleter() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    for i in 0..300 {
        t.put(key(i), b"some value bytes").unwrap();
    }
    let before = log_files(store.dir());
    assert!(before > 5, "{before}");
    let deleted_before = store.deleter().stats();
    t.flush().unwrap();
    assert!(log_files(store.dir()) <= 2, "{}", log_files(store.dir()));
    assert_ne!(store.deleter().stats(), deleted_before);
    assert_eq!(t.stats().segments, 1);
    // Reopen: nothing to replay, everything readable from the segment.
    drop(t);
    assert!(store.close().unwrap().is_clean());
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(
        t.stats().memtable_keys,
        0,
        "flushed records are not replayed"
    );
    assert_eq!(t.scan(..).unwrap().count(), 300);
}

/// Key `k` at timestamp 1,000,000, then about 530 KiB of cells of `k` that lose to it
/// (older timestamps).
fn write_newest_then_losing(t: &segstore::Table) {
    t.write(WriteBatch::new().put_at(b"k", b"newest", 1_000_000))
        .unwrap();
    let value = vec![7u8; 200];
    for ts in 1..2_000u64 {
        t.write(WriteBatch::new().put_at(b"k", &value, ts)).unwrap();
    }
}

/// Writes that lose to the key's newer version (older timestamps, as replication and
/// repair send) are logged like any other: they count toward the flush threshold, so
/// their memtable is flushed and their commit log files released. Counted only when
/// stored, such a stream never filled the memtable and kept every log file.
#[test]
fn writes_that_lose_to_a_newer_version_still_release_their_commit_log() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(FileRules::posix());
    c.table.memtable_flush_bytes = 16 << 10;
    let store = Store::open(tmp.path(), c.clone()).unwrap();
    let t = store.table("t").unwrap();
    // Some 33 memtables' worth, 500 log files of 1 KiB.
    write_newest_then_losing(&t);
    store.tables().wait_idle();
    let files = log_files(store.dir());
    assert!(
        t.stats().flushes > 0,
        "the losing writes filled no memtable"
    );
    assert!(
        files < 80,
        "{files} commit log files kept for 16 KiB memtables"
    );
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"newest"[..]));
    drop(t);
    assert!(store.close().unwrap().is_clean());
    let store = Store::open(tmp.path(), c).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"newest"[..]));
}

/// The same after a crash: replay applies the losing writes again, counts them, and the
/// store opening schedules the flush its memtable is due.
#[test]
fn losing_writes_replayed_after_a_crash_are_flushed_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(FileRules::posix());
    {
        let store = Store::open(tmp.path(), c.clone()).unwrap();
        let t = store.table("t").unwrap();
        // Under this store's 1 MiB threshold.
        write_newest_then_losing(&t);
        assert_eq!(t.stats().flushes, 0);
        // Crash: no close, no flush.
    }
    c.table.memtable_flush_bytes = 16 << 10;
    let store = Store::open(tmp.path(), c).unwrap();
    let t = store.table("t").unwrap();
    store.tables().wait_idle();
    let files = log_files(store.dir());
    assert_eq!(
        t.stats().flushes,
        1,
        "the replayed memtable was flushed at open"
    );
    assert!(files < 80, "{files} commit log files kept after the flush");
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"newest"[..]));
}

#[test]
fn major_compaction_purges_tombstones_past_gc_grace_only() {
    for gc_grace_secs in [0, 864_000] {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(FileRules::posix());
        c.table.gc_grace_secs = gc_grace_secs;
        let store = Store::open(tmp.path(), c).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..100 {
            t.put(key(i), b"v").unwrap();
        }
        t.flush().unwrap();
        for i in 0..50 {
            t.delete(key(i * 2)).unwrap();
        }
        t.compact().unwrap();
        let view = t.segments().view();
        assert_eq!(view.segments.len(), 1);
        let stats = view.segments[0].stats().clone();
        if gc_grace_secs == 0 {
            assert_eq!((stats.entry_count, stats.tombstone_count), (50, 0));
        } else {
            assert_eq!((stats.entry_count, stats.tombstone_count), (100, 50));
        }
        for i in 0..100 {
            assert_eq!(t.get(key(i)).unwrap().is_some(), i % 2 == 1, "{i}");
        }
    }
}

#[test]
fn minor_compaction_keeps_a_tombstone_that_shadows_a_segment_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(FileRules::posix());
    c.table.gc_grace_secs = 0;
    c.table.background_compaction = true;
    c.table.compaction = CompactionConfig::default();
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c.table.compaction.min_threshold = 4;
    c.table.compaction.max_threshold = 4;
    c.table.compaction.min_segment_size = 0;
    let store = Store::open(tmp.path(), c).unwrap();
    let t = store.table("t").unwrap();
    // A big old segment holding the key...
    let mut b = WriteBatch::new();
    b.put_at(b"victim", b"old value", 10);
    for i in 0..300 {
        b.put_at(key(i), vec![7u8; 64], 10);
    }
    t.write(&b).unwrap();
    t.flush().unwrap();
    // ...then four small ones, one with its tombstone: they form their own tier.
    t.write(WriteBatch::new().delete_at(b"victim", 20)).unwrap();
    t.flush().unwrap();
    for i in 0..3 {
        t.put(format!("small{i}").as_bytes(), b"x").unwrap();
        t.flush().unwrap();
    }
    store.tables().wait_idle();
    let s = t.stats();
    assert_eq!((s.segments, s.compactions), (2, 1), "{s:?}");
    assert_eq!(
        t.get(b"victim").unwrap(),
        None,
        "the deleted value came back"
    );
    // A major compaction includes the old segment: now the tombstone can go.
    t.compact().unwrap();
    assert_eq!(t.get(b"victim").unwrap(), None);
    assert_eq!(t.segments().view().segments[0].stats().tombstone_count, 0);
}

#[test]
fn explicit_timestamps_resolve_across_memtable_and_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    t.write(WriteBatch::new().put_at(b"k", b"new", 100))
        .unwrap();
    t.flush().unwrap();
    t.write(WriteBatch::new().put_at(b"k", b"old", 50)).unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(t.scan(..).unwrap().next().unwrap().unwrap().1, b"new");
    // Equal timestamps: the larger value, then a tombstone.
    t.write(WriteBatch::new().put_at(b"k", b"newer", 100))
        .unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"newer"[..]));
    t.write(WriteBatch::new().delete_at(b"k", 100)).unwrap();
    assert_eq!(t.get(b"k").unwrap(), None);
    let cell = t.get_cell(b"k").unwrap().unwrap();
    assert!(cell.tombstone && cell.ts == 100);
    // A clock write is newer than any of those.
    t.put(b"k", b"now").unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"now"[..]));
}

#[test]
fn snapshots_include_unflushed_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"only-in-memtable", b"v").unwrap();
    store.snapshot("snap", None).unwrap();
    let snap = store.open_snapshot("snap").unwrap();
    let found = snap.tables["t"]
        .iter()
        .any(|h| h.get(b"only-in-memtable").unwrap().is_some());
    assert!(found);
    drop(snap);
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

#[test]
fn torn_commit_log_tail_after_a_crash_loses_only_the_torn_write() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(FileRules::posix());
    c.commitlog.segment_size = 1 << 20;
    {
        let store = Store::open(tmp.path(), c.clone()).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..50 {
            t.put(key(i), b"value").unwrap();
        }
        // Crash: no close, no flush.
    }
    let newest = std::fs::read_dir(tmp.path().join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let len = std::fs::metadata(&newest).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    for round in 0..2 {
        let store = Store::open(tmp.path(), c.clone()).unwrap();
        let t = store.table("t").unwrap();
        let keys: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap().0).collect();
        if round == 0 {
            assert_eq!(keys, (0..49).map(key).collect::<Vec<_>>());
        } else {
            // The torn tail is now in an older file, followed by a file that continues
            // at its sequence number: tolerated, and the rewrite is there.
            assert_eq!(keys, (0..50).map(key).collect::<Vec<_>>());
            assert_eq!(t.get(key(49)).unwrap().as_deref(), Some(&b"again"[..]));
        }
        t.put(key(49), b"again").unwrap();
        drop(t);
        drop(store); // crash again: the old torn tail is now in an older file
    }
}

#[test]
fn writes_after_close_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"k", b"v").unwrap();
    store.close().unwrap();
    assert!(matches!(t.put(b"k", b"v"), Err(Error::Closed)));
    assert!(matches!(t.get(b"k"), Err(Error::Closed)));
    let store = Store::open(tmp.path(), cfg(FileRules::posix())).unwrap();
    assert_eq!(
        store.table("t").unwrap().get(b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(matches!(
        store.table("bad/name"),
        Err(Error::InvalidName { .. })
    ));
}

#[test]
fn concurrent_writers_and_readers_with_background_flush_and_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(FileRules::posix());
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Group {
        window: std::time::Duration::from_micros(200),
    };
    c.commitlog.segment_size = 4096;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 4096;
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c.table.compaction.min_threshold = 4;
    c.table.compaction.max_threshold = 8;
    c.table.compaction.min_segment_size = 1 << 20;
    let store = Arc::new(Store::open(tmp.path(), c.clone()).unwrap());
    let t = store.table("t").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (t, stop) = (Arc::clone(&t), Arc::clone(&stop));
        std::thread::spawn(move || {
            // At least one scan, however late this thread first runs.
            let mut scans = 0;
            loop {
                let keys: Vec<Vec<u8>> = t.scan(..).unwrap().map(|r| r.unwrap().0).collect();
                assert!(keys.windows(2).all(|w| w[0] < w[1]));
                scans += 1;
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break scans;
                }
            }
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    let k = format!("w{w}-{i:04}");
                    t.put(k.as_bytes(), format!("{w}:{i}").as_bytes()).unwrap();
                    if i % 10 == 0 {
                        // Read your own write, wherever it is by now.
                        assert!(t.get(k.as_bytes()).unwrap().is_some(), "{k}");
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    store.tables().wait_idle();
    let s = t.stats();
    eprintln!("{s:?}; {:?}", store.tables().commit_log().stats());
    assert!(s.flushes >= 5 && s.compactions >= 1, "{s:?}");
    let check = |t: &segstore::Table| {
        let all: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(all.len(), 800);
        for (k, v) in all {
            let k = String::from_utf8(k).unwrap();
            let (w, i) = k[1..].split_once('-').unwrap();
            assert_eq!(v, format!("{w}:{}", i.parse::<u32>().unwrap()).into_bytes());
        }
    };
    check(&t);
    drop(t);
    let store = Arc::into_inner(store).unwrap();
    assert!(store.close().unwrap().is_clean());
    let store = Store::open(tmp.path(), c).unwrap();
    check(&store.table("t").unwrap());
}

#[test]
fn windows_rules_defer_deleting_compacted_segments_while_a_scan_maps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let mut c = cfg(rules.clone());
    c.delete_policy = DeletePolicy::DeferWhileMapped;
    let store = Store::open(tmp.path(), c).unwrap();
    let t = store.table("t").unwrap();
    for round in 0..4u32 {
        for i in 0..50 {
            t.put(key(i * 4 + round), format!("r{round}").as_bytes())
                .unwrap();
        }
        t.flush().unwrap();
    }
    let old: Vec<_> = t
        .segments()
        .view()
        .segments
        .iter()
        .flat_map(|h| h.segment().component_paths().to_vec())
        .collect();
    let mut scan = t.scan(..).unwrap();
    let first = scan.next().unwrap().unwrap();
    t.compact().unwrap();
    assert_eq!(t.stats().segments, 1);
    assert!(old.iter().all(|p| p.exists()), "mapped files were deleted");
    let rest: Vec<_> = scan.by_ref().map(|r| r.unwrap()).collect();
    assert_eq!(1 + rest.len(), 200);
    assert_eq!(first.0, key(0));
    drop(scan);
    assert!(
        old.iter().all(|p| !p.exists()),
        "deletions did not run at last close"
    );
    assert_eq!(
        rules.counts().refused_mapped,
        0,
        "the deleter never tried too early"
    );
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// The `.log` files of a store, with their lengths.
fn log_lengths(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    v.sort();
    v
}

#[test]
fn a_clean_close_leaves_no_flushed_commit_log_behind() {
    let header = segstore::table::commitlog::format::FILE_HEADER_LEN as u64;
    for (rules, policy) in [
        (FileRules::posix(), DeletePolicy::Immediate),
        // The policy Windows forces.
        (
            FileRules::windows_emulation(),
            DeletePolicy::DeferWhileMapped,
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(rules);
        c.delete_policy = policy;
        c.commitlog.segment_size = 1 << 20; // one file holds every record
        let store = Store::open(tmp.path(), c.clone()).unwrap();
        let t = store.table("t").unwrap();
        let mut last = 0;
        for i in 0..300 {
            last = t.write(WriteBatch::new().put(key(i), b"v")).unwrap();
        }
        assert!(log_lengths(tmp.path()).iter().any(|&l| l > header));
        drop(t);
        assert!(store.close().unwrap().is_clean());
        // One empty file (its header says where numbering goes on), nothing flushed.
        assert_eq!(log_lengths(tmp.path()), vec![header]);

        let store = Store::open(tmp.path(), c.clone()).unwrap();
        let t = store.table("t").unwrap();
        assert_eq!(t.get(key(299)).unwrap().as_deref(), Some(&b"v"[..]));
        let next = t.write(WriteBatch::new().put(key(0), b"w")).unwrap();
        assert!(next > last, "numbering goes on: {next} after {last}");
        // Closed again with nothing new flushed since: still one empty file.
        drop(t);
        assert!(store.close().unwrap().is_clean());
        assert_eq!(log_lengths(tmp.path()), vec![header]);
        let store = Store::open(tmp.path(), c.clone()).unwrap();
        assert!(store.close().unwrap().is_clean());
        assert_eq!(log_lengths(tmp.path()), vec![header]);

        // A store dropped without close keeps its log: replay brings the writes back.
        let store = Store::open(tmp.path(), c.clone()).unwrap();
        let t = store.table("t").unwrap();
        t.put(key(1), b"unflushed").unwrap();
        drop(t);
        drop(store);
        assert!(log_lengths(tmp.path()).iter().any(|&l| l > header));
        let store = Store::open(tmp.path(), c).unwrap();
        let t = store.table("t").unwrap();
        assert_eq!(t.get(key(1)).unwrap().as_deref(), Some(&b"unflushed"[..]));
        assert_eq!(t.get(key(0)).unwrap().as_deref(), Some(&b"w"[..]));
        drop(t);
        assert!(store.close().unwrap().is_clean());
    }
}
