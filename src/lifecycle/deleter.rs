//! The deleter: the only code that deletes files (invariant 1), and the reason no
//! deletion is ever lost (invariant 4).
//!
//! A request is first made durable in the journal `deletions.pending` (written atomically,
//! invariant 5), then attempted:
//! - under [`DeletePolicy::DeferWhileMapped`] (forced on Windows) the file's identity is
//!   looked up in the mapping registry, and the unlink runs while holding the registry
//!   lock only if no mapping of that identity is open; otherwise the deletion waits for
//!   the registry's "last mapping closed" event and runs on the thread that closed it;
//! - under [`DeletePolicy::Immediate`] (POSIX) the file is unlinked at once; its space
//!   returns when the last map goes.
//!
//! A deletion the OS refuses (permission, a sharing violation, a scanner holding the
//! file, the Windows emulation) stays queued and is retried at the next mapping-close
//! event or request on this deleter, at [`Deleter::close`] and drop, and at the next
//! [`Deleter::open`], which reads the journal left by a crash. Queued names are reported
//! by [`Deleter::is_pending`] so listings hide them; callers never reuse a name.
//!
//! Journal format: [`super::journal`]. Completed entries are dropped lazily at the next
//! rewrite.
//!
//! Journal state: the deleter keeps every path the journal on disk may name (after a
//! failed write, both what the old journal named and what the failed one tried to name,
//! since its rename may have taken effect). A name is reused only once none of that set
//! lies under it ([`Deleter::reserve`] rewrites the journal first), so the next open can
//! never apply an old deletion to a new file. A request is unlinked only once a journal
//! naming it has been written successfully; a request whose write failed is withdrawn
//! (the caller gets the error) and an announcement whose write failed is forgotten. A
//! write that would leave the journal as it is, is skipped. Retries go deepest path
//! first, so a directory is attempted after everything in it. A completed unlink stays
//! named until its directory has been fsynced (a power loss could otherwise undo the
//! unlink after the journal forgot it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component as PathComponent, Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::io::{registry, FileId, FileRules, StoreFs};

pub use super::journal::{decode_journal, encode_journal, JOURNAL};
use super::journal::read_journal;

/// When a file may be unlinked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletePolicy {
    /// Unlink at once, even while mapped (POSIX semantics). Ignored on Windows.
    #[default]
    Immediate,
    /// Wait until no mapping of the file's identity is open (the Windows rule).
    DeferWhileMapped,
}

impl DeletePolicy {
    /// The policy in force: Windows always defers.
    pub fn effective(self) -> DeletePolicy {
        if crate::io::sys::OS_FORBIDS_DELETING_MAPPED {
            DeletePolicy::DeferWhileMapped
        } else {
            self
        }
    }
}

/// Why a deletion is still pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingReason {
    /// A mapping of the file's identity is open.
    Mapped,
    /// The OS refused (message).
    Refused(String),
    /// Not attempted yet.
    Queued,
    /// A directory that still holds files whose deletions are pending.
    NotEmpty,
    /// Announced, not requested yet: the segment is obsolete, but a handle still holds
    /// it (a read in progress, a [`crate::Value`] kept, a leak). It is deleted when that
    /// handle drops, or, once the store has closed, by the next open.
    Held,
}

/// A deletion not done yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingDeletion {
    /// Path relative to the store directory.
    pub path: PathBuf,
    /// Why it waits.
    pub reason: PendingReason,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeleterStats {
    /// Deletions requested (including those recovered from the journal).
    pub requested: u64,
    /// Deletions done.
    pub completed: u64,
    /// Deletions currently pending.
    pub pending: usize,
    /// Times a deletion had to wait for mappings to close.
    pub deferred_mapped: u64,
    /// Times the OS refused a deletion.
    pub refused: u64,
}

#[derive(Debug)]
struct Entry {
    reason: PendingReason,
    /// A waiter is registered with the mapping registry for this identity.
    waiting: bool,
    requested_at: Instant,
    /// A journal naming this path has been written successfully: only then may it be
    /// unlinked.
    journaled: bool,
}

#[derive(Debug, Default)]
struct State {
    pending: BTreeMap<PathBuf, Entry>,
    stats: DeleterStats,
    /// Latency from request to completion of the last deferred deletion.
    last_deferred_latency: Option<std::time::Duration>,
    /// Announced with [`Deleter::announce`], not requested yet; `true` once a journal
    /// naming it has been written successfully.
    intents: BTreeMap<PathBuf, bool>,
    /// Every path the journal on disk may name: what the last successful write named,
    /// plus what any failed write since tried to name. The next open deletes these.
    on_disk: BTreeSet<PathBuf>,
    /// `on_disk` is exactly what the journal names (no write failed since the last
    /// successful one), so a write of the same paths can be skipped.
    on_disk_exact: bool,
    /// Directories holding completed unlinks not yet made durable by an fsync of the
    /// directory: the journal keeps naming those deletions until they are.
    unsynced_dirs: BTreeSet<PathBuf>,
    /// Completed deletions whose directory is not fsynced yet (journaled still).
    unsynced_done: BTreeSet<PathBuf>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    fs: StoreFs,
    policy: DeletePolicy,
    state: Mutex<State>,
    /// Serialises journal writes: they share one temp file, and a write must not
    /// replace a newer journal with an older state (taken before `state`).
    journal_io: Mutex<()>,
    /// Called with each path right after it is unlinked (benchmarks, tests).
    on_complete: Mutex<Option<Callback>>,
    /// Opened for a read-only store: knows the journal's paths, deletes nothing and
    /// writes no journal ([`Deleter::open_read_only`]).
    read_only: bool,
    /// `true` once sealed ([`Deleter::seal`]: the store closed). Every unlink and journal
    /// write holds it shared and checks it, so none runs after the seal returns.
    sealed: RwLock<bool>,
}

struct Callback(Box<dyn Fn(&Path) + Send + Sync>);

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<callback>")
    }
}

/// Deletes files of one store directory. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Deleter {
    inner: Arc<Inner>,
}

enum Outcome {
    Done,
    Mapped(FileId),
    Refused(String),
    NotEmpty,
}

impl Deleter {
    /// Open the deleter of `dir`: read the journal a crash may have left and complete
    /// every deletion in it that can run.
    pub fn open(dir: &Path, rules: FileRules, policy: DeletePolicy) -> Result<Deleter> {
        let d = Deleter {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                fs: StoreFs::new(dir, &rules),
                policy: policy.effective(),
                state: Mutex::new(State::default()),
                journal_io: Mutex::new(()),
                on_complete: Mutex::new(None),
                read_only: false,
                sealed: RwLock::new(false),
            }),
        };
        let recovered = read_journal(dir)?;
        {
            let mut st = d.inner.state.lock();
            st.on_disk = recovered.iter().cloned().collect();
            st.on_disk_exact = true;
        }
        if !recovered.is_empty() {
            tracing::info!(count = recovered.len(), dir = %dir.display(), "completing deletions left pending by the last run");
            d.enqueue_journaled(recovered);
            d.write_journal()?;
        }
        Ok(d)
    }

    /// The deleter of a store opened read-only: reads the journal so that
    /// [`Deleter::is_pending`] names what a crash left to delete, but never unlinks
    /// anything nor writes the journal (requests fail with [`Error::ReadOnly`]).
    pub(crate) fn open_read_only(
        dir: &Path,
        rules: FileRules,
        policy: DeletePolicy,
    ) -> Result<Deleter> {
        let recovered = read_journal(dir)?;
        let mut st = State {
            on_disk: recovered.iter().cloned().collect(),
            on_disk_exact: true,
            ..State::default()
        };
        for r in recovered {
            st.pending.insert(
                r,
                Entry {
                    reason: PendingReason::Queued,
                    waiting: false,
                    requested_at: Instant::now(),
                    journaled: true,
                },
            );
        }
        Ok(Deleter {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                fs: StoreFs::new(dir, &rules),
                policy: policy.effective(),
                state: Mutex::new(st),
                journal_io: Mutex::new(()),
                on_complete: Mutex::new(None),
                read_only: true,
                sealed: RwLock::new(false),
            }),
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> DeletePolicy {
        self.inner.policy
    }

    /// The rules file operations obey.
    pub fn rules(&self) -> &FileRules {
        self.inner.fs.rules()
    }

    /// The store directory's I/O boundary.
    pub fn fs(&self) -> &StoreFs {
        &self.inner.fs
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Make the coming deletion of `paths` durable now, off the path that will request
    /// it: a segment being made obsolete is announced when the manifest drops it, so
    /// that the later request at its last close needs no fsync. After a crash the next
    /// open deletes announced files (their owner already gave them up). If the journal
    /// cannot be written the announcement is forgotten (the later request writes the
    /// journal itself) and the error returned.
    pub fn announce<P: AsRef<Path>>(&self, paths: &[P]) -> Result<()> {
        let mut rel = Vec::with_capacity(paths.len());
        for p in paths {
            rel.push(self.relative(p.as_ref())?);
        }
        if rel.is_empty() {
            return Ok(());
        }
        let mut fresh = Vec::new();
        {
            let mut st = self.inner.state.lock();
            for r in rel {
                if !st.intents.contains_key(&r) {
                    st.intents.insert(r.clone(), false);
                    fresh.push(r);
                }
            }
        }
        self.write_journal().inspect_err(|_| {
            let mut st = self.inner.state.lock();
            for r in &fresh {
                if st.intents.get(r) == Some(&false) {
                    st.intents.remove(r);
                }
            }
        })
    }

    /// Request deletion of `paths` (absolute, or relative to the store directory; they
    /// must lie inside it). Durable before any unlink: after a crash the next open
    /// completes them. Returns once each file is deleted or queued. If the journal
    /// cannot be written the request is withdrawn (nothing is unlinked) and the error
    /// returned.
    ///
    /// After [`Deleter::seal`] (the store closed) nothing is touched: a request for
    /// files the journal names already (announced obsolete segments) is logged and left
    /// to the next open, `Ok`; any other is refused with [`Error::Closed`].
    pub fn delete<P: AsRef<Path>>(&self, paths: &[P]) -> Result<()> {
        let mut rel = Vec::with_capacity(paths.len());
        for p in paths {
            rel.push(self.relative(p.as_ref())?);
        }
        if rel.is_empty() {
            return Ok(());
        }
        {
            let sealed = self.inner.sealed.read_recursive();
            if *sealed {
                let st = self.inner.state.lock();
                let named = |r: &PathBuf| st.on_disk.contains(r) || st.intents.get(r) == Some(&true);
                if !rel.iter().all(named) {
                    // Neither journaled nor done: the caller must not think it will be.
                    return Err(Error::Closed);
                }
                for r in &rel {
                    tracing::info!(path = %r.display(), "store closed: deletion left for the next open (journaled)");
                }
                return Ok(());
            }
        }
        let mut fresh = Vec::new();
        let already_durable = {
            let mut st = self.inner.state.lock();
            let mut durable = true;
            for r in &rel {
                let announced = st.intents.remove(r) == Some(true);
                let e = st.pending.entry(r.clone()).or_insert_with(|| {
                    fresh.push(r.clone());
                    Entry {
                        reason: PendingReason::Queued,
                        waiting: false,
                        requested_at: Instant::now(),
                        journaled: false,
                    }
                });
                e.journaled |= announced;
                durable &= e.journaled;
            }
            durable
        };
        let mut durable = already_durable;
        while !durable {
            if let Err(e) = self.write_journal() {
                // Withdraw what no successful write named: the next open would not know
                // of it, so it must not be unlinked now.
                let mut st = self.inner.state.lock();
                for r in &fresh {
                    if st.pending.get(r).is_some_and(|e| !e.journaled) {
                        st.pending.remove(r);
                    }
                }
                return Err(e);
            }
            // A concurrent request for the same path whose journal write failed may have
            // withdrawn it meanwhile: put back what is neither pending nor gone, and
            // journal it again.
            let mut st = self.inner.state.lock();
            fresh = rel
                .iter()
                .filter(|r| {
                    !st.pending.contains_key(*r)
                        && std::fs::symlink_metadata(self.inner.dir.join(r)).is_ok()
                })
                .cloned()
                .collect();
            for r in &fresh {
                st.pending.insert(
                    r.clone(),
                    Entry {
                        reason: PendingReason::Queued,
                        waiting: false,
                        requested_at: Instant::now(),
                        journaled: false,
                    },
                );
            }
            durable = fresh.is_empty();
        }
        {
            let mut st = self.inner.state.lock();
            st.stats.requested += rel.len() as u64;
        }
        for r in &rel {
            self.attempt(r);
        }
        // Opportunistically retry earlier refusals.
        self.retry_refused();
        Ok(())
    }

    /// Queue and attempt deletions read from the journal at open.
    fn enqueue_journaled(&self, rel: Vec<PathBuf>) {
        {
            let mut st = self.inner.state.lock();
            st.stats.requested += rel.len() as u64;
            for r in &rel {
                st.pending.entry(r.clone()).or_insert(Entry {
                    reason: PendingReason::Queued,
                    waiting: false,
                    requested_at: Instant::now(),
                    journaled: true,
                });
            }
        }
        self.attempt_deepest_first(rel);
    }

    /// Attempt `paths` deepest first (otherwise in the given order), so a directory is
    /// attempted after everything in it and, if that all went, deleted too.
    fn attempt_deepest_first(&self, mut paths: Vec<PathBuf>) {
        paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in paths {
            self.attempt(&p);
        }
    }

    fn relative(&self, p: &Path) -> Result<PathBuf> {
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.inner.dir)
                .map_err(|_| {
                    Error::InvalidArgument(format!(
                        "{} is outside the store directory {}",
                        p.display(),
                        self.inner.dir.display()
                    ))
                })?
                .to_path_buf()
        } else {
            p.to_path_buf()
        };
        if rel.as_os_str().is_empty()
            || !rel
                .components()
                .all(|c| matches!(c, PathComponent::Normal(_)))
        {
            return Err(Error::InvalidArgument(format!(
                "refusing to delete {}: not a plain path inside the store directory",
                p.display()
            )));
        }
        Ok(rel)
    }

    /// Try to delete one pending path now; on a mapped identity, arrange a retry at the
    /// last close.
    fn attempt(&self, rel: &Path) {
        // No unlink after the seal (the store closed: the next open finishes it).
        let sealed = self.inner.sealed.read_recursive();
        if *sealed {
            return;
        }
        // Only what a successfully written journal names may go.
        if self.inner.read_only
            || !self
                .inner
                .state
                .lock()
                .pending
                .get(rel)
                .is_some_and(|e| e.journaled)
        {
            return;
        }
        let full = self.inner.dir.join(rel);
        let outcome = self.unlink(&full);
        // Read before the state lock: no lock is taken under it but the registry's own.
        let mappings = match outcome {
            Outcome::Mapped(id) => registry().map_count(id),
            _ => 0,
        };
        let mut guard = self.inner.state.lock();
        let st = &mut *guard;
        let Some(e) = st.pending.get_mut(rel) else {
            return; // completed concurrently
        };
        match outcome {
            Outcome::Done => {
                let waited = e.requested_at.elapsed();
                let was_deferred = e.reason == PendingReason::Mapped;
                if was_deferred {
                    tracing::info!(path = %full.display(), waited = ?waited, "deferred deletion done: the last mapping closed");
                } else {
                    tracing::debug!(path = %full.display(), "deleted");
                }
                st.pending.remove(rel);
                st.stats.completed += 1;
                st.unsynced_dirs
                    .insert(full.parent().map(Path::to_path_buf).unwrap_or_default());
                st.unsynced_done.insert(rel.to_path_buf());
                if was_deferred {
                    st.last_deferred_latency = Some(waited);
                }
                drop(guard);
                drop(sealed);
                if let Some(cb) = self.inner.on_complete.lock().as_ref() {
                    (cb.0)(&full);
                }
            }
            Outcome::Mapped(id) => {
                if e.reason != PendingReason::Mapped {
                    st.stats.deferred_mapped += 1;
                    tracing::info!(
                        path = %full.display(),
                        mappings,
                        "deletion deferred: the file is still mapped; it is deleted when its last mapping closes (or at close, or at the next open)"
                    );
                }
                e.reason = PendingReason::Mapped;
                if !e.waiting {
                    e.waiting = true;
                    drop(guard);
                    let weak: Weak<Inner> = Arc::downgrade(&self.inner);
                    let rel = rel.to_path_buf();
                    registry().when_unmapped(id, move || {
                        if let Some(inner) = weak.upgrade() {
                            let d = Deleter { inner };
                            if let Some(e) = d.inner.state.lock().pending.get_mut(&rel) {
                                e.waiting = false;
                            }
                            d.attempt(&rel);
                            d.retry_refused();
                        }
                    });
                }
            }
            Outcome::NotEmpty => e.reason = PendingReason::NotEmpty,
            Outcome::Refused(msg) => {
                st.stats.refused += 1;
                tracing::debug!(path = %full.display(), error = %msg, "deletion refused; will retry");
                e.reason = PendingReason::Refused(msg);
            }
        }
    }

    fn unlink(&self, full: &Path) -> Outcome {
        match std::fs::symlink_metadata(full) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Outcome::Done,
            Ok(m) if m.is_dir() => {
                // Directories (cleared snapshots) go once their files have.
                return match self.inner.fs.remove_empty_dir(full) {
                    Ok(()) => Outcome::Done,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Done,
                    // Its files go first; retried on their events. Not a refusal.
                    Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                        Outcome::NotEmpty
                    }
                    Err(e) => Outcome::Refused(e.to_string()),
                };
            }
            _ => {}
        }
        let id = match FileId::of_path(full) {
            Ok(id) => id,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Outcome::Done
            }
            Err(e) => return Outcome::Refused(e.to_string()),
        };
        let res = match self.inner.policy {
            DeletePolicy::DeferWhileMapped => {
                match registry().with_unmapped(id, || self.inner.fs.remove_file(full)) {
                    None => return Outcome::Mapped(id),
                    Some(r) => r,
                }
            }
            DeletePolicy::Immediate => self.inner.fs.remove_file(full),
        };
        match res {
            Ok(()) => Outcome::Done,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Done,
            Err(e) => Outcome::Refused(e.to_string()),
        }
    }

    /// Retry deletions the OS refused (not those waiting for mappings), deepest first.
    pub fn retry_refused(&self) {
        let refused: Vec<PathBuf> = {
            let st = self.inner.state.lock();
            st.pending
                .iter()
                .filter(|(_, e)| {
                    matches!(
                        e.reason,
                        PendingReason::Refused(_) | PendingReason::Queued | PendingReason::NotEmpty
                    )
                })
                .map(|(p, _)| p.clone())
                .collect()
        };
        self.attempt_deepest_first(refused);
    }

    /// Retry every pending deletion now, deepest first. Returns how many remain.
    pub fn retry_all(&self) -> usize {
        let all: Vec<PathBuf> = self.inner.state.lock().pending.keys().cloned().collect();
        self.attempt_deepest_first(all);
        self.inner.state.lock().pending.len()
    }

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

    /// Final retry (callers close their mappings first) and a journal holding exactly
    /// what is still pending. Returns what remains: a deletion still refused by the OS,
    /// or one whose file is still mapped by someone else (another store in this process).
    ///
    /// Then seals the deleter ([`Deleter::seal`]): nothing is unlinked or journaled
    /// after close returns, and the report also lists what is announced but still held
    /// ([`PendingReason::Held`]), which the next open deletes.
    pub fn close(&self) -> Result<Vec<PendingDeletion>> {
        self.retry_all();
        let written = self.write_journal();
        self.seal();
        written?;
        Ok(self.pending_and_held())
    }

    /// From now on touch nothing on disk: last-close events after this do nothing, and
    /// requests only log that the next open finishes them (or are refused, when the
    /// journal does not name them: see [`Deleter::delete`]). Waits for an unlink or
    /// journal write in flight.
    /// Called at store close and drop, before the directory lock is released.
    pub fn seal(&self) {
        *self.inner.sealed.write() = true;
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

    /// Make sure a new file or directory may be created at `path`: refuse while its
    /// deletion (or one under it) is pending, and first rewrite the journal if it may
    /// still name a completed deletion under it (also after a failed write), so that
    /// recovery after a crash can never delete the new file in place of the old one.
    /// Names that are never reused (segment ids) need no reservation.
    pub fn reserve(&self, path: &Path) -> Result<()> {
        let rel = self.relative(path)?;
        let under = |st: &State| st.on_disk.iter().any(|p| p.starts_with(&rel));
        let refuse = || Error::AlreadyExists {
            kind: "file pending deletion",
            name: rel.display().to_string(),
        };
        let requested = |st: &State| {
            st.pending
                .keys()
                .chain(st.intents.keys())
                .any(|p| p.starts_with(&rel))
        };
        let rewrite = {
            let st = self.inner.state.lock();
            if requested(&st) {
                return Err(refuse());
            }
            under(&st)
        };
        if rewrite {
            self.write_journal()?;
            let st = self.inner.state.lock();
            if requested(&st) || under(&st) {
                return Err(refuse()); // requested again meanwhile
            }
        }
        Ok(())
    }

    /// Rewrite the journal unless it names exactly what is pending (drops completed
    /// deletions from it).
    pub fn compact_journal(&self) -> Result<()> {
        self.write_journal()
    }

    /// Write the journal of what is pending and announced now, unless the journal on
    /// disk names exactly that. On success every path it names may be unlinked; on
    /// failure the journal on disk may name the old paths or these.
    fn write_journal(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::ReadOnly);
        }
        let sealed = self.inner.sealed.read_recursive();
        if *sealed {
            return Err(Error::Closed);
        }
        // Concurrent writers (a flush's obsolete segments, a snapshot clear, the last
        // unmap of a file) used to race on `deletions.pending.tmp` (one removed or
        // renamed the other's temp file: a spurious `NotFound` error) and could publish
        // an older state over a newer one. One at a time, each with the state of now.
        let _io = self.inner.journal_io.lock();
        // A completed unlink leaves the journal only once it is durable: fsync the
        // directories it happened in first (else a power loss could bring back a file,
        // e.g. a cleared snapshot, that no journal names any more).
        let (dirs, done) = {
            let mut st = self.inner.state.lock();
            (
                std::mem::take(&mut st.unsynced_dirs),
                std::mem::take(&mut st.unsynced_done),
            )
        };
        let mut synced: BTreeSet<&Path> = BTreeSet::new();
        for d in &dirs {
            // A directory removed since (a cleared snapshot's): its removal is made
            // durable by an fsync of the nearest directory above it that still exists.
            let Some(d) = d.ancestors().find(|a| a.is_dir()) else {
                continue;
            };
            if !synced.insert(d) {
                continue;
            }
            if let Err(e) = self.inner.fs.fsync_dir(d) {
                let mut st = self.inner.state.lock();
                st.unsynced_dirs.extend(dirs);
                st.unsynced_done.extend(done);
                return Err(e);
            }
        }
        let paths: Vec<PathBuf> = {
            let mut st = self.inner.state.lock();
            let want: BTreeSet<PathBuf> = st
                .pending
                .keys()
                .chain(st.intents.keys())
                .chain(&st.unsynced_done)
                .cloned()
                .collect();
            if st.on_disk_exact && want == st.on_disk {
                mark_journaled(&mut st, &want);
                return Ok(());
            }
            want.into_iter().collect()
        };
        let path = self.inner.dir.join(JOURNAL);
        let written = self.inner.fs.write_atomic(&path, &encode_journal(&paths)?);
        let mut st = self.inner.state.lock();
        if written.is_ok() {
            let named: BTreeSet<PathBuf> = paths.into_iter().collect();
            mark_journaled(&mut st, &named);
            st.on_disk = named;
            st.on_disk_exact = true;
        } else {
            // The rename may have happened: either journal may be the one on disk.
            st.on_disk.extend(paths);
            st.on_disk_exact = false;
        }
        written
    }
}

/// The requested deletions not done yet, with why each waits.
fn requested(st: &State) -> impl Iterator<Item = PendingDeletion> + '_ {
    st.pending.iter().map(|(p, e)| PendingDeletion {
        path: p.clone(),
        reason: e.reason.clone(),
    })
}

/// Every request and announcement in `named` is in a successfully written journal.
fn mark_journaled(st: &mut State, named: &BTreeSet<PathBuf>) {
    for p in named {
        if let Some(e) = st.pending.get_mut(p) {
            e.journaled = true;
        }
        if let Some(j) = st.intents.get_mut(p) {
            *j = true;
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Last chance in this process; whatever remains is in the journal for next open.
        let st = self.state.get_mut();
        if !st.pending.is_empty() {
            tracing::debug!(
                count = st.pending.len(),
                "deleter dropped with deletions pending; the journal keeps them"
            );
        }
    }
}
