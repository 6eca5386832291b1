//! Windows implementations. NOT compiled or tested in this project's CI (no Windows
//! toolchain here); kept tiny on purpose. On Windows the OS itself refuses to delete,
//! replace or truncate a file while any of its hard links is mapped, which is the rule
//! the rest of the crate is built and tested to respect.

use std::fs::File;
use std::io;
use std::os::windows::fs::FileExt;
use std::os::windows::io::AsRawHandle;

use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
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
