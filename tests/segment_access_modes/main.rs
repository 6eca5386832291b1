//! One suite of segment reader tests, run against every `disk_access_mode`.
//!
//! Each case is a function taking the mode; [`per_mode!`] generates one `#[test]` per
//! (mode, case), named `<mode>::<case>` (so `cargo test mmap_index_only::` runs one
//! backend). Segments use 64-byte index blocks so multi-block paths run on small data.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

#[path = "../common/mod.rs"]
mod common;
mod config;
mod crc_check;
mod fixtures;
mod index_cache;
mod inspection;
mod random;
mod reads;
mod writer;

use config::mode_round_trips_through_toml;
use inspection::{mappings_counted_while_open_and_released_on_drop, verify_and_stats};
use random::random_datasets_match_btreemap;
use reads::{
    concurrent_gets_on_one_reader, empty_segment, point_gets_hit_and_miss,
    scan_every_bound_combination, tombstones_and_empty_values,
};
use segstore::DiskAccessMode;
use writer::{
    dropped_unfinished_writer_leaves_no_files, max_key_accepted_and_one_more_rejected,
    out_of_order_and_duplicates_rejected_writer_stays_usable,
};

macro_rules! per_mode {
    ($($case:ident),* $(,)?) => {
        per_mode!(@mode auto, Auto, $($case),*);
        per_mode!(@mode mmap, Mmap, $($case),*);
        per_mode!(@mode mmap_index_only, MmapIndexOnly, $($case),*);
        per_mode!(@mode standard, Standard, $($case),*);
    };
    (@mode $m:ident, $variant:ident, $($case:ident),*) => {
        mod $m {
            $(
                #[test]
                fn $case() {
                    super::$case(segstore::DiskAccessMode::$variant)
                }
            )*
        }
    };
}

per_mode!(
    point_gets_hit_and_miss,
    tombstones_and_empty_values,
    max_key_accepted_and_one_more_rejected,
    out_of_order_and_duplicates_rejected_writer_stays_usable,
    dropped_unfinished_writer_leaves_no_files,
    scan_every_bound_combination,
    verify_and_stats,
    empty_segment,
    mappings_counted_while_open_and_released_on_drop,
    concurrent_gets_on_one_reader,
    random_datasets_match_btreemap,
    mode_round_trips_through_toml,
);

#[test]
fn every_mode_has_a_module_in_per_mode() {
    for m in DiskAccessMode::all() {
        // A new variant stops this from compiling: add it to `per_mode!` as well.
        match m {
            DiskAccessMode::Auto
            | DiskAccessMode::Mmap
            | DiskAccessMode::MmapIndexOnly
            | DiskAccessMode::Standard => {}
        }
    }
    assert_eq!(DiskAccessMode::all().len(), 4);
}
