//! Closing a store: [`Store::close`], and what a drop without close does.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::io::registry;

use super::{CloseReport, Store};

impl Store {
    /// Set `closed` and wait for the operations that began before (once only: `false`
    /// if the store was closed already).
    fn begin_close(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        if self.ops.try_write().is_none() {
            self.deleter
                .rules()
                .point("close waits for operations", &self.dir);
            drop(self.ops.write());
        }
        true
    }

    /// Close: flush the tables and close the commit log, clear ephemeral snapshots,
    /// release views, report leaks, finish deletions, release the directory lock.
    ///
    /// Takes `&self`; the store refuses every later use with
    /// [`Error::Closed`](crate::Error::Closed). Only the first call closes: a later one
    /// (or one racing with it) does nothing and returns an empty report, so an error is
    /// reported once, by the call that closed.
    /// Every step runs even if an earlier one failed; the first error is returned. On a
    /// read-only store nothing is written, and no pending deletion is reported (the
    /// journal's are the last writer's, left for the next writable open).
    pub fn close(&self) -> Result<CloseReport> {
        if !self.begin_close() {
            return Ok(CloseReport::default());
        }
        // Flush and close the log first; finish the rest of the close even if that
        // failed (the commit log still holds what was not flushed).
        let tables_closed = self.lsm.close();
        let snapshots_cleared = if self.read_only {
            Ok(())
        } else {
            self.clear_ephemeral_snapshots()
        };
        for (_, s) in self.registry.sets() {
            s.release();
        }
        let pending = if self.read_only {
            Ok(Vec::new())
        } else {
            self.deleter.close()
        };
        let report = CloseReport {
            leaked_handles: self.tracker.as_ref().map(|t| t.live()).unwrap_or_default(),
            leaked_mappings: registry().open_under(&self.dir),
            pending_deletions: pending.as_ref().map(Vec::clone).unwrap_or_default(),
        };
        for h in &report.leaked_handles {
            tracing::error!(segment = %h.segment, taken_at = %h.taken_at, "LEAK DETECTED: segment handle still held at close");
        }
        for m in &report.leaked_mappings {
            tracing::error!(path = %m.path.display(), opened_at = %m.opened_at, "LEAK DETECTED: mapping still open at close");
        }
        self.lock.lock().take();
        tables_closed?;
        snapshots_cleared?;
        pending?;
        Ok(report)
    }
}

impl Drop for Store {
    /// See [`Store`]: the commit log's final fsync, nothing flushed.
    fn drop(&mut self) {
        if self.begin_close() {
            // Like a crash, except that the commit log is fsynced and closed (every
            // acknowledged write durable) and deletions which can run now do (the
            // journal already holds them for the next open).
            self.lsm.abandon();
            for (_, s) in self.registry.sets() {
                s.release();
            }
            if !self.read_only {
                self.deleter.retry_all();
                // Nothing touches the directory once the lock goes with the store.
                self.deleter.seal();
            }
        }
    }
}
