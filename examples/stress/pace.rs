//! Fixed-rate mode (`--rate N/s`, cassandra-stress's `fixed=N/s`): each client thread
//! issues its operations at intended start times on a fixed schedule, and every
//! latency is measured from the operation's *intended* start, not from when it
//! actually began. A closed loop (the default mode) starts the next operation only when
//! the last one ends, so a 100 ms stall delays every operation that should have run
//! during it without timing any of them: one slow sample, and a p99 that hides the
//! stall (coordinated omission). Measured from the intended start, as wrk2 and
//! HdrHistogram's corrected recording do, the stall counts against each operation that
//! should have started during it.
//!
//! The schedule and the recording take their time from a [`Clock`], so tests drive them
//! with a simulated one.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// A run whose achieved rate is below this fraction of its target is saturated: the
/// target could not keep up with the schedule.
pub const SATURATED_BELOW: f64 = 0.95;

/// Whether `achieved` op/s fell short of `target` (see [`SATURATED_BELOW`]).
pub fn is_saturated(achieved: f64, target: f64) -> bool {
    achieved < SATURATED_BELOW * target
}

/// Time in nanoseconds since a step's start.
pub trait Clock {
    /// Now.
    fn now(&self) -> u64;
    /// Return at `t` or later (at once when `t` has passed).
    fn wait_until(&mut self, t: u64);
}

/// The real clock, from an [`Instant`].
pub struct RealClock {
    start: Instant,
}

impl RealClock {
    /// A clock whose zero is `start`.
    pub fn new(start: Instant) -> RealClock {
        RealClock { start }
    }
}

/// Sleep while the intended start is further than this away, then yield until it.
const SPIN: u64 = 200_000;

impl Clock for RealClock {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn wait_until(&mut self, t: u64) {
        loop {
            let now = self.now();
            if now >= t {
                return;
            }
            if t - now > SPIN {
                std::thread::sleep(Duration::from_nanos(t - now - SPIN / 2));
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// One thread's intended start times: operation `i` at `(i + phase) / rate`. Threads
/// get phases spread over one interval, so together they issue evenly.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    interval_ns: f64,
    phase: f64,
}

impl Schedule {
    /// Thread `tid` of `threads` sharing `total_rate` op/s (positive).
    pub fn for_thread(total_rate: f64, tid: usize, threads: usize) -> Schedule {
        let per_thread = total_rate / threads.max(1) as f64;
        Schedule {
            interval_ns: 1e9 / per_thread,
            phase: tid as f64 / threads.max(1) as f64,
        }
    }

    /// Intended start of operation `i`, ns since the step's start.
    pub fn intended(&self, i: u64) -> u64 {
        ((i as f64 + self.phase) * self.interval_ns) as u64
    }
}

/// The latency to record for an operation intended to start at `intended` that
/// completed at `done`: from the intended start (0 if it somehow ended before it).
pub fn corrected_latency(intended: u64, done: u64) -> u64 {
    done.saturating_sub(intended)
}

/// What a paced operation measured, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// From the intended start to completion (what is reported).
    pub latency: u64,
    /// From the actual start to completion (what a closed loop would report).
    pub service: u64,
}

/// Run operation `i` of `schedule`: wait for its intended start (never skipping one
/// that is late: a thread behind schedule issues back to back until it has caught
/// up), run `op`, and time it both ways.
pub fn paced<C: Clock, T>(
    clock: &mut C,
    schedule: &Schedule,
    i: u64,
    op: impl FnOnce(&mut C) -> T,
) -> (T, Timing) {
    let intended = schedule.intended(i);
    clock.wait_until(intended);
    let began = clock.now();
    let out = op(clock);
    let done = clock.now();
    let timing = Timing {
        latency: corrected_latency(intended, done),
        service: done.saturating_sub(began),
    };
    (out, timing)
}

/// Record `t` into the reported and the service-time histograms.
pub fn record(latency: &mut Histogram<u64>, service: &mut Histogram<u64>, t: Timing) {
    latency.saturating_record(t.latency.max(1));
    service.saturating_record(t.service.max(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::new_histogram;

    /// A simulated clock: waiting jumps to the time, an operation advances it.
    struct FakeClock(u64);

    impl Clock for FakeClock {
        fn now(&self) -> u64 {
            self.0
        }
        fn wait_until(&mut self, t: u64) {
            self.0 = self.0.max(t);
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn threads_share_the_rate_evenly() {
        // 4000 op/s over 4 threads: 1 ms apart per thread, offset by 0.25 ms.
        let s: Vec<Schedule> = (0..4).map(|t| Schedule::for_thread(4000.0, t, 4)).collect();
        assert_eq!(s[0].intended(0), 0);
        assert_eq!(s[0].intended(1), MS);
        assert_eq!(s[1].intended(0), MS / 4);
        assert_eq!(s[3].intended(2), 2 * MS + 3 * MS / 4);
        let mut all: Vec<u64> = s
            .iter()
            .flat_map(|s| (0..100).map(|i| s.intended(i)))
            .collect();
        all.sort_unstable();
        assert!(
            all.windows(2).all(|w| w[1] - w[0] == MS / 4),
            "evenly spaced"
        );
        assert_eq!(Schedule::for_thread(1000.0, 0, 1).intended(1000), 1000 * MS);
    }

    #[test]
    fn a_stall_counts_against_every_operation_that_should_have_started_during_it() {
        // 1000 op/s on one thread; every operation takes 10 us except the 6th, which
        // stalls for 100 intended intervals (100 ms).
        let schedule = Schedule::for_thread(1000.0, 0, 1);
        let mut clock = FakeClock(0);
        let (mut lat, mut svc) = (new_histogram(), new_histogram());
        let mut timings = Vec::new();
        for i in 0..300u64 {
            let cost = if i == 5 { 100 * MS } else { 10_000 };
            let ((), t) = paced(&mut clock, &schedule, i, |c| c.0 += cost);
            record(&mut lat, &mut svc, t);
            timings.push(t);
        }
        assert_eq!(lat.len(), 300, "no operation skipped");
        // The stalled one and the ~99 queued behind it: each late by what was left of
        // the stall when it should have started.
        for (k, t) in timings[5..105].iter().enumerate() {
            let remainder = (100 - k as u64) * MS;
            assert!(t.latency >= remainder, "op {}: {t:?}", 5 + k);
        }
        let slow = timings.iter().filter(|t| t.latency >= MS).count();
        assert!((99..=101).contains(&slow), "{slow} ops at >= 1 ms");
        // The backlog is worked off back to back, then the schedule is kept again.
        assert!(timings[250..].iter().all(|t| t.latency == 10_000));
        // Timed from the actual start (a closed loop), the stall is one sample.
        assert_eq!(timings.iter().filter(|t| t.service >= MS).count(), 1);
        assert!(svc.value_at_quantile(0.99) < MS);
        assert!(lat.value_at_quantile(0.99) >= 90 * MS);
    }

    #[test]
    fn an_operation_on_time_records_its_own_duration() {
        let schedule = Schedule::for_thread(100.0, 0, 1);
        let mut clock = FakeClock(0);
        let ((), t) = paced(&mut clock, &schedule, 3, |c| c.0 += 2 * MS);
        assert_eq!(clock.0, 32 * MS, "waited for 30 ms, then ran 2 ms");
        assert_eq!(
            t,
            Timing {
                latency: 2 * MS,
                service: 2 * MS
            }
        );
        assert_eq!(corrected_latency(10, 5), 0);
    }

    #[test]
    fn saturation_is_below_95_percent_of_the_target() {
        assert!(!is_saturated(1000.0, 1000.0));
        assert!(!is_saturated(950.0, 1000.0));
        assert!(is_saturated(949.0, 1000.0));
    }
}
