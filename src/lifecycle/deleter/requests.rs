//! Requests: announcing and requesting deletions, and reserving names for reuse.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};

use super::{Deleter, Entry, PendingReason, State};

impl Deleter {
    /// Make the coming deletion of `paths` durable now, off the path that will request
    /// it: a segment being made obsolete is announced when the manifest drops it, so
    /// that the later request at its last close needs no fsync. After a crash the next
    /// open deletes announced files (their owner already gave them up). If the journal
    /// cannot be written the announcement is forgotten (the later request writes the
    /// journal itself) and the error returned.
    pub fn announce<P: AsRef<Path>>(&self, paths: &[P]) -> Result<()> {
        let mut rel = Vec::with_capacity(paths.len());
        for p in paths {
            rel.push(self.relative(p.as_ref())?);
        }
        if rel.is_empty() {
            return Ok(());
        }
        let mut fresh = Vec::new();
        {
            let mut st = self.inner.state.lock();
            for r in rel {
                if !st.intents.contains_key(&r) {
                    st.intents.insert(r.clone(), false);
                    fresh.push(r);
                }
            }
        }
        self.write_journal().inspect_err(|_| {
            let mut st = self.inner.state.lock();
            for r in &fresh {
                if st.intents.get(r) == Some(&false) {
                    st.intents.remove(r);
                }
            }
        })
    }

    /// Request deletion of `paths` (absolute, or relative to the store directory; they
    /// must lie inside it). Durable before any unlink: after a crash the next open
    /// completes them. Returns once each file is deleted or queued. If the journal
    /// cannot be written the request is withdrawn (nothing is unlinked) and the error
    /// returned.
    ///
    /// After [`Deleter::seal`] (the store closed) nothing is touched: a request for
    /// files the journal names already (announced obsolete segments) is logged and left
    /// to the next open, `Ok`; any other is refused with [`Error::Closed`].
    pub fn delete<P: AsRef<Path>>(&self, paths: &[P]) -> Result<()> {
        let mut rel = Vec::with_capacity(paths.len());
        for p in paths {
            rel.push(self.relative(p.as_ref())?);
        }
        if rel.is_empty() {
            return Ok(());
        }
        {
            let sealed = self.inner.sealed.read_recursive();
            if *sealed {
                let st = self.inner.state.lock();
                let named = |r: &PathBuf| st.on_disk.contains(r) || st.intents.get(r) == Some(&true);
                if !rel.iter().all(named) {
                    // Neither journaled nor done: the caller must not think it will be.
                    return Err(Error::Closed);
                }
                for r in &rel {
                    tracing::info!(path = %r.display(), "store closed: deletion left for the next open (journaled)");
                }
                return Ok(());
            }
        }
        let mut fresh = Vec::new();
        let already_durable = {
            let mut st = self.inner.state.lock();
            let mut durable = true;
            for r in &rel {
                let announced = st.intents.remove(r) == Some(true);
                let e = st.pending.entry(r.clone()).or_insert_with(|| {
                    fresh.push(r.clone());
                    Entry {
                        reason: PendingReason::Queued,
                        waiting: false,
                        requested_at: Instant::now(),
                        journaled: false,
                    }
                });
                e.journaled |= announced;
                durable &= e.journaled;
            }
            durable
        };
        let mut durable = already_durable;
        while !durable {
            if let Err(e) = self.write_journal() {
                // Withdraw what no successful write named: the next open would not know
                // of it, so it must not be unlinked now.
                let mut st = self.inner.state.lock();
                for r in &fresh {
                    if st.pending.get(r).is_some_and(|e| !e.journaled) {
                        st.pending.remove(r);
                    }
                }
                return Err(e);
            }
            // A concurrent request for the same path whose journal write failed may have
            // withdrawn it meanwhile: put back what is neither pending nor gone, and
            // journal it again.
            let mut st = self.inner.state.lock();
            fresh = rel
                .iter()
                .filter(|r| {
                    !st.pending.contains_key(*r)
                        && std::fs::symlink_metadata(self.inner.dir.join(r)).is_ok()
                })
                .cloned()
                .collect();
            for r in &fresh {
                st.pending.insert(
                    r.clone(),
                    Entry {
                        reason: PendingReason::Queued,
                        waiting: false,
                        requested_at: Instant::now(),
                        journaled: false,
                    },
                );
            }
            durable = fresh.is_empty();
        }
        {
            let mut st = self.inner.state.lock();
            st.stats.requested += rel.len() as u64;
        }
        for r in &rel {
            self.attempt(r);
        }
        // Opportunistically retry earlier refusals.
        self.retry_refused();
        Ok(())
    }

    /// Make sure a new file or directory may be created at `path`: refuse while its
    /// deletion (or one under it) is pending, and first rewrite the journal if it may
    /// still name a completed deletion under it (also after a failed write), so that
    /// recovery after a crash can never delete the new file in place of the old one.
    /// Names that are never reused (segment ids) need no reservation.
    pub fn reserve(&self, path: &Path) -> Result<()> {
        let rel = self.relative(path)?;
        let under = |st: &State| st.on_disk.iter().any(|p| p.starts_with(&rel));
        let refuse = || Error::AlreadyExists {
            kind: "file pending deletion",
            name: rel.display().to_string(),
        };
        let requested = |st: &State| {
            st.pending
                .keys()
                .chain(st.intents.keys())
                .any(|p| p.starts_with(&rel))
        };
        let rewrite = {
            let st = self.inner.state.lock();
            if requested(&st) {
                return Err(refuse());
            }
            under(&st)
        };
        if rewrite {
            self.write_journal()?;
            let st = self.inner.state.lock();
            if requested(&st) || under(&st) {
                return Err(refuse()); // requested again meanwhile
            }
        }
        Ok(())
    }
}
