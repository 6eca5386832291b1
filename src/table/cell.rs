//! Reconciling two versions of one key: which cell wins.
//!
//! Replicas and sources must agree on the winner without coordination, so the rule is a
//! total order on `(ts, tombstone, value)`:
//!
//! 1. The newer write timestamp wins.
//! 2. On equal timestamps a tombstone beats a live cell (a delete and a write racing at
//!    the same microsecond resolve to the delete, as in Cassandra).
//! 3. On equal timestamps between two live cells, the larger value (bytewise) wins.
//!
//! Two cells equal under all three are identical, so the winner is the same whichever
//! source it came from. The memtable ([`crate::table::memtable`]) and the merge
//! ([`crate::table::merge`]) both call [`newer_wins`]; nothing else decides.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstone;
use crate::format::record::RecordRef;
use crate::format::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// Compare two versions of the same key: `Greater` when `a` wins over `b`, `Equal` when
/// they are identical. See the module docs for the rule.
#[inline]
pub fn cmp_versions(
    a_ts: u64,
    a_tombstone: bool,
    a_value: &[u8],
    b_ts: u64,
    b_tombstone: bool,
    b_value: &[u8],
) -> Ordering {
    a_ts.cmp(&b_ts)
        .then(a_tombstone.cmp(&b_tombstone))
        .then_with(|| a_value.cmp(b_value))
}

/// True when cell `a` strictly wins over cell `b` (keys are assumed equal).
#[inline]
pub fn newer_wins(a: &RecordRef<'_>, b: &RecordRef<'_>) -> bool {
    cmp_versions(a.ts, a.tombstone, a.value, b.ts, b.tombstone, b.value) == Ordering::Greater
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
        }
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
            tombstone: false
        })
        .is_err());
        assert!(validate_cell(&cell(1, true, b"x")).is_err());
        let big = vec![0u8; MAX_KEY_LEN + 1];
        assert!(matches!(
            validate_cell(&RecordRef {
                key: &big,
                value: b"",
                ts: 0,
                tombstone: false
            }),
            Err(Error::KeyTooLarge { .. })
        ));
        validate_cell(&cell(1, false, b"x")).unwrap();
    }
}
