//! Appending a record: checked and encoded before the lock, numbered and sealed under
//! it, handed to the OS through the write turn ([`turn`]) with the lock released, then
//! fsynced as the sync mode asks.

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::format::{self, PreparedRecord, MAX_BODY_LEN};
use super::turn::{self, Outcome, Queue, Turn};
use super::{CommitLog, CommitLogSync, Shared, State};
use crate::error::{Error, Result};
use crate::format::record::RecordRef;
use crate::segment::validate_name;
use crate::table::spin::brief_wait;
use crate::table::cell::{validate_cell, validate_range};
use crate::table::visibility::Visibility;

impl CommitLog {
    /// Append one batch of cells for `table`, atomically at replay. Returns its sequence
    /// number once the sync mode allows acknowledging it (invariant 2).
    pub fn append(&self, table: &str, cells: &[RecordRef<'_>]) -> Result<u64> {
        self.append_parts(&[(table, cells, &[])], None)
    }

    /// Append one record holding the cells of one table or several (each table once),
    /// atomically at replay. The number is registered with `visibility` as soon as it is
    /// handed out (under the log's lock, so in order), and finished there if the append
    /// then fails.
    pub(crate) fn append_parts(
        &self,
        parts: &[format::PartRef<'_>],
        visibility: Option<&Visibility>,
    ) -> Result<u64> {
        let appended = self.append_ordered(parts, visibility, None)?;
        Ok(appended.expect("an append without clock timestamps is never refused"))
    }

    /// [`CommitLog::append_parts`] of a record whose timestamps `clock_ts` (first and
    /// last) came from the store's clock: appended only if they are above those of
    /// every such record before it, so sequence numbers and timestamps order writes
    /// alike (invariant 8). `Ok(None)`: a write that took its timestamps later was
    /// numbered first; nothing was written, and the caller takes new timestamps.
    pub(crate) fn append_ordered(
        &self,
        parts: &[format::PartRef<'_>],
        visibility: Option<&Visibility>,
        clock_ts: Option<(u64, u64)>,
    ) -> Result<Option<u64>> {
        validate_parts(parts)?;
        let mut rec = PreparedRecord::encode_ranged(parts);
        if rec.body_len() > MAX_BODY_LEN {
            return Err(Error::InvalidArgument(format!(
                "write batch of {} bytes exceeds the commit log's limit of {MAX_BODY_LEN}",
                rec.body_len()
            )));
        }
        let s = &*self.shared;
        let mut st = s.state.lock();
        let frame_len = rec.frame_len() as u64;
        s.make_room(&mut st, frame_len)?;
        if let Some((first, _)) = clock_ts {
            if first <= st.clock_ts {
                return Ok(None);
            }
        }
        let seq = st.next_seq;
        if let Some(v) = visibility {
            v.begin(seq);
        }
        st.next_seq += 1;
        if let Some((_, last)) = clock_ts {
            st.clock_ts = last;
        }
        st.active.len += frame_len;
        let bytes = rec.seal(seq);
        let written = match turn::write(&mut Locked { s, st: &mut st }, seq, bytes) {
            Outcome::Written => Ok(()),
            Outcome::Failed(e) => Err(e),
            Outcome::Refused => Err(s.refusal(&st)),
        };
        if written.is_ok() {
            s.appends.fetch_add(1, Ordering::Relaxed);
            s.bytes.fetch_add(frame_len, Ordering::Relaxed);
        }
        let synced = written.and_then(|()| match s.config.sync {
            CommitLogSync::Periodic { .. } => Ok(()),
            CommitLogSync::Batch => s.sync_through(&mut st, seq, None),
            CommitLogSync::Group { window } => s.sync_through(&mut st, seq, Some(window)),
        });
        if let Err(e) = synced {
            drop(st);
            // Not acknowledged and never applied: it must not hold back visibility.
            if let Some(v) = visibility {
                v.finish(seq);
            }
            return Err(e);
        }
        Ok(Some(seq))
    }
}

/// Every table once, every cell and range valid, at least one of them.
fn validate_parts(parts: &[format::PartRef<'_>]) -> Result<()> {
    if parts.is_empty() || parts.iter().any(|(_, c, r)| c.is_empty() && r.is_empty()) {
        return Err(Error::InvalidArgument("empty write batch".into()));
    }
    for (i, (table, cells, ranges)) in parts.iter().enumerate() {
        validate_name("table", table)?;
        if parts[..i].iter().any(|(t, _, _)| t == table) {
            return Err(Error::InvalidArgument(format!(
                "table {table} appears twice in one commit log record"
            )));
        }
        cells.iter().try_for_each(validate_cell)?;
        ranges.iter().try_for_each(validate_range)?;
    }
    Ok(())
}

impl Shared {
    /// Wait until the active file has room for a frame of `frame_len` bytes, rolling
    /// to a new one if it has not (a file always takes its first record, whatever its
    /// size). A roll waits for a leader's fsync (invariant 7) and for the write turn to
    /// empty its queue: records numbered for this file go into it.
    fn make_room(&self, st: &mut MutexGuard<'_, State>, frame_len: u64) -> Result<()> {
        loop {
            self.check_writable(st)?;
            if st.active.len <= format::FILE_HEADER_LEN as u64
                || st.active.len + frame_len <= self.config.segment_size
            {
                return Ok(());
            }
            if st.leader {
                // Another append may roll meanwhile: look again.
                self.fs.rules().point("commitlog roll waits", &st.active.path);
                self.synced.wait(st);
                continue;
            }
            if !st.queue.idle() {
                self.drain(st);
                continue;
            }
            return self.roll(st);
        }
    }

    /// Write whatever the turn has queued (and wait for a write in flight), so that
    /// every number handed out is in the OS or refused.
    pub(super) fn drain(&self, st: &mut MutexGuard<'_, State>) {
        turn::drain(&mut Locked { s: self, st });
    }

    /// The error of a record the log refused after another write or fsync failed.
    fn refusal(&self, st: &State) -> Error {
        Error::Poisoned(st.poisoned.clone().unwrap_or_default())
    }

    /// A turn ended or the log was poisoned (under the lock): wake whoever waits.
    pub(super) fn end_turn_signal(&self) {
        self.turns.fetch_add(1, Ordering::Relaxed);
        self.turn_ended.notify_all();
    }
}

/// The log's locked state, for the write turn.
struct Locked<'a, 'g> {
    s: &'a Shared,
    st: &'a mut MutexGuard<'g, State>,
}

impl Turn for Locked<'_, '_> {
    type Error = Error;

    fn queue(&mut self) -> &mut Queue {
        &mut self.st.queue
    }

    fn written(&self) -> u64 {
        self.st.written_seq
    }

    fn set_written(&mut self, seq: u64) {
        self.st.written_seq = seq;
    }

    fn refused(&self) -> bool {
        self.st.poisoned.is_some()
    }

    fn write_unlocked(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(file) = self.st.active.file.clone() else {
            return Err(Error::ReadOnly);
        };
        self.s.writes.fetch_add(1, Ordering::Relaxed);
        MutexGuard::unlocked(self.st, || {
            self.s.fs.rules().point("commitlog write", file.path());
            file.append(bytes)
        })
    }

    fn fail(&mut self, e: &Error) {
        // A partial record may be in the file; nothing may follow it (invariant 3).
        self.s.poison(self.st, e);
    }

    /// Spin briefly first: a write of a few records takes microseconds, and a sleeping
    /// append needs a futex wake-up (and its scheduling delay) before it can go on.
    fn wait(&mut self) {
        self.s.fs.rules().point("commitlog write queued", &self.st.active.path);
        let s = self.s;
        let seen = s.turns.load(Ordering::Relaxed);
        MutexGuard::unlocked(self.st, || brief_wait(|| s.turns.load(Ordering::Relaxed) != seen));
        // `turns` moves only under the lock: unchanged here means the signal is still to
        // come, and the condition variable will carry it.
        if s.turns.load(Ordering::Relaxed) == seen {
            s.turn_ended.wait(self.st);
        }
    }

    fn wake_all(&mut self) {
        self.s.end_turn_signal();
    }
}
