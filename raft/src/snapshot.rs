//! Snapshots by hard links: building one, installing one.
//!
//! **Build** (`build_snapshot`): `Store::checkpoint` of the state machine's store into
//! `sm/snap-N.tmp/store/` (it flushes the memtables, then hard-links the live segment
//! files and writes their manifests: no row is copied or serialised); the snapshot's
//! `last_applied` and membership are read from the checkpoint itself (opened read-only),
//! so they are exactly what it holds even while entries are applied meanwhile; then
//! `meta.json`, fsync, rename to `sm/snap-N`, fsync `sm/`, and `CURRENT` names it.
//!
//! **Send**: [`SnapshotData`] streams the snapshot's files (its docs give the format);
//! openraft cuts the stream into chunks.
//!
//! **Install** (`install_snapshot`, over whatever the state machine held):
//! 1. the received files are complete and fsynced in `sm/recv-K.tmp/store/`;
//!    `meta.json` is written beside them, the directory fsynced and renamed to
//!    `sm/snap-N`, `sm/` fsynced;
//! 2. a new store directory `sm/gen-M.tmp` gets a hard link of every file of the
//!    snapshot (its segment files are immutable, and segstore replaces a manifest by
//!    rename, never in place, so the links stay the snapshot's), is fsynced and renamed
//!    to `sm/gen-M`, `sm/` fsynced; the store is opened there and its `last_applied`
//!    checked against the snapshot's metadata;
//! 3. `CURRENT` is replaced to name `gen-M` and `snap-N`: the one step that makes the
//!    new state current. A crash before it leaves the old state machine and the old
//!    snapshot current, and the next open removes the rest; after it, the new ones.
//!    Nothing is limited in size: no step holds the data in memory or in one batch;
//! 4. the old store is retired: closed once its last reader lets go, then its
//!    directory removed (only if the close found no file still mapped or held, so the
//!    deferred deletion rules hold; otherwise the next open removes it).
//!
//! **Retired snapshots** (superseded by a build or an install) are removed once no
//! stream of them is being sent, file by file: a file that an open store (the current
//! one, or a retired one a reader still holds) still has, as a hard link of the same
//! file, may be mapped there and stays; one that store no longer has was deleted by
//! its deleter once nothing mapped it. So no file is deleted while any link of it is
//! mapped (segstore's invariant 1). What stays is retried after the next build or
//! install, and the next open removes it (no store is open then).
//!
//! The new store holds exactly the snapshot's contents: it is made from nothing else.

use std::path::Path;
use std::sync::Arc;

use openraft::{Entry, RaftTypeConfig, Snapshot, SnapshotMeta};
use segstore::Store;

use crate::dirs::{list_store_files, Generation, Pointer, SnapDir, SNAP_META, SNAP_STORE};
use crate::error::{Error, Result};
use crate::log_store::encode;
use crate::state_machine::{read_applied, Application, CurrentSnap, StateMachine};
use crate::stream::SnapshotData;

impl<C, A> StateMachine<C, A>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = SnapshotData>,
    C::R: Default,
    A: Application<C>,
{
    /// Build a snapshot of the current store and make it current.
    pub(crate) fn build(&self) -> Result<Snapshot<C>> {
        let sh = &self.shared;
        let _one = sh.snapshot_lock.lock();
        let gen = Arc::clone(&sh.gen.read());
        let staging = sh.layout.staging("snap");
        sh.layout
            .fs
            .create_dir(&staging)
            .map_err(|e| Error::io("create", &staging, e))?;
        let r = self.build_in(&gen.store, &staging);
        if r.is_err() {
            let _ = sh.layout.fs.remove_tree(&staging);
        }
        let meta = r?;
        let id = sh.layout.fresh_id();
        let path = sh.layout.snap_path(id);
        sh.layout.publish_dir(&staging, &path)?;
        let snap = CurrentSnap {
            id,
            dir: SnapDir::new(path, sh.layout.fs.clone()),
            meta,
        };
        self.make_current(None, snap.clone())?;
        Ok(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(SnapshotData::reader(snap.dir)?),
        })
    }

    /// Checkpoint into `staging/store`, write `staging/meta.json`.
    fn build_in(&self, store: &Store, staging: &Path) -> Result<SnapshotMeta<C::NodeId, C::Node>> {
        let sh = &self.shared;
        let cp = staging.join(SNAP_STORE);
        store.checkpoint(&cp)?;
        let copy = Store::open_read_only(&cp, sh.config.clone())?;
        let applied = read_applied::<C>(&copy);
        copy.close()?;
        let (last_log_id, last_membership) = applied?;
        // Unique across restarts too: openraft resumes a stream of the same id, and
        // the bytes of two builds at one log id differ.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let snapshot_id = match &last_log_id {
            Some(l) => format!("{}-{}-{nanos:x}", l.leader_id, l.index),
            None => format!("empty-{nanos:x}"),
        };
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        let meta_path = staging.join(SNAP_META);
        sh.layout
            .fs
            .write_new(&meta_path, &encode(&meta))
            .map_err(|e| Error::io("write", &meta_path, e))?;
        Ok(meta)
    }

    /// Install a received (or another node's) snapshot in place of the current state.
    pub(crate) fn install(
        &self,
        meta: SnapshotMeta<C::NodeId, C::Node>,
        data: SnapshotData,
    ) -> Result<()> {
        let sh = &self.shared;
        let _one = sh.snapshot_lock.lock();
        let fs = &sh.layout.fs;
        let received = data.into_received(fs, || Ok(sh.layout.staging("recv")))?;
        let meta_path = received.join(SNAP_META);
        fs.write_new(&meta_path, &encode(&meta))
            .map_err(|e| Error::io("write", &meta_path, e))?;
        let id = sh.layout.fresh_id();
        let snap_path = sh.layout.snap_path(id);
        sh.layout.publish_dir(&received, &snap_path)?;
        let snap = CurrentSnap {
            id,
            dir: SnapDir::new(snap_path, fs.clone()),
            meta,
        };
        let made = self.store_from(&snap);
        if made.is_err() {
            sh.retired.lock().snap(Arc::clone(&snap.dir));
        }
        let (gen_id, gen) = made?;
        self.make_current(Some((gen_id, gen)), snap)
    }

    /// A new store directory holding hard links of the snapshot's files, opened and
    /// checked against the snapshot's metadata.
    fn store_from(&self, snap: &CurrentSnap<C>) -> Result<(u64, Arc<Generation>)> {
        let sh = &self.shared;
        let fs = &sh.layout.fs;
        let staging = sh.layout.staging("gen");
        fs.create_dir(&staging)
            .map_err(|e| Error::io("create", &staging, e))?;
        let from = snap.dir.store_dir();
        for (name, _) in list_store_files(&from)? {
            let dst = staging.join(&name);
            fs.hard_link(&from.join(&name), &dst)
                .map_err(|e| Error::io("hard link", &dst, e))?;
        }
        let id = sh.layout.fresh_id();
        let path = sh.layout.gen_path(id);
        sh.layout.publish_dir(&staging, &path)?;
        let gen = Generation::open(&path, sh.config.clone(), fs.clone())?;
        let (applied, membership) = read_applied::<C>(&gen.store)?;
        if applied != snap.meta.last_log_id || membership != snap.meta.last_membership {
            sh.retired.lock().gen(&gen);
            return Err(Error::Snapshot(format!(
                "snapshot {} holds last_applied {:?} and membership {:?}, its metadata says {:?} and {:?}",
                snap.meta.snapshot_id, applied, membership, snap.meta.last_log_id, snap.meta.last_membership
            )));
        }
        Ok((id, gen))
    }

    /// Point `CURRENT` at the new store (if any) and snapshot, then retire the old ones
    /// and remove what of them can go.
    fn make_current(
        &self,
        gen: Option<(u64, Arc<Generation>)>,
        snap: CurrentSnap<C>,
    ) -> Result<()> {
        let sh = &self.shared;
        let mut state = sh.state.lock();
        let gen_id = gen.as_ref().map_or(state.gen_id, |(id, _)| *id);
        let pointer = Pointer {
            gen: gen_id,
            snap: Some(snap.id),
        };
        let written = sh.layout.write_pointer(pointer);
        let mut retired = sh.retired.lock();
        if let Err(e) = written {
            retired.snap(snap.dir);
            if let Some((_, g)) = &gen {
                retired.gen(g);
            }
            return Err(e);
        }
        if let Some(old) = state.snap.replace(snap) {
            retired.snap(old.dir);
        }
        if let Some((id, g)) = gen {
            state.gen_id = id;
            let old = std::mem::replace(&mut *sh.gen.write(), g);
            // Closed and removed at the sweep below, or by its last reader.
            retired.gen(&old);
        }
        drop(state);
        let current = Arc::clone(&sh.gen.read());
        retired.sweep(&current);
        Ok(())
    }
}
