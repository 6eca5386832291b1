//! Format 7's summary gives every data block after the first a separator (the shortest
//! prefix of its first key above the key before it) and each block's offset as its
//! distance from the block before: the summary a reader holds in memory shrinks, reads
//! land in the right block, and `verify` checks every separator.

use std::ops::Bound;

use super::reader::Via;
use super::*;
use crate::config::{DiskAccessMode, SegmentOptions};
use crate::error::Error;
use crate::format::footer::{Footer, Kind, FOOTER_LEN};
use crate::format::key_hash;
use crate::format::meta::{separator, Meta, Summary};
use crate::io::FileRules;

/// Keys as the YCSB runner's: eight bytes of a hash, then a counter.
fn key(i: u64) -> Vec<u8> {
    let mut k = key_hash(&i.to_le_bytes()).to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// A segment of 4,000 such keys, sorted, with 100-byte values, in format `version`;
/// and the keys.
fn written(version: u16) -> (tempfile::TempDir, SegmentName, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("t", 1).unwrap();
    let opts = SegmentOptions {
        format_version: version,
        ..SegmentOptions::default()
    };
    let mut keys: Vec<Vec<u8>> = (0..4_000).map(key).collect();
    keys.sort();
    let mut w =
        SegmentWriter::create(dir.path(), name.clone(), &opts, &FileRules::posix()).unwrap();
    for (i, k) in keys.iter().enumerate() {
        w.add(k, &[i as u8; 100], 7, false).unwrap();
    }
    w.finish().unwrap();
    (dir, name, keys)
}

fn meta_of(dir: &std::path::Path, name: &SegmentName) -> (Meta, u16) {
    let m = std::fs::read(name.path(dir, Component::Meta)).unwrap();
    let f = Footer::decode(&m[m.len() - FOOTER_LEN..], m.len() as u64, Kind::Meta).unwrap();
    (
        Meta::decode(&m[..m.len() - FOOTER_LEN], f.version).unwrap(),
        f.version,
    )
}

#[test]
fn format_7_summaries_hold_separators_and_read_the_same() {
    let (dir, name, keys) = written(7);
    let (meta, version) = meta_of(dir.path(), &name);
    assert_eq!(version, 7);
    let s = &meta.summary;
    assert!(s.len() > 50, "{} blocks", s.len());
    // Block b's first key is the first key past the cells of the blocks before.
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let mut first = 0;
    for b in 0..s.len() {
        let cells = r
            .with_data_block(b, Via::File, true, |blk| Ok(blk.len()))
            .unwrap();
        let want = match b {
            0 => keys[0].as_slice(),
            _ => separator(&keys[first - 1], &keys[first]),
        };
        assert_eq!(s.first_key(b), want, "block {b}");
        first += cells;
    }
    assert_eq!(first, keys.len());
    // 16-byte random keys: about 2 bytes tell 120 blocks apart, where format 6 holds
    // the whole first key.
    let (v6, _) = meta_of(written(6).0.path(), &name);
    let per_block = |s: &Summary| s.size_bytes() as f64 / s.len() as f64;
    let (held, whole) = (per_block(s), per_block(&v6.summary));
    assert!(
        held + 10.0 < whole,
        "{held:.1} against {whole:.1} bytes a block"
    );
    // Keys between a block's last and the next block's separator, and between the
    // separator and its first key, read as absent; seeks from them land on the next key.
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let r = SegmentReader::open(dir.path(), &name, mode.resolve()).unwrap();
        for (i, k) in keys.iter().enumerate().skip(1) {
            // Just above the key before (keys are all 16 bytes long), and the separator.
            let mut before = keys[i - 1].clone();
            before.push(0);
            assert!(before < *k);
            let mut short = separator(&keys[i - 1], k).to_vec();
            for probe in [&mut before, &mut short] {
                if probe.as_slice() == k.as_slice() {
                    continue;
                }
                assert!(r.get(probe).unwrap().is_none(), "{mode}: {probe:?}");
                let from = Bound::Included(probe.clone());
                let got = SegmentIter::with_bounds(&r, from, Bound::Unbounded).next();
                assert_eq!(&got.unwrap().unwrap().key, k, "{mode}");
                let to = Bound::Excluded(probe.clone());
                let got = SegmentIter::with_bounds(&r, Bound::Unbounded, to).next_back();
                assert_eq!(&got.unwrap().unwrap().key, &keys[i - 1], "{mode}");
            }
        }
        assert_eq!(r.verify().unwrap(), keys.len() as u64);
    }
}

/// A summary key that is not its block's separator (here: the block's whole first
/// key, as format 6 writes it) fails verify, naming the data file at that block.
#[test]
fn verify_refuses_a_summary_key_that_is_not_the_separator() {
    let (dir, name, keys) = written(7);
    let (mut meta, version) = meta_of(dir.path(), &name);
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    let cells = r
        .with_data_block(0, Via::File, true, |blk| Ok(blk.len()))
        .unwrap();
    let bad_off = r.summary_block(1).0;
    drop(r);
    let mut s = Summary::default();
    for b in 0..meta.summary.len() {
        let (off, len) = meta.summary.block(b);
        let key = if b == 1 {
            keys[cells].as_slice()
        } else {
            meta.summary.first_key(b)
        };
        s.push(key, off, len);
    }
    assert_ne!(meta.summary, s, "the separator was shorter than the key");
    s.build_radix();
    meta.summary = s;
    let mut body = Vec::new();
    meta.encode(version, &mut body);
    let footer = Footer::new(version, Kind::Meta, 0, body.len() as u64);
    body.extend_from_slice(&footer.encode());
    #[allow(clippy::disallowed_methods)]
    std::fs::write(name.path(dir.path(), Component::Meta), &body).unwrap();
    let r = SegmentReader::open(dir.path(), &name, DiskAccessMode::Mmap.resolve()).unwrap();
    assert!(
        r.get(&keys[cells]).unwrap().is_some(),
        "reads still find the key"
    );
    match r.verify() {
        Err(Error::Corrupt { offset, reason, .. }) => {
            assert_eq!(offset, bad_off);
            assert!(reason.contains("differs from the summary"), "{reason}");
        }
        other => panic!("verify gave {other:?}"),
    }
}
