//! Views: the immutable set of live segments that a reader sees, replaced atomically.
//!
//! A reader borrows the current `Arc<View>` for the length of a read, or clones it (one
//! atomic increment) to keep it. Writers build a new view and swap it in; the old view,
//! and with it the handles of segments it alone held, drops when its last borrow ends
//! and its last clone lets go.
//!
//! The cell is an [`arc_swap::ArcSwap`]. A borrow ([`ArcSwap::load`], a `Guard`) writes
//! the pointer into one of its thread's debt slots instead of counting it; a swap walks
//! every thread's slots and turns each debt on the old view into a reference count
//! (`Debt::pay_all`, arc-swap 1.9's `debt/mod.rs`). So a swap never waits for readers
//! (it is lock-free), a reader may run the caller's code while it borrows the view
//! (`Table::get_with` does), and the replaced view drops as its last holder lets go:
//! the writer that swapped, or the reader whose guard ends last (deferred deletion
//! stays prompt). A thread holding more than 8 guards at once takes a full count for
//! the next ones. After a swap, `Arc::strong_count` of the old view counts every read
//! still borrowing it, which is what [`ViewCell::settle`] waits on at close.
//!
//! It replaced a home-made hazard-pointer cell (`membarrier(2)` on the swapping side),
//! which was faster per read (6 ns against 12 ns single-threaded) but whose reclamation
//! took a global mutex, issued a process-wide barrier while holding it, could spin in
//! a reader behind another thread's drop (munmap, unlink, journal write), and deadlocked
//! a drop that re-entered its own cell. Before that the cell was a
//! `crossbeam_utils::sync::ShardedLock`, under which the caller's code could not run.
//! Swaps are rare (flushes, compactions).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::chains::Chains;
use super::handle::SegmentHandle;
use crate::format::key_prefix;

/// Live segments, newest first.
#[derive(Debug, Default)]
pub struct View {
    /// Segments, newest (highest id) first.
    pub segments: Vec<SegmentHandle>,
    /// Incremented on every replacement.
    pub generation: u64,
    /// Keys within every segment's key span: from the largest smallest key to the
    /// smallest largest key (`None` if that is empty, or if a segment is empty or holds
    /// range tombstones). A scan whose start lies within it meets every segment, and
    /// every segment holds its start (size-tiered segments span the table's keys), so
    /// it need not compare its bounds with each segment's span
    /// (`table/lsm/snap.rs`, `Meeting`).
    common_span: Option<(Vec<u8>, Vec<u8>)>,
    /// Each segment's key span as prefixes, and its newest timestamp, in one array: a
    /// point read rules segments out without reaching into each one's stats.
    spans: Vec<Span>,
    /// Each segment's chain of disjoint key spans ([`Chains`]).
    chains: Chains,
}

/// A segment's smallest and largest keys' [`key_prefix`]es and its `max_ts`.
#[derive(Debug, Clone, Copy)]
struct Span {
    lo: u64,
    hi: u64,
    max_ts: u64,
}

impl View {
    /// The view of `segments`, newest (highest id) first.
    pub fn new(segments: Vec<SegmentHandle>, generation: u64) -> View {
        let common_span = common_span(&segments);
        let spans = segments
            .iter()
            .map(|h| {
                let st = h.stats();
                Span {
                    lo: key_prefix(&st.min_key),
                    hi: key_prefix(&st.max_key),
                    max_ts: st.max_ts,
                }
            })
            .collect();
        let chains = Chains::of(&segments);
        View {
            segments,
            generation,
            common_span,
            spans,
            chains,
        }
    }

    /// The segment after segment `i` in its chain of disjoint key spans
    /// ([`Chains::next`]): every key it holds is above every key `i` holds.
    pub(crate) fn next_disjoint(&self, i: usize) -> Option<usize> {
        self.chains.next(i)
    }

    /// The cells of the chain of disjoint key spans through segment `i`
    /// ([`Chains`]): a leveled table's level holds most of its cells, one of its level 0
    /// segments a few.
    pub(crate) fn chain_cells(&self, i: usize) -> u64 {
        match self.chains.weight(i) {
            Some(w) => w,
            None => self.segments[i].stats().entry_count,
        }
    }

    /// The keys every segment's span holds ([`View`]'s `common_span`).
    pub(crate) fn common_span(&self) -> Option<&(Vec<u8>, Vec<u8>)> {
        self.common_span.as_ref()
    }

    /// Whether `key` (whose [`key_prefix`] is `p`) lies outside segment `i`'s key span
    /// (`min_key..=max_key`). The prefixes settle it unless `p` equals one of them
    /// (prefixes are monotone: `key < min_key` implies `p <= lo`).
    /// The spans are those of the segments [`View::new`] was given (a table's views
    /// are read through an `Arc` and never change); a segment pushed onto the public
    /// field later has none and is compared in place.
    #[inline]
    pub(crate) fn leaves_out(&self, i: usize, key: &[u8], p: u64) -> bool {
        if let Some(s) = self.spans.get(i) {
            if p < s.lo || p > s.hi {
                return true;
            }
            if p > s.lo && p < s.hi {
                return false;
            }
        }
        let st = self.segments[i].stats();
        key < &st.min_key[..] || key > &st.max_key[..]
    }

    /// Segment `i`'s largest write timestamp (its stats' `max_ts`).
    #[inline]
    pub(crate) fn max_ts(&self, i: usize) -> u64 {
        match self.spans.get(i) {
            Some(s) => s.max_ts,
            None => self.segments[i].stats().max_ts,
        }
    }
}

/// From the largest smallest key to the smallest largest key of `segments`, if none is
/// empty or holds range tombstones and that range is not empty.
fn common_span(segments: &[SegmentHandle]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut span: Option<(&[u8], &[u8])> = None;
    for h in segments {
        let st = h.stats();
        if st.entry_count == 0 || !h.range_tombstones().is_empty() {
            return None;
        }
        let (lo, hi) = (&st.min_key[..], &st.max_key[..]);
        span = Some(match span {
            None => (lo, hi),
            Some((a, b)) => (a.max(lo), b.min(hi)),
        });
    }
    span.filter(|(a, b)| a <= b).map(|(a, b)| (a.to_vec(), b.to_vec()))
}

/// The current view (or, in tests, any value), replaced atomically.
#[derive(Debug)]
pub struct ViewCell<T = View> {
    cur: ArcSwap<T>,
}

impl Default for ViewCell {
    fn default() -> ViewCell {
        ViewCell::new(View::default())
    }
}

impl<T> ViewCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> ViewCell<T> {
        ViewCell {
            cur: ArcSwap::from_pointee(value),
        }
    }

    /// The current value, with a reference count of its own.
    #[inline]
    pub fn load(&self) -> Arc<T> {
        self.cur.load_full()
    }

    /// Run `f` on the current value, borrowed (a swap meanwhile does not wait for `f`;
    /// the value it replaces lives until `f` returns).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.cur.load())
    }

    /// Like [`ViewCell::with`], handing `f` the `Arc` itself, for a reader that may
    /// keep the value beyond `f` (a point read's mapped value) at the cost of a clone
    /// only then.
    #[inline]
    pub fn with_arc<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        f(&self.cur.load())
    }

    /// Put `value` in the cell; returns the old one, counted once for every read still
    /// borrowing it (arc-swap pays their debts in the swap). Never waits for readers.
    pub fn swap(&self, value: T) -> Arc<T> {
        self.cur.swap(Arc::new(value))
    }

    /// Wait up to `patience` for the reads still holding `old` (a value this cell
    /// replaced, as [`ViewCell::swap`] returned it) to let go, then drop it here;
    /// whether they did. If they did not, `old` is dropped by the last of them.
    ///
    /// A clone kept beyond a read counts as a read. Called inside a read of `old`
    /// itself, this waits out `patience` (the caller's own borrow is counted).
    pub fn settle(old: Arc<T>, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut pause = Duration::from_micros(20);
        // The count only falls: nobody can borrow or clone `old` from the cell again.
        while Arc::strong_count(&old) > 1 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(2));
        }
        drop(old);
        true
    }
}

impl ViewCell {
    /// Replace the view with `f(current)`; returns the old one (see
    /// [`ViewCell::swap`]). Writers are serialised by the caller (one writer per table).
    pub fn replace(&self, f: impl FnOnce(&View) -> Vec<SegmentHandle>) -> Arc<View> {
        let (segments, generation) = self.with(|old| (f(old), old.generation + 1));
        let mut segments = segments;
        segments.sort_by_key(|h| std::cmp::Reverse(h.name().id));
        self.swap(View::new(segments, generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::mpsc;
    use std::thread;

    /// Value `n` of a test cell; sets `dropped[n]` when it drops.
    #[derive(Debug)]
    struct Canary {
        n: usize,
        dropped: Arc<[AtomicBool; 8]>,
    }

    impl Drop for Canary {
        fn drop(&mut self) {
            assert!(!self.dropped[self.n].swap(true, SeqCst), "dropped twice");
        }
    }

    fn flags() -> Arc<[AtomicBool; 8]> {
        Arc::new(std::array::from_fn(|_| AtomicBool::new(false)))
    }

    /// A reader parked inside `with` on value 0 until told to end; returns what it saw.
    /// `inside` says it is parked; `go` ends its read.
    fn parked_reader(
        cell: &Arc<ViewCell<Canary>>,
    ) -> (
        mpsc::Receiver<usize>,
        mpsc::Sender<()>,
        thread::JoinHandle<(bool, bool)>,
    ) {
        let (inside_tx, inside) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let cell = Arc::clone(cell);
        let reader = thread::spawn(move || {
            let mut flag = None;
            let alive_at_end = cell.with(|v| {
                inside_tx.send(v.n).unwrap();
                go_rx.recv().unwrap();
                flag = Some((Arc::clone(&v.dropped), v.n));
                !v.dropped[v.n].load(SeqCst)
            });
            let (dropped, n) = flag.unwrap();
            (alive_at_end, dropped[n].load(SeqCst))
        });
        (inside, go, reader)
    }

    /// Invariant 9: a writer replaces the value a reader borrows, several times, while
    /// that reader is parked inside `with`: no swap waits; the values nobody borrows
    /// drop as the writer lets go of them; the borrowed one lives through the read and
    /// drops as the reader's `with` returns, on the reader's thread.
    #[test]
    fn a_writer_never_waits_for_a_reader_and_the_last_reader_drops_the_old_value() {
        let dropped = flags();
        let canary = |n| Canary {
            n,
            dropped: Arc::clone(&dropped),
        };
        let cell = Arc::new(ViewCell::new(canary(0)));
        let (inside, go, reader) = parked_reader(&cell);
        assert_eq!(inside.recv().unwrap(), 0);
        for n in 1..=5 {
            let old = cell.swap(canary(n));
            assert_eq!(old.n, n - 1);
            if n == 1 {
                // The swap paid the parked reader's debt: it is counted now.
                assert_eq!(Arc::strong_count(&old), 2);
            }
            drop(old);
            assert_eq!(dropped[n - 1].load(SeqCst), n > 1, "value {}", n - 1);
        }
        assert_eq!(cell.load().n, 5);
        go.send(()).unwrap();
        let (alive_at_end, dropped_on_return) = reader.join().unwrap();
        assert!(alive_at_end, "value 0 dropped under its reader");
        assert!(dropped_on_return, "value 0 outlived its last reader");
        assert!(!dropped[5].load(SeqCst));
    }

    /// `settle` reports a value still borrowed (zero patience), waits for its last
    /// reader to end, then drops it itself before returning.
    #[test]
    fn settle_waits_for_reads_of_the_old_value_then_drops_it() {
        let dropped = flags();
        let canary = |n| Canary {
            n,
            dropped: Arc::clone(&dropped),
        };
        let cell = Arc::new(ViewCell::new(canary(0)));
        let (inside, go, reader) = parked_reader(&cell);
        assert_eq!(inside.recv().unwrap(), 0);
        let old = cell.swap(canary(1));
        assert!(!ViewCell::settle(Arc::clone(&old), Duration::ZERO));
        assert!(!dropped[0].load(SeqCst));
        let settler = {
            let dropped = Arc::clone(&dropped);
            thread::spawn(move || {
                let all = ViewCell::settle(old, Duration::from_secs(60));
                (all, dropped[0].load(SeqCst))
            })
        };
        go.send(()).unwrap();
        let (alive_at_end, _) = reader.join().unwrap();
        assert!(alive_at_end);
        assert_eq!(settler.join().unwrap(), (true, true));
        // Nothing borrows the current value: settling it takes no patience.
        assert!(ViewCell::settle(cell.swap(canary(2)), Duration::ZERO));
        assert!(dropped[1].load(SeqCst));
    }

    /// A value whose drop loads from and swaps into its own cell, dropped by the writer
    /// and by the last reader: neither deadlocks (the hazard-slot cell this replaced
    /// waited for that very drop to finish).
    #[test]
    fn a_drop_that_reenters_its_own_cell_does_not_deadlock() {
        #[derive(Debug)]
        struct Reenter {
            n: u64,
            cell: Option<Arc<ViewCell<Reenter>>>,
        }
        impl Drop for Reenter {
            fn drop(&mut self) {
                if let Some(cell) = self.cell.take() {
                    let cur = cell.load().n;
                    assert_eq!(cell.with(|v| v.n), cur);
                    drop(cell.swap(Reenter {
                        n: self.n + 100,
                        cell: None,
                    }));
                }
            }
        }
        let plain = |n| Reenter { n, cell: None };
        let cell = Arc::new(ViewCell::new(plain(0)));
        let holding = |n| Reenter {
            n,
            cell: Some(Arc::clone(&cell)),
        };
        // Dropped by the writer.
        drop(cell.swap(holding(1)));
        drop(cell.swap(plain(2)));
        assert_eq!(cell.load().n, 101);
        // Dropped by the last reader, as its `with` ends.
        drop(cell.swap(holding(3)));
        let seen = cell.with(|v| {
            drop(cell.swap(plain(4)));
            v.n
        });
        assert_eq!(seen, 3);
        assert_eq!(cell.load().n, 103);
        // Same through `with_arc`, on another thread.
        drop(cell.swap(holding(5)));
        let c = Arc::clone(&cell);
        let seen = thread::spawn(move || {
            c.with_arc(|v| {
                drop(c.swap(Reenter { n: 6, cell: None }));
                v.n
            })
        })
        .join()
        .unwrap();
        assert_eq!(seen, 5);
        assert_eq!(cell.load().n, 105);
        assert_eq!(Arc::strong_count(&cell), 1, "no value still holds the cell");
    }
}
