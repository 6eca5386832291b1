//! Random point lookups (`get_with`) under each memory residency option.
//!
//! `cargo bench --bench residency` (`SEGSTORE_BENCH_KEYS` overrides the key count).
//!
//! Dataset: 3,000,000 keys (`key0000000000`.., 16-byte values): an index of about
//! 66 MiB (about 16,900 base pages, far past the 6-8 MiB that a 1.5-2k-entry STLB reaches
//! with 4 KiB pages, and 34 huge pages) and about 116 MiB of data. Writing it takes a few
//! seconds. Every variant opens the same segment, touches every page once (`verify`), and
//! measures single random lookups of present keys. Before measuring, each variant prints
//! what the kernel granted (huge pages, locked bytes) from its own smaps figures.
//!
//! Variants, in this order (order matters: page-cache folios outlive a reader, and once
//! the index sits in the page cache as 2 MiB folios the kernel PMD-maps it even in maps
//! that were not advised, so `advise_cold` runs last):
//! - `off`: the index file map, 4 KiB pages.
//! - `lock_index`: the same, `mlock`ed.
//! - `anonymous_index`: a 2 MiB-aligned anonymous copy advised with `MADV_HUGEPAGE`.
//! - `advise_cold`: the file map advised with `MADV_HUGEPAGE` after dropping the index
//!   from the page cache, so faults can read it back in 2 MiB folios (where the kernel
//!   and file system support that).
//!
//! Each variant runs under `auto` (data by positional reads, the default) and `mmap` (data
//! mapped too, so the index's share of the lookup cost is larger): benchmark ids are
//! `get_with_random/<variant>/<disk_access_mode>`.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use segstore::io::residency;
use segstore::io::FileRules;
use segstore::segment::{Component, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, HugePages, LockMemory, SegmentOptions};

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
    let t = std::time::Instant::now();
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
    drop_cache: bool,
}

const VARIANTS: [Variant; 4] = [
    Variant {
        name: "off",
        lock: LockMemory::None,
        huge: HugePages::Off,
        drop_cache: false,
    },
    Variant {
        name: "lock_index",
        lock: LockMemory::Index,
        huge: HugePages::Off,
        drop_cache: false,
    },
    Variant {
        name: "anonymous_index",
        lock: LockMemory::None,
        huge: HugePages::AnonymousIndex,
        drop_cache: false,
    },
    Variant {
        name: "advise_cold",
        lock: LockMemory::None,
        huge: HugePages::Advise,
        drop_cache: true,
    },
];

fn bench(c: &mut Criterion) {
    let keys: u64 = std::env::var("SEGSTORE_BENCH_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000_000);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let name = build(dir, keys);
    let index_path = name.path(dir, Component::Index);
    for v in &VARIANTS {
        let mut g = c.benchmark_group(format!("get_with_random/{}", v.name));
        g.throughput(Throughput::Elements(1))
            .sample_size(30)
            .warm_up_time(Duration::from_secs(2))
            .measurement_time(Duration::from_secs(4));
        if v.drop_cache {
            let f = std::fs::File::open(&index_path).unwrap();
            residency::drop_page_cache(&f, &index_path);
        }
        for mode in [DiskAccessMode::Auto, DiskAccessMode::Mmap] {
            let opts = ReaderOptions {
                lock_memory: v.lock,
                huge_pages: v.huge,
                map_budget: None,
            };
            let r = SegmentReader::open_with(dir, &name, mode.resolve(), &opts).unwrap();
            r.verify().unwrap(); // every page touched once: no first-fault cost measured
            let mem = r.memory_report();
            for m in &mem.mappings {
                let k = m.kernel.unwrap_or_default();
                eprintln!(
                    "{}/{mode}: {} ({:?}) {} MiB mapped: kernel granted huge pages {} MiB \
                     (AnonHugePages {} MiB, FilePmdMapped {} MiB), Locked {} MiB",
                    v.name,
                    m.path.file_name().unwrap().to_string_lossy(),
                    m.kind,
                    m.bytes >> 20,
                    m.huge.unwrap_or(0) >> 20,
                    k.anon_huge_pages >> 20,
                    k.file_pmd_mapped >> 20,
                    m.locked.unwrap_or(0) >> 20
                );
            }
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut k = [0u8; 13];
            g.bench_function(mode.as_str(), |b| {
                b.iter(|| {
                    // xorshift64*: a uniformly random present key per lookup.
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    key_bytes(x.wrapping_mul(0x2545_F491_4F6C_DD1D) % keys, &mut k);
                    black_box(r.get_with(black_box(&k), |c| c.value.len()).unwrap())
                })
            });
            drop(r);
        }
        g.finish();
    }
    residency::unlock_all().ok();
}

criterion_group!(benches, bench);
criterion_main!(benches);
