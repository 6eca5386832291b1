//! Fuzz harnesses shared by the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`) and by the
//! proptest byte-mutation tests of the main suite (`tests/fuzz_targets.rs`, which
//! includes this file by path), so CI runs the same code without a fuzzer.
//!
//! Each harness takes arbitrary bytes and must never panic, hang or crash (SIGBUS
//! included); errors are the expected outcome for most inputs (invariant 6).
//!
//! - [`segment`]: a valid segment is written once; the input is a list of mutations
//!   (flip bytes, truncate) of its three components; the mutated copy is opened in
//!   every disk access mode and read completely (point reads of every original key,
//!   a full scan, a range scan).
//! - [`commitlog`]: the same over a valid two-file commit log, then replay.
//! - [`manifests`]: the input as a table manifest, a snapshot manifest, a commit log
//!   positions file and a deletion journal (all sealed text, `format::sealed`).
//! - [`message`]: the input as a repair message; a decoded message re-encodes to a
//!   frame that decodes to the same message.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use segstore::lifecycle::deleter::{decode_journal, encode_journal};
use segstore::lifecycle::{Manifest, SnapshotManifest};
use segstore::repair::Message;
use segstore::segment::{
    Component, RecordRef, SegmentIter, SegmentName, SegmentReader, SegmentWriter,
};
use segstore::table::commitlog::{CommitLog, Replay};
use segstore::table::positions::Positions;
use segstore::{CommitLogConfig, CommitLogSync, DiskAccessMode, SegmentOptions};

/// Apply the mutations encoded in `data` to `files`: 4 bytes each,
/// `[file, offset hi, offset lo, byte]`; the top bit of `file` truncates at the offset
/// instead of xoring `byte` in. Offsets wrap at the file length.
pub fn mutate(files: &mut [Vec<u8>], data: &[u8]) {
    for m in data.chunks_exact(4) {
        let n = files.len();
        let f = &mut files[(m[0] & 0x7f) as usize % n];
        if f.is_empty() {
            continue;
        }
        let off = (((m[1] as usize) << 8) | m[2] as usize) % f.len();
        if m[0] & 0x80 != 0 {
            f.truncate(off);
        } else {
            f[off] ^= m[3].max(1);
        }
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Keys of the template segment.
pub const SEGMENT_KEYS: u32 = 200;

/// The template segment's three components (Data, Index, Meta), written once.
fn segment_template() -> &'static [Vec<u8>; 3] {
    static T: OnceLock<[Vec<u8>; 3]> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let name = SegmentName::new("t", 1).unwrap();
        let mut opts = SegmentOptions::default();
        opts.index_block_size = 64;
        opts.filter_bits_per_key = 10;
        let mut w =
            SegmentWriter::create(dir.path(), name.clone(), &opts, &Default::default()).unwrap();
        for i in 0..SEGMENT_KEYS {
            let tombstone = i % 17 == 0;
            let v = if tombstone {
                String::new()
            } else {
                format!("value-{i}").repeat(1 + (i as usize % 3))
            };
            w.add(&key(i), v.as_bytes(), 1000 + i as u64, tombstone)
                .unwrap();
        }
        w.finish().unwrap();
        Component::ALL.map(|c| std::fs::read(name.path(dir.path(), c)).unwrap())
    })
}

/// Segment open + reads over mutated components.
pub fn segment(data: &[u8]) {
    let mut files = segment_template().clone().to_vec();
    mutate(&mut files, data);
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("t", 1).unwrap();
    for (c, bytes) in Component::ALL.iter().zip(&files) {
        std::fs::write(name.path(dir.path(), *c), bytes).unwrap();
    }
    for mode in [DiskAccessMode::Standard, DiskAccessMode::Mmap] {
        let Ok(r) = SegmentReader::open(dir.path(), &name, mode.resolve()) else {
            continue;
        };
        for i in (0..SEGMENT_KEYS + 2).step_by(7) {
            let _ = r.get(&key(i));
        }
        if let Ok(it) = SegmentIter::new::<&[u8]>(&r, ..) {
            for e in it.take(10_000) {
                if e.is_err() {
                    break;
                }
            }
        }
        if let Ok(it) = SegmentIter::new(&r, key(50).as_slice()..key(60).as_slice()) {
            for e in it.take(10_000) {
                if e.is_err() {
                    break;
                }
            }
        }
        // Backward, through the index entries, and seeks of both ends.
        if let Ok(it) = SegmentIter::new::<&[u8]>(&r, ..) {
            for e in it.rev().take(10_000) {
                if e.is_err() {
                    break;
                }
            }
        }
        if let Ok(mut it) = SegmentIter::new(&r, key(20).as_slice()..=key(80).as_slice()) {
            it.seek_back(&key(70));
            it.seek(&key(40));
            for _ in 0..10_000 {
                match (it.next_back(), it.next()) {
                    (Some(Ok(_)), _) | (_, Some(Ok(_))) => {}
                    _ => break,
                }
            }
        }
    }
}

/// The template commit log: two files of records for tables `t` and `u`.
fn commitlog_template() -> &'static Vec<(String, Vec<u8>)> {
    static T: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = CommitLogConfig::default();
        cfg.sync = CommitLogSync::Periodic { period_ms: 60_000 };
        cfg.segment_size = 400;
        let (log, _) = CommitLog::open(dir.path(), &cfg, 1, |_| Ok(())).unwrap();
        for i in 0..12u32 {
            let k = key(i);
            let v = vec![i as u8; 20];
            let cells = [RecordRef {
                key: &k,
                value: &v,
                ts: i as u64,
                tombstone: false,
                expires: 0,
            }];
            log.append(if i % 2 == 0 { "t" } else { "u" }, &cells)
                .unwrap();
        }
        log.close().unwrap();
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        assert!(files.len() >= 2);
        files
    })
}

/// Commit log replay over mutated log files.
pub fn commitlog(data: &[u8]) {
    let template = commitlog_template();
    let mut files: Vec<Vec<u8>> = template.iter().map(|(_, b)| b.clone()).collect();
    mutate(&mut files, data);
    let dir = tempfile::tempdir().unwrap();
    for ((name, _), bytes) in template.iter().zip(&files) {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    for replay_from in [1, 5] {
        let Ok(mut replay) = Replay::open(dir.path(), replay_from) else {
            continue;
        };
        for r in replay.by_ref().take(10_000) {
            if r.is_err() {
                break;
            }
        }
        let _ = replay.finish();
    }
}

/// Manifest, snapshot manifest, positions and journal parsing: the input as is, and as
/// the body of each format under its own header line with a valid checksum line (random
/// bytes almost never pass the checksum, so this is what reaches the line parsers).
pub fn manifests(data: &[u8]) {
    decode_manifests(data);
    for valid in [
        Manifest::default().encode(),
        SnapshotManifest::default().encode(),
        Positions::default().encode(),
        encode_journal(&[]).unwrap(),
    ] {
        let header_end = valid.iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
        let mut body = valid[..header_end].to_vec();
        body.extend_from_slice(data);
        if body.last() != Some(&b'\n') {
            body.push(b'\n');
        }
        let crc = segstore::format::checksum(&body);
        body.extend_from_slice(format!("crc32c {crc:08x}\n").as_bytes());
        decode_manifests(&body);
    }
}

fn decode_manifests(data: &[u8]) {
    let p = PathBuf::from("fuzz.manifest");
    if let Ok(m) = Manifest::decode(&p, data) {
        // What decodes re-encodes to something that decodes the same.
        let again = Manifest::decode(&p, &m.encode()).expect("re-encoded manifest decodes");
        assert_eq!(again, m);
    }
    let p = Path::new("snapshots/fuzz/manifest");
    if let Ok(m) = SnapshotManifest::decode(p, data) {
        assert_eq!(SnapshotManifest::decode(p, &m.encode()).unwrap(), m);
    }
    let p = Path::new("commitlog/positions");
    if let Ok(m) = Positions::decode(p, data) {
        assert_eq!(Positions::decode(p, &m.encode()).unwrap(), m);
    }
    let p = Path::new("deletions.pending");
    if let Ok(paths) = decode_journal(p, data) {
        // Paths come back exactly: the re-encoded journal decodes to the same list.
        let again = encode_journal(&paths).expect("decoded paths encode");
        assert_eq!(decode_journal(p, &again).unwrap(), paths);
    }
}

/// Repair message decoding: the input as a frame, and (first byte = kind, its top bit
/// choosing the oldest version read over the current one, the rest = body) wrapped in a
/// valid frame header and checksum, which reaches the body decoders of both versions.
pub fn message(data: &[u8]) {
    use segstore::repair::message::{OLDEST_VERSION, VERSION};
    decode_message(data);
    if let Some((&kind, body)) = data.split_first() {
        let mut frame = segstore::repair::message::MAGIC.to_vec();
        frame.push(if kind & 0x80 != 0 {
            OLDEST_VERSION
        } else {
            VERSION
        });
        frame.push(kind % 4);
        frame.extend_from_slice(&(body.len() as u64).to_le_bytes());
        frame.extend_from_slice(body);
        let crc = segstore::format::checksum(&frame);
        frame.extend_from_slice(&crc.to_le_bytes());
        decode_message(&frame);
    }
}

fn decode_message(data: &[u8]) {
    if let Ok(m) = Message::decode(data) {
        let again = Message::decode(&m.encode()).expect("re-encoded message decodes");
        assert_eq!(again, m);
    }
}
