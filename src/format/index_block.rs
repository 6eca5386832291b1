//! Index blocks: sorted (key, data offset, record length) entries with an offset array
//! for binary search, and a checksum.
//!
//! ```text
//! entry*    key_len varint, key, data_offset varint, record_len varint
//! offsets   u32 LE per entry: its start within the block
//! n         u32 LE   number of entries (>= 1)
//! crc       u32 LE   crc32c of everything above in this block
//! ```

use std::cmp::Ordering;

use super::{checksum, cmp_keys, key_prefix, read_u32, varint, Malformed};

/// Builds one index block.
#[derive(Debug, Default)]
pub struct IndexBlockBuilder {
    buf: Vec<u8>,
    offsets: Vec<u32>,
}

impl IndexBlockBuilder {
    /// Add an entry; keys must arrive in ascending order (the writer checks).
    pub fn add(&mut self, key: &[u8], data_offset: u64, record_len: u64) {
        self.offsets.push(self.buf.len() as u32);
        varint::put(&mut self.buf, key.len() as u64);
        self.buf.extend_from_slice(key);
        varint::put(&mut self.buf, data_offset);
        varint::put(&mut self.buf, record_len);
    }

    /// Encoded size if finished now.
    pub fn size(&self) -> usize {
        self.buf.len() + 4 * self.offsets.len() + 8
    }

    /// Entries so far.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// No entries yet.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Append the finished block to `out` and reset.
    pub fn finish_into(&mut self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.buf);
        for o in &self.offsets {
            out.extend_from_slice(&o.to_le_bytes());
        }
        out.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        let crc = checksum(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        self.buf.clear();
        self.offsets.clear();
    }
}

/// One decoded index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry<'a> {
    /// Key.
    pub key: &'a [u8],
    /// Offset of the record in the data file.
    pub data_offset: u64,
    /// Encoded length of the record.
    pub record_len: u64,
}

/// A view of one index block. Offsets in errors are relative to the block.
#[derive(Debug, Clone, Copy)]
pub struct IndexBlock<'a> {
    entries: &'a [u8],
    offsets: &'a [u8],
    n: usize,
}

impl<'a> IndexBlock<'a> {
    /// Check the block's checksum.
    pub fn verify(b: &[u8]) -> Result<(), Malformed> {
        if b.len() < 8 {
            return Err(Malformed::new(0, "index block shorter than its trailer"));
        }
        let body = b.len() - 4;
        if read_u32(b, body) != Some(checksum(&b[..body])) {
            return Err(Malformed::new(body as u64, "index block checksum mismatch"));
        }
        Ok(())
    }

    /// Parse the block's trailer (does not check the checksum: see [`Self::verify`]).
    pub fn parse(b: &'a [u8]) -> Result<Self, Malformed> {
        if b.len() < 8 {
            return Err(Malformed::new(0, "index block shorter than its trailer"));
        }
        let n = read_u32(b, b.len() - 8).unwrap_or(0) as usize;
        let off_bytes = n
            .checked_mul(4)
            .filter(|&x| x <= b.len() - 8)
            .ok_or_else(|| Malformed::new((b.len() - 8) as u64, "entry count exceeds block"))?;
        if n == 0 {
            return Err(Malformed::new((b.len() - 8) as u64, "empty index block"));
        }
        let entries_end = b.len() - 8 - off_bytes;
        Ok(IndexBlock {
            entries: &b[..entries_end],
            offsets: &b[entries_end..b.len() - 8],
            n,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false for a parsed block (blocks hold at least one entry).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Where entry `i` starts, relative to the block (for error reports).
    pub fn entry_start(&self, i: usize) -> Result<usize, Malformed> {
        read_u32(self.offsets, i.saturating_mul(4))
            .map(|s| s as usize)
            .ok_or_else(|| Malformed::new(0, "entry index out of range"))
    }

    /// Entry `i` (< len).
    #[inline]
    pub fn entry(&self, i: usize) -> Result<IndexEntry<'a>, Malformed> {
        let start = read_u32(self.offsets, i.saturating_mul(4))
            .ok_or_else(|| Malformed::new(0, "entry index out of range"))?
            as usize;
        let bad = |off: usize, why: &str| Malformed::new(off as u64, why.to_string());
        let b = self.entries;
        let rest = b
            .get(start..)
            .ok_or_else(|| bad(start, "entry offset past entries"))?;
        let (klen, n1) = varint::get(rest).ok_or_else(|| bad(start, "bad key length"))?;
        let kstart = start + n1;
        let kend = kstart
            .checked_add(klen as usize)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| bad(start, "key runs past block"))?;
        let (data_offset, n2) =
            varint::get(&b[kend..]).ok_or_else(|| bad(kend, "bad data offset"))?;
        let (record_len, _) =
            varint::get(&b[kend + n2..]).ok_or_else(|| bad(kend + n2, "bad record length"))?;
        Ok(IndexEntry {
            key: &b[kstart..kend],
            data_offset,
            record_len,
        })
    }

    /// The key of entry `i` (< len), decoding nothing else.
    #[inline]
    pub fn key_at(&self, i: usize) -> Result<&'a [u8], Malformed> {
        let start = self.entry_start(i)?;
        let b = self.entries;
        let bad = |why: &str| Malformed::new(start as u64, why.to_string());
        let rest = b
            .get(start..)
            .ok_or_else(|| bad("entry offset past entries"))?;
        let (klen, n1) = varint::get(rest).ok_or_else(|| bad("bad key length"))?;
        usize::try_from(klen)
            .ok()
            .and_then(|k| rest.get(n1..n1.checked_add(k)?))
            .ok_or_else(|| bad("key runs past block"))
    }

    /// Index of the first entry whose key is >= `key` (len if none).
    #[inline]
    pub fn lower_bound(&self, key: &[u8]) -> Result<usize, Malformed> {
        let prefix = key_prefix(key);
        let (mut lo, mut hi) = (0usize, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match cmp_keys(key, prefix, self.key_at(mid)?) {
                Ordering::Greater => lo = mid + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// The entry for exactly `key`, if present, with its position in the block.
    #[inline]
    pub fn find_at(&self, key: &[u8]) -> Result<Option<(usize, IndexEntry<'a>)>, Malformed> {
        let i = self.lower_bound(key)?;
        if i < self.n {
            let e = self.entry(i)?;
            if e.key == key {
                return Ok(Some((i, e)));
            }
        }
        Ok(None)
    }

    /// The entry for exactly `key`, if present.
    #[inline]
    pub fn find(&self, key: &[u8]) -> Result<Option<IndexEntry<'a>>, Malformed> {
        Ok(self.find_at(key)?.map(|(_, e)| e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn build_and_search() {
        let mut bld = IndexBlockBuilder::default();
        let keys: Vec<Vec<u8>> = (0..50u32)
            .map(|i| format!("k{:04}", i * 2).into_bytes())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            bld.add(k, i as u64 * 100, 100);
        }
        let mut out = Vec::new();
        bld.finish_into(&mut out);
        IndexBlock::verify(&out).unwrap();
        let blk = IndexBlock::parse(&out).unwrap();
        assert_eq!(blk.len(), 50);
        assert_eq!(blk.find(b"k0010").unwrap().unwrap().data_offset, 500);
        assert_eq!(blk.find(b"k0011").unwrap(), None);
        assert_eq!(blk.lower_bound(b"k0011").unwrap(), 6);
        assert_eq!(blk.lower_bound(b"a").unwrap(), 0);
        assert_eq!(blk.lower_bound(b"z").unwrap(), 50);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200), key in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = IndexBlock::verify(&b);
            if let Ok(blk) = IndexBlock::parse(&b) {
                let _ = blk.find(&key);
                for i in 0..blk.len() { let _ = blk.entry(i); }
            }
        }
    }
}
