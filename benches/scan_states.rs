//! Issue 19 item 3: YCSB E's scans over the states a leveled table passes through
//! while it takes writes, measured side by side in one run. Three tables of one store
//! each hold 1,000,000 cells (keys shaped as the peers bench's YCSB keys: 16 bytes,
//! an FNV-1a hash of the item number then the number; 100-byte random values), loaded
//! in batches of 1,000 and compacted into level 1:
//!
//! - `rest`: nothing else;
//! - `memtable`: then 82,000 updates of random loaded keys in the active memtable;
//! - `level 0 + memtable`: three flushes of 89,000 updates each (three level 0
//!   segments), then 82,000 in the memtable: the state the peers bench's YCSB sequence
//!   left at one close ("segments L0 89K, L0 89K, L1 508K, L0 89K, L1 540K", and
//!   82,088 keys in the memtable).
//!
//! Each row is a scan from a random loaded key (`scan(k..)`) of 1 to 100 rows
//! (uniform), read with `next_with`, as YCSB E's are. The states take turns on passes
//! of 20,000 pre-generated scans (seven passes, the first not counted, so load from
//! other processes falls on all alike) and print the median ns a scan and its ratio
//! to `rest`'s.
//!
//! `cargo bench --bench scan_states` (about 15 seconds). Background compaction is
//! off, so the states stay as built.

use std::sync::Arc;
use std::time::Instant;

use segstore::{CommitLogSync, Config, Store, Table, WriteBatch};

mod common;
use common::{median, XorShift};

const KEYS: u64 = 1_000_000;
const MEMTABLE_UPDATES: usize = 82_000;
const LEVEL0_UPDATES: usize = 89_000;
const LEVEL0_SEGMENTS: usize = 3;
const SCANS: usize = 20_000;
const PASSES: usize = 7;

/// A random 100-byte value.
fn value(rng: &mut XorShift) -> [u8; 100] {
    let mut v = [0u8; 100];
    for c in v.chunks_mut(8) {
        c.copy_from_slice(&rng.next().to_le_bytes()[..c.len()]);
    }
    v
}

/// The key of item `n`: `be64(fnv1a64(n))` then `be64(n)` (the peers bench's clears the
/// hash's top bit, as YCSB's `fnvhash64` does; the keys spread alike).
fn key(n: u64) -> [u8; 16] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in n.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&h.to_be_bytes());
    k[8..].copy_from_slice(&n.to_be_bytes());
    k
}

/// `n` writes in batches of 1,000: the keys to load, in order (`load`), or updates of
/// random loaded keys.
fn write(t: &Table, rng: &mut XorShift, n: usize, load: bool) {
    for chunk in 0..n / 1_000 {
        let mut b = WriteBatch::new();
        for i in 0..1_000 {
            let k = if load {
                (chunk * 1_000 + i) as u64
            } else {
                rng.below(KEYS as usize) as u64
            };
            b.put(key(k), value(rng));
        }
        t.write(&b).expect("write");
    }
}

/// A table of the loaded keys compacted into level 1, then `level0` flushes of
/// [`LEVEL0_UPDATES`] updates and `memtable` updates left in the memtable.
fn build(
    store: &Store,
    name: &str,
    rng: &mut XorShift,
    level0: usize,
    memtable: usize,
) -> Arc<Table> {
    let t = store.table(name).expect("table");
    write(&t, rng, KEYS as usize, true);
    t.compact().expect("compact");
    for _ in 0..level0 {
        write(&t, rng, LEVEL0_UPDATES, false);
        t.flush().expect("flush");
    }
    write(&t, rng, memtable, false);
    t
}

/// Run `scans` (start item, rows), returning ns a scan and the bytes read.
fn pass(t: &Table, scans: &[(u64, usize)]) -> (f64, usize) {
    let start = Instant::now();
    let mut bytes = 0;
    for &(k, rows) in scans {
        let k = key(k);
        let mut s = t.scan(&k[..]..).expect("scan");
        for _ in 0..rows {
            match s.next_with(|_, v| v.len()) {
                Some(n) => bytes += n.expect("row"),
                None => break,
            }
        }
    }
    (
        start.elapsed().as_nanos() as f64 / scans.len() as f64,
        bytes,
    )
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Config::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.background_compaction = false;
    c.table.memtable_flush_bytes = 1 << 30;
    let store = Store::open(dir.path(), c).expect("open");
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let states = [
        ("rest", build(&store, "rest", &mut rng, 0, 0)),
        (
            "memtable",
            build(&store, "mem", &mut rng, 0, MEMTABLE_UPDATES),
        ),
        (
            "level 0 + memtable",
            build(&store, "l0", &mut rng, LEVEL0_SEGMENTS, MEMTABLE_UPDATES),
        ),
    ];
    for (name, t) in &states {
        let s = t.stats();
        println!(
            "{name}: {} segments, {} memtable keys",
            s.segments, s.memtable_keys
        );
    }
    let mut ns = vec![Vec::new(); states.len()];
    for p in 0..PASSES {
        let scans: Vec<(u64, usize)> = (0..SCANS)
            .map(|_| (rng.below(KEYS as usize) as u64, 1 + rng.below(100)))
            .collect();
        let mut bytes = Vec::new();
        for (i, (_, t)) in states.iter().enumerate() {
            let (n, b) = pass(t, &scans);
            bytes.push(b);
            if p > 0 {
                ns[i].push(n);
            }
        }
        // Every state holds every key with a 100-byte value: the same rows.
        assert!(
            bytes.iter().all(|&b| b == bytes[0]),
            "states read {bytes:?}"
        );
    }
    let rest = median(ns[0].clone());
    for ((name, _), v) in states.iter().zip(ns) {
        let m = median(v);
        println!(
            "{name:20} {m:8.0} ns a 1..100-row scan   {:.2}x rest's time",
            m / rest
        );
    }
    drop(states);
    store.close().expect("close");
}
