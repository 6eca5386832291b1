//! The memtable's key: held inline in the ordered map's entry up to [`INLINE_KEY`] bytes, and
//! ordered by [`key_order`] (the first 8 bytes compared inline as a word) rather than
//! by slices' `cmp`, which calls `memcmp` through the PLT at every node a search
//! passes.
//!
//! A search compares with the order of the type it is given: a `&[u8]` probe compares
//! as slices do, a `&Key` probe with [`key_order`]. [`probe`] makes a key that fits
//! inline into a `Key` (a copy of at most 24 bytes, no allocation), so point reads,
//! first reads and scans' seeks search with it; a longer key searches as a slice
//! (making it a `Key` would allocate).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Bound, Deref};

use smallvec::SmallVec;

use crate::format::key_order;

/// Keys up to this many bytes live inline (in the map's leaf and in the node); longer
/// ones on the heap.
pub(crate) const INLINE_KEY: usize = 24;

/// A memtable key: inline up to [`INLINE_KEY`] bytes. With `Vec<u8>` keys every node a
/// search compares against costs a second, dependent cache miss (the key's heap
/// allocation): inline keys took a put of a 16-byte key into a large memtable from
/// 56.6 to 40.2 L1 data read misses (issue 19 item 2).
///
/// Equality, hashing and order are those of the key's bytes as a slice (so the point
/// index finds a `Key` by `&[u8]`, as `Borrow` requires); the order is computed with
/// [`key_order`], which agrees with slices' (`format::tests`).
#[derive(PartialEq, Eq)]
pub(crate) struct Key(SmallVec<[u8; INLINE_KEY]>);

impl Clone for Key {
    /// A copy of the bytes in one move ([`Key::from_slice`]). `SmallVec`'s own `clone`
    /// collects the slice's elements one at a time (its `From<&[T]>` without the
    /// `specialization` feature): some 150 instructions for a 16-byte key, paid by
    /// every cell a scan reads ahead, every key a flush writes and every new key an
    /// insert links into the ordered map.
    #[inline]
    fn clone(&self) -> Key {
        Key::from_slice(&self.0)
    }
}

impl Key {
    /// A key holding a copy of `k` (inline up to [`INLINE_KEY`] bytes).
    #[inline]
    pub(crate) fn from_slice(k: &[u8]) -> Key {
        Key(SmallVec::from_slice(k))
    }
}

/// `k` as a probe a search of the map compares with [`key_order`], where it fits inline:
/// `None` for a longer key (search with the slice).
#[inline]
pub(crate) fn probe(k: &[u8]) -> Option<Key> {
    (k.len() <= INLINE_KEY).then(|| Key::from_slice(k))
}

/// A bound as [`probe`]s: `None` where its key is too long to be one.
#[inline]
pub(crate) fn probe_bound(b: Bound<&[u8]>) -> Option<Bound<Key>> {
    Some(match b {
        Bound::Included(k) => Bound::Included(probe(k)?),
        Bound::Excluded(k) => Bound::Excluded(probe(k)?),
        Bound::Unbounded => Bound::Unbounded,
    })
}

impl Deref for Key {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for Key {
    #[inline]
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl Hash for Key {
    /// As the slice hashes (`Borrow<[u8]>`).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0[..].hash(state);
    }
}

impl Ord for Key {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        key_order(&self.0, &other.0)
    }
}

impl PartialOrd for Key {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0[..], f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash + ?Sized>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    /// Two keys sharing a prefix of 0 to 20 bytes, each going on with 0 to 20 bytes of
    /// a three-letter alphabet: orders decided in the first word, past it, or by length.
    fn pair() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        let rest = || proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xff)], 0..20);
        (proptest::collection::vec(any::<u8>(), 0..20), rest(), rest()).prop_map(|(p, x, y)| {
            ([&p[..], &x[..]].concat(), [&p[..], &y[..]].concat())
        })
    }

    proptest! {
        /// `Borrow<[u8]>`'s contract: a `Key` orders, equals and hashes as its slice, on
        /// both sides of the inline limit.
        #[test]
        fn a_key_orders_equals_and_hashes_as_its_bytes((a, b) in pair()) {
            let (ka, kb) = (Key::from_slice(&a), Key::from_slice(&b));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(hash_of(&ka), hash_of(&a[..]));
            prop_assert_eq!(&*ka, &a[..]);
        }
    }

    #[test]
    fn probes_are_made_only_of_keys_that_fit_inline() {
        assert_eq!(probe(&[7; INLINE_KEY]).as_deref(), Some(&[7; INLINE_KEY][..]));
        assert!(probe(&[7; INLINE_KEY + 1]).is_none());
        assert!(probe_bound(Bound::Excluded(&[1; INLINE_KEY + 1])).is_none());
        assert!(matches!(probe_bound(Bound::Unbounded), Some(Bound::Unbounded)));
        assert!(matches!(
            probe_bound(Bound::Included(b"k")),
            Some(Bound::Included(k)) if &*k == b"k"
        ));
    }
}
