//! File identity: what the OS calls a file, not its name. Hard links share it.

use std::fmt;
use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// (device, inode) on Unix; (volume serial, file index) on Windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// Device (Unix `st_dev`) or volume serial number (Windows).
    pub dev: u64,
    /// Inode (Unix `st_ino`) or file index (Windows).
    pub ino: u64,
}

impl FileId {
    /// Identity of an open file.
    pub fn of_file(file: &File, path: &Path) -> Result<FileId> {
        super::sys::file_id(file).map_err(|e| Error::io("stat", path, e))
    }

    /// Identity of the file at `path` (follows symlinks).
    pub fn of_path(path: &Path) -> Result<FileId> {
        super::sys::path_id(path).map_err(|e| Error::io("stat", path, e))
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}:{}", self.dev, self.ino)
    }
}
