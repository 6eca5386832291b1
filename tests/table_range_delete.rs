//! Issue 20 item 2: `Table::delete_range` writes one range tombstone (not a tombstone
//! per key) that every read honours, in the memtable, after a flush, through
//! compaction (covered cells dropped, the tombstone purged under the gc grace rule of
//! point tombstones), at replay, in read views, and in batches in order with their
//! other operations. The model test (`tests/table_model/`) mixes them with
//! everything else; these pin each place down.

use std::ops::Bound;

use segstore::{Batch, Config, Error, Store, TableConfig, WriteBatch};

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, Config::default()).unwrap()
}

/// 1,000 keys written and flushed into two segments, plus 100 in the memtable.
fn filled(store: &Store, name: &str) -> std::sync::Arc<segstore::Table> {
    let t = store.table(name).unwrap();
    for i in 0..1000 {
        t.put(key(i), format!("v{i}")).unwrap();
        if i == 499 {
            t.flush().unwrap();
        }
    }
    t.flush().unwrap();
    for i in 1000..1100 {
        t.put(key(i), format!("v{i}")).unwrap();
    }
    t
}

fn live_keys(t: &segstore::Table) -> Vec<Vec<u8>> {
    t.scan(..).unwrap().map(|r| r.unwrap().0).collect()
}

#[test]
fn every_read_hides_the_deleted_range_and_later_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = filled(&store, "t");
    let before = store.read_view().unwrap();
    let seq = t.delete_range(key(100)..key(1050)).unwrap();
    assert!(seq > 0);
    t.put(key(200), b"again").unwrap();
    for i in [0, 99, 1050, 1099] {
        assert!(
            t.get(key(i)).unwrap().is_some(),
            "key {i} outside the range"
        );
    }
    for i in [100, 499, 500, 999, 1000, 1049] {
        assert_eq!(t.get(key(i)).unwrap(), None, "key {i}");
        assert!(!t.contains_key(key(i)).unwrap());
        assert!(t.get_with(key(i), |v| v.is_none()).unwrap());
    }
    assert_eq!(t.get(key(200)).unwrap().as_deref(), Some(&b"again"[..]));
    let got = t
        .multi_get([key(99), key(100), key(200), key(1050)])
        .unwrap();
    let got: Vec<bool> = got.iter().map(Option::is_some).collect();
    assert_eq!(got, [true, false, true, true]);
    // Scans, forward and back, with seeks into and across the range.
    let want: Vec<Vec<u8>> = (0..100).chain([200]).chain(1050..1100).map(key).collect();
    assert_eq!(live_keys(&t), want);
    let mut back: Vec<_> = t.scan(..).unwrap().rev().map(|r| r.unwrap().0).collect();
    back.reverse();
    assert_eq!(back, want);
    let mut s = t.scan(..).unwrap();
    s.seek(key(150));
    assert_eq!(s.next().unwrap().unwrap().0, key(200));
    assert_eq!(s.next().unwrap().unwrap().0, key(1050));
    let mut s = t.scan(..).unwrap();
    s.seek_back(key(1049));
    assert_eq!(s.next_back().unwrap().unwrap().0, key(200));
    assert_eq!(s.next_back().unwrap().unwrap().0, key(99));
    // A read view taken before it still sees every key.
    assert_eq!(before.scan(&t, ..).unwrap().count(), 1100);
    assert!(before.get(&t, key(500)).unwrap().is_some());
    drop(before);
    // Flushed: the tombstone goes to a segment and still holds.
    t.flush().unwrap();
    assert_eq!(live_keys(&t), want);
    assert_eq!(t.get(key(700)).unwrap(), None);
    drop(t);
    store.close().unwrap();
}

#[test]
fn replay_and_reopen_keep_the_range_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let want: Vec<Vec<u8>> = (0..10).chain(990..1100).map(key).collect();
    {
        let store = open(dir.path());
        let t = filled(&store, "t");
        t.delete_range(key(10)..key(990)).unwrap();
        drop(t);
        drop(store); // no close: the commit log replays the range delete
    }
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    assert_eq!(live_keys(&t), want);
    t.flush().unwrap();
    drop(t);
    store.close().unwrap();
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    assert_eq!(live_keys(&t), want, "after a flush and a clean reopen");
    drop(t);
    store.close().unwrap();
}

#[test]
fn compaction_drops_covered_cells_and_purges_the_tombstone_after_gc_grace() {
    for grace in [u64::MAX / 1_000_000, 0] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let mut cfg = TableConfig::default();
        cfg.gc_grace_secs = grace;
        let t = store.table_with("t", cfg).unwrap();
        for i in 0..1000 {
            t.put(key(i), b"v").unwrap();
        }
        t.flush().unwrap();
        t.delete_range(..key(900)).unwrap();
        t.compact().unwrap();
        let segs = store.segment_stats();
        let cells: u64 = segs.iter().map(|s| s.entries).sum();
        assert_eq!(cells, 100, "grace {grace}: covered cells dropped");
        assert_eq!(live_keys(&t).len(), 100);
        // An old cell written under the range after the compaction: still deleted
        // while the tombstone is kept, back once it was purged (as for point tombstones).
        t.write(WriteBatch::new().put_at(key(5), b"old", 1))
            .unwrap();
        let back = t.get(key(5)).unwrap().is_some();
        assert_eq!(back, grace == 0, "grace {grace}");
        drop(t);
        store.close().unwrap();
    }
}

#[test]
fn in_a_batch_the_order_of_operations_decides() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    let u = store.table("u").unwrap();
    t.put(b"a1", b"old").unwrap();
    u.put(b"a1", b"old").unwrap();
    let mut b = WriteBatch::new();
    b.put(b"a2", b"before") // loses: written before the range delete
        .delete_range(&b"a"[..]..&b"b"[..])
        .put(b"a3", b"after") // survives
        .delete_range(&b"a3"[..]..=&b"a3"[..])
        .put(b"a4", b"last");
    t.write(&b).unwrap();
    let keys: Vec<_> = live_keys(&t);
    assert_eq!(keys, [b"a4".to_vec()]);
    // Across tables: all of it or none.
    let mut batch = Batch::new();
    batch
        .delete_range(&u, ..)
        .put(&u, b"z", b"1")
        .delete_range(&t, ..);
    store.write(&batch).unwrap();
    assert_eq!(live_keys(&u), [b"z".to_vec()]);
    assert!(live_keys(&t).is_empty());
    drop((t, u));
    store.close().unwrap();
}

#[test]
fn empty_and_inverted_ranges_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    t.put(b"b", b"1").unwrap();
    type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);
    let bad: [Bounds; 3] = [
        (
            Bound::Included(b"c".to_vec()),
            Bound::Excluded(b"a".to_vec()),
        ),
        (
            Bound::Included(b"b".to_vec()),
            Bound::Excluded(b"b".to_vec()),
        ),
        (
            Bound::Excluded(b"b".to_vec()),
            Bound::Included(b"b".to_vec()),
        ),
    ];
    for r in bad {
        let e = t.delete_range(r.clone()).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument(ref m) if m.contains("empty or inverted")),
            "{e}"
        );
        // In a batch the whole write is refused: the put does not land either.
        let mut b = WriteBatch::new();
        b.put(b"x", b"1").delete_range(r);
        assert!(matches!(t.write(&b), Err(Error::InvalidArgument(_))));
    }
    assert_eq!(live_keys(&t), [b"b".to_vec()]);
    drop(t);
    store.close().unwrap();
}

/// Many disjoint range deletes between flushes: a memtable holding 2,048 fragments
/// counts as full and is flushed (each range delete copies them), and every range still
/// deletes its keys afterwards.
#[test]
fn a_memtable_full_of_range_tombstones_is_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = store.table("t").unwrap();
    for i in 0..3000 {
        t.put(key(2 * i), b"v").unwrap();
    }
    t.flush().unwrap();
    let segments = t.stats().segments;
    for i in 0..2100 {
        t.delete_range(key(2 * i)..=key(2 * i)).unwrap();
    }
    store.tables().wait_idle();
    assert!(t.stats().segments > segments, "{:?}", t.stats());
    assert_eq!(live_keys(&t).len(), 900);
    assert_eq!(t.get(key(0)).unwrap(), None);
    assert!(t.get(key(2 * 2100)).unwrap().is_some());
    drop(t);
    store.close().unwrap();
}
