//! This crate's error: what went wrong, naming the file or the record at fault. openraft
//! sees it inside a `StorageError` (see [`Error::into_storage`]).

use std::path::{Path, PathBuf};

use openraft::{ErrorSubject, ErrorVerb, NodeId, StorageError, StorageIOError};

/// A failure of the log store or the state machine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store underneath failed.
    #[error(transparent)]
    Store(#[from] segstore::Error),
    /// A file operation of this crate failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Bytes this crate wrote (a log entry, the vote, the `CURRENT` pointer, a
    /// snapshot's header or metadata) do not decode.
    #[error("corrupt {what} in {}: {reason}", path.display())]
    Corrupt {
        /// What was being decoded.
        what: &'static str,
        /// Where it was read from.
        path: PathBuf,
        /// Why it does not decode.
        reason: String,
    },
    /// A snapshot stream or install that cannot be accepted (a gap in the chunks, a file
    /// name that is not a store file's, a length that does not match its header, a
    /// snapshot whose contents disagree with its metadata).
    #[error("snapshot refused: {0}")]
    Snapshot(String),
    /// Another state machine (in this process or another) has the directory open.
    #[error("state machine directory {} is in use (its LOCK is held)", .0.display())]
    Locked(PathBuf),
    /// The application's `apply` failed.
    #[error("application failed to apply an entry: {0}")]
    Apply(String),
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn corrupt(what: &'static str, path: &Path, reason: impl ToString) -> Error {
        Error::Corrupt {
            what,
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }

    /// The error as openraft's storage error about `subject`, doing `verb`.
    pub fn into_storage<NID: NodeId>(
        self,
        subject: ErrorSubject<NID>,
        verb: ErrorVerb,
    ) -> StorageError<NID> {
        StorageIOError::new(subject, verb, openraft::AnyError::new(&self)).into()
    }

    /// As a `std::io::Error` (for snapshot streams and `LogFlushed`).
    pub(crate) fn into_io(self) -> std::io::Error {
        match self {
            Error::Io { source, .. } => source,
            e => std::io::Error::other(e),
        }
    }
}
