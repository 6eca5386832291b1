//! The standard-mode index cache: served from memory, bounded, never damaged.

use std::ops::Bound;
use std::sync::Arc;

use crate::common::*;
use crate::fixtures::{standard_model, written_v3};
use segstore::segment::{Component, IndexCache, ReaderOptions, SegmentReader};
use segstore::{DiskAccessMode, Error};

// ------------------------------------------------------------------ index cache

fn open_cached(
    dir: &std::path::Path,
    mode: DiskAccessMode,
    budget: &Arc<IndexCache>,
) -> SegmentReader {
    let mut opts = ReaderOptions::default();
    opts.index_cache = Some(budget.clone());
    SegmentReader::open_with(dir, &seg_name(), mode.resolve(), &opts).unwrap()
}

fn check_all_gets(r: &SegmentReader, model: &Model, what: &str) {
    for (k, c) in model {
        assert_eq!(r.get(k).unwrap(), Some(c.entry(k)), "{what}");
    }
    assert_eq!(r.get(b"key00001").unwrap(), None, "{what}");
}

/// Once warm, a standard-mode reader with an index cache answers from memory: damaging
/// the whole index file on disk changes nothing for it, while a reader without the cache
/// reports the damage. Dropping the reader returns the budget.
#[test]
fn standard_index_cache_serves_lookups_from_memory() {
    let model = standard_model();
    let dir = written_v3(&model);
    let budget = Arc::new(IndexCache::new(1 << 20));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    check_all_gets(&r, &model, "cold");
    let index = component_path(dir.path(), Component::Index);
    let index_len = std::fs::metadata(&index).unwrap().len();
    let s = budget.stats();
    assert!(s.blocks > 10, "tiny blocks: many of them, got {}", s.blocks);
    assert_eq!(s.used_bytes, r.index_cache_bytes());
    assert!(
        s.used_bytes > index_len / 2 && s.used_bytes < index_len,
        "{s:?}"
    );
    assert_eq!(s.refused, 0);

    // Overwrite every byte of the index but its footer, in place.
    let body = index_len as usize - segstore::format::footer::FOOTER_LEN;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&index)
            .unwrap();
        f.write_all_at(&vec![0xAA; body], 0).unwrap();
        f.sync_all().unwrap();
    }
    check_all_gets(&r, &model, "warm, index damaged on disk");
    // `verify` reads the file, not the cache.
    match r.verify() {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, index),
        other => panic!("verify must read the damaged file, got {other:?}"),
    }
    let all = scan_all(&r, &Bound::Unbounded, &Bound::Unbounded).unwrap();
    assert_eq!(all.len(), model.len());
    let mid = model.keys().nth(100).unwrap().clone();
    let tail = scan_all(&r, &Bound::Included(mid), &Bound::Unbounded).unwrap();
    assert_eq!(tail.len(), model.len() - 100);
    let uncached =
        SegmentReader::open(dir.path(), &seg_name(), DiskAccessMode::Standard.resolve()).unwrap();
    let k = model.keys().nth(150).unwrap();
    match uncached.get(k) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, index),
        other => panic!("expected the damaged index to be reported, got {other:?}"),
    }
    drop(r);
    assert_eq!((budget.stats().used_bytes, budget.stats().blocks), (0, 0));
}

/// Past the budget, blocks are read per lookup; answers do not change. Mapped indexes
/// never use the cache.
#[test]
fn index_cache_budget_is_a_ceiling_and_mapped_indexes_skip_it() {
    let model = standard_model();
    let dir = written_v3(&model);
    let budget = Arc::new(IndexCache::new(300));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    check_all_gets(&r, &model, "small budget");
    check_all_gets(&r, &model, "small budget, again");
    let s = budget.stats();
    assert!(s.used_bytes <= 300 && s.blocks >= 1, "{s:?}");
    assert!(s.refused > 0, "{s:?}");
    drop(r);

    // `verify` reads every block but keeps none of them.
    let budget = Arc::new(IndexCache::new(1 << 20));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    assert_eq!(r.verify().unwrap(), model.len() as u64);
    assert_eq!(budget.stats().used_bytes, 0);
    drop(r);

    for mode in [DiskAccessMode::Mmap, DiskAccessMode::MmapIndexOnly] {
        let budget = Arc::new(IndexCache::new(1 << 20));
        let r = open_cached(dir.path(), mode, &budget);
        check_all_gets(&r, &model, mode.as_str());
        assert_eq!(budget.stats().used_bytes, 0, "{mode}");
        assert_eq!(r.index_cache_bytes(), 0, "{mode}");
    }
}

/// A damaged index block is reported the first time it is read and never cached.
#[test]
fn index_cache_never_keeps_a_damaged_block() {
    let model = standard_model();
    let dir = written_v3(&model);
    let index = component_path(dir.path(), Component::Index);
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[10] ^= 0x40;
    std::fs::write(&index, &bytes).unwrap();
    let budget = Arc::new(IndexCache::new(1 << 20));
    let r = open_cached(dir.path(), DiskAccessMode::Standard, &budget);
    let first = model.keys().next().unwrap();
    for _ in 0..2 {
        match r.get(first) {
            Err(Error::Corrupt { path, .. }) => assert_eq!(path, index),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    // The other blocks are fine and cached.
    let last = model.keys().last().unwrap();
    assert_eq!(r.get(last).unwrap(), Some(model[last].entry(last)));
    assert_eq!(budget.stats().blocks, 1);
}
