//! Writing a segment: cells in strictly ascending key order to temp files, then publish
//! (invariant 5: write temp, fsync, rename, fsync directory; meta last). A writer dropped
//! before [`SegmentWriter::finish`] removes its temp files; nothing half-written is ever
//! visible under a segment's name (invariant 2).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{Component, SegmentName};
use crate::config::{Compression, SegmentOptions};
use crate::error::{Error, Result};
use crate::format::data_block::{BlockBuilder, Layout, DEFAULT_INTERVAL, PAGE};
use crate::format::filter::Filter;
use crate::format::footer::{Footer, Kind, RECORD_FORMAT_VERSION};
use crate::format::index_block::IndexBlockBuilder;
use crate::format::meta::{self, Meta, SegmentStats, Summary};
use crate::format::pages::PagesBuilder;
use crate::format::ranges::{RangeTombstone, RangeTombstones};
use crate::format::record::{self, RecordRef};
use crate::format::{key_hash, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::io::{fs, FileRules, FsFile, StoreFs};

/// Most zero bytes format 6 puts before a block to start it on a page: half a cell's
/// bytes on average for cells up to this size (1.4% of a 4 KiB block of 118-byte
/// cells). A larger gap is left unpadded: that block starts mid-page and ends at a
/// page's end, so only its first cells share a page with the block before.
pub const MAX_PAD: u64 = 256;

/// Zero bytes a padding is written from.
const ZEROS: [u8; MAX_PAD as usize] = [0; MAX_PAD as usize];

/// Writes one segment. See the module docs.
pub struct SegmentWriter {
    dir: PathBuf,
    name: SegmentName,
    opts: SegmentOptions,
    fs: StoreFs,
    data: BufWriter<FsFile>,
    index: BufWriter<FsFile>,
    tmp: [PathBuf; 3],
    data_off: u64,
    index_off: u64,
    /// Format 3: the index block being built.
    block: IndexBlockBuilder,
    /// Formats 4 to 8: the data block being built.
    cells: BlockBuilder,
    /// The summary key of the block (index or data) being built: its first key, or
    /// from format 7 a data block's separator (`start_data_block`).
    block_first_key: Vec<u8>,
    /// Formats 4 to 8: the data offset the data block being built must end by.
    block_end: u64,
    block_buf: Vec<u8>,
    rec_buf: Vec<u8>,
    summary: Summary,
    pages: PagesBuilder,
    hashes: Vec<u64>,
    stats: SegmentStats,
    last_key: Option<Vec<u8>>,
    ranges: RangeTombstones,
    done: bool,
}

impl SegmentWriter {
    /// Start writing segment `name` in `dir`.
    pub fn create(
        dir: &Path,
        name: SegmentName,
        opts: &SegmentOptions,
        rules: &FileRules,
    ) -> Result<SegmentWriter> {
        opts.validate()?;
        let tmp = Component::ALL.map(|c| fs::tmp_path(&name.path(dir, c)));
        for (c, t) in Component::ALL.iter().zip(&tmp) {
            // Names are never reused: not while published, nor while a crashed writer's
            // temp file waits for the deleter.
            if name.path(dir, *c).exists() || t.exists() {
                return Err(Error::AlreadyExists {
                    kind: "segment",
                    name: name.to_string(),
                });
            }
        }
        let sfs = StoreFs::new(dir, rules);
        let data = BufWriter::with_capacity(1 << 16, sfs.create_new(&tmp[0])?);
        let index = match sfs.create_new(&tmp[1]) {
            Ok(f) => BufWriter::with_capacity(1 << 16, f),
            Err(e) => {
                let _ = sfs.discard_temp(&tmp[0]);
                return Err(e);
            }
        };
        Ok(SegmentWriter {
            dir: dir.to_path_buf(),
            name,
            opts: opts.clone(),
            fs: sfs,
            data,
            index,
            tmp,
            data_off: 0,
            index_off: 0,
            block: IndexBlockBuilder::default(),
            cells: BlockBuilder::new(DEFAULT_INTERVAL, Layout::of_version(opts.format_version)),
            block_first_key: Vec::new(),
            block_end: 0,
            block_buf: Vec::new(),
            rec_buf: Vec::new(),
            summary: Summary::default(),
            pages: PagesBuilder::default(),
            hashes: Vec::new(),
            stats: SegmentStats::counting(),
            last_key: None,
            ranges: RangeTombstones::new(),
            done: false,
        })
    }

    /// Append a cell. Keys must be strictly ascending; a rejected cell leaves the writer
    /// usable and the segment unchanged.
    pub fn add(&mut self, key: &[u8], value: &[u8], ts: u64, tombstone: bool) -> Result<()> {
        self.add_expiring(key, value, ts, tombstone, 0)
    }

    /// [`SegmentWriter::add`] with an expiry (0: none; see [`RecordRef::expires`]): a
    /// live cell reads as a tombstone at `ts` from `expires` on.
    pub fn add_expiring(
        &mut self,
        key: &[u8],
        value: &[u8],
        ts: u64,
        tombstone: bool,
        expires: u64,
    ) -> Result<()> {
        if key.is_empty() {
            return Err(Error::InvalidArgument("empty key".into()));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: MAX_KEY_LEN,
            });
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::ValueTooLarge {
                len: value.len(),
                max: MAX_VALUE_LEN,
            });
        }
        if tombstone && !value.is_empty() {
            return Err(Error::InvalidArgument("a tombstone has no value".into()));
        }
        if let Some(prev) = &self.last_key {
            if key <= prev.as_slice() {
                return Err(Error::OutOfOrder {
                    index: self.stats.entry_count,
                });
            }
        }
        let r = RecordRef {
            key,
            value,
            ts,
            tombstone,
            expires,
        };
        let h = key_hash(key);
        if self.opts.format_version >= 4 {
            // Cut before a cell would take the block past its end (a block's first cell
            // is staged whatever its size).
            let after = self.data_off + self.cells.stored_len_with(&r) as u64;
            if !self.cells.is_empty() && after > self.block_end {
                self.flush_data_block()?;
            }
            if self.cells.is_empty() {
                self.start_data_block(key)?;
            }
            self.cells.add(&r, h);
        } else {
            self.add_record(&r, h)?;
        }
        self.hashes.push(h);
        self.stats.count_cell(key, ts, tombstone, expires);
        match &mut self.last_key {
            Some(k) => {
                k.clear();
                k.extend_from_slice(key);
            }
            None => self.last_key = Some(key.to_vec()),
        }
        if self.block.size() >= self.opts.index_block_size {
            self.flush_block()?;
        }
        if !self.cells.has_room() {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Formats 4 to 8: start a data block whose first key is `key`, deciding where it
    /// must end: `data_block_size` bytes on, and from format 6 (blocks stored as they
    /// are, of at least a page) at a page's end, after padding to the page if the gap
    /// is at most [`MAX_PAD`]. Its summary key is `key`, or from format 7 the shortest
    /// prefix of it above the last key before ([`meta::separator`]).
    fn start_data_block(&mut self, key: &[u8]) -> Result<()> {
        self.block_first_key.clear();
        let summary_key = match &self.last_key {
            Some(below) if meta::separated(self.opts.format_version) => meta::separator(below, key),
            _ => key,
        };
        self.block_first_key.extend_from_slice(summary_key);
        let size = self.opts.data_block_size as u64;
        self.block_end = self.data_off + size;
        let aligned = self.opts.format_version >= 6
            && self.opts.compression == Compression::None
            && size >= PAGE;
        if aligned {
            let gap = self.data_off.next_multiple_of(PAGE) - self.data_off;
            if gap <= MAX_PAD {
                self.data
                    .write_all(&ZEROS[..gap as usize])
                    .map_err(|e| Error::io("write", &self.tmp[0], e))?;
                self.data_off += gap;
            }
            self.block_end = (self.data_off + size).next_multiple_of(PAGE);
        }
        Ok(())
    }

    /// Format 3: write the cell's record and its index entry.
    fn add_record(&mut self, r: &RecordRef<'_>, h: u64) -> Result<()> {
        self.rec_buf.clear();
        record::encode(&mut self.rec_buf, r);
        let tmp = &self.tmp[0];
        self.data
            .write_all(&self.rec_buf)
            .map_err(|e| Error::io("write", tmp, e))?;
        if self.block.is_empty() {
            self.block_first_key.clear();
            self.block_first_key.extend_from_slice(r.key);
        }
        self.block
            .add_hashed(r.key, h, self.data_off, self.rec_buf.len() as u64);
        self.pages.record(r.key, self.data_off);
        self.data_off += self.rec_buf.len() as u64;
        Ok(())
    }

    /// Formats 4 to 8: write the data block being built and enter it in the summary.
    fn flush_data_block(&mut self) -> Result<()> {
        if self.cells.is_empty() {
            return Ok(());
        }
        self.block_buf.clear();
        let len = self
            .cells
            .finish(self.opts.compression, &mut self.block_buf);
        self.data
            .write_all(&self.block_buf)
            .map_err(|e| Error::io("write", &self.tmp[0], e))?;
        let len = u32::try_from(len).map_err(|_| {
            Error::InvalidArgument(format!("a data block of {len} bytes passes 4 GiB"))
        })?;
        self.summary.push(&self.block_first_key, self.data_off, len);
        self.data_off += u64::from(len);
        Ok(())
    }

    /// The name the segment will be published under.
    pub fn name(&self) -> &SegmentName {
        &self.name
    }

    /// Cells added so far.
    pub fn len(&self) -> u64 {
        self.stats.entry_count
    }

    /// True before the first cell.
    pub fn is_empty(&self) -> bool {
        self.stats.entry_count == 0
    }

    /// Bytes of data written so far (with the data block not yet written, uncompressed).
    pub fn data_bytes(&self) -> u64 {
        self.data_off + self.cells.stored_len() as u64
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        self.block_buf.clear();
        self.block.finish_into(&mut self.block_buf);
        self.index
            .write_all(&self.block_buf)
            .map_err(|e| Error::io("write", &self.tmp[1], e))?;
        self.summary.push(
            &self.block_first_key,
            self.index_off,
            self.block_buf.len() as u32,
        );
        self.index_off += self.block_buf.len() as u64;
        Ok(())
    }

    /// Add a range tombstone (kept in the meta's range tombstone block, in any order
    /// with the cells). An empty range adds nothing.
    pub fn add_range_tombstone(&mut self, t: &RangeTombstone) -> Result<()> {
        let long = |k: &[u8]| k.len() > MAX_KEY_LEN + 1;
        if t.start.is_empty() || long(&t.start) || t.end.as_deref().is_some_and(long) {
            return Err(Error::InvalidArgument(
                "range tombstone bound empty or longer than a key".into(),
            ));
        }
        self.ranges.insert(t);
        Ok(())
    }

    /// Add every range tombstone of `set`.
    pub fn add_range_tombstones(&mut self, set: &RangeTombstones) -> Result<()> {
        for t in set.fragments() {
            self.add_range_tombstone(t)?;
        }
        Ok(())
    }

    /// The range tombstones added so far.
    pub fn range_tombstones(&self) -> &RangeTombstones {
        &self.ranges
    }

    /// Write footers and metadata, fsync, and publish. Returns the segment's statistics.
    pub fn finish(mut self) -> Result<SegmentStats> {
        self.flush_block()?;
        self.flush_data_block()?;
        let n = self.stats.entry_count;
        let v = self.opts.format_version;
        let data_footer = Footer::new(v, Kind::Data, n, self.data_off);
        let indexed = if v >= 4 { 0 } else { n };
        let index_footer = Footer::new(v, Kind::Index, indexed, self.index_off);
        finish_file(&mut self.data, &data_footer.encode(), &self.tmp[0])?;
        finish_file(&mut self.index, &index_footer.encode(), &self.tmp[1])?;
        let mut stats = std::mem::take(&mut self.stats);
        if n == 0 {
            stats.min_ts = 0;
        }
        stats.max_key = self.last_key.take().unwrap_or_default();
        stats.data_len = self.data_off + 32;
        stats.index_len = self.index_off + 32;
        let meta = Meta {
            stats,
            summary: std::mem::take(&mut self.summary),
            filter: Filter::build(&self.hashes, self.opts.filter_bits_per_key),
            pages: (v == RECORD_FORMAT_VERSION)
                .then(|| std::mem::take(&mut self.pages).finish(self.data_off)),
            ranges: std::mem::take(&mut self.ranges),
        };
        let mut body = Vec::new();
        meta.encode(v, &mut body);
        let footer = Footer::new(v, Kind::Meta, 0, body.len() as u64);
        body.extend_from_slice(&footer.encode());
        let mf = self.fs.create_new(&self.tmp[2])?;
        mf.append(&body)?;
        mf.sync_all()?;
        drop(mf);
        // Data and index must be durable under their names before meta appears: a crash
        // must never leave a meta (the mark of a whole segment) without them, and renames
        // in one directory are not ordered on disk without a directory fsync between.
        for (i, (c, t)) in Component::ALL.iter().zip(&self.tmp).enumerate() {
            let step = if *c == Component::Meta {
                self.fs.fsync_dir(&self.dir)
            } else {
                Ok(())
            }
            .and_then(|()| self.fs.rename(t, &self.name.path(&self.dir, *c)));
            if let Err(e) = step {
                // Take back what was already renamed, so that nothing of a half-published
                // segment stays under its name; `Drop` then removes the temp files (none
                // was ever mapped). If a rename back fails, the orphan scan of the next
                // open removes the file (it is in no manifest).
                for (c, t) in Component::ALL.iter().zip(&self.tmp).take(i) {
                    let _ = self.fs.rename(&self.name.path(&self.dir, *c), t);
                }
                return Err(e);
            }
        }
        self.fs.fsync_dir(&self.dir)?;
        self.done = true;
        Ok(meta.stats)
    }
}

fn finish_file(w: &mut BufWriter<FsFile>, footer: &[u8], path: &Path) -> Result<()> {
    w.flush().map_err(|e| Error::io("write", path, e))?;
    // The footer goes straight to the file, through the injected write faults.
    w.get_ref().append(footer)?;
    w.get_ref().sync_all()
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        if !self.done {
            // Unpublished temp files of our own, never mapped (invariant 2): not subject
            // to the deleter. A failure here leaves a `.tmp` that the next open removes.
            for t in &self.tmp {
                if t.exists() {
                    let _ = self.fs.discard_temp(t);
                }
            }
        }
    }
}
