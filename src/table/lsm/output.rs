//! Where a compaction's merged cells go ([`Outputs`]): one segment (size-tiered and
//! major compaction of a size-tiered table), or segments cut at a target size
//! (leveled), each carrying the kept range tombstones clipped to its key span so that
//! the segments of a level stay disjoint; and the pacing of compaction writes
//! ([`pause`], the `write_bytes_per_sec` rate limit).

use std::time::{Duration, Instant};

use crate::config::Compression;
use crate::error::Result;
use crate::format::ranges::{RangeTombstone, RangeTombstones};
use crate::lifecycle::SegmentSet;
use crate::segment::{RecordRef, SegmentName, SegmentWriter};
use crate::table::leveled::{successor, Span};

/// How long a compaction that has written `written` bytes in `elapsed` waits before it
/// writes more, to stay at `bytes_per_sec` (0: no limit).
pub(crate) fn pause(bytes_per_sec: u64, written: u64, elapsed: Duration) -> Duration {
    if bytes_per_sec == 0 {
        return Duration::ZERO;
    }
    let due = Duration::from_secs_f64(written as f64 / bytes_per_sec as f64);
    due.saturating_sub(elapsed)
}

/// The part of `ranges` inside `span`.
pub(crate) fn clip(ranges: &RangeTombstones, span: &Span) -> RangeTombstones {
    let mut out = RangeTombstones::new();
    for r in ranges.fragments() {
        let start = r.start.clone().max(span.start.clone());
        let end = match (&r.end, &span.end) {
            (None, e) | (e, None) => e.clone(),
            (Some(a), Some(b)) => Some(a.clone().min(b.clone())),
        };
        let piece = RangeTombstone {
            start,
            end,
            ts: r.ts,
        };
        if !piece.is_empty() {
            out.insert(&piece);
        }
    }
    out
}

/// The segments a compaction writes, in key order.
pub(super) struct Outputs<'a> {
    set: &'a SegmentSet,
    /// Cut a segment once it holds this many bytes (`None`: never).
    target: Option<u64>,
    /// Range tombstones to keep, spread over the segments by span.
    ranges: RangeTombstones,
    writer: Option<SegmentWriter>,
    /// Where the current segment's span starts (every key from here on).
    lo: Vec<u8>,
    done: Vec<SegmentName>,
    /// The rate limit, bytes per second (0: none).
    rate: u64,
    /// The table's own compression, if it names one.
    compression: Option<Compression>,
    started: Instant,
    written: u64,
}

impl<'a> Outputs<'a> {
    /// Outputs of a compaction keeping `ranges`, cut at `target` bytes if given.
    pub(super) fn new(
        set: &'a SegmentSet,
        target: Option<u64>,
        ranges: RangeTombstones,
        rate: u64,
        compression: Option<Compression>,
    ) -> Self {
        Outputs {
            set,
            target,
            ranges,
            writer: None,
            lo: vec![0],
            done: Vec::new(),
            rate,
            compression,
            started: Instant::now(),
            written: 0,
        }
    }

    /// How long to wait before the next cell, for the rate limit.
    pub(super) fn pause(&self) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        pause(self.rate, self.written, self.started.elapsed())
    }

    /// Add the next cell (keys ascending, one cell per key); the segment is cut after
    /// the cell that brings its data to the target.
    pub(super) fn add(&mut self, c: RecordRef<'_>) -> Result<()> {
        let (key, value, ts, tombstone) = (c.key, c.value, c.ts, c.tombstone);
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(self.set.writer_with(self.compression)?),
        };
        let before = w.data_bytes();
        w.add_expiring(key, value, ts, tombstone, c.expires)?;
        let in_writer = w.data_bytes();
        self.written += in_writer - before;
        if self.target.is_some_and(|t| in_writer >= t) {
            self.cut(Some(successor(key)))?;
        }
        Ok(())
    }

    /// Finish the current segment, its span ending at `end`, with its share of the
    /// range tombstones (a segment of range tombstones alone if it holds no cell).
    fn cut(&mut self, end: Option<Vec<u8>>) -> Result<()> {
        let span = Span {
            start: std::mem::replace(&mut self.lo, end.clone().unwrap_or_default()),
            end,
        };
        let ranges = clip(&self.ranges, &span);
        if self.writer.is_none() && !ranges.is_empty() {
            self.writer = Some(self.set.writer_with(self.compression)?);
        }
        if let Some(mut w) = self.writer.take() {
            w.add_range_tombstones(&ranges)?;
            let name = w.name().clone();
            w.finish()?;
            self.done.push(name);
        }
        Ok(())
    }

    /// Finish the last segment; the names of every segment written (none if nothing
    /// survived).
    pub(super) fn finish(mut self) -> Result<Vec<SegmentName>> {
        self.cut(None)?;
        Ok(std::mem::take(&mut self.done))
    }
}

impl Drop for Outputs<'_> {
    /// Abandoned (an error, a close): the segments already finished are in no manifest
    /// and never will be; they go now rather than wait for the next open's orphan scan.
    fn drop(&mut self) {
        if !self.done.is_empty() {
            self.set.discard(&self.done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_keep_writes_at_the_rate() {
        let s = Duration::from_secs;
        assert_eq!(pause(0, 1 << 30, s(0)), Duration::ZERO, "no limit");
        assert_eq!(pause(1000, 5000, s(1)), s(4));
        assert_eq!(pause(1000, 5000, s(5)), Duration::ZERO);
        assert_eq!(pause(1000, 5000, s(9)), Duration::ZERO, "no credit owed back");
        assert_eq!(pause(1 << 20, 1 << 20, Duration::ZERO), s(1));
    }

    #[test]
    fn clipping_splits_range_tombstones_at_span_bounds() {
        let mut all = RangeTombstones::new();
        all.insert(&RangeTombstone {
            start: b"b".to_vec(),
            end: Some(b"m".to_vec()),
            ts: 5,
        });
        all.insert(&RangeTombstone {
            start: b"x".to_vec(),
            end: None,
            ts: 7,
        });
        let first = Span {
            start: vec![0],
            end: Some(successor(b"d")),
        };
        let rest = Span {
            start: successor(b"d"),
            end: None,
        };
        let (a, b) = (clip(&all, &first), clip(&all, &rest));
        assert_eq!(a.fragments().len(), 1);
        assert_eq!(a.fragments()[0].end.as_deref(), Some(&successor(b"d")[..]));
        assert_eq!(b.fragments().len(), 2);
        assert_eq!(b.fragments()[0].start, successor(b"d"));
        let mut joined = a.clone();
        joined.extend(&b);
        assert_eq!(joined, all, "the pieces make the whole");
    }
}
