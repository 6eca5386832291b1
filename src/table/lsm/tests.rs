use std::sync::Arc;

use super::*;
use crate::io::FileRules;
use crate::table::batch::WriteBatch;
use crate::{Config, Store};

/// Plain file rules and `table` without background compaction: only the test compacts.
fn quiet_config(table: TableConfig) -> Config {
    Config {
        file_rules: FileRules::posix(),
        table: TableConfig {
            background_compaction: false,
            ..table
        },
        ..Config::default()
    }
}

/// Zero-copy point reads see every source: a segment, a frozen memtable (waiting for
/// its flush) and the active one, newest timestamp winning wherever it is.
#[test]
fn point_reads_see_frozen_memtables() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), quiet_config(TableConfig::default())).unwrap();
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
    let table = TableConfig {
        gc_grace_secs: 0,
        ..TableConfig::default()
    };
    let store = Store::open(dir.path(), quiet_config(table)).unwrap();
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
        t.merge_segments(&tomb_segment, super::compact::Placement::ONE_SEGMENT).unwrap();
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

/// A filter's removal in a compaction of some segments must hide the key's older
/// version in a segment outside the merge (a tombstone at the cell's timestamp); a
/// removed cell below the cutoff needs no tombstone at all.
#[test]
fn a_filters_removal_never_resurrects_an_older_version_outside_the_merge() {
    use crate::table::compaction_filter::FilterDecision;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), quiet_config(TableConfig::default())).unwrap();
    let t = store.table("t").unwrap();
    let put = |k: &[u8], v: &[u8], ts| t.write(WriteBatch::new().put_at(k, v, ts)).unwrap();
    put(b"k", b"old", 10);
    t.flush().unwrap();
    let outside: Vec<u64> = t.set.live_ids();
    put(b"k", b"remove me", 20);
    put(b"j", b"remove me", 20);
    t.flush().unwrap();
    let inside: Vec<u64> = t
        .set
        .live_ids()
        .into_iter()
        .filter(|id| !outside.contains(id))
        .collect();
    t.set_compaction_filter(Some(Arc::new(|_: &str, _: &[u8], v: &[u8], _: u64| {
        if v == b"remove me" {
            FilterDecision::Remove
        } else {
            FilterDecision::Keep
        }
    })));
    t.merge_segments(&inside, super::compact::Placement::ONE_SEGMENT).unwrap();
    // `k` has an older cell outside the merge: a tombstone hides it.
    assert!(t.get(b"k").unwrap().is_none(), "the old value came back");
    let cell = t.get_cell(b"k").unwrap().unwrap();
    assert!(cell.tombstone && cell.ts == 20, "{cell:?}");
    // `j` has none; with gc_grace past, its removal would drop it outright, but the
    // cutoff here is the older segment's timestamp (10), above nothing of `j` (20):
    // the tombstone stays until a later compaction may purge it.
    assert!(t.get(b"j").unwrap().is_none());
    // Merging everything with the filter on: `k`'s old value is below the tombstone.
    t.compact().unwrap();
    assert!(t.get(b"k").unwrap().is_none());
    drop(t);
    store.close().unwrap();
}

/// The table's scans trust a mapped block a read has checked, as gets do;
/// `scan_cells` (repair and tools) checks every block, as compaction does.
#[test]
fn scan_cells_check_the_blocks_scans_trust() {
    let dir = tempfile::tempdir().unwrap();
    let config = || Config {
        disk_access_mode: crate::DiskAccessMode::Mmap,
        ..quiet_config(TableConfig::default())
    };
    let key = |i: u32| format!("key{i:08}").into_bytes();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        let t = store.table("t").unwrap();
        for i in 0..200 {
            t.put(key(i), [b'v'; 100]).unwrap();
        }
        t.flush().unwrap();
        store.close().unwrap();
    }
    // A value byte of the first data block, past its first entry's header and key.
    let data = find_data_file(dir.path()).expect("the flushed segment's data file");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[40] ^= 1;
    #[allow(clippy::disallowed_methods)]
    std::fs::write(&data, &bytes).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let t = store.table("t").unwrap();
    assert!(matches!(t.get(key(0)), Err(Error::Corrupt { .. })));
    // As if block 0 had passed a check before its bytes went bad.
    let (_pin, snap) = t.capture();
    snap.view.segments[0].mark_block_checked(0, 1); // checked, its slots unknown
    let rows: crate::Result<Vec<_>> = t.scan(..).unwrap().collect();
    assert_eq!(rows.unwrap().len(), 200, "the table's scan trusts the checked block");
    let cells: crate::Result<Vec<_>> = t.scan_cells(..).unwrap().collect();
    assert!(matches!(cells, Err(Error::Corrupt { .. })), "scan_cells checks it");
    store.close().unwrap();
}

fn find_data_file(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if let Some(f) = find_data_file(&p) {
                return Some(f);
            }
        } else if p.to_string_lossy().ends_with("-Data.db") {
            return Some(p);
        }
    }
    None
}

/// A flush checks the blocks of the segment it has written while they are in the page
/// cache, so the table's first reads of them skip the checksum; a compaction checks
/// its outputs only if every page of them still is.
#[test]
fn flushes_and_compactions_check_the_blocks_they_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = quiet_config(TableConfig::default());
    config.disk_access_mode = crate::DiskAccessMode::Mmap;
    let store = Store::open(dir.path(), config).unwrap();
    let t = store.table("t").unwrap();
    for i in 0..2_000u32 {
        t.put(format!("key{i:06}"), [b'v'; 100]).unwrap();
    }
    t.flush().unwrap();
    let checked = |t: &Table| t.set.with_view(|v| v.segments[0].blocks_checked());
    let (n_checked, n) = checked(&t);
    assert!(n > 10, "{n} blocks");
    assert_eq!(n_checked, n, "the flushed segment's blocks are checked");
    for i in (0..2_000u32).step_by(7) {
        t.put(format!("key{i:06}"), [b'w'; 100]).unwrap();
    }
    t.flush().unwrap();
    t.compact().unwrap();
    assert_eq!(t.stats().segments, 1);
    let (n_checked, n) = checked(&t);
    // Nothing has read the output since: it was checked unless a page of it had left
    // the page cache, and then none has come back.
    let resident = t.set.with_view(|v| v.segments[0].data_in_page_cache());
    assert!(
        n_checked == n || (n_checked == 0 && !resident),
        "{n_checked} of {n} checked, resident {resident}"
    );
    drop(t);
    store.close().unwrap();
}
