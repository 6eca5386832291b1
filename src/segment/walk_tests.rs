//! A block scan's forward step (`BlockWalk::step`) decodes each entry from where the one
//! before ended and copies only a key's suffix when its buffer already holds the group's
//! prefix. Both shortcuts must give what format 3's records give for the same cells,
//! whatever mix of forward steps, backward steps and seeks reaches them: the same moves
//! run on a format 3 segment and on blocked ones (formats 4 to 8, compressed or not,
//! mapped or read positionally), and every answer is compared.

use std::ops::Bound;

use proptest::prelude::*;

use super::*;
use crate::config::{Compression, DiskAccessMode, SegmentOptions};
use crate::io::FileRules;

/// Keys sharing prefixes of every length a block encodes: a small alphabet, and runs
/// behind a long common stem (63 bytes and more take the shared length's varint).
fn key() -> impl Strategy<Value = Vec<u8>> {
    let short = prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0xff]), 1..6);
    (any::<bool>(), short).prop_map(|(stem, k)| match stem {
        true => [vec![b's'; 70], k].concat(),
        false => k,
    })
}

#[derive(Debug, Clone)]
enum Move {
    Next,
    NextBack,
    Seek(Vec<u8>),
    SeekBack(Vec<u8>),
}

fn moves() -> impl Strategy<Value = Vec<Move>> {
    prop::collection::vec(
        prop_oneof![
            6 => Just(Move::Next),
            2 => Just(Move::NextBack),
            1 => key().prop_map(Move::Seek),
            1 => key().prop_map(Move::SeekBack),
        ],
        0..120,
    )
}

/// One segment of `cells` (sorted, distinct keys) in `opts`' format, in a new directory.
fn written(
    cells: &[(Vec<u8>, Vec<u8>, u64)],
    opts: &SegmentOptions,
) -> (tempfile::TempDir, SegmentName) {
    let dir = tempfile::tempdir().unwrap();
    let name = SegmentName::new("t", 1).unwrap();
    let mut w = SegmentWriter::create(dir.path(), name.clone(), opts, &FileRules::posix()).unwrap();
    for (k, v, ts) in cells {
        w.add(k, v, *ts, v.is_empty()).unwrap();
    }
    w.finish().unwrap();
    (dir, name)
}

/// What each move answers: the cell yielded (key, value, ts, tombstone), or nothing.
fn run(r: &SegmentReader, lo: &Bound<Vec<u8>>, moves: &[Move], trust: bool) -> Vec<String> {
    let mut it = SegmentIter::with_bounds(r, lo.clone(), Bound::Unbounded);
    if trust {
        it = it.trusting_checked_blocks();
    }
    let show = |e: Option<Result<Entry>>| match e {
        Some(Ok(e)) => format!("{:?}={:?}@{}{}", e.key, e.value, e.ts, e.tombstone),
        Some(Err(e)) => format!("error {e}"),
        None => "end".to_string(),
    };
    let mut out = Vec::new();
    for m in moves {
        match m {
            Move::Next => out.push(show(it.next())),
            Move::NextBack => out.push(show(it.next_back())),
            Move::Seek(k) => it.seek(k),
            Move::SeekBack(k) => it.seek_back(k),
        }
    }
    // The rest forward: every key the moves left.
    out.extend(it.by_ref().map(|e| show(Some(e))));
    out
}

/// What `moves` answer on `cells` written as format 3 records, and as format
/// `version`'s small blocks (LZ4-packed where that pays, with `lz4`) read mapped and
/// positionally, trusting checked blocks and not: the same.
fn blocks_agree_with_records(
    cells: &[(Vec<u8>, Vec<u8>, u64)],
    version: u16,
    lz4: bool,
    lo: &Bound<Vec<u8>>,
    moves: &[Move],
) -> Result<(), TestCaseError> {
    let records = SegmentOptions {
        format_version: 3,
        ..SegmentOptions::default()
    };
    let (d3, n3) = written(cells, &records);
    let blocked = SegmentOptions {
        format_version: version,
        // Small blocks: many of them, and groups cut by both ends of a block.
        data_block_size: 512,
        compression: if lz4 {
            Compression::Lz4
        } else {
            Compression::None
        },
        ..SegmentOptions::default()
    };
    let (d, n) = written(cells, &blocked);
    let want = {
        let r = SegmentReader::open(d3.path(), &n3, DiskAccessMode::Mmap.resolve()).unwrap();
        run(&r, lo, moves, false)
    };
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        let r = SegmentReader::open(d.path(), &n, mode.resolve()).unwrap();
        // The second pass trusts the blocks the first one checked.
        for trust in [false, true] {
            let got = run(&r, lo, moves, trust);
            prop_assert_eq!(
                &got,
                &want,
                "format {} {:?} trust {} lz4 {}",
                version,
                mode,
                trust,
                lz4
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        crate::test_support::proptest_cases(48)
    ))]

    #[test]
    fn steps_and_seeks_agree_with_records(
        cells in prop::collection::btree_map(
            key(),
            (prop_oneof![3 => Just(vec![7u8; 20]), 1 => prop::collection::vec(any::<u8>(), 0..30)], 1u64..1_000_000),
            1..300,
        ),
        lo in prop_oneof![Just(Bound::Unbounded), key().prop_map(Bound::Included), key().prop_map(Bound::Excluded)],
        moves in moves(),
        version in 4u16..=8,
        lz4 in any::<bool>(),
    ) {
        let cells: Vec<_> = cells.into_iter().map(|(k, (v, ts))| (k, v, ts)).collect();
        blocks_agree_with_records(&cells, version, lz4, &lo, &moves)?;
    }
}

/// Keys of one length sharing prefixes of every length up to it, from a small alphabet.
fn fixed_key(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, b'a', 0xff]), len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        crate::test_support::proptest_cases(32)
    ))]

    /// Format 8 stores a block of live cells of one key length and one value length
    /// with fixed entries, and a forward step decodes those on its own path
    /// (`BlockWalk::step_fixed`): the same moves over such cells, with timestamps of
    /// every delta width (one timestamp: none held per entry), answer as records do.
    #[test]
    fn fixed_entries_step_as_records(
        key_len in 1usize..12,
        cells in prop::collection::btree_map(fixed_key(11), (any::<u8>(), 0u32..64), 1..300),
        val_len in 1usize..24,
        ts_bits in prop::sample::select(vec![0u32, 8, 16, 40, 63]),
        lo in prop_oneof![Just(Bound::Unbounded), fixed_key(11).prop_map(Bound::Included), fixed_key(11).prop_map(Bound::Excluded)],
        moves in moves(),
        lz4 in any::<bool>(),
    ) {
        let cut = |k: &Vec<u8>| k[..key_len].to_vec();
        let cells: std::collections::BTreeMap<Vec<u8>, (u8, u32)> =
            cells.iter().map(|(k, v)| (cut(k), *v)).collect();
        let cells: Vec<_> = cells
            .into_iter()
            .map(|(k, (b, t))| (k, vec![b; val_len], 1 + (u64::from(t) << ts_bits.min(57)) / 64))
            .collect();
        let lo = match lo {
            Bound::Included(k) => Bound::Included(cut(&k)),
            Bound::Excluded(k) => Bound::Excluded(cut(&k)),
            Bound::Unbounded => Bound::Unbounded,
        };
        // Values of one byte repeated: with `lz4` the blocks are packed, read from a buffer.
        blocks_agree_with_records(&cells, 8, lz4, &lo, &moves)?;
    }
}

/// The front meets the back end at a block's first entry (the back yielded the rest),
/// then a seek back moves the back end away: the front's next step yields that entry.
/// It used to decode it at the offset where the block before ended, which the front
/// kept from its last step: a wrong row, or a block called corrupt.
#[test]
fn a_front_that_met_the_back_at_a_block_start_steps_on_after_a_seek_back() {
    let cells: Vec<_> = (0..120u64)
        .map(|i| (i.to_be_bytes().to_vec(), vec![i as u8; 8], 5))
        .collect();
    let last = &cells[cells.len() - 1].0;
    // Format 7's entries follow group heads; format 8 stores these cells fixed.
    for version in [7u16, 8] {
        let opts = SegmentOptions {
            format_version: version,
            data_block_size: 512,
            ..SegmentOptions::default()
        };
        let (d, n) = written(&cells, &opts);
        let r = SegmentReader::open(d.path(), &n, DiskAccessMode::Mmap.resolve()).unwrap();
        for m in 1..cells.len() {
            let mut it = SegmentIter::with_bounds(&r, Bound::Unbounded, Bound::Unbounded);
            for _ in m..cells.len() {
                it.next_back().unwrap().unwrap();
            }
            for _ in 0..m {
                it.next().unwrap().unwrap();
            }
            assert!(it.next().is_none(), "format {version}: the ends met at {m}");
            it.seek_back(last);
            let e = it.next().unwrap().unwrap();
            assert_eq!(
                (&e.key, &e.value),
                (&cells[m].0, &cells[m].1),
                "format {version}, met at {m}"
            );
        }
    }
}

/// A scan's block walk comes from its thread's stock and goes back there when the
/// iterator is dropped (`walk_stock`): a walk left mid-block at both ends of one
/// segment, compressed and read positionally, then renewed for another segment of
/// other keys, mapped and stored fixed, answers that segment's cells and nothing of the
/// first's; and the iterator's bounds hold after seeks past them.
#[test]
fn a_walk_from_the_stock_starts_over_on_its_new_segment() {
    let cells = |n: u64, tag: u8, len: usize| -> Vec<(Vec<u8>, Vec<u8>, u64)> {
        (0..n)
            .map(|i| {
                (
                    [vec![tag; len], i.to_be_bytes().to_vec()].concat(),
                    vec![tag; 20],
                    5,
                )
            })
            .collect()
    };
    let (a, b) = (cells(300, b'a', 9), cells(200, b'b', 3));
    let opts = |version, compression| SegmentOptions {
        format_version: version,
        data_block_size: 512,
        compression,
        ..SegmentOptions::default()
    };
    let (da, na) = written(&a, &opts(7, Compression::Lz4));
    let (db, nb) = written(&b, &opts(8, Compression::None));
    let ra = SegmentReader::open(da.path(), &na, DiskAccessMode::Standard.resolve()).unwrap();
    let rb = SegmentReader::open(db.path(), &nb, DiskAccessMode::Mmap.resolve()).unwrap();
    std::thread::spawn(move || {
        assert_eq!(walk_stock::kept(), 0, "a new thread's stock is empty");
        let keys =
            |c: &[(Vec<u8>, Vec<u8>, u64)]| c.iter().map(|c| c.0.clone()).collect::<Vec<_>>();
        // The first segment's walk left in its first block, in a middle one, and with
        // the back end at work too (blocks of the same numbers as the second's).
        for (fwd, back) in [(1, 0), (5, 3), (77, 55), (0, 9)] {
            let mut it = SegmentIter::with_bounds(&ra, Bound::Unbounded, Bound::Unbounded);
            for _ in 0..fwd {
                it.next().unwrap().unwrap();
            }
            for _ in 0..back {
                it.next_back().unwrap().unwrap();
            }
            drop(it);
            assert_eq!(walk_stock::kept(), 1, "the walk went back to the stock");
            let it = SegmentIter::with_bounds(&rb, Bound::Unbounded, Bound::Unbounded);
            assert_eq!(walk_stock::kept(), 0, "the new iterator took it");
            let got: Vec<_> = it.map(|e| e.unwrap().key).collect();
            assert_eq!(got, keys(&b), "forward after {fwd} and {back} steps");
            let it = SegmentIter::with_bounds(&rb, Bound::Unbounded, Bound::Unbounded);
            let got: Vec<_> = it.rev().map(|e| e.unwrap().key).collect();
            let want: Vec<_> = keys(&b).into_iter().rev().collect();
            assert_eq!(got, want, "back after {fwd} and {back} steps");
        }
        let (lo, hi) = (b[10].0.clone(), b[150].0.clone());
        let mut it = SegmentIter::with_bounds(&rb, Bound::Included(lo), Bound::Excluded(hi))
            .trusting_checked_blocks();
        let got: Vec<_> = it.by_ref().map(|e| e.unwrap().key).collect();
        assert_eq!(got, keys(&b[10..150]));
        // Seeks past the bounds stay within them.
        it.seek(&b[0].0);
        it.seek_back(&b[199].0);
        assert_eq!(it.next().unwrap().unwrap().key, b[10].0);
        assert_eq!(it.next_back().unwrap().unwrap().key, b[149].0);
    })
    .join()
    .unwrap();
}
