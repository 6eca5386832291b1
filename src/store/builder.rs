//! [`Config::validate`], the one check of a store's settings (it is what
//! [`super::Store::open`] runs first), and [`ConfigBuilder`], which builds a `Config` and
//! runs that check:
//!
//! ```
//! use segstore::{CommitLogConfig, CommitLogSync, Config, DiskAccessMode, TableConfig};
//!
//! # fn main() -> segstore::Result<()> {
//! let mut commitlog = CommitLogConfig::default(); // nested settings: defaults, then fields
//! commitlog.sync = CommitLogSync::Batch;
//! let config = Config::builder()
//!     .disk_access_mode(DiskAccessMode::Mmap)
//!     .commitlog(commitlog)
//!     .table(TableConfig::default())
//!     .build()?;
//! assert_eq!(config.disk_access_mode, DiskAccessMode::Mmap);
//!
//! // The same, by fields (the settings are `#[non_exhaustive]`: no struct literals).
//! let mut same = Config::default();
//! same.disk_access_mode = DiskAccessMode::Mmap;
//! same.commitlog.sync = CommitLogSync::Batch;
//! same.validate()?;
//!
//! let bad = Config::builder().crc_check_chance(2.0).build().unwrap_err();
//! assert!(matches!(bad, segstore::Error::InvalidConfig { setting: "crc_check_chance", .. }));
//! # Ok(())
//! # }
//! ```

use crate::config::{DiskAccessMode, MemoryOptions, SegmentOptions};
use crate::error::{Error, Result};
use crate::io::FileRules;
use crate::lifecycle::DeletePolicy;
use crate::table::{CommitLogConfig, TableConfig};

use super::Config;

impl Config {
    /// A builder starting from the defaults; [`ConfigBuilder::build`] validates.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Check every setting, naming the first bad one as [`Error::InvalidConfig`]
    /// (`setting`, `value`, `reason`). [`super::Store::open`] and
    /// [`super::Store::open_read_only`] run this before touching the directory, as
    /// [`ConfigBuilder::build`] does; a config read from a file is checked by either.
    pub fn validate(&self) -> Result<()> {
        self.segment.validate()?;
        self.commitlog.validate()?;
        self.table.validate()?;
        self.segment.validate_for_table(self.table.compression)?;
        self.memory.validate()?;
        if self.compaction_threads == 0 {
            return Err(Error::InvalidConfig {
                setting: "compaction_threads",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        if !(0.0..=1.0).contains(&self.crc_check_chance) {
            return Err(Error::InvalidConfig {
                setting: "crc_check_chance",
                value: self.crc_check_chance.to_string(),
                reason: "must be a number from 0.0 to 1.0".into(),
            });
        }
        Ok(())
    }
}

/// Builds a [`Config`]: one method per setting, each starting from the default, then
/// [`ConfigBuilder::build`], which validates. Nested settings ([`TableConfig`],
/// [`CommitLogConfig`], [`MemoryOptions`], [`SegmentOptions`]) are given whole: start
/// from their `default()` and set fields.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    /// How segment files are read ([`Config::disk_access_mode`]).
    pub fn disk_access_mode(mut self, mode: DiskAccessMode) -> Self {
        self.config.disk_access_mode = mode;
        self
    }

    /// Format of new segments ([`Config::segment`]).
    pub fn segment(mut self, segment: SegmentOptions) -> Self {
        self.config.segment = segment;
        self
    }

    /// When files may be unlinked ([`Config::delete_policy`]).
    pub fn delete_policy(mut self, policy: DeletePolicy) -> Self {
        self.config.delete_policy = policy;
        self
    }

    /// Record where handles are taken and report those still held at close
    /// ([`Config::track_leaks`]).
    pub fn track_leaks(mut self, on: bool) -> Self {
        self.config.track_leaks = on;
        self
    }

    /// The commit log: sync mode and file size ([`Config::commitlog`]).
    pub fn commitlog(mut self, commitlog: CommitLogConfig) -> Self {
        self.config.commitlog = commitlog;
        self
    }

    /// Memtables, flushing, compaction ([`Config::table`]).
    pub fn table(mut self, table: TableConfig) -> Self {
        self.config.table = table;
        self
    }

    /// Memory residency ([`Config::memory`]).
    pub fn memory(mut self, memory: MemoryOptions) -> Self {
        self.config.memory = memory;
        self
    }

    /// Threads running background compactions ([`Config::compaction_threads`]).
    pub fn compaction_threads(mut self, threads: usize) -> Self {
        self.config.compaction_threads = threads;
        self
    }

    /// Probability that a point read checks its record's checksum
    /// ([`Config::crc_check_chance`]).
    pub fn crc_check_chance(mut self, chance: f64) -> Self {
        self.config.crc_check_chance = chance;
        self
    }

    /// File rules ([`Config::file_rules`]).
    pub fn file_rules(mut self, rules: FileRules) -> Self {
        self.config.file_rules = rules;
        self
    }

    /// The config, if every setting is valid ([`Config::validate`]).
    pub fn build(self) -> Result<Config> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::CommitLogSync;

    #[test]
    fn build_validates_every_section() {
        assert!(Config::builder().build().is_ok());
        // Struct literals compile inside the crate only (the settings are non-exhaustive).
        let seg = SegmentOptions {
            index_block_size: 1,
            ..SegmentOptions::default()
        };
        let log = CommitLogConfig {
            sync: CommitLogSync::Periodic { period_ms: 0 },
            ..CommitLogConfig::default()
        };
        let table = TableConfig {
            max_frozen_memtables: 0,
            ..TableConfig::default()
        };
        let mem = MemoryOptions {
            map_budget_percent: 0,
            ..MemoryOptions::default()
        };
        let cases = [
            (Config::builder().segment(seg), "index_block_size"),
            (Config::builder().commitlog(log), "commitlog_sync"),
            (Config::builder().table(table), "max_frozen_memtables"),
            (Config::builder().memory(mem), "map_budget_percent"),
            (Config::builder().crc_check_chance(-0.5), "crc_check_chance"),
            (Config::builder().compaction_threads(0), "compaction_threads"),
            (Config::builder().crc_check_chance(f64::NAN), "crc_check_chance"),
        ];
        for (b, want) in cases {
            match b.build() {
                Err(Error::InvalidConfig { setting, .. }) => assert_eq!(setting, want),
                other => panic!("{want}: {other:?}"),
            }
        }
    }

    #[test]
    fn every_setter_lands_in_its_field() {
        let seg = SegmentOptions {
            index_block_size: 128,
            ..SegmentOptions::default()
        };
        let log = CommitLogConfig {
            sync: CommitLogSync::Batch,
            ..CommitLogConfig::default()
        };
        let table = TableConfig {
            gc_grace_secs: 7,
            ..TableConfig::default()
        };
        let mem = MemoryOptions {
            index_cache_mb: 3,
            ..MemoryOptions::default()
        };
        let c = Config::builder()
            .disk_access_mode(DiskAccessMode::Standard)
            .delete_policy(DeletePolicy::DeferWhileMapped)
            .track_leaks(!Config::default().track_leaks)
            .crc_check_chance(0.25)
            .segment(seg.clone())
            .commitlog(log.clone())
            .table(table.clone())
            .memory(mem.clone())
            .file_rules(FileRules::posix())
            .build()
            .unwrap();
        assert_eq!(c.disk_access_mode, DiskAccessMode::Standard);
        assert_eq!(c.delete_policy, DeletePolicy::DeferWhileMapped);
        assert_eq!(c.track_leaks, !Config::default().track_leaks);
        assert_eq!(c.crc_check_chance, 0.25);
        assert_eq!((c.segment, c.commitlog, c.table, c.memory), (seg, log, table, mem));
    }
}
