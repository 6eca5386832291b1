//! Waiting a little without sleeping, for the write path's short waits (an earlier
//! write still applying, a write turn ending): a futex sleep costs a wake-up and its
//! scheduling delay, often longer than the wait itself.

/// Wait a little for `done` without sleeping: spin, then give the CPU to others (a
/// writer that was descheduled) a few times. True once `done`.
pub(crate) fn brief_wait(done: impl Fn() -> bool) -> bool {
    for _ in 0..SPINS {
        if done() {
            return true;
        }
        std::hint::spin_loop();
    }
    for _ in 0..YIELDS {
        if done() {
            return true;
        }
        std::thread::yield_now();
    }
    done()
}

/// About a microsecond of spinning: an earlier write still applying usually finishes
/// within it.
const SPINS: usize = 256;
/// Then a few yields, for a writer that lost its CPU.
const YIELDS: usize = 8;
