//! Per-table settings (issue 20 item 4): `Store::table_with` persists a table's own
//! `TableConfig` in its manifest, a reopen applies it, a later `table_with` with other
//! settings keeps the persisted ones, `set_table_config` changes them, and a drop, a
//! checkpoint and bad settings behave as documented.

use std::path::Path;

use segstore::lifecycle::Manifest;
use segstore::{Compression, Config, Error, Store, TableConfig};

fn config() -> Config {
    let mut c = Config::default();
    c.table.background_compaction = false;
    c
}

/// A Raft log's settings: tombstones purged at the next compaction.
fn raft_log() -> TableConfig {
    let mut c = TableConfig::default();
    c.gc_grace_secs = 0;
    c.background_compaction = false;
    c.memtable_flush_bytes = 1 << 20;
    c
}

/// Cells (tombstones included) a table holds.
fn cells(store: &Store, table: &str) -> usize {
    let t = store.table(table).unwrap();
    let n = t.scan_cells(..).unwrap().count();
    drop(t);
    n
}

/// Write `n` keys, delete them, flush twice (two segments) and compact.
fn write_delete_compact(store: &Store, table: &str, n: u32) {
    let t = store.table(table).unwrap();
    for i in 0..n {
        t.put(i.to_be_bytes(), b"v").unwrap();
    }
    t.flush().unwrap();
    for i in 0..n {
        t.delete(i.to_be_bytes()).unwrap();
    }
    t.flush().unwrap();
    t.compact().unwrap();
}

#[test]
fn tables_with_their_own_gc_grace_share_a_store_and_keep_it_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        let log = store.table_with("raft_log", raft_log()).unwrap();
        assert_eq!(log.config().gc_grace_secs, 0);
        let users = store.table("users").unwrap();
        assert_eq!(
            users.config().gc_grace_secs,
            TableConfig::default().gc_grace_secs
        );
        drop((log, users));
        write_delete_compact(&store, "raft_log", 100);
        write_delete_compact(&store, "users", 100);
        // gc_grace 0 purged the tombstones; 10 days kept them.
        assert_eq!(cells(&store, "raft_log"), 0);
        assert_eq!(cells(&store, "users"), 100);
        store.close().unwrap();
    }
    // A reopen without the settings: the persisted ones stand, for `table` too.
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(*store.table("raft_log").unwrap().config(), raft_log());
    assert_eq!(*store.table("users").unwrap().config(), config().table);
    store.close().unwrap();
}

#[test]
fn persisted_settings_stand_until_set_table_config_changes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut other = raft_log();
    other.gc_grace_secs = 3600;
    {
        let store = Store::open(dir.path(), config()).unwrap();
        store.table_with("log", raft_log()).unwrap();
        store.close().unwrap();
    }
    {
        let store = Store::open(dir.path(), config()).unwrap();
        // Different settings on a reopen: the persisted ones stand.
        let t = store.table_with("log", other.clone()).unwrap();
        assert_eq!(*t.config(), raft_log());
        // An explicit change applies at once and persists.
        store.set_table_config("log", other.clone()).unwrap();
        assert_eq!(*t.config(), other);
        drop(t);
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(*store.table("log").unwrap().config(), other);
    let e = store.set_table_config("nope", other).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    store.close().unwrap();
}

#[test]
fn a_table_created_without_settings_takes_the_first_table_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"k", b"v").unwrap();
    let same = store.table_with("t", raft_log()).unwrap();
    assert!(std::sync::Arc::ptr_eq(&t, &same));
    assert_eq!(*t.config(), raft_log());
    drop((t, same));
    store.close().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(*t.config(), raft_log());
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(t);
    store.close().unwrap();
}

#[test]
fn bad_settings_are_refused_and_a_dropped_table_leaves_none_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let mut bad = TableConfig::default();
    bad.max_frozen_memtables = 0;
    let e = store.table_with("t", bad).unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    assert!(
        store.table_names().is_empty(),
        "nothing created by a refused call"
    );
    store.table_with("t", raft_log()).unwrap();
    store.drop_table("t").unwrap();
    // A table of the name created again starts with the store's settings.
    assert_eq!(*store.table("t").unwrap().config(), config().table);
    store.close().unwrap();
}

#[test]
fn a_checkpoint_carries_each_tables_settings() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let dest = copy.path().join("cp");
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .table_with("log", raft_log())
        .unwrap()
        .put(b"k", b"v")
        .unwrap();
    store.checkpoint(&dest).unwrap();
    store.close().unwrap();
    let cp = Store::open(&dest, config()).unwrap();
    assert_eq!(*cp.table("log").unwrap().config(), raft_log());
    cp.close().unwrap();
}

#[test]
#[allow(clippy::disallowed_methods)] // damages a manifest the way a bad edit would
fn a_manifest_with_bad_settings_fails_the_open_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        store.table_with("log", raft_log()).unwrap();
        store.close().unwrap();
    }
    let path = dir.path().join("log.manifest");
    let mut m = Manifest::load(&path).unwrap();
    m.settings.insert("max_frozen_memtables".into(), "0".into());
    std::fs::write(&path, m.encode()).unwrap();
    // Read when the table is opened (at open for a table with records to replay).
    let store = Store::open(dir.path(), config()).unwrap();
    for e in [
        store.table("log").unwrap_err(),
        store.table_with("log", raft_log()).unwrap_err(),
    ] {
        match &e {
            Error::Corrupt {
                path: p, reason, ..
            } => {
                assert_eq!(p, &path, "{e}");
                assert!(reason.contains("max_frozen_memtables"), "{e}");
            }
            _ => panic!("expected Corrupt, got {e}"),
        }
    }
    store.close().unwrap();
    assert!(Path::new(&path).exists(), "nothing deleted");
}

/// Data bytes of `table`'s newest segment, and its key count.
fn newest_segment(store: &Store, table: &str) -> (u64, u64) {
    let t = store.table(table).unwrap();
    let view = t.segments().view();
    let s = view
        .segments
        .iter()
        .max_by_key(|h| h.name().id)
        .unwrap()
        .stats();
    (s.data_len, s.entry_count)
}

/// A JSON-like value: compressible, as a document store's rows are.
fn doc(i: u32) -> Vec<u8> {
    format!(r#"{{"id":{i},"name":"user{i}","email":"user{i}@example.com","tags":["a","b"]}}"#)
        .repeat(2)
        .into_bytes()
}

fn fill(store: &Store, table: &str, keys: std::ops::Range<u32>) {
    let t = store.table(table).unwrap();
    for i in keys {
        t.put(i.to_be_bytes(), doc(i)).unwrap();
    }
    t.flush().unwrap();
}

/// Compression per table (issue 19 item 6): a table's own `compression` decides how
/// its flushes write, beside tables that follow the store's; `set_table_config` changes
/// it for the next flush; a reopen keeps it; a format that cannot hold zstd refuses it.
#[test]
fn each_table_writes_its_own_compression() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let with = |c| {
        let mut t = TableConfig::default();
        t.background_compaction = false;
        t.compression = Some(c);
        t
    };
    store.table_with("lz4", with(Compression::Lz4)).unwrap();
    store.table_with("zstd", with(Compression::Zstd)).unwrap();
    for t in ["plain", "lz4", "zstd"] {
        fill(&store, t, 0..2_000);
    }
    let [plain, lz4, zstd] = ["plain", "lz4", "zstd"].map(|t| newest_segment(&store, t).0);
    assert!(lz4 * 2 < plain, "lz4 {lz4} against none {plain}");
    assert!(zstd < lz4, "zstd {zstd} against lz4 {lz4}");
    for t in ["plain", "lz4", "zstd"] {
        let table = store.table(t).unwrap();
        for i in (0..2_000u32).step_by(7) {
            let got = table.get(i.to_be_bytes()).unwrap();
            assert_eq!(got.as_deref(), Some(&doc(i)[..]), "{t} {i}");
        }
    }
    // Back to the store's (none) from the next flush on; kept across a reopen.
    let mut back = with(Compression::None);
    back.compression = None;
    store.set_table_config("zstd", back.clone()).unwrap();
    fill(&store, "zstd", 2_000..4_000);
    let (bytes, keys) = newest_segment(&store, "zstd");
    assert_eq!(keys, 2_000);
    assert!(
        bytes > plain * 9 / 10,
        "{bytes} against {plain} uncompressed"
    );
    store.close().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(store.table("zstd").unwrap().config().compression, None);
    assert_eq!(
        store.table("lz4").unwrap().config().compression,
        Some(Compression::Lz4)
    );
    let table = store.table("zstd").unwrap();
    let got = table.get(7u32.to_be_bytes()).unwrap();
    assert_eq!(got.as_deref(), Some(&doc(7)[..]));
    drop(table);
    store
        .set_table_config("lz4", with(Compression::Zstd))
        .unwrap();
    store.close().unwrap();
    // A store opened in a format that cannot hold a table's persisted zstd says so when
    // the table opens, naming the setting, instead of failing the table's next flush.
    let mut old = config();
    old.segment.format_version = 5;
    let store = Store::open(dir.path(), old).unwrap();
    match store.table("lz4") {
        Err(Error::InvalidConfig { setting, .. }) => assert_eq!(setting, "compression"),
        other => panic!("zstd table opened in format 5: {:?}", other.map(|_| ())),
    }
    assert!(
        store.table("zstd").is_ok(),
        "its settings follow the store's"
    );
    store.close().unwrap();
    // Format 5 blocks cannot hold zstd: refused, naming the setting.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config();
    c.segment.format_version = 5;
    let store = Store::open(dir.path(), c).unwrap();
    match store.table_with("t", with(Compression::Zstd)) {
        Err(Error::InvalidConfig { setting, .. }) => assert_eq!(setting, "compression"),
        other => panic!("zstd in format 5: {other:?}"),
    }
    store.close().unwrap();
}
