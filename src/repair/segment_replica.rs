//! [`SegmentReplica`]: a [`Replica`] over one table's segments in a [`Store`], for code
//! that writes segments itself (tests, benchmarks). The LSM table's replica is
//! [`super::TableReplica`], which shares this file's snapshot reader.
//!
//! Reads merge every segment of the current view (or of a snapshot) key by key and keep
//! the winning version ([`super::cmp_versions`]), tombstones included. `apply` writes the
//! received rows, one winner per key, as one new segment (`set.writer()` + `set.add`).
//! Snapshots are the store's ephemeral snapshots of this one table.

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::io::registry;
use crate::lifecycle::{SegmentHandle, SegmentSet};
use crate::segment::SegmentIter;
use crate::snapshot;
use crate::store::{SnapshotView, Store};
use crate::table::merge::{BoxedSource, MergeIter, TombstonePolicy};

use super::merkle::{ranges_contain, TokenRange};
use super::report::SnapshotStatus;
use super::session::{Replica, RowIter, RowSource};
use super::{cmp_versions, newer, token, ReplicaId, Row};

/// A replica of table `table` of `store`, read and written at the segment level.
#[derive(Debug)]
pub struct SegmentReplica<'a> {
    id: ReplicaId,
    store: &'a Store,
    set: Arc<SegmentSet>,
    settings: String,
}

impl<'a> SegmentReplica<'a> {
    /// Replica `id` of table `table` (created if missing) in `store`.
    pub fn new(id: ReplicaId, store: &'a Store, table: &str) -> Result<SegmentReplica<'a>> {
        Ok(SegmentReplica {
            id,
            set: store.segments(table)?,
            store,
            settings: String::new(),
        })
    }

    /// Describe the table's settings (as a schema string); replicas whose settings
    /// differ are refused by repair ([`crate::Error::RepairMismatch`]).
    pub fn with_settings(mut self, settings: impl Into<String>) -> Self {
        self.settings = settings.into();
        self
    }

    /// The table's segments.
    pub fn segments(&self) -> &Arc<SegmentSet> {
        &self.set
    }

    /// The store.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The winning version of `key` across the live segments (a tombstone included).
    pub fn get(&self, key: &[u8]) -> Result<Option<Row>> {
        let view = self.set.view();
        let mut best: Option<Row> = None;
        for h in &view.segments {
            if let Some(r) = h.get(key)? {
                best = Some(match best {
                    Some(b) => newer(b, r),
                    None => r,
                });
            }
        }
        Ok(best)
    }

    /// Every resolved row in key order.
    pub fn scan(&self) -> Result<Vec<Row>> {
        self.rows(&[TokenRange::FULL])?.collect()
    }

    /// Merge every live segment into one (a minimal compaction): the old segments become
    /// obsolete and go, with their mappings, once no reader holds them. Returns the
    /// number of segments replaced.
    pub fn compact(&self) -> Result<usize> {
        let old = self.set.live_ids();
        if old.len() < 2 {
            return Ok(0);
        }
        let rows = self.scan()?;
        let mut w = self.set.writer()?;
        let name = w.name().clone();
        for r in &rows {
            w.add(&r.key, &r.value, r.ts, r.tombstone)?;
        }
        w.finish()?;
        self.set.replace(&old, std::slice::from_ref(&name))?;
        Ok(old.len())
    }

    /// Write rows as one new segment (the same as [`Replica::apply`]).
    pub fn write(&self, rows: Vec<Row>) -> Result<()> {
        write_segment(&self.set, rows)
    }
}

/// Write `rows` (any order, any number of versions per key) as one segment holding the
/// winning version of each key.
fn write_segment(set: &SegmentSet, mut rows: Vec<Row>) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    // Per key, the winner first; then keep the first of each key.
    rows.sort_unstable_by(|a, b| a.key.cmp(&b.key).then_with(|| cmp_versions(b, a)));
    rows.dedup_by(|cur, prev| cur.key == prev.key);
    let mut w = set.writer()?;
    let name = w.name().clone();
    for r in &rows {
        w.add(&r.key, &r.value, r.ts, r.tombstone)?;
    }
    w.finish()?;
    set.add(std::slice::from_ref(&name))
}

impl RowSource for SegmentReplica<'_> {
    fn rows(&self, ranges: &[TokenRange]) -> Result<RowIter<'_>> {
        let handles = self.set.view().segments.clone();
        Ok(Box::new(merge(handles, ranges)?))
    }
}

impl Replica for SegmentReplica<'_> {
    fn id(&self) -> ReplicaId {
        self.id
    }

    fn table(&self) -> &str {
        self.set.table()
    }

    fn table_config_fingerprint(&self) -> u64 {
        let desc = format!("segstore segment table v1; cells: newest ts, then tombstone, then larger value; token xxh3-64; {}", self.settings);
        xxhash_rust::xxh3::xxh3_64(desc.as_bytes())
    }

    fn apply(&self, rows: Vec<Row>) -> Result<()> {
        write_segment(&self.set, rows)
    }

    fn snapshot_ephemeral(&self, tag: &str) -> Result<()> {
        self.store.snapshot_ephemeral(tag, Some(self.set.table()))
    }

    fn open_snapshot(&self, tag: &str) -> Result<Box<dyn RowSource + '_>> {
        Ok(Box::new(SnapshotRows::open(
            self.store,
            tag,
            self.set.table(),
        )?))
    }

    fn clear_snapshot(&self, tag: &str) -> Result<()> {
        self.store.clear_snapshot(tag)
    }

    fn snapshot_status(&self, tag: &str) -> SnapshotStatus {
        snapshot_status(self.store, tag)
    }
}

/// Mappings open through snapshot `tag`'s paths in `store`, and its paths still waiting
/// for deletion.
pub(super) fn snapshot_status(store: &Store, tag: &str) -> SnapshotStatus {
    let dir = snapshot::snapshot_dir(store.dir(), tag);
    let rel = Path::new(snapshot::SNAPSHOTS_DIR).join(tag);
    SnapshotStatus {
        mappings: registry().open_under(&dir).len(),
        pending_deletions: store
            .deleter()
            .pending()
            .iter()
            .filter(|p| p.path.starts_with(&rel))
            .count(),
    }
}

/// An open snapshot of one table: its segments stay open (and mapped) while this lives.
/// Rows are resolved across the snapshot's segments, newest wins, tombstones kept.
pub(super) struct SnapshotRows {
    view: SnapshotView,
    table: String,
}

impl SnapshotRows {
    /// Open snapshot `tag` of `store` and read table `table` from it.
    pub(super) fn open(store: &Store, tag: &str, table: &str) -> Result<SnapshotRows> {
        Ok(SnapshotRows {
            view: store.open_snapshot(tag)?,
            table: table.to_string(),
        })
    }
}

impl RowSource for SnapshotRows {
    fn rows(&self, ranges: &[TokenRange]) -> Result<RowIter<'_>> {
        let handles = self
            .view
            .tables
            .get(&self.table)
            .cloned()
            .unwrap_or_default();
        Ok(Box::new(merge(handles, ranges)?))
    }
}

/// The snapshot's segments merged by the table's k-way merge (`table::merge`, the one
/// reconciliation rule, tombstones kept), each source first filtered to the ranges.
/// Holds its segments' handles (and mappings) while it lives.
fn merge(
    handles: Vec<SegmentHandle>,
    ranges: &[TokenRange],
) -> Result<MergeIter<BoxedSource<'static>>> {
    let all = ranges == [TokenRange::FULL];
    let mut sources: Vec<BoxedSource<'static>> = Vec::with_capacity(handles.len());
    for h in handles {
        let ranges = ranges.to_vec();
        let it = SegmentIter::new::<&[u8]>(h, ..)?.filter(move |r| match r {
            Ok(row) => all || ranges_contain(&ranges, token(&row.key)),
            Err(_) => true,
        });
        sources.push(Box::new(it));
    }
    Ok(MergeIter::new(sources, TombstonePolicy::Keep))
}
