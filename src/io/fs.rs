//! Durable file-system helpers. Every delete, replace and truncate asks the
//! [`FileRules`] first; only the deleter (`lifecycle::deleter`) calls [`remove_file`].
//!
//! Publishing follows invariant 5: write a temp file, fsync it, rename it into place,
//! fsync the directory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use super::rules::{FileOp, FileRules};
use crate::error::{Error, Result};

/// Suffix of files being written; never read, removed at open.
pub const TMP_SUFFIX: &str = ".tmp";

/// fsync a directory so renames and unlinks in it are durable. A no-op on Windows, where
/// directories cannot be opened this way and metadata is journaled by NTFS.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let d = File::open(dir).map_err(|e| Error::io("open dir", dir, e))?;
        d.sync_all().map_err(|e| Error::io("fsync dir", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Create a new file for writing; fails if it exists.
pub fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io("create", path, e))
}

/// Rename `from` to `to`, asking the rules first when `to` exists (a replace).
pub fn rename(from: &Path, to: &Path, rules: &FileRules) -> Result<()> {
    if to.exists() {
        rules
            .check(FileOp::Replace, to)
            .map_err(|e| Error::io("replace", to, e))?;
    }
    rules
        .check_rename(from, to)
        .map_err(|e| Error::io("rename", from, e))?;
    fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
}

/// Publish a fully written and fsynced temp file: rename, then fsync the directory.
pub fn publish(tmp: &Path, dest: &Path, rules: &FileRules) -> Result<()> {
    rename(tmp, dest, rules)?;
    fsync_dir(dest.parent().unwrap_or(Path::new(".")))
}

/// Write `bytes` to `dest` atomically and durably (invariant 5).
pub fn write_atomic(dest: &Path, bytes: &[u8], rules: &FileRules) -> Result<()> {
    let tmp = tmp_path(dest);
    let _ = fs::remove_file(&tmp); // a stale temp file of ours from a crash
    let mut f = create_new(&tmp)?;
    let r = write_all_checked(&mut f, bytes, &tmp, rules)
        .and_then(|()| {
            rules
                .check_fsync(&tmp)
                .map_err(|e| Error::io("fsync", &tmp, e))
        })
        .and_then(|()| f.sync_all().map_err(|e| Error::io("fsync", &tmp, e)));
    drop(f);
    if let Err(e) = r {
        // Our own temp file, never mapped: not the deleter's business (like the
        // segment writer's). If this fails too, the next open removes it.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    publish(&tmp, dest, rules).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// `write_all`, through the injected write faults of `rules` (a short write stores a
/// prefix and fails, as a full disk would).
pub fn write_all_checked(
    w: &mut impl Write,
    bytes: &[u8],
    path: &Path,
    rules: &FileRules,
) -> Result<()> {
    if let Some((n, e)) = rules.write_fault(path, bytes.len()) {
        let _ = w.write_all(&bytes[..n.min(bytes.len())]);
        return Err(Error::io("write", path, e));
    }
    w.write_all(bytes).map_err(|e| Error::io("write", path, e))
}

/// The temp name used while writing `dest`.
pub fn tmp_path(dest: &Path) -> std::path::PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(TMP_SUFFIX);
    s.into()
}

/// Hard-link `src` at `dst`.
pub fn hard_link(src: &Path, dst: &Path) -> Result<()> {
    fs::hard_link(src, dst).map_err(|e| Error::io("hard link", dst, e))
}

/// Copy `src` to `dst` and fsync it (fallback where hard links are not supported).
pub fn copy_durable(src: &Path, dst: &Path) -> Result<()> {
    fs::copy(src, dst).map_err(|e| Error::io("copy", dst, e))?;
    File::open(dst)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io("fsync", dst, e))
}

/// Unlink one file, obeying the rules. Only the deleter calls this (invariant 1).
pub(crate) fn remove_file(path: &Path, rules: &FileRules) -> std::io::Result<()> {
    rules.check(FileOp::Delete, path)?;
    fs::remove_file(path)
}

/// Remove an empty directory (fails while it holds anything). Only the deleter calls
/// this.
pub(crate) fn remove_empty_dir(path: &Path) -> std::io::Result<()> {
    fs::remove_dir(path)
}

/// Truncate a file to `len`, obeying the rules.
pub fn truncate(path: &Path, len: u64, rules: &FileRules) -> Result<()> {
    rules
        .check(FileOp::Truncate, path)
        .map_err(|e| Error::io("truncate", path, e))?;
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    f.set_len(len).map_err(|e| Error::io("truncate", path, e))?;
    f.sync_all().map_err(|e| Error::io("fsync", path, e))
}
