//! File rules: the platform's own, or (with the `testing` feature) an emulation of the
//! Windows rules that the tests run under, injected faults and the power-loss simulator.
//!
//! On Windows a file cannot be deleted, replaced (renamed over) or truncated while any of
//! its hard links is mapped; `FileRules::windows_emulation` enforces that on Linux
//! (`io::emulation`). Every delete, replace and truncate in the crate goes through
//! [`FileRules::check`], and every other mutation through the fault and simulator hooks
//! here (see `io::fs`). Without the `testing` feature only [`FileRules::posix`] exists and
//! each hook is one branch on a `None`.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::emulation::WindowsEmulation;
#[cfg(feature = "testing")]
pub use super::faults::Faults;
#[cfg(not(feature = "testing"))]
use super::faults::Faults;
use super::powerloss::PowerLoss;

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

/// Which rules file operations obey: [`FileRules::posix`] (the default), the platform's
/// own. Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct FileRules {
    /// The Windows emulation (tests).
    windows: Option<Arc<WindowsEmulation>>,
    /// Injected faults (tests).
    faults: Option<Arc<Faults>>,
    /// The power-loss simulator (tests).
    power_loss: Option<PowerLoss>,
}

impl FileRules {
    /// The platform's own rules (on Windows the OS enforces its rule itself).
    pub fn posix() -> Self {
        FileRules::default()
    }

    /// The power-loss simulator, if any.
    pub(crate) fn simulator(&self) -> Option<&PowerLoss> {
        self.power_loss.as_ref()
    }

    /// Hook before hard-linking at `dst`: an injected `Link` fault refuses it.
    #[inline]
    pub(crate) fn check_link(&self, dst: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.link(dst),
        }
    }

    /// Hook before fsyncing directory `dir`: an injected `DirFsync` fault fails it.
    #[inline]
    pub(crate) fn check_dir_fsync(&self, dir: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.dir_fsync(dir),
        }
    }

    /// Hook before renaming `from` to `to`: an injected rename fault fails it.
    #[inline]
    pub(crate) fn check_rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.rename(from, to),
        }
    }

    /// Hook before fsyncing `path`: an injected fsync fault fails it with `EIO`.
    #[inline]
    pub(crate) fn check_fsync(&self, path: &Path) -> io::Result<()> {
        match &self.faults {
            None => Ok(()),
            Some(f) => f.fsync(path),
        }
    }

    /// Hook before writing `len` bytes to `path`: `Some((n, err))` means write only the
    /// first `n` bytes (a short write; 0 for `ENOSPC` before anything) and then fail with
    /// `err`.
    #[inline]
    pub(crate) fn write_fault(&self, path: &Path, len: usize) -> Option<(usize, io::Error)> {
        match &self.faults {
            None => None,
            Some(f) => f.write(path, len),
        }
    }

    /// A pause point (see `io::points`, `testing` feature): tests watch arrivals here
    /// or hold the thread; without injected faults, nothing.
    #[inline]
    pub(crate) fn point(&self, point: &str, path: &Path) {
        if let Some(f) = &self.faults {
            f.point(point, path);
        }
    }

    testing_pub! {
    /// May `op` be applied to `path` now? `Err(PermissionDenied)` when the rules refuse.
    /// A path that does not exist passes (the operation itself will report it).
    pub fn check(&self, op: FileOp, path: &Path) -> io::Result<()> {
        if let (Some(f), FileOp::Delete) = (&self.faults, op) {
            f.delete(path)?;
        }
        match &self.windows {
            None => Ok(()),
            Some(w) => w.check(op, path),
        }
    }
    }
}

/// Test hooks: the Windows emulation, injected faults, the power-loss simulator.
#[cfg(feature = "testing")]
impl FileRules {
    /// Refuse delete, replace and truncate of any file the OS shows mapped.
    pub fn windows_emulation() -> Self {
        Self::windows_emulation_with_refusals(0.0, 0)
    }

    /// As [`FileRules::windows_emulation`], and also refuse `fraction` of all deletions at
    /// random (deterministic for a given `seed`).
    pub fn windows_emulation_with_refusals(fraction: f64, seed: u64) -> Self {
        FileRules {
            windows: Some(Arc::new(WindowsEmulation::new(fraction, seed))),
            ..FileRules::default()
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
    pub fn with_power_loss(mut self, sim: PowerLoss) -> Self {
        self.power_loss = Some(sim);
        self
    }

    /// The power-loss simulator, if any.
    pub fn power_loss(&self) -> Option<&PowerLoss> {
        self.power_loss.as_ref()
    }

    /// True for either Windows emulation.
    pub fn is_windows_emulation(&self) -> bool {
        self.windows.is_some()
    }

    /// Counts of the emulation's refusals so far (zeros without the emulation).
    pub fn counts(&self) -> RuleCounts {
        self.windows
            .as_ref()
            .map(|w| w.counts())
            .unwrap_or_default()
    }
}

#[cfg(feature = "testing")]
pub use super::emulation::RuleCounts;
#[cfg(feature = "testing")]
pub use super::faults::FaultKind;

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
