//! The cache of decompressed blocks (`memory.unpacked_cache_mb`,
//! `src/segment/unpacked_cache.rs`): a compressed segment's gets keep the blocks they
//! decompress and answer from them after; scans and uncompressed segments leave it
//! alone; 0 disables it; a damaged compressed block is reported on every get and never
//! kept.
#![allow(clippy::disallowed_methods)] // damages a data file on purpose, outside the store's I/O boundary

mod common;

use std::path::{Path, PathBuf};

use segstore::{Compression, Config, DiskAccessMode, FileRules, Store};

const KEYS: u32 = 3000;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A value that compresses (JSON-like, repeating), different per key.
fn value(i: u32) -> Vec<u8> {
    format!("{{\"id\":{i},\"name\":\"user{i}\",\"tags\":[\"a\",\"b\",\"c\"],\"pad\":\"xxxxxxxxxxxxxxxxxxxx\"}}")
        .into_bytes()
}

fn config(mode: DiskAccessMode, compression: Compression, unpacked_mb: u64) -> Config {
    let mut cfg = common::test_config(mode, FileRules::posix());
    cfg.segment.compression = compression;
    cfg.memory.unpacked_cache_mb = unpacked_mb;
    cfg
}

/// A store in `dir` whose table `t` holds every key in one flushed segment.
fn written(dir: &Path, cfg: Config) -> Store {
    let store = Store::open(dir, cfg).unwrap();
    let t = store.table("t").unwrap();
    for i in 0..KEYS {
        t.put(key(i), value(i)).unwrap();
    }
    t.flush().unwrap();
    store
}

fn get_all_twice(store: &Store) {
    get_all(store);
    get_all(store);
}

fn get_all(store: &Store) {
    let t = store.table("t").unwrap();
    for i in 0..KEYS {
        assert_eq!(t.get(key(i)).unwrap().unwrap(), value(i), "key {i}");
    }
}

#[test]
fn compressed_gets_keep_their_blocks_and_scans_leave_them() {
    for mode in [
        DiskAccessMode::Auto,
        DiskAccessMode::Mmap,
        DiskAccessMode::Standard,
    ] {
        for compression in [Compression::Lz4, Compression::Zstd] {
            let tmp = tempfile::tempdir().unwrap();
            let store = written(tmp.path(), config(mode, compression, 4));
            let c = store.stats().unpacked_cache.unwrap();
            assert_eq!(
                (c.limit_bytes, c.used_bytes, c.hits, c.misses),
                (4 << 20, 0, 0, 0)
            );
            let t = store.table("t").unwrap();
            assert_eq!(t.scan(..).unwrap().count(), KEYS as usize);
            assert_eq!(
                store.stats().unpacked_cache.unwrap(),
                c,
                "scans leave it alone"
            );
            get_all(&store);
            let first = store.stats().unpacked_cache.unwrap();
            get_all(&store);
            // A scan reads the kept blocks without counting (and is right).
            let before = store.stats().unpacked_cache.unwrap();
            let rows: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(rows.len(), KEYS as usize);
            for (i, (k, v)) in rows.iter().enumerate() {
                assert_eq!((k, v), (&key(i as u32), &value(i as u32)));
            }
            // From the back, and sought, over the kept blocks.
            let back: Vec<_> = t.scan(..).unwrap().rev().map(|r| r.unwrap()).collect();
            assert!(back.iter().rev().eq(rows.iter()), "{mode} {compression:?}");
            let mut s = t.scan(key(1000)..key(2000)).unwrap();
            s.seek(key(1500));
            assert_eq!(s.next().unwrap().unwrap(), (key(1500), value(1500)));
            s.seek_back(key(1800));
            assert_eq!(s.next_back().unwrap().unwrap(), (key(1800), value(1800)));
            s.seek(key(1200));
            assert_eq!(s.next().unwrap().unwrap(), (key(1200), value(1200)));
            drop(s);
            assert_eq!(
                store.stats().unpacked_cache.unwrap(),
                before,
                "scans do not count"
            );
            let c = store.stats().unpacked_cache.unwrap();
            // Each compressed block is decompressed once and kept; every other get of it
            // hits. The segment's first get looks nowhere (nothing of it is kept yet),
            // each later first get of a block is a miss. A block that compression would
            // not shrink by an eighth (at most the short last one, whose length varies
            // with the timestamps) is stored raw: its gets miss in both passes.
            let raw_gets = c.misses - first.misses;
            assert!(
                c.blocks > 1 && c.blocks == first.blocks,
                "{mode} {compression:?}: {c:?}"
            );
            assert_eq!(
                first.misses,
                c.blocks - 1 + raw_gets,
                "{first:?} then {c:?}"
            );
            assert!(raw_gets < u64::from(KEYS) / 20, "{first:?} then {c:?}");
            assert_eq!(c.hits + c.misses, 2 * u64::from(KEYS) - 1, "{c:?}");
            assert!(c.used_bytes > 0 && c.used_bytes <= c.limit_bytes, "{c:?}");
            drop(t);
            assert!(store.close().unwrap().is_clean());
        }
    }
}

#[test]
fn uncompressed_segments_and_a_zero_budget_never_use_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = written(
        tmp.path(),
        config(DiskAccessMode::Auto, Compression::None, 4),
    );
    get_all_twice(&store);
    let c = store.stats().unpacked_cache.unwrap();
    assert_eq!((c.used_bytes, c.hits, c.misses), (0, 0, 0), "{c:?}");
    assert!(store.close().unwrap().is_clean());

    let tmp = tempfile::tempdir().unwrap();
    let store = written(
        tmp.path(),
        config(DiskAccessMode::Auto, Compression::Zstd, 0),
    );
    get_all_twice(&store);
    assert!(store.stats().unpacked_cache.is_none());
    assert!(store.close().unwrap().is_clean());
}

fn data_file(dir: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-Data.db"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

/// Which keys' gets fail, each as a corruption naming the data file.
fn failing(store: &Store, data: &Path) -> Vec<u32> {
    let t = store.table("t").unwrap();
    (0..KEYS)
        .filter(|&i| match t.get(key(i)) {
            Ok(v) => {
                assert_eq!(v.unwrap(), value(i));
                false
            }
            Err(e) => {
                assert!(e.is_corrupt(), "{e}");
                assert!(e.to_string().contains(&*data.to_string_lossy()), "{e}");
                true
            }
        })
        .collect()
}

#[test]
fn a_damaged_compressed_block_is_reported_on_every_get_and_never_kept() {
    // Gets that skip record checksums (`crc_check_chance` 0) still check a compressed
    // block before keeping it.
    for (mode, chance) in [
        (DiskAccessMode::Mmap, 1.0),
        (DiskAccessMode::Standard, 1.0),
        (DiskAccessMode::Mmap, 0.0),
        (DiskAccessMode::Standard, 0.0),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let store = written(tmp.path(), config(mode, Compression::Zstd, 4));
        assert!(store.close().unwrap().is_clean());
        // Flip a byte in the middle of the data file: inside some block's compressed
        // payload (blocks lie back to back from the start).
        let data = data_file(tmp.path());
        let mut bytes = std::fs::read(&data).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
        std::fs::write(&data, &bytes).unwrap();

        let mut cfg = config(mode, Compression::Zstd, 4);
        cfg.crc_check_chance = chance;
        let store = Store::open(tmp.path(), cfg).unwrap();
        let first = failing(&store, &data);
        assert!(
            !first.is_empty() && first.len() < KEYS as usize,
            "{mode}: {first:?}"
        );
        let c = store.stats().unpacked_cache.unwrap();
        let again = failing(&store, &data);
        assert_eq!(
            first, again,
            "{mode}: the damage is reported again, not served"
        );
        let c2 = store.stats().unpacked_cache.unwrap();
        assert_eq!(c.blocks, c2.blocks, "{mode}: nothing more was kept: {c2:?}");
        drop(store);
    }
}

/// The table's scans trust a kept block as gets do: damage to the file after a get kept
/// every block is not seen by them, while `scan_cells` (repair, tools), which checks
/// every block it reads, reports it.
#[test]
fn trusting_scans_read_kept_blocks_and_checking_reads_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    let store = written(
        tmp.path(),
        config(DiskAccessMode::Standard, Compression::Zstd, 4),
    );
    get_all_twice(&store);
    let data = data_file(tmp.path());
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&data, &bytes).unwrap();
    let t = store.table("t").unwrap();
    let mut n = 0;
    for (i, row) in t.scan(..).unwrap().enumerate() {
        assert_eq!(row.unwrap(), (key(i as u32), value(i as u32)));
        n += 1;
    }
    assert_eq!(n, KEYS as usize);
    let err = t
        .scan_cells(..)
        .unwrap()
        .find_map(|r| r.err())
        .expect("scan_cells checks every block");
    assert!(err.is_corrupt(), "{err}");
    drop(t);
    drop(store);
}
