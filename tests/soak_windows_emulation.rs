//! Soak under the deletion-refusing Windows emulation (issue 8): two stores, each under
//! `FileRules::windows_emulation_with_refusals(0.2, seed)` with
//! `DeletePolicy::DeferWhileMapped`, run at once: writers, readers that check every read
//! against what must be visible, explicit flushes and major compactions (and background
//! ones), snapshot create / open / read / clear, and repeated repairs between the two
//! stores. At the end: a final repair makes both stores equal to the union of all
//! acknowledged writes, the emulation never had to refuse a deletion because a file was
//! mapped, and after close and a reopen without refusals nothing is pending and no
//! orphan file is left.
//!
//! Runs about 5 s; `SOAK_SECS=<n>` runs longer.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use segstore::repair::{
    LocalTransport, RepairOptions, RepairSession, Replica, ReplicaId, TableReplica,
};
use segstore::segment::SegmentName;
use segstore::{
    CommitLogConfig, CommitLogSync, Config, DiskAccessMode, FileRules, Store, TableConfig,
};

const WRITERS_PER_STORE: u32 = 2;
const KEYS_PER_WRITER: u32 = 150;

fn cfg(rules: FileRules) -> Config {
    let mut c = common::test_config(DiskAccessMode::Mmap, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 50 };
    c.commitlog.segment_size = 16 * 1024;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 16 * 1024;
    c
}

fn key(store: usize, writer: u32, k: u32) -> Vec<u8> {
    format!("s{store}-w{writer}-k{k:04}").into_bytes()
}

/// Values carry a per-key counter: a read may see a newer value than the model held
/// when the read started, never an older one.
fn value(n: u64) -> Vec<u8> {
    format!("{n:012}-payload-payload-payload").into_bytes()
}

fn counter(v: &[u8]) -> u64 {
    std::str::from_utf8(&v[..12]).unwrap().parse().unwrap()
}

type Model = Mutex<BTreeMap<Vec<u8>, u64>>;

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
    let snaps = dir.join("snapshots");
    if snaps.exists() {
        assert!(
            common::files(&snaps).is_empty(),
            "{:?}",
            common::files(&snaps)
        );
    }
    assert!(
        store.deleter().pending().is_empty(),
        "{:?}",
        store.deleter().pending()
    );
}

fn check_all(store: &Store, model: &BTreeMap<Vec<u8>, u64>) {
    let t = store.table("t").unwrap();
    for (k, n) in model {
        let v = t.get(k).unwrap().unwrap_or_else(|| panic!("{k:?} missing"));
        assert_eq!(counter(&v), *n, "{}", String::from_utf8_lossy(k));
    }
    assert_eq!(t.scan(..).unwrap().count(), model.len());
}

fn repair(a: &Store, b: &Store) {
    let ra = TableReplica::new(ReplicaId(1), a, "t").unwrap();
    let rb = TableReplica::new(ReplicaId(2), b, "t").unwrap();
    let dyns: [&dyn Replica; 2] = [&ra, &rb];
    let mut opts = RepairOptions::default();
    opts.depth = 6;
    opts.batch_rows = 64;
    RepairSession::run(&dyns, &LocalTransport::new(), &opts).unwrap();
}

#[test]
fn soak_under_refusing_windows_emulation() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let tmp = tempfile::tempdir().unwrap();
    let dirs = [tmp.path().join("a"), tmp.path().join("b")];
    let rules = [
        FileRules::windows_emulation_with_refusals(0.2, 11),
        FileRules::windows_emulation_with_refusals(0.2, 12),
    ];
    let stores = [
        Store::open(&dirs[0], cfg(rules[0].clone())).unwrap(),
        Store::open(&dirs[1], cfg(rules[1].clone())).unwrap(),
    ];
    // The table exists before any thread runs: the snapshot and repair threads name it
    // and must not depend on a writer having been scheduled first.
    for store in &stores {
        store.table("t").unwrap();
    }
    // Each store's writers own their keys; the model holds acknowledged counters.
    let models: [Model; 2] = [Mutex::new(BTreeMap::new()), Mutex::new(BTreeMap::new())];
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let ops = [
        AtomicU64::new(0), // writes
        AtomicU64::new(0), // reads checked
        AtomicU64::new(0), // flush + compaction rounds
        AtomicU64::new(0), // snapshots
        AtomicU64::new(0), // repairs
    ];
    let (stop, ops, models) = (&stop, &ops, &models);
    std::thread::scope(|s| {
        for (si, store) in stores.iter().enumerate() {
            for w in 0..WRITERS_PER_STORE {
                let model = &models[si];
                s.spawn(move || {
                    let t = store.table("t").unwrap();
                    let mut n = 0u64;
                    let mut x = 0x9e37_79b9u64 ^ ((si as u64) << 8 | w as u64);
                    while !stop.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = key(si, w, (x % KEYS_PER_WRITER as u64) as u32);
                        n += 1;
                        t.put(&k, value(n)).unwrap();
                        model.lock().insert(k, n);
                        ops[0].fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            // A reader per store: every key the model shows reads at least that new.
            let model = &models[si];
            s.spawn(move || {
                let t = store.table("t").unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let snapshot: Vec<(Vec<u8>, u64)> = {
                        let m = model.lock();
                        m.iter().step_by(7).map(|(k, n)| (k.clone(), *n)).collect()
                    };
                    for (k, n) in snapshot {
                        let v = t.get(&k).unwrap().unwrap_or_else(|| {
                            panic!(
                                "acknowledged key {} not visible",
                                String::from_utf8_lossy(&k)
                            )
                        });
                        assert!(counter(&v) >= n, "stale read of {k:?}");
                        ops[1].fetch_add(1, Ordering::Relaxed);
                    }
                    // Only writes acknowledged before the scan starts must show in it.
                    let acknowledged_before = !model.lock().is_empty();
                    let scanned = t.scan(..).unwrap().count();
                    assert!(scanned > 0 || !acknowledged_before);
                }
            });
            // Explicit flushes and major compactions (background ones run too).
            s.spawn(move || {
                let t = store.table("t").unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(40));
                    if i % 3 == 2 {
                        t.compact().unwrap();
                    } else {
                        t.flush().unwrap();
                    }
                    i += 1;
                    ops[2].fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Snapshots on store a: create, open, read every table segment, clear.
        {
            let store = &stores[0];
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(30));
                    let tag = format!("soak{n}");
                    n += 1;
                    store.snapshot(&tag, Some("t")).unwrap();
                    {
                        let view = store.open_snapshot(&tag).unwrap();
                        for hs in view.tables.values() {
                            for h in hs {
                                let it =
                                    segstore::segment::SegmentIter::new::<&[u8]>(h.clone(), ..)
                                        .unwrap();
                                for e in it {
                                    e.unwrap();
                                }
                            }
                        }
                        // Clear while the view still maps the files: deferred.
                        store.clear_snapshot(&tag).unwrap();
                    }
                    ops[3].fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Repairs between the two stores.
        {
            let stores = &stores;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    repair(&stores[0], &stores[1]);
                    ops[4].fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Stop at the deadline, but only once every activity has completed a round: on
        // a loaded machine a thread may get its first turn late.
        let all_ran = || ops.iter().all(|c| c.load(Ordering::Relaxed) > 0);
        while Instant::now() < deadline || !all_ran() {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Quiet: a final repair makes both stores hold the union of acknowledged writes.
    repair(&stores[0], &stores[1]);
    let union: BTreeMap<Vec<u8>, u64> = models.iter().flat_map(|m| m.lock().clone()).collect();
    for s in &stores {
        check_all(s, &union);
    }
    let names = ["writes", "reads", "flush/compact", "snapshots", "repairs"];
    let summary: Vec<String> = names
        .iter()
        .zip(ops)
        .map(|(n, c)| format!("{n}={}", c.load(Ordering::Relaxed)))
        .collect();
    for (i, r) in rules.iter().enumerate() {
        let c = r.counts();
        eprintln!(
            "soak store {i}: {} random delete refusals, {} allowed, {} refused while mapped",
            c.refused_random, c.allowed, c.refused_mapped
        );
        assert_eq!(c.refused_mapped, 0, "a mapped file was up for deletion");
    }
    eprintln!("soak {secs}s: {}", summary.join(" "));
    assert!(
        ops.iter().all(|c| c.load(Ordering::Relaxed) > 0),
        "{summary:?}"
    );
    for (i, s) in stores.into_iter().enumerate() {
        let r = s.close().unwrap();
        assert!(
            r.leaked_handles.is_empty() && r.leaked_mappings.is_empty(),
            "{r:?}"
        );
        let store = Store::open(&dirs[i], cfg(FileRules::posix())).unwrap();
        assert_consistent(&store);
        check_all(&store, &union);
        assert!(store.close().unwrap().is_clean());
        reopen_clean(&dirs[i]);
    }
}

fn reopen_clean(dir: &Path) {
    let store = Store::open(dir, cfg(FileRules::posix())).unwrap();
    assert_consistent(&store);
    store.close().unwrap();
}
