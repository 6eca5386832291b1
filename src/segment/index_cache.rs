//! Index blocks held in memory for readers whose index file is read with positional
//! reads (`standard`, or `auto` past the mapping budget).
//!
//! Without it a standard-mode `get` costs two positional reads: the index block, then
//! the record. RocksDB keeps its open tables' index blocks in memory (or in its block
//! cache) for the same reason. Here a block read once is kept, checksum verified, until
//! its segment closes, as long as the store's [`IndexCache`] byte budget allows; past
//! the budget, blocks are read per lookup as before. There is no eviction: a block is
//! inserted once (`OnceLock`) and read without a lock, so readers never serialise, and
//! the budget's bytes return when the segment's reader drops (after compaction makes it
//! obsolete, or at close). `SegmentReader::verify` reads the file itself and keeps
//! nothing here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use serde::Serialize;

/// The byte budget for cached index blocks, shared by a store's readers.
#[derive(Debug)]
pub struct IndexCache {
    limit: u64,
    used: AtomicU64,
    blocks: AtomicU64,
    refused: AtomicU64,
}

/// What the index cache holds (see [`IndexCache::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IndexCacheStats {
    /// The budget in bytes.
    pub limit_bytes: u64,
    /// Bytes of index blocks held.
    pub used_bytes: u64,
    /// Index blocks held.
    pub blocks: u64,
    /// Block reads that went to the file, and were not kept, because the budget was
    /// full (a steady rise means the budget is smaller than the index being read).
    pub refused: u64,
}

impl IndexCache {
    /// A budget of `limit_bytes` (0 disables caching).
    pub fn new(limit_bytes: u64) -> IndexCache {
        IndexCache {
            limit: limit_bytes,
            used: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Current figures.
    pub fn stats(&self) -> IndexCacheStats {
        IndexCacheStats {
            limit_bytes: self.limit,
            used_bytes: self.used.load(Ordering::Relaxed),
            blocks: self.blocks.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// Could `n` more bytes fit now? (A hint: [`Self::try_reserve`] decides.)
    fn has_room(&self, n: u64) -> bool {
        let room = self.used.load(Ordering::Relaxed).saturating_add(n) <= self.limit;
        if !room {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        room
    }

    fn try_reserve(&self, n: u64) -> bool {
        let ok = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok();
        if ok {
            self.blocks.fetch_add(1, Ordering::Relaxed);
        } else {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    fn release(&self, bytes: u64, blocks: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        self.blocks.fetch_sub(blocks, Ordering::Relaxed);
    }
}

/// One cached block, set once.
type Slot = OnceLock<Box<[u8]>>;

/// One reader's cached index blocks; gives its bytes back to the budget on drop.
#[derive(Debug)]
pub(crate) struct CachedIndex {
    /// One slot per index block, allocated when the first block is kept.
    blocks: OnceLock<Box<[Slot]>>,
    n: usize,
    budget: Arc<IndexCache>,
    held_bytes: AtomicU64,
    held_blocks: AtomicU64,
}

impl CachedIndex {
    /// Room for `n` blocks, none loaded; `None` when the budget is 0.
    pub(crate) fn new(n: usize, budget: &Arc<IndexCache>) -> Option<CachedIndex> {
        (budget.limit > 0).then(|| CachedIndex {
            blocks: OnceLock::new(),
            n,
            budget: budget.clone(),
            held_bytes: AtomicU64::new(0),
            held_blocks: AtomicU64::new(0),
        })
    }

    /// Block `i`, if cached.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        self.blocks.get()?.get(i)?.get().map(|b| &b[..])
    }

    /// Bytes of bookkeeping (the per-block slots, once any block is kept).
    pub(crate) fn overhead_bytes(&self) -> usize {
        self.blocks
            .get()
            .map_or(0, |b| std::mem::size_of_val(&b[..]))
    }

    /// Whether a block of `len` bytes is worth loading into its own buffer.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.budget.has_room(len as u64)
    }

    /// Keep `bytes` (already verified) as block `i` if the budget allows. Returns the
    /// cached copy, or gives `bytes` back when the budget refused it.
    pub(crate) fn insert(&self, i: usize, bytes: Box<[u8]>) -> Result<&[u8], Box<[u8]>> {
        if i >= self.n {
            return Err(bytes);
        }
        let slot = &self
            .blocks
            .get_or_init(|| (0..self.n).map(|_| OnceLock::new()).collect())[i];
        let len = bytes.len() as u64;
        if !self.budget.try_reserve(len) {
            return Err(bytes);
        }
        match slot.set(bytes) {
            Ok(()) => {
                self.held_bytes.fetch_add(len, Ordering::Relaxed);
                self.held_blocks.fetch_add(1, Ordering::Relaxed);
            }
            // Another thread cached it first; ours is dropped.
            Err(_) => self.budget.release(len, 1),
        }
        Ok(slot.get().map(|b| &b[..]).unwrap_or(&[]))
    }

    /// Bytes this reader holds.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Ordering::Relaxed)
    }
}

impl Drop for CachedIndex {
    fn drop(&mut self) {
        self.budget
            .release(*self.held_bytes.get_mut(), *self.held_blocks.get_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_respected_and_returned_on_drop() {
        let budget = Arc::new(IndexCache::new(150));
        let c = CachedIndex::new(4, &budget).unwrap();
        assert!(c.insert(0, vec![1; 60].into_boxed_slice()).is_ok());
        assert_eq!(c.get(0), Some(&[1u8; 60][..]));
        // 60 + 100 > 150: refused, the bytes come back, nothing is held.
        let back = c.insert(1, vec![2; 100].into_boxed_slice()).unwrap_err();
        assert_eq!(back.len(), 100);
        assert_eq!(c.get(1), None);
        assert!(c.insert(2, vec![3; 40].into_boxed_slice()).is_ok());
        // A second insert of a cached block (two threads loading it at once) keeps the
        // first copy and charges nothing.
        assert_eq!(
            c.insert(2, vec![9; 40].into_boxed_slice()).unwrap(),
            &[3u8; 40][..]
        );
        let s = budget.stats();
        assert_eq!((s.used_bytes, s.blocks, s.limit_bytes), (100, 2, 150));
        assert_eq!(s.refused, 1);
        assert_eq!(c.held_bytes(), 100);
        assert!(
            c.insert(9, vec![0; 1].into_boxed_slice()).is_err(),
            "no block 9"
        );
        drop(c);
        assert_eq!((budget.stats().used_bytes, budget.stats().blocks), (0, 0));
    }

    #[test]
    fn a_zero_budget_caches_nothing() {
        assert!(CachedIndex::new(4, &Arc::new(IndexCache::new(0))).is_none());
    }
}
