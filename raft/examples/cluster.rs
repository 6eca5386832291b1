//! A whole cluster on loopback, checked: start three `raft_kv` nodes (this program
//! run again as `cluster node ...`), write, SIGKILL the leader, keep writing, restart
//! it, add a fourth node that catches up by installing a snapshot, and compare every
//! node's data with each other and with every acknowledged write. Exits non-zero on a
//! mismatch.
//!
//! ```sh
//! cargo run --release -p segstore-raft --example cluster
//! cargo run --release -p segstore-raft --example cluster -- --dir /tmp/kv --base-port 21101 --writes 300
//! ```

mod kv;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use kv::client::{Client, Error};
use segstore_raft::kv::Request;

#[derive(Parser, Debug)]
#[command(about = "Run a checked 3+1 node raft_kv cluster on loopback")]
struct Args {
    #[command(subcommand)]
    node: Option<Sub>,
    /// Data directory (a temporary one by default).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Node i listens on 127.0.0.1:(base_port + i).
    #[arg(long, default_value_t = 21100)]
    base_port: u16,
    /// Writes per phase (three phases, then a quarter of it after node 4 joined).
    #[arg(long, default_value_t = 400)]
    writes: u64,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Run one node (what the cluster starts).
    Node(kv::node::NodeArgs),
}

/// A node process and the lines it printed.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

fn addr(base: u16, id: u64) -> String {
    format!("127.0.0.1:{}", base as u64 + id)
}

fn spawn(dir: &Path, base: u16, id: u64) -> Result<Proc, Error> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["node", "--id", &id.to_string(), "--http", &addr(base, id)])
        .arg("--dir")
        .arg(dir.join(id.to_string()))
        .args(["--snapshot-logs", "100", "--keep-logs", "10"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().expect("piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let p = Proc { child, lines };
    loop {
        match p.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.starts_with("LISTENING") => break,
            Ok(_) => {}
            Err(e) => return Err(format!("node {id} did not start: {e}").into()),
        }
    }
    println!("node {id} up at {}", addr(base, id));
    Ok(p)
}

/// Wait (bounded) until `f` holds, asking every 50 ms.
async fn until<F, Fut>(what: &str, mut f: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + Duration::from_secs(60);
    while !f().await {
        if Instant::now() > end {
            return Err(format!("timed out waiting until {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

struct Run {
    client: Client,
    base: u16,
    live: BTreeSet<u64>,
    /// Acknowledged writes: key -> value.
    acked: BTreeMap<String, String>,
    /// Keys written without an answer (may or may not be there).
    unsure: BTreeSet<String>,
    next: u64,
}

impl Run {
    /// `n` writes, each retried at another live node until one answers.
    async fn writes(&mut self, n: u64) -> Result<(), Error> {
        for _ in 0..n {
            let key = format!("key-{:05}", self.next % 997);
            let value = format!("v{}", self.next);
            self.next += 1;
            let req = Request::Set {
                key: key.clone(),
                value: value.clone(),
            };
            let mut tries = 0;
            loop {
                match self.client.write(&req).await {
                    Ok(_) => break,
                    Err(e) if tries < 200 => {
                        tries += 1;
                        self.unsure.insert(key.clone());
                        let others: Vec<u64> = self.live.iter().copied().collect();
                        let pick = others[tries % others.len()];
                        self.client.leader = addr(self.base, pick);
                        if tries == 1 {
                            println!("  write of {key} failed ({e}); retrying at the other nodes");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            self.acked.insert(key, value);
        }
        Ok(())
    }

    async fn leader(&self) -> Option<u64> {
        for &id in &self.live {
            if let Ok(m) = self.client.metrics(&addr(self.base, id)).await {
                if let Some(l) = m["current_leader"].as_u64() {
                    if self.live.contains(&l) {
                        return Some(l);
                    }
                }
            }
        }
        None
    }
}

async fn orchestrate(args: &Args, dir: &Path) -> Result<bool, Error> {
    let base = args.base_port;
    let mut procs: BTreeMap<u64, Proc> = BTreeMap::new();
    for id in 1..=3 {
        procs.insert(id, spawn(dir, base, id)?);
    }
    let mut run = Run {
        client: Client::new(&addr(base, 1)),
        base,
        live: (1..=3).collect(),
        acked: BTreeMap::new(),
        unsure: BTreeSet::new(),
        next: 0,
    };
    let one = [(1, openraft::BasicNode::new(addr(base, 1)))]
        .into_iter()
        .collect();
    run.client.init(&addr(base, 1), one).await?;
    until("node 1 leads", || async { run.leader().await == Some(1) }).await?;
    for id in 2..=3 {
        run.client.add_learner(id, &addr(base, id)).await?;
    }
    run.client.change_membership((1..=3).collect()).await?;
    println!("cluster {{1, 2, 3}} formed; writing {}", args.writes);
    run.writes(args.writes).await?;

    let leader = run.leader().await.ok_or("no leader")?;
    let mut p = procs.remove(&leader).expect("the leader's process");
    p.child.kill()?; // SIGKILL
    p.child.wait()?;
    run.live.remove(&leader);
    println!(
        "SIGKILLed the leader, node {leader}; writing {} more",
        args.writes
    );
    run.client.leader = addr(base, *run.live.first().expect("two left"));
    run.writes(args.writes).await?;
    println!("  new leader: node {:?}", run.leader().await);

    procs.insert(leader, spawn(dir, base, leader)?);
    run.live.insert(leader);
    println!("node {leader} restarted; writing {} more", args.writes);
    run.writes(args.writes).await?;

    let l = run.leader().await.ok_or("no leader")?;
    let m = run.client.metrics(&addr(base, l)).await?;
    let purged = m["purged"]["index"].as_u64().unwrap_or(0);
    println!(
        "leader node {l}: snapshot {}, log purged up to {purged}",
        m["snapshot"]["index"]
    );
    procs.insert(4, spawn(dir, base, 4)?);
    run.client.add_learner(4, &addr(base, 4)).await?;
    // Entries up to `purged` exist nowhere but in the leader's snapshot.
    let a4 = addr(base, 4);
    let c = run.client.clone();
    until("node 4 reports its snapshot", || {
        let (c, a4) = (c.clone(), a4.clone());
        async move { c.metrics(&a4).await.is_ok_and(|m| !m["snapshot"].is_null()) }
    })
    .await?;
    let m = run.client.metrics(&a4).await?;
    let at = m["snapshot"]["index"].as_u64().unwrap_or(0);
    println!(
        "node 4 caught up as a learner: snapshot at {at}, applied {}",
        m["last_applied"]["index"]
    );
    let by_snapshot = purged > 0 && at >= purged;
    run.client.change_membership((1..=4).collect()).await?;
    run.live.insert(4);
    run.writes(args.writes / 4).await?;

    let ok = compare(&mut run).await? && by_snapshot;
    if !by_snapshot {
        println!("MISMATCH: node 4 did not catch up by a snapshot (the leader had purged nothing, or node 4's snapshot is below it)");
    }
    for (id, mut p) in procs {
        drop(p.child.stdin.take()); // closing stdin stops the node
        let status = p.child.wait()?;
        let stopped = p.lines.try_iter().any(|l| l == "STOPPED");
        println!("node {id} stopped ({status}, clean: {stopped})");
    }
    Ok(ok)
}

/// Wait until every node has applied the same entries, then compare their rows.
async fn compare(run: &mut Run) -> Result<bool, Error> {
    let addrs: Vec<String> = run.live.iter().map(|&id| addr(run.base, id)).collect();
    let client = run.client.clone();
    until("every node applied the same entries", || {
        let (client, addrs) = (client.clone(), addrs.clone());
        async move {
            let mut applied = BTreeSet::new();
            for a in &addrs {
                match client.dump(a).await {
                    Ok(d) => applied.insert(d.applied),
                    Err(_) => return false,
                };
            }
            applied.len() == 1
        }
    })
    .await?;
    let mut ok = true;
    let first = client.dump(&addrs[0]).await?;
    for (id, a) in run.live.iter().zip(&addrs) {
        let d = client.dump(a).await?;
        let same = d == first;
        println!(
            "node {id}: applied {:?}, {} rows{}",
            d.applied,
            d.rows.len(),
            if same { "" } else { "  MISMATCH" }
        );
        ok &= same;
    }
    let rows: BTreeMap<String, String> = first.rows.into_iter().collect();
    for (k, v) in &run.acked {
        if rows.get(k) != Some(v) && !run.unsure.contains(k) {
            println!("MISMATCH: acknowledged {k} = {v}, found {:?}", rows.get(k));
            ok = false;
        }
    }
    let extra = rows
        .keys()
        .filter(|k| !run.acked.contains_key(*k) && !run.unsure.contains(*k))
        .count();
    if extra > 0 {
        println!("MISMATCH: {extra} keys nobody wrote");
        ok = false;
    }
    for k in run.acked.keys().take(3) {
        let r = run.client.read(k).await?;
        println!("linearizable read of {k} at the leader: {r:?}");
        ok &= r.as_ref() == rows.get(k);
    }
    println!(
        "{} acknowledged writes, {} distinct keys, {} written without an answer",
        run.next,
        run.acked.len(),
        run.unsure.len()
    );
    Ok(ok)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(Sub::Node(n)) = args.node {
        return kv::node::run(n).await.map_err(|e| e.to_string().into());
    }
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let ok = orchestrate(&args, &dir).await?;
    std::io::stdout().flush()?;
    if ok {
        println!("OK: every node holds the same data, and every acknowledged write");
        Ok(())
    } else {
        println!("FAILED: the nodes' data differ");
        std::process::exit(1);
    }
}
