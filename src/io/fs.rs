//! The I/O boundary: every mutation of the file system by the crate goes through a
//! [`StoreFs`] (create, write, fsync of files and directories, rename, hard link, unlink,
//! directory creation and removal). `std::fs` mutations anywhere else are refused by
//! `clippy.toml` (`disallowed-methods`); reads (`read`, `read_dir`, `File::open`, maps)
//! go to the OS directly.
//!
//! Each operation first asks the [`FileRules`]: the Windows emulation (delete, replace
//! and truncate of a mapped file refused), injected faults ([`super::rules::Faults`]),
//! and the power-loss simulator ([`super::powerloss::PowerLoss`]), which counts every
//! operation, can fail all of them from a chosen one on (the machine lost power), and
//! afterwards puts the directory back into the state that was durable. Without faults and
//! simulator each hook is one branch on a `None`.
//!
//! Publishing follows invariant 5: write a temp file, fsync it, rename it into place,
//! fsync the directory.

#![allow(clippy::disallowed_methods)] // this is the one place that may mutate files

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::powerloss::PowerLoss;
use super::rules::{FileOp, FileRules};
use crate::error::{Error, Result};

/// Suffix of files being written; never read, removed at open.
pub const TMP_SUFFIX: &str = ".tmp";

/// The temp name used while writing `dest`.
pub fn tmp_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(TMP_SUFFIX);
    s.into()
}

/// A name operation the boundary did, for the simulator to undo if it is not durable.
#[derive(Debug)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))] // read by the simulator only
pub(crate) enum NameOp {
    /// A new file or hard link at this path.
    Create(PathBuf),
    /// A new directory.
    Mkdir(PathBuf),
    /// A directory removed (it was empty).
    Rmdir(PathBuf),
}

/// A store directory's I/O handle: the rules, faults and simulator every mutation obeys.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct StoreFs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    rules: FileRules,
}

impl StoreFs {
    /// The handle of directory `root`, obeying `rules`.
    pub fn new(root: &Path, rules: &FileRules) -> StoreFs {
        StoreFs {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                rules: rules.clone(),
            }),
        }
    }

    /// The directory this handle serves.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The rules (Windows emulation, faults, simulator) operations obey.
    pub fn rules(&self) -> &FileRules {
        &self.inner.rules
    }

    fn sim(&self) -> Option<&PowerLoss> {
        self.inner.rules.simulator()
    }

    /// Ask the simulator (if any) whether the operation may run: after a simulated power
    /// loss nothing reaches the disk.
    fn gate(&self, what: &'static str, path: &Path) -> Result<()> {
        match self.sim() {
            None => Ok(()),
            Some(s) => s.admit(what, path).map_err(|e| Error::io(what, path, e)),
        }
    }

    /// Run `op` and record `rec` with the simulator as one step (no other operation of
    /// the simulator interleaves).
    fn logged<T>(
        &self,
        what: &'static str,
        path: &Path,
        op: impl FnOnce() -> io::Result<T>,
        rec: impl FnOnce(&T) -> Option<NameOp>,
    ) -> Result<T> {
        match self.sim() {
            None => op().map_err(|e| Error::io(what, path, e)),
            Some(s) => s
                .run(what, path, op, rec)
                .map_err(|e| Error::io(what, path, e)),
        }
    }

    /// Create `dir` and its missing parents, durably: the parent of each directory
    /// created is fsynced.
    pub fn create_dir_all(&self, dir: &Path) -> Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            self.create_dir_all(parent)?;
        }
        match self.create_dir(dir) {
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => match parent {
                Some(p) => self.fsync_dir(p),
                None => Ok(()),
            },
        }
    }

    /// Create directory `dir` (its parent must exist).
    pub fn create_dir(&self, dir: &Path) -> Result<()> {
        self.logged(
            "create dir",
            dir,
            || fs::create_dir(dir),
            |_| Some(NameOp::Mkdir(dir.to_path_buf())),
        )
    }

    /// Create a new file for writing; fails if it exists.
    pub fn create_new(&self, path: &Path) -> Result<FsFile> {
        let file = self.logged(
            "create",
            path,
            || OpenOptions::new().write(true).create_new(true).open(path),
            |_| Some(NameOp::Create(path.to_path_buf())),
        )?;
        if let Some(s) = self.sim() {
            s.track_new(&file, path);
        }
        Ok(FsFile {
            file,
            path: path.to_path_buf(),
            fs: self.clone(),
        })
    }

    /// Open (creating once, never truncating) the lock file at `path`.
    pub fn open_lock_file(&self, path: &Path) -> Result<File> {
        let existed = path.exists();
        self.logged(
            "open",
            path,
            || {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
            },
            |_| (!existed).then(|| NameOp::Create(path.to_path_buf())),
        )
    }

    /// fsync a directory so creates, renames and unlinks in it are durable. A no-op on
    /// Windows, where directories cannot be opened this way and NTFS journals metadata.
    pub fn fsync_dir(&self, dir: &Path) -> Result<()> {
        self.inner
            .rules
            .check_dir_fsync(dir)
            .map_err(|e| Error::io("fsync dir", dir, e))?;
        let op = || {
            #[cfg(unix)]
            File::open(dir)?.sync_all()?;
            Ok(())
        };
        match self.sim() {
            None => op().map_err(|e| Error::io("fsync dir", dir, e)),
            Some(s) => s
                .fsync_dir(dir, op)
                .map_err(|e| Error::io("fsync dir", dir, e)),
        }
    }

    /// Rename `from` to `to`, asking the rules first when `to` exists (a replace).
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let replacing = to.exists();
        if replacing {
            self.inner
                .rules
                .check(FileOp::Replace, to)
                .map_err(|e| Error::io("replace", to, e))?;
        }
        self.inner
            .rules
            .check_rename(from, to)
            .map_err(|e| Error::io("rename", from, e))?;
        match self.sim() {
            None => fs::rename(from, to).map_err(|e| Error::io("rename", from, e)),
            Some(s) => s
                .rename(from, to, replacing)
                .map_err(|e| Error::io("rename", from, e)),
        }
    }

    /// Publish a fully written and fsynced temp file: rename, then fsync the directory.
    pub fn publish(&self, tmp: &Path, dest: &Path) -> Result<()> {
        self.rename(tmp, dest)?;
        self.fsync_dir(dest.parent().unwrap_or(Path::new(".")))
    }

    /// Write `bytes` to `dest` atomically and durably (invariant 5).
    pub fn write_atomic(&self, dest: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = tmp_path(dest);
        if tmp.exists() {
            self.discard_temp(&tmp)?; // a stale temp file of ours from a crash
        }
        let f = self.create_new(&tmp)?;
        let r = f.append(bytes).and_then(|()| f.sync_all());
        drop(f);
        if let Err(e) = r {
            // Our own temp file, never mapped: not the deleter's business (like the
            // segment writer's). If this fails too, the next open removes it.
            let _ = self.discard_temp(&tmp);
            return Err(e);
        }
        self.publish(&tmp, dest).inspect_err(|_| {
            let _ = self.discard_temp(&tmp);
        })
    }

    /// Hard-link `src` at `dst`.
    pub fn hard_link(&self, src: &Path, dst: &Path) -> Result<()> {
        self.inner
            .rules
            .check_link(dst)
            .map_err(|e| Error::io("hard link", dst, e))?;
        self.logged(
            "hard link",
            dst,
            || fs::hard_link(src, dst),
            |_| Some(NameOp::Create(dst.to_path_buf())),
        )
    }

    /// Copy `src` to `dst` and fsync it (where hard links are not supported).
    pub fn copy_durable(&self, src: &Path, dst: &Path) -> Result<()> {
        let bytes = fs::read(src).map_err(|e| Error::io("read", src, e))?;
        let f = self.create_new(dst)?;
        f.append(&bytes)?;
        f.sync_all()
    }

    /// Remove a temp file of our own that was never published nor mapped (a writer
    /// giving up). Anything else is deleted by the deleter.
    pub fn discard_temp(&self, path: &Path) -> Result<()> {
        debug_assert!(path.as_os_str().to_string_lossy().ends_with(TMP_SUFFIX));
        self.unlink_raw("remove temp", path)
    }

    /// Unlink one file, obeying the rules. Only the deleter calls this (invariant 1).
    pub(crate) fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.rules.check(FileOp::Delete, path)?;
        self.unlink_raw("unlink", path).map_err(into_io)
    }

    fn unlink_raw(&self, what: &'static str, path: &Path) -> Result<()> {
        match self.sim() {
            None => fs::remove_file(path).map_err(|e| Error::io(what, path, e)),
            Some(s) => s.unlink(path).map_err(|e| Error::io(what, path, e)),
        }
    }

    /// Remove an empty directory (fails while it holds anything). Only the deleter calls
    /// this.
    pub(crate) fn remove_empty_dir(&self, path: &Path) -> io::Result<()> {
        self.logged(
            "remove dir",
            path,
            || fs::remove_dir(path),
            |_| Some(NameOp::Rmdir(path.to_path_buf())),
        )
        .map_err(into_io)
    }
}

fn into_io(e: Error) -> io::Error {
    match e {
        Error::Io { source, .. } => source,
        e => io::Error::other(e.to_string()),
    }
}

/// A file open for writing through a [`StoreFs`]: writes and fsyncs obey its faults and
/// simulator. Read it back through `std::fs` by its path.
#[derive(Debug)]
pub struct FsFile {
    file: File,
    path: PathBuf,
    fs: StoreFs,
}

impl FsFile {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write all of `bytes` at the file's position, through the injected write faults (a
    /// short write stores a prefix and fails, as a full disk would).
    pub fn append(&self, bytes: &[u8]) -> Result<()> {
        self.fs.gate("write", &self.path)?;
        if let Some((n, e)) = self.fs.rules().write_fault(&self.path, bytes.len()) {
            let _ = (&self.file).write_all(&bytes[..n.min(bytes.len())]);
            return Err(Error::io("write", &self.path, e));
        }
        (&self.file)
            .write_all(bytes)
            .map_err(|e| Error::io("write", &self.path, e))
    }

    /// fsync data and metadata.
    pub fn sync_all(&self) -> Result<()> {
        self.sync(false)
    }

    /// fsync data (and the metadata needed to read it back).
    pub fn sync_data(&self) -> Result<()> {
        self.sync(true)
    }

    fn sync(&self, data_only: bool) -> Result<()> {
        self.fs
            .rules()
            .check_fsync(&self.path)
            .map_err(|e| Error::io("fsync", &self.path, e))?;
        let op = || {
            if data_only {
                self.file.sync_data()
            } else {
                self.file.sync_all()
            }
        };
        match self.fs.sim() {
            None => op().map_err(|e| Error::io("fsync", &self.path, e)),
            Some(s) => s
                .sync_file(&self.file, &self.path, op)
                .map_err(|e| Error::io("fsync", &self.path, e)),
        }
    }
}

/// Buffered writers over an [`FsFile`] (segment components): each write passes the
/// simulator's gate; faults are injected by [`FsFile::append`] (segment footers).
impl Write for FsFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.fs.gate("write", &self.path).map_err(into_io)?;
        (&self.file).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
