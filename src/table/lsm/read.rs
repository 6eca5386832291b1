//! Point reads: [`Table::get`], [`Table::get_with`], [`Table::contains_key`],
//! [`Table::multi_get`] and [`Table::get_cell`], all through [`Table::resolve`], which
//! reconciles the memtables' winner with the segments' cells (invariant 4).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::ranges::{shadow, view_cover};
use super::snap::{may_expire, TableSnap};
use super::Table;
use crate::error::Result;
use crate::format::{key_hash, key_prefix, MAX_KEY_LEN};
use crate::lifecycle::{SegmentHandle, View};
use crate::segment::Entry;
use crate::table::cell::{cmp_versions, is_dead};
use crate::table::memtable::{Memtable, ReadAt, SharedCell};
use crate::table::value::{Place, Value};

impl Table {
    /// The value of `key`, or `None` if it is absent or deleted. The value is not
    /// copied: it shares the memtable's bytes, or borrows the segment's mapped bytes and
    /// keeps that segment mapped while it lives (see [`Value`]); only a value read with
    /// positional reads (`standard` mode) is copied once.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let h = key_hash(key);
        let mut best = self.memtable_best(key, h);
        let now = || self.ctx.clock.expiry_now();
        // With the view borrowed (no lock, no count): a miss costs no reference count, a
        // mapped hit clones the view for the value to hold.
        self.set.with_view_arc(|view| {
            if let ([s], None) = (&view.segments[..], &best) {
                if s.range_tombstones().is_empty() {
                    return Self::sole_value(view, s, key, h, now);
                }
            }
            let place =
                Self::resolve(view, key, h, &mut best, |w| w.and_then(|w| w.place(view, now)))?;
            Ok(place.and_then(|p| Value::at(view, p, &mut best)))
        })
    }

    /// [`Table::get`] where `h` is the view's only segment and no memtable holds a cell
    /// of the key (a compacted table at rest, the common case): a path of its own,
    /// without [`Table::resolve`]'s closures, which cost a filter-answered miss (26 ns
    /// on the bare segment) some 20 instructions and 2% to 5% of its speed.
    #[inline(always)]
    fn sole_value(
        view: &Arc<View>,
        s: &SegmentHandle,
        key: &[u8],
        h: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<Option<Value>> {
        let place = s.get_hashed(key, h, |r| {
            (!is_dead(r.tombstone, r.expires, now)).then(|| Value::place(view, 0, r.value))
        })?;
        Ok(place.flatten().and_then(|p| Value::at(view, p, &mut None)))
    }

    /// Run `f` on the value of `key` (`None` if it is absent or deleted) without
    /// copying it: memtable bytes, or segment bytes straight from the map (or from the
    /// reader's per-thread buffer in `standard` mode). A warm read of a segment
    /// allocates nothing. No lock of the table is held while `f` runs, and nothing
    /// waits for it: `f` may read, write, flush or compact this table. Segments that a
    /// compaction replaces while `f` runs stay mapped (and on disk) until it returns.
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let h = key_hash(key);
        let mut best = self.memtable_best(key, h);
        let now = || self.ctx.clock.expiry_now();
        // `f` runs while the view is borrowed through an `arc_swap` guard
        // (`lifecycle::view`): no lock and no shared reference count (a count every
        // reader shares is a cache line the cores pass around on every get). Nothing
        // waits for a borrow, so `f` may do anything, write or flush this table
        // included; a segment compacted away meanwhile stays mapped, and on disk, until
        // `f` returns.
        self.set.with_view_arc(move |view| {
            Self::resolve(view, key, h, &mut best, |w| {
                f(w.and_then(|w| (!w.is_dead(now)).then_some(w.value)))
            })
        })
    }

    /// Whether `key` has a live value, without copying it. Segments whose filter rules
    /// the key out are not read.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let h = key_hash(key);
        let mut best = self.memtable_best(key, h);
        let now = || self.ctx.clock.expiry_now();
        self.set.with_view(|view| {
            Self::resolve(view, key, h, &mut best, |w| w.is_some_and(|w| !w.is_dead(now)))
        })
    }

    /// The values of `keys`, in order, like [`Table::get`] for each. The memtables and
    /// the view are taken once for all of them.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        self.ctx.check_open()?;
        // Invariant 6 (this module's): every memtable empty, so one view holds every
        // acknowledged write of the table, and only whole batches (a segment holds
        // whole memtables).
        if !self.maybe_cells.load(Ordering::Acquire) {
            let mut snap = TableSnap::of_view(&self.set, 0);
            snap.now = self.expiry_now_for(&[], &snap.view);
            return snap.multi_get(u64::MAX, keys);
        }
        // One picture of the table for every key: never half of a batch.
        let (pin, snap) = self.capture();
        snap.multi_get(pin.seq(), keys)
    }

    /// The winning cell of `key`, tombstones included (invariant 4), as stored: an
    /// expiring cell with its expiry, whether or not it has passed
    /// ([`Entry::is_dead_at`] says; [`Store::expiry_now`](crate::Store::expiry_now) is
    /// the moment reads judge it at).
    pub fn get_cell(&self, key: impl AsRef<[u8]>) -> Result<Option<Entry>> {
        let key = key.as_ref();
        self.ctx.check_open()?;
        let h = key_hash(key);
        let mut best = self.memtable_best(key, h);
        self.set.with_view(|view| {
            Self::resolve(view, key, h, &mut best, |w| {
                w.map(|w| Entry {
                    key: key.to_vec(),
                    value: w.value.to_vec(),
                    ts: w.ts,
                    tombstone: w.tombstone,
                    expires: w.expires,
                })
            })
        })
    }

    /// The winning memtable cell of `key`, reading the memtables under the read lock
    /// (no allocation; the lock is released before anything else runs).
    #[inline]
    fn memtable_best(&self, key: &[u8], h: u64) -> Option<SharedCell> {
        // Invariant 6: nothing in any memtable, no lock needed (the read-mostly case).
        if !self.maybe_cells.load(Ordering::Acquire) {
            return None;
        }
        // The list without the lock (`memset.rs`): no line every reader writes.
        let mems = self.mem.readable();
        for m in mems.iter() {
            m.prefetch_filter(h);
        }
        Self::best_of(
            mems.iter().map(|m| &**m),
            key,
            h,
            ReadAt::Visible(&self.ctx.visibility),
        )
    }

    /// Whether no write numbered after `seq` can have changed what a read of `key`
    /// gives, judged without reading any segment: the table's segments are still
    /// `segments` (no flush or compaction since) and no memtable holds a version of
    /// `key`, or a newer range tombstone over it, numbered after `seq` (when no memtable
    /// holds any record numbered after `seq`, no key is looked up), and none holds a
    /// cell with a TTL (which expires without a write). `false` when it cannot tell.
    /// For a transaction's commit check, under the commit lock (every write numbered so
    /// far is applied, and has raised its memtable's [`Memtable::seq_range`]).
    ///
    /// Sound because a flush publishes its segment before it drops the memtable
    /// ([`Table::flush_frozen_locked`]), and the drop needs the memtable lock held
    /// here: while the segments are `segments`, every memtable holding a write after
    /// `seq` is in the list read.
    pub(crate) fn unwritten_since(&self, key: &[u8], seq: u64, segments: &Arc<View>) -> bool {
        let h = key_hash(key);
        let m = self.mem.read();
        if !Arc::ptr_eq(&self.set.view(), segments) {
            return false;
        }
        let mems = || std::iter::once(&*m.active).chain(m.frozen.iter().map(|f| &**f));
        // A cell with a TTL may have expired since the view without any write: only
        // the value check can tell.
        if may_expire(mems(), segments) {
            return false;
        }
        // Nothing at all written to the table since: no key to look up.
        if mems().all(|mt| mt.seq_range().is_none_or(|(_, hi)| hi <= seq)) {
            return true;
        }
        mems().all(|mt| {
            mt.newest_seq_hashed(key, h).is_none_or(|s| s <= seq)
                && (!mt.has_ranges()
                    || mt.range_cover(key, ReadAt::Newest) == mt.range_cover(key, ReadAt::Seq(seq)))
        })
    }

    /// The winner among the cells `memtables` hold for `key` (whose [`key_hash`] is
    /// `h`). A memtable whose key filter rules the key out is not searched.
    #[inline]
    pub(super) fn best_of<'a>(
        memtables: impl Iterator<Item = &'a Memtable>,
        key: &[u8],
        h: u64,
        at: ReadAt<'_>,
    ) -> Option<SharedCell> {
        let mut best: Option<SharedCell> = None;
        let mut cover = None;
        for m in memtables {
            if m.has_ranges() {
                cover = cover.max(m.range_cover(key, at));
            }
            if let Some(c) = m.get_shared_hashed(key, h, at) {
                if best.as_ref().is_none_or(|b| {
                    cmp_versions(
                        (c.ts, c.tombstone, c.expires, &c.value),
                        (b.ts, b.tombstone, b.expires, &b.value),
                    )
                    .is_gt()
                }) {
                    best = Some(c);
                }
            }
        }
        shadow(&mut best, cover);
        best
    }

    /// The point read (invariant 4): the winner of `best` (from the memtables, read
    /// before `view`, invariant 2) and the cells of `key` (whose [`key_hash`] is `h`) in
    /// `view`'s segments, handed to `f` (`None` if no source holds the key). `f` runs
    /// exactly once. `best` is shadowed in place by the segments' range tombstones and
    /// left there, so a caller whose `f` chose the memtables' cell ([`Place::Memtable`])
    /// takes its value from it afterwards: the cell is not moved through the reads (a
    /// short value is held in it).
    ///
    /// Segments whose key range (`min_key`..=`max_key`) leaves the key out are skipped
    /// first; every other segment's filter is tested before any index work (issue 19):
    /// their lines are loaded together, and only the segments they leave are searched,
    /// newest first.
    /// A segment cell that beats everything read so far is final when no later segment
    /// left may hold a cell as new (their `max_ts` are all below its timestamp): `f`
    /// then runs on the bytes where the reader found them (the map, or its scratch
    /// buffer), inside the segment read, with nothing copied. That is every hit of a
    /// fully compacted table, and of a table whose older segments are older in time.
    /// Otherwise the cell is copied and the search goes on.
    #[inline]
    pub(super) fn resolve<R>(
        view: &View,
        key: &[u8],
        h: u64,
        best: &mut Option<SharedCell>,
        f: impl FnOnce(Option<Winner<'_>>) -> R,
    ) -> Result<R> {
        let mut f = Some(f);
        // Range tombstones of the segments, as a point tombstone (`ranges.rs`).
        shadow(best, view_cover(view, key));
        let best = &*best;
        if let ([s], None) = (&view.segments[..], &best) {
            // The common case, a fully compacted table whose memtables hold nothing of
            // the key: the one segment's cell, if any, wins. (A path of its own: through
            // the loop below, a warm hit measured some 10% slower in
            // `benches/table_get.rs`.)
            let found = s.get_hashed(key, h, |r| {
                f.take().map(|f| {
                    f(Some(Winner {
                        value: r.value,
                        ts: r.ts,
                        tombstone: r.tombstone,
                        expires: r.expires,
                        origin: Origin::Segment(0),
                    }))
                })
            })?;
            if let Some(Some(r)) = found {
                return Ok(r);
            }
        } else if let Some(r) = Self::resolve_segments(view, key, h, best, &mut f)? {
            return Ok(r);
        }
        let Some(f) = f else {
            unreachable!("`f` is taken only by a segment read that then returns its result");
        };
        Ok(f(best.as_ref().map(|b| Winner {
            value: &b.value,
            ts: b.ts,
            tombstone: b.tombstone,
            expires: b.expires,
            origin: Origin::Memtable,
        })))
    }

    /// [`Table::resolve`] over several segments (or one, with a memtable cell): the
    /// filters first, then the segments they leave. Returns `f`'s result if it ran on a
    /// segment cell; otherwise `best`, the memtables' cell, won.
    ///
    /// A segment cell that leads but may lose to a later segment's is copied into this
    /// thread's lead buffer ([`Lead`]), not into a new allocation: a warm `get_with`
    /// allocates nothing even where segments overlap in time (a compaction's output of
    /// old segments, cells written with old timestamps).
    #[inline]
    fn resolve_segments<R, F: FnOnce(Option<Winner<'_>>) -> R>(
        view: &View,
        key: &[u8],
        h: u64,
        best: &Option<SharedCell>,
        f: &mut Option<F>,
    ) -> Result<Option<R>> {
        let segments = &view.segments;
        if key.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        // Bit i: segment i may hold the key. Segments past the 64th are always searched.
        // A segment whose key range leaves the key out is ruled out before its filter
        // is touched: under leveled compaction that is all but one segment per level.
        // So is one whose cells are all older than the memtables' cell of the key, which
        // none of them could beat (the loop below skips it too): a get of a key
        // rewritten since the last flush touches no segment's filter.
        // The view holds every segment's span (as key prefixes) and `max_ts` in one
        // array, so this loop reaches into no segment it rules out.
        let mut maybe = u64::MAX;
        let by_range = key_range_skip();
        let newer = best.as_ref().map(|b| b.ts);
        let p = key_prefix(key);
        for (i, s) in segments.iter().enumerate() {
            let out = by_range && view.leaves_out(i, key, p);
            if i < 64 && (out || newer.is_some_and(|t| view.max_ts(i) < t)) {
                maybe &= !(1 << i);
            } else {
                // The block the key would be in, beside the filter's line: the segment
                // holding the key then waits for neither after the filters answer.
                s.prefetch_filter(h);
                s.prefetch_get(key, h);
            }
        }
        for (i, s) in segments.iter().enumerate().take(64) {
            if maybe >> i & 1 == 1 && !s.may_contain_hash(h) {
                maybe &= !(1 << i);
            }
        }
        let may_hold = |i: usize| i >= 64 || maybe >> i & 1 == 1;
        let mut lead = Lead::default();
        for (i, s) in segments.iter().enumerate() {
            let best_ts = lead.cell.map(|c| c.0).or(best.as_ref().map(|b| b.ts));
            if !may_hold(i) || best_ts.is_some_and(|t| view.max_ts(i) < t) {
                continue;
            }
            let mut later = i + 1..segments.len();
            let done = s.get_hashed(key, h, |r| {
                let so_far = match lead.cell {
                    Some((ts, tombstone, expires)) => Some((ts, tombstone, expires, &lead.buf[..])),
                    None => best
                        .as_ref()
                        .map(|b| (b.ts, b.tombstone, b.expires, &b.value[..])),
                };
                if let Some(v) = so_far {
                    if !cmp_versions((r.ts, r.tombstone, r.expires, r.value), v).is_gt() {
                        return None;
                    }
                }
                if later.all(|j| !may_hold(j) || view.max_ts(j) < r.ts) {
                    if let Some(f) = f.take() {
                        return Some(f(Some(Winner {
                            value: r.value,
                            ts: r.ts,
                            tombstone: r.tombstone,
                            expires: r.expires,
                            origin: Origin::Segment(i),
                        })));
                    }
                }
                lead.set(r.value, (r.ts, r.tombstone, r.expires));
                None
            })?;
            if let Some(Some(r)) = done {
                return Ok(Some(r));
            }
        }
        let Some((ts, tombstone, expires)) = lead.cell else {
            return Ok(None);
        };
        let Some(f) = f.take() else {
            unreachable!("`f` is taken only by a segment read that then returns its result");
        };
        Ok(Some(f(Some(Winner {
            value: &lead.buf,
            ts,
            tombstone,
            expires,
            origin: Origin::Copied,
        }))))
    }
}

/// Whether point reads skip segments by key range (`testing` feature: benches measure
/// the skip against its absence, [`set_key_range_skip`]).
#[cfg(feature = "testing")]
static KEY_RANGE_SKIP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

#[cfg(feature = "testing")]
#[inline(always)]
fn key_range_skip() -> bool {
    KEY_RANGE_SKIP.load(Ordering::Relaxed)
}

#[cfg(not(feature = "testing"))]
#[inline(always)]
fn key_range_skip() -> bool {
    true
}

/// Turn the point reads' skip of segments by key range on (the default) or off, for
/// every table of the process (`testing` feature: `benches/compaction_amp.rs`
/// measures what it saves).
#[cfg(feature = "testing")]
pub fn set_key_range_skip(on: bool) {
    KEY_RANGE_SKIP.store(on, Ordering::Relaxed);
}

thread_local! {
    static LEAD: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Lead buffers larger than this are freed after use rather than kept by the thread.
const LEAD_KEEP: usize = 1 << 20;

/// A point read's leading segment cell, copied into this thread's lead buffer (taken
/// at the first copy, given back on drop, so a warm read allocates nothing; a read
/// nested inside `f` gets a buffer of its own).
#[derive(Default)]
struct Lead {
    buf: Vec<u8>,
    /// `(ts, tombstone, expires)` of the cell whose value is `buf`.
    cell: Option<(u64, bool, u64)>,
    taken: bool,
}

impl Lead {
    fn set(&mut self, value: &[u8], cell: (u64, bool, u64)) {
        if !self.taken {
            self.buf = LEAD.with(|c| c.take());
            self.taken = true;
        }
        self.buf.clear();
        self.buf.extend_from_slice(value);
        self.cell = Some(cell);
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if self.taken && self.buf.capacity() <= LEAD_KEEP {
            let buf = std::mem::take(&mut self.buf);
            LEAD.with(|c| c.set(buf));
        }
    }
}

/// The winning cell of a point read, borrowed from where it was found.
pub(super) struct Winner<'a> {
    pub(super) value: &'a [u8],
    pub(super) ts: u64,
    pub(super) tombstone: bool,
    pub(super) expires: u64,
    origin: Origin,
}

impl Winner<'_> {
    /// Whether the cell reads as absent: a tombstone, or expired at `now()` (asked
    /// only for an expiring cell).
    #[inline(always)]
    pub(super) fn is_dead(&self, now: impl FnOnce() -> u64) -> bool {
        is_dead(self.tombstone, self.expires, now)
    }

    /// Where the live value can be held as a [`Value`] (`None` for a tombstone or a
    /// cell expired at `now()`), `view` being the view the read went through: shared or
    /// in place, copied only from a scratch buffer.
    pub(super) fn place(&self, view: &View, now: impl FnOnce() -> u64) -> Option<Place> {
        (!self.is_dead(now)).then(|| match self.origin {
            Origin::Memtable => Place::Memtable,
            Origin::Segment(i) => Value::place(view, i, self.value),
            Origin::Copied => Place::Shared(Arc::from(self.value)),
        })
    }
}

/// Where a point read's winning value lives.
enum Origin {
    /// The memtables' cell the read was given (`best`).
    Memtable,
    /// Segment `i` of the view read, in place (mapped, or the reader's scratch buffer).
    Segment(usize),
    /// A segment's cell copied into the thread's lead buffer ([`Lead`]).
    Copied,
}
