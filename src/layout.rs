//! The names of everything in a store directory, in one place: [`StoreFile::path`] builds
//! a path, [`StoreFile::parse`] classifies one (recovery's scan, the orphan check), and
//! the two are inverse (tested). Every other module asks this one for names.
//!
//! ```text
//! LOCK                                   the advisory lock (invariant 7)
//! deletions.pending                      the deleter's journal
//! ingest.pending                         the ingest journal (empty between ingests)
//! <table>.manifest                       a table's live segments
//! <table>-<id>-{Data,Index,Meta}.db      segment components
//! commitlog/positions                    how far segments reach into the log
//! commitlog/commitlog-<n>.log            commit log files
//! snapshots/<tag>/manifest               a snapshot's manifest
//! snapshots/<tag>/<table>-<id>-*.db      its hard links (or copies)
//! snapshots/<tag>.<n>.tmp/               a snapshot being staged
//! <any of the files above>.tmp           being written (write temp, fsync, rename)
//! ```
//!
//! Table names and snapshot tags are `[A-Za-z0-9_]{1,64}` (`segment::validate_name`), so
//! no name can hold a separator, `..`, `-` or `.`, and parsing is unambiguous.

use std::path::{Component as PathComponent, Path, PathBuf};

use crate::segment::{validate_name, Component, SegmentName};

/// The lock file.
pub const LOCK_FILE: &str = "LOCK";
/// The deleter's journal.
pub const JOURNAL: &str = "deletions.pending";
/// The ingest journal (`lifecycle::ingest_journal`).
pub const INGEST_JOURNAL: &str = "ingest.pending";
/// Suffix of a table manifest.
pub const MANIFEST_SUFFIX: &str = ".manifest";
/// The commit log's directory.
pub const COMMITLOG_DIR: &str = "commitlog";
/// The commit log positions file, inside [`COMMITLOG_DIR`].
pub const POSITIONS_FILE: &str = "positions";
/// File name prefix of commit log files.
pub const COMMITLOG_PREFIX: &str = "commitlog-";
/// File name suffix of commit log files.
pub const COMMITLOG_SUFFIX: &str = ".log";
/// The snapshots' directory.
pub const SNAPSHOTS_DIR: &str = "snapshots";
/// A snapshot's manifest, inside its directory.
pub const SNAPSHOT_MANIFEST: &str = "manifest";
pub use crate::io::fs::TMP_SUFFIX;

/// One file or directory of a store, by what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFile {
    /// `LOCK`.
    Lock,
    /// `deletions.pending`.
    Journal,
    /// `ingest.pending`.
    IngestJournal,
    /// `<table>.manifest`.
    Manifest(String),
    /// `<table>-<id>-<Component>.db`.
    Segment(SegmentName, Component),
    /// `commitlog/`.
    CommitLogDir,
    /// `commitlog/positions`.
    Positions,
    /// `commitlog/commitlog-<n>.log`.
    CommitLog(u64),
    /// `snapshots/`.
    SnapshotsDir,
    /// `snapshots/<tag>/`.
    Snapshot(String),
    /// `snapshots/<tag>/manifest`.
    SnapshotManifest(String),
    /// `snapshots/<tag>/<segment component>`.
    SnapshotSegment(String, SegmentName, Component),
    /// `snapshots/<tag>.<n>.tmp/`: attempt `n` at snapshot `tag`, being staged.
    SnapshotStaging(String, u64),
    /// Anything in a staging directory (`snapshots/<tag>.<n>.tmp/<name>`).
    InStaging(String, u64, String),
    /// `<file>.tmp`: the file being written.
    Temp(Box<StoreFile>),
}

impl StoreFile {
    /// The path under store directory `store`.
    pub fn path(&self, store: &Path) -> PathBuf {
        store.join(self.relative())
    }

    /// The path relative to the store directory.
    pub fn relative(&self) -> PathBuf {
        match self {
            StoreFile::Lock => LOCK_FILE.into(),
            StoreFile::Journal => JOURNAL.into(),
            StoreFile::IngestJournal => INGEST_JOURNAL.into(),
            StoreFile::Manifest(t) => format!("{t}{MANIFEST_SUFFIX}").into(),
            StoreFile::Segment(n, c) => segment_file_name(n, *c).into(),
            StoreFile::CommitLogDir => COMMITLOG_DIR.into(),
            StoreFile::Positions => Path::new(COMMITLOG_DIR).join(POSITIONS_FILE),
            StoreFile::CommitLog(n) => Path::new(COMMITLOG_DIR).join(commitlog_file_name(*n)),
            StoreFile::SnapshotsDir => SNAPSHOTS_DIR.into(),
            StoreFile::Snapshot(tag) => Path::new(SNAPSHOTS_DIR).join(tag),
            StoreFile::SnapshotManifest(tag) => {
                Path::new(SNAPSHOTS_DIR).join(tag).join(SNAPSHOT_MANIFEST)
            }
            StoreFile::SnapshotSegment(tag, n, c) => Path::new(SNAPSHOTS_DIR)
                .join(tag)
                .join(segment_file_name(n, *c)),
            StoreFile::SnapshotStaging(tag, n) => {
                Path::new(SNAPSHOTS_DIR).join(staging_dir_name(tag, *n))
            }
            StoreFile::InStaging(tag, n, name) => Path::new(SNAPSHOTS_DIR)
                .join(staging_dir_name(tag, *n))
                .join(name),
            StoreFile::Temp(f) => {
                let mut s = f.relative().into_os_string();
                s.push(TMP_SUFFIX);
                s.into()
            }
        }
    }

    /// What `rel` (relative to the store directory) is, or `None` for a name the store
    /// never creates.
    pub fn parse(rel: &Path) -> Option<StoreFile> {
        let parts: Vec<&str> = rel
            .components()
            .map(|c| match c {
                PathComponent::Normal(s) => s.to_str(),
                _ => None,
            })
            .collect::<Option<_>>()?;
        match parts.as_slice() {
            [name] => parse_top(name),
            [COMMITLOG_DIR, POSITIONS_FILE] => Some(StoreFile::Positions),
            [COMMITLOG_DIR, name] => match name.strip_suffix(TMP_SUFFIX) {
                Some(POSITIONS_FILE) => Some(StoreFile::Temp(Box::new(StoreFile::Positions))),
                Some(_) => None,
                None => parse_commitlog_file_name(name).map(StoreFile::CommitLog),
            },
            [SNAPSHOTS_DIR, dir] => parse_snapshot_dir(dir),
            [SNAPSHOTS_DIR, dir, name] => match parse_snapshot_dir(dir)? {
                StoreFile::SnapshotStaging(tag, n) => {
                    Some(StoreFile::InStaging(tag, n, (*name).to_string()))
                }
                StoreFile::Snapshot(tag) if *name == SNAPSHOT_MANIFEST => {
                    Some(StoreFile::SnapshotManifest(tag))
                }
                StoreFile::Snapshot(tag) => {
                    let (seg, c) = parse_segment_file_name(name)?;
                    Some(StoreFile::SnapshotSegment(tag, seg, c))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

fn parse_top(name: &str) -> Option<StoreFile> {
    if let Some(stem) = name.strip_suffix(TMP_SUFFIX) {
        return match parse_top(stem)? {
            f @ (StoreFile::Journal
            | StoreFile::IngestJournal
            | StoreFile::Manifest(_)
            | StoreFile::Segment(..)) => {
                Some(StoreFile::Temp(Box::new(f)))
            }
            _ => None,
        };
    }
    match name {
        LOCK_FILE => Some(StoreFile::Lock),
        JOURNAL => Some(StoreFile::Journal),
        INGEST_JOURNAL => Some(StoreFile::IngestJournal),
        COMMITLOG_DIR => Some(StoreFile::CommitLogDir),
        SNAPSHOTS_DIR => Some(StoreFile::SnapshotsDir),
        _ => {
            if let Some(table) = name.strip_suffix(MANIFEST_SUFFIX) {
                return validate_name("table", table)
                    .is_ok()
                    .then(|| StoreFile::Manifest(table.to_string()));
            }
            let (seg, c) = parse_segment_file_name(name)?;
            Some(StoreFile::Segment(seg, c))
        }
    }
}

fn parse_snapshot_dir(dir: &str) -> Option<StoreFile> {
    if let Some(stem) = dir.strip_suffix(TMP_SUFFIX) {
        let (tag, n) = stem.rsplit_once('.')?;
        if validate_name("snapshot tag", tag).is_err() || !is_decimal(n) {
            return None;
        }
        return Some(StoreFile::SnapshotStaging(tag.to_string(), n.parse().ok()?));
    }
    validate_name("snapshot tag", dir)
        .is_ok()
        .then(|| StoreFile::Snapshot(dir.to_string()))
}

fn is_decimal(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

/// `<table>-<id>-<Component>.db`.
pub fn segment_file_name(n: &SegmentName, c: Component) -> String {
    format!("{}-{}-{}", n.table, n.id, c.suffix())
}

/// The segment and component a file name is of, if it is one.
pub fn parse_segment_file_name(file: &str) -> Option<(SegmentName, Component)> {
    let c = Component::ALL
        .into_iter()
        .find(|c| file.ends_with(c.suffix()))?;
    let stem = file.strip_suffix(c.suffix())?.strip_suffix('-')?;
    let (table, id) = stem.rsplit_once('-')?;
    if !is_decimal(id) {
        return None;
    }
    let name = SegmentName::new(table, id.parse().ok()?).ok()?;
    Some((name, c))
}

/// `commitlog-<n>.log`.
pub fn commitlog_file_name(id: u64) -> String {
    format!("{COMMITLOG_PREFIX}{id}{COMMITLOG_SUFFIX}")
}

/// The number of a commit log file name, if it is one.
pub fn parse_commitlog_file_name(name: &str) -> Option<u64> {
    let digits = name
        .strip_prefix(COMMITLOG_PREFIX)?
        .strip_suffix(COMMITLOG_SUFFIX)?;
    if !is_decimal(digits) {
        return None;
    }
    digits.parse().ok()
}

/// `<tag>.<n>.tmp`: the staging directory of attempt `n` at snapshot `tag`.
pub fn staging_dir_name(tag: &str, n: u64) -> String {
    format!("{tag}.{n}{TMP_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_]{1,64}"
    }

    fn component() -> impl Strategy<Value = Component> {
        prop::sample::select(Component::ALL.to_vec())
    }

    fn seg() -> impl Strategy<Value = SegmentName> {
        (name(), any::<u64>()).prop_map(|(t, id)| SegmentName::new(&t, id).unwrap())
    }

    fn store_file() -> impl Strategy<Value = StoreFile> {
        prop_oneof![
            Just(StoreFile::Lock),
            Just(StoreFile::Journal),
            Just(StoreFile::IngestJournal),
            name().prop_map(StoreFile::Manifest),
            (seg(), component()).prop_map(|(s, c)| StoreFile::Segment(s, c)),
            Just(StoreFile::CommitLogDir),
            Just(StoreFile::Positions),
            any::<u64>().prop_map(StoreFile::CommitLog),
            Just(StoreFile::SnapshotsDir),
            name().prop_map(StoreFile::Snapshot),
            name().prop_map(StoreFile::SnapshotManifest),
            (name(), seg(), component()).prop_map(|(t, s, c)| StoreFile::SnapshotSegment(t, s, c)),
            (name(), any::<u64>()).prop_map(|(t, n)| StoreFile::SnapshotStaging(t, n)),
            (name(), any::<u64>(), "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,19}")
                .prop_map(|(t, n, f)| StoreFile::InStaging(t, n, f)),
        ]
    }

    fn temps_of(f: StoreFile) -> Option<StoreFile> {
        matches!(
            f,
            StoreFile::Journal
                | StoreFile::IngestJournal
                | StoreFile::Manifest(_)
                | StoreFile::Segment(..)
                | StoreFile::Positions
        )
        .then(|| StoreFile::Temp(Box::new(f)))
    }

    proptest! {
        #[test]
        fn parse_inverts_path(f in store_file()) {
            let rel = f.relative();
            prop_assert_eq!(StoreFile::parse(&rel), Some(f.clone()));
            prop_assert_eq!(f.path(Path::new("/db")), Path::new("/db").join(&rel));
            if let Some(t) = temps_of(f) {
                prop_assert_eq!(StoreFile::parse(&t.relative()), Some(t));
            }
        }

        #[test]
        fn parse_never_panics(s in "[ -~]{0,80}") {
            if let Some(f) = StoreFile::parse(Path::new(&s)) {
                // Whatever parses, prints back to the same name.
                prop_assert_eq!(f.relative(), PathBuf::from(&s));
            }
        }
    }

    #[test]
    fn strangers_and_escapes_are_not_store_files() {
        for s in [
            "",
            "..",
            "../t.manifest",
            "/t.manifest",
            "t-1.manifest",
            "t-01-Data.db",
            "t--1-Data.db",
            "commitlog/commitlog-.log",
            "commitlog/commitlog-007.log",
            "commitlog/x.tmp",
            "snapshots/a.b",
            "snapshots/a.01.tmp",
            "snapshots/s/stray",
            "snapshots/s/sub/t-1-Data.db",
            "LOCK.tmp",
            "x.tmp",
        ] {
            assert_eq!(StoreFile::parse(Path::new(s)), None, "{s:?}");
        }
    }
}
