//! Recovery at open: what a crash (or anything else) left in the store directory, and
//! what is deleted, kept or refused. Runs after the deleter has completed its journal
//! (`deletions.pending`) and before any table is opened.
//!
//! # Rules
//! 1. Temp files the store creates (`<table>.manifest.tmp`, `deletions.pending.tmp`,
//!    half-written segment components, `commitlog/positions.tmp`; names per
//!    [`crate::layout`]) are deleted, but the segment id of a half-written segment is
//!    never reused: it counts towards the table's largest id seen. Names the store
//!    never creates are left alone.
//! 2. Every `<table>.manifest` is loaded (a bad one is [`Error::Corrupt`] naming it).
//!    The tables returned are exactly those with a manifest, each with the largest
//!    segment id seen on disk for it, so new ids never reuse a file name.
//! 3. A segment file whose table has a manifest that does not name it, and whose
//!    deletion is not already journaled, is an orphan (a crash between publishing a
//!    segment and the manifest naming it, or between a manifest replacement and the
//!    deletion request): deleted through the deleter.
//! 4. Segment files of a table with no manifest are refused: [`Error::Corrupt`] naming
//!    the missing manifest, and nothing at all is deleted. A table's manifest is
//!    published durably when its segment set is first opened, before any segment of it
//!    can be written, so no crash leaves segment files without one: the manifest was
//!    deleted or lost, and deleting the segments as orphans would drop the table
//!    silently. Temp files alone do not count (they are removed under rule 1), nor do
//!    files whose deletion is already journaled.
//! 5. Under `snapshots/`: a snapshot directory whose name is a valid tag and whose
//!    manifest exists and is not ephemeral is kept (a bad manifest is
//!    [`Error::Corrupt`]), but files in it that its manifest does not name are
//!    deleted. Any other directory (a staging directory `<tag>.<n>.tmp`, an ephemeral
//!    snapshot, one without a manifest) is deleted whole, manifest first, so a crash
//!    during that deletion never leaves a visible partial snapshot. Directories whose
//!    deletion is already journaled are left to the deleter.
//! 6. Nothing is deleted except through the deleter, and every deletion is requested in
//!    one call after the whole scan, so an error found by the scan deletes nothing.
//! 7. A table that `commitlog/positions` says has records flushed into segments must
//!    have a manifest (the manifest exists before the positions file first names the
//!    table): otherwise [`Error::Corrupt`] naming the missing manifest, rather than
//!    opening an empty table while replay skips the records it thinks are flushed.
//!    Tables that positions name with nothing flushed hold no segment data.
//! 8. A table dropped by [`crate::Store::drop_table`] has a `dropped <name> <seq> <id>`
//!    line in `commitlog/positions`, written durably before any of its files is
//!    deleted (the drop's commit point). A manifest of that name whose `next_id` is
//!    below `<id>` is the dropped table's: it is deleted (after its segment files), and
//!    the table is not returned. Segment files of that name with an id below `<id>` and
//!    no live manifest are the dropped table's too: deleted, not refused under rule 4.
//!    So a crash at any point of a drop leaves a store that opens: before the commit
//!    point with the table whole, after it without the table.
//! 9. A missing `commitlog/positions` while the oldest commit log file starts beyond
//!    sequence number 1 is [`Error::Corrupt`] naming the positions file: log files are
//!    released only after the positions file that makes them unneeded is durable, so
//!    the file existed and was deleted or lost. Without it, replay would not know which
//!    records are in segments nor which tables were dropped. The reason names that
//!    evidence (the oldest file and its first number) and the segments on disk. A
//!    missing positions file with a log that starts at 1 is a new log (a crash before
//!    the first positions file leaves segments and the whole log: replay re-applies
//!    records already in segments, which is harmless).
//!
//! 10. A committed bulk ingest whose journal (`ingest.pending`) still names segments is
//!     completed: its segments count as named by their manifests (never orphans) and
//!     are added to them, durably, before the journal is emptied and before anything
//!     is deleted (`recovery/ingest.rs`). A read-only open adds them to its views only.
//!
//! [`scan`] applies the rules without deleting anything (a read-only open);
//! [`recover`] then hands what they doom to the deleter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::layout::StoreFile;
use crate::lifecycle::set::manifest_path;
use crate::lifecycle::{Deleter, Manifest, SnapshotManifest};
use crate::segment::{validate_name, Component, SegmentName};
use crate::snapshot;
use crate::table::commitlog::replay;
use crate::table::positions::{DroppedTable, Positions, FILE as POSITIONS_FILE};
use crate::table::tables::COMMITLOG_DIR;

mod ingest;
pub(crate) use ingest::Ingested;

/// What the recovery scan found.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Every table with a live manifest, with the largest segment id seen on disk for
    /// it, so new ids never reuse a name.
    pub(crate) tables: BTreeMap<String, u64>,
    /// Dropped tables (rule 8), from `commitlog/positions`.
    pub(crate) dropped: BTreeMap<String, DroppedTable>,
    /// What the rules delete, in order.
    pub(crate) doomed: Vec<PathBuf>,
    /// Rule 10: segments a committed ingest adds to their manifests.
    pub(crate) ingested: Ingested,
}

/// Recovery at open: [`scan`], then delete what it doomed through the deleter.
pub(crate) fn recover(dir: &Path, deleter: &Deleter) -> Result<Recovered> {
    let r = scan(dir, deleter)?;
    ingest::roll_forward(dir, deleter.fs(), &r.ingested)?;
    deleter.delete(&r.doomed)?;
    Ok(r)
}

/// The recovery scan (module docs), deleting nothing.
pub(crate) fn scan(dir: &Path, deleter: &Deleter) -> Result<Recovered> {
    let positions = match Positions::read(&dir.join(COMMITLOG_DIR))? {
        Some(p) => p,
        None => {
            refuse_missing_positions(dir)?;
            Positions::default()
        }
    };
    // Rule 8: the dropped table's own names.
    let dropped_id = |table: &str, id: u64| {
        positions
            .dropped
            .get(table)
            .is_some_and(|d| id < d.first_id)
    };
    let mut tables: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut max_ids: BTreeMap<String, u64> = BTreeMap::new();
    let mut doomed: Vec<PathBuf> = Vec::new();
    let mut dropped_manifests: Vec<PathBuf> = Vec::new();
    let mut segment_files: Vec<(PathBuf, SegmentName)> = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for e in rd {
        let e = e.map_err(|e| Error::io("list", dir, e))?;
        let path = e.path();
        match StoreFile::parse(Path::new(&e.file_name())) {
            Some(StoreFile::Temp(f)) => {
                // Never reuse the id of a half-written segment, even while its deletion
                // waits.
                if let StoreFile::Segment(seg, _) = *f {
                    let m = max_ids.entry(seg.table.clone()).or_insert(0);
                    *m = (*m).max(seg.id);
                }
                doomed.push(path);
            }
            Some(StoreFile::Manifest(table)) => {
                let m = Manifest::load(&path)?;
                if dropped_id(&table, m.next_id) {
                    if !deleter.is_pending(&path) {
                        tracing::info!(table = %table, "completing the drop of a table");
                        dropped_manifests.push(path);
                    }
                    continue;
                }
                max_ids.insert(table.clone(), m.next_id.saturating_sub(1));
                tables.insert(table, m.segments);
            }
            Some(StoreFile::Segment(seg, _)) => segment_files.push((path, seg)),
            // Ours and kept (lock, journal, commitlog/, snapshots/), or not ours at all:
            // recovery deletes only names the store creates.
            _ => {}
        }
    }
    // Rule 10: a committed ingest's segments are live.
    let ingested = ingest::scan(dir, &mut tables)?;
    // Rule 4: segment files of a table without a manifest are refused, not deleted.
    let mut unexplained: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, seg) in segment_files {
        let m = max_ids.entry(seg.table.clone()).or_insert(0);
        *m = (*m).max(seg.id);
        if deleter.is_pending(&path) {
            continue;
        }
        match tables.get(&seg.table) {
            Some(live) if live.contains(&seg.id) => {}
            Some(_) => {
                tracing::info!(path = %path.display(), "removing orphan segment file");
                doomed.push(path);
            }
            None if dropped_id(&seg.table, seg.id) => doomed.push(path),
            None => {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                unexplained
                    .entry(seg.table.clone())
                    .or_default()
                    .push(name.into_owned());
            }
        }
    }
    if let Some((table, mut files)) = unexplained.into_iter().next() {
        files.sort();
        let shown = files.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
        let more = files.len().saturating_sub(3);
        return Err(Error::corrupt(
            manifest_path(dir, &table),
            0,
            format!(
                "missing: table {table:?} has {} segment file(s) ({shown}{}) but no manifest; \
                 refusing to open rather than delete them (restore the manifest, or move \
                 the files out of the store directory to drop the table)",
                files.len(),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                },
            ),
        ));
    }
    // Rule 8: a dropped table's manifest goes after its segment files.
    doomed.extend(dropped_manifests);
    // Rule 7: a table the commit log positions say was flushed must have a manifest.
    for (table, &flushed) in &positions.flushed {
        if flushed > 0 && !tables.contains_key(table) {
            return Err(Error::corrupt(
                manifest_path(dir, table),
                0,
                format!(
                    "missing: {} says table {table:?} has flushed records up to sequence \
                     number {flushed} into segments, but the table has no manifest",
                    dir.join(COMMITLOG_DIR).join(POSITIONS_FILE).display()
                ),
            ));
        }
    }
    // Ids of temp files of tables without a manifest are of no use.
    max_ids.retain(|t, _| tables.contains_key(t));
    recover_commitlog_temps(dir, &mut doomed)?;
    recover_snapshots(dir, deleter, &mut doomed)?;
    Ok(Recovered {
        tables: max_ids,
        dropped: positions.dropped,
        doomed,
        ingested,
    })
}

/// Rule 9: the positions file is missing; refuse if the commit log shows it existed.
fn refuse_missing_positions(dir: &Path) -> Result<()> {
    let log_dir = dir.join(COMMITLOG_DIR);
    let Some((oldest, first_seq)) = replay::oldest_start(&log_dir)? else {
        return Ok(());
    };
    if first_seq <= 1 {
        return Ok(());
    }
    let mut segments: BTreeMap<String, usize> = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let e = e.map_err(|e| Error::io("list", dir, e))?;
        if let Some(StoreFile::Segment(seg, Component::Data)) =
            StoreFile::parse(Path::new(&e.file_name()))
        {
            *segments.entry(seg.table).or_default() += 1;
        }
    }
    let held = if segments.is_empty() {
        String::new()
    } else {
        let per_table: Vec<String> = segments
            .iter()
            .map(|(t, n)| format!("{n} of table {t:?}"))
            .collect();
        format!(
            ", and {} segment(s) are on disk ({})",
            segments.values().sum::<usize>(),
            per_table.join(", ")
        )
    };
    let name = oldest.file_name().unwrap_or_default().to_string_lossy();
    Err(Error::corrupt(
        log_dir.join(POSITIONS_FILE),
        0,
        format!(
            "missing, but it existed: the oldest commit log file {name} starts at sequence \
             number {first_seq}, so older log files were released, which happens only after \
             this file is written{held}; without it replay cannot tell which records are in \
             segments or which tables were dropped (restore it from a backup)"
        ),
    ))
}

/// A `commitlog/positions.tmp` left by a crash while the positions were replaced.
fn recover_commitlog_temps(dir: &Path, doomed: &mut Vec<PathBuf>) -> Result<()> {
    let log_dir = dir.join(COMMITLOG_DIR);
    let rd = match std::fs::read_dir(&log_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list", &log_dir, e)),
    };
    for e in rd {
        let e = e.map_err(|e| Error::io("list", &log_dir, e))?;
        let rel = Path::new(COMMITLOG_DIR).join(e.file_name());
        if let Some(StoreFile::Temp(_)) = StoreFile::parse(&rel) {
            doomed.push(e.path());
        }
    }
    Ok(())
}

fn recover_snapshots(dir: &Path, deleter: &Deleter, doomed: &mut Vec<PathBuf>) -> Result<()> {
    let root = dir.join(snapshot::SNAPSHOTS_DIR);
    let rd = match std::fs::read_dir(&root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list", &root, e)),
    };
    for e in rd {
        let e = e.map_err(|e| Error::io("list", &root, e))?;
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if deleter.is_pending(&path) {
            continue;
        }
        let mpath = path.join(snapshot::MANIFEST);
        let keep: Option<SnapshotManifest> =
            if validate_name("snapshot tag", &name).is_ok() && mpath.exists() {
                let m = SnapshotManifest::load(&mpath)?;
                (!m.ephemeral).then_some(m)
            } else {
                None
            };
        let Ok(files) = std::fs::read_dir(&path) else {
            continue;
        };
        let mut files: Vec<PathBuf> = files.filter_map(|f| f.ok().map(|f| f.path())).collect();
        files.sort();
        match keep {
            Some(m) => {
                for f in files {
                    let fname = f
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    let named = fname == snapshot::MANIFEST
                        || SegmentName::parse_file_name(&fname).is_some_and(|(s, _)| {
                            m.tables
                                .get(&s.table)
                                .is_some_and(|ids| ids.contains(&s.id))
                        });
                    if !named {
                        doomed.push(f);
                    }
                }
            }
            None => {
                tracing::info!(snapshot = %name, "removing partial or ephemeral snapshot left by the last run");
                // Manifest first, so the snapshot is invisible even if a crash follows.
                files.sort_by_key(|f| {
                    f.file_name() != Some(std::ffi::OsStr::new(snapshot::MANIFEST))
                });
                doomed.extend(files);
                doomed.push(path);
            }
        }
    }
    Ok(())
}
