//! Byte format of commit log files. Pure: encodes into and decodes from byte slices,
//! never touches files, and every decoder is total (a value or a [`Malformed`], never a
//! panic).
//!
//! ```text
//! file   = header record*
//! header = magic "SGCLOG\0" version u8 (8) | first_seq u64 LE
//!          | crc u32 LE of the 16 bytes before
//! record = len u32 LE | crc u32 LE | body (len bytes)
//!          crc = crc32c(len bytes ++ body), so a damaged length is detected too
//! body   = parts seq u64 LE                             (version 2, written today)
//!        | seq u64 LE parts                              (version 1, read only)
//! parts  = part                                                    (one table)
//!        | 0 (varint) | count varint (>= 2) | part * count  (a batch across tables:
//!          table names are never empty, so the 0 marks it)
//! part   = table (varint len + bytes) | count varint (>= 1) | cell * count
//! cell   = flags u8 (bit 0 tombstone, bit 1 range, bit 2 open end, bit 3 expires;
//!          others zero)
//!          | ts u64 LE | expires u64 LE (only with bit 3, never 0)
//!          | key_len varint (1..=MAX_KEY_LEN) | val_len varint (0 for tombstones)
//!          | key | value
//! ```
//!
//! A cell with bit 1 set is a range tombstone (`Table::delete_range`): its key is the
//! range's start and its value the range's end, both at most `MAX_KEY_LEN + 1` bytes
//! (an inclusive end is stored as its successor); with bit 2 set the range has no end
//! and the value is empty. Bit 0 is clear on a range cell. A part lists its point cells
//! first, then its range tombstones (the order carries no meaning: a part's cells are
//! reconciled by timestamp). Builds before range deletes refuse such a record as
//! "unknown cell flags".
//!
//! A point cell with bit 3 set carries an expiry (TTL, issue 20; the segment record's
//! `expires`, `format::record`): a live cell's expiry, or the local deletion time of a
//! tombstone made from an expired cell (repair streams those). Bit 3 is clear on a range
//! cell. A cell without it is encoded exactly as before TTL; builds before TTL refuse a
//! record holding one as "unknown cell flags", which replay treats as a stop (module
//! docs of `replay.rs`): they never misread it.
//!
//! `first_seq` is the sequence number the file's first record carries (or would carry,
//! for an empty file); records in a file carry consecutive sequence numbers.
//!
//! Version 2 moved the sequence number from the front of the body to its end, so the
//! checksum is computed once, outside the log's lock, over everything but the number,
//! and sealing under the lock continues it over 8 bytes (version 1 needed a
//! `crc32c_combine`, about 60,000 instructions per record, under the lock). Version 1
//! files are still replayed (the multi-table body came late within version 1: segstore
//! builds from before it read a log holding one as torn at that record). A new log
//! always writes version 2 files (invariant 6 of the log: it never appends to an old
//! file), so a store written by this build cannot be opened by a build that reads only
//! version 1.

use crate::format::ranges::RangeTombstone;
use crate::format::record::{RecordRef, TOMBSTONE};
use crate::format::{checksum, read_u32, read_u64, varint, Malformed, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::segment::{validate_name, Entry};

/// The first 8 bytes of every commit log file this build writes (version 2).
pub const FILE_MAGIC: [u8; 8] = *b"SGCLOG\0\x02";
/// The first 8 bytes of a version 1 file (sequence number first in the body): replayed,
/// never written.
pub const FILE_MAGIC_V1: [u8; 8] = *b"SGCLOG\0\x01";
/// Bytes of the file header.
pub const FILE_HEADER_LEN: usize = 20;
/// Bytes of a record's frame header (len, crc).
pub const FRAME_HEADER_LEN: usize = 8;
/// Largest record body accepted (1 GiB).
pub const MAX_BODY_LEN: usize = 1 << 30;

/// One decoded record: a batch of cells for one table or several, applied atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Sequence number, unique and increasing across the whole log.
    pub seq: u64,
    /// The cells of each table, tables in the order they were given (each once).
    pub parts: Vec<LogPart>,
}

/// The cells of one table in a [`LogRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPart {
    /// The table the cells belong to.
    pub table: String,
    /// The cells, in the order they were given.
    pub cells: Vec<Entry>,
    /// The range tombstones, in the order they were given.
    pub ranges: Vec<RangeTombstone>,
}

/// Cell flag: a range tombstone (key = start, value = end).
const RANGE: u8 = 2;
/// Cell flag, with [`RANGE`]: the range has no end.
const OPEN_END: u8 = 4;
/// Cell flag, on a point cell: an expiry follows the timestamp.
const EXPIRES: u8 = 8;

/// One table's part of a record to encode: its point cells and range tombstones.
pub type PartRef<'a> = (&'a str, &'a [RecordRef<'a>], &'a [RangeTombstone]);

/// Where a record's body holds its sequence number: the file's format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Version 1: the number first (replayed, never written).
    SeqFirst,
    /// Version 2: the number last.
    SeqLast,
}

/// A decoded file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// The sequence number of the file's first record.
    pub first_seq: u64,
    /// How its records are laid out.
    pub layout: Layout,
}

/// The file header for a file whose first record will carry `first_seq`.
pub fn encode_file_header(first_seq: u64) -> [u8; FILE_HEADER_LEN] {
    encode_file_header_as(FILE_MAGIC, first_seq)
}

/// A file header with the given magic (tests write version 1 files with it).
pub fn encode_file_header_as(magic: [u8; 8], first_seq: u64) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&magic);
    h[8..16].copy_from_slice(&first_seq.to_le_bytes());
    let crc = checksum(&h[..16]);
    h[16..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decode a file header: the file's `first_seq` and record layout.
pub fn decode_file_header(b: &[u8]) -> Result<FileHeader, Malformed> {
    if b.len() < FILE_HEADER_LEN {
        return Err(Malformed::new(
            0,
            format!("file header truncated to {} bytes", b.len()),
        ));
    }
    let layout = if b[..8] == FILE_MAGIC {
        Layout::SeqLast
    } else if b[..8] == FILE_MAGIC_V1 {
        Layout::SeqFirst
    } else if b[..7] == FILE_MAGIC[..7] {
        return Err(Malformed::new(
            7,
            format!("commit log format version {} is not known", b[7]),
        ));
    } else {
        return Err(Malformed::new(0, "not a commit log file (bad magic)"));
    };
    if read_u32(b, 16) != Some(checksum(&b[..16])) {
        return Err(Malformed::new(16, "file header checksum mismatch"));
    }
    let first_seq = read_u64(b, 8).unwrap_or(0);
    Ok(FileHeader { first_seq, layout })
}

/// A record encoded outside the log's lock, waiting for its sequence number.
///
/// The checksum of the length and of everything before the sequence number (which ends
/// the body) is computed at encode time, so sealing under the lock continues it over
/// the number's 8 bytes: the record is checksummed once, not in parts to be combined.
#[derive(Debug)]
pub struct PreparedRecord {
    frame: Vec<u8>,
    /// crc32c of the length and the body up to the sequence number.
    partial_crc: u32,
}

impl PreparedRecord {
    /// Encode a record of `cells` for `table`. The caller has validated the table name
    /// and the cells; the body must not exceed [`MAX_BODY_LEN`] (checked by the caller
    /// with [`PreparedRecord::body_len`]).
    pub fn encode(table: &str, cells: &[RecordRef<'_>]) -> PreparedRecord {
        PreparedRecord::encode_parts(&[(table, cells)])
    }

    /// Encode a record of several tables' cells (one part per table, each table once,
    /// at least one part), checked by the caller as for [`PreparedRecord::encode`].
    pub fn encode_parts(parts: &[(&str, &[RecordRef<'_>])]) -> PreparedRecord {
        let parts: Vec<PartRef<'_>> = parts.iter().map(|(t, c)| (*t, *c, &[][..])).collect();
        PreparedRecord::encode_ranged(&parts)
    }

    /// Encode a record of several tables' cells and range tombstones (each table once,
    /// at least one part, none empty).
    pub fn encode_ranged(parts: &[PartRef<'_>]) -> PreparedRecord {
        let size: usize = parts
            .iter()
            .map(|(t, cells, ranges)| {
                10 + t.len()
                    + 10
                    + cells
                        .iter()
                        .map(|c| 37 + c.key.len() + c.value.len())
                        .sum::<usize>()
                    + ranges
                        .iter()
                        .map(|r| 29 + r.start.len() + r.end.as_ref().map_or(0, Vec::len))
                        .sum::<usize>()
            })
            .sum();
        let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + 20 + size + 8);
        frame.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
        encode_body_parts(&mut frame, parts);
        frame.extend_from_slice(&[0u8; 8]);
        let body_len = frame.len() - FRAME_HEADER_LEN;
        frame[..4].copy_from_slice(&(body_len.min(u32::MAX as usize) as u32).to_le_bytes());
        let before_seq = frame.len() - 8;
        let partial_crc =
            crc32c::crc32c_append(checksum(&frame[..4]), &frame[FRAME_HEADER_LEN..before_seq]);
        PreparedRecord { frame, partial_crc }
    }

    /// Length of the body.
    pub fn body_len(&self) -> usize {
        self.frame.len() - FRAME_HEADER_LEN
    }

    /// Length of the whole frame on disk.
    pub fn frame_len(&self) -> usize {
        self.frame.len()
    }

    /// Stamp the sequence number and the checksum; returns the bytes to write. Costs a
    /// checksum of 8 bytes whatever the record's size (it runs under the log's lock).
    pub fn seal(&mut self, seq: u64) -> &[u8] {
        let at = self.frame.len() - 8;
        let seq = seq.to_le_bytes();
        self.frame[at..].copy_from_slice(&seq);
        let crc = crc32c::crc32c_append(self.partial_crc, &seq);
        self.frame[4..8].copy_from_slice(&crc.to_le_bytes());
        &self.frame
    }
}

/// The parts of a body (everything but the sequence number), appended to `out`.
fn encode_body_parts(out: &mut Vec<u8>, parts: &[PartRef<'_>]) {
    if parts.len() != 1 {
        varint::put(out, 0);
        varint::put(out, parts.len() as u64);
    }
    let cell = |out: &mut Vec<u8>, flags: u8, ts: u64, expires: u64, key: &[u8], value: &[u8]| {
        out.push(flags);
        out.extend_from_slice(&ts.to_le_bytes());
        if flags & EXPIRES != 0 {
            out.extend_from_slice(&expires.to_le_bytes());
        }
        varint::put(out, key.len() as u64);
        varint::put(out, value.len() as u64);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    };
    for (table, cells, ranges) in parts {
        varint::put(out, table.len() as u64);
        out.extend_from_slice(table.as_bytes());
        varint::put(out, (cells.len() + ranges.len()) as u64);
        for c in *cells {
            let flags = (c.tombstone as u8) | if c.expires != 0 { EXPIRES } else { 0 };
            cell(out, flags, c.ts, c.expires, c.key, c.value);
        }
        for r in *ranges {
            let (flags, end) = match &r.end {
                Some(e) => (RANGE, &e[..]),
                None => (RANGE | OPEN_END, &[][..]),
            };
            cell(out, flags, r.ts, 0, &r.start, end);
        }
    }
}

/// A whole version 1 frame (sequence number first), as builds before version 2 wrote
/// it: for the tests that replay old files.
pub fn encode_v1_frame(seq: u64, parts: &[(&str, &[RecordRef<'_>])]) -> Vec<u8> {
    let mut frame = vec![0u8; FRAME_HEADER_LEN];
    frame.extend_from_slice(&seq.to_le_bytes());
    let parts: Vec<PartRef<'_>> = parts.iter().map(|(t, c)| (*t, *c, &[][..])).collect();
    encode_body_parts(&mut frame, &parts);
    let body_len = (frame.len() - FRAME_HEADER_LEN) as u32;
    frame[..4].copy_from_slice(&body_len.to_le_bytes());
    let crc = crc32c::crc32c_append(checksum(&frame[..4]), &frame[FRAME_HEADER_LEN..]);
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
    frame
}

/// From a frame header, the body length (checked against [`MAX_BODY_LEN`]).
pub fn body_len(frame_header: &[u8; FRAME_HEADER_LEN]) -> Result<usize, Malformed> {
    let len = u32::from_le_bytes([
        frame_header[0],
        frame_header[1],
        frame_header[2],
        frame_header[3],
    ]) as usize;
    if !(8..=MAX_BODY_LEN).contains(&len) {
        return Err(Malformed::new(
            0,
            format!("record length {len} out of range"),
        ));
    }
    Ok(len)
}

/// Check and decode a record given its frame header and body. Offsets in errors are
/// relative to the start of the frame.
pub fn decode_record(
    frame_header: &[u8; FRAME_HEADER_LEN],
    body: &[u8],
    layout: Layout,
) -> Result<LogRecord, Malformed> {
    let want = read_u32(frame_header, 4).unwrap_or(0);
    let got = crc32c::crc32c_append(checksum(&frame_header[..4]), body);
    if want != got {
        return Err(Malformed::new(0, "record checksum mismatch"));
    }
    decode_body(body, layout).map_err(|m| m.at(FRAME_HEADER_LEN as u64))
}

fn decode_body(body: &[u8], layout: Layout) -> Result<LogRecord, Malformed> {
    let truncated = || Malformed::new(0, "truncated sequence number");
    let (seq, b, mut p) = match layout {
        Layout::SeqFirst => (read_u64(body, 0).ok_or_else(truncated)?, body, 8),
        Layout::SeqLast => {
            let end = body.len().checked_sub(8).ok_or_else(truncated)?;
            (read_u64(body, end).ok_or_else(truncated)?, &body[..end], 0)
        }
    };
    let take_varint = |p: &mut usize, what: &str| {
        let (v, n) = b
            .get(*p..)
            .and_then(varint::get)
            .ok_or_else(|| Malformed::new(*p as u64, format!("truncated or bad {what}")))?;
        *p += n;
        Ok::<u64, Malformed>(v)
    };
    let mut parts = Vec::new();
    // A single table's part, or the 0 marker and a count of parts.
    let first = b.get(p..).and_then(varint::get);
    let count = match first {
        Some((0, n)) => {
            p += n;
            let count = take_varint(&mut p, "table count")?;
            if count < 2 || count > (b.len() as u64) / 13 {
                return Err(Malformed::new(
                    p as u64,
                    format!("table count {count} out of range"),
                ));
            }
            count
        }
        _ => 1,
    };
    for _ in 0..count {
        let part = decode_part(b, &mut p, &take_varint)?;
        if parts.iter().any(|q: &LogPart| q.table == part.table) {
            return Err(Malformed::new(
                p as u64,
                format!("table {} twice in one record", part.table),
            ));
        }
        parts.push(part);
    }
    if p != b.len() {
        return Err(Malformed::new(
            p as u64,
            "trailing bytes after the last cell",
        ));
    }
    Ok(LogRecord { seq, parts })
}

fn decode_part(
    b: &[u8],
    p: &mut usize,
    take_varint: &dyn Fn(&mut usize, &str) -> Result<u64, Malformed>,
) -> Result<LogPart, Malformed> {
    let tlen = take_varint(p, "table name length")? as usize;
    let table = b
        .get(*p..p.saturating_add(tlen))
        .and_then(|t| std::str::from_utf8(t).ok())
        .filter(|t| validate_name("table", t).is_ok())
        .ok_or_else(|| Malformed::new(*p as u64, "bad table name"))?
        .to_string();
    *p += tlen;
    let count = take_varint(p, "cell count")?;
    if count == 0 || count > (b.len() as u64) / 11 {
        return Err(Malformed::new(
            *p as u64,
            format!("cell count {count} out of range"),
        ));
    }
    let mut cells = Vec::with_capacity(count as usize);
    let mut ranges = Vec::new();
    for _ in 0..count {
        let at = *p as u64;
        let flags = *b
            .get(*p)
            .ok_or_else(|| Malformed::new(at, "truncated cell"))?;
        let range = flags & RANGE != 0;
        let known = if range {
            RANGE | OPEN_END
        } else {
            TOMBSTONE | EXPIRES
        };
        if flags & !known != 0 {
            return Err(Malformed::new(at, format!("unknown cell flags {flags:#x}")));
        }
        let ts = read_u64(b, *p + 1).ok_or_else(|| Malformed::new(at, "truncated cell"))?;
        *p += 9;
        let mut expires = 0;
        if flags & EXPIRES != 0 {
            expires = read_u64(b, *p).ok_or_else(|| Malformed::new(at, "truncated cell"))?;
            if expires == 0 {
                return Err(Malformed::new(at, "expiry flag with an expiry of 0"));
            }
            *p += 8;
        }
        let klen = take_varint(p, "key length")?;
        let vlen = take_varint(p, "value length")?;
        let (max_k, max_v) = match range {
            true => (MAX_KEY_LEN as u64 + 1, MAX_KEY_LEN as u64 + 1),
            false => (MAX_KEY_LEN as u64, MAX_VALUE_LEN as u64),
        };
        if klen == 0 || klen > max_k || vlen > max_v {
            return Err(Malformed::new(at, "cell key or value length out of range"));
        }
        let tombstone = flags & TOMBSTONE != 0;
        if (tombstone || flags & OPEN_END != 0) && vlen != 0 {
            return Err(Malformed::new(at, "tombstone carries a value"));
        }
        let (klen, vlen) = (klen as usize, vlen as usize);
        let kv = b
            .get(*p..*p + klen + vlen)
            .ok_or_else(|| Malformed::new(at, "cell passes the end of the record"))?;
        *p += klen + vlen;
        if range {
            let r = RangeTombstone {
                start: kv[..klen].to_vec(),
                end: (flags & OPEN_END == 0).then(|| kv[klen..].to_vec()),
                ts,
            };
            if r.is_empty() {
                return Err(Malformed::new(at, "empty range tombstone"));
            }
            ranges.push(r);
            continue;
        }
        cells.push(Entry {
            key: kv[..klen].to_vec(),
            value: kv[klen..].to_vec(),
            ts,
            tombstone,
            expires,
        });
    }
    Ok(LogPart {
        table,
        cells,
        ranges,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(frame: &[u8]) -> ([u8; FRAME_HEADER_LEN], &[u8]) {
        let h: [u8; FRAME_HEADER_LEN] = frame[..FRAME_HEADER_LEN].try_into().unwrap();
        (h, &frame[FRAME_HEADER_LEN..])
    }

    fn cells_strategy() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>, u64, bool)>> {
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 1..20),
                proptest::collection::vec(any::<u8>(), 0..40),
                any::<u64>(),
                any::<bool>(),
            ),
            1..6,
        )
    }

    proptest! {
        #[test]
        fn round_trip(cells in cells_strategy(), seq in 1u64.., table in "[a-z_]{1,12}") {
            let refs: Vec<RecordRef<'_>> = cells.iter().map(|(k, v, ts, t)| RecordRef {
                key: k, value: if *t { &[] } else { v }, ts: *ts, tombstone: *t, expires: *ts % 3,
            }).collect();
            let mut p = PreparedRecord::encode(&table, &refs);
            let frame = p.seal(seq).to_vec();
            let (h, body) = split(&frame);
            prop_assert_eq!(body_len(&h).unwrap(), body.len());
            let rec = decode_record(&h, body, Layout::SeqLast).unwrap();
            prop_assert_eq!(rec.seq, seq);
            prop_assert_eq!(rec.parts.len(), 1);
            prop_assert_eq!(&rec.parts[0].table, &table);
            let back: Vec<RecordRef<'_>> = rec.parts[0].cells.iter().map(|e| RecordRef {
                key: &e.key, value: &e.value, ts: e.ts, tombstone: e.tombstone, expires: e.expires,
            }).collect();
            prop_assert_eq!(back, refs);
            // Sealing again with another number gives a valid record with that number.
            let frame2 = p.seal(seq ^ 1).to_vec();
            let (h2, body2) = split(&frame2);
            prop_assert_eq!(decode_record(&h2, body2, Layout::SeqLast).unwrap().seq, seq ^ 1);
        }

        #[test]
        fn batches_across_tables_round_trip(
            parts in proptest::collection::vec(cells_strategy(), 2..5),
            seq in 1u64..,
        ) {
            let names: Vec<String> = (0..parts.len()).map(|i| format!("t{i}")).collect();
            let refs: Vec<Vec<RecordRef<'_>>> = parts.iter().map(|cells| cells.iter().map(|(k, v, ts, t)| RecordRef {
                key: k, value: if *t { &[] } else { v }, ts: *ts, tombstone: *t, expires: *ts % 3,
            }).collect()).collect();
            let input: Vec<(&str, &[RecordRef<'_>])> =
                names.iter().zip(&refs).map(|(n, r)| (n.as_str(), &r[..])).collect();
            let frame = PreparedRecord::encode_parts(&input).seal(seq).to_vec();
            let (h, body) = split(&frame);
            let rec = decode_record(&h, body, Layout::SeqLast).unwrap();
            prop_assert_eq!(rec.seq, seq);
            prop_assert_eq!(rec.parts.len(), input.len());
            for (part, (name, cells)) in rec.parts.iter().zip(&input) {
                prop_assert_eq!(&part.table, name);
                let back: Vec<RecordRef<'_>> = part.cells.iter().map(|e| RecordRef {
                    key: &e.key, value: &e.value, ts: e.ts, tombstone: e.tombstone, expires: e.expires,
                }).collect();
                prop_assert_eq!(&back[..], *cells);
            }
        }

        #[test]
        fn any_bit_flip_is_detected(bit in 0usize..8 * 64) {
            let cells = [RecordRef { key: b"key-1", value: b"value-1", ts: 7, tombstone: false, expires: 0 },
                         RecordRef { key: b"key-2", value: b"", ts: 8, tombstone: true, expires: 0 },
                         RecordRef { key: b"key-3", value: b"v", ts: 9, tombstone: false, expires: 99 }];
            let mut frame = PreparedRecord::encode("users", &cells).seal(42).to_vec();
            let bit = bit % (frame.len() * 8);
            frame[bit / 8] ^= 1 << (bit % 8);
            let (h, body) = split(&frame);
            let ok = match body_len(&h) {
                Ok(n) if n == body.len() => decode_record(&h, body, Layout::SeqLast).is_ok(),
                _ => false,
            };
            prop_assert!(!ok, "flip of bit {} undetected", bit);
        }

        #[test]
        fn decoding_garbage_never_panics(h: [u8; 8], body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = body_len(&h);
            for layout in [Layout::SeqFirst, Layout::SeqLast] {
                let _ = decode_record(&h, &body, layout);
                let _ = decode_body(&body, layout);
            }
            let _ = decode_file_header(&body);
        }
    }

    #[test]
    fn a_table_twice_in_one_record_is_refused() {
        let c = [RecordRef {
            key: b"k",
            value: b"v",
            ts: 1,
            tombstone: false,
            expires: 0,
        }];
        let frame = PreparedRecord::encode_parts(&[("a", &c[..]), ("a", &c[..])])
            .seal(1)
            .to_vec();
        let (h, body) = split(&frame);
        let err = decode_record(&h, body, Layout::SeqLast).unwrap_err();
        assert!(err.reason.contains("twice"), "{err:?}");
    }

    #[test]
    fn file_header_round_trip_and_damage() {
        let h = encode_file_header(12345);
        let want = FileHeader {
            first_seq: 12345,
            layout: Layout::SeqLast,
        };
        assert_eq!(decode_file_header(&h).unwrap(), want);
        let v1 = encode_file_header_as(FILE_MAGIC_V1, 12345);
        assert_eq!(decode_file_header(&v1).unwrap().layout, Layout::SeqFirst);
        assert!(decode_file_header(&h[..19]).is_err());
        let mut bad = h;
        bad[9] ^= 4;
        assert!(decode_file_header(&bad).is_err());
        let mut bad = h;
        bad[0] = b'X';
        assert!(decode_file_header(&bad).is_err());
        // An unknown version (its checksum recomputed) is refused.
        let mut v3 = h;
        v3[7] = 3;
        let crc = checksum(&v3[..16]);
        v3[16..].copy_from_slice(&crc.to_le_bytes());
        let err = decode_file_header(&v3).unwrap_err();
        assert!(err.reason.contains("version 3"), "{err:?}");
    }

    #[test]
    fn version_1_records_still_decode() {
        let c = [
            RecordRef {
                key: b"k1",
                value: b"v1",
                ts: 5,
                tombstone: false,
                expires: 0,
            },
            RecordRef {
                key: b"k2",
                value: b"",
                ts: 6,
                tombstone: true,
                expires: 0,
            },
        ];
        for parts in [&[("a", &c[..])][..], &[("a", &c[..]), ("b", &c[..1])][..]] {
            let old = encode_v1_frame(77, parts);
            let (h, body) = split(&old);
            let rec = decode_record(&h, body, Layout::SeqFirst).unwrap();
            let new = PreparedRecord::encode_parts(parts).seal(77).to_vec();
            let (h2, body2) = split(&new);
            assert_eq!(rec, decode_record(&h2, body2, Layout::SeqLast).unwrap());
            assert_eq!(rec.seq, 77);
            assert_eq!(rec.parts.len(), parts.len());
        }
    }
}
