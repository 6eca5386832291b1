//! [`HazardCell`]: a shared `Arc<T>` that readers borrow without a locked instruction
//! or a reference count, and that a writer replaces without waiting for them.
//!
//! What it is for: a table's current view of segments is read by every get, and
//! replaced by flushes and compactions only. A read lock (even one sharded per thread)
//! costs every get two locked instructions, and a get that hands out a borrowed value
//! had to clone the view (two more, on a cache line every core shares) so that the
//! caller's closure ran outside the lock.
//!
//! How (hazard pointers with an asymmetric barrier, as in folly's `hazptr`):
//!
//! - Every thread owns a [`Record`] of [`SLOTS`] slots, found through a thread-local;
//!   records are never freed, and a thread that exits hands its record to the next
//!   thread that needs one.
//! - A reader publishes the pointer it loaded in a slot of its own, with a plain store,
//!   then loads the cell again: if the value changed, it publishes the new one and
//!   tries again. While the slot holds the pointer, the value is not dropped.
//! - A writer swaps the new pointer in and *retires* the old one (adds it to a global
//!   list); then, once it holds no lock, it reclaims: runs a barrier on every CPU of
//!   the process (`membarrier(2)` on Linux) and drops every retired value that no slot
//!   holds. A writer never waits for a reader (only for a drop another thread's
//!   reclaim has started, so the writer sees its own old value gone on return).
//! - A reader that ends its read of a value no longer current (so retired), or that
//!   published a stale value on its way to the current one, runs the same
//!   reclamation: the last reader of a replaced value drops it as it ends (which is
//!   what deferred deletion needs: a compacted-away segment goes when its last reader
//!   finishes, not at some later collection). Readers of the current value only clear
//!   their slot.
//!
//! Why that is enough (the barrier stands in for a fence in every reader): after the
//! barrier, each reader's slot store is either visible to the scan (it came before the
//! barrier on that CPU), or the reader's second load comes after the barrier, so it
//! sees the swap and moves to the new value. Likewise a reader's clearing store is
//! either seen by the scan (the value is dropped then) or followed by its load of the
//! cell, which then sees the swap (the reader reclaims).
//!
//! Readers may run any code while protected, the caller's too: nothing waits for them
//! (a value retired meanwhile lives until they finish), a read nested in a read takes
//! another slot, and a replace inside a read of the same cell retires the value that
//! read still uses.
//!
//! Where `membarrier` is missing (another OS, an old kernel, a sandbox, or
//! `SEGSTORE_MEMBARRIER=0` in the environment) every reader issues a full fence instead
//! (one locked instruction: classic hazard pointers). If it fails after it worked (the
//! kernel out of memory, a seccomp filter installed since), reclamation drops nothing
//! until it works again: values are kept, never freed early.
//!
//! Assumed by the readers' check: a value is current in one cell at most, and once
//! replaced never becomes current again (`ViewCell` builds a new `Arc` for every view). A thread with every slot in use
//! (reads nested [`SLOTS`] deep) or with its thread-locals already torn down takes a
//! reference count under a read lock instead.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU8, AtomicUsize};
use std::sync::{Arc, Mutex, Once, PoisonError};

use parking_lot::RwLock;

use super::sys;

/// Reads one thread may have in progress at once (of any cells): a read nested
/// deeper takes the reference-counted fallback.
pub const SLOTS: usize = 4;

/// One thread's hazard slots. Slots are written by their owner only and read by
/// reclaimers; `depth` is the owner's alone (plain loads and stores). Aligned so that
/// no two threads' records share a cache line (or the adjacent-line prefetch pair):
/// every read stores to its record.
#[repr(align(128))]
struct Record {
    slots: [AtomicPtr<()>; SLOTS],
    /// Slots in use: slot `depth` is the next free one.
    depth: AtomicUsize,
    /// Some live thread owns this record.
    owned: AtomicBool,
}

/// Every record ever made. Reclaimers scan it; a thread's first read adds to it.
static RECORDS: Mutex<Vec<&'static Record>> = Mutex::new(Vec::new());

/// The calling thread's claim on a record.
struct Local {
    rec: &'static Record,
}

thread_local! {
    static LOCAL: Local = Local::claim();
}

impl Local {
    fn claim() -> Local {
        let mut all = RECORDS.lock().unwrap_or_else(PoisonError::into_inner);
        let free = all.iter().copied().find(|r| {
            r.owned
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
        });
        let rec = free.unwrap_or_else(|| {
            let r: &'static Record = Box::leak(Box::new(Record {
                slots: Default::default(),
                depth: AtomicUsize::new(0),
                owned: AtomicBool::new(true),
            }));
            all.push(r);
            r
        });
        Local { rec }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // No read of this thread is in progress: each holds a slot guard only within
        // `HazardCell::with`, which a thread-local destructor cannot interrupt.
        for s in &self.rec.slots {
            s.store(ptr::null_mut(), Release);
        }
        self.rec.depth.store(0, Relaxed);
        self.rec.owned.store(false, Release);
    }
}

/// Which barrier readers use: not yet known (a full fence), the asymmetric one
/// (a compiler fence; reclaimers run `membarrier`), or a full fence.
const UNKNOWN: u8 = 0;
const ASYMMETRIC: u8 = 1;
const SYMMETRIC: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);
static MODE_INIT: Once = Once::new();

/// Decide the mode once (registering for `membarrier` where there is one); every cell
/// does this before its first read, so a reader that sees `ASYMMETRIC` knows every
/// reclaimer runs the process-wide barrier.
fn mode() -> u8 {
    MODE_INIT.call_once(|| {
        let off = std::env::var_os("SEGSTORE_MEMBARRIER").is_some_and(|v| v == "0");
        let m = if !off && sys::process_barrier_register() {
            ASYMMETRIC
        } else {
            SYMMETRIC
        };
        MODE.store(m, Release);
    });
    MODE.load(Acquire)
}

/// The reader's half: orders its slot store before its next load.
#[inline(always)]
fn light_barrier() {
    if MODE.load(Relaxed) == ASYMMETRIC {
        compiler_fence(SeqCst);
    } else {
        fence(SeqCst);
    }
}

/// The reclaimer's half: after the retirements, before scanning the slots. False if
/// the process-wide barrier failed (the kernel refused one after accepting the
/// registration: out of memory, a seccomp filter installed since): then a slot store
/// may not be visible yet, and nothing may be dropped this time.
fn heavy_barrier() -> bool {
    fence(SeqCst);
    let ok = mode() != ASYMMETRIC || sys::process_barrier();
    fence(SeqCst);
    if !ok {
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Relaxed) {
            tracing::warn!("membarrier(2) failed: replaced views are kept until it works again");
        }
    }
    ok
}

/// A value swapped out of a cell that a slot may still hold: the cell's reference,
/// how to drop it, and its cell's count of values retired and not yet dropped. Owns
/// the reference: dropping the entry drops it (also when another entry's drop panics
/// in `reclaim`).
struct Retired {
    ptr: *mut (),
    drop: unsafe fn(*mut ()),
    outstanding: Arc<AtomicUsize>,
}

// SAFETY: a retired value is an `Arc<T>` of a `HazardCell<T>`, which requires `T: Send +
// Sync`; it is dropped once, by whichever thread reclaims it.
unsafe impl Send for Retired {}

impl Drop for Retired {
    fn drop(&mut self) {
        /// Counts the value down once its drop has finished, or unwound.
        struct Done<'a>(&'a AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Release);
            }
        }
        let _done = Done(&self.outstanding);
        // SAFETY: `ptr` is a cell's own reference from `Arc::into_raw`, which this entry
        // alone owns since the swap that retired it (each value is retired once: a
        // cell's value is swapped out once), and entries are dropped only by `reclaim`
        // once no slot holds `ptr`.
        unsafe { (self.drop)(self.ptr) };
    }
}

/// Drops the `Arc<T>` reference behind `p`.
///
/// # Safety
/// `p` came from `Arc::<T>::into_raw` and that reference is dropped only here.
unsafe fn drop_arc<T>(p: *mut ()) {
    // SAFETY: by this function's contract.
    drop(unsafe { Arc::from_raw(p.cast_const().cast::<T>()) });
}

/// Values retired and not yet dropped.
static RETIRED: Mutex<Vec<Retired>> = Mutex::new(Vec::new());
/// `RETIRED.len()`, readable without the lock: a read that unwinds checks it.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Drop every retired value no slot holds. A writer calls it after
/// [`HazardCell::replace`], at a point where it holds no lock that dropping a value
/// (unmapping and deleting segments, for a view) could need.
pub fn reclaim() {
    let free = {
        let mut retired = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
        if retired.is_empty() {
            return;
        }
        if !heavy_barrier() {
            return;
        }
        let records: Vec<&'static Record> = RECORDS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // Acquire: a slot seen cleared (or moved on) carries the reader's accesses.
        let held: Vec<*mut ()> = records
            .iter()
            .flat_map(|r| r.slots.iter().map(|s| s.load(Acquire)))
            .filter(|p| !p.is_null())
            .collect();
        let (keep, free): (Vec<Retired>, Vec<Retired>) =
            retired.drain(..).partition(|r| held.contains(&r.ptr));
        *retired = keep;
        PENDING.store(retired.len(), SeqCst);
        free
    };
    // Outside the lock: dropping a value may read (or replace) other cells. No slot
    // held these after the barrier, and no reader can publish them again and pass
    // validation: they are no cell's value any more.
    drop(free);
}

/// A slot in use by the current thread; freed on drop (also on unwinding).
struct SlotGuard {
    rec: &'static Record,
    i: usize,
}

impl SlotGuard {
    /// The next free slot of this thread, if it has one.
    #[inline]
    fn take() -> Option<SlotGuard> {
        let rec = LOCAL.try_with(|l| l.rec).ok()?;
        let i = rec.depth.load(Relaxed);
        if i >= SLOTS {
            return None;
        }
        rec.depth.store(i + 1, Relaxed);
        Some(SlotGuard { rec, i })
    }

    /// Load `cur` and publish it in the slot until the value published is still the
    /// current one: from then on, nobody drops it until the guard does. Also whether
    /// an earlier, stale value was published first (a reclaim may have kept that one
    /// for this slot's sake).
    #[inline(always)]
    fn protect<T>(&self, cur: &AtomicPtr<T>) -> (*mut T, bool) {
        let slot = &self.rec.slots[self.i];
        let mut p = cur.load(Relaxed);
        let mut stale = false;
        loop {
            // Release: a reclaimer that reads a later value of this slot with Acquire
            // also sees everything this thread did under the previous one.
            slot.store(p.cast(), Release);
            light_barrier();
            let q = cur.load(Acquire);
            if q == p {
                return (p, stale);
            }
            p = q;
            stale = true;
        }
    }
}

impl SlotGuard {
    /// End the read of `cur`'s value `p`. If `p` is no longer the cell's value, it was
    /// retired, maybe while this slot kept it: reclaim (this may be its last reader);
    /// likewise if `protect` published a stale value first (`stale`). Readers of a
    /// value still current do no more than clear the slot, so a long read elsewhere,
    /// which keeps something retired, costs the other readers nothing.
    #[inline(always)]
    fn release<T: Send + Sync + 'static>(self, cell: &HazardCell<T>, p: *mut T, stale: bool) {
        self.rec.slots[self.i].store(ptr::null_mut(), Release);
        self.rec.depth.store(self.i, Relaxed);
        // Orders the clearing store before the load below; with the reclaimer's
        // barrier: either its scan sees the slot cleared, or this load sees the swap
        // that came before its barrier.
        light_barrier();
        let retired = stale || cell.cur.load(Relaxed) != p;
        std::mem::forget(self);
        if retired {
            reclaim_cold(cell);
        }
    }
}

impl Drop for SlotGuard {
    /// Unwinding out of a read (`release` ends the others): clear the slot, and reclaim
    /// if anything is retired at all.
    fn drop(&mut self) {
        self.rec.slots[self.i].store(ptr::null_mut(), Release);
        self.rec.depth.store(self.i, Relaxed);
        light_barrier();
        if PENDING.load(Relaxed) != 0 {
            reclaim();
        }
    }
}

/// A read ended on a retired value: reclaim, as its last reader maybe.
#[cold]
#[inline(never)]
fn reclaim_cold<T: Send + Sync + 'static>(cell: &HazardCell<T>) {
    #[cfg(test)]
    tests::RECLAIMS_HERE.with(|n| n.set(n.get() + 1));
    cell.reclaim_own();
}

/// A shared `Arc<T>`: reads borrow it (no reference count, no locked instruction where
/// `membarrier` works), [`HazardCell::replace`] swaps it (see the module docs).
pub struct HazardCell<T> {
    /// From `Arc::into_raw`: the cell's own reference.
    cur: AtomicPtr<T>,
    /// Readers without a slot take a reference count under its read side.
    fallback: RwLock<()>,
    /// This cell's values retired and not yet dropped.
    outstanding: Arc<AtomicUsize>,
    _owns: PhantomData<Arc<T>>,
}

impl<T> std::fmt::Debug for HazardCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HazardCell").finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> HazardCell<T> {
    pub fn new(value: Arc<T>) -> HazardCell<T> {
        mode();
        HazardCell {
            cur: AtomicPtr::new(Arc::into_raw(value).cast_mut()),
            fallback: RwLock::new(()),
            outstanding: Arc::new(AtomicUsize::new(0)),
            _owns: PhantomData,
        }
    }

    /// Run `f` on the current value, borrowed. `f` may run any code (nothing waits for
    /// it); a value replaced meanwhile lives until `f` returns.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        let guard = SlotGuard::take();
        let borrowed;
        let counted;
        let (mut p, mut stale) = (ptr::null_mut(), false);
        // One call of `f` (a call in each arm kept the lookup from inlining: a miss of
        // `benches/table_get.rs` went from 34 to 43 ns).
        let value = match &guard {
            Some(g) => {
                (p, stale) = g.protect(&self.cur);
                // SAFETY: `p` came from `Arc::into_raw` (in `new` or `replace`) and is
                // published in this thread's slot, and the cell still held it at the
                // load after the slot store. Once swapped out it is retired, and a
                // retired value is dropped only after a reclaimer's barrier and a scan
                // that finds it in no slot. The barrier makes this slot store visible
                // to that scan, or this thread's load come after the swap: a SeqCst
                // fence here, or where `membarrier` works only a compiler fence here
                // and the reclaimer's `membarrier`, which runs a full barrier on every
                // CPU of the process. So `p` lives until the guard is released, after
                // `f`. ManuallyDrop: the borrow owns no count of its own (`f` may
                // clone it, which counts).
                borrowed = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
                &*borrowed
            }
            None => {
                counted = self.load_counted();
                &counted
            }
        };
        let r = f(value);
        if let Some(g) = guard {
            g.release(self, p, stale);
        }
        r
    }

    /// The current value, with a reference count of its own.
    #[inline]
    pub fn load(&self) -> Arc<T> {
        self.with(Arc::clone)
    }

    /// The fallback read: a reference count taken under the read lock.
    #[cold]
    fn load_counted(&self) -> Arc<T> {
        let _shared = self.fallback.read();
        let p = self.cur.load(Acquire);
        // SAFETY: `p` came from `Arc::into_raw` and was the cell's value while the read
        // lock is held; a writer that swapped it out takes the write lock before it
        // retires the cell's reference, so the count is at least one here, and the one
        // taken here is owned by the `Arc` returned.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }

    /// Put `new` in the cell and return the old value (a reference of the caller's).
    /// Never waits for readers. The cell's own reference to the old value is retired:
    /// dropped by the next [`reclaim`] that finds no read borrowing it, which the
    /// caller runs once it holds no lock (or by the last such read as it ends).
    pub fn replace(&self, new: Arc<T>) -> Arc<T> {
        let old = self.cur.swap(Arc::into_raw(new).cast_mut(), SeqCst);
        // Fallback readers that loaded `old` have counted it once they let go.
        drop(self.fallback.write());
        // SAFETY: `old` came from `Arc::into_raw` and the cell's reference to it is
        // still alive (it is retired below, not dropped), so the count is at least
        // one; the reference taken here is the caller's.
        let caller = unsafe {
            Arc::increment_strong_count(old.cast_const());
            Arc::from_raw(old.cast_const())
        };
        {
            let mut retired = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
            self.outstanding.fetch_add(1, Relaxed);
            retired.push(Retired {
                ptr: old.cast(),
                drop: drop_arc::<T>,
                outstanding: Arc::clone(&self.outstanding),
            });
            PENDING.store(retired.len(), SeqCst);
        }
        caller
    }

    /// [`reclaim`], then wait for drops of this cell's values that another thread's
    /// reclaim took on and has not finished: on return, each value this cell retired is
    /// either dropped or still borrowed by a read (and in the list). So the last
    /// holder of a replaced view, the writer or its last reader, sees it gone (and its
    /// segments deleted) when this returns, not some microseconds later.
    pub fn reclaim_own(&self) {
        reclaim();
        loop {
            let kept = RETIRED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|r| Arc::ptr_eq(&r.outstanding, &self.outstanding))
                .count();
            // Entries leave the list before they are dropped and are counted down
            // after: more outstanding than listed means a drop is still running.
            if self.outstanding.load(Acquire) <= kept {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Reclaim until every value this cell retired is dropped, or `patience` has
    /// passed; whether they all are. Returns at once when the calling thread is
    /// inside a read itself (it could be waiting for its own read). For a close: reads
    /// still running when a table closes end within `patience`, or their views are
    /// reported as leaked.
    pub fn settle(&self, patience: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            reclaim();
            if self.outstanding.load(Acquire) == 0 {
                return true;
            }
            let reading = LOCAL
                .try_with(|l| l.rec.depth.load(Relaxed) > 0)
                .unwrap_or(false);
            if reading || start.elapsed() >= patience {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

impl<T> Drop for HazardCell<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no read of this cell is in progress, and the pointer is
        // the cell's own reference from `Arc::into_raw` (never retired: it is current).
        drop(unsafe { Arc::from_raw(self.cur.load(Acquire).cast_const()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::cell::Cell;
    use std::sync::Barrier;
    use std::thread;

    thread_local! {
        /// Reclamations run by readers ending a read, on this thread.
        pub(super) static RECLAIMS_HERE: Cell<u64> = const { Cell::new(0) };
    }

    /// Counts live values; poisons its fields when dropped, so a reader that still
    /// reads one after its drop sees the poison (or garbage), not the pattern.
    struct Canary {
        a: AtomicU64,
        b: AtomicU64,
        live: Arc<AtomicUsize>,
    }

    const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

    /// Whether every value `cell` retired has been dropped, waiting (up to 5 s) for a
    /// drop in progress on another thread (a concurrent test's reclaim may be dropping
    /// it) but reclaiming nothing itself: a value nobody reclaims stays counted.
    fn drained<T: Send + Sync + 'static>(cell: &HazardCell<T>) -> bool {
        let t0 = std::time::Instant::now();
        while cell.outstanding.load(Acquire) != 0 {
            if t0.elapsed().as_secs() >= 5 {
                return false;
            }
            thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    impl Canary {
        fn new(n: u64, live: &Arc<AtomicUsize>) -> Arc<Canary> {
            live.fetch_add(1, SeqCst);
            Arc::new(Canary {
                a: AtomicU64::new(n),
                b: AtomicU64::new(!n),
                live: Arc::clone(live),
            })
        }

        fn intact(&self) -> bool {
            let a = self.a.load(Relaxed);
            a != POISON && self.b.load(Relaxed) == !a
        }
    }

    impl Drop for Canary {
        fn drop(&mut self) {
            self.a.store(POISON, Relaxed);
            self.b.store(POISON, Relaxed);
            self.live.fetch_sub(1, SeqCst);
        }
    }

    /// The fence-free mode is on exactly where the process barrier works (Linux with
    /// `membarrier`), unless the environment turns it off; so a CI run on Linux tests
    /// the mode users get, and the `SEGSTORE_MEMBARRIER=0` run the fenced one.
    #[test]
    fn the_mode_follows_the_kernel_and_the_environment() {
        let off = std::env::var_os("SEGSTORE_MEMBARRIER").is_some_and(|v| v == "0");
        let m = mode();
        if off || !cfg!(target_os = "linux") {
            assert_eq!(m, SYMMETRIC);
        } else {
            assert_eq!(m == ASYMMETRIC, sys::process_barrier(), "mode {m}");
        }
    }

    #[test]
    fn readers_never_see_a_dropped_value_while_a_writer_replaces_it() {
        const READERS: usize = 3;
        let live = Arc::new(AtomicUsize::new(0));
        let cell = Arc::new(HazardCell::new(Canary::new(0, &live)));
        let stop = Arc::new(AtomicBool::new(false));
        // Reads done by each reader (its own counter, stored as it goes).
        let done: Arc<Vec<AtomicU64>> = Arc::new((0..READERS).map(|_| AtomicU64::new(0)).collect());
        let readers: Vec<_> = (0..READERS)
            .map(|t| {
                let (cell, stop, done) = (Arc::clone(&cell), Arc::clone(&stop), Arc::clone(&done));
                thread::spawn(move || {
                    let (mut reads, mut bad, mut last) = (0u64, 0u64, 0u64);
                    while !stop.load(Relaxed) {
                        cell.with(|c| {
                            // Hold the borrow across a little work (more for some
                            // readers), so replacements land during reads.
                            for _ in 0..(t * 16) {
                                std::hint::spin_loop();
                            }
                            if !c.intact() {
                                bad += 1;
                            }
                            let n = c.a.load(Relaxed);
                            // Values only grow: a reader never goes back in time.
                            if n < last {
                                bad += 1;
                            }
                            last = n;
                        });
                        reads += 1;
                        done[t].store(reads, Relaxed);
                    }
                    bad
                })
            })
            .collect();
        // At least 20,000 replacements, and on until every reader has read 20,000
        // times (with more threads than cores, a reader may start late).
        let mut n = 0u64;
        while n < 20_000 || done.iter().any(|d| d.load(Relaxed) < 20_000) {
            n += 1;
            let old = cell.replace(Canary::new(n, &live));
            assert!(old.intact());
            assert_eq!(old.a.load(Relaxed), n - 1);
            drop(old);
            cell.reclaim_own();
            if n % 256 == 0 {
                thread::yield_now();
            }
        }
        stop.store(true, Relaxed);
        for r in readers {
            assert_eq!(r.join().unwrap(), 0, "a reader saw a dropped or older value");
        }
        assert!(drained(&cell), "a replaced value outlived its readers");
        assert_eq!(live.load(SeqCst), 1, "every replaced value dropped, the current kept");
        drop(cell);
        assert_eq!(live.load(SeqCst), 0);
    }

    #[test]
    fn a_replaced_value_lives_until_its_last_reader_ends_and_no_longer() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = Arc::new(HazardCell::new(Canary::new(1, &live)));
        let (inside, release) = (Arc::new(Barrier::new(2)), Arc::new(AtomicBool::new(false)));
        let reader = {
            let (cell, inside, release) =
                (Arc::clone(&cell), Arc::clone(&inside), Arc::clone(&release));
            thread::spawn(move || {
                cell.with(|c| {
                    inside.wait();
                    while !release.load(Acquire) {
                        thread::yield_now();
                    }
                    c.intact() && c.a.load(Relaxed) == 1
                })
            })
        };
        inside.wait();
        // The writer does not wait for the reader (a thread, so a wait fails the test
        // instead of hanging it).
        let writer = {
            let (cell, live) = (Arc::clone(&cell), Arc::clone(&live));
            thread::spawn(move || {
                drop(cell.replace(Canary::new(2, &live)));
                cell.reclaim_own();
            })
        };
        let t0 = std::time::Instant::now();
        while !writer.is_finished() {
            assert!(t0.elapsed().as_secs() < 10, "replace waited for a reader");
            thread::sleep(std::time::Duration::from_millis(1));
        }
        writer.join().unwrap();
        assert_eq!(cell.load().a.load(Relaxed), 2);
        // The old value outlives its replacement and the writer's reference...
        assert_eq!(live.load(SeqCst), 2);
        release.store(true, Release);
        assert!(reader.join().unwrap(), "the reader saw its value dropped or changed");
        // ...and is dropped as its reader ends, by that reader.
        assert!(drained(&cell), "the reader left its value retired");
        assert_eq!(live.load(SeqCst), 1);
    }

    #[test]
    fn a_long_read_of_a_replaced_value_costs_readers_of_the_new_one_nothing() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = HazardCell::new(Canary::new(1, &live));
        cell.with(|old| {
            drop(cell.replace(Canary::new(2, &live)));
            // Something is retired (this read holds it) while another thread reads the
            // current value: it only clears its slot, it never reclaims.
            thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..1000 {
                        assert_eq!(cell.with(|c| c.a.load(Relaxed)), 2);
                    }
                    assert_eq!(RECLAIMS_HERE.with(Cell::get), 0);
                });
            });
            assert!(old.intact());
        });
        // This read was the old value's last: it reclaimed it as it ended.
        assert_eq!(RECLAIMS_HERE.with(Cell::get), 1);
        assert!(drained(&cell));
        assert_eq!(live.load(SeqCst), 1);
    }

    #[test]
    fn reads_nested_past_the_slots_fall_back_to_a_count() {
        let live = Arc::new(AtomicUsize::new(0));
        let cells: Vec<HazardCell<Canary>> =
            (0..SLOTS as u64 + 2).map(|n| HazardCell::new(Canary::new(n, &live))).collect();
        fn nest(cells: &[HazardCell<Canary>], depth: usize, seen: &mut Vec<u64>) {
            if let Some((first, rest)) = cells.split_first() {
                first.with(|c| {
                    assert!(c.intact());
                    // Within the slots a borrow counts nothing; past them, the fallback
                    // holds a count of its own.
                    let counts = if depth < SLOTS { 1 } else { 2 };
                    assert_eq!(Arc::strong_count(c), counts, "read at depth {depth}");
                    seen.push(c.a.load(Relaxed));
                    nest(rest, depth + 1, seen);
                });
            }
        }
        let mut seen = Vec::new();
        nest(&cells, 0, &mut seen);
        assert_eq!(seen, (0..SLOTS as u64 + 2).collect::<Vec<_>>());
        // Every slot was given back: a fresh read takes the first one again.
        LOCAL.with(|l| assert_eq!(l.rec.depth.load(Relaxed), 0));
        drop(cells);
        assert_eq!(live.load(SeqCst), 0);
    }

    #[test]
    fn a_replace_inside_a_read_of_the_same_value_keeps_it_until_the_read_ends() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = HazardCell::new(Canary::new(1, &live));
        cell.with(|c| {
            drop(cell.replace(Canary::new(2, &live)));
            cell.reclaim_own();
            // Retired, not dropped: this read still holds it.
            assert!(c.intact());
            assert_eq!(c.a.load(Relaxed), 1);
            assert_eq!(live.load(SeqCst), 2);
            cell.with(|c2| assert_eq!(c2.a.load(Relaxed), 2));
        });
        assert!(drained(&cell), "not dropped when the outer read ended");
        assert_eq!(live.load(SeqCst), 1);
    }

    #[test]
    fn a_panic_inside_a_read_gives_its_slot_back() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = HazardCell::new(Canary::new(1, &live));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cell.with(|_| panic!("inside a read"));
        }));
        assert!(r.is_err());
        LOCAL.with(|l| {
            assert_eq!(l.rec.depth.load(Relaxed), 0);
            assert!(l.rec.slots.iter().all(|s| s.load(Relaxed).is_null()));
        });
        // The abandoned read holds nothing: the replaced value goes at the next reclaim.
        drop(cell.replace(Canary::new(2, &live)));
        cell.reclaim_own();
        assert!(drained(&cell));
        assert_eq!(live.load(SeqCst), 1);
    }

    #[test]
    fn exited_threads_hand_their_records_on() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = Arc::new(HazardCell::new(Canary::new(1, &live)));
        let mut used = std::collections::HashSet::new();
        for _ in 0..50 {
            let cell = Arc::clone(&cell);
            let rec = thread::spawn(move || {
                cell.with(|c| assert!(c.intact()));
                LOCAL.with(|l| ptr::from_ref(l.rec) as usize)
            })
            .join()
            .unwrap();
            used.insert(rec);
        }
        // Threads one after another reuse the record the last one left. (Other tests'
        // threads, running meanwhile, may take some first: well under 50, not 1.)
        assert!(used.len() < 25, "{} records for 50 threads in turn", used.len());
    }
}
