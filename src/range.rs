//! Key ranges (a pure module, below the segment and table layers).
//!
//! Key ranges as arguments: [`KeyRange`], implemented for every std range type over
//! any key that is `AsRef<[u8]>` and for `..`, so that `table.scan(..)`,
//! `table.scan(b"a"..b"b")`, `table.scan("a"..="b")`, `table.scan(vec_a..vec_b)` and
//! `table.scan(&k[..]..)` all infer their types. (A signature over
//! `impl RangeBounds<K>` cannot: `..` is `RangeBounds<K>` for every `K`, so nothing
//! fixes `K`, and the compiler stops with E0283.)
//!
//! Also the byte-string helpers of iteration: [`prefix_range`] (the range of keys that
//! start with a prefix) and bound arithmetic shared by the memtable and segment cursors.

use crate::format::key_order;
use std::ops::{Bound, Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// An owned range of byte keys: (start, end) bounds.
pub type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A range of byte keys, as taken by [`crate::table::Table::scan`] and
/// [`crate::table::Table::scan_cells`]. Implemented for `..`, `a..b`, `a..=b`, `a..`,
/// `..b`, `..=b` and `(Bound<K>, Bound<K>)` over any `K: AsRef<[u8]>` (`&[u8]`,
/// `&[u8; N]`, `Vec<u8>`, `&Vec<u8>`, `&str`, `String`, ...).
///
/// ```
/// use std::ops::Bound;
/// use segstore::KeyRange;
///
/// assert_eq!((..).into_key_bounds(), (Bound::Unbounded, Bound::Unbounded));
/// assert_eq!(
///     (b"a"..b"b").into_key_bounds(),
///     (Bound::Included(b"a".to_vec()), Bound::Excluded(b"b".to_vec()))
/// );
/// assert_eq!(
///     ("k"..).into_key_bounds(),
///     (Bound::Included(b"k".to_vec()), Bound::Unbounded)
/// );
/// ```
pub trait KeyRange {
    /// The range's bounds, owned.
    fn into_key_bounds(self) -> KeyBounds;
}

fn own<K: AsRef<[u8]>>(b: Bound<K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl KeyRange for RangeFull {
    fn into_key_bounds(self) -> KeyBounds {
        (Bound::Unbounded, Bound::Unbounded)
    }
}

impl<K: AsRef<[u8]>> KeyRange for Range<K> {
    fn into_key_bounds(self) -> KeyBounds {
        (
            Bound::Included(self.start.as_ref().to_vec()),
            Bound::Excluded(self.end.as_ref().to_vec()),
        )
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeInclusive<K> {
    fn into_key_bounds(self) -> KeyBounds {
        let (start, end) = self.into_inner();
        (
            Bound::Included(start.as_ref().to_vec()),
            Bound::Included(end.as_ref().to_vec()),
        )
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeFrom<K> {
    fn into_key_bounds(self) -> KeyBounds {
        (
            Bound::Included(self.start.as_ref().to_vec()),
            Bound::Unbounded,
        )
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeTo<K> {
    fn into_key_bounds(self) -> KeyBounds {
        (
            Bound::Unbounded,
            Bound::Excluded(self.end.as_ref().to_vec()),
        )
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeToInclusive<K> {
    fn into_key_bounds(self) -> KeyBounds {
        (
            Bound::Unbounded,
            Bound::Included(self.end.as_ref().to_vec()),
        )
    }
}

impl<K: AsRef<[u8]>> KeyRange for (Bound<K>, Bound<K>) {
    fn into_key_bounds(self) -> KeyBounds {
        (own(self.0), own(self.1))
    }
}

/// The smallest key greater than every key that starts with `prefix`: `prefix` with
/// its trailing `0xFF` bytes removed and its last byte incremented; `None` when there is
/// none (an empty prefix, or one of `0xFF` bytes only), i.e. no upper bound.
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut s = prefix[..=keep].to_vec();
    s[keep] += 1;
    Some(s)
}

/// The range of the keys that start with `prefix`: `[prefix, successor(prefix))`, or
/// unbounded above when the prefix has no successor; every key for an empty prefix.
pub fn prefix_range(prefix: &[u8]) -> KeyBounds {
    let end = prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded);
    let start = if prefix.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Included(prefix.to_vec())
    };
    (start, end)
}

/// Borrow an owned bound.
pub(crate) fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Set `b` to `Excluded(key)`, reusing its buffer.
pub(crate) fn exclude(b: &mut Bound<Vec<u8>>, key: &[u8]) {
    let mut v = match std::mem::replace(b, Bound::Unbounded) {
        Bound::Included(v) | Bound::Excluded(v) => v,
        Bound::Unbounded => Vec::new(),
    };
    v.clear();
    v.extend_from_slice(key);
    *b = Bound::Excluded(v);
}

/// Whether `key` is at or above the lower bound `lo`.
#[inline]
pub(crate) fn above(key: &[u8], lo: &Bound<Vec<u8>>) -> bool {
    match lo {
        Bound::Included(l) => key_order(key, l).is_ge(),
        Bound::Excluded(l) => key_order(key, l).is_gt(),
        Bound::Unbounded => true,
    }
}

/// Whether `key` is at or below the upper bound `hi`.
#[inline(always)]
pub(crate) fn below(key: &[u8], hi: &Bound<Vec<u8>>) -> bool {
    hi.admits(key)
}

/// An upper bound on keys, owned (an iterator's own) or borrowed (a scan's overlay caps
/// its base segment's walk at the side's next key, which it borrows from the side
/// rather than copying it for each side cell).
pub(crate) trait UpperBound {
    /// Whether `key` is at or below the bound.
    fn admits(&self, key: &[u8]) -> bool;
}

impl<K: AsRef<[u8]>> UpperBound for Bound<K> {
    #[inline(always)]
    fn admits(&self, key: &[u8]) -> bool {
        match self {
            Bound::Included(h) => key_order(key, h.as_ref()).is_le(),
            Bound::Excluded(h) => key_order(key, h.as_ref()).is_lt(),
            Bound::Unbounded => true,
        }
    }
}

/// The tighter of two lower bounds: where a cursor over a range starting at `start`
/// lands when it seeks forward to `lo`.
pub(crate) fn max_lower(start: &Bound<Vec<u8>>, lo: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match (start, lo) {
        (_, Bound::Unbounded) => start.clone(),
        (Bound::Unbounded, lo) => own(lo),
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            match a.as_slice().cmp(b) {
                std::cmp::Ordering::Greater => start.clone(),
                std::cmp::Ordering::Less => own(lo),
                std::cmp::Ordering::Equal => {
                    if matches!(lo, Bound::Excluded(_)) {
                        own(lo)
                    } else {
                        start.clone()
                    }
                }
            }
        }
    }
}

/// The tighter of two upper bounds: where a cursor over a range ending at `end` lands
/// when it seeks backward to `hi`.
pub(crate) fn min_upper(end: &Bound<Vec<u8>>, hi: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match (end, hi) {
        (_, Bound::Unbounded) => end.clone(),
        (Bound::Unbounded, hi) => own(hi),
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            match a.as_slice().cmp(b) {
                std::cmp::Ordering::Less => end.clone(),
                std::cmp::Ordering::Greater => own(hi),
                std::cmp::Ordering::Equal => {
                    if matches!(hi, Bound::Excluded(_)) {
                        own(hi)
                    } else {
                        end.clone()
                    }
                }
            }
        }
    }
}

/// Set `mark` to `Excluded(key)`, reusing its buffer.
#[inline]
pub(crate) fn mark_excluded(mark: &mut Bound<Vec<u8>>, key: &[u8]) {
    if let Bound::Excluded(v) = mark {
        v.clear();
        v.extend_from_slice(key);
    } else {
        *mark = Bound::Excluded(key.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successors_skip_trailing_ff() {
        assert_eq!(prefix_successor(b""), None);
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0, 0xFE, 0xFF]), Some(vec![0, 0xFF]));
        assert_eq!(
            prefix_range(b""),
            (Bound::Unbounded, Bound::Unbounded),
            "the empty prefix is every key"
        );
        assert_eq!(
            prefix_range(&[0xFF]),
            (Bound::Included(vec![0xFF]), Bound::Unbounded)
        );
    }

    #[test]
    fn seeks_clamp_to_the_range() {
        use Bound::{Excluded as X, Included as I, Unbounded as U};
        let start = X(b"c".to_vec());
        assert_eq!(max_lower(&start, I(b"a")), start);
        assert_eq!(max_lower(&start, I(b"c")), start);
        assert_eq!(max_lower(&start, I(b"d")), I(b"d".to_vec()));
        assert_eq!(max_lower(&I(b"c".to_vec()), X(b"c")), start);
        assert_eq!(max_lower(&start, U), start);
        assert_eq!(max_lower(&U, I(b"")), I(Vec::new()));
        let end = I(b"m".to_vec());
        assert_eq!(min_upper(&end, I(b"z")), end);
        assert_eq!(min_upper(&end, I(b"m")), end);
        assert_eq!(min_upper(&end, X(b"m")), X(b"m".to_vec()));
        assert_eq!(min_upper(&end, I(b"a")), I(b"a".to_vec()));
        assert_eq!(min_upper(&U, X(b"a")), X(b"a".to_vec()));
        let mut mark = U;
        mark_excluded(&mut mark, b"k1");
        mark_excluded(&mut mark, b"k2");
        assert_eq!(mark, X(b"k2".to_vec()));
    }
}
