//! Invariant 6 through the page index: a point read that finds its record by walking the
//! data's own record headers (`PointLookup::Pages`) names the data file when those
//! headers are damaged, never the index file it did not read. (A record whose value
//! length byte grew past the end of the data was once reported as "index entry points
//! ... past the end of the data" against the index file; `segment_corruption`'s
//! `flipped_bytes` found it.)
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use common::*;
use segstore::format::footer::FOOTER_LEN;
use segstore::format::record;
use segstore::segment::{Component, PointLookup, ReaderOptions, SegmentReader};
use segstore::{DiskAccessMode, Error};

#[test]
fn a_record_length_past_the_data_names_the_data_file() {
    let model: Model = (0..40u32)
        .map(|i| {
            (
                format!("key{i:04}").into_bytes(),
                Cell::live(b"value", u64::from(i)),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &seg_name(), &tiny_opts_v3(), &model);
    let data_path = component_path(dir.path(), Component::Data);
    let mut data = std::fs::read(&data_path).unwrap();
    let body = data.len() - FOOTER_LEN;
    // The last record, by the records' own lengths.
    let (mut last, mut pos) = (0, 0);
    while pos < body {
        last = pos;
        pos += record::total_len(&data[pos..body]).unwrap();
    }
    assert_eq!(pos, body);
    // Flags, timestamp, the key's length (one byte), then the value's (one byte here):
    // 5 becomes 69, and the record runs 64 bytes past the end of the data.
    let val_len_at = last + 1 + 8 + 1;
    assert_eq!(data[val_len_at], 5);
    data[val_len_at] = 69;
    std::fs::write(&data_path, &data).unwrap();
    for mode in DiskAccessMode::all() {
        for lookup in [PointLookup::Index, PointLookup::Pages] {
            let mut o = ReaderOptions::default();
            o.point_lookup = lookup;
            let r = SegmentReader::open_with(dir.path(), &seg_name(), mode.resolve(), &o).unwrap();
            match r.get(b"key0039") {
                Err(Error::Corrupt { path, reason, .. }) => {
                    assert_eq!(path, data_path, "{mode}, {lookup:?}: {reason}");
                }
                other => panic!("{mode}, {lookup:?}: {other:?}"),
            }
            // The records before it are intact and read.
            assert_eq!(r.get(b"key0038").unwrap().unwrap().key, b"key0038");
        }
    }
}
