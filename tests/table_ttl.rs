//! Issue 20 item 3, TTL: Cassandra's expiring cells. `put_ttl` on tables, batches and
//! transactions and a default TTL per table; every read (gets, `get_with`, `multi_get`,
//! `contains_key`, scans both ways, read views) sees an expired cell as a tombstone at
//! its timestamp, in the memtable, after a flush, after compaction and after replay;
//! compaction turns it into a tombstone and purges it `gc_grace` after its expiry; bad
//! TTLs are typed errors. Time is the store's expiry clock, set by the test
//! (`Store::set_expiry_clock`): nothing sleeps. The model test (`tests/table_model/`)
//! mixes TTL with everything else.

use std::time::Duration;

use segstore::{
    Batch, CompactionStrategy, Config, Error, Store, Table, TableConfig, WriteBatch, MAX_TTL,
};

/// The expiry clock's start in every test (microseconds since the epoch).
const T0: u64 = 1_700_000_000_000_000;
const SEC: u64 = 1_000_000;

fn open(dir: &std::path::Path) -> Store {
    let s = Store::open(dir, Config::default()).unwrap();
    s.set_expiry_clock(Some(T0));
    s
}

fn get(t: &Table, k: &str) -> Option<Vec<u8>> {
    t.get(k).unwrap().map(|v| v.to_vec())
}

fn keys(t: &Table) -> Vec<Vec<u8>> {
    t.scan(..).unwrap().map(|r| r.unwrap().0).collect()
}

fn keys_back(t: &Table) -> Vec<Vec<u8>> {
    t.scan(..).unwrap().rev().map(|r| r.unwrap().0).collect()
}

/// Every point read of `k` agrees that it is `want`.
fn assert_reads(t: &Table, k: &str, want: Option<&[u8]>) {
    assert_eq!(get(t, k).as_deref(), want, "get {k}");
    assert_eq!(
        t.contains_key(k).unwrap(),
        want.is_some(),
        "contains_key {k}"
    );
    assert_eq!(
        t.get_with(k, |v| v.map(<[u8]>::to_vec)).unwrap().as_deref(),
        want,
        "get_with {k}"
    );
    let many = t.multi_get([k]).unwrap();
    assert_eq!(many[0].as_deref(), want, "multi_get {k}");
}

/// Before and after expiry, in the memtable, a segment and a compacted segment.
#[test]
fn an_expired_cell_reads_as_deleted_wherever_it_lies() {
    for place in ["memtable", "segment", "compacted", "two segments"] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let t = store.table("t").unwrap();
        // An older version without TTL: expiry must hide it too.
        t.put("a", "old").unwrap();
        if place == "two segments" {
            t.flush().unwrap();
        }
        t.put_ttl("a", "new", Duration::from_secs(10)).unwrap();
        t.put("b", "forever").unwrap();
        match place {
            "segment" | "two segments" => t.flush().unwrap(),
            "compacted" => {
                t.flush().unwrap();
                t.compact().unwrap();
            }
            _ => {}
        }
        assert_reads(&t, "a", Some(b"new"));
        assert_eq!(keys(&t), [b"a".to_vec(), b"b".to_vec()], "{place}");
        // One microsecond before expiry: live; at expiry: gone.
        store.set_expiry_clock(Some(T0 + 10 * SEC - 1));
        assert_reads(&t, "a", Some(b"new"));
        store.set_expiry_clock(Some(T0 + 10 * SEC));
        assert_reads(&t, "a", None);
        assert_reads(&t, "b", Some(b"forever"));
        assert_eq!(keys(&t), [b"b".to_vec()], "{place}: scan");
        assert_eq!(keys_back(&t), [b"b".to_vec()], "{place}: reverse scan");
        // The cell itself is still the expiring one (repair and tools see it).
        let c = t.get_cell("a").unwrap().unwrap();
        assert!(!c.tombstone && c.expires == T0 + 10 * SEC, "{place}: {c:?}");
        assert!(c.is_dead_at(store.expiry_now()));
        drop(t);
        store.close().unwrap();
    }
}

#[test]
fn a_read_view_judges_expiry_at_its_creation() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    t.put_ttl("a", "v", Duration::from_secs(5)).unwrap();
    t.put_ttl("b", "v", Duration::from_secs(50)).unwrap();
    let before = store.read_view().unwrap();
    assert_eq!(before.expiry_now(), T0);
    store.set_expiry_clock(Some(T0 + 20 * SEC));
    let after = store.read_view().unwrap();
    t.flush().unwrap();
    t.compact().unwrap();
    // The old view still sees both (a view never changes), the new one only `b`.
    assert!(before.get(&t, "a").unwrap().is_some());
    let rows: Vec<_> = before.scan(&t, ..).unwrap().map(|r| r.unwrap().0).collect();
    assert_eq!(rows, [b"a".to_vec(), b"b".to_vec()]);
    assert!(after.get(&t, "a").unwrap().is_none());
    assert!(!after.contains_key(&t, "a").unwrap());
    let rows: Vec<_> = after
        .scan(&t, ..)
        .unwrap()
        .rev()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(rows, [b"b".to_vec()]);
    // A transaction reads through its view.
    let tx = store.transaction().unwrap();
    assert!(tx.get(&t, "a").unwrap().is_none());
    assert!(tx.get(&t, "b").unwrap().is_some());
}

#[test]
fn compaction_turns_expired_cells_into_tombstones_and_purges_them_after_gc_grace() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut cfg = TableConfig::default();
    cfg.gc_grace_secs = 100;
    cfg.background_compaction = false;
    let t = store.table_with("t", cfg).unwrap();
    for i in 0..50 {
        t.put_ttl(format!("k{i:02}"), vec![7u8; 1000], Duration::from_secs(10))
            .unwrap();
    }
    t.put("keep", "x").unwrap();
    t.flush().unwrap();
    let bytes = |t: &Table| -> u64 {
        t.segments()
            .view()
            .segments
            .iter()
            .map(|h| h.stats().data_len)
            .sum()
    };
    let full = bytes(&t);
    // Not yet expired: compaction keeps the cells and their values.
    t.compact().unwrap();
    assert_eq!(bytes(&t), full);
    // Expired, within gc_grace: tombstones (the values are gone), still read as deleted.
    store.set_expiry_clock(Some(T0 + 50 * SEC));
    t.compact().unwrap();
    let tombstones = bytes(&t);
    assert!(tombstones < full / 10, "{tombstones} of {full} bytes");
    let c = t.get_cell("k00").unwrap().unwrap();
    assert!(c.tombstone && c.expires == T0 + 10 * SEC, "{c:?}");
    assert_eq!(keys(&t), [b"keep".to_vec()]);
    // gc_grace after the expiry (not after the write): purged.
    store.set_expiry_clock(Some(T0 + 110 * SEC - 1));
    t.compact().unwrap();
    assert!(
        t.get_cell("k00").unwrap().is_some(),
        "purged before gc_grace"
    );
    store.set_expiry_clock(Some(T0 + 110 * SEC));
    t.compact().unwrap();
    assert_eq!(t.get_cell("k00").unwrap(), None);
    let view = t.segments().view();
    let cells: u64 = view.segments.iter().map(|h| h.stats().entry_count).sum();
    assert_eq!(cells, 1, "only `keep` is left");
    assert_eq!(keys(&t), [b"keep".to_vec()]);
}

/// An expired cell's tombstone is not purged while an older cell outside the merge
/// could come back (invariant 5): here in a large segment a size-tiered round leaves out.
#[test]
fn an_expired_cell_is_not_purged_over_an_older_cell_outside_the_merge() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut cfg = TableConfig::default();
    cfg.gc_grace_secs = 0;
    cfg.background_compaction = false;
    cfg.compaction.strategy = CompactionStrategy::SizeTiered;
    cfg.compaction.min_threshold = 2;
    cfg.compaction.min_segment_size = 1;
    let t = store.table_with("t", cfg).unwrap();
    // A large segment holding an old version of `a`.
    let mut b = WriteBatch::new();
    b.put_at("a", "old", 1);
    for i in 0..200 {
        b.put(format!("big{i:03}"), vec![1u8; 1000]);
    }
    t.write(&b).unwrap();
    t.flush().unwrap();
    // Two small segments of about one size: `a` with a TTL, and another key.
    t.put_ttl("a", "new", Duration::from_secs(1)).unwrap();
    t.flush().unwrap();
    t.put("z", "v").unwrap();
    t.flush().unwrap();
    store.set_expiry_clock(Some(T0 + 5 * SEC));
    assert_eq!(
        t.compact_pending().unwrap(),
        1,
        "the two small segments merged"
    );
    assert_eq!(t.segments().view().segments.len(), 2);
    assert_reads(&t, "a", None);
    let c = t.get_cell("a").unwrap().unwrap();
    assert!(
        c.tombstone && c.expires == T0 + SEC,
        "kept as a tombstone: {c:?}"
    );
    // With the old cell in the merge too, both go.
    t.compact().unwrap();
    assert_reads(&t, "a", None);
    assert_eq!(t.get_cell("a").unwrap(), None);
}

#[test]
fn batches_and_transactions_put_with_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let mut wb = WriteBatch::new();
    wb.put_ttl("k1", "v", Duration::from_secs(1))
        .put("k2", "v")
        .put_ttl_at("k3", "v", 5, Duration::from_secs(3));
    a.write(&wb).unwrap();
    let mut batch = Batch::new();
    batch
        .put_ttl(&a, "k4", "v", Duration::from_secs(2))
        .put_ttl(&b, "k1", "v", Duration::from_secs(2));
    store.write(&batch).unwrap();
    let mut tx = store.transaction().unwrap();
    tx.put_ttl(&b, "k2", "v", Duration::from_secs(1)).unwrap();
    // Its own reads see it: the TTL counts from the commit.
    assert!(tx.get(&b, "k2").unwrap().is_some());
    tx.put_ttl(&b, "k3", "v", Duration::from_secs(1)).unwrap();
    tx.put(&b, "k3", "overwritten").unwrap(); // a later put without TTL wins
    tx.commit().unwrap();
    // A later put of a key in one batch overrides its TTL too (the last operation wins).
    let mut wb = WriteBatch::new();
    wb.put_ttl("k5", "v", Duration::from_secs(1))
        .put("k5", "kept");
    a.write(&wb).unwrap();
    store.set_expiry_clock(Some(T0 + SEC));
    assert_eq!(
        keys(&a),
        [
            b"k2".to_vec(),
            b"k3".to_vec(),
            b"k4".to_vec(),
            b"k5".to_vec()
        ]
    );
    assert_eq!(keys(&b), [b"k1".to_vec(), b"k3".to_vec()]);
    store.set_expiry_clock(Some(T0 + 3 * SEC));
    assert_eq!(keys(&a), [b"k2".to_vec(), b"k5".to_vec()]);
    assert_eq!(keys(&b), [b"k3".to_vec()]);
    assert_eq!(get(&b, "k3").as_deref(), Some(&b"overwritten"[..]));
}

#[test]
fn expiry_survives_replay_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let t = store.table("t").unwrap();
        t.put_ttl("flushed", "v", Duration::from_secs(10)).unwrap();
        t.flush().unwrap();
        t.put_ttl("logged", "v", Duration::from_secs(10)).unwrap();
        // Dropped without close: `logged` comes back from the commit log.
    }
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    assert_eq!(keys(&t), [b"flushed".to_vec(), b"logged".to_vec()]);
    assert_eq!(
        t.get_cell("logged").unwrap().unwrap().expires,
        T0 + 10 * SEC
    );
    store.set_expiry_clock(Some(T0 + 10 * SEC));
    assert!(keys(&t).is_empty());
}

#[test]
fn a_default_ttl_applies_to_puts_naming_none_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let mut cfg = TableConfig::default();
        cfg.default_ttl_secs = 60;
        let t = store.table_with("t", cfg).unwrap();
        t.put("default", "v").unwrap();
        t.write(WriteBatch::new().put_at("explicit_ts", "v", 1))
            .unwrap();
        t.put_ttl("own", "v", Duration::from_secs(600)).unwrap();
        t.delete("gone").unwrap();
        assert_eq!(
            t.get_cell("default").unwrap().unwrap().expires,
            T0 + 60 * SEC
        );
        assert_eq!(
            t.get_cell("explicit_ts").unwrap().unwrap().expires,
            T0 + 60 * SEC
        );
        assert_eq!(
            t.get_cell("gone").unwrap().unwrap().expires,
            0,
            "deletes never expire"
        );
        // Another table has none.
        store.table("plain").unwrap().put("k", "v").unwrap();
        assert_eq!(
            store
                .table("plain")
                .unwrap()
                .get_cell("k")
                .unwrap()
                .unwrap()
                .expires,
            0
        );
        store.close().unwrap();
    }
    // Reopened by `table` (no settings given): the persisted default TTL stands.
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    assert_eq!(t.config().default_ttl_secs, 60);
    store.set_expiry_clock(Some(T0 + SEC));
    t.put("later", "v").unwrap();
    assert_eq!(t.get_cell("later").unwrap().unwrap().expires, T0 + 61 * SEC);
    store.set_expiry_clock(Some(T0 + 60 * SEC));
    assert_eq!(keys(&t), [b"later".to_vec(), b"own".to_vec()]);
    store.set_expiry_clock(Some(T0 + 600 * SEC));
    assert!(keys(&t).is_empty());
}

#[test]
fn a_ttl_of_zero_or_past_the_maximum_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    for bad in [
        Duration::ZERO,
        Duration::from_nanos(999),
        MAX_TTL + Duration::from_secs(1),
    ] {
        match t.put_ttl("k", "v", bad) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains(&format!("{bad:?}")), "{why}")
            }
            r => panic!("TTL {bad:?}: {r:?}"),
        }
        // In a batch the whole write is refused, nothing of it written.
        let mut wb = WriteBatch::new();
        wb.put("other", "v").put_ttl("k", "v", bad);
        assert!(matches!(t.write(&wb), Err(Error::InvalidArgument(_))));
        let mut tx = store.transaction().unwrap();
        assert!(matches!(
            tx.put_ttl(&t, "k", "v", bad),
            Err(Error::InvalidArgument(_))
        ));
        assert!(tx.is_empty());
    }
    assert!(keys(&t).is_empty());
    t.put_ttl("k", "v", MAX_TTL).unwrap();
    let mut cfg = TableConfig::default();
    cfg.default_ttl_secs = MAX_TTL.as_secs() + 1;
    match store.table_with("u", cfg) {
        Err(Error::InvalidConfig { setting, .. }) => assert_eq!(setting, "default_ttl"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn a_default_ttl_reads_from_a_configuration_file() {
    let c: TableConfig = toml::from_str("default_ttl = \"7d\"").unwrap();
    assert_eq!(c.default_ttl_secs, 7 * 86_400);
    let text = toml::to_string(&c).unwrap();
    assert!(text.contains("default_ttl = \"7d\""), "{text}");
}

#[test]
fn a_transaction_that_read_a_cell_expiring_before_its_commit_conflicts() {
    // No write touches the key between the view and the commit, but the value the
    // transaction read is gone at the commit: the check must compare values (the
    // memtable shortcut "nothing wrote it since the view" does not hold for TTL cells).
    for flushed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let t = store.table("t").unwrap();
        t.put_ttl("k", "v", Duration::from_secs(5)).unwrap();
        if flushed {
            t.flush().unwrap();
        }
        let mut tx = store.transaction().unwrap();
        assert_eq!(tx.get(&t, "k").unwrap().as_deref(), Some(&b"v"[..]));
        tx.put(&t, "copy", "v").unwrap();
        store.set_expiry_clock(Some(T0 + 10 * SEC));
        match tx.commit() {
            Err(Error::Conflict { key, .. }) => assert_eq!(key, b"k", "flushed {flushed}"),
            other => panic!("flushed {flushed}: {other:?}"),
        }
        assert_eq!(get(&t, "copy"), None);
    }
}
