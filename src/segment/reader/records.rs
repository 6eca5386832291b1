//! Reading one record the index points at, checked against its entry: point reads and
//! scans ([`SegmentReader::read_record`]), and `verify`'s sequential pass, which reads a
//! positional data file a window at a time instead of once per record
//! ([`SegmentReader::read_record_windowed`]).

use super::*;

/// Bytes a windowed read asks for at once (more for a longer record).
const WINDOW: usize = 1 << 20;

/// The data bytes `verify` read last: `buf` holds the file's bytes from `start`.
#[derive(Default)]
pub(super) struct DataWindow {
    start: u64,
    buf: Vec<u8>,
}

impl SegmentReader {
    /// Read and check the record an index entry points at (its checksum too if
    /// `check_crc`); if `expect` is given, its key must match. A sound record (checksum
    /// correct) that disagrees with its entry is reported against the index file, at the
    /// entry: the index holds the bad bytes. `via` says whether positional data reads
    /// go through the block cache (point reads) or to the file (scans, `verify`).
    pub(in crate::segment) fn read_record<R>(
        &self,
        loc: Located,
        expect: Option<&[u8]>,
        check_crc: bool,
        via: Via,
        f: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<R> {
        self.check_bounds(loc)?;
        let decoded = self.data_bytes(loc.data_offset, loc.record_len as usize, via, |b| {
            self.check_record(loc, expect, check_crc, b, f)
        })?;
        decoded.map_err(|m| self.record_error(loc, m))
    }

    /// [`SegmentReader::read_record`] with the checksum checked, for records read in
    /// file order: a positional data file is read into `w` a window of about a MiB at a
    /// time (one system call per window, not per record); a map is read in place.
    pub(super) fn read_record_windowed<R>(
        &self,
        w: &mut DataWindow,
        loc: Located,
        expect: &[u8],
        f: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<R> {
        let Source::Standard(p) = &self.data else {
            return self.read_record(loc, Some(expect), true, Via::File, f);
        };
        self.check_bounds(loc)?;
        let (off, len) = (loc.data_offset, loc.record_len as usize);
        let held = off >= w.start && off + len as u64 <= w.start + w.buf.len() as u64;
        if !held {
            let rest = usize::try_from(self.data_body_len() - off).unwrap_or(usize::MAX);
            let n = len.max(WINDOW).min(rest);
            w.buf.resize(n, 0);
            p.read_at(&mut w.buf[..n], off)?;
            w.start = off;
        }
        let at = (off - w.start) as usize;
        let b = &w.buf[at..at + len];
        self.check_record(loc, Some(expect), true, b, f)?
            .map_err(|m| self.record_error(loc, m))
    }

    /// The entry's record lies inside the data body.
    fn check_bounds(&self, loc: Located) -> Result<()> {
        let (off, len) = (loc.data_offset, loc.record_len);
        let body = self.data_body_len();
        if off.checked_add(len).is_none_or(|e| e > body) || len > usize::MAX as u64 {
            let whose = match loc.index_at {
                Some(_) => format!("index entry points at {len} bytes at {off}"),
                None => format!("the record at {off} gives its length as {len} bytes"),
            };
            return Err(self.located_error(
                loc,
                format!("{whose}, past the end of the data ({body} bytes)"),
            ));
        }
        Ok(())
    }

    /// Decode the record `b` (the bytes `loc` points at) and check it against its entry;
    /// the inner error is a record that does not decode (see `record_error`).
    fn check_record<R>(
        &self,
        loc: Located,
        expect: Option<&[u8]>,
        check_crc: bool,
        b: &[u8],
        f: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Result<R, Malformed>> {
        let (off, len) = (loc.data_offset, loc.record_len);
        let (r, used) = match record::decode_with(b, check_crc) {
            Ok(x) => x,
            Err(m) => return Ok(Err(m)),
        };
        if !check_crc {
            // Unchecked, damage in the data can pass for a disagreement with the index
            // entry, or carry a timestamp this segment never wrote (which would let a
            // stale cell win a merge). Check the record whole before trusting or
            // blaming anyone: a bad checksum is the data file's fault.
            let stats = &self.meta.stats;
            if used as u64 != len
                || expect.is_some_and(|k| r.key != k)
                || !(stats.min_ts..=stats.max_ts).contains(&r.ts)
            {
                if let Err(m) = record::decode(b) {
                    return Ok(Err(m));
                }
            }
        }
        if used as u64 != len {
            return Err(self.located_error(
                loc,
                format!("index entry says the record at {off} is {len} bytes; it is {used}"),
            ));
        }
        if expect.is_some_and(|k| r.key != k) {
            return Err(self.located_error(
                loc,
                format!("the record at {off} has another key than its index entry"),
            ));
        }
        Ok(Ok(f(r)))
    }

    /// Run `f` over data bytes `[off, off+len)`: from the block cache when `via` says so
    /// and the data is read with positional reads and a cache is configured, else from
    /// the map or the file.
    #[inline]
    pub(super) fn data_bytes<R>(
        &self,
        off: u64,
        len: usize,
        via: Via,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        match (&self.data_cache, &self.data, via) {
            (Some(c), Source::Standard(p), Via::Cache) => c.with_bytes(p, off, len, f),
            _ => self.data.with_bytes(off, len, f),
        }
    }

    /// A record that disagrees with where it was located: the index entry's fault, at the
    /// entry; or, located by walking the data's own headers (the page index), the data
    /// file's, at the record.
    pub(super) fn located_error(&self, loc: Located, reason: String) -> Error {
        match loc.index_at {
            Some(at) => Error::corrupt(self.index.path(), at, reason),
            None => Error::corrupt(self.data.path(), loc.data_offset, reason),
        }
    }

    /// The record at `loc` does not decode in the length the index gives. If it decodes
    /// soundly in the length its own header gives, the index entry is wrong; else the
    /// data is.
    #[cold]
    fn record_error(&self, loc: Located, m: Malformed) -> Error {
        let (off, body) = (loc.data_offset, self.data_body_len());
        let head = (body - off).min(record::MAX_HEADER_LEN as u64) as usize;
        let own_len = self
            .data
            .with_bytes(off, head, |b| Ok(record::total_len(b).ok()))
            .ok()
            .flatten()
            .filter(|&t| t as u64 != loc.record_len && off + t as u64 <= body);
        if let Some(t) = own_len {
            let sound = self
                .data
                .with_bytes(off, t, |b| {
                    Ok(record::decode(b).is_ok_and(|(_, used)| used == t))
                })
                .unwrap_or(false);
            if sound {
                return self.located_error(
                    loc,
                    format!(
                        "index entry says the record at {off} is {} bytes; it is {t}",
                        loc.record_len
                    ),
                );
            }
        }
        m.at(off).into_error(self.data.path())
    }
}
