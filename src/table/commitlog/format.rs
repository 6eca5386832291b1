//! Byte format of commit log files. Pure: encodes into and decodes from byte slices,
//! never touches files, and every decoder is total (a value or a [`Malformed`], never a
//! panic).
//!
//! ```text
//! file   = header record*
//! header = magic "SGCLOG\0\x01" (8) | first_seq u64 LE | crc u32 LE of the 16 bytes before
//!          (the multi-table body below came later within version 1: segstore builds
//!          from before it read a log holding one as torn at that record, so a store
//!          whose log holds a batch across tables must not be opened by them)
//! record = len u32 LE | crc u32 LE | body (len bytes)
//!          crc = crc32c(len bytes ++ body), so a damaged length is detected too
//! body   = seq u64 LE | part                                      (one table)
//!        | seq u64 LE | 0 (varint) | parts varint (>= 2) | part * parts  (a batch
//!          across tables: table names are never empty, so the 0 marks it)
//! part   = table (varint len + bytes) | count varint (>= 1) | cell * count
//! cell   = flags u8 (bit 0 tombstone, other bits zero) | ts u64 LE
//!          | key_len varint (1..=MAX_KEY_LEN) | val_len varint (0 for tombstones)
//!          | key | value
//! ```
//!
//! `first_seq` is the sequence number the file's first record carries (or would carry,
//! for an empty file); records in a file carry consecutive sequence numbers.

use crate::format::record::{RecordRef, TOMBSTONE};
use crate::format::{checksum, read_u32, read_u64, varint, Malformed, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::segment::{validate_name, Entry};

/// The first 8 bytes of every commit log file.
pub const FILE_MAGIC: [u8; 8] = *b"SGCLOG\0\x01";
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
}

/// The file header for a file whose first record will carry `first_seq`.
pub fn encode_file_header(first_seq: u64) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&FILE_MAGIC);
    h[8..16].copy_from_slice(&first_seq.to_le_bytes());
    let crc = checksum(&h[..16]);
    h[16..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decode a file header: the file's `first_seq`.
pub fn decode_file_header(b: &[u8]) -> Result<u64, Malformed> {
    if b.len() < FILE_HEADER_LEN {
        return Err(Malformed::new(
            0,
            format!("file header truncated to {} bytes", b.len()),
        ));
    }
    if b[..8] != FILE_MAGIC {
        return Err(Malformed::new(0, "not a commit log file (bad magic)"));
    }
    if read_u32(b, 16) != Some(checksum(&b[..16])) {
        return Err(Malformed::new(16, "file header checksum mismatch"));
    }
    Ok(read_u64(b, 8).unwrap_or(0))
}

/// A record encoded outside the log's lock, waiting for its sequence number.
///
/// The checksum of everything after the sequence number is computed at encode time, so
/// sealing under the lock costs a `crc32c_combine`, not a pass over the cells.
#[derive(Debug)]
pub struct PreparedRecord {
    frame: Vec<u8>,
    tail_crc: u32,
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
        let size: usize = parts
            .iter()
            .map(|(t, cells)| {
                10 + t.len()
                    + 10
                    + cells
                        .iter()
                        .map(|c| 29 + c.key.len() + c.value.len())
                        .sum::<usize>()
            })
            .sum();
        let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + 8 + 20 + size);
        frame.extend_from_slice(&[0u8; FRAME_HEADER_LEN + 8]);
        if parts.len() != 1 {
            varint::put(&mut frame, 0);
            varint::put(&mut frame, parts.len() as u64);
        }
        for (table, cells) in parts {
            varint::put(&mut frame, table.len() as u64);
            frame.extend_from_slice(table.as_bytes());
            varint::put(&mut frame, cells.len() as u64);
            for c in *cells {
                frame.push(if c.tombstone { TOMBSTONE } else { 0 });
                frame.extend_from_slice(&c.ts.to_le_bytes());
                varint::put(&mut frame, c.key.len() as u64);
                varint::put(&mut frame, c.value.len() as u64);
                frame.extend_from_slice(c.key);
                frame.extend_from_slice(c.value);
            }
        }
        let body_len = frame.len() - FRAME_HEADER_LEN;
        frame[..4].copy_from_slice(&(body_len.min(u32::MAX as usize) as u32).to_le_bytes());
        let tail_crc = checksum(&frame[FRAME_HEADER_LEN + 8..]);
        PreparedRecord { frame, tail_crc }
    }

    /// Length of the body.
    pub fn body_len(&self) -> usize {
        self.frame.len() - FRAME_HEADER_LEN
    }

    /// Length of the whole frame on disk.
    pub fn frame_len(&self) -> usize {
        self.frame.len()
    }

    /// Stamp the sequence number and the checksum; returns the bytes to write.
    pub fn seal(&mut self, seq: u64) -> &[u8] {
        self.frame[FRAME_HEADER_LEN..FRAME_HEADER_LEN + 8].copy_from_slice(&seq.to_le_bytes());
        let head = checksum_len_and_seq(&self.frame);
        let tail_len = self.frame.len() - FRAME_HEADER_LEN - 8;
        let crc = crc32c::crc32c_combine(head, self.tail_crc, tail_len);
        self.frame[4..8].copy_from_slice(&crc.to_le_bytes());
        &self.frame
    }
}

fn checksum_len_and_seq(frame: &[u8]) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&frame[..4]);
    b[4..].copy_from_slice(&frame[FRAME_HEADER_LEN..FRAME_HEADER_LEN + 8]);
    checksum(&b)
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
) -> Result<LogRecord, Malformed> {
    let want = read_u32(frame_header, 4).unwrap_or(0);
    let got = crc32c::crc32c_append(checksum(&frame_header[..4]), body);
    if want != got {
        return Err(Malformed::new(0, "record checksum mismatch"));
    }
    decode_body(body).map_err(|m| m.at(FRAME_HEADER_LEN as u64))
}

fn decode_body(b: &[u8]) -> Result<LogRecord, Malformed> {
    let seq = read_u64(b, 0).ok_or_else(|| Malformed::new(0, "truncated sequence number"))?;
    let mut p = 8;
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
    for _ in 0..count {
        let at = *p as u64;
        let flags = *b
            .get(*p)
            .ok_or_else(|| Malformed::new(at, "truncated cell"))?;
        if flags & !TOMBSTONE != 0 {
            return Err(Malformed::new(at, format!("unknown cell flags {flags:#x}")));
        }
        let ts = read_u64(b, *p + 1).ok_or_else(|| Malformed::new(at, "truncated cell"))?;
        *p += 9;
        let klen = take_varint(p, "key length")?;
        let vlen = take_varint(p, "value length")?;
        if klen == 0 || klen > MAX_KEY_LEN as u64 || vlen > MAX_VALUE_LEN as u64 {
            return Err(Malformed::new(at, "cell key or value length out of range"));
        }
        let tombstone = flags & TOMBSTONE != 0;
        if tombstone && vlen != 0 {
            return Err(Malformed::new(at, "tombstone carries a value"));
        }
        let (klen, vlen) = (klen as usize, vlen as usize);
        let kv = b
            .get(*p..*p + klen + vlen)
            .ok_or_else(|| Malformed::new(at, "cell passes the end of the record"))?;
        cells.push(Entry {
            key: kv[..klen].to_vec(),
            value: kv[klen..].to_vec(),
            ts,
            tombstone,
        });
        *p += klen + vlen;
    }
    Ok(LogPart { table, cells })
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
                key: k, value: if *t { &[] } else { v }, ts: *ts, tombstone: *t,
            }).collect();
            let mut p = PreparedRecord::encode(&table, &refs);
            let frame = p.seal(seq).to_vec();
            let (h, body) = split(&frame);
            prop_assert_eq!(body_len(&h).unwrap(), body.len());
            let rec = decode_record(&h, body).unwrap();
            prop_assert_eq!(rec.seq, seq);
            prop_assert_eq!(rec.parts.len(), 1);
            prop_assert_eq!(&rec.parts[0].table, &table);
            let back: Vec<RecordRef<'_>> = rec.parts[0].cells.iter().map(|e| RecordRef {
                key: &e.key, value: &e.value, ts: e.ts, tombstone: e.tombstone,
            }).collect();
            prop_assert_eq!(back, refs);
            // Sealing again with another number gives a valid record with that number.
            let frame2 = p.seal(seq ^ 1).to_vec();
            let (h2, body2) = split(&frame2);
            prop_assert_eq!(decode_record(&h2, body2).unwrap().seq, seq ^ 1);
        }

        #[test]
        fn batches_across_tables_round_trip(
            parts in proptest::collection::vec(cells_strategy(), 2..5),
            seq in 1u64..,
        ) {
            let names: Vec<String> = (0..parts.len()).map(|i| format!("t{i}")).collect();
            let refs: Vec<Vec<RecordRef<'_>>> = parts.iter().map(|cells| cells.iter().map(|(k, v, ts, t)| RecordRef {
                key: k, value: if *t { &[] } else { v }, ts: *ts, tombstone: *t,
            }).collect()).collect();
            let input: Vec<(&str, &[RecordRef<'_>])> =
                names.iter().zip(&refs).map(|(n, r)| (n.as_str(), &r[..])).collect();
            let frame = PreparedRecord::encode_parts(&input).seal(seq).to_vec();
            let (h, body) = split(&frame);
            let rec = decode_record(&h, body).unwrap();
            prop_assert_eq!(rec.seq, seq);
            prop_assert_eq!(rec.parts.len(), input.len());
            for (part, (name, cells)) in rec.parts.iter().zip(&input) {
                prop_assert_eq!(&part.table, name);
                let back: Vec<RecordRef<'_>> = part.cells.iter().map(|e| RecordRef {
                    key: &e.key, value: &e.value, ts: e.ts, tombstone: e.tombstone,
                }).collect();
                prop_assert_eq!(&back[..], *cells);
            }
        }

        #[test]
        fn any_bit_flip_is_detected(bit in 0usize..8 * 64) {
            let cells = [RecordRef { key: b"key-1", value: b"value-1", ts: 7, tombstone: false },
                         RecordRef { key: b"key-2", value: b"", ts: 8, tombstone: true }];
            let mut frame = PreparedRecord::encode("users", &cells).seal(42).to_vec();
            let bit = bit % (frame.len() * 8);
            frame[bit / 8] ^= 1 << (bit % 8);
            let (h, body) = split(&frame);
            let ok = match body_len(&h) {
                Ok(n) if n == body.len() => decode_record(&h, body).is_ok(),
                _ => false,
            };
            prop_assert!(!ok, "flip of bit {} undetected", bit);
        }

        #[test]
        fn decoding_garbage_never_panics(h: [u8; 8], body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = body_len(&h);
            let _ = decode_record(&h, &body);
            let _ = decode_body(&body);
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
        }];
        let frame = PreparedRecord::encode_parts(&[("a", &c[..]), ("a", &c[..])])
            .seal(1)
            .to_vec();
        let (h, body) = split(&frame);
        let err = decode_record(&h, body).unwrap_err();
        assert!(err.reason.contains("twice"), "{err:?}");
    }

    #[test]
    fn file_header_round_trip_and_damage() {
        let h = encode_file_header(12345);
        assert_eq!(decode_file_header(&h).unwrap(), 12345);
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
        assert!(
            decode_file_header(&v3).is_err(),
            "an unknown version is refused"
        );
    }
}
