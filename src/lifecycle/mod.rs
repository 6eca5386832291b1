//! Lifecycle: segment handles, views, obsolete marking, the deleter and its durable
//! journal, the directory lock, and leak reports.
//!
//! # Invariants and how they are upheld
//! 1. *No file is deleted, replaced or truncated while any mapping of its identity is
//!    open (Windows policy); the deleter is the only code that deletes.* Maps are counted
//!    per (device, inode) in `io::registry` before `mmap` and uncounted after `munmap`.
//!    The `Deleter` under `DeferWhileMapped` unlinks only while holding the registry lock
//!    with a zero count. A segment's reader (its maps) drops before its files are handed
//!    to the deleter (field order in [`handle::Segment`]). `io::fs::remove_file` is
//!    `pub(crate)` and called only from the deleter.
//! 3. *A segment listed in a manifest is never deleted.* Segments are marked obsolete
//!    only after a manifest without them is durable; recovery deletes only files that no
//!    manifest, live snapshot manifest or in-flight write names.
//! 4. *Every requested deletion completes no later than the last close of a mapping of
//!    that file, `close`, or the next open after a crash.* Requests are journaled before
//!    the first attempt; a mapped file's deletion runs on the registry's last-close event;
//!    refusals are retried on each later event, at close, and at open from the journal.
//! 7. *One process owns a store directory.* `lock::DirLock`.
//!
//! # Crash recovery
//! Chosen approach: a durable journal of requested deletions (`deletions.pending`) plus a
//! full directory scan at open that re-derives orphans from the manifests (as RocksDB and
//! Lucene do). A crash after a manifest replacement but before the deletion request
//! leaves files that no manifest names: the scan finds them. A crash after the request
//! leaves them in the journal. Either way the next open deletes them, and never a file a
//! manifest names.

//!
//! # Public surface
//! What a user of [`crate::Store::segments`] and of the stats and close reports names:
//! [`SegmentSet`], its [`View`], [`SegmentHandle`], [`Segment`], and the deleter's
//! reports ([`DeletePolicy`], [`DeleterStats`], [`PendingDeletion`], [`PendingReason`],
//! [`HandleSite`]). The deleter itself, manifests, the lock and the leak tracker are
//! internals (public only with the `testing` feature).

mod chains;
testing_pub! { pub mod deleter; }
testing_pub! { pub mod handle; }
testing_pub! { pub mod ingest_journal; }
mod journal;
testing_pub! { pub mod lock; }
testing_pub! { pub mod manifest; }
testing_pub! { pub mod set; }
testing_pub! { pub mod view; }

pub use deleter::{DeletePolicy, DeleterStats, PendingDeletion, PendingReason};
pub use handle::{HandleSite, Segment, SegmentHandle};
pub use set::SegmentSet;
pub use view::View;
testing_pub! { pub use deleter::Deleter; }
testing_pub! { pub use handle::LeakTracker; }
testing_pub! { pub use lock::DirLock; }
testing_pub! { pub use manifest::{Manifest, SnapshotManifest}; }
testing_pub! { pub use set::SetOptions; }
testing_pub! { pub use view::ViewCell; }
