//! `Store::drop_table`: the table's data, segments and manifest go; replay never brings
//! its records back; a handle still held reads what it held and refuses changes with
//! `Error::Dropped`; a table created again under the name starts empty, with segment
//! ids past the dropped one's. Power lost at every operation of a drop leaves a store
//! that opens (writable and read-only) with the table either whole or gone.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // lists the store directory

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::test_config;
use segstore::io::PowerLoss;
use segstore::{CommitLogSync, Config, DiskAccessMode, Error, FileRules, Store, TableConfig};

fn config(rules: FileRules) -> Config {
    let mut c = test_config(DiskAccessMode::Mmap, rules);
    c.commitlog.sync = CommitLogSync::Batch;
    c.table = TableConfig::default();
    c.table.background_compaction = false;
    c
}

/// File names in `dir` that start with `prefix`.
fn files_of(dir: &Path, prefix: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Table `t`: two flushed segments and writes only in the commit log; table `keep`
/// beside it.
fn fill(store: &Store) {
    let t = store.table("t").unwrap();
    let keep = store.table("keep").unwrap();
    for round in 0..3u32 {
        for i in 0..10u32 {
            t.put(format!("k{i}").as_bytes(), format!("v{round}").as_bytes())
                .unwrap();
        }
        keep.put(format!("r{round}").as_bytes(), b"kept").unwrap();
        if round < 2 {
            t.flush().unwrap();
        }
    }
}

fn assert_keep_whole(store: &Store) {
    let keep = store.table("keep").unwrap();
    for round in 0..3u32 {
        assert_eq!(
            keep.get(format!("r{round}").as_bytes()).unwrap().as_deref(),
            Some(&b"kept"[..])
        );
    }
}

#[test]
fn a_dropped_table_is_gone_and_stays_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = Store::open(&dir, config(FileRules::windows_emulation())).unwrap();
    fill(&store);
    let ids_before = store.segments("t").unwrap().live_ids();
    assert_eq!(ids_before.len(), 2);
    store.drop_table("t").unwrap();
    assert_eq!(store.table_names(), ["keep"]);
    assert!(files_of(store.dir(), "t-").is_empty(), "segments left");
    assert!(files_of(store.dir(), "t.").is_empty(), "manifest left");
    assert!(matches!(
        store.drop_table("t"),
        Err(Error::NotFound { kind: "table", .. })
    ));
    assert!(matches!(
        store.drop_table("bad name"),
        Err(Error::InvalidName { .. })
    ));
    assert_keep_whole(&store);
    // Dropped without close: replay must not bring the table's records back.
    drop(store);
    let store = Store::open(&dir, config(FileRules::windows_emulation())).unwrap();
    assert_eq!(store.table_names(), ["keep"]);
    assert_keep_whole(&store);
    let t = store.table("t").unwrap();
    assert_eq!(t.get(b"k1").unwrap(), None, "a dropped record came back");
    // A new table of the name: empty, ids past the dropped one's.
    t.put(b"k1", b"new").unwrap();
    t.flush().unwrap();
    let new_ids = store.segments("t").unwrap().live_ids();
    assert!(
        new_ids
            .iter()
            .all(|id| id > ids_before.iter().max().unwrap()),
        "{new_ids:?} reuses an id of {ids_before:?}"
    );
    drop(t);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    // And after a clean close: the new table only.
    let store = Store::open(&dir, config(FileRules::windows_emulation())).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(t.get(b"k1").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(t.get(b"k2").unwrap(), None);
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// A table created again after a drop and never written is a table, not the dropped
/// one's leftover: its manifest starts at the dropped table's first id durably, so
/// recovery keeps it (after a crash too).
#[test]
fn a_table_created_again_and_left_empty_survives_reopen() {
    for close in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let store = Store::open(&dir, config(FileRules::posix())).unwrap();
        fill(&store);
        store.drop_table("t").unwrap();
        drop(store.table("t").unwrap());
        if close {
            store.close().unwrap();
        }
        drop(store);
        let store = Store::open(&dir, config(FileRules::posix())).unwrap();
        assert_eq!(store.table_names(), ["keep", "t"], "close: {close}");
        assert_eq!(store.table("t").unwrap().get(b"k1").unwrap(), None);
        store.close().unwrap();
    }
}

/// A handle held across the drop reads what it held (its mapped segments wait for it
/// under the Windows rule) and refuses writes, flushes and compactions with a typed
/// error; a table created meanwhile under the name is a different, empty one.
#[test]
fn a_held_handle_keeps_reading_and_refuses_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let rules = FileRules::windows_emulation();
    let store = Store::open(&dir, config(rules.clone())).unwrap();
    fill(&store);
    let old = store.table("t").unwrap();
    let old_set = store.segments("t").unwrap();
    store.drop_table("t").unwrap();
    // Mapped by the held handle: pending, not refused.
    assert!(!files_of(store.dir(), "t-").is_empty());
    for i in 0..10u32 {
        assert_eq!(
            old.get(format!("k{i}").as_bytes()).unwrap().as_deref(),
            Some(&b"v2"[..])
        );
    }
    let dropped =
        |r: segstore::Result<()>| matches!(r, Err(Error::Dropped { table }) if table == "t");
    assert!(dropped(old.put(b"x", b"y")));
    assert!(dropped(old.delete(b"k1")));
    assert!(dropped(old.flush()));
    assert!(dropped(old.compact()));
    assert!(matches!(old_set.writer(), Err(Error::Dropped { .. })));
    let fresh = store.table("t").unwrap();
    assert_eq!(fresh.get(b"k1").unwrap(), None);
    fresh.put(b"k1", b"fresh").unwrap();
    assert_eq!(
        old.get(b"k1").unwrap().as_deref(),
        Some(&b"v2"[..]),
        "the old handle sees the new table"
    );
    drop(old);
    drop(old_set);
    // The last mapping closed: the dropped segments are gone now.
    let left: Vec<String> = files_of(store.dir(), "t-").into_iter().collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(rules.counts().refused_mapped, 0);
    drop(fresh);
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    let store = Store::open(&dir, config(FileRules::posix())).unwrap();
    assert_eq!(
        store.table("t").unwrap().get(b"k1").unwrap().as_deref(),
        Some(&b"fresh"[..])
    );
    assert_keep_whole(&store);
    store.close().unwrap();
}

/// Power lost at every operation of a drop (and the store then dropped without
/// close): a read-only open writes nothing and sees the table whole or gone, and a
/// writable open agrees, removes what the drop left, and lets the name be used again.
#[test]
fn power_lost_at_every_operation_of_a_drop() {
    let run = |dir: &Path, sim: &PowerLoss, crash_after: Option<u64>| -> bool {
        let store =
            Store::open(dir, config(FileRules::posix().with_power_loss(sim.clone()))).unwrap();
        fill(&store);
        if let Some(n) = crash_after {
            sim.crash_at(sim.ops() + n);
        }
        let ok = store.drop_table("t").is_ok();
        drop(store);
        ok
    };
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, 0);
        let store = Store::open(
            &dir,
            config(FileRules::posix().with_power_loss(sim.clone())),
        )
        .unwrap();
        fill(&store);
        let before = sim.ops();
        store.drop_table("t").unwrap();
        let n = sim.ops() - before;
        store.close().unwrap();
        n
    };
    assert!(total >= 8, "a drop of {total} operations");
    let (mut whole, mut dropped) = (0, 0);
    for at in 0..=total {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, at);
        sim.set_reordering(at % 2 == 1);
        let dropped_ok = run(&dir, &sim, Some(at));
        let point = sim.crash_point().unwrap_or_else(|| "the end".into());
        sim.recover().unwrap();
        // Read-only first: it must cope with what the crash left, writing nothing.
        let ro_sim = PowerLoss::new(&dir, 0);
        let ro = Store::open_read_only(
            &dir,
            config(FileRules::posix().with_power_loss(ro_sim.clone())),
        )
        .unwrap_or_else(|e| panic!("{point}: read-only open: {e}"));
        let gone = !ro.table_names().contains(&"t".to_string());
        assert!(
            !dropped_ok || gone,
            "{point}: drop returned Ok, table still there"
        );
        if !gone {
            let t = ro.table("t").unwrap();
            for i in 0..10u32 {
                assert_eq!(
                    t.get(format!("k{i}").as_bytes()).unwrap().as_deref(),
                    Some(&b"v2"[..]),
                    "{point}: a table not dropped lost k{i}"
                );
            }
        } else {
            assert!(
                matches!(ro.table("t"), Err(Error::NotFound { .. })),
                "{point}"
            );
        }
        assert_keep_whole(&ro);
        drop(ro);
        if gone {
            dropped += 1;
        } else {
            whole += 1;
        }
        assert_eq!(ro_sim.ops(), 0, "{point}: the read-only open wrote");
        // Writable: the same answer, and nothing of a dropped table is left.
        let store = Store::open(&dir, config(FileRules::posix()))
            .unwrap_or_else(|e| panic!("{point}: open: {e}"));
        assert_eq!(
            !store.table_names().contains(&"t".to_string()),
            gone,
            "{point}: read-only and writable opens disagree"
        );
        if gone {
            let left: Vec<String> = files_of(store.dir(), "t-")
                .into_iter()
                .chain(files_of(store.dir(), "t.manifest"))
                .filter(|f| !store.deleter().is_pending(&store.dir().join(f)))
                .collect();
            assert!(left.is_empty(), "{point}: left {left:?}");
            let t = store.table("t").unwrap();
            assert_eq!(t.get(b"k1").unwrap(), None, "{point}: came back");
            t.put(b"k1", b"again").unwrap();
            t.flush().unwrap();
        }
        assert_keep_whole(&store);
        let report = store.close().unwrap();
        assert!(report.is_clean(), "{point}: {report:?}");
        let store = Store::open(&dir, config(FileRules::posix())).unwrap();
        if gone {
            assert_eq!(
                store.table("t").unwrap().get(b"k1").unwrap().as_deref(),
                Some(&b"again"[..]),
                "{point}"
            );
        }
        assert!(store.close().unwrap().is_clean(), "{point}");
    }
    eprintln!(
        "drop: {total} operations; table whole after {whole} crash points, gone after {dropped}"
    );
    assert!(
        whole > 0 && dropped > 0,
        "both sides of the commit point were tried"
    );
}

/// Dropping tables while other threads open tables of the store for the first time in
/// this run never deadlocks. (With one registry, opening a table took the registry's
/// lock and then the positions lock, while a drop held the positions lock and then
/// needed the registry's: both threads hung, every time, with 300 tables.)
#[test]
fn drops_and_first_opens_of_other_tables_run_together() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..200).map(|i| format!("t{i:03}")).collect();
    {
        let store = Store::open(dir.path(), config(FileRules::posix())).unwrap();
        for n in &names {
            let t = store.table(n).unwrap();
            t.put(b"k", b"v").unwrap();
            t.flush().unwrap(); // a `flushed` entry in the positions file
        }
        store.close().unwrap();
    }
    let store = std::sync::Arc::new(Store::open(dir.path(), config(FileRules::posix())).unwrap());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (dropped, opened) = names.split_at(100);
    let (dropped, opened) = (dropped.to_vec(), opened.to_vec());
    let dropper = {
        let (store, done) = (std::sync::Arc::clone(&store), done_tx.clone());
        std::thread::spawn(move || {
            for n in &dropped {
                store.drop_table(n).unwrap();
            }
            done.send("drops").unwrap();
        })
    };
    let opener = {
        let store = std::sync::Arc::clone(&store);
        std::thread::spawn(move || {
            for n in &opened {
                let t = store.table(n).unwrap();
                assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
            }
            done_tx.send("opens").unwrap();
        })
    };
    // A deadlock detector, not a speed target: both finish in well under a second.
    for _ in 0..2 {
        done_rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("drop_table and Store::table deadlocked");
    }
    dropper.join().unwrap();
    opener.join().unwrap();
    assert_eq!(store.table_names().len(), 100);
    let store = std::sync::Arc::try_unwrap(store).unwrap();
    store.close().unwrap();
}
