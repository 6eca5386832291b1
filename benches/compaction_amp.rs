//! Issue 19 item 7: read, write and space amplification of size-tiered and leveled
//! compaction under YCSB workload A (50% reads, 50% updates, scrambled zipfian 0.99,
//! YCSB's own generators from `benches/peers`), side by side in one process.
//!
//! For each strategy, each round: a fresh store with one table of that strategy,
//! background compaction on (the compaction pool), the load (`AMP_RECORDS` records,
//! keys `user<fnv hash>` as YCSB's, 100-byte values), then `AMP_OPS` operations of
//! workload A on one thread, then the background work drained. Reported, as medians over
//! the rounds:
//!
//! - `A ops/s`: workload A throughput (with compactions running behind it);
//! - write amplification: data bytes flushes and compactions wrote over data bytes
//!   flushes wrote (`TableStats`), and over the bytes of keys and values written;
//! - space amplification: bytes of every segment file after the run over the bytes once
//!   a major compaction has left one copy of every key;
//! - read amplification: live segments, and segments whose key range holds a key
//!   (mean over 10,000 loaded keys: the segments a point read tests filters of; the
//!   rest it skips by key range), and uniform random gets of 100,000 loaded keys at rest
//!   (ns per get), with that skip and without it (`table::lsm::set_key_range_skip`),
//!   taking turns three times, median.
//!
//! Then keys written in ascending order (`log<i>`, as a log or a time series writes
//! them): the same load into each policy, write amplification, the segments leveled
//! compaction moved down a level without a rewrite (`TableStats::moves`), and the
//! seconds the load and its compactions took.
//!
//! Then the rate limit: a major compaction of the leveled table with
//! `write_bytes_per_sec` unset, then set to `AMP_RATE` (default 4 MiB/s): bytes written
//! per second of each.
//!
//! Sizes are scaled down so a short run has several levels: memtables of 2 MiB;
//! size-tiered with `min_segment_size` 2 MiB (the default 50 MiB against 64 MiB
//! memtables); leveled with segments of 2 MiB, level 1 of 8 MiB, levels 10x apart,
//! level 0 compacted at 4 flushes; and leveled again with level 0 kept to one segment
//! below 8 MiB (`l0_merge_bytes`, `leveled_l0m`).
//!
//! `cargo bench --bench compaction_amp` (`AMP_RECORDS`, default 300,000; `AMP_OPS`,
//! default 600,000; `AMP_ROUNDS`, default 3).

mod common;
#[allow(dead_code, unused_imports)]
#[path = "peers/src/ycsb/generators.rs"]
mod generators;

use std::path::Path;
use std::time::Instant;

use common::median;
use generators::{fnvhash64, Rng, ScrambledZipfian};
use segstore::table::lsm::set_key_range_skip;
use segstore::{CommitLogSync, CompactionStrategy, Config, Store, Table, TableConfig};

const VALUE: usize = 100;
const MIB: u64 = 1 << 20;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn key(i: u64) -> Vec<u8> {
    format!("user{:019}", fnvhash64(i)).into_bytes()
}

/// A policy the run compares: a strategy and `l0_merge_bytes` (leveled).
#[derive(Debug, Clone, Copy)]
struct Variant {
    name: &'static str,
    strategy: CompactionStrategy,
    l0_merge_bytes: u64,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "size_tiered",
        strategy: CompactionStrategy::SizeTiered,
        l0_merge_bytes: 0,
    },
    Variant {
        name: "leveled",
        strategy: CompactionStrategy::Leveled,
        l0_merge_bytes: 0,
    },
    // Level 0 kept to one segment while under 8 MiB of data: the four flushes of 2 MiB
    // memtables before level 0's trigger fit under it, as some 7 flushes of the
    // default 16 MiB memtables fit under 64 MiB.
    Variant {
        name: "leveled_l0m",
        strategy: CompactionStrategy::Leveled,
        l0_merge_bytes: 8 * MIB,
    },
];

fn table_config(v: Variant) -> TableConfig {
    let mut t = TableConfig::default();
    t.memtable_flush_bytes = 2 << 20;
    t.compaction.strategy = v.strategy;
    t.compaction.l0_merge_bytes = v.l0_merge_bytes;
    t.compaction.min_segment_size = 2 * MIB;
    t.compaction.target_segment_size = 2 * MIB;
    t.compaction.base_level_size = 8 * MIB;
    t.compaction.level_multiplier = 10;
    t.compaction.l0_trigger = 4;
    t
}

fn segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".db"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[derive(Debug, Default, Clone, Copy)]
struct Row {
    ops_per_sec: f64,
    write_amp: f64,
    write_amp_user: f64,
    space_amp: f64,
    segments: f64,
    covering: f64,
    get_ns: f64,
    get_ns_no_skip: f64,
    levels: f64,
}

/// Segments of `t`'s view whose key range holds the key, mean over `keys`.
fn covering(store: &Store, keys: &[Vec<u8>]) -> f64 {
    let view = store.segments("t").unwrap().view();
    let n: usize = keys
        .iter()
        .map(|k| {
            view.segments
                .iter()
                .filter(|h| {
                    let s = h.stats();
                    s.entry_count > 0 && k[..] >= s.min_key[..] && k[..] <= s.max_key[..]
                })
                .count()
        })
        .sum();
    n as f64 / keys.len() as f64
}

fn gets_at_rest(t: &Table, keys: &[Vec<u8>]) -> f64 {
    let start = Instant::now();
    let mut hits = 0;
    for k in keys {
        hits += t.get_with(k, |v| v.is_some()).unwrap() as usize;
    }
    assert_eq!(hits, keys.len());
    start.elapsed().as_nanos() as f64 / keys.len() as f64
}

fn run(variant: Variant, records: u64, ops: u64, seed: u64) -> Row {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    let store = Store::open(tmp.path(), cfg).unwrap();
    let t = store.table_with("t", table_config(variant)).unwrap();
    let mut user_bytes = 0u64;
    let mut value = vec![b'v'; VALUE];
    for i in 0..records {
        let k = key(i);
        value[..8].copy_from_slice(&i.to_le_bytes());
        t.put(&k, &value).unwrap();
        user_bytes += (k.len() + VALUE) as u64;
    }
    let mut rng = Rng::new(seed);
    let mut zipf = ScrambledZipfian::new(0, records - 1);
    let start = Instant::now();
    for op in 0..ops {
        let k = key(zipf.next(&mut rng));
        if rng.next_u64() % 2 == 0 {
            std::hint::black_box(t.get_with(&k, |v| v.map(<[u8]>::len)).unwrap());
        } else {
            value[..8].copy_from_slice(&op.to_le_bytes());
            t.put(&k, &value).unwrap();
            user_bytes += (k.len() + VALUE) as u64;
        }
    }
    let ops_per_sec = ops as f64 / start.elapsed().as_secs_f64();
    t.flush().unwrap();
    store.tables().wait_idle();
    let stats = t.stats();
    let written = (stats.flush_bytes + stats.compaction_bytes) as f64;
    let sample: Vec<Vec<u8>> = (0..100_000u64)
        .map(|_| key(rng.next_u64() % records))
        .collect();
    let levels = t.segment_levels();
    let deepest = levels.iter().map(|l| l.1).max().unwrap_or(0);
    let row_covering = covering(&store, &sample);
    // The key range skip on and off, taking turns, three times each.
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        set_key_range_skip(true);
        on.push(gets_at_rest(&t, &sample));
        set_key_range_skip(false);
        off.push(gets_at_rest(&t, &sample));
    }
    set_key_range_skip(true);
    let before = segment_bytes(tmp.path());
    let mut major = table_config(variant);
    major.gc_grace_secs = 0;
    store.set_table_config("t", major).unwrap();
    let t = store.table("t").unwrap();
    t.compact().unwrap();
    store.tables().wait_idle();
    let after = segment_bytes(tmp.path());
    let row = Row {
        ops_per_sec,
        write_amp: written / stats.flush_bytes as f64,
        write_amp_user: written / user_bytes as f64,
        space_amp: before as f64 / after as f64,
        segments: stats.segments as f64,
        covering: row_covering,
        get_ns: median(on),
        get_ns_no_skip: median(off),
        levels: deepest as f64,
    };
    drop(t);
    store.close().unwrap();
    row
}

/// Keys written in ascending order (a log, a time series, an auto-increment key):
/// `records` records loaded into a fresh table of `variant`, then the background work
/// drained. Write amplification (data bytes flushes and compactions wrote over what
/// flushes wrote), the segments leveled compaction moved without a rewrite
/// (`TableStats::moves`), and the seconds the load and its compactions took.
fn ascending(variant: Variant, records: u64) -> (f64, u64, f64) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    let store = Store::open(tmp.path(), cfg).unwrap();
    let t = store.table_with("t", table_config(variant)).unwrap();
    let mut value = vec![b'v'; VALUE];
    let start = Instant::now();
    for i in 0..records {
        value[..8].copy_from_slice(&i.to_le_bytes());
        t.put(format!("log{i:019}"), &value).unwrap();
    }
    t.flush().unwrap();
    store.tables().wait_idle();
    let secs = start.elapsed().as_secs_f64();
    let s = t.stats();
    drop(t);
    store.close().unwrap();
    let amp = (s.flush_bytes + s.compaction_bytes) as f64 / s.flush_bytes as f64;
    (amp, s.moves, secs)
}

/// A major compaction of a leveled table of `records` records, rate limited to `rate`
/// bytes per second (0: none): data bytes written per second.
fn paced(records: u64, rate: u64) -> f64 {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), Config::default()).unwrap();
    let mut c = table_config(VARIANTS[1]); // leveled
    c.background_compaction = false;
    c.compaction.write_bytes_per_sec = rate;
    let t = store.table_with("t", c).unwrap();
    let value = vec![b'v'; VALUE];
    for i in 0..records {
        t.put(key(i), &value).unwrap();
    }
    t.flush().unwrap();
    let before = t.stats().compaction_bytes;
    // Two copies of everything, so the major compaction has to merge.
    for i in 0..records {
        t.put(key(i), &value).unwrap();
    }
    t.flush().unwrap();
    let start = Instant::now();
    t.compact().unwrap();
    let secs = start.elapsed().as_secs_f64();
    let bytes = (t.stats().compaction_bytes - before) as f64;
    drop(t);
    store.close().unwrap();
    bytes / secs
}

fn main() {
    let records = env("AMP_RECORDS", 300_000);
    let ops = env("AMP_OPS", 600_000);
    let rounds = env("AMP_ROUNDS", 3);
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..rounds {
        for (i, v) in VARIANTS.iter().enumerate() {
            let r = run(*v, records, ops, 42 + round);
            eprintln!("round {round} {}: {r:?}", v.name);
            rows[i].push(r);
        }
    }
    println!("YCSB A, {records} records, {ops} operations, 1 thread, median of {rounds} rounds");
    println!(
        "{:<12} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>12} {:>7}",
        "strategy",
        "A ops/s",
        "write amp",
        "w.amp/user",
        "space amp",
        "segments",
        "in range",
        "get ns",
        "ns, no skip",
        "levels"
    );
    for (v, rows) in VARIANTS.iter().zip(&rows) {
        let m = |f: fn(&Row) -> f64| median(rows.iter().map(f).collect());
        println!(
            "{:<12} {:>9.0} {:>9.2} {:>10.2} {:>9.2} {:>9.0} {:>9.2} {:>7.0} {:>12.0} {:>7.0}",
            v.name,
            m(|r| r.ops_per_sec),
            m(|r| r.write_amp),
            m(|r| r.write_amp_user),
            m(|r| r.space_amp),
            m(|r| r.segments),
            m(|r| r.covering),
            m(|r| r.get_ns),
            m(|r| r.get_ns_no_skip),
            m(|r| r.levels),
        );
    }
    println!("Ascending keys, {records} records loaded, median of {rounds} rounds");
    println!(
        "{:<12} {:>9} {:>9} {:>9}",
        "strategy", "write amp", "moves", "seconds"
    );
    for v in VARIANTS {
        let runs: Vec<(f64, u64, f64)> = (0..rounds).map(|_| ascending(v, records)).collect();
        println!(
            "{:<12} {:>9.2} {:>9.0} {:>9.2}",
            v.name,
            median(runs.iter().map(|r| r.0).collect()),
            median(runs.iter().map(|r| r.1 as f64).collect()),
            median(runs.iter().map(|r| r.2).collect()),
        );
    }
    let rate = env("AMP_RATE", 4 * MIB);
    let free = paced(records, 0);
    let limited = paced(records, rate);
    println!(
        "major compaction of the leveled table: unlimited {:.1} MiB/s, limited to {:.1} MiB/s: {:.1} MiB/s",
        free / MIB as f64,
        rate as f64 / MIB as f64,
        limited / MIB as f64
    );
}
