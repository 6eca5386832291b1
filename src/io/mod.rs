//! The file layer: the only module with `unsafe` code.
//!
//! - [`mapped`]: read-only memory maps, each registered with the [`registry`] by file
//!   identity before it exists and unregistered after it is gone.
//! - [`pread`]: positional reads into caller buffers.
//! - [`fs`]: durable helpers (atomic publish, directory fsync, hard links, rename, delete)
//!   that consult the [`rules`] before any delete, replace or truncate.
//! - [`rules`]: POSIX rules or the Windows emulation the tests run under.
//! - [`sys`]: the platform differences, behind identical signatures.

#![allow(unsafe_code)]

pub mod fs;
pub mod identity;
pub mod mapped;
pub mod pread;
pub mod registry;
pub mod rules;
pub mod sys;

pub use identity::FileId;
pub use mapped::MappedFile;
pub use pread::PositionalFile;
pub use registry::{registry, MappingStats};
pub use rules::FileRules;
