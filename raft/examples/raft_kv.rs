//! A replicated key-value server on segstore and openraft: one node of a cluster.
//!
//! ```sh
//! cargo run --release -p segstore-raft --example raft_kv -- --id 1 --http 127.0.0.1:21001 --dir kv-data/1
//! curl -s -XPOST 127.0.0.1:21001/init -H 'content-type: application/json' -d '{"1":{"addr":"127.0.0.1:21001"}}'
//! curl -s -XPOST 127.0.0.1:21001/write -H 'content-type: application/json' -d '{"Set":{"key":"a","value":"1"}}'
//! curl -s -XPOST 127.0.0.1:21001/read -H 'content-type: application/json' -d '"a"'
//! ```
//! Routes: `examples/kv/api.rs`. It stops when its standard input closes or reads `stop`.
//! `--example cluster` runs a whole cluster and checks it.

mod kv;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "One node of a replicated key-value store on segstore and openraft")]
struct Args {
    #[command(flatten)]
    node: kv::node::NodeArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    kv::node::run(Args::parse().node).await
}
