//! Issue 11, defect 2: a table manifest whose rename took effect but whose directory
//! fsync failed may or may not be the durable one. Nothing either manifest names may be
//! deleted: the table is poisoned (changes refused until reopened) and the next open
//! keeps whatever the manifest on disk names.

mod common;

use std::collections::BTreeMap;

use segstore::io::rules::{FaultKind, Faults};
use segstore::segment::SegmentName;
use segstore::{
    CommitLogConfig, CommitLogSync, Config, DiskAccessMode, Error, FileRules, Store, TableConfig,
};

fn cfg(rules: FileRules) -> Config {
    let mut c = common::test_config(DiskAccessMode::Mmap, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Batch;
    c.table = TableConfig::default();
    c.table.background_compaction = false;
    c
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

#[test]
fn failed_directory_fsync_after_a_manifest_rename_poisons_and_deletes_nothing() {
    for compaction in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let rules = FileRules::posix().with_faults(Faults::new());
        let store = Store::open(&dir, cfg(rules.clone())).unwrap();
        let t = store.table("t").unwrap();
        let mut model = BTreeMap::new();
        for i in 0..30 {
            t.put(key(i), b"one").unwrap();
            model.insert(key(i), b"one".to_vec());
        }
        t.flush().unwrap();
        for i in 20..50 {
            t.put(key(i), b"two").unwrap();
            model.insert(key(i), b"two".to_vec());
        }
        // The segment writer fsyncs the store directory twice (before its meta rename,
        // after it); the third fsync of that directory is the manifest's publish. (The
        // commit log directory is under it and matches too: a flush's checkpoint
        // publishes `commitlog/positions`.)
        let faults = rules.faults().unwrap();
        let store_dir = store.dir().to_string_lossy().into_owned();
        let (skip, changed) = if compaction {
            // compact = flush (3 fsyncs, and 1 of the commit log's) then merge (3 more).
            (6, "compaction")
        } else {
            (2, "flush")
        };
        faults.add(FaultKind::DirFsync, &store_dir, skip, 1);
        let e = if compaction { t.compact() } else { t.flush() }.unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)), "{changed}: {e}");
        assert_eq!(faults.count(FaultKind::DirFsync), 1, "{changed}");
        // Reads go on; changes are refused.
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_deref(), Some(&v[..]), "{changed}");
        }
        assert!(matches!(t.segments().writer(), Err(Error::Poisoned(_))));
        // The manifest on disk (the new one: the rename happened) names only files that
        // exist, also after every handle is gone.
        drop(t);
        drop(store);
        let on_disk = common::files(&dir);
        let manifest = std::fs::read_to_string(dir.join("t.manifest")).unwrap();
        for f in &on_disk {
            if let Some((seg, _)) = SegmentName::parse_file_name(f) {
                assert!(seg.table == "t", "{f}");
            }
        }
        let store = Store::open(&dir, cfg(FileRules::posix())).unwrap_or_else(|e| {
            panic!("{changed}: reopen failed: {e}\nmanifest:\n{manifest}\nfiles: {on_disk:?}")
        });
        let t = store.table("t").unwrap();
        for (k, v) in &model {
            assert_eq!(
                t.get(k).unwrap().as_deref(),
                Some(&v[..]),
                "{changed} after reopen"
            );
        }
        t.compact().unwrap();
        drop(t);
        assert!(store.close().unwrap().is_clean(), "{changed}");
    }
}
