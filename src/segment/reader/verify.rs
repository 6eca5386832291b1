//! [`SegmentReader::verify`]: every index block and every record read and checked, and
//! the meta's statistics and filter against the cells (Cassandra's `sstableverify`).

use super::*;
use crate::format::meta::separator;
use crate::format::pages::PagesBuilder;

impl SegmentReader {
    /// Read every index block and every record, checking checksums, key order, that
    /// index and data agree, and that the meta's statistics, filter and page index
    /// match the cells
    /// (like Cassandra's `sstableverify`). Returns the cell count. Errors name the file
    /// that holds the bad bytes.
    pub fn verify(&self) -> Result<u64> {
        let mut count = 0u64;
        let mut prev: Option<Vec<u8>> = None;
        let mut expect_off = 0u64;
        if self.has_blocks() {
            return self.verify_blocks();
        }
        let mut seen = SegmentStats::counting();
        let ipath = self.index.path();
        let mut window = records::DataWindow::default();
        let mut pages = PagesBuilder::default();
        for b in 0..self.meta.summary.len() {
            let block_off = self.meta.summary.block(b).0;
            let entries: Vec<(Vec<u8>, Located)> = self.with_index_block_from_file(b, |blk| {
                blk.check_table()?;
                (0..blk.len())
                    .map(|i| {
                        let e = blk.entry(i)?;
                        Ok((
                            e.key.to_vec(),
                            Located::new(&e, block_off, blk.entry_start(i)?),
                        ))
                    })
                    .collect()
            })?;
            if entries.first().map(|e| e.0.as_slice()) != Some(self.meta.summary.first_key(b)) {
                return Err(Error::corrupt(
                    ipath,
                    block_off,
                    "index block's first key differs from the summary",
                ));
            }
            // The filter's line of every key of the block, loaded side by side: checked
            // one after the other, each was a cache miss (a seventh of a 10M-key
            // ingest's time went to them).
            let hashes: Vec<u64> = entries.iter().map(|(k, _)| key_hash(k)).collect();
            for &h in &hashes {
                self.meta.filter.prefetch(h);
            }
            for ((key, loc), h) in entries.into_iter().zip(hashes) {
                if prev
                    .as_ref()
                    .is_some_and(|p| p.as_slice() >= key.as_slice())
                {
                    return Err(self.located_error(loc, "index keys out of order".into()));
                }
                if loc.data_offset != expect_off {
                    return Err(self.located_error(
                        loc,
                        format!(
                            "index entry points at {}, expected {expect_off} (the end of the previous record)",
                            loc.data_offset
                        ),
                    ));
                }
                let (ts, tombstone, expires) =
                    self.read_record_windowed(&mut window, loc, &key, |r| {
                        (r.ts, r.tombstone, r.expires)
                    })?;
                if !self.meta.filter.may_contain(h) {
                    return Err(Error::corrupt(
                        self.meta_path(),
                        0,
                        format!(
                            "filter does not contain the key at data offset {}",
                            loc.data_offset
                        ),
                    ));
                }
                pages.record(&key, loc.data_offset);
                seen.count_cell(&key, ts, tombstone, expires);
                expect_off = loc.data_offset + loc.record_len;
                count += 1;
                prev = Some(key);
            }
        }
        let s = &self.meta.stats;
        if count != s.entry_count {
            return Err(Error::corrupt(
                ipath,
                s.index_len - FOOTER_LEN as u64,
                format!(
                    "index holds {count} entries; its footer and the meta say {}",
                    s.entry_count
                ),
            ));
        }
        if expect_off != self.data_body_len() {
            return Err(Error::corrupt(
                self.data.path(),
                expect_off,
                format!(
                    "records end at {expect_off}; the data body is {} bytes",
                    self.data_body_len()
                ),
            ));
        }
        if self
            .meta
            .pages
            .as_ref()
            .is_some_and(|p| *p != pages.finish(self.data_body_len()))
        {
            return Err(Error::corrupt(
                self.meta_path(),
                0,
                "meta page index differs from the records' pages",
            ));
        }
        seen.max_key = prev.unwrap_or_default();
        check_stats(seen, &self.meta.stats, &self.meta_path())?;
        Ok(count)
    }
}

impl SegmentReader {
    /// [`Self::verify`] of a format 4 to 8 segment: every data block read from the file
    /// and checked whole (`DataBlock::verify`), its first key the summary's (from format
    /// 7 after the first block: the separator of it and the key before), keys ascending
    /// across blocks, every key in the filter, the statistics, and that the padding
    /// before a block (format 6 on) is zeros.
    fn verify_blocks(&self) -> Result<u64> {
        let mut seen = SegmentStats::counting();
        let mut last: Vec<u8> = Vec::new();
        let mut end = 0u64;
        for b in 0..self.data_blocks() {
            let (off, len) = self.summary_block(b);
            self.check_padding(end, off)?;
            end = off + u64::from(len);
            let mut problem = None;
            let summary_key = self.meta.summary.first_key(b);
            let separated = b > 0 && crate::format::meta::separated(self.format);
            let mut at_first = true;
            self.with_data_block(b, Via::File, true, |blk| {
                blk.verify(|key, c| {
                    if problem.is_none() {
                        let ordered = seen.entry_count == 0 || key > last.as_slice();
                        let want = |key| {
                            if separated {
                                separator(&last, key)
                            } else {
                                key
                            }
                        };
                        problem = if !ordered {
                            Some("keys out of order across data blocks".to_string())
                        } else if at_first && want(key) != summary_key {
                            Some("data block's first key differs from the summary".to_string())
                        } else if !self.meta.filter.may_contain(key_hash(key)) {
                            Some(format!("filter does not contain cell {}", seen.entry_count))
                        } else {
                            None
                        };
                    }
                    at_first = false;
                    seen.count_cell(key, c.ts, c.tombstone, c.expires);
                    last.clear();
                    last.extend_from_slice(key);
                })
            })?;
            if let Some(why) = problem {
                return Err(Error::corrupt(self.data.path(), off, why));
            }
        }
        let s = &self.meta.stats;
        if seen.entry_count != s.entry_count {
            let why = format!(
                "data blocks hold {} cells; the meta says {}",
                seen.entry_count, s.entry_count
            );
            return Err(Error::corrupt(self.data.path(), self.data_body_len(), why));
        }
        let count = seen.entry_count;
        seen.max_key = last;
        check_stats(seen, s, &self.meta_path())?;
        Ok(count)
    }
}

impl SegmentReader {
    /// The data bytes from `start` to `end`, padding before a block, are zeros.
    fn check_padding(&self, start: u64, end: u64) -> Result<()> {
        if start == end {
            return Ok(());
        }
        let zeros = |gap: &[u8]| Ok(gap.iter().position(|&b| b != 0));
        match self.data_bytes(start, (end - start) as usize, Via::File, zeros)? {
            Some(i) => Err(Error::corrupt(
                self.data.path(),
                start + i as u64,
                "padding before a data block is not zeros",
            )),
            None => Ok(()),
        }
    }
}

/// The meta's statistics `s` are those of the cells counted in `seen` (its `max_key`
/// set by the caller); else the meta is wrong.
fn check_stats(mut seen: SegmentStats, s: &SegmentStats, meta: &Path) -> Result<()> {
    if seen.entry_count == 0 {
        seen.min_ts = 0;
    }
    let stat_fields = [
        ("tombstone count", seen.tombstone_count == s.tombstone_count),
        (
            "expiring cell count",
            seen.expiring_count == s.expiring_count,
        ),
        ("smallest expiry", seen.min_expires == s.min_expires),
        ("min timestamp", seen.min_ts == s.min_ts),
        ("max timestamp", seen.max_ts == s.max_ts),
        ("min key", seen.min_key == s.min_key),
        ("max key", seen.max_key == s.max_key),
    ];
    match stat_fields.iter().find(|(_, ok)| !ok) {
        Some((field, _)) => Err(Error::corrupt(
            meta,
            0,
            format!("meta statistics: {field} differs from the cells"),
        )),
        None => Ok(()),
    }
}
