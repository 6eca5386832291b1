use std::sync::Arc;

use super::*;
use crate::io::FileRules;
use crate::table::batch::WriteBatch;
use crate::{Config, Store};

/// Zero-copy point reads see every source: a segment, a frozen memtable (waiting for
/// its flush) and the active one, newest timestamp winning wherever it is.
#[test]
fn point_reads_see_frozen_memtables() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        file_rules: FileRules::posix(),
        table: TableConfig {
            background_compaction: false,
            ..TableConfig::default()
        },
        ..Config::default()
    };
    let store = Store::open(dir.path(), config).unwrap();
    let t = store.table("t").unwrap();
    let put = |k: &[u8], v: &[u8], ts| t.write(WriteBatch::new().put_at(k, v, ts)).unwrap();
    for k in [b"a", b"b", b"c", b"d"] {
        put(k, b"segment", 10);
    }
    t.flush().unwrap();
    put(b"b", b"frozen", 20);
    put(b"c", b"frozen", 20);
    t.write(WriteBatch::new().delete_at(b"d", 20)).unwrap();
    {
        let mut m = t.mem.write();
        let old = std::mem::replace(&mut m.active, Arc::new(Memtable::new()));
        m.frozen.push(old);
    }
    put(b"c", b"active", 30);
    // Older than the frozen cell: loses.
    put(b"b", b"stale", 15);
    assert_eq!(t.stats().frozen_memtables, 1);
    let want: [(&[u8], Option<&[u8]>); 5] = [
        (b"a", Some(b"segment")),
        (b"b", Some(b"frozen")),
        (b"c", Some(b"active")),
        (b"d", None),
        (b"e", None),
    ];
    let check = |t: &Table| {
        let keys = want.map(|(k, _)| k);
        let many = t.multi_get(keys).unwrap();
        for ((k, v), got) in want.iter().zip(many) {
            assert_eq!(t.get(k).unwrap().as_deref(), *v, "{k:?}");
            assert_eq!(got.as_deref(), *v, "{k:?}");
            assert!(t.get_with(k, |g| g == *v).unwrap(), "{k:?}");
            assert_eq!(t.contains_key(k).unwrap(), v.is_some(), "{k:?}");
        }
    };
    check(&t);
    let shared = t.get(b"b").unwrap().unwrap();
    assert!(!shared.is_mapped());
    // The frozen memtable flushed into a segment, then everything merged.
    t.flush_memtables(false).unwrap();
    assert_eq!(t.stats().frozen_memtables, 0);
    check(&t);
    t.compact().unwrap();
    check(&t);
    assert_eq!(shared, b"frozen", "a shared value outlives its memtable");
    drop((t, shared));
    store.close().unwrap();
}

/// Issue 11, defect 4: compaction read the view before the memtables, the reverse of
/// the read path, so a flush in between moved cells out of the memtables into a
/// segment that neither read saw, and a tombstone shadowing them was dropped: the
/// deleted value came back.
#[test]
fn flush_between_the_cutoff_reads_never_drops_a_needed_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        file_rules: FileRules::posix(),
        table: TableConfig {
            gc_grace_secs: 0,
            background_compaction: false,
            ..TableConfig::default()
        },
        ..Config::default()
    };
    let store = Store::open(dir.path(), config).unwrap();
    let t = store.table("t").unwrap();
    // A tombstone in a segment of its own, then an older value of the same key (a
    // repair, say) still in the memtable.
    t.write(WriteBatch::new().delete_at(b"k", 2_000)).unwrap();
    t.flush().unwrap();
    let tomb_segment = t.segments().live_ids();
    assert_eq!(tomb_segment.len(), 1);
    t.write(WriteBatch::new().put_at(b"k", b"old", 1_000))
        .unwrap();
    assert_eq!(t.get(b"k").unwrap(), None);
    // The flush lands exactly between compaction's two reads.
    *t.cutoff_hook.lock() = Some(Box::new(|t: &Table| {
        t.flush_memtables(true).unwrap();
    }));
    {
        let _g = t.compaction_lock.lock();
        t.merge_segments(&tomb_segment).unwrap();
    }
    assert!(t.cutoff_hook.lock().is_none(), "the hook ran");
    assert_eq!(
        t.stats().segments,
        2,
        "the value's segment and the tombstone's"
    );
    assert_eq!(t.get(b"k").unwrap(), None, "the deleted value came back");
    drop(t);
    store.close().unwrap();
}
