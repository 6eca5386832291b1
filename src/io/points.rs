//! Pause points (`testing` feature only): named places in the code that a test can
//! watch or hold a thread at, so that a race is driven in one chosen order instead of
//! left to the scheduler.
//!
//! The code passes a point with `FileRules::point(name, path)` (an fsync passes
//! `"fsync"` with its file's path). Every arrival is recorded; a test waits for the
//! arrivals it needs with [`Points::wait_until`], and [`Points::hold`] makes the next
//! arrivals at a point (on paths containing a substring) block until
//! [`Points::release`]. Tests record their own events with [`Points::mark`], so one
//! wait can stand for "this happened, or that did".

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A recorded arrival at a point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The point's name.
    pub point: String,
    /// The path passed with it (empty for points without one).
    pub path: String,
}

#[derive(Debug)]
struct Hold {
    point: String,
    path_contains: String,
    /// Arrivals still to hold.
    remaining: u64,
    released: bool,
}

#[derive(Debug, Default)]
struct State {
    arrivals: Vec<Arrival>,
    holds: Vec<Hold>,
}

/// The pause points of one set of [`super::faults::Faults`]. See the module docs.
#[derive(Debug, Default)]
pub struct Points {
    state: Mutex<State>,
    changed: Condvar,
}

/// How long a wait may take before it is a test failure (a deadlock, not slowness: every
/// wait is for an event that the test's own steps cause).
const PATIENCE: Duration = Duration::from_secs(120);

impl Points {
    /// Record an arrival at `point` and hold the thread there while a hold matches it.
    pub(crate) fn arrive(&self, point: &str, path: &str) {
        let mut st = self.state.lock();
        st.arrivals.push(Arrival {
            point: point.to_string(),
            path: path.to_string(),
        });
        self.changed.notify_all();
        let Some(i) = st
            .holds
            .iter()
            .position(|h| h.point == point && path.contains(&h.path_contains) && h.remaining > 0)
        else {
            return;
        };
        st.holds[i].remaining -= 1;
        let deadline = Instant::now() + PATIENCE;
        while !st.holds[i].released {
            if self.changed.wait_until(&mut st, deadline).timed_out() {
                panic!("pause point {point} held for {PATIENCE:?}: the test never released it");
            }
        }
    }

    /// Hold the next `times` arrivals at `point` on paths containing `path_contains`
    /// until [`Points::release`] of the point.
    pub fn hold(&self, point: &str, path_contains: &str, times: u64) {
        self.state.lock().holds.push(Hold {
            point: point.to_string(),
            path_contains: path_contains.to_string(),
            remaining: times,
            released: false,
        });
    }

    /// Let every thread held at `point` go on, and hold no more there.
    pub fn release(&self, point: &str) {
        let mut st = self.state.lock();
        for h in st.holds.iter_mut().filter(|h| h.point == point) {
            h.released = true;
            h.remaining = 0;
        }
        self.changed.notify_all();
    }

    /// Let the threads held at `point` go on, keeping the holds there that still have
    /// arrivals to hold (so a thread let go can be held again at its next arrival, by a
    /// [`Points::hold`] made before this).
    pub fn release_held(&self, point: &str) {
        let mut st = self.state.lock();
        for h in st
            .holds
            .iter_mut()
            .filter(|h| h.point == point && h.remaining == 0)
        {
            h.released = true;
        }
        self.changed.notify_all();
    }

    /// Record a test's own event (an arrival at `point` with no path).
    pub fn mark(&self, point: &str) {
        self.arrive(point, "");
    }

    /// Arrivals at `point` so far.
    pub fn count(&self, point: &str) -> usize {
        self.state
            .lock()
            .arrivals
            .iter()
            .filter(|a| a.point == point)
            .count()
    }

    /// Wait until `done` holds for the arrivals so far; returns them. Panics after two
    /// minutes (a test whose event never comes is deadlocked).
    pub fn wait_until(&self, mut done: impl FnMut(&[Arrival]) -> bool) -> Vec<Arrival> {
        let mut st = self.state.lock();
        let deadline = Instant::now() + PATIENCE;
        while !done(&st.arrivals) {
            if self.changed.wait_until(&mut st, deadline).timed_out() {
                panic!(
                    "waited {PATIENCE:?} for pause points; arrivals: {:?}",
                    st.arrivals
                );
            }
        }
        st.arrivals.clone()
    }

    /// Wait until `point` has had `n` arrivals.
    pub fn wait_for(&self, point: &str, n: usize) {
        self.wait_until(|a| a.iter().filter(|a| a.point == point).count() >= n);
    }
}

/// Did any of `arrivals` reach `point`?
pub fn reached(arrivals: &[Arrival], point: &str) -> bool {
    arrivals.iter().any(|a| a.point == point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_held_arrival_waits_for_its_release_and_others_pass() {
        let p = Arc::new(Points::default());
        p.hold("fsync", "log-1", 1);
        p.arrive("fsync", "dir/log-2"); // another path passes
        let held = {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                p.arrive("fsync", "dir/log-1");
                p.mark("after");
            })
        };
        p.wait_for("fsync", 2);
        assert_eq!(p.count("after"), 0, "held until released");
        p.release("fsync");
        held.join().unwrap();
        assert_eq!(p.count("after"), 1);
        p.arrive("fsync", "dir/log-1"); // the hold was for one arrival
        let all = p.wait_until(|a| reached(a, "after"));
        assert_eq!(all.len(), 4);
    }
}
