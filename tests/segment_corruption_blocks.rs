//! Invariant 6 for format 4 segments (data blocks): bad bytes on disk give
//! `Error::Corrupt` naming the damaged file, never a panic, never another cell.
//!
//! Four segments are written once: one with blocks stored as is, one each with blocks
//! LZ4- and zstd-compressed where that pays, and one of format 6's page-aligned blocks with zero
//! padding between most (which `verify` checks); each case damages a copy of one component (flipped
//! bytes, truncation, growth) and runs `open`, every `get` and a miss beside each, scans
//! from three places and `verify` in every access mode (`common::corruption`). Every
//! byte of a format 4 segment is under a checksum (block checksums, the meta's, the
//! footers') or, padding, checked by `verify`, so open or verify must notice any change, and reads that succeed return
//! the original cells.
//!
//! `PROPTEST_CASES=5000 cargo test --release --test segment_corruption_blocks` runs
//! deeper.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

mod common;

use std::sync::OnceLock;

use common::corruption::{exercise, Expect, Outcome, COMPONENTS};
use common::*;
use proptest::prelude::*;
use proptest::sample::Index;
use segstore::format::footer::FOOTER_LEN;
use segstore::format::meta::Meta;
use segstore::{Compression, DiskAccessMode};

const META: usize = 2;

/// An undamaged segment: its model and the bytes of its three components.
struct Pristine {
    model: Model,
    files: [Vec<u8>; 3],
}

/// Which of the pristine segments a case damages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Blocks stored as they are, of 256 bytes.
    Raw,
    /// Blocks LZ4-compressed where that pays.
    Lz4,
    /// Blocks zstd-compressed where that pays (format 6).
    Zstd,
    /// Blocks of 4 KiB started on pages, most after zero bytes of padding (format 6).
    Paged,
    /// Blocks of live cells of one key and one value length, whose entries format 8
    /// stores fixed.
    Fixed,
}

/// The segment of `shape`: many blocks, values that compress (runs of one letter)
/// beside ones that do not.
fn pristine(shape: Shape) -> &'static Pristine {
    static RAW: OnceLock<Pristine> = OnceLock::new();
    static LZ4: OnceLock<Pristine> = OnceLock::new();
    static PAGED: OnceLock<Pristine> = OnceLock::new();
    static ZSTD: OnceLock<Pristine> = OnceLock::new();
    static FIXED: OnceLock<Pristine> = OnceLock::new();
    let (cell, scale) = match shape {
        Shape::Raw => (&RAW, 1),
        Shape::Lz4 => (&LZ4, 1),
        Shape::Zstd => (&ZSTD, 1),
        Shape::Paged => (&PAGED, 12),
        Shape::Fixed => (&FIXED, 1),
    };
    cell.get_or_init(|| {
        let model: Model = (0..150u32)
            .map(|i| {
                let k = format!("key{i:04}").into_bytes();
                let c = if shape == Shape::Fixed {
                    Cell::live(
                        format!("v{i:03}{}", "y".repeat(16)).as_bytes(),
                        i as u64 * 777,
                    )
                } else if i % 9 == 4 {
                    Cell::tombstone(i as u64)
                } else if i % 5 == 0 {
                    Cell::live(b"", i as u64)
                } else {
                    let v = format!("v{i}{}", "x".repeat(i as usize % 37 * 3 * scale));
                    Cell::live(v.as_bytes(), i as u64 * 1000)
                };
                (k, c)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let mut opts = tiny_opts();
        opts.data_block_size = 256;
        match shape {
            Shape::Raw => {}
            Shape::Lz4 => opts.compression = Compression::Lz4,
            Shape::Zstd => opts.compression = Compression::Zstd,
            Shape::Paged => opts.data_block_size = 4096,
            Shape::Fixed => {}
        }
        write_segment(dir.path(), &seg_name(), &opts, &model);
        let files = COMPONENTS.map(|c| std::fs::read(component_path(dir.path(), c)).unwrap());
        let m = &files[META];
        let meta = Meta::decode(&m[..m.len() - FOOTER_LEN], opts.format_version).unwrap();
        assert!(meta.summary.len() > 10, "want many data blocks");
        let gaps = (1..meta.summary.len())
            .filter(|&b| {
                let ((off, len), next) = (meta.summary.block(b - 1), meta.summary.block(b).0);
                off + u64::from(len) != next
            })
            .count();
        assert_eq!(gaps > 0, shape == Shape::Paged, "padding only when paged");
        for b in (0..meta.summary.len()).filter(|_| shape == Shape::Fixed) {
            // The payload's last byte, before the compression byte and checksum.
            let (off, len) = meta.summary.block(b);
            let held = files[0][(off + u64::from(len)) as usize - 6];
            assert_eq!(held & 8, 8, "block {b}: format 8 fixes its entries");
        }
        assert_eq!(
            files[1].len(),
            FOOTER_LEN,
            "format 4: the index file is its footer"
        );
        Pristine { model, files }
    })
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Raw),
        Just(Shape::Lz4),
        Just(Shape::Zstd),
        Just(Shape::Paged),
        Just(Shape::Fixed)
    ]
}

fn expect(comp: usize, must_detect: bool, open_fails: bool) -> Expect<'static> {
    Expect {
        may_name: &COMPONENTS[comp..=comp],
        open_fails,
        must_detect,
        exact: true,
        verify_names: None,
    }
}

#[test]
fn pristine_segments_are_clean_in_every_mode() {
    for c in [
        Shape::Raw,
        Shape::Lz4,
        Shape::Zstd,
        Shape::Paged,
        Shape::Fixed,
    ] {
        let p = pristine(c);
        for mode in DiskAccessMode::all() {
            let x = Expect {
                may_name: &[],
                ..expect(0, false, false)
            };
            let outcome = exercise(&p.model, &p.files, mode, x, &format!("pristine {c:?}"));
            assert!(matches!(outcome, Outcome::Clean));
        }
    }
}

/// Compression pays on these values: the LZ4 segment's data is smaller.
#[test]
fn compressed_blocks_are_smaller() {
    let raw = pristine(Shape::Raw);
    for c in [Shape::Lz4, Shape::Zstd] {
        let packed = pristine(c);
        assert!(
            packed.files[0].len() * 10 < raw.files[0].len() * 9,
            "{c:?}: {} vs {}",
            packed.files[0].len(),
            raw.files[0].len()
        );
    }
}

proptest! {
    #![proptest_config(proptest_config(file!()))]

    /// Flipped bytes anywhere in one component (footers weighted): open or verify
    /// notices, naming that component; reads that succeed return the original cells.
    #[test]
    fn flipped_bytes(
        c in shape(),
        comp in 0usize..3,
        flips in prop::collection::vec((prop::bool::weighted(0.2), any::<Index>(), 1u8..=255), 1..5),
    ) {
        let p = pristine(c);
        let mut files = p.files.clone();
        let f = &mut files[comp];
        let len = f.len();
        for (in_footer, at, xor) in &flips {
            let i = if *in_footer { len - FOOTER_LEN + at.index(FOOTER_LEN) } else { at.index(len) };
            f[i] ^= xor;
        }
        let changed = files[comp] != p.files[comp];
        for mode in DiskAccessMode::all() {
            let what = format!("{c:?} {:?} flips {flips:?}", COMPONENTS[comp]);
            exercise(&p.model, &files, mode, expect(comp, changed, false), &what);
        }
    }

    /// One component truncated to any shorter length: refused at open, before mapping.
    #[test]
    fn truncated_component(c in shape(), comp in 0usize..3, to in any::<Index>()) {
        let p = pristine(c);
        let mut files = p.files.clone();
        let len = to.index(files[comp].len());
        files[comp].truncate(len);
        for mode in DiskAccessMode::all() {
            let what = format!("{c:?} {:?} truncated to {len}", COMPONENTS[comp]);
            exercise(&p.model, &files, mode, expect(comp, true, true), &what);
        }
    }

    /// Bytes appended to one component: refused at open.
    #[test]
    fn grown_component(
        c in shape(),
        comp in 0usize..3,
        extra in prop::collection::vec(any::<u8>(), 1..80),
    ) {
        let p = pristine(c);
        let mut files = p.files.clone();
        files[comp].extend_from_slice(&extra);
        for mode in DiskAccessMode::all() {
            let what = format!("{c:?} {:?} grown by {}", COMPONENTS[comp], extra.len());
            exercise(&p.model, &files, mode, expect(comp, true, true), &what);
        }
    }
}
