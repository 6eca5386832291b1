//! This crate's file boundary: every change it makes to the file system itself (the
//! `CURRENT` pointer, snapshot directories and the files streamed into them, hard links
//! of an installed snapshot, removal of retired directories) goes through [`Fs`].
//! segstore's stores do their own I/O through segstore's boundary.
//!
//! With the `testing` feature each operation goes through segstore's `StoreFs` with the
//! store configuration's [`FileRules`], so the power-loss simulator and the Windows
//! emulation see this crate's operations in the same order as the stores'. Without it,
//! the same operations go to `std::fs`.

#![allow(clippy::disallowed_methods)] // the one place of this crate that mutates files

use std::io;
use std::path::{Path, PathBuf};

use segstore::FileRules;

/// A file being written through [`Fs`].
pub(crate) struct FsFile {
    #[cfg(feature = "testing")]
    inner: segstore::io::FsFile,
    #[cfg(not(feature = "testing"))]
    inner: std::fs::File,
    path: PathBuf,
}

impl FsFile {
    /// Append all of `bytes`.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        #[cfg(feature = "testing")]
        return self.inner.append(bytes).map_err(into_io);
        #[cfg(not(feature = "testing"))]
        {
            use std::io::Write;
            self.inner.write_all(bytes)
        }
    }

    /// fsync the file.
    pub(crate) fn sync_all(&self) -> io::Result<()> {
        #[cfg(feature = "testing")]
        return self.inner.sync_all().map_err(into_io);
        #[cfg(not(feature = "testing"))]
        self.inner.sync_all()
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The file operations of one node directory, obeying the store configuration's rules.
#[derive(Clone, Debug)]
pub(crate) struct Fs {
    #[cfg(feature = "testing")]
    inner: segstore::io::StoreFs,
    #[cfg(feature = "testing")]
    rules: FileRules,
}

#[cfg(feature = "testing")]
fn into_io(e: segstore::Error) -> io::Error {
    match e {
        segstore::Error::Io { source, .. } => source,
        e => io::Error::other(e.to_string()),
    }
}

impl Fs {
    /// The boundary of directory `root` under `rules` (used only with `testing`).
    pub(crate) fn new(root: &Path, rules: &FileRules) -> Fs {
        #[cfg(not(feature = "testing"))]
        let _ = (root, rules);
        Fs {
            #[cfg(feature = "testing")]
            inner: segstore::io::StoreFs::new(root, rules),
            #[cfg(feature = "testing")]
            rules: rules.clone(),
        }
    }

    /// Create a new file (failing if it exists).
    pub(crate) fn create_new(&self, path: &Path) -> io::Result<FsFile> {
        #[cfg(feature = "testing")]
        let inner = self.inner.create_new(path).map_err(into_io)?;
        #[cfg(not(feature = "testing"))]
        let inner = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(FsFile {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// Open the lock file `path` (created if missing; its content is nothing).
    pub(crate) fn open_lock_file(&self, path: &Path) -> io::Result<std::fs::File> {
        if !path.exists() {
            match self.create_new(path) {
                Ok(f) => drop(f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        std::fs::File::open(path)
    }

    /// Create directory `dir` (its parent must exist).
    pub(crate) fn create_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(feature = "testing")]
        return self.inner.create_dir(dir).map_err(into_io);
        #[cfg(not(feature = "testing"))]
        std::fs::create_dir(dir)
    }

    /// Create `dir` if missing, durably (its parent fsynced).
    pub(crate) fn ensure_dir(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        self.create_dir(dir)?;
        self.fsync_dir(dir.parent().unwrap_or(Path::new(".")))
    }

    /// fsync a directory (a no-op on Windows).
    pub(crate) fn fsync_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(feature = "testing")]
        return self.inner.fsync_dir(dir).map_err(into_io);
        #[cfg(not(feature = "testing"))]
        {
            #[cfg(unix)]
            std::fs::File::open(dir)?.sync_all()?;
            let _ = dir;
            Ok(())
        }
    }

    /// Rename `from` to `to` (replacing a file at `to`).
    pub(crate) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        #[cfg(feature = "testing")]
        return self.inner.rename(from, to).map_err(into_io);
        #[cfg(not(feature = "testing"))]
        std::fs::rename(from, to)
    }

    /// Hard-link `src` at `dst`.
    pub(crate) fn hard_link(&self, src: &Path, dst: &Path) -> io::Result<()> {
        #[cfg(feature = "testing")]
        return self.inner.hard_link(src, dst).map_err(into_io);
        #[cfg(not(feature = "testing"))]
        std::fs::hard_link(src, dst)
    }

    /// Write `bytes` to the new file `path` and fsync it (not the directory).
    pub(crate) fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut f = self.create_new(path)?;
        f.append(bytes)?;
        f.sync_all()
    }

    /// Replace `dest` by `bytes` atomically and durably: temp file, fsync, rename,
    /// fsync of the directory.
    pub(crate) fn write_atomic(&self, dest: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut tmp = dest.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        if tmp.exists() {
            self.remove_tree(&tmp)?;
        }
        self.write_new(&tmp, bytes)?;
        self.rename(&tmp, dest)?;
        self.fsync_dir(dest.parent().unwrap_or(Path::new(".")))
    }

    /// Remove a file or a directory tree that nothing names any more (a retired state
    /// machine store, closed; a superseded snapshot; a staging directory). Not durable
    /// by itself: whatever survives a crash is removed again at the next open.
    ///
    /// With `testing`, the rules are asked about every file first (the Windows
    /// emulation refuses one that is mapped). With the simulator: refused after the
    /// power loss like every other operation,
    /// and the tree's directories are fsynced through the boundary first, so that no
    /// operation the simulator would undo is left under a path that is gone.
    pub(crate) fn remove_tree(&self, path: &Path) -> io::Result<()> {
        self.check_delete(path)?;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        #[cfg(feature = "testing")]
        if let Some(sim) = self.rules.power_loss() {
            if sim.crashed() {
                return Err(io::Error::other(format!(
                    "simulated power loss: removal of {} did not happen",
                    path.display()
                )));
            }
            self.fsync_tree(path)?;
            if let Some(parent) = path.parent() {
                self.fsync_dir(parent)?;
            }
        }
        if meta.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        }
    }

    /// Unlink one file (a retired snapshot's link that no open store shares).
    pub(crate) fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check_delete(path)?;
        self.remove_tree(path)
    }

    /// With `testing`: may `path` (or every file under it) be deleted under the rules
    /// (the Windows emulation refuses a file whose identity is mapped)?
    fn check_delete(&self, path: &Path) -> io::Result<()> {
        #[cfg(feature = "testing")]
        {
            use segstore::io::rules::FileOp;
            if path.is_dir() {
                for e in std::fs::read_dir(path)? {
                    self.check_delete(&e?.path())?;
                }
                return Ok(());
            }
            self.rules.check(FileOp::Delete, path)
        }
        #[cfg(not(feature = "testing"))]
        {
            let _ = path;
            Ok(())
        }
    }

    #[cfg(feature = "testing")]
    fn fsync_tree(&self, path: &Path) -> io::Result<()> {
        if !path.is_dir() {
            return Ok(());
        }
        for e in std::fs::read_dir(path)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                self.fsync_tree(&e.path())?;
            }
        }
        self.fsync_dir(path)
    }
}
