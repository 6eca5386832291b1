//! What the view tests of a hot key share: the store, the threads' progress, and the
//! freezes and flushes beneath the writers.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use segstore::{CommitLogSync, Config, DiskAccessMode, FileRules, Table, TableConfig};

use crate::common;

/// A store whose memtables fill at 8 KiB (two may wait frozen), compacting only when
/// asked.
pub(crate) fn store_config() -> Config {
    let mut c = common::test_config(DiskAccessMode::Auto, FileRules::posix());
    c.table = TableConfig::default();
    c.table.background_compaction = false;
    c.table.memtable_flush_bytes = 8 * 1024;
    c.table.max_frozen_memtables = 3;
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 50 };
    c
}

/// What the threads of a view test share.
#[derive(Default)]
pub(crate) struct Progress {
    /// Writes acknowledged, by every writer.
    pub(crate) acked: AtomicU64,
    pub(crate) writers_gone: AtomicUsize,
    /// Views taken and checked.
    pub(crate) views: AtomicU64,
    pub(crate) viewer_gone: AtomicUsize,
}

/// Views a writer waits for half way.
pub(crate) const MIN_VIEWS: u64 = 20;

impl Progress {
    pub(crate) fn writers_done(&self, writers: usize) -> bool {
        self.writers_gone.load(Ordering::SeqCst) == writers
    }

    pub(crate) fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }
}

/// Freezes beneath the writers, each once five more writes have landed in the
/// memtable, and a flush at every `flush_every`th, until `writers` are done.
pub(crate) fn freeze_and_flush(t: &Table, p: &Progress, writers: usize, flush_every: u64) {
    let mut freezes = 0u64;
    while !p.writers_done(writers) {
        let before = p.acked();
        t.freeze_memtable();
        freezes += 1;
        if freezes % flush_every == 0 {
            t.flush().unwrap();
        }
        while !p.writers_done(writers) && p.acked() < before + 5 {
            std::thread::yield_now();
        }
    }
}
