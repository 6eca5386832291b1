//! Unix implementations.
//!
//! The memory residency calls (`mlock`, `mlockall`, `madvise`, `mincore`,
//! `posix_fadvise`, `getrlimit`, anonymous maps) take the memory they act on as a slice,
//! so the caller proves the range is valid; none of them changes the bytes. Linux-only
//! advice (`MADV_HUGEPAGE`, `posix_fadvise`) returns `ErrorKind::Unsupported` elsewhere.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::ptr::NonNull;

use crate::io::FileId;

/// Identity of an open file: (st_dev, st_ino).
pub fn file_id(file: &File) -> io::Result<FileId> {
    let m = file.metadata()?;
    Ok(FileId {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Identity of the file at `path`: one `stat`, no open.
pub fn path_id(path: &std::path::Path) -> io::Result<FileId> {
    let m = std::fs::metadata(path)?;
    Ok(FileId {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Read exactly `buf.len()` bytes at `offset`.
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.read_exact_at(buf, offset)
}

/// The identities that the OS says are mapped in this process right now, read from
/// `/proc/self/maps` (Linux). `None` where the OS does not expose them.
pub fn os_mapped_identities() -> Option<Vec<FileId>> {
    let text = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut out = Vec::new();
    for line in text.lines() {
        // address perms offset dev inode [path]
        let mut it = line.split_ascii_whitespace();
        let (_addr, _perms, _off) = (it.next(), it.next(), it.next());
        let (Some(dev), Some(ino)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(ino) = ino.parse::<u64>() else {
            continue;
        };
        if ino == 0 {
            continue;
        }
        let Some((maj, min)) = dev.split_once(':') else {
            continue;
        };
        let (Ok(maj), Ok(min)) = (u64::from_str_radix(maj, 16), u64::from_str_radix(min, 16))
        else {
            continue;
        };
        out.push(FileId {
            dev: makedev(maj, min),
            ino,
        });
    }
    Some(out)
}

/// The size of a base page in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions and only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Map a C-style `-1`/`errno` return into `io::Result`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Lock the pages holding `region` in RAM (`mlock(2)`), faulting them in.
pub fn lock_region(region: &[u8]) -> io::Result<()> {
    // SAFETY: `region` is a live borrowed range of this process's memory; mlock only pins
    // its pages and never changes their contents.
    check(unsafe { libc::mlock(region.as_ptr().cast(), region.len()) })
}

/// Undo [`lock_region`] (`munlock(2)`).
pub fn unlock_region(region: &[u8]) -> io::Result<()> {
    // SAFETY: as for `lock_region`; munlock only clears the pin.
    check(unsafe { libc::munlock(region.as_ptr().cast(), region.len()) })
}

/// Lock every current and future mapping of the process (`mlockall(MCL_CURRENT |
/// MCL_FUTURE)`).
pub fn lock_all() -> io::Result<()> {
    // SAFETY: mlockall takes only flags and never changes memory contents.
    check(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) })
}

/// Undo [`lock_all`] and every other lock of the process (`munlockall(2)`).
pub fn unlock_all() -> io::Result<()> {
    // SAFETY: munlockall takes no arguments and never changes memory contents.
    check(unsafe { libc::munlockall() })
}

/// Ask for transparent huge pages on `region` (`madvise(MADV_HUGEPAGE)`). `region` must
/// start on a page boundary and should cover whole mappings: advice on part of a mapping
/// makes the kernel split it in two.
pub fn advise_huge_pages(region: &[u8]) -> io::Result<()> {
    // SAFETY: `region` is a live borrowed range of this process's memory.
    unsafe { madvise_huge(region.as_ptr(), region.len()) }
}

/// `madvise(MADV_HUGEPAGE)` on a raw range (Linux; `Unsupported` elsewhere).
///
/// # Safety
/// `ptr..ptr+len` must be memory mapped by this process (any protection). The advice only
/// sets a flag on the mapping and never changes the bytes seen through it.
unsafe fn madvise_huge(ptr: *const u8, len: usize) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: guaranteed by the caller (see above).
        check(unsafe { libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) })
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (ptr, len);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// How many pages of `region` are resident (`mincore(2)`: for file maps, in the page
/// cache). `region` must start on a page boundary.
pub fn resident_pages(region: &[u8]) -> io::Result<usize> {
    if region.is_empty() {
        return Ok(0);
    }
    let mut vec = vec![0u8; region.len().div_ceil(page_size())];
    // SAFETY: `region` is a live borrowed range; `vec` has one byte per page of it, as
    // mincore requires, and mincore only writes into `vec`.
    check(unsafe {
        libc::mincore(
            region.as_ptr() as *mut libc::c_void,
            region.len(),
            vec.as_mut_ptr().cast(),
        )
    })?;
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
}

/// Drop the clean, unmapped page cache of `file` (`posix_fadvise(POSIX_FADV_DONTNEED)`).
pub fn drop_page_cache(file: &File) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is valid for the life of `file`; the advice is a hint that
        // never changes file contents.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = file;
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// `RLIMIT_MEMLOCK` as (soft, hard) in bytes; `None` means unlimited.
pub fn memlock_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit that getrlimit fills in.
    check(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) })?;
    // rlim_t is u64 on Linux but not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    let conv = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v as u64);
    Ok((conv(r.rlim_cur), conv(r.rlim_max)))
}

/// Windows only: transparent huge pages need no privilege, so there is nothing to check.
pub fn large_pages_permitted() -> Option<bool> {
    None
}

/// Private anonymous memory mapped at an aligned address, writable until
/// [`AnonRegionMut::freeze`] makes it read-only. The whole region is one mapping.
#[derive(Debug)]
pub struct AnonRegionMut(AnonRegion);

/// Read-only private anonymous memory; unmapped on drop.
#[derive(Debug)]
pub struct AnonRegion {
    ptr: NonNull<u8>,
    /// Bytes the caller asked for.
    len: usize,
    /// Bytes mapped (`len` rounded up to the alignment).
    map_len: usize,
}

// SAFETY: the region is owned memory like a `Box<[u8]>`: only `AnonRegionMut` (unique,
// `&mut`) writes it, and `AnonRegion` is read-only, so sharing or moving it across threads
// is as safe as for `Box<[u8]>`.
unsafe impl Send for AnonRegion {}
// SAFETY: see `Send`: no interior mutability, reads only.
unsafe impl Sync for AnonRegion {}

impl AnonRegionMut {
    /// Map `len` zeroed bytes (`len > 0`), rounded up to a multiple of `align` (a power of
    /// two, at least the page size), starting at an `align`-aligned address. With
    /// `huge_pages`, the mapping is advised with `MADV_HUGEPAGE` (the advice's outcome is
    /// returned beside it) while still `PROT_NONE`, and only then made writable. Under
    /// `mlockall(MCL_FUTURE)` the kernel populates a mapping as soon as it is accessible;
    /// this order makes it populate the advised mapping with huge pages directly instead
    /// of with base pages that a later collapse would have to replace.
    pub fn new(
        len: usize,
        align: usize,
        huge_pages: bool,
    ) -> io::Result<(AnonRegionMut, Option<io::Result<()>>)> {
        let page = page_size();
        if len == 0 || !align.is_power_of_two() || align < page {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let map_len = len
            .checked_next_multiple_of(align)
            .ok_or(io::ErrorKind::OutOfMemory)?;
        let over = map_len
            .checked_add(align - page)
            .ok_or(io::ErrorKind::OutOfMemory)?;
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choice
        // cannot alias any existing memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(align);
        let head = aligned - start;
        let tail = over - head - map_len;
        // SAFETY: both ranges lie inside the mapping made just above, are page aligned
        // (mmap returns page-aligned addresses and `head`, `map_len` and `over` are page
        // multiples), and nothing refers to them yet.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + map_len) as *mut libc::c_void, tail);
            }
        }
        let ptr = NonNull::new(aligned as *mut u8).ok_or(io::ErrorKind::OutOfMemory)?;
        // From here on, dropping `region` unmaps exactly the aligned mapping.
        let region = AnonRegion { ptr, len, map_len };
        let advice = huge_pages.then(|| {
            // SAFETY: the range is exactly our live mapping. (A PROT_NONE mapping may not be
            // borrowed as a slice, hence the raw form.)
            unsafe { madvise_huge(ptr.as_ptr(), map_len) }
        });
        // SAFETY: the range is exactly our live mapping, which nothing refers to yet.
        check(unsafe {
            libc::mprotect(
                ptr.as_ptr().cast(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        })?;
        Ok((AnonRegionMut(region), advice))
    }

    /// The whole mapping (for advice that must cover it all).
    pub fn whole(&self) -> &[u8] {
        self.0.whole()
    }

    /// The first `len` bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is live, readable and writable for `map_len >= len` bytes
        // and uniquely owned by `self`, borrowed mutably here.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr.as_ptr(), self.0.len) }
    }

    /// Make the region read-only (`mprotect(PROT_READ)`).
    pub fn freeze(self) -> io::Result<AnonRegion> {
        // SAFETY: the range is exactly our live mapping; after this no code writes it (the
        // only writer, `as_mut_slice`, is consumed with `self`).
        check(unsafe {
            libc::mprotect(self.0.ptr.as_ptr().cast(), self.0.map_len, libc::PROT_READ)
        })?;
        Ok(self.0)
    }
}

impl AnonRegion {
    /// The first `len` bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is live and readable for `map_len >= len` bytes while
        // `self` exists, and nothing writes it while shared (see `Send`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole mapping, `len` rounded up to the alignment (zeros past `len`).
    pub fn whole(&self) -> &[u8] {
        // SAFETY: as for `as_slice`, over the whole mapping.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.map_len) }
    }
}

impl Drop for AnonRegion {
    fn drop(&mut self) {
        // SAFETY: the range is exactly the mapping made in `AnonRegionMut::new`, and no
        // borrow of it can outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

/// glibc's `makedev` encoding of a device number, as `st_dev` reports it on Linux.
fn makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0x0000_0fff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0x0000_00ff)
}

/// Unix timed waits are not rounded to a coarse tick: nothing to raise (see
/// `io::timer`). False: there is nothing for [`end_fine_timer`] to undo.
pub fn begin_fine_timer() -> bool {
    false
}

/// Never called on Unix ([`begin_fine_timer`] said false).
pub fn end_fine_timer() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_region_is_aligned_zeroed_and_frozen() {
        let align = 2 << 20;
        let (mut r, advice) = AnonRegionMut::new(3 << 20, align, true).unwrap();
        assert!(advice.is_some());
        assert_eq!(r.whole().as_ptr() as usize % align, 0);
        assert_eq!(r.whole().len(), 4 << 20);
        assert!(r.as_mut_slice().iter().all(|&b| b == 0));
        r.as_mut_slice()[7] = 42;
        let r = r.freeze().unwrap();
        assert_eq!(r.as_slice().len(), 3 << 20);
        assert_eq!(r.as_slice()[7], 42);
        assert!(resident_pages(r.whole()).unwrap() >= 1);
    }

    #[test]
    fn makedev_matches_linux_encoding() {
        assert_eq!(makedev(254, 0), 0xfe00);
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(makedev(259, 3), 0x10303);
    }
}
