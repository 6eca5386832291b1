//! `Store::open_read_only`: a shared lock, no writes at all (every file mutation goes
//! through the I/O boundary, so a power-loss simulator behind it counts zero
//! operations over open, reads, close and drop), the commit log replayed into memory,
//! and every change refused with `Error::ReadOnly`.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // plants a temp file and lists the directory

mod common;

use std::path::Path;

use common::{files, test_config};
use segstore::io::PowerLoss;
use segstore::{CommitLogSync, Config, DiskAccessMode, Error, FileRules, Store};

fn config(rules: FileRules) -> Config {
    let mut c = test_config(DiskAccessMode::Mmap, rules);
    c.commitlog.sync = CommitLogSync::Batch;
    c
}

fn all_files(dir: &Path, out: &mut Vec<(String, u64)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            all_files(&e.path(), out);
        } else {
            out.push((e.path().display().to_string(), m.len()));
        }
    }
    out.sort();
}

/// A store left as a crash leaves it: flushed and unflushed writes, a deletion still
/// journaled (a cleared snapshot whose files a reader maps), a stray temp file.
#[test]
fn read_only_open_writes_nothing_and_sees_every_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = Store::open(&dir, config(FileRules::windows_emulation())).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"flushed", b"1").unwrap();
    t.put(b"gone", b"1").unwrap();
    t.flush().unwrap();
    store.snapshot("s", None).unwrap();
    let reader = store.open_snapshot("s").unwrap();
    store.clear_snapshot("s").unwrap(); // mapped by `reader`: stays journaled
    t.put(b"logged", b"2").unwrap(); // only in the commit log
    t.delete(b"gone").unwrap();
    drop(t);
    drop(store); // no close: like a crash, the journal names the snapshot's files
    std::fs::write(dir.join("t.manifest.tmp"), b"half written").unwrap();
    let mut before = Vec::new();
    all_files(&dir, &mut before);

    let sim = PowerLoss::new(&dir, 1);
    let ro = Store::open_read_only(
        &dir,
        config(FileRules::posix().with_power_loss(sim.clone())),
    )
    .unwrap();
    assert!(ro.is_read_only());
    assert!(!ro.deleter().pending().is_empty(), "the journal was read");
    let t = ro.table("t").unwrap();
    assert_eq!(t.get(b"flushed").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(t.get(b"logged").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(t.get(b"gone").unwrap(), None);
    assert!(
        ro.list_snapshots().unwrap().is_empty(),
        "a cleared snapshot listed"
    );
    let ro_only = |r: segstore::Result<()>| matches!(r, Err(Error::ReadOnly));
    assert!(ro_only(t.put(b"x", b"y")));
    assert!(ro_only(t.delete(b"flushed")));
    assert!(ro_only(t.flush()));
    assert!(ro_only(t.compact()));
    assert!(ro_only(ro.tables().flush(None)));
    assert!(ro_only(ro.snapshot("s2", None)));
    assert!(ro_only(ro.clear_snapshot("s")));
    assert!(ro_only(ro.drop_table("t")));
    assert!(ro_only(ro.checkpoint(tmp.path().join("copy"))));
    assert!(matches!(t.segments().writer(), Err(Error::ReadOnly)));
    assert!(matches!(
        ro.table("missing"),
        Err(Error::NotFound { kind: "table", .. })
    ));
    // Still there after the refusals.
    assert_eq!(t.get(b"logged").unwrap().as_deref(), Some(&b"2"[..]));
    assert!(ro.stats().segments["t"] >= 1);
    drop(t);
    let report = ro.close().unwrap();
    assert!(report.pending_deletions.is_empty(), "{report:?}");
    drop(ro);
    assert_eq!(
        sim.ops(),
        0,
        "the read-only store wrote through the I/O boundary"
    );
    let mut after = Vec::new();
    all_files(&dir, &mut after);
    assert_eq!(before, after, "the directory changed");

    // Dropped without close, too.
    let ro = Store::open_read_only(
        &dir,
        config(FileRules::posix().with_power_loss(sim.clone())),
    )
    .unwrap();
    assert_eq!(
        ro.table("t").unwrap().get(b"logged").unwrap().as_deref(),
        Some(&b"2"[..])
    );
    drop(ro);
    assert_eq!(sim.ops(), 0);
    drop(reader);
    // A writable open afterwards does the recovery the read-only ones left alone.
    let store = Store::open(&dir, config(FileRules::posix())).unwrap();
    assert!(!files(&dir).contains(&"t.manifest.tmp".to_string()));
    assert_eq!(
        store.table("t").unwrap().get(b"logged").unwrap().as_deref(),
        Some(&b"2"[..])
    );
    assert!(store.close().unwrap().is_clean());
}

#[test]
fn readers_share_the_lock_and_exclude_a_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = Store::open(&dir, Config::default()).unwrap();
    store.table("t").unwrap().put(b"k", b"v").unwrap();
    assert!(matches!(
        Store::open_read_only(&dir, Config::default()),
        Err(Error::Locked(_))
    ));
    store.close().unwrap();
    let a = Store::open_read_only(&dir, Config::default()).unwrap();
    let b = Store::open_read_only(&dir, Config::default()).unwrap();
    for s in [&a, &b] {
        assert_eq!(
            s.table("t").unwrap().get(b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }
    assert!(matches!(
        Store::open(&dir, Config::default()),
        Err(Error::Locked(_))
    ));
    a.close().unwrap();
    assert!(matches!(
        Store::open(&dir, Config::default()),
        Err(Error::Locked(_))
    ));
    drop(b);
    Store::open(&dir, Config::default())
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn a_directory_that_is_not_a_store_is_not_found_and_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing");
    assert!(Store::open_read_only(&missing, Config::default()).is_err());
    assert!(!missing.exists(), "created");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        Store::open_read_only(&empty, Config::default()),
        Err(Error::NotFound { .. })
    ));
    assert!(files(&empty).is_empty(), "wrote into it");
}
