//! The LSM table layer: commit log, memtable, merging reads and the compaction policy.
//!
//! Phase 1 (this module today) holds the parts that do not depend on the lifecycle layer:
//!
//! - [`commitlog`]: the write-ahead log, with Cassandra's three sync modes
//!   (`periodic`, `batch`, `group`), checksummed records, rolling files and replay.
//! - [`memtable`]: the concurrent sorted in-memory table that absorbs writes.
//! - [`merge`]: the k-way merge of sorted sources (memtables, segment iterators) that
//!   reconciles versions of a key and applies the tombstone policy of reads or compaction.
//! - [`compaction`]: the size-tiered policy, a pure function over segment summaries.
//! - [`cell`]: the one reconciliation rule every other part uses.
//!
//! Table names are checked with [`crate::segment::validate_name`] (kind `"table"`).
//!
//! The `Table` itself (flush through `SegmentWriter`, manifest, compaction worker) builds
//! on the lifecycle layer's segment handles and views and comes in phase 2.

pub mod cell;
pub mod commitlog;
pub mod compaction;
pub mod memtable;
pub mod merge;

pub use cell::{newer_wins, validate_cell};
pub use commitlog::{CommitLog, CommitLogConfig, CommitLogSync, LogRecord};
pub use compaction::{Choice, CompactionConfig, SegmentSummary};
pub use memtable::Memtable;
pub use merge::{MergeIter, TombstonePolicy};
