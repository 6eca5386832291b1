//! Node-to-node RPC: each openraft RPC is a POST of its JSON request to
//! `http://<addr>/raft/<rpc>`, answered with the JSON of `Result<response, RaftError>`.

use std::marker::PhantomData;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::KvConfig;

/// Makes a connection per target; all share one HTTP client (its connection pool).
pub struct Network<C> {
    client: reqwest::Client,
    _c: PhantomData<fn() -> C>,
}

impl<C> Network<C> {
    pub fn new() -> Self {
        Network {
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("an HTTP client"),
            _c: PhantomData,
        }
    }
}

/// The RPCs to one node.
pub struct Conn<C> {
    client: reqwest::Client,
    target: u64,
    addr: String,
    _c: PhantomData<fn() -> C>,
}

impl<C: KvConfig> RaftNetworkFactory<C> for Network<C>
where
    C::SnapshotData: tokio::io::AsyncRead + tokio::io::AsyncWrite + tokio::io::AsyncSeek + Unpin,
{
    type Network = Conn<C>;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Conn<C> {
        Conn {
            client: self.client.clone(),
            target,
            addr: node.addr.clone(),
            _c: PhantomData,
        }
    }
}

impl<C> Conn<C> {
    async fn call<Req, Resp, E>(
        &self,
        rpc: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let url = format!("http://{}/raft/{rpc}", self.addr);
        let sent = self
            .client
            .post(url)
            .timeout(option.hard_ttl())
            .json(req)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        let body: Result<Resp, RaftError<u64, E>> = resp
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        body.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl<C: KvConfig> RaftNetwork<C> for Conn<C>
where
    C::SnapshotData: tokio::io::AsyncRead + tokio::io::AsyncWrite + tokio::io::AsyncSeek + Unpin,
{
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call("append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.call("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call("vote", &rpc, &option).await
    }
}
