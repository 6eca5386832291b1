//! `Store::checkpoint(dest)`: a copy in another directory that opens as a store with
//! every write acknowledged before the call (memtables flushed first), hard links where
//! the file system allows them and fsynced copies where it does not, and typed errors
//! for a destination that is taken or inside the store.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // inspects inodes, plants files

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{files, test_config};
use segstore::io::rules::{FaultKind, Faults};
use segstore::io::PowerLoss;
use segstore::lifecycle::PendingReason;
use segstore::{CommitLogSync, Config, DiskAccessMode, Error, FileRules, Store, TableConfig};

fn config(rules: FileRules) -> Config {
    let mut c = test_config(DiskAccessMode::Mmap, rules);
    c.commitlog.sync = CommitLogSync::Batch;
    c.table = TableConfig::default();
    c.table.background_compaction = false;
    c
}

/// Tables `a` (two segments, a delete, unflushed writes) and `b` (only in the log), and
/// an empty table `c`.
fn fill(store: &Store) {
    let a = store.table("a").unwrap();
    for i in 0..20u32 {
        a.put(format!("k{i:02}").as_bytes(), b"1").unwrap();
    }
    a.flush().unwrap();
    a.delete(b"k03").unwrap();
    a.put(b"k04", b"2").unwrap();
    a.flush().unwrap();
    a.put(b"k05", b"3").unwrap();
    store.table("b").unwrap().put(b"only", b"logged").unwrap();
    store.table("c").unwrap();
}

fn check(store: &Store) {
    let a = store.table("a").unwrap();
    for i in 0..20u32 {
        let want: Option<&[u8]> = match i {
            3 => None,
            4 => Some(b"2"),
            5 => Some(b"3"),
            _ => Some(b"1"),
        };
        assert_eq!(
            a.get(format!("k{i:02}").as_bytes()).unwrap().as_deref(),
            want,
            "k{i:02}"
        );
    }
    assert_eq!(
        store.table("b").unwrap().get(b"only").unwrap().as_deref(),
        Some(&b"logged"[..])
    );
}

fn inode(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().ino()
}

#[test]
fn a_checkpoint_opens_as_a_store_with_every_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let rules = FileRules::windows_emulation();
    let store = Store::open(&dir, config(rules.clone())).unwrap();
    fill(&store);
    let dest = tmp.path().join("backups").join("one");
    store.checkpoint(&dest).unwrap();
    // The source goes on; later writes are not in the copy.
    store.table("a").unwrap().put(b"later", b"x").unwrap();
    let mut names = files(&dest);
    names.retain(|n| n.ends_with(".db"));
    assert!(!names.is_empty());
    for n in &names {
        assert_eq!(
            inode(&dest.join(n)),
            inode(&store.dir().join(n)),
            "{n} not linked"
        );
    }
    assert!(!dest.join("commitlog").exists(), "a commit log was copied");
    let leftovers: Vec<String> = files(dest.parent().unwrap())
        .into_iter()
        .filter(|n| n != "one")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    {
        // Read-only first (the copy has a LOCK file), then writable.
        let ro = Store::open_read_only(&dest, config(FileRules::posix())).unwrap();
        check(&ro);
        ro.close().unwrap();
        let copy = Store::open(&dest, config(FileRules::posix())).unwrap();
        check(&copy);
        assert_eq!(copy.table_names(), ["a", "b", "c"]);
        assert_eq!(copy.table("a").unwrap().get(b"later").unwrap(), None);
        // The copy is a store of its own: writes, flushes, compaction.
        let a = copy.table("a").unwrap();
        a.put(b"k03", b"back").unwrap();
        a.compact().unwrap();
        drop(a);
        // The copy's compaction deleted its links; under the Windows rule each waits
        // while the source maps the same file.
        let report = copy.close().unwrap();
        assert!(report.leaked_handles.is_empty(), "{report:?}");
        assert!(
            report
                .pending_deletions
                .iter()
                .all(|p| p.reason == PendingReason::Mapped),
            "{report:?}"
        );
    }
    // Unchanged by what the copy did (its compaction deleted its own links only).
    check(&store);
    assert_eq!(store.table("a").unwrap().get(b"k03").unwrap(), None);
    assert_eq!(rules.counts().refused_mapped, 0);
    assert!(store.close().unwrap().is_clean());
}

#[test]
fn where_hard_links_fail_the_components_are_copied() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let faults = Faults::new().fail(FaultKind::Link, "", 0, u64::MAX);
    let store = Store::open(&dir, config(FileRules::posix().with_faults(faults))).unwrap();
    fill(&store);
    let dest = tmp.path().join("copy");
    std::fs::create_dir(&dest).unwrap(); // an empty directory is fine
    store.checkpoint(&dest).unwrap();
    let names: Vec<String> = files(&dest)
        .into_iter()
        .filter(|n| n.ends_with(".db"))
        .collect();
    assert!(!names.is_empty());
    for n in &names {
        assert_ne!(
            inode(&dest.join(n)),
            inode(&store.dir().join(n)),
            "{n} linked"
        );
        assert_eq!(
            std::fs::read(dest.join(n)).unwrap(),
            std::fs::read(store.dir().join(n)).unwrap(),
            "{n}"
        );
    }
    store.close().unwrap();
    let copy = Store::open(&dest, config(FileRules::posix())).unwrap();
    check(&copy);
    copy.close().unwrap();
}

#[test]
fn a_taken_destination_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = Store::open(&dir, config(FileRules::posix())).unwrap();
    fill(&store);
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("mine"), b"keep").unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"keep").unwrap();
    for dest in [&full, &file] {
        match store.checkpoint(dest) {
            Err(Error::AlreadyExists { kind, .. }) => assert_eq!(kind, "checkpoint destination"),
            other => panic!("{}: {other:?}", dest.display()),
        }
    }
    assert_eq!(files(&full), ["mine"]);
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    for inside in [dir.join("copy"), dir.join("snapshots").join("x")] {
        assert!(
            matches!(store.checkpoint(&inside), Err(Error::InvalidArgument(_))),
            "{}",
            inside.display()
        );
        assert!(!inside.exists());
    }
    // A second checkpoint into the first one's directory is refused too.
    let dest = tmp.path().join("once");
    store.checkpoint(&dest).unwrap();
    assert!(matches!(
        store.checkpoint(&dest),
        Err(Error::AlreadyExists { .. })
    ));
    store.close().unwrap();
    assert!(matches!(
        store.checkpoint(tmp.path().join("late")),
        Err(Error::Closed)
    ));
    let leftovers: Vec<String> = files(tmp.path())
        .into_iter()
        .filter(|n| n.contains("checkpoint"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Power lost at every operation of a checkpoint (its flush included): afterwards the
/// destination is absent or a whole store (it opens read-only, so its `LOCK` file is
/// there, and for writing), present whenever the call returned Ok, and the source still
/// holds everything.
#[test]
fn power_lost_during_a_checkpoint_leaves_no_destination_or_a_whole_one() {
    let attempt = |tmp: &Path, sim: &PowerLoss, crash_after: Option<u64>| -> bool {
        let store = Store::open(
            tmp.join("store"),
            config(FileRules::posix().with_power_loss(sim.clone())),
        )
        .unwrap();
        fill(&store);
        let before = sim.ops();
        if let Some(n) = crash_after {
            sim.crash_at(before + n);
        }
        let ok = store.checkpoint(tmp.join("copy")).is_ok();
        if crash_after.is_none() {
            CHECKPOINT_OPS.store(sim.ops() - before, std::sync::atomic::Ordering::Relaxed);
        }
        drop(store);
        ok
    };
    static CHECKPOINT_OPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    {
        let tmp = tempfile::tempdir().unwrap();
        let sim = PowerLoss::new(&tmp.path().join("store"), 0);
        assert!(attempt(tmp.path(), &sim, None));
    }
    let total = CHECKPOINT_OPS.load(std::sync::atomic::Ordering::Relaxed);
    assert!(total > 10, "a checkpoint of {total} operations");
    let (mut absent, mut whole) = (0, 0);
    for at in 0..=total {
        let tmp = tempfile::tempdir().unwrap();
        let sim = PowerLoss::new(&tmp.path().join("store"), at);
        // The last operation is the fsync after the rename: with reordering the
        // rename may persist without it.
        sim.set_reordering(at % 2 == 1 || at + 1 == total);
        sim.set_torn_writes(at % 4 >= 2);
        let ok = attempt(tmp.path(), &sim, Some(at));
        let point = sim.crash_point().unwrap_or_else(|| "the end".into());
        sim.recover().unwrap();
        let dest = tmp.path().join("copy");
        let present = std::fs::read_dir(&dest).is_ok_and(|mut d| d.next().is_some());
        assert!(
            !ok || present,
            "{point}: checkpoint returned Ok, the copy is gone"
        );
        if present {
            // Read-only first: it needs the `LOCK` file, and creates nothing.
            let copy = Store::open_read_only(&dest, config(FileRules::posix()))
                .unwrap_or_else(|e| panic!("{point}: the copy does not open read-only: {e}"));
            check(&copy);
            drop(copy);
            let copy = Store::open(&dest, config(FileRules::posix()))
                .unwrap_or_else(|e| panic!("{point}: the copy does not open: {e}"));
            check(&copy);
            assert_eq!(copy.table_names(), ["a", "b", "c"], "{point}");
            copy.close().unwrap();
            whole += 1;
        } else {
            absent += 1;
        }
        let store = Store::open(tmp.path().join("store"), config(FileRules::posix()))
            .unwrap_or_else(|e| panic!("{point}: the source does not open: {e}"));
        check(&store);
        assert!(store.close().unwrap().is_clean(), "{point}");
    }
    eprintln!("checkpoint: {total} operations; no copy after {absent} crash points, a whole one after {whole}");
    assert!(absent > 0 && whole > 0);
}
