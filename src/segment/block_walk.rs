//! Block scans (formats 4 to 8): [`super::SegmentIter`]'s two ends over data blocks. Each end holds
//! the block it is in (checked whole when loaded: scans check every checksum), and a
//! position (block, entry). The front walks entries in order; the back steps down one
//! entry at a time. The ends meet as in format 3: the front stops before the cell the
//! back yielded last, or after the one the back will yield next.

use std::cell::Cell;
use std::ops::Bound;
use std::sync::Arc;

use super::reader::blocks::{blame, slot_hint, unpack};
use super::reader::{SegmentReader, Source};
use crate::error::{Error, Result};
use crate::format::data_block::{BlockCell, DataBlock, FixedSteps, HeadKey, Shape};
use crate::format::record::RecordRef;
use crate::format::{key_hash, replace_tail, Malformed};
use crate::range::{self, UpperBound};

/// (data block, entry within it), ordered as the cells are.
type Pos = (usize, usize);

/// How far ahead of a forward step its mapped block is prefetched: eight cache lines,
/// about four rows of 16-byte keys and 100-byte values. A step takes some 35 ns, a
/// load from memory longer; at 256 bytes, YCSB E's scans still waited on each row's
/// first line. `cargo bench --bench scan_states`: scans of a table at rest took 0.90
/// of the time (README "Measured", "Prefetches for E's scans"); in a scratch program
/// 768 and 1,024 bytes were slower than 512.
const PREFETCH_AHEAD: usize = 512;

/// [`BlockWalk::kept`] when the key buffer is known to share nothing.
const NOTHING_KEPT: (usize, usize) = (usize::MAX, 0);

/// What a forward step from a known place found ([`BlockWalk::step`]). The caller runs
/// its function on the row: a step that ran it built the caller's `Result` in one place
/// and copied it to another, and the copy's wide loads over the narrow stores that
/// built it could not be forwarded from the store buffer, a stall of every row a scan
/// lent (perf, 1..100-row scans: a sixth of the overlay's samples).
enum Stepped<'a> {
    /// The next row.
    Row(RecordRef<'a>),
    /// The next row is at or past the upper bound: the front stays.
    Past,
    /// Not a step from a known place in the held block: the general path takes it.
    Elsewhere,
    /// The entry does not decode.
    Corrupt(Malformed),
}

/// What a step in a fixed block found ([`BlockWalk::step_fixed`]), borrowing nothing
/// (a borrow returned from one branch would hold the walk for the other).
enum FixedStep {
    Past,
    /// The row: the key is the walk's, the value this range of the block's payload.
    Row {
        value: std::ops::Range<usize>,
        ts: u64,
    },
}

/// What [`Loaded`] keeps of a block's parsed trailer `s`.
fn shaped(s: Shape) -> (Option<Shape>, Option<FixedSteps>) {
    (Some(s), s.fixed_steps())
}

/// One end's current block: its payload in the map (a raw block of mapped data) or in
/// `buf`.
#[derive(Debug, Default)]
struct Loaded {
    block: Option<usize>,
    /// The payload's range in the map, when read in place.
    mapped: Option<(usize, usize)>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// The payload, when it is a compressed block's held decompressed by the reader's
    /// cache of decompressed blocks (a trusting scan: `unpacked_cache` invariant 4).
    cached: Option<Arc<[u8]>>,
    /// Entries in the block.
    len: usize,
    /// Its parsed trailer, so a step does not parse it again.
    shape: Option<Shape>,
    /// What a step needs of a fixed block's shape (`None`: not fixed).
    fixed: Option<FixedSteps>,
    /// Stored uncompressed (payload offsets are block offsets).
    raw: bool,
    /// Where the head key of the group a forward step is in lies in this block.
    head: Cell<Option<HeadKey>>,
}

impl Loaded {
    /// Hold no block, its buffers kept (emptied).
    fn forget(&mut self) {
        self.block = None;
        self.mapped = None;
        self.buf.clear();
        self.scratch.clear();
        self.cached = None;
        self.len = 0;
        self.shape = None;
        self.fixed = None;
        self.raw = false;
        self.head.set(None);
    }

    /// The bytes its buffers hold.
    fn capacity(&self) -> usize {
        self.buf.capacity() + self.scratch.capacity()
    }

    /// Make this end hold block `b`, checking its checksum (unless `trust` and the
    /// block is mapped and was checked before).
    fn load(&mut self, r: &SegmentReader, b: usize, trust: bool) -> Result<()> {
        if self.block == Some(b) {
            return Ok(());
        }
        self.block = None;
        self.shape = None;
        self.fixed = None;
        self.head.set(None);
        self.cached = None;
        if trust {
            if let Some(p) = r.unpacked_payload(b) {
                return self.load_cached(r, b, p);
            }
        }
        let (off, len) = r.summary_block(b);
        let path = r.data.path();
        let corrupt = |m: Malformed| m.at(off).into_error(path);
        let mapped = match &r.data {
            Source::Mapped(m) => {
                let s = r.stored_block(m.as_slice(), b)?;
                let check = !(trust && r.block_checked(b));
                let (payload, raw) = unpack(s, &mut self.buf, check).map_err(corrupt)?;
                let blk = DataBlock::parse(payload, r.block_layout())
                    .map_err(|m| corrupt(blame(m, raw)))?;
                if check {
                    r.mark_block_checked(b, slot_hint(&blk));
                }
                self.len = blk.len();
                (self.shape, self.fixed) = shaped(blk.shape());
                self.raw = raw;
                raw.then_some((off as usize, payload.len()))
            }
            Source::Standard(p) => {
                self.scratch.resize(len as usize, 0);
                p.read_at(&mut self.scratch, off)?;
                let (payload, raw) = unpack(&self.scratch, &mut self.buf, true).map_err(corrupt)?;
                let blk = DataBlock::parse(payload, r.block_layout())
                    .map_err(|m| corrupt(blame(m, raw)))?;
                self.len = blk.len();
                (self.shape, self.fixed) = shaped(blk.shape());
                self.raw = raw;
                if raw {
                    // Keep the payload in `buf` (a compressed one is there already).
                    let n = payload.len();
                    std::mem::swap(&mut self.buf, &mut self.scratch);
                    self.buf.truncate(n);
                }
                None
            }
        };
        self.mapped = mapped;
        self.block = Some(b);
        Ok(())
    }

    /// Hold block `b` as payload `p`, decompressed and checked when a get kept it.
    fn load_cached(&mut self, r: &SegmentReader, b: usize, p: Arc<[u8]>) -> Result<()> {
        let blk = DataBlock::parse(&p, r.block_layout()).map_err(|m| {
            let (off, _) = r.summary_block(b);
            blame(m, false).at(off).into_error(r.data.path())
        })?;
        self.len = blk.len();
        (self.shape, self.fixed) = shaped(blk.shape());
        self.raw = false;
        self.mapped = None;
        self.cached = Some(p);
        self.block = Some(b);
        Ok(())
    }

    /// Start loading the mapped data [`PREFETCH_AHEAD`] bytes past `at` (a forward
    /// step's next entry): a block checked long ago, or trusted unchecked, is not in
    /// the cache, and a row is about two lines. Near the block's end that is the next
    /// block's first rows, which a scan crossing into it reads next (blocks lie one
    /// after another in the file; past the map's end nothing is fetched).
    #[inline(always)]
    fn prefetch_ahead(&self, r: &SegmentReader, at: usize) {
        if let Some((base, _)) = self.mapped {
            r.data.prefetch((base + at + PREFETCH_AHEAD) as u64);
        }
    }

    #[inline(always)]
    fn payload<'a>(&'a self, r: &'a SegmentReader) -> &'a [u8] {
        match (self.mapped, r.mapped_data()) {
            (Some((at, n)), Some(d)) => &d[at..at + n],
            _ => match &self.cached {
                Some(p) => p,
                None => &self.buf,
            },
        }
    }

    /// Run `f` over the held block, parsed; its errors name the data file.
    #[inline]
    fn with_block<T>(
        &self,
        r: &SegmentReader,
        f: impl FnOnce(DataBlock<'_>) -> Result<T, Malformed>,
    ) -> Result<T> {
        let corrupt = |m: Malformed| self.corrupt(r, m);
        let payload = self.payload(r);
        let blk = match self.shape.and_then(|s| DataBlock::with_shape(payload, s)) {
            Some(blk) => blk,
            None => DataBlock::parse(payload, r.block_layout()).map_err(corrupt)?,
        };
        f(blk).map_err(corrupt)
    }

    /// The error for damage `m` in the held block's payload, naming the data file and
    /// the block's offset.
    #[cold]
    fn corrupt(&self, r: &SegmentReader, m: Malformed) -> Error {
        let (off, _) = r.summary_block(self.block.unwrap_or(0));
        blame(m, self.raw).at(off).into_error(r.data.path())
    }

    /// Run `f` over entry `i` of the held block (`at`: where it starts, if known), its
    /// key written to `key`; returns where the next entry starts.
    #[inline]
    fn with_cell<T>(
        &self,
        r: &SegmentReader,
        i: usize,
        at: Option<usize>,
        key: &mut Vec<u8>,
        f: impl FnOnce(&[u8], BlockCell<'_>) -> T,
    ) -> Result<(T, usize)> {
        self.with_block(r, |blk| {
            let c = match at {
                Some(at) => {
                    let mut head = self.head.get();
                    let c = blk.cell_following(i, at, &mut head)?;
                    self.head.set(head);
                    c
                }
                None => blk.entry(i)?,
            };
            c.key_into(key);
            let end = c.end;
            Ok((f(key, c), end))
        })
    }
}

/// Where the back end is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Back {
    Unresolved,
    At(Pos),
    Exhausted,
}

/// The state of both ends of a block scan.
#[derive(Debug)]
pub(super) struct BlockWalk {
    /// The front's next position, once found (`None`: find it from `lo`).
    front: Option<Pos>,
    /// Where the front's entry starts in its block, when known.
    front_at: Option<usize>,
    /// The entry at `front` equals an excluded `lo`: skip it.
    skip_equal: bool,
    /// The front yields only positions below this.
    end: Pos,
    back: Back,
    front_blk: Loaded,
    back_blk: Loaded,
    key: Vec<u8>,
    /// `key` starts with the first `kept.1` bytes of the key of the head of the front
    /// block's group starting at entry `kept.0` (a row of that group was decoded last),
    /// so the next row of the group copies only its suffix. `usize::MAX` as the group:
    /// nothing known. Only `step` sets it and only `step` reads it; `find_next` (the only
    /// way to a new front block that `step` then walks) and `next_back` (which writes
    /// `key` too) reset it before writing `key`.
    kept: (usize, usize),
    /// Skip the checksum of mapped blocks a read has checked (the table's scans).
    pub(super) trust: bool,
}

impl BlockWalk {
    /// A walk of `r`'s blocks ([`Walk::of`](super::walk_stock::Walk::of) takes one
    /// from the thread's stock instead, when it has one).
    pub(super) fn new(r: &SegmentReader) -> Self {
        let mut w = BlockWalk {
            front: None,
            front_at: None,
            skip_equal: false,
            end: (r.data_blocks(), 0),
            back: Back::Unresolved,
            front_blk: Loaded::default(),
            back_blk: Loaded::default(),
            key: Vec::new(),
            kept: NOTHING_KEPT,
            trust: false,
        };
        w.reserve_key(r);
        w
    }

    /// Room for the keys the scan will rebuild (the segment's bounds are a fair guess),
    /// so a warm scan allocates nothing per row.
    fn reserve_key(&mut self, r: &SegmentReader) {
        let s = r.stats();
        self.key
            .reserve(s.max_key.len().max(s.min_key.len()) * 2 + 16);
    }

    /// Start over on `r` as [`BlockWalk::new`] would, in place, keeping the buffers'
    /// capacity.
    pub(super) fn renew(&mut self, r: &SegmentReader) {
        self.front = None;
        self.front_at = None;
        self.skip_equal = false;
        self.end = (r.data_blocks(), 0);
        self.back = Back::Unresolved;
        self.front_blk.forget();
        self.back_blk.forget();
        self.key.clear();
        self.kept = NOTHING_KEPT;
        self.trust = false;
        self.reserve_key(r);
    }

    /// Forget the blocks held (a decompressed block shared with the reader's cache
    /// goes back now), keeping the buffers, for the thread's stock; the bytes the
    /// buffers hold, which the stock bounds.
    pub(super) fn release(&mut self) -> usize {
        self.front_blk.forget();
        self.back_blk.forget();
        self.key.capacity() + self.front_blk.capacity() + self.back_blk.capacity()
    }

    /// The front starts again from `lo` at its next step.
    pub(super) fn reset_front(&mut self) {
        self.front = None;
        self.front_at = None;
        self.skip_equal = false;
    }

    /// The back starts again from `hi` at its next step.
    pub(super) fn reset_back(&mut self, r: &SegmentReader) {
        self.back = Back::Unresolved;
        self.end = (r.data_blocks(), 0);
    }

    /// `(b, i)`, or the first entry of the next block where `i` is past block `b`'s
    /// last; the front then holds that position's block.
    fn normalize(&mut self, r: &SegmentReader, (mut b, mut i): Pos) -> Result<Pos> {
        loop {
            if b >= r.data_blocks() {
                return Ok((r.data_blocks(), 0));
            }
            self.front_blk.load(r, b, self.trust)?;
            if i < self.front_blk.len {
                return Ok((b, i));
            }
            (b, i) = (b + 1, 0);
        }
    }

    /// The front's position, found from `lo` after creation or a seek.
    fn find_front(&mut self, r: &SegmentReader, lo: &Bound<Vec<u8>>) -> Result<Pos> {
        if let Some(p) = self.front {
            return Ok(p);
        }
        let (k, skip) = match lo {
            Bound::Unbounded => {
                self.front = Some((0, 0));
                return Ok((0, 0));
            }
            Bound::Included(k) => (k, false),
            Bound::Excluded(k) => (k, true),
        };
        let p = match r.summary_block_for(k) {
            None => (0, 0),
            Some(b) => {
                // A key the segment may hold is looked up in the block's hash table
                // first (a scan from a stored key, YCSB E's, reads one slot and one
                // entry); only a key it lacks is binary-searched. The block's end and
                // slot load beside the filter's line, as for a get.
                let h = key_hash(k);
                r.prefetch_filter(h);
                r.prefetch_block(b, h);
                let maybe = r.may_contain_hash(h);
                self.front_blk.load(r, b, self.trust)?;
                let i = self.front_blk.with_block(r, |blk| {
                    match maybe.then(|| blk.find(k, h)).transpose()?.flatten() {
                        Some((i, _)) => Ok(i),
                        None => blk.lower_bound(k),
                    }
                })?;
                self.normalize(r, (b, i))?
            }
        };
        self.front = Some(p);
        self.front_at = None;
        self.skip_equal = skip;
        Ok(p)
    }

    /// The next cell of the front within `lo..hi`, handed to `f`.
    #[inline]
    pub(super) fn next<T, H: UpperBound>(
        &mut self,
        r: &SegmentReader,
        lo: &Bound<Vec<u8>>,
        hi: &H,
        f: impl FnOnce(RecordRef<'_>) -> T,
    ) -> Result<Option<T>> {
        match self.step(r, hi) {
            Stepped::Row(rec) => Ok(Some(f(rec))),
            Stepped::Past => Ok(None),
            Stepped::Elsewhere => self.find_next(r, lo, hi, Some(f)),
            Stepped::Corrupt(m) => Err(self.front_blk.corrupt(r, m)),
        }
    }

    /// A forward step from a known place in the block the front holds (every step of a
    /// scan but its first and the first in each block): no lookup, no load, the entry
    /// decoded from where the one before ended. [`Stepped::Elsewhere`] where that does
    /// not apply.
    #[inline(always)]
    fn step<'a>(&'a mut self, r: &'a SegmentReader, hi: &impl UpperBound) -> Stepped<'a> {
        let (Some(p), Some(at)) = (self.front, self.front_at) else {
            return Stepped::Elsewhere;
        };
        let l = &self.front_blk;
        if self.skip_equal || l.block != Some(p.0) || p.1 >= l.len || p >= self.end {
            return Stepped::Elsewhere;
        }
        match self.step_fixed(r, p, at, hi) {
            Some(FixedStep::Past) => return Stepped::Past,
            Some(FixedStep::Row { value, ts }) => {
                return Stepped::Row(RecordRef {
                    key: &self.key,
                    value: &self.front_blk.payload(r)[value],
                    ts,
                    tombstone: false,
                    expires: 0,
                })
            }
            None => {}
        }
        let l = &self.front_blk;
        let Some(blk) = l
            .shape
            .and_then(|shape| DataBlock::with_shape(l.payload(r), shape))
        else {
            return Stepped::Elsewhere;
        };
        let mut head = l.head.get();
        let c = match blk.cell_following(p.1, at, &mut head) {
            Ok(c) => c,
            Err(m) => return Stepped::Corrupt(m),
        };
        l.head.set(head);
        let (n, g) = (c.prefix.len(), head.map_or(usize::MAX, |h| h.first()));
        if self.kept.0 == g && n <= self.kept.1 {
            self.key.truncate(n);
            self.key.extend_from_slice(c.suffix);
        } else {
            c.key_into(&mut self.key);
        }
        // The head's key is whole; any other row shares its prefix's bytes.
        self.kept = (g, if g == p.1 { self.key.len() } else { n });
        if !hi.admits(&self.key) {
            // Past the upper bound: stay here (a seek may move the bound).
            return Stepped::Past;
        }
        self.front = Some((p.0, p.1 + 1));
        self.front_at = Some(c.end);
        l.prefetch_ahead(r, c.end);
        Stepped::Row(c.with_key(&self.key))
    }

    /// [`Self::step`] in a fixed block: the entry decoded from the payload and `at`
    /// alone ([`FixedSteps::row`]), the key's suffix written over the last one's.
    /// `None`, nothing changed, in a block that is not fixed or where the entry does
    /// not decode: the general step then takes it (and reports the damage).
    #[inline(always)]
    fn step_fixed(
        &mut self,
        r: &SegmentReader,
        (b, i): Pos,
        at: usize,
        hi: &impl UpperBound,
    ) -> Option<FixedStep> {
        let l = &self.front_blk;
        let fx = l.fixed.as_ref()?;
        let payload = l.payload(r);
        let row = fx.row(payload, at)?;
        let plen = fx.plen();
        // As `step` keeps a fixed block's key (which has no group heads: `kept.0` is
        // `usize::MAX`): after a step in this block the key holds its prefix.
        if self.kept.0 == usize::MAX && plen <= self.kept.1 {
            replace_tail(&mut self.key, plen, row.suffix);
        } else {
            let prefix = fx.prefix(payload)?;
            self.key.clear();
            self.key.extend_from_slice(prefix);
            self.key.extend_from_slice(row.suffix);
        }
        self.kept = (usize::MAX, plen);
        if !hi.admits(&self.key) {
            // Past the upper bound: stay here (a seek may move the bound).
            return Some(FixedStep::Past);
        }
        self.front = Some((b, i + 1));
        self.front_at = Some(row.end);
        l.prefetch_ahead(r, row.end);
        // The value ends the entry.
        Some(FixedStep::Row {
            value: row.end - row.value.len()..row.end,
            ts: row.ts,
        })
    }

    /// [`Self::next`] from wherever the front is: found from `lo` after creation or a
    /// seek, into the next block at a block's end, past an excluded `lo`.
    fn find_next<T>(
        &mut self,
        r: &SegmentReader,
        lo: &Bound<Vec<u8>>,
        hi: &impl UpperBound,
        mut f: Option<impl FnOnce(RecordRef<'_>) -> T>,
    ) -> Result<Option<T>> {
        // The key is rewritten whole below, perhaps from another block.
        self.kept = NOTHING_KEPT;
        loop {
            let p = self.find_front(r, lo)?;
            let p = self.normalize(r, p)?;
            // Where the entry starts is known only for the position it was found for,
            // also when the ends have met here: a later step, once a seek back has
            // moved the back end away, must not decode the next block's first entry
            // at the offset where the last block's entries ended.
            if self.front != Some(p) {
                self.front_at = None;
            }
            if p >= self.end || p.0 >= r.data_blocks() {
                self.front = Some(p);
                return Ok(None);
            }
            let skip = std::mem::take(&mut self.skip_equal);
            let at = self.front_at;
            let (verdict, next_at) =
                self.front_blk
                    .with_cell(r, p.1, at, &mut self.key, |k, c| {
                        if skip && !range::above(k, lo) {
                            return Ok(None);
                        }
                        if !hi.admits(k) {
                            return Err(());
                        }
                        Ok(Some(f.take().map(|f| f(c.with_key(k)))))
                    })?;
            match verdict {
                Err(()) => {
                    // Past the upper bound: stay here (a seek may move the bound).
                    self.front = Some(p);
                    return Ok(None);
                }
                Ok(got) => {
                    self.front = Some((p.0, p.1 + 1));
                    self.front_at = Some(next_at);
                    self.front_blk.prefetch_ahead(r, next_at);
                    if let Some(t) = got {
                        return Ok(t);
                    }
                }
            }
        }
    }

    /// Find the back's place: the last cell at or below `hi`.
    fn find_back(&mut self, r: &SegmentReader, hi: &Bound<Vec<u8>>) -> Result<()> {
        if self.back != Back::Unresolved {
            return Ok(());
        }
        let n = r.data_blocks();
        let at = match hi {
            Bound::Unbounded => n.checked_sub(1).map(|b| (b, usize::MAX)),
            Bound::Included(k) | Bound::Excluded(k) => match r.summary_block_for(k) {
                None => None,
                Some(b) => {
                    let inclusive = matches!(hi, Bound::Included(_));
                    self.back_blk.load(r, b, self.trust)?;
                    let i = self.back_blk.with_block(r, |blk| {
                        let i = blk.lower_bound(k)?;
                        let hit = inclusive
                            && i < blk.len()
                            && blk.entry(i)?.cmp_key(k) == std::cmp::Ordering::Equal;
                        Ok(if hit { Some(i) } else { i.checked_sub(1) })
                    })?;
                    match i {
                        Some(i) => Some((b, i)),
                        None => b.checked_sub(1).map(|b| (b, usize::MAX)),
                    }
                }
            },
        };
        self.back = match at {
            Some((b, i)) => {
                self.back_blk.load(r, b, self.trust)?;
                let p = (b, i.min(self.back_blk.len.saturating_sub(1)));
                self.end = (p.0, p.1 + 1);
                Back::At(p)
            }
            None => {
                self.end = (0, 0);
                Back::Exhausted
            }
        };
        Ok(())
    }

    /// The next cell of the back within `lo..hi`, handed to `f`.
    pub(super) fn next_back<T>(
        &mut self,
        r: &SegmentReader,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        f: impl FnOnce(RecordRef<'_>) -> T,
    ) -> Result<Option<T>> {
        let front = self.find_front(r, lo)?;
        self.find_back(r, hi)?;
        let Back::At(p) = self.back else {
            return Ok(None);
        };
        // The front has passed this cell: the ends met.
        if p < front {
            return Ok(None);
        }
        self.back_blk.load(r, p.0, self.trust)?;
        self.kept = NOTHING_KEPT;
        let (got, _) = self
            .back_blk
            .with_cell(r, p.1, None, &mut self.key, |k, c| {
                // Below the lower bound: stay here (a seek may move the bound).
                range::above(k, lo).then(|| f(c.with_key(k)))
            })?;
        let Some(got) = got else {
            return Ok(None);
        };
        self.end = p;
        self.back = match p {
            (b, i) if i > 0 => Back::At((b, i - 1)),
            (b, _) if b > 0 => {
                self.back_blk.load(r, b - 1, self.trust)?;
                Back::At((b - 1, self.back_blk.len.saturating_sub(1)))
            }
            _ => Back::Exhausted,
        };
        Ok(Some(got))
    }
}
