//! [`CopyMerge`]: a forward merge that keeps one [`Entry`] per source and refills it in
//! place ([`Cursor::next_into`]), so a step allocates nothing and moves no cell through
//! a heap; the caller borrows the winning cell. A forward scan's overlay merges the
//! memtables and the small segments beside its largest segment with it
//! (`table/lsm/overlay.rs`, issue 19 item 3): there [`MergeIter`](super::MergeIter)
//! cost two allocations and frees and a heap's pop and push for every row, about 60%
//! of such a row's instructions. Its sources are few (the memtables holding keys of
//! the range and the segments beside the largest), so the smallest key is found by a
//! pass over them, which for two to four sources compares no more keys than a heap's
//! sift would.
//!
//! It serves what the overlay needs and no more: forward only, no seek, policy
//! [`TombstonePolicy::Keep`](super::TombstonePolicy::Keep) and no range tombstones.
//! Within that it answers as `MergeIter` does (the module's invariants 1 to 3): keys
//! strictly ascending, each key's winner of all the sources' versions by
//! [`cmp_versions`], tombstones included; the first error is returned and the merge
//! then ends; a source out of strictly ascending order is an error.

use std::mem;

use super::{stock, Cursor};
use crate::error::{Error, Result};
use crate::format::key_order;
use crate::segment::Entry;
use crate::table::cell::{cmp_versions, entry_version};

/// A forward merge of cursors into reused cells: see the module docs.
pub(crate) struct CopyMerge<I> {
    srcs: Vec<Src<I>>,
    /// The source whose cell is the current winner (found by [`CopyMerge::settle`],
    /// not yet taken).
    cur: Option<usize>,
    /// The source of the cell [`CopyMerge::take`] last returned.
    taken: usize,
    failed: bool,
}

/// The room a merge holds its sources in, empty, kept by its owner between merges
/// ([`CopyMerge::new_in`], [`CopyMerge::take_places`]): a scan's side merge then
/// allocates none (the room for four sources is some 2 KiB, past the allocator's
/// per-thread cache of small blocks, and its allocation and free cost a one-row scan
/// of a table with a memtable about 450 instructions of 12,100).
pub(crate) struct Places<I>(Vec<Src<I>>);

impl<I> Default for Places<I> {
    fn default() -> Self {
        Places(Vec::new())
    }
}

impl<I> Places<I> {
    /// How many sources it has room for.
    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

/// One source and its next cell.
struct Src<I> {
    it: I,
    /// Its next cell, when `full`; else the last it gave (the order check compares a
    /// new cell with it).
    cell: Entry,
    /// What the next cell is read into before the check; then swapped with `cell`.
    spare: Entry,
    full: bool,
    /// It has given a cell (`cell` holds one, read or not).
    given: bool,
    /// It is exhausted.
    done: bool,
}

impl<I: Cursor> CopyMerge<I> {
    /// Merge `sources`, each strictly ascending by key.
    pub(crate) fn new(sources: impl IntoIterator<Item = I>) -> CopyMerge<I> {
        Self::new_in(Places::default(), sources)
    }

    /// [`CopyMerge::new`], holding the sources in `places` (room an earlier merge's
    /// [`CopyMerge::take_places`] gave back).
    pub(crate) fn new_in(
        places: Places<I>,
        sources: impl IntoIterator<Item = I>,
    ) -> CopyMerge<I> {
        let mut srcs = places.0;
        srcs.clear();
        srcs.extend(sources.into_iter().map(|it| Src {
            it,
            cell: stock::take(),
            spare: stock::take(),
            full: false,
            given: false,
            done: false,
        }));
        CopyMerge {
            srcs,
            cur: None,
            taken: 0,
            failed: false,
        }
    }

    /// Find the next winner if the last was taken: refill the sources whose cells were
    /// used, then pick the smallest key's newest cell. [`CopyMerge::current`] then
    /// shows it. After an error, none is found again.
    #[inline]
    pub(crate) fn settle(&mut self) -> Result<()> {
        if self.cur.is_some() || self.failed {
            return Ok(());
        }
        self.find_winner()
    }

    /// [`CopyMerge::settle`]'s work once the last winner was taken: out of line, so the
    /// overlay's step, which settles before every row, pays only the check above while
    /// the winner waits (about 20 instructions a row of saved and restored registers).
    #[inline(never)]
    fn find_winner(&mut self) -> Result<()> {
        let mut best: Option<usize> = None;
        for i in 0..self.srcs.len() {
            if !self.srcs[i].full && !self.srcs[i].done {
                if let Err(e) = self.pull(i) {
                    self.failed = true;
                    return Err(e);
                }
            }
            if !self.srcs[i].full {
                continue;
            }
            best = Some(match best {
                Some(b) if !wins(&self.srcs[i].cell, &self.srcs[b].cell) => b,
                _ => i,
            });
        }
        self.cur = best;
        Ok(())
    }

    /// Whether it merges no source at all (it never yields a cell).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.srcs.is_empty()
    }

    /// The winner [`CopyMerge::settle`] found; `None` once every source is done (or
    /// before the first `settle`, and after an error).
    #[inline]
    pub(crate) fn current(&self) -> Option<&Entry> {
        self.cur.map(|i| &self.srcs[i].cell)
    }

    /// Take the current winner: every source's cell at its key is used (the next
    /// [`CopyMerge::settle`] reads past them). The winner stays readable through
    /// [`CopyMerge::taken`] until then. False if there was none.
    pub(crate) fn take(&mut self) -> bool {
        let Some(w) = self.cur.take() else {
            return false;
        };
        for i in 0..self.srcs.len() {
            if i == w
                || (self.srcs[i].full
                    && key_order(&self.srcs[i].cell.key, &self.srcs[w].cell.key).is_eq())
            {
                self.srcs[i].full = false;
            }
        }
        self.taken = w;
        true
    }

    /// The cell [`CopyMerge::take`] last took (meaningful until the next
    /// [`CopyMerge::settle`]).
    #[inline]
    pub(crate) fn taken(&self) -> &Entry {
        &self.srcs[self.taken].cell
    }

    /// Read source `i`'s next cell into its `cell`, checking the order.
    fn pull(&mut self, i: usize) -> Result<()> {
        let s = &mut self.srcs[i];
        match s.it.next_into(&mut s.spare) {
            None => {
                s.done = true;
                Ok(())
            }
            Some(Err(e)) => Err(e),
            Some(Ok(())) if s.given && key_order(&s.spare.key, &s.cell.key).is_le() => {
                Err(out_of_order(i))
            }
            Some(Ok(())) => {
                mem::swap(&mut s.cell, &mut s.spare);
                s.full = true;
                s.given = true;
                Ok(())
            }
        }
    }
}

impl<I> CopyMerge<I> {
    /// End the merge: its sources are dropped (their buffers back to the thread's
    /// stock) and the room they took is returned, empty, for another merge
    /// ([`CopyMerge::new_in`]). The merge then yields no cell.
    pub(crate) fn take_places(&mut self) -> Places<I> {
        self.give_buffers();
        self.cur = None;
        let mut srcs = mem::take(&mut self.srcs);
        srcs.clear();
        Places(srcs)
    }

    /// The sources' buffers back to the thread's stock ([`stock`]), for the next scan.
    fn give_buffers(&mut self) {
        for s in &mut self.srcs {
            stock::give(mem::take(&mut s.cell));
            stock::give(mem::take(&mut s.spare));
        }
    }
}

impl<I> Drop for CopyMerge<I> {
    fn drop(&mut self) {
        self.give_buffers();
    }
}

/// Whether `a` comes before `b` in the merge: a smaller key, or the same key's newer
/// version.
#[inline]
fn wins(a: &Entry, b: &Entry) -> bool {
    match key_order(&a.key, &b.key) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Greater => false,
        std::cmp::Ordering::Equal => cmp_versions(entry_version(a), entry_version(b)).is_gt(),
    }
}

#[cold]
fn out_of_order(src: usize) -> Error {
    Error::InvalidArgument(format!(
        "merge source {src} is not in strictly ascending key order"
    ))
}
