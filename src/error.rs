//! The one error type of the crate.
//!
//! Every variant that concerns a file carries its path, and corruption carries the byte
//! offset where it was found, so an operator can go straight to the bad bytes.

use std::path::PathBuf;

/// Result alias used throughout segstore.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in segstore.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on `path` failed.
    #[error("I/O error during {op} on {path}: {source}")]
    Io {
        /// What we were doing ("open", "read", "fsync", ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// Bytes on disk are not what the format says they must be (invariant 6).
    #[error("corrupt file {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The file holding the bad bytes.
        path: PathBuf,
        /// Byte offset in that file where the problem was found.
        offset: u64,
        /// What was wrong.
        reason: String,
    },

    /// A configuration value is not valid.
    #[error("invalid setting {setting} = {value:?}: {reason}")]
    InvalidConfig {
        /// The setting's name, e.g. `disk_access_mode`.
        setting: &'static str,
        /// The value given.
        value: String,
        /// Why it is wrong; for enumerations, the valid values.
        reason: String,
    },

    /// Caller input violates a documented limit or ordering.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A file handed to [`Table::ingest`](crate::Table::ingest) or
    /// [`Store::ingest`](crate::Store::ingest) cannot be adopted (a path with `..`, one
    /// inside the store directory, a name that is not a segment component, a missing
    /// component, a segment named twice, cells timestamped past the store's clock).
    /// Nothing of the ingest was adopted. A file whose bytes are bad is
    /// [`Error::Corrupt`] instead, naming it.
    #[error("cannot ingest {path}: {reason}")]
    Ingest {
        /// The file (or segment component) concerned.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// A key longer than the format allows.
    #[error("key of {len} bytes exceeds the maximum of {max} bytes")]
    KeyTooLarge {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// A value longer than the format allows.
    #[error("value of {len} bytes exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// Length of the rejected value.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// Keys given to a segment writer were not strictly ascending.
    #[error("keys out of order: key #{index} is not greater than the previous key")]
    OutOfOrder {
        /// Zero-based position of the offending entry.
        index: u64,
    },

    /// A name (table, snapshot tag) is not acceptable.
    #[error("invalid {kind} name {name:?}: {reason}")]
    InvalidName {
        /// "table", "snapshot tag", ...
        kind: &'static str,
        /// The rejected name.
        name: String,
        /// Why.
        reason: &'static str,
    },

    /// Another process holds the store directory (invariant 7).
    #[error("store directory {0} is locked by another process")]
    Locked(PathBuf),

    /// Something named does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// "table", "snapshot", ...
        kind: &'static str,
        /// The name looked for.
        name: String,
    },

    /// Something named exists already.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// "table", "snapshot", ...
        kind: &'static str,
        /// The name.
        name: String,
    },

    /// A snapshot tag that was cleared cannot be taken again yet: files of the cleared
    /// snapshot still wait for their deletion (mapped by a reader, refused by the OS).
    #[error("snapshot tag {tag:?} was cleared, but {files} of its files still wait for deletion ({why}); the tag is free again once they are deleted: when their last mapping closes, or at close, or at the next open (Store::pending_deletions lists them)")]
    SnapshotTagPending {
        /// The tag.
        tag: String,
        /// How many files (and directories) of it still wait.
        files: usize,
        /// Why, e.g. "3 still mapped".
        why: String,
    },

    /// Opening another mapping would exceed the configured share of `vm.max_map_count`.
    #[error("mapping budget exhausted: {used} of {budget} mappings in use (raise vm.max_map_count or the budget, or use disk_access_mode auto)")]
    MapBudgetExhausted {
        /// Mappings in use.
        used: usize,
        /// The budget.
        budget: usize,
    },

    /// The kernel refused to map `path` while `lock_memory = "all"` is in force:
    /// `mlockall(MCL_FUTURE)` locks every new map as it is made, and this one would pass
    /// `RLIMIT_MEMLOCK`. Returned where `disk_access_mode` promises maps (`mmap`,
    /// `mmap_index_only`); `auto` reads such a file with standard access instead.
    #[error(
        "cannot map {path} ({bytes} bytes) under lock_memory = all: mlockall(MCL_FUTURE) \
         locks every new map and RLIMIT_MEMLOCK (soft limit {limit}) has no room for it \
         with {} KiB already locked: {source}; raise RLIMIT_MEMLOCK to at least {} KiB, \
         grant CAP_IPC_LOCK, or use disk_access_mode auto",
        .vm_lck.map_or("?".to_string(), |b| (b / 1024).to_string()),
        (.vm_lck.unwrap_or(0) + .bytes).div_ceil(1024)
    )]
    MapRefusedUnderLock {
        /// The file that could not be mapped.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The process's `VmLck` when the map was refused, if reported.
        vm_lck: Option<u64>,
        /// `RLIMIT_MEMLOCK`'s soft limit in words (`"8192 KiB"`, `"unlimited"`).
        limit: String,
        /// The OS error of the map (`EAGAIN` for a map past the limit).
        #[source]
        source: std::io::Error,
    },

    /// The store refuses writes after an earlier failure it cannot recover from in place
    /// (for example a failed fsync of the commit log).
    #[error("store is read-only after an earlier failure: {0}")]
    Poisoned(String),

    /// A write to `table` had to wait for its frozen memtables to be flushed (see
    /// `max_frozen_memtables`), and the flush failed: `source` says why (a full disk,
    /// say). The write was not made; writes go on once a flush succeeds.
    #[error("table {table:?}: write refused, its memtables cannot be flushed: {source}")]
    FlushFailed {
        /// The table.
        table: String,
        /// The flush's error.
        source: std::sync::Arc<Error>,
    },

    /// The store has been closed.
    #[error("store is closed")]
    Closed,

    /// The store was opened read-only ([`crate::Store::open_read_only`]): writes,
    /// flushes, compactions, snapshots and drops are refused.
    #[error("store is open read-only")]
    ReadOnly,

    /// The table was dropped ([`crate::Store::drop_table`]): a handle of it still held
    /// reads what it held, but writes, flushes and compactions are refused.
    #[error("table {table:?} was dropped")]
    Dropped {
        /// The table.
        table: String,
    },

    /// A table's compaction filter panicked or returned a value past the limit; the
    /// compaction was abandoned and changed nothing.
    #[error("compaction filter of table {table:?} failed: {reason}")]
    CompactionFilter {
        /// The table.
        table: String,
        /// What went wrong.
        reason: String,
    },

    /// A transaction's commit found that something it read was changed by a write
    /// numbered after its view began ([`crate::Transaction::commit`]): `key` of
    /// `table` (for a scanned range, the key written inside it; the first such, tables
    /// in name order, keys in order). Nothing of the transaction was written; run it
    /// again.
    #[error("transaction conflict: table {table:?}, key \"{}\" was written after the transaction's view", .key.escape_ascii())]
    Conflict {
        /// The table.
        table: String,
        /// The key.
        key: Vec<u8>,
    },

    /// Replicas cannot be repaired against each other.
    #[error("repair refused: {0}")]
    RepairMismatch(String),

    /// A repair message's bytes are not valid (wrong magic, version, checksum or layout).
    #[error("bad repair message: {0}")]
    BadMessage(crate::repair::DecodeError),

    /// A repair transport failed (a peer did not answer in time, a mailbox closed).
    #[error("repair transport: {0}")]
    Transport(String),
}

impl Error {
    /// Wrap an I/O error with the operation and path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Build a corruption error.
    pub fn corrupt(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True for `Error::Corrupt`.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Error::Corrupt { .. })
    }
}
