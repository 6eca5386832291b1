//! [`Shelf`]: a thread's own stock of values kept for reuse, so a hot path that needs
//! a buffer or a box each time (a scan's cell buffers, its block walks, its memtable
//! read-ahead queue, its side merge's sources) takes one its thread used before
//! instead of allocating and freeing one per call (issue 19 item 3).
//!
//! The shelf is the thread's own: no lock, no atomic. A value taken on one thread and
//! given back on another joins that thread's shelf. A shelf keeps at most a fixed
//! number of values, and its users give back only values whose capacity they bound, so
//! a thread holds a bounded amount. During the thread's exit a value given back is
//! freed. A crate pool (`object-pool`, `lifeguard`) shares one stock across threads
//! behind a lock or an atomic stack, which each take and give would pay for here.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread-local shelf of values of type `T`, at most `kept` of them: declare the
/// thread-local with `const { RefCell::new(Vec::new()) }` and wrap it.
pub(crate) struct Shelf<T: 'static> {
    local: &'static LocalKey<RefCell<Vec<T>>>,
    kept: usize,
}

impl<T: 'static> Shelf<T> {
    /// The shelf kept in `local`, holding at most `kept` values.
    pub(crate) const fn new(local: &'static LocalKey<RefCell<Vec<T>>>, kept: usize) -> Self {
        Shelf { local, kept }
    }

    /// A value from this thread's shelf, if it holds one.
    #[inline]
    pub(crate) fn take(&self) -> Option<T> {
        self.local.try_with(|s| s.borrow_mut().pop()).ok().flatten()
    }

    /// Put `t` on this thread's shelf, unless it is full (then `t` is dropped, after
    /// the shelf is let go, so a drop that uses the shelf finds it free).
    #[inline]
    pub(crate) fn give(&self, t: T) {
        let mut t = Some(t);
        let _ = self.local.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < self.kept {
                s.extend(t.take());
            }
        });
        drop(t);
    }

    /// How many values this thread's shelf holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.local.with(|s| s.borrow().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static LOCAL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }
    static SHELF: Shelf<Vec<u8>> = Shelf::new(&LOCAL, 2);

    #[test]
    fn a_value_given_back_is_taken_again_and_the_shelf_is_bounded() {
        assert_eq!(SHELF.take(), None, "a new thread's shelf is empty");
        SHELF.give(Vec::with_capacity(10));
        let v = SHELF.take().expect("the value given back");
        assert!(v.capacity() >= 10, "its capacity kept");
        for _ in 0..5 {
            SHELF.give(Vec::new());
        }
        assert_eq!(SHELF.len(), 2, "at most `kept` values");
        std::thread::spawn(|| assert_eq!(SHELF.len(), 0, "each thread has its own"))
            .join()
            .expect("thread");
    }
}
