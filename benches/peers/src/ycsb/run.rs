//! One timed phase: `threads` threads each doing `ops` operations of a workload on one
//! system, every operation's latency recorded in an HDR histogram.

use std::time::Instant;

use hdrhistogram::Histogram;

use super::kv::Kv;
use super::workload::{key, value, Chooser, KeySpace, Op, Workload, VALUE_LEN};

/// Throughput and latency of one phase.
pub struct Phase {
    /// Operations per second, all threads together, over the phase's wall time.
    pub ops_per_sec: f64,
    /// Latency histogram (nanoseconds) of every operation of every thread.
    pub hist: Histogram<u64>,
}

impl Phase {
    /// The 99th percentile latency in microseconds.
    pub fn p99_us(&self) -> f64 {
        self.hist.value_at_quantile(0.99) as f64 / 1e3
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 60 s, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap()
}

/// Run one phase; `seed` makes the operations repeat from system to system.
pub fn phase(
    kv: &dyn Kv,
    ks: &KeySpace,
    wl: Workload,
    threads: usize,
    ops: usize,
    seed: u64,
) -> Phase {
    ks.prepare();
    let t = Instant::now();
    let hists: Vec<Histogram<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| s.spawn(move || worker(kv, ks, wl, ops, seed * 64 + i as u64)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let mut hist = histogram();
    for h in &hists {
        hist.add(h).unwrap();
    }
    Phase {
        ops_per_sec: (ops * threads) as f64 / secs,
        hist,
    }
}

/// One thread's share. The key and value are made before the clock starts, so the
/// latency is the system's; the throughput includes choosing them (as YCSB's does).
fn worker(kv: &dyn Kv, ks: &KeySpace, wl: Workload, ops: usize, seed: u64) -> Histogram<u64> {
    let mut h = histogram();
    let mut c = Chooser::new(wl, ks, seed);
    for _ in 0..ops {
        let op = c.next();
        let ns = match op {
            Op::Read(n) => {
                let k = key(n);
                let t = Instant::now();
                let len = kv.read(&k);
                let ns = t.elapsed().as_nanos();
                assert_eq!(len, VALUE_LEN, "read of item {n} found {len} bytes");
                ns
            }
            Op::Update(n) => {
                let (k, v) = (key(n), value(n, c.version()));
                let t = Instant::now();
                kv.put(&k, &v);
                t.elapsed().as_nanos()
            }
            Op::Insert(n) => {
                let (k, v) = (key(n), value(n, 0));
                let t = Instant::now();
                kv.put(&k, &v);
                let ns = t.elapsed().as_nanos();
                ks.ack(n);
                ns
            }
            Op::Scan(n, rows) => {
                let k = key(n);
                let t = Instant::now();
                let bytes = kv.scan(&k, rows);
                let ns = t.elapsed().as_nanos();
                assert!(bytes > 0, "scan from item {n} saw nothing");
                ns
            }
            Op::ReadModifyWrite(n) => {
                // YCSB's read-modify-write: read the record, then write it back changed
                // (not atomic: YCSB's DB interface has no transaction around the two).
                let (k, v) = (key(n), value(n, c.version()));
                let t = Instant::now();
                let len = kv.read(&k);
                kv.put(&k, &v);
                let ns = t.elapsed().as_nanos();
                assert_eq!(len, VALUE_LEN, "read of item {n} found {len} bytes");
                ns
            }
        };
        h.saturating_record(ns as u64);
    }
    h
}
