//! Views: the immutable set of live segments that a reader sees, replaced atomically.
//!
//! A reader borrows the current `Arc<View>` for the length of a read, or clones it (one
//! atomic increment) to keep it. Writers build a new view and swap it in; the old view,
//! and with it the handles of segments it alone held, drops when its last borrow ends
//! and its last clone lets go.
//!
//! The cell is an [`io::hazard::HazardCell`](crate::io::hazard::HazardCell): a borrow
//! costs no locked instruction and no reference count (hazard slots, with
//! `membarrier(2)` on the swapping side where the kernel has it), and a swap never
//! waits for readers, so a reader may run the caller's code while it borrows the view
//! (`Table::get_with` does). It replaced a `crossbeam_utils::sync::ShardedLock`, whose
//! read lock cost every get two locked instructions, and under which the caller's code
//! could not run (a flush inside it would have waited for itself), so a hit cloned the
//! view: a reference count that every core's gets share. Swaps are rare (flushes,
//! compactions).

use std::sync::Arc;

use crate::io::hazard::HazardCell;

use super::handle::SegmentHandle;

/// Live segments, newest first.
#[derive(Debug, Default)]
pub struct View {
    /// Segments, newest (highest id) first.
    pub segments: Vec<SegmentHandle>,
    /// Incremented on every replacement.
    pub generation: u64,
}

/// The current view, replaced atomically.
#[derive(Debug)]
pub struct ViewCell {
    cur: HazardCell<View>,
}

impl Default for ViewCell {
    fn default() -> ViewCell {
        ViewCell::new(View::default())
    }
}

impl ViewCell {
    /// A cell holding `view`.
    pub fn new(view: View) -> ViewCell {
        ViewCell {
            cur: HazardCell::new(Arc::new(view)),
        }
    }

    /// The current view.
    #[inline]
    pub fn load(&self) -> Arc<View> {
        self.cur.load()
    }

    /// Run `f` on the current view, borrowed (a swap meanwhile does not wait for `f`;
    /// the view it replaces lives until `f` returns).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        self.cur.with(|v| f(v))
    }

    /// Like [`ViewCell::with`], handing `f` the `Arc` itself, for a reader that may
    /// keep the view beyond `f` (a point read's mapped value) at the cost of a clone
    /// only then.
    #[inline]
    pub fn with_arc<R>(&self, f: impl FnOnce(&Arc<View>) -> R) -> R {
        self.cur.with(f)
    }

    /// Replace the view with `f(current)`; returns the old one. Writers are serialised
    /// by the caller (one writer per table). The cell's reference to the old view is
    /// retired: the caller runs [`ViewCell::reclaim`] once it holds no lock.
    pub fn replace(&self, f: impl FnOnce(&View) -> Vec<SegmentHandle>) -> Arc<View> {
        let old = self.load();
        let mut segments = f(&old);
        segments.sort_by_key(|h| std::cmp::Reverse(h.name().id));
        let new = Arc::new(View {
            segments,
            generation: old.generation + 1,
        });
        self.cur.replace(new)
    }

    /// Drop the views this cell replaced that no read borrows (see
    /// [`HazardCell::reclaim_own`]); for a writer that holds no lock.
    pub fn reclaim(&self) {
        self.cur.reclaim_own();
    }

    /// Wait up to `patience` for reads of views this cell replaced to end (and the
    /// views to drop); whether they all did.
    pub fn settle(&self, patience: std::time::Duration) -> bool {
        self.cur.settle(patience)
    }
}
