//! The configuration file shown in the README parses into `Config`, and a bad value is
//! an error that names the setting and lists the valid values.

use segstore::{
    CommitLogSync, CompactionStrategy, Config, DeletePolicy, DiskAccessMode, HugePages, LockMemory,
};

/// Extract the ```toml block under "## Configuration" from the README.
fn readme_toml() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("## Configuration")
        .nth(1)
        .expect("README has a Configuration section");
    let start = section.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = section[start..].find("```").unwrap() + start;
    section[start..end].to_string()
}

/// Leveled compaction is the default, whether the settings come from `default()` or
/// from a file that leaves the strategy out.
#[test]
fn compaction_defaults_to_leveled() {
    assert_eq!(
        Config::default().table.compaction.strategy,
        CompactionStrategy::Leveled
    );
    let empty: Config = toml::from_str("").unwrap();
    assert_eq!(empty.table.compaction.strategy, CompactionStrategy::Leveled);
    let other: Config = toml::from_str("[table.compaction]\nmin_threshold = 3\n").unwrap();
    assert_eq!(other.table.compaction.strategy, CompactionStrategy::Leveled);
    assert_eq!(other.table.compaction.min_threshold, 3);
}

#[test]
fn the_readme_config_parses() {
    let cfg: Config = toml::from_str(&readme_toml()).unwrap();
    assert_eq!(cfg.disk_access_mode, DiskAccessMode::MmapIndexOnly);
    assert_eq!(cfg.delete_policy, DeletePolicy::DeferWhileMapped);
    assert!(
        matches!(cfg.commitlog.sync, CommitLogSync::Group { window } if window.as_micros() == 1000)
    );
    assert_eq!(cfg.memory.lock_memory, LockMemory::Index);
    assert_eq!(cfg.memory.huge_pages, HugePages::Advise);
    assert_eq!(cfg.table.memtable_flush_bytes, 16 << 20);
    assert_eq!(cfg.table.gc_grace_secs, 864_000);
    assert_eq!(cfg.table.compaction.strategy, CompactionStrategy::Leveled);
    assert_eq!(cfg.memory.index_cache_mb, 128);
    assert_eq!(cfg.memory.block_cache_mb, 128);
    assert_eq!(cfg.memory.unpacked_cache_mb, 128);
    assert_eq!(cfg.memory.side_run_mb, 256);
    assert_eq!(cfg.crc_check_chance, 1.0);
}

/// `crc_check_chance` outside 0.0..=1.0 (or NaN) is refused by name before the store
/// touches the directory; `index_cache_mb` past its ceiling likewise, and the other
/// memory budgets in MiB.
#[test]
fn bad_crc_check_chance_or_index_cache_is_refused_before_anything_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    for bad in [1.5, -0.1, f64::NAN] {
        let mut cfg = Config::default();
        cfg.crc_check_chance = bad;
        match segstore::Store::open(&dir, cfg) {
            Err(segstore::Error::InvalidConfig { setting, .. }) => {
                assert_eq!(setting, "crc_check_chance")
            }
            other => panic!("{bad}: expected InvalidConfig, got {other:?}"),
        }
    }
    let mut cfg = Config::default();
    cfg.memory.index_cache_mb = u64::MAX;
    match segstore::Store::open(&dir, cfg) {
        Err(segstore::Error::InvalidConfig { setting, .. }) => {
            assert_eq!(setting, "index_cache_mb")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    for setting in ["block_cache_mb", "unpacked_cache_mb", "side_run_mb"] {
        let mut cfg = Config::default();
        match setting {
            "block_cache_mb" => cfg.memory.block_cache_mb = u64::MAX,
            "unpacked_cache_mb" => cfg.memory.unpacked_cache_mb = u64::MAX,
            _ => cfg.memory.side_run_mb = u64::MAX,
        }
        match segstore::Store::open(&dir, cfg) {
            Err(segstore::Error::InvalidConfig { setting: s, .. }) => assert_eq!(s, setting),
            other => panic!("{setting}: expected InvalidConfig, got {other:?}"),
        }
    }
    assert!(!dir.exists(), "nothing was created");
    let cfg: Config = toml::from_str("crc_check_chance = 0.25").unwrap();
    assert_eq!(cfg.crc_check_chance, 0.25);
    let store = segstore::Store::open(&dir, cfg).unwrap();
    store.close().unwrap();
}

/// Every commit log sync spelling the README's comment shows parses, durations as text
/// alike (`period` as `window`); the older `period_ms` still reads.
#[test]
fn the_readme_sync_spellings_parse() {
    let block = readme_toml();
    let line = block
        .lines()
        .find(|l| l.starts_with("sync = "))
        .expect("a sync line");
    let comment = line.split_once('#').expect("a comment").1;
    let spellings: Vec<&str> = comment.split(" | ").map(str::trim).collect();
    assert_eq!(spellings.len(), 3, "{comment}");
    let parsed: Vec<CommitLogSync> = spellings
        .iter()
        .map(|s| {
            toml::from_str::<Config>(&format!("[commitlog]\nsync = {s}"))
                .unwrap_or_else(|e| panic!("{s}: {e}"))
                .commitlog
                .sync
        })
        .collect();
    assert_eq!(
        parsed,
        [
            CommitLogSync::Batch,
            CommitLogSync::Periodic { period_ms: 10_000 },
            CommitLogSync::Group {
                window: std::time::Duration::from_micros(100)
            },
        ]
    );
    let old: Config =
        toml::from_str("[commitlog]\nsync = { periodic = { period_ms = 10000 } }").unwrap();
    assert_eq!(old.commitlog.sync, parsed[1]);
    assert_eq!(parsed[1].to_string(), "periodic:10s");
}

#[test]
fn a_bad_disk_access_mode_lists_the_valid_values() {
    let err = toml::from_str::<Config>("disk_access_mode = \"mmap_all\"")
        .unwrap_err()
        .to_string();
    for v in ["auto", "mmap", "mmap_index_only", "standard"] {
        assert!(err.contains(v), "{err}");
    }
}

/// `gc_grace` is a duration like the commit log's; the older `gc_grace_secs` (a number
/// of seconds) still reads; a written config round-trips; bad text names the setting.
#[test]
fn gc_grace_takes_duration_text_and_the_old_number() {
    let grace = |toml_text: &str| {
        toml::from_str::<Config>(&format!("[table]\n{toml_text}")).map(|c| c.table.gc_grace_secs)
    };
    assert_eq!(grace("gc_grace = \"10d\"").unwrap(), 864_000);
    assert_eq!(grace("gc_grace = \"36h\"").unwrap(), 129_600);
    assert_eq!(grace("gc_grace = \"90m\"").unwrap(), 5_400);
    assert_eq!(grace("gc_grace = \"7s\"").unwrap(), 7);
    assert_eq!(grace("gc_grace_secs = 864000").unwrap(), 864_000);
    assert_eq!(grace("").unwrap(), 864_000, "the default");
    for (bad, says) in [
        ("gc_grace = \"1.5s\"", "whole number of seconds"),
        ("gc_grace = \"10 days\"", "unknown duration unit"),
        ("gc_grace = \"10\"", "no unit"),
    ] {
        let err = grace(bad).unwrap_err().to_string();
        assert!(
            err.contains("gc_grace") && err.contains(says),
            "{bad}: {err}"
        );
    }
    assert!(
        grace("gc_grace = \"1d\"\ngc_grace_secs = 5").is_err(),
        "both spellings"
    );
    for secs in [0, 7, 60, 5_400, 864_000, 1_000_003] {
        let mut c = Config::default();
        c.table.gc_grace_secs = secs;
        let text = toml::to_string(&c).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.table.gc_grace_secs, secs, "{text}");
    }
    let mut c = Config::default();
    c.table.gc_grace_secs = 864_000;
    assert!(toml::to_string(&c).unwrap().contains("gc_grace = \"10d\""));
}
