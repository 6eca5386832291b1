//! Issue 12, zero-copy point reads: `Table::get` (a `Value` sharing memtable bytes or
//! borrowing mapped segment bytes), `get_with`, `contains_key`, `multi_get` and
//! `get_cell` agree with a model of the cell rule, whatever holds the winning cell (the
//! memtable, a newer or an older segment, equal timestamps), in every access mode; and a
//! mapped value read before a compaction still reads its bytes after it, its segment
//! deleted only once the value drops.

mod common;

use common::Rng;

use std::collections::BTreeMap;

use segstore::io::registry;
use segstore::segment::{Component, SegmentName};
use segstore::{
    CommitLogConfig, CommitLogSync, Config, DiskAccessMode, FileRules, Store, Table, TableConfig,
    WriteBatch,
};

fn cfg(mode: DiskAccessMode, rules: FileRules) -> Config {
    let mut c = common::test_config(mode, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table = TableConfig::default();
    // Only the test's flushes and compactions, so segments pile up and overlap.
    c.table.memtable_flush_bytes = 1 << 30;
    c.table.background_compaction = false;
    c.table.compaction.min_threshold = 2;
    // Explicit timestamps here are tiny: keep every tombstone.
    c.table.gc_grace_secs = u64::MAX / 2_000_000;
    c
}

/// (ts, tombstone, value): ordered as the cell rule orders versions.
type Version = (u64, bool, Vec<u8>);

const KEYS: u64 = 40;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:03}").into_bytes()
}

/// Every read of every key (and of keys never written) against the model.
fn check(t: &Table, model: &BTreeMap<Vec<u8>, Version>, what: &str) {
    let keys: Vec<Vec<u8>> = (0..KEYS + 5).map(key).collect();
    let many = t.multi_get(&keys).unwrap();
    assert_eq!(many.len(), keys.len());
    for (k, got_many) in keys.iter().zip(many) {
        let cell = model.get(k);
        let want: Option<&[u8]> = cell.filter(|c| !c.1).map(|c| c.2.as_slice());
        let got = t.get(k).unwrap();
        assert_eq!(got.as_deref(), want, "{what}: get {k:?}");
        if let Some(v) = &got {
            assert_eq!(*v, want.unwrap().to_vec(), "{what}: Value == Vec");
        }
        assert_eq!(got_many.as_deref(), want, "{what}: multi_get {k:?}");
        let with = t.get_with(k, |v| v.map(<[u8]>::to_vec)).unwrap();
        assert_eq!(with.as_deref(), want, "{what}: get_with {k:?}");
        assert_eq!(
            t.contains_key(k).unwrap(),
            want.is_some(),
            "{what}: contains_key {k:?}"
        );
        let c = t.get_cell(k).unwrap();
        assert_eq!(
            c.map(|e| (e.ts, e.tombstone, e.value)),
            cell.cloned(),
            "{what}: get_cell {k:?}"
        );
    }
}

/// Random puts and deletes at explicit timestamps from a small range (so newer cells
/// land in older segments, and timestamps tie: tombstone against value, value against
/// value), flushes into overlapping segments, merges of some segments and major
/// compactions.
fn run(mode: DiskAccessMode, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let store = Store::open(dir.path(), cfg(mode, rules.clone())).unwrap();
    let t = store.table("t").unwrap();
    let mut rng = Rng(seed);
    let mut model: BTreeMap<Vec<u8>, Version> = BTreeMap::new();
    for step in 0..600 {
        let k = key(rng.next() % KEYS);
        let ts = 1_000 + rng.next() % 40;
        let version = if rng.next() % 4 == 0 {
            t.write(WriteBatch::new().delete_at(k.clone(), ts)).unwrap();
            (ts, true, Vec::new())
        } else {
            // Short values from a small set, so equal timestamps meet different values.
            let v = format!("v{}", rng.next() % 7).into_bytes();
            t.write(WriteBatch::new().put_at(k.clone(), v.clone(), ts))
                .unwrap();
            (ts, false, v)
        };
        let slot = model.entry(k).or_insert_with(|| version.clone());
        if version > *slot {
            *slot = version;
        }
        match rng.next() % 100 {
            0..=5 => t.flush().unwrap(),
            6 => t.compact().unwrap(),
            _ => {}
        }
        if step % 50 == 49 {
            check(&t, &model, &format!("{mode} seed {seed} step {step}"));
        }
    }
    check(&t, &model, &format!("{mode} seed {seed}: end, memtable"));
    t.flush().unwrap();
    check(&t, &model, &format!("{mode} seed {seed}: end, segments"));
    t.compact().unwrap();
    assert!(t.stats().segments <= 1);
    check(&t, &model, &format!("{mode} seed {seed}: end, compacted"));
    drop(t);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(rules.counts().refused_mapped, 0);
}

#[test]
fn point_reads_agree_with_the_model_in_every_mode() {
    for mode in [
        DiskAccessMode::Mmap,
        DiskAccessMode::Standard,
        DiskAccessMode::MmapIndexOnly,
    ] {
        for seed in [1, 0x5eed, 0xdead_beef] {
            run(mode, seed);
        }
    }
}

fn exists(dir: &std::path::Path, name: &SegmentName) -> [bool; 3] {
    Component::ALL.map(|c| name.path(dir, c).exists())
}

/// A store under the Windows rules whose table `t` holds `k000`..`k099` = `first N`
/// in one flushed segment: (tempdir, rules, store, store dir, table, that segment).
fn one_segment_of_100(
    mode: DiskAccessMode,
) -> (
    tempfile::TempDir,
    FileRules,
    Store,
    std::path::PathBuf,
    std::sync::Arc<Table>,
    SegmentName,
) {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::windows_emulation();
    let store = Store::open(tmp.path(), cfg(mode, rules.clone())).unwrap();
    let dir = store.dir().to_path_buf();
    let t = store.table("t").unwrap();
    for i in 0..100u32 {
        t.put(
            format!("k{i:03}").as_bytes(),
            format!("first {i}").as_bytes(),
        )
        .unwrap();
    }
    t.flush().unwrap();
    let old = t.segments().view().segments[0].name().clone();
    (tmp, rules, store, dir, t, old)
}

#[test]
fn a_mapped_value_outlives_the_compaction_of_its_segment() {
    let (_tmp, rules, store, dir, t, old) = one_segment_of_100(DiskAccessMode::Mmap);

    let held = t.get(b"k042").unwrap().unwrap();
    assert!(
        held.is_mapped(),
        "an mmap-mode segment value borrows the map"
    );
    assert_eq!(held, b"first 42");
    // A memtable value shares the memtable's bytes, and keeps them when the key is
    // overwritten.
    t.put(b"k007", b"memtable").unwrap();
    let shared = t.get(b"k007").unwrap().unwrap();
    assert!(!shared.is_mapped());
    t.put(b"k007", b"overwritten").unwrap();
    assert_eq!(shared, b"memtable");

    // Overwrite and delete, then merge everything into a new segment: `old` is obsolete.
    t.put(b"k042", b"second").unwrap();
    t.delete(b"k043").unwrap();
    t.compact().unwrap();
    let view = t.segments().view();
    assert_eq!(view.segments.len(), 1);
    assert_ne!(view.segments[0].name(), &old);
    drop(view);
    assert_eq!(t.get(b"k042").unwrap().unwrap(), b"second");
    assert_eq!(t.get(b"k043").unwrap(), None);

    // The held value still reads the old segment's bytes, which stay mapped and on disk.
    assert_eq!(held, b"first 42");
    assert_eq!(held.to_vec(), b"first 42".to_vec());
    assert_eq!(format!("{held:?}"), r#"Value(b"first 42")"#);
    assert_eq!(exists(&dir, &old), [true; 3], "deleted under a live value");
    let clone = held.clone();
    drop(held);
    assert_eq!(exists(&dir, &old), [true; 3], "the clone holds it too");
    assert_eq!(clone, b"first 42");
    drop(clone);
    // The last holder dropped: unmapped, then deleted on this thread.
    assert_eq!(exists(&dir, &old), [false; 3]);
    assert_eq!(rules.counts().refused_mapped, 0);

    drop((t, shared));
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(registry().stats_under(&dir).maps, 0);
}

/// `get_with` runs its closure while the view is borrowed, not locked: the closure may
/// write, flush and compact the very table (no deadlock, nothing waits for it), its
/// bytes stay valid while the segment they came from is compacted away, and that
/// segment is deleted once the closure returns. Every mode; Windows rules, so deleting
/// a mapped file would be refused and counted.
#[test]
fn a_get_with_closure_may_write_flush_and_compact_the_table_it_reads() {
    for mode in [
        DiskAccessMode::Mmap,
        DiskAccessMode::MmapIndexOnly,
        DiskAccessMode::Standard,
    ] {
        let (_tmp, rules, store, dir, t, old) = one_segment_of_100(mode);
        let seen = t
            .get_with(b"k042", |v| {
                let v = v.unwrap();
                assert_eq!(v, b"first 42");
                t.put(b"k042", b"second").unwrap();
                t.put(b"k100", b"new").unwrap();
                t.flush().unwrap();
                t.compact().unwrap();
                let view = t.segments().view();
                assert_eq!(view.segments.len(), 1, "{mode}");
                assert_ne!(view.segments[0].name(), &old, "{mode}");
                drop(view);
                // Reads nested in the closure see the writes it made.
                assert_eq!(t.get(b"k042").unwrap().unwrap(), b"second");
                assert!(t.get_with(b"k100", |n| n == Some(&b"new"[..])).unwrap());
                // The borrowed bytes are still the old segment's, which is still there.
                assert_eq!(v, b"first 42", "{mode}");
                assert_eq!(
                    exists(&dir, &old),
                    [true; 3],
                    "{mode}: deleted under a read"
                );
                v.to_vec()
            })
            .unwrap();
        assert_eq!(seen, b"first 42");
        assert_eq!(
            exists(&dir, &old),
            [false; 3],
            "{mode}: kept after the read ended"
        );
        assert_eq!(rules.counts().refused_mapped, 0, "{mode}");
        drop(t);
        let report = store.close().unwrap();
        assert!(report.is_clean(), "{mode}: {report:?}");
        assert_eq!(registry().stats_under(&dir).maps, 0, "{mode}");
    }
}

#[test]
fn positional_reads_copy_the_value_once() {
    for mode in [DiskAccessMode::Standard, DiskAccessMode::MmapIndexOnly] {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), cfg(mode, FileRules::posix())).unwrap();
        let t = store.table("t").unwrap();
        t.put(b"k", b"value").unwrap();
        t.flush().unwrap();
        let v = t.get(b"k").unwrap().unwrap();
        assert!(!v.is_mapped(), "{mode}");
        assert_eq!(v, b"value");
        assert!(t.contains_key(b"k").unwrap());
        assert!(!t.contains_key(b"nope").unwrap());
        drop((t, v));
        assert!(store.close().unwrap().is_clean());
    }
}

/// Point reads skip the memtables (and their lock) while every memtable is empty
/// (`lsm.rs`, invariant 6). A writer acknowledges values 1, 2, 3, ... of one key while
/// flushes empty the memtables again and again; readers that start after an
/// acknowledgement must see that value or a later one, through every point read.
#[test]
fn reads_after_an_acknowledged_write_see_it_while_flushes_empty_the_memtables() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const WRITES: u64 = 200;
    let parse = |v: &[u8]| std::str::from_utf8(v).unwrap().parse::<u64>().unwrap();
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let tmp = tempfile::tempdir().unwrap();
        let mut config = cfg(mode, FileRules::posix());
        config.table.background_compaction = true;
        config.table.compaction.max_threshold = 4;
        let store = Store::open(tmp.path(), config).unwrap();
        let t = store.table("t").unwrap();
        let acked = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for v in 1..=WRITES {
                    t.put(b"k", v.to_string().as_bytes()).unwrap();
                    acked.store(v, Ordering::Release);
                    if v % 4 == 0 {
                        t.flush().unwrap();
                    }
                }
                done.store(true, Ordering::Release);
            });
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    t.flush().unwrap();
                }
            });
            // Two readers, yielding between reads: the machine may have two cores.
            for reader in 0..2 {
                let (t, acked, done, reads) = (&t, &acked, &done, &reads);
                s.spawn(move || {
                    let mut n = 0u64;
                    while !done.load(Ordering::Acquire) {
                        let want = acked.load(Ordering::Acquire);
                        let got = match n % 3 {
                            0 => t.get(b"k").unwrap().map_or(0, |v| parse(&v)),
                            1 => t.get_with(b"k", |v| v.map_or(0, parse)).unwrap(),
                            _ => {
                                let many = t.multi_get([b"k"]).unwrap();
                                many[0].as_deref().map_or(0, parse)
                            }
                        };
                        assert!(
                            got >= want,
                            "{mode} reader {reader}: read {got} after {want} was acknowledged"
                        );
                        if want > 0 {
                            assert!(t.contains_key(b"k").unwrap(), "{mode}: key missing");
                        }
                        n += 1;
                        std::thread::yield_now();
                    }
                    reads.fetch_add(n, Ordering::Relaxed);
                });
            }
        });
        assert!(reads.load(Ordering::Relaxed) > 0);
        assert_eq!(t.get(b"k").unwrap().unwrap(), WRITES.to_string().as_bytes());
        drop(t);
        assert!(store.close().unwrap().is_clean());
    }
}
