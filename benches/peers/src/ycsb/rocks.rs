//! RocksDB under YCSB (behind the `rocksdb` feature): WAL on, `sync = false` (the
//! default `WriteOptions`), a 10-bit bloom filter, index and filter blocks in an LRU
//! block cache; no compression on random values (incompressible), LZ4 on JSON-like
//! ones (`--values json`).

use std::path::Path;

use super::kv::Kv;

pub struct Rocks {
    db: rocksdb::DB,
}

fn options(cache: usize) -> rocksdb::Options {
    let mut bo = rocksdb::BlockBasedOptions::default();
    bo.set_block_cache(&rocksdb::Cache::new_lru_cache(cache));
    bo.set_bloom_filter(10.0, false);
    bo.set_cache_index_and_filter_blocks(true);
    bo.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.set_block_based_table_factory(&bo);
    o.set_compression_type(if super::workload::json_values() {
        rocksdb::DBCompressionType::Lz4
    } else {
        rocksdb::DBCompressionType::None
    });
    o
}

/// `WriteBatch`es of 10,000 with the WAL on (sorted keys), then flush and a full
/// compaction.
pub fn load(dir: &Path, sorted: &[u64]) {
    let db = rocksdb::DB::open(&options(64 << 20), dir).unwrap();
    for chunk in sorted.chunks(10_000) {
        let mut b = rocksdb::WriteBatch::default();
        for &n in chunk {
            b.put(super::workload::key(n), super::workload::value(n, 0));
        }
        db.write(b).unwrap();
    }
    db.flush().unwrap();
    db.compact_range::<&[u8], &[u8]>(None, None);
}

impl Rocks {
    pub fn open(dir: &Path, cache: usize) -> Rocks {
        Rocks {
            db: rocksdb::DB::open(&options(cache), dir).unwrap(),
        }
    }
}

impl Kv for Rocks {
    fn read(&self, key: &[u8]) -> usize {
        self.db.get_pinned(key).unwrap().map_or(0, |v| v.len())
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        self.db.put(key, value).unwrap();
    }
    fn scan(&self, start: &[u8], rows: usize) -> usize {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut bytes = 0;
        for _ in 0..rows {
            if !it.valid() {
                break;
            }
            bytes += it.value().unwrap().len();
            it.next();
        }
        bytes
    }
    /// Flush the memtables first (as segstore's `close` does), so a reopening does not
    /// replay the WAL into memory.
    fn close(self: Box<Self>) {
        self.db.flush().unwrap();
    }
}
