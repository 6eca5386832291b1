//! A key's versions: the cells a memtable node holds, newest first (the module docs'
//! "Versions" and invariant 1), with the insert that keeps each version the winner of
//! the cells numbered at or below it and forgets the versions no reader needs.

use super::{CellValue, SharedCell, THIN_AT};
use crate::format::record::RecordRef;
use crate::segment::Entry;
use crate::table::cell::{cmp_versions, version};
use crate::table::visibility::Visibility;

/// A stored cell. Its value is inline when short (`value.rs`), so a scan reads it with
/// the node; a point read copies it, or shares a long one, so a reader keeps the bytes
/// it got even if the cell is overwritten in place meanwhile.
#[derive(Debug, Clone)]
pub(super) struct Cell {
    value: CellValue,
    ts: u64,
    tombstone: bool,
    expires: u64,
}

impl Cell {
    #[inline]
    fn version(&self) -> crate::table::cell::Version<'_> {
        (self.ts, self.tombstone, self.expires, &self.value)
    }

    pub(super) fn entry(&self, key: &[u8]) -> Entry {
        Entry {
            key: key.to_vec(),
            value: self.value.to_vec(),
            ts: self.ts,
            tombstone: self.tombstone,
            expires: self.expires,
        }
    }

    /// The value, timestamp, tombstone flag and expiry.
    pub(super) fn parts(&self) -> (&CellValue, u64, bool, u64) {
        (&self.value, self.ts, self.tombstone, self.expires)
    }

    pub(super) fn shared(&self) -> SharedCell {
        SharedCell {
            value: self.value.clone(),
            ts: self.ts,
            tombstone: self.tombstone,
            expires: self.expires,
        }
    }
}

/// A key's versions (module docs), newest first: `head` numbered `head_seq`, then
/// `older` in decreasing sequence numbers. `older` is empty (no allocation) unless a
/// read view holds an older version.
#[derive(Debug)]
pub(super) struct Versions {
    pub(super) head_seq: u64,
    pub(super) head: Cell,
    pub(super) older: Vec<(u64, Cell)>,
}

impl Versions {
    /// The cell a read at sequence number `at` sees.
    #[inline]
    pub(super) fn at(&self, at: u64) -> Option<&Cell> {
        if self.head_seq <= at {
            return Some(&self.head);
        }
        self.older.iter().find(|(s, _)| *s <= at).map(|(_, c)| c)
    }

    /// Insert `c`, numbered `seq`; forget versions no reader at or above `floor` needs,
    /// and, once more than [`THIN_AT`] are kept, those no registered read (`visibility`)
    /// needs. Returns whether the cell was stored.
    pub(super) fn insert(
        &mut self,
        seq: Option<u64>,
        c: RecordRef<'_>,
        floor: u64,
        visibility: Option<&Visibility>,
    ) -> bool {
        let seq = seq.unwrap_or(self.head_seq);
        let beats = |cell: &Cell| cmp_versions(version(&c), cell.version());
        // The version below (or at) `seq`: index 0 is the head, i + 1 is older[i].
        let below = if self.head_seq <= seq {
            Some(0)
        } else {
            self.older
                .iter()
                .position(|(s, _)| *s <= seq)
                .map(|i| i + 1)
        };
        let base = below.map(|i| {
            if i == 0 {
                (self.head_seq, &self.head)
            } else {
                (self.older[i - 1].0, &self.older[i - 1].1)
            }
        });
        let stored = match base.map(|(s, cell)| (s, beats(cell))) {
            Some((_, std::cmp::Ordering::Less)) => false,
            // An identical cell already there.
            Some((_, std::cmp::Ordering::Equal)) => true,
            Some((s, std::cmp::Ordering::Greater)) if s == seq => {
                // A second cell of the key in the same batch.
                let i = below.unwrap_or(0);
                let slot = if i == 0 {
                    &mut self.head
                } else {
                    &mut self.older[i - 1].1
                };
                *slot = Cell::from(c);
                self.fold_newer(i, c);
                true
            }
            _ => {
                let i = below.unwrap_or(1 + self.older.len());
                // Usually one older version, and only until the next write of the key.
                self.older.reserve_exact(1);
                if i == 0 {
                    let old = std::mem::replace(&mut self.head, Cell::from(c));
                    let old_seq = std::mem::replace(&mut self.head_seq, seq);
                    self.older.insert(0, (old_seq, old));
                } else {
                    self.older.insert(i - 1, (seq, Cell::from(c)));
                    self.fold_newer(i, c);
                }
                true
            }
        };
        self.forget_below(floor);
        if self.older.len() > THIN_AT {
            if let Some(v) = visibility {
                let (visible, views) = v.needed();
                self.thin(visible, &views);
            }
        }
        stored
    }

    /// Keep only the versions some read may still ask for: each registered read at `r`
    /// (`views`, ascending) reads the newest version at or below `r`; reads not yet
    /// registered read at `visible` or later, so they need the newest version at or
    /// below `visible` and every newer one. Dropping any other version changes no
    /// read's answer. The caller loaded `visible` and `views` together, under the
    /// visibility lock (a read registering later gets a number at or above `visible`).
    fn thin(&mut self, visible: u64, views: &[u64]) {
        let mut newer = self.head_seq;
        let mut below_visible = self.head_seq <= visible;
        self.older.retain(|(s, _)| {
            let keep =
                *s > visible || !below_visible || views.iter().any(|&r| *s <= r && r < newer);
            below_visible |= *s <= visible;
            newer = *s;
            keep
        });
    }

    /// Fold `c` into the versions newer than index `i` (0 = head): each holds the
    /// winner of every cell at or below its number, `c` included.
    fn fold_newer(&mut self, i: usize, c: RecordRef<'_>) {
        let wins = |cell: &Cell| cmp_versions(version(&c), cell.version()).is_gt();
        for j in (0..i).rev() {
            let slot = if j == 0 {
                &mut self.head
            } else {
                &mut self.older[j - 1].1
            };
            if wins(slot) {
                *slot = Cell::from(c);
            }
        }
    }

    /// Keep the newest version at or below `floor` and every newer one.
    fn forget_below(&mut self, floor: u64) {
        if self.older.is_empty() {
            return;
        }
        if self.head_seq <= floor {
            self.older.clear();
        } else if let Some(i) = self.older.iter().position(|(s, _)| *s <= floor) {
            self.older.truncate(i + 1);
        }
    }
}

impl From<RecordRef<'_>> for Cell {
    fn from(c: RecordRef<'_>) -> Cell {
        Cell {
            value: CellValue::new(c.value),
            ts: c.ts,
            tombstone: c.tombstone,
            expires: c.expires,
        }
    }
}
