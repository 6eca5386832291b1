//! Memory residency: locking maps in RAM, huge pages, page-cache advice, and reports of
//! what the kernel actually did.
//!
//! Every control here is best effort. A refusal (an `RLIMIT_MEMLOCK` too small, huge
//! pages turned off, advice the OS lacks) becomes a typed report and at most one
//! `tracing::warn!` per kind of refusal per process; it never fails an open by itself.
//! (A map that the kernel refuses because `mlockall(MCL_FUTURE)` must lock it is another
//! matter: the segment reader decides, by access mode, between standard access and
//! [`crate::Error::MapRefusedUnderLock`], built by [`map_refused_under_lock`].)
//!
//! What was asked and what the calls returned is recorded at open ([`LockReport`],
//! [`AdviceReport`]). What the kernel *granted* is read back on demand
//! ([`MappingResidency`], from `/proc/self/smaps` and `mincore`): a huge page is reported
//! only when `AnonHugePages`, `FilePmdMapped` or `ShmemPmdMapped` (tmpfs) shows it, a
//! lock only when `Locked` and `VmLck` do. [`ResidencyTotals`] adds per-mapping reports up, so a store's stats are a
//! sum over its segments.
//!
//! Invariants kept here:
//! - R1. Advice and locks cover whole mappings ([`MappedFile::whole_region`]), so the
//!   kernel never splits a mapping into more VMAs than the budget counted.
//! - R2. A failed `mlock` is undone with `munlock`, so the report's "locked 0" is what the
//!   kernel holds.
//! - R3. Nothing in a report claims more than the kernel's own figures show.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use super::kstats::{ProcessMemory, RangeFigures, SmapsSnapshot};
use super::sys;
use super::MappedFile;
use crate::config::LockMemory;

// ---------------------------------------------------------------- anonymous copies

static COPIES: AtomicUsize = AtomicUsize::new(0);
static COPY_BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts one anonymous copy while it exists (held by its `MappedFile`).
#[derive(Debug)]
pub(crate) struct AnonymousCopyCount(u64);

impl AnonymousCopyCount {
    pub(crate) fn new(bytes: u64) -> Self {
        COPIES.fetch_add(1, Ordering::Relaxed);
        COPY_BYTES.fetch_add(bytes, Ordering::Relaxed);
        AnonymousCopyCount(bytes)
    }
}

impl Drop for AnonymousCopyCount {
    fn drop(&mut self) {
        COPIES.fetch_sub(1, Ordering::Relaxed);
        COPY_BYTES.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// Anonymous index copies open in this process (`huge_pages: anonymous_index`). They are
/// mappings too (one VMA each), so the mapping budget counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AnonymousCopyStats {
    /// Copies open.
    pub regions: usize,
    /// Bytes they occupy (each rounded up to 2 MiB).
    pub bytes: u64,
}

/// Anonymous copies open right now.
pub fn anonymous_copies() -> AnonymousCopyStats {
    AnonymousCopyStats {
        regions: COPIES.load(Ordering::Relaxed),
        bytes: COPY_BYTES.load(Ordering::Relaxed),
    }
}

// ---------------------------------------------------------------- locking

/// `RLIMIT_MEMLOCK` in bytes; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemlockLimit {
    /// Soft limit (the one enforced; `ulimit -l` shows it in KiB).
    pub soft: Option<u64>,
    /// Hard limit (how far an unprivileged process may raise the soft one).
    pub hard: Option<u64>,
}

/// `RLIMIT_MEMLOCK`, or `None` where the OS has no such limit.
pub fn memlock_limit() -> Option<MemlockLimit> {
    sys::memlock_limit()
        .ok()
        .map(|(soft, hard)| MemlockLimit { soft, hard })
}

/// Windows: does the process hold `SeLockMemoryPrivilege` and does the CPU have large
/// pages (informational; segstore allocates none there). `None` on Unix, where
/// transparent huge pages need no privilege (see [`super::kstats::ThpSupport`]).
pub fn large_pages_permitted() -> Option<bool> {
    sys::large_pages_permitted()
}

/// What a lock covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LockScope {
    /// One mapping (`mlock`).
    Mapping,
    /// The whole process, now and later (`mlockall(MCL_CURRENT | MCL_FUTURE)`).
    Process,
}

/// The outcome of one lock request: what was asked, what the kernel took, and which limit
/// to raise when it refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockReport {
    /// The setting that asked.
    pub asked: LockMemory,
    /// Mapping or process.
    pub scope: LockScope,
    /// The mapping's path (`Mapping` scope).
    pub path: Option<PathBuf>,
    /// Bytes asked for: the mapping rounded up to pages, or the process's `VmSize`.
    pub requested_bytes: u64,
    /// Bytes locked: the mapping's size on success (0 on failure: a failed lock is
    /// undone), or the process's `VmLck` after the call.
    pub locked_bytes: u64,
    /// Bytes the kernel refused.
    pub refused_bytes: u64,
    /// The errno of a refusal (`ENOMEM`: over `RLIMIT_MEMLOCK`; `EPERM`: no privilege;
    /// `EAGAIN`: some pages could not be locked).
    pub errno: Option<i32>,
    /// The OS's words for it.
    pub error: Option<String>,
    /// `RLIMIT_MEMLOCK` at the time of the call.
    pub rlimit_memlock: Option<MemlockLimit>,
    /// `CAP_IPC_LOCK` is effective: the kernel ignores `RLIMIT_MEMLOCK` for this process.
    pub cap_ipc_lock: Option<bool>,
    /// `VmLck` of the process before and after the call.
    pub vm_lck_before: Option<u64>,
    /// See `vm_lck_before`.
    pub vm_lck_after: Option<u64>,
    /// The process now holds more locked memory than `RLIMIT_MEMLOCK`'s soft limit, which
    /// only `CAP_IPC_LOCK` (root) allows: the same settings would be refused elsewhere.
    pub beyond_rlimit: bool,
}

impl LockReport {
    /// Everything asked for was locked.
    pub fn fully_locked(&self) -> bool {
        self.errno.is_none() && self.refused_bytes == 0
    }

    /// Which limit to raise, and to what, when the kernel refused.
    pub fn hint(&self) -> Option<String> {
        if self.fully_locked() {
            return None;
        }
        let (need, covers) = match self.scope {
            LockScope::Mapping => (self.vm_lck_before.unwrap_or(0) + self.requested_bytes, ""),
            // MCL_FUTURE locks every later map as it is made, and the kernel refuses a map
            // that would pass the limit, so the process's size now is only a floor.
            LockScope::Process => (
                self.requested_bytes,
                " for the process as it is now, plus the size of every segment file it \
                 will map (mlockall MCL_FUTURE locks each later map as it is made, and \
                 refuses a map past the limit)",
            ),
        };
        Some(format!(
            "raise RLIMIT_MEMLOCK (soft limit now {}) to at least {} KiB{covers} (ulimit -l, \
             systemd LimitMEMLOCK=, memlock in /etc/security/limits.conf) or grant \
             CAP_IPC_LOCK",
            limit_text(self.rlimit_memlock),
            need.div_ceil(1024)
        ))
    }

    /// Bytes later maps can still lock under `RLIMIT_MEMLOCK` while an `mlockall` is in
    /// force: the soft limit minus `VmLck`. `None` where no limit binds the process
    /// (unlimited, not reported, or `CAP_IPC_LOCK`) or for a `Mapping` lock.
    pub fn room_for_later_maps(&self) -> Option<u64> {
        if self.scope != LockScope::Process || self.cap_ipc_lock != Some(false) {
            return None;
        }
        let soft = self.rlimit_memlock?.soft?;
        Some(soft.saturating_sub(self.vm_lck_after?))
    }
}

/// `RLIMIT_MEMLOCK`'s soft limit in words.
pub(crate) fn limit_text(limit: Option<MemlockLimit>) -> String {
    match limit.map(|l| l.soft) {
        Some(Some(b)) => format!("{} KiB", b / 1024),
        Some(None) => "unlimited".to_string(),
        None => "not reported".to_string(),
    }
}

impl fmt::Display for LockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lock_memory {} ({:?}): asked {} KiB, locked {} KiB, refused {} KiB",
            self.asked,
            self.scope,
            self.requested_bytes / 1024,
            self.locked_bytes / 1024,
            self.refused_bytes / 1024
        )?;
        if let Some(e) = &self.error {
            write!(f, ": {e}")?;
        }
        if let Some(h) = self.hint() {
            write!(f, "; {h}")?;
        }
        if self.beyond_rlimit {
            write!(f, " (beyond RLIMIT_MEMLOCK thanks to CAP_IPC_LOCK)")?;
        }
        if let (true, Some(room)) = (self.fully_locked(), self.room_for_later_maps()) {
            write!(
                f,
                "; {} KiB left under RLIMIT_MEMLOCK for later maps (a map past it is refused)",
                room / 1024
            )?;
        }
        Ok(())
    }
}

static WARNED_LOCK: AtomicBool = AtomicBool::new(false);

/// Log a refused lock: one warning per process, then debug lines.
fn log_refusal(report: &LockReport) {
    if !WARNED_LOCK.swap(true, Ordering::Relaxed) {
        tracing::warn!(errno = ?report.errno, "memory lock refused: {report} (further refusals are logged at debug level)");
    } else {
        tracing::debug!("memory lock refused: {report}");
    }
}

fn base_report(asked: LockMemory, scope: LockScope, path: Option<&Path>) -> LockReport {
    let p = ProcessMemory::read();
    LockReport {
        asked,
        scope,
        path: path.map(Path::to_path_buf),
        requested_bytes: 0,
        locked_bytes: 0,
        refused_bytes: 0,
        errno: None,
        error: None,
        rlimit_memlock: memlock_limit(),
        cap_ipc_lock: p.and_then(|p| p.cap_ipc_lock),
        vm_lck_before: p.map(|p| p.vm_lck),
        vm_lck_after: None,
        beyond_rlimit: false,
    }
}

/// Record the call's outcome and the kernel's figures after it; `figures` then sets
/// `locked_bytes` and `refused_bytes` from them. The refusal is logged last, from the
/// finished report, so the log line and the report show the same figures.
fn finish(
    mut r: LockReport,
    result: std::io::Result<()>,
    figures: impl FnOnce(&mut LockReport),
) -> LockReport {
    if let Err(e) = result {
        r.errno = e.raw_os_error();
        r.error = Some(e.to_string());
    }
    let after = ProcessMemory::read().map(|p| p.vm_lck);
    r.vm_lck_after = after;
    let soft = r.rlimit_memlock.and_then(|l| l.soft);
    r.beyond_rlimit = matches!((after, soft), (Some(a), Some(s)) if a > s);
    figures(&mut r);
    if !r.fully_locked() {
        log_refusal(&r);
    }
    r
}

/// `mlock` the whole of `map` (R1); on failure, undo (R2) and report.
pub fn lock_mapping(map: &MappedFile, asked: LockMemory) -> LockReport {
    let mut r = base_report(asked, LockScope::Mapping, Some(map.path()));
    let region = map.whole_region();
    r.requested_bytes = region.len().next_multiple_of(sys::page_size()) as u64;
    let result = sys::lock_region(region);
    let ok = result.is_ok();
    if !ok {
        let _ = sys::unlock_region(region);
    }
    finish(r, result, |r| {
        if ok {
            r.locked_bytes = r.requested_bytes;
        } else {
            r.refused_bytes = r.requested_bytes;
        }
    })
}

/// The process-wide lock state: the report of the `mlockall` in force, if any.
static LOCK_ALL: Mutex<Option<LockReport>> = Mutex::new(None);

/// `mlockall(MCL_CURRENT | MCL_FUTURE)` once per process: later calls return the first
/// call's report while it is in force (a refused call is retried). Every later map of
/// the process is then locked (and faulted in) by the kernel as it is made.
pub fn lock_all() -> LockReport {
    let mut g = LOCK_ALL.lock();
    if let Some(r) = g.as_ref() {
        return r.clone();
    }
    let mut r = base_report(LockMemory::All, LockScope::Process, None);
    r.requested_bytes = ProcessMemory::read().map_or(0, |p| p.vm_size);
    let result = sys::lock_all();
    let ok = result.is_ok();
    let r = finish(r, result, |r| {
        r.locked_bytes = r.vm_lck_after.unwrap_or(0);
        if !ok {
            r.refused_bytes = r.requested_bytes.saturating_sub(r.locked_bytes);
        }
    });
    if ok {
        *g = Some(r.clone());
    }
    r
}

/// The error for a map of `path` that the kernel refused (`source`) while an `mlockall`
/// is in force, with the figures an operator needs: the file's size, `VmLck` and
/// `RLIMIT_MEMLOCK` now.
pub fn map_refused_under_lock(path: PathBuf, source: std::io::Error) -> crate::Error {
    crate::Error::MapRefusedUnderLock {
        bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
        path,
        vm_lck: ProcessMemory::read().map(|p| p.vm_lck),
        limit: limit_text(memlock_limit()),
        source,
    }
}

/// Is an `mlockall` of ours in force?
pub fn lock_all_active() -> bool {
    LOCK_ALL.lock().is_some()
}

/// `munlockall`: undo [`lock_all`] and every `mlock` of the process.
pub fn unlock_all() -> std::io::Result<()> {
    let mut g = LOCK_ALL.lock();
    sys::unlock_all()?;
    *g = None;
    Ok(())
}

// ---------------------------------------------------------------- advice

/// The outcome of one piece of advice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdviceReport {
    /// The mapping or file advised.
    pub path: PathBuf,
    /// The advice (`MADV_HUGEPAGE`, `POSIX_FADV_DONTNEED`).
    pub advice: &'static str,
    /// The call succeeded (the kernel took the hint; what it granted is read separately).
    pub applied: bool,
    /// The errno of a failure.
    pub errno: Option<i32>,
    /// The OS's words for it.
    pub error: Option<String>,
}

static WARNED_ADVICE: AtomicBool = AtomicBool::new(false);

impl AdviceReport {
    /// Build a report from a call's result, logging a failure (one warning per process).
    pub fn from_result(path: &Path, advice: &'static str, result: std::io::Result<()>) -> Self {
        let (errno, error) = match &result {
            Ok(()) => (None, None),
            Err(e) => (e.raw_os_error(), Some(e.to_string())),
        };
        if let Some(e) = &error {
            if !WARNED_ADVICE.swap(true, Ordering::Relaxed) {
                tracing::warn!(path = %path.display(), advice, "advice refused (ignored): {e}; further refusals are logged at debug level");
            } else {
                tracing::debug!(path = %path.display(), advice, "advice refused (ignored): {e}");
            }
        }
        AdviceReport {
            path: path.to_path_buf(),
            advice,
            applied: result.is_ok(),
            errno,
            error,
        }
    }
}

/// `madvise(MADV_HUGEPAGE)` over the whole of `map` (R1).
pub fn advise_huge_pages(map: &MappedFile) -> AdviceReport {
    AdviceReport::from_result(
        map.path(),
        "MADV_HUGEPAGE",
        sys::advise_huge_pages(map.whole_region()),
    )
}

/// Drop the page cache of a segment file that became obsolete
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`). The kernel drops only clean pages that no
/// process maps, so call it after the last mapping of the file closed (see
/// `registry().when_unmapped`). A failure is logged, never fatal.
pub fn drop_page_cache(file: &File, path: &Path) -> AdviceReport {
    AdviceReport::from_result(path, "POSIX_FADV_DONTNEED", sys::drop_page_cache(file))
}

// ---------------------------------------------------------------- what the kernel holds

/// What backs a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// A shared map of the file (page cache).
    File,
    /// A private anonymous copy of the file's bytes (`anonymous_index`).
    AnonymousCopy,
}

/// One mapping as the kernel accounts for it right now. Figures the OS does not report
/// are `None`, never guessed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappingResidency {
    /// The file mapped (or copied).
    pub path: PathBuf,
    /// File map or anonymous copy.
    pub kind: MappingKind,
    /// Bytes of the mapping (page-rounded; a copy is rounded up to 2 MiB).
    pub bytes: u64,
    /// Bytes resident per `mincore` (for a file map: in the page cache, even if this
    /// process has not touched them).
    pub resident: Option<u64>,
    /// `Rss:`: bytes this mapping has in its page tables.
    pub rss: Option<u64>,
    /// Bytes of this mapping locked in RAM: its `Rss` when the kernel flags the mapping
    /// locked (`lo` in `VmFlags`; a lock always covers a whole VMA), else 0. smaps' own
    /// `Locked:` divides pages shared with other mappings among them, like `Pss`, so it
    /// understates a locked map of a file that is mapped twice; it is kept in
    /// `kernel.locked`.
    pub locked: Option<u64>,
    /// Huge page bytes the kernel granted: `AnonHugePages` + `FilePmdMapped` +
    /// `ShmemPmdMapped` (a file on tmpfs is shared memory: its huge pages show only in
    /// the last).
    pub huge: Option<u64>,
    /// The smaps figures in detail.
    pub kernel: Option<RangeFigures>,
}

impl MappedFile {
    /// Read this mapping's figures from the kernel (reads all of `/proc/self/smaps`; to
    /// report many mappings, read one [`SmapsSnapshot`] and use [`Self::residency_in`]).
    pub fn residency(&self) -> MappingResidency {
        self.residency_in(SmapsSnapshot::read().as_ref())
    }

    /// This mapping's figures from a snapshot of smaps (plus a fresh `mincore`).
    pub fn residency_in(&self, smaps: Option<&SmapsSnapshot>) -> MappingResidency {
        let range = self.addr_range();
        let kernel = smaps.map(|s| s.range(range.clone()));
        let page = sys::page_size() as u64;
        MappingResidency {
            path: self.path().to_path_buf(),
            kind: if self.is_anonymous_copy() {
                MappingKind::AnonymousCopy
            } else {
                MappingKind::File
            },
            bytes: (range.end - range.start) as u64,
            resident: sys::resident_pages(self.whole_region())
                .ok()
                .map(|n| n as u64 * page),
            rss: kernel.map(|k| k.rss),
            locked: kernel.map(|k| if k.vm_locked { k.rss } else { 0 }),
            huge: kernel.map(|k| k.huge()),
            kernel,
        }
    }
}

/// Per-mapping reports added up (for a segment, a table, a store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResidencyTotals {
    /// Mappings counted.
    pub mappings: usize,
    /// Of which anonymous copies.
    pub anonymous_copies: usize,
    /// Bytes mapped.
    pub bytes: u64,
    /// Bytes of anonymous copies.
    pub anonymous_copy_bytes: u64,
    /// Sum of `resident` (known figures only).
    pub resident: u64,
    /// Sum of `rss`.
    pub rss: u64,
    /// Sum of `locked`.
    pub locked: u64,
    /// Sum of `huge`.
    pub huge: u64,
    /// Mappings with a figure the OS did not report (their unknowns count as 0 above).
    pub incomplete: usize,
    /// Maps the kernel refused under `lock_memory: all` (`mlockall` past
    /// `RLIMIT_MEMLOCK`) whose files are read with standard access instead (`auto`;
    /// see `SegmentResidency::map_fallbacks`). Counted per segment, not per mapping.
    pub map_fallbacks: usize,
    /// Segments whose index `lock_memory: index` asked to lock but which is read with
    /// standard access, so nothing of it is locked (see
    /// `SegmentResidency::index_not_locked`).
    pub indexes_not_locked: usize,
}

impl ResidencyTotals {
    /// Add one mapping.
    pub fn add(&mut self, m: &MappingResidency) {
        self.mappings += 1;
        self.bytes += m.bytes;
        if m.kind == MappingKind::AnonymousCopy {
            self.anonymous_copies += 1;
            self.anonymous_copy_bytes += m.bytes;
        }
        self.resident += m.resident.unwrap_or(0);
        self.rss += m.rss.unwrap_or(0);
        self.locked += m.locked.unwrap_or(0);
        self.huge += m.huge.unwrap_or(0);
        let complete = m.resident.is_some() && m.kernel.is_some_and(|k| k.exact);
        self.incomplete += usize::from(!complete);
    }

    /// Add another total (e.g. one segment's into a store's).
    pub fn merge(&mut self, o: &ResidencyTotals) {
        self.mappings += o.mappings;
        self.anonymous_copies += o.anonymous_copies;
        self.bytes += o.bytes;
        self.anonymous_copy_bytes += o.anonymous_copy_bytes;
        self.resident += o.resident;
        self.rss += o.rss;
        self.locked += o.locked;
        self.huge += o.huge;
        self.incomplete += o.incomplete;
        self.map_fallbacks += o.map_fallbacks;
        self.indexes_not_locked += o.indexes_not_locked;
    }
}

impl<'a> std::iter::Sum<&'a MappingResidency> for ResidencyTotals {
    fn sum<I: Iterator<Item = &'a MappingResidency>>(iter: I) -> Self {
        let mut t = ResidencyTotals::default();
        for m in iter {
            t.add(m);
        }
        t
    }
}

impl std::iter::Sum for ResidencyTotals {
    fn sum<I: Iterator<Item = ResidencyTotals>>(iter: I) -> Self {
        let mut t = ResidencyTotals::default();
        for o in iter {
            t.merge(&o);
        }
        t
    }
}
