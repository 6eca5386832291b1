//! Inspection: what is pending and why, counters, and the completion hook.

use std::path::Path;

use super::{Callback, Deleter, DeleterStats, PendingDeletion, PendingReason, State};

impl Deleter {
    /// Is `path` (absolute or relative) waiting to be deleted? Listings hide such names.
    pub fn is_pending(&self, path: &Path) -> bool {
        match self.relative(path) {
            Ok(rel) => self.inner.state.lock().pending.contains_key(&rel),
            Err(_) => false,
        }
    }

    /// Deletions not done yet.
    pub fn pending(&self) -> Vec<PendingDeletion> {
        requested(&self.inner.state.lock()).collect()
    }

    /// Counters.
    pub fn stats(&self) -> DeleterStats {
        let st = self.inner.state.lock();
        DeleterStats {
            pending: st.pending.len(),
            ..st.stats
        }
    }

    /// Request-to-completion time of the most recent deferred deletion.
    pub fn last_deferred_latency(&self) -> Option<std::time::Duration> {
        self.inner.state.lock().last_deferred_latency
    }

    /// Call `f` with each deleted file's path right after it is unlinked (benchmarks and
    /// tests).
    pub fn set_on_complete(&self, f: impl Fn(&Path) + Send + Sync + 'static) {
        *self.inner.on_complete.lock() = Some(Callback(Box::new(f)));
    }

    /// What [`Deleter::pending`] lists, plus the announced deletions whose files are
    /// still held ([`PendingReason::Held`]).
    pub fn pending_and_held(&self) -> Vec<PendingDeletion> {
        let st = self.inner.state.lock();
        let mut v: Vec<PendingDeletion> = requested(&st).collect();
        v.extend(
            st.intents
                .keys()
                .filter(|p| !st.pending.contains_key(*p))
                .map(|p| PendingDeletion {
                    path: p.clone(),
                    reason: PendingReason::Held,
                }),
        );
        v
    }
}

/// The requested deletions not done yet, with why each waits.
fn requested(st: &State) -> impl Iterator<Item = PendingDeletion> + '_ {
    st.pending.iter().map(|(p, e)| PendingDeletion {
        path: p.clone(),
        reason: e.reason.clone(),
    })
}
