//! Memtables and read views under racing threads.
//!
//! 1. Two writers apply the same keys to one memtable in different orders, among them
//!    keys its point index leaves to the ordered map (more keys of one home slot than
//!    its window) and keys past the 24 inline bytes, while two readers check that every
//!    cell a writer has returned from is found, at least as new, by a point read and by
//!    a scan. Afterwards each key holds its newest cell, once.
//! 2. A hot key overwritten thousands of times, past the versions a node keeps before
//!    it thins them (`THIN_AT`), by one writer and then by two (whose applies land out
//!    of sequence order on the key's node), while read views are held open, several at
//!    once, and memtables are frozen and flushed beneath them: a view reads one cell
//!    for its whole life, no older than what was acknowledged or read before it was
//!    taken; plain reads never go back.
//!
//! What the others leave out: `src/table/memtable/tests.rs` races writers with an
//! index large enough for every key, overwriters with readers of one key, and checks
//! registered reads and thinning single-threaded; `tests/table_concurrency.rs` and
//! `tests/read_views.rs` race writers, readers, flushes and compactions over many keys,
//! with views dropped at once. Here views stay open across the thinning of the key
//! they read, and the index's overflow is raced.
//!
//! Threads wait on counters and barriers, never on sleeps: the writers wait half way
//! until the readers and viewers have checked something, so the checks run while
//! writes land, however the threads are scheduled.

#[path = "../common/mod.rs"]
mod common;
mod hot_key;
mod one_writer;
mod race;
mod two_writers;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counts a thread out when it ends, by returning or by a failed assertion, so that a
/// thread waiting for it stops waiting.
pub(crate) struct Gone<'a>(&'a AtomicUsize);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Wait until `count` reaches `n`, or a thread of the `gone` counter has ended.
pub(crate) fn wait_for(count: &AtomicU64, n: u64, gone: &AtomicUsize) {
    while count.load(Ordering::SeqCst) < n && gone.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
}

/// Every cell a racing writer has applied is found, at least as new, through the point
/// index or the ordered map and through a scan; at the end each key once, at its newest.
#[test]
fn racing_new_keys_are_found_once_applied_through_index_and_map() {
    race::run();
}

/// One writer of a hot key: a view reads one number for its life, between the writes
/// acknowledged around its taking; gets never go back; the last writes survive a reopen.
#[test]
fn views_stay_fixed_and_reads_monotonic_under_a_hot_key_thinned_and_flushed() {
    one_writer::run();
}

/// Two writers of a hot key: a view's cell never changes and is no older than a get
/// finished before the view was taken; gets' timestamps never go back.
#[test]
fn views_stay_fixed_under_two_writers_of_a_hot_key() {
    two_writers::run();
}
