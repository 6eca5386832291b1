//! Views: the immutable set of live segments that a reader sees, replaced atomically.
//!
//! A reader clones the current `Arc<View>` (a shared read lock held for one atomic
//! increment: readers never serialise) and then reads without any lock. Writers build a
//! new view and swap it in; the old view, and with it the handles of segments it alone
//! held, drops when its last reader lets go.

use std::sync::Arc;

use parking_lot::RwLock;

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
#[derive(Debug, Default)]
pub struct ViewCell {
    cur: RwLock<Arc<View>>,
}

impl ViewCell {
    /// A cell holding `view`.
    pub fn new(view: View) -> ViewCell {
        ViewCell {
            cur: RwLock::new(Arc::new(view)),
        }
    }

    /// The current view.
    #[inline]
    pub fn load(&self) -> Arc<View> {
        self.cur.read().clone()
    }

    /// Run `f` on the current view under the shared read lock.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        f(&self.cur.read())
    }

    /// Like [`ViewCell::with`], handing `f` the `Arc` itself, for a reader that may
    /// keep the view beyond `f` (a point read's mapped value) at the cost of a clone
    /// only then.
    #[inline]
    pub fn with_arc<R>(&self, f: impl FnOnce(&Arc<View>) -> R) -> R {
        f(&self.cur.read())
    }

    /// Replace the view with `f(current)`; returns the old one. Writers are serialised
    /// by the caller (one writer per table).
    pub fn replace(&self, f: impl FnOnce(&View) -> Vec<SegmentHandle>) -> Arc<View> {
        let old = self.load();
        let mut segments = f(&old);
        segments.sort_by_key(|h| std::cmp::Reverse(h.name().id));
        let new = Arc::new(View {
            segments,
            generation: old.generation + 1,
        });
        std::mem::replace(&mut *self.cur.write(), new)
    }
}
