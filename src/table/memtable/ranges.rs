//! A memtable's range tombstones, numbered by the commit log record that wrote them so
//! that a read at an older sequence number does not see a later range delete.
//!
//! Kept copy-on-write behind an `ArcSwapOption`: a read loads the current set without
//! a lock (nothing at all to load for the memtables that hold none, the usual case),
//! and an insert (rare next to point writes) copies it under a mutex. Reads at or
//! above the newest range delete's number (almost every read: plain reads at the
//! visible number, flushes) use the fragments of every tombstone; an older read (a read
//! view opened before a range delete) takes the fragments every registered read sees
//! (`base`: the tombstones numbered at or below the visibility floor, folded in at
//! each insert, so a prefix purged again and again does not pile up) plus the newer
//! ones of the list its number allows.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;

use crate::format::ranges::{RangeTombstone, RangeTombstones};

/// The range tombstones of one memtable.
#[derive(Debug, Default)]
pub(super) struct MemRanges {
    current: ArcSwapOption<Set>,
    insert: Mutex<()>,
}

#[derive(Debug, Default)]
struct Set {
    /// The tombstones numbered at or below the visibility floor of the last insert:
    /// every read sees them (visibility invariant 2).
    base: RangeTombstones,
    /// The other tombstones with the number of the record that wrote each.
    list: Vec<(u64, RangeTombstone)>,
    /// All of `list`, as fragments.
    all: RangeTombstones,
    /// The highest number in `list`.
    max_seq: u64,
}

impl MemRanges {
    /// True when no range tombstone was ever added.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.current.load().is_none()
    }

    /// Add `ranges`, written by record `seq`, folding the tombstones numbered at or
    /// below `floor` (no registered read is older) into the base. Returns the bytes
    /// they take (for the flush threshold).
    pub(super) fn insert(&self, seq: u64, ranges: &[RangeTombstone], floor: u64) -> usize {
        let _one = self.insert.lock();
        let old = self.current.load_full();
        let mut set = match old.as_deref() {
            Some(s) => Set {
                base: s.base.clone(),
                list: Vec::with_capacity(s.list.len() + ranges.len()),
                all: s.all.clone(),
                max_seq: s.max_seq,
            },
            None => Set::default(),
        };
        for (s, r) in old.as_deref().map_or(&[][..], |s| &s.list[..]) {
            if *s <= floor {
                set.base.insert(r);
            } else {
                set.list.push((*s, r.clone()));
            }
        }
        let mut bytes = 0;
        for r in ranges {
            set.all.insert(r);
            if seq <= floor {
                set.base.insert(r);
            } else {
                set.list.push((seq, r.clone()));
            }
            bytes += r.start.len() + r.end.as_ref().map_or(0, Vec::len) + super::CELL_OVERHEAD;
        }
        set.max_seq = set.max_seq.max(seq);
        self.current.store(Some(Arc::new(set)));
        bytes
    }

    /// The newest timestamp of a range tombstone covering `key` that a read at `seq`
    /// sees.
    #[inline]
    pub(super) fn cover_ts(&self, key: &[u8], seq: u64) -> Option<u64> {
        let guard = self.current.load();
        let set = guard.as_deref()?;
        if seq >= set.max_seq {
            return set.all.cover_ts(key);
        }
        let newer = set
            .list
            .iter()
            .filter(|(s, r)| *s <= seq && r.contains(key));
        newer.map(|(_, r)| r.ts).max().max(set.base.cover_ts(key))
    }

    /// Add the range tombstones a read at `seq` sees to `into`.
    pub(super) fn add_to(&self, seq: u64, into: &mut RangeTombstones) {
        let guard = self.current.load();
        let Some(set) = guard.as_deref() else {
            return;
        };
        if seq >= set.max_seq {
            into.extend(&set.all);
            return;
        }
        into.extend(&set.base);
        for (_, r) in set.list.iter().filter(|(s, _)| *s <= seq) {
            into.insert(r);
        }
    }

    /// Every range tombstone, as fragments (a flush writes them).
    pub(super) fn all(&self) -> RangeTombstones {
        self.current
            .load()
            .as_deref()
            .map(|s| s.all.clone())
            .unwrap_or_default()
    }

    /// The smallest timestamp of a range tombstone, if any.
    pub(super) fn min_ts(&self) -> Option<u64> {
        let guard = self.current.load();
        let set = guard.as_deref()?;
        set.all.fragments().iter().map(|r| r.ts).min()
    }
}
