//! Iterating a table: forward, reverse (`scan(..).rev()`), both ends at once, prefix
//! scans and seeks, against a BTreeMap model, with the cells spread over the active
//! memtable, frozen memtables and several segments (overwrites and deletes across them,
//! explicit old timestamps, major compactions). Plus the call forms that must compile:
//! `scan(..)`, `scan(b"a"..b"b")`, `scan("a".."b")`, `scan(vec..vec)`, `scan(&k[..]..)`,
//! and keys as `impl AsRef<[u8]>` on `get`, `put`, `delete`, `get_cell` and
//! `WriteBatch`.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use segstore::{
    CommitLogConfig, CommitLogSync, Config, DiskAccessMode, FileRules, Store, Table, TableConfig,
    WriteBatch,
};

fn cfg(mode: DiskAccessMode) -> Config {
    let mut c = common::test_config(mode, FileRules::posix());
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 1 << 20;
    c.table = TableConfig::default();
    // Memtables are frozen and flushed by the test's own steps only.
    c.table.memtable_flush_bytes = 64 << 20;
    c.table.max_frozen_memtables = 16;
    c.table.background_compaction = false;
    // Compaction keeps every tombstone, so the model's winning cells (tombstones
    // included) stay what `scan_cells` answers.
    c.table.gc_grace_secs = u64::MAX;
    c
}

type Key = Vec<u8>;
/// (ts, tombstone, value), ordered as the cell rule orders versions.
type Version = (u64, bool, Vec<u8>);

#[derive(Debug, Clone)]
enum Op {
    Put(Key, u8),
    Delete(Key),
    /// Explicit old timestamps: they only win against each other.
    PutAt(Key, u8, u64),
    DeleteAt(Key, u64),
    Batch(Vec<(Key, Option<u8>)>),
    Freeze,
    Flush,
    Compact,
}

/// Keys from a small alphabet with the edge bytes 0x00 and 0xFF, so prefixes collide and
/// prefix successors have trailing 0xFF to skip.
fn key() -> impl Strategy<Value = Key> {
    proptest::collection::vec(
        prop_oneof![
            Just(0x00u8),
            Just(0x01),
            Just(b'a'),
            Just(b'b'),
            Just(0xFE),
            Just(0xFF)
        ],
        1..=3,
    )
}

fn probe() -> impl Strategy<Value = Key> {
    prop_oneof![1 => Just(Vec::new()), 6 => key()]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (key(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => key().prop_map(Op::Delete),
        2 => (key(), any::<u8>(), 1u64..40).prop_map(|(k, v, ts)| Op::PutAt(k, v, ts)),
        1 => (key(), 1u64..40).prop_map(|(k, ts)| Op::DeleteAt(k, ts)),
        1 => proptest::collection::vec((key(), proptest::option::of(any::<u8>())), 1..5)
            .prop_map(Op::Batch),
        2 => Just(Op::Freeze),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Key>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => probe().prop_map(Bound::Included),
        2 => probe().prop_map(Bound::Excluded),
    ]
}

#[derive(Debug, Clone)]
enum Move {
    Next,
    NextBack,
    Seek(Key),
    SeekBack(Key),
}

fn moves() -> impl Strategy<Value = Vec<Move>> {
    proptest::collection::vec(
        prop_oneof![
            4 => Just(Move::Next),
            3 => Just(Move::NextBack),
            1 => probe().prop_map(Move::Seek),
            1 => probe().prop_map(Move::SeekBack),
        ],
        0..30,
    )
}

fn value(v: u8) -> Vec<u8> {
    format!("v{v}").into_bytes()
}

#[derive(Default)]
struct Model {
    cells: BTreeMap<Key, Version>,
    /// Clock writes are ordered after every explicit timestamp used here.
    clock: u64,
}

impl Model {
    fn apply(&mut self, key: Key, v: Version) {
        let slot = self.cells.entry(key).or_insert_with(|| v.clone());
        if v > *slot {
            *slot = v;
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        (1 << 62) + self.clock
    }

    fn live(&self) -> Vec<(Key, Vec<u8>)> {
        self.cells
            .iter()
            .filter(|(_, (_, t, _))| !t)
            .map(|(k, (_, _, v))| (k.clone(), v.clone()))
            .collect()
    }
}

fn in_bounds(k: &[u8], lo: &Bound<Key>, hi: &Bound<Key>) -> bool {
    common::in_bounds(k, lo, hi)
}

/// Apply `ops` to the table and the model.
fn build(t: &Table, model: &mut Model, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put(k, v) => {
                t.put(k, value(*v)).unwrap();
                let ts = model.tick();
                model.apply(k.clone(), (ts, false, value(*v)));
            }
            Op::Delete(k) => {
                t.delete(k).unwrap();
                let ts = model.tick();
                model.apply(k.clone(), (ts, true, vec![]));
            }
            Op::PutAt(k, v, ts) => {
                t.write(WriteBatch::new().put_at(k, value(*v), *ts))
                    .unwrap();
                model.apply(k.clone(), (*ts, false, value(*v)));
            }
            Op::DeleteAt(k, ts) => {
                t.write(WriteBatch::new().delete_at(k, *ts)).unwrap();
                model.apply(k.clone(), (*ts, true, vec![]));
            }
            Op::Batch(cells) => {
                let mut b = WriteBatch::new();
                // One timestamp per batch, and of a key twice in a batch the last
                // operation wins (issue 20 item 1), then the cell rule against older
                // versions as for any write.
                let ts = model.tick();
                let mut last = BTreeMap::new();
                for (k, v) in cells {
                    match v {
                        Some(v) => b.put(k, value(*v)),
                        None => b.delete(k),
                    };
                    last.insert(k.clone(), *v);
                }
                for (k, v) in last {
                    match v {
                        Some(v) => model.apply(k, (ts, false, value(v))),
                        None => model.apply(k, (ts, true, vec![])),
                    }
                }
                t.write(&b).unwrap();
            }
            Op::Freeze => {
                if t.stats().frozen_memtables < 4 {
                    t.freeze_memtable();
                }
            }
            Op::Flush => t.flush().unwrap(),
            Op::Compact => t.compact().unwrap(),
        }
    }
}

fn rows(it: impl Iterator<Item = segstore::Result<(Key, Vec<u8>)>>) -> Vec<(Key, Vec<u8>)> {
    it.map(|r| r.unwrap()).collect()
}

fn reversed<T>(mut v: Vec<T>) -> Vec<T> {
    v.reverse();
    v
}

struct Case {
    ops: Vec<Op>,
    ranges: Vec<(Bound<Key>, Bound<Key>)>,
    prefixes: Vec<Key>,
    cursor_range: (Bound<Key>, Bound<Key>),
    moves: Vec<Move>,
    mmap: bool,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("ops", &self.ops)
            .field("ranges", &self.ranges)
            .field("prefixes", &self.prefixes)
            .field("cursor_range", &self.cursor_range)
            .field("moves", &self.moves)
            .field("mmap", &self.mmap)
            .finish()
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(op(), 1..80),
        proptest::collection::vec((bound(), bound()), 0..4),
        proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![Just(0x00u8), Just(b'a'), Just(0xFE), Just(0xFF)],
                0..=2,
            ),
            0..4,
        ),
        (bound(), bound()),
        moves(),
        any::<bool>(),
    )
        .prop_map(|(ops, ranges, prefixes, cursor_range, moves, mmap)| Case {
            ops,
            ranges,
            prefixes,
            cursor_range,
            moves,
            mmap,
        })
}

fn check_case(c: &Case) -> Result<(), TestCaseError> {
    let mode = if c.mmap {
        DiskAccessMode::Mmap
    } else {
        DiskAccessMode::Standard
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg(mode)).unwrap();
    let t = store.table("t").unwrap();
    let mut model = Model::default();
    build(&t, &mut model, &c.ops);
    let live = model.live();

    // Whole table, both ways.
    prop_assert_eq!(rows(t.scan(..).unwrap()), live.clone(), "forward");
    prop_assert_eq!(
        rows(t.scan(..).unwrap().rev()),
        reversed(live.clone()),
        "reverse"
    );
    // Winning cells, tombstones included (compaction keeps them here).
    let want_cells: Vec<(Key, bool, Vec<u8>)> = model
        .cells
        .iter()
        .map(|(k, (_, t, v))| (k.clone(), *t, v.clone()))
        .collect();
    let cells = |it: &mut dyn Iterator<Item = segstore::Result<segstore::segment::Entry>>| {
        it.map(|e| e.map(|e| (e.key, e.tombstone, e.value)).unwrap())
            .collect::<Vec<_>>()
    };
    prop_assert_eq!(cells(&mut t.scan_cells(..).unwrap()), want_cells.clone());
    prop_assert_eq!(
        cells(&mut t.scan_cells(..).unwrap().rev()),
        reversed(want_cells)
    );

    // Bounded ranges, both ways.
    for (lo, hi) in &c.ranges {
        let want: Vec<_> = live
            .iter()
            .filter(|(k, _)| in_bounds(k, lo, hi))
            .cloned()
            .collect();
        let r = (lo.clone(), hi.clone());
        prop_assert_eq!(rows(t.scan(r.clone()).unwrap()), want.clone(), "{:?}", r);
        prop_assert_eq!(
            rows(t.scan(r.clone()).unwrap().rev()),
            reversed(want),
            "{:?} reversed",
            r
        );
    }

    // Prefixes, both ways.
    for p in &c.prefixes {
        let want: Vec<_> = live
            .iter()
            .filter(|(k, _)| k.starts_with(p))
            .cloned()
            .collect();
        prop_assert_eq!(
            rows(t.scan_prefix(p).unwrap()),
            want.clone(),
            "prefix {:?}",
            p
        );
        prop_assert_eq!(
            rows(t.scan_prefix(p).unwrap().rev()),
            reversed(want),
            "prefix {:?} reversed",
            p
        );
    }

    // A cursor moved at random: what is left is want[f..b].
    let (lo, hi) = &c.cursor_range;
    let want: Vec<_> = live
        .iter()
        .filter(|(k, _)| in_bounds(k, lo, hi))
        .cloned()
        .collect();
    let mut scan = t.scan((lo.clone(), hi.clone())).unwrap();
    let (mut f, mut b) = (0usize, want.len());
    for m in &c.moves {
        match m {
            Move::Next => {
                let got = scan.next().map(|r| r.unwrap());
                let exp = (f < b).then(|| {
                    f += 1;
                    want[f - 1].clone()
                });
                prop_assert_eq!(got, exp, "next after {:?}", m);
            }
            Move::NextBack => {
                let got = scan.next_back().map(|r| r.unwrap());
                let exp = (b > f).then(|| {
                    b -= 1;
                    want[b].clone()
                });
                prop_assert_eq!(got, exp, "next_back");
            }
            Move::Seek(k) => {
                scan.seek(k);
                f = want.partition_point(|(x, _)| x < k);
            }
            Move::SeekBack(k) => {
                scan.seek_back(k);
                b = want.partition_point(|(x, _)| x <= k);
            }
        }
    }
    let rest = rows(scan);
    let exp = if f < b { want[f..b].to_vec() } else { vec![] };
    prop_assert_eq!(rest, exp, "the rest of the cursor");

    drop(t);
    let report = store.close().unwrap();
    prop_assert!(report.is_clean(), "{:?}", report);
    Ok(())
}

proptest! {
    #![proptest_config({
        let mut c = common::proptest_config(file!());
        if std::env::var_os("PROPTEST_CASES").is_none() {
            c.cases = 48;
        }
        c
    })]

    #[test]
    fn iteration_agrees_with_a_btreemap_model(c in case()) {
        check_case(&c)?;
    }
}

/// A table whose cells are spread over two segments, a frozen memtable and the active
/// memtable, with overwrites and deletes across them.
fn spread(store: &Store) -> std::sync::Arc<Table> {
    let t = store.table("spread").unwrap();
    for k in ["a", "b", "c", "d", "e"] {
        t.put(k, "seg1").unwrap();
    }
    t.flush().unwrap();
    t.put("b", "seg2").unwrap();
    t.delete("c").unwrap();
    t.put("f", "seg2").unwrap();
    t.flush().unwrap();
    t.put("d", "frozen").unwrap();
    t.delete("e").unwrap();
    t.put("g", "frozen").unwrap();
    t.freeze_memtable();
    t.put("a", "active").unwrap();
    t.delete("g").unwrap();
    t.put("h", "active").unwrap();
    let s = t.stats();
    assert_eq!((s.segments, s.frozen_memtables), (2, 1));
    t
}

fn keys(it: impl Iterator<Item = segstore::Result<(Key, Vec<u8>)>>) -> Vec<String> {
    it.map(|r| String::from_utf8(r.unwrap().0).unwrap())
        .collect()
}

#[test]
fn reverse_and_seek_over_memtables_and_segments() {
    for mode in DiskAccessMode::all() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), cfg(mode)).unwrap();
        let t = spread(&store);
        let all = rows(t.scan(..).unwrap());
        let want: Vec<(Key, Vec<u8>)> = [
            ("a", "active"),
            ("b", "seg2"),
            ("d", "frozen"),
            ("f", "seg2"),
            ("h", "active"),
        ]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        assert_eq!(all, want, "{mode}");
        assert_eq!(rows(t.scan(..).unwrap().rev()), reversed(want), "{mode}");

        // Seek forward past keys, back to yielded keys, and to a deleted key.
        let mut s = t.scan(..).unwrap();
        s.seek("c");
        assert_eq!(keys(s.by_ref().take(2)), ["d", "f"], "{mode}");
        s.seek("a");
        assert_eq!(keys(s.by_ref().take(1)), ["a"], "{mode}: seeks go back too");
        s.seek("e");
        assert_eq!(keys(s.by_ref().take(1)), ["f"], "{mode}: e is deleted");
        // Reverse seeks, and the ends meeting: f was yielded by the front (it stays
        // behind it) and g is deleted, so the back finds nothing at or below g ...
        s.seek_back("g");
        assert_eq!(s.next_back().map(|r| r.unwrap().0), None, "{mode}: met");
        // ... until the front seeks back.
        s.seek("b");
        assert_eq!(keys(s.by_ref().rev()), ["f", "d", "b"], "{mode}");
        assert_eq!(s.next().map(|r| r.unwrap().0), None, "{mode}: met");
        // A seek before the range clamps to its start, past its end yields nothing.
        drop(s);
        let mut s = t.scan("b".."g").unwrap();
        s.seek("a");
        s.seek_back("z");
        assert_eq!(keys(s.rev()), ["f", "d", "b"], "{mode}");
        let mut s = t.scan("b".."g").unwrap();
        s.seek("g");
        assert_eq!(keys(s), Vec::<String>::new(), "{mode}");
        drop(t);
        let report = store.close().unwrap();
        assert!(report.is_clean(), "{mode}: {report:?}");
    }
}

#[test]
fn prefixes_handle_ff_bytes_and_the_empty_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg(DiskAccessMode::Mmap)).unwrap();
    let t = store.table("p").unwrap();
    let ks: [&[u8]; 8] = [
        b"a",
        b"a\xff",
        b"a\xff\xff",
        b"a\xff\xff\x00",
        b"b",
        b"\xff",
        b"\xff\xff",
        b"\xff\xff\x01",
    ];
    for (i, k) in ks.iter().enumerate() {
        t.put(k, [i as u8]).unwrap();
        if i % 2 == 0 {
            t.flush().unwrap();
        }
    }
    let pk = |p: &[u8]| -> Vec<Key> { t.scan_prefix(p).unwrap().map(|r| r.unwrap().0).collect() };
    let of = |v: &[&[u8]]| v.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
    assert_eq!(pk(b""), of(&ks), "the empty prefix is every key");
    assert_eq!(pk(b"a"), of(&ks[..4]));
    assert_eq!(pk(b"a\xff"), of(&ks[1..4]), "successor of a\\xff is b");
    assert_eq!(pk(b"a\xff\xff"), of(&ks[2..4]));
    assert_eq!(pk(b"\xff"), of(&ks[5..]), "no successor: unbounded above");
    assert_eq!(pk(b"\xff\xff"), of(&ks[6..]));
    assert_eq!(pk(b"c"), of(&[]));
    let back: Vec<Key> = t
        .scan_prefix(b"\xff")
        .unwrap()
        .rev()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(back, reversed(of(&ks[5..])));
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// Every call form of issue 12: these must compile (no turbofish, no E0283) and answer.
#[test]
fn keys_and_ranges_take_every_byte_string_form() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg(DiskAccessMode::Standard)).unwrap();
    let t = store.table("forms").unwrap();
    let owned: Vec<u8> = b"c".to_vec();
    let slice: &[u8] = b"d";
    // put / get / delete / get_cell with &[u8], &Vec<u8>, b"x", "x", Vec<u8>, String.
    t.put(b"a", b"1").unwrap();
    t.put("b", "2").unwrap();
    t.put(&owned, &owned).unwrap();
    t.put(slice, slice).unwrap();
    let (e, i): (Vec<u8>, Vec<u8>) = (b"e".to_vec(), b"i".to_vec());
    t.put(e, String::from("5")).unwrap();
    t.put(&b"f"[..], vec![b'6']).unwrap();
    assert_eq!(
        t.get(b"a").unwrap().map(|v| v.to_vec()),
        Some(b"1".to_vec())
    );
    assert_eq!(t.get("b").unwrap().map(|v| v.to_vec()), Some(b"2".to_vec()));
    assert_eq!(
        t.get(&owned).unwrap().map(|v| v.to_vec()),
        Some(b"c".to_vec())
    );
    assert_eq!(
        t.get(owned.clone()).unwrap().map(|v| v.to_vec()),
        Some(b"c".to_vec())
    );
    assert_eq!(
        t.get(slice).unwrap().map(|v| v.to_vec()),
        Some(b"d".to_vec())
    );
    assert_eq!(
        t.get(String::from("e")).unwrap().map(|v| v.to_vec()),
        Some(b"5".to_vec())
    );
    assert!(t.get_cell("f").unwrap().is_some());
    assert!(t.get_cell(&owned).unwrap().is_some());
    assert!(t.get_cell(b"zz").unwrap().is_none());
    t.delete("f").unwrap();
    t.delete(b"zz").unwrap();
    t.delete(&owned).unwrap();
    t.delete(owned.clone()).unwrap();
    assert!(t.get_cell(&b"f"[..]).unwrap().unwrap().tombstone);
    t.put(&owned, "c").unwrap();
    t.put("f", "6").unwrap();
    // WriteBatch methods likewise.
    let mut b = WriteBatch::new();
    b.put(b"g", b"7")
        .put("h", "8")
        .put(&owned, &owned)
        .delete(slice)
        .delete("zz")
        .put_at(i, "9", 1)
        .delete_at(&b"j"[..], 1);
    t.write(&b).unwrap();
    t.put("d", "4").unwrap();
    let k = b"c".to_vec();
    let (va, vb) = (b"b".to_vec(), b"e".to_vec());
    // Every range form.
    assert_eq!(keys(t.scan(..).unwrap()).len(), 9);
    assert_eq!(keys(t.scan(b"a"..b"c").unwrap()), ["a", "b"]);
    assert_eq!(keys(t.scan("a".."c").unwrap()), ["a", "b"]);
    assert_eq!(
        keys(t.scan(va.clone()..vb.clone()).unwrap()),
        ["b", "c", "d"]
    );
    assert_eq!(keys(t.scan(&va..&vb).unwrap()), ["b", "c", "d"]);
    assert_eq!(keys(t.scan(&k[..]..).unwrap()).first().unwrap(), "c");
    assert_eq!(keys(t.scan(..=b"b").unwrap()), ["a", "b"]);
    assert_eq!(keys(t.scan(..b"b").unwrap()), ["a"]);
    assert_eq!(keys(t.scan(b"b"..=b"c").unwrap()), ["b", "c"]);
    assert_eq!(keys(t.scan("h"..).unwrap()), ["h", "i"]);
    assert_eq!(
        keys(
            t.scan((Bound::Excluded("a"), Bound::Included("c")))
                .unwrap()
        ),
        ["b", "c"]
    );
    assert_eq!(
        keys(t.scan((Bound::Excluded(&k[..]), Bound::Unbounded)).unwrap())
            .first()
            .unwrap(),
        "d"
    );
    assert_eq!(t.scan_cells(..).unwrap().count(), 11, "two tombstones");
    assert_eq!(t.scan_cells(b"j"..).unwrap().count(), 2);
    assert_eq!(t.scan_cells("a"..="b").unwrap().count(), 2);
    assert_eq!(keys(t.scan_prefix("h").unwrap()), ["h"]);
    assert_eq!(keys(t.scan_prefix(b"i").unwrap()), ["i"]);
    assert_eq!(keys(t.scan_prefix(&k).unwrap()), ["c"]);
    assert_eq!(keys(t.scan_prefix(k.clone()).unwrap()), ["c"]);
    assert_eq!(keys(t.scan_prefix(&k[..]).unwrap()), ["c"]);
    assert_eq!(keys(t.scan_prefix(b"").unwrap()).len(), 9);
    let mut s = t.scan(..).unwrap();
    s.seek(b"g");
    s.seek_back("h");
    s.seek(&k);
    s.seek(k.clone());
    assert_eq!(keys(s.rev()), ["h", "g", "f", "e", "d", "c"]);
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// A compacted table at rest (one segment, empty memtables) is scanned through the
/// segment's own iterator, tombstones skipped, and `next_with` lends rows from the map;
/// once a memtable holds a cell the scan merges again. Both give the model's rows:
/// forward, backward, both ends, seeks, prefixes, borrowed and owned, plain and through
/// a read view.
#[test]
fn a_compacted_table_scans_its_one_segment_directly() {
    for mode in DiskAccessMode::all() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), cfg(mode)).unwrap();
        let t = store.table("t").unwrap();
        let mut model = BTreeMap::new();
        for i in 0..200u32 {
            let k = format!("k{i:03}").into_bytes();
            t.put(&k, format!("v{i}")).unwrap();
            model.insert(k, format!("v{i}").into_bytes());
        }
        for i in (0..200u32).step_by(3) {
            let k = format!("k{i:03}").into_bytes();
            t.delete(&k).unwrap();
            model.remove(&k);
        }
        t.compact().unwrap(); // tombstones are kept (gc_grace), in one segment
        assert_eq!(t.stats().segments, 1);
        let check = |t: &Table, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str| {
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let owned: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(owned, want, "{mode} {what}: forward");
            let mut back: Vec<_> = t.scan(..).unwrap().rev().map(|r| r.unwrap()).collect();
            back.reverse();
            assert_eq!(back, want, "{mode} {what}: backward");
            let mut s = t.scan(..).unwrap();
            let mut lent = Vec::new();
            while let Some(r) = s.next_with(|k, v| (k.to_vec(), v.to_vec())) {
                lent.push(r.unwrap());
            }
            assert_eq!(lent, want, "{mode} {what}: next_with");
            let mut s = t.scan(..).unwrap();
            let mut lent_back = Vec::new();
            while let Some(r) = s.next_back_with(|k, v| (k.to_vec(), v.to_vec())) {
                lent_back.push(r.unwrap());
            }
            lent_back.reverse();
            assert_eq!(lent_back, want, "{mode} {what}: next_back_with");
            // Both ends meet, each row once.
            let mut s = t.scan(..).unwrap();
            let (mut front, mut rear) = (Vec::new(), Vec::new());
            while let Some(r) = s.next() {
                front.push(r.unwrap());
                match s.next_back_with(|k, v| (k.to_vec(), v.to_vec())) {
                    Some(r) => rear.push(r.unwrap()),
                    None => break,
                }
            }
            rear.reverse();
            front.extend(rear);
            assert_eq!(front, want, "{mode} {what}: both ends");
            // Seeks: onto a deleted key (k099) and a live one, and back.
            let mut s = t.scan(..).unwrap();
            s.seek(b"k099");
            let first_at = model
                .range(b"k099".to_vec()..)
                .next()
                .map(|(k, _)| k.clone());
            assert_eq!(
                s.next().map(|r| r.unwrap().0),
                first_at,
                "{mode} {what}: seek"
            );
            s.seek_back(b"k150");
            let last_at = model
                .range(..=b"k150".to_vec())
                .next_back()
                .map(|(k, _)| k.clone());
            assert_eq!(
                s.next_back().map(|r| r.unwrap().0),
                last_at,
                "{mode} {what}: seek_back"
            );
            let prefix: Vec<_> = t
                .scan_prefix(b"k01")
                .unwrap()
                .map(|r| r.unwrap().0)
                .collect();
            let want_prefix: Vec<_> = model
                .keys()
                .filter(|k| k.starts_with(b"k01"))
                .cloned()
                .collect();
            assert_eq!(prefix, want_prefix, "{mode} {what}: prefix");
        };
        check(&t, &model, "one segment");
        let view = store.read_view().unwrap();
        let seen: Vec<_> = view.scan(&t, ..).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(seen.len(), model.len());
        // A cell in the memtable: merged again, the view unchanged.
        t.put(b"k000", b"back").unwrap();
        t.delete(b"k001").unwrap();
        let before = model.clone();
        model.insert(b"k000".to_vec(), b"back".to_vec());
        model.remove(b"k001".as_slice());
        check(&t, &model, "segment + memtable");
        let seen_after: Vec<_> = view.scan(&t, ..).unwrap().map(|r| r.unwrap()).collect();
        let want_before: Vec<_> = before.into_iter().collect();
        assert_eq!(seen_after, want_before, "{mode}: the view moved");
        drop((view, t));
        store.close().unwrap();
    }
}
