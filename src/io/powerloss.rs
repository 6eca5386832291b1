//! A power-loss simulator (`testing` feature only) behind the I/O boundary ([`super::fs::StoreFs`]), in the
//! manner of LevelDB's `FaultInjectionTestEnv` and RocksDB's `FaultInjectionTestFS`.
//!
//! It sees every mutating operation (create, write, fsync, directory fsync, rename,
//! hard link, unlink, mkdir, rmdir), numbers them, and can *lose power* at a chosen one:
//! that operation and every later one fail with `EIO` and change nothing. Afterwards
//! [`PowerLoss::recover`] puts the directory into a state the disk could hold after the
//! power came back:
//! - bytes written to a file since its last fsync are dropped, or with torn writes on,
//!   partly kept at 512-byte granularity with the last kept sector possibly garbage;
//! - creates, hard links, renames, unlinks and directory changes not made durable by an
//!   fsync of their directory are undone, newest first (an unlinked or replaced file is
//!   kept in a graveyard beside the store until then, so it can come back); with
//!   reordering on, each of them may instead have persisted, in any order consistent per
//!   name (POSIX orders nothing without the directory fsync).
//!
//! Files that existed before the simulator saw them are durable as they are. The
//! simulator is a test tool: it serialises the operations it sees.

#![allow(clippy::disallowed_methods)] // it restores what the boundary changed

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::fs::NameOp;
use super::FileId;

#[derive(Debug)]
enum Undo {
    Remove(PathBuf),
    RemoveTree(PathBuf),
    Recreate(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
    Restore {
        path: PathBuf,
        grave: PathBuf,
    },
}

impl Undo {
    fn paths(&self) -> Vec<&PathBuf> {
        match self {
            Undo::Remove(p) | Undo::RemoveTree(p) | Undo::Recreate(p) => vec![p],
            Undo::Rename { from, to, .. } => vec![from, to],
            Undo::Restore { path, .. } => vec![path],
        }
    }

    /// Do the two operations touch the same name, or one a name under the other's?
    fn overlaps(&self, other: &Undo) -> bool {
        self.paths().iter().any(|a| {
            other
                .paths()
                .iter()
                .any(|b| a.starts_with(b) || b.starts_with(a))
        })
    }

    fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        match self {
            Undo::Remove(p) | Undo::RemoveTree(p) | Undo::Recreate(p) => vec![p],
            Undo::Rename { from, to, .. } => vec![from, to],
            Undo::Restore { path, .. } => vec![path],
        }
    }
}

#[derive(Debug)]
struct Pending {
    undo: Undo,
    /// Directories whose fsync makes it durable (all of them).
    dirs: Vec<PathBuf>,
}

#[derive(Debug, Default)]
struct State {
    ops: u64,
    crash_at: Option<u64>,
    crashed: bool,
    crash_point: Option<String>,
    /// Files created through the simulator: durable length (last fsync).
    files: HashMap<FileId, u64>,
    pending: Vec<Pending>,
    graves: u64,
    torn: bool,
    reorder: bool,
    rng: u64,
}

#[derive(Debug)]
struct Sim {
    root: PathBuf,
    graveyard: PathBuf,
    state: Mutex<State>,
}

/// What [`PowerLoss::recover`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Name operations undone (not durable at the power loss).
    pub undone: usize,
    /// Name operations not durable at the power loss that persisted anyway (reordering).
    pub kept: usize,
    /// Files cut back to what was fsynced (or torn).
    pub truncated: usize,
    /// Bytes dropped from them.
    pub dropped_bytes: u64,
}

/// The simulator. Cheap to clone; clones share state. Attach with
/// [`super::FileRules::with_power_loss`].
#[derive(Debug, Clone)]
pub struct PowerLoss {
    sim: Arc<Sim>,
}

fn dead(what: &str, path: &Path) -> io::Error {
    io::Error::other(format!(
        "simulated power loss: {what} of {} did not happen",
        path.display()
    ))
}

fn parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl PowerLoss {
    /// A simulator for the store directory `root` (its graveyard is a sibling directory,
    /// on the same file system). `seed` drives torn writes.
    pub fn new(root: &Path, seed: u64) -> PowerLoss {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        PowerLoss {
            sim: Arc::new(Sim {
                root: root.to_path_buf(),
                graveyard: parent(root).join(format!(".{name}.powerloss-graveyard")),
                state: Mutex::new(State {
                    rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
                    ..State::default()
                }),
            }),
        }
    }

    /// A simulator for `root` that loses power when operation `at` is attempted, as the
    /// power-loss tests sweep it: torn writes at odd points, and name operations
    /// reordered at every other pair of points (`at % 4` of 2 or 3), so a sweep over
    /// consecutive points meets all four combinations.
    pub fn crashing_at(root: &Path, at: u64) -> PowerLoss {
        let sim = PowerLoss::new(root, at);
        sim.set_torn_writes(at % 2 == 1);
        sim.set_reordering(at % 4 >= 2);
        sim.crash_at(at);
        sim
    }

    /// Lose power when operation number `n` (counting from 0 since creation or the last
    /// [`PowerLoss::recover`]) is attempted.
    pub fn crash_at(&self, n: u64) {
        self.sim.state.lock().crash_at = Some(n);
    }

    /// Lose power now.
    pub fn crash_now(&self) {
        let mut st = self.sim.state.lock();
        st.crashed = true;
        st.crash_point.get_or_insert_with(|| "on request".into());
    }

    /// Keep a random part of unsynced writes (whole 512-byte sectors, the last possibly
    /// garbage) instead of dropping them all.
    pub fn set_torn_writes(&self, torn: bool) {
        self.sim.state.lock().torn = torn;
    }

    /// Let each name operation not made durable persist or not at random (in any order,
    /// as POSIX allows without a directory fsync) instead of undoing them all.
    pub fn set_reordering(&self, reorder: bool) {
        self.sim.state.lock().reorder = reorder;
    }

    /// Operations seen so far.
    pub fn ops(&self) -> u64 {
        self.sim.state.lock().ops
    }

    /// Has the power been lost?
    pub fn crashed(&self) -> bool {
        self.sim.state.lock().crashed
    }

    /// The operation at which power was lost (`"rename of <path>"`).
    pub fn crash_point(&self) -> Option<String> {
        self.sim.state.lock().crash_point.clone()
    }

    fn check(st: &mut State, what: &str, path: &Path) -> io::Result<()> {
        if st.crashed {
            return Err(dead(what, path));
        }
        let n = st.ops;
        st.ops += 1;
        if st.crash_at == Some(n) {
            st.crashed = true;
            st.crash_point = Some(format!("operation {n}: {what} of {}", path.display()));
            return Err(dead(what, path));
        }
        Ok(())
    }

    /// May an operation run (one that needs no undo record, e.g. a write)?
    pub(crate) fn admit(&self, what: &str, path: &Path) -> io::Result<()> {
        Self::check(&mut self.sim.state.lock(), what, path)
    }

    /// Run `op` as one simulated operation, recording what it did.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        path: &Path,
        op: impl FnOnce() -> io::Result<T>,
        rec: impl FnOnce(&T) -> Option<NameOp>,
    ) -> io::Result<T> {
        let mut st = self.sim.state.lock();
        Self::check(&mut st, what, path)?;
        let r = op()?;
        if let Some(n) = rec(&r) {
            let (undo, at) = match n {
                NameOp::Create(p) => (Undo::Remove(p.clone()), p),
                NameOp::Mkdir(p) => (Undo::RemoveTree(p.clone()), p),
                NameOp::Rmdir(p) => (Undo::Recreate(p.clone()), p),
            };
            st.pending.push(Pending {
                undo,
                dirs: vec![parent(&at)],
            });
        }
        Ok(r)
    }

    /// A file created through the boundary: nothing of it is durable yet.
    pub(crate) fn track_new(&self, file: &File, path: &Path) {
        let id = FileId::of_file(file, path).expect("power-loss simulator: stat of a new file");
        self.sim.state.lock().files.insert(id, 0);
    }

    /// fsync of a file: what it holds now is durable.
    pub(crate) fn sync_file(
        &self,
        file: &File,
        path: &Path,
        op: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let mut st = self.sim.state.lock();
        Self::check(&mut st, "fsync", path)?;
        // What the file holds when the fsync starts is durable after it; bytes appended
        // meanwhile (appends do not take this lock) may not be.
        let len = file.metadata()?.len();
        op()?;
        if let Ok(id) = FileId::of_file(file, path) {
            if let Some(l) = st.files.get_mut(&id) {
                *l = len;
            }
        }
        Ok(())
    }

    /// fsync of a directory: name operations in it are durable.
    /// fsync of a directory, as one step: name operations in it so far are durable.
    pub(crate) fn fsync_dir(
        &self,
        dir: &Path,
        op: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let mut st = self.sim.state.lock();
        Self::check(&mut st, "fsync dir", dir)?;
        op()?;
        for p in &mut st.pending {
            p.dirs.retain(|d| d != dir);
        }
        // A directory whose removal is durable takes its (already unlinked) entries with
        // it: those earlier unlinks cannot be undone any more.
        let mut keep = vec![true; st.pending.len()];
        for (k, p) in st.pending.iter().enumerate() {
            if let (Undo::Recreate(g), true) = (&p.undo, p.dirs.is_empty()) {
                for (j, q) in st.pending[..k].iter().enumerate() {
                    if q.dirs.iter().any(|d| d.starts_with(g)) {
                        keep[j] = false;
                    }
                }
            }
        }
        let mut keep = keep.into_iter();
        st.pending
            .retain(|p| keep.next().unwrap_or(true) && !p.dirs.is_empty());
        Ok(())
    }

    fn grave(&self, st: &mut State) -> io::Result<PathBuf> {
        fs::create_dir_all(&self.sim.graveyard)?;
        st.graves += 1;
        Ok(self.sim.graveyard.join(st.graves.to_string()))
    }

    /// Rename, keeping a replaced file so the rename can be undone.
    pub(crate) fn rename(&self, from: &Path, to: &Path, replacing: bool) -> io::Result<()> {
        let mut st = self.sim.state.lock();
        Self::check(&mut st, "rename", to)?;
        let replaced = if replacing && to.is_file() {
            let g = self.grave(&mut st)?;
            fs::hard_link(to, &g)?;
            Some(g)
        } else {
            None
        };
        if let Err(e) = fs::rename(from, to) {
            if let Some(g) = replaced {
                let _ = fs::remove_file(g);
            }
            return Err(e);
        }
        // Pending operations under a renamed directory now live under its new name.
        if from.is_dir() || to.is_dir() {
            for p in &mut st.pending {
                for path in p.undo.paths_mut().into_iter().chain(p.dirs.iter_mut()) {
                    if let Ok(rest) = path.strip_prefix(from) {
                        *path = to.join(rest);
                    }
                }
            }
        }
        let mut dirs = vec![parent(from)];
        if parent(to) != dirs[0] {
            dirs.push(parent(to));
        }
        st.pending.push(Pending {
            undo: Undo::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
                replaced,
            },
            dirs,
        });
        Ok(())
    }

    /// Unlink, keeping the file in the graveyard until the unlink is durable.
    pub(crate) fn unlink(&self, path: &Path) -> io::Result<()> {
        let mut st = self.sim.state.lock();
        Self::check(&mut st, "unlink", path)?;
        if fs::symlink_metadata(path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("unlink of directory {}", path.display()),
            ));
        }
        let g = self.grave(&mut st)?;
        fs::rename(path, &g)?;
        st.pending.push(Pending {
            undo: Undo::Restore {
                path: path.to_path_buf(),
                grave: g,
            },
            dirs: vec![parent(path)],
        });
        Ok(())
    }

    fn next_rand(st: &mut State) -> u64 {
        let mut x = st.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        st.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Bring the power back: undo what was not durable, cut files back to what was
    /// fsynced (or tear them), and start counting again with everything on disk durable.
    /// Call with the store dropped (no file of it open or mapped).
    pub fn recover(&self) -> io::Result<Recovery> {
        let mut st = self.sim.state.lock();
        let mut rep = Recovery::default();
        // With reordering on, each operation not made durable may have reached the disk
        // anyway, in any order, except that an operation on a name (or under it) can only
        // have persisted if every earlier one on that name did.
        let pending = std::mem::take(&mut st.pending);
        let mut kept = vec![false; pending.len()];
        if st.reorder {
            for i in 0..pending.len() {
                let coin = Self::next_rand(&mut st) % 2 == 0;
                kept[i] =
                    coin && (0..i).all(|j| kept[j] || !pending[j].undo.overlaps(&pending[i].undo));
            }
        }
        let mut pending: Vec<(Pending, bool)> = pending.into_iter().zip(kept).collect();
        while let Some((p, kept)) = pending.pop() {
            if kept {
                rep.kept += 1;
                continue;
            }
            rep.undone += 1;
            // Older records under a directory renamed later name it by its new name;
            // once that rename is undone they are under the old one again.
            if let Undo::Rename { from, to, .. } = &p.undo {
                if to.is_dir() {
                    for (q, _) in &mut pending {
                        for path in q.undo.paths_mut().into_iter().chain(q.dirs.iter_mut()) {
                            if let Ok(rest) = path.strip_prefix(to) {
                                *path = from.join(rest);
                            }
                        }
                    }
                }
            }
            let r = match p.undo {
                Undo::Remove(path) => ignore_missing(fs::remove_file(&path)),
                Undo::RemoveTree(path) => ignore_missing(fs::remove_dir_all(&path)),
                Undo::Recreate(path) => fs::create_dir(&path).or_else(|e| {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        Ok(())
                    } else {
                        Err(e)
                    }
                }),
                Undo::Rename { from, to, replaced } => ignore_missing(fs::rename(&to, &from))
                    .and_then(|()| match replaced {
                        Some(g) => fs::rename(g, &to),
                        None => Ok(()),
                    }),
                Undo::Restore { path, grave } => fs::rename(grave, path),
            };
            r?;
        }
        let mut files = Vec::new();
        walk(&self.sim.root, &mut files)?;
        for path in files {
            let Ok(id) = FileId::of_path(&path) else {
                continue;
            };
            let Some(&synced) = st.files.get(&id) else {
                continue;
            };
            let len = fs::metadata(&path)?.len();
            if len <= synced {
                continue;
            }
            let mut keep = synced;
            let mut scribble = false;
            if st.torn {
                let extra = len - synced;
                let cut = synced + Self::next_rand(&mut st) % (extra + 1);
                keep = (cut & !511).max(synced);
                scribble = keep > synced && Self::next_rand(&mut st) % 2 == 0;
            }
            let f = fs::OpenOptions::new().write(true).open(&path)?;
            f.set_len(keep)?;
            if scribble {
                let from = keep.saturating_sub(512).max(synced);
                let mut w = &f;
                w.seek(SeekFrom::Start(from))?;
                w.write_all(&vec![0xA5; (keep - from) as usize])?;
            }
            f.sync_all()?;
            rep.truncated += 1;
            rep.dropped_bytes += len - keep;
        }
        let _ = fs::remove_dir_all(&self.sim.graveyard);
        let (torn, reorder, rng) = (st.torn, st.reorder, st.rng);
        *st = State {
            torn,
            reorder,
            rng,
            ..State::default()
        };
        Ok(rep)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.graveyard);
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            walk(&e.path(), out)?;
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}
