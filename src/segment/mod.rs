//! Segments: immutable sorted runs of cells, written once by [`SegmentWriter`] and read
//! by [`SegmentReader`] through memory maps or positional reads per `disk_access_mode`.
//!
//! A segment is three components in one directory, named
//! `<table>-<id>-Data.db`, `<table>-<id>-Index.db` and `<table>-<id>-Meta.db`.
//! The byte formats are in `format` and `docs/format.md`.

#[cfg(test)]
mod align_tests;
mod block_cache;
mod block_walk;
mod index_cache;
mod iter;
mod reader;
mod residency;
#[cfg(test)]
mod separator_tests;
#[cfg(test)]
mod trust_tests;
mod unpacked_cache;
mod walk_stock;
#[cfg(test)]
mod walk_tests;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::format::meta::SegmentStats;
pub use crate::format::ranges::{RangeTombstone, RangeTombstones};
pub use crate::format::record::RecordRef;
pub use block_cache::{BlockCache, BlockCacheStats, CHUNK as BLOCK_CACHE_CHUNK};
pub use index_cache::{IndexCache, IndexCacheStats};
pub use iter::{Entry, SegmentIter};
pub use reader::SegmentReader;
pub(crate) use residency::warn_index_lock_at_open;
pub use residency::{PointLookup, ReaderOptions, SegmentMemory, SegmentResidency};
pub use unpacked_cache::{UnpackedCache, UnpackedCacheStats};
pub use writer::SegmentWriter;

use crate::error::{Error, Result};

/// The components of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Component {
    /// The cells.
    Data,
    /// Key to data offset, in checksummed blocks.
    Index,
    /// Statistics, index summary and filter.
    Meta,
}

impl Component {
    /// All components, in publish order (meta last: a segment whose meta exists is whole).
    pub const ALL: [Component; 3] = [Component::Data, Component::Index, Component::Meta];

    /// File name suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Component::Data => "Data.db",
            Component::Index => "Index.db",
            Component::Meta => "Meta.db",
        }
    }
}

/// Identifies a segment: its table and a number unique within the table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentName {
    /// Table name (validated by [`validate_name`]).
    pub table: String,
    /// Segment number.
    pub id: u64,
}

impl SegmentName {
    /// Build a name, validating the table part.
    pub fn new(table: &str, id: u64) -> Result<Self> {
        validate_name("table", table)?;
        Ok(SegmentName {
            table: table.to_string(),
            id,
        })
    }

    /// File name of one component.
    pub fn file_name(&self, c: Component) -> String {
        crate::layout::segment_file_name(self, c)
    }

    /// Path of one component under `dir`.
    pub fn path(&self, dir: &Path, c: Component) -> PathBuf {
        dir.join(self.file_name(c))
    }

    /// Parse a component file name back into (name, component).
    pub fn parse_file_name(file: &str) -> Option<(SegmentName, Component)> {
        crate::layout::parse_segment_file_name(file)
    }
}

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.table, self.id)
    }
}

/// Longest table or snapshot name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// Check a table name or snapshot tag: 1 to 64 characters of `[A-Za-z0-9_]`, so it can
/// never contain a path separator, `..`, or the `-` that separates file name parts.
pub fn validate_name(kind: &'static str, name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidName {
            kind,
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 64 bytes");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return bad("only ASCII letters, digits and '_' are allowed (no path separators or '..')");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let n = SegmentName::new("users_v2", 17).unwrap();
        for c in Component::ALL {
            assert_eq!(
                SegmentName::parse_file_name(&n.file_name(c)),
                Some((n.clone(), c))
            );
        }
        assert_eq!(SegmentName::parse_file_name("users-x-Data.db"), None);
        assert_eq!(SegmentName::parse_file_name("users-1-Data.db.tmp"), None);
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for n in ["", "../etc", "a/b", "a-b", "a\\b", "..", &"x".repeat(65)] {
            let e = validate_name("table", n).unwrap_err();
            assert!(matches!(e, Error::InvalidName { .. }), "{n}: {e}");
        }
        validate_name("table", "ok_Name9").unwrap();
    }
}
