//! Point reads and seeks through the page index (`format::pages`), for segments whose
//! index file is not expected to stay in memory ([`PointLookup::Pages`]): the page
//! index names the data page that holds a key, and its records are walked in order.
//!
//! A walk compares keys from record headers without checking checksums. A hit then
//! reads its record through [`SegmentReader::read_record`], checked as any point read.
//! A miss, or a seek, is only trusted after a second walk that checks every record it
//! passes: damage to a key the walk compared could otherwise turn a hit into a miss,
//! or make a scan start past a record. Misses reach a segment only through its filter's
//! false positives (about 1% of lookups of absent keys), so the second walk is rare.

use super::*;
use crate::format::pages::PAGE;
use std::cmp::Ordering as Cmp;

/// Where a walk of records stopped, relative to the first byte it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// The record of the key: its offset and length.
    Found(u64, u64),
    /// No record of the key: the first record above it starts here (or the span ends).
    Above(u64),
    /// The record starting here needs `need` bytes from its start to be compared.
    More { at: u64, need: usize },
}

impl SegmentReader {
    /// The page index, when point reads search it.
    #[inline]
    pub(super) fn paged(&self) -> Option<&Summary> {
        self.meta.pages.as_ref().filter(|_| self.paged)
    }

    /// Where `key`'s record is, found through `pages` (`None`: not in the segment).
    pub(super) fn find_paged(&self, pages: &Summary, key: &[u8]) -> Result<Option<Located>> {
        let found = |w| match w {
            Walk::Found(off, len) => Some(Located {
                data_offset: off,
                record_len: len,
                index_at: None,
            }),
            _ => None,
        };
        match found(self.walk_pages(pages, key, false, Via::Cache)?) {
            Some(loc) => Ok(Some(loc)),
            None => Ok(found(self.walk_pages(pages, key, true, Via::Cache)?)),
        }
    }

    /// The data offset of the first record whose key is >= `key`, found through
    /// `pages` with every record passed checked. A scan's: read past the block cache
    /// (`block_cache` invariant 5).
    pub(super) fn seek_paged(&self, pages: &Summary, key: &[u8]) -> Result<u64> {
        match self.walk_pages(pages, key, true, Via::File)? {
            Walk::Found(off, _) | Walk::Above(off) => Ok(off),
            Walk::More { at, .. } => Ok(at), // never returned by `walk_pages`
        }
    }

    /// Walk the span of the page that would hold `key` (checking every record passed if
    /// `check`) to its record or the first above it. Reads a page at a time, through
    /// the block cache where data is read positionally and `via` says so.
    fn walk_pages(&self, pages: &Summary, key: &[u8], check: bool, via: Via) -> Result<Walk> {
        let Some(p) = pages.block_for(key) else {
            return Ok(Walk::Above(0));
        };
        let (start, span) = pages.block(p);
        let end = start + u64::from(span);
        let (mut pos, mut want) = (start, (PAGE - start % PAGE) as usize);
        loop {
            if pos >= end {
                return Ok(Walk::Above(end));
            }
            let len = want.min(usize::try_from(end - pos).unwrap_or(usize::MAX));
            let whole = pos + len as u64 == end;
            let w = self.data_bytes(pos, len, via, |b| Ok(walk(b, key, whole, check)))?;
            match w.map_err(|m| m.at(pos).into_error(self.data.path()))? {
                Walk::Found(at, n) => return Ok(Walk::Found(pos + at, n)),
                Walk::Above(at) => return Ok(Walk::Above(pos + at)),
                Walk::More { at, need } if at == 0 && need <= len => {
                    // Unreachable for sound bytes: `walk` asks for more than it had.
                    return Err(Error::corrupt(self.data.path(), pos, "record cut short"));
                }
                Walk::More { at, need } => {
                    pos += at;
                    want = need.max(PAGE as usize);
                }
            }
        }
    }
}

/// Walk the records at the start of `b` to the first whose key is >= `key`, checking
/// each record's checksum if `check`. `whole`: `b` runs to the end of the span, so a
/// record cut off by its end is damage, not a short read.
fn walk(b: &[u8], key: &[u8], whole: bool, check: bool) -> Result<Walk, Malformed> {
    let mut i = 0usize;
    while i < b.len() {
        let rest = &b[i..];
        let peeked = match record::peek_key(rest) {
            Ok(p) => p,
            Err(m) => return Err(m.at(i as u64)),
        };
        let Some((k, total)) = peeked.filter(|&(_, t)| !check || t <= rest.len()) else {
            let need = peeked.map_or(record::MAX_HEADER_LEN + MAX_KEY_LEN, |(_, t)| t);
            if whole {
                return Err(Malformed::new(i as u64, "record runs past its page's span"));
            }
            return Ok(Walk::More { at: i as u64, need });
        };
        if check {
            record::decode(&rest[..total]).map_err(|m| m.at(i as u64))?;
        }
        match k.cmp(key) {
            Cmp::Less => i += total,
            Cmp::Equal => return Ok(Walk::Found(i as u64, total as u64)),
            Cmp::Greater => return Ok(Walk::Above(i as u64)),
        }
    }
    match i.cmp(&b.len()) {
        Cmp::Equal if whole => Ok(Walk::Above(i as u64)),
        Cmp::Greater if whole => Err(Malformed::new(
            b.len() as u64,
            "a record runs past its page's span",
        )),
        _ => Ok(Walk::More {
            at: i as u64,
            need: 0,
        }),
    }
}
