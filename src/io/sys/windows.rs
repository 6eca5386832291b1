//! Windows implementations. NOT compiled or tested in this project's CI (no Windows
//! toolchain here); kept tiny on purpose. On Windows the OS itself refuses to delete,
//! replace or truncate a file while any of its hard links is mapped, which is the rule
//! the rest of the crate is built and tested to respect.

//!
//! Memory residency here: `VirtualLock` (growing the working set quota once when the lock
//! needs it), no `mlockall`, no transparent huge pages, no page-cache advice, no
//! residency figures (`ErrorKind::Unsupported`), and a check of the large-page privilege
//! that only reports. Anonymous regions come from `VirtualAlloc` (base pages).

use std::fs::File;
use std::io;
use std::os::windows::fs::FileExt;
use std::os::windows::io::AsRawHandle;
use std::ptr::NonNull;

use windows_sys::Win32::Foundation::{CloseHandle, ERROR_WORKING_SET_QUOTA, HANDLE, LUID};
use windows_sys::Win32::Security::{
    LookupPrivilegeValueW, PrivilegeCheck, LUID_AND_ATTRIBUTES, PRIVILEGE_SET, SE_LOCK_MEMORY_NAME,
    TOKEN_QUERY,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
};
use windows_sys::Win32::System::Memory::{
    GetLargePageMinimum, VirtualAlloc, VirtualFree, VirtualLock, VirtualProtect, VirtualUnlock,
    MEM_COMMIT, MEM_RELEASE, MEM_RESERVE, PAGE_READONLY, PAGE_READWRITE,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetProcessWorkingSetSize, OpenProcessToken, SetProcessWorkingSetSize,
};

use crate::io::FileId;

/// Identity of an open file: (volume serial number, file index).
pub fn file_id(file: &File) -> io::Result<FileId> {
    // SAFETY: BY_HANDLE_FILE_INFORMATION is plain old data for which all-zero bytes are a
    // valid value; the handle is valid for the life of `file`, and `info` is a properly
    // sized, writable out-parameter.
    let (ok, info) = unsafe {
        let mut info: BY_HANDLE_FILE_INFORMATION = std::mem::zeroed();
        let ok = GetFileInformationByHandle(file.as_raw_handle() as _, &mut info);
        (ok, info)
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileId {
        dev: info.dwVolumeSerialNumber as u64,
        ino: ((info.nFileIndexHigh as u64) << 32) | info.nFileIndexLow as u64,
    })
}

/// Identity of the file at `path` (Windows needs an open handle for the file index).
pub fn path_id(path: &std::path::Path) -> io::Result<FileId> {
    file_id(&File::open(path)?)
}

/// Read exactly `buf.len()` bytes at `offset` (positional, does not move a shared cursor
/// that matters to us: every read names its offset).
pub fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Windows enforces the rule itself; there is no list to read.
pub fn os_mapped_identities() -> Option<Vec<FileId>> {
    None
}

/// Base page size: 4 KiB on every Windows architecture Rust supports.
pub fn page_size() -> usize {
    4096
}

fn last_error_if(ok: i32) -> io::Result<()> {
    if ok == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Lock `region` into the working set (`VirtualLock`). If the working set quota is too
/// small, grow its minimum and maximum by the region's size once and retry.
pub fn lock_region(region: &[u8]) -> io::Result<()> {
    // SAFETY: `region` is a live borrowed range; VirtualLock only pins its pages.
    let ok = unsafe { VirtualLock(region.as_ptr().cast(), region.len()) };
    if ok != 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(ERROR_WORKING_SET_QUOTA as i32) {
        return Err(err);
    }
    let (mut min, mut max) = (0usize, 0usize);
    // SAFETY: the pseudo handle of the current process is always valid, and both
    // out-parameters are valid, writable usizes.
    last_error_if(unsafe { GetProcessWorkingSetSize(GetCurrentProcess(), &mut min, &mut max) })?;
    let grow = region.len().next_multiple_of(page_size());
    // SAFETY: the pseudo handle is valid; the sizes are plain numbers.
    last_error_if(unsafe {
        SetProcessWorkingSetSize(
            GetCurrentProcess(),
            min.saturating_add(grow),
            max.saturating_add(grow),
        )
    })?;
    // SAFETY: as above.
    last_error_if(unsafe { VirtualLock(region.as_ptr().cast(), region.len()) })
}

/// Undo [`lock_region`] (`VirtualUnlock`).
pub fn unlock_region(region: &[u8]) -> io::Result<()> {
    // SAFETY: `region` is a live borrowed range; VirtualUnlock only clears the pin.
    last_error_if(unsafe { VirtualUnlock(region.as_ptr().cast(), region.len()) })
}

/// Windows has no `mlockall`.
pub fn lock_all() -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Nothing to undo: [`lock_all`] never locks.
pub fn unlock_all() -> io::Result<()> {
    Ok(())
}

/// Windows has no transparent huge pages for maps.
pub fn advise_huge_pages(_region: &[u8]) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Not reported on Windows (it would take `QueryWorkingSetEx`).
pub fn resident_pages(_region: &[u8]) -> io::Result<usize> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Windows has no page-cache advice for a file handle.
pub fn drop_page_cache(_file: &File) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Windows has no `RLIMIT_MEMLOCK`; the working set quota plays that part.
pub fn memlock_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Does this process hold `SeLockMemoryPrivilege` enabled, and does the CPU have large
/// pages? `None` when it cannot tell. Informational only: nothing here allocates large
/// pages.
pub fn large_pages_permitted() -> Option<bool> {
    // SAFETY: GetLargePageMinimum takes no arguments.
    if unsafe { GetLargePageMinimum() } == 0 {
        return Some(false);
    }
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: the pseudo handle is valid and `token` is a writable out-parameter.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return None;
    }
    let mut luid = LUID {
        LowPart: 0,
        HighPart: 0,
    };
    // SAFETY: SE_LOCK_MEMORY_NAME is a NUL-terminated wide string constant; `luid` is a
    // writable out-parameter; a null system name means the local system.
    let found = unsafe { LookupPrivilegeValueW(std::ptr::null(), SE_LOCK_MEMORY_NAME, &mut luid) };
    let mut set = PRIVILEGE_SET {
        PrivilegeCount: 1,
        Control: 1, // PRIVILEGE_SET_ALL_NECESSARY
        Privilege: [LUID_AND_ATTRIBUTES {
            Luid: luid,
            Attributes: 0,
        }],
    };
    let mut held = 0;
    // SAFETY: `token` was opened above with TOKEN_QUERY; `set` and `held` are valid,
    // writable and live for the call.
    let ok = found != 0 && unsafe { PrivilegeCheck(token, &mut set, &mut held) } != 0;
    // SAFETY: `token` is a handle we opened and close exactly once.
    unsafe { CloseHandle(token) };
    ok.then_some(held != 0)
}

/// Committed private memory (`VirtualAlloc`), writable until [`AnonRegionMut::freeze`].
/// `align` is not honoured beyond the 64 KiB allocation granularity: no huge pages here.
#[derive(Debug)]
pub struct AnonRegionMut(AnonRegion);

/// Read-only committed private memory; released on drop.
#[derive(Debug)]
pub struct AnonRegion {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: owned memory like a `Box<[u8]>`; written only through the unique
// `AnonRegionMut`, read-only afterwards.
unsafe impl Send for AnonRegion {}
// SAFETY: see `Send`: no interior mutability, reads only.
unsafe impl Sync for AnonRegion {}

impl AnonRegionMut {
    /// Commit `len` zeroed bytes (`len > 0`), rounded up to a page multiple. No huge pages:
    /// the advice outcome is `Unsupported` when `huge_pages` is asked.
    pub fn new(
        len: usize,
        _align: usize,
        huge_pages: bool,
    ) -> io::Result<(AnonRegionMut, Option<io::Result<()>>)> {
        if len == 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let map_len = len
            .checked_next_multiple_of(page_size())
            .ok_or(io::ErrorKind::OutOfMemory)?;
        // SAFETY: a fresh allocation at an address of the system's choice cannot alias
        // existing memory.
        let p = unsafe {
            VirtualAlloc(
                std::ptr::null(),
                map_len,
                MEM_COMMIT | MEM_RESERVE,
                PAGE_READWRITE,
            )
        };
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let advice = huge_pages.then(|| Err(io::ErrorKind::Unsupported.into()));
        Ok((AnonRegionMut(AnonRegion { ptr, len, map_len }), advice))
    }

    /// The whole allocation.
    pub fn whole(&self) -> &[u8] {
        self.0.whole()
    }

    /// The first `len` bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: committed read-write memory of `map_len >= len` bytes, uniquely owned
        // and mutably borrowed here.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr.as_ptr(), self.0.len) }
    }

    /// Make the region read-only (`VirtualProtect(PAGE_READONLY)`).
    pub fn freeze(self) -> io::Result<AnonRegion> {
        let mut old = 0;
        // SAFETY: the range is exactly our live allocation; nothing writes it afterwards.
        last_error_if(unsafe {
            VirtualProtect(
                self.0.ptr.as_ptr().cast(),
                self.0.map_len,
                PAGE_READONLY,
                &mut old,
            )
        })?;
        Ok(self.0)
    }
}

impl AnonRegion {
    /// The first `len` bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: committed readable memory of `map_len >= len` bytes, live while `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole allocation.
    pub fn whole(&self) -> &[u8] {
        // SAFETY: as for `as_slice`, over the whole allocation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.map_len) }
    }
}

impl Drop for AnonRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the base of an allocation made by VirtualAlloc; MEM_RELEASE
        // with size 0 frees exactly it, and no borrow outlives `self`.
        unsafe {
            VirtualFree(self.ptr.as_ptr().cast(), 0, MEM_RELEASE);
        }
    }
}

/// Ask for a 1 ms timer resolution (`timeBeginPeriod(1)`; the default tick is 15.6 ms).
/// True if granted; each true must be matched by one [`end_fine_timer`].
pub fn begin_fine_timer() -> bool {
    // SAFETY: takes an integer, touches no memory of ours.
    unsafe {
        windows_sys::Win32::Media::timeBeginPeriod(1) == windows_sys::Win32::Media::TIMERR_NOERROR
    }
}

/// Give back one granted [`begin_fine_timer`] (`timeEndPeriod(1)`).
pub fn end_fine_timer() {
    // SAFETY: takes an integer, touches no memory of ours.
    unsafe {
        windows_sys::Win32::Media::timeEndPeriod(1);
    }
}
