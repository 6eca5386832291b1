//! Settings: `disk_access_mode`, memory residency (`lock_memory`, `huge_pages`, the
//! mapping budget) and the knobs of the segment format.
//!
//! `disk_access_mode` resolves into two effective modes, one for data files and one for
//! index files (DESIGN.md, access mode table):
//!
//! | value | data | index |
//! | --- | --- | --- |
//! | `auto` (default) | mmap while it fits in the data map budget, then standard | mmap on 64-bit, standard on 32-bit (and past the mapping budget) |
//! | `mmap` | mmap | mmap |
//! | `mmap_index_only` | standard | mmap |
//! | `standard` | standard | standard |
//!
//! `auto`'s data rule: a store maps a data file under `auto` while the data files `auto`
//! has mapped in the process, this one included, stay within
//! [`MemoryOptions::auto_data_map_percent`] (default 50%) of the memory available to the
//! process (physical memory, or its memory cgroup's limit where that is lower;
//! `io::memlimit`), and reads it with positional reads otherwise (`io::data_budget`).
//! [`DiskAccessMode::resolve`] gives the modes before that rule (data standard); a
//! segment's `residency().data` says what it got. Data that fits in memory is read in
//! place; data that does not is never mapped, which is what Cassandra 5 learnt when it
//! made `mmap_index_only` its default. A bare [`crate::segment::SegmentReader`] opened
//! without a data map budget in its options maps no data under `auto`.
//!
//! Past the mapping budget (a share of `vm.max_map_count`, see [`MemoryOptions`]) `auto`
//! opens new segments with standard access; `mmap` and `mmap_index_only` refuse to open
//! them with `Error::MapBudgetExhausted`. Likewise for a map the kernel refuses under
//! `lock_memory: all` (`mlockall(MCL_FUTURE)` past `RLIMIT_MEMLOCK`): `auto` reads that
//! file with standard access, the other two fail with `Error::MapRefusedUnderLock`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How segment files are read, as configured. See the module docs for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskAccessMode {
    /// Index mapped on 64-bit platforms; data mapped while it fits in a share of the
    /// process's memory ([`MemoryOptions::auto_data_map_percent`]), read with
    /// positional reads past it.
    #[default]
    Auto,
    /// Data and index mapped.
    Mmap,
    /// Index mapped, data read with positional reads.
    MmapIndexOnly,
    /// Everything read with positional reads.
    Standard,
}

/// The valid spellings, in the order the docs list them.
pub const DISK_ACCESS_MODES: [&str; 4] = ["auto", "mmap", "mmap_index_only", "standard"];

impl DiskAccessMode {
    /// Resolve into the effective modes for data and index files on this platform.
    pub fn resolve(self) -> ResolvedModes {
        let sixty_four = cfg!(target_pointer_width = "64");
        let (data, index) = match self {
            DiskAccessMode::Auto if sixty_four => (AccessMode::Standard, AccessMode::Mmap),
            DiskAccessMode::Auto => (AccessMode::Standard, AccessMode::Standard),
            DiskAccessMode::Mmap => (AccessMode::Mmap, AccessMode::Mmap),
            DiskAccessMode::MmapIndexOnly => (AccessMode::Standard, AccessMode::Mmap),
            DiskAccessMode::Standard => (AccessMode::Standard, AccessMode::Standard),
        };
        ResolvedModes {
            configured: self,
            data,
            index,
        }
    }

    /// The configuration spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskAccessMode::Auto => "auto",
            DiskAccessMode::Mmap => "mmap",
            DiskAccessMode::MmapIndexOnly => "mmap_index_only",
            DiskAccessMode::Standard => "standard",
        }
    }

    /// All modes, for tests and tools that sweep them.
    pub fn all() -> [DiskAccessMode; 4] {
        [
            DiskAccessMode::Auto,
            DiskAccessMode::Mmap,
            DiskAccessMode::MmapIndexOnly,
            DiskAccessMode::Standard,
        ]
    }
}

impl fmt::Display for DiskAccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for DiskAccessMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "auto" => Ok(DiskAccessMode::Auto),
            "mmap" => Ok(DiskAccessMode::Mmap),
            "mmap_index_only" => Ok(DiskAccessMode::MmapIndexOnly),
            "standard" => Ok(DiskAccessMode::Standard),
            other => Err(Error::InvalidConfig {
                setting: "disk_access_mode",
                value: other.to_string(),
                reason: format!("valid values are {}", DISK_ACCESS_MODES.join(", ")),
            }),
        }
    }
}

/// How one kind of file is actually read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessMode {
    /// Through a read-only memory map.
    Mmap,
    /// Through positional reads (`pread`) into reused buffers.
    Standard,
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            AccessMode::Mmap => "mmap",
            AccessMode::Standard => "standard",
        })
    }
}

/// `disk_access_mode` resolved for this platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedModes {
    /// What was configured.
    pub configured: DiskAccessMode,
    /// How data files are read.
    pub data: AccessMode,
    /// How index files are read.
    pub index: AccessMode,
}

impl ResolvedModes {
    /// Log the resolution once (callers log at open).
    pub fn log(&self) {
        tracing::info!(
            disk_access_mode = %self.configured,
            data = %self.data,
            index = %self.index,
            "disk_access_mode resolved: data files {}, index files {}",
            self.data,
            self.index
        );
    }

    /// The same modes with the index forced to standard access (used past the mapping
    /// budget in `auto` mode).
    pub fn without_mmap(self) -> Self {
        ResolvedModes {
            data: AccessMode::Standard,
            index: AccessMode::Standard,
            ..self
        }
    }
}

/// Which memory to pin in RAM with `mlock` (configuration `lock_memory`). Best effort:
/// a refused lock is reported (see `io::residency::LockReport`) and logged, never fatal.
/// Under `all`, a later map the kernel refuses to lock fails the open in the modes that
/// promise maps (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMemory {
    /// Lock nothing.
    #[default]
    None,
    /// `mlock` each index map (file map or anonymous copy) as it is opened. An index read
    /// with standard access is not locked: the open warns once and the stats count it
    /// (`indexes_not_locked`).
    Index,
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)`: the whole process, including every later map,
    /// so `RLIMIT_MEMLOCK` must hold the process and every segment file it will map.
    All,
}

/// The valid spellings of [`LockMemory`].
pub const LOCK_MEMORY_VALUES: [&str; 3] = ["none", "index", "all"];

impl LockMemory {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMemory::None => "none",
            LockMemory::Index => "index",
            LockMemory::All => "all",
        }
    }

    /// Every value, for tests and tools that sweep them.
    pub fn all() -> [LockMemory; 3] {
        [LockMemory::None, LockMemory::Index, LockMemory::All]
    }
}

impl fmt::Display for LockMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for LockMemory {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "none" => Ok(LockMemory::None),
            "index" => Ok(LockMemory::Index),
            "all" => Ok(LockMemory::All),
            other => Err(Error::InvalidConfig {
                setting: "lock_memory",
                value: other.to_string(),
                reason: format!("valid values are {}", LOCK_MEMORY_VALUES.join(", ")),
            }),
        }
    }
}

/// Transparent huge pages for maps (configuration `huge_pages`). What the kernel actually
/// granted is read back from `/proc/self/smaps`, never assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HugePages {
    /// No huge page advice.
    #[default]
    Off,
    /// `madvise(MADV_HUGEPAGE)` on every map (data and index). File maps get huge pages
    /// only where the kernel and file system can back page cache with 2 MiB folios.
    Advise,
    /// Copy each index file into 2 MiB-aligned private anonymous memory advised with
    /// `MADV_HUGEPAGE`, for kernels that cannot back file maps with huge pages. Costs the
    /// index size in RAM (rounded up to 2 MiB) per open index; data maps are left alone.
    AnonymousIndex,
}

/// The valid spellings of [`HugePages`].
pub const HUGE_PAGES_VALUES: [&str; 3] = ["off", "advise", "anonymous_index"];

impl HugePages {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HugePages::Off => "off",
            HugePages::Advise => "advise",
            HugePages::AnonymousIndex => "anonymous_index",
        }
    }

    /// Every value, for tests and tools that sweep them.
    pub fn all() -> [HugePages; 3] {
        [HugePages::Off, HugePages::Advise, HugePages::AnonymousIndex]
    }
}

impl fmt::Display for HugePages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for HugePages {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "off" => Ok(HugePages::Off),
            "advise" => Ok(HugePages::Advise),
            "anonymous_index" => Ok(HugePages::AnonymousIndex),
            other => Err(Error::InvalidConfig {
                setting: "huge_pages",
                value: other.to_string(),
                reason: format!("valid values are {}", HUGE_PAGES_VALUES.join(", ")),
            }),
        }
    }
}

/// Memory residency settings, as configured (the store turns them into
/// `segment::ReaderOptions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MemoryOptions {
    /// What to `mlock`.
    pub lock_memory: LockMemory,
    /// Huge page policy for maps.
    pub huge_pages: HugePages,
    /// Share of `vm.max_map_count`, in percent (1 to 100), that segment maps may use.
    /// Past it, `auto` falls back to standard access and `mmap` modes fail to open with
    /// `Error::MapBudgetExhausted`.
    pub map_budget_percent: u8,
    /// MiB of index blocks kept in memory, shared by all segments whose index file is
    /// read with positional reads (`standard`, or `auto` past the mapping budget), so a
    /// lookup there costs one read instead of two. 0 keeps none. Blocks stay until their
    /// segment closes; past the budget, blocks are read per lookup.
    pub index_cache_mb: u64,
    /// MiB of data file chunks (4 KiB, aligned) kept in memory for point reads of data
    /// read with positional reads (`standard`, `mmap_index_only`, and `auto` past its data
    /// map budget), shared by all segments of the store, evicted when full (weighed in
    /// bytes). A get whose record is cached makes no system call. 0 disables it: every
    /// such get is a `pread`. Scans and `verify` read the files and leave the cache
    /// alone.
    pub block_cache_mb: u64,
    /// MiB of decompressed data blocks of compressed segments (`segment.compression`
    /// `lz4` or `zstd`), shared by all segments of the store, evicted when full (weighed
    /// in bytes). Gets fill it: a get whose block is held decompresses nothing, and a
    /// block enters only after its checksum passed. The table's scans read the blocks
    /// held without filling it; compaction, repair and `verify` leave it alone. 0
    /// disables it: every read of a compressed block decompresses it.
    pub unpacked_cache_mb: u64,
    /// Percent (0 to 100) of the memory available to the process (physical memory, or
    /// its memory cgroup's limit where lower) that `auto` may fill with mapped data
    /// files, counted over every store of the process. A data file that fits in what
    /// is left is mapped (a get reads its record in place: no system call, no copy);
    /// one that does not is read with positional reads through the block cache, as
    /// all data was before. 0 maps no data under `auto`, and neither does `auto`
    /// under `lock_memory: all` (it would lock every mapped data page). The other modes
    /// ignore it.
    pub auto_data_map_percent: u8,
    /// MiB that every table's side runs may hold together (level 0 merged in memory for
    /// forward scans: `TableConfig::side_run_bytes` bounds each table's own), runs
    /// being built included. A run that does not fit in what is left is not built: its
    /// table's scans read the segments it would hold, as without a run, until the
    /// table's next flush or compaction tries again. 0 keeps none.
    pub side_run_mb: u64,
}

/// Default share of `vm.max_map_count` for segment maps (the rest is left to the
/// allocator, thread stacks, libraries and whatever else shares the process).
pub const DEFAULT_MAP_BUDGET_PERCENT: u8 = 50;

/// Largest accepted `index_cache_mb`, `block_cache_mb`, `unpacked_cache_mb` and
/// `side_run_mb` (1 PiB), so the byte count cannot overflow.
pub const MAX_INDEX_CACHE_MB: u64 = 1 << 30;

/// Default index cache budget in MiB: the index of about 4 million 16-byte keys.
pub const DEFAULT_INDEX_CACHE_MB: u64 = 128;

/// Default block cache budget in MiB: about a million records of 100-byte values.
pub const DEFAULT_BLOCK_CACHE_MB: u64 = 128;

/// Default budget in MiB for decompressed blocks of compressed segments (the block
/// cache's): some 32,000 blocks of 4 KiB. Only compressed segments fill it.
pub const DEFAULT_UNPACKED_CACHE_MB: u64 = 128;

/// Default budget in MiB for every table's side runs together: four tables' runs at
/// their default bound (`TableConfig::side_run_bytes`, 64 MiB).
pub const DEFAULT_SIDE_RUN_MB: u64 = 256;

/// Default share of the process's memory that `auto` may fill with mapped data files:
/// half, leaving the rest to the index maps, the memtables, the caches and the
/// application.
pub const DEFAULT_AUTO_DATA_MAP_PERCENT: u8 = 50;

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            lock_memory: LockMemory::None,
            huge_pages: HugePages::Off,
            map_budget_percent: DEFAULT_MAP_BUDGET_PERCENT,
            index_cache_mb: DEFAULT_INDEX_CACHE_MB,
            block_cache_mb: DEFAULT_BLOCK_CACHE_MB,
            unpacked_cache_mb: DEFAULT_UNPACKED_CACHE_MB,
            auto_data_map_percent: DEFAULT_AUTO_DATA_MAP_PERCENT,
            side_run_mb: DEFAULT_SIDE_RUN_MB,
        }
    }
}

impl MemoryOptions {
    /// Check the options, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        if !(1..=100).contains(&self.map_budget_percent) {
            return Err(Error::InvalidConfig {
                setting: "map_budget_percent",
                value: self.map_budget_percent.to_string(),
                reason: "must be between 1 and 100".into(),
            });
        }
        if self.auto_data_map_percent > 100 {
            return Err(Error::InvalidConfig {
                setting: "auto_data_map_percent",
                value: self.auto_data_map_percent.to_string(),
                reason: "must be between 0 and 100".into(),
            });
        }
        for (setting, mb) in [
            ("index_cache_mb", self.index_cache_mb),
            ("block_cache_mb", self.block_cache_mb),
            ("unpacked_cache_mb", self.unpacked_cache_mb),
            ("side_run_mb", self.side_run_mb),
        ] {
            if mb > MAX_INDEX_CACHE_MB {
                return Err(Error::InvalidConfig {
                    setting,
                    value: mb.to_string(),
                    reason: format!("must be at most {MAX_INDEX_CACHE_MB} (1 PiB)"),
                });
            }
        }
        Ok(())
    }
}

/// How data blocks (formats 4 to 8) are stored ([`SegmentOptions::compression`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// As is.
    #[default]
    None,
    /// LZ4 block compression (`lz4_flex`); a block that would not shrink by an eighth
    /// is stored as is.
    Lz4,
    /// zstd at level 3 (the `zstd` crate, the reference library): smaller than LZ4 on
    /// compressible values, slower to write and to read; a block that would not shrink
    /// by an eighth is stored as is. Format 6 and later only (format 5 readers do not
    /// know it): with an earlier `format_version` it is refused.
    Zstd,
}

/// Knobs of the segment format. Defaults suit production; tests shrink block sizes so
/// multi-block paths run on small data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SegmentOptions {
    /// Target size in bytes of one index block (at least 64; format 3 only).
    pub index_block_size: usize,
    /// Target size in bytes of one data block, before compression (at least 64; formats
    /// 4 to 8). A block is cut before a cell would take it past this (a cell larger than
    /// it gets a block of its own), or at 254 cells. Formats 6 to 8, blocks stored as
    /// they are and this at least a page (4 KiB): a block ends by this rounded up to a
    /// page, and starts on a page when at most 256 bytes of padding get it there.
    pub data_block_size: usize,
    /// How data blocks are stored (formats 4 to 8): `none`, `lz4` or `zstd`, kept only
    /// for blocks they shrink by an eighth or more (compressed blocks are not padded to
    /// pages).
    pub compression: Compression,
    /// Bloom filter bits per key (0 disables the filter).
    pub filter_bits_per_key: u32,
    /// The format segments are written in: 8 (the default: data blocks started on pages
    /// that hold once what all their cells share, a quarter smaller than format 3 and
    /// compressible, see the README's "Segment formats 5 to 8"; a block of live cells of
    /// one key length and one value length stores each in the same bytes, without a head
    /// or a start), 7 (the same blocks never fixing their cells' bytes), 6 (the same blocks
    /// writing every cell's key length, value length and timestamp, and the whole first
    /// key of each block in the meta), 5 (format 6 with no padding between blocks: a get
    /// of data larger than memory reads two pages where format 6 reads one), 4 (format
    /// 5's blocks without each entry's start: slower gets), or 3 (records and an index
    /// file, as before).
    pub format_version: u16,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            index_block_size: 4096,
            data_block_size: 4096,
            compression: Compression::None,
            filter_bits_per_key: 10,
            format_version: crate::format::footer::FORMAT_VERSION,
        }
    }
}

impl SegmentOptions {
    /// These options with a table's own `compression`, if it names one: what the
    /// table's flushes and compactions write with.
    pub fn for_table(&self, compression: Option<Compression>) -> SegmentOptions {
        SegmentOptions {
            compression: compression.unwrap_or(self.compression),
            ..self.clone()
        }
    }

    /// Check that a table's own `compression` is one these options' format can hold
    /// (`InvalidConfig` naming `compression` if not).
    pub fn validate_for_table(&self, compression: Option<Compression>) -> Result<()> {
        self.for_table(compression).validate()
    }

    /// Check the options, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        if !(64..=(1 << 24)).contains(&self.index_block_size) {
            return Err(Error::InvalidConfig {
                setting: "index_block_size",
                value: self.index_block_size.to_string(),
                reason: "must be between 64 and 16777216 bytes".into(),
            });
        }
        if !(64..=(1 << 24)).contains(&self.data_block_size) {
            return Err(Error::InvalidConfig {
                setting: "data_block_size",
                value: self.data_block_size.to_string(),
                reason: "must be between 64 and 16777216 bytes".into(),
            });
        }
        let formats = crate::format::footer::RECORD_FORMAT_VERSION
            ..=crate::format::footer::FORMAT_VERSION;
        if !formats.contains(&self.format_version) {
            return Err(Error::InvalidConfig {
                setting: "format_version",
                value: self.format_version.to_string(),
                reason: format!("must be between {} and {}", formats.start(), formats.end()),
            });
        }
        if self.compression == Compression::Zstd && (4..6).contains(&self.format_version) {
            return Err(Error::InvalidConfig {
                setting: "compression",
                value: "zstd".into(),
                reason: format!(
                    "format_version {} cannot hold zstd blocks (format 6 and later can)",
                    self.format_version
                ),
            });
        }
        if self.filter_bits_per_key > 64 {
            return Err(Error::InvalidConfig {
                setting: "filter_bits_per_key",
                value: self.filter_bits_per_key.to_string(),
                reason: "must be between 0 and 64".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_valid_value_and_round_trips() {
        for m in DiskAccessMode::all() {
            assert_eq!(m.as_str().parse::<DiskAccessMode>().unwrap(), m);
        }
    }

    /// zstd blocks need format 6; records (format 3) ignore compression.
    #[test]
    fn zstd_is_refused_by_the_formats_that_cannot_hold_it() {
        for (version, ok) in [(3, true), (4, false), (5, false), (6, true)] {
            let o = SegmentOptions {
                format_version: version,
                compression: Compression::Zstd,
                ..SegmentOptions::default()
            };
            match o.validate() {
                Ok(()) => assert!(ok, "format {version}"),
                Err(Error::InvalidConfig { setting, .. }) => {
                    assert!(!ok, "format {version}");
                    assert_eq!(setting, "compression");
                }
                Err(e) => panic!("{e}"),
            }
        }
        let o = SegmentOptions::default().for_table(Some(Compression::Zstd));
        assert_eq!(o.compression, Compression::Zstd);
        assert_eq!(o.for_table(None).compression, Compression::Zstd);
    }

    #[test]
    fn bad_value_lists_valid_ones() {
        let err = "mmap_data"
            .parse::<DiskAccessMode>()
            .unwrap_err()
            .to_string();
        for v in DISK_ACCESS_MODES {
            assert!(err.contains(v), "{err}");
        }
        assert!(err.contains("mmap_data"));
    }

    #[test]
    fn resolution_follows_the_table() {
        use AccessMode::*;
        let r = DiskAccessMode::Mmap.resolve();
        assert_eq!((r.data, r.index), (Mmap, Mmap));
        let r = DiskAccessMode::MmapIndexOnly.resolve();
        assert_eq!((r.data, r.index), (Standard, Mmap));
        let r = DiskAccessMode::Standard.resolve();
        assert_eq!((r.data, r.index), (Standard, Standard));
        let r = DiskAccessMode::Auto.resolve();
        assert_eq!(r.data, Standard);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(r.index, Mmap);
        let r = DiskAccessMode::Mmap.resolve().without_mmap();
        assert_eq!((r.data, r.index), (Standard, Standard));
    }

    #[test]
    fn residency_enums_parse_round_trip_and_list_valid_values() {
        for m in LockMemory::all() {
            assert_eq!(m.as_str().parse::<LockMemory>().unwrap(), m);
        }
        for h in HugePages::all() {
            assert_eq!(h.as_str().parse::<HugePages>().unwrap(), h);
        }
        let err = "pinned".parse::<LockMemory>().unwrap_err().to_string();
        for v in LOCK_MEMORY_VALUES {
            assert!(err.contains(v), "{err}");
        }
        let err = "huge".parse::<HugePages>().unwrap_err().to_string();
        for v in HUGE_PAGES_VALUES {
            assert!(err.contains(v), "{err}");
        }
        assert!(
            err.contains("huge_pages") && err.contains("\"huge\""),
            "{err}"
        );
    }

    #[test]
    fn memory_options_serde_uses_snake_case_and_validates() {
        let o: MemoryOptions =
            toml::from_str("lock_memory = \"index\"\nhuge_pages = \"anonymous_index\"\n").unwrap();
        assert_eq!(o.lock_memory, LockMemory::Index);
        assert_eq!(o.huge_pages, HugePages::AnonymousIndex);
        assert_eq!(o.map_budget_percent, DEFAULT_MAP_BUDGET_PERCENT);
        o.validate().unwrap();
        assert!(toml::from_str::<MemoryOptions>("huge_pages = \"always\"").is_err());
        let bad = MemoryOptions {
            map_budget_percent: 0,
            ..MemoryOptions::default()
        };
        assert!(bad.validate().is_err());
        assert_eq!(o.auto_data_map_percent, DEFAULT_AUTO_DATA_MAP_PERCENT);
        let none: MemoryOptions = toml::from_str("auto_data_map_percent = 0").unwrap();
        none.validate().unwrap();
        let bad: MemoryOptions = toml::from_str("auto_data_map_percent = 101").unwrap();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("auto_data_map_percent") && e.contains("101"), "{e}");
    }
}
