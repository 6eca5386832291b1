//! The LSM table layer: commit log, memtable, merging reads and the compaction policy.
//!
//! The parts that do not depend on the lifecycle layer:
//!
//! - [`commitlog`]: the write-ahead log, with Cassandra's three sync modes
//!   (`periodic`, `batch`, `group`), checksummed records, rolling files and replay.
//! - [`memtable`]: the concurrent sorted in-memory table that absorbs writes.
//! - [`merge`]: the k-way merge of sorted sources (memtables, segment iterators) that
//!   reconciles versions of a key and applies the tombstone policy of reads or compaction;
//!   from both ends and with seeks when its sources are [`Cursor`]s.
//! - [`compaction`]: the size-tiered policy, a pure function over segment summaries,
//!   and the settings of both policies.
//! - [`leveled`]: the leveled policy, a pure function over segments with levels.
//! - [`compaction_filter`]: code a table runs on the live cells its compactions write.
//! - [`cell`]: the one reconciliation rule every other part uses.
//!
//! Table names are checked with [`crate::segment::validate_name`] (kind `"table"`).
//!
//! On top of those, built on the lifecycle layer's [`crate::lifecycle::SegmentSet`]:
//!
//! - [`lsm`]: [`Table`]: writes through the log into memtables, point reads and scans
//!   over memtables and segments (forward, reverse, prefix, seek: see its module docs),
//!   flush, size-tiered and major compaction. A directory module with one file per
//!   concern (write path, point reads, scans, snapshots of a table, flush and
//!   compaction; listed in its module docs).
//!
//! Range arguments are [`KeyRange`]s ([`crate::range`], re-exported here with
//! [`prefix_range`]).
//! - [`tables`]: [`Tables`]: the store-wide commit log, write clock, replay at open,
//!   checkpoints that release commit log files, close.
//! - `worker`: the background threads: one for flushes, a pool for compactions.
//! - [`positions`]: the file recording how far each table's segments reach into the log.
//! - [`settings`]: a table's own settings file (`Store::table_with`).
//! - [`batch`]: write batches ([`WriteBatch`]).
//! - [`txn`]: [`Transaction`]: optimistic, serializable transactions across tables
//!   (reads through a read view plus their own writes; a commit checked under the
//!   store's commit lock, written as one record).
//! - [`value`]: [`Value`], what [`Table::get`] returns: memtable bytes shared, or a
//!   segment's mapped bytes borrowed while the value holds the view.

pub mod batch;
pub mod cell;
pub mod commitlog;
pub mod compaction;
pub mod compaction_filter;
pub(crate) mod ingest_source;
pub mod leveled;
pub mod lsm;
pub mod memtable;
pub mod merge;
pub mod positions;
pub(crate) mod registry;
pub mod settings;
pub(crate) mod spin;
pub mod tables;
pub mod txn;
pub mod value;
pub mod view;
pub(crate) mod visibility;
pub(crate) mod worker;

pub use crate::range::{prefix_range, KeyRange};
pub use batch::{Batch, WriteBatch, MAX_TTL};
pub use cell::{newer_wins, validate_cell};
pub use commitlog::{CommitLog, CommitLogConfig, CommitLogSync, LogRecord};
pub use compaction::{Choice, CompactionConfig, CompactionStrategy, SegmentSummary};
pub use lsm::{Cells, Scan, Table, TableConfig, TableStats};
pub use memtable::{CellValue, Memtable, SharedCell};
pub use merge::{Cursor, MergeIter, TombstonePolicy};
pub use tables::Tables;
pub use txn::{Transaction, TransactionScan};
pub use value::Value;
pub use view::{ReadView, TableView};
