//! Positional reads of immutable components into caller buffers.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::FileId;
use crate::error::{Error, Result};

/// An open component read with positional reads; any number of threads may read at once
/// (each read names its offset; there is no shared cursor).
#[derive(Debug)]
pub struct PositionalFile {
    file: File,
    len: u64,
    id: FileId,
    path: PathBuf,
}

impl PositionalFile {
    /// Wrap an open file whose length the caller has validated.
    pub fn new(file: File, path: &Path, len: u64) -> Result<Self> {
        let id = FileId::of_file(&file, path)?;
        Ok(PositionalFile {
            file,
            len,
            id,
            path: path.to_path_buf(),
        })
    }

    /// Fill `buf` from `offset`. A read that would pass the end of the file is corruption
    /// (something pointed past the data), reported with the offset.
    #[inline]
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(Error::corrupt(
                &self.path,
                offset,
                format!(
                    "read of {} bytes passes the end of the file ({} bytes)",
                    buf.len(),
                    self.len
                ),
            ));
        }
        super::sys::read_exact_at(&self.file, buf, offset)
            .map_err(|e| Error::io("read", &self.path, e))
    }

    /// File length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// File identity.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// Path it was opened through.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (for advice calls).
    pub fn file(&self) -> &File {
        &self.file
    }
}
