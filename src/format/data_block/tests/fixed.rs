//! Format 8's fixed entries (`fixed.rs`): when a block's entries are fixed, what they
//! take, and that a reader refuses a trailer that describes them wrongly.

use super::*;
use crate::format::data_block::held::{FIXED, KEY, TS, VAL};

/// Cells built into a format 8 block, checked whole: the block's held fields and its
/// stored length.
fn fixed_block(cells: &[Cell]) -> (u8, usize) {
    let stored = build_in(Layout::Fixed, cells, 16, Compression::None);
    check_block_in(Layout::Fixed, cells, &stored).unwrap();
    (stored[stored.len() - 6], stored.len())
}

/// The payload of `cells` in a format 8 block.
fn payload_of(cells: &[Cell]) -> Vec<u8> {
    let stored = build_in(Layout::Fixed, cells, 16, Compression::None);
    stored[..stored.len() - 5].to_vec()
}

/// Whether `payload` parses as format 8, and the reason it does not.
fn refused(payload: &[u8]) -> Option<String> {
    DataBlock::parse(payload, Layout::Fixed).err().map(|m| m.reason)
}

#[test]
fn fixed_entries_take_neither_heads_nor_starts() {
    let mut cells = ycsb_cells(30, 100, false);
    // The keys' first 7 bytes are zeros (an 8-byte counter below 256), held once; the
    // timestamps spread over ten seconds of microseconds, three bytes a delta. The
    // trailer: prefix, its length, the delta width, both lengths (6), base_ts, n,
    // interval and held (11); then the compression byte and checksum (5).
    let (flags, len) = fixed_block(&cells);
    assert_eq!(flags, KEY | VAL | FIXED);
    assert_eq!(len, 30 * (16 - 7 + 3 + 100) + hash_slots(30) + 7 + 2 + 6 + 11 + 5);
    let held = build_in(Layout::Held, &cells, 16, Compression::None).len();
    assert!(len + 30 * 2 < held, "{len} bytes fixed against {held} in format 7");
    // One timestamp: no deltas at all.
    let ts = cells[0].ts;
    cells.iter_mut().for_each(|c| c.ts = ts);
    let (flags, len) = fixed_block(&cells);
    assert_eq!(flags, KEY | VAL | TS | FIXED);
    assert_eq!(len, 30 * (16 - 7 + 100) + hash_slots(30) + 7 + 2 + 6 + 11 + 5);
}

#[test]
fn only_live_cells_of_one_key_and_value_length_are_fixed() {
    let cells = ycsb_cells(20, 40, false);
    let mut tomb = cells.clone();
    (tomb[3].tombstone, tomb[3].value) = (true, Vec::new());
    assert_eq!(fixed_block(&tomb).0, KEY | VAL);
    let mut expiring = cells.clone();
    expiring[5].expires = expiring[5].ts + 1_000;
    assert_eq!(fixed_block(&expiring).0, KEY | VAL);
    let mut long_value = cells.clone();
    long_value[7].value.push(0);
    assert_eq!(fixed_block(&long_value).0, KEY);
    let mut long_key = cells.clone();
    long_key[9].key.push(0);
    assert_eq!(fixed_block(&long_key).0, VAL);
    // One cell: its key keeps a byte of its own past the prefix.
    let one = &cells[..1];
    let (flags, len) = fixed_block(one);
    assert_eq!(flags, KEY | VAL | TS | FIXED);
    assert_eq!(len, (1 + 40) + hash_slots(1) + 15 + 2 + 6 + 11 + 5);
    // Formats 7 and before never fix entries.
    let stored = build_in(Layout::Held, &cells, 16, Compression::None);
    assert_eq!(stored[stored.len() - 6], KEY | VAL);
}

/// On the YCSB runner's cells a fixed entry is three bytes shorter than format 7's (its
/// head byte and two-byte start), and its timestamp delta (ten seconds of microseconds)
/// takes three bytes where a varint takes mostly four.
#[test]
fn ycsb_cells_take_less_fixed() {
    let cells = ycsb_cells(4000, 100, false);
    let (held, fixed) = (bytes_a_cell(Layout::Held, &cells), bytes_a_cell(Layout::Fixed, &cells));
    // Measured: 114.47 against 118.31.
    assert!(fixed < held - 3.5 && fixed > held - 4.2, "{fixed:.2} against {held:.2}");
    let mut bulk = cells;
    bulk.iter_mut().for_each(|c| c.ts = 7);
    let (held, fixed) = (bytes_a_cell(Layout::Held, &bulk), bytes_a_cell(Layout::Fixed, &bulk));
    assert!(fixed < held - 2.9 && fixed > held - 3.5, "{fixed:.2} against {held:.2}");
}

#[test]
fn fixed_trailers_are_checked() {
    let cells = ycsb_cells(10, 20, false);
    let payload = payload_of(&cells);
    let len = payload.len();
    // From the end: held, interval, n, base_ts (8), val_len (4), key_len (2), tsw,
    // plen, then the prefix.
    let (tsw, plen) = (len - 18, len - 19);
    assert_eq!((payload[tsw], payload[plen]), (3, 7));
    let with = |at: usize, v: u8| {
        let mut bad = payload.clone();
        bad[at] = v;
        bad
    };
    let why = refused(&with(tsw, 9)).unwrap();
    assert_eq!(why, "fixed timestamp width 9 with held fields 0x0b");
    let why = refused(&with(tsw, 0)).unwrap();
    assert_eq!(why, "fixed timestamp width 0 with held fields 0x0b");
    let why = refused(&with(plen, 16)).unwrap();
    assert_eq!(why, "prefix of 16 bytes held for keys of 16");
    // A wider delta than the entries were cut for: they no longer tile the region.
    let why = refused(&with(tsw, 4)).unwrap();
    assert_eq!(why, "320 bytes of entries for 10 of 33 bytes");
    // FIXED without the value length held, or where format 7 reads the block.
    let why = refused(&with(len - 1, KEY | TS | FIXED)).unwrap();
    assert!(why.starts_with("fixed entries without held lengths"), "{why}");
    let why = DataBlock::parse(&payload, Layout::Held).unwrap_err().reason;
    assert_eq!(why, "unknown held fields 0x0b");
    // A prefix byte changed: the keys read differ, so the hash table is not theirs.
    let bad = with(plen - 1, 1);
    let blk = DataBlock::parse(&bad, Layout::Fixed).unwrap();
    let why = blk.verify(|_, _| ()).unwrap_err().reason;
    assert!(why.contains("hash slot"), "{why}");
    // A shorter prefix than the keys share (each entry one byte longer for it): it
    // reads the same cells, but is not what the builder makes, and verify says so.
    let w = 16 - 7 + 3 + 20;
    let mut short: Vec<u8> = payload[..10 * w]
        .chunks(w)
        .flat_map(|e| [&[0u8][..], e].concat())
        .collect();
    short.extend_from_slice(&payload[10 * w..plen - 7]);
    short.extend_from_slice(&[0; 6]);
    short.push(6);
    short.extend_from_slice(&payload[tsw..]);
    let blk = DataBlock::parse(&short, Layout::Fixed).unwrap();
    let mut seen = Vec::new();
    let why = blk.verify(|k, c| seen.push(owned(k, c))).unwrap_err().reason;
    assert!(why.starts_with("holds Held"), "{why}");
    assert_eq!(seen, cells);
}
