//! The file layer: the only module with `unsafe` code.
//!
//! - [`mapped`]: read-only memory maps, each registered with the
//!   [`registry`](mod@registry) by file identity before it exists and unregistered after
//!   it is gone.
//! - [`pread`]: positional reads into caller buffers.
//! - [`fs`]: the I/O boundary, [`StoreFs`]: every create, write, fsync, rename, link and
//!   unlink of the crate, each asking the [`rules`] (Windows emulation, faults,
//!   simulator) first; atomic publish.
//! - [`rules`]: the platform's rules, or (`testing` feature) the Windows emulation the
//!   tests run under (`emulation`), injected faults (`faults`) and the power-loss
//!   simulator behind the boundary (`powerloss`); without the feature, uninhabited
//!   stand-ins of those three (`stand_ins`).
//! - `points` (`testing` feature): pause points, named places a test watches or holds
//!   a thread at to drive a race in one order (`FileRules::point`).
//! - [`residency`]: memory residency controls (`mlock`, `mlockall`, huge pages, page-cache
//!   advice) and per-mapping reports of what the kernel granted.
//! - [`kstats`]: the kernel's own figures (`/proc/self/smaps`, `/proc/self/status`, THP
//!   settings), parsed on demand.
//! - [`budget`]: the mapping budget, a share of `vm.max_map_count`.
//! - [`data_budget`]: the bytes of data files `auto` may map, a share of
//!   [`memlimit`]'s memory available to the process (physical memory or a cgroup limit).
//! - [`crc`]: crc32c of short inputs without lookup tables (records on the read path).
//! - [`prefetch`]: cache-line prefetch hints for the lookup path.
//! - [`sys`]: the platform differences, behind identical signatures.
//! - `timer`: a 1 ms timer resolution held while a short group commit window is
//!   configured (Windows; nothing to do on Unix).

#![allow(unsafe_code)]

pub mod budget;
pub mod crc;
pub mod data_budget;
#[cfg(feature = "testing")]
pub mod emulation;
#[cfg(feature = "testing")]
pub mod faults;
pub mod fs;
pub mod identity;
pub mod kstats;
pub mod memlimit;
pub mod mapped;
#[cfg(feature = "testing")]
pub mod points;
#[cfg(feature = "testing")]
pub mod powerloss;
pub mod pread;
pub mod prefetch;
pub mod registry;
pub mod residency;
pub mod rules;
#[cfg(not(feature = "testing"))]
mod stand_ins;
#[cfg(not(feature = "testing"))]
use stand_ins::{emulation, faults, powerloss};
pub mod sys;
pub(crate) mod timer;

pub use budget::MapBudget;
pub use fs::{FsFile, StoreFs};
pub use identity::FileId;
pub use mapped::MappedFile;
#[cfg(feature = "testing")]
pub use powerloss::PowerLoss;
pub use pread::PositionalFile;
pub use registry::{registry, MappingStats};
pub use rules::FileRules;
