//! Bulk ingest: adopting segment files written with `SegmentWriter` into one table
//! ([`Table::ingest`]) or several at once (`Store::ingest`), atomically
//! (ARCHITECTURE.md invariant 12).
//!
//! 1. Check every file ([`crate::table::ingest_source`]); a failure adopts nothing.
//! 2. Quiesce the tables (flush and compaction locks, in name order, as
//!    `Tables::flush_then` takes them), so a close waits for the ingest and nothing
//!    changes their segments meanwhile; give each segment a fresh id of its table.
//! 3. Place the files under their store names: a hard link of each component (the
//!    caller's files are durable: `SegmentWriter` fsyncs them), or where links are
//!    refused, and always on Windows, a copy (temp, fsync, rename); then fsync the store
//!    directory. Until step 5 they are orphans: a crash leaves them to the orphan scan.
//! 4. Open the new segments and take every set's manifest lock (name order).
//! 5. Publish the ingest journal naming every new segment: the commit point.
//! 6. Replace each table's manifest with its new segments, then the journal with an
//!    empty one: both before anything can read or compact the new segments, so
//!    recovery's roll-forward never re-adds a segment compaction already replaced.
//!    Under leveled compaction each segment joins the deepest level it overlaps nothing
//!    in (`leveled::ingest_level`); a roll-forward after a crash adds them at level 0,
//!    which is correct for any segment (its later merges take them down).
//! 7. Under the commit lock (shared: a transaction's check is before or after the
//!    whole ingest) and the install lock (exclusive: a read view sees every table's new
//!    segments or none), swap every view.
//!
//! A failure before 5 retires the placed files (the deleter removes them). A failure
//! at 5 that leaves the journal's durability unknown (its directory fsync), or any
//! failure after 5, poisons every table of the ingest ([`Error::Poisoned`]): nothing
//! of it is visible in this run, nothing is deleted, and the next open completes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::compact::span_of;
use super::Table;
use crate::error::{Error, Result};
use crate::io::{fs::tmp_path, StoreFs};
use crate::lifecycle::handle::SegmentHandle;
use crate::lifecycle::set::Change;
use crate::lifecycle::ingest_journal::IngestJournal;
use crate::segment::{Component, SegmentName};
use crate::table::ingest_source::{self, Source};
use crate::table::leveled::{self, LevelSummary};
use crate::table::CompactionStrategy;

impl Table {
    /// Adopt segments written with [`SegmentWriter`](crate::segment::SegmentWriter)
    /// into this table, atomically: all of them or none, after a crash too. Each path
    /// names one segment by any of its component files. The bulk-load path; see
    /// [`Store::ingest`](crate::Store::ingest) for several tables at once, and for what
    /// happens to the files, how the cells rank and what reads and transactions see.
    pub fn ingest<P: AsRef<Path>>(&self, paths: &[P]) -> Result<()> {
        let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
        ingest_tables(&[(self, &paths[..])])
    }
}

/// One table's part of an ingest: its checked sources, then their new names and handles.
struct Part<'a> {
    table: &'a Table,
    sources: Vec<Source>,
    names: Vec<SegmentName>,
}

/// The ingest of `parts` (module docs).
pub(crate) fn ingest_tables(parts: &[(&Table, &[PathBuf])]) -> Result<()> {
    let Some((first, _)) = parts.first() else {
        return Ok(());
    };
    let ctx = &first.ctx;
    let mut order: Vec<&(&Table, &[PathBuf])> = parts.iter().collect();
    order.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for w in order.windows(2) {
        if w[0].0.name == w[1].0.name {
            return Err(Error::InvalidArgument(format!(
                "table {} appears twice in one ingest",
                w[0].0.name
            )));
        }
    }
    for (t, _) in &order {
        if !Arc::ptr_eq(&t.ctx, ctx) {
            return Err(Error::InvalidArgument(format!(
                "table {} belongs to another store than table {}",
                t.name, first.name
            )));
        }
    }
    ctx.check_writable()?;
    let store_dir = first.set.dir().to_path_buf();
    let paths: Vec<&[PathBuf]> = order.iter().map(|(_, p)| *p).collect();
    let checked = ingest_source::check_all(&store_dir, ctx.clock.last(), &paths)?;
    let mut parts: Vec<Part<'_>> = order
        .iter()
        .zip(checked)
        .filter(|(_, s)| !s.is_empty())
        .map(|((t, _), sources)| Part {
            table: t,
            sources,
            names: Vec::new(),
        })
        .collect();
    if parts.is_empty() {
        return Ok(());
    }
    let _quiet: Vec<_> = parts.iter().map(|p| p.table.quiesce()).collect();
    ctx.check_unsealed()?;
    place_all(&store_dir, &mut parts)?;
    let handles = match open_all(&parts) {
        Ok(h) => h,
        Err(e) => {
            discard(&parts);
            return Err(e);
        }
    };
    commit(&store_dir, &parts, handles)
}

/// Steps 2 and 3: fresh names, the files placed under them, the directory fsynced.
fn place_all(store_dir: &Path, parts: &mut [Part<'_>]) -> Result<()> {
    let fs = parts[0].table.set.fs().clone();
    let mut placed = || -> Result<()> {
        for p in parts.iter_mut() {
            for s in &p.sources {
                let name = p.table.set.reserve_name()?;
                p.names.push(name.clone());
                place(&fs, s, &name, store_dir)?;
            }
        }
        fs.fsync_dir(store_dir)
    };
    placed().inspect_err(|_| discard(parts))
}

/// Link (or copy) each component of `s` to its store name `name`, meta last.
fn place(fs: &StoreFs, s: &Source, name: &SegmentName, store_dir: &Path) -> Result<()> {
    for c in Component::ALL {
        let (from, to) = (s.path(c), name.path(store_dir, c));
        if cfg!(windows) || fs.hard_link(&from, &to).is_err() {
            // Windows refuses to delete a file while any of its links is mapped: a link
            // would keep the caller from deleting its own file. Copy instead.
            let tmp = tmp_path(&to);
            fs.copy_durable(&from, &tmp)?;
            fs.rename(&tmp, &to).inspect_err(|_| {
                let _ = fs.discard_temp(&tmp);
            })?;
        }
    }
    Ok(())
}

/// Hand every placed file to the deleter (nothing names them).
fn discard(parts: &[Part<'_>]) {
    for p in parts {
        p.table.set.discard(&p.names);
    }
}

fn open_all(parts: &[Part<'_>]) -> Result<Vec<Vec<SegmentHandle>>> {
    parts
        .iter()
        .map(|p| p.names.iter().map(|n| p.table.set.open_segment(n)).collect())
        .collect()
}

/// How a publish failed: before its commit point (retire the files) or after it, or
/// with the commit point in doubt (the tables are poisoned; the next open settles it).
enum Failed {
    Retire(Error),
    Poisoned(Error),
}

/// The level each of `new`, segments to ingest into `t`, joins ([`leveled::ingest_level`]
/// under leveled compaction, each seeing the ones before it; 0 under size-tiered). The
/// caller holds the table quiet: no flush or compaction changes its segments or their
/// levels meanwhile.
fn levels_for(t: &Table, new: &[SegmentHandle]) -> Vec<u32> {
    let config = t.config();
    if config.compaction.strategy != CompactionStrategy::Leveled {
        return vec![0; new.len()];
    }
    let params = config.compaction.leveled();
    let mut view = t.level_summaries(&t.set.view().segments);
    new.iter()
        .map(|h| {
            let (span, data_bytes) = (span_of(h), h.stats().data_len);
            let level = leveled::ingest_level(&view, &span, data_bytes, &params);
            view.push(LevelSummary {
                id: h.name().id,
                level,
                data_bytes,
                span,
                runs: 1,
            });
            level
        })
        .collect()
}

/// Steps 4 to 7.
fn commit(store_dir: &Path, parts: &[Part<'_>], handles: Vec<Vec<SegmentHandle>>) -> Result<()> {
    let ctx = &parts[0].table.ctx;
    let levels: Vec<Vec<u32>> = parts
        .iter()
        .zip(&handles)
        .map(|(p, h)| levels_for(p.table, h))
        .collect();
    let changes: Result<Vec<Change<'_>>> = parts.iter().map(|p| p.table.set.lock_change()).collect();
    let mut changes = match changes {
        Ok(c) => c,
        Err(e) => {
            retire(parts, handles);
            return Err(e);
        }
    };
    match publish(store_dir, parts, &levels, &mut changes) {
        Ok(()) => {}
        Err(Failed::Retire(e)) => {
            drop(changes);
            retire(parts, handles);
            return Err(e);
        }
        Err(Failed::Poisoned(e)) => return Err(e),
    }
    let max_ts = parts
        .iter()
        .flat_map(|p| p.sources.iter().map(|s| s.stats.max_ts))
        .max()
        .unwrap_or(0);
    ctx.clock.observe(max_ts);
    {
        let _commit = ctx.commit.read();
        let _install = ctx.install.write();
        for ((p, c), h) in parts.iter().zip(changes).zip(handles) {
            c.install(h);
            ctx.point("ingest swapped a view", Path::new(&p.table.name));
        }
    }
    for p in parts {
        ctx.schedule_compaction(p.table);
    }
    let counts: BTreeMap<&str, usize> = parts
        .iter()
        .map(|p| (p.table.name.as_str(), p.names.len()))
        .collect();
    tracing::info!(segments = ?counts, "segments ingested");
    Ok(())
}

/// Steps 5 and 6: the journal (the commit point), every manifest (each new segment at
/// its level of `levels`), the empty journal.
fn publish(
    store_dir: &Path,
    parts: &[Part<'_>],
    levels: &[Vec<u32>],
    changes: &mut [Change<'_>],
) -> std::result::Result<(), Failed> {
    let fs = parts[0].table.set.fs();
    let mut journal = IngestJournal::default();
    for p in parts {
        let ids = journal.segments.entry(p.table.name.clone()).or_default();
        ids.extend(p.names.iter().map(|n| n.id));
    }
    if let Err(e) = journal.store(store_dir, fs) {
        if matches!(e, Error::Io { op: "fsync dir", .. }) {
            let why = format!("the ingest journal's durability is unknown ({e})");
            return Err(Failed::Poisoned(poison(parts, &why)));
        }
        return Err(Failed::Retire(e));
    }
    parts[0].table.ctx.point("ingest committed", store_dir);
    for ((p, c), l) in parts.iter().zip(changes.iter_mut()).zip(levels) {
        if let Err(e) = c.store_added(&p.names, l) {
            let why = format!(
                "the ingest is committed, but table {}'s manifest could not be replaced ({e})",
                p.table.name
            );
            return Err(Failed::Poisoned(poison(parts, &why)));
        }
    }
    if let Err(e) = IngestJournal::default().store(store_dir, fs) {
        let why = format!("the ingest is committed, but its journal could not be emptied ({e})");
        return Err(Failed::Poisoned(poison(parts, &why)));
    }
    Ok(())
}

fn retire(parts: &[Part<'_>], handles: Vec<Vec<SegmentHandle>>) {
    for (p, h) in parts.iter().zip(handles) {
        p.table.set.retire_unpublished(h);
    }
}

/// Poison every table of the ingest (the next open settles it); the error to return.
fn poison(parts: &[Part<'_>], why: &str) -> Error {
    let why = format!("{why}; reopen the store, which completes or undoes it");
    for p in parts {
        p.table.set.poison(why.clone());
    }
    Error::Poisoned(why)
}
