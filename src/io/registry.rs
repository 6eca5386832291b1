//! The process-wide mapping registry: every open mapping, counted per file identity.
//!
//! Invariant 1 rests on this table: a mapping is registered *before* the `mmap` call and
//! unregistered *after* `munmap` returns, so whenever the count of an identity is zero no
//! mapping of it exists. The deleter checks the count and unlinks while holding the
//! registry lock ([`Registry::with_unmapped`]), so no mapping can appear in between.
//! When the last mapping of an identity closes, the callbacks queued with
//! [`Registry::when_unmapped`] run at once on the closing thread: an event, not a poll.
//!
//! Each registration records the source location that opened it, for leak reports.

use std::collections::HashMap;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::FileId;

type Waiter = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Entry {
    maps: usize,
    bytes: u64,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct Inner {
    files: HashMap<FileId, Entry>,
    sites: HashMap<u64, MappingSite>,
    next_token: u64,
    maps: usize,
    bytes: u64,
    opened_total: u64,
}

/// Where a still-open mapping was taken, for leak reports.
#[derive(Debug, Clone)]
pub struct MappingSite {
    /// The path the mapping was opened through.
    pub path: PathBuf,
    /// Its file identity.
    pub id: FileId,
    /// Mapped length.
    pub bytes: u64,
    /// Source location of the code that opened it.
    pub opened_at: &'static Location<'static>,
}

/// Counts of open mappings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MappingStats {
    /// Open mappings.
    pub maps: usize,
    /// Distinct file identities mapped.
    pub files: usize,
    /// Bytes mapped.
    pub bytes: u64,
    /// Mappings ever opened in this process.
    pub opened_total: u64,
}

/// The registry. Use [`registry()`] for the process-wide instance.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

/// Proof that a mapping is counted; dropping it uncounts the mapping.
#[must_use]
#[derive(Debug)]
pub struct Registration {
    id: FileId,
    bytes: u64,
    token: u64,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// The process-wide registry (file identities are process-wide, and so are mappings).
pub fn registry() -> &'static Registry {
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    /// Count a mapping about to be created.
    pub fn register(
        &self,
        id: FileId,
        bytes: u64,
        path: &Path,
        opened_at: &'static Location<'static>,
    ) -> Registration {
        let mut g = self.inner.lock();
        let e = g.files.entry(id).or_default();
        e.maps += 1;
        e.bytes += bytes;
        g.maps += 1;
        g.bytes += bytes;
        g.opened_total += 1;
        g.next_token += 1;
        let token = g.next_token;
        g.sites.insert(
            token,
            MappingSite {
                path: path.to_path_buf(),
                id,
                bytes,
                opened_at,
            },
        );
        Registration { id, bytes, token }
    }

    fn unregister(&self, r: &Registration) {
        let waiters = {
            let mut g = self.inner.lock();
            g.maps -= 1;
            g.bytes -= r.bytes;
            g.sites.remove(&r.token);
            let Some(e) = g.files.get_mut(&r.id) else {
                debug_assert!(false, "unregistering an unknown mapping");
                return;
            };
            e.maps -= 1;
            e.bytes -= r.bytes;
            if e.maps > 0 {
                return;
            }
            let e = g.files.remove(&r.id).unwrap_or_default();
            e.waiters
        };
        for w in waiters {
            w();
        }
    }

    /// Is any mapping of this identity open?
    pub fn is_mapped(&self, id: FileId) -> bool {
        self.inner.lock().files.contains_key(&id)
    }

    /// Number of open mappings of this identity.
    pub fn map_count(&self, id: FileId) -> usize {
        self.inner.lock().files.get(&id).map_or(0, |e| e.maps)
    }

    /// Run `f` while holding the registry lock if no mapping of `id` is open, so that none
    /// can be created while `f` runs. Returns `None` (and does not run `f`) if mapped.
    pub fn with_unmapped<R>(&self, id: FileId, f: impl FnOnce() -> R) -> Option<R> {
        let g = self.inner.lock();
        if g.files.contains_key(&id) {
            return None;
        }
        let r = f();
        drop(g);
        Some(r)
    }

    /// Run `f` once no mapping of `id` is open: now (on this thread) if none is, else on
    /// the thread that closes the last one.
    pub fn when_unmapped(&self, id: FileId, f: impl FnOnce() + Send + 'static) {
        let mut g = self.inner.lock();
        match g.files.get_mut(&id) {
            Some(e) => e.waiters.push(Box::new(f)),
            None => {
                drop(g);
                f();
            }
        }
    }

    /// Totals over the whole process.
    pub fn stats(&self) -> MappingStats {
        let g = self.inner.lock();
        MappingStats {
            maps: g.maps,
            files: g.files.len(),
            bytes: g.bytes,
            opened_total: g.opened_total,
        }
    }

    /// Totals over the mappings whose path lies under `dir`.
    pub fn stats_under(&self, dir: &Path) -> MappingStats {
        let g = self.inner.lock();
        let mut s = MappingStats::default();
        let mut ids = std::collections::HashSet::new();
        for site in g.sites.values().filter(|s| s.path.starts_with(dir)) {
            s.maps += 1;
            s.bytes += site.bytes;
            ids.insert(site.id);
        }
        s.files = ids.len();
        s
    }

    /// Every open mapping whose path lies under `dir`, for leak reports.
    pub fn open_under(&self, dir: &Path) -> Vec<MappingSite> {
        let g = self.inner.lock();
        let mut v: Vec<_> = g
            .sites
            .values()
            .filter(|s| s.path.starts_with(dir))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().unregister(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn waiters_run_when_last_mapping_closes() {
        let id = FileId {
            dev: u64::MAX,
            ino: 42,
        };
        let r1 = registry().register(id, 10, Path::new("/x"), Location::caller());
        let r2 = registry().register(id, 10, Path::new("/y"), Location::caller());
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        registry().when_unmapped(id, move || {
            h.fetch_add(1, Ordering::SeqCst);
        });
        assert!(registry().with_unmapped(id, || ()).is_none());
        drop(r1);
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        assert_eq!(registry().map_count(id), 1);
        drop(r2);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert!(!registry().is_mapped(id));
        assert_eq!(registry().with_unmapped(id, || 7), Some(7));
    }
}
