//! Random point lookups (`get_with`) under each memory residency option.
//!
//! `cargo bench --bench residency` (`SEGSTORE_BENCH_KEYS` overrides the key count,
//! `SEGSTORE_BENCH_ROUNDS` the rounds of the interleaved comparison).
//!
//! Dataset: 3,000,000 keys (`key0000000000`.., 16-byte values): an index of about
//! 66 MiB (about 16,900 base pages, far past the 6-8 MiB that a 1.5-2k-entry STLB reaches
//! with 4 KiB pages, and 33 huge pages) and about 125 MiB of data. Writing it takes
//! about a second. Every variant touches every page once (`verify`) before it is measured,
//! and prints what the kernel granted (huge pages, locked bytes) from smaps.
//!
//! Variants:
//! - `off`: the index file map, 4 KiB pages.
//! - `lock_index`: the same, `mlock`ed.
//! - `anonymous_index`: a 2 MiB-aligned anonymous copy advised with `MADV_HUGEPAGE`.
//! - `advise_cold`: the file map advised with `MADV_HUGEPAGE`, on a copy of the segment
//!   whose index was dropped from the page cache first, so faults read it back in 2 MiB
//!   folios where the kernel and file system support that. (A separate copy because once
//!   a file sits in the page cache as 2 MiB folios the kernel PMD-maps it even in maps
//!   that were not advised, which would turn `off` into a huge page run.)
//!
//! Each variant runs under `auto` (data by positional reads, the default) and `mmap` (data
//! mapped too, so the index's share of the lookup cost is larger); criterion ids are
//! `get_with_random/<variant>/<disk_access_mode>`.
//!
//! The machine this runs on is shared, so before criterion's sequential groups the bench
//! also prints an interleaved comparison: rounds that time 100,000 lookups on each
//! variant in turn (rotating the order), then the median per variant and its ratio to
//! `off`, both in wall-clock time and in the thread's on-CPU time from
//! `/proc/thread-self/schedstat` (which leaves out time spent descheduled). Slow changes
//! in background load hit every variant alike there.
#![allow(clippy::disallowed_methods)] // writes its own data set, outside the store's I/O boundary

//!
//! Measured on the development machine (2 vCPU Xeon @ 2.8 GHz VM, Linux 6.18, ext4, THP
//! `madvise`, shared with other builds: load average 5-6 during the runs, so wall-clock
//! figures are inflated about 2x and criterion's sequential medians move by tens of
//! percent between runs). The kernel granted: `anonymous_index` 66 of 66 MiB as
//! `AnonHugePages`; `advise_cold` 64 of 65 MiB as `FilePmdMapped`; `off` and `lock_index`
//! no huge page; `lock_index` 65 MiB locked.
//!
//! | variant | on-CPU ratio to `off`, auto / mmap (two interleaved runs) | criterion median, auto / mmap |
//! | --- | --- | --- |
//! | `off` | 1 / 1 (2.55-2.77 / 2.04-2.17 µs) | 5.47 / 4.19 µs |
//! | `lock_index` | 0.997-0.997 / 0.993-1.001 | 5.15 / 4.11 µs |
//! | `anonymous_index` | 1.039-1.050 / 1.053-1.082 | 5.23 / 3.93 µs |
//! | `advise_cold` | 1.055-1.081 / 1.057-1.066 | 5.09 / 3.88 µs |
//!
//! Huge pages for the index save about 5-8% of a lookup; locking a warm index changes
//! nothing measurable (it only matters under memory pressure, which this bench does not
//! create).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use segstore::io::residency;
use segstore::segment::{Component, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, FileRules, HugePages, LockMemory, SegmentOptions};

fn key_bytes(i: u64, buf: &mut [u8; 13]) {
    buf[..3].copy_from_slice(b"key");
    let mut n = i;
    for d in buf[3..].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

fn build(dir: &Path, keys: u64) -> SegmentName {
    let name = SegmentName::new("bench", 1).unwrap();
    let t = Instant::now();
    let mut w = SegmentWriter::create(
        dir,
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )
    .unwrap();
    let mut k = [0u8; 13];
    for i in 0..keys {
        key_bytes(i, &mut k);
        w.add(&k, format!("value-{i:010}").as_bytes(), i, false)
            .unwrap();
    }
    let s = w.finish().unwrap();
    let ilen = std::fs::metadata(name.path(dir, Component::Index))
        .unwrap()
        .len();
    eprintln!(
        "dataset: {keys} keys, data {} MiB, index {} MiB, written in {:.1?}",
        s.data_len >> 20,
        ilen >> 20,
        t.elapsed()
    );
    name
}

struct Variant {
    name: &'static str,
    lock: LockMemory,
    huge: HugePages,
    /// Use the copy of the segment whose index left the page cache.
    cold_copy: bool,
}

const VARIANTS: [Variant; 4] = [
    Variant {
        name: "off",
        lock: LockMemory::None,
        huge: HugePages::Off,
        cold_copy: false,
    },
    Variant {
        name: "lock_index",
        lock: LockMemory::Index,
        huge: HugePages::Off,
        cold_copy: false,
    },
    Variant {
        name: "anonymous_index",
        lock: LockMemory::None,
        huge: HugePages::AnonymousIndex,
        cold_copy: false,
    },
    Variant {
        name: "advise_cold",
        lock: LockMemory::None,
        huge: HugePages::Advise,
        cold_copy: true,
    },
];

/// A uniformly random present key per call (xorshift64*).
struct Keys {
    x: u64,
    n: u64,
    buf: [u8; 13],
}

impl Keys {
    fn new(n: u64) -> Self {
        Keys {
            x: 0x9E37_79B9_7F4A_7C15,
            n,
            buf: [0; 13],
        }
    }

    #[inline]
    fn next(&mut self) -> &[u8] {
        self.x ^= self.x >> 12;
        self.x ^= self.x << 25;
        self.x ^= self.x >> 27;
        key_bytes(
            self.x.wrapping_mul(0x2545_F491_4F6C_DD1D) % self.n,
            &mut self.buf,
        );
        &self.buf
    }
}

fn lookup(r: &SegmentReader, keys: &mut Keys) -> usize {
    r.get_with(black_box(keys.next()), |c| c.value.len())
        .unwrap()
        .unwrap()
}

fn open(
    dir: &Path,
    name: &SegmentName,
    v: &Variant,
    mode: DiskAccessMode,
) -> (String, SegmentReader) {
    let mut opts = ReaderOptions::default();
    opts.lock_memory = v.lock;
    opts.huge_pages = v.huge;
    opts.map_budget = None;
    let r = SegmentReader::open_with(dir, name, mode.resolve(), &opts).unwrap();
    r.verify().unwrap(); // every page touched once: no first-fault cost measured
    let id = format!("{}/{mode}", v.name);
    for m in &r.memory_report().mappings {
        let k = m.kernel.unwrap_or_default();
        eprintln!(
            "{id}: {} ({:?}) {} MiB mapped: kernel granted huge pages {} MiB \
             (AnonHugePages {} MiB, FilePmdMapped {} MiB), locked {} MiB (smaps Locked {} MiB)",
            m.path.file_name().unwrap().to_string_lossy(),
            m.kind,
            m.bytes >> 20,
            m.huge.unwrap_or(0) >> 20,
            k.anon_huge_pages >> 20,
            k.file_pmd_mapped >> 20,
            m.locked.unwrap_or(0) >> 20,
            k.locked >> 20
        );
    }
    (id, r)
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`, Linux), so
/// time spent descheduled while other processes run does not count.
fn on_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn interleaved(readers: &[(String, SegmentReader)], keys: u64, rounds: usize) {
    const N: usize = 100_000;
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
    for round in 0..rounds {
        for j in 0..readers.len() {
            let i = (j + round) % readers.len();
            let mut k = Keys::new(keys);
            let (t, c) = (Instant::now(), on_cpu_ns());
            let mut sum = 0;
            for _ in 0..N {
                sum += lookup(&readers[i].1, &mut k);
            }
            black_box(sum);
            wall[i].push(t.elapsed().as_nanos() as f64 / N as f64);
            if let (Some(a), Some(b)) = (c, on_cpu_ns()) {
                cpu[i].push((b - a) as f64 / N as f64);
            }
        }
    }
    let wall: Vec<f64> = wall.iter_mut().map(|v| median(v)).collect();
    let cpu: Vec<Option<f64>> = cpu
        .iter_mut()
        .map(|v| (!v.is_empty()).then(|| median(v)))
        .collect();
    eprintln!(
        "\ninterleaved: {rounds} rounds x {N} random lookups per variant (order rotated each \
         round); median ns/lookup, on-CPU (schedstat) and wall-clock; ratio = off / variant"
    );
    for (i, (id, _)) in readers.iter().enumerate() {
        let base = id.split('/').nth(1).unwrap();
        let off = readers
            .iter()
            .position(|(b, _)| *b == format!("off/{base}"))
            .unwrap();
        let cpu_s = match (cpu[i], cpu[off]) {
            (Some(c), Some(o)) => format!("{c:>8.1} ns on-CPU (ratio {:.3})", o / c),
            _ => "on-CPU n/a".to_string(),
        };
        eprintln!(
            "  {id:<22} {cpu_s}   {:>8.1} ns wall (ratio {:.3})",
            wall[i],
            wall[off] / wall[i]
        );
    }
    eprintln!();
}

fn bench(c: &mut Criterion) {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let keys = env("SEGSTORE_BENCH_KEYS").unwrap_or(3_000_000);
    let rounds = env("SEGSTORE_BENCH_ROUNDS").unwrap_or(11) as usize;
    let tmp = tempfile::tempdir().unwrap();
    let hot = tmp.path().join("hot");
    let cold = tmp.path().join("cold");
    std::fs::create_dir_all(&hot).unwrap();
    std::fs::create_dir_all(&cold).unwrap();
    let name = build(&hot, keys);
    for c in Component::ALL {
        std::fs::copy(name.path(&hot, c), name.path(&cold, c)).unwrap();
    }
    let cold_index = name.path(&cold, Component::Index);
    let f = std::fs::File::open(&cold_index).unwrap();
    f.sync_all().unwrap(); // DONTNEED drops only clean pages
    assert!(residency::drop_page_cache(&f, &cold_index).applied);

    let mut readers = Vec::new();
    for v in &VARIANTS {
        for mode in [DiskAccessMode::Auto, DiskAccessMode::Mmap] {
            let d = if v.cold_copy { &cold } else { &hot };
            readers.push(open(d, &name, v, mode));
        }
    }
    interleaved(&readers, keys, rounds);

    for v in &VARIANTS {
        let mut g = c.benchmark_group(format!("get_with_random/{}", v.name));
        g.throughput(Throughput::Elements(1))
            .sample_size(30)
            .warm_up_time(Duration::from_secs(2))
            .measurement_time(Duration::from_secs(4));
        for (id, r) in readers
            .iter()
            .filter(|(id, _)| id.split('/').next() == Some(v.name))
        {
            let mode = id.split('/').nth(1).unwrap();
            let mut k = Keys::new(keys);
            g.bench_function(mode, |b| b.iter(|| lookup(r, &mut k)));
        }
        g.finish();
    }
    drop(readers);
}

criterion_group!(benches, bench);
criterion_main!(benches);
