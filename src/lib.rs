//! segstore: an embeddable storage engine whose immutable segments are read through memory
//! maps or positional reads (`disk_access_mode`), with every mapping counted and every
//! deletion deferred until no mapping of the file is open.
//!
//! Start with [`Store`] (tables, snapshots, stats), or with [`segment::SegmentWriter`]
//! and [`segment::SegmentReader`] for the segment format alone. See
//! `ARCHITECTURE.md` for the codemap and the numbered invariants.

#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]

pub mod config;
pub mod error;
pub mod format;
pub mod io;
pub mod lifecycle;
pub mod range;
pub mod repair;
pub mod segment;
pub mod snapshot;
pub mod store;
pub mod table;

pub use config::{
    AccessMode, DiskAccessMode, HugePages, LockMemory, MemoryOptions, ResolvedModes, SegmentOptions,
};
pub use error::{Error, Result};
pub use lifecycle::DeletePolicy;
pub use store::{CloseReport, Config, Store};

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
