//! Unix implementations.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use crate::io::FileId;

/// Identity of an open file: (st_dev, st_ino).
pub fn file_id(file: &File) -> io::Result<FileId> {
    let m = file.metadata()?;
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

/// glibc's `makedev` encoding of a device number, as `st_dev` reports it on Linux.
fn makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0x0000_0fff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0x0000_00ff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makedev_matches_linux_encoding() {
        assert_eq!(makedev(254, 0), 0xfe00);
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(makedev(259, 3), 0x10303);
    }
}
