//! The mapping budget: a share of `vm.max_map_count` that segment maps may use.
//!
//! Linux refuses new mappings (and `munmap`s that would split one) once a process holds
//! `vm.max_map_count` VMAs (65530 by default), and the process's allocator, thread stacks
//! and libraries need some of them. [`MapBudget`] admits a segment's maps only while our
//! count (file maps in the [`registry`], plus anonymous index copies) stays within the
//! budget. Past it, like LevelDB's mmap limiter, `auto` opens the segment with standard
//! access (positional reads) and logs one warning per budget; `mmap` and
//! `mmap_index_only`, which asked for maps explicitly, fail with
//! `Error::MapBudgetExhausted`.
//!
//! Admission is atomic: [`MapBudget::admit`] counts the maps in use plus the maps other
//! opens were admitted for and have not made yet (their [`Reservation`]s, process-wide
//! like the registry), and reserves its own, under one lock. A reservation is released
//! when the open that holds it ends, after its maps are registered (or when it fails),
//! so concurrent opens never take more than the budget between them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "testing")]
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::registry::registry;
use super::residency::anonymous_copies;
use crate::config::{AccessMode, DiskAccessMode, ResolvedModes, DEFAULT_MAP_BUDGET_PERCENT};
use crate::error::{Error, Result};

/// Linux's default `vm.max_map_count`, used when the real one cannot be read.
pub const DEFAULT_MAX_MAP_COUNT: usize = 65530;

/// Maps admitted by some budget and not made yet: held by [`Reservation`]s. Taken
/// around each admission's check and reservation; process-wide, as the maps in use are.
static RESERVED: Mutex<usize> = Mutex::new(0);

/// A mapping budget. Share one per store (`Arc<MapBudget>`): it remembers whether it has
/// warned.
#[derive(Debug)]
pub struct MapBudget {
    limit: usize,
    max_map_count: Option<usize>,
    share_percent: Option<u8>,
    warned: AtomicBool,
    fallbacks: AtomicU64,
    #[cfg(feature = "testing")]
    decided: Mutex<Option<DecisionHook>>,
}

/// Run after each admission is decided, before it returns (`testing` feature only).
#[cfg(feature = "testing")]
#[derive(Clone)]
struct DecisionHook(Arc<dyn Fn() + Send + Sync>);

#[cfg(feature = "testing")]
impl std::fmt::Debug for DecisionHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DecisionHook")
    }
}

/// The decision for one segment.
#[derive(Debug)]
pub struct Admission {
    /// The modes to open with (the requested ones, or standard past the budget).
    pub modes: ResolvedModes,
    /// True if `auto` fell back to standard access because of the budget.
    pub fell_back: bool,
    /// The maps admitted, counted against every budget until the open has made and
    /// registered them: hold it until then, and drop it after (or on failure).
    pub reservation: Reservation,
}

/// Maps admitted and not made yet; released on drop.
#[derive(Debug)]
#[must_use = "dropping the reservation before the maps are registered lets other opens take them"]
pub struct Reservation {
    maps: usize,
}

impl Reservation {
    /// Maps reserved.
    pub fn maps(&self) -> usize {
        self.maps
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.maps > 0 {
            *RESERVED.lock() -= self.maps;
        }
    }
}

/// A budget's figures, for stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BudgetStats {
    /// Maps allowed.
    pub limit: usize,
    /// Maps in use now (file maps + anonymous copies).
    pub in_use: usize,
    /// `vm.max_map_count`, if read from the system.
    pub max_map_count: Option<usize>,
    /// Segments opened with standard access because the budget was spent.
    pub fallbacks: u64,
}

/// `/proc/sys/vm/max_map_count`, if readable.
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

impl MapBudget {
    /// `share_percent` (1 to 100; clamped) of the system's `vm.max_map_count`, or of
    /// Linux's default where the system does not say (other OSes).
    pub fn from_system(share_percent: u8) -> MapBudget {
        let share = share_percent.clamp(1, 100);
        let max = max_map_count();
        let limit = max.unwrap_or(DEFAULT_MAX_MAP_COUNT) * share as usize / 100;
        MapBudget {
            limit,
            max_map_count: max,
            share_percent: Some(share),
            warned: AtomicBool::new(false),
            fallbacks: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            decided: Mutex::new(None),
        }
    }

    /// A budget of exactly `limit` maps (tests use tiny ones).
    pub fn with_limit(limit: usize) -> MapBudget {
        MapBudget {
            limit,
            max_map_count: max_map_count(),
            share_percent: None,
            warned: AtomicBool::new(false),
            fallbacks: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            decided: Mutex::new(None),
        }
    }

    /// Run `f` after each admission of this budget is decided and before `admit`
    /// returns, outside its lock (`testing` feature only): a test holds opens there, in
    /// the window between the check and the maps, to show that no two admissions share
    /// the same room.
    #[cfg(feature = "testing")]
    pub fn on_decision(&self, f: impl Fn() + Send + Sync + 'static) {
        *self.decided.lock() = Some(DecisionHook(Arc::new(f)));
    }

    #[cfg(feature = "testing")]
    fn decided(&self) {
        let hook = self.decided.lock().clone();
        if let Some(h) = hook {
            (h.0)();
        }
    }

    #[cfg(not(feature = "testing"))]
    fn decided(&self) {}

    /// Maps allowed.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Maps in use in this process: file maps in the registry plus anonymous copies.
    pub fn in_use() -> usize {
        registry().stats().maps + anonymous_copies().regions
    }

    /// Figures for stats.
    pub fn stats(&self) -> BudgetStats {
        BudgetStats {
            limit: self.limit,
            in_use: Self::in_use(),
            max_map_count: self.max_map_count,
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
        }
    }

    /// Decide how a segment whose modes are `modes` may open, and reserve its maps. See
    /// the module docs.
    pub(crate) fn admit(&self, modes: ResolvedModes) -> Result<Admission> {
        let wanted = [modes.data, modes.index]
            .iter()
            .filter(|m| **m == AccessMode::Mmap)
            .count();
        let decision = {
            let mut reserved = RESERVED.lock();
            // Reserved maps being made now may already be registered too: counted twice
            // for a moment, which only errs on the safe side.
            let used = Self::in_use() + *reserved;
            if wanted == 0 || used + wanted <= self.limit {
                *reserved += wanted;
                Ok(Reservation { maps: wanted })
            } else {
                Err(used)
            }
        };
        self.decided();
        let used = match decision {
            Ok(reservation) => {
                return Ok(Admission {
                    modes,
                    fell_back: false,
                    reservation,
                })
            }
            Err(used) => used,
        };
        match modes.configured {
            DiskAccessMode::Auto => {
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        used,
                        budget = self.limit,
                        max_map_count = ?self.max_map_count,
                        share_percent = ?self.share_percent.unwrap_or(DEFAULT_MAP_BUDGET_PERCENT),
                        "mapping budget reached ({used} of {} maps): new segments are read with \
                         standard access instead of mmap (warned once; raise vm.max_map_count \
                         or map_budget_percent)",
                        self.limit
                    );
                } else {
                    tracing::debug!(
                        used,
                        budget = self.limit,
                        "mapping budget reached: standard access"
                    );
                }
                Ok(Admission {
                    modes: modes.without_mmap(),
                    fell_back: true,
                    reservation: Reservation { maps: 0 },
                })
            }
            _ => Err(Error::MapBudgetExhausted {
                used,
                budget: self.limit,
            }),
        }
    }

    /// Segments that fell back to standard access so far.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Has this budget logged its warning?
    pub fn warned(&self) -> bool {
        self.warned.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_budget_is_a_share_of_max_map_count() {
        let b = MapBudget::from_system(50);
        let max = max_map_count().unwrap_or(DEFAULT_MAX_MAP_COUNT);
        assert_eq!(b.limit(), max / 2);
        assert_eq!(MapBudget::from_system(0).limit(), max / 100);
    }

    #[test]
    fn standard_modes_need_no_budget() {
        let b = MapBudget::with_limit(0);
        let a = b.admit(DiskAccessMode::Standard.resolve()).unwrap();
        assert!(!a.fell_back);
        assert_eq!(b.fallbacks(), 0);
    }

    #[test]
    fn auto_falls_back_and_explicit_mmap_fails_past_the_budget() {
        let b = MapBudget::with_limit(0);
        let a = b.admit(DiskAccessMode::Auto.resolve()).unwrap();
        if DiskAccessMode::Auto.resolve().index == AccessMode::Mmap {
            assert!(a.fell_back);
            assert_eq!(a.modes.index, AccessMode::Standard);
            assert!(b.warned());
        }
        for m in [DiskAccessMode::Mmap, DiskAccessMode::MmapIndexOnly] {
            let e = b.admit(m.resolve()).unwrap_err();
            assert!(
                matches!(e, Error::MapBudgetExhausted { budget: 0, .. }),
                "{e}"
            );
        }
    }
}
