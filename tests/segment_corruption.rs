//! Invariant 6: bad bytes on disk give `Error::Corrupt { path, offset, reason }` naming the
//! damaged file: never a panic, never another error type, never a SIGBUS.
//!
//! A valid multi-block segment is written once; each case damages a copy of its
//! components (flipped bytes, truncation, growth, bad footers, index entries that lie
//! with correct checksums) and then runs `open`, every `get`, a full `scan` and `verify`
//! in every access mode, point reads searching the index file and, opened again, the
//! page index. Damage to checksummed bytes must be detected by `open` or
//! `verify`, and any read that succeeds must return the original cells. A truncated file
//! opened in `mmap` mode would SIGBUS (killing this test binary) if the reader mapped
//! before checking lengths; the registry also shows that nothing stays mapped.
//!
//! `PROPTEST_CASES=5000 cargo test --release --test segment_corruption` runs deeper.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use std::sync::OnceLock;

use common::corruption::{self, check_corrupt, Expect, Outcome, COMPONENTS};
use common::*;
use proptest::prelude::*;
use proptest::sample::Index;
use segstore::format::footer::{
    Footer, Kind, FOOTER_LEN, FORMAT_VERSION, MIN_READ_VERSION, RECORD_FORMAT_VERSION,
};
use segstore::format::index_block::{IndexBlock, IndexBlockBuilder};
use segstore::format::meta::{Meta, Summary};
use segstore::io::registry;
use segstore::segment::{Component, SegmentReader};
use segstore::{DiskAccessMode, Error, FileRules};

const DATA: usize = 0;
const INDEX: usize = 1;
const META: usize = 2;

/// The undamaged segment: its model and the bytes of its three components.
struct Pristine {
    model: Model,
    files: [Vec<u8>; 3],
}

fn pristine() -> &'static Pristine {
    static P: OnceLock<Pristine> = OnceLock::new();
    P.get_or_init(|| {
        let model: Model = (0..150u32)
            .map(|i| {
                let k = format!("key{i:04}").into_bytes();
                let c = if i % 9 == 4 {
                    Cell::tombstone(i as u64)
                } else if i % 5 == 0 {
                    Cell::live(b"", i as u64)
                } else {
                    let v = format!("v{i}{}", "x".repeat(i as usize % 37));
                    Cell::live(v.as_bytes(), i as u64)
                };
                (k, c)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), &seg_name(), &tiny_opts_v3(), &model);
        let files = COMPONENTS.map(|c| std::fs::read(component_path(dir.path(), c)).unwrap());
        let meta = decode_meta(&files);
        assert!(meta.summary.len() > 20, "want many index blocks");
        Pristine { model, files }
    })
}

fn decode_meta(files: &[Vec<u8>; 3]) -> Meta {
    let m = &files[META];
    Meta::decode(&m[..m.len() - FOOTER_LEN], RECORD_FORMAT_VERSION).unwrap()
}

/// Write `files` to a fresh directory and exercise them in `mode`.
fn exercise(files: &[Vec<u8>; 3], mode: DiskAccessMode, x: Expect<'_>, what: &str) -> Outcome {
    corruption::exercise(&pristine().model, files, mode, x, what)
}

#[test]
fn pristine_segment_is_clean_in_every_mode() {
    let p = pristine();
    for mode in DiskAccessMode::all() {
        let x = Expect {
            may_name: &[],
            open_fails: false,
            must_detect: false,
            exact: true,
            verify_names: None,
        };
        assert!(matches!(
            exercise(&p.files, mode, x, "pristine"),
            Outcome::Clean
        ));
    }
}

/// A flip: in the footer (weighted, so footers are hit often) or anywhere.
fn flip() -> impl Strategy<Value = (bool, Index, u8)> {
    (prop::bool::weighted(0.2), any::<Index>(), 1u8..=255)
}

fn component() -> impl Strategy<Value = usize> {
    0usize..3
}

proptest! {
    #![proptest_config(proptest_config(file!()))]

    /// (a) Flipped bytes anywhere in one component: every byte of every component is
    /// under a checksum, so open or verify must notice, naming that component, and reads
    /// that succeed return the original cells.
    #[test]
    fn flipped_bytes(comp in component(), flips in prop::collection::vec(flip(), 1..5)) {
        let p = pristine();
        let mut files = p.files.clone();
        let f = &mut files[comp];
        let len = f.len();
        for (in_footer, at, xor) in &flips {
            let i = if *in_footer { len - FOOTER_LEN + at.index(FOOTER_LEN) } else { at.index(len) };
            f[i] ^= xor;
        }
        let changed = files[comp] != p.files[comp];
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &COMPONENTS[comp..=comp],
                open_fails: false,
                must_detect: changed,
                exact: true,
                verify_names: None,
            };
            exercise(&files, mode, x, &format!("{:?} flips {flips:?}", COMPONENTS[comp]));
        }
    }

    /// (b) One component truncated to any shorter length, including 0: refused at open,
    /// before anything is mapped (in mmap mode a mapped read past the end would SIGBUS).
    #[test]
    fn truncated_component(comp in component(), to in any::<Index>()) {
        let mut files = pristine().files.clone();
        let len = to.index(files[comp].len());
        files[comp].truncate(len);
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &COMPONENTS[comp..=comp],
                open_fails: true,
                must_detect: true,
                exact: true,
                verify_names: None,
            };
            exercise(&files, mode, x, &format!("{:?} truncated to {len}", COMPONENTS[comp]));
        }
    }

    /// Bytes appended to one component: refused at open.
    #[test]
    fn grown_component(comp in component(), extra in prop::collection::vec(any::<u8>(), 1..80)) {
        let mut files = pristine().files.clone();
        files[comp].extend_from_slice(&extra);
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &COMPONENTS[comp..=comp],
                open_fails: true,
                must_detect: true,
                exact: true,
                verify_names: None,
            };
            exercise(&files, mode, x, &format!("{:?} grown by {}", COMPONENTS[comp], extra.len()));
        }
    }

    /// (c) Index entries that lie, in blocks with correct checksums (and a meta that
    /// matches the rebuilt index): `verify` must report the index; reads must not panic.
    #[test]
    fn lying_index_entries(at in any::<Index>(), lie in lie()) {
        let p = pristine();
        let body = (p.files[DATA].len() - FOOTER_LEN) as u64;
        let mut lied_key = Vec::new();
        let files = rebuild_index(&p.files, |blocks| {
            let mut all: Vec<_> = blocks.iter_mut().flatten().collect();
            let n = all.len();
            let (key, off, len) = &mut *all[at.index(n)];
            lied_key = key.clone();
            lie.apply(key, off, len, body);
        });
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &[Component::Index, Component::Data],
                open_fails: false,
                must_detect: true,
                exact: false,
                verify_names: Some(Component::Index),
            };
            let what = format!("{lie:?} at entry of {:?}", String::from_utf8_lossy(&lied_key));
            let outcome = exercise(&files, mode, x, &what);
            prop_assert!(matches!(outcome, Outcome::VerifyFailed(_)), "{}: {}: {:?}", mode, what, outcome);
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(file!()))]

    /// An index block's hash table that lies (a slot emptied, or pointed at another
    /// entry) under a correct block checksum: lookups may miss, but `verify` must report
    /// the index, and nothing panics.
    #[test]
    fn lying_hash_tables(block in any::<Index>(), slot in any::<Index>(), other in any::<Index>(), empty in any::<bool>()) {
        let p = pristine();
        let meta = decode_meta(&p.files);
        let mut files = p.files.clone();
        let (off, len) = meta.summary.block(block.index(meta.summary.len()));
        let blk = &mut files[INDEX][off as usize..(off + len as u64) as usize];
        let t = blk.len() - 12;
        let m = u32::from_le_bytes(blk[t..t + 4].try_into().unwrap()) as usize;
        let n = u32::from_le_bytes(blk[t + 4..t + 8].try_into().unwrap()) as usize;
        prop_assume!(m > 0 && n > 1);
        let slots = t - 4 * m;
        let offsets = slots - 4 * n;
        let used: Vec<usize> = (0..m)
            .filter(|s| blk[slots + 4 * s..slots + 4 * s + 4] != [0; 4])
            .collect();
        let s = used[slot.index(used.len())];
        let at = slots + 4 * s;
        let old = u32::from_le_bytes(blk[at..at + 4].try_into().unwrap());
        let new = if empty {
            0
        } else {
            // Same fingerprint, another entry's start.
            let starts: Vec<u32> = (0..n)
                .map(|i| u32::from_le_bytes(blk[offsets + 4 * i..offsets + 4 * i + 4].try_into().unwrap()))
                .filter(|&st| st + 1 != old & 0x00ff_ffff)
                .collect();
            (old & 0xff00_0000) | (starts[other.index(starts.len())] + 1)
        };
        blk[at..at + 4].copy_from_slice(&new.to_le_bytes());
        let crc = segstore::format::checksum(&blk[..blk.len() - 4]);
        let crc_at = blk.len() - 4;
        blk[crc_at..].copy_from_slice(&crc.to_le_bytes());
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &[Component::Index, Component::Data],
                open_fails: false,
                must_detect: true,
                exact: false,
                verify_names: Some(Component::Index),
            };
            let what = format!("slot {s} of {m} in block at {off}: {old:#x} -> {new:#x}");
            let outcome = exercise(&files, mode, x, &what);
            prop_assert!(matches!(outcome, Outcome::VerifyFailed(_)), "{}: {}: {:?}", mode, what, outcome);
        }
    }
}

/// Ways an index entry can lie about the data while its block checksum is correct.
#[derive(Debug, Clone)]
enum Lie {
    /// The record is said to start at or past the end of the data.
    OffsetPastEnd(u64),
    /// The record is said to run past the end of the data.
    LenPastEnd(u64),
    /// The record is said to start a little earlier or later.
    OffsetShift(i64),
    /// The record is said to be a little shorter or longer.
    LenShift(i64),
    /// The key gets a zero byte appended (order is kept).
    KeySuffix,
}

fn lie() -> impl Strategy<Value = Lie> {
    let shift = prop_oneof![-60i64..0, 1i64..60];
    prop_oneof![
        (0u64..100_000).prop_map(Lie::OffsetPastEnd),
        (0u64..100_000).prop_map(Lie::LenPastEnd),
        shift.clone().prop_map(Lie::OffsetShift),
        shift.prop_map(Lie::LenShift),
        Just(Lie::KeySuffix),
    ]
}

impl Lie {
    fn apply(&self, key: &mut Vec<u8>, off: &mut u64, len: &mut u64, body: u64) {
        let shifted = |v: u64, s: i64, min: u64| {
            let t = v as i64 + s;
            if t >= min as i64 {
                t as u64
            } else {
                v + s.unsigned_abs()
            }
        };
        match *self {
            Lie::OffsetPastEnd(d) => *off = body + d,
            Lie::LenPastEnd(d) => *len = body - *off + 1 + d,
            Lie::OffsetShift(s) => *off = shifted(*off, s, 0),
            Lie::LenShift(s) => *len = shifted(*len, s, 1),
            Lie::KeySuffix => key.push(0),
        }
    }
}

type Entries = Vec<Vec<(Vec<u8>, u64, u64)>>;

/// Decode every index block, let `f` change the entries, and re-encode the index (with
/// correct checksums) and a meta whose summary matches it.
fn rebuild_index(files: &[Vec<u8>; 3], f: impl FnOnce(&mut Entries)) -> [Vec<u8>; 3] {
    let mut meta = decode_meta(files);
    let index = &files[INDEX];
    let mut blocks: Entries = (0..meta.summary.len())
        .map(|b| {
            let (off, len) = meta.summary.block(b);
            let blk = IndexBlock::parse(&index[off as usize..][..len as usize]).unwrap();
            (0..blk.len())
                .map(|i| {
                    let e = blk.entry(i).unwrap();
                    (e.key.to_vec(), e.data_offset, e.record_len)
                })
                .collect()
        })
        .collect();
    f(&mut blocks);
    let mut out = Vec::new();
    let mut summary = Summary::default();
    let mut builder = IndexBlockBuilder::default();
    for b in &blocks {
        let start = out.len();
        for (k, off, len) in b {
            builder.add(k, *off, *len);
        }
        builder.finish_into(&mut out);
        summary.push(&b[0].0, start as u64, (out.len() - start) as u32);
    }
    let body_len = out.len() as u64;
    out.extend_from_slice(
        &Footer::new(
            RECORD_FORMAT_VERSION,
            Kind::Index,
            meta.stats.entry_count,
            body_len,
        )
        .encode(),
    );
    meta.stats.index_len = out.len() as u64;
    meta.summary = summary;
    let mut m = Vec::new();
    meta.encode(RECORD_FORMAT_VERSION, &mut m);
    let body_len = m.len() as u64;
    m.extend_from_slice(&Footer::new(RECORD_FORMAT_VERSION, Kind::Meta, 0, body_len).encode());
    [files[DATA].clone(), out, m]
}

/// The footer of `file` with its fields rewritten and a correct checksum.
fn refooter(file: &mut [u8], f: impl FnOnce(&mut [u8; FOOTER_LEN])) {
    let at = file.len() - FOOTER_LEN;
    let mut footer: [u8; FOOTER_LEN] = file[at..].try_into().unwrap();
    f(&mut footer);
    let crc = segstore::format::checksum(&footer[..28]);
    footer[28..].copy_from_slice(&crc.to_le_bytes());
    file[at..].copy_from_slice(&footer);
}

fn must_fail_open(files: &[Vec<u8>; 3], comp: usize, what: &str, reason_has: &str) {
    for mode in DiskAccessMode::all() {
        let x = Expect {
            may_name: &COMPONENTS[comp..=comp],
            open_fails: true,
            must_detect: true,
            exact: true,
            verify_names: None,
        };
        match exercise(files, mode, x, what) {
            Outcome::OpenFailed(Error::Corrupt { reason, .. }) => {
                assert!(
                    reason.contains(reason_has),
                    "{mode}: {what}: reason {reason:?}"
                )
            }
            other => panic!("{mode}: {what}: {other:?}"),
        }
    }
}

#[test]
fn wrong_magic() {
    for comp in [DATA, INDEX, META] {
        let mut files = pristine().files.clone();
        let at = files[comp].len() - FOOTER_LEN;
        files[comp][at..at + 8].copy_from_slice(b"SSTABLE!");
        must_fail_open(
            &files,
            comp,
            &format!("{:?} magic", COMPONENTS[comp]),
            "magic",
        );
    }
}

#[test]
fn wrong_version_with_correct_checksum() {
    for comp in [DATA, INDEX, META] {
        for version in [0u16, MIN_READ_VERSION - 1, FORMAT_VERSION + 1, u16::MAX] {
            let mut files = pristine().files.clone();
            refooter(&mut files[comp], |f| {
                f[8..10].copy_from_slice(&version.to_le_bytes())
            });
            let what = format!("{:?} version {version}", COMPONENTS[comp]);
            must_fail_open(&files, comp, &what, "version");
        }
    }
}

/// A version 3 meta labelled version 2 reads its page index as the blocks that follow
/// the filter in version 2 (range tombstones, expiry): refused, never misread.
#[test]
fn version_3_meta_labelled_version_2() {
    let mut files = pristine().files.clone();
    refooter(&mut files[META], |f| {
        f[8..10].copy_from_slice(&2u16.to_le_bytes())
    });
    must_fail_open(&files, META, "meta labelled version 2", "range tombstone");
}

#[test]
fn wrong_kind_with_correct_checksum() {
    for comp in [DATA, INDEX, META] {
        let mut files = pristine().files.clone();
        let other = (comp as u16 + 1) % 3 + 1; // a different, valid kind
        refooter(&mut files[comp], |f| {
            f[10..12].copy_from_slice(&other.to_le_bytes())
        });
        let what = format!("{:?} kind {other}", COMPONENTS[comp]);
        must_fail_open(&files, comp, &what, "kind");
    }
}

#[test]
fn wrong_count_or_body_length_with_correct_checksum() {
    for comp in [DATA, INDEX] {
        let mut files = pristine().files.clone();
        refooter(&mut files[comp], |f| {
            f[12..20].copy_from_slice(&7u64.to_le_bytes())
        });
        let what = format!("{:?} count", COMPONENTS[comp]);
        must_fail_open(&files, comp, &what, "footer counts");
    }
    for comp in [DATA, INDEX, META] {
        let mut files = pristine().files.clone();
        refooter(&mut files[comp], |f| {
            f[20..28].copy_from_slice(&1u64.to_le_bytes())
        });
        let what = format!("{:?} body length", COMPONENTS[comp]);
        must_fail_open(&files, comp, &what, "body is");
    }
}

#[test]
fn zero_length_components() {
    for comp in [DATA, INDEX, META] {
        let mut files = pristine().files.clone();
        files[comp].clear();
        must_fail_open(
            &files,
            comp,
            &format!("{:?} empty", COMPONENTS[comp]),
            "bytes",
        );
    }
}

#[test]
fn components_in_each_others_place() {
    let p = pristine();
    for (a, b) in [(DATA, INDEX), (INDEX, META), (META, DATA)] {
        let mut files = p.files.clone();
        files.swap(a, b);
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &[COMPONENTS[a], COMPONENTS[b]],
                open_fails: true,
                must_detect: true,
                exact: true,
                verify_names: None,
            };
            exercise(
                &files,
                mode,
                x,
                &format!("{:?} and {:?} swapped", COMPONENTS[a], COMPONENTS[b]),
            );
        }
    }
}

#[test]
fn missing_component_is_an_io_error_not_corruption() {
    for c in COMPONENTS {
        let dir = tempfile::tempdir().unwrap();
        for (cc, bytes) in COMPONENTS.iter().zip(&pristine().files) {
            if *cc != c {
                std::fs::write(component_path(dir.path(), *cc), bytes).unwrap();
            }
        }
        for mode in DiskAccessMode::all() {
            match SegmentReader::open(dir.path(), &seg_name(), mode.resolve()) {
                Err(Error::Io { path, .. }) => assert_eq!(path, component_path(dir.path(), c)),
                other => panic!("{mode}: {c:?} missing: {other:?}"),
            }
            assert_eq!(registry().stats_under(dir.path()).maps, 0, "{mode}");
        }
    }
}

/// The brief's example, spelled out: one index entry points past the end of the data,
/// in a block whose checksum is correct. A get of that key and verify both name the
/// index, which holds the bad bytes, not the data file, which is fine.
#[test]
fn index_entry_pointing_past_the_data() {
    let p = pristine();
    let body = (p.files[DATA].len() - FOOTER_LEN) as u64;
    let victim = b"key0042".to_vec();
    let files = rebuild_index(&p.files, |blocks| {
        let e = blocks.iter_mut().flatten().find(|e| e.0 == victim).unwrap();
        e.1 = body + 10;
    });
    for mode in DiskAccessMode::all() {
        let dir = tempfile::tempdir().unwrap();
        for (c, bytes) in COMPONENTS.iter().zip(&files) {
            std::fs::write(component_path(dir.path(), *c), bytes).unwrap();
        }
        let r = SegmentReader::open(dir.path(), &seg_name(), mode.resolve()).unwrap();
        let index = component_path(dir.path(), Component::Index);
        for e in [r.get(&victim).unwrap_err(), r.verify().unwrap_err()] {
            match e {
                Error::Corrupt { path, reason, .. } => {
                    assert_eq!(path, index, "{mode}: {reason}");
                }
                other => panic!("{mode}: {other}"),
            }
        }
        // Other keys still read; a full scan walks the data, which is intact.
        assert_eq!(r.get(b"key0043").unwrap().unwrap().key, b"key0043");
        assert_eq!(r.iter().unwrap().count(), 150);
    }
}

/// Invariant 6 in mmap mode: a component shorter than the meta says is refused before
/// any mapping is made, so no read can run past the end of a mapped file (SIGBUS).
#[test]
fn truncated_component_is_refused_before_mapping() {
    let p = pristine();
    for comp in [DATA, INDEX] {
        for cut in [
            0,
            1,
            FOOTER_LEN - 1,
            FOOTER_LEN,
            p.files[comp].len() / 2,
            p.files[comp].len() - 1,
        ] {
            let mut files = p.files.clone();
            files[comp].truncate(cut);
            for mode in [
                DiskAccessMode::Mmap,
                DiskAccessMode::MmapIndexOnly,
                DiskAccessMode::Auto,
            ] {
                let dir = tempfile::tempdir().unwrap();
                for (c, bytes) in COMPONENTS.iter().zip(&files) {
                    std::fs::write(component_path(dir.path(), *c), bytes).unwrap();
                }
                let e = SegmentReader::open(dir.path(), &seg_name(), mode.resolve()).unwrap_err();
                check_corrupt(
                    &e,
                    dir.path(),
                    &COMPONENTS[comp..=comp],
                    &format!("{mode} cut {cut}"),
                );
                assert_eq!(
                    registry().stats_under(dir.path()).maps,
                    0,
                    "{mode} cut {cut}"
                );
            }
        }
    }
}

/// The other half of "no SIGBUS": while a component is mapped, the rules the crate's I/O
/// boundary obeys refuse to truncate it under the Windows emulation the tests run with.
#[test]
fn truncating_a_mapped_component_is_refused() {
    let p = pristine();
    let dir = tempfile::tempdir().unwrap();
    for (c, bytes) in COMPONENTS.iter().zip(&p.files) {
        std::fs::write(component_path(dir.path(), *c), bytes).unwrap();
    }
    let r = SegmentReader::open(dir.path(), &seg_name(), DiskAccessMode::Mmap.resolve()).unwrap();
    let rules = FileRules::windows_emulation();
    let data = component_path(dir.path(), Component::Data);
    let truncate = |rules: &FileRules| -> std::io::Result<()> {
        rules.check(segstore::io::rules::FileOp::Truncate, &data)?;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&data)?
            .set_len(10)
    };
    assert!(truncate(&rules).is_err());
    assert_eq!(
        std::fs::metadata(&data).unwrap().len(),
        p.files[DATA].len() as u64
    );
    assert_eq!(r.verify().unwrap(), 150);
    drop(r);
    truncate(&rules).unwrap();
    let e =
        SegmentReader::open(dir.path(), &seg_name(), DiskAccessMode::Mmap.resolve()).unwrap_err();
    check_corrupt(&e, dir.path(), &[Component::Data], "after truncation");
}

/// A meta whose checksum is correct but whose statistics or filter do not match the
/// cells (a writer bug, or a meta from another segment of the same shape): `verify`
/// names the meta file.
#[test]
fn meta_that_lies_with_a_correct_checksum() {
    let p = pristine();
    type Edit = fn(&mut Meta);
    let edits: [(&str, Edit); 6] = [
        ("tombstone count", |m| m.stats.tombstone_count += 1),
        ("min timestamp", |m| m.stats.min_ts += 1),
        ("max timestamp", |m| m.stats.max_ts = 0),
        ("min key", |m| m.stats.min_key = b"a".to_vec()),
        ("max key", |m| m.stats.max_key.push(0)),
        ("filter", |m| {
            m.filter = segstore::format::filter::Filter::build(&[1, 2, 3], 10)
        }),
    ];
    for (what, edit) in edits {
        let mut meta = decode_meta(&p.files);
        edit(&mut meta);
        let mut m = Vec::new();
        meta.encode(RECORD_FORMAT_VERSION, &mut m);
        let body_len = m.len() as u64;
        m.extend_from_slice(&Footer::new(RECORD_FORMAT_VERSION, Kind::Meta, 0, body_len).encode());
        let files = [p.files[DATA].clone(), p.files[INDEX].clone(), m];
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &[Component::Meta],
                // The page index starts at the smallest key: a lie about it is
                // refused at open.
                open_fails: what == "min key",
                must_detect: true,
                exact: false,
                verify_names: Some(Component::Meta),
            };
            match exercise(&files, mode, x, what) {
                Outcome::VerifyFailed(Error::Corrupt { reason, .. }) => {
                    assert!(reason.contains(what), "{mode}: {what}: {reason}")
                }
                Outcome::OpenFailed(Error::Corrupt { reason, .. }) if x.open_fails => {
                    assert!(reason.contains("first record"), "{mode}: {what}: {reason}")
                }
                other => panic!("{mode}: {what}: {other:?}"),
            }
        }
    }
}
