//! A memtable's range tombstones, numbered by the commit log record that wrote them so
//! that a read at an older sequence number does not see a later range delete.
//!
//! Kept copy-on-write behind an `ArcSwapOption`: a read loads the current set without
//! a lock (nothing at all to load for the memtables that hold none, the usual case),
//! and an insert (rare next to point writes) copies it under a mutex. Reads at or
//! above the newest range delete's number (almost every read: plain reads at the
//! visible number, flushes) use the fragments of every tombstone; an older read (a read
//! view opened before a range delete) filters the list by number.

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
    /// Every tombstone with the number of the record that wrote it, in insert order.
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

    /// Add `ranges`, written by record `seq`. Returns the bytes they take (for the
    /// flush threshold).
    pub(super) fn insert(&self, seq: u64, ranges: &[RangeTombstone]) -> usize {
        let _one = self.insert.lock();
        let old = self.current.load_full();
        let mut set = match old.as_deref() {
            Some(s) => Set {
                list: s.list.clone(),
                all: s.all.clone(),
                max_seq: s.max_seq,
            },
            None => Set::default(),
        };
        let mut bytes = 0;
        for r in ranges {
            set.all.insert(r);
            set.list.push((seq, r.clone()));
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
        set.list
            .iter()
            .filter(|(s, r)| *s <= seq && r.contains(key))
            .map(|(_, r)| r.ts)
            .max()
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
        guard.as_deref()?.list.iter().map(|(_, r)| r.ts).min()
    }
}
