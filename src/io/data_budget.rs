//! The data map budget: how many bytes of data files `auto` may map.
//!
//! `auto` maps data files while the data it has mapped in this process stays within a
//! share (`memory.auto_data_map_percent`, default 50%) of the memory available to the
//! process ([`super::memlimit::available_memory`]: physical memory, or a lower cgroup
//! limit), and reads the rest with positional reads through the block cache. A mapped
//! get reads the record where it lies (no system call, no lock, no copy): YCSB's
//! read-heavy workloads ran 1.2x to 1.45x faster than through the block cache here.
//! Past memory the balance turns (Cassandra 5's lesson, which made `mmap_index_only`
//! its default: full mmap hurts once the hot set exceeds memory), so data that would
//! not fit is not mapped: a segment whose data file does not fit in what is left opens
//! with standard access for its whole life. This is LevelDB's mmap limiter measured in
//! bytes instead of files.
//!
//! Admission is atomic: [`DataMapBudget::admit`] adds the file's length to one
//! process-wide count under a compare-and-swap, and the [`DataReservation`] it returns
//! gives it back when dropped (with the segment reader that maps the file).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Bytes of data files mapped under `auto` in this process (every store's).
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// How many bytes of data files `auto` may map: see the module docs. One per store.
#[derive(Debug)]
pub struct DataMapBudget {
    limit: u64,
    available: Option<u64>,
    fallbacks: AtomicU64,
}

/// Bytes of one mapped data file, counted until dropped.
#[derive(Debug)]
#[must_use = "dropping the reservation releases the bytes while the file is still mapped"]
pub struct DataReservation {
    bytes: u64,
}

impl Drop for DataReservation {
    fn drop(&mut self) {
        MAPPED.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A data map budget's figures, for stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DataMapStats {
    /// Bytes `auto` may map as data in this process (0: it maps none).
    pub limit_bytes: u64,
    /// Bytes of data files `auto` has mapped now, by every store of the process.
    pub mapped_bytes: u64,
    /// Memory available to the process when the store opened (`None`: unknown, so
    /// `auto` maps no data).
    pub available_bytes: Option<u64>,
    /// Segments whose data `auto` opened with standard access because it did not fit.
    pub fallbacks: u64,
}

impl DataMapBudget {
    /// `percent` (0 to 100) of the memory available to this process; none where that
    /// is unknown.
    pub fn from_system(percent: u8) -> DataMapBudget {
        let available = super::memlimit::available_memory();
        let limit = available.map_or(0, |a| share(a, percent));
        DataMapBudget {
            limit,
            available,
            fallbacks: AtomicU64::new(0),
        }
    }

    /// A budget of exactly `limit` bytes (tests use small ones).
    pub fn with_limit(limit: u64) -> DataMapBudget {
        DataMapBudget {
            limit,
            available: None,
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Bytes `auto` may map as data.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The memory available to the process when the budget was made (`None`: unknown,
    /// or a budget [`Self::with_limit`] made).
    pub fn available(&self) -> Option<u64> {
        self.available
    }

    /// Reserve `len` bytes for a data file `auto` would map, if they fit; `None` (and
    /// one more fallback counted) if they do not.
    pub fn admit(&self, len: u64) -> Option<DataReservation> {
        let fits = MAPPED
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(len).filter(|&n| n <= self.limit)
            })
            .is_ok();
        if fits {
            return Some(DataReservation { bytes: len });
        }
        if self.fallbacks.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::info!(
                len,
                limit = self.limit,
                mapped = MAPPED.load(Ordering::Relaxed),
                "disk_access_mode auto: a data file of {len} bytes does not fit in the data \
                 map budget ({} of {} bytes mapped); it and others past the budget are read \
                 with positional reads (logged once per store; memory.auto_data_map_percent)",
                MAPPED.load(Ordering::Relaxed),
                self.limit
            );
        }
        None
    }

    /// Figures for stats.
    pub fn stats(&self) -> DataMapStats {
        DataMapStats {
            limit_bytes: self.limit,
            mapped_bytes: MAPPED.load(Ordering::Acquire),
            available_bytes: self.available,
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
        }
    }
}

/// `percent` of `bytes`, without overflow.
fn share(bytes: u64, percent: u8) -> u64 {
    (bytes as u128 * percent.min(100) as u128 / 100) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_never_overflows() {
        assert_eq!(share(u64::MAX, 100), u64::MAX);
        assert_eq!(share(u64::MAX, 200), u64::MAX);
        assert_eq!(share(1000, 50), 500);
        assert_eq!(share(1000, 0), 0);
    }

    #[test]
    fn a_zero_budget_admits_no_byte() {
        let b = DataMapBudget::with_limit(0);
        assert!(b.admit(1).is_none());
        assert_eq!(b.stats().fallbacks, 1);
        // The process-wide count may hold other tests' bytes: nothing else is certain.
    }

    #[test]
    fn a_budget_of_everything_admits_and_a_reservation_gives_its_bytes_back() {
        let b = DataMapBudget::with_limit(u64::MAX);
        // Small: the count is process-wide, and other tests open stores meanwhile.
        let r = b.admit(4096).expect("fits");
        assert!(b.stats().mapped_bytes >= 4096);
        drop(r);
        assert_eq!(b.stats().fallbacks, 0);
    }
}
