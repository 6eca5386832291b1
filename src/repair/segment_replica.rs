//! [`SegmentReplica`]: a [`Replica`] over one table's segments in a [`Store`], for code
//! that writes segments itself (tests, benchmarks). The LSM table's replica is
//! [`super::TableReplica`], which shares this file's snapshot reader.
//!
//! Reads merge every segment of the current view (or of a snapshot) key by key and keep
//! the winning version ([`super::cmp_versions`]), tombstones included, leaving out the
//! cells the segments' range tombstones delete; the range tombstones are the union of
//! the segments' (`SegmentReader::range_tombstones`). `apply` writes the received rows,
//! one winner per key, as one new segment (`set.writer()` + `set.add`), and
//! `apply_range_tombstones` one segment holding only the range tombstones received.
//! Snapshots are the store's ephemeral snapshots of this one table.

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::format::ranges::RangeTombstones;
use crate::io::registry;
use crate::lifecycle::{SegmentHandle, SegmentSet};
use crate::segment::SegmentIter;
use crate::snapshot;
use crate::store::{SnapshotView, Store};
use crate::table::merge::{BoxedSource, MergeIter, RangeFilter, TombstonePolicy};

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

    /// The winning version of `key` across the live segments (a tombstone included);
    /// a range tombstone at least as new as it wins as a point tombstone at its
    /// timestamp (as [`crate::Table::get_cell`] answers).
    pub fn get(&self, key: &[u8]) -> Result<Option<Row>> {
        let view = self.set.view();
        let mut best: Option<Row> = None;
        let mut cover = None;
        for h in &view.segments {
            cover = cover.max(h.range_tombstones().cover_ts(key));
            if let Some(r) = h.get(key)? {
                best = Some(match best {
                    Some(b) => newer(b, r),
                    None => r,
                });
            }
        }
        match cover {
            Some(ts) if best.as_ref().is_none_or(|b| b.ts <= ts) => Ok(Some(Row {
                key: key.to_vec(),
                value: Vec::new(),
                ts,
                tombstone: true,
                expires: 0,
            })),
            _ => Ok(best),
        }
    }

    /// The union of the live segments' range tombstones.
    pub fn range_tombstones(&self) -> RangeTombstones {
        union_of(&self.set.view().segments)
    }

    /// Every resolved row in key order.
    pub fn scan(&self) -> Result<Vec<Row>> {
        self.rows(&[TokenRange::FULL])?.collect()
    }

    /// Merge every live segment into one (a minimal compaction, which keeps every range
    /// tombstone): the old segments become obsolete and go, with their mappings, once
    /// no reader holds them. Returns the number of segments replaced.
    pub fn compact(&self) -> Result<usize> {
        let old = self.set.live_ids();
        if old.len() < 2 {
            return Ok(0);
        }
        let rows = self.scan()?;
        let mut w = self.set.writer()?;
        let name = w.name().clone();
        for r in &rows {
            w.add_expiring(&r.key, &r.value, r.ts, r.tombstone, r.expires)?;
        }
        w.add_range_tombstones(&self.range_tombstones())?;
        w.finish()?;
        self.set.replace(&old, std::slice::from_ref(&name))?;
        Ok(old.len())
    }

    /// Write rows as one new segment (the same as [`Replica::apply`]).
    pub fn write(&self, rows: Vec<Row>) -> Result<()> {
        write_segment(&self.set, rows, &RangeTombstones::new())
    }

    /// Write rows and range tombstones as one new segment.
    pub fn write_with_ranges(&self, rows: Vec<Row>, ranges: &RangeTombstones) -> Result<()> {
        write_segment(&self.set, rows, ranges)
    }
}

/// The union of `handles`' range tombstones.
fn union_of(handles: &[SegmentHandle]) -> RangeTombstones {
    let mut all = RangeTombstones::new();
    for h in handles {
        all.extend(h.range_tombstones());
    }
    all
}

/// Write `rows` (any order, any number of versions per key) as one segment holding the
/// winning version of each key, and `ranges`.
fn write_segment(set: &SegmentSet, mut rows: Vec<Row>, ranges: &RangeTombstones) -> Result<()> {
    if rows.is_empty() && ranges.is_empty() {
        return Ok(());
    }
    // Per key, the winner first; then keep the first of each key.
    rows.sort_unstable_by(|a, b| a.key.cmp(&b.key).then_with(|| cmp_versions(b, a)));
    rows.dedup_by(|cur, prev| cur.key == prev.key);
    let mut w = set.writer()?;
    let name = w.name().clone();
    for r in &rows {
        w.add_expiring(&r.key, &r.value, r.ts, r.tombstone, r.expires)?;
    }
    w.add_range_tombstones(ranges)?;
    w.finish()?;
    set.add(std::slice::from_ref(&name))
}

impl RowSource for SegmentReplica<'_> {
    fn rows(&self, ranges: &[TokenRange]) -> Result<RowIter<'_>> {
        let handles = self.set.view().segments.clone();
        let now = self.store.expiry_now();
        Ok(Box::new(
            merge(handles, ranges)?.map(move |r| r.map(|r| super::as_of(r, now))),
        ))
    }

    fn range_tombstones(&self) -> Result<RangeTombstones> {
        Ok(SegmentReplica::range_tombstones(self))
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
        write_segment(&self.set, rows, &RangeTombstones::new())
    }

    fn apply_range_tombstones(&self, set: &RangeTombstones) -> Result<()> {
        write_segment(&self.set, Vec::new(), set)
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
/// Rows are resolved across the snapshot's segments, newest wins, tombstones kept, the
/// cells their range tombstones delete left out; the range tombstones are the union of
/// the snapshot segments'.
pub(super) struct SnapshotRows {
    view: SnapshotView,
    table: String,
    /// The expiry clock's reading at open: rows expired by then read as tombstones.
    now: u64,
}

impl SnapshotRows {
    /// Open snapshot `tag` of `store` and read table `table` from it.
    pub(super) fn open(store: &Store, tag: &str, table: &str) -> Result<SnapshotRows> {
        Ok(SnapshotRows {
            view: store.open_snapshot(tag)?,
            table: table.to_string(),
            now: store.expiry_now(),
        })
    }
}

impl SnapshotRows {
    fn handles(&self) -> Vec<SegmentHandle> {
        self.view
            .tables
            .get(&self.table)
            .cloned()
            .unwrap_or_default()
    }
}

impl RowSource for SnapshotRows {
    fn rows(&self, ranges: &[TokenRange]) -> Result<RowIter<'_>> {
        Ok(Box::new(
            merge(self.handles(), ranges)?.map(move |r| r.map(|r| super::as_of(r, self.now))),
        ))
    }

    fn range_tombstones(&self) -> Result<RangeTombstones> {
        Ok(union_of(&self.handles()))
    }
}

/// The snapshot's segments merged by the table's k-way merge (`table::merge`, the one
/// reconciliation rule, tombstones kept, the cells the segments' range tombstones
/// delete left out), each source first filtered to the ranges. Holds its segments'
/// handles (and mappings) while it lives.
fn merge(
    handles: Vec<SegmentHandle>,
    ranges: &[TokenRange],
) -> Result<MergeIter<BoxedSource<'static>>> {
    let all = ranges == [TokenRange::FULL];
    let filter = RangeFilter {
        ranges: std::sync::Arc::new(union_of(&handles)),
        newest: handles.iter().map(|h| h.stats().max_ts).collect(),
    };
    let mut sources: Vec<BoxedSource<'static>> = Vec::with_capacity(handles.len());
    for h in handles {
        let ranges = ranges.to_vec();
        let it = SegmentIter::new::<&[u8]>(h, ..)?.filter(move |r| match r {
            Ok(row) => all || ranges_contain(&ranges, token(&row.key)),
            Err(_) => true,
        });
        sources.push(Box::new(it));
    }
    Ok(MergeIter::with_ranges(
        sources,
        TombstonePolicy::Keep,
        filter,
    ))
}
