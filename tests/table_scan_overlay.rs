//! Scans of a table whose large segment (or chain of segments of disjoint key spans,
//! read one after another) lies under a smaller one and memtables that hold some of
//! its keys: the overlay that lends the large segment's rows and merges only at the
//! others' keys (`src/table/lsm/overlay.rs`), against a model, with every
//! way a newer cell meets a segment cell (newer, older by explicit timestamp, a tombstone, an expired
//! TTL), and scans that step back or seek after stepping forward (the overlay then
//! turns into the general merge), over segments of records and of blocks; and a scan
//! that met a damaged block stays done, whichever source it had.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use segstore::{Config, Store, Table, WriteBatch};

/// What the table should hold.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A memtable operation over key `k` (of 0..40).
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    /// A put stamped older than the segment's cells: the segment's value wins.
    PutOld(u8, u8),
    Delete(u8),
    /// A put that has expired by the time the scan reads.
    Expired(u8),
}

/// A scan step.
#[derive(Debug, Clone, Copy)]
enum Step {
    Next,
    Back,
    Seek(u8),
    SeekBack(u8),
}

fn key(k: u8) -> Vec<u8> {
    format!("k{k:02}").into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::PutOld(k, v)),
        (0u8..40).prop_map(Op::Delete),
        (0u8..40).prop_map(Op::Expired),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => Just(Step::Next),
        2 => Just(Step::Back),
        1 => (0u8..42).prop_map(Step::Seek),
        1 => (0u8..42).prop_map(Step::SeekBack),
    ]
}

/// A new store writing segment `format`, with no background compaction and its expiry
/// clock at 1,000, and its table `t`.
fn open_table(format: u16) -> (tempfile::TempDir, Store, Arc<Table>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.segment.format_version = format;
    config.table.background_compaction = false;
    let store = Store::open(dir.path(), config).unwrap();
    store.set_expiry_clock(Some(1_000));
    let t = store.table("t").unwrap();
    (dir, store, t)
}

/// A store whose table `t` holds `pieces` (key -> value), each in a segment of its own
/// (flushed in the order given; no compaction), written at timestamp 1,000,000 and on,
/// then `ops`: those before `flush_at` flushed into one more segment, the rest in its
/// memtable; and the model of it.
fn build(
    pieces: &[BTreeMap<u8, u8>],
    ops: &[Op],
    flush_at: usize,
    format: u16,
) -> (tempfile::TempDir, Store, Arc<Table>, Model) {
    let (dir, store, t) = open_table(format);
    let mut model = BTreeMap::new();
    // Per key, the timestamp of an old put that holds it (`Some`), or `None` once a
    // segment cell or a clock-stamped write (newer than every old put) has it.
    let mut old: BTreeMap<u8, Option<u64>> = BTreeMap::new();
    for seg in pieces {
        let mut b = WriteBatch::new();
        for (&k, &v) in seg {
            b.put_at(key(k), [v], 1_000_000 + u64::from(k));
            model.insert(key(k), vec![v]);
            old.insert(k, None);
        }
        if !seg.is_empty() {
            t.write(&b).unwrap();
        }
        t.flush().unwrap();
    }
    for (i, o) in ops.iter().enumerate() {
        if i == flush_at {
            // The ops so far in a second, smaller segment; the rest in the memtable.
            t.flush().unwrap();
        }
        let k = match *o {
            Op::Put(k, _) | Op::PutOld(k, _) | Op::Delete(k) | Op::Expired(k) => k,
        };
        match *o {
            Op::Put(k, v) => {
                t.put(key(k), [v, v]).unwrap();
                model.insert(key(k), vec![v, v]);
            }
            Op::PutOld(k, v) => {
                // Stamped below every segment cell and clock-stamped write: it holds
                // the key only if nothing but older old puts has written it.
                let ts = 5 + i as u64;
                t.write(WriteBatch::new().put_at(key(k), [v, 1, 2], ts))
                    .unwrap();
                if old.get(&k).is_none_or(|o| o.is_some_and(|prev| prev < ts)) {
                    model.insert(key(k), vec![v, 1, 2]);
                    old.insert(k, Some(ts));
                }
                continue;
            }
            Op::Delete(k) => {
                t.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Expired(k) => {
                t.put_ttl(key(k), [9], Duration::from_micros(1)).unwrap();
                model.remove(&key(k));
            }
        }
        old.insert(k, None);
    }
    // Every TTL given above has passed.
    store.set_expiry_clock(Some(u64::MAX / 2));
    (dir, store, t, model)
}

/// The format the deterministic tests write (the default).
const FORMAT: u16 = segstore::format::footer::FORMAT_VERSION;

/// Run `steps` on a scan of `range` and on the model, comparing each answer.
fn check(
    t: &Table,
    model: &Model,
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut scan = t.scan(range.clone()).unwrap();
    // The model's rows in range, and how far each end has got.
    let rows: Vec<(&Vec<u8>, &Vec<u8>)> = model.range(range).collect();
    let (mut lo, mut hi) = (0usize, rows.len());
    for s in steps {
        match s {
            Step::Next => {
                let got = scan.next().map(|r| r.unwrap());
                let want = (lo < hi).then(|| (rows[lo].0.clone(), rows[lo].1.clone()));
                lo += usize::from(lo < hi);
                prop_assert_eq!(got, want, "next after {:?}", steps);
            }
            Step::Back => {
                let got = scan.next_back().map(|r| r.unwrap());
                let want = (lo < hi).then(|| (rows[hi - 1].0.clone(), rows[hi - 1].1.clone()));
                hi -= usize::from(lo < hi);
                prop_assert_eq!(got, want, "next_back after {:?}", steps);
            }
            Step::Seek(k) => {
                scan.seek(key(*k));
                lo = rows.partition_point(|(r, _)| r.as_slice() < key(*k).as_slice());
            }
            Step::SeekBack(k) => {
                scan.seek_back(key(*k));
                hi = rows.partition_point(|(r, _)| r.as_slice() <= key(*k).as_slice());
            }
        }
    }
    // What is left forward matches too.
    let rest: Vec<_> = scan.map(|r| r.unwrap()).collect();
    let want: Vec<_> = rows[lo.min(hi)..hi]
        .iter()
        .map(|(k, v)| ((*k).clone(), (*v).clone()))
        .collect();
    prop_assert_eq!(rest, want);
    Ok(())
}

proptest! {
    #![proptest_config(common::proptest_config(file!()))]

    #[test]
    fn scans_over_one_segment_and_memtables_agree_with_the_model(
        seg in proptest::collection::btree_map(0u8..40, any::<u8>(), 0..30),
        ops in proptest::collection::vec(op(), 1..30),
        steps in proptest::collection::vec(step(), 0..40),
        lo in proptest::option::of(0u8..42),
        hi in proptest::option::of(0u8..42),
        flush_at in 0usize..40,
        // Segments of records (format 3: the overlay's capped steps take the record
        // walk) or of blocks (the default).
        format in prop_oneof![Just(3u16), Just(segstore::format::footer::FORMAT_VERSION)],
        // The first segment's keys kept within `span`: a segment whose key span
        // misses a scan's range is left out of it (a leveled table's segments of one
        // level), one whose span holds the scan's start is the overlay's base.
        span in prop_oneof![Just((0u8, 40u8)), (0u8..40, 0u8..40)],
        // Those keys cut into segments of disjoint spans at these keys (a leveled
        // level: a forward scan reads them as one chain, opening each as the one
        // before runs out), flushed in key order or in reverse.
        cuts in proptest::collection::vec(0u8..40, 0..4),
        reverse in any::<bool>(),
        // The segments beside the scan's chain merged into a side run, read in their
        // place (`side_run.rs`).
        side_run in any::<bool>(),
    ) {
        let mut pieces = vec![BTreeMap::new(); cuts.len() + 1];
        for (k, v) in seg.into_iter().filter(|(k, _)| (span.0..=span.1).contains(k)) {
            pieces[cuts.iter().filter(|&&c| c <= k).count()].insert(k, v);
        }
        if reverse {
            pieces.reverse();
        }
        let (_dir, store, t, model) = build(&pieces, &ops, flush_at, format);
        if side_run {
            t.build_side_run();
        }
        let range = (
            lo.map_or(Bound::Unbounded, |k| Bound::Included(key(k))),
            hi.map_or(Bound::Unbounded, |k| Bound::Excluded(key(k))),
        );
        if !matches!((&range.0, &range.1), (Bound::Included(a), Bound::Excluded(b)) if a > b) {
            check(&t, &model, range, &steps)?;
        }
        // The same through a read view, and with next_with's borrowed rows.
        let view = store.read_view().unwrap();
        let mut via_view = Vec::new();
        let mut s = view.scan(&t, ..).unwrap();
        while let Some(r) = s.next_with(|k, v| (k.to_vec(), v.to_vec())) {
            via_view.push(r.unwrap());
        }
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        prop_assert_eq!(via_view, want);
    }
}

/// The overlay is what such a scan uses: a table with one segment and a few updates
/// scans through it, and a step back after forward steps still sees every key once.
#[test]
fn a_forward_scan_meets_memtable_keys_between_segment_rows() {
    let seg: BTreeMap<u8, u8> = (0..40).map(|k| (k, k)).collect();
    let ops = [
        Op::Put(10, 1),
        Op::Delete(11),
        Op::PutOld(12, 7),
        Op::Expired(13),
    ];
    let (_dir, _store, t, model) = build(std::slice::from_ref(&seg), &ops, usize::MAX, FORMAT);
    assert_eq!(t.stats().segments, 1);
    let steps = [Step::Next; 15]
        .into_iter()
        .chain([Step::Back, Step::Back, Step::Next])
        .collect::<Vec<_>>();
    check(&t, &model, (Bound::Unbounded, Bound::Unbounded), &steps).unwrap();
    let got = first_rows(&t, key(9), 4);
    let want = vec![
        (key(9), vec![9]),
        (key(10), vec![1, 1]),
        (key(12), vec![12]), // the older put lost to the segment's cell
        (key(14), vec![14]),
    ];
    assert_eq!(got, want);
    // The same with the updates in a second segment, under more in the memtable.
    let more = [Op::Put(20, 3), Op::Delete(21)];
    let all: Vec<Op> = ops.iter().cloned().chain(more).collect();
    let (_dir, _store, t, model) = build(std::slice::from_ref(&seg), &all, ops.len(), FORMAT);
    assert_eq!(t.stats().segments, 2);
    check(&t, &model, (Bound::Unbounded, Bound::Unbounded), &steps).unwrap();
    let got: Vec<_> = t
        .scan(key(19)..)
        .unwrap()
        .take(3)
        .map(|r| r.unwrap())
        .collect();
    let want = vec![
        (key(19), vec![19]),
        (key(20), vec![3, 3]),
        (key(22), vec![22]),
    ];
    assert_eq!(got, want);
}

/// Forward scans of `t` from every key of 0..41, open-ended and bounded to 15 keys,
/// each against the model.
fn scan_from_every_start(t: &Table, model: &Model) {
    let steps = [Step::Next; 45];
    for lo in 0..41 {
        let open = (Bound::Included(key(lo)), Bound::Unbounded);
        check(t, model, open, &steps).unwrap();
        let bounded = (Bound::Included(key(lo)), Bound::Excluded(key(lo + 15)));
        check(t, model, bounded, &steps).unwrap();
    }
}

/// A chain of segments alone (no memtable cell, no segment beside it: a leveled table
/// at rest), flushed out of key order, with a tombstone and an expired cell in each
/// segment: forward scans from every start, open-ended and bounded, lend each
/// segment's live rows in turn and pass over the dead ones; a step back or a seek
/// after crossing into the next segment answers as the model does. No scan seeks
/// beside the chain (`scan_seeks` stays 0), so every step ran with an empty side.
#[test]
fn a_chain_alone_is_read_segment_after_segment() {
    let (_dir, store, t) = open_table(FORMAT);
    let mut model = BTreeMap::new();
    for lo in [20u8, 0, 30, 10] {
        for k in lo..lo + 10 {
            match k % 10 {
                3 => t.delete(key(k)).unwrap(),
                6 => t.put_ttl(key(k), [9], Duration::from_micros(1)).unwrap(),
                _ => {
                    t.put(key(k), [k]).unwrap();
                    model.insert(key(k), vec![k]);
                }
            }
        }
        t.flush().unwrap();
    }
    store.set_expiry_clock(Some(u64::MAX / 2));
    assert_eq!(t.stats().segments, 4);
    scan_from_every_start(&t, &model);
    let mut mixed = vec![Step::Next; 12];
    mixed.extend([
        Step::Back,
        Step::Next,
        Step::Seek(27),
        Step::Next,
        Step::Next,
    ]);
    check(
        &t,
        &model,
        (Bound::Included(key(2)), Bound::Unbounded),
        &mixed,
    )
    .unwrap();
    assert_eq!(t.stats().scan_seeks, 0, "a segment sought beside the chain");
}

/// A chain of segments of disjoint key spans, flushed out of key order, under a
/// segment and a memtable holding updates in several of them: forward scans from every
/// start, open-ended and bounded, run from one segment of the chain into the next and
/// meet every update once.
#[test]
fn a_scan_runs_through_a_chain_of_disjoint_segments() {
    let piece = |r: std::ops::Range<u8>| -> BTreeMap<u8, u8> { r.map(|k| (k, k)).collect() };
    let pieces = [piece(20..30), piece(0..10), piece(30..40), piece(10..20)];
    let ops = [
        Op::Put(9, 1),
        Op::Delete(10),
        Op::PutOld(19, 2),
        Op::Put(29, 3),
        Op::Expired(30),
        Op::Put(5, 4),
        Op::Delete(21),
        Op::Put(39, 5),
    ];
    let (_dir, _store, t, model) = build(&pieces, &ops, 4, FORMAT);
    assert_eq!(t.stats().segments, 5);
    scan_from_every_start(&t, &model);
    // A step back after crossing into the chain's second segment.
    let mut mixed = vec![Step::Next; 14];
    mixed.extend([Step::Back, Step::Next, Step::Seek(25), Step::Next]);
    check(
        &t,
        &model,
        (Bound::Included(key(3)), Bound::Unbounded),
        &mixed,
    )
    .unwrap();
}

/// The segments beside a scan's chain read from a side run in their place: before the
/// run and after it, scans from every start agree with the model; the run holds the
/// side segment's cells and serves the scans that meet it; a flush makes it stale
/// (scans read the segments again) until it is built anew over both side segments; a
/// run past `side_run_bytes`, or the setting at 0, is not built.
#[test]
fn a_side_run_serves_scans_in_place_of_the_segments_beside_the_chain() {
    let piece = |r: std::ops::Range<u8>| -> BTreeMap<u8, u8> { r.map(|k| (k, k)).collect() };
    let pieces = [piece(20..40), piece(0..20)];
    let ops = [
        Op::Put(9, 1),
        Op::Delete(10),
        Op::PutOld(19, 2),
        Op::Expired(30),
        // In the memtable from here.
        Op::Put(29, 3),
        Op::Delete(21),
    ];
    let (_dir, store, t, mut model) = build(&pieces, &ops, 4, FORMAT);
    assert_eq!(t.stats().segments, 3);
    scan_from_every_start(&t, &model);
    assert_eq!((t.stats().side_run_bytes, t.stats().side_run_scans), (0, 0));
    assert!(t.build_side_run());
    // The side segment's four cells (a put, a tombstone, an old put, an expired put).
    assert_eq!(t.stats().side_run_cells, 4);
    assert!(t.stats().side_run_bytes > 4 * 40);
    scan_from_every_start(&t, &model);
    let served = t.stats().side_run_scans;
    assert!(served > 0, "no scan read the side run");
    // A flush: a new view, the run stale until built again.
    t.put(key(2), [7]).unwrap();
    model.insert(key(2), vec![7]);
    t.flush().unwrap();
    scan_from_every_start(&t, &model);
    assert_eq!(t.stats().side_run_scans, served, "a stale run was read");
    assert!(t.build_side_run());
    assert_eq!(t.stats().side_run_cells, 7); // both side segments' cells, merged
    scan_from_every_start(&t, &model);
    assert!(t.stats().side_run_scans > served);
    // Too small a budget, then none at all: no run, the same answers.
    for budget in [100, 0] {
        let mut c = (*t.config()).clone();
        c.side_run_bytes = budget;
        store.set_table_config("t", c).unwrap();
        assert!(!t.build_side_run(), "a run within {budget} bytes");
        assert_eq!(t.stats().side_run_bytes, 0);
        scan_from_every_start(&t, &model);
    }
}

/// A run is built when a scan asks: `compact_pending` builds none before the table is
/// scanned, and one after a scan met the segment beside its chain; with background
/// compaction, the round that scan schedules builds it.
#[test]
fn a_scan_beside_the_chain_asks_for_a_side_run() {
    let piece = |r: std::ops::Range<u8>| -> BTreeMap<u8, u8> { r.map(|k| (k, k)).collect() };
    for background in [false, true] {
        // Key 5 in a segment beside the chain, key 7 in the memtable.
        let ops = [Op::Put(5, 1), Op::Put(7, 3)];
        let (_dir, store, t, model) = build(&[piece(0..40)], &ops, 1, FORMAT);
        if background {
            let mut c = (*t.config()).clone();
            c.background_compaction = true;
            store.set_table_config("t", c).unwrap();
        } else {
            t.compact_pending().unwrap();
            assert_eq!(t.stats().side_run_bytes, 0, "built before any scan");
        }
        let scan_from_4 = || {
            let from_4 = (Bound::Included(key(4)), Bound::Unbounded);
            check(&t, &model, from_4, &[Step::Next; 3]).unwrap();
        };
        scan_from_4();
        if background {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while t.stats().side_run_bytes == 0 {
                assert!(std::time::Instant::now() < deadline, "no side run built");
                std::thread::yield_now();
            }
        } else {
            t.compact_pending().unwrap();
        }
        assert_eq!(t.stats().side_run_cells, 1);
        scan_from_4();
        assert_eq!(t.stats().side_run_scans, 1);
    }
}

/// A table whose scans read its side run gets one built ahead of its scans after each
/// flush, for `side_run::INTEREST` (8) views; then, unscanned, no more until a scan
/// asks again.
#[test]
fn a_scanned_table_gets_its_side_run_ahead_of_its_scans() {
    let (_dir, store, t) = open_table(FORMAT);
    // Level 0 stays beside level 1 here: no merge at a count of flushes, and level 1's
    // 80 KB are more than these scans' seeks pay for.
    let mut c = (*t.config()).clone();
    c.compaction.l0_trigger = 100;
    store.set_table_config("t", c).unwrap();
    let mut model = Model::new();
    for k in 0..40 {
        t.put(key(k), vec![k; 2000]).unwrap();
        model.insert(key(k), vec![k; 2000]);
    }
    t.flush().unwrap();
    t.compact().unwrap();
    // Key 5 in a level 0 segment, key 7 in the memtable.
    for k in [5, 7] {
        t.put(key(k), [k, 1]).unwrap();
        model.insert(key(k), vec![k, 1]);
        if k == 5 {
            t.flush().unwrap();
        }
    }
    let from_4 = (Bound::Included(key(4)), Bound::Unbounded);
    check(&t, &model, from_4.clone(), &[Step::Next; 3]).unwrap();
    t.compact_pending().unwrap();
    check(&t, &model, from_4.clone(), &[Step::Next; 3]).unwrap();
    assert_eq!(t.stats().side_run_scans, 1);
    let flush = |k: u8, model: &mut Model| {
        t.put(key(k), [k, 1]).unwrap();
        model.insert(key(k), vec![k, 1]);
        t.flush().unwrap();
        t.compact_pending().unwrap();
    };
    for k in 10..18 {
        flush(k, &mut model);
        let st = t.stats();
        assert!(
            st.side_run_bytes > 0,
            "no run ahead of the scans after key {k}"
        );
        assert_eq!(st.side_run_cells, u64::from(k) - 7); // keys 5 and 10..=k
    }
    flush(18, &mut model);
    assert_eq!(
        t.stats().side_run_bytes,
        0,
        "a run built for a ninth view unscanned"
    );
    // A scan asks again; it is read once built.
    check(&t, &model, from_4.clone(), &[Step::Next; 3]).unwrap();
    t.compact_pending().unwrap();
    assert_eq!(t.stats().side_run_cells, 11); // keys 5, 7 and 10..=18
    check(&t, &model, from_4, &[Step::Next; 3]).unwrap();
    assert_eq!(t.stats().side_run_scans, 2);
}

/// A store (no background compaction) whose side runs may hold `mb` MiB together.
fn budget_store(mb: u64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.table.background_compaction = false;
    config.memory.side_run_mb = mb;
    let store = Store::open(dir.path(), config).unwrap();
    (dir, store)
}

/// The first `n` rows of a scan of `t` from `from`.
fn first_rows(t: &Table, from: Vec<u8>, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let scan = t.scan(from..).unwrap();
    scan.take(n).map(|r| r.unwrap()).collect()
}

fn name(k: u32) -> Vec<u8> {
    format!("k{k:05}").into_bytes()
}

/// Table `table` of `store`: 8,000 keys in one segment, then 5,000 of them again
/// beside it (a run of some 550 KB: 5,000 cells of 70 bytes and 40 of bookkeeping).
fn two_segments(store: &Store, table: &str) -> Arc<Table> {
    let t = store.table(table).unwrap();
    for (round, keys) in [(0u8, 8_000), (1, 5_000)] {
        let mut b = WriteBatch::new();
        for k in 0..keys {
            b.put(name(k), [round; 64]);
        }
        t.write(&b).unwrap();
        t.flush().unwrap();
    }
    t
}

/// A run whose side segments fail to read is not built, through either path (one side
/// segment, pushed as its walk lends it; two, through a merge): the scans read the
/// segments instead and report the corruption, not rows of a partial run.
#[test]
fn a_side_segment_that_fails_to_read_gets_no_run() {
    for sides in [1u32, 2] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = common::test_config(
            segstore::DiskAccessMode::Standard,
            segstore::FileRules::posix(),
        );
        config.table.background_compaction = false;
        chain_and_sides(dir.path(), &config, sides);
        // The smallest data file damaged: a side segment's.
        let files = data_files(dir.path());
        damage(
            files
                .iter()
                .min_by_key(|p| std::fs::metadata(p).unwrap().len())
                .unwrap(),
        );
        let store = Store::open(dir.path(), config).unwrap();
        let t = store.table("t").unwrap();
        assert_eq!(t.stats().segments, 1 + sides as usize);
        assert!(
            !t.build_side_run(),
            "{sides} side segment(s): a run was built"
        );
        assert_eq!(t.stats().side_run_bytes, 0);
        let error = t.scan(..).unwrap().find_map(|r| r.err());
        assert!(
            error.as_ref().is_some_and(|e| e.is_corrupt()),
            "{sides} side segment(s): {error:?}"
        );
    }
}

/// Table `t` in a store at `dir`, closed: a segment of 8,000 keys (the chain), then
/// `sides` segments of 2,000 of them each beside it.
fn chain_and_sides(dir: &std::path::Path, config: &Config, sides: u32) {
    let store = Store::open(dir, config.clone()).unwrap();
    let t = store.table("t").unwrap();
    let rounds = std::iter::once(8_000).chain((0..sides).map(|_| 2_000));
    for (round, keys) in (0u32..).zip(rounds) {
        let mut b = WriteBatch::new();
        for k in 0..keys {
            b.put(name(k * (round + 1)), [round as u8; 64]);
        }
        t.write(&b).unwrap();
        t.flush().unwrap();
    }
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// Every table's side runs share the store's budget (`memory.side_run_mb`): a second
/// table's run that does not fit in what the first's left is not built (its scans read
/// the segments, with the same rows), and is built at its next view once the first's
/// is gone; the store's stats show the bytes the runs hold and the run refused (not a
/// table with no segment beside its chain).
#[test]
fn side_runs_share_the_stores_budget() {
    // Two runs of some 550 KB each: one fits in 1 MiB, not both.
    let (_dir, store) = budget_store(1);
    let (a, b) = (two_segments(&store, "a"), two_segments(&store, "b"));
    assert!(a.build_side_run());
    let held = a.stats().side_run_bytes;
    assert!(
        (512 << 10..1 << 20).contains(&held),
        "a run of {held} bytes"
    );
    assert_eq!(store.stats().side_runs.held_bytes, held);
    assert!(!b.build_side_run(), "b's run was built beside a's");
    let s = store.stats().side_runs;
    assert_eq!((s.limit_bytes, s.held_bytes, s.refused), (1 << 20, held, 1));
    // b's scans read its segments: each key's newer cell, across the two segments' end.
    let rows_of_b = || first_rows(&b, name(4_998), 4);
    let want: Vec<(Vec<u8>, Vec<u8>)> = (4_998..5_002)
        .map(|k| (name(k), vec![u8::from(k < 5_000); 64]))
        .collect();
    assert_eq!(rows_of_b(), want);
    assert_eq!(b.stats().side_run_scans, 0);
    // A table with nothing beside its chain builds nothing, and is not a refusal.
    let c = store.table("c").unwrap();
    c.put(name(1), [1]).unwrap();
    c.flush().unwrap();
    assert!(!c.build_side_run());
    assert_eq!(store.stats().side_runs.refused, 1);
    // a's run goes with its setting at 0; b's next view gets one.
    let mut none = (*a.config()).clone();
    none.side_run_bytes = 0;
    store.set_table_config("a", none).unwrap();
    assert!(!a.build_side_run());
    assert_eq!(store.stats().side_runs.held_bytes, 0);
    b.put(name(9_000), [2]).unwrap();
    b.flush().unwrap();
    assert!(b.build_side_run());
    // The new key lies past the first segment's: its segment follows that one in its
    // chain, and the run holds the second segment's cells alone.
    assert_eq!(b.stats().side_run_cells, 5_000);
    assert_eq!(store.stats().side_runs.held_bytes, b.stats().side_run_bytes);
    assert_eq!(rows_of_b(), want);
    assert_eq!(b.stats().side_run_scans, 1);
}

/// A store budget of 0 keeps no side run, and its tables' scans ask for none: nothing
/// is built or refused, and scans read the segments.
#[test]
fn a_store_budget_of_zero_keeps_no_side_run() {
    let (_dir, store) = budget_store(0);
    let t = two_segments(&store, "t");
    assert!(!t.build_side_run());
    let rows = first_rows(&t, name(4_999), 2);
    assert_eq!(
        rows,
        [(name(4_999), vec![1; 64]), (name(5_000), vec![0; 64])]
    );
    t.compact_pending().unwrap();
    let (s, ts) = (store.stats().side_runs, t.stats());
    assert_eq!((s.limit_bytes, s.held_bytes, s.refused), (0, 0, 0));
    assert_eq!((ts.side_run_bytes, ts.side_run_scans), (0, 0));
}

/// "After an error the scan is done": a forward scan that meets a damaged block returns
/// the error, and a step back or a seek afterwards yields nothing, whichever source the
/// scan had: the sole segment (nothing else in the table), the overlay (a memtable key
/// beside it, turned into the general merge by the step back or seek) or the general
/// merge (a range delete in the memtable). The overlay's turned into a new merge over
/// the same picture, which yielded rows again.
#[test]
fn a_scan_stays_done_after_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config(
        segstore::DiskAccessMode::Standard,
        segstore::FileRules::posix(),
    );
    config.segment.format_version = 5;
    config.segment.data_block_size = 200;
    config.table.background_compaction = false;
    let numbered = |i: u32| format!("key{i:05}").into_bytes();
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..2000 {
            t.put(numbered(i), b"value-value").unwrap();
        }
        t.flush().unwrap();
        drop(t);
        assert!(store.close().unwrap().is_clean());
    }
    // The one data file damaged: a block's checksum fails.
    damage(&data_files(dir.path())[0]);
    let store = Store::open(dir.path(), config).unwrap();
    let t = store.table("t").unwrap();
    for source in ["sole segment", "overlay", "merge"] {
        match source {
            "overlay" => t.put(numbered(10), b"new").unwrap(),
            "merge" => {
                t.delete_range(numbered(5000)..numbered(5001)).unwrap();
            }
            _ => {}
        }
        for then in ["next_back", "seek"] {
            let mut scan = t.scan(..).unwrap();
            let mut rows = 0;
            let error = loop {
                match scan.next() {
                    Some(Ok(_)) => rows += 1,
                    Some(Err(e)) => break e,
                    None => panic!("{source}: no error after {rows} rows"),
                }
            };
            assert!(error.is_corrupt(), "{source}: {error}");
            assert!(scan.next().is_none(), "{source}: a step after the error");
            let after = match then {
                "next_back" => scan.next_back(),
                _ => {
                    scan.seek(numbered(0));
                    scan.next()
                }
            };
            assert!(
                after.is_none(),
                "{source}, {then} after the error: {after:?}"
            );
        }
    }
}

/// The segment data files in `dir`.
fn data_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let files = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
    files
        .filter(|p| p.to_string_lossy().ends_with("-Data.db"))
        .collect()
}

/// One byte of `data` flipped three quarters in: the checksum of the block there fails.
#[allow(clippy::disallowed_methods)] // damages a segment file on purpose
fn damage(data: &std::path::Path) {
    let mut bytes = std::fs::read(data).unwrap();
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x55;
    std::fs::write(data, &bytes).unwrap();
}
