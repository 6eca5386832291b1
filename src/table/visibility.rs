//! Which commit log sequence numbers readers may see: the store's visibility watermark,
//! the live read views, and how far memtables may forget old versions.
//!
//! A write is numbered by the commit log ([`Visibility::begin`], called under the log's
//! lock, so numbers are registered in order), applied to its memtables, and then
//! [`Visibility::finish`]ed; a write whose log append failed after it was numbered is
//! finished too (it applied nothing). `visible` is the highest number `v` such that every
//! write numbered at or below `v` has finished: writes finish in any order, but become
//! visible in log order. A writer acknowledges only once `visible` covers its number
//! ([`Visibility::wait_visible`]), so a reader that loads `visible` after an
//! acknowledgement sees that write, and since every table of a batch is applied before
//! the batch finishes, a reader sees all of a batch or none of it.
//!
//! # Invariants
//! 1. `visible` never decreases, and every number at or below it is applied (or
//!    abandoned).
//! 2. Every registered view's number is at or above `floor`, and `floor` is at or below
//!    `visible`: a memtable may forget a key's versions older than its newest version at
//!    or below `floor` ([`crate::table::memtable`]), and no reader needs them. `floor` and
//!    view registrations change only under the one lock, so a view registered after a
//!    memtable read `floor` has a number at or above that `floor`.
//! 3. A flush waits until `visible` covers its memtable's highest number before its
//!    segment joins the table's view, so a segment never holds a cell a reader of the
//!    number it loaded may not see.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

#[derive(Debug, Default)]
struct State {
    /// Numbered and not yet finished.
    pending: BTreeSet<u64>,
    /// The highest number handed out.
    assigned: u64,
    /// Live read views: number -> how many.
    views: BTreeMap<u64, usize>,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Visibility {
    state: Mutex<State>,
    changed: Condvar,
    visible: AtomicU64,
    floor: AtomicU64,
}

impl Visibility {
    /// Everything up to `last` (the last number replayed at open) is visible.
    pub(crate) fn new(last: u64) -> Visibility {
        Visibility {
            state: Mutex::new(State {
                assigned: last,
                ..State::default()
            }),
            changed: Condvar::new(),
            visible: AtomicU64::new(last),
            floor: AtomicU64::new(last),
        }
    }

    /// The highest number readers see (invariant 1).
    #[inline]
    pub(crate) fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Versions at or below this, except each key's newest, may be forgotten
    /// (invariant 2).
    #[inline]
    pub(crate) fn floor(&self) -> u64 {
        self.floor.load(Ordering::Acquire)
    }

    /// Register `seq`, just numbered by the commit log (under its lock, so in order).
    pub(crate) fn begin(&self, seq: u64) {
        let mut st = self.state.lock();
        st.assigned = st.assigned.max(seq);
        st.pending.insert(seq);
    }

    /// `seq` is applied (or abandoned): advance `visible` over every finished number.
    pub(crate) fn finish(&self, seq: u64) {
        let mut st = self.state.lock();
        st.pending.remove(&seq);
        let visible = match st.pending.first() {
            Some(&p) => p - 1,
            None => st.assigned,
        };
        if visible > self.visible.load(Ordering::Relaxed) {
            self.visible.store(visible, Ordering::Release);
            self.update_floor(&st);
            self.changed.notify_all();
        }
    }

    /// Wait until `visible` covers `seq`.
    pub(crate) fn wait_visible(&self, seq: u64) {
        if self.visible() >= seq {
            return;
        }
        let mut st = self.state.lock();
        while self.visible.load(Ordering::Acquire) < seq {
            self.changed.wait(&mut st);
        }
    }

    /// Register a read view at the current `visible` and return its number; the caller
    /// must [`Visibility::release`] it.
    pub(crate) fn register(&self) -> u64 {
        let mut st = self.state.lock();
        let seq = self.visible.load(Ordering::Acquire);
        *st.views.entry(seq).or_insert(0) += 1;
        seq
    }

    /// A read view at `seq` is gone.
    pub(crate) fn release(&self, seq: u64) {
        let mut st = self.state.lock();
        if let Some(n) = st.views.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                st.views.remove(&seq);
                self.update_floor(&st);
            }
        }
    }

    /// `visible` and the numbers of the registered reads (ascending), loaded together:
    /// what a memtable thinning a key's versions must keep.
    pub(crate) fn needed(&self) -> (u64, Vec<u64>) {
        let st = self.state.lock();
        (
            self.visible.load(Ordering::Acquire),
            st.views.keys().copied().collect(),
        )
    }

    /// Live read views (stats, tests).
    pub(crate) fn views(&self) -> usize {
        self.state.lock().views.values().sum()
    }

    fn update_floor(&self, st: &State) {
        let visible = self.visible.load(Ordering::Acquire);
        let oldest = st.views.first_key_value().map_or(visible, |(&s, _)| s);
        let floor = oldest.min(visible);
        // Never down: a view registers at `visible`, which is at or above every floor.
        if floor > self.floor.load(Ordering::Relaxed) {
            self.floor.store(floor, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn visible_advances_in_order_and_floor_waits_for_views() {
        let v = Visibility::new(10);
        assert_eq!((v.visible(), v.floor()), (10, 10));
        v.begin(11);
        v.begin(12);
        v.begin(13);
        v.finish(12);
        assert_eq!(v.visible(), 10, "11 is still pending");
        let view = v.register();
        assert_eq!(view, 10);
        v.finish(11);
        assert_eq!(v.visible(), 12);
        assert_eq!(v.floor(), 10, "a view at 10 holds the floor");
        v.finish(13);
        assert_eq!(v.visible(), 13);
        v.release(view);
        assert_eq!(v.floor(), 13);
        assert_eq!(v.views(), 0);
    }

    #[test]
    fn a_waiting_writer_is_released_by_an_earlier_finish() {
        let v = Arc::new(Visibility::new(0));
        v.begin(1);
        v.begin(2);
        v.finish(2);
        let w = {
            let v = Arc::clone(&v);
            std::thread::spawn(move || {
                v.wait_visible(2);
                v.visible()
            })
        };
        v.finish(1);
        assert_eq!(w.join().unwrap(), 2);
    }
}
