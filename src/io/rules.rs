//! File rules: plain POSIX, or an emulation of the Windows rules that the tests run under.
//!
//! On Windows a file cannot be deleted, replaced (renamed over) or truncated while any of
//! its hard links is mapped. [`FileRules::windows_emulation`] enforces that on Linux with
//! the OS as ground truth, not our own bookkeeping: before each such operation it looks up
//! the file's identity in `/proc/self/maps` and refuses with `PermissionDenied` if any
//! mapping of it is open. [`FileRules::windows_emulation_with_refusals`] also refuses a
//! random fraction of deletions outright, like a virus scanner holding the file (Lucene's
//! `VirusCheckingFS`). Every delete, replace and truncate in the crate goes through
//! [`FileRules::check`] (see `io::fs`).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::FileId;

/// An operation the Windows rule forbids on a mapped file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Unlink.
    Delete,
    /// Rename over an existing file.
    Replace,
    /// Truncate or resize.
    Truncate,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Posix,
    Windows { refuse_fraction: f64 },
}

#[derive(Debug, Default)]
struct Counters {
    rng: AtomicU64,
    refused_mapped: AtomicU64,
    refused_random: AtomicU64,
    allowed: AtomicU64,
}

/// Which rules file operations obey. Cheap to clone; clones share counters.
#[derive(Debug, Clone)]
pub struct FileRules {
    kind: Kind,
    counters: Arc<Counters>,
    /// Injected faults (tests only in practice); `None` costs one branch per hook.
    faults: Option<Arc<Faults>>,
    /// The power-loss simulator (tests only in practice).
    power_loss: Option<super::powerloss::PowerLoss>,
}

/// How often the emulation said no, and why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCounts {
    /// Refused because the OS showed the identity mapped.
    pub refused_mapped: u64,
    /// Refused at random (scanner emulation).
    pub refused_random: u64,
    /// Checks passed.
    pub allowed: u64,
}

impl Default for FileRules {
    fn default() -> Self {
        FileRules::posix()
    }
}

impl FileRules {
    /// The platform's own rules (on Windows the OS enforces its rule itself).
    pub fn posix() -> Self {
        Self::with_kind(Kind::Posix, 0)
    }

    /// Refuse delete, replace and truncate of any file the OS shows mapped.
    pub fn windows_emulation() -> Self {
        Self::with_kind(
            Kind::Windows {
                refuse_fraction: 0.0,
            },
            0,
        )
    }

    /// As [`FileRules::windows_emulation`], and also refuse `fraction` of all deletions at
    /// random (deterministic for a given `seed`).
    pub fn windows_emulation_with_refusals(fraction: f64, seed: u64) -> Self {
        Self::with_kind(
            Kind::Windows {
                refuse_fraction: fraction.clamp(0.0, 1.0),
            },
            seed,
        )
    }

    fn with_kind(kind: Kind, seed: u64) -> Self {
        let counters = Counters::default();
        counters.rng.store(
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            Ordering::Relaxed,
        );
        FileRules {
            kind,
            counters: Arc::new(counters),
            faults: None,
            power_loss: None,
        }
    }

    /// These rules, also injecting `faults` (see [`Faults`]). Clones share them.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = Some(Arc::new(faults));
        self
    }

    /// The injected faults, if any (for their counts).
    pub fn faults(&self) -> Option<&Faults> {
        self.faults.as_deref()
    }

    /// These rules, with every file operation also going through the power-loss
    /// simulator `sim` (see [`super::powerloss`]).
    pub fn with_power_loss(mut self, sim: super::powerloss::PowerLoss) -> Self {
        self.power_loss = Some(sim);
        self
    }

    /// The power-loss simulator, if any.
    pub fn power_loss(&self) -> Option<&super::powerloss::PowerLoss> {
        self.power_loss.as_ref()
    }

    /// Hook before hard-linking at `dst`: an injected `Link` fault refuses it.
    #[inline]
    pub fn check_link(&self, dst: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) if f.hit(FaultKind::Link, dst) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("injected Link fault: no hard links for {}", dst.display()),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Hook before fsyncing directory `dir`: an injected `DirFsync` fault fails it.
    #[inline]
    pub fn check_dir_fsync(&self, dir: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.dir_fsync(dir),
        }
    }

    /// Hook before renaming `from` to `to`: an injected rename fault fails it.
    #[inline]
    pub fn check_rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.rename(from, to),
        }
    }

    /// Hook before fsyncing `path`: an injected fsync fault fails it with `EIO`.
    #[inline]
    pub fn check_fsync(&self, path: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.fsync(path),
        }
    }

    /// Hook before writing `len` bytes to `path`: `Some((n, err))` means write only the
    /// first `n` bytes (a short write; 0 for `ENOSPC` before anything) and then fail with
    /// `err`.
    #[inline]
    pub fn write_fault(&self, path: &Path, len: usize) -> Option<(usize, io::Error)> {
        match &self.faults {
            None => None,
            Some(f) => f.write(path, len),
        }
    }

    /// True for either Windows emulation.
    pub fn is_windows_emulation(&self) -> bool {
        matches!(self.kind, Kind::Windows { .. })
    }

    /// Counts of refusals so far.
    pub fn counts(&self) -> RuleCounts {
        RuleCounts {
            refused_mapped: self.counters.refused_mapped.load(Ordering::Relaxed),
            refused_random: self.counters.refused_random.load(Ordering::Relaxed),
            allowed: self.counters.allowed.load(Ordering::Relaxed),
        }
    }

    /// May `op` be applied to `path` now? `Err(PermissionDenied)` when the rules refuse.
    /// A path that does not exist passes (the operation itself will report it).
    pub fn check(&self, op: FileOp, path: &Path) -> io::Result<()> {
        if let Some(f) = &self.faults {
            if op == FileOp::Delete {
                f.delete(path)?;
            }
        }
        let Kind::Windows { refuse_fraction } = self.kind else {
            return Ok(());
        };
        let id = match FileId::of_path(path) {
            Ok(id) => id,
            Err(_) => return Ok(()),
        };
        if let Some(mapped) = super::sys::os_mapped_identities() {
            if mapped.contains(&id) {
                self.counters.refused_mapped.fetch_add(1, Ordering::Relaxed);
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "windows emulation: {op:?} refused, {} (identity {id}) is mapped",
                        path.display()
                    ),
                ));
            }
        }
        if op == FileOp::Delete && refuse_fraction > 0.0 && self.next_unit() < refuse_fraction {
            self.counters.refused_random.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "windows emulation: delete of {} refused (emulated scanner holds it)",
                    path.display()
                ),
            ));
        }
        self.counters.allowed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn next_unit(&self) -> f64 {
        // xorshift64*, shared by clones.
        let mut x = self.counters.rng.load(Ordering::Relaxed);
        loop {
            let mut y = x;
            y ^= y >> 12;
            y ^= y << 25;
            y ^= y >> 27;
            match self.counters.rng.compare_exchange_weak(
                x,
                y,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let r = y.wrapping_mul(0x2545_F491_4F6C_DD1D);
                    return (r >> 11) as f64 / (1u64 << 53) as f64;
                }
                Err(cur) => x = cur,
            }
        }
    }
}

/// A kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// `rename` fails (`EIO`), e.g. publishing a segment or replacing a manifest.
    Rename,
    /// `fsync` fails with `EIO`.
    Fsync,
    /// A write fails with `ENOSPC` before writing anything.
    NoSpace,
    /// A write stores only half its bytes, then fails with `ENOSPC`.
    ShortWrite,
    /// A delete is refused (`PermissionDenied`), like a scanner holding the file.
    RefuseDelete,
    /// An fsync of a directory fails with `EIO` (after the renames in it took effect).
    DirFsync,
    /// A hard link is refused (`EXDEV`-like: the file system has none), so snapshots
    /// fall back to copying.
    Link,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Rename,
        FaultKind::Fsync,
        FaultKind::NoSpace,
        FaultKind::ShortWrite,
        FaultKind::RefuseDelete,
        FaultKind::DirFsync,
        FaultKind::Link,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug)]
struct Fault {
    kind: FaultKind,
    /// Only paths containing this (the destination, for a rename) match.
    path_contains: String,
    /// Matching operations to let pass before the first failure.
    skip: u64,
    /// Failures to inject after the skipped ones (`u64::MAX`: forever).
    times: u64,
    seen: AtomicU64,
}

/// Faults injected through [`FileRules::with_faults`]: each rule targets one
/// [`FaultKind`], paths containing a substring, and the Nth matching operation on.
/// The hooks are called by the I/O boundary (`io::fs::StoreFs`) for every rename, write,
/// fsync (files and directories) and delete. Counts of injected faults by kind: [`Faults::counts`].
#[derive(Debug, Default)]
pub struct Faults {
    rules: parking_lot::Mutex<Vec<Fault>>,
    injected: [AtomicU64; 7],
    disarmed: std::sync::atomic::AtomicBool,
}

impl Faults {
    /// No faults yet: add them with [`Faults::fail`].
    pub fn new() -> Self {
        Faults::default()
    }

    /// Fail `times` operations of `kind` on paths containing `path_contains`, after
    /// letting the first `skip` matching ones pass.
    pub fn fail(self, kind: FaultKind, path_contains: &str, skip: u64, times: u64) -> Self {
        self.add(kind, path_contains, skip, times);
        self
    }

    /// As [`Faults::fail`], on a shared instance (e.g. after the store is open).
    pub fn add(&self, kind: FaultKind, path_contains: &str, skip: u64, times: u64) {
        self.rules.lock().push(Fault {
            kind,
            path_contains: path_contains.to_string(),
            skip,
            times,
            seen: AtomicU64::new(0),
        });
    }

    /// Remove every rule (injected counts stay).
    pub fn clear(&self) {
        self.rules.lock().clear();
    }

    /// Stop or resume injecting without forgetting the rules.
    pub fn set_armed(&self, armed: bool) {
        self.disarmed.store(!armed, Ordering::SeqCst);
    }

    /// Faults injected so far, by kind.
    pub fn counts(&self) -> Vec<(FaultKind, u64)> {
        FaultKind::ALL
            .iter()
            .map(|k| (*k, self.injected[k.index()].load(Ordering::Relaxed)))
            .collect()
    }

    /// Faults injected so far of `kind`.
    pub fn count(&self, kind: FaultKind) -> u64 {
        self.injected[kind.index()].load(Ordering::Relaxed)
    }

    fn hit(&self, kind: FaultKind, path: &Path) -> bool {
        if self.disarmed.load(Ordering::Relaxed) {
            return false;
        }
        let p = path.to_string_lossy();
        let rules = self.rules.lock();
        for r in rules.iter() {
            if r.kind != kind || !p.contains(r.path_contains.as_str()) {
                continue;
            }
            let n = r.seen.fetch_add(1, Ordering::Relaxed);
            if n >= r.skip && n - r.skip < r.times {
                self.injected[kind.index()].fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    fn injected_error(kind: FaultKind, path: &Path) -> io::Error {
        let raw = match kind {
            FaultKind::NoSpace | FaultKind::ShortWrite => libc_enospc(),
            _ => libc_eio(),
        };
        let e = io::Error::from_raw_os_error(raw);
        io::Error::new(
            e.kind(),
            format!("injected {kind:?} fault on {}: {e}", path.display()),
        )
    }

    fn rename(&self, _from: &Path, to: &Path) -> io::Result<()> {
        if self.hit(FaultKind::Rename, to) {
            return Err(Self::injected_error(FaultKind::Rename, to));
        }
        Ok(())
    }

    fn fsync(&self, path: &Path) -> io::Result<()> {
        if self.hit(FaultKind::Fsync, path) {
            return Err(Self::injected_error(FaultKind::Fsync, path));
        }
        Ok(())
    }

    fn dir_fsync(&self, dir: &Path) -> io::Result<()> {
        if self.hit(FaultKind::DirFsync, dir) {
            return Err(Self::injected_error(FaultKind::DirFsync, dir));
        }
        Ok(())
    }

    fn write(&self, path: &Path, len: usize) -> Option<(usize, io::Error)> {
        if self.hit(FaultKind::NoSpace, path) {
            return Some((0, Self::injected_error(FaultKind::NoSpace, path)));
        }
        if self.hit(FaultKind::ShortWrite, path) {
            return Some((len / 2, Self::injected_error(FaultKind::ShortWrite, path)));
        }
        None
    }

    fn delete(&self, path: &Path) -> io::Result<()> {
        if self.hit(FaultKind::RefuseDelete, path) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("injected refusal to delete {}", path.display()),
            ));
        }
        Ok(())
    }
}

fn libc_enospc() -> i32 {
    28 // ENOSPC on Linux, macOS and the BSDs
}

fn libc_eio() -> i32 {
    5 // EIO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_target_paths_and_the_nth_operation() {
        let rules = FileRules::posix().with_faults(
            Faults::new()
                .fail(FaultKind::Rename, "-Index.db", 1, 2)
                .fail(FaultKind::Fsync, "commitlog-", 0, u64::MAX),
        );
        let (a, b) = (Path::new("x/t-1-Index.db"), Path::new("x/t-1-Data.db"));
        assert!(rules.check_rename(b, a).is_ok(), "the first match passes");
        assert!(rules.check_rename(b, a).is_err());
        assert!(rules.check_rename(b, a).is_err());
        assert!(rules.check_rename(b, a).is_ok(), "two failures, then done");
        assert!(rules.check_rename(a, b).is_ok(), "targets the destination");
        let log = Path::new("commitlog/commitlog-3.log");
        let e = rules.check_fsync(log).unwrap_err();
        assert_eq!(e.raw_os_error(), None);
        assert!(e.to_string().contains("commitlog-3.log"), "{e}");
        assert!(rules.check_fsync(b).is_ok());
        assert!(rules.write_fault(log, 10).is_none());
        let f = rules.faults().unwrap();
        f.add(FaultKind::ShortWrite, "", 0, 1);
        assert_eq!(rules.write_fault(log, 10).map(|(n, _)| n), Some(5));
        f.set_armed(false);
        assert!(rules.check_fsync(log).is_ok(), "disarmed");
        f.set_armed(true);
        f.add(FaultKind::RefuseDelete, "Data", 0, 1);
        assert!(rules.check(FileOp::Delete, b).is_err());
        assert!(rules.check(FileOp::Delete, b).is_ok());
        assert_eq!(f.count(FaultKind::Rename), 2);
        assert_eq!(f.count(FaultKind::Fsync), 1);
        assert_eq!(f.count(FaultKind::ShortWrite), 1);
        assert_eq!(f.count(FaultKind::RefuseDelete), 1);
        assert_eq!(f.count(FaultKind::NoSpace), 0);
        // No faults: nothing to check, nothing injected.
        let plain = FileRules::posix();
        assert!(plain.faults().is_none());
        assert!(plain.check_fsync(log).is_ok() && plain.write_fault(log, 1).is_none());
    }
}
