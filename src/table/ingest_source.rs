//! The checks a bulk ingest runs on its files before it adopts any
//! (`table::lsm::ingest`): every path names a segment by one of its component files,
//! outside the store directory and without `..`; the segment is whole and its bytes
//! verify (every record, index block and the meta's statistics: `SegmentReader::verify`);
//! its cells are timestamped at or below the store's clock; no segment is named twice.
//! The first failure is returned and nothing is adopted.

use std::collections::BTreeSet;
use std::path::{Component as PathPart, Path, PathBuf};

use crate::config::DiskAccessMode;
use crate::error::{Error, Result};
use crate::format::meta::SegmentStats;
use crate::segment::{Component, SegmentName, SegmentReader};

/// One segment to ingest, checked.
#[derive(Debug)]
pub(crate) struct Source {
    /// The directory holding its components.
    pub(crate) dir: PathBuf,
    /// Its name there (any table name: the store renames it).
    pub(crate) name: SegmentName,
    /// Its statistics, verified against its cells.
    pub(crate) stats: SegmentStats,
}

impl Source {
    /// The path of component `c`.
    pub(crate) fn path(&self, c: Component) -> PathBuf {
        self.name.path(&self.dir, c)
    }
}

fn refuse(path: &Path, reason: impl Into<String>) -> Error {
    Error::Ingest {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Check the files of every table of an ingest (see the module docs): `store_dir` is
/// the store's canonical directory, `clock` the largest timestamp its clock handed out.
pub(crate) fn check_all(
    store_dir: &Path,
    clock: u64,
    parts: &[&[PathBuf]],
) -> Result<Vec<Vec<Source>>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(parts.len());
    for paths in parts {
        let mut sources = Vec::with_capacity(paths.len());
        for p in paths.iter() {
            let (dir, name) = locate(store_dir, p)?;
            if !seen.insert((dir.clone(), name.clone())) {
                return Err(refuse(p, format!("segment {name} is named twice")));
            }
            sources.push(verify(p, dir, name, clock)?);
        }
        out.push(sources);
    }
    Ok(out)
}

/// The segment `p` names: its canonical directory and its name there.
fn locate(store_dir: &Path, p: &Path) -> Result<(PathBuf, SegmentName)> {
    if p.components().any(|c| matches!(c, PathPart::ParentDir)) {
        return Err(refuse(p, "the path has a `..` component"));
    }
    let file = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
    let Some((name, _)) = SegmentName::parse_file_name(file) else {
        return Err(refuse(
            p,
            "not a segment component (<table>-<id>-Data.db, -Index.db or -Meta.db, as SegmentWriter names them)",
        ));
    };
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = parent
        .canonicalize()
        .map_err(|e| Error::io("canonicalize", parent, e))?;
    if dir.starts_with(store_dir) {
        return Err(refuse(
            p,
            "inside the store directory (ingest adopts files written outside it)",
        ));
    }
    for c in Component::ALL {
        let cp = name.path(&dir, c);
        match std::fs::symlink_metadata(&cp) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(_) => return Err(refuse(&cp, "not a regular file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(refuse(&cp, format!("component {c:?} of segment {name} is missing")))
            }
            Err(e) => return Err(Error::io("stat", &cp, e)),
        }
    }
    Ok((dir, name))
}

/// Read and check every byte of the segment (standard reads: nothing of the caller's
/// is mapped), and its timestamps against the clock.
fn verify(p: &Path, dir: PathBuf, name: SegmentName, clock: u64) -> Result<Source> {
    let reader = SegmentReader::open(&dir, &name, DiskAccessMode::Standard.resolve())?;
    reader.verify()?;
    let stats = reader.stats().clone();
    let range_max = reader
        .range_tombstones()
        .fragments()
        .iter()
        .map(|t| t.ts)
        .max()
        .unwrap_or(0);
    drop(reader);
    let max_ts = stats.max_ts.max(range_max);
    if max_ts > clock {
        return Err(refuse(
            p,
            format!(
                "cells timestamped up to {max_ts}, past the store's clock ({clock}): \
                 take timestamps from Store::now"
            ),
        ));
    }
    Ok(Source { dir, name, stats })
}
