//! A key-value [`Application`]: the one the tests, the `raft_kv` example and the
//! benchmark replicate. Requests set or delete string keys in table `kv`; a response
//! carries the key's previous value.

use std::sync::Arc;

use openraft::BasicNode;
use segstore::{Store, Table, Transaction};
use serde::{Deserialize, Serialize};

use crate::{Application, SnapshotData};

/// The table the application writes.
pub const KV_TABLE: &str = "kv";

/// A write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Delete `key`.
    Delete {
        /// The key.
        key: String,
    },
}

/// What a write found: the key's previous value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The value before the write, if the key had one.
    pub previous: Option<String>,
}

openraft::declare_raft_types!(
    /// The key-value type config: `u64` node ids, [`BasicNode`] addresses, segstore
    /// snapshots.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The key-value application.
#[derive(Debug, Default, Clone, Copy)]
pub struct Kv;

fn kv_table(store: &Store) -> segstore::Result<Arc<Table>> {
    store.table(KV_TABLE)
}

impl Application<TypeConfig> for Kv {
    fn apply(
        &self,
        store: &Store,
        tx: &mut Transaction,
        request: &Request,
    ) -> segstore::Result<Response> {
        let table = kv_table(store)?;
        let key = match request {
            Request::Set { key, .. } | Request::Delete { key } => key,
        };
        let previous = tx
            .get(&table, key)?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        match request {
            Request::Set { key, value } => tx.put(&table, key, value)?,
            Request::Delete { key } => tx.delete(&table, key)?,
        }
        Ok(Response { previous })
    }
}

/// Read `key` from a state machine store.
pub fn get(store: &Store, key: &str) -> segstore::Result<Option<String>> {
    Ok(kv_table(store)?
        .get(key)?
        .map(|v| String::from_utf8_lossy(&v).into_owned()))
}

/// Every key and value of a state machine store, in key order.
pub fn dump(store: &Store) -> segstore::Result<Vec<(String, String)>> {
    kv_table(store)?
        .scan(..)?
        .map(|r| {
            r.map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
        })
        .collect()
}
