//! Decompressed data blocks of compressed segments (LZ4, zstd), kept by point reads and
//! read by them and by the table's scans.
//!
//! A get on a compressed block decompressed the whole block every time: with zstd a
//! third the speed of LZ4's gets, which in turn ran at half of an uncompressed table's
//! (Measured, "Format 6"). RocksDB's block cache holds blocks uncompressed for the
//! same reason. One [`UnpackedCache`] per store (`memory.unpacked_cache_mb`), shared by
//! its segments: `quick_cache`'s sharded cache (S3-FIFO-like eviction, weighed in
//! bytes), whose values are the payloads behind an `Arc`, so a hit clones a pointer and
//! the get runs with no lock held. Invariants:
//!
//! 1. An entry is keyed by (reader id, block index), reader ids being unique in the
//!    process for its life (`BlockCache::new_reader_id`, `block_cache` invariant 1): a
//!    block of a reader that has dropped is never served to another.
//! 2. Only a payload decompressed from a stored block whose checksum passed enters, so
//!    a get on a cached payload does not sum it again (the stored bytes it came from
//!    were checked, as a mapped block checked once is trusted by gets: the module docs
//!    of `reader/blocks.rs`). A block that fails its checksum or does not decompress
//!    is reported and never cached.
//! 3. A payload larger than 1/[`MAX_SHARE`] of the budget is not kept (a block holding
//!    one huge value would otherwise be copied in on every get and evict the rest).
//!    Blocks stored uncompressed (every block of an uncompressed segment, and a
//!    compressed segment's blocks that compression did not shrink) never enter: their
//!    gets read them in place, or through the block cache of file chunks.
//! 4. Only gets fill it. The table's scans, which trust a block checked once as gets
//!    do (`SegmentIter::trusting_checked_blocks`), read a block held here instead of
//!    decompressing it again, without counting a hit or a miss or making it hotter
//!    (`quick_cache`'s `peek`): a long scan neither evicts the gets' working set nor
//!    skews the figures (`block_cache` invariant 5's reasons). Compaction,
//!    `Table::scan_cells`, repair and `verify` check every block they read, and
//!    decompress into their own buffers.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;
use serde::Serialize;

use super::block_cache::Mix;

/// (reader id, data block index).
type Key = (u64, u64);

/// Bytes charged per entry beyond its payload: the key, the `Arc`'s counts and the
/// cache's own bookkeeping (an estimate that keeps the budget honest).
const ENTRY_OVERHEAD: u64 = 64;

/// The largest payload kept is the budget divided by this.
pub const MAX_SHARE: u64 = 64;

/// The payload size the cache's item estimate assumes (`data_block_size`'s default).
const TYPICAL_PAYLOAD: u64 = 4 << 10;

#[derive(Clone)]
struct ByLen;

impl Weighter<Key, Arc<[u8]>> for ByLen {
    fn weight(&self, _: &Key, v: &Arc<[u8]>) -> u64 {
        v.len() as u64 + ENTRY_OVERHEAD
    }
}

/// The store's cache of decompressed data blocks, shared by its readers.
pub struct UnpackedCache {
    limit: u64,
    /// Hashed with the block cache's mix of the two integers: `quick_cache` without its
    /// default features hashes with std's SipHash, about 225 of a lookup's 310
    /// instructions (callgrind).
    blocks: Cache<Key, Arc<[u8]>, ByLen, Mix>,
}

impl std::fmt::Debug for UnpackedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnpackedCache")
            .field("stats", &self.stats())
            .finish()
    }
}

/// What the cache of decompressed blocks holds and how it did
/// ([`UnpackedCache::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnpackedCacheStats {
    /// The budget in bytes.
    pub limit_bytes: u64,
    /// Bytes held: payloads and the per-entry overhead charged for them.
    pub used_bytes: u64,
    /// Blocks held.
    pub blocks: u64,
    /// Gets answered from a held block.
    pub hits: u64,
    /// Lookups that found nothing: the get then decompressed its block and kept it, or
    /// read a block its segment stores uncompressed. (A segment's gets look only once
    /// one of them kept a block, so each segment's first kept block is not counted.)
    pub misses: u64,
}

impl UnpackedCache {
    /// A cache of `limit_bytes`; `None` when it is 0 (disabled).
    pub fn new(limit_bytes: u64) -> Option<UnpackedCache> {
        if limit_bytes == 0 {
            return None;
        }
        let items = usize::try_from(limit_bytes / (TYPICAL_PAYLOAD + ENTRY_OVERHEAD))
            .unwrap_or(usize::MAX)
            .max(1);
        Some(UnpackedCache {
            limit: limit_bytes,
            blocks: Cache::with(
                items,
                limit_bytes,
                ByLen,
                Mix::default(),
                Default::default(),
            ),
        })
    }

    /// Current figures.
    pub fn stats(&self) -> UnpackedCacheStats {
        UnpackedCacheStats {
            limit_bytes: self.limit,
            used_bytes: self.blocks.weight(),
            blocks: self.blocks.len() as u64,
            hits: self.blocks.hits(),
            misses: self.blocks.misses(),
        }
    }

    /// Block `block` of reader `reader`, decompressed, if held.
    #[inline]
    pub(crate) fn get(&self, reader: u64, block: u64) -> Option<Arc<[u8]>> {
        self.blocks.get(&(reader, block))
    }

    /// Block `block` of reader `reader`, if held, neither counted as a hit or a miss
    /// nor made hotter: what the table's scans read (invariant 4).
    #[inline]
    pub(crate) fn peek(&self, reader: u64, block: u64) -> Option<Arc<[u8]>> {
        self.blocks.peek(&(reader, block))
    }

    /// Keep `payload`, decompressed from block `block` of reader `reader` after its
    /// checksum passed (invariant 2).
    pub(crate) fn insert_checked(&self, reader: u64, block: u64, payload: &[u8]) {
        if payload.len() as u64 > self.limit / MAX_SHARE {
            return; // invariant 3
        }
        self.blocks.insert((reader, block), Arc::from(payload));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_disables_it() {
        assert!(UnpackedCache::new(0).is_none());
    }

    #[test]
    fn blocks_are_kept_per_reader_and_the_budget_holds() {
        let c = UnpackedCache::new(64 << 10).unwrap();
        assert!(c.get(1, 0).is_none());
        c.insert_checked(1, 0, &[7; 100]);
        assert_eq!(c.get(1, 0).as_deref(), Some(&[7u8; 100][..]));
        assert!(
            c.get(2, 0).is_none(),
            "another reader's block 0 is not this one"
        );
        for b in 0..64 {
            c.insert_checked(3, b, &[1; 4096]);
        }
        let s = c.stats();
        assert!(s.used_bytes <= s.limit_bytes, "{s:?}");
        assert!(s.blocks < 65, "{s:?}");
        assert_eq!(s.hits, 1);
        assert_eq!(s.misses, 2);
    }

    #[test]
    fn a_payload_past_its_share_of_the_budget_is_not_kept() {
        let c = UnpackedCache::new(64 << 10).unwrap();
        c.insert_checked(1, 0, &vec![1; (64 << 10) / MAX_SHARE as usize]);
        c.insert_checked(1, 1, &vec![1; (64 << 10) / MAX_SHARE as usize + 1]);
        assert!(c.get(1, 0).is_some());
        assert!(c.get(1, 1).is_none());
    }
}
