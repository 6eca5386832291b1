//! Timer resolution for the commit log's group window (CASSANDRA-9634).
//!
//! A timed wait sleeps at least until the OS's next timer tick. Linux and other Unixes
//! have high-resolution timers (a wait wakes within the timer slack, 50 µs by default),
//! so there is nothing to do there. Windows ticks every 15.6 ms by default, which would
//! stretch a 1 ms group window to 15.6 ms; [`FineTimer`] asks it for 1 ms ticks
//! (`timeBeginPeriod(1)`) while such a window is configured, and gives them back
//! (`timeEndPeriod(1)`) when dropped. Since Windows 10 2004 the request affects only
//! this process. The Windows side is **not compiled or tested here** (see the README).

use std::time::Duration;

use super::sys;

/// Windows' default timer tick (64 Hz).
pub(crate) const WINDOWS_DEFAULT_TICK: Duration = Duration::from_micros(15_625);

/// A 1 ms timer resolution, held while alive where the OS has a coarse default tick.
#[derive(Debug)]
pub(crate) struct FineTimer {
    granted: bool,
}

impl FineTimer {
    /// Ask for 1 ms ticks if `window` is shorter than Windows' default tick; `None` for
    /// longer windows, which need nothing.
    pub(crate) fn for_window(window: Duration) -> Option<FineTimer> {
        if window >= WINDOWS_DEFAULT_TICK {
            return None;
        }
        let granted = sys::begin_fine_timer();
        if cfg!(windows) && !granted {
            tracing::warn!(
                ?window,
                "timeBeginPeriod(1) refused: group commit windows round up to the timer \
                 tick (15.6 ms by default)"
            );
        }
        Some(FineTimer { granted })
    }

    /// The OS raised its timer resolution for us (only ever on Windows).
    pub(crate) fn granted(&self) -> bool {
        self.granted
    }
}

impl Drop for FineTimer {
    fn drop(&mut self) {
        if self.granted {
            sys::end_fine_timer();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_windows_below_its_tick_asks_for_fine_timers() {
        assert!(FineTimer::for_window(WINDOWS_DEFAULT_TICK).is_none());
        assert!(FineTimer::for_window(Duration::from_millis(100)).is_none());
        let t = FineTimer::for_window(Duration::from_micros(100)).unwrap();
        assert_eq!(t.granted(), cfg!(windows));
    }
}
