//! Point lookups and short scans on one warm segment of 1,000,000 cells (16-byte keys,
//! 100-byte values, default `SegmentOptions`), one row per `disk_access_mode`, against
//! a baseline: binary search over a mapped file of sorted (16-byte key, u64 offset)
//! records, then the 100-byte value from a mapped data file. Every lookup, segment or
//! baseline, copies the value it finds out (`read_value`); the segment uses the
//! allocation-free `get_with` and `SegmentIter::next_with`.
//!
//! Groups `get_hit`, `get_miss`: each iteration runs 1,000 lookups over pre-generated
//! random keys (no RNG in the timed loop), so criterion's per-element time is one lookup.
//! Group `scan_100`: each iteration runs 20 scans of 100 cells from random start keys;
//! the per-element time is one scan. Before the groups, the bench prints how many random
//! misses the filter answers alone, and an interleaved table (every row taking turns on
//! 25,000-key chunks) whose ratios to the baseline hold up when other processes load the
//! machine, which sequential criterion rows do not.
//!
//! `cargo bench --bench point_lookup` (about a minute; medians are in
//! `target/criterion/<group>/<row>/new/estimates.json`).
#![allow(clippy::disallowed_methods)] // writes its own data set, outside the store's I/O boundary

use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use segstore::io::mapped::{MapAdvice, MappedFile};
use segstore::segment::{IndexCache, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, FileRules, SegmentOptions};

mod common;
use common::XorShift;

const CELLS: usize = 1_000_000;
const KEY: usize = 16;
const VALUE: usize = 100;
/// Lookups per timed iteration.
const BATCH: usize = 1000;
/// Scans per timed iteration, and cells per scan.
const SCANS: usize = 20;
const SCAN_LEN: usize = 100;

type Key = [u8; KEY];

fn value_of(i: usize) -> [u8; VALUE] {
    let mut v = [0u8; VALUE];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31).wrapping_add(j)) as u8;
    }
    v
}

/// The baseline: sorted fixed-width (key, offset) records and a file of values, both
/// read through maps.
struct Baseline {
    index: MappedFile,
    data: MappedFile,
    n: usize,
}

const REC: usize = KEY + 8;

impl Baseline {
    fn write(dir: &Path, keys: &[Key]) -> Baseline {
        let (ip, dp) = (dir.join("baseline.index"), dir.join("baseline.data"));
        let mut iw = BufWriter::new(File::create(&ip).unwrap());
        let mut dw = BufWriter::new(File::create(&dp).unwrap());
        for (i, k) in keys.iter().enumerate() {
            iw.write_all(k).unwrap();
            iw.write_all(&((i * VALUE) as u64).to_le_bytes()).unwrap();
            dw.write_all(&value_of(i)).unwrap();
        }
        iw.into_inner().unwrap().sync_all().unwrap();
        dw.into_inner().unwrap().sync_all().unwrap();
        let map = |p: &Path, advice| {
            let f = File::open(p).unwrap();
            let len = f.metadata().unwrap().len();
            // SAFETY: files this bench wrote and closed; nothing writes or truncates them
            // while they are mapped.
            unsafe { MappedFile::open(&f, p, len, advice) }.unwrap()
        };
        Baseline {
            index: map(&ip, MapAdvice::Random),
            data: map(&dp, MapAdvice::Normal),
            n: keys.len(),
        }
    }

    /// Index of the first record whose key is >= `key`.
    #[inline]
    fn lower_bound(&self, key: &[u8]) -> usize {
        let idx = self.index.as_slice();
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if &idx[mid * REC..mid * REC + KEY] < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    #[inline]
    fn value_at(&self, i: usize) -> &[u8] {
        let idx = self.index.as_slice();
        let off = u64::from_le_bytes(idx[i * REC + KEY..(i + 1) * REC].try_into().unwrap());
        &self.data.as_slice()[off as usize..off as usize + VALUE]
    }

    #[inline]
    fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let i = self.lower_bound(key);
        let idx = self.index.as_slice();
        if i < self.n && &idx[i * REC..i * REC + KEY] == key {
            Some(f(self.value_at(i)))
        } else {
            None
        }
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    readers: Vec<(DiskAccessMode, SegmentReader)>,
    baseline: Baseline,
    hits: Vec<Key>,
    misses: Vec<Key>,
    scan_starts: Vec<Key>,
}

fn fixture() -> Fixture {
    let t0 = std::time::Instant::now();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut keys: Vec<Key> = (0..CELLS).map(|_| rng.key()).collect();
    keys.sort_unstable();
    keys.dedup();
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("bench", 1).unwrap();
    let opts = SegmentOptions::default();
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &opts, &FileRules::posix()).unwrap();
    for (i, k) in keys.iter().enumerate() {
        w.add(k, &value_of(i), i as u64, false).unwrap();
    }
    let stats = w.finish().unwrap();
    let baseline = Baseline::write(dir.path(), &keys);

    let hits: Vec<Key> = (0..CELLS).map(|_| keys[rng.below(keys.len())]).collect();
    let misses: Vec<Key> = std::iter::repeat_with(|| rng.key())
        .filter(|k| keys.binary_search(k).is_err())
        .take(CELLS)
        .collect();
    let scan_starts: Vec<Key> = (0..CELLS / 10)
        .map(|_| keys[rng.below(keys.len() - SCAN_LEN)])
        .collect();

    let readers: Vec<_> = DiskAccessMode::all()
        .into_iter()
        .map(|m| {
            (
                m,
                // As a store opens them: with the default index cache (it acts where
                // the index is read with positional reads, i.e. `standard`).
                SegmentReader::open_with(dir.path(), &name, m.resolve(), &{
                    let mut c = ReaderOptions::default();
                    c.index_cache = Some(Arc::new(IndexCache::new(
                        segstore::config::DEFAULT_INDEX_CACHE_MB << 20,
                    )));
                    c
                })
                .unwrap(),
            )
        })
        .collect();
    // Warm the page cache and check every reader (and the baseline) once.
    assert_eq!(readers[0].1.verify().unwrap(), keys.len() as u64);
    let _ = std::fs::read(dir.path().join("baseline.index")).unwrap();
    let _ = std::fs::read(dir.path().join("baseline.data")).unwrap();
    for (mode, r) in &readers {
        for k in hits.iter().take(10_000) {
            let i = keys.binary_search(k).unwrap();
            let v = r.get_with(k, |rec| rec.value == value_of(i)).unwrap();
            assert_eq!(v, Some(true), "{mode}");
            assert_eq!(baseline.get_with(k, |v| v == value_of(i)), Some(true));
        }
        for k in misses.iter().take(10_000) {
            assert_eq!(r.get_with(k, |_| ()).unwrap(), None, "{mode}");
            assert_eq!(baseline.get_with(k, |_| ()), None);
        }
    }

    // Misses the filter answers alone: no index block, no data read.
    let r = &readers[0].1;
    let rejected = misses.iter().filter(|k| !r.may_contain(&k[..])).count();
    println!(
        "fixture: {} cells, data {} MB, index {} MB, summary+filter {} KB, built in {:.1?}",
        stats.entry_count,
        stats.data_len >> 20,
        stats.index_len >> 20,
        r.memory_bytes() >> 10,
        t0.elapsed()
    );
    println!(
        "filter: {rejected} of {} random misses ({:.2}%) rejected by the filter without \
         touching the index or data file; the rest end in one index block, never in the data",
        misses.len(),
        100.0 * rejected as f64 / misses.len() as f64
    );
    Fixture {
        _dir: dir,
        readers,
        baseline,
        hits,
        misses,
        scan_starts,
    }
}

/// What every lookup does with the value it finds, in the segment and the baseline
/// alike: copy it out (as a caller would) and use a byte of it.
#[inline]
fn read_value(v: &[u8]) -> usize {
    let mut out = [0u8; VALUE];
    out.copy_from_slice(v);
    black_box(&out)[VALUE - 1] as usize + 1
}

/// Batches of consecutive items from `list`, wrapping around.
struct Cursor<'a, T> {
    list: &'a [T],
    at: usize,
}

impl<'a, T> Cursor<'a, T> {
    fn new(list: &'a [T]) -> Self {
        Cursor { list, at: 0 }
    }

    #[inline]
    fn batch(&mut self, n: usize) -> &'a [T] {
        if self.at + n > self.list.len() {
            self.at = 0;
        }
        let b = &self.list[self.at..self.at + n];
        self.at += n;
        b
    }
}

fn lookups(c: &mut Criterion, f: &Fixture, group: &str, keys: &[Key]) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(BATCH as u64));
    for (mode, r) in &f.readers {
        let mut cur = Cursor::new(keys);
        g.bench_function(BenchmarkId::from_parameter(mode), |b| {
            b.iter(|| {
                let mut sum = 0usize;
                for k in cur.batch(BATCH) {
                    sum += r
                        .get_with(k, |rec| read_value(rec.value))
                        .unwrap()
                        .unwrap_or(0);
                }
                black_box(sum)
            })
        });
    }
    let mut cur = Cursor::new(keys);
    g.bench_function(BenchmarkId::from_parameter("baseline"), |b| {
        b.iter(|| {
            let mut sum = 0usize;
            for k in cur.batch(BATCH) {
                sum += f.baseline.get_with(k, read_value).unwrap_or(0);
            }
            black_box(sum)
        })
    });
    g.finish();
}

fn scans(c: &mut Criterion, f: &Fixture) {
    let mut g = c.benchmark_group("scan_100");
    g.throughput(Throughput::Elements(SCANS as u64));
    for (mode, r) in &f.readers {
        let mut cur = Cursor::new(&f.scan_starts);
        g.bench_function(BenchmarkId::from_parameter(mode), |b| {
            b.iter(|| {
                let mut sum = 0usize;
                for k in cur.batch(SCANS) {
                    let mut it = r.scan(&k[..]..).unwrap();
                    for _ in 0..SCAN_LEN {
                        sum += it.next_with(|rec| read_value(rec.value)).unwrap().unwrap();
                    }
                }
                black_box(sum)
            })
        });
    }
    let mut cur = Cursor::new(&f.scan_starts);
    g.bench_function(BenchmarkId::from_parameter("baseline"), |b| {
        b.iter(|| {
            let mut sum = 0usize;
            for k in cur.batch(SCANS) {
                let start = f.baseline.lower_bound(k);
                for i in start..start + SCAN_LEN {
                    sum += read_value(f.baseline.value_at(i));
                }
            }
            black_box(sum)
        })
    });
    g.finish();
}

/// The same lookups as the criterion groups, but with every reader and the baseline
/// taking turns on chunks of the keys, so that load from other processes drifting during
/// the run falls on all rows alike. Chunks are long enough (25,000 lookups) that a row's
/// filter and summary are back in cache after its turn starts. Prints ns per lookup and
/// throughput relative to the baseline (second of two passes).
fn interleaved(f: &Fixture, what: &str, keys: &[Key]) {
    const CHUNK: usize = 25_000;
    let rows = f.readers.len() + 1;
    let mut ns = vec![0u128; rows];
    let mut n = vec![0usize; rows];
    let mut sum = 0usize;
    // Two passes; the first warms caches, mappings and page tables and is not counted.
    let passes = keys.chunks(CHUNK).chain(keys.chunks(CHUNK));
    let warm = keys.len().div_ceil(CHUNK);
    for (i, chunk) in passes.enumerate() {
        let row = i % rows;
        let t = std::time::Instant::now();
        if row < f.readers.len() {
            let r = &f.readers[row].1;
            for k in chunk {
                sum += r
                    .get_with(k, |rec| read_value(rec.value))
                    .unwrap()
                    .unwrap_or(0);
            }
        } else {
            for k in chunk {
                sum += f.baseline.get_with(k, read_value).unwrap_or(0);
            }
        }
        if i >= warm {
            ns[row] += t.elapsed().as_nanos();
            n[row] += chunk.len();
        }
    }
    black_box(sum);
    let per = |row: usize| ns[row] as f64 / n[row] as f64;
    let base = per(rows - 1);
    for (row, (mode, _)) in f.readers.iter().enumerate() {
        println!(
            "interleaved {what:<4} {:<16} {:7.0} ns/get  {:.2}x baseline throughput",
            mode.as_str(),
            per(row),
            base / per(row)
        );
    }
    println!("interleaved {what:<4} {:<16} {base:7.0} ns/get", "baseline");
}

fn point_lookup(c: &mut Criterion) {
    let f = fixture();
    interleaved(&f, "hit", &f.hits);
    interleaved(&f, "miss", &f.misses);
    lookups(c, &f, "get_hit", &f.hits);
    lookups(c, &f, "get_miss", &f.misses);
    scans(c, &f);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = point_lookup
}
criterion_main!(benches);
