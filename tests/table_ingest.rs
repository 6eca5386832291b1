//! Bulk ingest (`Table::ingest`, `Store::ingest`): segments written with
//! `SegmentWriter` and adopted whole, ranked by their own timestamps, invisible to
//! read views taken before, a conflict for transactions whose reads they change, at
//! the deepest level free of overlap under leveled compaction; bad input refused with
//! a typed error naming the file, nothing adopted. Atomicity to readers across tables
//! is driven by pause points.

#![allow(clippy::disallowed_methods)] // damages and inspects files on purpose

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use segstore::io::faults::Faults;
use segstore::io::points::reached;
use segstore::segment::{Component, SegmentName, SegmentWriter};
use segstore::{
    CompactionStrategy, Config, Error, FileRules, SegmentOptions, Store, Table, TableConfig,
};

/// Write `rows` (key, value, ts) as segment `load-<id>` in `dir`; its Data path.
fn segment(dir: &Path, id: u64, rows: &[(&str, &str, u64)]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let name = SegmentName::new("load", id).unwrap();
    let mut w = SegmentWriter::create(
        dir,
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )
    .unwrap();
    for (k, v, ts) in rows {
        w.add(k.as_bytes(), v.as_bytes(), *ts, false).unwrap();
    }
    w.finish().unwrap();
    name.path(dir, Component::Data)
}

fn get(t: &Table, k: &str) -> Option<String> {
    t.get(k)
        .unwrap()
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}

fn open(dir: &Path) -> Store {
    let mut c = Config::default();
    c.table.background_compaction = false;
    Store::open(dir, c).unwrap()
}

#[test]
fn ingested_cells_rank_by_timestamp_and_survive_a_reopen() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let store = open(&db);
    let t = store.table("t").unwrap();
    t.put("flushed", "old").unwrap();
    t.flush().unwrap();
    let ts = store.now().unwrap();
    t.put("mem", "newer than the load").unwrap();
    let p = segment(
        &load,
        1,
        &[
            ("flushed", "loaded", ts),
            ("mem", "loaded", ts),
            ("new", "loaded", ts),
        ],
    );
    let before = store.read_view().unwrap();
    t.ingest(&[&p]).unwrap();
    assert_eq!(get(&t, "flushed").as_deref(), Some("loaded"));
    assert_eq!(get(&t, "mem").as_deref(), Some("newer than the load"));
    assert_eq!(get(&t, "new").as_deref(), Some("loaded"));
    // A view taken before does not see it.
    assert_eq!(before.get(&t, "new").unwrap(), None);
    assert_eq!(
        before.get(&t, "flushed").unwrap().as_deref(),
        Some(&b"old"[..])
    );
    drop(before);
    // A write after the ingest wins over it (the clock is past its timestamps).
    t.put("new", "after").unwrap();
    assert_eq!(get(&t, "new").as_deref(), Some("after"));
    // The originals are untouched; deleting them changes nothing.
    for c in Component::ALL {
        assert!(SegmentName::new("load", 1).unwrap().path(&load, c).exists());
    }
    std::fs::remove_dir_all(&load).unwrap();
    drop(t);
    store.close().unwrap();
    let store = open(&db);
    let t = store.table("t").unwrap();
    assert_eq!(get(&t, "flushed").as_deref(), Some("loaded"));
    assert_eq!(get(&t, "new").as_deref(), Some("after"));
    assert_eq!(t.scan(..).unwrap().count(), 3);
    drop(t);
    store.close().unwrap();
}

#[test]
fn a_transaction_whose_reads_the_ingest_changed_conflicts() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let store = open(&db);
    let t = store.table("t").unwrap();
    t.put("a", "1").unwrap();
    let ts = store.now().unwrap();
    t.put("b", "newer").unwrap();
    let p1 = segment(&load, 1, &[("a", "loaded", ts)]);
    let p2 = segment(&load, 2, &[("b", "loaded", ts)]);

    let mut changed = store.transaction().unwrap();
    assert_eq!(changed.get(&t, "a").unwrap().as_deref(), Some(&b"1"[..]));
    changed.put(&t, "x", "1").unwrap();
    let mut scanned = store.transaction().unwrap();
    assert_eq!(scanned.scan(&t, "c"..).unwrap().count(), 0);
    scanned.put(&t, "y", "1").unwrap();
    let mut untouched = store.transaction().unwrap();
    assert_eq!(
        untouched.get(&t, "b").unwrap().as_deref(),
        Some(&b"newer"[..])
    );
    untouched.put(&t, "z", "1").unwrap();

    t.ingest(&[&p1, &p2]).unwrap();
    let p3 = segment(&load, 3, &[("c", "loaded", ts)]);
    t.ingest(&[&p3]).unwrap();
    assert!(matches!(changed.commit(), Err(Error::Conflict { .. })));
    assert!(matches!(scanned.commit(), Err(Error::Conflict { .. })));
    // Its cell lost to a newer write: nothing the transaction read changed.
    untouched.commit().unwrap();
    assert_eq!(get(&t, "z").as_deref(), Some("1"));
    drop(t);
    store.close().unwrap();
}

/// Under leveled compaction an ingested segment joins the deepest level none of whose
/// segments it overlaps (level 0 where each level it could join holds one), keeps it
/// across a reopen, and ranks by timestamp with the cells above it; levels stay
/// disjoint through the merges after it. Size-tiered tables record no level.
#[test]
fn leveled_tables_take_ingested_segments_at_the_deepest_level_free_of_overlap() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let store = open(&db);
    let mut cfg = TableConfig::default();
    cfg.background_compaction = false;
    cfg.compaction.strategy = CompactionStrategy::Leveled;
    let t = store.table_with("t", cfg.clone()).unwrap();
    for i in 0..20 {
        t.put(format!("k{i:02}"), "flushed").unwrap();
    }
    t.flush().unwrap(); // level 0, k00..k19, older than every load below
    let level_of = |t: &Table, id: u64| t.segments().levels().get(&id).copied().unwrap_or(0);
    let newest = |t: &Table| *t.segments().live_ids().iter().max().unwrap();
    // Over the flushed keys, but level 1 is empty: level 1.
    let ts = store.now().unwrap();
    let a = segment(&load, 1, &[("k05", "loaded", ts), ("z", "loaded", ts)]);
    t.ingest(&[&a]).unwrap();
    let a_id = newest(&t);
    assert_eq!(level_of(&t, a_id), 1);
    // Inside the first load's span at level 1, the only level it could join: level 0.
    let ts = store.now().unwrap();
    let b = segment(&load, 2, &[("k10", "second", ts), ("k12", "second", ts)]);
    t.ingest(&[&b]).unwrap();
    let b_id = newest(&t);
    assert_eq!(level_of(&t, b_id), 0);
    // Below every key at level 1: level 1 beside the first.
    let c = segment(&load, 3, &[("a", "third", ts), ("b", "third", ts)]);
    t.ingest(&[&c]).unwrap();
    let c_id = newest(&t);
    assert_eq!(level_of(&t, c_id), 1);
    common::check_levels(t.segments());
    let read =
        |t: &Table| ["k05", "k06", "k10", "k12", "a", "z"].map(|k| get(t, k).unwrap_or_default());
    // The first load's k05, at level 1, is newer than the flushed one at level 0.
    let want = ["loaded", "flushed", "second", "second", "third", "loaded"];
    assert_eq!(read(&t), want);
    drop(t);
    store.close().unwrap();

    let store = open(&db);
    let t = store.table_with("t", cfg).unwrap();
    assert_eq!(
        [a_id, b_id, c_id].map(|id| level_of(&t, id)),
        [1, 0, 1],
        "levels kept across a reopen"
    );
    assert_eq!(read(&t), want);
    t.compact().unwrap();
    common::check_levels(t.segments());
    assert_eq!(read(&t), want);

    // A size-tiered table: no level recorded.
    let mut st = TableConfig::default();
    st.background_compaction = false;
    st.compaction.strategy = CompactionStrategy::SizeTiered;
    let u = store.table_with("u", st).unwrap();
    let d = segment(&load, 4, &[("k", "v", store.now().unwrap())]);
    u.ingest(&[&d]).unwrap();
    assert!(
        u.segments().levels().is_empty(),
        "{:?}",
        u.segments().levels()
    );
    assert_eq!(get(&u, "k").as_deref(), Some("v"));
    drop((t, u));
    store.close().unwrap();
}

/// Every bad input is a typed error naming the file, and adopts nothing (the good
/// segment listed with it too).
#[test]
fn bad_input_is_refused_and_adopts_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let store = open(&db);
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    a.put("k", "before").unwrap();
    a.flush().unwrap();
    let ts = store.now().unwrap();
    let good = segment(&load, 1, &[("k", "loaded", ts)]);
    let refused = |parts: &[(&Table, Vec<PathBuf>)], what: &str| {
        let e = store.ingest(parts).unwrap_err();
        assert_eq!(get(&a, "k").as_deref(), Some("before"), "{what}: {e}");
        assert_eq!(a.segments().live_ids().len(), 1, "{what}");
        assert!(b.segments().live_ids().is_empty(), "{what}");
        e
    };
    let ingest_err = |e: Error, file: &str, reason: &str| match e {
        Error::Ingest { path, reason: r } => {
            assert!(path.to_string_lossy().contains(file), "{path:?}: {r}");
            assert!(r.contains(reason), "{r}");
        }
        e => panic!("expected Error::Ingest about {file}, got {e}"),
    };

    let dotdot = load.join("..").join("load").join("load-1-Data.db");
    let e = refused(&[(&a, vec![good.clone()]), (&b, vec![dotdot])], "..");
    ingest_err(e, "load-1-Data.db", "`..`");

    let stranger = load.join("notes.txt");
    std::fs::write(&stranger, "hello").unwrap();
    let e = refused(&[(&a, vec![good.clone(), stranger])], "name");
    ingest_err(e, "notes.txt", "not a segment component");

    let half = segment(&load, 2, &[("k", "x", ts)]);
    std::fs::remove_file(
        SegmentName::new("load", 2)
            .unwrap()
            .path(&load, Component::Index),
    )
    .unwrap();
    let e = refused(&[(&a, vec![good.clone()]), (&b, vec![half])], "missing");
    ingest_err(e, "load-2-Index.db", "missing");

    let e = refused(
        &[(&a, vec![good.clone()]), (&b, vec![good.clone()])],
        "twice",
    );
    ingest_err(e, "load-1-Data.db", "named twice");
    let meta = SegmentName::new("load", 1)
        .unwrap()
        .path(&load, Component::Meta);
    let e = refused(
        &[(&a, vec![good.clone(), meta])],
        "twice by another component",
    );
    ingest_err(e, "load-1-Meta.db", "named twice");

    let future = segment(&load, 3, &[("k", "x", u64::MAX / 2)]);
    let e = refused(&[(&a, vec![good.clone()]), (&b, vec![future])], "future");
    ingest_err(e, "load-3-Data.db", "past the store's clock");

    let live = a.segments().live_ids()[0];
    let inside = db.join(format!("a-{live}-Data.db"));
    let e = refused(&[(&b, vec![inside])], "inside");
    ingest_err(e, "Data.db", "inside the store directory");

    let bad = segment(&load, 4, &[("k", "x", ts), ("l", "y", ts)]);
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[3] ^= 0x40;
    std::fs::write(&bad, bytes).unwrap();
    match refused(&[(&a, vec![good.clone()]), (&b, vec![bad])], "corrupt") {
        Error::Corrupt { path, .. } => assert!(path.ends_with("load-4-Data.db"), "{path:?}"),
        e => panic!("expected Corrupt, got {e}"),
    }

    let e = refused(&[(&a, vec![good.clone()]), (&a, vec![])], "table twice");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // No file of the refused ingests is left in the store.
    let files: Vec<String> = common::files(&db)
        .into_iter()
        .filter(|f| f.ends_with(".db"))
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    // And the good segment alone goes in.
    store.ingest(&[(&a, vec![good])]).unwrap();
    assert_eq!(get(&a, "k").as_deref(), Some("loaded"));
    drop((a, b));
    store.close().unwrap();
}

/// A read view taken while an ingest of two tables is between its two view swaps
/// waits for the second one: it sees both tables' segments, never one.
#[test]
fn a_read_view_sees_both_tables_ingested_or_neither() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let rules = FileRules::posix().with_faults(Faults::new());
    let mut c = Config::default();
    c.file_rules = rules.clone();
    let store = Arc::new(Store::open(&db, c).unwrap());
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let ts = store.now().unwrap();
    let pa = segment(&load, 1, &[("k", "a", ts)]);
    let pb = segment(&load, 2, &[("k", "b", ts)]);
    let points = rules.faults().unwrap().points();
    points.hold("ingest swapped a view", "a", 1);
    std::thread::scope(|s| {
        let ingest = s.spawn(|| store.ingest(&[(&a, vec![pa]), (&b, vec![pb])]));
        points.wait_for("ingest swapped a view", 1);
        let reader = s.spawn(|| {
            let v = store.read_view().unwrap();
            points.mark("read view taken");
            let got = |t: &Table| v.get(t, "k").unwrap().map(|x| x.to_vec());
            (got(&a), got(&b))
        });
        let seen = points.wait_until(|e| {
            reached(e, "read view waits for the install lock") || reached(e, "read view taken")
        });
        points.release("ingest swapped a view");
        ingest.join().unwrap().unwrap();
        let (ga, gb) = reader.join().unwrap();
        assert!(
            !reached(&seen, "read view taken"),
            "a read view was taken between the ingest's view swaps: a={ga:?} b={gb:?}"
        );
        assert_eq!(
            (ga.as_deref(), gb.as_deref()),
            (Some(&b"a"[..]), Some(&b"b"[..]))
        );
    });
    drop((a, b));
    Arc::try_unwrap(store).unwrap().close().unwrap();
}

#[test]
fn ingest_is_refused_on_a_read_only_store() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let store = open(&db);
    let t = store.table("t").unwrap();
    let ts = store.now().unwrap();
    drop(t);
    store.close().unwrap();
    let ro = Store::open_read_only(&db, Config::default()).unwrap();
    let t = ro.table("t").unwrap();
    let p = segment(&load, 1, &[("k", "v", ts)]);
    assert!(matches!(t.ingest(&[&p]), Err(Error::ReadOnly)));
    drop(t);
    ro.close().unwrap();
}

fn faulty_store(db: &Path) -> (Store, FileRules) {
    let rules = FileRules::posix().with_faults(Faults::new());
    let mut c = Config::default();
    c.table.background_compaction = false;
    c.file_rules = rules.clone();
    (Store::open(db, c).unwrap(), rules)
}

/// The journal is written but a manifest replacement fails: the ingest is committed,
/// so this run shows none of it (the tables refuse changes) and the reopen completes it
/// in both tables.
#[test]
fn a_failure_after_the_commit_point_is_completed_by_the_next_open() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let (store, rules) = faulty_store(&db);
    let faults = rules.faults().unwrap();
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let ts = store.now().unwrap();
    let pa = segment(&load, 1, &[("k", "a", ts)]);
    let pb = segment(&load, 2, &[("k", "b", ts)]);
    faults.add(segstore::io::faults::FaultKind::Rename, "b.manifest", 0, 1);
    let e = store.ingest(&[(&a, vec![pa]), (&b, vec![pb])]).unwrap_err();
    assert!(matches!(e, Error::Poisoned(_)), "{e}");
    assert_eq!(get(&a, "k"), None);
    assert_eq!(get(&b, "k"), None);
    assert!(matches!(a.flush(), Err(Error::Poisoned(_))));
    drop((a, b, store));
    let store = open(&db);
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    assert_eq!(get(&a, "k").as_deref(), Some("a"));
    assert_eq!(get(&b, "k").as_deref(), Some("b"));
    drop((a, b));
    store.close().unwrap();
}

/// The journal cannot be published: nothing is adopted, the placed files are deleted,
/// and the same files ingest afterwards.
#[test]
fn a_failure_before_the_commit_point_adopts_nothing_and_leaves_no_file() {
    let root = tempfile::tempdir().unwrap();
    let (db, load) = (root.path().join("db"), root.path().join("load"));
    let (store, rules) = faulty_store(&db);
    let faults = rules.faults().unwrap();
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let segment_files = || -> Vec<String> {
        common::files(&db)
            .into_iter()
            .filter(|f| f.ends_with(".db") || f.ends_with(".tmp"))
            .collect()
    };
    let before = segment_files();
    let ts = store.now().unwrap();
    let pa = segment(&load, 1, &[("k", "a", ts)]);
    let pb = segment(&load, 2, &[("k", "b", ts)]);
    faults.add(
        segstore::io::faults::FaultKind::Rename,
        "ingest.pending",
        0,
        1,
    );
    let parts = [(&*a, vec![pa]), (&*b, vec![pb])];
    assert!(store.ingest(&parts).is_err());
    assert_eq!(get(&a, "k"), None);
    assert_eq!(segment_files(), before);
    store.ingest(&parts).unwrap();
    assert_eq!(get(&a, "k").as_deref(), Some("a"));
    assert_eq!(get(&b, "k").as_deref(), Some("b"));
    drop((a, b));
    store.close().unwrap();
}

/// A journal naming a segment whose files are gone is refused at open, naming it.
#[test]
fn a_journal_naming_missing_files_is_corrupt() {
    let root = tempfile::tempdir().unwrap();
    let db = root.path().join("db");
    let store = open(&db);
    store.table("a").unwrap();
    store.close().unwrap();
    let mut j = segstore::lifecycle::ingest_journal::IngestJournal::default();
    j.segments.entry("a".into()).or_default().insert(7);
    j.store(&db, &segstore::io::StoreFs::new(&db, &FileRules::posix()))
        .unwrap();
    let e = Store::open(&db, Config::default()).unwrap_err();
    match e {
        Error::Corrupt { path, reason, .. } => {
            assert!(path.ends_with("ingest.pending"), "{path:?}");
            assert!(reason.contains("a-7"), "{reason}");
        }
        e => panic!("expected Corrupt, got {e}"),
    }
}
