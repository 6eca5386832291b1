//! The segments of one table: its manifest, its current view, and the protocol that
//! adds and replaces segments.
//!
//! Adding (flush): the segment is written and published by `SegmentWriter` (invariant 5)
//! and only then opened (invariant 2); the manifest naming it is replaced atomically; then
//! the view swaps. Replacing (compaction): the new segments are opened after they are
//! published; one manifest replacement removes the old ids and adds the new; the view
//! swaps; the old segments are marked obsolete and their files reach the deleter when
//! their last handle drops (invariants 1, 3).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::deleter::Deleter;
use super::handle::{LeakTracker, Segment, SegmentHandle};
use super::manifest::Manifest;
use super::view::{View, ViewCell};
use crate::config::{Compression, ResolvedModes, SegmentOptions};
use crate::error::{Error, Result};
use crate::segment::{Component, ReaderOptions, SegmentName, SegmentReader, SegmentWriter};

mod ingest;
pub(crate) use ingest::Change;

/// Manifest file name of a table.
pub fn manifest_path(dir: &Path, table: &str) -> PathBuf {
    crate::layout::StoreFile::Manifest(table.to_string()).path(dir)
}

/// How segments of a set are opened.
#[derive(Debug, Clone)]
pub struct SetOptions {
    /// Resolved access modes.
    pub modes: ResolvedModes,
    /// Format options for new segments.
    pub segment: SegmentOptions,
    /// Leak tracking (None: off).
    pub tracker: Option<Arc<LeakTracker>>,
    /// Memory residency and mapping budget applied at open.
    pub reader: ReaderOptions,
}

/// Why a set refuses every change for good (unlike a poisoning, nothing is in doubt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frozen {
    /// The store was opened read-only.
    ReadOnly,
    /// The table was dropped.
    Dropped,
    /// The store was closed ([`SegmentSet::release`]).
    Closed,
}

/// One table's live segments.
#[derive(Debug)]
pub struct SegmentSet {
    dir: PathBuf,
    table: String,
    opts: SetOptions,
    deleter: Deleter,
    view: ViewCell,
    manifest: Mutex<Manifest>,
    /// Set when a manifest publish failed after its rename may have taken effect: which
    /// manifest is durable is unknown, so the set refuses changes until reopened.
    poisoned: Mutex<Option<String>>,
    /// Set by a read-only open or a drop ([`SegmentSet::freeze`]).
    frozen: Mutex<Option<Frozen>>,
}

impl SegmentSet {
    /// Open the table `table` in `dir`, creating an empty manifest if it has none.
    /// `min_next_id` lets the caller skip ids already used by files on disk.
    pub(crate) fn open(
        dir: &Path,
        table: &str,
        opts: SetOptions,
        deleter: Deleter,
        min_next_id: u64,
    ) -> Result<SegmentSet> {
        crate::segment::validate_name("table", table)?;
        let mpath = manifest_path(dir, table);
        let mut manifest = if mpath.exists() {
            let m = Manifest::load(&mpath)?;
            if m.table != table {
                return Err(Error::corrupt(
                    &mpath,
                    0,
                    format!("manifest names table {:?}", m.table),
                ));
            }
            m
        } else {
            // A new table starts at `min_next_id`, durably: a table created again after
            // a drop must never look like the dropped one (recovery rule 8).
            let m = Manifest {
                table: table.to_string(),
                next_id: min_next_id.max(1),
                ..Manifest::default()
            };
            m.store(&mpath, deleter.fs())?;
            m
        };
        manifest.next_id = manifest.next_id.max(min_next_id);
        let mut segments = Vec::with_capacity(manifest.segments.len());
        for &id in &manifest.segments {
            segments.push(open_handle(
                dir,
                &SegmentName::new(table, id)?,
                &opts,
                &deleter,
            )?);
        }
        let set = SegmentSet {
            dir: dir.to_path_buf(),
            table: table.to_string(),
            opts,
            deleter,
            view: ViewCell::default(),
            manifest: Mutex::new(manifest),
            poisoned: Mutex::new(None),
            frozen: Mutex::new(None),
        };
        set.view.replace(|_| segments);
        Ok(set)
    }

    /// Table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The current view (cheap; readers never serialise).
    #[inline]
    pub fn view(&self) -> Arc<View> {
        self.view.load()
    }

    /// Run `f` on the current view without cloning it: the cheapest read path (an
    /// `arc_swap` guard: no lock, no shared count; a view swap does not wait for `f`,
    /// and the view it replaces lives until `f` returns).
    #[inline]
    pub fn with_view<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        self.view.with(f)
    }

    /// Like [`SegmentSet::with_view`], handing `f` the view's `Arc` (to clone only if
    /// it keeps the view).
    #[inline]
    pub(crate) fn with_view_arc<R>(&self, f: impl FnOnce(&Arc<View>) -> R) -> R {
        self.view.with_arc(f)
    }

    /// Live segment ids, from the manifest.
    pub fn live_ids(&self) -> Vec<u64> {
        self.manifest.lock().segments.iter().copied().collect()
    }

    /// Start writing a new segment under a fresh id (ids are never reused, even if the
    /// writer is abandoned).
    pub fn writer(&self) -> Result<SegmentWriter> {
        self.writer_with(None)
    }

    /// The options new segments are written with (before a table's own compression).
    pub(crate) fn segment_options(&self) -> &SegmentOptions {
        &self.opts.segment
    }

    /// [`SegmentSet::writer`] storing data blocks with `compression` where it names one
    /// (a table's own setting), else the store's.
    pub fn writer_with(&self, compression: Option<Compression>) -> Result<SegmentWriter> {
        let name = {
            let mut m = self.manifest.lock();
            // Under the manifest lock: no id is handed out after a freeze.
            self.check_poisoned()?;
            let id = m.next_id;
            m.next_id += 1;
            SegmentName::new(&self.table, id)?
        };
        let opts = self.opts.segment.for_table(compression);
        SegmentWriter::create(&self.dir, name, &opts, self.deleter.rules())
    }

    /// Add published segments to the table.
    pub fn add(&self, names: &[SegmentName]) -> Result<()> {
        self.replace(&[], names)
    }

    /// Like [`SegmentSet::add`], holding what `guard` returns across the in-memory view
    /// swap only (after the manifest is durable): a table's flush holds the store's
    /// install lock there, so a read view never takes its memtables and its view on
    /// either side of a swap ([`crate::table::visibility`] invariant 3).
    pub(crate) fn add_guarded<G>(
        &self,
        names: &[SegmentName],
        guard: impl FnOnce() -> G,
    ) -> Result<()> {
        self.replace_guarded(&[], names, 0, guard)
    }

    /// Refuse (`Some`) or allow again (`None`) every change: new writers and manifest
    /// replacements fail with [`Error::ReadOnly`] or [`Error::Dropped`]. Waits for a
    /// replacement in progress. Returns the next segment id the set would have handed
    /// out (every id it ever handed out is below it).
    pub(crate) fn freeze(&self, why: Option<Frozen>) -> u64 {
        let m = self.manifest.lock();
        let mut frozen = self.frozen.lock();
        // A closed set stays closed (a drop that failed after the close must not thaw it).
        if *frozen != Some(Frozen::Closed) {
            *frozen = why;
        }
        m.next_id
    }

    /// Was its table dropped?
    pub(crate) fn is_dropped(&self) -> bool {
        *self.frozen.lock() == Some(Frozen::Dropped)
    }

    /// `Err(Poisoned)` once a manifest publish left it unknown which manifest is
    /// durable (see [`SegmentSet::replace`]); `Err(ReadOnly)` or `Err(Dropped)` once
    /// frozen.
    pub(crate) fn check_poisoned(&self) -> Result<()> {
        match *self.frozen.lock() {
            Some(Frozen::ReadOnly) => return Err(Error::ReadOnly),
            Some(Frozen::Dropped) => {
                return Err(Error::Dropped {
                    table: self.table.clone(),
                })
            }
            Some(Frozen::Closed) => return Err(Error::Closed),
            None => {}
        }
        match &*self.poisoned.lock() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// The table's own settings, as its manifest holds them (empty: none).
    pub fn settings(&self) -> BTreeMap<String, String> {
        self.manifest.lock().settings.clone()
    }

    /// Replace the table's own settings: the manifest is rewritten (atomically and
    /// durably) with them and the same segments. Refused like any change of a frozen or
    /// poisoned set.
    pub(crate) fn store_settings(&self, settings: BTreeMap<String, String>) -> Result<()> {
        let mut m = self.manifest.lock();
        if let Some(why) = *self.frozen.lock() {
            return Err(match why {
                Frozen::ReadOnly => Error::ReadOnly,
                Frozen::Dropped => Error::Dropped {
                    table: self.table.clone(),
                },
                Frozen::Closed => Error::Closed,
            });
        }
        self.check_poisoned()?;
        let mut next = m.clone();
        next.settings = settings;
        next.store(&manifest_path(&self.dir, &self.table), self.deleter.fs())?;
        *m = next;
        Ok(())
    }

    /// Atomically replace segments `old` by the published segments `new`.
    ///
    /// If the new manifest may or may not be durable (its directory fsync failed after
    /// the rename), nothing either manifest names is deleted: the set is poisoned (every
    /// later change fails with [`Error::Poisoned`]) and the next open decides from the
    /// manifest on disk, its orphan scan removing the segments that one does not name.
    pub fn replace(&self, old: &[u64], new: &[SegmentName]) -> Result<()> {
        self.replace_guarded(old, new, 0, || ())
    }

    /// [`SegmentSet::replace`], the manifest naming `level` as the new segments' level
    /// (leveled compaction; 0: none).
    pub fn replace_at_level(&self, old: &[u64], new: &[SegmentName], level: u32) -> Result<()> {
        self.replace_guarded(old, new, level, || ())
    }

    /// Give the live segments `ids` level `level` in the manifest (leveled
    /// compaction's move of segments that overlap nothing below): their files and the
    /// view stay as they are. A manifest whose durability is unknown (its directory
    /// fsync failed) poisons nothing here: it and the one before name the same
    /// segments, and either's levels are valid ones, so the next open may read either.
    pub(crate) fn move_to_level(&self, ids: &[u64], level: u32) -> Result<()> {
        let mut m = self.manifest.lock();
        self.check_poisoned()?;
        self.check_live(&m, ids)?;
        let mut next = m.clone();
        for &id in ids {
            match level {
                0 => next.levels.remove(&id),
                n => next.levels.insert(id, n),
            };
        }
        next.store(&manifest_path(&self.dir, &self.table), self.deleter.fs())?;
        *m = next;
        Ok(())
    }

    /// Refuse a change of segments `ids` unless manifest `m` names each of them.
    fn check_live(&self, m: &Manifest, ids: &[u64]) -> Result<()> {
        match ids.iter().find(|id| !m.segments.contains(id)) {
            Some(id) => Err(Error::InvalidArgument(format!(
                "segment {}-{id} is not live",
                self.table
            ))),
            None => Ok(()),
        }
    }

    /// Delete published segments that no manifest names and none will (the finished
    /// outputs of an abandoned compaction). A failure is logged: the next open's orphan
    /// scan removes them.
    pub(crate) fn discard(&self, names: &[SegmentName]) {
        let doomed: Vec<PathBuf> = names
            .iter()
            .filter(|n| n.table == self.table)
            .flat_map(|n| Component::ALL.map(|c| n.path(&self.dir, c)))
            .collect();
        if let Err(e) = self.deleter.delete(&doomed) {
            tracing::warn!(error = %e, "could not delete the outputs of an abandoned compaction; the next open removes them");
        }
    }

    /// The levels of the live segments at level 1 or more (leveled compaction), as the
    /// manifest holds them; a live segment absent is at level 0.
    pub fn levels(&self) -> BTreeMap<u64, u32> {
        self.manifest.lock().levels.clone()
    }

    fn replace_guarded<G>(
        &self,
        old: &[u64],
        new: &[SegmentName],
        level: u32,
        guard: impl FnOnce() -> G,
    ) -> Result<()> {
        let mut m = self.manifest.lock();
        if matches!(*self.frozen.lock(), Some(Frozen::Dropped | Frozen::Closed)) {
            // Written for a table that is gone, or a store that closed (a flush or
            // compaction that was running then): nobody has opened them, nothing will
            // name them. (After a close the deleter leaves them to the next open.)
            let doomed: Vec<PathBuf> = new
                .iter()
                .filter(|n| n.table == self.table)
                .flat_map(|n| Component::ALL.map(|c| n.path(&self.dir, c)))
                .collect();
            if let Err(e) = self.deleter.delete(&doomed) {
                tracing::warn!(error = %e, "could not delete segments written for a dropped table or a closed store; the next open removes them");
            }
        }
        self.check_poisoned()?;
        self.check_live(&m, old)?;
        let mut opened = Vec::with_capacity(new.len());
        for n in new {
            if n.table != self.table {
                return Err(Error::InvalidArgument(format!(
                    "segment {n} is not of table {}",
                    self.table
                )));
            }
            opened.push(open_handle(&self.dir, n, &self.opts, &self.deleter)?);
        }
        let mut next = m.clone();
        for id in old {
            next.segments.remove(id);
            next.levels.remove(id);
        }
        for n in new {
            next.segments.insert(n.id);
            next.next_id = next.next_id.max(n.id + 1);
            if level > 0 {
                next.levels.insert(n.id, level);
            }
        }
        if let Err(e) = next.store(&manifest_path(&self.dir, &self.table), self.deleter.fs()) {
            if matches!(
                e,
                Error::Io {
                    op: "fsync dir",
                    ..
                }
            ) {
                let why = format!(
                    "table {}: manifest published but not known durable ({e}); reopen the store",
                    self.table
                );
                tracing::error!(table = %self.table, error = %e, "manifest durability unknown; table refuses changes until reopened");
                *self.poisoned.lock() = Some(why.clone());
                return Err(Error::Poisoned(why));
            }
            // The new segments are in no manifest and no view: retire them now (their
            // files go when these handles drop) rather than leave orphans for the next
            // open. The durable manifest is still the old one.
            let mut doomed = Vec::new();
            for h in &opened {
                doomed.extend_from_slice(h.segment().component_paths());
                h.segment().mark_obsolete();
            }
            if let Err(e2) = self.deleter.announce(&doomed) {
                tracing::warn!(error = %e2, "could not journal unpublished segments; the next open's orphan scan will find them");
            }
            return Err(e);
        }
        *m = next;
        self.deleter
            .rules()
            .point("set swaps its view", &self.dir.join(&self.table));
        let held = guard();
        let old_view = self.view.replace(|v| {
            let mut segs: Vec<SegmentHandle> = v
                .segments
                .iter()
                .filter(|h| !old.contains(&h.name().id))
                .cloned()
                .collect();
            segs.extend(opened);
            segs
        });
        drop(held);
        let mut announce = Vec::new();
        for h in &old_view.segments {
            if old.contains(&h.name().id) {
                announce.extend_from_slice(h.segment().component_paths());
                h.segment().mark_obsolete();
            }
        }
        // Journal the deletions now, so the last handle's drop (maybe on a reader's
        // thread) only unlinks. If this fails the announcement is forgotten: that drop
        // writes the journal itself, and the orphan scan at next open covers a crash.
        if let Err(e) = self.deleter.announce(&announce) {
            tracing::warn!(error = %e, "could not journal obsolete segments; the next open's orphan scan will find them");
        }
        drop(m);
        // Holding no lock now: the old view goes unless a read still borrows it (then
        // that read's end drops it), and with it the segments it alone held.
        drop(old_view);
        Ok(())
    }

    /// Drop this set's own view (at close), once reads still borrowing it end (up to a
    /// second; a view a read keeps longer shows in the close report as leaked
    /// handles). Segments go when their last handle does.
    ///
    /// Under the manifest lock, and refusing every later change ([`Error::Closed`]): a
    /// flush or compaction still running cannot swap a view of live segments back in
    /// after this one (it finishes first, or is refused).
    pub(crate) fn release(&self) {
        let m = match self.manifest.try_lock() {
            Some(m) => m,
            None => {
                let dir = self.dir.join(&self.table);
                self.deleter
                    .rules()
                    .point("release waits for a change", &dir);
                self.manifest.lock()
            }
        };
        *self.frozen.lock() = Some(Frozen::Closed);
        let old = self.view.replace(|_| Vec::new());
        drop(m);
        if !ViewCell::settle(old, std::time::Duration::from_secs(1)) {
            tracing::warn!(table = %self.table, "reads still hold the table's view after a second; its segments go when they end (deletions then wait for the next open)");
        }
    }
}

/// Open a segment and wrap it in its first handle.
pub fn open_handle(
    dir: &Path,
    name: &SegmentName,
    opts: &SetOptions,
    deleter: &Deleter,
) -> Result<SegmentHandle> {
    let reader = SegmentReader::open_with(dir, name, opts.modes, &opts.reader)?;
    Ok(SegmentHandle::new(
        Segment::new(reader, deleter.clone()),
        opts.tracker.clone(),
    ))
}
