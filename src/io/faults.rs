//! Injected faults (`testing` feature only): rename, fsync, write, delete, directory
//! fsync and hard-link failures, targeted by path substring and the Nth matching
//! operation, attached with [`super::FileRules::with_faults`]. The I/O boundary
//! (`io::fs::StoreFs`) calls the hooks through the rules.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::points::Points;

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

/// Faults injected through [`super::FileRules::with_faults`]: each rule targets one
/// [`FaultKind`], paths containing a substring, and the Nth matching operation on.
/// The hooks are called by the I/O boundary (`io::fs::StoreFs`) for every rename, write,
/// fsync (files and directories) and delete. Counts of injected faults by kind: [`Faults::counts`].
#[derive(Debug, Default)]
pub struct Faults {
    rules: parking_lot::Mutex<Vec<Fault>>,
    injected: [AtomicU64; 7],
    disarmed: std::sync::atomic::AtomicBool,
    points: Points,
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

    /// The pause points the code passes (see [`super::points`]): every fsync arrives
    /// at `"fsync"` with its path before its fault is decided.
    pub fn points(&self) -> &Points {
        &self.points
    }

    pub(crate) fn point(&self, point: &str, path: &Path) {
        self.points.arrive(point, &path.to_string_lossy());
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

    pub(crate) fn rename(&self, _from: &Path, to: &Path) -> io::Result<()> {
        if self.hit(FaultKind::Rename, to) {
            return Err(Self::injected_error(FaultKind::Rename, to));
        }
        Ok(())
    }

    /// The fault is decided before the pause point, so a held fsync fails (or not) as
    /// it would have at its start.
    pub(crate) fn fsync(&self, path: &Path) -> io::Result<()> {
        let fail = self.hit(FaultKind::Fsync, path);
        self.point("fsync", path);
        if fail {
            return Err(Self::injected_error(FaultKind::Fsync, path));
        }
        Ok(())
    }

    pub(crate) fn dir_fsync(&self, dir: &Path) -> io::Result<()> {
        if self.hit(FaultKind::DirFsync, dir) {
            return Err(Self::injected_error(FaultKind::DirFsync, dir));
        }
        Ok(())
    }

    pub(crate) fn write(&self, path: &Path, len: usize) -> Option<(usize, io::Error)> {
        if self.hit(FaultKind::NoSpace, path) {
            return Some((0, Self::injected_error(FaultKind::NoSpace, path)));
        }
        if self.hit(FaultKind::ShortWrite, path) {
            return Some((len / 2, Self::injected_error(FaultKind::ShortWrite, path)));
        }
        None
    }

    pub(crate) fn link(&self, dst: &Path) -> io::Result<()> {
        if self.hit(FaultKind::Link, dst) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("injected Link fault: no hard links for {}", dst.display()),
            ));
        }
        Ok(())
    }

    pub(crate) fn delete(&self, path: &Path) -> io::Result<()> {
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
