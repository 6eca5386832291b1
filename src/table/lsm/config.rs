//! [`TableConfig`]: the settings of a store's tables, and how `gc_grace` is read from
//! and written to a configuration file.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::table::compaction::CompactionConfig;

/// Settings of the tables of a store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TableConfig {
    /// Freeze and flush the active memtable once the cells applied to it come to this
    /// many bytes (`Memtable::applied_bytes`: keys, values and a per-cell overhead, of
    /// the cells it stores and of those that lost to a newer version of their key,
    /// which the commit log holds all the same). Its point
    /// index, a table of 24-byte slots made with the memtable for the keys the one
    /// before it held (at most one slot per 128 bytes of this), is outside this count
    /// (`TableStats::memtable_index_bytes`). The count is below the memory the cells
    /// take: a cell is charged its key, its value and 64 bytes, and a 16-byte key with a
    /// 100-byte value takes 287 bytes (charged 180), with an 8-byte value 287 too
    /// (charged 88; README "Measured", "Short memtable values inline").
    ///
    /// Default 16 MiB (fjall's; RocksDB's write buffer is 64 MiB, this default until
    /// issue 19): a memtable's ordered map that stays within the last-level cache costs a
    /// put and a read fewer misses a level, and a table holds a quarter of the memory.
    /// The price is four times the flushes, and more compaction beside the foreground.
    /// README "Measured", "16 MiB memtables": YCSB with both sizes side by side.
    pub memtable_flush_bytes: usize,
    /// Writers wait while this many frozen memtables await their flush (at least 1);
    /// a flush failing meanwhile refuses their writes with [`Error::FlushFailed`].
    pub max_frozen_memtables: usize,
    /// Compaction: the policy (leveled, the default, or size-tiered), its settings, the rate limit.
    pub compaction: CompactionConfig,
    /// Tombstones younger than this many seconds are kept by compaction (Cassandra's
    /// `gc_grace_seconds`, default 10 days): repair must run more often than this. In a
    /// configuration file it is a duration like the commit log's: `gc_grace = "10d"`
    /// (whole seconds; units `s`, `m`, `h`, `d`, ...); the older `gc_grace_secs =
    /// 864000` is still read.
    #[serde(rename = "gc_grace", alias = "gc_grace_secs", with = "grace_text")]
    pub gc_grace_secs: u64,
    /// Run compaction (of `compaction.strategy`) in the background after flushes.
    pub background_compaction: bool,
    /// The TTL of a put that names none, in seconds (Cassandra's
    /// `default_time_to_live`; 0, the default: puts do not expire). Applies to `put`,
    /// `put_at` and batches' puts; not to deletes, nor to cells repair streams (they
    /// keep their own expiry). At most [`MAX_TTL`](crate::MAX_TTL). In a
    /// configuration file a duration in whole seconds like `gc_grace`:
    /// `default_ttl = "7d"`.
    #[serde(rename = "default_ttl", with = "ttl_text")]
    pub default_ttl_secs: u64,
    /// How this table's new segments store their data blocks (`"none"`, `"lz4"`,
    /// `"zstd"`); `None`, the default, follows the store's `segment.compression`. Flushes
    /// and compactions from the change on write it; segments already written keep
    /// theirs until compaction rewrites them. Zstd needs `segment.format_version` 6 or
    /// later: checked when the table's settings are given, and when a table whose
    /// persisted settings name it opens (`InvalidConfig` naming `compression`).
    pub compression: Option<crate::config::Compression>,
    /// Bytes of cells (keys, values and 40 bytes each) the table may hold in memory as
    /// its side run: the cells of its segments beside its largest chain of disjoint
    /// segments (a leveled table's level 0), merged into one sorted array that forward
    /// scans read in place of those segments. Built by a compaction round after a scan
    /// meets such segments, for the table's current segments; dropped when they change
    /// (a flush, a compaction) and built again when a scan asks, or at once while the
    /// table's scans read or asked for one within its last eight changes. A table whose
    /// side segments hold more gets none, and so does one whose run does not fit in
    /// what is left of the store's budget for every table's runs
    /// ([`crate::MemoryOptions::side_run_mb`]). 0 keeps none.
    ///
    /// Default 64 MiB: level 0 of the default leveled settings (up to three 16 MiB
    /// flushes before it merges into level 1). README "Compaction", "Level 0 in memory for
    /// scans", and "Measured", "Side runs".
    pub side_run_bytes: u64,
}

/// `gc_grace` in a configuration file: duration text in whole seconds (written in the
/// largest exact unit of `d`, `h`, `m`, `s`), or a number of seconds (the older
/// `gc_grace_secs`).
mod grace_text {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(secs: &u64, s: S) -> std::result::Result<S::Ok, S::Error> {
        super::secs_text::serialize(secs, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
        super::secs_text::deserialize("gc_grace", d)
    }
}

/// `default_ttl` in a configuration file: as `gc_grace` (`"7d"`, or a number of
/// seconds; `"0s"` for none).
mod ttl_text {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(secs: &u64, s: S) -> std::result::Result<S::Ok, S::Error> {
        super::secs_text::serialize(secs, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
        super::secs_text::deserialize("default_ttl", d)
    }
}

/// Whole seconds as duration text, for `gc_grace` and `default_ttl`.
mod secs_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::table::commitlog::config::duration_text;

    pub fn serialize<S: Serializer>(secs: &u64, s: S) -> std::result::Result<S::Ok, S::Error> {
        let text = [(86_400, "d"), (3_600, "h"), (60, "m")]
            .into_iter()
            .find(|(unit, _)| *secs != 0 && secs % unit == 0)
            .map_or_else(
                || format!("{secs}s"),
                |(unit, u)| format!("{}{u}", secs / unit),
            );
        s.serialize_str(&text)
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Secs {
        Secs(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        name: &str,
        d: D,
    ) -> std::result::Result<u64, D::Error> {
        match Secs::deserialize(d)? {
            Secs::Secs(s) => Ok(s),
            Secs::Text(t) => {
                let dur = duration_text::parse(&t)
                    .map_err(|e| serde::de::Error::custom(format!("{name}: {e}")))?;
                if dur.subsec_nanos() != 0 {
                    return Err(serde::de::Error::custom(format!(
                        "{name} {t:?}: must be a whole number of seconds"
                    )));
                }
                Ok(dur.as_secs())
            }
        }
    }
}

/// [`TableConfig::side_run_bytes`]' default: 64 MiB.
pub const DEFAULT_SIDE_RUN_BYTES: u64 = 64 << 20;

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            memtable_flush_bytes: 16 * 1024 * 1024,
            max_frozen_memtables: 2,
            compaction: CompactionConfig::default(),
            gc_grace_secs: 864_000,
            background_compaction: true,
            default_ttl_secs: 0,
            compression: None,
            side_run_bytes: DEFAULT_SIDE_RUN_BYTES,
        }
    }
}

impl TableConfig {
    /// Check the settings, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        self.compaction.validate()?;
        if self.max_frozen_memtables == 0 {
            return Err(Error::InvalidConfig {
                setting: "max_frozen_memtables",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        if self.default_ttl_secs > crate::table::batch::MAX_TTL.as_secs() {
            return Err(Error::InvalidConfig {
                setting: "default_ttl",
                value: format!("{}s", self.default_ttl_secs),
                reason: "a TTL is at most 20 years (630720000 seconds)".into(),
            });
        }
        Ok(())
    }

    /// [`TableConfig::default_ttl_secs`] in microseconds (0: none).
    #[inline]
    pub(crate) fn default_ttl_micros(&self) -> u64 {
        self.default_ttl_secs.saturating_mul(1_000_000)
    }
}
