//! The store's budget for side runs (`memory.side_run_mb`): the bytes every table's
//! runs hold together, building ones included.
//!
//! Each table's `side_run_bytes` bounds its own run, so without a budget across them a
//! store of many tables scanned under writes could hold that much per table (64 MiB
//! each by default). A build first takes what it may use from the store's budget (its
//! table's bound, or what the store has left if less: [`RunBudget::reserve_up_to`]),
//! builds within it, and keeps only what the finished run charges
//! ([`RunCharge::keep`]); the run holds its [`RunCharge`] and gives it back when it is
//! dropped (after the last scan reading it). So the runs held and being built never
//! charge more than the budget, and a run that does not fit in what is left is not
//! built: its table's scans read the segments, as they do without a run.
//!
//! Admission is one compare-and-swap on one count, as `io::data_budget`'s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

/// Bytes side runs may hold in a store, and what they hold: see the module docs. One
/// per store.
#[derive(Debug)]
pub(crate) struct RunBudget {
    limit: u64,
    held: AtomicU64,
    refused: AtomicU64,
}

/// Bytes one run (or its build) holds of a [`RunBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct RunCharge {
    budget: Arc<RunBudget>,
    bytes: u64,
}

/// A store's side run budget, for stats ([`crate::StoreStats::side_runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SideRunBudgetStats {
    /// Bytes every table's side runs may hold together (`memory.side_run_mb`).
    pub limit_bytes: u64,
    /// Bytes they hold now, runs being built included.
    pub held_bytes: u64,
    /// Runs not built because they did not fit in what the store had left (their
    /// table's scans read its segments instead).
    pub refused: u64,
}

impl RunBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: u64) -> RunBudget {
        RunBudget {
            limit,
            held: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Bytes all runs may hold together.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Take `want` bytes, or what is left if less (possibly none).
    pub(crate) fn reserve_up_to(self: &Arc<Self>, want: u64) -> RunCharge {
        let mut bytes = 0;
        // Never fails: the closure always returns a value.
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                bytes = want.min(self.limit.saturating_sub(held));
                Some(held + bytes)
            });
        RunCharge {
            budget: Arc::clone(self),
            bytes,
        }
    }

    /// A run was not built for want of room (counted for stats; logged the first time).
    pub(crate) fn refuse(&self, wanted: u64) {
        if self.refused.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::info!(
                wanted,
                limit = self.limit,
                held = self.held.load(Ordering::Relaxed),
                "a side run did not fit in what is left of the store's side run budget; its \
                 table's scans read its level 0 segments (logged once per store; \
                 memory.side_run_mb)"
            );
        }
    }

    /// Figures for stats.
    pub(crate) fn stats(&self) -> SideRunBudgetStats {
        SideRunBudgetStats {
            limit_bytes: self.limit,
            held_bytes: self.held.load(Ordering::Acquire),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

impl RunCharge {
    /// Bytes it holds.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keep `n` of its bytes (at most those it holds), giving the rest back.
    pub(crate) fn keep(&mut self, n: u64) {
        let give = self.bytes.saturating_sub(n);
        self.budget.held.fetch_sub(give, Ordering::AcqRel);
        self.bytes -= give;
    }
}

impl Drop for RunCharge {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Charges take what is left, keep what they are told, and give back on drop.
    #[test]
    fn charges_never_pass_the_limit_and_come_back() {
        let b = Arc::new(RunBudget::new(100));
        let mut first = b.reserve_up_to(70);
        assert_eq!(first.bytes(), 70);
        let second = b.reserve_up_to(70);
        assert_eq!(second.bytes(), 30, "only what is left");
        assert_eq!(b.reserve_up_to(1).bytes(), 0, "none left");
        first.keep(20);
        assert_eq!((first.bytes(), b.stats().held_bytes), (20, 50));
        first.keep(40); // more than it holds: keeps what it has
        assert_eq!(first.bytes(), 20);
        drop(second);
        assert_eq!(b.stats().held_bytes, 20);
        drop(first);
        assert_eq!(b.stats().held_bytes, 0);
        b.refuse(5);
        b.refuse(5);
        let s = b.stats();
        assert_eq!((s.limit_bytes, s.refused), (100, 2));
    }

    /// Threads reserving and releasing at once never hold more than the limit between
    /// them, and leave nothing held.
    #[test]
    fn concurrent_charges_stay_within_the_limit() {
        let b = Arc::new(RunBudget::new(1_000));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..10_000u64 {
                        let mut c = b.reserve_up_to(100 + i % 300);
                        assert!(b.stats().held_bytes <= 1_000);
                        c.keep(i % 150);
                    }
                });
            }
        });
        assert_eq!(b.stats().held_bytes, 0);
    }
}
