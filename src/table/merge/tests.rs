//! Unit and property tests of the merge.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

type Version = (u64, bool, Vec<u8>);

fn source(cells: &BTreeMap<Vec<u8>, Version>) -> std::vec::IntoIter<Result<Entry>> {
    cells
        .iter()
        .map(|(k, (ts, t, v))| {
            Ok(Entry {
                key: k.clone(),
                value: v.clone(),
                ts: *ts,
                tombstone: *t,
                expires: 0,
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
}

fn e(k: &str, ts: u64, t: bool, v: &str) -> Entry {
    Entry {
        key: k.into(),
        value: v.into(),
        ts,
        tombstone: t,
        expires: 0,
    }
}

fn sources_strategy() -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Version>>> {
    let version = (0u64..6, any::<bool>(), 0u8..3)
        .prop_map(|(ts, t, v)| (ts, t, if t { vec![] } else { vec![v] }));
    let source =
        proptest::collection::btree_map(proptest::collection::vec(0u8..4, 1..3), version, 0..12);
    proptest::collection::vec(source, 0..6)
}

proptest! {
    #[test]
    fn agrees_with_a_btreemap_model(sources in sources_strategy(), cutoff in 0u64..7) {
        // The model: fold every version into a map, keeping the maximum (ts, tomb, value).
        let mut model: BTreeMap<Vec<u8>, Version> = BTreeMap::new();
        for s in &sources {
            for (k, v) in s {
                let slot = model.entry(k.clone()).or_insert_with(|| v.clone());
                if *v > *slot { *slot = v.clone(); }
            }
        }
        for policy in [TombstonePolicy::Keep, TombstonePolicy::Hide(0), TombstonePolicy::DropOlderThan(cutoff)] {
            let want: Vec<Entry> = model.iter()
                .filter(|(_, (ts, t, _))| match policy {
                    TombstonePolicy::Keep => true,
                    TombstonePolicy::Hide(_) => !t,
                    TombstonePolicy::DropOlderThan(c) => !t || *ts >= c,
                })
                .map(|(k, (ts, t, v))| Entry { key: k.clone(), value: v.clone(), ts: *ts, tombstone: *t, expires: 0 })
                .collect();
            let got: Vec<Entry> = MergeIter::new(sources.iter().map(source), policy)
                .collect::<Result<_>>().unwrap();
            prop_assert_eq!(&got, &want);
            // Invariant 1: the order of the sources does not matter.
            let rev: Vec<Entry> = MergeIter::new(sources.iter().rev().map(source), policy)
                .collect::<Result<_>>().unwrap();
            prop_assert_eq!(&rev, &want);
            // Invariant 4: backward is forward reversed.
            let mut back: Vec<Entry> = MergeIter::new(sources.iter().map(source), policy)
                .rev()
                .collect::<Result<_>>().unwrap();
            back.reverse();
            prop_assert_eq!(&back, &want);
        }
    }

    #[test]
    fn both_ends_and_seeks_agree_with_the_model(
        sources in sources_strategy(),
        ops in proptest::collection::vec((0u8..4, proptest::collection::vec(0u8..4, 0..3)), 0..24),
        hide: bool,
    ) {
        let policy = if hide { TombstonePolicy::Hide(0) } else { TombstonePolicy::Keep };
        let mut model: BTreeMap<Vec<u8>, Version> = BTreeMap::new();
        for s in &sources {
            for (k, v) in s {
                let slot = model.entry(k.clone()).or_insert_with(|| v.clone());
                if *v > *slot { *slot = v.clone(); }
            }
        }
        let want: Vec<Entry> = model.iter()
            .filter(|(_, (_, t, _))| !(hide && *t))
            .map(|(k, (ts, t, v))| Entry { key: k.clone(), value: v.clone(), ts: *ts, tombstone: *t, expires: 0 })
            .collect();
        let cursors = sources.iter().map(|s| VecCursor {
            cells: source(s).map(|r| r.unwrap()).collect(),
            f: 0,
            b: s.len(),
        });
        let mut m = MergeIter::new(cursors, policy);
        // The model: what is left is want[f..b].
        let (mut f, mut b) = (0usize, want.len());
        for (op, key) in ops {
            match op {
                0 => {
                    let got = m.next().map(|r| r.unwrap());
                    let exp = (f < b).then(|| { f += 1; want[f - 1].clone() });
                    prop_assert_eq!(got, exp, "next");
                }
                1 => {
                    let got = m.next_back().map(|r| r.unwrap());
                    let exp = (b > f).then(|| { b -= 1; want[b].clone() });
                    prop_assert_eq!(got, exp, "next_back");
                }
                2 => {
                    m.seek(&key);
                    f = want.partition_point(|e| e.key < key);
                }
                _ => {
                    m.seek_back(&key);
                    b = want.partition_point(|e| e.key <= key);
                }
            }
        }
        // Draining both ways ends where the model ends.
        let rest: Vec<Entry> = m.map(|r| r.unwrap()).collect();
        let exp: Vec<Entry> = if f < b { want[f..b].to_vec() } else { Vec::new() };
        prop_assert_eq!(rest, exp);
    }
}

/// A cursor over sorted cells: the front at `f`, the back before `b`.
struct VecCursor {
    cells: Vec<Entry>,
    f: usize,
    b: usize,
}

impl Iterator for VecCursor {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        (self.f < self.b).then(|| {
            self.f += 1;
            Ok(self.cells[self.f - 1].clone())
        })
    }
}

impl DoubleEndedIterator for VecCursor {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        (self.b > self.f).then(|| {
            self.b -= 1;
            Ok(self.cells[self.b].clone())
        })
    }
}

impl Cursor for VecCursor {
    fn seek(&mut self, lo: Bound<&[u8]>) {
        self.f = self
            .cells
            .partition_point(|e| !range::above(&e.key, &range::max_lower(&Bound::Unbounded, lo)));
    }
    fn seek_back(&mut self, hi: Bound<&[u8]>) {
        self.b = self
            .cells
            .partition_point(|e| range::below(&e.key, &range::min_upper(&Bound::Unbounded, hi)));
    }
}

#[test]
fn the_ends_meet_on_a_key_one_source_gave_to_the_front() {
    // Source 0's only cell is taken by the front's heap before the back runs; the
    // back must still reconcile it with source 1's older version, not yield that.
    let a = vec![Ok(e("k", 5, false, "new"))];
    let b = vec![Ok(e("j", 1, false, "j")), Ok(e("k", 1, false, "old"))];
    let mut m = MergeIter::new([a.into_iter(), b.into_iter()], TombstonePolicy::Keep);
    assert_eq!(m.next().unwrap().unwrap(), e("j", 1, false, "j"));
    assert_eq!(m.next_back().unwrap().unwrap(), e("k", 5, false, "new"));
    assert!(m.next_back().is_none());
    assert!(m.next().is_none());
}

#[test]
fn a_tombstone_shadows_before_it_is_dropped() {
    let old = vec![Ok(e("a", 1, false, "old")), Ok(e("b", 1, false, "b"))];
    let del = vec![Ok(e("a", 2, true, ""))];
    let got: Vec<_> = MergeIter::new(
        [old.into_iter(), del.into_iter()],
        TombstonePolicy::DropOlderThan(10),
    )
    .map(|r| r.unwrap().key)
    .collect();
    assert_eq!(got, vec![b"b".to_vec()], "a is gone, not resurrected");
}

#[test]
fn boxed_sources_of_different_kinds_merge() {
    let mt = crate::table::Memtable::new();
    mt.insert(crate::format::record::RecordRef {
        key: b"b",
        value: b"new",
        ts: 5,
        tombstone: false,
        expires: 0,
    });
    let seg = vec![Ok(e("a", 1, false, "x")), Ok(e("b", 1, false, "old"))];
    let sources: Vec<BoxedSource<'_>> =
        vec![Box::new(mt.iter().map(Ok)), Box::new(seg.into_iter())];
    let got: Vec<_> = MergeIter::new(sources, TombstonePolicy::Hide(0))
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, vec![e("a", 1, false, "x"), e("b", 5, false, "new")]);
}

#[test]
fn errors_are_yielded_once_then_the_iterator_ends() {
    let good = vec![Ok(e("a", 1, false, "1")), Ok(e("z", 1, false, "1"))];
    let bad = vec![
        Ok(e("b", 1, false, "1")),
        Err(Error::corrupt(
            "/x/t-1-Data.db",
            40,
            "record checksum mismatch",
        )),
    ];
    let mut m = MergeIter::new([good.into_iter(), bad.into_iter()], TombstonePolicy::Keep);
    assert_eq!(m.next().unwrap().unwrap().key, b"a");
    let err = m.next().unwrap().unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    assert!(m.next().is_none());
}

#[test]
fn an_unsorted_source_is_an_error() {
    let unsorted = vec![Ok(e("b", 1, false, "1")), Ok(e("a", 1, false, "1"))];
    let r: Result<Vec<_>> = MergeIter::new([unsorted.into_iter()], TombstonePolicy::Keep).collect();
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}

/// Every cell [`CopyMerge`] gives, taken one by one; the first error ends it.
fn copy_merged(sources: Vec<VecCursor>) -> Result<Vec<Entry>> {
    let mut m = CopyMerge::new(sources);
    let mut out = Vec::new();
    loop {
        m.settle()?;
        let Some(c) = m.current().cloned() else {
            return Ok(out);
        };
        assert!(m.take());
        assert_eq!(m.taken(), &c, "take lends the cell current showed");
        out.push(c);
    }
}

fn vec_cursor(cells: Vec<Entry>) -> VecCursor {
    let b = cells.len();
    VecCursor { cells, f: 0, b }
}

proptest! {
    #[test]
    fn copy_merge_gives_what_merge_iter_keeps(sources in sources_strategy()) {
        let want: Vec<Entry> = MergeIter::new(sources.iter().map(source), TombstonePolicy::Keep)
            .collect::<Result<_>>().unwrap();
        let cursors = |order: &mut dyn Iterator<Item = &BTreeMap<Vec<u8>, Version>>| {
            order.map(|s| vec_cursor(source(s).map(|r| r.unwrap()).collect())).collect()
        };
        prop_assert_eq!(&copy_merged(cursors(&mut sources.iter())).unwrap(), &want);
        // The order of the sources does not matter.
        prop_assert_eq!(&copy_merged(cursors(&mut sources.iter().rev())).unwrap(), &want);
    }
}

#[test]
fn copy_merge_rejects_an_unsorted_source_and_a_repeated_key() {
    for bad in [
        vec![e("b", 1, false, "1"), e("a", 1, false, "1")],
        vec![e("a", 2, false, "1"), e("a", 1, false, "1")],
    ] {
        let good = vec![e("c", 1, false, "1")];
        let err = copy_merged(vec![vec_cursor(good), vec_cursor(bad)]).unwrap_err();
        assert!(
            err.to_string().contains("merge source 1 is not in strictly ascending"),
            "{err}"
        );
    }
}

#[test]
fn copy_merge_returns_the_first_error_then_ends() {
    let bad = vec![
        Ok(e("b", 1, false, "1")),
        Err(Error::corrupt("/x/t-1-Data.db", 40, "record checksum mismatch")),
    ];
    let good = vec![e("a", 1, false, "1"), e("z", 1, false, "1")];
    let sources: Vec<BoxedCursor<'_>> = vec![
        Box::new(vec_cursor(good)),
        Box::new(ResultCursor(bad.into_iter())),
    ];
    let mut m = CopyMerge::new(sources);
    m.settle().unwrap();
    assert_eq!(m.current().unwrap().key, b"a");
    assert!(m.take());
    m.settle().unwrap();
    assert_eq!(m.current().unwrap().key, b"b");
    assert!(m.take());
    let err = m.settle().unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    m.settle().unwrap();
    assert!(m.current().is_none(), "after an error the merge is done");
    assert!(!m.take());
}

/// A forward-only cursor over given results (its seeks do nothing).
struct ResultCursor(std::vec::IntoIter<Result<Entry>>);

impl Iterator for ResultCursor {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        self.0.next()
    }
}

impl DoubleEndedIterator for ResultCursor {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        self.0.next_back()
    }
}

impl Cursor for ResultCursor {
    fn seek(&mut self, _: Bound<&[u8]>) {}
    fn seek_back(&mut self, _: Bound<&[u8]>) {}
}
