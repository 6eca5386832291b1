//! Waiting a little without sleeping, for the write path's short waits (an earlier
//! write still applying, a write turn ending): a futex sleep costs a wake-up and its
//! scheduling delay, often longer than the wait itself.

/// Wait a little for `done` without sleeping: spin, then give the CPU to others (a
/// writer that was descheduled) a few times. True once `done`.
pub(crate) fn brief_wait(done: impl Fn() -> bool) -> bool {
    brief_try(|| done().then_some(())).is_some()
}

/// Try `attempt` for a little while without sleeping, as [`brief_wait`] waits: its
/// first `Some`, or `None` if every try failed (the caller then blocks). A memtable's
/// ordered map is taken this way (`memtable/mod.rs`): its lock is held for a map
/// insert, a fraction of a microsecond, and a put that parked on it waited for the
/// wake-up instead. Single puts from 4 threads on 2 vCPUs (`segstore-peers --ycsb
/// --phases P`): parking at once, p99 53.5 µs in both of two runs (381,600 and 394,600
/// puts/s); spinning first, 8.8 to 43.6 µs in four runs, median 14.4 (377,500 to
/// 459,000 puts/s).
pub(crate) fn brief_try<T>(mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..SPINS {
        if let Some(t) = attempt() {
            return Some(t);
        }
        std::hint::spin_loop();
    }
    for _ in 0..YIELDS {
        if let Some(t) = attempt() {
            return Some(t);
        }
        std::thread::yield_now();
    }
    attempt()
}

/// About a microsecond of spinning: an earlier write still applying usually finishes
/// within it.
const SPINS: usize = 256;
/// Then a few yields, for a writer that lost its CPU.
const YIELDS: usize = 8;
