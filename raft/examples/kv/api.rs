//! The HTTP JSON API of a node (axum): the client API and openraft's RPCs.
//!
//! | route | body | answer |
//! | --- | --- | --- |
//! | `POST /write` | a `Request` | `Result<ClientWriteResponse, RaftError>` |
//! | `POST /read` | a key | `Result<Option<value>, RaftError>`, linearizable |
//! | `POST /init` | `{id: {"addr": ..}}` | `Result<(), RaftError>` |
//! | `POST /add-learner` | `[id, addr]` | `Result<ClientWriteResponse, RaftError>` |
//! | `POST /change-membership` | `[ids]` | `Result<ClientWriteResponse, RaftError>` |
//! | `GET /metrics` | | openraft's `RaftMetrics` |
//! | `GET /dump` | | this node's rows and last applied index (not linearizable) |
//! | `POST /raft/{append,vote,snapshot}` | openraft's RPC | its answer |

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{BasicNode, Raft};
use segstore_raft::kv::Request;
use serde::{Deserialize, Serialize};

use super::KvConfig;

/// Reads of a node's state machine: one key, or every row with the last applied index.
pub trait KvRead: Send + Sync + 'static {
    fn get(&self, key: &str) -> Option<String>;
    fn dump(&self) -> Vec<(String, String)>;
}

/// A node's rows as `GET /dump` gives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dump {
    pub applied: Option<u64>,
    pub rows: Vec<(String, String)>,
}

pub struct App<C: KvConfig> {
    pub raft: Raft<C>,
    pub read: Arc<dyn KvRead>,
}

type S<C> = State<Arc<App<C>>>;

pub fn router<C: KvConfig>(app: Arc<App<C>>) -> Router {
    Router::new()
        .route("/write", post(write::<C>))
        .route("/read", post(read::<C>))
        .route("/init", post(init::<C>))
        .route("/add-learner", post(add_learner::<C>))
        .route("/change-membership", post(change_membership::<C>))
        .route("/metrics", get(metrics::<C>))
        .route("/dump", get(dump::<C>))
        .route("/raft/append", post(append::<C>))
        .route("/raft/vote", post(vote::<C>))
        .route("/raft/snapshot", post(snapshot::<C>))
        .with_state(app)
}

async fn write<C: KvConfig>(State(app): S<C>, Json(req): Json<Request>) -> Json<serde_json::Value> {
    Json(serde_json::to_value(app.raft.client_write(req).await).expect("serialises"))
}

async fn read<C: KvConfig>(State(app): S<C>, Json(key): Json<String>) -> Json<serde_json::Value> {
    let r = app
        .raft
        .ensure_linearizable()
        .await
        .map(|_| app.read.get(&key));
    Json(serde_json::to_value(r).expect("serialises"))
}

async fn init<C: KvConfig>(
    State(app): S<C>,
    Json(nodes): Json<BTreeMap<u64, BasicNode>>,
) -> Json<serde_json::Value> {
    Json(serde_json::to_value(app.raft.initialize(nodes).await).expect("serialises"))
}

async fn add_learner<C: KvConfig>(
    State(app): S<C>,
    Json((id, addr)): Json<(u64, String)>,
) -> Json<serde_json::Value> {
    let r = app.raft.add_learner(id, BasicNode::new(addr), true).await;
    Json(serde_json::to_value(r).expect("serialises"))
}

async fn change_membership<C: KvConfig>(
    State(app): S<C>,
    Json(ids): Json<BTreeSet<u64>>,
) -> Json<serde_json::Value> {
    Json(serde_json::to_value(app.raft.change_membership(ids, false).await).expect("serialises"))
}

async fn metrics<C: KvConfig>(State(app): S<C>) -> Json<serde_json::Value> {
    let m = app.raft.metrics().borrow().clone();
    Json(serde_json::to_value(m).expect("serialises"))
}

async fn dump<C: KvConfig>(State(app): S<C>) -> Json<Dump> {
    let applied = app.raft.metrics().borrow().last_applied.map(|l| l.index);
    Json(Dump {
        applied,
        rows: app.read.dump(),
    })
}

async fn append<C: KvConfig>(
    State(app): S<C>,
    Json(req): Json<AppendEntriesRequest<C>>,
) -> Json<serde_json::Value> {
    Json(serde_json::to_value(app.raft.append_entries(req).await).expect("serialises"))
}

async fn vote<C: KvConfig>(
    State(app): S<C>,
    Json(req): Json<VoteRequest<u64>>,
) -> Json<serde_json::Value> {
    Json(serde_json::to_value(app.raft.vote(req).await).expect("serialises"))
}

async fn snapshot<C: KvConfig>(
    State(app): S<C>,
    Json(req): Json<InstallSnapshotRequest<C>>,
) -> Json<serde_json::Value> {
    Json(serde_json::to_value(app.raft.install_snapshot(req).await).expect("serialises"))
}
