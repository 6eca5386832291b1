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
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::io::{FileRules, StoreFs};

pub use super::journal::{decode_journal, encode_journal, JOURNAL};
use super::journal::read_journal;

mod attempts;
mod inspection;
mod journaling;
mod requests;

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
