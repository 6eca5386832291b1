//! The side run's cells and cursor against a sorted model: bounds, both ends, seeks
//! (the `Cursor` contract of `table::merge`), the budget, and `serves`.

use std::ops::Bound;
use std::sync::Arc;

use proptest::prelude::*;

use super::{RunBudget, RunCursor, SideRun, CELL_BYTES};
use crate::segment::Entry;
use crate::table::merge::Cursor;
use crate::test_support::proptest_cases;
use crate::error::Result;

// A scan lends a run cursor's front cells (`head`, `advance`: `side.rs`); its
// double-ended and seeking form, as a merge's other sources have, is what the model
// below checks the cursor's bounds and ends with.
impl Iterator for RunCursor {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        let mut e = Entry::default();
        self.next_into(&mut e).map(|r| r.map(|()| e))
    }
}

impl DoubleEndedIterator for RunCursor {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        if self.back <= self.front {
            return None;
        }
        self.back -= 1;
        let mut e = Entry::default();
        e.set_from(self.run.record(self.back));
        Some(Ok(e))
    }
}

impl Cursor for RunCursor {
    fn seek(&mut self, lo: Bound<&[u8]>) {
        let at = self.run.first_above(lo).max(self.lo_at);
        self.front = at.min(self.back);
    }
    fn seek_back(&mut self, hi: Bound<&[u8]>) {
        let at = self.run.past_below(hi).min(self.hi_at);
        self.back = at.max(self.front);
    }
    #[inline]
    fn next_into(&mut self, into: &mut Entry) -> Option<Result<()>> {
        into.set_from(self.head()?);
        self.advance();
        Some(Ok(()))
    }
}

/// A run of `cells` (keys strictly ascending), covering the segments `covers`.
fn run_of(covers: u64, cells: &[Entry]) -> SideRun {
    let mut run = SideRun {
        generation: 0,
        covers,
        cells: Vec::new(),
        prefixes: Vec::new(),
        fences: Vec::new(),
        bytes: Vec::new(),
        charge: Arc::new(RunBudget::new(0)).reserve_up_to(0),
    };
    for c in cells {
        assert!(run.push(c.as_ref(), u64::MAX));
    }
    run
}

/// Cell `i` of a model: keys of one to twelve bytes (sharing their first eight, or
/// not), tombstones and expiries among them.
fn cell(key: Vec<u8>, i: usize) -> Entry {
    Entry {
        value: if i % 5 == 0 { Vec::new() } else { vec![i as u8; i % 9] },
        key,
        ts: 1_000 + i as u64,
        tombstone: i % 5 == 0,
        expires: if i % 7 == 0 { 77 } else { 0 },
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(0u8..4, 1..4),
        proptest::collection::vec(0u8..4, 1..4).prop_map(|t| [&b"prefix00"[..], &t].concat()),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
    ]
}

/// A cursor step.
#[derive(Debug, Clone)]
enum Step {
    Next,
    Back,
    Seek(Bound<Vec<u8>>),
    SeekBack(Bound<Vec<u8>>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Next),
        2 => Just(Step::Back),
        1 => bound().prop_map(Step::Seek),
        1 => bound().prop_map(Step::SeekBack),
    ]
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(|k| &k[..])
}

/// Whether `k` lies above `lo` and below `hi`.
fn within(k: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => k >= l,
        Bound::Excluded(l) => k > l,
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => k <= h,
        Bound::Excluded(h) => k < h,
    };
    above && below
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

    /// A cursor yields the run's cells within its bounds, each once from whichever end
    /// reaches it first; a seek is absolute within the bounds and never crosses what
    /// the other end yielded.
    #[test]
    fn a_cursor_agrees_with_the_model(
        // Up to three fences' worth (`FENCE` 32), keys sharing their prefix or not.
        keys in proptest::collection::btree_set(key(), 0..100),
        lo in bound(),
        hi in bound(),
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let cells: Vec<Entry> = keys.into_iter().enumerate().map(|(i, k)| cell(k, i)).collect();
        let run = Arc::new(run_of(1, &cells));
        let rows: Vec<&Entry> = cells
            .iter()
            .filter(|c| within(&c.key, as_ref(&lo), as_ref(&hi)))
            .collect();
        let mut cur = RunCursor::new(Arc::clone(&run), as_ref(&lo), as_ref(&hi));
        prop_assert_eq!(cur.is_empty(), rows.is_empty());
        let (mut front, mut back) = (0usize, rows.len());
        let mut into = Entry::default();
        for s in &steps {
            match s {
                Step::Next => {
                    let got = cur.next_into(&mut into).map(|r| r.map(|()| into.clone()).unwrap());
                    let want = (front < back).then(|| rows[front].clone());
                    front += usize::from(front < back);
                    prop_assert_eq!(got, want);
                }
                Step::Back => {
                    let got = cur.next_back().map(|r| r.unwrap());
                    let want = (front < back).then(|| rows[back - 1].clone());
                    back -= usize::from(front < back);
                    prop_assert_eq!(got, want);
                }
                Step::Seek(b) => {
                    cur.seek(as_ref(b));
                    let at = rows.partition_point(|c| !within(&c.key, as_ref(b), Bound::Unbounded));
                    front = at.min(back);
                }
                Step::SeekBack(b) => {
                    cur.seek_back(as_ref(b));
                    let at = rows.partition_point(|c| within(&c.key, Bound::Unbounded, as_ref(b)));
                    back = at.max(front);
                }
            }
        }
        let rest: Vec<Entry> = cur.map(|r| r.unwrap()).collect();
        let want: Vec<Entry> = rows[front..back].iter().map(|c| (*c).clone()).collect();
        prop_assert_eq!(rest, want);
    }
}

/// A run stops at its budget, counting each cell's bytes, its 40 of bookkeeping, and
/// 8 for a fence every 32 cells.
#[test]
fn a_run_is_never_past_its_budget() {
    let c = cell(b"abc".to_vec(), 1); // 3 + 1 bytes, and the first fence
    let one = (4 + CELL_BYTES + 8) as u64;
    assert_eq!(CELL_BYTES, 40);
    let mut run = run_of(1, &[]);
    assert!(run.push(c.as_ref(), one));
    assert_eq!(run.charged(), one);
    let d = cell(b"abd".to_vec(), 2); // 3 + 2 bytes, no fence
    let two = one + (5 + CELL_BYTES) as u64;
    assert!(!run.push(d.as_ref(), two - 1));
    assert!(run.push(d.as_ref(), two));
    assert_eq!(run.len(), 2);
    assert_eq!(run.charged(), two);
}

/// A scan may read the run only when its chain holds no covered segment and every
/// other segment it meets is covered.
#[test]
fn a_run_serves_scans_whose_side_it_covers() {
    let run = run_of(0b0110, &[]);
    assert!(run.serves(0b0001, 0b0111));
    assert!(run.serves(0b1001, 0b1011)); // meets one covered segment of two
    assert!(run.serves(0b0001, 0b0001)); // meets none beside its chain
    assert!(!run.serves(0b0011, 0b0111)); // its chain holds a covered segment
    assert!(!run.serves(0b0001, 0b1111)); // meets segment 3, not covered
    assert!(run.covers(1) && run.covers(2) && !run.covers(0) && !run.covers(64));
}
