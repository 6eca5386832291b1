//! Peer comparison (issues 7 and 12): the same data (16-byte keys, 100-byte values) in
//! segstore's `Table` (the API a user calls: the headline rows), a bare segment read with
//! `SegmentReader` (the reference the Table is measured against; `--segments` adds the
//! other access modes), LMDB (heed), RocksDB, fjall and redb; random hit gets, misses and
//! 100-key scans at 1 and 2 threads, systems interleaved round by round. `--ycsb` runs
//! YCSB's workloads A to F, writes, bulk load, bytes on disk and capped-memory gets
//! instead (module `ycsb`). See README.md.

// The root's clippy.toml keeps file-system changes inside segstore's `StoreFs`; this
// crate makes the other systems' directories, markers and cgroups itself (as the tests
// that damage files do, it allows the lint for the whole crate).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use segstore::segment::{SegmentName, SegmentReader, SegmentWriter};
use segstore::{DiskAccessMode, FileRules, SegmentOptions};

mod others;
mod seg;
mod txn;
mod ycsb;

use others::*;
use seg::*;

const VALUE_LEN: usize = 100;
const SCAN_LEN: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Hit,
    Miss,
    Scan,
}

impl Op {
    const ALL: [Op; 3] = [Op::Hit, Op::Miss, Op::Scan];
    fn name(self) -> &'static str {
        match self {
            Op::Hit => "get hit",
            Op::Miss => "get miss",
            Op::Scan => "scan 100",
        }
    }
}

/// Key `i` of the loaded set is even (`2i`); `2i + 1` is a miss that sorts between two
/// hits, so filters, not range checks, must reject it.
fn key(n: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&n.to_be_bytes());
    k[8..].copy_from_slice(&mix(n).to_be_bytes());
    k
}

fn value(i: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    let mut x = mix(i ^ 0x5555);
    for c in v.chunks_mut(8) {
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
        x = mix(x);
    }
    v
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// One system under test. `run` does every op of `keys` on the calling thread and returns
/// a checksum (bytes seen) so nothing is optimised away. Read transactions / snapshots
/// that a system needs are taken once per call (one batch), which favours them.
trait System: Sync {
    fn name(&self) -> String;
    fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64;
}

// ---------------------------------------------------------------- RocksDB

#[cfg(feature = "rocksdb")]
mod rocks {
    use super::*;

    pub struct Rocks {
        pub label: &'static str,
        pub db: rocksdb::DB,
    }

    fn options(mmap: bool) -> rocksdb::Options {
        let mut bo = rocksdb::BlockBasedOptions::default();
        // Big enough for the whole data set at 1M keys: the comparison is in memory.
        bo.set_block_cache(&rocksdb::Cache::new_lru_cache(1 << 30));
        bo.set_bloom_filter(10.0, false);
        // With mmap reads RocksDB does not put blocks it reads through the map into the
        // block cache, so a cached filter would be re-read and its checksum verified on
        // every get (facebook/rocksdb#9367: 50x slower here). The mmap variant keeps its
        // index and filter in the table reader instead, as its users configure it.
        bo.set_cache_index_and_filter_blocks(!mmap);
        bo.set_pin_l0_filter_and_index_blocks_in_cache(!mmap);
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.set_block_based_table_factory(&bo);
        o.set_compression_type(rocksdb::DBCompressionType::None);
        o.set_allow_mmap_reads(mmap);
        o
    }

    pub fn load(dir: &Path, n: u64) {
        let db = rocksdb::DB::open(&options(false), dir).unwrap();
        let mut wo = rocksdb::WriteOptions::default();
        wo.disable_wal(true);
        for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
            let mut b = rocksdb::WriteBatch::default();
            for &i in chunk {
                b.put(key(2 * i), value(i));
            }
            db.write_opt(b, &wo).unwrap();
        }
        db.flush().unwrap();
        db.compact_range::<&[u8], &[u8]>(None, None);
    }

    pub fn open(dir: &Path, mmap: bool) -> Rocks {
        Rocks {
            label: if mmap {
                "rocksdb mmap reads"
            } else {
                "rocksdb block cache"
            },
            db: rocksdb::DB::open_for_read_only(&options(mmap), dir, false).unwrap(),
        }
    }

    impl System for Rocks {
        fn name(&self) -> String {
            self.label.into()
        }
        fn run(&self, op: Op, keys: &[[u8; 16]]) -> u64 {
            let mut sum = 0u64;
            match op {
                Op::Hit | Op::Miss => {
                    for k in keys {
                        if let Some(v) = self.db.get_pinned(k).unwrap() {
                            sum += v.len() as u64;
                        }
                    }
                }
                Op::Scan => {
                    let mut it = self.db.raw_iterator();
                    for k in keys {
                        it.seek(k);
                        let mut n = 0;
                        while n < SCAN_LEN && it.valid() {
                            sum += it.value().unwrap().len() as u64;
                            it.next();
                            n += 1;
                        }
                    }
                }
            }
            sum
        }
    }
}

// ---------------------------------------------------------------- driver

struct Args {
    keys: u64,
    rounds: usize,
    ops: usize,
    dir: Option<PathBuf>,
    /// Also the bare segment in `standard` and `auto` modes.
    segments: bool,
    /// Also segstore mmap with non-default settings (`seg_mmap_anon`: `huge_pages:
    /// anonymous_index`; `seg_mmap_nocrc`: `crc_check_chance: 0`).
    variants: bool,
    only: Option<String>,
    /// Measure only this op (`--op hit|miss|scan`), e.g. to profile one read path.
    op: Option<Op>,
    rss: bool,
    child: Option<String>,
}

fn parse_args() -> Args {
    let mut a = Args {
        keys: 1_000_000,
        rounds: 10,
        ops: 100_000,
        dir: None,
        segments: false,
        variants: false,
        only: None,
        op: None,
        rss: true,
        child: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(s) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{s} needs a value"));
        match s.as_str() {
            "--keys" => a.keys = val().parse().unwrap(),
            "--ten-million" => a.keys = 10_000_000,
            "--rounds" => a.rounds = val().parse().unwrap(),
            "--ops" => a.ops = val().parse().unwrap(),
            "--dir" => a.dir = Some(PathBuf::from(val())),
            // The Table rows are always there now; kept so old command lines still run.
            "--table" => {}
            "--segments" => a.segments = true,
            "--variants" => a.variants = true,
            "--only" => a.only = Some(val()),
            "--op" => {
                a.op = Some(match val().as_str() {
                    "hit" => Op::Hit,
                    "miss" => Op::Miss,
                    "scan" => Op::Scan,
                    o => panic!("--op takes hit, miss or scan, not {o}"),
                })
            }
            "--no-rss" => a.rss = false,
            "--rss-child" => a.child = Some(val()),
            "-h" | "--help" => {
                println!(
                    "usage: segstore-peers [--keys N | --ten-million] [--rounds R] [--ops OPS] \
                     [--dir DIR] [--segments] [--variants] [--only SUBSTRING] [--op hit|miss|scan] [--no-rss]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// System ids, in print order: the Table first (the headline), then the bare segment.
fn system_ids(a: &Args) -> Vec<&'static str> {
    let mut v = vec!["seg_table", "seg_table_value", "seg_table_view", "seg_mmap"];
    if a.variants {
        v.push("seg_mmap_anon");
        v.push("seg_mmap_nocrc");
    }
    if a.segments {
        v.push("seg_standard");
        v.push("seg_auto");
    }
    v.push("lmdb");
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
        v.push("rocksdb_mmap");
    }
    v.push("fjall");
    v.push("redb");
    v
}

fn sub(root: &Path, id: &str) -> PathBuf {
    match id {
        "seg_mmap" | "seg_mmap_anon" | "seg_mmap_nocrc" | "seg_standard" | "seg_auto" => {
            root.join("segstore")
        }
        "seg_table" | "seg_table_value" | "seg_table_view" => root.join("segstore_table"),
        "rocksdb" | "rocksdb_mmap" => root.join("rocksdb"),
        other => root.join(other),
    }
}

fn open_system(root: &Path, id: &str) -> Box<dyn System> {
    let d = sub(root, id);
    match id {
        "seg_mmap" => Box::new(open_segstore(&d, DiskAccessMode::Mmap, Variant::Default)),
        "seg_mmap_anon" => Box::new(open_segstore(&d, DiskAccessMode::Mmap, Variant::AnonIndex)),
        "seg_mmap_nocrc" => Box::new(open_segstore(&d, DiskAccessMode::Mmap, Variant::NoCrc)),
        "seg_standard" => Box::new(open_segstore(
            &d,
            DiskAccessMode::Standard,
            Variant::Default,
        )),
        "seg_auto" => Box::new(open_segstore(&d, DiskAccessMode::Auto, Variant::Default)),
        "seg_table" => Box::new(open_table(&d, TableRead::GetWith)),
        "seg_table_value" => Box::new(open_table(&d, TableRead::Value)),
        "seg_table_view" => Box::new(open_table(&d, TableRead::View)),
        "lmdb" => Box::new(open_lmdb(&d, false)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Box::new(rocks::open(&d, false)),
        #[cfg(feature = "rocksdb")]
        "rocksdb_mmap" => Box::new(rocks::open(&d, true)),
        "fjall" => Box::new(open_fjall(&d)),
        "redb" => Box::new(open_redb(&d)),
        other => panic!("unknown system {other}"),
    }
}

fn load_all(root: &Path, n: u64) {
    let timed = |what: &str, f: &dyn Fn()| {
        let t = Instant::now();
        f();
        eprintln!("loaded {what:<16} in {:>6.1} s", t.elapsed().as_secs_f64());
    };
    timed("segstore segment", &|| {
        load_segstore(&root.join("segstore"), n)
    });
    timed("segstore table", &|| {
        load_table(&root.join("segstore_table"), n)
    });
    timed("lmdb", &|| load_lmdb(&root.join("lmdb"), n));
    #[cfg(feature = "rocksdb")]
    timed("rocksdb", &|| rocks::load(&root.join("rocksdb"), n));
    timed("fjall", &|| load_fjall(&root.join("fjall"), n));
    timed("redb", &|| load_redb(&root.join("redb"), n));
}

/// Read every file under `dir` once (into the page cache); returns the bytes read.
fn read_all(dir: &Path) -> u64 {
    use std::io::Read;
    let mut n = 0;
    let mut buf = vec![0u8; 1 << 20];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            n += read_all(&p);
        } else if let Ok(mut f) = std::fs::File::open(&p) {
            while let Ok(k) = f.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
        }
    }
    n
}

/// (apparent bytes, allocated bytes) of the files under `dir`.
fn disk_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut t = (0, 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            let s = disk_usage(&e.path());
            t.0 += s.0;
            t.1 += s.1;
        } else {
            t.0 += m.len();
            t.1 += m.blocks() * 512;
        }
    }
    t
}

fn proc_status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn rng_keys(seed: u64, count: usize, n: u64, miss: bool) -> Vec<[u8; 16]> {
    let mut x = seed;
    (0..count)
        .map(|_| {
            x = mix(x);
            let i = x % n;
            key(2 * i + miss as u64)
        })
        .collect()
}

/// Ops per second (all threads together) for one batch: each thread does `keys[t]`.
fn batch(sys: &dyn System, op: Op, keys: &[Vec<[u8; 16]>]) -> f64 {
    let t = Instant::now();
    let sums: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = keys
            .iter()
            .map(|k| s.spawn(move || sys.run(op, k)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let total: usize = keys.iter().map(Vec::len).sum();
    for (sum, k) in sums.iter().zip(keys) {
        let per = match op {
            Op::Hit => VALUE_LEN as u64,
            Op::Miss => 0,
            Op::Scan => (SCAN_LEN * VALUE_LEN) as u64,
        };
        // Scans near the end are short; hits and misses are exact.
        if op != Op::Scan {
            assert_eq!(*sum, per * k.len() as u64, "{} {:?} wrong", sys.name(), op);
        } else {
            assert!(*sum > 0, "{} scan saw nothing", sys.name());
        }
    }
    total as f64 / secs
}

/// `0..n` in an order drawn from `seed` (Fisher-Yates over xorshift64).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN; // an op not measured (`--op`)
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Child process: open one system, run one batch of each op on one thread, print the
/// peak RSS (VmHWM) and current RSS in KiB.
fn rss_child(root: &Path, id: &str, a: &Args) {
    let base = proc_status_kib("VmHWM:");
    let sys = open_system(root, id);
    for op in Op::ALL {
        let count = if op == Op::Scan { a.ops / 10 } else { a.ops };
        let keys = vec![rng_keys(7, count, a.keys, op == Op::Miss)];
        batch(sys.as_ref(), op, &keys);
    }
    println!(
        "{} {} {}",
        base,
        proc_status_kib("VmHWM:"),
        proc_status_kib("VmRSS:")
    );
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--txn") {
        txn::main(std::env::args().skip(2));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("--ycsb") {
        ycsb::main(std::env::args().skip(2));
        return;
    }
    let a = parse_args();
    let tmp;
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("segstore-peers")
                .tempdir_in(std::env::var_os("PEERS_TMP").unwrap_or_else(|| "/var/tmp".into()))
                .unwrap();
            tmp.path().to_path_buf()
        }
    };
    if let Some(id) = &a.child {
        rss_child(&root, id, &a);
        return;
    }
    let ids: Vec<&str> = system_ids(&a)
        .into_iter()
        .filter(|id| a.only.as_ref().is_none_or(|o| id.contains(o.as_str())))
        .collect();
    println!(
        "keys {} (16-byte keys, {}-byte values), {} rounds, {} ops per batch for gets, {} for scans, data in {}",
        a.keys,
        VALUE_LEN,
        a.rounds,
        a.ops,
        a.ops / 10,
        root.display()
    );
    if !root.join("segstore").exists() {
        load_all(&root, a.keys);
    } else {
        eprintln!("reusing data in {}", root.display());
    }

    // Footprint: on disk, and peak RSS of a child that opens one system and runs one
    // batch of each op (the child's own baseline reported separately).
    let mut foot = Vec::new();
    for id in &ids {
        let d = sub(&root, id);
        let (apparent, allocated) = disk_usage(&d);
        let rss = if a.rss {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--rss-child", id, "--dir"])
                .arg(&root)
                .args(["--keys", &a.keys.to_string(), "--ops", &a.ops.to_string()])
                .output()
                .unwrap();
            let s = String::from_utf8_lossy(&out.stdout);
            let v: Vec<u64> = s
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() == 3 {
                Some((v[0], v[1], v[2]))
            } else {
                eprintln!(
                    "rss child {id} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                None
            }
        } else {
            None
        };
        foot.push((id, apparent, allocated, rss));
    }

    // Read every file of every system once: this machine's page cache did not keep the
    // 10M data sets between runs (fincore showed 0.2 of 1.2 GB of a data file resident,
    // and pages leaving at about 1 MB/s with most of the RAM free), so without this the
    // first batches of each system read from the disk, and the 10M rows varied by 2x.
    let t = Instant::now();
    let mut warmed = 0u64;
    for dir in ids.iter().map(|id| sub(&root, id)).collect::<BTreeSet<_>>() {
        warmed += read_all(&dir);
    }
    eprintln!(
        "read {:.1} GiB of data files into the page cache in {:.1} s",
        warmed as f64 / (1u64 << 30) as f64,
        t.elapsed().as_secs_f64()
    );
    let systems: Vec<Box<dyn System>> = ids.iter().map(|id| open_system(&root, id)).collect();
    let names: Vec<String> = systems.iter().map(|s| s.name()).collect();
    // results[system][op][threads-1] = per-round ops/s
    let mut results = vec![vec![vec![Vec::new(); 2]; 3]; systems.len()];
    let measured = |op: Op| a.op.is_none_or(|o| o == op);
    // Warm every system (page cache, block caches, first-use checksums).
    for s in &systems {
        for op in Op::ALL.into_iter().filter(|&op| measured(op)) {
            batch(
                s.as_ref(),
                op,
                &[rng_keys(1, a.ops, a.keys, op == Op::Miss)],
            );
        }
    }
    let started = Instant::now();
    for round in 0..a.rounds {
        for (oi, op) in Op::ALL.into_iter().enumerate() {
            if !measured(op) {
                continue;
            }
            for threads in 1..=2usize {
                let count = if op == Op::Scan { a.ops / 10 } else { a.ops };
                let keys: Vec<Vec<[u8; 16]>> = (0..threads)
                    .map(|t| {
                        rng_keys(
                            (round * 16 + oi * 4 + t) as u64 + 100,
                            count,
                            a.keys,
                            op == Op::Miss,
                        )
                    })
                    .collect();
                // Untimed, before each timed batch: a tenth as many other keys of the
                // same op, so a system's batch does not pay for refilling the CPU
                // caches the previous system's batch evicted (when the systems ran in
                // a fixed cycle, the Table rows always followed redb's, and their
                // misses measured 0.7x of a run without the other systems).
                let warm: Vec<Vec<[u8; 16]>> = (0..threads)
                    .map(|t| {
                        rng_keys(
                            (round * 16 + oi * 4 + t) as u64 + 50_000,
                            (count / 10).max(1),
                            a.keys,
                            op == Op::Miss,
                        )
                    })
                    .collect();
                // A fresh order of the systems for every batch (seeded, so runs repeat):
                // none always runs first, or always after the same other system.
                for si in shuffled(systems.len(), (round * 16 + oi * 4 + threads) as u64) {
                    batch(systems[si].as_ref(), op, &warm);
                    let r = batch(systems[si].as_ref(), op, &keys);
                    results[si][oi][threads - 1].push(r);
                }
            }
        }
        eprintln!(
            "round {}/{} done at {:.0} s",
            round + 1,
            a.rounds,
            started.elapsed().as_secs_f64()
        );
    }

    let mut med = vec![[[0.0f64; 2]; 3]; systems.len()];
    for (si, per_op) in results.iter_mut().enumerate() {
        for (oi, per_t) in per_op.iter_mut().enumerate() {
            for (ti, v) in per_t.iter_mut().enumerate() {
                med[si][oi][ti] = median(v);
            }
        }
    }
    let base = ids.iter().position(|id| *id == "seg_table");

    println!();
    println!(
        "Median throughput over {} rounds, all threads together (gets: M ops/s; scans: k 100-key scans/s)",
        a.rounds
    );
    print!("{:<22}", "system");
    for op in Op::ALL {
        for t in 1..=2 {
            print!(" {:>13}", format!("{} {}t", op.name(), t));
        }
    }
    println!();
    for (si, n) in names.iter().enumerate() {
        print!("{n:<22}");
        for (oi, per_t) in med[si].iter().enumerate() {
            for &v in per_t {
                if oi == 2 {
                    print!(" {:>10.1} k/s", v / 1e3);
                } else {
                    print!(" {:>8.3} M/s", v / 1e6);
                }
            }
        }
        println!();
    }
    if let Some(b) = base {
        println!();
        println!("segstore Table throughput / system throughput (> 1: the Table is faster)");
        print!("{:<22}", "system");
        for op in Op::ALL {
            for t in 1..=2 {
                print!(" {:>13}", format!("{} {}t", op.name(), t));
            }
        }
        println!();
        for (si, n) in names.iter().enumerate() {
            print!("{n:<22}");
            for (base_op, op) in med[b].iter().zip(&med[si]) {
                for (base_v, v) in base_op.iter().zip(op) {
                    print!(" {:>12.2}x", base_v / v);
                }
            }
            println!();
        }
    }

    println!();
    println!("Footprint (RSS from a child process per system: VmHWM before open -> after one batch of each op, 1 thread; file-backed pages of mappings count)");
    println!(
        "{:<22} {:>14} {:>14} {:>12} {:>12} {:>12}",
        "system", "disk apparent", "disk alloc", "HWM base", "HWM peak", "RSS end"
    );
    for (i, (id, ap, al, rss)) in foot.iter().enumerate() {
        let name = names.get(i).cloned().unwrap_or_else(|| id.to_string());
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
        let (b, p, e) = match rss {
            Some((b, p, e)) => (mib(b * 1024), mib(p * 1024), mib(e * 1024)),
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "{name:<22} {:>14} {:>14} {b:>12} {p:>12} {e:>12}",
            mib(*ap),
            mib(*al)
        );
    }
}
