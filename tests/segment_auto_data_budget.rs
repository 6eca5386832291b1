//! `auto`'s data rule (issue 19 item 4; `src/config.rs` module docs, `io::data_budget`):
//! `auto` maps a data file while the data it has mapped in the process, that file
//! included, fits in the data map budget (`memory.auto_data_map_percent` of the memory
//! available to the process), reads it with positional reads otherwise, and gives the
//! bytes back when the reader goes. The other modes ignore the budget. Under the
//! Windows rules a mapped data file is never deleted (invariant 1), snapshot links
//! included.

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use common::{write_segment, Cell, Model};
use segstore::memory::{DataMapBudget, MapBudget};
use segstore::segment::{ReaderOptions, SegmentName, SegmentReader};
use segstore::{AccessMode, DiskAccessMode, FileRules, SegmentOptions, Store};

/// The mapped bytes are counted process-wide: the tests of this file must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn model() -> Model {
    (0..500u32)
        .map(|i| {
            let k = format!("key{i:05}").into_bytes();
            (k, Cell::live(format!("value {i}").as_bytes(), i as u64 + 1))
        })
        .collect()
}

/// A directory holding one segment of [`model`]: the directory, the segment's name, the
/// model, and the length of its data file.
struct Written {
    dir: tempfile::TempDir,
    name: SegmentName,
    model: Model,
    data_len: u64,
}

fn written() -> Written {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("t", 1).unwrap();
    let model = model();
    let data_len = write_segment(dir.path(), &name, &SegmentOptions::default(), &model).data_len;
    Written {
        dir,
        name,
        model,
        data_len,
    }
}

/// Every key of `m` reads back from `r`.
fn reads_all(r: &SegmentReader, m: &Model) {
    for (k, c) in m {
        let e = r.get(k).unwrap().unwrap_or_else(|| panic!("{k:?} missing"));
        assert_eq!(e.value, c.value);
    }
}

fn auto_data_map_supported() -> bool {
    // `auto` maps nothing on 32-bit targets, data included.
    DiskAccessMode::Auto.resolve().index == AccessMode::Mmap
}

#[test]
fn auto_maps_data_that_fits_and_reads_the_rest_with_positional_reads() {
    if !auto_data_map_supported() {
        println!("SKIP: auto maps nothing on this target");
        return;
    }
    let _g = serial();
    let Written {
        dir,
        name,
        model: m,
        data_len: len,
    } = written();
    // Room for exactly one data file.
    let budget = Arc::new(DataMapBudget::with_limit(len));
    assert_eq!(
        budget.stats().mapped_bytes,
        0,
        "nothing else maps data here"
    );
    let mut opts = ReaderOptions::default();
    opts.data_budget = Some(budget.clone());
    let auto = DiskAccessMode::Auto.resolve();

    let first = SegmentReader::open_with(dir.path(), &name, auto, &opts).unwrap();
    assert_eq!(first.modes(), (AccessMode::Mmap, AccessMode::Mmap));
    assert_eq!(first.residency().data, AccessMode::Mmap);
    assert_eq!(
        first.residency().requested,
        auto,
        "what was asked stays as resolved"
    );
    assert!(!first.residency().data_budget_fallback);
    assert_eq!(first.mapped_files().count(), 2);
    assert_eq!(budget.stats().mapped_bytes, len);

    let second = SegmentReader::open_with(dir.path(), &name, auto, &opts).unwrap();
    assert_eq!(second.modes(), (AccessMode::Standard, AccessMode::Mmap));
    assert!(second.residency().data_budget_fallback);
    let note = second.residency().notes.join("\n");
    assert!(note.contains("auto_data_map_percent"), "{note}");
    assert_eq!(budget.stats().fallbacks, 1);
    assert_eq!(
        budget.stats().mapped_bytes,
        len,
        "a fallback reserves nothing"
    );
    reads_all(&first, &m);
    reads_all(&second, &m);

    // The bytes go with the reader that mapped them: the next open maps again.
    drop(first);
    assert_eq!(budget.stats().mapped_bytes, 0);
    let third = SegmentReader::open_with(dir.path(), &name, auto, &opts).unwrap();
    assert_eq!(third.modes().0, AccessMode::Mmap);
    reads_all(&third, &m);
    drop((second, third));
    assert_eq!(budget.stats().mapped_bytes, 0);
}

#[test]
fn the_other_modes_and_a_reader_without_a_data_budget_ignore_it() {
    let _g = serial();
    let Written {
        dir,
        name,
        model: m,
        ..
    } = written();
    let open = |mode: DiskAccessMode, budget: Option<u64>| {
        let mut opts = ReaderOptions::default();
        opts.data_budget = budget.map(|b| Arc::new(DataMapBudget::with_limit(b)));
        let r = SegmentReader::open_with(dir.path(), &name, mode.resolve(), &opts).unwrap();
        reads_all(&r, &m);
        r.modes().0
    };
    // Room for everything: only `auto` maps data because of it.
    assert_eq!(
        open(DiskAccessMode::MmapIndexOnly, Some(u64::MAX)),
        AccessMode::Standard
    );
    assert_eq!(
        open(DiskAccessMode::Standard, Some(u64::MAX)),
        AccessMode::Standard
    );
    // No room: `mmap` maps data all the same (it asked for maps, and is not counted).
    assert_eq!(open(DiskAccessMode::Mmap, Some(0)), AccessMode::Mmap);
    // No budget in the options (a bare `SegmentReader::open`): `auto` maps no data.
    assert_eq!(open(DiskAccessMode::Auto, None), AccessMode::Standard);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Auto.resolve()).unwrap();
    assert_eq!(r.modes().0, AccessMode::Standard);
}

#[test]
fn past_the_mapping_budget_auto_maps_nothing_and_holds_no_data_bytes() {
    if !auto_data_map_supported() {
        println!("SKIP: auto maps nothing on this target");
        return;
    }
    let _g = serial();
    let Written {
        dir,
        name,
        model: m,
        ..
    } = written();
    let data = Arc::new(DataMapBudget::with_limit(u64::MAX));
    let mut opts = ReaderOptions::default();
    opts.data_budget = Some(data.clone());
    opts.map_budget = Some(Arc::new(MapBudget::with_limit(0)));
    let r =
        SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Auto.resolve(), &opts).unwrap();
    assert_eq!(r.modes(), (AccessMode::Standard, AccessMode::Standard));
    assert!(r.residency().budget_fallback);
    assert_eq!(
        data.stats().mapped_bytes,
        0,
        "the data bytes went back with the map"
    );
    reads_all(&r, &m);
}

#[test]
fn a_store_maps_auto_data_within_its_share_of_memory_and_none_at_zero() {
    if !auto_data_map_supported() {
        println!("SKIP: auto maps nothing on this target");
        return;
    }
    let _g = serial();
    for percent in [50u8, 0] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = common::test_config(DiskAccessMode::Auto, FileRules::posix());
        cfg.memory.auto_data_map_percent = percent;
        let store = Store::open(dir.path(), cfg).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..300u32 {
            t.put(format!("k{i:04}"), format!("v{i}")).unwrap();
        }
        t.flush().unwrap();
        let segs = store.segment_stats();
        let st = store
            .stats()
            .data_budget
            .expect("a store has a data budget");
        let want = if percent == 0 || st.available_bytes.is_none() {
            AccessMode::Standard
        } else {
            AccessMode::Mmap
        };
        assert_eq!(segs[0].data, want, "{percent}%: {st:?}");
        match want {
            AccessMode::Mmap => assert!(st.mapped_bytes > 0 && st.limit_bytes >= st.mapped_bytes),
            AccessMode::Standard => assert!(st.fallbacks >= 1, "{st:?}"),
        }
        for i in 0..300u32 {
            let v = t.get(format!("k{i:04}")).unwrap().unwrap();
            assert_eq!(v, format!("v{i}").as_bytes());
        }
        drop(t);
        assert!(store.close().unwrap().is_clean());
    }
}

/// The Cassandra failure this project exists to prevent, now with `auto`'s data mapped:
/// a cleared snapshot's hard links share their file identities with live segments, so
/// under the Windows rules none of them may go while the live data is mapped. The
/// snapshot disappears from the listing at once, and its files go when the mappings
/// do (here: at close).
#[test]
fn under_the_windows_rules_a_cleared_snapshot_waits_for_auto_s_data_map() {
    if !auto_data_map_supported() {
        println!("SKIP: auto maps nothing on this target");
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::test_config(DiskAccessMode::Auto, FileRules::windows_emulation());
    let store = Store::open(dir.path(), cfg).unwrap();
    let t = store.table("t").unwrap();
    for i in 0..300u32 {
        t.put(format!("k{i:04}"), [3u8; 64]).unwrap();
    }
    t.flush().unwrap();
    assert_eq!(store.segment_stats()[0].data, AccessMode::Mmap);
    store.snapshot("s", None).unwrap();
    store.clear_snapshot("s").unwrap();
    assert!(store.list_snapshots().unwrap().is_empty());
    let pending: Vec<String> = store
        .pending_deletions()
        .iter()
        .map(|p| p.path.display().to_string())
        .collect();
    assert!(
        pending
            .iter()
            .any(|p| p.starts_with("snapshots") && p.ends_with("-Data.db")),
        "the snapshot's data link waits for the live map: {pending:?}"
    );
    assert_eq!(t.get("k0007").unwrap().unwrap(), [3u8; 64]);
    drop(t);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(
        !dir.path().join("snapshots").join("s").exists(),
        "deleted once the maps closed"
    );
}
