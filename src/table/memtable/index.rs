//! The point index: a memtable's nodes by key hash, in a table sized once, that every
//! new key enters as its insert links it (memtable invariant 5).
//!
//! A point read of a key the ordered map alone holds searched O(log n) nodes of a skiplist
//! (the memtable's ordered map then), a cache miss each: in YCSB C, whose keys A and B wrote once, that first read was C's p99 (4.8 µs
//! against 0.35 for a key found by hash). Entering every key at its insert into
//! `papaya::HashMap` cut C's p99 to LMDB's, but cost single puts 11.5% to 15% at one
//! thread: its insert hashes the key again (SipHash), allocates an entry, and resizes.
//! This table reuses the hash the key filter computed, allocates nothing after it is
//! made, and never resizes, so an insert is one compare-and-swap on a slot whose line
//! the insert started loading before it searched the ordered map (README "Measured").
//!
//! Open addressing with linear probing over [`WINDOW`] slots from the hash's home slot.
//! A slot is claimed once, by a compare-and-swap of its tag (32 bits of the hash, never
//! 0) from 0, and then given its node once; neither ever changes again. So:
//! 1. A key is in at most one slot. An insert walks the window from home and stops at
//!    the first slot that is free (it claims it) or holds the key; two inserts of one
//!    key walk the same slots, and the second finds the first's tag there. It gives up
//!    where the tag matches but the node is not yet set (an insert in flight, of this
//!    key or of another with the same tag): the key is then left to the ordered map.
//! 2. A lookup that meets a free slot may stop: a key entered earlier took that slot
//!    or one before it, as slots are never freed.
//! 3. A key is found only with the node its insert gave, and the memtable gives only the
//!    ordered map's node of the key: the index holds a subset of the map (a key whose
//!    window was full, or whose insert gave up, is found by a search of the map).
//!
//! `loom_model` checks 1 to 3 under every interleaving of two inserts and a lookup (CI
//! runs it).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use self::sync::{AtomicU32, Found, OnceLock};

/// Slots an insert or a lookup probes from the home slot, at most. In a simulation of
/// 93,000 random keys entered into 131,072 slots, 0.8% of inserts found their window
/// full (2.9% with 8 slots, 4.6% with 6).
pub(super) const WINDOW: usize = 16;

/// Fewest and most slots of a table. A table's first memtable gets the fewest (24 KiB),
/// so a store of many idle tables holds little; each later one is sized from the keys
/// the one before it held ([`slots_after`]).
pub(super) const MIN_SLOTS: usize = 1 << 10;
const MAX_SLOTS: usize = 1 << 22;

/// Flush bytes per slot, at most: a memtable flushed at 16 MiB gets up to 131,072
/// slots of 24 bytes (3 MiB), room for its keys at a load of 0.71 with 16-byte keys
/// and 100-byte values (about 93,000 keys), and for half its keys where cells are as
/// small as they can be ([`super::CELL_OVERHEAD`]).
const FLUSH_BYTES_PER_SLOT: usize = 128;

/// Slots for a memtable after one of `keys` keys in `slots` slots, flushed at
/// `flush_bytes`: room for `keys` at a load of at most 0.7 where the bound allows,
/// never below half the last size (a memtable frozen early by an explicit flush does
/// not shrink the next one to nothing), never above one slot per
/// [`FLUSH_BYTES_PER_SLOT`] (a power of two at or below it).
pub(super) fn slots_after(keys: usize, slots: usize, flush_bytes: usize) -> usize {
    let want = keys.saturating_mul(10) / 7;
    let bound = flush_bytes / FLUSH_BYTES_PER_SLOT;
    let most = match bound {
        0 => MIN_SLOTS,
        b => (1 << (usize::BITS - 1 - b.leading_zeros())).clamp(MIN_SLOTS, MAX_SLOTS),
    };
    want.max(slots / 2).next_power_of_two().clamp(MIN_SLOTS, most)
}

/// What the index holds: something with a key.
pub(super) trait Keyed {
    fn key(&self) -> &[u8];
}

#[cfg(not(all(test, segstore_loom)))]
mod sync {
    pub(super) use std::sync::atomic::AtomicU32;
    pub(super) use std::sync::OnceLock;

    /// A node found: borrowed from its slot.
    pub(super) type Found<'a, T> = &'a T;
}

/// The same names over `loom`'s types for `loom_model`: the tag a `loom` atomic, and the
/// set-once cell a `loom` mutex around an option (as linearizable as `OnceLock`'s set
/// and get), whose get hands out a clone.
#[cfg(all(test, segstore_loom))]
mod sync {
    pub(super) use loom::sync::atomic::AtomicU32;

    pub(super) type Found<'a, T> = T;

    pub(super) struct OnceLock<T>(loom::sync::Mutex<Option<T>>);

    impl<T: Clone> OnceLock<T> {
        pub(super) fn new() -> Self {
            OnceLock(loom::sync::Mutex::new(None))
        }
        pub(super) fn get(&self) -> Option<T> {
            self.0.lock().unwrap().clone()
        }
        pub(super) fn set(&self, t: T) -> Result<(), T> {
            let mut g = self.0.lock().unwrap();
            match *g {
                Some(_) => Err(t),
                None => {
                    *g = Some(t);
                    Ok(())
                }
            }
        }
    }
}

struct Slot<T> {
    /// 0: free; else [`tag`] of the hash of the key whose node this slot holds or is
    /// about to.
    tag: AtomicU32,
    node: OnceLock<Arc<T>>,
}

/// See the module docs.
pub(super) struct PointIndex<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
}

/// The slot's tag for hash `h`: its high half (the low half picks the home slot), never 0.
#[inline]
fn tag(h: u64) -> u32 {
    (h >> 32) as u32 | 1
}

impl<T: Keyed> PointIndex<T> {
    /// A table of `slots` slots (rounded up to a power of two, within 1,024 to 4M).
    pub(super) fn with_slots(slots: usize) -> PointIndex<T> {
        let n = slots.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two();
        let slots = (0..n)
            .map(|_| Slot {
                tag: AtomicU32::new(0),
                node: OnceLock::new(),
            })
            .collect();
        PointIndex { slots, mask: n - 1 }
    }

    /// Slots of the table.
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of the table.
    pub(super) fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<T>>()
    }

    /// Start loading the home slot of hash `h`.
    #[inline]
    pub(super) fn prefetch(&self, h: u64) {
        crate::io::prefetch::prefetch_read(&self.slots, h as usize & self.mask);
    }

    /// The node of `key`, whose [`crate::format::key_hash`] is `h`, if it is indexed.
    #[inline]
    pub(super) fn get(&self, key: &[u8], h: u64) -> Option<Found<'_, Arc<T>>> {
        let tag = tag(h);
        let mut i = h as usize & self.mask;
        for _ in 0..WINDOW {
            let s = &self.slots[i];
            match s.tag.load(Ordering::Acquire) {
                0 => return None, // 2.
                t if t == tag => match s.node.get() {
                    Some(n) if n.key() == key => return Some(n),
                    _ => {}
                },
                _ => {}
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// Enter `node` (the ordered map's node of its key, whose hash is `h`). True if this
    /// call entered it; false if the key was there, its window is full, or another
    /// insert of its tag is in flight in its window (1.).
    pub(super) fn insert(&self, h: u64, node: &Arc<T>) -> bool {
        let tag = tag(h);
        let mut i = h as usize & self.mask;
        for _ in 0..WINDOW {
            let s = &self.slots[i];
            // A taken slot is read, not written: a failing compare-and-swap would still
            // take its line exclusive, and reads that offer a left-out key again would
            // pass the lines of a full window back and forth between cores.
            let mut t = s.tag.load(Ordering::Acquire);
            if t == 0 {
                match s
                    .tag
                    .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        // Claimed: this slot's node is ours alone to set.
                        let set = s.node.set(Arc::clone(node));
                        debug_assert!(set.is_ok(), "a claimed slot is set once");
                        return true;
                    }
                    Err(taken) => t = taken,
                }
            }
            if t == tag {
                match s.node.get() {
                    Some(n) if n.key() == node.key() => return false,
                    Some(_) => {}
                    None => return false,
                }
            }
            i = (i + 1) & self.mask;
        }
        false
    }
}

impl<T> std::fmt::Debug for PointIndex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointIndex")
            .field("slots", &self.slots.len())
            .finish()
    }
}

#[cfg(all(test, not(segstore_loom)))]
mod tests {
    use super::*;

    struct K(Vec<u8>);
    impl Keyed for K {
        fn key(&self) -> &[u8] {
            &self.0
        }
    }

    fn node(k: &[u8]) -> Arc<K> {
        Arc::new(K(k.to_vec()))
    }

    #[test]
    fn keys_are_found_with_their_node_and_entered_once() {
        let ix = PointIndex::with_slots(0);
        assert_eq!(ix.slots.len(), MIN_SLOTS);
        let (a, b) = (node(b"a"), node(b"b"));
        let (ha, hb) = (crate::format::key_hash(b"a"), crate::format::key_hash(b"b"));
        assert!(ix.get(b"a", ha).is_none());
        assert!(ix.insert(ha, &a));
        assert!(!ix.insert(ha, &a), "entered once");
        assert!(Arc::ptr_eq(ix.get(b"a", ha).unwrap(), &a));
        assert!(ix.get(b"b", hb).is_none());
        assert!(ix.insert(hb, &b));
        assert!(Arc::ptr_eq(ix.get(b"b", hb).unwrap(), &b));
    }

    /// Keys sharing a hash (so a home slot and a tag) each find their own node; past a
    /// full window a key is not entered, and a lookup of it says so (the ordered map
    /// has it).
    #[test]
    fn keys_of_one_hash_fill_the_window_then_are_left_out() {
        let ix = PointIndex::with_slots(MIN_SLOTS);
        let h = 0xdead_beef_0000_0005;
        let nodes: Vec<_> = (0..WINDOW + 2).map(|i| node(&[i as u8])).collect();
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(ix.insert(h, n), i < WINDOW, "key {i}");
        }
        for (i, n) in nodes.iter().enumerate() {
            let found = ix.get(&[i as u8], h);
            assert_eq!(found.is_some(), i < WINDOW, "key {i}");
            if let Some(f) = found {
                assert!(Arc::ptr_eq(f, n));
            }
        }
        // The window wraps at the table's end.
        let last = ix.mask as u64;
        let (x, y) = (node(b"x"), node(b"y"));
        assert!(ix.insert(last, &x) && ix.insert(last, &y));
        assert!(Arc::ptr_eq(ix.get(b"y", last).unwrap(), &y));
    }

    #[test]
    fn tables_are_sized_from_the_last_memtable_within_the_flush_threshold() {
        let ix = PointIndex::<K>::with_slots(131_072);
        assert_eq!(ix.bytes(), 131_072 * std::mem::size_of::<Slot<K>>());
        let m16 = 16 << 20;
        // Room for the keys at a load of 0.7 at most.
        assert_eq!(slots_after(93_000, MIN_SLOTS, m16), 131_072);
        assert_eq!(slots_after(40_000, MIN_SLOTS, m16), 65_536);
        assert_eq!(slots_after(50_000, MIN_SLOTS, m16), 131_072);
        // Halved at most per memtable; never below the fewest.
        assert_eq!(slots_after(10, 131_072, m16), 65_536);
        assert_eq!(slots_after(0, MIN_SLOTS, m16), MIN_SLOTS);
        // Never above the flush threshold's bound, however many keys.
        assert_eq!(slots_after(10_000_000, MIN_SLOTS, m16), 131_072);
        assert_eq!(slots_after(10_000_000, MIN_SLOTS, 1 << 40), MAX_SLOTS);
        assert_eq!(slots_after(10_000_000, MIN_SLOTS, 0), MIN_SLOTS);
        // A bound between powers of two rounds down: 24 MiB allows 196,608.
        assert_eq!(slots_after(10_000_000, MIN_SLOTS, 24 << 20), 131_072);
    }

    /// Threads entering overlapping keys: each key in at most one slot, found with its
    /// node unless some insert of it gave up (then the ordered map answers).
    #[test]
    fn racing_inserts_enter_each_key_at_most_once() {
        let ix = PointIndex::with_slots(MIN_SLOTS);
        let nodes: Vec<_> = (0..600u32).map(|i| node(&i.to_be_bytes())).collect();
        // Few distinct hashes, so windows collide and fill.
        let h = |i: usize| crate::format::key_hash(&[(i % 97) as u8]);
        let entered = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..3 {
                let (ix, nodes, entered) = (&ix, &nodes, &entered);
                s.spawn(move || {
                    for j in 0..nodes.len() {
                        let i = (j + t * 200) % nodes.len();
                        if ix.insert(h(i), &nodes[i]) {
                            entered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let taken = ix.slots.iter().filter(|s| s.node.get().is_some()).count();
        assert_eq!(taken, entered.into_inner(), "one slot per entering insert");
        let mut found = 0;
        for (i, n) in nodes.iter().enumerate() {
            let in_slots = ix
                .slots
                .iter()
                .filter(|s| s.node.get().is_some_and(|m| Arc::ptr_eq(m, n)))
                .count();
            assert!(in_slots <= 1, "key {i} in {in_slots} slots");
            if let Some(f) = ix.get(n.key(), h(i)) {
                assert!(Arc::ptr_eq(f, n));
                found += 1;
            }
            assert_eq!(in_slots == 1, ix.get(n.key(), h(i)).is_some(), "key {i}");
        }
        assert_eq!(found, taken);
    }
}

/// `RUSTFLAGS="--cfg segstore_loom" cargo test --release --lib
/// table::memtable::index::loom_model`.
#[cfg(all(test, segstore_loom))]
mod loom_model {
    use super::*;
    use loom::thread;

    #[derive(Debug)]
    struct K(&'static [u8]);
    impl Keyed for K {
        fn key(&self) -> &[u8] {
            self.0
        }
    }

    /// Two inserts of one key and a lookup: the lookup sees nothing or the node; one
    /// insert enters it, the other finds it or an insert in flight; afterwards the key is
    /// in one slot (1.), and found with its node (3.).
    #[test]
    fn one_key_entered_once() {
        loom::model(|| {
            let ix = Arc::new(PointIndex::with_slots(MIN_SLOTS));
            let a = Arc::new(K(b"a"));
            let h = 7;
            let ins: Vec<_> = (0..2)
                .map(|_| {
                    let (ix, a) = (Arc::clone(&ix), Arc::clone(&a));
                    thread::spawn(move || ix.insert(h, &a))
                })
                .collect();
            if let Some(n) = ix.get(b"a", h) {
                assert!(Arc::ptr_eq(&n, &a));
            }
            let entered = ins.into_iter().filter_map(|t| t.join().unwrap().then_some(())).count();
            assert_eq!(entered, 1);
            let n = ix.get(b"a", h).expect("entered");
            assert!(Arc::ptr_eq(&n, &a));
            // Only the window from home (slot 7) can hold it.
            let window = &ix.slots[7..7 + WINDOW];
            let held = window.iter().filter(|s| s.node.get().is_some()).count();
            assert_eq!(held, 1);
        });
    }

    /// Two keys of one hash racing: each ends in its own slot or, if its insert met the
    /// other's in flight, in none (left to the ordered map); a lookup never finds a key
    /// with the other's node, and finds a key iff an insert of it entered it.
    #[test]
    fn keys_of_one_hash_never_mix() {
        loom::model(|| {
            let ix = Arc::new(PointIndex::with_slots(MIN_SLOTS));
            let (a, b) = (Arc::new(K(b"a")), Arc::new(K(b"b")));
            let h = 7;
            let tb = {
                let (ix, b) = (Arc::clone(&ix), Arc::clone(&b));
                thread::spawn(move || ix.insert(h, &b))
            };
            let ea = ix.insert(h, &a);
            if let Some(n) = ix.get(b"b", h) {
                assert!(Arc::ptr_eq(&n, &b));
            }
            let eb = tb.join().unwrap();
            assert!(ea || eb, "the first to claim the home slot enters its key");
            for (k, n, e) in [(&b"a"[..], &a, ea), (&b"b"[..], &b, eb)] {
                match ix.get(k, h) {
                    Some(f) => assert!(e && Arc::ptr_eq(&f, n)),
                    None => assert!(!e),
                }
            }
        });
    }
}
