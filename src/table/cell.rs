//! Reconciling two versions of one key: which cell wins.
//!
//! Replicas and sources must agree on the winner without coordination, so the rule is a
//! total order on `(ts, tombstone, expires, value)`:
//!
//! 1. The newer write timestamp wins.
//! 2. On equal timestamps a tombstone beats a live cell (a delete and a write racing at
//!    the same microsecond resolve to the delete, as in Cassandra).
//! 3. On equal timestamps between two live cells, an expiring cell beats one that does
//!    not expire, and the earlier expiry wins; between two tombstones, the later local
//!    deletion time wins (a plain tombstone has none: 0).
//! 4. Then the larger value (bytewise) wins.
//!
//! Four cells equal under all four are identical, so the winner is the same whichever
//! source it came from.
//!
//! Rule 3 does not depend on the time of the read, so a memtable can keep one winner per
//! key and every replica keeps the same one. Cassandra's rule does (at equal timestamps
//! an expired cell beats a live one, else the larger value wins): whether the key reads
//! as deleted is the same under both at every moment (under ours the winner is the
//! cell that expires first, so it has expired once any of them has), only the value
//! read before the first expiry may differ (ours: that of the cell expiring first;
//! Cassandra's: the larger). Expiry is judged at read time ([`is_dead`]): an expired
//! winner reads as a tombstone at its timestamp, so it hides older versions too. The memtable ([`crate::table::memtable`]) and the merge
//! ([`crate::table::merge`]) both call [`newer_wins`]; nothing else decides.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstone;
use crate::format::record::RecordRef;
use crate::format::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::segment::Entry;

/// One side of a comparison of versions: `(ts, tombstone, expires, value)`.
pub type Version<'a> = (u64, bool, u64, &'a [u8]);

/// Compare two versions of the same key: `Greater` when `a` wins over `b`, `Equal` when
/// they are identical. See the module docs for the rule.
#[inline]
pub fn cmp_versions(a: Version<'_>, b: Version<'_>) -> Ordering {
    a.0.cmp(&b.0)
        .then(a.1.cmp(&b.1))
        .then_with(|| expiry_rank(a.1, a.2).cmp(&expiry_rank(b.1, b.2)))
        .then_with(|| a.3.cmp(b.3))
}

/// Rule 3's order of expiries: for live cells none (0) ranks lowest and an earlier
/// expiry higher (`2^64 - expires`); for tombstones the deletion time itself.
#[inline(always)]
fn expiry_rank(tombstone: bool, expires: u64) -> u64 {
    if tombstone {
        expires
    } else {
        expires.wrapping_neg()
    }
}

/// True when cell `a` strictly wins over cell `b` (keys are assumed equal).
#[inline]
pub fn newer_wins(a: &RecordRef<'_>, b: &RecordRef<'_>) -> bool {
    cmp_versions(version(a), version(b)) == Ordering::Greater
}

/// A cell's [`Version`].
#[inline(always)]
pub fn version<'a>(c: &RecordRef<'a>) -> Version<'a> {
    (c.ts, c.tombstone, c.expires, c.value)
}

/// An owned cell's [`Version`] (the merges compare `Entry`s).
#[inline(always)]
pub fn entry_version(e: &Entry) -> Version<'_> {
    (e.ts, e.tombstone, e.expires, &e.value)
}

/// Whether a winning cell reads as absent: a tombstone, or a cell whose expiry is at or
/// before `now()` (the read's moment on the expiry clock, asked only for an expiring
/// cell, so a read of cells without a TTL never reads a clock).
#[inline(always)]
pub fn is_dead(tombstone: bool, expires: u64, now: impl FnOnce() -> u64) -> bool {
    tombstone || (expires != 0 && expires <= now())
}

/// Check a cell against the limits of the segment format, so that anything the commit
/// log or a memtable accepts can later be flushed: a non-empty key of at most
/// [`MAX_KEY_LEN`] bytes, a value of at most [`MAX_VALUE_LEN`] bytes, and no value on a
/// tombstone.
pub fn validate_cell(c: &RecordRef<'_>) -> Result<()> {
    if c.key.is_empty() {
        return Err(Error::InvalidArgument("empty key".into()));
    }
    if c.key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: c.key.len(),
            max: MAX_KEY_LEN,
        });
    }
    if c.value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: c.value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    if c.tombstone && !c.value.is_empty() {
        return Err(Error::InvalidArgument("a tombstone has no value".into()));
    }
    Ok(())
}

/// Check a range tombstone against the limits of the formats: a non-empty range whose
/// bounds are at most one byte longer than the largest key.
pub fn validate_range(r: &RangeTombstone) -> Result<()> {
    let long = |k: &[u8]| k.len() > MAX_KEY_LEN + 1;
    if r.start.is_empty() || long(&r.start) || r.end.as_deref().is_some_and(long) {
        return Err(Error::InvalidArgument(
            "range tombstone bound empty or longer than a key".into(),
        ));
    }
    if r.is_empty() {
        return Err(Error::InvalidArgument("empty or inverted key range".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ts: u64, tombstone: bool, value: &'static [u8]) -> RecordRef<'static> {
        RecordRef {
            key: b"k",
            value,
            ts,
            tombstone,
            expires: 0,
        }
    }

    #[test]
    fn expiring_cells_at_equal_timestamps() {
        let exp = |e: u64, value: &'static [u8]| RecordRef {
            expires: e,
            ..cell(5, false, value)
        };
        // An expiring cell beats a non-expiring one, whatever the values.
        assert!(newer_wins(&exp(10, b"a"), &cell(5, false, b"z")));
        // The earlier expiry wins.
        assert!(newer_wins(&exp(10, b"a"), &exp(20, b"z")));
        // A tombstone still beats both; a newer timestamp beats everything.
        assert!(newer_wins(&cell(5, true, b""), &exp(10, b"a")));
        assert!(newer_wins(&cell(6, false, b"a"), &exp(10, b"z")));
        // Between tombstones, the later deletion time wins.
        let dead = RecordRef {
            expires: 10,
            ..cell(5, true, b"")
        };
        assert!(newer_wins(&dead, &cell(5, true, b"")));
        // Equal in all four: identical.
        assert!(!newer_wins(&exp(10, b"a"), &exp(10, b"a")));
        assert!(is_dead(false, 10, || 10));
        assert!(!is_dead(false, 10, || 9));
        assert!(!is_dead(false, 0, || unreachable!()));
    }

    #[test]
    fn rule_in_order_of_precedence() {
        // 1. newer timestamp, even against a tombstone or a larger value
        assert!(newer_wins(&cell(2, false, b"a"), &cell(1, true, b"")));
        assert!(newer_wins(&cell(2, false, b"a"), &cell(1, false, b"zzz")));
        // 2. tombstone on a tie
        assert!(newer_wins(&cell(5, true, b""), &cell(5, false, b"zzz")));
        assert!(!newer_wins(&cell(5, false, b"zzz"), &cell(5, true, b"")));
        // 3. larger value on a tie between live cells
        assert!(newer_wins(&cell(5, false, b"b"), &cell(5, false, b"a")));
        // identical cells: neither wins
        assert!(!newer_wins(&cell(5, false, b"a"), &cell(5, false, b"a")));
        assert!(!newer_wins(&cell(5, true, b""), &cell(5, true, b"")));
    }

    #[test]
    fn limits_are_checked() {
        assert!(validate_cell(&RecordRef {
            key: b"",
            value: b"",
            ts: 0,
            tombstone: false,
            expires: 0,
        })
        .is_err());
        assert!(validate_cell(&cell(1, true, b"x")).is_err());
        let big = vec![0u8; MAX_KEY_LEN + 1];
        assert!(matches!(
            validate_cell(&RecordRef {
                key: &big,
                value: b"",
                ts: 0,
                tombstone: false,
                expires: 0,
            }),
            Err(Error::KeyTooLarge { .. })
        ));
        validate_cell(&cell(1, false, b"x")).unwrap();
    }
}
