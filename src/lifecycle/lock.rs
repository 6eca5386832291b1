//! One process per store directory (invariant 7): an advisory exclusive lock on
//! `<dir>/LOCK` through fs2, held for the life of the store. A store opened read-only
//! takes a shared lock instead ([`DirLock::acquire_shared`]): any number of read-only
//! opens at a time, none while the store is open for writing and the reverse.

use std::fs::File;
use std::path::{Path, PathBuf};

use fs2::FileExt;

use crate::error::{Error, Result};
use crate::io::StoreFs;

/// Name of the lock file.
pub use crate::layout::LOCK_FILE;

/// The held lock; released on drop.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Lock `dir`, or fail with [`Error::Locked`] naming it. Changes nothing on failure
    /// (the lock file is created once and never removed).
    pub fn acquire(fs: &StoreFs) -> Result<DirLock> {
        let dir = fs.root();
        let path = dir.join(LOCK_FILE);
        let file = fs.open_lock_file(&path)?;
        match file.try_lock_exclusive() {
            Ok(()) => Ok(DirLock {
                file,
                dir: dir.to_path_buf(),
            }),
            Err(e) if e.kind() == fs2::lock_contended_error().kind() => {
                Err(Error::Locked(dir.to_path_buf()))
            }
            Err(e) => Err(Error::io("lock", &path, e)),
        }
    }

    /// Take a shared lock on `dir` (read-only opens), or fail with [`Error::Locked`]
    /// while it is open for writing. Writes nothing: the lock file is opened for
    /// reading, and a directory without one is not a store ([`Error::NotFound`]).
    pub fn acquire_shared(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound {
                    kind: "store (no LOCK file)",
                    name: dir.display().to_string(),
                })
            }
            Err(e) => return Err(Error::io("open", &path, e)),
        };
        match FileExt::try_lock_shared(&file) {
            Ok(()) => Ok(DirLock {
                file,
                dir: dir.to_path_buf(),
            }),
            Err(e) if e.kind() == fs2::lock_contended_error().kind() => {
                Err(Error::Locked(dir.to_path_buf()))
            }
            Err(e) => Err(Error::io("lock", &path, e)),
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = FileExt::unlock(&self.file);
    }
}
