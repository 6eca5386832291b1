//! Corruption of the store's own files beyond segments (issue 8): commit log records
//! (middle and tail), table manifests, snapshot manifests, the pending-deletion journal
//! (`deletions.pending`) and the commit log `positions` file. Each bad file gives
//! `Error::Corrupt` naming it at `Store::open`, never a panic and never a store that
//! opens with data silently missing; a torn or flipped commit log tail is the one
//! exception: a warning, and recovery up to the last good record.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use segstore::{
    CommitLogConfig, CommitLogSync, Config, DiskAccessMode, Error, FileRules, Store, TableConfig,
};

fn cfg(rules: FileRules) -> Config {
    let mut c = common::test_config(DiskAccessMode::Mmap, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 512;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 1 << 20;
    c.table.background_compaction = false;
    c
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// A closed store: table `t` with two segments and unflushed records spread over
/// several commit log files, snapshot `keep`. With `pending`, every deletion was refused,
/// so `deletions.pending` holds entries.
fn build(dir: &Path, pending: bool) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let rules = if pending {
        FileRules::windows_emulation_with_refusals(1.0, 3)
    } else {
        FileRules::posix()
    };
    let store = Store::open(dir, cfg(rules)).unwrap();
    let t = store.table("t").unwrap();
    let mut model = BTreeMap::new();
    for round in 0..3u32 {
        for i in round * 20..round * 20 + 30 {
            let v = format!("v{round}-{i}").into_bytes();
            t.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        if round < 2 {
            t.flush().unwrap();
        }
        if round == 0 {
            store.snapshot("keep", None).unwrap();
        }
    }
    if pending {
        store.snapshot("gone", None).unwrap();
        store.clear_snapshot("gone").unwrap();
    }
    drop(t);
    // Close without flushing the last round: abandon, like a crash (the periodic log
    // has written every record to the OS).
    store.tables().commit_log().sync().unwrap();
    drop(store);
    model
}

fn open(dir: &Path) -> segstore::Result<Store> {
    Store::open(dir, cfg(FileRules::posix()))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mutation {
    Flip(usize),
    Truncate(usize),
    AppendGarbage,
    Empty,
}

fn mutations(len: usize) -> Vec<Mutation> {
    let mut v = vec![Mutation::AppendGarbage, Mutation::Empty];
    for off in [
        0,
        1,
        len / 3,
        len / 2,
        len.saturating_sub(2),
        len.saturating_sub(1),
    ] {
        v.push(Mutation::Flip(off));
    }
    // (Cutting only the final newline of a text file loses nothing: not tried.)
    for cut in [1, len / 2, len.saturating_sub(2)] {
        v.push(Mutation::Truncate(cut));
    }
    v
}

fn apply(path: &Path, m: Mutation) {
    let mut b = std::fs::read(path).unwrap();
    match m {
        Mutation::Flip(off) => b[off] ^= 0x5a,
        Mutation::Truncate(n) => b.truncate(n),
        Mutation::AppendGarbage => b.extend_from_slice(b"\x00garbage\xff\n"),
        Mutation::Empty => b.clear(),
    }
    std::fs::write(path, b).unwrap();
}

fn assert_corrupt_naming(r: segstore::Result<Store>, file: &Path, what: &str) {
    match r {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, file, "{what}"),
        Err(e) => panic!(
            "{what}: expected Corrupt naming {}, got {e}",
            file.display()
        ),
        Ok(_) => panic!("{what}: opened despite a corrupt {}", file.display()),
    }
}

/// Each mutation of the file at `rel` (relative to the store) gives `Corrupt` naming it.
fn each_mutation_is_corrupt(rel: &str, pending: bool) -> usize {
    let base = tempfile::tempdir().unwrap();
    build(base.path(), pending);
    let len = std::fs::metadata(base.path().join(rel)).unwrap().len() as usize;
    assert!(len > 0, "{rel}");
    let mut tried = 0;
    for m in mutations(len) {
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(base.path(), tmp.path());
        let file = tmp.path().canonicalize().unwrap().join(rel);
        apply(&file, m);
        assert_corrupt_naming(open(tmp.path()), &file, &format!("{rel} {m:?}"));
        tried += 1;
    }
    eprintln!("{rel}: {tried} corrupt variants, each refused naming the file");
    tried
}

#[test]
fn corrupt_table_manifest_is_refused_naming_it() {
    each_mutation_is_corrupt("t.manifest", false);
}

#[test]
fn corrupt_snapshot_manifest_is_refused_naming_it() {
    each_mutation_is_corrupt("snapshots/keep/manifest", false);
}

#[test]
fn corrupt_positions_file_is_refused_naming_it() {
    each_mutation_is_corrupt("commitlog/positions", false);
}

#[test]
fn corrupt_deletion_journal_is_refused_naming_it() {
    let base = tempfile::tempdir().unwrap();
    build(base.path(), true);
    let journal = std::fs::read_to_string(base.path().join("deletions.pending")).unwrap();
    assert!(journal.lines().count() > 1, "entries pending: {journal}");
    each_mutation_is_corrupt("deletions.pending", true);
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let n = segstore::table::commitlog::replay::parse_file_name(
                &e.file_name().to_string_lossy(),
            )?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// The offset just past the first record of a log file (20-byte file header, then
/// frames of `len u32 LE | crc u32 LE | body`).
fn first_record_end(path: &Path) -> usize {
    let b = std::fs::read(path).unwrap();
    let body_len = u32::from_le_bytes(b[20..24].try_into().unwrap()) as usize;
    let frame_header = segstore::table::commitlog::format::FRAME_HEADER_LEN;
    20 + frame_header + body_len
}

#[test]
fn corrupt_record_in_an_older_log_file_is_refused_naming_it() {
    let base = tempfile::tempdir().unwrap();
    build(base.path(), false);
    let files = log_files(base.path());
    assert!(files.len() >= 3, "{files:?}");
    // The oldest file still holding unflushed records: the first one left after the
    // flushes released the older ones. Corrupt a record in its middle, and its tail.
    let victim_name = files[0].file_name().unwrap().to_owned();
    let len = std::fs::metadata(&files[0]).unwrap().len() as usize;
    let mut tried = 0;
    for m in [
        Mutation::Flip(len / 2),
        Mutation::Flip(len - 3),
        Mutation::Truncate(len - 5),
        // Cut at the end of the header, and at a record boundary: the file ends cleanly
        // but the next one starts beyond it.
        Mutation::Truncate(20),
        Mutation::Truncate(first_record_end(&files[0])),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(base.path(), tmp.path());
        let file = tmp
            .path()
            .canonicalize()
            .unwrap()
            .join("commitlog")
            .join(&victim_name);
        apply(&file, m);
        assert_corrupt_naming(open(tmp.path()), &file, &format!("log {m:?}"));
        tried += 1;
    }
    eprintln!("older commit log file: {tried} corrupt variants refused");
}

#[test]
fn torn_or_flipped_log_tail_recovers_up_to_the_last_good_record() {
    let base = tempfile::tempdir().unwrap();
    let model = build(base.path(), false);
    let files = log_files(base.path());
    let newest = files.last().unwrap().clone();
    let newest_name = newest.file_name().unwrap().to_owned();
    let len = std::fs::metadata(&newest).unwrap().len() as usize;
    assert!(len > 40, "the newest file holds records");
    let mut tried = 0;
    for m in [
        Mutation::Flip(len - 3),
        Mutation::Flip(len / 2),
        Mutation::Truncate(len - 1),
        Mutation::Truncate(len / 2),
        Mutation::AppendGarbage,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(base.path(), tmp.path());
        let file = tmp.path().join("commitlog").join(&newest_name);
        apply(&file, m);
        let store = open(tmp.path()).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        let t = store.table("t").unwrap();
        // Every key reads either its newest value or nothing/an older one, and the
        // surviving records are a prefix: once a key of the last round is missing,
        // every later write of the last round is too.
        let mut lost = 0;
        for (k, v) in &model {
            match t.get(k).unwrap() {
                Some(got) if &got == v => {}
                _ => lost += 1,
            }
        }
        if matches!(m, Mutation::AppendGarbage) {
            assert_eq!(lost, 0, "garbage after the last record loses nothing");
        } else {
            assert!(lost > 0 && lost <= 30, "{m:?}: lost {lost}");
        }
        // The store works on: writes, flush, reopen.
        t.put(b"after", b"1").unwrap();
        t.flush().unwrap();
        drop(t);
        assert!(store.close().unwrap().is_clean());
        let store = open(tmp.path()).unwrap();
        assert_eq!(
            store.table("t").unwrap().get(b"after").unwrap().as_deref(),
            Some(&b"1"[..])
        );
        store.close().unwrap();
        tried += 1;
    }
    eprintln!("newest commit log file: {tried} torn/flipped tails recovered");
}

/// Every file under `dir` (relative paths), sorted; `LOCK` left out.
fn tree(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), out);
            } else if e.file_name() != "LOCK" {
                out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// Issue 11, defect 6: a deleted `<table>.manifest` used to make the table's segments
/// orphans, deleted at open: the table silently lost. Now the open is refused, naming
/// the missing manifest, and nothing is deleted; a second open refuses the same way.
#[test]
fn missing_table_manifest_is_refused_and_nothing_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), false);
    let dir = tmp.path().canonicalize().unwrap();
    let manifest = dir.join("t.manifest");
    std::fs::remove_file(&manifest).unwrap();
    let before = tree(&dir);
    assert!(
        before
            .iter()
            .any(|f| f.to_string_lossy().starts_with("t-")
                && f.to_string_lossy().ends_with("-Data.db")),
        "{before:?}"
    );
    for attempt in 0..2 {
        assert_corrupt_naming(open(&dir), &manifest, &format!("attempt {attempt}"));
        assert_eq!(tree(&dir), before, "attempt {attempt}: nothing deleted");
    }
    // The positions file alone also knows the table had flushed segments: with its
    // segment files gone as well, the open is still refused, not an empty table.
    for f in &before {
        if f.to_string_lossy().starts_with("t-") {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
    }
    let before = tree(&dir);
    assert_corrupt_naming(open(&dir), &manifest, "no segment files left");
    assert_eq!(tree(&dir), before, "nothing deleted");
}

/// What recovery still removes: temp files (of a table with a manifest or not) and
/// segment files of a table whose manifest does not name them.
#[test]
fn temp_files_and_unnamed_segments_are_still_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let model = build(tmp.path(), false);
    let dir = tmp.path().canonicalize().unwrap();
    let data = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-Data.db"))
        .unwrap();
    // A copy under an id the manifest does not name, and temp files.
    let orphans = [
        dir.join("t-900-Data.db"),
        dir.join("t-901-Data.db.tmp"),
        dir.join("never-1-Data.db.tmp"),
        dir.join("t.manifest.tmp"),
    ];
    for o in &orphans {
        std::fs::copy(&data, o).unwrap();
    }
    let store = open(&dir).unwrap();
    for o in &orphans {
        assert!(!o.exists(), "{} removed", o.display());
    }
    assert_eq!(store.table_names(), vec!["t".to_string()]);
    let t = store.table("t").unwrap();
    for (k, v) in &model {
        assert_eq!(t.get(k).unwrap().as_deref(), Some(&v[..]));
    }
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// Issue 11, defect 5: replay never compared the oldest remaining commit log file with
/// `replay_from`, so deleting the oldest file still needed opened without error and lost
/// acknowledged writes. Now: `Corrupt` naming the oldest remaining file and the range.
#[test]
fn deleted_commit_log_file_still_needed_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), false);
    let dir = tmp.path().canonicalize().unwrap();
    let files = log_files(&dir);
    assert!(files.len() >= 2, "{files:?}");
    // The oldest file holds records of the last round, which was never flushed.
    std::fs::remove_file(&files[0]).unwrap();
    match open(&dir) {
        Err(Error::Corrupt { path, reason, .. }) => {
            assert_eq!(path, files[1]);
            assert!(reason.contains("missing"), "{reason}");
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("opened with a needed commit log file deleted"),
    }
}

/// The normal cases around defect 5 still open: a fresh store, an empty log, a log
/// whose older files were released, and a log every record of which was flushed, with
/// its files deleted (a drained store whose commit log was removed).
#[test]
fn commit_log_without_missing_records_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Fresh, then empty (header only).
    open(dir).unwrap().close().unwrap();
    open(dir).unwrap().close().unwrap();
    // Released files: several rolls and flushes, then a crash.
    let store = open(dir).unwrap();
    let t = store.table("t").unwrap();
    let mut model = BTreeMap::new();
    for i in 0..200u32 {
        t.put(key(i), b"v").unwrap();
        model.insert(key(i), b"v".to_vec());
        if i % 50 == 49 {
            t.flush().unwrap();
        }
    }
    t.put(b"unflushed", b"u").unwrap();
    store.tables().commit_log().sync().unwrap();
    drop(t);
    drop(store);
    let store = open(dir).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(t.get(b"unflushed").unwrap().as_deref(), Some(&b"u"[..]));
    for k in model.keys() {
        assert!(t.get(k).unwrap().is_some());
    }
    // Everything flushed, then the log files deleted: nothing is missing.
    t.flush().unwrap();
    drop(t);
    drop(store);
    let files = log_files(dir);
    assert!(!files.is_empty());
    std::fs::remove_file(&files[0]).unwrap();
    let store = open(dir).unwrap();
    assert_eq!(
        store
            .table("t")
            .unwrap()
            .get(b"unflushed")
            .unwrap()
            .as_deref(),
        Some(&b"u"[..])
    );
    store.close().unwrap();
    for f in log_files(dir) {
        std::fs::remove_file(f).unwrap();
    }
    let store = open(dir).unwrap();
    assert_eq!(
        store.table("t").unwrap().get(key(7)).unwrap().as_deref(),
        Some(&b"v"[..])
    );
    store.close().unwrap();
}

/// Issue 18, part 5: a deleted `commitlog/positions` was reported as a missing older
/// commit log file (`Corrupt` naming the oldest log file). Now `Corrupt` names the
/// positions file and the evidence that it existed: the oldest log file starts beyond
/// sequence number 1 (older files were released, which follows a positions write), and
/// the segments on disk. A log that starts at 1 still opens without the file.
#[test]
fn missing_positions_file_is_refused_naming_it_and_the_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), false);
    let dir = tmp.path().canonicalize().unwrap();
    let positions = dir.join("commitlog").join("positions");
    std::fs::remove_file(&positions).unwrap();
    let oldest = log_files(&dir)[0].clone();
    let oldest_name = oldest.file_name().unwrap().to_string_lossy().into_owned();
    assert_ne!(oldest_name, "commitlog-1.log", "older files were released");
    for attempt in ["writable", "read-only"] {
        let r = if attempt == "writable" {
            open(&dir)
        } else {
            Store::open_read_only(&dir, cfg(FileRules::posix()))
        };
        match r {
            Err(Error::Corrupt { path, reason, .. }) => {
                assert_eq!(path, positions, "{attempt}: {reason}");
                assert!(reason.starts_with("missing"), "{attempt}: {reason}");
                assert!(reason.contains(&oldest_name), "{attempt}: {reason}");
                assert!(reason.contains("starts at sequence number"), "{reason}");
                assert!(reason.contains("2 segment(s)"), "{attempt}: {reason}");
                eprintln!("{attempt}: refused: {reason}");
            }
            Err(e) => panic!("{attempt}: expected Corrupt naming the positions file, got {e}"),
            Ok(_) => panic!("{attempt}: opened without its positions file"),
        }
    }

    // Only in the log, which starts at 1: without positions, replay takes it all.
    let fresh = tempfile::tempdir().unwrap();
    let store = open(fresh.path()).unwrap();
    store.table("t").unwrap().put(b"k", b"v").unwrap();
    store.tables().commit_log().sync().unwrap();
    drop(store);
    let _ = std::fs::remove_file(fresh.path().join("commitlog").join("positions"));
    let store = open(fresh.path()).unwrap();
    assert_eq!(
        store.table("t").unwrap().get(b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    store.close().unwrap();
}
