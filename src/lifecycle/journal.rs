//! The deletion journal `deletions.pending`: its byte format and its reading. The
//! [`super::deleter`] module docs say when it is written and what it promises.
//!
//! Format: sealed text (`format::sealed`), header `segstore-pending-deletions 2`, then
//! one `delete <path>` line per path relative to the store directory, the path escaped
//! (every byte of a Unix path round-trips; none can forge a line), then the crc32c
//! line. Version 1 (one raw path per line) is still read.

use std::path::{Component as PathComponent, Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::sealed::{self, SealedWriter};
use crate::format::Malformed;

/// Name of the journal file in the store directory.
pub use crate::layout::JOURNAL;
const JOURNAL_FORMAT: &str = "segstore-pending-deletions";
/// The journal version written; version 1 (one raw path per line) is read too.
const JOURNAL_VERSION: u32 = 2;

/// The paths the journal of `dir` names (none if it has no journal).
pub(crate) fn read_journal(dir: &Path) -> Result<Vec<PathBuf>> {
    let path = dir.join(JOURNAL);
    match std::fs::read(&path) {
        Ok(bytes) => decode_journal(&path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

/// The journal's bytes for `paths` (relative to the store directory).
pub fn encode_journal(paths: &[PathBuf]) -> Result<Vec<u8>> {
    let mut w = SealedWriter::new(JOURNAL_FORMAT, JOURNAL_VERSION);
    for p in paths {
        let bytes = sealed::path_bytes(p).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cannot journal the deletion of {}: the path is not Unicode",
                p.display()
            ))
        })?;
        w.line([&b"delete"[..], &bytes]);
    }
    Ok(w.finish())
}

/// Decode a journal (`path` names it in errors): the paths it asks to delete, each a
/// plain path relative to the store directory.
pub fn decode_journal(path: &Path, bytes: &[u8]) -> Result<Vec<PathBuf>> {
    let corrupt = |m: Malformed| m.into_error(path);
    let journal = sealed::decode(bytes, JOURNAL_FORMAT, 1..=JOURNAL_VERSION).map_err(corrupt)?;
    let mut out = Vec::with_capacity(journal.lines.len());
    for line in &journal.lines {
        let p = if journal.version == 1 {
            // Version 1: the raw path is the whole line.
            sealed::path_from_bytes(line.text)
                .ok_or_else(|| Error::corrupt(path, line.offset, "path is not valid on this OS"))?
        } else {
            let f = line.fields().map_err(corrupt)?;
            if f.keyword() != b"delete" {
                return Err(Error::corrupt(
                    path,
                    line.offset,
                    format!("unknown line {:?}", sealed::escape(f.keyword())),
                ));
            }
            f.expect_len(2).map_err(corrupt)?;
            f.path(1).map_err(corrupt)?
        };
        if p.as_os_str().is_empty()
            || !p
                .components()
                .all(|c| matches!(c, PathComponent::Normal(_)))
        {
            return Err(Error::corrupt(
                path,
                line.offset,
                format!("journal names {:?}, not a plain relative path", p.display()),
            ));
        }
        out.push(p);
    }
    Ok(out)
}
