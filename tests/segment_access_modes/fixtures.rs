//! The data sets and written segments the cases share.

use crate::common::*;

/// 300 cells `key00000, key00002, ...`: every 7th a tombstone, every 11th an empty value,
/// the rest values of varying length.
pub(crate) fn standard_model() -> Model {
    (0..300u32)
        .map(|i| {
            let k = format!("key{:05}", i * 2).into_bytes();
            let c = if i % 7 == 3 {
                Cell::tombstone(i as u64 * 10)
            } else if i % 11 == 5 {
                Cell::live(b"", i as u64 * 10)
            } else {
                Cell::live(
                    format!("value-{i}-{}", "x".repeat(i as usize % 40)).as_bytes(),
                    i as u64 * 10 + 1,
                )
            };
            (k, c)
        })
        .collect()
}

pub(crate) fn written(model: &Model) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &seg_name(), &tiny_opts(), model);
    dir
}

/// [`written`] in format 3: for what only it has (the index file and its cache, records
/// read one at a time).
pub(crate) fn written_v3(model: &Model) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &seg_name(), &tiny_opts_v3(), model);
    dir
}
