//! The Raft log in a segstore [`Store`] of its own: [`LogStore`] implements openraft's
//! `RaftLogStorage` and `RaftLogReader`.
//!
//! Two tables: `raft_log` holds one entry per key, the key the entry's index as 8
//! big-endian bytes (so key order is index order and a scan is a range of indexes), the
//! value the entry as JSON; its `gc_grace` is 0, so the tombstones of truncated and
//! purged entries go at the next compaction. `raft_meta` holds `vote`, `committed` and
//! `last_purged` (JSON).
//!
//! Durability, in the order openraft relies on:
//! - `save_vote` writes with `sync(true)`: the vote is on disk when it returns;
//! - `append` writes the entries as one batch (readable when it returns) and hands
//!   `LogFlushed` to [`Store::on_durable`]: the commit log's notifier thread reports the
//!   flush after the fsync that covers the batch, so appends never wait for a disk
//!   themselves and share fsyncs (group commit);
//! - `truncate` and `purge` are one range tombstone each, whatever the number of
//!   entries (with the new `last_purged` in the same batch for a purge); they need no
//!   fsync of their own: one commit log orders every write of the store, so the fsync
//!   that covers the next append, or the vote, covers them too, and a purge lost by a
//!   crash only leaves entries openraft had already given up.
//!
//! Truncate and purge go through one function, `delete_log_range`; truncate reads
//! nothing, purge nothing but its in-memory `last_purged`.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader,
    RaftTypeConfig, StorageError, Vote,
};
use parking_lot::Mutex;
use segstore::{Batch, Config, Store, Table, TableConfig};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// The table of log entries.
pub const LOG_TABLE: &str = "raft_log";
/// The table of the vote, the committed log id and the last purged log id.
pub const LOG_META_TABLE: &str = "raft_meta";
const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

/// The key of log index `index`: big-endian, so keys sort as indexes do.
pub(crate) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("log entries, votes and log ids serialise to JSON")
}

pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    dir: &Path,
    bytes: &[u8],
) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::corrupt(what, dir, e))
}

struct Inner {
    store: Store,
    log: Arc<Table>,
    meta: Arc<Table>,
    /// The last purged log id, as in `raft_meta` (so a purge scans only what is new).
    last_purged: Mutex<Option<Vec<u8>>>,
}

/// The Raft log of one node in a segstore store. Cheap to clone: clones share the store
/// (openraft's log readers are clones). [`LogStore::close`] closes it; dropped without
/// a close it is as a crashed process leaves it, with the commit log fsynced (segstore's
/// drop), and the next open replays it.
pub struct LogStore<C> {
    inner: Arc<Inner>,
    _c: PhantomData<fn() -> C>,
}

impl<C> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            inner: Arc::clone(&self.inner),
            _c: PhantomData,
        }
    }
}

impl<C> Debug for LogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.inner.store.dir())
            .finish()
    }
}

/// `raft_log`'s settings: tombstones purged at the first compaction that sees them.
fn log_table_config(config: &Config) -> TableConfig {
    let mut t = config.table.clone();
    t.gc_grace_secs = 0;
    t
}

impl<C> LogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    /// Open (or create) the log store in directory `dir`.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<LogStore<C>> {
        let log_cfg = log_table_config(&config);
        let store = Store::open(dir.as_ref(), config)?;
        let log = store.table_with(LOG_TABLE, log_cfg)?;
        let meta = store.table(LOG_META_TABLE)?;
        let last_purged = meta.get(LAST_PURGED)?.map(|v| v.to_vec());
        Ok(LogStore {
            inner: Arc::new(Inner {
                store,
                log,
                meta,
                last_purged: Mutex::new(last_purged),
            }),
            _c: PhantomData,
        })
    }

    /// Close the store underneath (after `Raft::shutdown`): every clone refuses later
    /// calls with `Closed`.
    pub fn close(&self) -> Result<()> {
        self.inner.store.close()?;
        Ok(())
    }

    /// The store underneath (for stats; writing into it is not supported).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    fn dir(&self) -> &Path {
        self.inner.store.dir()
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8], what: &'static str) -> Result<Option<T>> {
        match self.inner.meta.get(key)? {
            None => Ok(None),
            Some(v) => decode(what, self.dir(), &v).map(Some),
        }
    }

    fn last_purged(&self) -> Result<Option<LogId<C::NodeId>>> {
        match &*self.inner.last_purged.lock() {
            None => Ok(None),
            Some(v) => decode("last purged log id", self.dir(), v).map(Some),
        }
    }

    fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry<C>>> {
        let Some(bounds) = key_bounds(range) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for row in self.inner.log.scan(bounds)? {
            let (_, value) = row?;
            out.push(decode("log entry", self.dir(), &value)?);
        }
        Ok(out)
    }

    fn last_log_id(&self) -> Result<Option<LogId<C::NodeId>>> {
        match self.inner.log.scan(..)?.next_back() {
            None => self.last_purged(),
            Some(row) => {
                let (_, value) = row?;
                let e: Entry<C> = decode("log entry", self.dir(), &value)?;
                Ok(Some(e.get_log_id().clone()))
            }
        }
    }

    /// Add to `batch` the deletion of every entry with an index in `from..to` (`to`
    /// `None`: to the end of the log): one range tombstone, whatever the number of
    /// entries. The one place truncate and purge delete entries.
    fn delete_log_range(&self, batch: &mut Batch, from: u64, to: Option<u64>) {
        let start = Bound::Included(index_key(from).to_vec());
        match to {
            None => batch.delete_range(&self.inner.log, (start, Bound::Unbounded)),
            Some(t) if t > from => batch.delete_range(
                &self.inner.log,
                (start, Bound::Excluded(index_key(t).to_vec())),
            ),
            Some(_) => batch, // nothing in the range
        };
    }

    fn append_entries(
        &self,
        entries: impl IntoIterator<Item = Entry<C>>,
        callback: LogFlushed<C>,
    ) -> Result<()> {
        let mut batch = Batch::new();
        for e in entries {
            batch.put(&self.inner.log, index_key(e.log_id.index), encode(&e));
        }
        let seq = self.inner.store.write(&batch)?;
        self.inner.store.on_durable(seq, move |r| {
            callback.log_io_completed(r.map_err(|e| Error::from(e).into_io()))
        })?;
        Ok(())
    }

    fn truncate_from(&self, index: u64) -> Result<()> {
        let mut batch = Batch::new();
        self.delete_log_range(&mut batch, index, None);
        self.inner.store.write(&batch)?;
        Ok(())
    }

    fn purge_upto(&self, log_id: LogId<C::NodeId>) -> Result<()> {
        let from = self.last_purged()?.map_or(0, |l| l.index + 1);
        let mut batch = Batch::new();
        self.delete_log_range(&mut batch, from, Some(log_id.index.saturating_add(1)));
        let value = encode(&log_id);
        batch.put(&self.inner.meta, LAST_PURGED, &value);
        let mut last = self.inner.last_purged.lock();
        self.inner.store.write(&batch)?;
        *last = Some(value);
        Ok(())
    }

    fn save_meta<T: Serialize>(&self, key: &[u8], value: &T, sync: bool) -> Result<()> {
        let mut batch = Batch::new();
        batch.put(&self.inner.meta, key, encode(value)).sync(sync);
        self.inner.store.write(&batch)?;
        Ok(())
    }
}

/// A range of keys, owned.
type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Index bounds as key bounds; `None` for a range that holds no index.
fn key_bounds(range: impl RangeBounds<u64>) -> Option<KeyBounds> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Bound::Included(index_key(s).to_vec()),
        Bound::Excluded(&s) => Bound::Included(index_key(s.checked_add(1)?).to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => Bound::Included(index_key(e).to_vec()),
        Bound::Excluded(&e) => Bound::Excluded(index_key(e).to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    Some((start, end))
}

fn logs_err<NID: openraft::NodeId>(verb: ErrorVerb) -> impl FnOnce(Error) -> StorageError<NID> {
    move |e| e.into_storage(ErrorSubject::Logs, verb)
}

fn vote_err<NID: openraft::NodeId>(verb: ErrorVerb) -> impl FnOnce(Error) -> StorageError<NID> {
    move |e| e.into_storage(ErrorSubject::Vote, verb)
}

impl<C> RaftLogReader<C> for LogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> std::result::Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.entries(range).map_err(logs_err(ErrorVerb::Read))
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> std::result::Result<LogState<C>, StorageError<C::NodeId>> {
        let read = || -> Result<LogState<C>> {
            Ok(LogState {
                last_purged_log_id: self.last_purged()?,
                last_log_id: self.last_log_id()?,
            })
        };
        read().map_err(logs_err(ErrorVerb::Read))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(
        &mut self,
        vote: &Vote<C::NodeId>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        self.save_meta(VOTE, vote, true)
            .map_err(vote_err(ErrorVerb::Write))
    }

    async fn read_vote(
        &mut self,
    ) -> std::result::Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.read_meta(VOTE, "vote")
            .map_err(vote_err(ErrorVerb::Read))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        self.save_meta(COMMITTED, &committed, false)
            .map_err(logs_err(ErrorVerb::Write))
    }

    async fn read_committed(
        &mut self,
    ) -> std::result::Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        let c: Result<Option<Option<LogId<C::NodeId>>>> = self.read_meta(COMMITTED, "committed");
        c.map(Option::flatten).map_err(logs_err(ErrorVerb::Read))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> std::result::Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_entries(entries, callback)
            .map_err(logs_err(ErrorVerb::Write))
    }

    async fn truncate(
        &mut self,
        log_id: LogId<C::NodeId>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        self.truncate_from(log_id.index)
            .map_err(logs_err(ErrorVerb::Delete))
    }

    async fn purge(
        &mut self,
        log_id: LogId<C::NodeId>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        self.purge_upto(log_id).map_err(logs_err(ErrorVerb::Delete))
    }
}
