//! Scans over more segments than a read keeps a bit for (`Meeting`: one per segment
//! for the first 64, every segment past them kept): 70 segments, never compacted, of
//! disjoint key spans (a chain) or each spanning the whole table, under a memtable of
//! updates; forward, backward and seeking scans of ranges of every size against the
//! model.

use std::collections::BTreeMap;

use segstore::{Table, WriteBatch};

use crate::keys::{Key, Row};
use crate::ops::Setup;
use crate::store;

const SEGMENTS: u32 = 70;
const PER_SEGMENT: u32 = 10;
const KEYS: u32 = SEGMENTS * PER_SEGMENT;

type Model = BTreeMap<Key, Vec<u8>>;

/// Segments of `format` (size-tiered: nothing compacts them without being asked),
/// `disjoint` or each over the whole key space.
pub(crate) fn check(disjoint: bool, format: u16) {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup {
        format,
        mmap: true,
        block: 64,
        compression: 0,
        leveled: false,
        fixed_keys: false,
        wide: false,
    };
    let (store, t) = store::open(dir.path(), &setup);
    let mut model = Model::new();
    fill_segments(&t, &mut model, disjoint);
    assert_eq!(t.stats().segments, SEGMENTS as usize);
    update_in_memtable(&t, &mut model);
    let rows: Vec<Row> = model.into_iter().collect();
    for lo in (0..KEYS).step_by(37) {
        for len in [1, 9, 60, KEYS] {
            let what = format!("disjoint {disjoint}, format {format}: {lo}..+{len}");
            check_range(&t, &rows, key(lo)..key(lo + len), &what);
        }
    }
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

fn key(i: u32) -> Key {
    format!("key{i:05}").into_bytes()
}

/// One flushed segment after another: ten keys each, every seventh key a tombstone.
fn fill_segments(t: &Table, model: &mut Model, disjoint: bool) {
    for seg in 0..SEGMENTS {
        let value = format!("s{seg}").into_bytes();
        for j in 0..PER_SEGMENT {
            let k = match disjoint {
                true => seg * PER_SEGMENT + j,
                false => j * SEGMENTS + seg,
            };
            if k % 7 == 3 {
                t.delete(key(k)).unwrap();
                model.remove(&key(k));
            } else {
                t.put(key(k), &value).unwrap();
                model.insert(key(k), value.clone());
            }
        }
        t.flush().unwrap();
    }
}

/// Every thirteenth key updated in the memtable: a newer value, a delete, or a put at
/// an old timestamp (which loses).
fn update_in_memtable(t: &Table, model: &mut Model) {
    for k in (0..KEYS).step_by(13) {
        match k % 3 {
            0 => {
                t.put(key(k), b"mem").unwrap();
                model.insert(key(k), b"mem".to_vec());
            }
            1 => {
                t.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            _ => drop(
                t.write(WriteBatch::new().put_at(key(k), b"old", 5))
                    .unwrap(),
            ),
        }
    }
}

/// `range` scanned forward, backward, and forward three rows then sought back to its
/// start and run to the end.
fn check_range(t: &Table, rows: &[Row], range: std::ops::Range<Key>, what: &str) {
    let want: Vec<Row> = rows
        .iter()
        .filter(|(k, _)| range.contains(k))
        .cloned()
        .collect();
    let scan = || t.scan(range.clone()).unwrap();
    let got: Vec<Row> = scan().map(|r| r.unwrap()).collect();
    assert_eq!(got, want, "{what}: forward");
    let mut got: Vec<Row> = scan().rev().map(|r| r.unwrap()).collect();
    got.reverse();
    assert_eq!(got, want, "{what}: backward");
    let mut sc = scan();
    let first: Vec<Row> = (&mut sc).take(3).map(|r| r.unwrap()).collect();
    assert_eq!(first, want[..want.len().min(3)], "{what}: the first three");
    sc.seek(&range.start);
    let got: Vec<Row> = sc.map(|r| r.unwrap()).collect();
    assert_eq!(got, want, "{what}: sought back to the start");
}
