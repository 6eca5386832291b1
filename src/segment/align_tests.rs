//! Format 6 starts data blocks on pages (`data_block::PAGE`): a writer pads a gap of at
//! most `writer::MAX_PAD` zero bytes before a block, ends every block of an unpadded
//! table at a page's end, and cuts blocks by their exact stored length; readers accept
//! the padding (format 6 only, less than a page), never read it, and `verify` checks it.

use std::ops::Bound;

use super::writer::MAX_PAD;
use super::*;
use crate::config::{DiskAccessMode, SegmentOptions};
use crate::format::data_block::PAGE;
use crate::format::filter::Filter;
use crate::format::meta::{Meta, SegmentStats, Summary};
use crate::io::FileRules;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 7 + j * 13) as u8).collect()
}

/// A segment of `n` cells of `len`-byte values in format `version`, default options.
fn written(version: u16, n: u32, len: usize) -> (tempfile::TempDir, SegmentName) {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("t", 1).unwrap();
    let opts = SegmentOptions {
        format_version: version,
        ..SegmentOptions::default()
    };
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &opts, &FileRules::posix()).unwrap();
    for i in 0..n {
        w.add(&key(i), &value(i, len), 1_000 + u64::from(i), false)
            .unwrap();
    }
    w.finish().unwrap();
    (dir, name)
}

/// Every block's (gap before it, offset, length).
fn layout(r: &SegmentReader) -> Vec<(u64, u64, u64)> {
    let mut end = 0;
    (0..r.data_blocks())
        .map(|b| {
            let (off, len) = r.summary_block(b);
            let gap = off - end;
            end = off + u64::from(len);
            (gap, off, u64::from(len))
        })
        .collect()
}

/// Every mode gets every key back, and a scan gives them all in order.
fn reads_back(dir: &std::path::Path, name: &SegmentName, n: u32, len: usize) {
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let r = SegmentReader::open(dir, name, mode.resolve()).unwrap();
        assert_eq!(r.verify().unwrap(), u64::from(n));
        for i in 0..n {
            let got = r.get(&key(i)).unwrap().expect("written");
            assert_eq!(got.value, value(i, len), "{mode}: key {i}");
        }
        let all = SegmentIter::with_bounds(&r, Bound::Unbounded, Bound::Unbounded);
        let keys: Vec<Vec<u8>> = all.map(|e| e.unwrap().key).collect();
        assert_eq!(keys, (0..n).map(key).collect::<Vec<_>>(), "{mode}");
    }
}

#[test]
fn blocks_of_small_cells_start_and_end_on_one_page() {
    // Format 7 holds the cells' key and value lengths once, format 6 writes them in
    // each, format 8 stores its entries without heads or starts: the writer's exact
    // lengths differ, its pages do not.
    let mut counts = Vec::new();
    for version in [6, 7, 8] {
        let (dir, name) = written(version, 3_000, 100);
        let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
        let blocks = layout(&r);
        assert!(blocks.len() > 50, "{} blocks", blocks.len());
        for (b, &(gap, off, len)) in blocks.iter().enumerate() {
            assert_eq!(
                off % PAGE,
                0,
                "{version}: block at {off} of {len} after {gap}"
            );
            // Filled to within a cell of the page (but the last), never past it.
            let last = b + 1 == blocks.len();
            assert!(
                len <= PAGE && (last || len > PAGE - 150),
                "{version}: block at {off} of {len}"
            );
        }
        assert!(blocks.iter().filter(|b| b.0 > 0).count() > blocks.len() / 2);
        counts.push(blocks.len());
        drop(r);
        reads_back(dir.path(), &name, 3_000, 100);
    }
    // More of format 8's shorter entries fit a page.
    assert!(
        counts[2] < counts[1] && counts[1] <= counts[0],
        "blocks {counts:?}"
    );
}

#[test]
fn format_5_blocks_tile_the_data_within_their_size() {
    let (dir, name) = written(5, 3_000, 100);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let blocks = layout(&r);
    for (b, &(gap, off, len)) in blocks.iter().enumerate() {
        assert_eq!(gap, 0, "block at {off}");
        let last = b + 1 == blocks.len();
        assert!(
            len <= 4096 && (last || len > 4096 - 150),
            "block at {off} of {len}"
        );
    }
    drop(r);
    reads_back(dir.path(), &name, 3_000, 100);
}

/// Cells of 1.4 KB leave gaps wider than `MAX_PAD`: those stay unpadded, and the block
/// after one ends at a page's end, so only its first cell shares the page before.
#[test]
fn wide_gaps_stay_unpadded_and_blocks_still_end_at_pages() {
    let (dir, name) = written(7, 400, 1_400);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let blocks = layout(&r);
    let mut unaligned = 0;
    for &(gap, off, len) in &blocks {
        assert!(gap <= MAX_PAD, "a gap of {gap} before {off}");
        assert!(
            off + len <= (off + 4096).next_multiple_of(PAGE),
            "block at {off} of {len} passes its page"
        );
        if off % PAGE != 0 {
            unaligned += 1;
            assert_eq!(gap, 0, "an unaligned block follows the one before");
        }
    }
    assert!(unaligned > 0 && unaligned < blocks.len(), "{blocks:?}");
    drop(r);
    reads_back(dir.path(), &name, 400, 1_400);
}

#[test]
fn damaged_padding_fails_verify_and_no_read() {
    let (dir, name) = written(7, 500, 100);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let &(gap, off, _) = layout(&r).iter().find(|b| b.0 > 1).expect("a padded block");
    drop(r);
    let path = name.path(dir.path(), Component::Data);
    let mut data = std::fs::read(&path).unwrap();
    let bad = off - gap + 1;
    data[bad as usize] = 0x5a;
    #[allow(clippy::disallowed_methods)]
    std::fs::write(&path, &data).unwrap();
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let r = SegmentReader::open(dir.path(), &name, mode.resolve()).unwrap();
        match r.verify() {
            Err(Error::Corrupt { offset, reason, .. }) => {
                assert_eq!(offset, bad, "{reason}");
                assert!(reason.contains("padding"), "{reason}");
            }
            other => panic!("{mode}: verify gave {other:?}"),
        }
        for i in 0..500 {
            assert!(r.get(&key(i)).unwrap().is_some(), "{mode}: key {i}");
        }
        let all = SegmentIter::with_bounds(&r, Bound::Unbounded, Bound::Unbounded);
        let rows = all.collect::<Result<Vec<_>>>().unwrap();
        assert_eq!(rows.len(), 500, "{mode}");
    }
}

/// A meta of one block that starts `off` bytes into its data, in format `version`.
fn meta_with_gap(off: u64, version: u16) -> std::result::Result<Meta, String> {
    let mut summary = Summary::default();
    summary.push(b"a", off, 10);
    let meta = Meta {
        stats: SegmentStats {
            entry_count: 1,
            min_ts: 1,
            max_ts: 1,
            data_len: off + 10 + 32,
            index_len: 32,
            min_key: b"a".to_vec(),
            max_key: b"a".to_vec(),
            ..SegmentStats::default()
        },
        summary,
        filter: Filter::build(&[crate::format::key_hash(b"a")], 10),
        pages: None,
        ranges: Default::default(),
    };
    let mut body = Vec::new();
    meta.encode(version, &mut body);
    Meta::decode(&body, version).map_err(|m| m.reason)
}

#[test]
fn only_format_6_may_pad_and_never_a_page() {
    assert!(meta_with_gap(0, 5).is_ok());
    assert!(meta_with_gap(0, 6).is_ok());
    assert!(meta_with_gap(PAGE - 1, 6).is_ok());
    assert!(meta_with_gap(PAGE - 1, 7).is_ok());
    for (off, version) in [(1, 5), (PAGE - 1, 5), (PAGE, 6), (3 * PAGE, 6), (PAGE, 7)] {
        let e = meta_with_gap(off, version).expect_err("refused");
        assert!(e.contains("does not follow"), "{off} in {version}: {e}");
    }
}
