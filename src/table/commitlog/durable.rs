//! Durability a caller can wait on: the highest sequence number an fsync covers, a
//! blocking wait for one, and callbacks run once one is durable.
//!
//! Callbacks are kept by sequence number in the log's state and run by the log's own
//! notifier thread (`segstore-commitlog-notify`, started by the first
//! [`CommitLog::on_durable`]), never by the caller nor under the log's lock. In
//! `periodic` mode a waiting callback makes that thread fsync at once (one fsync for
//! every callback queued meanwhile: group commit without blocking any writer); in
//! `batch` and `group` modes every append fsyncs before it returns, so the thread only
//! runs callbacks as the appends' fsyncs publish their numbers.
//!
//! Every callback runs exactly once: with `Ok(())` after an fsync that covers its
//! number, or with the error that makes that impossible: [`Error::Poisoned`] after a
//! failed write or fsync, [`Error::Closed`] when the log is dropped without a final
//! fsync. [`CommitLog::close`] fsyncs first, so callbacks of appended records get
//! `Ok(())` at a clean close. A callback that panics is caught and logged; the others
//! still run.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::{CommitLog, CommitLogSync, Shared, State};
use crate::error::{Error, Result};

/// What [`CommitLog::on_durable`] runs: the outcome for the number it waited for.
pub type DurableCallback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

/// Callbacks waiting for their numbers to become durable.
#[derive(Default)]
pub(super) struct Waiting {
    by_seq: BTreeMap<u64, Vec<DurableCallback>>,
}

impl Waiting {
    /// Take the callbacks whose numbers are at most `seq`.
    fn take_through(&mut self, seq: u64) -> Vec<DurableCallback> {
        let later = self.by_seq.split_off(&seq.saturating_add(1));
        let ready = std::mem::replace(&mut self.by_seq, later);
        ready.into_values().flatten().collect()
    }

    fn take_all(&mut self) -> Vec<DurableCallback> {
        std::mem::take(&mut self.by_seq)
            .into_values()
            .flatten()
            .collect()
    }

    fn highest(&self) -> Option<u64> {
        self.by_seq.keys().next_back().copied()
    }
}

impl CommitLog {
    /// The highest sequence number covered by a successful fsync: every record up to it
    /// survives power loss.
    pub fn durable_seq(&self) -> u64 {
        self.shared.state.lock().synced_seq
    }

    /// The highest sequence number handed to the OS (survives a crash of the process,
    /// not necessarily power loss).
    pub fn written_seq(&self) -> u64 {
        self.shared.state.lock().written_seq
    }

    /// Block until record `seq` is durable, fsyncing now if no fsync covering it is in
    /// flight (in every mode: under `periodic` this does not wait for the period).
    /// [`Error::InvalidArgument`] for a number not handed out yet; [`Error::Poisoned`]
    /// after a failed write or fsync.
    pub fn wait_durable(&self, seq: u64) -> Result<()> {
        let s = &*self.shared;
        let mut st = s.state.lock();
        check_handed_out(&st, seq)?;
        s.sync_through(&mut st, seq, None)
    }

    /// Run `f` on the log's notifier thread once record `seq` is durable (see the module
    /// docs for the outcomes). Returns at once; [`Error::InvalidArgument`] for a number
    /// not handed out yet (then `f` is dropped without running), and
    /// [`Error::ReadOnly`] on a log opened read-only. `f` must not close the log.
    pub fn on_durable(&self, seq: u64, f: impl FnOnce(Result<()>) + Send + 'static) -> Result<()> {
        let s = &*self.shared;
        {
            let mut st = s.state.lock();
            if st.active.file.is_none() {
                return Err(Error::ReadOnly);
            }
            check_handed_out(&st, seq)?;
            st.waiting.by_seq.entry(seq).or_default().push(Box::new(f));
            s.synced.notify_all();
        }
        self.start_notifier()
    }

    fn start_notifier(&self) -> Result<()> {
        let mut slot = self.notifier.lock();
        if slot.is_some() {
            return Ok(());
        }
        let s = Arc::clone(&self.shared);
        let h = std::thread::Builder::new()
            .name("segstore-commitlog-notify".into())
            .spawn(move || s.notify_loop())
            .map_err(|e| Error::io("spawn notifier thread", &self.shared.dir, e))?;
        *slot = Some(h);
        Ok(())
    }

    /// Join the notifier thread (after `closed` is set), unless this is it: a callback
    /// that closes the log must not wait for itself.
    pub(super) fn join_notifier(&self) {
        let h = self.notifier.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

fn check_handed_out(st: &State, seq: u64) -> Result<()> {
    if seq >= st.next_seq {
        return Err(Error::InvalidArgument(format!(
            "sequence number {seq} has not been written (the next append gets {})",
            st.next_seq
        )));
    }
    Ok(())
}

impl Shared {
    /// The notifier thread: run callbacks as their numbers become durable, fsync for
    /// them under `periodic`, and settle every one at close or poisoning.
    fn notify_loop(&self) {
        let mut st = self.state.lock();
        loop {
            let (ready, outcome) = settle(&mut st);
            if !ready.is_empty() {
                MutexGuard::unlocked(&mut st, || run_all(ready, outcome));
                continue;
            }
            if st.closed {
                return;
            }
            let periodic = matches!(self.config.sync, CommitLogSync::Periodic { .. });
            match st.waiting.highest() {
                Some(seq) if periodic && !st.leader => {
                    // Errors poison the log: the next round settles with them.
                    let _ = self.sync_through(&mut st, seq, None);
                }
                _ => self.synced.wait(&mut st),
            }
        }
    }
}

/// What a batch of callbacks is told.
#[derive(Clone)]
enum Outcome {
    Durable,
    Poisoned(String),
    Closed,
}

impl Outcome {
    fn result(&self) -> Result<()> {
        match self {
            Outcome::Durable => Ok(()),
            Outcome::Poisoned(p) => Err(Error::Poisoned(p.clone())),
            Outcome::Closed => Err(Error::Closed),
        }
    }
}

/// The callbacks to run now and the outcome they get: those covered by an fsync are
/// durable; once the log is poisoned or closed, every other one gets its error.
fn settle(st: &mut State) -> (Vec<DurableCallback>, Outcome) {
    let covered = st.waiting.take_through(st.synced_seq);
    if !covered.is_empty() {
        return (covered, Outcome::Durable);
    }
    if let Some(p) = &st.poisoned {
        return (st.waiting.take_all(), Outcome::Poisoned(p.clone()));
    }
    if st.closed {
        return (st.waiting.take_all(), Outcome::Closed);
    }
    (Vec::new(), Outcome::Durable)
}

fn run_all(ready: Vec<DurableCallback>, outcome: Outcome) {
    for f in ready {
        let arg = outcome.result();
        if catch_unwind(AssertUnwindSafe(|| f(arg))).is_err() {
            tracing::error!("an on_durable callback panicked (the others still run)");
        }
    }
}
