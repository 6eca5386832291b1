//! One node: open its stores, start openraft and the HTTP server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{Config, Raft, SnapshotPolicy};
use segstore_raft::kv::{Kv, TypeConfig};
use segstore_raft::StateMachineReader;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::api::{router, App, KvRead};
use super::network::Network;
use super::KvConfig;

/// A node's command line.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeArgs {
    /// This node's id.
    #[arg(long)]
    pub id: u64,
    /// The address to serve the HTTP API and the node-to-node RPCs on.
    #[arg(long)]
    pub http: SocketAddr,
    /// The node's data directory (its log store in `log/`, state machine in `sm/`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Build a snapshot every this many applied entries.
    #[arg(long, default_value_t = 5000)]
    pub snapshot_logs: u64,
    /// Entries kept in the log below the snapshot (the rest is purged).
    #[arg(long, default_value_t = 1000)]
    pub keep_logs: u64,
}

/// openraft's settings for these nodes: loopback latencies.
pub fn raft_config(snapshot_logs: u64, keep_logs: u64) -> Arc<Config> {
    let c = Config {
        cluster_name: "segstore-raft-kv".into(),
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_logs),
        max_in_snapshot_log_to_keep: keep_logs,
        purge_batch_size: 1,
        ..Config::default()
    };
    Arc::new(c.validate().expect("valid openraft settings"))
}

struct SegRead(StateMachineReader);

impl KvRead for SegRead {
    fn get(&self, key: &str) -> Option<String> {
        self.0
            .with_store(|s| segstore_raft::kv::get(s, key))
            .expect("state machine read")
    }

    fn dump(&self) -> Vec<(String, String)> {
        self.0
            .with_store(segstore_raft::kv::dump)
            .expect("state machine read")
    }
}

/// A running node.
pub struct Running<C: KvConfig> {
    pub raft: Raft<C>,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

impl<C: KvConfig> Running<C> {
    /// Stop serving and shut openraft down.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
        let _ = self.raft.shutdown().await;
    }
}

/// Start openraft over `log` and `sm` and serve the API on `addr`.
pub async fn start<C, LS, SM>(
    id: u64,
    addr: SocketAddr,
    config: Arc<Config>,
    log: LS,
    sm: SM,
    read: Arc<dyn KvRead>,
) -> std::io::Result<Running<C>>
where
    C: KvConfig,
    LS: RaftLogStorage<C>,
    SM: RaftStateMachine<C>,
{
    let listener = TcpListener::bind(addr).await?;
    let raft = Raft::new(id, config, Network::<C>::new(), log, sm)
        .await
        .map_err(std::io::Error::other)?;
    let app = Arc::new(App {
        raft: raft.clone(),
        read,
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let serve = axum::serve(listener, router(app)).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    Ok(Running { raft, stop, server })
}

/// The `raft_kv` node: serve until standard input closes (or says `stop`), then shut
/// down and close the stores. Prints `LISTENING <addr>` once it serves.
pub async fn run(args: NodeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (log, sm) =
        segstore_raft::open::<TypeConfig, _>(&args.dir, segstore::Config::default(), Kv)?;
    let read = Arc::new(SegRead(sm.reader()));
    let config = raft_config(args.snapshot_logs, args.keep_logs);
    let node = start::<TypeConfig, _, _>(args.id, args.http, config, log.clone(), sm.clone(), read)
        .await?;
    println!("LISTENING {}", args.http);
    // Standard input closing is the signal to stop (the cluster example closes it).
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin()
            .read_line(&mut line)
            .map(|n| n > 0 && line.trim() != "stop")
            .unwrap_or(false)
        {
            line.clear();
        }
    })
    .await?;
    node.stop().await;
    log.close()?;
    sm.close()?;
    println!("STOPPED");
    Ok(())
}
