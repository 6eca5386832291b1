//! The replicated key-value server the examples and the benchmark share: node-to-node
//! RPC over HTTP (`network.rs`, reqwest), the HTTP JSON API (`api.rs`, axum), a node
//! (`node.rs`), a client (`client.rs`) and an in-memory store for comparison
//! (`mem.rs`, the benchmark's).
#![allow(dead_code)] // each example uses part of it

pub mod api;
pub mod client;
pub mod mem;
pub mod network;
pub mod node;

use openraft::{BasicNode, Entry, RaftTypeConfig};
use segstore_raft::kv::{Request, Response};

/// What the server needs of a type config: the kv requests, `u64` ids, addresses in
/// [`BasicNode`]s, snapshots openraft can stream in chunks.
pub trait KvConfig:
    RaftTypeConfig<
    D = Request,
    R = Response,
    NodeId = u64,
    Node = BasicNode,
    Entry = Entry<Self>,
    Responder = openraft::impls::OneshotResponder<Self>,
>
where
    Self::SnapshotData: tokio::io::AsyncRead + tokio::io::AsyncWrite + tokio::io::AsyncSeek + Unpin,
{
}

impl<C> KvConfig for C
where
    C: RaftTypeConfig<
        D = Request,
        R = Response,
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<C>,
        Responder = openraft::impls::OneshotResponder<C>,
    >,
    C::SnapshotData: tokio::io::AsyncRead + tokio::io::AsyncWrite + tokio::io::AsyncSeek + Unpin,
{
}
