//! An in-memory log store and state machine over the same requests, for the benchmark's
//! comparison (openraft's `openraft-memstore` 0.9 implements only the v1 `RaftStorage`
//! with openraft's `Adaptor`, which the `storage-v2` feature this workspace needs
//! removes, and its type config is its own). Appends report flushed at once; snapshots
//! are the rows as JSON.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StoredMembership, Vote,
};
use segstore_raft::kv::{Request, Response};

use super::api::KvRead;

openraft::declare_raft_types!(
    pub MemConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<MemConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

#[derive(Default)]
struct LogInner {
    entries: BTreeMap<u64, Entry<MemConfig>>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    purged: Option<LogId<u64>>,
}

#[derive(Clone, Default)]
pub struct MemLog(Arc<Mutex<LogInner>>);

impl RaftLogReader<MemConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<MemConfig>>, StorageError<u64>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<MemConfig> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<MemConfig>, StorageError<u64>> {
        let l = self.0.lock().unwrap();
        let last = l
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(l.purged);
        Ok(LogState {
            last_purged_log_id: l.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        self.0.lock().unwrap().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.0.lock().unwrap().vote)
    }

    async fn save_committed(&mut self, c: Option<LogId<u64>>) -> Result<(), StorageError<u64>> {
        self.0.lock().unwrap().committed = c;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.0.lock().unwrap().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<MemConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<MemConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut l = self.0.lock().unwrap();
        for e in entries {
            l.entries.insert(e.log_id.index, e);
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.0.lock().unwrap().entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut l = self.0.lock().unwrap();
        l.entries = l.entries.split_off(&(log_id.index + 1));
        l.purged = Some(log_id);
        Ok(())
    }
}

#[derive(Default)]
struct SmInner {
    applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    rows: BTreeMap<String, String>,
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
}

#[derive(Clone, Default)]
pub struct MemSm(Arc<Mutex<SmInner>>);

impl KvRead for MemSm {
    fn get(&self, key: &str) -> Option<String> {
        self.0.lock().unwrap().rows.get(key).cloned()
    }

    fn dump(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().rows.clone().into_iter().collect()
    }
}

impl RaftSnapshotBuilder<MemConfig> for MemSm {
    async fn build_snapshot(&mut self) -> Result<Snapshot<MemConfig>, StorageError<u64>> {
        let mut s = self.0.lock().unwrap();
        let bytes = serde_json::to_vec(&(s.applied, &s.membership, &s.rows)).unwrap();
        let meta = SnapshotMeta {
            last_log_id: s.applied,
            last_membership: s.membership.clone(),
            snapshot_id: format!("{:?}", s.applied),
        };
        s.snapshot = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<MemConfig> for MemSm {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.0.lock().unwrap();
        Ok((s.applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<MemConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut s = self.0.lock().unwrap();
        let mut out = Vec::new();
        for e in entries {
            s.applied = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(Request::Set { key, value }) => Response {
                    previous: s.rows.insert(key, value),
                },
                EntryPayload::Normal(Request::Delete { key }) => Response {
                    previous: s.rows.remove(&key),
                },
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                    Response::default()
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let bytes = snapshot.into_inner();
        type Rows = (
            Option<LogId<u64>>,
            StoredMembership<u64, BasicNode>,
            BTreeMap<String, String>,
        );
        let (applied, membership, rows): Rows = serde_json::from_slice(&bytes).unwrap();
        let mut s = self.0.lock().unwrap();
        (s.applied, s.membership, s.rows) = (applied, membership, rows);
        s.snapshot = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<MemConfig>>, StorageError<u64>> {
        let s = self.0.lock().unwrap();
        Ok(s.snapshot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(bytes.clone())),
        }))
    }
}
