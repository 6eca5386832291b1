//! The Windows file rules, emulated on Linux (`testing` feature only).
//!
//! On Windows a file cannot be deleted, replaced (renamed over) or truncated while any of
//! its hard links is mapped. The emulation enforces that with the OS as ground truth, not
//! our own bookkeeping: before each such operation it looks up the file's identity in
//! `/proc/self/maps` and refuses with `PermissionDenied` if any mapping of it is open.
//! Optionally it also refuses a random fraction of deletions outright, like a virus
//! scanner holding the file (Lucene's `VirusCheckingFS`). Attached with
//! [`super::FileRules::windows_emulation`].

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::rules::FileOp;
use super::FileId;

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

/// The emulation's state, shared by clones of the rules.
#[derive(Debug)]
pub(crate) struct WindowsEmulation {
    refuse_fraction: f64,
    rng: AtomicU64,
    refused_mapped: AtomicU64,
    refused_random: AtomicU64,
    allowed: AtomicU64,
}

impl WindowsEmulation {
    /// Refuse what Windows refuses, and `refuse_fraction` (0 to 1) of all deletions at
    /// random (deterministic for a given `seed`).
    pub(crate) fn new(refuse_fraction: f64, seed: u64) -> WindowsEmulation {
        WindowsEmulation {
            refuse_fraction: refuse_fraction.clamp(0.0, 1.0),
            rng: AtomicU64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            refused_mapped: AtomicU64::new(0),
            refused_random: AtomicU64::new(0),
            allowed: AtomicU64::new(0),
        }
    }

    pub(crate) fn counts(&self) -> RuleCounts {
        RuleCounts {
            refused_mapped: self.refused_mapped.load(Ordering::Relaxed),
            refused_random: self.refused_random.load(Ordering::Relaxed),
            allowed: self.allowed.load(Ordering::Relaxed),
        }
    }

    /// May `op` be applied to `path` now? A path that does not exist passes.
    pub(crate) fn check(&self, op: FileOp, path: &Path) -> io::Result<()> {
        let id = match FileId::of_path(path) {
            Ok(id) => id,
            Err(_) => return Ok(()),
        };
        if let Some(mapped) = super::sys::os_mapped_identities() {
            if mapped.contains(&id) {
                self.refused_mapped.fetch_add(1, Ordering::Relaxed);
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "windows emulation: {op:?} refused, {} (identity {id}) is mapped",
                        path.display()
                    ),
                ));
            }
        }
        if op == FileOp::Delete
            && self.refuse_fraction > 0.0
            && self.next_unit() < self.refuse_fraction
        {
            self.refused_random.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "windows emulation: delete of {} refused (emulated scanner holds it)",
                    path.display()
                ),
            ));
        }
        self.allowed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn next_unit(&self) -> f64 {
        // xorshift64*, shared by clones.
        let mut x = self.rng.load(Ordering::Relaxed);
        loop {
            let mut y = x;
            y ^= y >> 12;
            y ^= y << 25;
            y ^= y >> 27;
            match self
                .rng
                .compare_exchange_weak(x, y, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let r = y.wrapping_mul(0x2545_F491_4F6C_DD1D);
                    return (r >> 11) as f64 / (1u64 << 53) as f64;
                }
                Err(cur) => x = cur,
            }
        }
    }
}
