//! The whole check of a block payload: what reads check as they go, for every entry,
//! and what no read needs (order, tiling, the group table, the hash table).

use super::held::{self, Held, Same, Shared};
use super::{BlockCell, DataBlock, Malformed};
use crate::format::{home_slot, key_hash};

impl<'a> DataBlock<'a> {
    /// Check every entry and hand each to `f` with its whole key, in order: the table of
    /// starts names where its entries start, which tile the entries region exactly (so a
    /// block has one table), group heads share nothing and every other entry shares the
    /// longest prefix it can, keys strictly ascend, `base_ts` is the smallest timestamp,
    /// format 7 holds exactly the fields every entry shares (format 8: its entries are
    /// fixed exactly when they can be, with the prefix and timestamp width they call
    /// for), and the hash table is the one the builder makes of these keys. `f` sees
    /// cells before the table is checked: a caller drops what it gathered when this
    /// fails.
    pub fn verify(&self, mut f: impl FnMut(&[u8], &BlockCell<'a>)) -> Result<(), Malformed> {
        let (mut key, mut prev) = (Vec::new(), Vec::new());
        let mut at = 0;
        let mut head: &[u8] = &[];
        let (mut min_ts, mut max_ts) = (u64::MAX, 0);
        let (mut keys, mut vals) = (Same::Unseen, Same::Unseen);
        let (fixed, mut plain, mut first) = (self.is_fixed(), true, Vec::new());
        let mut hashes = Vec::with_capacity(self.s.n);
        for i in 0..self.s.n {
            if i % self.s.stride == 0 && !fixed {
                let (start, off) = self.start_entry(i);
                if start != Some(at) {
                    let why = format!("the table says entry {i} starts at {start:?}; it is at {at}");
                    return Err(Malformed::new(off as u64, why));
                }
            }
            if i % self.s.interval == 0 {
                head = &[];
            }
            let c = self.cell_at(at, head)?;
            if fixed {
                // No group shares with its head: the block's prefix is checked below.
            } else if i % self.s.interval == 0 {
                head = c.suffix;
            } else if c.prefix.len() < head.len() && c.suffix.first() == head.get(c.prefix.len()) {
                return Err(Malformed::new(at as u64, "entry shares less than its key does"));
            }
            c.key_into(&mut key);
            if i > 0 && key <= prev {
                return Err(Malformed::new(at as u64, "keys out of order in data block"));
            }
            (min_ts, max_ts) = (min_ts.min(c.ts), max_ts.max(c.ts));
            keys = keys.and(key.len());
            if !c.tombstone {
                vals = vals.and(c.value.len());
            }
            plain &= !c.tombstone && c.expires == 0;
            if i == 0 {
                first.clone_from(&key);
            }
            hashes.push(key_hash(&key));
            f(&key, &c);
            std::mem::swap(&mut key, &mut prev);
            at = c.end;
        }
        if at != self.s.entries_end {
            let why = format!("entries end at {at}, the block's index starts at {}", self.s.entries_end);
            return Err(Malformed::new(at as u64, why));
        }
        if min_ts != self.s.base_ts {
            let why = format!("base timestamp {} but the oldest cell's is {min_ts}", self.s.base_ts);
            return Err(Malformed::new(self.s.slots_at as u64 + self.s.m as u64, why));
        }
        let cells = Shared {
            keys,
            vals,
            min_ts,
            max_ts,
            plain,
            lcp: super::common_prefix(&first, &prev),
        };
        let shared = held::choose(self.s.layout, &cells);
        // Where a fixed block's prefix lies is the trailer's business, not the cells'.
        if shared != (Held { prefix_at: 0, ..self.s.held }) {
            let why = format!("holds {:?} where its cells share {shared:?}", self.s.held);
            return Err(Malformed::new(self.s.payload_len as u64 - 1, why));
        }
        let slots = &self.b[self.s.slots_at..self.s.slots_at + self.s.m];
        match slots.iter().zip(&table(&hashes, self.s.m)).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(s) => Err(Malformed::new(
                (self.s.slots_at + s) as u64,
                format!("hash slot {s} differs from the table of the block's keys"),
            )),
        }
    }
}

/// The hash table of `m` slots the builder makes for keys hashing to `hashes`, in order.
pub(super) fn table(hashes: &[u64], m: usize) -> Vec<u8> {
    let mut slots = vec![0u8; m];
    for (i, &h) in hashes.iter().enumerate() {
        let mut s = home_slot(h, m);
        while slots[s] != 0 {
            s = (s + 1) % m;
        }
        slots[s] = (i + 1) as u8;
    }
    slots
}
