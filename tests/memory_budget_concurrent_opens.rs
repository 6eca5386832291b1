//! The mapping budget under concurrent opens (issue 18, part E): admission used to check
//! the maps in use and let the open map afterwards, without a lock, so segments opened at
//! the same instant were all admitted into the same room and overshot the budget by two
//! maps each. Now admission reserves its maps atomically until they are registered.
//!
//! Deterministic, not a race to win: the budget's decision hook (`testing` feature)
//! holds every open between its admission and its maps until all of them have been
//! decided, which is the window the old check-then-act left open.

use std::path::Path;
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

use segstore::memory::MapBudget;
use segstore::segment::{ReaderOptions, SegmentName, SegmentReader, SegmentWriter};
use segstore::{AccessMode, DiskAccessMode, Error, FileRules, SegmentOptions};

const OPENERS: usize = 6;

/// The maps in use are process-wide: the tests of this file must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn write_segment(dir: &Path) -> SegmentName {
    let name = SegmentName::new("budget", 1).unwrap();
    let mut w = SegmentWriter::create(
        dir,
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )
    .unwrap();
    for i in 0..100u32 {
        w.add(format!("k{i:04}").as_bytes(), b"v", i as u64, false)
            .unwrap();
    }
    w.finish().unwrap();
    name
}

/// `OPENERS` threads open the segment at once with `mode` against a budget with room
/// for `room` more maps; returns what each open gave, with the budget.
fn open_together(
    dir: &Path,
    name: &SegmentName,
    mode: DiskAccessMode,
    room: usize,
) -> (Vec<segstore::Result<SegmentReader>>, Arc<MapBudget>) {
    let budget = Arc::new(MapBudget::with_limit(MapBudget::in_use() + room));
    // Every open waits here once its admission is decided, before it maps anything.
    let decided = Arc::new(Barrier::new(OPENERS));
    let d = decided.clone();
    budget.on_decision(move || {
        d.wait();
    });
    let mut opts = ReaderOptions::default();
    opts.map_budget = Some(budget.clone());
    let start = Barrier::new(OPENERS);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..OPENERS)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    SegmentReader::open_with(dir, name, mode.resolve(), &opts)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    (results, budget)
}

#[test]
fn concurrent_mmap_opens_never_exceed_the_budget() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path());
    // Room for one segment's data and index maps.
    let (results, budget) = open_together(dir.path(), &name, DiskAccessMode::Mmap, 2);
    let in_use = MapBudget::in_use();
    assert!(
        in_use <= budget.limit(),
        "{in_use} maps in use, budget {}",
        budget.limit()
    );
    let mut opened = 0;
    for r in &results {
        match r {
            Ok(reader) => {
                assert_eq!(reader.modes(), (AccessMode::Mmap, AccessMode::Mmap));
                opened += 1;
            }
            Err(Error::MapBudgetExhausted { budget: b, .. }) => assert_eq!(*b, budget.limit()),
            Err(e) => panic!("expected MapBudgetExhausted, got {e}"),
        }
    }
    assert_eq!(opened, 1, "one segment fits");
    assert_eq!(in_use, budget.limit());
    // Every reservation was released with its open: once the readers close, the room
    // is free again.
    drop(results);
    // (A new budget of the same limit: this one's hook waits for `OPENERS` opens.)
    let mut opts = ReaderOptions::default();
    opts.map_budget = Some(Arc::new(MapBudget::with_limit(budget.limit())));
    let again = SegmentReader::open_with(dir.path(), &name, DiskAccessMode::Mmap.resolve(), &opts);
    assert!(again.is_ok(), "{:?}", again.err());
}

#[test]
fn concurrent_auto_opens_fall_back_past_the_budget() {
    let auto = DiskAccessMode::Auto.resolve();
    if auto.index != AccessMode::Mmap {
        println!("SKIP: auto maps nothing on this target");
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let name = write_segment(dir.path());
    // Room for two `auto` segments (each maps its index only).
    let (results, budget) = open_together(dir.path(), &name, DiskAccessMode::Auto, 2);
    let in_use = MapBudget::in_use();
    assert!(
        in_use <= budget.limit(),
        "{in_use} maps in use, budget {}",
        budget.limit()
    );
    let readers: Vec<SegmentReader> = results.into_iter().map(|r| r.unwrap()).collect();
    let mapped = readers
        .iter()
        .filter(|r| !r.residency().budget_fallback)
        .count();
    assert_eq!(mapped, 2, "two index maps fit");
    for r in readers.iter().filter(|r| r.residency().budget_fallback) {
        assert_eq!(r.modes(), (AccessMode::Standard, AccessMode::Standard));
    }
    assert_eq!(budget.fallbacks(), (OPENERS - 2) as u64);
}
