//! Random data sets in every format, checked against a `BTreeMap`.

use std::ops::Bound;

use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use segstore::{DiskAccessMode, SegmentOptions};

/// Small alphabet (with the extreme bytes) so random gets and bounds hit stored keys.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![0u8, 1, b'a', b'b', b'c', 0xfe, 0xff]),
        1..5,
    )
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => key().prop_map(Bound::Included),
        3 => key().prop_map(Bound::Excluded),
    ]
}

fn cell() -> impl Strategy<Value = Cell> {
    (
        // Runs of one byte too, so LZ4 has blocks worth compressing.
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..24),
            (any::<u8>(), 0..60usize).prop_map(|(b, n)| vec![b; n]),
        ],
        any::<u64>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(value, ts, tombstone)| {
            if tombstone {
                Cell::tombstone(ts)
            } else {
                Cell {
                    value,
                    ts,
                    tombstone,
                }
            }
        })
}

type Case = (
    Model,
    SegmentOptions,
    Vec<Vec<u8>>,
    Vec<(Bound<Vec<u8>>, Bound<Vec<u8>>)>,
);

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::btree_map(key(), cell(), 0..120),
        64usize..200,
        prop::sample::select(vec![0u32, 1, 10]),
        prop::collection::vec(key(), 0..40),
        prop::collection::vec((bound(), bound()), 0..12),
        // Every format written: 7, 6, 5 and 4 (data blocks, maybe compressed; 7's and
        // 6's start on pages when a block is a page or more; 7's hold once what all
        // their cells share; 4's keep only their groups' starts) and 3 (records).
        (
            prop::sample::select(vec![3u16, 4, 5, 6, 7, 8]),
            prop_oneof![64usize..400, Just(4096)],
            0u8..3,
        ),
    )
        .prop_map(
            |(model, index_block_size, filter_bits_per_key, gets, scans, format)| {
                let mut opts = SegmentOptions::default();
                opts.index_block_size = index_block_size;
                opts.filter_bits_per_key = filter_bits_per_key;
                (opts.format_version, opts.data_block_size) = (format.0, format.1);
                // 1: LZ4; 2: zstd where the format holds it (6 and 7), else LZ4.
                opts.compression = match format.2 {
                    0 => segstore::Compression::None,
                    2 if format.0 >= 6 => segstore::Compression::Zstd,
                    _ => segstore::Compression::Lz4,
                };
                (model, opts, gets, scans)
            },
        )
}

pub(crate) fn random_datasets_match_btreemap(mode: DiskAccessMode) {
    let mut runner = TestRunner::new(proptest_config(file!()));
    let result = runner.run(&case(), |(model, opts, gets, scans)| {
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), &seg_name(), &opts, &model);
        let r = open_in(dir.path(), &seg_name(), mode);
        for k in model.keys().chain(&gets) {
            let want = model.get(k).map(|c| c.entry(k));
            prop_assert_eq!(r.get(k).unwrap(), want, "{}: get {:?}", mode, k);
        }
        for (start, end) in scans.iter().chain([&(Bound::Unbounded, Bound::Unbounded)]) {
            let want = model_scan(&model, start, end);
            prop_assert_eq!(
                scan_all(&r, start, end).unwrap(),
                want,
                "{}: scan {:?}..{:?}",
                mode,
                start,
                end
            );
        }
        prop_assert_eq!(r.verify().unwrap(), model.len() as u64, "{}", mode);
        prop_assert_eq!(r.stats().entry_count, model.len() as u64, "{}", mode);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{mode}: {e}");
    }
}
