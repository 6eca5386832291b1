//! Memory residency of one segment: the options a reader opens with
//! ([`ReaderOptions`]: mapping budget, `lock_memory`, `huge_pages`), what was done at open
//! ([`SegmentResidency`]), and what the kernel holds now ([`SegmentMemory`]).
//!
//! Opening with options, in order:
//! 1. The budget admits the segment's maps, or (`auto`) falls back to standard access, or
//!    (`mmap`, `mmap_index_only`) refuses with `Error::MapBudgetExhausted`. Admitted maps
//!    stay reserved in the budget until step 5 is done, so concurrent opens cannot all
//!    be admitted into the same room.
//! 2. `lock_memory: all` runs `mlockall` once for the process, before any map of this
//!    segment is made, so that the kernel locks them as they are made.
//! 3. Components open through the reader's usual path. A map the kernel refuses under
//!    `mlockall` (`MCL_FUTURE` must lock it, and it would pass `RLIMIT_MEMLOCK`) is, under
//!    `auto`, retried with standard access, counted (`map_fallbacks`) and warned about
//!    once per process; under `mmap` and `mmap_index_only`, which promise maps, it fails
//!    the open with `Error::MapRefusedUnderLock` naming the file and the limit.
//! 4. `anonymous_index` turns the index into a 2 MiB-aligned anonymous copy advised with
//!    `MADV_HUGEPAGE` (if the copy fails, the file is mapped instead); `advise` puts
//!    `MADV_HUGEPAGE` on every map.
//! 5. `lock_memory: index` locks the index map or copy. Where the index is not mapped
//!    (standard access) nothing can be locked: the report says why
//!    (`index_not_locked`), and the first such segment of the process logs a warning.
//!
//! A store's stats sum [`SegmentMemory::totals`] over its segments, reading
//! `/proc/self/smaps` once ([`SegmentReader::memory_report_in`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::reader::Source;
use super::SegmentReader;
use super::{BlockCache, IndexCache, UnpackedCache};
use crate::config::{
    AccessMode, DiskAccessMode, HugePages, LockMemory, MemoryOptions, ResolvedModes,
};
use crate::error::{Error, Result};
use crate::io::budget::Reservation;
use crate::io::data_budget::{DataMapBudget, DataReservation};
use crate::io::kstats::SmapsSnapshot;
use crate::io::mapped::MapAdvice;
use crate::io::residency::{self, AdviceReport, LockReport, MappingResidency, ResidencyTotals};
use crate::io::{MapBudget, MappedFile};

/// How a reader treats memory and checks what it reads. The default (no budget, no
/// locks, no huge pages, no index or block cache, every record checked) is what
/// [`SegmentReader::open`] uses.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReaderOptions {
    /// What to `mlock`.
    pub lock_memory: LockMemory,
    /// Huge page policy.
    pub huge_pages: HugePages,
    /// The mapping budget shared by the store's readers; `None`: unlimited.
    pub map_budget: Option<Arc<MapBudget>>,
    /// The bytes of data files `auto` may map (`io::data_budget`); `None`: `auto` maps
    /// no data.
    pub data_budget: Option<Arc<DataMapBudget>>,
    /// The byte budget for index blocks kept in memory by readers whose index is read
    /// with positional reads, shared by the store's readers; `None`: none are kept.
    pub index_cache: Option<Arc<IndexCache>>,
    /// The data block cache shared by the store's readers, for point reads of data read
    /// with positional reads (`standard`, `mmap_index_only`, `auto` past its data map budget);
    /// `None`: every such read is a `pread`.
    pub block_cache: Option<Arc<BlockCache>>,
    /// The cache of decompressed data blocks shared by the store's readers, for point
    /// reads of compressed segments (`unpacked_cache` module); `None`: every such get
    /// decompresses its block.
    pub unpacked_cache: Option<Arc<UnpackedCache>>,
    /// Probability (0.0 to 1.0) that a point read checks its record's checksum
    /// (Cassandra's `crc_check_chance`; see [`crate::Config::crc_check_chance`]).
    pub crc_check_chance: f64,
    /// What point reads and seeks search: the index file or the page index.
    pub point_lookup: PointLookup,
}

/// What a segment's point reads and seeks search to find a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PointLookup {
    /// Decide at open: [`PointLookup::Pages`] where the segment is not expected to stay
    /// in memory (`auto` read its data positionally because it did not fit in the data
    /// map budget, or data and index together are more than half the memory available
    /// to the process), or where its data is read positionally through a block cache
    /// (whose 4 KiB chunk is the page: in memory, 1M keys, 720 to 790 ns a get against
    /// the index file's 827 to 883 in `standard`, 730 to 757 against 733 to 735 in
    /// `mmap_index_only`); else [`PointLookup::Index`] (mapped data in memory: 589 to
    /// 620 ns against the page walk's 1,234 to 1,315). Segments of format version 2
    /// have no page index and always use the index file.
    #[default]
    Auto,
    /// The index file: per key a hash slot and an entry (one or two cache misses
    /// where it is in memory, a read where it is not), then the record.
    Index,
    /// The page index held in memory (format version 3): the data page that holds the
    /// key, whose records are walked in order; one read of the data file where nothing
    /// is in memory, against the index file's two.
    Pages,
}

/// How point reads of a segment whose format has a page index (`has_pages`) and whose
/// data and index take `bytes` find their record (see [`PointLookup::Auto`]).
pub(crate) fn point_lookup(
    r: &SegmentResidency,
    opts: &ReaderOptions,
    bytes: u64,
    has_pages: bool,
) -> PointLookup {
    let budget = opts.data_budget.as_deref();
    let pages = || {
        let fell_back = r.data_budget_fallback && budget.is_some_and(|b| b.limit() > 0);
        let available = budget.and_then(DataMapBudget::available);
        let cached_pread = r.data == AccessMode::Standard && opts.block_cache.is_some();
        cached_pread || fell_back || available.is_some_and(|a| bytes > a / 2)
    };
    match opts.point_lookup {
        _ if !has_pages => PointLookup::Index,
        PointLookup::Auto if pages() => PointLookup::Pages,
        PointLookup::Auto => PointLookup::Index,
        chosen => chosen,
    }
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            lock_memory: LockMemory::default(),
            huge_pages: HugePages::default(),
            map_budget: None,
            data_budget: None,
            index_cache: None,
            block_cache: None,
            unpacked_cache: None,
            crc_check_chance: 1.0,
            point_lookup: PointLookup::Auto,
        }
    }
}

impl ReaderOptions {
    /// Options from configuration, with a new budget of the configured share of
    /// `vm.max_map_count` (a store builds this once and shares it).
    pub fn from_config(m: &MemoryOptions) -> Result<ReaderOptions> {
        m.validate()?;
        Ok(ReaderOptions {
            lock_memory: m.lock_memory,
            huge_pages: m.huge_pages,
            map_budget: Some(Arc::new(MapBudget::from_system(m.map_budget_percent))),
            data_budget: Some(Arc::new(DataMapBudget::from_system(
                m.auto_data_map_percent,
            ))),
            index_cache: Some(Arc::new(IndexCache::new(
                m.index_cache_mb.saturating_mul(1 << 20),
            ))),
            block_cache: BlockCache::new(m.block_cache_mb.saturating_mul(1 << 20)).map(Arc::new),
            unpacked_cache: UnpackedCache::new(m.unpacked_cache_mb.saturating_mul(1 << 20))
                .map(Arc::new),
            crc_check_chance: 1.0,
            point_lookup: PointLookup::Auto,
        })
    }
}

/// What was asked and done when a segment opened. The kernel's figures are in
/// [`SegmentMemory`], read on demand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentResidency {
    /// `lock_memory` asked.
    pub lock_memory: LockMemory,
    /// `huge_pages` asked.
    pub huge_pages: HugePages,
    /// Modes asked (resolved `disk_access_mode`).
    pub requested: ResolvedModes,
    /// How data is read.
    pub data: AccessMode,
    /// How the index is read (`Mmap` covers an anonymous copy too).
    pub index: AccessMode,
    /// The index is an anonymous copy.
    pub index_copy: bool,
    /// `auto` fell back to standard access because the mapping budget was spent.
    pub budget_fallback: bool,
    /// `auto` read the data with standard access because the data file did not fit in
    /// the data map budget (`memory.auto_data_map_percent`).
    pub data_budget_fallback: bool,
    /// What point reads and seeks search: [`PointLookup::Index`] or
    /// [`PointLookup::Pages`].
    pub point_lookup: PointLookup,
    /// Maps the kernel refused under `lock_memory: all` (past `RLIMIT_MEMLOCK`) whose
    /// files are read with standard access instead (`auto` only; the explicit `mmap`
    /// modes fail the open).
    pub map_fallbacks: usize,
    /// `lock_memory: index` asked to lock an index that is not mapped, so nothing of it is
    /// locked: why (for example "disk_access_mode standard reads the index with standard
    /// access"). `None` when the lock was attempted or not asked for.
    pub index_not_locked: Option<String>,
    /// Lock outcomes: one per locked index map, or the process's `mlockall`.
    pub locks: Vec<LockReport>,
    /// Huge page advice outcomes, one per advised map.
    pub advice: Vec<AdviceReport>,
    /// Other things that did not go as asked, in words.
    pub notes: Vec<String>,
}

impl SegmentResidency {
    fn new(modes: ResolvedModes, opts: &ReaderOptions) -> Self {
        SegmentResidency {
            lock_memory: opts.lock_memory,
            huge_pages: opts.huge_pages,
            requested: modes,
            data: modes.data,
            index: modes.index,
            index_copy: false,
            budget_fallback: false,
            data_budget_fallback: false,
            point_lookup: PointLookup::Index,
            map_fallbacks: 0,
            index_not_locked: None,
            locks: Vec::new(),
            advice: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// One segment's mappings as the kernel accounts for them now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentMemory {
    /// One entry per map or anonymous copy.
    pub mappings: Vec<MappingResidency>,
    /// Their sum.
    pub totals: ResidencyTotals,
}

/// The open of one segment in progress (used by [`SegmentReader::open_with`]).
pub(crate) struct OpenPlan<'a> {
    opts: &'a ReaderOptions,
    report: SegmentResidency,
    /// The maps the budget admitted, held until [`Self::finish`] has made them (dropped
    /// with the plan if the open fails first).
    _reservation: Option<Reservation>,
    /// The data bytes `auto` may map, handed to the reader by [`Self::finish`] if the
    /// data file was mapped.
    data_bytes: Option<DataReservation>,
}

/// The open's outcome: the two components, the report, and the data bytes `auto`
/// mapped (to be held as long as the data map is).
pub(crate) struct Opened {
    pub(crate) data: Source,
    pub(crate) index: Source,
    pub(crate) residency: SegmentResidency,
    pub(crate) data_bytes: Option<DataReservation>,
}

impl<'a> OpenPlan<'a> {
    /// Steps 1 and 2: ask the budget (which reserves the maps it admits until the plan
    /// finishes or drops), then lock the process if asked (so a refused open leaves the
    /// process as it was).
    pub(crate) fn new(
        modes: ResolvedModes,
        data_len: u64,
        opts: &'a ReaderOptions,
    ) -> Result<Self> {
        let mut report = SegmentResidency::new(modes, opts);
        let mut data_bytes = auto_data_map(&mut report, data_len, opts);
        let mut reservation = None;
        if let Some(b) = &opts.map_budget {
            let asked = ResolvedModes {
                data: report.data,
                ..modes
            };
            let a = b.admit(asked)?;
            report.budget_fallback = a.fell_back;
            report.data = a.modes.data;
            report.index = a.modes.index;
            reservation = Some(a.reservation);
        }
        if report.data == AccessMode::Standard {
            data_bytes = None;
        }
        if opts.lock_memory == LockMemory::All {
            report.locks.push(residency::lock_all());
        }
        Ok(OpenPlan {
            opts,
            report,
            _reservation: reservation,
            data_bytes,
        })
    }

    /// The mode to open data with.
    pub(crate) fn data_mode(&self) -> AccessMode {
        self.report.data
    }

    /// The mode to open the index with (standard when it is about to be copied).
    pub(crate) fn index_mode(&self) -> AccessMode {
        match (self.report.index, self.opts.huge_pages) {
            (AccessMode::Mmap, HugePages::AnonymousIndex) => AccessMode::Standard,
            (m, _) => m,
        }
    }

    /// Step 3: open one component with `open`. A map the kernel refuses while
    /// `mlockall` is in force is retried with standard access under `auto`, and is
    /// [`Error::MapRefusedUnderLock`] under the modes that promise maps.
    pub(crate) fn open(
        &mut self,
        mode: AccessMode,
        open: impl Fn(AccessMode) -> Result<Source>,
    ) -> Result<Source> {
        match open(mode).map_err(under_lock) {
            Err(e @ Error::MapRefusedUnderLock { .. })
                if self.report.requested.configured == DiskAccessMode::Auto =>
            {
                self.fall_back(&e);
                open(AccessMode::Standard)
            }
            r => r,
        }
    }

    /// Record (and warn once per process about) a map refused under `mlockall` that
    /// `auto` replaces with standard access.
    fn fall_back(&mut self, e: &Error) {
        let note = match e {
            Error::MapRefusedUnderLock {
                path,
                vm_lck,
                limit,
                source,
                ..
            } => format!(
                "{}: map refused under lock_memory all (mlockall MCL_FUTURE locks every new \
                 map; RLIMIT_MEMLOCK soft limit {limit}, {} KiB locked: {source}); read with \
                 standard access instead (raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK)",
                path.display(),
                vm_lck.unwrap_or(0) / 1024
            ),
            other => format!("{other}; read with standard access instead"),
        };
        if !WARNED_MAP_FALLBACK.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "{note} (warned once per process; Store::stats().memory.map_fallbacks counts \
                 such maps)"
            );
        } else {
            tracing::debug!("{note}");
        }
        self.report.map_fallbacks += 1;
        self.report.notes.push(note);
    }

    /// Steps 4 and 5, then the final report. Fails only where the index copy and then
    /// the index map both failed under a mode that promises maps. The budget's
    /// reservation is released on return, once every map of the segment is registered.
    pub(crate) fn finish(mut self, data: Source, index: Source) -> Result<Opened> {
        let auto = self.report.requested.configured == DiskAccessMode::Auto;
        let mut index = index;
        let r = &mut self.report;
        if self.opts.huge_pages == HugePages::AnonymousIndex && r.index == AccessMode::Mmap {
            if let Source::Standard(pf) = &index {
                match MappedFile::anonymous_copy(pf.file(), pf.path(), pf.len(), true) {
                    Ok((copy, advice)) => {
                        if let Some(a) = advice {
                            r.advice
                                .push(AdviceReport::from_result(pf.path(), "MADV_HUGEPAGE", a));
                        }
                        r.index_copy = true;
                        index = Source::Mapped(copy);
                    }
                    Err(e) => {
                        let note = format!("anonymous index copy failed ({e}); mapping the file");
                        tracing::warn!("{note}");
                        r.notes.push(note);
                        match MappedFile::open_component(
                            pf.file(),
                            pf.path(),
                            pf.len(),
                            MapAdvice::Random,
                        ) {
                            Ok(m) => index = Source::Mapped(m),
                            Err(e) if !auto => return Err(under_lock(e)),
                            Err(e) => r
                                .notes
                                .push(format!("mapping failed too ({e}); standard access")),
                        }
                    }
                }
            }
        }
        if self.opts.huge_pages == HugePages::Advise {
            for s in [&data, &index] {
                if let Source::Mapped(m) = s {
                    r.advice.push(residency::advise_huge_pages(m));
                }
            }
        }
        if self.opts.lock_memory == LockMemory::Index {
            match &index {
                Source::Mapped(m) => r.locks.push(residency::lock_mapping(m, LockMemory::Index)),
                Source::Standard(_) => {
                    let why = index_not_mapped_reason(r);
                    warn_index_not_locked(&why);
                    r.index_not_locked = Some(why);
                }
            }
        }
        r.data = data.mode();
        r.index = index.mode();
        let data_bytes = match data {
            Source::Mapped(_) => self.data_bytes.take(),
            Source::Standard(_) => None,
        };
        Ok(Opened {
            data,
            index,
            residency: self.report,
            data_bytes,
        })
    }
}

/// `auto`'s data rule (`io::data_budget`): map the data file if its `data_len` bytes
/// fit in the data map budget, noting in `r` where they do not. Not under
/// `lock_memory: all`, whose `mlockall(MCL_FUTURE)` would lock every mapped data page
/// in memory (up to the budget, half the machine by default): there `auto` reads its
/// data as before the rule, with positional reads.
fn auto_data_map(
    r: &mut SegmentResidency,
    data_len: u64,
    opts: &ReaderOptions,
) -> Option<DataReservation> {
    let budget = opts.data_budget.as_ref()?;
    if r.requested.configured != DiskAccessMode::Auto
        || r.requested.index != AccessMode::Mmap
        || opts.lock_memory == LockMemory::All
    {
        return None;
    }
    match budget.admit(data_len) {
        Some(bytes) => {
            r.data = AccessMode::Mmap;
            Some(bytes)
        }
        None => {
            r.data_budget_fallback = true;
            r.notes.push(format!(
                "auto reads the data ({data_len} bytes) with standard access: it does not fit \
                 in the data map budget of {} bytes (memory.auto_data_map_percent)",
                budget.limit()
            ));
            None
        }
    }
}

/// A map the kernel refused (`EAGAIN`, `ENOMEM`) while an `mlockall` of ours is in
/// force becomes [`Error::MapRefusedUnderLock`]; any other error is returned as it is.
fn under_lock(e: Error) -> Error {
    match e {
        Error::Io {
            op: "mmap",
            path,
            source,
        } if residency::lock_all_active()
            && matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::OutOfMemory
            ) =>
        {
            residency::map_refused_under_lock(path, source)
        }
        e => e,
    }
}

/// Why this segment's index is read with standard access (for `index_not_locked`).
fn index_not_mapped_reason(r: &SegmentResidency) -> String {
    let cause = if r.requested.index == AccessMode::Standard {
        format!("disk_access_mode {} reads it", r.requested.configured)
    } else if r.budget_fallback {
        "the mapping budget is spent, so auto reads it".to_string()
    } else {
        "its map was refused, so it is read".to_string()
    };
    format!("lock_memory index locks index maps, and this index is not mapped: {cause} with standard access")
}

static WARNED_INDEX_NOT_LOCKED: AtomicBool = AtomicBool::new(false);
static WARNED_MAP_FALLBACK: AtomicBool = AtomicBool::new(false);

/// Say that `lock_memory: index` locks nothing here: a warning the first time in the
/// process (at store open, or at the first segment whose index is not mapped), debug
/// lines after.
pub(crate) fn warn_index_not_locked(why: &str) {
    if !WARNED_INDEX_NOT_LOCKED.swap(true, Ordering::Relaxed) {
        tracing::warn!("{why}; nothing is locked (warned once per process; Store::stats().memory.indexes_not_locked counts such segments)");
    } else {
        tracing::debug!("{why}; nothing is locked");
    }
}

/// At store open: warn (once per process) if `lock_memory: index` will lock nothing
/// because `disk_access_mode` reads every index with standard access.
pub(crate) fn warn_index_lock_at_open(modes: &ResolvedModes, lock: LockMemory) {
    if lock == LockMemory::Index && modes.index == AccessMode::Standard {
        warn_index_not_locked(&format!(
            "lock_memory index locks index maps, and disk_access_mode {} reads index files \
             with standard access",
            modes.configured
        ));
    }
}

impl SegmentReader {
    /// What was asked and done about memory when this segment opened.
    pub fn residency(&self) -> &SegmentResidency {
        &self.residency
    }

    /// This segment's mappings as the kernel accounts for them now (reads
    /// `/proc/self/smaps` once).
    pub fn memory_report(&self) -> SegmentMemory {
        self.memory_report_in(SmapsSnapshot::read().as_ref())
    }

    /// Like [`Self::memory_report`], from a snapshot shared by many segments.
    pub fn memory_report_in(&self, smaps: Option<&SmapsSnapshot>) -> SegmentMemory {
        let mappings: Vec<MappingResidency> =
            self.mapped_files().map(|m| m.residency_in(smaps)).collect();
        let mut totals: ResidencyTotals = mappings.iter().sum();
        totals.map_fallbacks = self.residency.map_fallbacks;
        totals.indexes_not_locked = usize::from(self.residency.index_not_locked.is_some());
        SegmentMemory { mappings, totals }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(mode: DiskAccessMode, lock: LockMemory) -> (AccessMode, bool) {
        let opts = ReaderOptions {
            lock_memory: lock,
            data_budget: Some(Arc::new(DataMapBudget::with_limit(u64::MAX))),
            ..ReaderOptions::default()
        };
        let mut r = SegmentResidency::new(mode.resolve(), &opts);
        let held = auto_data_map(&mut r, 4096, &opts).is_some();
        (r.data, held)
    }

    #[test]
    fn auto_maps_data_within_the_budget_but_not_under_lock_memory_all() {
        if DiskAccessMode::Auto.resolve().index != AccessMode::Mmap {
            return; // 32-bit: auto maps nothing
        }
        assert_eq!(
            decide(DiskAccessMode::Auto, LockMemory::None),
            (AccessMode::Mmap, true)
        );
        assert_eq!(
            decide(DiskAccessMode::Auto, LockMemory::Index),
            (AccessMode::Mmap, true)
        );
        assert_eq!(
            decide(DiskAccessMode::Auto, LockMemory::All),
            (AccessMode::Standard, false)
        );
        assert_eq!(
            decide(DiskAccessMode::MmapIndexOnly, LockMemory::None),
            (AccessMode::Standard, false)
        );
    }
}
