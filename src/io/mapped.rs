//! Read-only memory maps of immutable components, counted in the registry.

use std::fs::File;
use std::panic::Location;
use std::path::{Path, PathBuf};

use memmap2::{Advice, Mmap, MmapOptions};

use super::registry::{registry, Registration};
use super::FileId;
use crate::error::{Error, Result};

/// A read-only map of a whole published (immutable) file.
///
/// Field order matters: `map` is dropped (unmapped) before `_registration` uncounts it, so
/// the registry never shows zero while a mapping exists (invariant 1).
#[derive(Debug)]
pub struct MappedFile {
    map: Mmap,
    _registration: Registration,
    id: FileId,
    path: PathBuf,
}

/// Access pattern advice for a new map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapAdvice {
    /// Random access: no readahead (index files).
    Random,
    /// Sequential access (scans, merges).
    Sequential,
    /// Leave the kernel default.
    Normal,
}

impl MappedFile {
    /// Map `file` (opened from `path`) whole. `expected_len` is the length the caller has
    /// validated from the file's footer; the map is refused unless the file is exactly
    /// that long and non-empty, so no access through the map can fall past the end of the
    /// file (invariant 6: no SIGBUS).
    #[track_caller]
    pub fn open(
        file: &File,
        path: &Path,
        expected_len: u64,
        advice: MapAdvice,
    ) -> Result<MappedFile> {
        let opened_at = Location::caller();
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        if meta.len() != expected_len || expected_len == 0 {
            return Err(Error::corrupt(
                path,
                0,
                format!(
                    "file is {} bytes, expected {expected_len} (refusing to map)",
                    meta.len()
                ),
            ));
        }
        let len = usize::try_from(expected_len)
            .map_err(|_| Error::corrupt(path, 0, "file too large to map on this platform"))?;
        let id = FileId::of_file(file, path)?;
        let registration = registry().register(id, expected_len, path, opened_at);
        // SAFETY: the file is a published component, immutable by invariant 2: nothing in
        // this process writes, truncates or replaces it while any mapping of its identity
        // is open (invariant 1, enforced by the deleter and the registry), and its length
        // was checked above, so every byte of the map is backed by the file. The map is
        // read-only, so no aliasing `&mut` can exist.
        let map = unsafe { MmapOptions::new().len(len).map(file) }
            .map_err(|e| Error::io("mmap", path, e))?;
        let advice = match advice {
            MapAdvice::Random => Some(Advice::Random),
            MapAdvice::Sequential => Some(Advice::Sequential),
            MapAdvice::Normal => None,
        };
        #[cfg(unix)]
        if let Some(a) = advice {
            if let Err(e) = map.advise(a) {
                tracing::debug!(path = %path.display(), error = %e, "madvise failed (ignored)");
            }
        }
        #[cfg(not(unix))]
        let _ = advice;
        Ok(MappedFile {
            map,
            _registration: registration,
            id,
            path: path.to_path_buf(),
        })
    }

    /// The mapped bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }

    /// File identity of the mapped file.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// The path this map was opened through.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
