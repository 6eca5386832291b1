//! A table's memtables: the lock writers, flushes and freezes take, and a copy of the
//! list that point reads load without it.
//!
//! Every point read of a table whose memtables hold a cell used to take the memtable
//! list's read lock: an atomic read-modify-write on one line that every reading core
//! writes. Point reads now load the list from an `ArcSwap`, which writes nothing
//! shared on its fast path. The list is republished by the write guard's drop, while
//! the write lock is still held, so every change to the memtables reaches it in lock
//! order and no change bypasses it (writes go through [`MemSet::write`] only).
//!
//! Why a read that loads an older list is still right (lsm invariant 2, memtables read
//! before the view): a memtable leaves the list only after its flush published its
//! segment in the view, so a read that no longer finds it finds the segment; a read
//! that loaded the list before a freeze searches the memtable that was active then,
//! which holds every write that was visible when the read began (a write goes to the
//! new active memtable only after the freeze, so it overlaps the read, which may miss
//! it). Writers keep taking the read lock (invariants 1 and 6).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::Memtables;
use crate::table::memtable::Memtable;

/// The memtables of a table: active first, then the frozen ones, newest first.
pub(crate) type ReadList = Vec<Arc<Memtable>>;

/// See the module docs.
pub(crate) struct MemSet {
    lock: RwLock<Memtables>,
    readable: ArcSwap<ReadList>,
}

impl MemSet {
    pub(crate) fn new(m: Memtables) -> MemSet {
        let readable = ArcSwap::from_pointee(read_list(&m));
        MemSet {
            lock: RwLock::new(m),
            readable,
        }
    }

    /// The memtables under the read lock (writers, and reads that must not overlap a
    /// freeze or a flush's removal).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Memtables> {
        self.lock.read()
    }

    /// The memtables under the write lock; the read list is republished when the guard
    /// drops.
    pub(crate) fn write(&self) -> MemWrite<'_> {
        MemWrite {
            guard: self.lock.write(),
            readable: &self.readable,
        }
    }

    /// The read list, without a lock (point reads).
    #[inline]
    pub(crate) fn readable(&self) -> Guard<Arc<ReadList>> {
        self.readable.load()
    }
}

/// The read list of `m`: active first, then frozen newest first.
fn read_list(m: &Memtables) -> ReadList {
    std::iter::once(&m.active)
        .chain(m.frozen.iter().rev())
        .cloned()
        .collect()
}

/// The write guard of a [`MemSet`]: the memtables, writable; on drop, still holding the
/// lock, it republishes the read list.
pub(crate) struct MemWrite<'a> {
    guard: RwLockWriteGuard<'a, Memtables>,
    readable: &'a ArcSwap<ReadList>,
}

impl Deref for MemWrite<'_> {
    type Target = Memtables;
    fn deref(&self) -> &Memtables {
        &self.guard
    }
}

impl DerefMut for MemWrite<'_> {
    fn deref_mut(&mut self) -> &mut Memtables {
        &mut self.guard
    }
}

impl Drop for MemWrite<'_> {
    fn drop(&mut self) {
        let now = read_list(&self.guard);
        let same = {
            let old = self.readable.load();
            old.len() == now.len() && old.iter().zip(&now).all(|(a, b)| Arc::ptr_eq(a, b))
        };
        if !same {
            self.readable.store(Arc::new(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(l: &ReadList) -> Vec<*const Memtable> {
        l.iter().map(Arc::as_ptr).collect()
    }

    /// Every change made through the write guard reaches the read list, in the order
    /// point reads search: active first, then frozen newest first.
    #[test]
    fn the_read_list_follows_every_write() {
        let (a, b, c) = (
            Arc::new(Memtable::new()),
            Arc::new(Memtable::new()),
            Arc::new(Memtable::new()),
        );
        let set = MemSet::new(Memtables {
            active: Arc::clone(&a),
            frozen: Vec::new(),
        });
        assert_eq!(ids(&set.readable()), vec![Arc::as_ptr(&a)]);
        // Two freezes: `a`, then `b`, frozen; `c` active.
        {
            let mut w = set.write();
            let old = std::mem::replace(&mut w.active, Arc::clone(&b));
            w.frozen.push(old);
        }
        let held = set.readable();
        {
            let mut w = set.write();
            let old = std::mem::replace(&mut w.active, Arc::clone(&c));
            w.frozen.push(old);
        }
        let want = [&c, &b, &a].map(Arc::as_ptr).to_vec();
        assert_eq!(ids(&set.readable()), want);
        // A list loaded earlier stays what it was (its memtables alive).
        assert_eq!(ids(&held), vec![Arc::as_ptr(&b), Arc::as_ptr(&a)]);
        // A flush removes the oldest frozen memtable.
        set.write().frozen.remove(0);
        assert_eq!(ids(&set.readable()), vec![Arc::as_ptr(&c), Arc::as_ptr(&b)]);
        // A write guard that changes nothing leaves the published list in place.
        let before = set.readable();
        drop(set.write());
        assert!(Arc::ptr_eq(&before, &set.readable()));
    }
}
