//! The model of the table: each key's winning cell under the cell rule, the range
//! tombstones, and the expiry clock; the live rows it reads.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::common;
use crate::keys::{Key, Row};

/// The store's expiry clock when a case starts (microseconds).
pub(crate) const START_CLOCK: u64 = 1_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    pub(crate) ts: u64,
    pub(crate) tombstone: bool,
    /// The expiry clock's time it expires at (0: never).
    pub(crate) expires: u64,
    pub(crate) value: Vec<u8>,
}

impl Cell {
    /// Rule 3's order of expiries (`table::cell`): for live cells none (0) ranks
    /// lowest and an earlier expiry higher; for tombstones the deletion time itself.
    fn rank(&self) -> u64 {
        if self.tombstone {
            self.expires
        } else {
            self.expires.wrapping_neg()
        }
    }

    /// The cell rule: timestamp, tombstone, expiry rank, value.
    fn beats(&self, o: &Cell) -> bool {
        (self.ts, self.tombstone, self.rank(), &self.value)
            > (o.ts, o.tombstone, o.rank(), &o.value)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Model {
    cells: BTreeMap<Key, Cell>,
    /// Range tombstones: `[start, end)` at a timestamp.
    ranges: Vec<(Key, Key, u64)>,
    /// Clock writes so far: their timestamps are past every explicit one.
    writes: u64,
    /// The expiry clock.
    pub(crate) now: u64,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            cells: BTreeMap::new(),
            ranges: Vec::new(),
            writes: 0,
            now: START_CLOCK,
        }
    }
}

impl Model {
    /// The timestamp of the next write the store stamps (its order is all that counts).
    pub(crate) fn next_ts(&mut self) -> u64 {
        self.writes += 1;
        (1 << 62) + self.writes
    }

    pub(crate) fn apply(&mut self, key: Key, cell: Cell) {
        if self.cells.get(&key).is_none_or(|old| cell.beats(old)) {
            self.cells.insert(key, cell);
        }
    }

    pub(crate) fn delete_range(&mut self, start: Key, end: Key, ts: u64) {
        self.ranges.push((start, end, ts));
    }

    /// The value of `key`, if live at the expiry clock.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let cell = self.cells.get(key)?;
        self.is_live(key, cell).then(|| cell.value.clone())
    }

    /// The live rows between the bounds, in key order.
    pub(crate) fn rows(&self, lo: &Bound<Key>, hi: &Bound<Key>) -> Vec<Row> {
        self.cells
            .iter()
            .filter(|(k, c)| common::in_bounds(k, lo, hi) && self.is_live(k, c))
            .map(|(k, c)| (k.clone(), c.value.clone()))
            .collect()
    }

    /// Every live row.
    pub(crate) fn live(&self) -> Vec<Row> {
        self.rows(&Bound::Unbounded, &Bound::Unbounded)
    }

    /// Not a tombstone, not expired, not under a range tombstone at or after its time.
    fn is_live(&self, key: &[u8], c: &Cell) -> bool {
        let expired = c.expires != 0 && c.expires <= self.now;
        let covered = self
            .ranges
            .iter()
            .any(|(s, e, ts)| s.as_slice() <= key && key < e.as_slice() && *ts >= c.ts);
        !c.tombstone && !expired && !covered
    }
}
