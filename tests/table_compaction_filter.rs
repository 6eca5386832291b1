//! Compaction filters (issue 20 item 3): keep, remove or replace each live cell a
//! compaction writes; a failing filter changes nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use segstore::{Config, Error, FilterDecision, Store, Table};

fn config() -> Config {
    let mut c = Config::default();
    c.table.background_compaction = false;
    c
}

fn load(t: &Table) {
    for (k, v) in [("a", "keep"), ("b", "drop"), ("c", "old"), ("d", "keep")] {
        t.put(k, v).unwrap();
    }
    t.delete("d").unwrap();
    t.flush().unwrap();
    t.put("e", "drop").unwrap();
    t.flush().unwrap();
}

fn contents(t: &Table) -> Vec<(String, String)> {
    t.scan(..)
        .unwrap()
        .map(|r| {
            let e = r.unwrap();
            (
                String::from_utf8(e.0.to_vec()).unwrap(),
                String::from_utf8(e.1.to_vec()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_filter_keeps_removes_and_replaces_live_cells_and_never_sees_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let t = store.table("t").unwrap();
    load(&t);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    t.set_compaction_filter(Some(Arc::new(
        move |table: &str, _k: &[u8], v: &[u8], _ts: u64| {
            assert_eq!(table, "t");
            counter.fetch_add(1, Ordering::Relaxed);
            match v {
                b"drop" => FilterDecision::Remove,
                b"old" => FilterDecision::Replace(b"new".to_vec()),
                _ => FilterDecision::Keep,
            }
        },
    )));
    t.compact().unwrap();
    let want = [("a", "keep"), ("c", "new")].map(|(k, v)| (k.to_string(), v.to_string()));
    assert_eq!(contents(&t), want);
    // a, b, c, e: d's tombstone hides its value and is never shown.
    assert_eq!(seen.load(Ordering::Relaxed), 4);
    drop(t);
    store.close().unwrap();
    // What compaction wrote stays without the filter (it is not persisted).
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(contents(&store.table("t").unwrap()), want);
    store.close().unwrap();
}

#[test]
fn a_filter_that_panics_fails_the_compaction_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let t = store.table("t").unwrap();
    load(&t);
    let before = contents(&t);
    let segments = t.stats().segments;
    t.set_compaction_filter(Some(Arc::new(|_: &str, k: &[u8], _: &[u8], _: u64| {
        if k == b"c" {
            panic!("a filter bug");
        }
        FilterDecision::Keep
    })));
    let e = t.compact().unwrap_err();
    assert!(
        matches!(&e, Error::CompactionFilter { table, reason } if table == "t" && reason.contains("panicked")),
        "{e}"
    );
    assert_eq!(contents(&t), before);
    assert_eq!(
        t.stats().segments,
        segments,
        "the merge's output was discarded"
    );
    let tmp: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
    // A replacement past the value limit is refused the same way.
    t.set_compaction_filter(Some(Arc::new(|_: &str, _: &[u8], _: &[u8], _: u64| {
        FilterDecision::Replace(vec![0; 256 * 1024 * 1024 + 1])
    })));
    let e = t.compact().unwrap_err();
    assert!(matches!(e, Error::CompactionFilter { .. }), "{e}");
    // Without the filter the next compaction runs.
    t.set_compaction_filter(None);
    t.compact().unwrap();
    assert_eq!(contents(&t), before);
    assert_eq!(t.stats().segments, 1);
    drop(t);
    store.close().unwrap();
}
