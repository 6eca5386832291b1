//! Writing the journal of pending deletions (its format is in `lifecycle::journal`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use super::{encode_journal, Deleter, State, JOURNAL};

impl Deleter {
    /// Rewrite the journal unless it names exactly what is pending (drops completed
    /// deletions from it).
    pub fn compact_journal(&self) -> Result<()> {
        self.write_journal()
    }

    /// Write the journal of what is pending and announced now, unless the journal on
    /// disk names exactly that. On success every path it names may be unlinked; on
    /// failure the journal on disk may name the old paths or these.
    pub(super) fn write_journal(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::ReadOnly);
        }
        let sealed = self.inner.sealed.read_recursive();
        if *sealed {
            return Err(Error::Closed);
        }
        // Concurrent writers (a flush's obsolete segments, a snapshot clear, the last
        // unmap of a file) used to race on `deletions.pending.tmp` (one removed or
        // renamed the other's temp file: a spurious `NotFound` error) and could publish
        // an older state over a newer one. One at a time, each with the state of now.
        let _io = self.inner.journal_io.lock();
        // A completed unlink leaves the journal only once it is durable: fsync the
        // directories it happened in first (else a power loss could bring back a file,
        // e.g. a cleared snapshot, that no journal names any more).
        let (dirs, done) = {
            let mut st = self.inner.state.lock();
            (
                std::mem::take(&mut st.unsynced_dirs),
                std::mem::take(&mut st.unsynced_done),
            )
        };
        let mut synced: BTreeSet<&Path> = BTreeSet::new();
        for d in &dirs {
            // A directory removed since (a cleared snapshot's): its removal is made
            // durable by an fsync of the nearest directory above it that still exists.
            let Some(d) = d.ancestors().find(|a| a.is_dir()) else {
                continue;
            };
            if !synced.insert(d) {
                continue;
            }
            if let Err(e) = self.inner.fs.fsync_dir(d) {
                let mut st = self.inner.state.lock();
                st.unsynced_dirs.extend(dirs);
                st.unsynced_done.extend(done);
                return Err(e);
            }
        }
        let paths: Vec<PathBuf> = {
            let mut st = self.inner.state.lock();
            let want: BTreeSet<PathBuf> = st
                .pending
                .keys()
                .chain(st.intents.keys())
                .chain(&st.unsynced_done)
                .cloned()
                .collect();
            if st.on_disk_exact && want == st.on_disk {
                mark_journaled(&mut st, &want);
                return Ok(());
            }
            want.into_iter().collect()
        };
        let path = self.inner.dir.join(JOURNAL);
        let written = self.inner.fs.write_atomic(&path, &encode_journal(&paths)?);
        let mut st = self.inner.state.lock();
        if written.is_ok() {
            let named: BTreeSet<PathBuf> = paths.into_iter().collect();
            mark_journaled(&mut st, &named);
            st.on_disk = named;
            st.on_disk_exact = true;
        } else {
            // The rename may have happened: either journal may be the one on disk.
            st.on_disk.extend(paths);
            st.on_disk_exact = false;
        }
        written
    }
}

/// Every request and announcement in `named` is in a successfully written journal.
fn mark_journaled(st: &mut State, named: &BTreeSet<PathBuf>) {
    for p in named {
        if let Some(e) = st.pending.get_mut(p) {
            e.journaled = true;
        }
        if let Some(j) = st.intents.get_mut(p) {
            *j = true;
        }
    }
}
