//! The page index (format version 3, in the meta after the filter): locates records
//! without the index file.
//!
//! ```text
//! page_count   varint
//! per entry:   first_key (varint len + bytes), offset delta varint
//! ```
//!
//! One entry for every [`PAGE`]-byte page of the data file that a record starts in,
//! giving the key and data offset of the first record starting in it. Offsets are
//! stored as the difference from the previous entry's (the first from 0, so it is 0):
//! they strictly ascend and lie inside the data body, keys strictly ascend, and the
//! first key is the segment's `min_key`. An entry's *span* runs to the next entry's
//! offset (the last entry's to the end of the data body). There are entries exactly
//! when there are records.
//!
//! A point read that finds the last entry whose key is at or below its key walks the
//! records of that entry's span in order, comparing keys: one page of the data file,
//! or two where the record it wants crosses into the next. With about 30 records of
//! 130 bytes a page, the index is about 1% of the data (the dense index file is a
//! quarter of it), so it stays in memory where the data does not: Cassandra's
//! partition index summary and RocksDB's block index play this part. A reader only
//! needs the entries to be record starts in order; that each is the first record of
//! its page (the size of a read) is checked by `SegmentReader::verify`.

use super::meta::{put_bytes, Cursor, Summary};
use super::{varint, Malformed};

/// The page size of the page index: the data block cache's chunk and the usual memory
/// page, so reading a page is one cache entry, one `pread` or one fault.
pub const PAGE: u64 = 4096;

/// Collects the page index while a segment's records are written in order.
#[derive(Debug, Default)]
pub struct PagesBuilder {
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    offsets: Vec<u64>,
}

impl PagesBuilder {
    /// A record with `key` starts at data offset `off` (records in order).
    #[inline]
    pub fn record(&mut self, key: &[u8], off: u64) {
        if self.offsets.last().is_some_and(|&l| l / PAGE == off / PAGE) {
            return;
        }
        self.keys.extend_from_slice(key);
        self.key_ends.push(self.keys.len());
        self.offsets.push(off);
    }

    /// The key of the last entry (empty before the first).
    fn last_key(&self) -> &[u8] {
        let n = self.key_ends.len();
        let start = if n < 2 { 0 } else { self.key_ends[n - 2] };
        &self.keys[start..self.key_ends.last().copied().unwrap_or(0)]
    }

    /// The page index of a data body of `body_len` bytes.
    pub fn finish(self, body_len: u64) -> Summary {
        let mut pages = Summary::default();
        let mut start = 0;
        for (i, (&end, &off)) in self.key_ends.iter().zip(&self.offsets).enumerate() {
            let next = self.offsets.get(i + 1).copied().unwrap_or(body_len);
            let span = u32::try_from(next - off).unwrap_or(u32::MAX);
            pages.push(&self.keys[start..end], off, span);
            start = end;
        }
        pages.build_radix();
        pages
    }
}

/// Append the page index to a meta body.
pub(super) fn encode(pages: &Summary, out: &mut Vec<u8>) {
    varint::put(out, pages.len() as u64);
    let mut prev = 0;
    for i in 0..pages.len() {
        put_bytes(out, pages.first_key(i));
        let off = pages.block(i).0;
        varint::put(out, off - prev);
        prev = off;
    }
}

/// Read the page index at `c`, checking it against the segment's record count, data
/// body length and smallest key; each entry's span is computed from the next entry's
/// offset or the end of the data body.
pub(super) fn decode(
    c: &mut Cursor<'_>,
    entry_count: u64,
    body_len: u64,
    min_key: &[u8],
) -> Result<Summary, Malformed> {
    let at = c.pos as u64;
    let n = c.varint("page count")?;
    if n > entry_count || n > body_len.div_ceil(PAGE) || (n == 0) != (entry_count == 0) {
        return Err(Malformed::new(
            at,
            format!("page count {n} implausible for {entry_count} records in {body_len} bytes"),
        ));
    }
    let mut b = PagesBuilder::default();
    for i in 0..n as usize {
        let at = c.pos as u64;
        let key = c.bytes("page key")?;
        let delta = c.varint("page offset")?;
        let prev = b.offsets.last().copied();
        let off = prev.unwrap_or(0).saturating_add(delta);
        let bad = match prev {
            None => (delta != 0 || key != min_key).then_some("does not start at the first record"),
            Some(_) if delta == 0 || off >= body_len => {
                Some("does not lie after the previous one inside the data")
            }
            Some(_) if b.last_key() >= key => Some("has a key out of order"),
            Some(_) => None,
        };
        if let Some(what) = bad {
            return Err(Malformed::new(at, format!("page index entry {i} {what}")));
        }
        b.keys.extend_from_slice(key);
        b.key_ends.push(b.keys.len());
        b.offsets.push(off);
    }
    if let Some(i) = b
        .offsets
        .iter()
        .zip(b.offsets.iter().skip(1).chain([&body_len]))
        .position(|(a, z)| z - a > u64::from(u32::MAX))
    {
        return Err(Malformed::new(at, format!("page index entry {i} spans over 4 GiB")));
    }
    Ok(b.finish(body_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(entries: &[(&[u8], u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        varint::put(&mut out, entries.len() as u64);
        let mut prev = 0;
        for (k, off) in entries {
            put_bytes(&mut out, k);
            varint::put(&mut out, off - prev);
            prev = *off;
        }
        out
    }

    fn decoded(b: &[u8], count: u64, body: u64) -> Result<Summary, Malformed> {
        let mut c = Cursor { b, pos: 0 };
        let s = decode(&mut c, count, body, b"a")?;
        assert_eq!(c.pos, b.len(), "whole block read");
        Ok(s)
    }

    #[test]
    fn one_entry_per_page_a_record_starts_in() {
        let mut b = PagesBuilder::default();
        // Records at 0, 1000, 4000 (page 0), 5000 (page 1), 13000 (page 3).
        for (k, off) in [(&b"a"[..], 0), (b"b", 1000), (b"c", 4000), (b"d", 5000), (b"e", 13000)]
        {
            b.record(k, off);
        }
        let p = b.finish(13100);
        assert_eq!(p.len(), 3);
        assert_eq!(
            (0..3).map(|i| (p.first_key(i), p.block(i))).collect::<Vec<_>>(),
            [
                (&b"a"[..], (0, 5000)),
                (&b"d"[..], (5000, 8000)),
                (&b"e"[..], (13000, 100))
            ]
        );
        let mut out = Vec::new();
        encode(&p, &mut out);
        assert_eq!(decoded(&out, 5, 13100).unwrap(), p);
        assert_eq!(p.block_for(b"c"), Some(0));
        assert_eq!(p.block_for(b"dz"), Some(1));
        assert_eq!(p.block_for(b"0"), None);
    }

    #[test]
    fn refuses_what_no_writer_makes() {
        let cases: [(&str, Vec<u8>, u64, u64); 7] = [
            ("first offset", encoded(&[(b"a", 5)]), 1, 100),
            ("first key", encoded(&[(b"b", 0)]), 1, 100),
            ("key order", encoded(&[(b"a", 0), (b"a", 4096)]), 2, 9000),
            ("same offset", encoded(&[(b"a", 0), (b"b", 0)]), 2, 9000),
            ("past the data", encoded(&[(b"a", 0), (b"b", 9000)]), 2, 9000),
            ("no entries for records", encoded(&[]), 1, 100),
            ("more entries than pages", encoded(&[(b"a", 0), (b"b", 50)]), 2, 100),
        ];
        for (what, b, count, body) in cases {
            assert!(decoded(&b, count, body).is_err(), "{what}");
        }
        let mut truncated = encoded(&[(b"a", 0), (b"b", 4096)]);
        truncated.pop();
        assert!(decoded(&truncated, 2, 9000).is_err());
        assert!(decoded(&encoded(&[]), 0, 0).unwrap().is_empty());
    }
}
