//! Replicated writes per second through a three-node cluster on loopback (HTTP between
//! the nodes and from the clients, all in this process), over segstore (each node's
//! log fsynced before an append is reported flushed) and over an in-memory store
//! (`examples/kv/mem.rs`: nothing written anywhere), side by side: the runs alternate,
//! store by store, for 1 and 16 concurrent clients, and the medians are reported.
//!
//! ```sh
//! cargo bench -p segstore-raft --bench replicated            # 3 rounds of 3 s
//! cargo bench -p segstore-raft --bench replicated -- 5 2     # 5 rounds of 2 s
//! ```

#[path = "../examples/kv/mod.rs"]
mod kv;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kv::client::Client;
use kv::mem::{MemConfig, MemLog, MemSm};
use kv::node::{raft_config, start, Running};
use kv::KvConfig;
use segstore_raft::kv::{Kv, Request, TypeConfig};

const SEG_PORT: u16 = 21200;
const MEM_PORT: u16 = 21210;

fn addr(base: u16, id: u64) -> String {
    format!("127.0.0.1:{}", base as u64 + id)
}

struct SegRead(segstore_raft::StateMachineReader);

impl kv::api::KvRead for SegRead {
    fn get(&self, key: &str) -> Option<String> {
        self.0
            .with_store(|s| segstore_raft::kv::get(s, key))
            .unwrap()
    }
    fn dump(&self) -> Vec<(String, String)> {
        self.0.with_store(segstore_raft::kv::dump).unwrap()
    }
}

async fn form<C: KvConfig>(base: u16, nodes: &[Running<C>]) {
    let c = Client::new(&addr(base, 1));
    let one = [(1, openraft::BasicNode::new(addr(base, 1)))]
        .into_iter()
        .collect();
    c.init(&addr(base, 1), one).await.unwrap();
    nodes[0]
        .raft
        .wait(Some(Duration::from_secs(30)))
        .current_leader(1, "node 1 leads")
        .await
        .unwrap();
    let mut c = c;
    for id in 2..=3 {
        c.add_learner(id, &addr(base, id)).await.unwrap();
    }
    c.change_membership((1..=3).collect()).await.unwrap();
}

async fn seg_cluster(dir: &std::path::Path) -> Vec<Running<TypeConfig>> {
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let (log, sm) = segstore_raft::open::<TypeConfig, _>(
            dir.join(id.to_string()),
            segstore::Config::default(),
            Kv,
        )
        .unwrap();
        let read = Arc::new(SegRead(sm.reader()));
        let a = addr(SEG_PORT, id).parse().unwrap();
        nodes.push(
            start(id, a, raft_config(5000, 1000), log, sm, read)
                .await
                .unwrap(),
        );
    }
    form(SEG_PORT, &nodes).await;
    nodes
}

async fn mem_cluster() -> Vec<Running<MemConfig>> {
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let sm = MemSm::default();
        let a = addr(MEM_PORT, id).parse().unwrap();
        nodes.push(
            start(
                id,
                a,
                raft_config(5000, 1000),
                MemLog::default(),
                sm.clone(),
                Arc::new(sm),
            )
            .await
            .unwrap(),
        );
    }
    form(MEM_PORT, &nodes).await;
    nodes
}

/// Writes acknowledged per second by `clients` closed-loop clients at the leader.
async fn run(base: u16, clients: usize, secs: f64) -> f64 {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let value = "x".repeat(100);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::new(&addr(base, 1));
            let mut n = 0u64;
            while Instant::now() < end {
                let req = Request::Set {
                    key: format!("c{c}-{}", n % 10_000),
                    value: value.clone(),
                };
                client.write(&req).await.expect("a write");
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / secs
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(3);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3.0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let seg = seg_cluster(dir.path()).await;
        let mem = mem_cluster().await;
        println!(
            "replicated writes/s, 3 nodes on loopback, {rounds} rounds of {secs} s, alternating"
        );
        println!(
            "{:>8} {:>14} {:>14} {:>8}   (rounds: segstore | memory)",
            "clients", "segstore", "memory", "ratio"
        );
        for clients in [1, 16] {
            let (mut s, mut m) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                s.push(run(SEG_PORT, clients, secs).await);
                m.push(run(MEM_PORT, clients, secs).await);
            }
            let (ms, mm) = (median(s.clone()), median(m.clone()));
            let fmt = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            println!(
                "{clients:>8} {ms:>14.0} {mm:>14.0} {:>8.2}   ({} | {})",
                ms / mm,
                fmt(&s),
                fmt(&m)
            );
        }
        for n in seg {
            n.stop().await;
        }
        for n in mem {
            n.stop().await;
        }
    });
}
