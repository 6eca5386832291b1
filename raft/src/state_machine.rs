//! The state machine: [`StateMachine`] implements openraft's `RaftStateMachine` and
//! `RaftSnapshotBuilder` over a segstore store of its own, applying the application's
//! requests through its [`Application`].
//!
//! `apply` runs the application on one [`Transaction`] for the whole run of entries
//! openraft hands over (so a request reads what the ones before it in the run wrote),
//! and commits it with `last_applied` and the membership (table `raft_sm_meta`): one
//! atomic record. It needs no fsync: after a crash openraft applies again, from the
//! log, whatever `last_applied` lost, and the log keeps every entry above the current
//! snapshot, whose contents are durable (the checkpoint flushed them into segments).
//!
//! Snapshots are built and installed as [`crate::snapshot`] describes.

use std::path::Path;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder,
    RaftTypeConfig, Snapshot, SnapshotMeta, StorageError, StoredMembership,
};
use parking_lot::{Mutex, RwLock};
use segstore::{Config, Store, Transaction};

use crate::dirs::{Generation, Layout, Pointer, Retired, SnapDir, SNAP_META};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::log_store::{decode, encode};
use crate::stream::SnapshotData;

pub(crate) const LAST_APPLIED: &[u8] = b"last_applied";
pub(crate) const MEMBERSHIP: &[u8] = b"membership";

/// What the application does with its requests. It writes into the state machine's
/// store through `tx` (reads through `tx` see the writes of earlier requests of the same
/// run); its tables are any of `store`'s other than `raft_sm_meta`. Business errors
/// belong in the response: an `Err` here stops the Raft node (openraft treats a failed
/// apply as a storage failure).
pub trait Application<C: RaftTypeConfig>: Send + Sync + 'static {
    /// Apply one request.
    fn apply(
        &self,
        store: &Store,
        tx: &mut Transaction,
        request: &C::D,
    ) -> std::result::Result<C::R, segstore::Error>;
}

/// The applied state kept in `raft_sm_meta`.
pub(crate) type Applied<C> = (
    Option<LogId<<C as RaftTypeConfig>::NodeId>>,
    StoredMembership<<C as RaftTypeConfig>::NodeId, <C as RaftTypeConfig>::Node>,
);

/// A snapshot that is current: its directory and openraft's metadata.
pub(crate) struct CurrentSnap<C: RaftTypeConfig> {
    pub(crate) id: u64,
    pub(crate) dir: Arc<SnapDir>,
    pub(crate) meta: SnapshotMeta<C::NodeId, C::Node>,
}

impl<C: RaftTypeConfig> Clone for CurrentSnap<C> {
    fn clone(&self) -> Self {
        CurrentSnap {
            id: self.id,
            dir: Arc::clone(&self.dir),
            meta: self.meta.clone(),
        }
    }
}

pub(crate) struct State<C: RaftTypeConfig> {
    pub(crate) gen_id: u64,
    pub(crate) snap: Option<CurrentSnap<C>>,
}

pub(crate) struct Shared<C: RaftTypeConfig, A> {
    pub(crate) app: A,
    pub(crate) layout: Layout,
    pub(crate) config: Config,
    /// The current store, shared with [`StateMachineReader`]s.
    pub(crate) gen: Arc<RwLock<Arc<Generation>>>,
    pub(crate) state: Mutex<State<C>>,
    /// Builds and installs one at a time.
    pub(crate) snapshot_lock: Mutex<()>,
    /// What is no longer current and waits to be removed.
    pub(crate) retired: Mutex<Retired>,
}

/// The state machine of one node. Cheap to clone (openraft's snapshot builder is a
/// clone).
pub struct StateMachine<C: RaftTypeConfig, A> {
    pub(crate) shared: Arc<Shared<C, A>>,
}

impl<C: RaftTypeConfig, A> Clone for StateMachine<C, A> {
    fn clone(&self) -> Self {
        StateMachine {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Reads the current state machine store from outside openraft (an application's
/// reads, after `Raft::ensure_linearizable` for linearizable ones). Cheap to clone.
#[derive(Clone)]
pub struct StateMachineReader {
    gen: Arc<RwLock<Arc<Generation>>>,
}

impl StateMachineReader {
    /// Run `f` on the current store. An installed snapshot replaces the store; the
    /// one `f` reads stays open until `f` returns. Do not keep tables or values of it
    /// beyond `f`: its directory is removed once it is closed.
    pub fn with_store<T>(&self, f: impl FnOnce(&Store) -> T) -> T {
        let gen = Arc::clone(&self.gen.read());
        f(&gen.store)
    }
}

pub(crate) fn read_applied<C: RaftTypeConfig>(gen_store: &Store) -> Result<Applied<C>> {
    let meta = gen_store.table(crate::dirs::SM_META_TABLE)?;
    let dir = gen_store.dir();
    let last = match meta.get(LAST_APPLIED)? {
        None => None,
        Some(v) => decode("last applied log id", dir, &v)?,
    };
    let membership = match meta.get(MEMBERSHIP)? {
        None => StoredMembership::default(),
        Some(v) => decode("membership", dir, &v)?,
    };
    Ok((last, membership))
}

impl<C, A> StateMachine<C, A>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = SnapshotData>,
    C::R: Default,
    A: Application<C>,
{
    /// Open (or create) the state machine in directory `dir`, applying requests with
    /// `app`. What a crash left half done there (a snapshot being built or installed)
    /// is removed.
    pub fn open(dir: impl AsRef<Path>, config: Config, app: A) -> Result<StateMachine<C, A>> {
        let dir = dir.as_ref();
        let fs = Fs::new(dir, &config.file_rules);
        let (layout, pointer) = Layout::open(dir, fs.clone())?;
        let (pointer, gen) = match pointer {
            Some(p) => (
                p,
                Generation::open(&layout.gen_path(p.gen), config.clone(), fs)?,
            ),
            None => {
                let p = Pointer {
                    gen: layout.fresh_id(),
                    snap: None,
                };
                let gen = Generation::open(&layout.gen_path(p.gen), config.clone(), fs)?;
                layout.write_pointer(p)?;
                (p, gen)
            }
        };
        let snap = match pointer.snap {
            None => None,
            Some(id) => Some(load_snap::<C>(&layout, id)?),
        };
        Ok(StateMachine {
            shared: Arc::new(Shared {
                app,
                layout,
                config,
                gen: Arc::new(RwLock::new(gen)),
                state: Mutex::new(State {
                    gen_id: pointer.gen,
                    snap,
                }),
                snapshot_lock: Mutex::new(()),
                retired: Mutex::new(Retired::default()),
            }),
        })
    }

    /// Close the current store (after `Raft::shutdown`). Without a close, a drop leaves
    /// the store as a crash would (its commit log fsynced), and the next open replays it.
    pub fn close(&self) -> Result<()> {
        let _one = self.shared.snapshot_lock.lock();
        self.current().store.close()?;
        Ok(())
    }

    /// A reader of the current store.
    pub fn reader(&self) -> StateMachineReader {
        StateMachineReader {
            gen: Arc::clone(&self.shared.gen),
        }
    }

    fn current(&self) -> Arc<Generation> {
        Arc::clone(&self.shared.gen.read())
    }

    fn apply_entries(&self, entries: impl IntoIterator<Item = Entry<C>>) -> Result<Vec<C::R>> {
        let gen = self.current();
        let mut tx = gen.store.transaction()?;
        let mut replies = Vec::new();
        let mut last = None;
        let mut membership = None;
        for entry in entries {
            last = Some(entry.log_id.clone());
            replies.push(match entry.payload {
                EntryPayload::Blank => C::R::default(),
                EntryPayload::Normal(ref req) => self
                    .shared
                    .app
                    .apply(&gen.store, &mut tx, req)
                    .map_err(|e| Error::Apply(e.to_string()))?,
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id.clone()), m));
                    C::R::default()
                }
            });
        }
        if last.is_none() {
            return Ok(replies);
        }
        tx.put(&gen.meta, LAST_APPLIED, encode(&last))?;
        if let Some(m) = membership {
            tx.put(&gen.meta, MEMBERSHIP, encode(&m))?;
        }
        tx.commit()?;
        Ok(replies)
    }

    fn snapshot_now(&self) -> Result<Option<Snapshot<C>>> {
        let snap = self.shared.state.lock().snap.clone();
        match snap {
            None => Ok(None),
            Some(s) => Ok(Some(Snapshot {
                meta: s.meta,
                snapshot: Box::new(SnapshotData::reader(s.dir)?),
            })),
        }
    }
}

/// The metadata of snapshot directory `id`.
pub(crate) fn load_snap<C: RaftTypeConfig>(layout: &Layout, id: u64) -> Result<CurrentSnap<C>> {
    let path = layout.snap_path(id);
    let meta_path = path.join(SNAP_META);
    let bytes = std::fs::read(&meta_path).map_err(|e| Error::io("read", &meta_path, e))?;
    let meta = decode("snapshot metadata", &meta_path, &bytes)?;
    Ok(CurrentSnap {
        id,
        dir: SnapDir::new(path, layout.fs.clone()),
        meta,
    })
}

fn sm_err<NID: openraft::NodeId>(verb: ErrorVerb) -> impl FnOnce(Error) -> StorageError<NID> {
    move |e| e.into_storage(ErrorSubject::StateMachine, verb)
}

fn snap_err<NID: openraft::NodeId>(verb: ErrorVerb) -> impl FnOnce(Error) -> StorageError<NID> {
    move |e| e.into_storage(ErrorSubject::Snapshot(None), verb)
}

/// Run blocking work (a checkpoint, an install) off the async runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Snapshot(format!("snapshot task failed: {e}")))?
}

impl<C, A> RaftSnapshotBuilder<C> for StateMachine<C, A>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = SnapshotData>,
    C::R: Default,
    A: Application<C>,
{
    async fn build_snapshot(
        &mut self,
    ) -> std::result::Result<Snapshot<C>, StorageError<C::NodeId>> {
        let sm = self.clone();
        blocking(move || sm.build())
            .await
            .map_err(snap_err(ErrorVerb::Write))
    }
}

impl<C, A> RaftStateMachine<C> for StateMachine<C, A>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = SnapshotData>,
    C::R: Default,
    A: Application<C>,
{
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> std::result::Result<Applied<C>, StorageError<C::NodeId>> {
        read_applied::<C>(&self.current().store).map_err(sm_err(ErrorVerb::Read))
    }

    async fn apply<I>(
        &mut self,
        entries: I,
    ) -> std::result::Result<Vec<C::R>, StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.apply_entries(entries)
            .map_err(sm_err(ErrorVerb::Write))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> std::result::Result<Box<SnapshotData>, StorageError<C::NodeId>> {
        let layout = &self.shared.layout;
        Ok(Box::new(SnapshotData::writer(
            layout.fs.clone(),
            layout.staging("recv"),
        )))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<C::NodeId, C::Node>,
        snapshot: Box<SnapshotData>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        let sm = self.clone();
        let meta = meta.clone();
        blocking(move || sm.install(meta, *snapshot))
            .await
            .map_err(snap_err(ErrorVerb::Write))
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> std::result::Result<Option<Snapshot<C>>, StorageError<C::NodeId>> {
        self.snapshot_now().map_err(snap_err(ErrorVerb::Read))
    }
}
