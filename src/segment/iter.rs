//! Range scans over a segment: seek with the index, then walk the data file in order.
//! Mapped data is decoded in place; standard data is read into a buffer owned by the
//! iterator, in chunks that grow from 4 KiB to 64 KiB as the scan goes on.

use std::ops::{Bound, Deref, RangeBounds};

use super::reader::{SegmentReader, Source};
use crate::error::{Error, Result};
use crate::format::record::{self, RecordRef, MAX_HEADER_LEN};
use crate::format::Malformed;

/// Standard-mode read-ahead: the first read of a scan is `FIRST_CHUNK` bytes (a short scan
/// should not pay for 64 KiB), each later one twice the last, up to `CHUNK`.
const FIRST_CHUNK: usize = 4 * 1024;
const CHUNK: usize = 64 * 1024;

/// An owned cell.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// Key.
    pub key: Vec<u8>,
    /// Value (empty for tombstones).
    pub value: Vec<u8>,
    /// Write timestamp, microseconds.
    pub ts: u64,
    /// Deletion marker.
    pub tombstone: bool,
}

/// Iterator over the cells of one segment in key order. Generic over how it holds the
/// reader: `&SegmentReader`, `Arc<SegmentReader>`, or a lifecycle handle that keeps the
/// segment (and so its mappings) alive while the iterator lives.
pub struct SegmentIter<R: Deref<Target = SegmentReader>> {
    reader: R,
    pos: u64,
    end_pos: u64,
    skip_equal: Option<Vec<u8>>,
    end: Bound<Vec<u8>>,
    buf: Vec<u8>,
    buf_start: u64,
    chunk: usize,
    done: bool,
}

impl SegmentReader {
    /// Cells with keys in `range`, in key order.
    pub fn scan<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
    ) -> Result<SegmentIter<&SegmentReader>> {
        SegmentIter::new(self, range)
    }

    /// Every cell, in key order.
    pub fn iter(&self) -> Result<SegmentIter<&SegmentReader>> {
        SegmentIter::new::<&[u8]>(self, ..)
    }
}

fn owned(b: Bound<&impl AsRef<[u8]>>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl<R: Deref<Target = SegmentReader>> SegmentIter<R> {
    /// Cells of `reader` with keys in `range`.
    pub fn new<K: AsRef<[u8]>>(reader: R, range: impl RangeBounds<K>) -> Result<Self> {
        let start = owned(range.start_bound());
        let end = owned(range.end_bound());
        let (pos, skip_equal) = match &start {
            Bound::Unbounded => (0, None),
            Bound::Included(k) => (reader.seek(k)?, None),
            Bound::Excluded(k) => (reader.seek(k)?, Some(k.clone())),
        };
        let end_pos = reader.data_body_len();
        Ok(SegmentIter {
            reader,
            pos,
            end_pos,
            skip_equal,
            end,
            buf: Vec::new(),
            buf_start: 0,
            chunk: FIRST_CHUNK,
            done: false,
        })
    }

    /// Make `buf` hold `[pos, pos + need)`, reading at least a chunk.
    fn fill(&mut self, need: usize) -> Result<()> {
        let have_from = self.pos.checked_sub(self.buf_start);
        if let Some(skip) = have_from {
            if skip as usize + need <= self.buf.len() {
                return Ok(());
            }
        }
        let Source::Standard(p) = &self.reader.data else {
            return Ok(());
        };
        let want = need
            .max(self.chunk)
            .min((self.end_pos - self.pos) as usize)
            .max(need);
        self.chunk = (self.chunk * 2).min(CHUNK);
        self.buf.resize(want, 0);
        p.read_at(&mut self.buf, self.pos)?;
        self.buf_start = self.pos;
        Ok(())
    }

    /// The next cell, handed to `f` borrowed from the map or from the iterator's buffer:
    /// the allocation-free form of [`Iterator::next`], as [`SegmentReader::get_with`] is
    /// of `get`. `None` at the end; after an error the iterator is done.
    pub fn next_with<T>(&mut self, f: impl FnOnce(RecordRef<'_>) -> T) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        match self.next_record(f) {
            Ok(Some(t)) => Some(Ok(t)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn next_record<T>(&mut self, f: impl FnOnce(RecordRef<'_>) -> T) -> Result<Option<T>> {
        loop {
            if self.pos >= self.end_pos {
                return Ok(None);
            }
            let remaining = (self.end_pos - self.pos) as usize;
            let pos = self.pos;
            let (r, used) = match &self.reader.data {
                Source::Mapped(m) => {
                    let s = m
                        .as_slice()
                        .get(pos as usize..self.end_pos as usize)
                        .ok_or_else(|| {
                            Error::corrupt(m.path(), pos, "scan position past the data")
                        })?;
                    record::decode(s).map_err(|e| e.at(pos).into_error(m.path()))?
                }
                Source::Standard(_) => {
                    let corrupt =
                        |this: &Self, e: Malformed| e.at(pos).into_error(this.reader.data.path());
                    self.fill(MAX_HEADER_LEN.min(remaining))?;
                    let at = (pos - self.buf_start) as usize;
                    let total = record::total_len(&self.buf[at..]).map_err(|e| corrupt(self, e))?;
                    if total > remaining {
                        return Err(Error::corrupt(
                            self.reader.data.path(),
                            pos,
                            format!("record of {total} bytes passes the end of the data"),
                        ));
                    }
                    self.fill(total)?;
                    let at = (pos - self.buf_start) as usize;
                    record::decode(&self.buf[at..at + total]).map_err(|e| corrupt(self, e))?
                }
            };
            self.pos += used as u64;
            if let Some(k) = self.skip_equal.take() {
                if r.key == k.as_slice() {
                    continue;
                }
            }
            let past_end = match &self.end {
                Bound::Unbounded => false,
                Bound::Included(e) => r.key > e.as_slice(),
                Bound::Excluded(e) => r.key >= e.as_slice(),
            };
            if past_end {
                self.pos = self.end_pos;
                return Ok(None);
            }
            return Ok(Some(f(r)));
        }
    }
}

impl<R: Deref<Target = SegmentReader>> Iterator for SegmentIter<R> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_with(|r| Entry::from(r))
    }
}
