//! Helpers of the segstore-raft tests: entries, nodes opened in a directory, a runtime.
#![allow(dead_code)] // each test binary uses some of them

use std::path::Path;

use openraft::storage::{RaftLogStorageExt, RaftStateMachine};
use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use segstore_raft::kv::{Kv, Request, TypeConfig};
use segstore_raft::{LogStore, StateMachine};

pub type Log = LogStore<TypeConfig>;
pub type Sm = StateMachine<TypeConfig, Kv>;

pub fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// Entry `index` of the deterministic workload: sets key `k{index % 7}` to `v{index}`
/// (entry 1 is a membership of node 1).
pub fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    let payload = if index == 1 {
        let nodes = [(1u64, BasicNode::new("127.0.0.1:1"))]
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>();
        EntryPayload::Membership(Membership::new(vec![[1u64].into_iter().collect()], nodes))
    } else {
        EntryPayload::Normal(Request::Set {
            key: format!("k{}", index % 7),
            value: format!("v{index}"),
        })
    };
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

pub fn entries(term: u64, range: std::ops::RangeInclusive<u64>) -> Vec<Entry<TypeConfig>> {
    range.map(|i| entry(term, i)).collect()
}

/// The kv contents after applying entries `1..=last` of the workload.
pub fn model(last: u64) -> Vec<(String, String)> {
    let mut m = std::collections::BTreeMap::new();
    for i in 2..=last {
        m.insert(format!("k{}", i % 7), format!("v{i}"));
    }
    m.into_iter().collect()
}

pub fn open(dir: &Path, config: segstore::Config) -> segstore_raft::Result<(Log, Sm)> {
    segstore_raft::open(dir, config, Kv)
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub async fn append(
    log: &mut Log,
    e: Vec<Entry<TypeConfig>>,
) -> Result<(), openraft::StorageError<u64>> {
    log.blocking_append(e).await
}

/// The state machine's kv contents and last applied index.
pub async fn sm_state(sm: &mut Sm) -> (Option<u64>, Vec<(String, String)>) {
    let (applied, _) = sm.applied_state().await.unwrap();
    let rows = sm.reader().with_store(segstore_raft::kv::dump).unwrap();
    (applied.map(|l| l.index), rows)
}

/// Names in a directory, sorted, but for the state machine directory's `LOCK`.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "LOCK")
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
