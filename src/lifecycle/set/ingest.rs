//! What a bulk ingest needs of a segment set (`table::lsm::ingest`): fresh names for
//! the adopted files, their handles, and a change held across several sets at once
//! (the manifest lock of each, taken in table name order), so that the ingest journal,
//! every manifest and every view swap happen while no flush or compaction of those
//! tables changes them (ARCHITECTURE.md invariant 12).

use std::collections::BTreeSet;
use std::path::Path;

use parking_lot::MutexGuard;

use super::{manifest_path, open_handle, SegmentSet};
use crate::error::{Error, Result};
use crate::lifecycle::handle::SegmentHandle;
use crate::lifecycle::manifest::Manifest;
use crate::segment::SegmentName;

/// A change of one set in progress: its manifest lock, held until [`Change::install`]
/// or the drop.
pub(crate) struct Change<'a> {
    set: &'a SegmentSet,
    m: MutexGuard<'a, Manifest>,
    next: Option<Manifest>,
}

impl SegmentSet {
    /// The store directory the set's segments live in.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store directory's I/O boundary.
    pub(crate) fn fs(&self) -> &crate::io::StoreFs {
        self.deleter.fs()
    }

    /// A fresh segment name of this table (ids are never reused, even if unused).
    pub(crate) fn reserve_name(&self) -> Result<SegmentName> {
        let mut m = self.manifest.lock();
        self.check_poisoned()?;
        let id = m.next_id;
        m.next_id += 1;
        SegmentName::new(&self.table, id)
    }

    /// Open published segment `name` of this table (in no manifest yet).
    pub(crate) fn open_segment(&self, name: &SegmentName) -> Result<SegmentHandle> {
        open_handle(&self.dir, name, &self.opts, &self.deleter)
    }

    /// Take the manifest lock for a change, refused like any change of a frozen or
    /// poisoned set.
    pub(crate) fn lock_change(&self) -> Result<Change<'_>> {
        let m = self.manifest.lock();
        self.check_poisoned()?;
        Ok(Change {
            set: self,
            m,
            next: None,
        })
    }

    /// Refuse every change until reopened (which manifest state is durable, or whether
    /// a committed change is applied, is for the next open to settle).
    pub(crate) fn poison(&self, why: String) {
        tracing::error!(table = %self.table, reason = %why, "table refuses changes until reopened");
        let mut p = self.poisoned.lock();
        if p.is_none() {
            *p = Some(why);
        }
    }

    /// Retire segments that no manifest names and none will: their files go when these
    /// handles drop (the orphan scan of the next open covers a crash).
    pub(crate) fn retire_unpublished(&self, handles: Vec<SegmentHandle>) {
        let mut doomed = Vec::new();
        for h in &handles {
            doomed.extend_from_slice(h.segment().component_paths());
            h.segment().mark_obsolete();
        }
        if let Err(e) = self.deleter.announce(&doomed) {
            tracing::warn!(error = %e, "could not journal unpublished segments; the next open's orphan scan will find them");
        }
    }

    /// Add segments `ids` to the view of a read-only set, without touching the manifest
    /// on disk: a read-only open of a store whose ingest journal names them (recovery
    /// would roll them forward; a read-only open writes nothing).
    pub(crate) fn adopt_unstored(&self, ids: &BTreeSet<u64>) -> Result<()> {
        let mut m = self.manifest.lock();
        let mut opened = Vec::new();
        for &id in ids {
            if m.segments.contains(&id) {
                continue;
            }
            opened.push(self.open_segment(&SegmentName::new(&self.table, id)?)?);
            m.segments.insert(id);
            m.next_id = m.next_id.max(id + 1);
        }
        drop(self.view.replace(|v| {
            let mut segs = v.segments.clone();
            segs.extend(opened);
            segs
        }));
        Ok(())
    }
}

impl Change<'_> {
    /// Replace the manifest, durably, with `names` added, each at its level of `levels`
    /// (0: none recorded). A failed directory fsync after the rename leaves it unknown
    /// which manifest is durable: the set is poisoned ([`Error::Poisoned`]), as
    /// [`SegmentSet::replace`] does.
    pub(crate) fn store_added(&mut self, names: &[SegmentName], levels: &[u32]) -> Result<()> {
        let mut next = self.m.clone();
        for (i, n) in names.iter().enumerate() {
            if n.table != self.set.table {
                return Err(Error::InvalidArgument(format!(
                    "segment {n} is not of table {}",
                    self.set.table
                )));
            }
            next.segments.insert(n.id);
            next.next_id = next.next_id.max(n.id + 1);
            if let Some(&level @ 1..) = levels.get(i) {
                next.levels.insert(n.id, level);
            }
        }
        let path = manifest_path(&self.set.dir, &self.set.table);
        if let Err(e) = next.store(&path, self.set.deleter.fs()) {
            if matches!(
                e,
                Error::Io {
                    op: "fsync dir",
                    ..
                }
            ) {
                let why = format!(
                    "table {}: manifest published but not known durable ({e}); reopen the store",
                    self.set.table
                );
                self.set.poison(why.clone());
                return Err(Error::Poisoned(why));
            }
            return Err(e);
        }
        self.next = Some(next);
        Ok(())
    }

    /// Swap the view to hold `handles` too (after [`Change::store_added`]), then
    /// release the manifest lock.
    pub(crate) fn install(mut self, handles: Vec<SegmentHandle>) {
        if let Some(next) = self.next.take() {
            *self.m = next;
        }
        let old = self.set.view.replace(|v| {
            let mut segs = v.segments.clone();
            segs.extend(handles);
            segs
        });
        drop(self);
        // Every segment of the old view is in the new one: nothing is retired.
        drop(old);
    }
}
