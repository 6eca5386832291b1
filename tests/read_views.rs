//! Read views and batches across tables (issue 12): a view reads one moment of every
//! table whatever happens afterwards; segments compacted away under a view are deleted
//! when it drops; a batch across tables is all or nothing to readers (checked by
//! concurrent readers while writers, flushes and compactions run), at replay (a torn
//! record applies nothing) and when one of its tables is gone. A table's own scan reads
//! one moment too, whatever is written while it runs.

#![allow(clippy::disallowed_methods)] // tears the commit log's tail on purpose

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use segstore::{Batch, CommitLogSync, WriteBatch};
use segstore::{Config, Error, Store};

fn config() -> Config {
    let mut c = Config::default();
    c.table.background_compaction = false;
    c.track_leaks = true;
    c
}

fn component_files(dir: &Path, table: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{table}-")))
        .collect();
    v.sort();
    v
}

#[test]
fn a_view_is_unchanged_by_later_writes_flushes_compactions_and_new_tables() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let t = store.table("t").unwrap();
    let u = store.table("u").unwrap();
    for i in 0..50u32 {
        t.put(format!("k{i:02}"), b"segment").unwrap();
    }
    t.flush().unwrap();
    for i in 0..50u32 {
        t.put(format!("k{i:02}"), b"memtable").unwrap();
    }
    t.flush().unwrap();
    for i in 0..10u32 {
        t.put(format!("k{i:02}"), b"active").unwrap();
    }
    u.put(b"only", b"u1").unwrap();
    let before_files = component_files(dir.path(), "t");
    assert!(!before_files.is_empty());

    let view = store.read_view().unwrap();
    let want_t: Vec<(Vec<u8>, Vec<u8>)> = (0..50u32)
        .map(|i| {
            let v: &[u8] = if i < 10 { b"active" } else { b"memtable" };
            (format!("k{i:02}").into_bytes(), v.to_vec())
        })
        .collect();

    // Everything changes afterwards.
    for i in 0..50u32 {
        if i % 3 == 0 {
            t.delete(format!("k{i:02}")).unwrap();
        } else {
            t.put(format!("k{i:02}"), b"later").unwrap();
        }
    }
    t.put(b"k99", b"new key").unwrap();
    u.put(b"only", b"u2").unwrap();
    let w = store.table("w").unwrap();
    w.put(b"x", b"y").unwrap();
    t.compact().unwrap(); // flush, then every segment merged into one
    assert_eq!(t.stats().segments, 1);
    assert_eq!(t.get(b"k00").unwrap(), None);

    let scan: Vec<_> = view.scan(&t, ..).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(scan, want_t);
    let mut back: Vec<_> = view
        .scan(&t, ..)
        .unwrap()
        .rev()
        .map(|r| r.unwrap())
        .collect();
    back.reverse();
    assert_eq!(back, want_t);
    assert_eq!(
        view.get(&t, b"k00").unwrap().as_deref(),
        Some(&b"active"[..])
    );
    assert_eq!(view.get(&t, b"k99").unwrap(), None);
    assert!(view
        .get_with(&t, b"k20", |v| v == Some(&b"memtable"[..]))
        .unwrap());
    assert!(view.contains_key(&t, b"k03").unwrap());
    assert_eq!(view.get(&u, b"only").unwrap().as_deref(), Some(&b"u1"[..]));
    // One table of the view, looked up once.
    let tv = view.table(&t).unwrap();
    assert_eq!(tv.get(b"k10").unwrap().as_deref(), Some(&b"memtable"[..]));
    assert!(tv.get_with(b"k05", |v| v == Some(&b"active"[..])).unwrap());
    assert!(!tv.contains_key(b"k99").unwrap());
    assert_eq!(
        tv.multi_get([b"k00", b"k99"])
            .unwrap()
            .iter()
            .filter(|v| v.is_some())
            .count(),
        1
    );
    assert_eq!(tv.scan(..).unwrap().count(), 50);
    assert_eq!(tv.scan_cells(..).unwrap().count(), 50);
    assert_eq!(tv.scan_prefix(b"k0").unwrap().count(), 10);
    drop(tv);
    assert_eq!(
        view.get(&w, b"x").unwrap(),
        None,
        "a table created after the view"
    );
    assert_eq!(view.scan(&w, ..).unwrap().count(), 0);
    let prefix: Vec<_> = view
        .scan_prefix(&t, b"k4")
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(prefix.len(), 10);
    assert_eq!(store.stats().read_views, 1);

    // The segments compacted away are still there for the view (deferred deletion) ...
    let during = component_files(dir.path(), "t");
    for f in &before_files {
        assert!(during.contains(f), "{f} deleted under a view");
    }
    // ... a scan from the view keeps them after the view itself drops ...
    let scan = view.scan(&t, ..).unwrap();
    drop(view);
    assert_eq!(scan.count(), 50);
    // ... and they go once nothing holds them.
    assert_eq!(store.stats().read_views, 0);
    let after = component_files(dir.path(), "t");
    for f in &before_files {
        assert!(!after.contains(f), "{f} outlived the view: {after:?}");
    }
    drop((t, u, w));
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn a_view_reads_tables_not_opened_in_this_run() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        store.table("old").unwrap().put(b"k", b"v").unwrap();
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), config()).unwrap();
    let view = store.read_view().unwrap();
    let old = store.table("old").unwrap();
    old.put(b"k", b"newer").unwrap();
    assert_eq!(view.get(&old, b"k").unwrap().as_deref(), Some(&b"v"[..]));
    // A table of another store is refused by name.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Store::open(other_dir.path(), config()).unwrap();
    let stranger = other.table("old").unwrap();
    assert!(matches!(
        view.get(&stranger, b"k"),
        Err(Error::InvalidArgument(_))
    ));
    drop((view, old, stranger));
    other.close().unwrap();
    store.close().unwrap();
}

#[test]
fn batches_across_tables_are_checked_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let a = store.table("a").unwrap();
    let b = store.table("b").unwrap();
    store.write(&Batch::new()).unwrap(); // empty: nothing to do

    // A table of another store: refused, nothing written.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Store::open(other_dir.path(), config()).unwrap();
    let stranger = other.table("c").unwrap();
    let mut batch = Batch::new();
    batch.put(&a, b"k", b"1").put(&stranger, b"k", b"1");
    assert!(matches!(
        store.write(&batch),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(a.get(b"k").unwrap(), None);

    // A bad cell anywhere: refused, nothing written.
    let mut batch = Batch::new();
    batch.put(&a, b"k", b"1").put(&b, b"", b"empty key");
    assert!(store.write(&batch).is_err());
    assert_eq!(a.get(b"k").unwrap(), None);

    // A dropped table: refused, nothing of the other table written.
    let mut batch = Batch::new();
    batch.put(&a, b"k", b"1").put(&b, b"k", b"1");
    assert_eq!(batch.len(), 2);
    store.drop_table("b").unwrap();
    assert!(matches!(store.write(&batch), Err(Error::Dropped { .. })));
    assert_eq!(a.get(b"k").unwrap(), None);

    drop((a, b, stranger));
    other.close().unwrap();
    store.close().unwrap();
}

fn last_log_file(dir: &Path) -> std::path::PathBuf {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files.pop().expect("a commit log file")
}

#[test]
fn a_batch_across_tables_replays_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config();
    c.commitlog.sync = CommitLogSync::Batch;
    {
        let store = Store::open(dir.path(), c.clone()).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        let mut batch = Batch::new();
        batch.put(&a, b"k", b"first").put(&b, b"k", b"first");
        store.write(&batch).unwrap();
        // One table flushes its part; a crash (no close) loses the other's memtable.
        a.flush().unwrap();
        drop((a, b));
        drop(store);
    }
    {
        let store = Store::open(dir.path(), c.clone()).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        assert_eq!(a.get(b"k").unwrap().as_deref(), Some(&b"first"[..]));
        assert_eq!(b.get(b"k").unwrap().as_deref(), Some(&b"first"[..]));
        let mut batch = Batch::new();
        batch.put(&a, b"k", b"second").put(&b, b"k", b"second");
        store.write(&batch).unwrap();
        drop((a, b));
        drop(store);
    }
    // Tear the last record (the second batch): neither table gets any of it.
    let log = last_log_file(dir.path());
    let len = std::fs::metadata(&log).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    let store = Store::open(dir.path(), c).unwrap();
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    assert_eq!(a.get(b"k").unwrap().as_deref(), Some(&b"first"[..]));
    assert_eq!(b.get(b"k").unwrap().as_deref(), Some(&b"first"[..]));
    drop((a, b));
    store.close().unwrap();
}

#[test]
fn a_sync_write_fsyncs_under_periodic() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config();
    c.commitlog.sync = CommitLogSync::Periodic {
        period_ms: 3_600_000,
    };
    let store = Store::open(dir.path(), c).unwrap();
    let t = store.table("t").unwrap();
    let log = |s: &Store| s.tables().commit_log().stats();
    t.put(b"a", b"1").unwrap();
    let before = log(&store);
    assert!(
        before.synced_seq < before.written_seq,
        "periodic: not synced yet"
    );
    t.write(WriteBatch::new().put(b"b", b"2").sync(true))
        .unwrap();
    let after = log(&store);
    assert_eq!(
        after.synced_seq, after.written_seq,
        "synced through the write"
    );
    assert!(after.syncs > before.syncs);
    let u = store.table("u").unwrap();
    let mut batch = Batch::new();
    batch.put(&t, b"c", b"3").put(&u, b"c", b"3").sync(true);
    t.put(b"d", b"4").unwrap();
    store.write(&batch).unwrap();
    let last = log(&store);
    assert_eq!(last.synced_seq, last.written_seq);
    drop((t, u));
    store.close().unwrap();
}

/// Writers put the same number under four keys of two tables in each batch, while
/// flushes and compactions run; readers must never see two numbers in one batch's keys:
/// through a read view, a scan, a `multi_get`, or plain gets (a later get never sees an
/// older batch than an earlier one).
#[test]
fn readers_never_see_half_of_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config();
    c.table.memtable_flush_bytes = 8 * 1024;
    c.table.max_frozen_memtables = 2;
    c.table.background_compaction = true;
    c.table.compaction.min_threshold = 2;
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 50 };
    let store = Arc::new(Store::open(dir.path(), c).unwrap());
    let a = store.table("a").unwrap();
    let b = store.table("b").unwrap();
    const WRITERS: u64 = 2;
    const BATCHES: u64 = 10_000;
    let keys =
        |w: u64| -> Vec<Vec<u8>> { (0..2).map(|j| format!("w{w}-{j}").into_bytes()).collect() };
    let num = |v: Option<&[u8]>| v.map_or(0, |v| u64::from_be_bytes(v[..8].try_into().unwrap()));
    let done = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let seen_progress = Arc::new(AtomicU64::new(0));

    // Readers alive (a reader that fails an assertion must not leave a writer waiting).
    let alive = Arc::new(AtomicU64::new(2));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, a, b) = (Arc::clone(&store), Arc::clone(&a), Arc::clone(&b));
            let (checks, seen, alive) = (
                Arc::clone(&checks),
                Arc::clone(&seen_progress),
                Arc::clone(&alive),
            );
            std::thread::spawn(move || {
                for i in 1..=BATCHES {
                    if i == BATCHES {
                        // The readers check while batches land, however the threads
                        // are scheduled: the last batch waits for their rounds.
                        while (checks.load(Ordering::Relaxed) <= 10
                            || seen.load(Ordering::Relaxed) == 0)
                            && alive.load(Ordering::Relaxed) == 2
                        {
                            std::thread::yield_now();
                        }
                    }
                    let mut value = i.to_be_bytes().to_vec();
                    value.extend_from_slice(&[0xAB; 100]); // fill memtables: flushes run
                    let mut batch = Batch::new();
                    for k in keys(w) {
                        batch.put(&a, &k, &value).put(&b, &k, &value);
                    }
                    store.write(&batch).unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (store, a, b) = (Arc::clone(&store), Arc::clone(&a), Arc::clone(&b));
            let (done, checks, seen) = (
                Arc::clone(&done),
                Arc::clone(&checks),
                Arc::clone(&seen_progress),
            );
            let alive = Alive(Arc::clone(&alive));
            std::thread::spawn(move || {
                let _alive = alive;
                let mut round = 0u64;
                while !done.load(Ordering::Acquire) {
                    round += 1;
                    let w = (round + r) % WRITERS;
                    let ks = keys(w);
                    // A read view: all four equal.
                    let view = store.read_view().unwrap();
                    let mut nums = Vec::new();
                    for t in [&a, &b] {
                        for k in &ks {
                            nums.push(view.get_with(t, k, num).unwrap());
                        }
                    }
                    assert!(
                        nums.windows(2).all(|p| p[0] == p[1]),
                        "view {}: {nums:?}",
                        view.seq()
                    );
                    seen.fetch_max(nums[0], Ordering::Relaxed);
                    drop(view);
                    // A scan of one table: the batch's keys equal.
                    let prefix = format!("w{w}-");
                    let t = if round % 2 == 0 { &a } else { &b };
                    let scanned: Vec<u64> = t
                        .scan_prefix(&prefix)
                        .unwrap()
                        .map(|r| num(Some(&r.unwrap().1)))
                        .collect();
                    assert!(
                        scanned.windows(2).all(|p| p[0] == p[1]),
                        "scan: {scanned:?}"
                    );
                    // multi_get: equal.
                    let many: Vec<u64> = t
                        .multi_get(&ks)
                        .unwrap()
                        .iter()
                        .map(|v| num(v.as_deref()))
                        .collect();
                    assert!(many.windows(2).all(|p| p[0] == p[1]), "multi_get: {many:?}");
                    // Plain gets, one table then the other: never older afterwards.
                    let first = a.get_with(&ks[0], num).unwrap();
                    let second = b.get_with(&ks[1], num).unwrap();
                    assert!(second >= first, "get a={first} then b={second}");
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let flusher = {
        let (a, done) = (Arc::clone(&a), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::Acquire) {
                a.flush().unwrap();
                n += 1;
                if n % 8 == 0 {
                    a.compact().unwrap();
                }
                std::thread::yield_now();
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    flusher.join().unwrap();
    let checks = checks.load(Ordering::Relaxed);
    let progress = seen_progress.load(Ordering::Relaxed);
    eprintln!(
        "{checks} rounds of checks; readers saw batches up to {progress}; a: {:?}",
        a.stats()
    );
    assert!(checks > 10, "the readers ran");
    assert!(progress > 0, "the readers saw batches land");
    assert!(a.stats().flushes > 0, "flushes ran during the checks");
    // Everything landed.
    for w in 0..WRITERS {
        for k in keys(w) {
            assert_eq!(a.get_with(&k, num).unwrap(), BATCHES);
            assert_eq!(b.get_with(&k, num).unwrap(), BATCHES);
        }
    }
    drop((a, b));
    let store = Arc::try_unwrap(store).unwrap();
    assert!(store.close().unwrap().is_clean());
}

/// Counts a thread down when it ends, by returning or by a failed assertion.
struct Alive(Arc<AtomicU64>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The newest value of `key` in a snapshot's segments of `table` (0 if none).
fn snapshot_value(view: &segstore::SnapshotView, table: &str, key: &[u8]) -> u64 {
    let mut best: Option<(u64, u64)> = None;
    for h in view.tables.get(table).into_iter().flatten() {
        if let Some((ts, n)) = h
            .get_with(key, |r| {
                (r.ts, u64::from_be_bytes(r.value[..8].try_into().unwrap()))
            })
            .unwrap()
        {
            if best.is_none_or(|(t, _)| ts > t) {
                best = Some((ts, n));
            }
        }
    }
    best.map_or(0, |(_, n)| n)
}

/// On-disk snapshots (and so checkpoints, which take their views the same way) of all
/// tables are of one moment: a batch across tables written while snapshots are taken
/// is in a snapshot whole or not at all. (Tables were once flushed one after another,
/// so a batch landing between two flushes was in the second table only.)
#[test]
fn snapshots_of_all_tables_hold_a_batch_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 50 };
    let store = Arc::new(Store::open(dir.path(), c).unwrap());
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (store, a, b, done, written) = (
            Arc::clone(&store),
            Arc::clone(&a),
            Arc::clone(&b),
            Arc::clone(&done),
            Arc::clone(&written),
        );
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !done.load(Ordering::Acquire) {
                n += 1;
                let v = n.to_be_bytes();
                let mut batch = Batch::new();
                batch.put(&a, b"k", v).put(&b, b"k", v);
                store.write(&batch).unwrap();
                written.store(n, Ordering::Release);
            }
            n
        })
    };
    // Snapshots start once a batch is acknowledged, so every one must hold a batch
    // (however late the writer thread got to run).
    while written.load(Ordering::Acquire) == 0 && !writer.is_finished() {
        std::thread::yield_now();
    }
    let mut nonzero = 0;
    for i in 0..40 {
        let tag = format!("s{i}");
        store.snapshot(&tag, None).unwrap();
        let view = store.open_snapshot(&tag).unwrap();
        let (x, y) = (
            snapshot_value(&view, "a", b"k"),
            snapshot_value(&view, "b", b"k"),
        );
        assert_eq!(x, y, "snapshot {tag}: a has batch {x}, b has batch {y}");
        nonzero += usize::from(x > 0);
        drop(view);
        store.clear_snapshot(&tag).unwrap();
    }
    done.store(true, Ordering::Release);
    let written = writer.join().unwrap();
    assert_eq!(
        nonzero, 40,
        "snapshots held batches ({nonzero} of 40; {written} written)"
    );
    drop((a, b));
    let store = Arc::try_unwrap(store).unwrap();
    store.close().unwrap();
}

/// A table opened for the first time while a snapshot of all tables is taken must not
/// get into it with its part of a batch whose other part the snapshot misses: table
/// creation waits for the snapshot. A writer keeps creating tables, writing a batch to
/// `a` and the new table, and flushing the new one, while snapshots are taken; every
/// snapshot must hold each batch whole or not at all.
#[test]
fn a_table_created_during_a_snapshot_holds_no_half_batch() {
    const TABLES: u64 = 120;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 50 };
    let store = Arc::new(Store::open(dir.path(), c).unwrap());
    let a = store.table("a").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    // Snapshots checked so far: every 30th table waits for one more, so snapshots are
    // taken while tables are created however the two threads are scheduled.
    let checked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (store, a, done) = (Arc::clone(&store), Arc::clone(&a), Arc::clone(&done));
        let checked = Arc::clone(&checked);
        std::thread::spawn(move || {
            for n in 1..=TABLES {
                while checked.load(Ordering::Acquire) < n / 30 {
                    std::thread::yield_now();
                }
                let t = store.table(&format!("t{n}")).unwrap();
                let v = n.to_be_bytes();
                let mut batch = Batch::new();
                batch.put(&a, b"k", v).put(&t, b"k", v);
                store.write(&batch).unwrap();
                t.flush().unwrap();
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut i = 0;
    // (A writer that failed ends the loop too; its join reports the failure.)
    while !done.load(Ordering::Acquire) && !writer.is_finished() {
        i += 1;
        let tag = format!("s{i}");
        store.snapshot(&tag, None).unwrap();
        let view = store.open_snapshot(&tag).unwrap();
        let in_a = snapshot_value(&view, "a", b"k");
        for n in 1..=TABLES {
            let in_t = snapshot_value(&view, &format!("t{n}"), b"k");
            // Batch n is in `a` iff a holds n or a later batch; in t{n} iff t{n} holds n.
            assert_eq!(
                in_a >= n,
                in_t == n,
                "snapshot {tag}: a holds batch {in_a}, t{n} holds {in_t}"
            );
        }
        checked.fetch_add(1, Ordering::Release);
        drop(view);
        store.clear_snapshot(&tag).unwrap();
    }
    writer.join().unwrap();
    let checked = checked.load(Ordering::Acquire);
    assert!(
        checked > 3,
        "only {checked} snapshots were taken while tables were created"
    );
    drop(a);
    let store = Arc::try_unwrap(store).unwrap();
    store.close().unwrap();
}

/// A scan reads the table as it was when it started: its registered read keeps the
/// memtable versions it needs while every key it has yet to reach is overwritten more
/// times than a key keeps older versions for no reader (`scan` and `scan_cells` each
/// hold that read themselves, not through a shared allocation).
#[test]
fn a_scan_keeps_its_picture_while_its_keys_are_overwritten() {
    let k = |i: u32| format!("k{i:03}");
    for cells in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), config()).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..40 {
            t.put(k(i), "before").unwrap();
        }
        let mut rows: Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)>> = if cells {
            Box::new(t.scan_cells(..).unwrap().map(|c| {
                let c = c.unwrap();
                (c.key, c.value)
            }))
        } else {
            Box::new(t.scan(..).unwrap().map(|r| r.unwrap()))
        };
        assert_eq!(
            rows.next().unwrap(),
            (k(0).into_bytes(), b"before".to_vec())
        );
        for round in 0..12 {
            let mut b = WriteBatch::new();
            for i in 0..40 {
                b.put(k(i), format!("after {round}"));
            }
            t.write(&b).unwrap();
        }
        let rest: Vec<_> = rows.collect();
        assert_eq!(rest.len(), 39, "cells: {cells}");
        for (i, (key, value)) in rest.iter().enumerate() {
            assert_eq!(key, k(i as u32 + 1).as_bytes(), "cells: {cells}");
            assert_eq!(
                value, b"before",
                "cells: {cells}, key {i}: a version was dropped"
            );
        }
        assert_eq!(t.get(k(39)).unwrap().unwrap(), b"after 11".as_slice());
    }
}
