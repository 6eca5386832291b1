//! The model: per table, the winning version of each key, its expiry, and the expiry
//! clock; the live values it reads.

use std::collections::BTreeMap;

use segstore::FilterDecision;

use crate::store::gamma_filter;

/// (ts, tombstone, value) ordered as the cell rule orders versions.
pub(crate) type Version = (u64, bool, Vec<u8>);

#[derive(Clone)]
pub(crate) struct Model {
    cells: BTreeMap<String, BTreeMap<Vec<u8>, Version>>,
    /// Clock writes are ordered after every explicit timestamp used here.
    clock: u64,
    /// The expiry of each winning cell written with a TTL (every TTL put is
    /// clock-timestamped, so no tie with another cell brings the expiry rule in).
    expires: BTreeMap<(String, Vec<u8>), u64>,
    /// The store's expiry clock, as the test sets it. It starts past any wall clock
    /// this test will meet (the year 2096): a reopened store reads the wall clock until
    /// `open` sets this one, and a compaction running in that window judges expiry by
    /// it. Behind the wall clock, that window saw every TTL cell as expired and purged
    /// some (a scan missing one, about 1 run in 50 with four runs at once on two
    /// cores); ahead of it, the window can only keep more than this clock would.
    pub(crate) now: u64,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            cells: BTreeMap::new(),
            clock: 0,
            expires: BTreeMap::new(),
            now: 4_000_000_000_000_000,
        }
    }
}

impl Model {
    pub(crate) fn apply(&mut self, table: &str, key: Vec<u8>, v: Version) {
        self.apply_expiring(table, key, v, 0);
    }

    /// Apply a cell expiring at `expires` (0: never).
    pub(crate) fn apply_expiring(&mut self, table: &str, key: Vec<u8>, v: Version, expires: u64) {
        let slot = self
            .cells
            .entry(table.into())
            .or_default()
            .entry(key.clone());
        let won = match slot {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(v);
                true
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let won = v > *e.get();
                if won {
                    e.insert(v);
                }
                won
            }
        };
        if won {
            let k = (table.to_string(), key);
            if expires != 0 {
                self.expires.insert(k, expires);
            } else {
                self.expires.remove(&k);
            }
        }
    }

    /// The live value of `key` in `table` at the model's expiry clock.
    pub(crate) fn value(&self, table: &str, key: &[u8]) -> Option<Vec<u8>> {
        let (_, t, v) = self.cells.get(table)?.get(key)?;
        let expired = self
            .expires
            .get(&(table.to_string(), key.to_vec()))
            .is_some_and(|&e| e <= self.now);
        (!t && !expired).then(|| v.clone())
    }

    /// A major compaction of `table` under [`gamma_filter`]: every live cell decided.
    /// Returns how many it removed or replaced.
    pub(crate) fn filter(&mut self, table: &str) -> usize {
        let Some(cells) = self.cells.get_mut(table) else {
            return 0;
        };
        let mut changed = 0;
        // The timestamp stays: a removal is a tombstone at the cell's own. Expired cells
        // are tombstones to compaction: the filter never sees them.
        for (k, (_, tombstone, v)) in cells.iter_mut() {
            let expired = self
                .expires
                .get(&(table.to_string(), k.clone()))
                .is_some_and(|&e| e <= self.now);
            if *tombstone || expired {
                continue;
            }
            match gamma_filter(v) {
                FilterDecision::Keep => continue,
                FilterDecision::Remove => (*tombstone, *v) = (true, Vec::new()),
                FilterDecision::Replace(new) => *v = new,
            }
            changed += 1;
        }
        changed
    }

    pub(crate) fn next_clock(&mut self) -> u64 {
        self.clock += 1;
        (1 << 62) + self.clock
    }

    pub(crate) fn live(&self, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.cells
            .get(table)
            .map(|m| {
                m.keys()
                    .filter_map(|k| self.value(table, k).map(|v| (k.clone(), v)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Every key of the model's universe.
pub(crate) fn universe() -> impl Iterator<Item = Vec<u8>> {
    (0..120).map(|i| format!("k{i:03}").into_bytes())
}

impl Model {
    /// A range tombstone at `ts` over `[lo, hi)` (`None`: unbounded): a tombstone for
    /// every key of the universe in it, which beats exactly what the range tombstone
    /// beats (every cell at or below `ts`, written before or after).
    pub(crate) fn delete_range(
        &mut self,
        table: &str,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        ts: u64,
    ) {
        for k in universe() {
            if lo.is_none_or(|l| k.as_slice() >= l) && hi.is_none_or(|h| k.as_slice() < h) {
                self.apply(table, k, (ts, true, vec![]));
            }
        }
    }
}

pub(crate) fn live_get(m: &Model, table: &str, key: &[u8]) -> Option<Vec<u8>> {
    m.value(table, key)
}

/// Live rows of `table` in `[lo, hi]` (inclusive).
pub(crate) fn live_in(m: &Model, table: &str, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.live(table)
        .into_iter()
        .filter(|(k, _)| k.as_slice() >= lo && k.as_slice() <= hi)
        .collect()
}
