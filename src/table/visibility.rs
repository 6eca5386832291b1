//! Which commit log sequence numbers readers may see: the store's visibility watermark,
//! the live read views, and how far memtables may forget old versions.
//!
//! A write is numbered by the commit log ([`Visibility::begin`], called under the log's
//! lock, so numbers are registered in order), applied to its memtables, and then
//! [`Visibility::finish`]ed; a write whose log append failed after it was numbered is
//! finished too (it applied nothing). `visible` is the highest number `v` such that every
//! write numbered at or below `v` has finished: writes finish in any order, but become
//! visible in log order.
//!
//! Writers never take a lock here. A finished number `s` is marked in a ring of slots
//! (`done[s % slots] = s`), and whoever finishes moves `visible` forward over the marked
//! numbers that follow it by compare-and-swap. Two writers finishing neighbours at once
//! each mark, fence, then look at the other's slot, so at least one of them sees both and `visible` never stalls below a finished number. A number
//! `slots` ahead of `visible` waits before marking (its slot's last occupant is not yet
//! passed); with 4,096 slots that takes 4,096 writes in flight at once. The mutex
//! guards only the read views and the condvar that acknowledgements wait on, which a
//! finish touches only when a writer is waiting. A mutex around a `BTreeSet` of pending
//! numbers did this before; with 4 writers on 2 CPUs its handoffs (and `begin` taking
//! it inside the commit log's lock) were half of the puts' futex time (perf, issue 19
//! item 2). `loom` checks the protocol: `RUSTFLAGS="--cfg segstore_loom" cargo test
//! --release --lib visibility::loom` (in `.ci/run`). A writer acknowledges only once `visible` covers its number
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
//!    memtable read `floor` has a number at or above that `floor`. A finish that moved
//!    `visible` raises `floor` only if it gets the lock without waiting: `floor` may lag
//!    (memtables then keep a version or two more), never lead.
//! 3. A flush waits until `visible` covers its memtable's highest number before its
//!    segment joins the table's view, so a segment never holds a cell a reader of the
//!    number it loaded may not see.

use std::collections::BTreeMap;

use self::sync::{brief_wait, fence, wait, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, SeqCst};

#[cfg(not(all(test, segstore_loom)))]
mod sync {
    pub(super) use parking_lot::{Condvar, Mutex, MutexGuard};
    pub(super) use std::sync::atomic::Ordering::SeqCst;
    pub(super) use std::sync::atomic::{fence, AtomicU64, AtomicUsize};

    pub(super) fn wait<'a, T>(cv: &Condvar, mut g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        cv.wait(&mut g);
        g
    }

    pub(super) use crate::table::spin::brief_wait;
}

/// The same names over `loom`'s types, for the model in `loom_model`.
#[cfg(all(test, segstore_loom))]
mod sync {
    pub(super) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize};
    pub(super) use loom::sync::{Condvar, MutexGuard};
    pub(super) use std::sync::atomic::Ordering::SeqCst;

    #[derive(Debug)]
    pub(super) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(super) fn new(t: T) -> Self {
            Mutex(loom::sync::Mutex::new(t))
        }
        pub(super) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
        pub(super) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    pub(super) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        cv.wait(g).unwrap()
    }

    /// No spinning in the model: every wait parks, the case with the lost wake-ups.
    pub(super) fn brief_wait(done: impl Fn() -> bool) -> bool {
        done()
    }
}

/// Slots of the ring of finished numbers (a power of two).
const SLOTS: usize = 4096;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Visibility {
    /// `done[s % len] == s` once number `s` has finished.
    done: Box<[AtomicU64]>,
    visible: AtomicU64,
    floor: AtomicU64,
    /// Acknowledgements waiting in [`Visibility::wait_visible`].
    waiters: AtomicUsize,
    /// Live read views: number -> how many.
    views: Mutex<BTreeMap<u64, usize>>,
    changed: Condvar,
}

impl Visibility {
    /// Everything up to `last` (the last number replayed at open) is visible.
    pub(crate) fn new(last: u64) -> Visibility {
        Self::with_slots(last, SLOTS)
    }

    /// [`Visibility::new`] with a ring of `slots` (tests and the model use a few).
    fn with_slots(last: u64, slots: usize) -> Visibility {
        Visibility {
            done: (0..slots.max(1)).map(|_| AtomicU64::new(0)).collect(),
            visible: AtomicU64::new(last),
            floor: AtomicU64::new(last),
            waiters: AtomicUsize::new(0),
            views: Mutex::new(BTreeMap::new()),
            changed: Condvar::new(),
        }
    }

    /// The highest number readers see (invariant 1).
    #[inline]
    pub(crate) fn visible(&self) -> u64 {
        self.visible.load(SeqCst)
    }

    /// Versions at or below this, except each key's newest, may be forgotten
    /// (invariant 2).
    #[inline]
    pub(crate) fn floor(&self) -> u64 {
        self.floor.load(SeqCst)
    }

    /// Register `seq`, just numbered by the commit log (under its lock, so in order).
    /// Nothing to record: an unfinished number is one whose slot does not hold it.
    #[inline]
    pub(crate) fn begin(&self, seq: u64) {
        debug_assert!(seq > self.visible());
    }

    fn slot(&self, seq: u64) -> &AtomicU64 {
        &self.done[(seq % self.done.len() as u64) as usize]
    }

    /// `seq` is applied (or abandoned): advance `visible` over every finished number.
    pub(crate) fn finish(&self, seq: u64) {
        let ring = self.done.len() as u64;
        if seq > ring {
            // The slot's last occupant, `seq - ring`, must be passed before it is reused.
            self.wait_visible(seq - ring);
        }
        self.slot(seq).store(seq, SeqCst);
        // A neighbour finishing at once stores its slot, fences, then loads ours: of two
        // such threads at least one sees the other's slot (store-buffering, closed by the
        // fences; `loom` models the fences, not sequentially consistent accesses alone).
        fence(SeqCst);
        if self.advance() {
            self.advanced();
        }
    }

    /// Move `visible` over the finished numbers right after it; true if this call moved
    /// it.
    fn advance(&self) -> bool {
        let mut moved = false;
        loop {
            let v = self.visible.load(SeqCst);
            let next = v + 1;
            if self.slot(next).load(SeqCst) != next {
                return moved;
            }
            // Another finisher may move it first; either way, look again.
            moved |= self
                .visible
                .compare_exchange(v, next, SeqCst, SeqCst)
                .is_ok();
        }
    }

    /// After this thread moved `visible`: wake waiting acknowledgements, raise `floor`.
    fn advanced(&self) {
        // Against `wait_visible`'s registration: either it sees the new `visible`, or
        // this sees its waiter and wakes it under the lock it waits with.
        fence(SeqCst);
        let views = if self.waiters.load(SeqCst) > 0 {
            let g = self.views.lock();
            self.changed.notify_all();
            Some(g)
        } else {
            self.views.try_lock()
        };
        if let Some(views) = views {
            self.update_floor(&views);
        }
    }

    /// Wait until `visible` covers `seq`: briefly without sleeping (the writes before
    /// it are usually a memtable insert from done), then on the condvar.
    pub(crate) fn wait_visible(&self, seq: u64) {
        if brief_wait(|| self.visible() >= seq) {
            return;
        }
        let mut g = self.views.lock();
        self.waiters.fetch_add(1, SeqCst);
        fence(SeqCst);
        while self.visible.load(SeqCst) < seq {
            g = wait(&self.changed, g);
        }
        self.waiters.fetch_sub(1, SeqCst);
    }

    /// Register a read view at the current `visible` and return its number; the caller
    /// must [`Visibility::release`] it.
    pub(crate) fn register(&self) -> u64 {
        let mut views = self.views.lock();
        let seq = self.visible.load(SeqCst);
        *views.entry(seq).or_insert(0) += 1;
        seq
    }

    /// A read view at `seq` is gone.
    pub(crate) fn release(&self, seq: u64) {
        let mut views = self.views.lock();
        if let Some(n) = views.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                views.remove(&seq);
                self.update_floor(&views);
            }
        }
    }

    /// `visible` and the numbers of the registered reads (ascending), loaded together:
    /// what a memtable thinning a key's versions must keep.
    pub(crate) fn needed(&self) -> (u64, Vec<u64>) {
        let views = self.views.lock();
        (self.visible.load(SeqCst), views.keys().copied().collect())
    }

    /// Live read views (stats, tests).
    pub(crate) fn views(&self) -> usize {
        self.views.lock().values().sum()
    }

    /// Under the lock: `floor` up to the oldest view or `visible`.
    fn update_floor(&self, views: &MutexGuard<'_, BTreeMap<u64, usize>>) {
        let visible = self.visible.load(SeqCst);
        let oldest = views.first_key_value().map_or(visible, |(&s, _)| s);
        let floor = oldest.min(visible);
        // Never down: a view registers at `visible`, which is at or above every floor.
        if floor > self.floor.load(SeqCst) {
            self.floor.store(floor, SeqCst);
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

    /// With a ring of 2 slots, number 3 reuses number 1's slot: its finish waits until
    /// 1 is visible, and every number still becomes visible in order.
    #[test]
    fn a_reused_slot_waits_for_its_last_occupant() {
        let v = Arc::new(Visibility::with_slots(0, 2));
        for s in 1..=3 {
            v.begin(s);
        }
        v.finish(2);
        let (tx, rx) = std::sync::mpsc::channel();
        let w = {
            let v = Arc::clone(&v);
            std::thread::spawn(move || {
                tx.send(()).unwrap();
                v.finish(3);
                v.visible()
            })
        };
        rx.recv().unwrap();
        assert_eq!(v.visible(), 0, "1 is pending");
        v.finish(1);
        assert_eq!(w.join().unwrap(), 3);
        assert_eq!(v.visible(), 3);
    }

    /// Threads finish a run of numbers in any order, each acknowledging its own: every
    /// wait returns, and `visible` ends at the last number.
    #[test]
    fn concurrent_finishes_never_stall() {
        const N: u64 = 20_000;
        let v = Arc::new(Visibility::with_slots(0, 64));
        let next = Arc::new(parking_lot::Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (v, next) = (Arc::clone(&v), Arc::clone(&next));
                std::thread::spawn(move || loop {
                    let seq = {
                        // Numbered and begun in order, as under the commit log's lock.
                        let mut n = next.lock();
                        if *n == N {
                            return;
                        }
                        *n += 1;
                        v.begin(*n);
                        *n
                    };
                    v.finish(seq);
                    v.wait_visible(seq);
                    assert!(v.visible() >= seq);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(v.visible(), N);
        // `floor` may lag where a finish found the lock taken (invariant 2), never lead;
        // the next finish that gets it brings it up.
        assert!(v.floor() <= N);
        v.begin(N + 1);
        v.finish(N + 1);
        assert_eq!((v.visible(), v.floor()), (N + 1, N + 1));
    }
}

/// The finish protocol under every interleaving `loom` explores:
/// `RUSTFLAGS="--cfg segstore_loom" cargo test --release --lib visibility::loom`.
#[cfg(all(test, segstore_loom))]
mod loom_model {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Two writers finish neighbouring numbers at once and wait for their own: both
    /// return (no lost wake-up, no stall), and `visible` reaches the second.
    #[test]
    fn neighbours_finishing_at_once() {
        loom::model(|| {
            let v = Arc::new(Visibility::with_slots(0, 4));
            v.begin(1);
            v.begin(2);
            let w = {
                let v = Arc::clone(&v);
                thread::spawn(move || {
                    v.finish(2);
                    v.wait_visible(2);
                })
            };
            v.finish(1);
            v.wait_visible(1);
            w.join().unwrap();
            assert_eq!(v.visible(), 2);
        });
    }

    /// A slot reused while its last occupant is being passed (ring of 1): the later
    /// number waits, nothing is lost.
    #[test]
    fn a_slot_reused_under_a_race() {
        loom::model(|| {
            let v = Arc::new(Visibility::with_slots(0, 1));
            v.begin(1);
            v.begin(2);
            let w = {
                let v = Arc::clone(&v);
                thread::spawn(move || v.finish(2))
            };
            v.finish(1);
            w.join().unwrap();
            v.wait_visible(2);
            assert_eq!(v.visible(), 2);
        });
    }

    /// A read view registered while a write finishes: `floor` never passes the view.
    #[test]
    fn floor_never_passes_a_view() {
        loom::model(|| {
            let v = Arc::new(Visibility::with_slots(0, 4));
            v.begin(1);
            let w = {
                let v = Arc::clone(&v);
                thread::spawn(move || v.finish(1))
            };
            let view = v.register();
            assert!(v.floor() <= view);
            w.join().unwrap();
            assert!(v.floor() <= view);
            v.release(view);
            assert_eq!(v.visible(), 1);
        });
    }
}
