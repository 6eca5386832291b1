//! Leveled compaction (`table::leveled`) on real tables: outputs cut at the target
//! size, levels disjoint and kept across a reopen and a checkpoint, range tombstones
//! split between output segments; a flush never waiting behind a long merge (the
//! compaction pool); a rate-limited compaction abandoned by a close rather than waited
//! for.

mod common;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use segstore::{
    CompactionStrategy, Config, DiskAccessMode, Error, FileRules, FilterDecision, Store,
    TableConfig,
};

/// A failing test's deadline for an event, so a regression fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);

fn config() -> Config {
    let mut c = common::test_config(DiskAccessMode::Mmap, FileRules::posix());
    c.table = TableConfig::default();
    c.table.background_compaction = false;
    c
}

/// Leveled, segments of 4 KiB, level 1 of 16 KiB, each level 4 times the last.
fn leveled() -> TableConfig {
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.target_segment_size = 4096;
    t.compaction.base_level_size = 16 * 1024;
    t.compaction.level_multiplier = 4;
    t.compaction.l0_trigger = 2;
    t
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("{round:04}-{}", "v".repeat(90 + (i % 7) as usize)).into_bytes()
}

#[test]
fn leveled_outputs_are_cut_at_the_target_and_levels_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), config()).unwrap();
    let t = s.table_with("t", leveled()).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut rounds = 0;
    for round in 0..12u32 {
        // Each flush overwrites a stripe of keys and adds new ones.
        for i in (round * 97 % 400)..(round * 97 % 400 + 250) {
            t.put(key(i), value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        t.flush().unwrap();
        rounds += t.compact_pending().unwrap();
        let layout = common::check_levels(&s.segments("t").unwrap());
        for (level, id, bytes) in &layout {
            // A cut comes after the cell that reaches the target: one cell over at most.
            assert!(
                *level == 0 || *bytes <= 4096 + 200,
                "segment {id} of level {level} holds {bytes} bytes"
            );
        }
    }
    assert!(rounds >= 6, "only {rounds} compactions");
    t.delete_range(key(100)..key(300)).unwrap();
    for i in 100..300 {
        model.remove(&key(i));
    }
    for round in 12..16u32 {
        for i in (round * 61 % 300)..(round * 61 % 300 + 120) {
            t.put(key(i), value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        t.flush().unwrap();
        t.compact_pending().unwrap();
    }
    let layout = common::check_levels(&s.segments("t").unwrap());
    let deepest = layout.iter().map(|l| l.0).max().unwrap();
    assert!(deepest >= 2, "{layout:?}");
    assert!(
        layout.iter().filter(|l| l.0 == deepest).count() >= 2,
        "{layout:?}"
    );
    let check = |t: &segstore::Table| {
        let got: Vec<(Vec<u8>, Vec<u8>)> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got, want);
        for i in (0..700).step_by(7) {
            assert_eq!(
                t.get(key(i)).unwrap().map(|v| v.to_vec()),
                model.get(&key(i)).cloned()
            );
        }
    };
    check(&t);
    let levels = t.segment_levels();
    assert!(levels.iter().any(|l| l.1 >= 2), "{levels:?}");
    // A checkpoint keeps the levels too.
    let copy = tempfile::tempdir().unwrap();
    let dest = copy.path().join("store");
    s.checkpoint(&dest).unwrap();
    {
        let c = Store::open(&dest, config()).unwrap();
        assert_eq!(c.table("t").unwrap().segment_levels(), levels);
        assert!(c.close().unwrap().is_clean());
    }
    drop(t);
    assert!(s.close().unwrap().is_clean());
    let s = Store::open(tmp.path(), config()).unwrap();
    let t = s.table("t").unwrap();
    assert_eq!(t.config().compaction.strategy, CompactionStrategy::Leveled);
    assert_eq!(t.segment_levels(), levels, "levels survive a reopen");
    check(&t);
    // A major compaction puts everything in one level, still cut at the target.
    t.compact().unwrap();
    let layout = common::check_levels(&s.segments("t").unwrap());
    let level = layout[0].0;
    assert!(level >= deepest, "{layout:?}");
    assert!(
        layout.iter().all(|l| l.0 == level && l.2 <= 4096 + 200),
        "{layout:?}"
    );
    assert!(layout.len() >= 3, "{layout:?}");
    check(&t);
    drop(t);
    assert!(s.close().unwrap().is_clean());
}

/// The compaction filter of `t` signals `entered` at its first cell, then waits for
/// `release`: a merge as long as the test wants.
fn blocking_filter(t: &segstore::Table) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let state = Mutex::new(Some((entered_tx, release_rx)));
    t.set_compaction_filter(Some(Arc::new(
        move |_: &str, _: &[u8], _: &[u8], _: u64| {
            if let Some((tx, rx)) = state.lock().unwrap().take() {
                tx.send(()).unwrap();
                let _ = rx.recv();
            }
            FilterDecision::Keep
        },
    )));
    (entered, release)
}

#[test]
fn a_flush_does_not_wait_behind_a_long_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = FileRules::posix().with_faults(segstore::io::faults::Faults::new());
    let mut c = common::test_config(DiskAccessMode::Mmap, rules.clone());
    c.table = TableConfig::default();
    c.compaction_threads = 1;
    let s = Store::open(tmp.path(), c).unwrap();
    let mut own = TableConfig::default();
    own.memtable_flush_bytes = 4096;
    // Size-tiered at two segments: a compaction after the second flush.
    own.compaction.strategy = CompactionStrategy::SizeTiered;
    own.compaction.min_threshold = 2;
    let t = s.table_with("t", own).unwrap();
    let (entered, release) = blocking_filter(&t);
    for round in 0..2 {
        for i in 0..10 {
            t.put(key(i), value(i, round)).unwrap();
        }
        t.flush().unwrap();
    }
    // Two segments: the background compaction starts and blocks in the filter, before
    // its view swap; from here on every swap of the set's view is a flush's.
    entered
        .recv_timeout(DEADLINE)
        .expect("no background compaction");
    let points = rules.faults().unwrap().points();
    let swaps = points.count("set swaps its view");
    // Past the flush size: the writes queue a background flush.
    for i in 0..100 {
        t.put(key(1000 + i), value(i, 9)).unwrap();
    }
    // Panics after two minutes: the flush waited behind the compaction.
    points.wait_for("set swaps its view", swaps + 1);
    release.send(()).unwrap();
    s.tables().wait_idle();
    assert!(t.stats().flushes >= 3);
    assert!(t.stats().compactions >= 1);
    for i in 0..100 {
        assert_eq!(t.get(key(1000 + i)).unwrap().unwrap().to_vec(), value(i, 9));
    }
    drop(t);
    assert!(s.close().unwrap().is_clean());
}

#[test]
fn a_close_abandons_a_rate_limited_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(tmp.path(), config()).unwrap());
    let mut own = leveled();
    // 50 KB at 10 bytes a second: hours.
    own.compaction.write_bytes_per_sec = 10;
    let t = s.table_with("t", own).unwrap();
    for round in 0..2 {
        for i in 0..250 {
            t.put(key(i), value(i, round)).unwrap();
        }
        t.flush().unwrap();
    }
    let (entered_tx, entered) = mpsc::channel();
    let entered_tx = Mutex::new(Some(entered_tx));
    t.set_compaction_filter(Some(Arc::new(
        move |_: &str, _: &[u8], _: &[u8], _: u64| {
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            FilterDecision::Keep
        },
    )));
    let compaction = {
        let t = Arc::clone(&t);
        std::thread::spawn(move || t.compact_pending())
    };
    entered
        .recv_timeout(DEADLINE)
        .expect("the compaction did not start");
    let (closed_tx, closed) = mpsc::channel();
    let closer = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || closed_tx.send(s.close().map(|r| r.is_clean())).unwrap())
    };
    let closed = closed
        .recv_timeout(DEADLINE)
        .expect("close waited for the paced compaction");
    assert!(closed.unwrap());
    closer.join().unwrap();
    assert!(matches!(compaction.join().unwrap(), Err(Error::Closed)));
    drop(t);
    drop(s);
    // Nothing was replaced: both flushed segments, every cell, no orphan outputs.
    let s = Store::open(tmp.path(), config()).unwrap();
    let t = s.table("t").unwrap();
    assert_eq!(t.stats().segments, 2);
    assert_eq!(t.scan(..).unwrap().count(), 250);
    let files = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".db")
        })
        .count();
    let per_segment = segstore::segment::Component::ALL.len();
    assert_eq!(
        files,
        2 * per_segment,
        "outputs of the abandoned compaction left"
    );
}

/// A leveled table of 2,000 keys in level 1 (level 1 holds it whole) under one level
/// 0 segment updating every tenth key of the first half; and its model.
fn level_0_over_level_1(s: &Store) -> (Arc<segstore::Table>, BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut tc = leveled();
    tc.compaction.l0_trigger = 4;
    tc.compaction.base_level_size = 1 << 20;
    let t = s.table_with("t", tc).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..2_000 {
        t.put(key(i), value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
        if i == 999 {
            t.flush().unwrap(); // two segments, so the major compaction merges them
        }
    }
    t.compact().unwrap();
    for i in (0..1_000).step_by(10) {
        t.put(key(i), value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    t.flush().unwrap();
    let levels = t.segment_levels();
    assert_eq!(levels.iter().filter(|l| l.1 == 0).count(), 1, "{levels:?}");
    (t, model)
}

/// The bytes of level 0's merge into level 1 in `t` (newest segment first: the
/// level 0 one): it and the level 1 segments its span overlaps.
fn level_0_merge_bytes(t: &segstore::Table) -> u64 {
    let view = t.segments().view();
    let l0_max = &view.segments[0].stats().max_key;
    view.segments
        .iter()
        .filter(|h| h.stats().min_key <= *l0_max)
        .map(|h| h.stats().data_len)
        .sum()
}

/// The level 0 segments of `t`.
fn level_0_segments(t: &segstore::Table) -> usize {
    t.segment_levels().iter().filter(|l| l.1 == 0).count()
}

/// A scan of 20 rows from `key(from)` in `t` answers as `model` does.
fn check_scan(t: &segstore::Table, model: &BTreeMap<Vec<u8>, Vec<u8>>, from: u32) {
    let got: Vec<_> = t
        .scan(key(from)..)
        .unwrap()
        .take(20)
        .map(|r| r.unwrap())
        .collect();
    let want: Vec<_> = model
        .range(key(from)..)
        .take(20)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got, want, "scan from {from}");
}

/// Leveled compaction's rule for reads: scans that seek into level 0 (beside level 1's
/// chain) merge it into level 1 below `l0_trigger`, once their seeks, at
/// `SCAN_SEEK_BYTES` each, come to the merge's bytes, and not one seek sooner; scans
/// whose range level 0 misses count nothing. Every scan answers as the model does.
#[test]
fn scans_seeking_into_level_0_merge_it_once_they_have_paid_for_the_merge() {
    use segstore::table::leveled::SCAN_SEEK_BYTES;
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), config()).unwrap();
    let (t, model) = level_0_over_level_1(&s);
    assert_eq!(
        t.compact_pending().unwrap(),
        0,
        "one level 0 segment: below the trigger"
    );
    let seeks = level_0_merge_bytes(&t).div_ceil(SCAN_SEEK_BYTES);
    let scan = |from: u32| check_scan(&t, &model, from);
    // Scans of the second half: level 0 ends below them; they count nothing.
    for n in 0..seeks {
        scan(1_100 + (n % 800) as u32);
    }
    assert_eq!(
        t.stats().scan_seeks,
        0,
        "scans level 0 misses count nothing"
    );
    assert_eq!(t.compact_pending().unwrap(), 0);
    // Scans of the first half each seek into the level 0 segment.
    for n in 0..seeks - 1 {
        scan((n % 900) as u32);
    }
    assert_eq!(t.stats().scan_seeks, seeks - 1);
    assert_eq!(
        t.compact_pending().unwrap(),
        0,
        "one seek short of the merge"
    );
    scan(0);
    assert_eq!(t.compact_pending().unwrap(), 1, "paid for: level 0 merges");
    assert_eq!(t.stats().scan_seeks, 0, "the merge pays the seeks off");
    let levels = t.segment_levels();
    assert!(levels.iter().all(|l| l.1 == 1), "{levels:?}");
    for from in [0, 5, 995, 1_990] {
        scan(from);
    }
    drop(t);
    s.close().unwrap();
}

/// The rule for reads with two level 0 segments: scans that seek into both merge them
/// into one level 0 segment once the seeks that merge saves (one of each scan's two)
/// come to level 0's bytes, and not one seek sooner, well before they would pay for
/// the merge into level 1. The merged segment holds both flushes, so each seek into it
/// counts twice toward that merge, and the seeks counted before are kept, halved.
/// Every scan answers as the model does.
#[test]
fn scans_seeking_into_two_level_0_segments_merge_them_into_one() {
    use segstore::table::leveled::SCAN_SEEK_BYTES;
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), config()).unwrap();
    let (t, mut model) = level_0_over_level_1(&s);
    for i in (5..1_000).step_by(10) {
        t.put(key(i), value(i, 2)).unwrap();
        model.insert(key(i), value(i, 2));
    }
    t.flush().unwrap();
    assert_eq!(
        t.compact_pending().unwrap(),
        0,
        "two flushes: below the trigger"
    );
    assert_eq!(level_0_segments(&t), 2);
    let view = t.segments().view();
    let l0_bytes: u64 = view.segments[..2].iter().map(|h| h.stats().data_len).sum();
    let all_bytes: u64 = view.segments.iter().map(|h| h.stats().data_len).sum();
    drop(view);
    // Each scan of the first half seeks into both: two seeks, one of them saved.
    let scans = l0_bytes.div_ceil(SCAN_SEEK_BYTES);
    assert!(
        2 * scans * SCAN_SEEK_BYTES < all_bytes,
        "{all_bytes}: short of the merge into level 1"
    );
    let scan = |from: u32| check_scan(&t, &model, from);
    for n in 0..scans - 1 {
        scan((n % 900) as u32);
    }
    assert_eq!(t.stats().scan_seeks, 2 * (scans - 1));
    assert_eq!(t.compact_pending().unwrap(), 0, "one scan short");
    scan(0);
    assert_eq!(t.compact_pending().unwrap(), 1, "paid for: level 0 merges");
    // Kept, counted per seek into the one segment: half as many.
    assert_eq!(t.stats().scan_seeks, scans);
    assert_eq!(level_0_segments(&t), 1, "{:?}", t.segment_levels());
    for from in [0, 5, 995, 1_990] {
        scan(from);
    }
    // The merged segment holds two flushes: each seek into it counts twice toward
    // level 0's merge into level 1 (the scans above that reached level 0 count
    // already).
    let seeks = level_0_merge_bytes(&t).div_ceil(2 * SCAN_SEEK_BYTES);
    for n in t.stats().scan_seeks..seeks - 1 {
        scan((n % 900) as u32);
    }
    assert_eq!(t.stats().scan_seeks, seeks - 1);
    assert_eq!(t.compact_pending().unwrap(), 0, "one seek short");
    scan(0);
    assert_eq!(t.compact_pending().unwrap(), 1, "into level 1");
    assert_eq!(level_0_segments(&t), 0, "{:?}", t.segment_levels());
    let got: BTreeMap<Vec<u8>, Vec<u8>> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got, model);
    drop(t);
    s.close().unwrap();
}

/// `l0_merge_bytes`: a second level 0 segment merges level 0 into one (every read
/// answering as the model does), the merged segment counts the flushes it holds
/// toward `l0_trigger`, and with 0 level 0 keeps a segment per flush as before.
#[test]
fn level_0_merges_into_one_segment_and_counts_its_flushes() {
    for merge in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let s = Store::open(tmp.path(), config()).unwrap();
        let mut tc = leveled();
        tc.compaction.l0_trigger = 4;
        tc.compaction.base_level_size = 1 << 20;
        tc.compaction.l0_merge_bytes = if merge { 1 << 20 } else { 0 };
        let t = s.table_with("t", tc).unwrap();
        let mut model = BTreeMap::new();
        for flush in 1..=4u32 {
            for i in (flush * 37..2_000).step_by(5) {
                t.put(key(i), value(i, flush)).unwrap();
                model.insert(key(i), value(i, flush));
            }
            t.flush().unwrap();
            let rounds = t.compact_pending().unwrap();
            let (want_l0, want_rounds) = match (merge, flush) {
                (_, 4) => (0, 1),              // four flushes: into level 1
                (true, 1) => (1, 0),           // one segment: nothing to merge
                (true, _) => (1, 1),           // merged into one
                (false, n) => (n as usize, 0), // a segment per flush
            };
            assert_eq!(
                level_0_segments(&t),
                want_l0,
                "merge {merge}, flush {flush}"
            );
            assert_eq!(rounds, want_rounds, "merge {merge}, flush {flush}");
            let got: BTreeMap<Vec<u8>, Vec<u8>> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(got, model, "merge {merge}, flush {flush}");
            for i in (0..2_000).step_by(97) {
                assert_eq!(
                    t.get(key(i)).unwrap().map(|v| v.to_vec()),
                    model.get(&key(i)).cloned()
                );
            }
        }
        common::check_levels(&s.segments("t").unwrap());
    }
}

/// The flushes a merged level 0 segment holds are not kept across a reopen: it then
/// counts as one, so level 0 takes flushes up to `l0_trigger` again before it merges
/// into level 1 (as documented on `CompactionConfig::l0_trigger`); reads answer as
/// the model does throughout.
#[test]
fn after_a_reopen_a_merged_level_0_segment_counts_as_one_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let mut tc = leveled();
    tc.compaction.l0_trigger = 3;
    tc.compaction.base_level_size = 1 << 20;
    tc.compaction.l0_merge_bytes = 1 << 20;
    let mut model = BTreeMap::new();
    let mut write = |t: &segstore::Table, round: u32| {
        for i in (round * 13..1_500).step_by(7) {
            t.put(key(i), value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        t.flush().unwrap();
        t.compact_pending().unwrap();
    };
    {
        let s = Store::open(tmp.path(), config()).unwrap();
        let t = s.table_with("t", tc.clone()).unwrap();
        write(&t, 1);
        write(&t, 2);
        assert_eq!(
            level_0_segments(&t),
            1,
            "two flushes merged into one level 0 segment"
        );
        s.close().unwrap();
    }
    let s = Store::open(tmp.path(), config()).unwrap();
    let t = s.table_with("t", tc).unwrap();
    write(&t, 3);
    // Held in memory, the merged segment's two flushes and this one would make the
    // trigger (3); counted as one, they merge into level 0 again.
    assert_eq!(level_0_segments(&t), 1, "merged again into level 0");
    write(&t, 4);
    assert_eq!(
        level_0_segments(&t),
        0,
        "three flushes by the count: into level 1"
    );
    let got: BTreeMap<Vec<u8>, Vec<u8>> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got, model);
}

/// Keys written in ascending order flush into segments that overlap nothing below
/// them: leveled compaction moves them down by a manifest edit, rewriting nothing,
/// and their levels survive a reopen; a flush over keys already below is merged.
#[test]
fn segments_of_ascending_keys_move_down_without_a_rewrite() {
    let tmp = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let rows = |t: &segstore::Table| -> BTreeMap<Vec<u8>, Vec<u8>> {
        t.scan(..).unwrap().map(|r| r.unwrap()).collect()
    };
    let levels = {
        let s = Store::open(tmp.path(), config()).unwrap();
        let t = s.table_with("t", leveled()).unwrap();
        for flush in 0..6u32 {
            for i in flush * 100..(flush + 1) * 100 {
                t.put(key(i), value(i, 0)).unwrap();
                model.insert(key(i), value(i, 0));
            }
            t.flush().unwrap();
            t.compact_pending().unwrap();
        }
        let st = t.stats();
        assert_eq!((st.flushes, st.segments), (6, 6), "{st:?}");
        assert_eq!(
            (st.compactions, st.compaction_bytes),
            (0, 0),
            "nothing rewritten: {st:?}"
        );
        let levels = t.segment_levels();
        assert!(levels.iter().all(|&(_, l)| l >= 1), "{levels:?}");
        assert!(
            levels.iter().any(|&(_, l)| l >= 2),
            "pushed past level 1: {levels:?}"
        );
        // Each segment moved once per level it went down.
        assert_eq!(
            st.moves,
            levels.iter().map(|&(_, l)| u64::from(l)).sum::<u64>()
        );
        assert_eq!(rows(&t), model);
        s.close().unwrap();
        levels
    };
    let s = Store::open(tmp.path(), config()).unwrap();
    let t = s.table_with("t", leveled()).unwrap();
    assert_eq!(t.segment_levels(), levels, "levels kept across a reopen");
    assert_eq!(rows(&t), model);
    // Keys already below: a flush of them overlaps, and merges.
    for i in 0..50 {
        t.put(key(i), value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    t.flush().unwrap();
    t.put(key(5000), value(5000, 1)).unwrap();
    model.insert(key(5000), value(5000, 1));
    t.flush().unwrap();
    t.compact_pending().unwrap();
    let st = t.stats();
    assert!(st.compactions >= 1 && st.compaction_bytes > 0, "{st:?}");
    assert_eq!(rows(&t), model);
}

/// A table with a compaction filter rewrites what it could have moved: the filter sees
/// every cell its compactions write.
#[test]
fn a_compaction_filter_sees_the_cells_of_segments_that_could_have_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), config()).unwrap();
    let t = s.table_with("t", leveled()).unwrap();
    let seen = Arc::new(Mutex::new(0u32));
    let count = Arc::clone(&seen);
    t.set_compaction_filter(Some(Arc::new(
        move |_: &str, _: &[u8], _: &[u8], _: u64| {
            *count.lock().unwrap() += 1;
            FilterDecision::Keep
        },
    )));
    for flush in 0..2u32 {
        for i in flush * 100..(flush + 1) * 100 {
            t.put(key(i), value(i, 0)).unwrap();
        }
        t.flush().unwrap();
    }
    t.compact_pending().unwrap();
    let st = t.stats();
    assert_eq!(st.moves, 0, "{st:?}");
    assert!(st.compactions >= 1, "{st:?}");
    assert!(
        *seen.lock().unwrap() >= 200,
        "the filter saw both flushes' cells"
    );
}
