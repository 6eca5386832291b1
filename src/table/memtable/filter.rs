//! A memtable's key filter: a concurrent, insert-only bloom filter over the keys of its
//! ordered map, so a point read skips a memtable that cannot hold its key without
//! searching the map (issue 19: with several non-empty memtables, their searches
//! were most of a get's time).
//!
//! `fastbloom::AtomicBloomFilter` (atomic words, `fetch_or` inserts, relaxed loads),
//! fed the segment filter's hash ([`crate::format::key_hash`], xxh3): one hash serves
//! every memtable and every segment of a read.
//!
//! # Sizing
//! [`BITS_PER_KEY`] bits per key of the densest memtable a flush threshold allows,
//! every cell charged [`super::CELL_OVERHEAD`] bytes and nothing else: `flush_bytes /
//! CELL_OVERHEAD * BITS_PER_KEY` bits (a 64 MiB threshold: 1.25 MiB of filter), at most
//! [`MAX_BITS`]. Real cells are larger (a 16-byte key with a 100-byte value is charged
//! 180 bytes: 28 bits per key), so the false positive rate is lower than the 1% that
//! 10 bits per key give; a memtable that grows past its threshold only raises it.
//!
//! # No false negatives under concurrency
//! A key's bits are set before its node is created ([`Memtable::insert`]
//! inserts into the filter first), by the thread that then links the node, and bits are
//! never cleared. A reader that should find a version of the key knows of it through
//! some synchronisation with that writer: the write was acknowledged before the read
//! began (the visibility number and `maybe_cells` are published with release and read
//! with acquire), or the reader's sequence number covers it (a read view, registered
//! after the write was visible), or an earlier read found it. Each of these puts the
//! writer's `fetch_or` before the reader's filter load (happens-before); by write-read
//! coherence the load then reads that `fetch_or` or a later modification of the word,
//! and every modification is a `fetch_or`, so the bits are there: relaxed operations
//! suffice. A read racing with an insert it has no such order with may miss the key,
//! exactly as a search of the map that ran just before the node was linked would: that
//! read is ordered before the write. An overwrite of a key already present (its node
//! found) sets no bits: they were set before that node was linked, and finding the
//! node orders the finder after them.
//!
//! [`Memtable::insert`]: super::Memtable::insert

use fastbloom::AtomicBloomFilter;

/// Bits per key at the densest memtable (see the module docs' "Sizing").
pub const BITS_PER_KEY: usize = 10;

/// The largest filter: 64 MiB, whatever the flush threshold.
pub const MAX_BITS: usize = 1 << 29;

/// The smallest filter (a tiny flush threshold).
const MIN_BITS: usize = 1 << 12;

/// Probes per key: `round(BITS_PER_KEY * ln 2)`.
const HASHES: u32 = 7;

/// A memtable's key filter. See the module docs.
#[derive(Debug)]
pub(super) struct KeyFilter {
    bloom: AtomicBloomFilter,
}

impl KeyFilter {
    /// A filter for a memtable flushed at `flush_bytes`.
    pub(super) fn for_flush_bytes(flush_bytes: usize) -> KeyFilter {
        KeyFilter::with_bits((flush_bytes / super::CELL_OVERHEAD).saturating_mul(BITS_PER_KEY))
    }

    /// A filter of about `bits` bits (clamped to `MIN_BITS..=MAX_BITS`).
    pub(super) fn with_bits(bits: usize) -> KeyFilter {
        KeyFilter {
            bloom: AtomicBloomFilter::with_num_bits(bits.clamp(MIN_BITS, MAX_BITS)).hashes(HASHES),
        }
    }

    /// Bits of the filter.
    pub(super) fn num_bits(&self) -> usize {
        self.bloom.num_bits()
    }

    /// Add the key whose [`crate::format::key_hash`] is `h`.
    #[inline]
    pub(super) fn insert(&self, h: u64) {
        self.bloom.insert_hash(h);
    }

    /// Start loading the word of the filter's first probe for hash `h` (fastbloom's
    /// `index`: the high half of `h * num_bits`), so several memtables' misses overlap.
    /// Only a hint: a wrong guess costs nothing but the load.
    #[inline]
    pub(super) fn prefetch(&self, h: u64) {
        let bit = ((u128::from(h) * self.bloom.num_bits() as u128) >> 64) as usize;
        crate::io::prefetch::prefetch_read(self.bloom.as_slice(), bit / 64);
    }

    /// False only if no key with hash `h` was added (module docs: before the read, in
    /// the happens-before sense).
    #[inline]
    pub(super) fn may_contain(&self, h: u64) -> bool {
        self.bloom.contains_hash(h)
    }
}
