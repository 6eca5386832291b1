//! `disk_access_mode` in configuration: TOML, serde and parsing.

use segstore::{DiskAccessMode, Error, SegmentOptions};

#[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
pub(crate) struct StoreConfig {
    #[serde(default)]
    disk_access_mode: DiskAccessMode,
    #[serde(default)]
    segment: SegmentOptions,
}

pub(crate) fn mode_round_trips_through_toml(mode: DiskAccessMode) {
    let text = format!("disk_access_mode = \"{mode}\"\n");
    let cfg: StoreConfig = toml::from_str(&text).unwrap_or_else(|e| panic!("{mode}: {e}"));
    assert_eq!(cfg.disk_access_mode, mode);
    assert_eq!(cfg.segment, SegmentOptions::default(), "{mode}");
    let back = toml::to_string(&cfg).unwrap();
    assert!(back.contains(&text), "{mode}: serialized as {back}");
    assert_eq!(toml::from_str::<StoreConfig>(&back).unwrap(), cfg, "{mode}");
    assert_eq!(mode.as_str().parse::<DiskAccessMode>().unwrap(), mode);
    assert_eq!(mode.to_string(), mode.as_str());
}

#[test]
fn toml_config_with_mmap_index_only_parses() {
    let cfg: StoreConfig = toml::from_str(
        "disk_access_mode = \"mmap_index_only\"\n[segment]\nindex_block_size = 64\n",
    )
    .unwrap();
    assert_eq!(cfg.disk_access_mode, DiskAccessMode::MmapIndexOnly);
    assert_eq!(cfg.segment.index_block_size, 64);
    let r = cfg.disk_access_mode.resolve();
    assert_eq!(
        (r.data, r.index),
        (segstore::AccessMode::Standard, segstore::AccessMode::Mmap)
    );
    // Absent: the default, auto.
    let cfg: StoreConfig = toml::from_str("").unwrap();
    assert_eq!(cfg.disk_access_mode, DiskAccessMode::Auto);
}

#[test]
fn bad_mode_errors_and_lists_the_valid_values() {
    for bad in ["mmap_data", "MMAP", "", "index_only"] {
        let err = toml::from_str::<StoreConfig>(&format!("disk_access_mode = \"{bad}\""))
            .unwrap_err()
            .to_string();
        for valid in segstore::config::DISK_ACCESS_MODES {
            assert!(
                err.contains(valid),
                "toml error for {bad:?} does not list {valid}: {err}"
            );
        }
        let err = bad.parse::<DiskAccessMode>().unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidConfig {
                    setting: "disk_access_mode",
                    ..
                }
            ),
            "{err}"
        );
        for valid in segstore::config::DISK_ACCESS_MODES {
            assert!(err.to_string().contains(valid), "{err}");
        }
    }
    // Not a string at all.
    assert!(toml::from_str::<StoreConfig>("disk_access_mode = 3").is_err());
}

#[test]
fn modes_deserialize_through_plain_serde() {
    use serde::de::value::{Error as DeError, StrDeserializer};
    use serde::de::IntoDeserializer;
    use serde::Deserialize;
    for mode in DiskAccessMode::all() {
        let d: StrDeserializer<'_, DeError> = mode.as_str().into_deserializer();
        assert_eq!(DiskAccessMode::deserialize(d).unwrap(), mode);
    }
    let d: StrDeserializer<'_, DeError> = "bogus".into_deserializer();
    let err = DiskAccessMode::deserialize(d).unwrap_err().to_string();
    for valid in segstore::config::DISK_ACCESS_MODES {
        assert!(err.contains(valid), "{err}");
    }
}
