//! The whole check of a block payload: what reads check as they go, for every entry,
//! and what no read needs (order, tiling, the group table, the hash table).

use super::{BlockCell, DataBlock, Malformed};
use crate::format::key_hash;

impl<'a> DataBlock<'a> {
    /// Check every entry and hand each to `f` with its whole key, in order: the groups
    /// start where the entries do and tile the entries region exactly, group heads share
    /// nothing, keys strictly ascend, `base_ts` is the smallest timestamp, and the hash
    /// table holds every entry exactly once where a lookup of its key finds it.
    pub fn verify(&self, mut f: impl FnMut(&[u8], &BlockCell<'a>)) -> Result<(), Malformed> {
        let (mut key, mut prev) = (Vec::new(), Vec::new());
        let mut at = 0;
        let mut head: &[u8] = &[];
        let mut min_ts = u64::MAX;
        for i in 0..self.n {
            if i % self.interval == 0 {
                let g = i / self.interval;
                let off = self.restarts_at + g * 4;
                let start = crate::format::read_u32(self.b, off).map(|s| s as usize);
                if start != Some(at) {
                    let why = format!("group {g} starts at {start:?}, its entry at {at}");
                    return Err(Malformed::new(off as u64, why));
                }
                head = &[];
            }
            let c = self.cell_at(at, head)?;
            if i % self.interval == 0 {
                head = c.suffix;
            }
            c.key_into(&mut key);
            if i > 0 && key <= prev {
                return Err(Malformed::new(at as u64, "keys out of order in data block"));
            }
            min_ts = min_ts.min(c.ts);
            f(&key, &c);
            self.check_slot(&key, &c)?;
            std::mem::swap(&mut key, &mut prev);
            at = c.end;
        }
        if at != self.entries_end {
            let why = format!("entries end at {at}, the block's index starts at {}", self.entries_end);
            return Err(Malformed::new(at as u64, why));
        }
        if min_ts != self.base_ts {
            let why = format!("base timestamp {} but the oldest cell's is {min_ts}", self.base_ts);
            return Err(Malformed::new(self.slots_at as u64 + self.m as u64, why));
        }
        self.check_slot_count()
    }

    /// A lookup of `key` finds the entry `c` (every entry is in the hash table).
    fn check_slot(&self, key: &[u8], c: &BlockCell<'a>) -> Result<(), Malformed> {
        if self.m == 0 {
            return Ok(());
        }
        match self.get(key, key_hash(key))? {
            Some(found) if found.at == c.at => Ok(()),
            _ => Err(Malformed::new(
                self.slots_at as u64,
                format!("hash table misses the entry at {}", c.at),
            )),
        }
    }

    /// The hash table holds exactly `n` entries, each once (with [`Self::check_slot`]:
    /// exactly the block's entries).
    fn check_slot_count(&self) -> Result<(), Malformed> {
        if self.m == 0 {
            return Ok(());
        }
        let slots = &self.b[self.slots_at..self.slots_at + self.m];
        let mut seen = [false; 256];
        for (s, &o) in slots.iter().enumerate() {
            let o = o as usize;
            if o == 0 {
                continue;
            }
            if o > self.n || std::mem::replace(&mut seen[o], true) {
                let why = format!("slot {s} names entry {o} of {} twice or past the end", self.n);
                return Err(Malformed::new((self.slots_at + s) as u64, why));
            }
        }
        let filled = seen.iter().filter(|&&x| x).count();
        if filled != self.n {
            let why = format!("hash table holds {filled} of {} entries", self.n);
            return Err(Malformed::new(self.slots_at as u64, why));
        }
        Ok(())
    }
}
