//! Aligned chunks of data files held in memory for point reads of segments whose data is
//! read with positional reads (`standard`, `mmap_index_only`, and `auto` for data past its
//! data map budget, `io::data_budget`).
//!
//! Without it every such `get` costs one `pread` (a system call and a copy) even when
//! the record is in the page cache, and reads larger than memory have no cache of their
//! own. With it a get finds the [`CHUNK`]-byte aligned chunk holding its record and
//! decodes the record from the chunk's bytes with no system call; a miss reads the
//! whole chunk once (one `pread`, the same system call a get made before) and keeps it.
//!
//! One [`BlockCache`] per store, shared by its segments (`memory.block_cache_mb`): shards
//! of `quick_cache`'s cache (S3-FIFO-like eviction, weighed in bytes, so memory is
//! bounded by the budget plus a small per-entry overhead) behind read-write locks; a hit
//! copies the record out under the shard's read lock. Invariants:
//!
//! 1. A chunk is keyed by (reader id, chunk index), where the reader id is unique in the
//!    process for the life of the process ([`BlockCache::new_reader_id`]): a chunk of a
//!    reader that has dropped is never served to another reader, whatever file that
//!    reader has open (segment ids are never reused either, but a reopened store, a
//!    snapshot or a repaired segment may name a different file the same way). Entries of
//!    dropped readers are never read again and age out under eviction, as RocksDB's
//!    entries keyed by a table's unique cache key prefix do.
//! 2. Only bytes read from the file are cached, whole chunks (the last one of a file
//!    shorter), never a partial read: a read that fails caches nothing.
//! 3. Cached bytes are not trusted: a point read decodes and checks its record from
//!    them exactly as from a fresh read (`crc_check_chance`; ARCHITECTURE invariant 6),
//!    so damage on disk is reported on every read of it, cached or not.
//! 4. Ranges (records, blocks) over two chunks are assembled from both (each cached); a
//!    range over more than two is read straight from the file and not cached, so one
//!    huge value cannot evict the working set.
//! 5. Scans (`SegmentIter`, both directions) and `SegmentReader::verify` read the file
//!    and neither look in the cache nor fill it (RocksDB's `fill_cache = false` for
//!    iterators): a scan over a table would otherwise evict every hot chunk for data it
//!    reads once, and `verify` must see the file as it is now.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use quick_cache::unsync::Cache;
use quick_cache::Weighter;
use serde::Serialize;

use super::reader::with_scratch;
use crate::error::{Error, Result};
use crate::io::PositionalFile;

/// Bytes per cached chunk: a page, as RocksDB's default block size. Not yet measured
/// against 16 KiB: a smaller chunk reads less per miss, and a budget smaller than the
/// data holds more distinct hot records; a larger one costs fewer entries per byte.
pub const CHUNK: usize = 4096;

/// Bytes charged per entry beyond its chunk: the key, the chunk's pointer and the cache's
/// own bookkeeping (an estimate that keeps the budget honest for small tails).
const ENTRY_OVERHEAD: u64 = 64;

/// (reader id, chunk index).
type Key = (u64, u64);

/// Hashes a key (two integers) with a multiply-xorshift mix: every output bit depends
/// on every input bit, as the cache needs (it picks shards from the middle bits and
/// hashbrown probes with the top ones). The cache of decompressed blocks uses it too.
#[derive(Clone, Default)]
pub(super) struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

pub(super) type Mix = std::hash::BuildHasherDefault<MixHasher>;

#[derive(Clone)]
struct ByBytes;

impl Weighter<Key, Box<[u8]>> for ByBytes {
    fn weight(&self, _: &Key, v: &Box<[u8]>) -> u64 {
        v.len() as u64 + ENTRY_OVERHEAD
    }
}

/// One shard: a `quick_cache` cache behind a read-write lock. A hit takes the read lock
/// (`quick_cache`'s `get` marks the entry with an atomic, so readers share the shard)
/// and copies the record out before releasing it; nothing is reference counted, so a
/// hit touches the entry and the record's bytes only (an `Arc` per chunk cost one more
/// cache miss per get, on its count, and a line the cores pass around on hot chunks).
type Shard = RwLock<Chunks>;

/// One shard's chunks.
type Chunks = Cache<Key, Box<[u8]>, ByBytes, Mix>;

/// The store's data block cache, shared by its readers.
pub struct BlockCache {
    limit: u64,
    shards: Box<[Shard]>,
    /// Chunks loaded.
    misses: AtomicU64,
    /// Point reads of ranges over more than two chunks, read past the cache.
    bypassed: AtomicU64,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("stats", &self.stats())
            .finish()
    }
}

/// What the block cache holds and how it did (see [`BlockCache::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockCacheStats {
    /// The budget in bytes.
    pub limit_bytes: u64,
    /// Bytes held, chunks and the per-entry overhead charged for them.
    pub used_bytes: u64,
    /// Chunks held.
    pub blocks: u64,
    /// Chunk lookups answered from memory.
    pub hits: u64,
    /// Chunk lookups that read the file (and kept the chunk).
    pub misses: u64,
    /// Point reads of ranges over more than two chunks, read from the file and not
    /// cached.
    pub bypassed: u64,
}

/// The next reader id; ids are never reused in a process (invariant 1).
static NEXT_READER: AtomicU64 = AtomicU64::new(1);

impl BlockCache {
    /// A cache of `limit_bytes`; `None` when it is 0 (disabled).
    pub fn new(limit_bytes: u64) -> Option<BlockCache> {
        if limit_bytes == 0 {
            return None;
        }
        let entry = CHUNK as u64 + ENTRY_OVERHEAD;
        // Four shards per core, as `quick_cache::sync` makes, but each with room for at
        // least 32 chunks (a tiny budget is one shard, so it still holds what it can).
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let by_room = (limit_bytes / (32 * entry)).max(1);
        let n = (cores as u64 * 4).min(by_room).min(1 << 10);
        let n = 1usize << (63 - n.leading_zeros());
        let per = limit_bytes / n as u64;
        let items = usize::try_from(per / entry).unwrap_or(usize::MAX).max(1);
        let shards = (0..n)
            .map(|_| {
                RwLock::new(Cache::with(
                    items,
                    per,
                    ByBytes,
                    Mix::default(),
                    Default::default(),
                ))
            })
            .collect();
        Some(BlockCache {
            limit: limit_bytes,
            shards,
            misses: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
        })
    }

    /// Current figures (summed over the cache's shards).
    pub fn stats(&self) -> BlockCacheStats {
        let sum =
            |f: &dyn Fn(&Chunks) -> u64| -> u64 { self.shards.iter().map(|s| f(&s.read())).sum() };
        BlockCacheStats {
            limit_bytes: self.limit,
            used_bytes: sum(&|c| c.weight()),
            blocks: sum(&|c| c.len() as u64),
            hits: sum(&|c| c.hits()),
            misses: self.misses.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
        }
    }

    /// A reader id never handed out before in this process.
    pub(crate) fn new_reader_id() -> u64 {
        NEXT_READER.fetch_add(1, Ordering::Relaxed)
    }

    /// Copy bytes `at..at + out.len()` of chunk `index` of reader `reader` into `out`,
    /// loading the chunk with `load` on a miss and keeping it (two threads missing one
    /// chunk at once both read it; the second copy replaces the first). `None` when the
    /// chunk is shorter than the range asks.
    #[inline]
    pub(crate) fn copy_out<E>(
        &self,
        reader: u64,
        index: u64,
        at: usize,
        out: &mut [u8],
        load: impl FnOnce() -> std::result::Result<Box<[u8]>, E>,
    ) -> std::result::Result<Option<()>, E> {
        let key = (reader, index);
        let shard = &self.shards[self.shard_of(&key)];
        let copy = |c: &[u8], out: &mut [u8]| {
            let src = c.get(at..at.checked_add(out.len())?)?;
            out.copy_from_slice(src);
            Some(())
        };
        if let Some(c) = shard.read().get(&key) {
            return Ok(copy(c, out));
        }
        let c = load()?;
        let done = copy(&c, out);
        self.insert_loaded(reader, index, c);
        Ok(done)
    }

    /// Whether chunk `index` of reader `reader` is held (no hit counted).
    fn holds(&self, reader: u64, index: u64) -> bool {
        let key = (reader, index);
        self.shards[self.shard_of(&key)].read().contains_key(&key)
    }

    /// Keep `bytes`, loaded from the file, as chunk `index` of reader `reader`.
    fn insert_loaded(&self, reader: u64, index: u64, bytes: Box<[u8]>) {
        let key = (reader, index);
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.shards[self.shard_of(&key)].write().insert(key, bytes);
    }

    #[inline]
    fn shard_of(&self, key: &Key) -> usize {
        use std::hash::BuildHasher;
        // The middle bits: the shard's own table probes with the low and top ones.
        let h = Mix::default().hash_one(key);
        (h.rotate_right(32) as usize) & (self.shards.len() - 1)
    }

    /// Count a read that went past the cache (a range over more than two chunks).
    pub(crate) fn count_bypass(&self) {
        self.bypassed.fetch_add(1, Ordering::Relaxed);
    }
}

/// One reader's view of the store's cache: the cache and the reader's unique id.
#[derive(Debug)]
pub(crate) struct DataCache {
    cache: Arc<BlockCache>,
    id: u64,
}

impl DataCache {
    /// A new reader's handle on `cache`, with an id never used before.
    pub(crate) fn new(cache: &Arc<BlockCache>) -> DataCache {
        DataCache {
            cache: Arc::clone(cache),
            id: BlockCache::new_reader_id(),
        }
    }

    /// Run `f` over bytes `[off, off+len)` of `file`, copied from cached chunks
    /// (loading those missing) when the range lies in one chunk or two, or read from the
    /// file past the cache when it spans more (invariant 4). The bytes
    /// are copied into this thread's scratch buffer, so `f` runs with no lock held. The
    /// caller has checked that the range lies in the file.
    #[inline]
    pub(crate) fn with_bytes<R>(
        &self,
        file: &PositionalFile,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let chunk = CHUNK as u64;
        let first = off / chunk;
        let at = (off - first * chunk) as usize;
        with_scratch(|buf| {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let out = &mut buf[..len];
            if at + len > 2 * CHUNK {
                self.cache.count_bypass();
                file.read_at(out, off)?;
            } else if at + len <= CHUNK {
                self.copy(file, first, at, out, off)?;
            } else {
                // Two chunks: the tail of the first and the head of the second. Both
                // missing: one read loads both, since two reads of neighbouring chunks
                // look sequential to the kernel, which then reads ahead (a 4 KiB format
                // 5 block spans two chunks more often than not: 4.3 KiB read per capped
                // get with one read, 18.1 with two; a format 6 block that could not be
                // padded to a page starts in one chunk and ends in the next).
                if !self.cache.holds(self.id, first) && !self.cache.holds(self.id, first + 1) {
                    self.load_pair(file, first)?;
                }
                let (head, tail) = out.split_at_mut(CHUNK - at);
                self.copy(file, first, at, head, off)?;
                self.copy(file, first + 1, 0, tail, off)?;
            }
            f(&buf[..len])
        })
    }

    /// Load chunks `index` and `index + 1` of `file` with one read and keep both (the
    /// second shorter, or absent, at the end of the file).
    fn load_pair(&self, file: &PositionalFile, index: u64) -> Result<()> {
        let mut bytes = read_chunks(file, index, 2)?;
        let second = bytes.split_off(bytes.len().min(CHUNK));
        self.cache
            .insert_loaded(self.id, index, bytes.into_boxed_slice());
        if !second.is_empty() {
            self.cache
                .insert_loaded(self.id, index + 1, second.into_boxed_slice());
        }
        Ok(())
    }

    /// Copy `out.len()` bytes at `at` in chunk `index` of `file` into `out`.
    #[inline]
    fn copy(
        &self,
        file: &PositionalFile,
        index: u64,
        at: usize,
        out: &mut [u8],
        off: u64,
    ) -> Result<()> {
        let len = out.len();
        self.cache
            .copy_out(self.id, index, at, out, || {
                read_chunks(file, index, 1).map(Vec::into_boxed_slice)
            })?
            .ok_or_else(|| past_end(file, off, len))
    }
}

/// `count` chunks of `file` from chunk `index` on, read with one call (fewer at the
/// file's end, the last one shorter).
fn read_chunks(file: &PositionalFile, index: u64, count: u64) -> Result<Vec<u8>> {
    let start = index * CHUNK as u64;
    let n = file.len().saturating_sub(start).min(count * CHUNK as u64) as usize;
    let mut bytes = vec![0u8; n];
    file.read_at(&mut bytes, start)?;
    Ok(bytes)
}

#[cold]
fn past_end(file: &PositionalFile, off: u64, len: usize) -> Error {
    Error::corrupt(
        file.path(),
        off,
        format!("{len} bytes at {off} pass the end of the file"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, b: u8) -> Result<Box<[u8]>, ()> {
        Ok(vec![b; n].into_boxed_slice())
    }

    /// The first byte of chunk `i` of reader `r`, loaded as `n` bytes of `b` on a miss.
    fn first(c: &BlockCache, r: u64, i: u64, n: usize, b: u8) -> u8 {
        let mut out = [0u8; 1];
        c.copy_out(r, i, 0, &mut out, || bytes(n, b))
            .unwrap()
            .unwrap();
        out[0]
    }

    #[test]
    fn hits_misses_and_the_byte_budget_are_counted() {
        let c = BlockCache::new(8 * (CHUNK as u64 + ENTRY_OVERHEAD)).unwrap();
        let r = BlockCache::new_reader_id();
        assert_eq!(first(&c, r, 0, CHUNK, 1), 1);
        // Cached: the loader does not run.
        assert_eq!(first(&c, r, 0, CHUNK, 9), 1);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.blocks), (1, 1, 1));
        assert_eq!(s.used_bytes, CHUNK as u64 + ENTRY_OVERHEAD);
        for i in 1..100 {
            first(&c, r, i, CHUNK, 2);
        }
        let s = c.stats();
        assert!(s.used_bytes <= s.limit_bytes, "{s:?}");
        assert!(s.blocks <= 8, "{s:?}");
        // A range past the chunk's end is refused, not cut short.
        let mut out = [0u8; 8];
        assert_eq!(c.copy_out(r, 500, 4, &mut out, || bytes(10, 3)), Ok(None));
    }

    #[test]
    fn readers_never_share_entries_and_failed_loads_cache_nothing() {
        let c = BlockCache::new(1 << 20).unwrap();
        let (a, b) = (BlockCache::new_reader_id(), BlockCache::new_reader_id());
        assert_ne!(a, b);
        assert_eq!(first(&c, a, 0, 10, 1), 1);
        assert_eq!(first(&c, b, 0, 10, 2), 2);
        let mut out = [0u8; 1];
        assert!(c.copy_out(a, 1, 0, &mut out, || Err("io")).is_err());
        assert_eq!(first(&c, a, 1, 10, 3), 3);
    }

    /// A range over two chunks that are both missing loads them with one read, keeps
    /// both, and later reads of either hit; at the file's end the second is shorter; a
    /// range over three is read past the cache.
    #[test]
    fn a_range_over_two_missing_chunks_loads_both_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..3 * CHUNK + 100).map(|i| (i % 251) as u8).collect();
        #[allow(clippy::disallowed_methods)]
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let file = PositionalFile::new(file, &path, data.len() as u64).unwrap();
        let cache = Arc::new(BlockCache::new(1 << 20).unwrap());
        let dc = DataCache::new(&cache);
        let read = |off: usize, len: usize| {
            dc.with_bytes(&file, off as u64, len, |b| Ok(b.to_vec()))
                .unwrap()
        };
        assert_eq!(read(CHUNK - 10, 20), &data[CHUNK - 10..CHUNK + 10]);
        // Both loaded by the one read; the copies out of them then count as hits.
        let s = cache.stats();
        assert_eq!((s.misses, s.blocks, s.hits), (2, 2, 2), "{s:?}");
        assert_eq!(read(CHUNK + 5, 10), &data[CHUNK + 5..CHUNK + 15]);
        assert_eq!(read(5, 10), &data[5..15]);
        let s = cache.stats();
        assert_eq!((s.misses, s.hits), (2, 4), "{s:?}");
        // The last chunk holds 100 bytes.
        assert_eq!(read(3 * CHUNK - 50, 150), &data[3 * CHUNK - 50..]);
        let s = cache.stats();
        assert_eq!((s.misses, s.blocks), (4, 4), "{s:?}");
        // Longer than a chunk but over two (an unpadded format 6 block): from the
        // cache; over three: past it.
        assert_eq!(read(50, CHUNK + 100), &data[50..CHUNK + 150]);
        assert_eq!(cache.stats().bypassed, 0);
        assert_eq!(read(CHUNK - 1, CHUNK + 2), &data[CHUNK - 1..2 * CHUNK + 1]);
        assert_eq!(cache.stats().bypassed, 1);
    }

    #[test]
    fn a_zero_budget_disables_the_cache() {
        assert!(BlockCache::new(0).is_none());
    }
}
