//! Bulk load (issue 20 item 5), side by side in one run: 1M keys (100-byte values)
//! loaded into a fresh table two ways, alternating, `INGEST_ROUNDS` rounds (default 5):
//!
//! - `puts`: 1M `Table::put` (default `periodic` commit log), then `Table::flush`, so
//!   the keys end in a segment as the ingest's do (the time to the puts' end is printed
//!   too);
//! - `ingest`: 1M cells written with `SegmentWriter` outside the store (timestamp
//!   from `Store::now`), then `Table::ingest` (hard link, verify, journal, manifest).
//!
//! Prints the median of each and their ratio. `cargo bench --bench ingest`
//! (`INGEST_KEYS` changes the key count).

#![allow(clippy::disallowed_methods)] // the caller's load directory, outside any store

use std::path::Path;
use std::time::{Duration, Instant};

use segstore::segment::{Component, SegmentName, SegmentWriter};
use segstore::{Config, FileRules, SegmentOptions, Store};

const VALUE: [u8; 100] = [0x5a; 100];

fn key(i: u64) -> Vec<u8> {
    format!("key{i:012}").into_bytes()
}

fn open(dir: &Path) -> Store {
    let mut config = Config::default();
    config.track_leaks = false;
    config.table.background_compaction = false;
    Store::open(dir, config).unwrap()
}

/// (puts done, flushed).
fn puts(dir: &Path, n: u64) -> (Duration, Duration) {
    let store = open(dir);
    let t = store.table("t").unwrap();
    let start = Instant::now();
    for i in 0..n {
        t.put(key(i), VALUE).unwrap();
    }
    let put = start.elapsed();
    t.flush().unwrap();
    let flushed = start.elapsed();
    assert!(t.get(key(n / 2)).unwrap().is_some());
    drop(t);
    store.close().unwrap();
    (put, flushed)
}

/// (segment written, ingested).
fn ingest(dir: &Path, load: &Path, n: u64) -> (Duration, Duration) {
    let store = open(dir);
    let t = store.table("t").unwrap();
    std::fs::create_dir_all(load).unwrap();
    let start = Instant::now();
    let ts = store.now().unwrap();
    let name = SegmentName::new("load", 1).unwrap();
    let opts = SegmentOptions::default();
    let mut w = SegmentWriter::create(load, name.clone(), &opts, &FileRules::posix()).unwrap();
    for i in 0..n {
        w.add(&key(i), &VALUE, ts, false).unwrap();
    }
    w.finish().unwrap();
    let written = start.elapsed();
    t.ingest(&[name.path(load, Component::Data)]).unwrap();
    let ingested = start.elapsed();
    assert!(t.get(key(n / 2)).unwrap().is_some());
    drop(t);
    store.close().unwrap();
    (written, ingested)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let n = env("INGEST_KEYS", 1_000_000);
    let rounds = env("INGEST_ROUNDS", 5);
    let (mut put, mut put_flush, mut write, mut total) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        let tmp = tempfile::tempdir().unwrap();
        let (p, f) = puts(&tmp.path().join("puts"), n);
        let (w, i) = ingest(&tmp.path().join("ingest"), &tmp.path().join("load"), n);
        eprintln!(
            "round {r}: puts {} (+flush {}), SegmentWriter {} (+ingest {})",
            ms(p),
            ms(f),
            ms(w),
            ms(i)
        );
        put.push(p);
        put_flush.push(f);
        write.push(w);
        total.push(i);
    }
    let (p, f, w, i) = (median(put), median(put_flush), median(write), median(total));
    println!("{n} keys, median of {rounds} rounds:");
    println!("  puts                 {:>9}", ms(p));
    println!("  puts + flush         {:>9}", ms(f));
    println!("  SegmentWriter        {:>9}", ms(w));
    println!(
        "  SegmentWriter+ingest {:>9}  (ingest alone {})",
        ms(i),
        ms(i - w)
    );
    println!(
        "  puts+flush / SegmentWriter+ingest = {:.1}x",
        f.as_secs_f64() / i.as_secs_f64()
    );
}
