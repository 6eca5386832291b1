//! `crc_check_chance` and damaged records: which reads check, and what they blame.

use std::ops::Bound;

use crate::common::*;
use crate::fixtures::{standard_model, written, written_v3};
use segstore::segment::{Component, ReaderOptions, SegmentReader};
use segstore::{DiskAccessMode, Error};

// ------------------------------------------------------------------ crc_check_chance

/// `crc_check_chance` decides whether a point read checks its record's checksum: at 1.0
/// (the default) a damaged value is reported, at 0.0 it is returned as it is on disk
/// (the documented trade-off), in between some reads check. `verify` and scans always
/// check. In every mode.
#[test]
fn crc_check_chance_governs_point_reads_only() {
    let model = standard_model();
    let (key, cell) = model
        .iter()
        .find(|(_, c)| c.value.len() > 20)
        .map(|(k, c)| (k.clone(), c.clone()))
        .unwrap();
    let dir = written(&model);
    let data = component_path(dir.path(), Component::Data);
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes
        .windows(cell.value.len())
        .position(|w| w == &cell.value[..])
        .unwrap();
    bytes[at + 5] ^= 0x20;
    std::fs::write(&data, &bytes).unwrap();
    let mut damaged = cell.clone();
    damaged.value[5] ^= 0x20;

    for mode in DiskAccessMode::all() {
        let open = |chance: f64| {
            let mut opts = ReaderOptions::default();
            opts.crc_check_chance = chance;
            SegmentReader::open_with(dir.path(), &seg_name(), mode.resolve(), &opts).unwrap()
        };
        let corrupt = |r: segstore::Result<_>| match r {
            Err(Error::Corrupt { path, .. }) => path == data,
            _ => false,
        };
        let always = open(1.0);
        assert!(corrupt(always.get(&key).map(|_| ())), "{mode}: 1.0 reports");
        let never = open(0.0);
        assert_eq!(
            never.get(&key).unwrap(),
            Some(damaged.entry(&key)),
            "{mode}: 0.0"
        );
        assert!(
            corrupt(never.verify().map(|_| ())),
            "{mode}: verify still checks"
        );
        let scanned: segstore::Result<Vec<_>> = never.iter().unwrap().collect();
        assert!(corrupt(scanned.map(|_| ())), "{mode}: scans still check");
        // Other cells are unaffected either way.
        let other = model.keys().find(|k| **k != key).unwrap();
        assert_eq!(never.get(other).unwrap(), Some(model[other].entry(other)));

        let half = open(0.5);
        let (mut reported, mut returned) = (0, 0);
        for _ in 0..400 {
            match half.get(&key) {
                Ok(got) => {
                    assert_eq!(got, Some(damaged.entry(&key)));
                    returned += 1;
                }
                Err(e) => {
                    assert!(corrupt(Err::<(), _>(e)), "{mode}");
                    reported += 1;
                }
            }
        }
        assert!(
            (100..=300).contains(&reported) && reported + returned == 400,
            "{mode}: 0.5 checked {reported} of 400 reads"
        );
    }
}

/// Unchecked reads still blame the right file: a damaged key byte or timestamp in the
/// data is reported against the data file (the record's checksum is consulted before
/// blaming the index), and a timestamp outside the segment's range is never returned.
#[test]
fn unchecked_reads_still_blame_the_data_file_for_damaged_records() {
    let model = standard_model();
    let (key, cell) = model
        .iter()
        .find(|(_, c)| c.value.len() > 20 && !c.tombstone)
        .map(|(k, c)| (k.clone(), c.clone()))
        .unwrap();
    let dir = written_v3(&model);
    let data = component_path(dir.path(), Component::Data);
    let pristine = std::fs::read(&data).unwrap();
    let key_at = pristine
        .windows(key.len() + 5)
        .position(|w| w[..key.len()] == key[..] && w[key.len()..] == cell.value[..5])
        .unwrap();
    // The record starts with flags (1 byte) and ts (8 bytes LE); the key follows the two
    // length varints (1 byte each here).
    let rec_at = key_at - 11;
    assert_eq!(
        u64::from_le_bytes(pristine[rec_at + 1..rec_at + 9].try_into().unwrap()),
        cell.ts
    );
    for (what, at, bit) in [
        ("a key byte", key_at + 4, 0x01u8),
        ("the top timestamp byte", rec_at + 8, 0x40),
    ] {
        let mut bytes = pristine.clone();
        bytes[at] ^= bit;
        std::fs::write(&data, &bytes).unwrap();
        for mode in DiskAccessMode::all() {
            let mut opts = ReaderOptions::default();
            opts.crc_check_chance = 0.0;
            let r =
                SegmentReader::open_with(dir.path(), &seg_name(), mode.resolve(), &opts).unwrap();
            match r.get(&key) {
                Err(Error::Corrupt { path, .. }) => assert_eq!(path, data, "{mode}: {what}"),
                other => panic!("{mode}: {what}: expected Corrupt naming the data, got {other:?}"),
            }
        }
    }
    std::fs::write(&data, &pristine).unwrap();
}

/// A mapped scan checks the records ahead of it three at a time. A damaged record fails
/// exactly the scans that reach it, after every row before it, forward and backward;
/// checking ahead into it (from the record before, as part of one batch) fails nothing.
#[test]
fn a_damaged_record_fails_only_the_scans_that_reach_it() {
    // key00 .. key29, equal-sized records (so the one to damage is easy to find).
    let model: Model = (0..30u32)
        .map(|i| {
            (
                format!("key{i:02}").into_bytes(),
                Cell::live(&[b'a' + (i % 26) as u8; 100], 7),
            )
        })
        .collect();
    let dir = written_v3(&model);
    let data = component_path(dir.path(), Component::Data);
    let pristine = std::fs::read(&data).unwrap();
    let rec = (pristine.len() - segstore::format::footer::FOOTER_LEN) / model.len();
    let mut bytes = pristine.clone();
    bytes[10 * rec + rec / 2] ^= 0x10; // a value byte of key10
    std::fs::write(&data, &bytes).unwrap();
    let k = |i: u32| format!("key{i:02}").into_bytes();
    for mode in DiskAccessMode::all() {
        let r = open_in(dir.path(), &seg_name(), mode);
        let rows = |lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, back: bool| {
            let mut it = r.scan((lo, hi)).unwrap();
            let mut n = 0;
            loop {
                match if back { it.next_back() } else { it.next() } {
                    None => return Ok(n),
                    Some(Ok(_)) => n += 1,
                    Some(Err(e)) => return Err((n, e)),
                }
            }
        };
        use Bound::{Excluded, Included, Unbounded};
        // Key09's batch of three checks key10 too; the scan stops at key09 (it reads
        // key09 to see it is past the end), so nothing fails.
        assert_eq!(rows(Unbounded, Included(k(8)), false).unwrap(), 9, "{mode}");
        assert_eq!(
            rows(Included(k(11)), Unbounded, false).unwrap(),
            19,
            "{mode}"
        );
        assert_eq!(
            rows(Excluded(k(10)), Unbounded, true).unwrap(),
            19,
            "{mode}"
        );
        for (lo, back, before) in [
            (Unbounded, false, 10),
            (Included(k(9)), false, 1),
            (Unbounded, true, 19),
        ] {
            match rows(lo.clone(), Unbounded, back) {
                Err((n, Error::Corrupt { path, .. })) => {
                    assert_eq!(
                        (n, &path),
                        (before, &data),
                        "{mode}: from {lo:?}, back {back}"
                    )
                }
                other => {
                    panic!("{mode}: from {lo:?}, back {back}: expected Corrupt, got {other:?}")
                }
            }
        }
    }
    std::fs::write(&data, &pristine).unwrap();
}
