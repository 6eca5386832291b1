//! Issue 12: `Table` point reads against the segment reader's, on the same data. A table
//! of 1,000,000 cells (16-byte random keys, 100-byte values) is loaded through
//! `Table::write` (batches of 1,000 puts), flushed and major-compacted into one segment, in `mmap` mode. Rows:
//!
//! - `segment_reader`: `SegmentReader::get_with` on that very segment (the table's own
//!   handle: same file, same page cache, same mapping);
//! - `table_get_with`: `Table::get_with` (memtables, then the view, then the segment);
//! - `table_get`: `Table::get`, a `Value` borrowing the mapped bytes.
//!
//! Every row does the same with the value it finds: copies it out and uses a byte (as
//! `point_lookup` does). Groups `table_get_hit` and `table_get_miss` run 1,000 lookups
//! of pre-generated random keys per iteration (per-element time is one lookup). First an
//! interleaved table (rows taking turns on 5,000-key chunks for three passes over the
//! keys, so load from other processes falls on all alike) prints ns per lookup and each
//! row's throughput relative to the segment reader's; the target is Table get
//! >= 0.9x on hits.
//!
//! Then 100-row scans from random keys, interleaved the same way: `segment_iter` (the
//! segment's iterator) against `table_scan` (`Table::scan`), owned rows, and
//! `segment_iter_with` against `table_scan_with`, rows lent by `next_with`; the
//! issue's target compares Table scans with LMDB's (`benches/peers`).
//!
//! `cargo bench --bench table_get` (about 40 s: the load, then six short rows).
//! `TABLE_GET_MODE=auto` (or `standard`, `mmap_index_only`; default `mmap`) opens the
//! store in another `disk_access_mode`; the block cache's figures are printed after the
//! interleaved rows (`memory.block_cache_mb` at its default).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use segstore::lifecycle::SegmentHandle;
use segstore::segment::SegmentIter;
use segstore::{
    CommitLogSync, CompactionStrategy, Config, DiskAccessMode, Store, Table, WriteBatch,
};

mod common;
use common::XorShift;

const CELLS: usize = 1_000_000;
const KEY: usize = 16;
const VALUE: usize = 100;
/// Lookups per timed iteration.
const BATCH: usize = 1000;

type Key = [u8; KEY];

fn value_of(i: usize) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31).wrapping_add(j)) as u8;
    }
    v
}

/// What every row does with the value it finds: copy it out and use a byte of it.
#[inline]
fn read_value(v: &[u8]) -> usize {
    let mut out = [0u8; VALUE];
    out.copy_from_slice(v);
    black_box(&out)[VALUE - 1] as usize + 1
}

struct Fixture {
    table: Arc<Table>,
    segment: SegmentHandle,
    hits: Vec<Key>,
    misses: Vec<Key>,
}

fn config() -> Config {
    let mut c = Config::default();
    c.disk_access_mode = match std::env::var("TABLE_GET_MODE") {
        Ok(m) => m.parse().expect("TABLE_GET_MODE: a disk_access_mode"),
        Err(_) => DiskAccessMode::Mmap,
    };
    c.track_leaks = false;
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.background_compaction = false;
    // One segment after `compact()` (leveled would write 64 MiB segments).
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c
}

/// The directory and the store (closed at the end), and what the rows read.
fn fixture() -> (tempfile::TempDir, Store, Fixture) {
    let t0 = Instant::now();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let keys: Vec<Key> = (0..CELLS).map(|_| rng.key()).collect();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let table = store.table("bench").unwrap();
    // Batches of 1,000 puts: one commit log record each, for a quicker load.
    for (c, chunk) in keys.chunks(1000).enumerate() {
        let mut batch = WriteBatch::new();
        for (j, k) in chunk.iter().enumerate() {
            batch.put(k, value_of(c * 1000 + j));
        }
        table.write(&batch).unwrap();
    }
    table.compact().unwrap();
    let view = table.segments().view();
    assert_eq!(view.segments.len(), 1, "fully compacted");
    let segment = view.segments[0].clone();
    drop(view);
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    let hits: Vec<Key> = (0..CELLS)
        .map(|_| keys[(rng.next() % CELLS as u64) as usize])
        .collect();
    let misses: Vec<Key> = std::iter::repeat_with(|| rng.key())
        .filter(|k| sorted.binary_search(k).is_err())
        .take(CELLS)
        .collect();
    // Check every row once, and warm the page cache.
    assert_eq!(segment.verify().unwrap(), CELLS as u64);
    for (i, k) in keys.iter().enumerate().step_by(97) {
        let want = value_of(i);
        assert_eq!(table.get(k).unwrap().unwrap(), want);
        assert!(table.get_with(k, |v| v == Some(&want[..])).unwrap());
        assert_eq!(
            segment.get_with(k, |r| r.value == want).unwrap(),
            Some(true)
        );
    }
    for k in misses.iter().take(10_000) {
        assert!(table.get(k).unwrap().is_none());
    }
    println!(
        "fixture: {CELLS} cells through Table::write (batches of 1,000), compacted into one segment of {} MB data, in {:.1?} ({:?})",
        segment.stats().data_len >> 20,
        t0.elapsed(),
        segment.modes()
    );
    let f = Fixture {
        table,
        segment,
        hits,
        misses,
    };
    (dir, store, f)
}

#[derive(Clone, Copy)]
enum Row {
    SegmentReader,
    TableGetWith,
    TableGet,
}

const ROWS: [Row; 3] = [Row::SegmentReader, Row::TableGetWith, Row::TableGet];

impl Row {
    fn name(self) -> &'static str {
        match self {
            Row::SegmentReader => "segment_reader",
            Row::TableGetWith => "table_get_with",
            Row::TableGet => "table_get",
        }
    }

    #[inline]
    fn lookup(self, f: &Fixture, k: &Key) -> usize {
        match self {
            Row::SegmentReader => f
                .segment
                .get_with(k, |r| read_value(r.value))
                .unwrap()
                .unwrap_or(0),
            Row::TableGetWith => f.table.get_with(k, |v| v.map_or(0, read_value)).unwrap(),
            Row::TableGet => f.table.get(k).unwrap().map_or(0, |v| read_value(&v)),
        }
    }
}

/// Rows taking turns on chunks of `keys`, pass after pass (the first pass warms caches
/// and page tables and is not counted). Prints each row's ns per lookup over all counted
/// passes, its throughput relative to `segment_reader`, and the lowest and highest of
/// that ratio among single passes (the spread other processes' load causes).
fn interleaved(f: &Fixture, what: &str, keys: &[Key]) {
    const CHUNK: usize = 5_000;
    const PASSES: usize = 4;
    let mut ns = [[0u128; ROWS.len()]; PASSES];
    let mut n = [[0usize; ROWS.len()]; PASSES];
    let mut sum = 0usize;
    for pass in 0..PASSES {
        for (i, chunk) in keys.chunks(CHUNK).enumerate() {
            // Rotate which row starts, so none always follows the same one.
            let row = (i + pass) % ROWS.len();
            let t = Instant::now();
            for k in chunk {
                sum += ROWS[row].lookup(f, k);
            }
            ns[pass][row] += t.elapsed().as_nanos();
            n[pass][row] += chunk.len();
        }
    }
    black_box(sum);
    let per = |passes: &[usize], row: usize| {
        let t: u128 = passes.iter().map(|&p| ns[p][row]).sum();
        let c: usize = passes.iter().map(|&p| n[p][row]).sum();
        t as f64 / c as f64
    };
    let counted: Vec<usize> = (1..PASSES).collect();
    for (row, r) in ROWS.iter().enumerate() {
        let ratios: Vec<f64> = counted
            .iter()
            .map(|&p| per(&[p], 0) / per(&[p], row))
            .collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        println!(
            "interleaved {what:<4} {:<15} {:6.0} ns/get  {:.3}x segment_reader throughput (passes {lo:.3}..{hi:.3})",
            r.name(),
            per(&counted, row),
            per(&counted, 0) / per(&counted, row),
        );
    }
}

/// 100-row scans from random start keys: the segment's own iterator against
/// `Table::scan`, owned rows (`next`) and borrowed (`next_with`), rows taking turns on
/// chunks of start keys as `interleaved` does. Each row reads a byte of every value.
fn scans(f: &Fixture, starts: &[Key]) {
    const ROWS_PER_SCAN: usize = 100;
    const CHUNK: usize = 500;
    const PASSES: usize = 4;
    const NAMES: [&str; 4] = [
        "segment_iter",
        "table_scan",
        "segment_iter_with",
        "table_scan_with",
    ];
    let run = |row: usize, k: &Key| -> usize {
        let mut sum = 0;
        match row {
            0 => {
                for e in SegmentIter::new(f.segment.clone(), &k[..]..)
                    .unwrap()
                    .take(ROWS_PER_SCAN)
                {
                    sum += e.unwrap().value[VALUE - 1] as usize;
                }
            }
            1 => {
                for r in f.table.scan(&k[..]..).unwrap().take(ROWS_PER_SCAN) {
                    sum += r.unwrap().1[VALUE - 1] as usize;
                }
            }
            2 => {
                let mut it = SegmentIter::new(f.segment.clone(), &k[..]..).unwrap();
                for _ in 0..ROWS_PER_SCAN {
                    match it.next_with(|r| r.value[VALUE - 1] as usize) {
                        Some(v) => sum += v.unwrap(),
                        None => break,
                    }
                }
            }
            _ => {
                let mut s = f.table.scan(&k[..]..).unwrap();
                for _ in 0..ROWS_PER_SCAN {
                    match s.next_with(|_, v| v[VALUE - 1] as usize) {
                        Some(v) => sum += v.unwrap(),
                        None => break,
                    }
                }
            }
        }
        sum
    };
    let rows = NAMES.len();
    let mut ns = vec![vec![0u128; rows]; PASSES];
    let mut n = vec![vec![0usize; rows]; PASSES];
    let mut sum = 0usize;
    for pass in 0..PASSES {
        for (i, chunk) in starts.chunks(CHUNK).enumerate() {
            let row = (i + pass) % rows;
            let t = Instant::now();
            for k in chunk {
                sum += run(row, k);
            }
            ns[pass][row] += t.elapsed().as_nanos();
            n[pass][row] += chunk.len();
        }
    }
    black_box(sum);
    let per = |row: usize| {
        let t: u128 = (1..PASSES).map(|p| ns[p][row]).sum();
        let c: usize = (1..PASSES).map(|p| n[p][row]).sum();
        t as f64 / c as f64
    };
    for (row, name) in NAMES.iter().enumerate() {
        // Owned rows against the segment's owned iteration, borrowed against borrowed.
        let base = per(row & 2);
        println!(
            "interleaved scan {name:<18} {:8.0} ns per {ROWS_PER_SCAN}-row scan  {:.3}x {} throughput",
            per(row),
            base / per(row),
            NAMES[row & 2]
        );
    }
}

fn lookups(c: &mut Criterion, f: &Fixture, group: &str, keys: &[Key]) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(BATCH as u64));
    for row in ROWS {
        let mut at = 0;
        g.bench_function(BenchmarkId::from_parameter(row.name()), |b| {
            b.iter(|| {
                if at + BATCH > keys.len() {
                    at = 0;
                }
                let mut sum = 0usize;
                for k in &keys[at..at + BATCH] {
                    sum += row.lookup(f, k);
                }
                at += BATCH;
                black_box(sum)
            })
        });
    }
    g.finish();
}

fn table_get(c: &mut Criterion) {
    let (dir, store, f) = fixture();
    interleaved(&f, "hit", &f.hits);
    interleaved(&f, "miss", &f.misses);
    println!(
        "mode {:?}: block cache {:?}",
        store.stats().modes,
        store.stats().block_cache
    );
    scans(&f, &f.hits[..20_000]);
    lookups(c, &f, "table_get_hit", &f.hits);
    lookups(c, &f, "table_get_miss", &f.misses);
    drop(f);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    drop(dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = table_get
}
criterion_main!(benches);
