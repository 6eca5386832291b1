//! segstore: an embeddable storage engine for a database written in Rust. Each table is
//! an LSM tree (commit log, memtables, flush, leveled or size-tiered compaction) over
//! immutable sorted segments, read through memory maps or positional reads
//! (`disk_access_mode`), with every mapping counted and every deletion deferred until no
//! mapping of the file is open; hard-link snapshots and Merkle-tree repair between
//! replicas come with it.
//!
//! ```
//! use segstore::{Config, DiskAccessMode, Store};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dir = tempfile::tempdir()?; // any directory; created if missing
//!     let config = Config::builder() // every setting has a default; build() checks them
//!         .disk_access_mode(DiskAccessMode::Mmap)
//!         .build()?;
//!     let store = Store::open(dir.path(), config)?;
//!     let users = store.table("users")?; // names: [A-Za-z0-9_], 1..=64 bytes
//!     users.put(b"alice", b"31")?;
//!     users.put(b"bob", b"42")?;
//!     users.delete(b"bob")?;
//!     assert_eq!(users.get(b"alice")?.as_deref(), Some(&b"31"[..]));
//!     assert_eq!(users.get(b"bob")?, None);
//!     let mut rows = Vec::new();
//!     for row in users.scan(&b"a"[..]..&b"c"[..])? {
//!         rows.push(row?); // (key, value), in key order; deleted keys are absent
//!     }
//!     assert_eq!(rows, vec![(b"alice".to_vec(), b"31".to_vec())]);
//!     users.flush()?; // memtable -> segment (also automatic)
//!     drop(users);
//!     let report = store.close()?; // leaked handles or mappings, pending deletions
//!     assert!(report.is_clean());
//!     Ok(())
//! }
//! ```
//!
//! What a database built on it must know (the README says more):
//!
//! - **Last write wins, by timestamp.** Every cell carries a write timestamp in
//!   microseconds; reads, compaction and repair keep a key's newest cell, whatever the
//!   order of arrival, by one rule ([`newer_wins`]: newer timestamp, then
//!   tombstone over value, then the larger value). [`table::Table::put`] and
//!   [`table::Table::delete`] take the store's clock; [`table::WriteBatch::put_at`] and
//!   [`table::WriteBatch::delete_at`], written with [`table::Table::write`], keep the
//!   caller's timestamp (replication, repair, imports), so an older one loses to what is
//!   there.
//! - **Deletes can be resurrected after `gc_grace`.** Compaction purges a tombstone once
//!   it is older than [`table::TableConfig::gc_grace_secs`] (default 10 days). A cell
//!   arriving afterwards with an explicit timestamp older than the purged tombstone, for
//!   example from a replica that missed the delete, is live again, as in Cassandra: run
//!   repair ([`repair`]) more often than `gc_grace_secs`.
//!
//! Start with [`Store`] (tables, snapshots, stats), or with [`segment::SegmentWriter`]
//! and [`segment::SegmentReader`] for the segment format alone. See
//! `ARCHITECTURE.md` for the codemap and the numbered invariants.

#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]
// A type a public item hands out must be nameable by the user: public at the root or in
// a public module, not only in an internal one (checked without the `testing` feature:
// `cargo clippy --lib -- -D warnings`).
#![warn(unnameable_types)]

/// Internals that the crate's own tests, examples and benches reach: `pub` (hidden from
/// the docs) with the `testing` feature, crate-private without it. For modules, for
/// re-exports and for the few methods of public types that only tests call. Without the
/// feature, what only the tests use is allowed to go unused; with it (`cargo clippy
/// --all-targets`) these items are public, and private code in them is linted as usual.
macro_rules! testing_pub {
    ($(#[$attr:meta])* pub $($item:tt)*) => {
        $(#[$attr])*
        #[cfg(feature = "testing")]
        #[doc(hidden)]
        pub $($item)*

        $(#[$attr])*
        #[cfg(not(feature = "testing"))]
        #[allow(dead_code, unused_imports)]
        pub(crate) $($item)*
    };
}

testing_pub! { pub mod config; }
testing_pub! { pub mod error; }
testing_pub! { pub mod format; }
testing_pub! { pub mod io; }
testing_pub! { pub mod layout; }
pub mod lifecycle;
pub mod memory;
testing_pub! { pub mod range; }
mod recovery;
pub mod repair;
pub mod segment;
mod shelf;
testing_pub! { pub mod snapshot; }
testing_pub! { pub mod store; }
testing_pub! { pub mod table; }

pub use config::{
    AccessMode, Compression, DiskAccessMode, HugePages, LockMemory, MemoryOptions, ResolvedModes,
    SegmentOptions,
};
pub use error::{Error, Result};
pub use io::FileRules;
pub use lifecycle::DeletePolicy;
pub use range::KeyRange;
pub use snapshot::SnapshotInfo;
pub use store::{
    CloseReport, Config, ConfigBuilder, SegmentStatsView, SnapshotView, Store, StoreStats,
};
pub use table::compaction_filter::{CompactionFilter, FilterDecision};
pub use table::{
    newer_wins, Batch, Cells, CommitLogConfig, CommitLogSync, CompactionConfig, CompactionStrategy,
    ReadView, Scan, Table, TableConfig, TableStats, TableView, Transaction, TransactionScan, Value,
    WriteBatch, MAX_TTL,
};

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Helpers the unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    /// Cases for a property test: `PROPTEST_CASES` when set (to run it deep), else
    /// `default` (what CI runs).
    pub(crate) fn proptest_cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(default)
    }
}
