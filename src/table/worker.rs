//! The background threads of a store's tables: one runs flushes, a small pool
//! (`Config::compaction_threads`) runs compactions, each lane with its own queue, so a
//! flush never waits behind a merge and one table's long merge does not hold up the
//! compactions of others (a table's own compactions are one at a time: its compaction
//! lock). A table is queued at most once per lane (its `flush_queued` and
//! `compaction_queued` flags).
//!
//! Stopping (close, drop of the store) empties the queues, wakes compactions waiting
//! on the rate limit ([`Pool::pace`] returns `Closed`, the merge is abandoned and its
//! outputs discarded) and joins the threads.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::lsm::Round;
use super::tables::Context;
use crate::error::{Error, Result};

/// Which queue a job is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Flushes of full memtables.
    Flush,
    /// Rounds of a table's compaction policy.
    Compaction,
}

#[derive(Default)]
struct State {
    flushes: VecDeque<String>,
    compactions: VecDeque<String>,
    /// Threads running a job now.
    busy: usize,
    stop: bool,
}

impl State {
    fn queue(&mut self, lane: Lane) -> &mut VecDeque<String> {
        match lane {
            Lane::Flush => &mut self.flushes,
            Lane::Compaction => &mut self.compactions,
        }
    }
}

/// The queues and the signals of the background threads.
#[derive(Default)]
pub(crate) struct Pool {
    state: Mutex<State>,
    flush_cv: Condvar,
    compaction_cv: Condvar,
    idle_cv: Condvar,
    /// Woken by [`Pool::stop`]: compactions waiting on the rate limit.
    pace_cv: Condvar,
}

impl Pool {
    fn cv(&self, lane: Lane) -> &Condvar {
        match lane {
            Lane::Flush => &self.flush_cv,
            Lane::Compaction => &self.compaction_cv,
        }
    }

    /// Queue table `name` on `lane` (nothing once stopping).
    pub(crate) fn push(&self, lane: Lane, name: String) {
        let mut s = self.state.lock();
        if !s.stop {
            s.queue(lane).push_back(name);
            self.cv(lane).notify_one();
        }
    }

    /// The next table to work on in `lane`, waiting for one; `None` once stopping.
    fn next(&self, lane: Lane, finished: bool) -> Option<String> {
        let mut s = self.state.lock();
        if finished {
            s.busy -= 1;
            self.idle_cv.notify_all();
        }
        loop {
            if s.stop {
                return None;
            }
            if let Some(name) = s.queue(lane).pop_front() {
                s.busy += 1;
                return Some(name);
            }
            self.cv(lane).wait(&mut s);
        }
    }

    /// Stopping: no new job starts.
    pub(crate) fn is_stopping(&self) -> bool {
        self.state.lock().stop
    }

    /// Wait until nothing is queued or running (tests, tools).
    pub(crate) fn wait_idle(&self) {
        let mut s = self.state.lock();
        while (s.busy > 0 || !s.flushes.is_empty() || !s.compactions.is_empty()) && !s.stop {
            self.idle_cv.wait(&mut s);
        }
    }

    /// Stop: empty the queues and wake every thread and every paced compaction.
    pub(crate) fn stop(&self) {
        let mut s = self.state.lock();
        s.stop = true;
        s.flushes.clear();
        s.compactions.clear();
        for cv in [
            &self.flush_cv,
            &self.compaction_cv,
            &self.idle_cv,
            &self.pace_cv,
        ] {
            cv.notify_all();
        }
    }

    /// Wait `d` (a compaction keeping to its rate limit); [`Error::Closed`] at once if
    /// the store is stopping, or once it stops meanwhile.
    pub(crate) fn pace(&self, d: Duration) -> Result<()> {
        let until = Instant::now() + d;
        let mut s = self.state.lock();
        while !s.stop {
            if self.pace_cv.wait_until(&mut s, until).timed_out() {
                return Ok(());
            }
        }
        Err(Error::Closed)
    }
}

/// Start the flush thread and `compaction_threads` compaction threads.
pub(crate) fn spawn(
    ctx: &Arc<Context>,
    compaction_threads: usize,
    dir: &Path,
) -> Result<Vec<JoinHandle<()>>> {
    let mut handles = Vec::with_capacity(1 + compaction_threads);
    let lanes = std::iter::once(Lane::Flush).chain((0..compaction_threads).map(|_| Lane::Compaction));
    for (i, lane) in lanes.enumerate() {
        let c = Arc::clone(ctx);
        let name = match lane {
            Lane::Flush => "segstore-flush".to_string(),
            Lane::Compaction => format!("segstore-compact-{i}"),
        };
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&c, lane));
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                ctx.pool.stop();
                for h in handles {
                    let _ = h.join();
                }
                return Err(Error::io("spawn worker", dir, e));
            }
        }
    }
    Ok(handles)
}

fn run(ctx: &Context, lane: Lane) {
    let mut finished = false;
    while let Some(name) = ctx.pool.next(lane, finished) {
        finished = true;
        let Some(t) = ctx.table(&name) else { continue };
        match lane {
            Lane::Flush => {
                t.flush_queued.store(false, Ordering::Release);
                match t.flush_memtables(false).and_then(|_| ctx.checkpoint()) {
                    Ok(()) => ctx.schedule_compaction(&t),
                    Err(e) => {
                        tracing::error!(table = %name, error = %e, "background flush failed; writers waiting for it get the error, the commit log keeps the data, and the next flush retries");
                        t.flush_failed(e);
                    }
                }
            }
            Lane::Compaction => {
                t.compaction_queued.store(false, Ordering::Release);
                while !ctx.pool.is_stopping() {
                    match t.compact_once() {
                        Ok(Round::Merged) => continue,
                        Ok(Round::Nothing) if t.compaction_rerun() => continue,
                        Ok(Round::Nothing | Round::Busy) => break,
                        Err(Error::Closed) => break,
                        Err(e) => {
                            tracing::error!(table = %name, error = %e, "background compaction failed");
                            break;
                        }
                    }
                }
            }
        }
    }
}
