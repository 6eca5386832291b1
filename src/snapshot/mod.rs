//! Snapshots: hard links of every live component under `snapshots/<tag>/` plus a
//! manifest, staged in `snapshots/<tag>.<n>.tmp/` (a directory per attempt) and renamed
//! into place, then fsynced (as RocksDB's checkpoint does). Where hard links fail, components are copied.
//!
//! A snapshot is visible exactly when `snapshots/<tag>/manifest` exists and is not
//! pending deletion. Clearing asks the deleter to remove the manifest first (the
//! snapshot disappears from listings at once), then every component, then the
//! directory; under the Windows rule a component still mapped (a reader of the snapshot,
//! or of the live segment it links to) goes when its last mapping closes, at close, or
//! at the next open. A crash while creating leaves only a `.tmp` staging directory,
//! which the next open removes; a crash while clearing leaves the journal.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::lifecycle::{Deleter, PendingDeletion, PendingReason, SnapshotManifest, View};
use crate::segment::{validate_name, Component, SegmentName};

/// Directory holding all snapshots.
pub use crate::layout::SNAPSHOTS_DIR;
/// File name of a snapshot's manifest.
pub use crate::layout::SNAPSHOT_MANIFEST as MANIFEST;

/// What `list` reports of one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotInfo {
    /// Tag.
    pub tag: String,
    /// Creation time, microseconds since the Unix epoch.
    pub created_micros: u64,
    /// Ephemeral (cleared at close and next open).
    pub ephemeral: bool,
    /// Segments per table.
    pub tables: BTreeMap<String, Vec<u64>>,
    /// Bytes of all components.
    pub size: u64,
    /// Bytes not shared with live segments.
    pub true_size: u64,
}

/// Path of a snapshot's directory.
pub fn snapshot_dir(store: &Path, tag: &str) -> PathBuf {
    store.join(SNAPSHOTS_DIR).join(tag)
}

/// Create snapshot `tag` of the given live views (table name, view).
///
/// An error means the snapshot is not known to be durable. If only the final directory
/// fsync failed, the renamed snapshot is visible now and may or may not survive a power
/// loss: clear it (or create it again under another tag) to be sure of either.
pub fn create(
    store: &Path,
    tag: &str,
    views: &[(String, std::sync::Arc<View>)],
    ephemeral: bool,
    deleter: &Deleter,
) -> Result<()> {
    validate_name("snapshot tag", tag)?;
    let root = store.join(SNAPSHOTS_DIR);
    let fs = deleter.fs();
    fs.create_dir_all(&root)?;
    let dest = root.join(tag);
    let waiting = pending_under(deleter, &Path::new(SNAPSHOTS_DIR).join(tag));
    if !waiting.is_empty() {
        return Err(tag_pending(tag, &waiting));
    }
    if dest.exists() {
        return Err(Error::AlreadyExists {
            kind: "snapshot",
            name: tag.to_string(),
        });
    }
    // The tag may have been cleared earlier: make sure no journaled deletion of the old
    // snapshot can ever apply to the new one.
    deleter.reserve(&dest)?;
    // A staging directory of its own per attempt: a failed attempt's directory may wait
    // for its deletion (its hard links are mapped under the Windows rule), and the tag
    // must not stay taken meanwhile. Names with '.' are never tags, so listings skip
    // them and the next open removes any left behind.
    static ATTEMPT: AtomicU64 = AtomicU64::new(0);
    let staging = loop {
        let n = ATTEMPT.fetch_add(1, Ordering::Relaxed);
        let s = root.join(crate::layout::staging_dir_name(tag, n));
        if !s.exists() && !deleter.is_pending(&s) {
            break s;
        }
    };
    fs.create_dir(&staging)?;
    let result = (|| {
        let mut manifest = SnapshotManifest {
            created_micros: now_micros(),
            ephemeral,
            tables: BTreeMap::new(),
        };
        for (table, view) in views {
            let ids = manifest.tables.entry(table.clone()).or_default();
            for h in &view.segments {
                for c in Component::ALL {
                    let src = h.name().path(h.dir(), c);
                    let dst = staging.join(h.name().file_name(c));
                    if fs.hard_link(&src, &dst).is_err() {
                        fs.copy_durable(&src, &dst)?;
                    }
                }
                ids.insert(h.name().id);
            }
        }
        // Publishing the manifest fsyncs the staging directory, which makes the links
        // above durable too, before the rename below.
        fs.write_atomic(&staging.join(MANIFEST), &manifest.encode())?;
        fs.rename(&staging, &dest).map_err(|e| {
            if dest.exists() {
                // Another attempt with this tag published first.
                Error::AlreadyExists {
                    kind: "snapshot",
                    name: tag.to_string(),
                }
            } else {
                e
            }
        })?;
        fs.fsync_dir(&root)
    })();
    if result.is_err() {
        // Nothing published: remove what was staged (never mapped).
        let _ = discard_staging(&staging, deleter);
    }
    result
}

/// Deletions pending at or under `rel` (relative to the store directory).
fn pending_under(deleter: &Deleter, rel: &Path) -> Vec<PendingDeletion> {
    deleter
        .pending_and_held()
        .into_iter()
        .filter(|p| p.path.starts_with(rel))
        .collect()
}

/// The error for a cleared tag whose files still wait: how many, and why.
fn tag_pending(tag: &str, waiting: &[PendingDeletion]) -> Error {
    let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
    for p in waiting {
        let why = match p.reason {
            PendingReason::Mapped => "still mapped",
            PendingReason::Refused(_) => "refused by the OS, retried",
            PendingReason::NotEmpty => "directories holding them",
            PendingReason::Queued | PendingReason::Held => "queued",
        };
        *by_reason.entry(why).or_default() += 1;
    }
    let why: Vec<String> = by_reason.iter().map(|(w, n)| format!("{n} {w}")).collect();
    Error::SnapshotTagPending {
        tag: tag.to_string(),
        files: waiting.len(),
        why: why.join(", "),
    }
}

/// Ask the deleter to remove a staging directory and its contents.
pub(crate) fn discard_staging(staging: &Path, deleter: &Deleter) -> Result<()> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(staging) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    paths.sort();
    paths.push(staging.to_path_buf());
    deleter.delete(&paths)
}

/// Read the manifest of a visible snapshot.
pub fn load(store: &Path, tag: &str, deleter: &Deleter) -> Result<SnapshotManifest> {
    validate_name("snapshot tag", tag)?;
    let mpath = snapshot_dir(store, tag).join(MANIFEST);
    if !mpath.exists() || deleter.is_pending(&mpath) {
        return Err(Error::NotFound {
            kind: "snapshot",
            name: tag.to_string(),
        });
    }
    SnapshotManifest::load(&mpath)
}

/// Clear snapshot `tag`: manifest first, then components, then the directory.
pub fn clear(store: &Path, tag: &str, deleter: &Deleter) -> Result<()> {
    let m = load(store, tag, deleter)?;
    let dir = snapshot_dir(store, tag);
    let mut paths = vec![dir.join(MANIFEST)];
    for (table, ids) in &m.tables {
        for &id in ids {
            let n = SegmentName::new(table, id)?;
            paths.extend(Component::ALL.iter().map(|&c| n.path(&dir, c)));
        }
    }
    // Anything else that ended up in the directory (a crash mid-copy cannot, since the
    // directory is renamed into place whole, but be thorough).
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let known: BTreeSet<PathBuf> = paths.iter().cloned().collect();
        let mut extra: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| !known.contains(p))
            .collect();
        extra.sort();
        paths.extend(extra);
    }
    paths.push(dir);
    deleter.delete(&paths)
}

/// Visible snapshots: tags with a manifest not pending deletion.
pub fn list_tags(store: &Path, deleter: &Deleter) -> Result<Vec<String>> {
    let root = store.join(SNAPSHOTS_DIR);
    let rd = match std::fs::read_dir(&root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", &root, e)),
    };
    let mut tags = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Error::io("list", &root, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if validate_name("snapshot tag", &name).is_err() {
            continue; // staging dirs and foreign names
        }
        let m = e.path().join(MANIFEST);
        if m.exists() && !deleter.is_pending(&m) {
            tags.push(name);
        }
    }
    tags.sort();
    Ok(tags)
}

/// Describe snapshot `tag`; `live` says which (table, id) are live now (for true size).
pub fn info(
    store: &Path,
    tag: &str,
    deleter: &Deleter,
    live: &dyn Fn(&str, u64) -> bool,
) -> Result<SnapshotInfo> {
    let m = load(store, tag, deleter)?;
    let dir = snapshot_dir(store, tag);
    let (mut size, mut true_size) = (0u64, 0u64);
    for (table, ids) in &m.tables {
        for &id in ids {
            let n = SegmentName::new(table, id)?;
            for c in Component::ALL {
                let p = n.path(&dir, c);
                let len = std::fs::metadata(&p)
                    .map_err(|e| Error::io("stat", &p, e))?
                    .len();
                size += len;
                if !live(table, id) {
                    true_size += len;
                }
            }
        }
    }
    Ok(SnapshotInfo {
        tag: tag.to_string(),
        created_micros: m.created_micros,
        ephemeral: m.ephemeral,
        tables: m
            .tables
            .iter()
            .map(|(t, ids)| (t.clone(), ids.iter().copied().collect()))
            .collect(),
        size,
        true_size,
    })
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
