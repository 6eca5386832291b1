//! Table read throughput while a major compaction runs, versus without (issue 4).
//!
//! 200 000 keys with 100-byte values are loaded once, in 8 flushes, and merged into one
//! segment. Then, for `disk_access_mode` `mmap` and `standard`, one thread reads keys
//! chosen at random (every read finds its key), 20 000 gets per criterion iteration:
//!
//! - `idle`: nothing else runs.
//! - `major_compaction`: another thread runs major compactions back to back. Each one
//!   first writes one key, so the flush before it adds a second segment and the merge
//!   rewrites all 200 000 keys; reads run against 1 or 2 segments while the merge reads
//!   and writes files, and the old segment is unmapped and deleted after each merge.
//!
//! Criterion reports elements/s, here gets/s. On a 2-core machine the compaction thread
//! takes one core, so the difference shows contention for CPU, page cache and disk.
//!
//! `cargo bench --bench table_read` (about a minute).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use segstore::{CommitLogSync, Config, DiskAccessMode, Store, Table};

const KEYS: u64 = 200_000;
const GETS_PER_ITER: u64 = 20_000;
const LOAD_FLUSHES: u64 = 8;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:010}").into_bytes()
}

fn config(mode: DiskAccessMode) -> Config {
    let mut c = Config::default();
    c.disk_access_mode = mode;
    c.track_leaks = false;
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    // Only this bench's compactions: none in the background.
    c.table.background_compaction = false;
    c
}

fn load(dir: &std::path::Path) {
    let store = Store::open(dir, config(DiskAccessMode::Standard)).unwrap();
    let t = store.table("bench").unwrap();
    let value = [0x5au8; 100];
    for i in 0..KEYS {
        t.put(key(i), value).unwrap();
        if (i + 1) % (KEYS / LOAD_FLUSHES) == 0 {
            t.flush().unwrap();
        }
    }
    t.compact().unwrap();
    assert_eq!(t.stats().segments, 1);
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// `GETS_PER_ITER` random gets per iteration.
fn gets(t: &Table, iters: u64, rng: &mut u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters * GETS_PER_ITER {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let v = t.get(key(*rng % KEYS)).unwrap();
        assert!(v.is_some());
    }
    start.elapsed()
}

fn table_read(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    load(tmp.path());
    let mut g = c.benchmark_group("table_read");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
        .throughput(Throughput::Elements(GETS_PER_ITER));
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let store = Store::open(tmp.path(), config(mode)).unwrap();
        let t = store.table("bench").unwrap();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        g.bench_function(BenchmarkId::new("idle", mode.as_str()), |b| {
            b.iter_custom(|iters| gets(&t, iters, &mut rng))
        });

        let stop = Arc::new(AtomicBool::new(false));
        let merges = Arc::new(AtomicU64::new(0));
        let compactor = {
            let (t, stop, merges) = (Arc::clone(&t), Arc::clone(&stop), Arc::clone(&merges));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // A second segment, so the major compaction rewrites everything.
                    t.put(key(n % KEYS), [0xa5u8; 100]).unwrap();
                    t.compact().unwrap();
                    n += 1;
                    merges.store(n, Ordering::Relaxed);
                }
            })
        };
        g.bench_function(BenchmarkId::new("major_compaction", mode.as_str()), |b| {
            b.iter_custom(|iters| gets(&t, iters, &mut rng))
        });
        stop.store(true, Ordering::Relaxed);
        compactor.join().unwrap();
        eprintln!(
            "{mode}: {} major compactions ran during the reads; {:?}",
            merges.load(Ordering::Relaxed),
            t.stats()
        );
        drop(t);
        assert!(store.close().unwrap().is_clean());
    }
    g.finish();
}

criterion_group!(benches, table_read);
criterion_main!(benches);
