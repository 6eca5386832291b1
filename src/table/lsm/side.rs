//! The overlay's side ([`super::overlay`]): everything a scan reads beside its base
//! chain, one cell ahead. The memtables (and, without a side run, the segments beside
//! the chain) are merged among themselves by a [`CopyMerge`], which copies each cell
//! into a buffer of its source; a side run's cells are lent from the run instead and
//! merged with that merge's winner here.
//!
//! In YCSB E's state most of a scan's side cells come from the run (some 8 of a
//! 50-row scan, against half a cell from a memtable of 10,000 keys). Through the copy
//! merge each was copied into its buffer (key and value), checked for order, swapped
//! with the buffer before it and compared with the memtables' cell; lent, it costs
//! that comparison and a copy of its key, which the overlay compares at every row as
//! its cap (read from the run at each row instead, the cap cost more than the copies
//! saved). A run is sorted and strictly ascending by construction (`side_run.rs`
//! invariant 1), so its order needs no check. Over a million keys in level 1, two
//! level 0 segments of 89,000 updates read through their run and 10,000 memtable keys,
//! 1..100-row scans took 0.91 to 0.98 of the time (README "Measured", "A side run's
//! cells lent").
//!
//! Invariant: what it yields is what the copy merge of the same sources yields (keys
//! strictly ascending, each key's winner of every source's cells of it by
//! [`cmp_versions`], tombstones included): at equal keys the newer cell wins and both
//! are used up; on a tie the merge's cell wins, as the copy merge's earlier source
//! (the memtables came before the run) did.

use std::cmp::Ordering;

use super::overlay::SideCursor;
use super::side_run::RunCursor;
use crate::error::Result;
use crate::format::{key_order, replace_tail};
use crate::segment::{Entry, RecordRef};
use crate::table::cell::{cmp_versions, version};
use crate::table::merge::{stock, CopyMerge, Places};

/// Where the side's winner is.
#[derive(Clone, Copy)]
enum From {
    /// The run's cell at the front (for the current winner) or at an index (taken).
    Run,
    /// The copy merge's.
    Merge,
}

/// The current winner: where it is, and whether the run's front and the merge's cell
/// share its key (both are used up when it is taken).
#[derive(Clone, Copy)]
struct Win {
    from: From,
    both: bool,
}

/// The side of an overlay: see the module docs.
pub(crate) struct Side {
    /// A side run's cells in the scan's range, lent.
    run: Option<RunCursor>,
    merge: CopyMerge<SideCursor>,
    /// The current winner, found by [`Side::settle`] and not yet taken.
    cur: Option<Win>,
    /// Its key, copied into `key.key` (the overlay's cap, compared at every row its
    /// chain lends): a buffer from the thread's stock, given back whole.
    key: Entry,
    /// Where the cell [`Side::take`] last took is.
    taken: From,
    /// The run's index of that cell, when it was the run's.
    taken_at: usize,
}

impl Side {
    /// The merge of `sources` (in `places`), and the lent cells of `run`.
    pub(crate) fn new(
        places: Places<SideCursor>,
        sources: impl IntoIterator<Item = SideCursor>,
        run: Option<RunCursor>,
    ) -> Side {
        Side {
            run: run.filter(|r| !r.is_empty()),
            merge: CopyMerge::new_in(places, sources),
            cur: None,
            key: stock::take(),
            taken: From::Merge,
            taken_at: 0,
        }
    }

    /// Whether it holds no source at all (it never yields a cell).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.run.is_none() && self.merge.is_empty()
    }

    /// Find the next winner if the last was taken ([`CopyMerge::settle`]).
    #[inline]
    pub(crate) fn settle(&mut self) -> Result<()> {
        if self.cur.is_some() {
            return Ok(());
        }
        self.merge.settle()?;
        self.cur = self.winner();
        let key = match self.cur.map(|w| w.from) {
            Some(From::Run) => self.run.as_ref().and_then(RunCursor::head).map(|r| r.key),
            Some(From::Merge) => self.merge.current().map(|e| &e.key[..]),
            None => None,
        };
        if let Some(k) = key {
            replace_tail(&mut self.key.key, 0, k);
        }
        Ok(())
    }

    /// Which of the run's front and the merge's winner comes first.
    #[inline]
    fn winner(&self) -> Option<Win> {
        let alone = |from| Win { from, both: false };
        let Some(run) = &self.run else {
            return self.merge.current().map(|_| alone(From::Merge));
        };
        match (run.head(), self.merge.current()) {
            (None, None) => None,
            (Some(_), None) => Some(alone(From::Run)),
            (None, Some(_)) => Some(alone(From::Merge)),
            (Some(r), Some(m)) => Some(match key_order(r.key, &m.key) {
                Ordering::Less => alone(From::Run),
                Ordering::Greater => alone(From::Merge),
                Ordering::Equal => Win {
                    from: match cmp_versions(version(&r), version(&m.as_ref())) {
                        Ordering::Greater => From::Run,
                        _ => From::Merge,
                    },
                    both: true,
                },
            }),
        }
    }

    /// The key of the winner [`Side::settle`] found (as [`Side::current`]'s).
    #[inline(always)]
    pub(crate) fn current_key(&self) -> Option<&[u8]> {
        self.cur.map(|_| &self.key.key[..])
    }

    /// The winner [`Side::settle`] found; `None` once every source is done (or before
    /// the first `settle`, and after an error).
    #[inline]
    pub(crate) fn current(&self) -> Option<RecordRef<'_>> {
        match self.cur?.from {
            From::Run => self.run.as_ref().and_then(RunCursor::head),
            From::Merge => self.merge.current().map(|e| e.as_ref()),
        }
    }

    /// Take the current winner: every source's cell at its key is used. The winner
    /// stays readable through [`Side::taken`] until the next [`Side::settle`]. False if
    /// there was none.
    pub(crate) fn take(&mut self) -> bool {
        let Some(w) = self.cur.take() else {
            return false;
        };
        let run = matches!(w.from, From::Run);
        if !run || w.both {
            self.merge.take();
        }
        if run || w.both {
            if let Some(r) = &mut self.run {
                self.taken_at = r.advance();
            }
        }
        self.taken = w.from;
        true
    }

    /// The cell [`Side::take`] last took (meaningful until the next [`Side::settle`]).
    #[inline]
    pub(crate) fn taken(&self) -> RecordRef<'_> {
        match (self.taken, &self.run) {
            (From::Run, Some(r)) => r.cell(self.taken_at),
            _ => self.merge.taken().as_ref(),
        }
    }

    /// End it: the merge's room back, empty ([`CopyMerge::take_places`]).
    pub(crate) fn take_places(&mut self) -> Places<SideCursor> {
        self.cur = None;
        stock::give(std::mem::take(&mut self.key));
        self.merge.take_places()
    }
}
