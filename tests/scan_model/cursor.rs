//! Cursors: scans of the table or of a read view held open across later operations,
//! several at once and stepped in turn, each beside what the model expects of it.

use std::ops::Bound;

use proptest::prelude::*;
use segstore::{Scan, Table};

use crate::keys::{Key, Row};
use crate::ops::Move;
use crate::run::Run;
use crate::steps::{Expected, Step};

pub(crate) struct Cursor {
    scan: Scan,
    expected: Expected,
    /// The operation that opened it, its source and bounds: the context of a failure.
    what: String,
}

/// At most this many cursors open; opening another drains and closes the oldest.
const MAX_CURSORS: usize = 5;

impl Run {
    /// Operation `n` opens a cursor on the table, or on view `view` (if any is open),
    /// over the bounds of pool keys given.
    pub(crate) fn open(
        &mut self,
        n: usize,
        view: Option<usize>,
        lo: Option<(usize, bool)>,
        hi: Option<(usize, bool)>,
    ) -> Result<(), TestCaseError> {
        if self.cursors.len() >= MAX_CURSORS {
            self.cursors.remove(0).drain(&self.log)?;
        }
        let (lo, hi) = (self.pool.bound(lo), self.pool.bound(hi));
        let range: (Bound<Key>, Bound<Key>) = (lo.clone(), hi.clone());
        let (scan, model, source) = match view {
            Some(i) if !self.views.is_empty() => {
                let i = i % self.views.len();
                let (view, model) = &self.views[i];
                (
                    view.scan(&self.t, range).unwrap(),
                    model,
                    format!("view {i}"),
                )
            }
            _ => (self.t.scan(range).unwrap(), &self.model, "table".into()),
        };
        self.cursors.push(Cursor {
            scan,
            expected: Expected::new(model.rows(&lo, &hi)),
            what: format!("{n} ({source}) {lo:?}..{hi:?}"),
        });
        Ok(())
    }

    /// One step of cursor `c`.
    pub(crate) fn step(&mut self, c: usize, m: &Move) -> Result<(), TestCaseError> {
        if self.cursors.is_empty() {
            return Ok(());
        }
        let step = self.resolve(m);
        let i = c % self.cursors.len();
        let cursor = &mut self.cursors[i];
        let got = step.on_scan(&mut cursor.scan);
        let want = step.on_model(&mut cursor.expected);
        prop_assert_eq!(
            got,
            want,
            "{:?} on cursor {}; log:\n{}",
            step,
            cursor.what,
            self.log
        );
        Ok(())
    }

    /// Cursor `c` stepped `steps` times forward on another thread.
    pub(crate) fn hop(&mut self, c: usize, steps: usize) -> Result<(), TestCaseError> {
        if self.cursors.is_empty() {
            return Ok(());
        }
        let i = c % self.cursors.len();
        let cursor = &mut self.cursors[i];
        for got in elsewhere(&mut cursor.scan, steps, &self.t) {
            let want = Step::Next.on_model(&mut cursor.expected);
            prop_assert_eq!(
                got,
                want,
                "hop of cursor {}; log:\n{}",
                cursor.what,
                self.log
            );
        }
        Ok(())
    }

    /// Cursor `c` drained and closed.
    pub(crate) fn close(&mut self, c: usize) -> Result<(), TestCaseError> {
        if self.cursors.is_empty() {
            return Ok(());
        }
        let i = c % self.cursors.len();
        self.cursors.remove(i).drain(&self.log)
    }

    fn resolve(&self, m: &Move) -> Step {
        match *m {
            Move::Next => Step::Next,
            Move::NextWith => Step::NextWith,
            Move::Back => Step::Back,
            Move::BackWith => Step::BackWith,
            Move::Seek(p) => Step::Seek(self.pool.probe(p)),
            Move::SeekBack(p) => Step::SeekBack(self.pool.probe(p)),
        }
    }
}

/// `steps` steps forward of `scan` on another thread, which also makes a scan of its
/// own and drops it there (block walks come from a thread's stock): what they yielded.
fn elsewhere(scan: &mut Scan, steps: usize, t: &Table) -> Vec<Option<Row>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let got = (0..steps).map(|_| Step::Next.on_scan(scan)).collect();
            drop(t.scan(..).unwrap().next());
            got
        })
        .join()
        .unwrap()
    })
}

impl Cursor {
    /// The rest of the scan, front to back, against the model's.
    pub(crate) fn drain(self, log: &str) -> Result<(), TestCaseError> {
        let rest: Vec<Row> = self.scan.map(|r| r.unwrap()).collect();
        prop_assert_eq!(
            rest,
            self.expected.rest(),
            "rest of cursor {}; log:\n{}",
            self.what,
            log
        );
        Ok(())
    }
}
