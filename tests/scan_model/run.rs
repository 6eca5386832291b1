//! One case: its operations applied to the store and to the model in turn, every
//! answer checked as it comes (`cursor`, `check`), then the final checks.

use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;

use proptest::test_runner::TestCaseError;
use segstore::{ReadView, Store, Table};

use crate::cursor::Cursor;
use crate::keys::Pool;
use crate::model::Model;
use crate::ops::{Op, Setup};
use crate::store;

/// The state of a case.
pub(crate) struct Run {
    pub(crate) pool: Pool,
    pub(crate) store: Store,
    pub(crate) t: Arc<Table>,
    pub(crate) model: Model,
    /// Open read views, each with the model as it was when it was taken.
    pub(crate) views: Vec<(ReadView, Model)>,
    /// Open scans, oldest first.
    pub(crate) cursors: Vec<Cursor>,
    /// The operations so far, numbered: the context of a failure.
    pub(crate) log: String,
}

/// At most this many views open; taking another drops the oldest.
const MAX_VIEWS: usize = 3;

pub(crate) fn run(s: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::new(dir.path(), s);
    for (n, op) in ops.iter().enumerate() {
        writeln!(run.log, "{n}: {op:?}").unwrap();
        run.apply(n, op)?;
    }
    run.finish()
}

impl Run {
    fn new(dir: &Path, s: &Setup) -> Run {
        let (store, t) = store::open(dir, s);
        Run {
            pool: Pool::new(s),
            store,
            t,
            model: Model::default(),
            views: Vec::new(),
            cursors: Vec::new(),
            log: String::new(),
        }
    }

    /// Operation number `n`.
    fn apply(&mut self, n: usize, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Get(k) => self.check_get(*k),
            Op::Open(view, lo, hi) => self.open(n, *view, *lo, *hi),
            Op::Step(c, m) => self.step(*c, m),
            Op::Hop(c, steps) => self.hop(*c, *steps),
            Op::Close(c) => self.close(*c),
            Op::Flush | Op::Freeze | Op::CompactPending | Op::Compact | Op::Clock(_) => {
                self.maintain(op);
                Ok(())
            }
            Op::View => {
                if self.views.len() >= MAX_VIEWS {
                    self.views.remove(0);
                }
                let view = self.store.read_view().unwrap();
                self.views.push((view, self.model.clone()));
                Ok(())
            }
            _ => {
                self.write(op);
                Ok(())
            }
        }
    }

    /// What changes where the cells are, or the expiry clock, but no cell.
    fn maintain(&mut self, op: &Op) {
        let t = &self.t;
        match *op {
            Op::Flush => t.flush().unwrap(),
            // Up to four frozen memtables, under the table's limit (16).
            Op::Freeze if t.stats().frozen_memtables < 4 => t.freeze_memtable(),
            Op::Freeze => {}
            Op::CompactPending => drop(t.compact_pending().unwrap()),
            Op::Compact => t.compact().unwrap(),
            Op::Clock(d) => {
                self.model.now += d;
                self.store.set_expiry_clock(Some(self.model.now));
            }
            _ => unreachable!("{op:?} is not maintenance"),
        }
    }
}
