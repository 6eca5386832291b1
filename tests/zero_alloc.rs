//! Issue 7: a warm `SegmentReader::get_with` allocates nothing, in every access mode, for
//! hits and misses. A counting global allocator counts allocations (and reallocations) per
//! thread, so other threads of the test harness cannot disturb the count. `Table::get`
//! returns a `Vec`, so it allocates at least once; its count is printed, not asserted.
//!
//! One `#[test]` in its own binary: the counter is the only global allocator here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use std::sync::Arc;

use segstore::io::FileRules;
use segstore::segment::{IndexCache, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{Config, DiskAccessMode, SegmentOptions, Store};

struct CountingAlloc;

thread_local! {
    // `const` and `Cell<u64>`: no lazy initialisation, no destructor, so touching it
    // from inside the allocator never allocates.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: during thread teardown the slot may be gone; those are not counted.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are ours; the counter is a thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: same contract as the caller's (`layout` has non-zero size).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: `ptr` came from this allocator, which is `System`; same contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Allocations made by this thread while running `f`.
fn allocs_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

const N: u32 = 20_000;

fn key(i: u32) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(b"key:");
    k[4..12].copy_from_slice(&(u64::from(i) * 2).to_be_bytes());
    k
}

fn missing(i: u32) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(b"key:");
    k[4..12].copy_from_slice(&(u64::from(i) * 2 + 1).to_be_bytes());
    k
}

fn value(i: u32) -> [u8; 100] {
    let mut v = [b'v'; 100];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

#[test]
fn warm_get_with_allocates_nothing_in_any_mode() {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("za", 1).unwrap();
    let mut w = SegmentWriter::create(
        dir.path(),
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )
    .unwrap();
    for i in 0..N {
        w.add(&key(i), &value(i), 1, false).unwrap();
    }
    w.finish().unwrap();

    // The counter sees this thread's allocations.
    assert_eq!(allocs_in(|| drop(std::hint::black_box(vec![1u8; 8]))), 1);

    // Spread over the key space: many index blocks, both sides of the filter.
    let probes: Vec<u32> = (0..2_000u32).map(|i| (i * 7919) % N).collect();
    // Each mode without and with an index cache (it only acts where the index is read
    // with positional reads).
    let cached = || ReaderOptions {
        index_cache: Some(Arc::new(IndexCache::new(64 << 20))),
        ..ReaderOptions::default()
    };
    let variants = DiskAccessMode::all()
        .into_iter()
        .flat_map(|m| [(m, ReaderOptions::default(), ""), (m, cached(), " +cache")]);
    for (mode, opts, label) in variants {
        let r = SegmentReader::open_with(dir.path(), &name, mode.resolve(), &opts).unwrap();
        // Warm: the thread's scratch buffer, every index block's first-use checksum.
        for &i in &probes {
            r.get_with(&key(i), |c| c.value.len()).unwrap();
            r.get_with(&missing(i), |c| c.value.len()).unwrap();
        }
        let mut sum = 0usize;
        let hits = allocs_in(|| {
            for &i in &probes {
                let got = r.get_with(&key(i), |c| {
                    assert_eq!(&c.value[..4], &i.to_le_bytes());
                    c.value.len()
                });
                sum += got.unwrap().unwrap();
            }
        });
        let mut found = 0usize;
        let misses = allocs_in(|| {
            for &i in &probes {
                found += r.get_with(&missing(i), |_| ()).unwrap().is_some() as usize;
            }
        });
        println!(
            "zero_alloc: mode {:<21} {} warm hits: {hits} allocations; {} warm misses: {misses} allocations",
            format!("{}{label}", mode.as_str()),
            probes.len(),
            probes.len()
        );
        assert_eq!(sum, 100 * probes.len());
        assert_eq!(found, 0);
        assert_eq!(
            hits,
            0,
            "{}{label}: warm get_with hits allocated",
            mode.as_str()
        );
        assert_eq!(
            misses,
            0,
            "{}{label}: warm get_with misses allocated",
            mode.as_str()
        );
    }

    // For reference only: Table::get returns an owned Vec.
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let tdir = tempfile::tempdir().unwrap();
        let config = Config {
            disk_access_mode: mode,
            track_leaks: false,
            ..Config::default()
        };
        let store = Store::open(tdir.path(), config).unwrap();
        let t = store.table("za").unwrap();
        for i in 0..N {
            t.put(key(i), value(i)).unwrap();
        }
        t.flush().unwrap();
        for &i in &probes {
            t.get(key(i)).unwrap().unwrap();
            t.get(missing(i)).unwrap();
        }
        let hits = allocs_in(|| {
            for &i in &probes {
                t.get(key(i)).unwrap().unwrap();
            }
        });
        let misses = allocs_in(|| {
            for &i in &probes {
                assert!(t.get(missing(i)).unwrap().is_none());
            }
        });
        println!(
            "zero_alloc (reference, not asserted): Table::get mode {:<8} {:.2} allocations per hit, {:.2} per miss",
            mode.as_str(),
            hits as f64 / probes.len() as f64,
            misses as f64 / probes.len() as f64
        );
        drop(t);
        store.close().unwrap();
    }
}
