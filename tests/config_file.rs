//! The configuration file shown in the README parses into `Config`, and a bad value is
//! an error that names the setting and lists the valid values.

use segstore::config::{HugePages, LockMemory};
use segstore::table::commitlog::CommitLogSync;
use segstore::{Config, DeletePolicy, DiskAccessMode};

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
    assert_eq!(cfg.table.memtable_flush_bytes, 64 << 20);
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
