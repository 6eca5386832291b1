//! Repair costs (issue 5):
//! - `tree_build/*`: Merkle tree build rate (rows/s, depth 16) over `REPAIR_BENCH_ROWS`
//!   rows in 4 segments, from live data (access modes `auto` and `mmap`) and from an
//!   ephemeral snapshot (opened once per sample).
//! - `snapshot_create/*`: creating an ephemeral snapshot of a table of 100 and 1,000
//!   segments (hard links, manifest, fsyncs); the clear after each one is not timed.
//! - `repair_1pct/*`: end-to-end repair of two replicas of `REPAIR_BENCH_ROWS` rows that
//!   differ in 1% of their keys (half missing on one side, half newer on the other), in
//!   both parallelism modes, verification included. After each run the segments that
//!   repair added are removed again (untimed), so every run repairs the same divergence.
//!
//! `cargo bench --bench repair` (`REPAIR_BENCH_ROWS`, default 1,000,000).
//!
//! Medians measured on the 2-core development machine while other builds shared it
//! (two runs; the spread is that contention), 1,000,000 rows of ~60 bytes:
//!
//! | benchmark | run 1 | run 2 |
//! | --- | --- | --- |
//! | tree_build/live/auto | 278 ms (3.6 M rows/s) | 512 ms (1.95 M rows/s) |
//! | tree_build/live/mmap | 367 ms (2.7 M rows/s) | 406 ms (2.5 M rows/s) |
//! | tree_build/snapshot/mmap | 418 ms (2.4 M rows/s) | 512 ms (1.95 M rows/s) |
//! | snapshot_create/segments/100 | 3.3 ms | 10.4 ms |
//! | snapshot_create/segments/1000 | 30.8 ms | 38.8 ms |
//! | repair_1pct/parallel_depth20 | 2.64 s | 1.83 s |
//! | repair_1pct/parallel_depth16 | 2.25 s | 1.39 s |
//! | repair_1pct/sequential_depth20 | 3.97 s | 2.53 s |
//!
//! At depth 20 the 10,000 differing keys fall in ~9,950 leaves and ~34,000 rows are
//! streamed (both ways); at depth 16 ~9,200 leaves differ but ~295,000 rows are streamed.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use segstore::lifecycle::SegmentSet;
use segstore::repair::session::build_tree;
use segstore::repair::{
    LocalTransport, Parallelism, RepairOptions, RepairSession, Replica, ReplicaId, Row,
    SegmentReplica, Shape, TokenRange,
};
use segstore::{Config, DeletePolicy, DiskAccessMode, FileRules, Store};

fn rows_env() -> u64 {
    std::env::var("REPAIR_BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

fn config(mode: DiskAccessMode) -> Config {
    let mut c = Config::default();
    c.disk_access_mode = mode;
    c.delete_policy = DeletePolicy::DeferWhileMapped;
    c.track_leaks = false;
    c.file_rules = FileRules::posix();
    c
}

fn row(k: u64, ts: u64) -> Row {
    Row {
        key: format!("user{k:010}").into_bytes(),
        value: format!("value-{k}-{ts}-padding-to-about-forty-bytes").into_bytes(),
        ts,
        tombstone: false,
        expires: 0,
    }
}

/// Write keys `keys` (ascending) as one segment of `set`.
fn write_segment(set: &SegmentSet, keys: impl Iterator<Item = u64>, ts: u64) {
    let mut w = set.writer().unwrap();
    let name = w.name().clone();
    for k in keys {
        let r = row(k, ts);
        w.add(&r.key, &r.value, r.ts, r.tombstone).unwrap();
    }
    w.finish().unwrap();
    set.add(std::slice::from_ref(&name)).unwrap();
}

/// `n` rows in 4 interleaved segments.
fn fill(set: &SegmentSet, n: u64) {
    for part in 0..4 {
        write_segment(set, (part..n).step_by(4), 1);
    }
}

fn tree_build(c: &mut Criterion) {
    let n = rows_env();
    let shape = Shape::new(TokenRange::FULL, 16).unwrap();
    let mut g = c.benchmark_group("tree_build");
    g.throughput(Throughput::Elements(n));
    for mode in [DiskAccessMode::Auto, DiskAccessMode::Mmap] {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), config(mode)).unwrap();
        let r = SegmentReplica::new(ReplicaId(1), &store, "t").unwrap();
        fill(r.segments(), n);
        g.bench_function(BenchmarkId::new("live", mode), |b| {
            b.iter(|| build_tree(&r, shape).unwrap().root())
        });
        if mode == DiskAccessMode::Mmap {
            r.snapshot_ephemeral("bench").unwrap();
            g.bench_function(BenchmarkId::new("snapshot", mode), |b| {
                b.iter_custom(|iters| {
                    let snap = r.open_snapshot("bench").unwrap();
                    let t = Instant::now();
                    for _ in 0..iters {
                        build_tree(&*snap, shape).unwrap();
                    }
                    t.elapsed()
                })
            });
            r.clear_snapshot("bench").unwrap();
        }
        drop(r);
        assert!(store.close().unwrap().is_clean());
    }
    g.finish();
}

fn snapshot_create(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_create");
    for segments in [100u64, 1000] {
        let tmp = tempfile::tempdir().unwrap();
        // Nothing mapped, deletions immediate: clearing between samples stays cheap.
        let mut cfg = config(DiskAccessMode::Standard);
        cfg.delete_policy = DeletePolicy::Immediate;
        let store = Store::open(tmp.path(), cfg).unwrap();
        let set = store.segments("t").unwrap();
        let t = Instant::now();
        for s in 0..segments {
            write_segment(&set, s * 10..s * 10 + 10, 1);
        }
        eprintln!("wrote {segments} segments in {:.1?}", t.elapsed());
        let mut i = 0u64;
        g.bench_function(BenchmarkId::new("segments", segments), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    i += 1;
                    let tag = format!("s{i}");
                    let t = Instant::now();
                    store.snapshot_ephemeral(&tag, Some("t")).unwrap();
                    total += t.elapsed();
                    store.clear_snapshot(&tag).unwrap();
                }
                total
            })
        });
        drop(set);
        assert!(store.close().unwrap().is_clean());
    }
    g.finish();
}

fn repair_1pct(c: &mut Criterion) {
    let n = rows_env();
    let tmp_a = tempfile::tempdir().unwrap();
    let tmp_b = tempfile::tempdir().unwrap();
    let sa = Store::open(tmp_a.path(), config(DiskAccessMode::Auto)).unwrap();
    let sb = Store::open(tmp_b.path(), config(DiskAccessMode::Auto)).unwrap();
    let a = SegmentReplica::new(ReplicaId(1), &sa, "t").unwrap();
    let b = SegmentReplica::new(ReplicaId(2), &sb, "t").unwrap();
    // 1% of keys differ: every 200th key is missing on b, every 200th (offset 100) is
    // newer on b.
    let t = Instant::now();
    fill(a.segments(), n);
    write_segment(b.segments(), (0..n).filter(|k| k % 200 != 0), 1);
    write_segment(b.segments(), (100..n).step_by(200), 2);
    eprintln!("wrote 2 x {n} rows in {:.1?}", t.elapsed());
    let replicas: [&dyn Replica; 2] = [&a, &b];
    let base = [a.segments().live_ids(), b.segments().live_ids()];
    let mut g = c.benchmark_group("repair_1pct");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    for (par, depth) in [
        (Parallelism::Parallel, 20),
        (Parallelism::Parallel, 16),
        (Parallelism::Sequential, 20),
    ] {
        let mut opts = RepairOptions::default();
        opts.depth = depth;
        opts.parallelism = par;
        let mut printed = false;
        g.bench_function(BenchmarkId::new(format!("{par}_depth{depth}"), n), |bch| {
            bch.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = LocalTransport::new();
                    let start = Instant::now();
                    let report = RepairSession::run(&replicas, &t, &opts).unwrap();
                    total += start.elapsed();
                    assert!(report.converged());
                    if !printed {
                        eprintln!("{report}");
                        printed = true;
                    }
                    // Undo: drop the segments the repair added.
                    for (r, base) in [&a, &b].iter().zip(&base) {
                        let added: Vec<u64> = r
                            .segments()
                            .live_ids()
                            .into_iter()
                            .filter(|id| !base.contains(id))
                            .collect();
                        r.segments().replace(&added, &[]).unwrap();
                    }
                }
                total
            })
        });
    }
    g.finish();
    drop((a, b));
    assert!(sa.close().unwrap().is_clean());
    assert!(sb.close().unwrap().is_clean());
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = tree_build, snapshot_create, repair_1pct
}
criterion_main!(benches);
