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
//! it). Writers keep taking the read lock (invariants 1 and 6). `loom_model` checks
//! this over the real `MemSet` under every interleaving of a read, a write, a freeze
//! and a flush (CI runs it; swapping the flush's two steps, or the read's, fails it).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use self::sync::{ArcSwap, Guard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::Memtables;
use crate::table::memtable::Memtable;

#[cfg(not(all(test, segstore_loom)))]
mod sync {
    pub(super) use arc_swap::{ArcSwap, Guard};
    pub(super) use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
}

/// The same names over `loom`'s types, for the model in `loom_model`: the lock is
/// `loom`'s, and the `ArcSwap` a `loom` mutex around an `Arc` (a linearizable stand-in,
/// as `arc_swap`'s loads and stores are).
#[cfg(all(test, segstore_loom))]
mod sync {
    pub(super) use loom::sync::{RwLockReadGuard, RwLockWriteGuard};
    use std::sync::Arc;

    pub(super) type Guard<T> = T;

    pub(super) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(super) fn new(t: T) -> Self {
            RwLock(loom::sync::RwLock::new(t))
        }
        pub(super) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap()
        }
        pub(super) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap()
        }
    }

    pub(super) struct ArcSwap<T>(loom::sync::Mutex<Arc<T>>);

    impl<T> ArcSwap<T> {
        pub(super) fn from_pointee(t: T) -> Self {
            ArcSwap(loom::sync::Mutex::new(Arc::new(t)))
        }
        pub(super) fn load(&self) -> Arc<T> {
            Arc::clone(&self.0.lock().unwrap())
        }
        pub(super) fn store(&self, t: Arc<T>) {
            *self.0.lock().unwrap() = t;
        }
    }
}

/// The memtables under the read lock ([`MemSet::read`]).
pub(crate) type MemRead<'a> = RwLockReadGuard<'a, Memtables>;

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
    pub(crate) fn read(&self) -> MemRead<'_> {
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

/// The read list's protocol under every interleaving `loom` explores, over the real
/// [`MemSet`] and memtables (the view is a slot holding the flushed memtable, as the
/// segment made from it would hold its cells):
/// `RUSTFLAGS="--cfg segstore_loom" cargo test --release --lib table::lsm::memset::loom_model`.
#[cfg(all(test, segstore_loom))]
mod loom_model {
    use super::*;
    use crate::format::record::RecordRef;
    use loom::sync::Mutex;
    use loom::thread;

    struct Model {
        set: MemSet,
        /// The view's segment: the memtable it was flushed from, once published.
        segment: Mutex<Option<Arc<Memtable>>>,
    }

    fn cell(key: &[u8]) -> RecordRef<'_> {
        RecordRef {
            key,
            value: b"v",
            ts: 1,
            tombstone: false,
            expires: 0,
        }
    }

    impl Model {
        /// A table whose active memtable holds `k`.
        fn new() -> Model {
            let a = Memtable::new();
            a.insert(cell(b"k"));
            Model {
                set: MemSet::new(Memtables {
                    active: Arc::new(a),
                    frozen: Vec::new(),
                }),
                segment: Mutex::new(None),
            }
        }

        /// A plain write: applied to the active memtable under the read lock.
        fn write(&self, key: &[u8]) {
            self.set.read().active.insert(cell(key));
        }

        /// A freeze, then a flush of the frozen memtable in the order
        /// `flush_frozen_locked` keeps: its segment published in the view, then the
        /// memtable removed under the write lock (which republishes the list).
        fn freeze_and_flush(&self) {
            let frozen = {
                let mut w = self.set.write();
                let old = std::mem::replace(&mut w.active, Arc::new(Memtable::new()));
                w.frozen.push(Arc::clone(&old));
                old
            };
            *self.segment.lock().unwrap() = Some(frozen);
            self.set.write().frozen.remove(0);
        }

        /// A point read as `Table::get` makes it: the list without the lock
        /// (`memtable_best`), then the view. True when some source holds `key`.
        fn read(&self, key: &[u8]) -> bool {
            let in_memtables = self.set.readable().iter().any(|m| m.get(key).is_some());
            let segment = self.segment.lock().unwrap().clone();
            in_memtables || segment.is_some_and(|s| s.get(key).is_some())
        }
    }

    /// Under every interleaving: `during` on this thread while another freezes the
    /// memtable and flushes it, then `after` once the flush is done.
    fn racing_a_flush(during: fn(&Model), after: fn(&Model)) {
        loom::model(move || {
            let m = loom::sync::Arc::new(Model::new());
            let f = {
                let m = loom::sync::Arc::clone(&m);
                thread::spawn(move || m.freeze_and_flush())
            };
            during(&m);
            f.join().unwrap();
            after(&m);
        });
    }

    /// A read racing a freeze and a flush always finds a key written before it began:
    /// in a memtable of the list it loaded, or in the segment the flush published.
    #[test]
    fn a_read_racing_a_flush_finds_an_earlier_write() {
        racing_a_flush(
            |m| assert!(m.read(b"k"), "a read missed a write acknowledged before it"),
            |m| assert!(m.read(b"k")),
        );
    }

    /// A write racing the freeze lands in one memtable or the other; once it returned,
    /// every read finds it, while the flush goes on and after.
    #[test]
    fn a_write_racing_a_freeze_is_found_once_acknowledged() {
        racing_a_flush(
            |m| {
                m.write(b"w");
                assert!(m.read(b"w"), "a read missed the write just acknowledged");
            },
            |m| assert!(m.read(b"w") && m.read(b"k")),
        );
    }
}
