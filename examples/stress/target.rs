//! What the stress tool loads: a [`Target`]. Two exist, picked with `--target`:
//!
//! - [`TableTarget`] (`table`, the default): the LSM table, [`segstore::Store::table`].
//!   `write` is `put`, `read` is `get`, a bulk load is written in [`WriteBatch`]es, and
//!   [`Target::flush`] flushes, merges every segment into one and waits for the
//!   background worker. `--sync` sets the store's commit log sync mode
//!   ([`CommitLogSync`]); the memtables, flushes and compactions are the table's own.
//! - [`SegmentTarget`] (`segment`): the level below, through `Store` + `SegmentSet`,
//!   standing in for a table: writes go to an in-memory buffer that a background thread
//!   flushes as a new segment every `flush_every` writes (`set.writer()`, `add`,
//!   `finish`, `set.add`); when a table has `compact_every` segments the same thread
//!   merges them all into one (`set.replace`), so reads stay fast. Reads look in the
//!   buffer, then in the segments of the current view, newest first. It has no commit
//!   log.
//!
//! A new target is a variant of [`TargetKind`], an arm in [`open`], and a type that
//! implements [`Target`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use segstore::lifecycle::SegmentSet;
use segstore::segment::Entry;
use segstore::{CommitLogSync, Config, DiskAccessMode, Store, Table, WriteBatch};

/// Errors of any target.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result of a target operation.
pub type Result<T> = std::result::Result<T, Error>;

/// A key-value store under load. Shared by all client threads.
pub trait Target: Send + Sync {
    /// Store `value` under `key`.
    fn write(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Whether `key` has a live value.
    fn read(&self, key: &[u8]) -> Result<bool>;
    /// Store every pair (a bulk load). The table target writes them as one batch: one
    /// commit log record, so one fsync in the `batch` and `group` sync modes.
    fn write_all(&self, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        for (k, v) in pairs {
            self.write(k, v)?;
        }
        Ok(())
    }
    /// Make every write so far durable and settle background work, so the next step
    /// starts from the same layout (the segment target also merges to one segment).
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    /// One line on the target's state, for the output.
    fn describe(&self) -> String {
        String::new()
    }
    /// Persist what is buffered and shut down.
    fn close(self: Box<Self>) -> Result<()>;
}

/// The kinds of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// The LSM table: commit log, memtables, flushes, compaction.
    #[value(alias = "tables")]
    Table,
    /// Store + SegmentSet with an in-example write buffer, flush and compaction.
    #[value(alias = "segments")]
    Segment,
}

impl std::fmt::Display for TargetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum;
        f.write_str(
            self.to_possible_value()
                .expect("no skipped values")
                .get_name(),
        )
    }
}

/// Knobs of the targets.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Segment target: writes per flushed segment.
    pub flush_every: usize,
    /// Segment target: live segments that trigger a merge of them all.
    pub compact_every: usize,
    /// Table target: the commit log sync mode (`None`: the store's default).
    pub sync: Option<CommitLogSync>,
}

/// Open a target of `kind` on the store in `dir`, read through `mode`.
pub fn open(
    kind: TargetKind,
    dir: &Path,
    mode: DiskAccessMode,
    opts: Options,
) -> Result<Box<dyn Target>> {
    match kind {
        TargetKind::Table => Ok(Box::new(TableTarget::open(dir, mode, opts)?)),
        TargetKind::Segment => Ok(Box::new(SegmentTarget::open(dir, mode, opts)?)),
    }
}

/// Table name both targets use.
pub const TABLE: &str = "stress";

/// The LSM table of a store. See the module docs.
pub struct TableTarget {
    table: Arc<Table>,
    store: Store,
}

impl TableTarget {
    /// Open (or create) the store in `dir` with `opts.sync`, and its table [`TABLE`].
    pub fn open(dir: &Path, mode: DiskAccessMode, opts: Options) -> Result<TableTarget> {
        let mut config = Config::default();
        config.disk_access_mode = mode;
        config.track_leaks = false;
        config.commitlog.sync = opts.sync.unwrap_or_default();
        let store = Store::open(dir, config)?;
        let table = store.table(TABLE)?;
        Ok(TableTarget { table, store })
    }

    /// The sync mode the commit log runs with.
    pub fn sync(&self) -> CommitLogSync {
        self.store.config().commitlog.sync
    }
}

impl Target for TableTarget {
    fn write(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.table.put(key, value)?)
    }

    fn read(&self, key: &[u8]) -> Result<bool> {
        Ok(self.table.get(key)?.is_some())
    }

    fn write_all(&self, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let mut batch = WriteBatch::new();
        for (k, v) in pairs {
            batch.put(k.as_slice(), v.as_slice());
        }
        self.table.write(&batch)?;
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        // Flush, then merge every segment into one (major compaction), then let the
        // compaction checks that the flush queued run out.
        self.table.compact()?;
        self.store.tables().wait_idle();
        Ok(())
    }

    fn describe(&self) -> String {
        let s = self.table.stats();
        let log = self.store.tables().commit_log().stats();
        format!(
            "{} segment(s), {} flushes, {} compactions; commit log {}: {} appends, {} fsyncs ({:.1} appends per fsync)",
            s.segments,
            s.flushes,
            s.compactions,
            self.sync(),
            log.appends,
            log.syncs,
            log.appends as f64 / log.syncs.max(1) as f64
        )
    }

    fn close(self: Box<Self>) -> Result<()> {
        let TableTarget { table, store } = *self;
        // Our table must let go of its segments before the store reports leaks.
        drop(table);
        let report = store.close()?;
        if !report.is_clean() {
            return Err(format!("store closed unclean: {report:?}").into());
        }
        Ok(())
    }
}

/// The write buffer: the part taking writes, and the part being flushed (still read).
#[derive(Default)]
struct Mem {
    active: BTreeMap<Vec<u8>, Vec<u8>>,
    flushing: Option<Arc<BTreeMap<Vec<u8>, Vec<u8>>>>,
}

impl Mem {
    fn len(&self) -> usize {
        self.active.len() + self.flushing.as_ref().map_or(0, |f| f.len())
    }
}

/// Requests to the background thread and its answers.
#[derive(Default)]
struct Ctl {
    /// Work may be waiting.
    wake: bool,
    /// Flush everything and merge to one segment (from [`Target::flush`]).
    settle: bool,
    /// Flush everything and stop.
    shutdown: bool,
    /// Settle requests completed.
    settled: u64,
    /// The background thread failed with this.
    error: Option<String>,
}

struct Shared {
    set: Arc<SegmentSet>,
    opts: Options,
    mem: RwLock<Mem>,
    /// `mem.len()`, so reads skip the buffer's lock while it is empty.
    mem_len: AtomicUsize,
    ctl: Mutex<Ctl>,
    cv: Condvar,
    failed: AtomicBool,
    flushes: AtomicU64,
    compactions: AtomicU64,
    next_ts: AtomicU64,
}

/// Store + SegmentSet with a write buffer, flushes and compactions. See the module docs.
pub struct SegmentTarget {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    store: Option<Store>,
}

impl SegmentTarget {
    /// Open (or create) the store in `dir` and its table [`TABLE`].
    pub fn open(dir: &Path, mode: DiskAccessMode, opts: Options) -> Result<SegmentTarget> {
        let config = Config::builder()
            .disk_access_mode(mode)
            .track_leaks(false)
            .build()?;
        let store = Store::open(dir, config)?;
        let set = store.segments(TABLE)?;
        let shared = Arc::new(Shared {
            set,
            opts,
            mem: RwLock::new(Mem::default()),
            mem_len: AtomicUsize::new(0),
            ctl: Mutex::new(Ctl::default()),
            cv: Condvar::new(),
            failed: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            next_ts: AtomicU64::new(1),
        });
        let bg = shared.clone();
        let worker = std::thread::Builder::new()
            .name("stress-flush".into())
            .spawn(move || bg.background())?;
        Ok(SegmentTarget {
            shared,
            worker: Some(worker),
            store: Some(store),
        })
    }

    fn check_failed(&self) -> Result<()> {
        if self.shared.failed.load(Ordering::Acquire) {
            let e = self.shared.ctl.lock().error.clone().unwrap_or_default();
            return Err(format!("background flush or compaction failed: {e}").into());
        }
        Ok(())
    }

    /// Stop the background thread after it has flushed the buffer.
    fn stop(&mut self) -> Result<()> {
        let Some(worker) = self.worker.take() else {
            return Ok(());
        };
        {
            let mut c = self.shared.ctl.lock();
            c.shutdown = true;
            c.wake = true;
            self.shared.cv.notify_all();
        }
        worker
            .join()
            .map_err(|_| "the background flush thread panicked")?;
        self.check_failed()
    }
}

impl Target for SegmentTarget {
    fn write(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_failed()?;
        let sh = &*self.shared;
        let (wake, backlog) = {
            let mut m = sh.mem.write();
            m.active.insert(key.to_vec(), value.to_vec());
            let full = m.active.len() >= sh.opts.flush_every;
            let wake = full && m.flushing.is_none();
            if wake {
                let batch = std::mem::take(&mut m.active);
                m.flushing = Some(Arc::new(batch));
            }
            sh.mem_len.store(m.len(), Ordering::Release);
            (wake, m.active.len() >= sh.backlog_limit())
        };
        if wake {
            sh.ctl.lock().wake = true;
            sh.cv.notify_all();
        }
        if backlog {
            // The flusher is behind by several buffers: wait for it (a write stall).
            while sh.mem.read().active.len() >= sh.backlog_limit() {
                self.check_failed()?;
                let mut c = sh.ctl.lock();
                sh.cv.wait_for(&mut c, Duration::from_millis(5));
            }
        }
        Ok(())
    }

    fn read(&self, key: &[u8]) -> Result<bool> {
        let sh = &*self.shared;
        if sh.mem_len.load(Ordering::Acquire) > 0 {
            let m = sh.mem.read();
            if m.active.contains_key(key)
                || m.flushing.as_ref().is_some_and(|f| f.contains_key(key))
            {
                return Ok(true);
            }
        }
        sh.set.with_view(|v| -> Result<bool> {
            for seg in &v.segments {
                if let Some(tombstone) = seg.get_with(key, |c| c.tombstone)? {
                    return Ok(!tombstone);
                }
            }
            Ok(false)
        })
    }

    fn flush(&self) -> Result<()> {
        let sh = &*self.shared;
        let mut c = sh.ctl.lock();
        let want = c.settled + 1;
        c.settle = true;
        c.wake = true;
        sh.cv.notify_all();
        while c.settled < want && c.error.is_none() {
            sh.cv.wait(&mut c);
        }
        drop(c);
        self.check_failed()
    }

    fn describe(&self) -> String {
        let sh = &*self.shared;
        format!(
            "{} segment(s), {} flushes, {} compactions",
            sh.set.view().segments.len(),
            sh.flushes.load(Ordering::Relaxed),
            sh.compactions.load(Ordering::Relaxed)
        )
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        self.stop()?;
        // Our set must let go of its view before the store reports leaks.
        let store = self.store.take().expect("closed once");
        drop(self);
        let report = store.close()?;
        if !report.is_clean() {
            return Err(format!("store closed unclean: {report:?}").into());
        }
        Ok(())
    }
}

impl Drop for SegmentTarget {
    fn drop(&mut self) {
        // Not closed (an error path): still flush and stop the thread.
        let _ = self.stop();
    }
}

impl Shared {
    /// Buffered writes beyond which writers wait for the flusher.
    fn backlog_limit(&self) -> usize {
        self.opts.flush_every.saturating_mul(4)
    }

    fn background(&self) {
        loop {
            let (settle, shutdown) = {
                let mut c = self.ctl.lock();
                while !c.wake {
                    self.cv.wait(&mut c);
                }
                c.wake = false;
                (std::mem::take(&mut c.settle), c.shutdown)
            };
            let res = self.drain(settle || shutdown, settle);
            let mut c = self.ctl.lock();
            if let Err(e) = res {
                c.error = Some(e.to_string());
                self.failed.store(true, Ordering::Release);
            }
            if settle {
                c.settled += 1;
            }
            self.cv.notify_all();
            if shutdown || c.error.is_some() {
                return;
            }
        }
    }

    /// Flush full buffers (all buffers if `everything`), compacting when due; with
    /// `merge_all`, end with everything merged into one segment.
    fn drain(&self, everything: bool, merge_all: bool) -> Result<()> {
        loop {
            let batch = {
                let mut m = self.mem.write();
                let due =
                    m.active.len() >= self.opts.flush_every || (everything && !m.active.is_empty());
                if m.flushing.is_none() && due {
                    let batch = std::mem::take(&mut m.active);
                    m.flushing = Some(Arc::new(batch));
                }
                m.flushing.clone()
            };
            let Some(batch) = batch else { break };
            self.write_segment(&batch)?;
            {
                let mut m = self.mem.write();
                m.flushing = None;
                self.mem_len.store(m.len(), Ordering::Release);
            }
            self.flushes.fetch_add(1, Ordering::Relaxed);
            self.cv.notify_all();
            if self.set.view().segments.len() >= self.opts.compact_every {
                self.compact()?;
            }
        }
        if merge_all && self.set.view().segments.len() > 1 {
            self.compact()?;
        }
        Ok(())
    }

    fn write_segment(&self, batch: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<()> {
        let ts = self.next_ts.fetch_add(1, Ordering::Relaxed);
        let mut w = self.set.writer()?;
        for (k, v) in batch {
            w.add(k, v, ts, false)?;
        }
        let name = w.name().clone();
        w.finish()?;
        self.set.add(&[name])?;
        Ok(())
    }

    /// Merge every live segment into one. Only this thread adds segments, so the output
    /// (a fresh, higher id) is newer than all its inputs and nothing lands in between.
    fn compact(&self) -> Result<()> {
        let view = self.set.view();
        if view.segments.len() < 2 {
            return Ok(());
        }
        let ids: Vec<u64> = view.segments.iter().map(|h| h.name().id).collect();
        let mut iters = Vec::with_capacity(view.segments.len());
        for seg in &view.segments {
            iters.push(seg.iter()?);
        }
        let mut w = self.set.writer()?;
        merge_newest_first(&mut iters, |e| w.add(&e.key, &e.value, e.ts, false))?;
        let name = w.name().clone();
        w.finish()?;
        self.set.replace(&ids, &[name])?;
        self.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// K-way merge of sorted cell streams given newest first: each key once, from the
/// newest stream that has it; tombstones are dropped (the merge covers every segment,
/// so nothing older can resurface).
pub fn merge_newest_first<I, E>(
    iters: &mut [I],
    mut emit: impl FnMut(&Entry) -> std::result::Result<(), E>,
) -> Result<()>
where
    I: Iterator<Item = segstore::Result<Entry>>,
    Error: From<E>,
{
    let mut heads = Vec::with_capacity(iters.len());
    for it in iters.iter_mut() {
        heads.push(it.next().transpose()?);
    }
    loop {
        // The smallest key; on ties the earliest (newest) stream, as `<` keeps it.
        let mut best: Option<usize> = None;
        for (i, h) in heads.iter().enumerate() {
            if let Some(e) = h {
                if best.is_none_or(|b| e.key < heads[b].as_ref().expect("head").key) {
                    best = Some(i);
                }
            }
        }
        let Some(b) = best else { return Ok(()) };
        let winner = heads[b].take().expect("head");
        for (i, it) in iters.iter_mut().enumerate() {
            if i == b || heads[i].as_ref().is_some_and(|e| e.key == winner.key) {
                heads[i] = it.next().transpose()?;
            }
        }
        if !winner.tombstone {
            emit(&winner)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(key: &str, value: &str, tombstone: bool) -> segstore::Result<Entry> {
        Ok(Entry {
            key: key.into(),
            value: value.into(),
            ts: 0,
            tombstone,
            expires: 0,
        })
    }

    #[test]
    fn merge_keeps_the_newest_cell_of_each_key_in_order() {
        let newest = vec![cell("b", "new", false), cell("d", "", true)];
        let middle = vec![cell("a", "mid", false), cell("b", "mid", false)];
        let oldest = vec![
            cell("b", "old", false),
            cell("c", "old", false),
            cell("d", "old", false),
        ];
        let mut iters = [newest.into_iter(), middle.into_iter(), oldest.into_iter()];
        let mut out = Vec::new();
        merge_newest_first(&mut iters, |e| {
            out.push(format!(
                "{}={}",
                String::from_utf8_lossy(&e.key),
                String::from_utf8_lossy(&e.value)
            ));
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(out, ["a=mid", "b=new", "c=old"]);
    }

    #[test]
    fn segment_target_reads_its_writes_through_flushes_and_compactions() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            flush_every: 7,
            compact_every: 3,
            sync: None,
        };
        let t = open(
            TargetKind::Segment,
            dir.path(),
            DiskAccessMode::Standard,
            opts,
        )
        .unwrap();
        for i in 0..200u32 {
            t.write(format!("k{i:04}").as_bytes(), b"v").unwrap();
            assert!(t.read(format!("k{i:04}").as_bytes()).unwrap());
        }
        t.flush().unwrap();
        assert!(t.describe().starts_with("1 segment(s)"), "{}", t.describe());
        for i in 0..200u32 {
            assert!(t.read(format!("k{i:04}").as_bytes()).unwrap(), "k{i:04}");
        }
        assert!(!t.read(b"k9999").unwrap());
        t.write(b"late", b"v").unwrap();
        t.close().unwrap();
        // Reopened through another mode: everything, including the unflushed write, is there.
        let t = open(TargetKind::Segment, dir.path(), DiskAccessMode::Mmap, opts).unwrap();
        assert!(t.read(b"late").unwrap() && t.read(b"k0123").unwrap());
        t.close().unwrap();
    }

    fn table_opts(sync: &str) -> Options {
        Options {
            flush_every: 1,
            compact_every: 2,
            sync: Some(sync.parse().unwrap()),
        }
    }

    #[test]
    fn table_target_reads_its_writes_through_flushes_and_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let opts = table_opts("periodic:50ms");
        let t = open(
            TargetKind::Table,
            dir.path(),
            DiskAccessMode::Standard,
            opts,
        )
        .unwrap();
        let pairs: Vec<_> = (0..100u32)
            .map(|i| (format!("k{i:04}").into_bytes(), b"v".to_vec()))
            .collect();
        t.write_all(&pairs).unwrap();
        for i in 100..200u32 {
            t.write(format!("k{i:04}").as_bytes(), b"v").unwrap();
            assert!(t.read(format!("k{i:04}").as_bytes()).unwrap());
        }
        t.flush().unwrap();
        assert!(t.describe().starts_with("1 segment(s)"), "{}", t.describe());
        assert!(t.describe().contains("periodic:50ms"), "{}", t.describe());
        for i in 0..200u32 {
            assert!(t.read(format!("k{i:04}").as_bytes()).unwrap(), "k{i:04}");
        }
        assert!(!t.read(b"k9999").unwrap());
        t.write(b"late", b"v").unwrap();
        t.close().unwrap();
        let t = open(TargetKind::Table, dir.path(), DiskAccessMode::Mmap, opts).unwrap();
        assert!(t.read(b"late").unwrap() && t.read(b"k0123").unwrap());
        t.close().unwrap();
    }

    #[test]
    fn sync_option_sets_the_commit_log_mode() {
        let stats = |sync: &str| {
            let dir = tempfile::tempdir().unwrap();
            let t =
                TableTarget::open(dir.path(), DiskAccessMode::Standard, table_opts(sync)).unwrap();
            assert_eq!(t.sync().to_string(), sync);
            for i in 0..20u32 {
                t.write(format!("k{i}").as_bytes(), b"v").unwrap();
            }
            let s = t.store.tables().commit_log().stats();
            Box::new(t).close().unwrap();
            s
        };
        // One writer: batch and group fsync once per write, periodic not in between.
        for sync in ["batch", "group:100us"] {
            let s = stats(sync);
            assert!(s.appends == 20 && s.syncs >= 20, "{sync}: {s:?}");
        }
        let s = stats("periodic:10s");
        assert!(s.appends == 20 && s.syncs < 5, "{s:?}");
    }
}
