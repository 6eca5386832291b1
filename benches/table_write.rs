//! Table write throughput per commit log sync mode (issue 4).
//!
//! Every configuration is a fresh store with the default table settings, and T writer
//! threads that each `put` a fixed number of distinct keys with 100-byte values; one
//! criterion iteration is one such round, timed from a barrier that releases all
//! writers until the last one returns (thread start-up is outside the timing).
//! Criterion reports elements/s, which here are writes/s (acknowledged puts).
//!
//! Modes: `periodic` (acknowledge at once, fsync every 10 s), `batch` (one fsync per
//! acknowledgement, shared by writers that arrive while one runs), and `group` with
//! windows of 0.1 ms, 1 ms and 10 ms; each at 1, 4 and 16 writers. Writes per thread
//! are sized so one round takes 5 to 150 ms in each mode (a 10 ms group window
//! allows about 100 acknowledgements per second per thread).
//!
//! `cargo bench --bench table_write` (about 2 minutes;
//! `cargo bench --bench table_write -- group` for a subset).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use segstore::{CommitLogSync, Config, Store, Table};

const VALUE: [u8; 100] = [0x5a; 100];
const THREADS: [usize; 3] = [1, 4, 16];

/// The modes, with the writes each thread does per round.
fn modes() -> Vec<(&'static str, CommitLogSync, u64)> {
    let group = |us| CommitLogSync::Group {
        window: Duration::from_micros(us),
    };
    vec![
        (
            "periodic",
            CommitLogSync::Periodic { period_ms: 10_000 },
            500,
        ),
        ("batch", CommitLogSync::Batch, 16),
        ("group_0.1ms", group(100), 16),
        ("group_1ms", group(1_000), 16),
        ("group_10ms", group(10_000), 8),
    ]
}

/// One round: `threads` writers, `per_thread` puts each, timed from the barrier.
fn round(t: &Arc<Table>, threads: usize, per_thread: u64, next_key: &AtomicU64) -> Duration {
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let first = next_key.fetch_add(per_thread, Ordering::Relaxed);
                let (t, start) = (Arc::clone(t), &start);
                s.spawn(move || {
                    start.wait();
                    for k in first..first + per_thread {
                        t.put(format!("key{k:012}").as_bytes(), VALUE).unwrap();
                    }
                    Instant::now()
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let end = workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .max()
            .unwrap();
        end - t0
    })
}

fn table_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("table_write");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    for (name, sync, per_thread) in modes() {
        for threads in THREADS {
            let tmp = tempfile::tempdir().unwrap();
            let mut config = Config::default();
            config.track_leaks = false;
            config.commitlog.sync = sync;
            let store = Store::open(tmp.path(), config).unwrap();
            let t = store.table("bench").unwrap();
            let next_key = AtomicU64::new(0);
            g.throughput(Throughput::Elements(threads as u64 * per_thread));
            g.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| round(&t, threads, per_thread, &next_key))
                        .sum()
                })
            });
            drop(t);
            assert!(store.close().unwrap().is_clean());
        }
    }
    g.finish();
}

criterion_group!(benches, table_write);
criterion_main!(benches);
