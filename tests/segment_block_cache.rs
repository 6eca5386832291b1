//! The data block cache (`segment::block_cache`): point reads of data read with
//! positional reads go through cached 4 KiB chunks, and must return exactly what the
//! file holds whatever the cache holds or evicts.
//!
//! 1. Many segments share a cache of a few chunks, read by several threads at once:
//!    every value comes back right, including records larger than two chunks (read
//!    past the cache) and records that span two chunks (assembled); the figures count it
//!    all and the budget holds.
//! 2. A table in `standard` mode with a 1 MiB cache: readers run while a major
//!    compaction replaces (and deletes) every segment they read, and the store closes
//!    clean under the Windows file rules.
//! 3. A reader dropped and a different file opened under the same name with the same
//!    cache never sees the first file's chunks (keyed by a unique reader id).
//! 4. Corruption is still detected through the cache (invariant 6), on every read of
//!    the damaged record, not only the one that filled the cache; scans and `verify`
//!    neither read nor fill the cache.
#![allow(clippy::disallowed_methods)] // damages a file on purpose, outside the store's I/O boundary

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use common::{Cell, Model, Rng};
use segstore::segment::{
    BlockCache, Component, ReaderOptions, SegmentName, SegmentReader, BLOCK_CACHE_CHUNK,
};
use segstore::{DiskAccessMode, Error, FileRules, Store};

/// Value length of key `i` of segment `s`: mostly small, every 7th larger than two
/// chunks (read past the cache), so small records land across chunk boundaries too.
fn value_of(s: u64, i: u64) -> Vec<u8> {
    let len = if i % 7 == 3 {
        2 * BLOCK_CACHE_CHUNK + 100 + (i as usize % 500)
    } else {
        (i as usize * 37) % 900
    };
    (0..len)
        .map(|j| (j as u64 ^ i.wrapping_mul(31) ^ s.wrapping_mul(131)) as u8)
        .collect()
}

fn key_of(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn model(s: u64, n: u64) -> Model {
    (0..n)
        .map(|i| (key_of(i), Cell::live(&value_of(s, i), i + 1)))
        .collect()
}

fn cached_opts(cache: &Arc<BlockCache>) -> ReaderOptions {
    let mut o = ReaderOptions::default();
    o.block_cache = Some(Arc::clone(cache));
    o
}

fn open(dir: &Path, name: &SegmentName, mode: DiskAccessMode, o: &ReaderOptions) -> SegmentReader {
    SegmentReader::open_with(dir, name, mode.resolve(), o).unwrap()
}

#[test]
fn a_tiny_cache_shared_by_many_segments_and_threads_returns_every_value() {
    const SEGMENTS: u64 = 6;
    const KEYS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    // Three chunks' worth: nearly every read evicts something.
    let cache = Arc::new(BlockCache::new(3 * 4160).unwrap());
    let opts = cached_opts(&cache);
    let readers: Vec<SegmentReader> = (0..SEGMENTS)
        .map(|s| {
            let name = SegmentName::new("t", s + 1).unwrap();
            common::write_segment(dir.path(), &name, &common::tiny_opts(), &model(s, KEYS));
            open(dir.path(), &name, DiskAccessMode::Standard, &opts)
        })
        .collect();
    let readers = Arc::new(readers);
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (readers, start) = (Arc::clone(&readers), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + t);
                start.wait();
                for _ in 0..3_000 {
                    let s = rng.next() % SEGMENTS;
                    let i = rng.next() % (KEYS + 20);
                    let got = readers[s as usize]
                        .get_with(&key_of(i), |r| r.value.to_vec())
                        .unwrap();
                    let want = (i < KEYS).then(|| value_of(s, i));
                    assert_eq!(got, want, "segment {s} key {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = cache.stats();
    assert!(s.hits > 0 && s.misses > 0, "{s:?}");
    assert!(s.bypassed > 0, "records larger than two chunks: {s:?}");
    assert!(s.used_bytes <= s.limit_bytes && s.blocks <= 3, "{s:?}");
}

#[test]
fn reads_run_while_compaction_replaces_and_deletes_every_segment() {
    const ROUNDS: u64 = 5;
    const KEYS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::test_config(DiskAccessMode::Standard, FileRules::windows_emulation());
    c.memory.block_cache_mb = 1;
    c.table.background_compaction = false;
    let store = Store::open(dir.path(), c).unwrap();
    let table = store.table("t").unwrap();
    // Each round rewrites every key (round r's values), one segment per round.
    let mut last = BTreeMap::new();
    for r in 0..ROUNDS {
        for i in 0..KEYS {
            let v = value_of(r, i);
            table.put(key_of(i), &v).unwrap();
            last.insert(key_of(i), v);
        }
        table.flush().unwrap();
    }
    assert_eq!(table.segments().view().segments.len(), ROUNDS as usize);
    let last = Arc::new(last);
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(4));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (table, last) = (Arc::clone(&table), Arc::clone(&last));
            let (done, start) = (Arc::clone(&done), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                let mut passes = 0;
                // At least one whole pass after the compaction finished.
                loop {
                    let finished = done.load(Ordering::Acquire);
                    for (k, v) in last.iter() {
                        let got = table.get(k).unwrap();
                        assert_eq!(got.as_deref(), Some(&v[..]), "{k:?}");
                    }
                    passes += 1;
                    if finished {
                        return passes;
                    }
                }
            })
        })
        .collect();
    start.wait();
    table.compact().unwrap();
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() >= 1);
    }
    assert_eq!(table.segments().view().segments.len(), 1);
    let s = store.stats().block_cache.unwrap();
    assert!(s.hits > 0 && s.misses > 0 && s.bypassed > 0, "{s:?}");
    assert!(s.used_bytes <= s.limit_bytes, "{s:?}");
    drop(table);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn a_new_file_under_a_dropped_readers_name_is_never_served_its_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(BlockCache::new(1 << 20).unwrap());
    let opts = cached_opts(&cache);
    let name = common::seg_name();
    common::write_segment(dir.path(), &name, &common::tiny_opts(), &model(1, 50));
    let r = open(dir.path(), &name, DiskAccessMode::Standard, &opts);
    for i in 0..50 {
        assert_eq!(r.get(&key_of(i)).unwrap().unwrap().value, value_of(1, i));
    }
    drop(r);
    // The same name, the same keys and lengths (so the same offsets), other bytes (in
    // another directory: only the deleter deletes).
    let dir = tempfile::tempdir().unwrap();
    let other: Model = (0..50)
        .map(|i| {
            let v: Vec<u8> = value_of(1, i).iter().map(|b| !b).collect();
            (key_of(i), Cell::live(&v, i + 1))
        })
        .collect();
    common::write_segment(dir.path(), &name, &common::tiny_opts(), &other);
    let before = cache.stats();
    let r = open(dir.path(), &name, DiskAccessMode::Standard, &opts);
    for (k, c) in &other {
        assert_eq!(r.get(k).unwrap().unwrap().value, c.value, "{k:?}");
    }
    assert!(cache.stats().misses > before.misses);
}

#[test]
fn corruption_is_detected_through_the_cache_on_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(BlockCache::new(1 << 20).unwrap());
    let name = common::seg_name();
    let m = model(2, 60);
    common::write_segment(dir.path(), &name, &common::tiny_opts(), &m);
    // Damage the value of key 10 (the record's last byte before its checksum).
    let data = name.path(dir.path(), Component::Data);
    let probe = open(
        dir.path(),
        &name,
        DiskAccessMode::Mmap,
        &ReaderOptions::default(),
    );
    let value = probe
        .get_with(&key_of(10), |r| r.value.as_ptr() as usize)
        .unwrap()
        .unwrap();
    let at = value - probe.mapped_files().next().unwrap().as_slice().as_ptr() as usize;
    drop(probe);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(&data, &bytes).unwrap();

    for mode in [DiskAccessMode::Standard, DiskAccessMode::Auto] {
        let r = open(dir.path(), &name, mode, &cached_opts(&cache));
        for attempt in 0..3 {
            match r.get(&key_of(10)) {
                Err(Error::Corrupt { path, .. }) => assert_eq!(path, data, "{mode}"),
                other => panic!("{mode} read {attempt}: {other:?}"),
            }
        }
        // Its neighbours, in the same cached chunk, still read.
        for i in [9, 11] {
            assert_eq!(r.get(&key_of(i)).unwrap().unwrap().value, value_of(2, i));
        }
        // Scans and verify read the file, past the cache.
        let before = cache.stats();
        assert!(matches!(r.verify(), Err(Error::Corrupt { .. })), "{mode}");
        // (A forward scan decodes the record at its end bound: stop short of key 10.)
        let (lo, hi) = (key_of(0), key_of(9));
        let scanned: Vec<_> = segstore::segment::SegmentIter::new(&r, &lo[..]..&hi[..])
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(scanned.len(), 9);
        let after = cache.stats();
        assert_eq!(
            (after.hits, after.misses),
            (before.hits, before.misses),
            "{mode}"
        );
    }
}
