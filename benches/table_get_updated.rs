//! Issue 19 item 3: reads under writes against reads at rest, on the same data. Two
//! tables of one store hold the same 1,000,000 cells (16-byte random keys, 100-byte
//! values), loaded through `Table::write` in batches of 1,000 and flushed every
//! 250,000 cells, so each has four segments that all span the key space:
//!
//! - `rest`: nothing else (every memtable empty);
//! - `updated`: then 30,000 updates of random loaded keys (3%), 10,000 per memtable: two
//!   frozen memtables (`Table::freeze_memtable`) and the active one, all non-empty, as a
//!   table taking writes holds them.
//!
//! Rows take turns on chunks of pre-generated keys (three passes, the first not
//! counted, so load from other processes falls on all alike) and print ns per
//! operation and `updated`'s throughput relative to `rest`'s:
//!
//! - `get_with hit` / `get_with miss` / `get hit`: point reads of random loaded keys
//!   (3% of them updated) and of absent keys;
//! - `scan 1`: one row from a random key: a scan's cost before its rows (its sources
//!   opened and positioned, then dropped);
//! - `scan 100`: 100 rows from a random key (`scan(k..)`, `next_with`);
//! - `scan 100 cold`: 100-row bounded scans (`scan(a..=b)`) over ranges of 100
//!   consecutive keys that no update touched.
//!
//! Then both tables are compacted into one segment (`updated` gets its updates and
//! memtables again) and the rows run once more.
//!
//! `cargo bench --bench table_get_updated` (about 2 minutes). The access mode is the
//! default (`auto`); `SEGSTORE_BENCH_MODE=mmap` (any `disk_access_mode` spelling)
//! picks another. `SEGSTORE_BENCH_UPDATES=N` puts N updates in each memtable instead of
//! 10,000: 63,000 gives YCSB E's density (its sequence leaves about 190,000 keys in
//! memtables over 1M); with so many, few 100-key ranges stay untouched, and the cold
//! row runs over those found (none: the row is skipped, and says so).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use segstore::{
    CommitLogSync, CompactionStrategy, Config, DiskAccessMode, Store, Table, WriteBatch,
};

mod common;
use common::XorShift;

const CELLS: usize = 1_000_000;
const SEGMENTS: usize = 4;
/// Updates per memtable unless `SEGSTORE_BENCH_UPDATES` says otherwise.
const UPDATES_PER_MEMTABLE: usize = 10_000;
const MEMTABLES: usize = 3;
const KEY: usize = 16;
const VALUE: usize = 100;
const ROWS_PER_SCAN: usize = 100;

type Key = [u8; KEY];

fn value_of(i: usize, round: usize) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31).wrapping_add(j).wrapping_add(round * 7)) as u8;
    }
    v
}

/// What every row does with a value: copy it out and use a byte of it.
#[inline]
fn read_value(v: &[u8]) -> usize {
    let mut out = [0u8; VALUE];
    out.copy_from_slice(v);
    black_box(&out)[VALUE - 1] as usize + 1
}

fn config() -> Config {
    let mut c = Config::default();
    if let Ok(m) = std::env::var("SEGSTORE_BENCH_MODE") {
        c.disk_access_mode = m.parse::<DiskAccessMode>().expect("SEGSTORE_BENCH_MODE");
    }
    c.track_leaks = false;
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.background_compaction = false;
    // One segment after `compact()` (leveled would write 64 MiB segments).
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    // Room for the bench's frozen memtables: no write waits for a flush.
    c.table.max_frozen_memtables = MEMTABLES + 1;
    c
}

struct Fixture {
    rest: Arc<Table>,
    updated: Arc<Table>,
    keys: Vec<Key>,
    /// Indices into `keys` of the updated keys, per memtable round.
    updates: Vec<usize>,
    hits: Vec<Key>,
    misses: Vec<Key>,
    /// Bounds of 100-key ranges no update touched.
    cold: Vec<(Key, Key)>,
}

fn load(rest: &Table, updated: &Table, keys: &[Key]) {
    let per_segment = CELLS / SEGMENTS;
    for (c, chunk) in keys.chunks(1000).enumerate() {
        let mut batch = WriteBatch::new();
        for (j, k) in chunk.iter().enumerate() {
            batch.put(k, value_of(c * 1000 + j, 0));
        }
        rest.write(&batch).unwrap();
        updated.write(&batch).unwrap();
        if ((c + 1) * 1000) % per_segment == 0 {
            rest.flush().unwrap();
            updated.flush().unwrap();
        }
    }
}

/// Updates per memtable: [`UPDATES_PER_MEMTABLE`], or `SEGSTORE_BENCH_UPDATES`.
fn updates_per_memtable() -> usize {
    std::env::var("SEGSTORE_BENCH_UPDATES").map_or(UPDATES_PER_MEMTABLE, |n| {
        n.parse()
            .ok()
            .filter(|&n| n > 0)
            .expect("SEGSTORE_BENCH_UPDATES: a count above 0")
    })
}

/// The updates into `updated`'s memtables: the oldest rounds frozen, the last active.
fn apply_updates(updated: &Table, keys: &[Key], updates: &[usize]) {
    for (round, chunk) in updates.chunks(updates_per_memtable()).enumerate() {
        for &i in chunk {
            updated.put(keys[i], value_of(i, round + 1)).unwrap();
        }
        if round + 1 < MEMTABLES {
            updated.freeze_memtable();
        }
    }
    let s = updated.stats();
    assert_eq!(s.frozen_memtables, MEMTABLES - 1, "{s:?}");
    assert!(s.memtable_keys > 0, "{s:?}");
}

fn fixture(store: &Store) -> Fixture {
    let t0 = Instant::now();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let keys: Vec<Key> = (0..CELLS).map(|_| rng.key()).collect();
    let rest = store.table("rest").unwrap();
    let updated = store.table("updated").unwrap();
    load(&rest, &updated, &keys);
    let updates: Vec<usize> = (0..updates_per_memtable() * MEMTABLES)
        .map(|_| rng.below(CELLS))
        .collect();
    apply_updates(&updated, &keys, &updates);
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    let hits: Vec<Key> = (0..200_000).map(|_| keys[rng.below(CELLS)]).collect();
    let misses: Vec<Key> = std::iter::repeat_with(|| rng.key())
        .filter(|k| sorted.binary_search(k).is_err())
        .take(200_000)
        .collect();
    // Cold ranges: 100 consecutive keys (in key order) none of which was updated.
    let mut touched = vec![0u32; CELLS + 1];
    for &i in &updates {
        let at = sorted.binary_search(&keys[i]).unwrap();
        touched[at + 1] = 1;
    }
    for i in 1..=CELLS {
        touched[i] += touched[i - 1];
    }
    // A bounded number of tries: at E's density few ranges are untouched.
    let mut cold = Vec::new();
    for _ in 0..2_000_000 {
        if cold.len() == 20_000 {
            break;
        }
        let i = rng.below(CELLS - ROWS_PER_SCAN);
        if touched[i + ROWS_PER_SCAN] == touched[i] {
            cold.push((sorted[i], sorted[i + ROWS_PER_SCAN - 1]));
        }
    }
    let f = Fixture {
        rest,
        updated,
        keys,
        updates,
        hits,
        misses,
        cold,
    };
    check(&f);
    println!(
        "fixture: {CELLS} cells in {SEGMENTS} segments per table, {} updates over {MEMTABLES} memtables, {} cold ranges, mode {:?}, in {:.1?}",
        f.updates.len(),
        f.cold.len(),
        store.config().disk_access_mode,
        t0.elapsed()
    );
    f
}

/// Every row's answers are right (and the page cache is warm).
fn check(f: &Fixture) {
    let mut newest = std::collections::HashMap::new();
    let per = updates_per_memtable();
    for (n, &i) in f.updates.iter().enumerate() {
        newest.insert(i, n / per + 1);
    }
    for (i, k) in f.keys.iter().enumerate().step_by(7) {
        let round = newest.get(&i).copied().unwrap_or(0);
        assert_eq!(f.rest.get(k).unwrap().unwrap(), value_of(i, 0));
        let want = value_of(i, round);
        assert!(f.updated.get_with(k, |v| v == Some(&want[..])).unwrap());
    }
    for &i in f.updates.iter().step_by(3) {
        let want = value_of(i, newest[&i]);
        assert_eq!(f.updated.get(f.keys[i]).unwrap().unwrap(), want);
    }
    for k in f.misses.iter().take(20_000) {
        assert!(f.updated.get(k).unwrap().is_none());
        assert!(f.rest.get(k).unwrap().is_none());
    }
    for (a, b) in f.cold.iter().take(200) {
        let n = f.updated.scan(&a[..]..=&b[..]).unwrap().count();
        assert_eq!(n, ROWS_PER_SCAN);
    }
}

/// One operation of a row on one table with one key (index `i` into the row's keys).
type Op = fn(&Table, &Fixture, usize) -> usize;

fn get_with_hit(t: &Table, f: &Fixture, i: usize) -> usize {
    t.get_with(f.hits[i % f.hits.len()], |v| read_value(v.unwrap()))
        .unwrap()
}

fn get_with_miss(t: &Table, f: &Fixture, i: usize) -> usize {
    t.get_with(f.misses[i % f.misses.len()], |v| v.is_none() as usize)
        .unwrap()
}

fn get_hit(t: &Table, f: &Fixture, i: usize) -> usize {
    read_value(&t.get(f.hits[i % f.hits.len()]).unwrap().unwrap())
}

fn scan_from(t: &Table, f: &Fixture, i: usize) -> usize {
    let k = &f.hits[i % f.hits.len()];
    let mut s = t.scan(&k[..]..).unwrap();
    let mut sum = 0;
    for _ in 0..ROWS_PER_SCAN {
        match s.next_with(|_, v| v[VALUE - 1] as usize) {
            Some(v) => sum += v.unwrap(),
            None => break,
        }
    }
    sum
}

/// One row from a random key: what a scan costs before its rows (the merge's sources
/// opened and positioned, then dropped).
fn scan_one(t: &Table, f: &Fixture, i: usize) -> usize {
    let k = &f.hits[i % f.hits.len()];
    let mut s = t.scan(&k[..]..).unwrap();
    s.next_with(|_, v| v[VALUE - 1] as usize)
        .map_or(0, |v| v.unwrap())
}

fn scan_cold(t: &Table, f: &Fixture, i: usize) -> usize {
    let (a, b) = &f.cold[i % f.cold.len()];
    let mut s = t.scan(&a[..]..=&b[..]).unwrap();
    let mut sum = 0;
    while let Some(v) = s.next_with(|_, v| v[VALUE - 1] as usize) {
        sum += v.unwrap();
    }
    sum
}

/// `op` on `rest` and on `updated`, taking turns on chunks of `chunk` operations for
/// `passes` passes of `per_pass` operations each; prints ns per operation of each and
/// the ratio of their throughputs.
fn interleaved(f: &Fixture, stage: &str, name: &str, op: Op, per_pass: usize, chunk: usize) {
    const PASSES: usize = 3;
    let tables = [&f.rest, &f.updated];
    let mut ns = [[0u128; 2]; PASSES];
    let mut n = [[0usize; 2]; PASSES];
    let mut sum = 0usize;
    for pass in 0..PASSES {
        for (c, start) in (0..per_pass).step_by(chunk).enumerate() {
            let row = (c + pass) % 2;
            let t = Instant::now();
            for i in start..start + chunk {
                sum += op(tables[row], f, pass * per_pass + i);
            }
            ns[pass][row] += t.elapsed().as_nanos();
            n[pass][row] += chunk;
        }
    }
    black_box(sum);
    let per = |row: usize| {
        let t: u128 = (1..PASSES).map(|p| ns[p][row]).sum();
        let c: usize = (1..PASSES).map(|p| n[p][row]).sum();
        t as f64 / c as f64
    };
    let ratios: Vec<f64> = (1..PASSES)
        .map(|p| {
            let r = |row: usize| ns[p][row] as f64 / n[p][row] as f64;
            r(0) / r(1)
        })
        .collect();
    println!(
        "{stage:<10} {name:<14} rest {:8.0} ns  updated {:8.0} ns  updated/rest throughput {:.3}x (passes {})",
        per(0),
        per(1),
        per(0) / per(1),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
}

fn rows(f: &Fixture, stage: &str) {
    interleaved(f, stage, "get_with hit", get_with_hit, 100_000, 5_000);
    interleaved(f, stage, "get_with miss", get_with_miss, 100_000, 5_000);
    interleaved(f, stage, "get hit", get_hit, 100_000, 5_000);
    interleaved(f, stage, "scan 1", scan_one, 50_000, 2_500);
    interleaved(f, stage, "scan 100", scan_from, 5_000, 250);
    if f.cold.is_empty() {
        println!("{stage}: scan 100 cold skipped: no 100-key range is without an update");
    } else {
        interleaved(f, stage, "scan 100 cold", scan_cold, 5_000, 250);
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let f = fixture(&store);
    rows(&f, "4 segments");
    let t0 = Instant::now();
    f.rest.compact().unwrap();
    f.updated.compact().unwrap();
    assert_eq!(f.updated.stats().segments, 1);
    apply_updates(&f.updated, &f.keys, &f.updates);
    check(&f);
    println!("compacted and updated again in {:.1?}", t0.elapsed());
    rows(&f, "1 segment");
    drop(f);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    drop(dir);
}
