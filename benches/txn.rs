//! Uncontended transactions against plain writes, side by side in one run (issue 21
//! item 4, first half): one thread, a fresh store per configuration (`periodic` sync),
//! 100-byte values, distinct keys per operation.
//!
//! - `put`: `Table::put`, the baseline;
//! - `txn_put`: a transaction that puts one key and commits (a blind write: no read to
//!   check);
//! - `txn_get_put`: a transaction that reads one key, puts it and commits (the commit
//!   reads it again through the view and at the latest state);
//! - `get_then_put`: the same read and put as plain calls, without the transaction;
//! - `begin`: a transaction begun, its read view taken ([`segstore::Transaction::read_seq`],
//!   as its first read would) and dropped: the fixed cost of one that reads (one that
//!   only writes takes no view).
//!
//! Elements are operations (commits, or puts). `cargo bench --bench txn`; the issue's
//! target is a one-key transaction at 0.8x the throughput of `put` or better: `txn_put`
//! (blind) and `txn_get_put` (read, then write).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use segstore::{CommitLogSync, Config, Store};

const VALUE: [u8; 100] = [0x5a; 100];

fn txn(c: &mut Criterion) {
    let mut g = c.benchmark_group("txn");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for name in ["put", "txn_put", "txn_get_put", "get_then_put", "begin"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.track_leaks = false;
        config.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
        let store = Store::open(tmp.path(), config).unwrap();
        let t = store.table("bench").unwrap();
        let mut n = 0u64;
        g.bench_function(BenchmarkId::new(name, "1t"), |b| {
            b.iter(|| {
                n += 1;
                let key = format!("key{n:012}");
                match name {
                    "put" => t.put(&key, VALUE).unwrap(),
                    "txn_put" => {
                        let mut tx = store.transaction().unwrap();
                        tx.put(&t, &key, VALUE).unwrap();
                        tx.commit().unwrap();
                    }
                    "txn_get_put" => {
                        let mut tx = store.transaction().unwrap();
                        assert!(tx.get(&t, &key).unwrap().is_none());
                        tx.put(&t, &key, VALUE).unwrap();
                        tx.commit().unwrap();
                    }
                    "begin" => {
                        let tx = store.transaction().unwrap();
                        std::hint::black_box(tx.read_seq());
                    }
                    _ => {
                        assert!(t.get(&key).unwrap().is_none());
                        t.put(&key, VALUE).unwrap();
                    }
                }
            })
        });
        drop(t);
        assert!(store.close().unwrap().is_clean());
    }
    g.finish();
}

criterion_group!(benches, txn);
criterion_main!(benches);
