//! Read-only memory maps of immutable components, counted in the registry.
//!
//! A [`MappedFile`] is usually a map of the file itself (shared with the page cache). For
//! `huge_pages: anonymous_index` it can instead be a private anonymous copy of the file's
//! bytes ([`MappedFile::anonymous_copy`]), aligned to 2 MiB so the kernel can back it
//! with transparent huge pages. A copy does not pin the file, so it is not in the mapping
//! registry (invariant 1 is about file maps); it is counted in
//! [`super::residency::anonymous_copies`] instead.

use std::fs::File;
use std::ops::Range;
use std::panic::Location;
use std::path::{Path, PathBuf};

use memmap2::{Advice, Mmap, MmapOptions};

use super::registry::{registry, Registration};
use super::residency::AnonymousCopyCount;
use super::sys::{AnonRegion, AnonRegionMut};
use super::FileId;
use crate::error::{Error, Result};

/// Alignment of anonymous copies: one x86-64/arm64 (4 KiB base page) PMD huge page.
pub const HUGE_PAGE_ALIGN: usize = 2 << 20;

/// A read-only map of a whole published (immutable) file, or a private anonymous copy
/// of its bytes.
///
/// Field order matters: `map` is dropped (unmapped) before `_registration` uncounts it, so
/// the registry never shows zero while a mapping exists (invariant 1).
#[derive(Debug)]
pub struct MappedFile {
    map: Region,
    _registration: Option<Registration>,
    id: FileId,
    path: PathBuf,
}

/// The memory behind a [`MappedFile`].
#[derive(Debug)]
enum Region {
    /// A shared map of the file.
    File(Mmap),
    /// A private anonymous copy; `_count` uncounts it after `region` is unmapped.
    Copy {
        region: AnonRegion,
        _count: AnonymousCopyCount,
    },
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
    /// Map one of the store's own published components whole, as [`Self::open`].
    #[track_caller]
    pub(crate) fn open_component(
        file: &File,
        path: &Path,
        expected_len: u64,
        advice: MapAdvice,
    ) -> Result<MappedFile> {
        // SAFETY: a published component is immutable (invariant 2): nothing in this
        // process writes, truncates or replaces it while any mapping of its identity is
        // open (invariant 1, enforced by the deleter and the registry), and the store
        // directory is locked against other segstore processes (invariant 7). A process
        // that ignores the lock and truncates the file can still fault this one: that
        // limit is stated with invariant 6 (ARCHITECTURE.md) and in the README.
        unsafe { Self::open(file, path, expected_len, advice) }
    }

    /// Map `file` (opened from `path`) whole. `expected_len` is the length the caller has
    /// validated from the file's footer; the map is refused unless the file is exactly
    /// that long and non-empty, so no access through the map can fall past the end of the
    /// file as it is now.
    ///
    /// # Safety
    ///
    /// While the returned map lives, no one (this process or another) may truncate the
    /// file (through any of its hard links) or write to it. A truncated file makes every
    /// access to the pages past its new end raise `SIGBUS`, which kills the process (Linux
    /// allows the truncation; Windows refuses it while the file is mapped); a write
    /// changes bytes behind the `&[u8]` this map hands out.
    ///
    /// Hence not callable as a safe function:
    ///
    /// ```compile_fail,E0133
    /// use segstore::io::mapped::{MapAdvice, MappedFile};
    /// let path = std::env::temp_dir().join("segstore-doc-map");
    /// std::fs::write(&path, b"bytes").unwrap();
    /// let file = std::fs::File::open(&path).unwrap();
    /// let _map = MappedFile::open(&file, &path, 5, MapAdvice::Normal);
    /// ```
    #[track_caller]
    pub unsafe fn open(
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
        // SAFETY: by this function's contract nobody truncates or writes the file while
        // the map lives, and its length was checked above, so every byte of the map is
        // backed by the file and stays as it is. The map is read-only, so no aliasing
        // `&mut` can exist.
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
            map: Region::File(map),
            _registration: Some(registration),
            id,
            path: path.to_path_buf(),
        })
    }

    /// Copy `file` (opened from `path`, exactly `expected_len` bytes, as for
    /// [`Self::open`]; a copy is safe whatever happens to the file later) into private anonymous memory aligned to [`HUGE_PAGE_ALIGN`] and
    /// rounded up to a multiple of it. With `huge_pages`, the region is advised with
    /// `MADV_HUGEPAGE` before it is filled, so the faults that fill it can take huge
    /// pages; the outcome of that advice is returned beside the copy (a refusal is not an
    /// error). The copy is read-only once filled.
    pub fn anonymous_copy(
        file: &File,
        path: &Path,
        expected_len: u64,
        huge_pages: bool,
    ) -> Result<(MappedFile, Option<std::io::Result<()>>)> {
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        if meta.len() != expected_len || expected_len == 0 {
            return Err(Error::corrupt(
                path,
                0,
                format!(
                    "file is {} bytes, expected {expected_len} (refusing to copy)",
                    meta.len()
                ),
            ));
        }
        let len = usize::try_from(expected_len)
            .map_err(|_| Error::corrupt(path, 0, "file too large to copy on this platform"))?;
        let id = FileId::of_file(file, path)?;
        let (mut region, advice) = AnonRegionMut::new(len, HUGE_PAGE_ALIGN, huge_pages)
            .map_err(|e| Error::io("mmap anonymous", path, e))?;
        super::sys::read_exact_at(file, region.as_mut_slice(), 0)
            .map_err(|e| Error::io("read", path, e))?;
        let region = region
            .freeze()
            .map_err(|e| Error::io("mprotect", path, e))?;
        let count = AnonymousCopyCount::new(region.whole().len() as u64);
        Ok((
            MappedFile {
                map: Region::Copy {
                    region,
                    _count: count,
                },
                _registration: None,
                id,
                path: path.to_path_buf(),
            },
            advice,
        ))
    }

    /// The mapped bytes (the file's bytes, in either kind of region).
    #[inline(always)]
    pub fn as_slice(&self) -> &[u8] {
        match &self.map {
            Region::File(m) => m,
            Region::Copy { region, .. } => region.as_slice(),
        }
    }

    /// Ask the kernel to start reading `len` bytes at `offset` into the page cache
    /// (`MADV_WILLNEED`), for a reader walking forward or back through a map advised
    /// [`MapAdvice::Random`] (which turns the kernel's own readahead off). Clamped to
    /// the map; a refusal is ignored (it is only a hint); nothing for an anonymous copy
    /// (already in memory) or off Unix.
    pub fn will_need(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        if let Region::File(m) = &self.map {
            let end = offset.saturating_add(len).min(m.len());
            if offset < end {
                if let Err(e) = m.advise_range(Advice::WillNeed, offset, end - offset) {
                    tracing::debug!(path = %self.path.display(), error = %e, "MADV_WILLNEED failed (ignored)");
                }
            }
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    /// The whole mapping as the kernel sees it: the file map, or the anonymous copy
    /// including its zero padding up to the 2 MiB boundary. Advice and locks cover this
    /// range, so the kernel never has to split the mapping.
    pub fn whole_region(&self) -> &[u8] {
        match &self.map {
            Region::File(m) => m,
            Region::Copy { region, .. } => region.whole(),
        }
    }

    /// Address range of [`Self::whole_region`], for matching against `/proc/self/smaps`.
    /// The end is rounded up to the page size, as the kernel's mapping is.
    pub fn addr_range(&self) -> Range<usize> {
        let w = self.whole_region();
        let start = w.as_ptr() as usize;
        start..start + w.len().next_multiple_of(super::sys::page_size())
    }

    /// True for a private anonymous copy, false for a map of the file.
    pub fn is_anonymous_copy(&self) -> bool {
        matches!(self.map, Region::Copy { .. })
    }

    /// File identity of the mapped (or copied) file.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// The path this map was opened through.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // writes its own test files
mod tests {
    use super::*;

    /// The second line of defence: `open` itself refuses to map a file whose length is
    /// not the length the caller validated (so a file truncated between the reader's
    /// check and the map cannot be mapped past its end), and registers nothing.
    #[test]
    fn open_refuses_a_length_it_was_not_promised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t-1-Data.db");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let len = bytes.len() as u64;
        for claimed in [0, len - 1, len + 1, len + 4096, u64::MAX] {
            // SAFETY: a temp file of this test, which nothing else writes or truncates.
            match unsafe { MappedFile::open(&file, &path, claimed, MapAdvice::Normal) } {
                Err(Error::Corrupt {
                    path: p, offset: 0, ..
                }) => assert_eq!(p, path),
                other => panic!("claimed {claimed}: {other:?}"),
            }
            assert_eq!(registry().stats_under(dir.path()).maps, 0);
        }
        let m = MappedFile::open_component(&file, &path, len, MapAdvice::Normal).unwrap();
        assert_eq!(m.as_slice(), bytes.as_slice());
        assert_eq!(registry().stats_under(dir.path()).maps, 1);
        drop(m);
        assert_eq!(registry().stats_under(dir.path()).maps, 0);
    }
}
