//! The state machine's directory: which store is current, which snapshot is current,
//! and what is left over from a crash.
//!
//! ```text
//! sm/LOCK             held while a state machine has the directory open
//! sm/CURRENT          "gen 3\nsnap 2\n": the current store and snapshot
//! sm/gen-000003/      the state machine's segstore store
//! sm/snap-000002/     a snapshot: meta.json (openraft's SnapshotMeta) and store/
//!                     (a checkpoint of a store: hard links of its segment files)
//! sm/*.tmp            staging: a snapshot being built or received, a store being
//!                     made from a received snapshot, CURRENT being replaced
//! ```
//!
//! `CURRENT` is replaced atomically (temp file, fsync, rename, fsync of `sm/`), after
//! everything it names is durable, and it is the only thing that says what is
//! current: at open every `gen-*`, `snap-*` and `*.tmp` it does not name is removed.
//! Numbers are never reused within a run (the next one is above every name present).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use segstore::{Config, Store, Table};

use crate::error::{Error, Result};
use crate::fs::Fs;

/// The pointer file.
pub(crate) const CURRENT: &str = "CURRENT";
/// The directory's lock: one state machine at a time (taken before anything is
/// cleaned up, so a second opener never removes what the first is writing).
pub(crate) const LOCK: &str = "LOCK";
/// A snapshot's store checkpoint, inside its directory.
pub(crate) const SNAP_STORE: &str = "store";
/// A snapshot's openraft metadata, inside its directory.
pub(crate) const SNAP_META: &str = "meta.json";
/// The state machine store's table of `last_applied` and `membership`.
pub const SM_META_TABLE: &str = "raft_sm_meta";

/// What `CURRENT` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pointer {
    pub(crate) gen: u64,
    pub(crate) snap: Option<u64>,
}

impl Pointer {
    fn encode(&self) -> String {
        match self.snap {
            Some(s) => format!("gen {}\nsnap {s}\n", self.gen),
            None => format!("gen {}\n", self.gen),
        }
    }

    fn decode(text: &str) -> Option<Pointer> {
        let mut gen = None;
        let mut snap = None;
        for line in text.lines() {
            match line.split_once(' ')? {
                ("gen", n) if gen.is_none() => gen = Some(n.parse().ok()?),
                ("snap", n) if snap.is_none() => snap = Some(n.parse().ok()?),
                _ => return None,
            }
        }
        Some(Pointer { gen: gen?, snap })
    }
}

/// The numbered entries of the directory: (kind, number) of `gen-N`, `snap-N`.
fn parse_entry(name: &str) -> Option<(&str, u64)> {
    let (kind, n) = name.split_once('-')?;
    let n = n.strip_suffix(".tmp").unwrap_or(n);
    matches!(kind, "gen" | "snap" | "recv").then_some(())?;
    Some((kind, n.parse().ok()?))
}

/// The state machine directory.
#[derive(Debug)]
pub(crate) struct Layout {
    dir: PathBuf,
    pub(crate) fs: Fs,
    next: AtomicU64,
    /// Held (an advisory exclusive lock) while the state machine is open.
    _lock: std::fs::File,
}

fn lock(dir: &Path, fs: &Fs) -> Result<std::fs::File> {
    use fs2::FileExt;
    let path = dir.join(LOCK);
    let file = fs
        .open_lock_file(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    file.try_lock_exclusive()
        .map_err(|_| Error::Locked(dir.to_path_buf()))?;
    Ok(file)
}

impl Layout {
    /// Open `dir` (created if missing): read `CURRENT`, remove what it does not name.
    pub(crate) fn open(dir: &Path, fs: Fs) -> Result<(Layout, Option<Pointer>)> {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs.ensure_dir(parent)
                .map_err(|e| Error::io("create", parent, e))?;
        }
        fs.ensure_dir(dir)
            .map_err(|e| Error::io("create", dir, e))?;
        let lock = lock(dir, &fs)?;
        let pointer = read_pointer(dir)?;
        let mut max = 0;
        let mut stale = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let e = e.map_err(|e| Error::io("list", dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let keep = match (parse_entry(&name), pointer) {
                _ if name == CURRENT || name == LOCK => true,
                (Some((kind, n)), p) => {
                    max = max.max(n);
                    let named = match kind {
                        "gen" => p.map(|p| p.gen),
                        "snap" => p.and_then(|p| p.snap),
                        _ => None,
                    };
                    !name.ends_with(".tmp") && named == Some(n)
                }
                (None, _) => !name.ends_with(".tmp"),
            };
            if !keep {
                stale.push(e.path());
            }
        }
        for path in stale {
            tracing::info!(path = %path.display(), "removing what the last run left of a state machine store or snapshot");
            fs.remove_tree(&path)
                .map_err(|e| Error::io("remove", &path, e))?;
        }
        let layout = Layout {
            dir: dir.to_path_buf(),
            fs,
            next: AtomicU64::new(max + 1),
            _lock: lock,
        };
        Ok((layout, pointer))
    }

    /// A number for a new directory.
    pub(crate) fn fresh_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn gen_path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("gen-{n:06}"))
    }

    pub(crate) fn snap_path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("snap-{n:06}"))
    }

    /// A fresh staging path, `<kind>-N.tmp` (not created).
    pub(crate) fn staging(&self, kind: &str) -> PathBuf {
        self.dir.join(format!("{kind}-{:06}.tmp", self.fresh_id()))
    }

    /// Make `p` current: atomically and durably.
    pub(crate) fn write_pointer(&self, p: Pointer) -> Result<()> {
        let path = self.dir.join(CURRENT);
        self.fs
            .write_atomic(&path, p.encode().as_bytes())
            .map_err(|e| Error::io("replace", &path, e))
    }

    /// Rename a complete staging directory `from` to `to`, fsyncing it first (what it
    /// holds is durable before its name is) and the directory after.
    pub(crate) fn publish_dir(&self, from: &Path, to: &Path) -> Result<()> {
        self.fs
            .fsync_dir(from)
            .map_err(|e| Error::io("fsync dir", from, e))?;
        self.fs
            .rename(from, to)
            .map_err(|e| Error::io("rename", from, e))?;
        self.fs
            .fsync_dir(&self.dir)
            .map_err(|e| Error::io("fsync dir", &self.dir, e))
    }
}

fn read_pointer(dir: &Path) -> Result<Option<Pointer>> {
    let path = dir.join(CURRENT);
    match std::fs::read_to_string(&path) {
        Ok(text) => Pointer::decode(&text).map(Some).ok_or_else(|| {
            Error::corrupt(
                "CURRENT pointer",
                &path,
                format!("{text:?} is not \"gen N\\n[snap N\\n]\""),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

/// A snapshot directory: its files are hard links of a state machine store's segment
/// files and manifests (the store it was built from, or the store made from it).
#[derive(Debug)]
pub(crate) struct SnapDir {
    path: PathBuf,
    fs: Fs,
}

impl SnapDir {
    pub(crate) fn new(path: PathBuf, fs: Fs) -> Arc<SnapDir> {
        Arc::new(SnapDir { path, fs })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn store_dir(&self) -> PathBuf {
        self.path.join(SNAP_STORE)
    }

    /// The files a stream carries: name and length, sorted by name.
    pub(crate) fn store_files(&self) -> Result<Vec<(String, u64)>> {
        list_store_files(&self.store_dir())
    }

    /// Remove what of a retired snapshot no open store shares: a file that one of the
    /// stores in `open` still has (the same file, a hard link) may be mapped there and
    /// stays; one it no longer has was deleted by that store's deleter once nothing
    /// mapped it, and is never mapped again. True once the directory is gone.
    pub(crate) fn sweep(&self, open: &[PathBuf]) -> bool {
        let store = self.store_dir();
        let mut kept = 0;
        for e in std::fs::read_dir(&store).into_iter().flatten().flatten() {
            let path = e.path();
            let shared = open
                .iter()
                .any(|d| same_file(&d.join(e.file_name()), &path));
            if shared || self.fs.remove_file(&path).is_err() {
                kept += 1;
            }
        }
        if kept > 0 {
            return false;
        }
        match self.fs.remove_tree(&self.path) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!(dir = %self.path.display(), error = %e, "retired snapshot left for later");
                false
            }
        }
    }
}

/// The files of a checkpoint directory that a snapshot carries (every file but `LOCK`),
/// sorted by name. A directory or an unexpected name inside is an error.
pub(crate) fn list_store_files(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let e = e.map_err(|e| Error::io("list", dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let meta = e
            .metadata()
            .map_err(|err| Error::io("stat", &e.path(), err))?;
        if name == "LOCK" {
            continue;
        }
        if !meta.is_file() || !crate::stream::valid_name(&name) {
            return Err(Error::Snapshot(format!(
                "{} is not a file a snapshot can carry",
                e.path().display()
            )));
        }
        out.push((name, meta.len()));
    }
    out.sort();
    Ok(out)
}

fn same_file(a: &Path, b: &Path) -> bool {
    use segstore::memory::FileId;
    matches!((FileId::of_path(a), FileId::of_path(b)), (Ok(x), Ok(y)) if x == y)
}

/// Snapshots and stores no longer current, waiting until they can be removed.
#[derive(Debug, Default)]
pub(crate) struct Retired {
    snaps: Vec<Arc<SnapDir>>,
    gens: Vec<std::sync::Weak<Generation>>,
}

impl Retired {
    pub(crate) fn snap(&mut self, s: Arc<SnapDir>) {
        self.snaps.push(s);
    }

    /// `g` is closed and removed when its last holder drops it.
    pub(crate) fn gen(&mut self, g: &Arc<Generation>) {
        g.retire();
        self.gens.push(Arc::downgrade(g));
    }

    /// Remove the retired snapshots no stream is reading, as far as no open store
    /// (`current`, or a retired one a reader still holds) shares their files. Called
    /// after every build and install; the next open removes whatever is left.
    pub(crate) fn sweep(&mut self, current: &Generation) {
        self.gens.retain(|w| w.strong_count() > 0);
        let mut open = vec![current.store.dir().to_path_buf()];
        open.extend(
            self.gens
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .map(|g| g.store.dir().to_path_buf()),
        );
        self.snaps
            .retain(|s| Arc::strong_count(s) > 1 || !s.sweep(&open));
    }
}

/// One state machine store. Once retired (replaced by an installed snapshot's) it is
/// closed when the last holder drops it, and its directory removed if the close found
/// nothing still open in it (otherwise the next open removes it). The current one is
/// closed by [`crate::StateMachine::close`]; dropped without, it is as a crash leaves
/// it (segstore fsyncs its commit log at drop).
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) store: Store,
    pub(crate) meta: Arc<Table>,
    fs: Fs,
    retired: AtomicBool,
}

impl Generation {
    pub(crate) fn open(path: &Path, config: Config, fs: Fs) -> Result<Arc<Generation>> {
        let store = Store::open(path, config)?;
        let meta = store.table(SM_META_TABLE)?;
        Ok(Arc::new(Generation {
            store,
            meta,
            fs,
            retired: AtomicBool::new(false),
        }))
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.retired.load(Ordering::Acquire) {
            return; // the current store: closed by `StateMachine::close`, or not at all
        }
        let dir = self.store.dir().to_path_buf();
        let clean = match self.store.close() {
            Ok(report) => report.is_clean(),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "retired state machine store did not close cleanly");
                false
            }
        };
        if !clean {
            tracing::info!(dir = %dir.display(), "retired state machine store still had files open at close; the next open removes it");
            return;
        }
        if let Err(e) = self.fs.remove_tree(&dir) {
            tracing::info!(dir = %dir.display(), error = %e, "retired state machine store left for the next open");
        }
    }
}
