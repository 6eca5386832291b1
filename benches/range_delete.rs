//! Range deletes (issue 20 item 2), side by side in one run:
//!
//! - `delete_range/{1k,1m}`: `Table::delete_range` over 1,000 and over 1,000,000 keys
//!   of a table of 1M keys in 4 segments; the commit log bytes each writes are printed
//!   (one record, whatever the range).
//! - `get/{none,1000_ranges}`: random hits in two tables holding the same 1M live keys
//!   in 4 segments plus 10,000 updates in the memtable, one of them also holding 1,000
//!   range tombstones between its keys (900 in its segments, 100 in its memtable);
//!   the target is the second within 1.2x the first.
//! - `scan/{deleted_900k,only_100k}`: a full scan of a table of 1M keys whose middle
//!   900,000 were deleted by one range delete (in the memtable), against a full scan of
//!   a table holding only the 100,000 others: the scan seeks past the deleted range
//!   instead of reading each cell it covers.
//!
//! `cargo bench --bench range_delete`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use segstore::{CommitLogSync, Config, Store, Table};

const N: u64 = 1_000_000;
const VALUE: [u8; 100] = [0x5a; 100];

fn key(i: u64) -> Vec<u8> {
    format!("key{i:012}").into_bytes()
}

fn open(dir: &Path) -> Store {
    let mut config = Config::default();
    config.track_leaks = false;
    config.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    Store::open(dir, config).unwrap()
}

/// `keys` written in 4 segments (compaction off).
fn fill(store: &Store, name: &str, keys: impl Iterator<Item = u64>) -> Arc<Table> {
    let mut cfg = segstore::TableConfig::default();
    cfg.background_compaction = false;
    cfg.memtable_flush_bytes = 1 << 30;
    let t = store.table_with(name, cfg).unwrap();
    let keys: Vec<u64> = keys.collect();
    for chunk in keys.chunks(keys.len().div_ceil(4)) {
        let mut b = segstore::WriteBatch::new();
        for (j, &i) in chunk.iter().enumerate() {
            b.put(key(i), VALUE);
            if j % 1000 == 999 {
                t.write(&b).unwrap();
                b = segstore::WriteBatch::new();
            }
        }
        t.write(&b).unwrap();
        t.flush().unwrap();
    }
    t
}

fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn delete_range(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let t = fill(&store, "d", 0..N);
    let mut g = c.benchmark_group("delete_range");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1));
    for (name, span) in [("1k", 1_000), ("1m", N)] {
        let before = log_bytes(tmp.path());
        t.delete_range(key(0)..key(span)).unwrap();
        eprintln!(
            "delete_range over {span} keys: {} commit log bytes",
            log_bytes(tmp.path()) - before
        );
        g.bench_function(BenchmarkId::new("keys", name), |b| {
            b.iter(|| t.delete_range(key(0)..key(span)).unwrap())
        });
    }
    g.finish();
    drop(t);
    store.close().unwrap();
}

/// A table of the even keys below `2 * N`, 4 segments, then 10,000 updates in the
/// memtable; with `ranges`, 1,000 range tombstones over odd keys between them.
fn get_table(store: &Store, name: &str, ranges: bool) -> Arc<Table> {
    let t = fill(store, name, (0..N).map(|i| 2 * i));
    let del = |t: &Table, i: u64| {
        let odd = 2 * (i * (N / 1000)) + 1;
        t.delete_range(key(odd)..=key(odd)).unwrap();
    };
    if ranges {
        for i in 0..900 {
            del(&t, i);
        }
        t.flush().unwrap();
    }
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..10_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        t.put(key(2 * (rng % N)), VALUE).unwrap();
    }
    if ranges {
        for i in 900..1000 {
            del(&t, i);
        }
    }
    t
}

fn get(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let tables = [
        ("none", get_table(&store, "g0", false)),
        ("1000_ranges", get_table(&store, "g1", true)),
    ];
    let mut g = c.benchmark_group("get");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for (name, t) in &tables {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        g.bench_function(BenchmarkId::new("hit", name), |b| {
            b.iter(|| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let k = key(2 * (rng % N));
                t.get_with(&k, |v| assert!(v.is_some())).unwrap()
            })
        });
    }
    g.finish();
    drop(tables);
    store.close().unwrap();
}

fn scan(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let deleted = fill(&store, "s0", 0..N);
    deleted.delete_range(key(50_000)..key(950_000)).unwrap();
    let only = fill(&store, "s1", (0..50_000).chain(950_000..N));
    let mut g = c.benchmark_group("scan");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(100_000));
    for (name, t) in [("deleted_900k", &deleted), ("only_100k", &only)] {
        g.bench_function(BenchmarkId::new("full", name), |b| {
            b.iter(|| assert_eq!(t.scan(..).unwrap().count(), 100_000))
        });
    }
    g.finish();
    drop((deleted, only));
    store.close().unwrap();
}

criterion_group!(benches, delete_range, get, scan);
criterion_main!(benches);
