//! The systems under YCSB: one adapter each over its plain single-operation API, with the
//! durability a plain put gives without an fsync per write, and each one's bulk load.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use segstore::DiskAccessMode;

/// One system as YCSB's DB binding sees it. Every call is one operation with its own
/// transaction where the system has them (LMDB and redb: a read transaction per read,
/// a write transaction per put), as an application issuing independent requests does.
pub trait Kv: Sync {
    /// The value's length, 0 when the key is missing.
    fn read(&self, key: &[u8]) -> usize;
    /// Insert or overwrite (YCSB's update and insert both write the whole record here).
    fn put(&self, key: &[u8], value: &[u8]);
    /// Up to `rows` rows from `start` on; returns the bytes of the values seen.
    fn scan(&self, start: &[u8], rows: usize) -> usize;
    /// The tables a read meets now, for the report (segstore's segments by level and its
    /// memtables); `None` for the other systems.
    fn state(&self) -> Option<String> {
        None
    }
    /// Close cleanly (segstore's `Store::close`; the others close on drop).
    fn close(self: Box<Self>) {}
}

/// The systems, in print order.
pub const IDS: [&str; 20] = [
    "seg_auto",
    "seg_auto_nocrc",
    "seg_auto_m64",
    "seg_auto_st",
    "seg_auto_t2",
    "seg_auto_pread",
    "seg_auto_v3",
    "seg_auto_v5",
    "seg_auto_v6",
    "seg_auto_v7",
    "seg_auto_zstd",
    "seg_mmap",
    "seg_mmap_v5",
    "seg_mmap_index_only",
    "seg_standard",
    "lmdb",
    "rocksdb",
    "fjall",
    "fjall_buffered",
    "redb",
];

/// The row label of a system.
pub fn label(id: &str) -> &'static str {
    match id {
        "seg_auto" => "segstore auto (default)",
        "seg_auto_nocrc" => "segstore auto, crc_chance=0*",
        "seg_auto_m64" => "segstore auto, 64 MiB memtables*",
        "seg_auto_t2" => "segstore auto, tiers of 2*",
        "seg_auto_st" => "segstore auto, size-tiered*",
        "seg_auto_pread" => "segstore auto, data by pread*",
        "seg_auto_v3" => "segstore auto, format 3*",
        "seg_auto_v5" => "segstore auto, format 5*",
        "seg_auto_v6" => "segstore auto, format 6*",
        "seg_auto_v7" => "segstore auto, format 7*",
        "seg_auto_zstd" => "segstore auto, zstd*",
        "seg_mmap" => "segstore mmap",
        "seg_mmap_v5" => "segstore mmap, format 5*",
        "seg_mmap_index_only" => "segstore mmap_index_only",
        "seg_standard" => "segstore standard",
        "lmdb" => "LMDB (heed, NO_SYNC)",
        "rocksdb" => "RocksDB (WAL, no sync)",
        "fjall" => "fjall (as shipped)",
        "fjall_buffered" => "fjall journal buffered*",
        "redb" => "redb (Durability::None)",
        _ => "?",
    }
}

/// Whether a system counts as a peer for the "best peer" columns: not segstore, and not
/// a variant that loses acknowledged writes on a process kill where its default does not
/// (fjall with its journal held in the process).
pub fn is_peer(id: &str) -> bool {
    !id.starts_with("seg_") && id != "fjall_buffered"
}

/// Systems that run only when named: the other `disk_access_mode`s, `auto` without
/// its data maps, earlier segment formats, other memtable sizes and compaction
/// policies, zstd, and gets that check no checksum.
const ONLY_WHEN_NAMED: [&str; 13] = [
    "seg_auto_nocrc",
    "seg_auto_m64",
    "seg_auto_st",
    "seg_auto_t2",
    "seg_auto_pread",
    "seg_auto_v3",
    "seg_auto_v5",
    "seg_auto_v6",
    "seg_auto_v7",
    "seg_auto_zstd",
    "seg_mmap_v5",
    "seg_mmap_index_only",
    "seg_standard",
];

/// The segment format system `id` writes, where it is not the store's default (or
/// `SEGSTORE_FORMAT`'s): an id ending in `_v3` to `_v7` compares that format with the
/// default side by side, rounds interleaved.
fn format_of(id: &str) -> Option<u16> {
    id.rsplit_once("_v").and_then(|(_, v)| v.parse().ok())
}

/// System `id`'s segment format and compression where they are not the defaults
/// ([`format_of`], [`compression_of`]).
fn variant_options(opts: &mut segstore::SegmentOptions, id: &str) {
    if let Some(v) = format_of(id) {
        opts.format_version = v;
    }
    if let Some(c) = compression_of(id) {
        opts.compression = c;
    }
}

/// The memtable flush size (MiB) of system `id`, where it is not the default: an id
/// ending in `_m64` flushes at 64 MiB (RocksDB's write buffer), beside the default.
fn memtable_mib_of(id: &str) -> Option<usize> {
    id.rsplit_once("_m").and_then(|(_, v)| v.parse().ok())
}

/// System `id`'s compaction where it is not the default (leveled): an id ending in
/// `_st` compacts size-tiered (the default until issue 19), one ending in `_t2`
/// size-tiered with tiers of two segments (`min_threshold = 2`) instead of four.
fn compaction_of(c: &mut segstore::CompactionConfig, id: &str) {
    if id.ends_with("_st") || id.ends_with("_t2") {
        c.strategy = segstore::CompactionStrategy::SizeTiered;
    }
    if id.ends_with("_t2") {
        c.min_threshold = 2;
    }
}

/// The block compression system `id` writes, where it is not the store's default:
/// zstd for an id ending in `_zstd`.
fn compression_of(id: &str) -> Option<segstore::Compression> {
    id.ends_with("_zstd").then_some(segstore::Compression::Zstd)
}

/// The systems to run: `only`'s, or every default one (not [`ONLY_WHEN_NAMED`]).
pub fn systems(only: Option<&str>) -> Vec<&'static str> {
    IDS.into_iter()
        .filter(|id| cfg!(feature = "rocksdb") || *id != "rocksdb")
        .filter(|id| match only {
            Some(o) => o.split(',').any(|o| o == *id),
            None => !ONLY_WHEN_NAMED.contains(id),
        })
        .collect()
}

/// The data set of system `id` under `root`: one per value kind, so a run with
/// `--values json` never reuses random values' data (or the other way round).
pub fn dir(root: &Path, id: &str) -> PathBuf {
    root.join(format!("ycsb_{id}{}", kind_suffix()))
}

/// The file recording that `id`'s data set under `root` is loaded (its load seconds).
pub fn marker(root: &Path, id: &str) -> PathBuf {
    root.join(format!("ycsb_{id}{}.loaded", kind_suffix()))
}

/// `""` for random values, `"_json"` for JSON-like ones: in data set and marker names.
fn kind_suffix() -> &'static str {
    if super::workload::json_values() {
        "_json"
    } else {
        ""
    }
}

/// Bulk-load items `sorted` (item numbers in key order) with each system's fastest
/// documented bulk path that keeps its normal durability, then flush and compact fully.
pub fn load(id: &str, dir: &Path, sorted: &[u64]) {
    std::fs::create_dir_all(dir).unwrap();
    match id {
        "seg_auto"
        | "seg_auto_nocrc"
        | "seg_auto_m64"
        | "seg_auto_t2"
        | "seg_auto_st"
        | "seg_auto_pread"
        | "seg_auto_v3"
        | "seg_auto_v5"
        | "seg_auto_v6"
        | "seg_auto_v7"
        | "seg_auto_zstd"
        | "seg_mmap"
        | "seg_mmap_v5"
        | "seg_mmap_index_only"
        | "seg_standard" => load_seg(dir, sorted, id),
        "lmdb" => load_lmdb(dir, sorted),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => super::rocks::load(dir, sorted),
        "fjall" | "fjall_buffered" => load_fjall(dir, sorted, id == "fjall_buffered"),
        "redb" => load_redb(dir, sorted),
        other => panic!("unknown system {other}"),
    }
}

/// Open a loaded system; `cache` bytes for the systems with a block or page cache of
/// their own (RocksDB, fjall, redb, and segstore's block cache, which serves its
/// positional data reads: `auto`; segstore keeps its default index cache).
pub fn open(id: &str, dir: &Path, cache: usize) -> Box<dyn Kv> {
    match id {
        "seg_auto" => Box::new(Seg::open(dir, DiskAccessMode::Auto, cache)),
        "seg_auto_pread" => Box::new(Seg::open_with(dir, DiskAccessMode::Auto, cache, 0)),
        "seg_auto_m64" | "seg_auto_t2" | "seg_auto_st" | "seg_auto_v3" | "seg_auto_v5"
        | "seg_auto_v6" | "seg_auto_v7" | "seg_auto_zstd" | "seg_auto_nocrc" => {
            Box::new(Seg::variant(dir, DiskAccessMode::Auto, id, cache))
        }
        "seg_mmap" => Box::new(Seg::open(dir, DiskAccessMode::Mmap, cache)),
        "seg_mmap_v5" => Box::new(Seg::variant(dir, DiskAccessMode::Mmap, id, cache)),
        "seg_mmap_index_only" => Box::new(Seg::open(dir, DiskAccessMode::MmapIndexOnly, cache)),
        "seg_standard" => Box::new(Seg::open(dir, DiskAccessMode::Standard, cache)),
        "lmdb" => Box::new(Lmdb::open(dir)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Box::new(super::rocks::Rocks::open(dir, cache)),
        "fjall" | "fjall_buffered" => Box::new(Fjall::open(dir, cache, id == "fjall_buffered")),
        "redb" => Box::new(Redb::open(dir, cache)),
        other => panic!("unknown system {other}"),
    }
}

fn kv(n: u64) -> ([u8; 16], [u8; super::workload::VALUE_LEN]) {
    (super::workload::key(n), super::workload::value(n, 0))
}

// ---------------------------------------------------------------- segstore

const SEG_TABLE: &str = "ycsb";

struct Seg {
    store: segstore::Store,
    t: Arc<segstore::Table>,
}

/// `auto_data_map_percent`: the share of memory `auto` may fill with mapped data
/// files (0: none, `auto`'s data read with `pread` through the block cache as before
/// that rule).
fn seg_config(mode: DiskAccessMode, cache: usize, auto_data_map_percent: u8) -> segstore::Config {
    let mut c = segstore::Config::default();
    c.disk_access_mode = mode;
    c.memory.block_cache_mb = (cache >> 20) as u64;
    // The peers' caches hold blocks uncompressed (RocksDB's block cache): so does this.
    c.memory.unpacked_cache_mb = (cache >> 20) as u64;
    c.memory.auto_data_map_percent = auto_data_map_percent;
    // As RocksDB here: LZ4 on JSON-like values, none on random ones (incompressible).
    if super::workload::json_values() {
        c.segment.compression = segstore::Compression::Lz4;
    }
    // `SEGSTORE_FORMAT=3` writes the previous segment format, to compare the two.
    if let Some(v) = std::env::var("SEGSTORE_FORMAT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.segment.format_version = v;
    }
    c
}

impl Seg {
    fn open(dir: &Path, mode: DiskAccessMode, cache: usize) -> Seg {
        let percent = segstore::MemoryOptions::default().auto_data_map_percent;
        Self::open_with(dir, mode, cache, percent)
    }

    fn open_with(dir: &Path, mode: DiskAccessMode, cache: usize, auto_data_map_percent: u8) -> Seg {
        Self::with_config(dir, seg_config(mode, cache, auto_data_map_percent))
    }

    /// `mode` writing the format and compression of `id` ([`variant_options`]).
    fn variant(dir: &Path, mode: DiskAccessMode, id: &str, cache: usize) -> Seg {
        let percent = segstore::MemoryOptions::default().auto_data_map_percent;
        let mut config = seg_config(mode, cache, percent);
        variant_options(&mut config.segment, id);
        if let Some(mib) = memtable_mib_of(id) {
            config.table.memtable_flush_bytes = mib << 20;
        }
        compaction_of(&mut config.table.compaction, id);
        // `_nocrc`: gets check no checksum (`crc_check_chance: 0`, as LMDB has none),
        // so a get's first read of a mapped block does not sum the whole block.
        if id.ends_with("_nocrc") {
            config.crc_check_chance = 0.0;
        }
        Self::with_config(dir, config)
    }

    fn with_config(dir: &Path, config: segstore::Config) -> Seg {
        let store = segstore::Store::open(dir, config).unwrap();
        let t = store.table(SEG_TABLE).unwrap();
        Seg { store, t }
    }
}

/// segstore's bulk path (README "Bulk load"): one segment written in key order with
/// `SegmentWriter` beside the store, adopted with `Table::ingest` (verified, linked in,
/// made durable), then the writer's own files deleted and the store closed. The table
/// is then one segment, as a full compaction would leave it.
fn load_seg(dir: &Path, sorted: &[u64], id: &str) {
    use segstore::segment::{Component, SegmentName, SegmentWriter};
    let s = Seg::open(dir, DiskAccessMode::Auto, 1 << 30);
    let staging = dir.with_extension("staging");
    std::fs::create_dir_all(&staging).unwrap();
    let ts = s.store.now().unwrap();
    let name = SegmentName::new("load", 1).unwrap();
    // The store's own segment options (LZ4 on JSON-like values).
    let mut opts = seg_config(DiskAccessMode::Auto, 0, 0).segment;
    variant_options(&mut opts, id);
    let rules = segstore::FileRules::posix();
    let mut w = SegmentWriter::create(&staging, name.clone(), &opts, &rules).unwrap();
    for &n in sorted {
        let (k, v) = kv(n);
        w.add(&k, &v, ts, false).unwrap();
    }
    w.finish().unwrap();
    s.t.ingest(&[name.path(&staging, Component::Data)]).unwrap();
    std::fs::remove_dir_all(&staging).unwrap();
    Box::new(s).close();
}

/// Which segments a scan meets: each one's level (0 for size-tiered) and keys. A
/// compaction may replace segments between the two lists: a segment the table no
/// longer lists is `L?`, not a level 0 segment it never was.
fn segment_shape(store: &segstore::Store, t: &segstore::Table) -> Vec<String> {
    let levels = t.segment_levels();
    store
        .segment_stats()
        .iter()
        .map(|s| {
            let level = levels.iter().find(|(id, _)| *id == s.id);
            let level = level.map_or("?".to_string(), |l| l.1.to_string());
            format!("L{level} {}K", s.entries / 1000)
        })
        .collect()
}

impl Kv for Seg {
    fn state(&self) -> Option<String> {
        let ts = self.t.stats();
        Some(format!(
            "{}; memtable {}K keys, {} frozen; {} compactions, {} scan seeks; side run {}K \
             cells, {} scans read one",
            segment_shape(&self.store, &self.t).join(", "),
            ts.memtable_keys / 1000,
            ts.frozen_memtables,
            ts.compactions,
            ts.scan_seeks,
            ts.side_run_cells / 1000,
            ts.side_run_scans
        ))
    }
    fn read(&self, key: &[u8]) -> usize {
        self.t.get(key).unwrap().map_or(0, |v| v.len())
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        self.t.put(key, value).unwrap();
    }
    fn scan(&self, start: &[u8], rows: usize) -> usize {
        let mut s = self.t.scan(start..).unwrap();
        let mut bytes = 0;
        for _ in 0..rows {
            match s.next_with(|_, v| v.len()) {
                Some(n) => bytes += n.unwrap(),
                None => break,
            }
        }
        bytes
    }
    fn close(self: Box<Self>) {
        let Seg { store, t } = *self;
        // How the data was read: `auto` maps data files while they fit in its data map
        // budget (`memory.auto_data_map_percent`), and reads the rest positionally.
        let segs = store.segment_stats();
        let mapped = segs
            .iter()
            .filter(|s| s.data == segstore::AccessMode::Mmap)
            .count();
        let paged = segs
            .iter()
            .filter(|s| s.point_lookup == segstore::segment::PointLookup::Pages)
            .count();
        // The state the last phases ran in: the active memtable's keys (a scan merges
        // those in its range) and the segments a read may search.
        let ts = t.stats();
        eprintln!(
            "segstore {}: {mapped} of {} segments' data mapped at close, {paged} searched \
             through the page index; before close {} keys in the active memtable, {} frozen \
             memtables, {} segments",
            store.stats().modes.configured,
            segs.len(),
            ts.memtable_keys,
            ts.frozen_memtables,
            ts.segments
        );
        eprintln!(
            "segstore {}: segments {}",
            store.stats().modes.configured,
            segment_shape(&store, &t).join(", ")
        );
        if let Some(u) = store
            .stats()
            .unpacked_cache
            .filter(|u| u.hits + u.misses > 0)
        {
            eprintln!(
                "segstore {}: decompressed blocks kept for gets: {} hits, {} misses, {} blocks \
                 of {:.1} MiB held (budget {:.0} MiB)",
                store.stats().modes.configured,
                u.hits,
                u.misses,
                u.blocks,
                u.used_bytes as f64 / f64::from(1 << 20),
                u.limit_bytes as f64 / f64::from(1 << 20),
            );
        }
        drop(t);
        store.close().unwrap();
    }
}

// ---------------------------------------------------------------- LMDB (heed)

struct Lmdb {
    env: heed::Env,
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
}

impl Lmdb {
    fn open(dir: &Path) -> Lmdb {
        // SAFETY: heed requires that the environment is opened once per process and not
        // modified by others; each system is opened once at a time. `NO_SYNC`: a commit
        // writes its pages to the OS without fsync (what a plain put gets from the
        // others), so a process kill loses nothing committed, a power loss may.
        let env = unsafe {
            heed::EnvOpenOptions::new()
                .map_size(64 << 30)
                .max_dbs(1)
                .flags(heed::EnvFlags::NO_SYNC)
                .open(dir)
                .unwrap()
        };
        let mut w = env.write_txn().unwrap();
        let db = env.create_database(&mut w, None).unwrap();
        w.commit().unwrap();
        Lmdb { env, db }
    }
}

/// One write transaction with `APPEND` (keys in order), then a sync.
fn load_lmdb(dir: &Path, sorted: &[u64]) {
    let l = Lmdb::open(dir);
    let mut w = l.env.write_txn().unwrap();
    for &n in sorted {
        let (k, v) = kv(n);
        l.db.put_with_flags(&mut w, heed::PutFlags::APPEND, &k, &v)
            .unwrap();
    }
    w.commit().unwrap();
    l.env.force_sync().unwrap();
}

impl Kv for Lmdb {
    fn read(&self, key: &[u8]) -> usize {
        let txn = self.env.read_txn().unwrap();
        self.db.get(&txn, key).unwrap().map_or(0, <[u8]>::len)
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        let mut w = self.env.write_txn().unwrap();
        self.db.put(&mut w, key, value).unwrap();
        w.commit().unwrap();
    }
    fn scan(&self, start: &[u8], rows: usize) -> usize {
        let txn = self.env.read_txn().unwrap();
        let range = (std::ops::Bound::Included(start), std::ops::Bound::Unbounded);
        let mut bytes = 0;
        for e in self.db.range(&txn, &range).unwrap().take(rows) {
            bytes += e.unwrap().1.len();
        }
        bytes
    }
}

// ---------------------------------------------------------------- fjall

struct Fjall {
    _db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Fjall {
    /// `buffered`: `manual_journal_persist(true)`, so a write leaves its journal entry
    /// in fjall's 8 KiB `BufWriter` (in the process) until the buffer fills; as shipped,
    /// every write flushes the journal to the OS (`PersistMode::Buffer`).
    fn open(dir: &Path, cache: usize, buffered: bool) -> Fjall {
        let db = fjall::Database::builder(dir)
            .cache_size(cache as u64)
            .manual_journal_persist(buffered)
            .open()
            .unwrap();
        let ks = db
            .keyspace(SEG_TABLE, || {
                fjall::KeyspaceCreateOptions::default().manual_journal_persist(buffered)
            })
            .unwrap();
        Fjall { _db: db, ks }
    }
}

/// `Keyspace::start_ingestion` (sorted input written straight into tables), then a
/// major compaction and a journal sync.
fn load_fjall(dir: &Path, sorted: &[u64], buffered: bool) {
    let f = Fjall::open(dir, 64 << 20, buffered);
    let mut ing = f.ks.start_ingestion().unwrap();
    for &n in sorted {
        let (k, v) = kv(n);
        ing.write(k.to_vec(), v.to_vec()).unwrap();
    }
    ing.finish().unwrap();
    f.ks.major_compact().unwrap();
    f._db.persist(fjall::PersistMode::SyncAll).unwrap();
}

impl Kv for Fjall {
    fn read(&self, key: &[u8]) -> usize {
        self.ks.get(key).unwrap().map_or(0, |v| v.len())
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        self.ks.insert(key, value).unwrap();
    }
    fn scan(&self, start: &[u8], rows: usize) -> usize {
        let mut bytes = 0;
        for g in self.ks.range(start..).take(rows) {
            bytes += g.value().unwrap().len();
        }
        bytes
    }
    /// Flush the memtable to a table first (as segstore's `close` flushes its
    /// memtables), so a reopening does not replay the journal into memory.
    fn close(self: Box<Self>) {
        self.ks.rotate_memtable_and_wait().unwrap();
        self._db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
}

// ---------------------------------------------------------------- redb

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("ycsb");

struct Redb {
    db: redb::Database,
}

fn redb_path(dir: &Path) -> PathBuf {
    dir.join("ycsb.redb")
}

impl Redb {
    fn open(dir: &Path, cache: usize) -> Redb {
        Redb {
            db: redb::Database::builder()
                .set_cache_size(cache)
                .create(redb_path(dir))
                .unwrap(),
        }
    }
}

/// One write transaction (keys in order), committed durably (one fsync).
fn load_redb(dir: &Path, sorted: &[u64]) {
    let r = Redb::open(dir, 64 << 20);
    let w = r.db.begin_write().unwrap();
    {
        let mut t = w.open_table(REDB_TABLE).unwrap();
        for &n in sorted {
            let (k, v) = kv(n);
            t.insert(&k[..], &v[..]).unwrap();
        }
    }
    w.commit().unwrap();
}

impl Kv for Redb {
    fn read(&self, key: &[u8]) -> usize {
        use redb::ReadableDatabase;
        let txn = self.db.begin_read().unwrap();
        let t = txn.open_table(REDB_TABLE).unwrap();
        t.get(key).unwrap().map_or(0, |v| v.value().len())
    }
    /// `Durability::None`: redb's only commit without an fsync. Such a commit is not in
    /// the file's header until a later durable commit, so a process kill loses it
    /// (redb has no mode that writes to the OS without fsync and survives a kill).
    fn put(&self, key: &[u8], value: &[u8]) {
        let mut w = self.db.begin_write().unwrap();
        w.set_durability(redb::Durability::None).unwrap();
        {
            let mut t = w.open_table(REDB_TABLE).unwrap();
            t.insert(key, value).unwrap();
        }
        w.commit().unwrap();
    }
    fn scan(&self, start: &[u8], rows: usize) -> usize {
        use redb::ReadableDatabase;
        let txn = self.db.begin_read().unwrap();
        let t = txn.open_table(REDB_TABLE).unwrap();
        let mut bytes = 0;
        for e in t.range(start..).unwrap().take(rows) {
            bytes += e.unwrap().1.value().len();
        }
        bytes
    }
    /// A durable commit before closing, so the non-durable ones are kept.
    fn close(self: Box<Self>) {
        let w = self.db.begin_write().unwrap();
        w.commit().unwrap();
    }
}
