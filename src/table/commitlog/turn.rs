//! The write turn: how numbered records reach the OS. A record is numbered and sealed
//! under the log's lock; the write system call runs with the lock released, by one
//! thread at a time, for several records at once when writers queue.
//!
//! A writer that finds nobody writing and nothing queued takes the turn, releases the
//! lock, writes its own record, takes the lock back, publishes `written` and wakes the
//! queue. A writer that finds a write in flight appends its sealed record to the queue
//! and waits: until `written` covers its number (acknowledged), the log refuses writes
//! (its record was dropped unwritten), or nobody is writing; then it takes the turn
//! itself and writes the whole queue (its own record, those before it and those behind)
//! in one call. A writer that finds the queue non-empty and nobody writing joins it and
//! takes the turn at once. RocksDB's write thread groups writers the same way.
//!
//! Before this, each append wrote its record while holding the lock: with four writers
//! on two CPUs a writer descheduled inside `write` held up every other one, and each
//! record cost its own system call (perf, issue 19 item 2).
//!
//! `loom` checks the protocol (`loom_model` below, in `.ci/run`).
//!
//! # Invariants
//! 1. At most one thread writes at a time (`writing`), and what it writes is either its
//!    own record while the queue is empty or the queue's whole contents: the file holds
//!    records in number order, each once (commit log invariant 1).
//! 2. `written` only grows, and only to the last number of a write that succeeded:
//!    every number at or below it is in the OS, so an acknowledgement that waits for it
//!    survives a crash of the process.
//! 3. After a failed write nothing more is written: the queue is dropped and its
//!    writers see the refusal (commit log invariant 3).
//! 4. A writer waits only while another thread writes, and whoever ends a turn wakes
//!    every waiter under the lock, so a queue left behind always has a waiter that will
//!    take the turn: no record waits for a write nobody will make.

/// The queue of records numbered but not yet written (in the log's locked state).
#[derive(Debug, Default)]
pub(super) struct Queue {
    /// Sealed records, in number order.
    pending: Vec<u8>,
    /// The number of the last record in `pending`.
    last: u64,
    /// The buffer swapped in while a batch is written (keeps its capacity).
    spare: Vec<u8>,
    /// A thread is writing with the lock released.
    writing: bool,
}

impl Queue {
    /// Nobody writing and nothing queued: what a roll and a close wait for.
    pub(super) fn idle(&self) -> bool {
        !self.writing && self.pending.is_empty()
    }
}

/// The log's locked state as the turn sees it. Every method but `write_unlocked` and
/// `wait` runs with the lock held; those two release it and take it back.
pub(super) trait Turn {
    type Error;
    fn queue(&mut self) -> &mut Queue;
    /// The highest number handed to the OS.
    fn written(&self) -> u64;
    fn set_written(&mut self, seq: u64);
    /// Whether the log refuses writes (it is poisoned).
    fn refused(&self) -> bool;
    /// Write `bytes` at the end of the active file with the lock released.
    fn write_unlocked(&mut self, bytes: &[u8]) -> Result<(), Self::Error>;
    /// Poison the log after a failed write.
    fn fail(&mut self, e: &Self::Error);
    /// Wait for the end of a turn (or a poisoning) with the lock released.
    fn wait(&mut self);
    /// Wake every thread waiting in `wait`.
    fn wake_all(&mut self);
}

/// How a record's write ended.
#[derive(Debug)]
pub(super) enum Outcome<E> {
    /// It is in the OS.
    Written,
    /// The write that carried it failed with this error (the log is now poisoned).
    Failed(E),
    /// The log refused it after another thread's write or fsync failed; never written.
    Refused,
}

/// Hand record `seq`, sealed as `bytes` and numbered under the lock just now (the lock
/// still held), to the OS. Returns with the lock held.
pub(super) fn write<T: Turn>(t: &mut T, seq: u64, bytes: &[u8]) -> Outcome<T::Error> {
    let q = t.queue();
    if q.idle() {
        q.writing = true;
        let r = t.write_unlocked(bytes);
        return end_turn(t, r, seq);
    }
    q.pending.extend_from_slice(bytes);
    q.last = seq;
    loop {
        if t.written() >= seq {
            return Outcome::Written;
        }
        if t.refused() {
            return Outcome::Refused;
        }
        if !t.queue().writing {
            // The queue holds this record: nothing but a turn removes it.
            return write_queue(t);
        }
        t.wait();
    }
}

/// Wait for a write in flight and write whatever is queued, so that every number
/// handed out is written or refused. Returns with the lock held.
pub(super) fn drain<T: Turn>(t: &mut T) {
    loop {
        let q = t.queue();
        if q.writing {
            t.wait();
        } else if q.pending.is_empty() {
            return;
        } else {
            let _ = write_queue(t);
        }
    }
}

/// Take the turn and write the whole queue in one call.
fn write_queue<T: Turn>(t: &mut T) -> Outcome<T::Error> {
    if t.refused() {
        t.queue().pending.clear();
        return Outcome::Refused;
    }
    let q = t.queue();
    let mut batch = std::mem::take(&mut q.spare);
    std::mem::swap(&mut batch, &mut q.pending);
    let last = q.last;
    q.writing = true;
    let r = t.write_unlocked(&batch);
    batch.clear();
    t.queue().spare = batch;
    end_turn(t, r, last)
}

fn end_turn<T: Turn>(t: &mut T, r: Result<(), T::Error>, last: u64) -> Outcome<T::Error> {
    let out = match r {
        Ok(()) => {
            t.set_written(last);
            Outcome::Written
        }
        Err(e) => {
            t.fail(&e);
            t.queue().pending.clear();
            Outcome::Failed(e)
        }
    };
    t.queue().writing = false;
    t.wake_all();
    out
}

#[cfg(all(test, segstore_loom))]
mod loom_model;
