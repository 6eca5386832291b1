//! Table concurrency: readers hammer `get` and `scan` while writers write and the
//! store flushes and compacts underneath them, in both `disk_access_mode`s that map
//! differently (`mmap`, `standard`), under the Windows file rules with deferred deletion.
//!
//! Thresholds are tiny (a few KiB per memtable, compaction of every 2 to 4 segments), so
//! a couple of seconds of writing gives dozens of flushes and compactions, on top of a
//! maintenance thread that runs explicit flushes and major compactions.
//!
//! What is checked (`table_behaviour.rs` has a smaller concurrent test that only checks
//! key order and final contents; this one checks what readers see along the way):
//! 1. Each writer owns a range of keys and writes each key the values 1, 2, 3, ... in
//!    order, through the store's clock, so later values have later timestamps. A reader
//!    that has seen value `v` (timestamp `t`) of a key never later sees a smaller value
//!    or timestamp, through `get` or `scan`.
//! 2. Once a write is acknowledged, no reader that starts after that sees the key
//!    missing or older; and no reader ever sees a value that was not yet written.
//! 3. Scans return keys in strictly increasing order, each once.
//! 4. At the end every key holds its last written value, before and after a reopen.
//! 5. The store closes clean (no leaked handle or mapping, no deletion left pending),
//!    and the Windows emulation never had to refuse a deletion of a mapped file.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use segstore::{
    CommitLogConfig, CommitLogSync, CompactionStrategy, Config, DiskAccessMode, FileRules, Store,
    Table, TableConfig,
};

const WRITERS: usize = 2;
const KEYS_PER_WRITER: usize = 150;
const KEYS: usize = WRITERS * KEYS_PER_WRITER;
/// Writers stop after this long, once they have written at least [`MIN_WRITES`] and
/// the table has done [`MIN_FLUSHES`] and [`MIN_COMPACTIONS`].
const RUN_FOR: Duration = Duration::from_millis(2500);
/// Writes per writer: about 90 memtables' worth at [`MEMTABLE_BYTES`] (about 120 bytes
/// are charged per cell), though the memtable grows past its threshold while the
/// worker is busy, so there are fewer flushes, about one per publish's worth of fsyncs.
const MIN_WRITES: u64 = 6_000;
const MIN_FLUSHES: u64 = 10;
/// Background size-tiered ones and the maintenance thread's major ones.
const MIN_COMPACTIONS: u64 = 5;
/// Hard stop, so a stuck store fails the test instead of hanging it.
const DEADLINE: Duration = Duration::from_secs(60);
const MEMTABLE_BYTES: usize = 16 * 1024;
/// Values are the counter in decimal, padded to this length.
const VALUE_LEN: usize = 48;

fn config(mode: DiskAccessMode, rules: FileRules) -> Config {
    let mut c = common::test_config(mode, rules);
    c.commitlog = CommitLogConfig::default();
    // Acknowledged at once: the test is about visibility, not durability, and
    // fsyncs would only slow the writers down.
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 50 };
    // Small files, so checkpoints release (delete) many of them.
    c.commitlog.segment_size = 64 * 1024;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = MEMTABLE_BYTES;
    c.table.max_frozen_memtables = 2;
    // Size-tiered, every segment "small": one tier, so compactions come often.
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c.table.compaction.min_threshold = 2;
    c.table.compaction.max_threshold = 4;
    c.table.compaction.min_segment_size = 1 << 30;
    c.table.background_compaction = true;
    c
}

fn key(i: usize) -> Vec<u8> {
    format!("w{}-key{:04}", i / KEYS_PER_WRITER, i % KEYS_PER_WRITER).into_bytes()
}

fn key_index(k: &[u8]) -> usize {
    let s = std::str::from_utf8(k).expect("utf-8 key");
    let (w, i) = s[1..].split_once("-key").expect("key format");
    w.parse::<usize>().unwrap() * KEYS_PER_WRITER + i.parse::<usize>().unwrap()
}

fn value(v: u64) -> Vec<u8> {
    format!("{v:0width$}", width = VALUE_LEN).into_bytes()
}

fn parse_value(v: &[u8]) -> u64 {
    assert_eq!(v.len(), VALUE_LEN, "value of the wrong length");
    std::str::from_utf8(v).unwrap().parse().unwrap()
}

/// What the writers have done, per key.
struct Progress {
    /// Set before a write is issued: no reader may see a value above this.
    attempted: Vec<AtomicU64>,
    /// Set after a write is acknowledged: readers starting later see at least this.
    acked: Vec<AtomicU64>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            attempted: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
            acked: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// One reader's view of the past, per key.
#[derive(Clone, Copy, Default)]
struct Last {
    /// The newest value seen.
    value: u64,
    /// Its timestamp, if the read that saw it returned one.
    value_ts: Option<u64>,
    /// The newest timestamp seen.
    ts: u64,
}

struct Seen {
    last: Vec<Last>,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            last: vec![Last::default(); KEYS],
        }
    }

    /// Check one observation of key `i` (value `v`, 0 for missing, at timestamp `ts`
    /// when the read returns one), made by a read that started after `acked_before` was
    /// acknowledged and ended before `attempted_after` was attempted.
    fn observe(
        &mut self,
        i: usize,
        v: u64,
        ts: Option<u64>,
        acked_before: u64,
        attempted_after: u64,
    ) {
        let k = String::from_utf8(key(i)).unwrap();
        if v == 0 {
            assert_eq!(
                acked_before, 0,
                "{k}: missing, but {acked_before} was acknowledged before the read began"
            );
        }
        assert!(
            v >= acked_before,
            "{k}: read {v}, but {acked_before} was acknowledged before the read began"
        );
        assert!(
            v <= attempted_after,
            "{k}: read {v}, but only {attempted_after} had been written"
        );
        let last = &mut self.last[i];
        assert!(
            v >= last.value,
            "{k}: went back in time: saw {}, then {v}",
            last.value
        );
        if let Some(ts) = ts {
            assert!(
                ts >= last.ts,
                "{k}: went back in time: saw timestamp {}, then {ts} (value {v})",
                last.ts
            );
            if let (true, Some(prev)) = (v == last.value, last.value_ts) {
                assert_eq!(ts, prev, "{k}: value {v} seen with two timestamps");
            }
            last.ts = ts;
        }
        if v > last.value || ts.is_some() {
            last.value_ts = ts;
        }
        last.value = v;
    }
}

/// Point reads of pseudo-random keys, alternating `get_cell` (with timestamps) and
/// `get`.
fn point_reader(t: &Table, p: &Progress, stop: &AtomicBool, seed: u64) -> u64 {
    let mut seen = Seen::new();
    let mut rng = seed | 1;
    let mut reads = 0u64;
    // At least one read, however late this thread first runs.
    loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % KEYS as u64) as usize;
        let acked = p.acked[i].load(Ordering::Acquire);
        let (v, ts) = if reads % 2 == 0 {
            match t.get_cell(key(i)).unwrap() {
                Some(e) => {
                    assert!(!e.tombstone, "a tombstone nobody wrote");
                    (parse_value(&e.value), Some(e.ts))
                }
                None => (0, None),
            }
        } else {
            (t.get(key(i)).unwrap().map_or(0, |v| parse_value(&v)), None)
        };
        let attempted = p.attempted[i].load(Ordering::Acquire);
        seen.observe(i, v, ts, acked, attempted);
        reads += 1;
        if stop.load(Ordering::Relaxed) {
            return reads;
        }
    }
}

/// Full scans and scans of one writer's range, alternating.
fn scanner(t: &Table, p: &Progress, stop: &AtomicBool) -> u64 {
    let mut seen = Seen::new();
    let mut scans = 0u64;
    // At least one scan, however late this thread first runs.
    loop {
        let w = (scans as usize) % (WRITERS + 1);
        let range: Vec<usize> = if w == WRITERS {
            (0..KEYS).collect()
        } else {
            (w * KEYS_PER_WRITER..(w + 1) * KEYS_PER_WRITER).collect()
        };
        let acked: Vec<u64> = range
            .iter()
            .map(|&i| p.acked[i].load(Ordering::Acquire))
            .collect();
        let (lo, hi) = (key(range[0]), key(*range.last().unwrap()));
        let rows: Vec<(Vec<u8>, Vec<u8>)> = t
            .scan(lo.as_slice()..=hi.as_slice())
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert!(
            rows.windows(2).all(|w| w[0].0 < w[1].0),
            "scan out of order or with a key twice"
        );
        let mut found: HashMap<usize, u64> = HashMap::with_capacity(rows.len());
        for (k, v) in &rows {
            found.insert(key_index(k), parse_value(v));
        }
        for (n, &i) in range.iter().enumerate() {
            let v = found.get(&i).copied().unwrap_or(0);
            let attempted = p.attempted[i].load(Ordering::Acquire);
            seen.observe(i, v, None, acked[n], attempted);
        }
        scans += 1;
        if stop.load(Ordering::Relaxed) {
            return scans;
        }
    }
}

/// Writer `w`: round-robin over its keys, each key's values 1, 2, 3, ...
fn writer(t: &Table, p: &Progress, w: usize, start: Instant) -> u64 {
    let keys = w * KEYS_PER_WRITER..(w + 1) * KEYS_PER_WRITER;
    let mut writes = 0u64;
    loop {
        let elapsed = start.elapsed();
        let enough = || {
            let s = t.stats();
            s.flushes >= MIN_FLUSHES && s.compactions >= MIN_COMPACTIONS
        };
        if (elapsed >= RUN_FOR && writes >= MIN_WRITES && enough()) || elapsed >= DEADLINE {
            return writes;
        }
        for i in keys.clone() {
            let v = p.attempted[i].load(Ordering::Relaxed) + 1;
            p.attempted[i].store(v, Ordering::Release);
            t.put(key(i), value(v)).unwrap();
            p.acked[i].store(v, Ordering::Release);
            writes += 1;
        }
    }
}

/// Every key holds its last written value, through `get` and through a full scan.
fn check_final(t: &Table, p: &Progress) {
    for i in 0..KEYS {
        let want = p.acked[i].load(Ordering::Acquire);
        assert!(want > 0);
        let got = t.get(key(i)).unwrap().map(|v| parse_value(&v));
        assert_eq!(got, Some(want), "{}", String::from_utf8(key(i)).unwrap());
    }
    let rows: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), KEYS);
    for (k, v) in rows {
        let i = key_index(&k);
        assert_eq!(parse_value(&v), p.acked[i].load(Ordering::Acquire));
    }
}

/// What one thread of the test runs; returns how many operations it did.
type Job = Box<dyn FnOnce(&Table, &Progress) -> u64 + Send>;

fn run(mode: DiskAccessMode) {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let store = Arc::new(Store::open(tmp.path(), config(mode, rules.clone())).unwrap());
    let t = store.table("t").unwrap();
    let progress = Arc::new(Progress::new());
    let stop = Arc::new(AtomicBool::new(false));
    let writers_done = Arc::new(AtomicBool::new(false));
    // Writers, two point readers, a scanner, and the maintenance thread start together.
    let barrier = Arc::new(Barrier::new(WRITERS + 4));

    let spawn = |f: Job| {
        let (t, p, b) = (Arc::clone(&t), Arc::clone(&progress), Arc::clone(&barrier));
        std::thread::spawn(move || {
            b.wait();
            f(&t, &p)
        })
    };
    let start = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| spawn(Box::new(move |t, p| writer(t, p, w, start))))
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let stop = Arc::clone(&stop);
            spawn(Box::new(move |t, p| {
                point_reader(t, p, &stop, 0x9E37_79B9_7F4A_7C15 ^ r)
            }))
        })
        .chain(std::iter::once({
            let stop = Arc::clone(&stop);
            spawn(Box::new(move |t, p| scanner(t, p, &stop)))
        }))
        .collect();
    // Explicit flushes and major compactions, racing the background worker.
    let maintenance = {
        let done = Arc::clone(&writers_done);
        spawn(Box::new(move |t, _| {
            let mut rounds = 0;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(150));
                if rounds % 2 == 0 {
                    t.flush().unwrap();
                } else {
                    t.compact().unwrap();
                }
                rounds += 1;
            }
            rounds
        }))
    };

    let writes: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    let write_time = start.elapsed();
    writers_done.store(true, Ordering::Relaxed);
    let maintenance_rounds = maintenance.join().unwrap();
    // Let the readers see the settling, too.
    store.tables().wait_idle();
    stop.store(true, Ordering::Relaxed);
    let reads: Vec<u64> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        write_time < DEADLINE,
        "writers did not finish {MIN_WRITES} writes each and {MIN_FLUSHES} flushes and \
         {MIN_COMPACTIONS} compactions in {DEADLINE:?}: {:?}",
        t.stats()
    );

    let stats = t.stats();
    let deletions = store.deleter().stats();
    eprintln!(
        "{mode}: {writes} writes in {write_time:?}; reads {reads:?} (points, points, scans); \
         {maintenance_rounds} maintenance rounds; {stats:?}; {deletions:?}; {:?}",
        store.tables().commit_log().stats()
    );
    assert!(
        reads.iter().all(|&r| r > 0),
        "a reader never ran: {reads:?}"
    );
    assert!(
        stats.flushes >= MIN_FLUSHES && stats.compactions >= MIN_COMPACTIONS,
        "{stats:?}"
    );
    assert!(
        deletions.completed > 0,
        "compactions deleted nothing: {deletions:?}"
    );
    check_final(&t, &progress);

    drop(t);
    let store = Arc::into_inner(store).expect("every thread let go of the store");
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    let counts = rules.counts();
    assert_eq!(
        counts.refused_mapped, 0,
        "a deletion was tried while the file was mapped: {counts:?}"
    );
    assert!(
        counts.allowed > 0,
        "no deletion went through the rules: {counts:?}"
    );

    // Reopen: the same values, from segments and the commit log.
    let store = Store::open(tmp.path(), config(mode, rules.clone())).unwrap();
    let t = store.table("t").unwrap();
    check_final(&t, &progress);
    drop(t);
    assert!(store.close().unwrap().is_clean());
    assert_eq!(rules.counts().refused_mapped, 0);
}

#[test]
fn readers_never_go_back_in_time_under_flush_and_compaction_mmap() {
    run(DiskAccessMode::Mmap);
}

#[test]
fn readers_never_go_back_in_time_under_flush_and_compaction_standard() {
    run(DiskAccessMode::Standard);
}
