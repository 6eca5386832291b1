//! What trusting a checked mapped block means (format 5): gets and the table's scans
//! (`SegmentIter::trusting_checked_blocks`) skip the checksum of a block a read has
//! checked since open; scans made with `SegmentIter::new` (compaction, repair) and
//! `verify` check every block whatever the reader remembers.

use std::ops::Bound;

use super::*;
use crate::config::{DiskAccessMode, SegmentOptions};
use crate::io::FileRules;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// A segment of 200 cells of 100-byte values in format 5 blocks of 4 KiB, with one
/// value byte flipped in each of its first two blocks (entries decode; checksums fail).
fn damaged() -> (tempfile::TempDir, SegmentName) {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("t", 1).unwrap();
    let opts = SegmentOptions {
        format_version: crate::format::footer::FORMAT_VERSION,
        ..SegmentOptions::default()
    };
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &opts, &FileRules::posix()).unwrap();
    for i in 0..200 {
        w.add(&key(i), &[b'v'; 100], 1_000 + u64::from(i), false)
            .unwrap();
    }
    w.finish().unwrap();
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    assert!(r.data_blocks() > 2, "{} blocks", r.data_blocks());
    let offsets = [r.summary_block(0).0, r.summary_block(1).0];
    drop(r);
    let path = name.path(dir.path(), Component::Data);
    let mut data = std::fs::read(&path).unwrap();
    for off in offsets {
        // Past the first entry's header and key: inside its value.
        data[off as usize + 40] ^= 0x01;
    }
    #[allow(clippy::disallowed_methods)]
    std::fs::write(&path, &data).unwrap();
    (dir, name)
}

fn scan(it: SegmentIter<&SegmentReader>) -> (usize, Option<Error>) {
    let mut rows = 0;
    for r in it {
        match r {
            Ok(_) => rows += 1,
            Err(e) => return (rows, Some(e)),
        }
    }
    (rows, None)
}

#[test]
fn only_the_tables_reads_trust_a_checked_mapped_block() {
    let (dir, name) = damaged();
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let in_block_0 = r
        .with_data_block(0, reader::Via::File, false, |blk| Ok(blk.len()))
        .unwrap();
    // The first get of a damaged block checks it, and fails.
    let e = r.get(&key(0)).expect_err("the damaged block is checked");
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(!r.block_checked(0));
    // As if block 0 had passed a check before its bytes went bad.
    r.mark_block_checked(0, 1); // checked, its slots unknown
    assert!(
        r.get(&key(0)).unwrap().is_some(),
        "a get trusts the checked block"
    );
    let all = || SegmentIter::with_bounds(&r, Bound::Unbounded, Bound::Unbounded);
    let trusting = all().trusting_checked_blocks();
    let (rows, err) = scan(trusting);
    let err = err.expect("block 1 was never checked: the scan checks it");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(rows, in_block_0, "the table's scan read block 0 on trust");
    // Compaction's and repair's iterators, and verify, check block 0 anyway.
    let (rows, err) = scan(all());
    assert_eq!(rows, 0);
    assert!(matches!(err, Some(Error::Corrupt { .. })), "{err:?}");
    assert!(matches!(r.verify(), Err(Error::Corrupt { .. })));
}

#[test]
fn checking_mapped_blocks_marks_the_sound_ones_and_stops_at_damage() {
    let (dir, name) = damaged();
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let n = r.data_blocks();
    // Block 0 is damaged: the check fails there, naming the data file at its offset,
    // and marks nothing.
    let e = r.check_mapped_blocks().expect_err("block 0 is damaged");
    assert!(
        matches!(&e, Error::Corrupt { offset, .. } if *offset == r.summary_block(0).0),
        "{e}"
    );
    assert!((0..n).all(|b| !r.block_checked(b)));
    // Past the two damaged blocks (as if a read had passed them before their bytes
    // went bad), every other block passes and is marked, and a second call has
    // nothing left to check.
    r.mark_block_checked(0, 1);
    r.mark_block_checked(1, 1);
    assert_eq!(r.check_mapped_blocks().unwrap(), n - 2);
    assert!((0..n).all(|b| r.block_checked(b)));
    assert_eq!(r.check_mapped_blocks().unwrap(), 0);
    // Gets read the marked blocks on trust.
    assert!(r.get(&key(150)).unwrap().is_some());
}

#[test]
fn checking_blocks_read_with_pread_leaves_them_to_their_reads() {
    let (dir, name) = damaged();
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Standard.resolve()).unwrap();
    assert_eq!(r.check_mapped_blocks().unwrap(), 0);
    assert!((0..r.data_blocks()).all(|b| !r.block_checked(b)));
    let e = r
        .get(&key(0))
        .expect_err("a read with pread checks the block");
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
}
