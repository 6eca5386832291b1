//! Settings: `disk_access_mode` and the knobs of the segment format.
//!
//! `disk_access_mode` resolves into two effective modes, one for data files and one for
//! index files (DESIGN.md, access mode table):
//!
//! | value | data | index |
//! | --- | --- | --- |
//! | `auto` (default) | standard | mmap on 64-bit, standard on 32-bit (and past the mapping budget) |
//! | `mmap` | mmap | mmap |
//! | `mmap_index_only` | standard | mmap |
//! | `standard` | standard | standard |

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How segment files are read, as configured. See the module docs for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskAccessMode {
    /// Index mapped on 64-bit platforms, data read with positional reads.
    #[default]
    Auto,
    /// Data and index mapped.
    Mmap,
    /// Index mapped, data read with positional reads.
    MmapIndexOnly,
    /// Everything read with positional reads.
    Standard,
}

/// The valid spellings, in the order the docs list them.
pub const DISK_ACCESS_MODES: [&str; 4] = ["auto", "mmap", "mmap_index_only", "standard"];

impl DiskAccessMode {
    /// Resolve into the effective modes for data and index files on this platform.
    pub fn resolve(self) -> ResolvedModes {
        let sixty_four = cfg!(target_pointer_width = "64");
        let (data, index) = match self {
            DiskAccessMode::Auto if sixty_four => (AccessMode::Standard, AccessMode::Mmap),
            DiskAccessMode::Auto => (AccessMode::Standard, AccessMode::Standard),
            DiskAccessMode::Mmap => (AccessMode::Mmap, AccessMode::Mmap),
            DiskAccessMode::MmapIndexOnly => (AccessMode::Standard, AccessMode::Mmap),
            DiskAccessMode::Standard => (AccessMode::Standard, AccessMode::Standard),
        };
        ResolvedModes {
            configured: self,
            data,
            index,
        }
    }

    /// The configuration spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskAccessMode::Auto => "auto",
            DiskAccessMode::Mmap => "mmap",
            DiskAccessMode::MmapIndexOnly => "mmap_index_only",
            DiskAccessMode::Standard => "standard",
        }
    }

    /// All modes, for tests and tools that sweep them.
    pub fn all() -> [DiskAccessMode; 4] {
        [
            DiskAccessMode::Auto,
            DiskAccessMode::Mmap,
            DiskAccessMode::MmapIndexOnly,
            DiskAccessMode::Standard,
        ]
    }
}

impl fmt::Display for DiskAccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for DiskAccessMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "auto" => Ok(DiskAccessMode::Auto),
            "mmap" => Ok(DiskAccessMode::Mmap),
            "mmap_index_only" => Ok(DiskAccessMode::MmapIndexOnly),
            "standard" => Ok(DiskAccessMode::Standard),
            other => Err(Error::InvalidConfig {
                setting: "disk_access_mode",
                value: other.to_string(),
                reason: format!("valid values are {}", DISK_ACCESS_MODES.join(", ")),
            }),
        }
    }
}

/// How one kind of file is actually read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessMode {
    /// Through a read-only memory map.
    Mmap,
    /// Through positional reads (`pread`) into reused buffers.
    Standard,
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            AccessMode::Mmap => "mmap",
            AccessMode::Standard => "standard",
        })
    }
}

/// `disk_access_mode` resolved for this platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedModes {
    /// What was configured.
    pub configured: DiskAccessMode,
    /// How data files are read.
    pub data: AccessMode,
    /// How index files are read.
    pub index: AccessMode,
}

impl ResolvedModes {
    /// Log the resolution once (callers log at open).
    pub fn log(&self) {
        tracing::info!(
            disk_access_mode = %self.configured,
            data = %self.data,
            index = %self.index,
            "disk_access_mode resolved: data files {}, index files {}",
            self.data,
            self.index
        );
    }

    /// The same modes with the index forced to standard access (used past the mapping
    /// budget in `auto` mode).
    pub fn without_mmap(self) -> Self {
        ResolvedModes {
            data: AccessMode::Standard,
            index: AccessMode::Standard,
            ..self
        }
    }
}

/// Knobs of the segment format. Defaults suit production; tests shrink block sizes so
/// multi-block paths run on small data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SegmentOptions {
    /// Target size in bytes of one index block (at least 64).
    pub index_block_size: usize,
    /// Bloom filter bits per key (0 disables the filter).
    pub filter_bits_per_key: u32,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            index_block_size: 4096,
            filter_bits_per_key: 10,
        }
    }
}

impl SegmentOptions {
    /// Check the options, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        if !(64..=(1 << 24)).contains(&self.index_block_size) {
            return Err(Error::InvalidConfig {
                setting: "index_block_size",
                value: self.index_block_size.to_string(),
                reason: "must be between 64 and 16777216 bytes".into(),
            });
        }
        if self.filter_bits_per_key > 64 {
            return Err(Error::InvalidConfig {
                setting: "filter_bits_per_key",
                value: self.filter_bits_per_key.to_string(),
                reason: "must be between 0 and 64".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_valid_value_and_round_trips() {
        for m in DiskAccessMode::all() {
            assert_eq!(m.as_str().parse::<DiskAccessMode>().unwrap(), m);
        }
    }

    #[test]
    fn bad_value_lists_valid_ones() {
        let err = "mmap_data"
            .parse::<DiskAccessMode>()
            .unwrap_err()
            .to_string();
        for v in DISK_ACCESS_MODES {
            assert!(err.contains(v), "{err}");
        }
        assert!(err.contains("mmap_data"));
    }

    #[test]
    fn resolution_follows_the_table() {
        use AccessMode::*;
        let r = DiskAccessMode::Mmap.resolve();
        assert_eq!((r.data, r.index), (Mmap, Mmap));
        let r = DiskAccessMode::MmapIndexOnly.resolve();
        assert_eq!((r.data, r.index), (Standard, Mmap));
        let r = DiskAccessMode::Standard.resolve();
        assert_eq!((r.data, r.index), (Standard, Standard));
        let r = DiskAccessMode::Auto.resolve();
        assert_eq!(r.data, Standard);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(r.index, Mmap);
        let r = DiskAccessMode::Mmap.resolve().without_mmap();
        assert_eq!((r.data, r.index), (Standard, Standard));
    }
}
