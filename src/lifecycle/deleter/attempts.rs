//! Deletion attempts: the unlink itself, deferral to the last close, and retries.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::error::Error;
use crate::io::{registry, FileId};

use super::{DeletePolicy, Deleter, Entry, Inner, PendingReason};

enum Outcome {
    Done,
    Mapped(FileId),
    Refused(String),
    NotEmpty,
}

impl Deleter {
    /// Queue and attempt deletions read from the journal at open.
    pub(super) fn enqueue_journaled(&self, rel: Vec<PathBuf>) {
        {
            let mut st = self.inner.state.lock();
            st.stats.requested += rel.len() as u64;
            for r in &rel {
                st.pending.entry(r.clone()).or_insert(Entry {
                    reason: PendingReason::Queued,
                    waiting: false,
                    requested_at: Instant::now(),
                    journaled: true,
                });
            }
        }
        self.attempt_deepest_first(rel);
    }

    /// Attempt `paths` deepest first (otherwise in the given order), so a directory is
    /// attempted after everything in it and, if that all went, deleted too.
    fn attempt_deepest_first(&self, mut paths: Vec<PathBuf>) {
        paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in paths {
            self.attempt(&p);
        }
    }

    /// Try to delete one pending path now; on a mapped identity, arrange a retry at the
    /// last close.
    pub(super) fn attempt(&self, rel: &Path) {
        // No unlink after the seal (the store closed: the next open finishes it).
        let sealed = self.inner.sealed.read_recursive();
        if *sealed {
            return;
        }
        // Only what a successfully written journal names may go.
        if self.inner.read_only
            || !self
                .inner
                .state
                .lock()
                .pending
                .get(rel)
                .is_some_and(|e| e.journaled)
        {
            return;
        }
        let full = self.inner.dir.join(rel);
        let outcome = self.unlink(&full);
        // Read before the state lock: no lock is taken under it but the registry's own.
        let mappings = match outcome {
            Outcome::Mapped(id) => registry().map_count(id),
            _ => 0,
        };
        let mut guard = self.inner.state.lock();
        let st = &mut *guard;
        let Some(e) = st.pending.get_mut(rel) else {
            return; // completed concurrently
        };
        match outcome {
            Outcome::Done => {
                let waited = e.requested_at.elapsed();
                let was_deferred = e.reason == PendingReason::Mapped;
                if was_deferred {
                    tracing::info!(path = %full.display(), waited = ?waited, "deferred deletion done: the last mapping closed");
                } else {
                    tracing::debug!(path = %full.display(), "deleted");
                }
                st.pending.remove(rel);
                st.stats.completed += 1;
                st.unsynced_dirs
                    .insert(full.parent().map(Path::to_path_buf).unwrap_or_default());
                st.unsynced_done.insert(rel.to_path_buf());
                if was_deferred {
                    st.last_deferred_latency = Some(waited);
                }
                drop(guard);
                drop(sealed);
                if let Some(cb) = self.inner.on_complete.lock().as_ref() {
                    (cb.0)(&full);
                }
            }
            Outcome::Mapped(id) => {
                if e.reason != PendingReason::Mapped {
                    st.stats.deferred_mapped += 1;
                    tracing::info!(
                        path = %full.display(),
                        mappings,
                        "deletion deferred: the file is still mapped; it is deleted when its last mapping closes (or at close, or at the next open)"
                    );
                }
                e.reason = PendingReason::Mapped;
                if !e.waiting {
                    e.waiting = true;
                    drop(guard);
                    let weak: Weak<Inner> = Arc::downgrade(&self.inner);
                    let rel = rel.to_path_buf();
                    registry().when_unmapped(id, move || {
                        if let Some(inner) = weak.upgrade() {
                            let d = Deleter { inner };
                            if let Some(e) = d.inner.state.lock().pending.get_mut(&rel) {
                                e.waiting = false;
                            }
                            d.attempt(&rel);
                            d.retry_refused();
                        }
                    });
                }
            }
            Outcome::NotEmpty => e.reason = PendingReason::NotEmpty,
            Outcome::Refused(msg) => {
                st.stats.refused += 1;
                tracing::debug!(path = %full.display(), error = %msg, "deletion refused; will retry");
                e.reason = PendingReason::Refused(msg);
            }
        }
    }

    fn unlink(&self, full: &Path) -> Outcome {
        match std::fs::symlink_metadata(full) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Outcome::Done,
            Ok(m) if m.is_dir() => {
                // Directories (cleared snapshots) go once their files have.
                return match self.inner.fs.remove_empty_dir(full) {
                    Ok(()) => Outcome::Done,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Done,
                    // Its files go first; retried on their events. Not a refusal.
                    Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                        Outcome::NotEmpty
                    }
                    Err(e) => Outcome::Refused(e.to_string()),
                };
            }
            _ => {}
        }
        let id = match FileId::of_path(full) {
            Ok(id) => id,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Outcome::Done
            }
            Err(e) => return Outcome::Refused(e.to_string()),
        };
        let res = match self.inner.policy {
            DeletePolicy::DeferWhileMapped => {
                match registry().with_unmapped(id, || self.inner.fs.remove_file(full)) {
                    None => return Outcome::Mapped(id),
                    Some(r) => r,
                }
            }
            DeletePolicy::Immediate => self.inner.fs.remove_file(full),
        };
        match res {
            Ok(()) => Outcome::Done,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Done,
            Err(e) => Outcome::Refused(e.to_string()),
        }
    }

    /// Retry deletions the OS refused (not those waiting for mappings), deepest first.
    pub fn retry_refused(&self) {
        let refused: Vec<PathBuf> = {
            let st = self.inner.state.lock();
            st.pending
                .iter()
                .filter(|(_, e)| {
                    matches!(
                        e.reason,
                        PendingReason::Refused(_) | PendingReason::Queued | PendingReason::NotEmpty
                    )
                })
                .map(|(p, _)| p.clone())
                .collect()
        };
        self.attempt_deepest_first(refused);
    }

    /// Retry every pending deletion now, deepest first. Returns how many remain.
    pub fn retry_all(&self) -> usize {
        let all: Vec<PathBuf> = self.inner.state.lock().pending.keys().cloned().collect();
        self.attempt_deepest_first(all);
        self.inner.state.lock().pending.len()
    }
}
