//! Snapshots (hard links under `snapshots/<tag>/`, durable or ephemeral) and
//! [`Store::checkpoint`], a consistent copy that opens as a store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::io::StoreFs;
use crate::lifecycle::set::{manifest_path, open_handle};
use crate::lifecycle::{Manifest, View};
use crate::segment::{Component, SegmentName};
use crate::snapshot::{self, SnapshotInfo};

use super::{SnapshotView, Store};

impl Store {
    /// Snapshot every table (or only `table`) under `tag`.
    pub fn snapshot(&self, tag: &str, table: Option<&str>) -> Result<()> {
        self.snapshot_inner(tag, table, false)
    }

    /// An ephemeral snapshot (cleared automatically at close and at next open).
    pub fn snapshot_ephemeral(&self, tag: &str, table: Option<&str>) -> Result<()> {
        self.snapshot_inner(tag, table, true)
    }

    fn snapshot_inner(&self, tag: &str, table: Option<&str>, ephemeral: bool) -> Result<()> {
        let _op = self.check_writable()?;
        // Memtables first, so the snapshot holds every acknowledged write (Cassandra
        // flushes before a snapshot too).
        // All tables as of one moment: a batch across tables is in it whole or not at
        // all.
        let views: Vec<(String, Arc<crate::lifecycle::View>)> =
            self.lsm.flush_then(table, || match table {
                Some(t) => {
                    let set = self.registry.set(t).ok_or_else(|| Error::NotFound {
                        kind: "table",
                        name: t.to_string(),
                    })?;
                    Ok::<_, Error>(vec![(t.to_string(), set.view())])
                }
                None => Ok(self
                    .registry
                    .sets()
                    .into_iter()
                    .map(|(n, s)| (n, s.view()))
                    .collect()),
            })??;
        self.deleter.rules().point("snapshot links", &self.dir);
        snapshot::create(&self.dir, tag, &views, ephemeral, &self.deleter)
    }

    /// Visible snapshots with sizes.
    pub fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let live: HashMap<String, BTreeSet<u64>> = self
            .registry
            .sets()
            .into_iter()
            .map(|(n, s)| (n, s.live_ids().into_iter().collect()))
            .collect();
        let is_live = |t: &str, id: u64| live.get(t).is_some_and(|s| s.contains(&id));
        snapshot::list_tags(&self.dir, &self.deleter)?
            .iter()
            .map(|tag| snapshot::info(&self.dir, tag, &self.deleter, &is_live))
            .collect()
    }

    /// Clear snapshot `tag` (an error names a missing tag). Files still mapped are
    /// deleted when their last mapping closes.
    pub fn clear_snapshot(&self, tag: &str) -> Result<()> {
        let _op = self.check_writable()?;
        snapshot::clear(&self.dir, tag, &self.deleter)
    }

    /// Clear every snapshot.
    pub fn clear_all_snapshots(&self) -> Result<()> {
        let _op = self.check_writable()?;
        for tag in snapshot::list_tags(&self.dir, &self.deleter)? {
            self.clear_snapshot(&tag)?;
        }
        Ok(())
    }

    /// Open snapshot `tag` read-only, mapped per `disk_access_mode`.
    pub fn open_snapshot(&self, tag: &str) -> Result<SnapshotView> {
        let _op = self.check_open()?;
        let m = snapshot::load(&self.dir, tag, &self.deleter)?;
        let dir = snapshot::snapshot_dir(&self.dir, tag);
        let opts = self.set_options();
        let mut tables = BTreeMap::new();
        for (table, ids) in &m.tables {
            let mut hs = Vec::new();
            for &id in ids.iter().rev() {
                hs.push(open_handle(
                    &dir,
                    &SegmentName::new(table, id)?,
                    &opts,
                    &self.deleter,
                )?);
            }
            tables.insert(table.clone(), hs);
        }
        Ok(SnapshotView {
            tag: tag.to_string(),
            tables,
        })
    }

    /// A consistent copy of the store in `dest`, which `Store::open(dest, ..)` opens as
    /// a store holding every write acknowledged before the call.
    ///
    /// Flushes every table, then, holding the views of that moment (so no segment is
    /// deleted meanwhile), hard-links every live segment's components (copies them,
    /// fsynced, where a link fails: another file system, or no hard links), writes each
    /// table's manifest and a `LOCK` file, into a staging directory beside `dest`
    /// (`.<dest name>.checkpoint-<n>.tmp`), fsyncs it, and renames it to `dest`, then
    /// fsyncs `dest`'s parent. No commit log and no positions file: the copy replays
    /// nothing. Snapshots and pending deletions are not copied. All file operations go
    /// through the I/O boundary with the store's file rules.
    ///
    /// `dest` must not exist, or be an empty directory, and must lie outside the store
    /// directory: otherwise [`Error::AlreadyExists`] (kind `"checkpoint destination"`)
    /// or [`Error::InvalidArgument`]; [`Error::ReadOnly`] on a read-only store (its
    /// memtables cannot be flushed). Writes after the call may or may not be in the
    /// copy. On an error `dest` is as it was; a staging directory may be left beside it
    /// (the store's deleter serves its own directory only), which is the caller's to
    /// remove.
    pub fn checkpoint(&self, dest: impl AsRef<Path>) -> Result<()> {
        let _op = self.check_writable()?;
        let dest = std::path::absolute(dest.as_ref())
            .map_err(|e| Error::io("resolve", dest.as_ref(), e))?;
        let taken = || Error::AlreadyExists {
            kind: "checkpoint destination",
            name: dest.display().to_string(),
        };
        match std::fs::read_dir(&dest) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(taken());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Err(taken()),
            Err(e) => return Err(Error::io("list", &dest, e)),
        }
        let (Some(parent), Some(file_name)) = (dest.parent(), dest.file_name()) else {
            return Err(Error::InvalidArgument(format!(
                "checkpoint destination {} has no parent directory",
                dest.display()
            )));
        };
        let real_parent = parent.canonicalize().ok();
        if dest.starts_with(&self.dir) || real_parent.is_some_and(|p| p.starts_with(&self.dir)) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint destination {} lies inside the store directory {}",
                dest.display(),
                self.dir.display()
            )));
        }
        // Every acknowledged write into a segment, then the views that hold them.
        // As of one moment for every table (a batch across tables whole or absent).
        // Each table's own settings go with it (its manifest's `setting` lines).
        type Captured = (
            String,
            Arc<View>,
            std::collections::BTreeMap<String, String>,
            std::collections::BTreeMap<u64, u32>,
        );
        let views: Vec<Captured> = self.lsm.flush_then(None, || {
            self.registry
                .sets()
                .into_iter()
                .map(|(n, s)| (n, s.view(), s.settings(), s.levels()))
                .collect()
        })?;
        let fs = StoreFs::new(parent, &self.config.file_rules);
        fs.create_dir_all(parent)?;
        static ATTEMPT: AtomicU64 = AtomicU64::new(0);
        let staging = loop {
            let n = ATTEMPT.fetch_add(1, Ordering::Relaxed);
            let s = parent.join(format!(
                ".{}.checkpoint-{}-{n}.tmp",
                file_name.to_string_lossy(),
                std::process::id()
            ));
            if std::fs::symlink_metadata(&s).is_err() {
                break s;
            }
        };
        fs.create_dir(&staging)?;
        let staged = (|| {
            for (table, view, settings, levels) in &views {
                let mut manifest = Manifest {
                    table: table.clone(),
                    next_id: 1,
                    settings: settings.clone(),
                    ..Manifest::default()
                };
                for h in &view.segments {
                    for c in Component::ALL {
                        let src = h.name().path(h.dir(), c);
                        let dst = staging.join(h.name().file_name(c));
                        if fs.hard_link(&src, &dst).is_err() {
                            fs.copy_durable(&src, &dst)?;
                        }
                    }
                    manifest.segments.insert(h.name().id);
                    // A segment's level never changes while it lives (a checkpoint
                    // keeps leveled compaction's layout).
                    if let Some(&l) = levels.get(&h.name().id) {
                        manifest.levels.insert(h.name().id, l);
                    }
                    manifest.next_id = manifest.next_id.max(h.name().id + 1);
                }
                // Publishing fsyncs the staging directory: the links above are durable.
                manifest.store(&manifest_path(&staging, table), &fs)?;
            }
            drop(fs.open_lock_file(&staging.join(crate::layout::LOCK_FILE))?);
            // Not redundant with the manifests' publishes, which fsync this directory
            // before the `LOCK` file exists (and not at all without tables): without it
            // a power loss after the rename can leave a copy with no `LOCK`, which
            // `Store::open_read_only` refuses as not a store. Caught by
            // `power_lost_during_a_checkpoint_leaves_no_destination_or_a_whole_one`.
            fs.fsync_dir(&staging)
        })();
        if let Err(e) = staged {
            tracing::warn!(staging = %staging.display(), error = %e, "checkpoint failed; its staging directory is left for the caller to remove");
            return Err(e);
        }
        drop(views);
        fs.rename(&staging, &dest).map_err(|e| {
            tracing::warn!(staging = %staging.display(), error = %e, "checkpoint not renamed into place; its staging directory is left for the caller to remove");
            let occupied = std::fs::read_dir(&dest).is_ok_and(|mut d| d.next().is_some());
            if occupied {
                taken()
            } else {
                e
            }
        })?;
        fs.fsync_dir(parent)
    }

    pub(super) fn clear_ephemeral_snapshots(&self) -> Result<()> {
        let mut first = Ok(());
        for tag in snapshot::list_tags(&self.dir, &self.deleter)? {
            let r =
                snapshot::load(&self.dir, &tag, &self.deleter).and_then(|m| match m.ephemeral {
                    true => snapshot::clear(&self.dir, &tag, &self.deleter),
                    false => Ok(()),
                });
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
