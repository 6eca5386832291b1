//! A table's own settings: the [`TableConfig`] that
//! [`Store::table_with`](crate::Store::table_with) or
//! [`Store::set_table_config`](crate::Store::set_table_config) gave it, kept as
//! `setting <key> <value>` lines of the table's manifest (so they are replaced with it,
//! atomically, dropped with it, and read before the table's commit log records are
//! replayed). A table whose manifest holds none follows the store's `Config::table`.
//!
//! Keys, every one present when any is: `memtable_flush_bytes`, `max_frozen_memtables`
//! (at least 1), `gc_grace_secs`, `background_compaction` (`0` or `1`),
//! `compaction_min_threshold`, `compaction_max_threshold`, `compaction_bucket_low` and
//! `compaction_bucket_high` (the shortest decimal text that reads back to the same
//! `f64`), `compaction_min_segment_size`; and, since leveled compaction (a manifest
//! written before lacks them: they take their defaults, except the strategy, which
//! reads as `size_tiered`, the only policy then), `compaction_strategy`
//! (`size_tiered` or `leveled`), `compaction_target_segment_size`,
//! `compaction_l0_trigger`, `compaction_base_level_size`,
//! `compaction_level_multiplier`, `compaction_write_bytes_per_sec`; since TTL,
//! `default_ttl_secs` (missing: 0, no default TTL); since per-table compression,
//! `compression` (`default`: the store's `segment.compression`, or `none`, `lz4`,
//! `zstd`; missing: `default`); since level 0 merges, `compaction_l0_merge_bytes`
//! (missing: its default); since side runs, `side_run_bytes` (missing: its default). A
//! missing (of the first nine), unknown or malformed key, or settings that fail
//! [`TableConfig::validate`], make the manifest `Corrupt`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::Compression;
use crate::error::{Error, Result};
use crate::table::{CompactionConfig, CompactionStrategy, TableConfig};

/// The keys every settings manifest holds, then [`LATER`]'s.
const KEYS: [&str; 19] = [
    "memtable_flush_bytes",
    "max_frozen_memtables",
    "gc_grace_secs",
    "background_compaction",
    "compaction_min_threshold",
    "compaction_max_threshold",
    "compaction_bucket_low",
    "compaction_bucket_high",
    "compaction_min_segment_size",
    "compaction_strategy",
    "compaction_target_segment_size",
    "compaction_l0_trigger",
    "compaction_base_level_size",
    "compaction_level_multiplier",
    "compaction_write_bytes_per_sec",
    "default_ttl_secs",
    "compression",
    "compaction_l0_merge_bytes",
    "side_run_bytes",
];

/// [`KEYS`] from this index on may be missing (manifests written before them).
const LATER: usize = 9;

/// The manifest lines of `c`.
pub fn encode(c: &TableConfig) -> BTreeMap<String, String> {
    let k = &c.compaction;
    let values = [
        c.memtable_flush_bytes.to_string(),
        c.max_frozen_memtables.to_string(),
        c.gc_grace_secs.to_string(),
        u8::from(c.background_compaction).to_string(),
        k.min_threshold.to_string(),
        k.max_threshold.to_string(),
        k.bucket_low.to_string(),
        k.bucket_high.to_string(),
        k.min_segment_size.to_string(),
        k.strategy.as_str().to_string(),
        k.target_segment_size.to_string(),
        k.l0_trigger.to_string(),
        k.base_level_size.to_string(),
        k.level_multiplier.to_string(),
        k.write_bytes_per_sec.to_string(),
        c.default_ttl_secs.to_string(),
        compression_text(c.compression).to_string(),
        k.l0_merge_bytes.to_string(),
        c.side_run_bytes.to_string(),
    ];
    KEYS.iter().map(|k| k.to_string()).zip(values).collect()
}

/// A table's `compression` as its manifest line writes it.
fn compression_text(c: Option<Compression>) -> &'static str {
    match c {
        None => "default",
        Some(Compression::None) => "none",
        Some(Compression::Lz4) => "lz4",
        Some(Compression::Zstd) => "zstd",
    }
}

/// The settings a manifest's lines hold (`None`: none), `manifest` naming the file in
/// errors.
pub fn decode(manifest: &Path, lines: &BTreeMap<String, String>) -> Result<Option<TableConfig>> {
    if lines.is_empty() {
        return Ok(None);
    }
    let bad = |why: String| Error::corrupt(manifest, 0, format!("table settings: {why}"));
    if let Some(k) = lines.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(bad(format!("unknown setting {k:?}")));
    }
    let defaults = CompactionConfig::default();
    let default_text = [
        // Size-tiered was the only policy when a manifest lacked the key (the default
        // is leveled since): the table keeps the policy it was written under.
        CompactionStrategy::SizeTiered.as_str().to_string(),
        defaults.target_segment_size.to_string(),
        defaults.l0_trigger.to_string(),
        defaults.base_level_size.to_string(),
        defaults.level_multiplier.to_string(),
        defaults.write_bytes_per_sec.to_string(),
        "0".to_string(),
        "default".to_string(),
        defaults.l0_merge_bytes.to_string(),
        crate::table::lsm::DEFAULT_SIDE_RUN_BYTES.to_string(),
    ];
    let text = |i: usize| match lines.get(KEYS[i]) {
        Some(v) => Ok(v),
        None if i >= LATER => Ok(&default_text[i - LATER]),
        None => Err(bad(format!("{} is missing", KEYS[i]))),
    };
    let int = |i: usize| -> Result<u64> {
        let v = text(i)?;
        v.parse::<u64>()
            .map_err(|_| bad(format!("{}: {v:?} is not a number", KEYS[i])))
    };
    let size = |i: usize| int(i).map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let float = |i: usize| -> Result<f64> {
        let v = text(i)?;
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| bad(format!("{}: {v:?} is not a number", KEYS[i])))
    };
    let background_compaction = match int(3)? {
        0 => false,
        1 => true,
        n => return Err(bad(format!("background_compaction {n}"))),
    };
    let strategy = match text(9)?.as_str() {
        "size_tiered" => CompactionStrategy::SizeTiered,
        "leveled" => CompactionStrategy::Leveled,
        v => return Err(bad(format!("compaction_strategy {v:?}"))),
    };
    let compression = match text(16)?.as_str() {
        "default" => None,
        "none" => Some(Compression::None),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd),
        v => return Err(bad(format!("compression {v:?}"))),
    };
    let c = TableConfig {
        compression,
        memtable_flush_bytes: size(0)?,
        max_frozen_memtables: size(1)?,
        gc_grace_secs: int(2)?,
        background_compaction,
        default_ttl_secs: int(15)?,
        side_run_bytes: int(18)?,
        compaction: CompactionConfig {
            min_threshold: size(4)?,
            max_threshold: size(5)?,
            bucket_low: float(6)?,
            bucket_high: float(7)?,
            min_segment_size: int(8)?,
            strategy,
            target_segment_size: int(10)?,
            l0_trigger: size(11)?,
            l0_merge_bytes: int(17)?,
            base_level_size: int(12)?,
            level_multiplier: int(13)?,
            write_bytes_per_sec: int(14)?,
        },
    };
    c.validate().map_err(|e| bad(e.to_string()))?;
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn odd() -> TableConfig {
        TableConfig {
            memtable_flush_bytes: 12345,
            max_frozen_memtables: 3,
            gc_grace_secs: 0,
            background_compaction: false,
            default_ttl_secs: 3600,
            compression: Some(Compression::Zstd),
            side_run_bytes: 12_345,
            compaction: CompactionConfig {
                min_threshold: 2,
                max_threshold: 7,
                bucket_low: 0.1 + 0.2,
                bucket_high: 1.75,
                min_segment_size: 1,
                strategy: CompactionStrategy::Leveled,
                target_segment_size: 5000,
                l0_trigger: 1,
                l0_merge_bytes: 4321,
                base_level_size: 7777,
                level_multiplier: 3,
                write_bytes_per_sec: 1 << 20,
            },
        }
    }

    #[test]
    fn round_trips_exactly() {
        let path = Path::new("t.manifest");
        for c in [TableConfig::default(), odd()] {
            assert_eq!(decode(path, &encode(&c)).unwrap(), Some(c));
        }
        assert_eq!(decode(path, &BTreeMap::new()).unwrap(), None);
    }

    /// A manifest written before leveled compaction lacks its keys: they default.
    #[test]
    fn manifests_before_leveled_compaction_read() {
        let path = Path::new("t.manifest");
        let mut lines = encode(&odd());
        for k in &KEYS[LATER..] {
            lines.remove(*k);
        }
        let c = decode(path, &lines).unwrap().unwrap();
        assert_eq!(c.compaction.strategy, CompactionStrategy::SizeTiered);
        assert_eq!(c.compaction.target_segment_size, 64 << 20);
        assert_eq!(c.compaction.min_threshold, 2);
        assert_eq!(c.default_ttl_secs, 0);
        assert_eq!(c.compression, None);
        assert_eq!(c.side_run_bytes, crate::table::lsm::DEFAULT_SIDE_RUN_BYTES);
        let mut lines = encode(&odd());
        lines.insert("compaction_strategy".into(), "tiered".into());
        assert!(decode(path, &lines)
            .unwrap_err()
            .to_string()
            .contains("compaction_strategy"));
    }

    #[test]
    fn missing_unknown_or_invalid_settings_are_corrupt() {
        let path = Path::new("t.manifest");
        let mut c = odd();
        c.max_frozen_memtables = 0;
        let e = decode(path, &encode(&c)).unwrap_err();
        assert!(
            matches!(e, Error::Corrupt { .. }) && e.to_string().contains("max_frozen_memtables"),
            "{e}"
        );
        let mut lines = encode(&odd());
        lines.remove("gc_grace_secs");
        assert!(decode(path, &lines)
            .unwrap_err()
            .to_string()
            .contains("gc_grace_secs is missing"));
        let mut lines = encode(&odd());
        lines.insert("ttl".into(), "1".into());
        assert!(decode(path, &lines)
            .unwrap_err()
            .to_string()
            .contains("unknown setting"));
        let mut lines = encode(&odd());
        lines.insert("compaction_bucket_low".into(), "NaN".into());
        assert!(decode(path, &lines).is_err());
    }
}
