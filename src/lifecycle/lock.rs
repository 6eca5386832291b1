//! One process per store directory (invariant 7): an advisory exclusive lock on
//! `<dir>/LOCK` through fs2, held for the life of the store.

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
