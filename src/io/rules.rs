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
