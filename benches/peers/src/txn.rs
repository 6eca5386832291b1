//! Transactions against plain writes, and against fjall's optimistic write transactions
//! (issue 21, item 4): `segstore-peers --txn`.
//!
//! Each system loads the same keys (YCSB's 16-byte hashed keys, 100-byte values), then
//! runs, round by round with the systems interleaved:
//! - `put`: plain single-key writes of uniformly chosen loaded keys (the baseline);
//! - `txn`: read-modify-write transactions of one key (read it, write a new value,
//!   commit; a conflict is counted and the transaction retried, so the figure is
//!   committed transactions per second). With probability `--hot` (default 0.1) the key
//!   is the one hot key, else uniform: at 2 threads about `hot`² of the transactions
//!   meet the other thread's on the hot key, about 1% at the default; the measured
//!   conflict rate is printed beside each row.
//!
//! At 1 thread the `txn` key is always uniform (uncontended). Durability: what a plain
//! put gives each without an fsync per write (segstore's default `periodic` commit log,
//! which writes every record to the OS before the write returns; fjall as shipped, whose
//! journal reaches the OS on every write).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::ycsb::generators::Rng;
use crate::ycsb::workload::{key, value};

const TABLE: &str = "bench";
const SYSTEMS: [&str; 2] = ["segstore", "fjall"];

struct Args {
    keys: u64,
    ops: usize,
    rounds: usize,
    hot: f64,
    dir: Option<PathBuf>,
}

const USAGE: &str =
    "usage: segstore-peers --txn [--keys N] [--ops N] [--rounds R] [--hot P] [--dir DIR] [--quick]";

fn parse(args: impl Iterator<Item = String>) -> Args {
    let mut a = Args {
        keys: 1_000_000,
        ops: 100_000,
        rounds: 4,
        hot: 0.1,
        dir: None,
    };
    let mut it = args;
    while let Some(s) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| panic!("{s} needs a value\n{USAGE}"))
        };
        match s.as_str() {
            "--keys" => a.keys = val().parse().expect("--keys N"),
            "--ops" => a.ops = val().parse().expect("--ops N"),
            "--rounds" => a.rounds = val().parse().expect("--rounds R"),
            "--hot" => a.hot = val().parse().expect("--hot P"),
            "--dir" => a.dir = Some(PathBuf::from(val())),
            "--quick" => {
                a.keys = 20_000;
                a.ops = 5_000;
                a.rounds = 1;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}\n{USAGE}"),
        }
    }
    assert!(
        (0.0..=1.0).contains(&a.hot),
        "--hot is a probability\n{USAGE}"
    );
    a
}

/// One system: plain puts, reads, and a one-key read-modify-write transaction.
trait TxKv: Sync {
    fn put(&self, key: &[u8], value: &[u8]);
    /// A plain read: whether `key` is there.
    fn get(&self, key: &[u8]) -> bool;
    /// A transaction that writes `value` to `key` without reading, committed.
    fn blind(&self, key: &[u8], value: &[u8]);
    /// Read `key`, write `value` to it, commit: `false` on a conflict (nothing written).
    fn rmw(&self, key: &[u8], value: &[u8]) -> bool;
    fn close(self: Box<Self>);
}

struct Seg {
    store: segstore::Store,
    t: Arc<segstore::Table>,
}

impl TxKv for Seg {
    fn put(&self, key: &[u8], value: &[u8]) {
        self.t.put(key, value).unwrap();
    }
    fn get(&self, key: &[u8]) -> bool {
        self.t.get_with(key, |v| v.is_some()).unwrap()
    }
    fn blind(&self, key: &[u8], value: &[u8]) {
        let mut tx = self.store.transaction().unwrap();
        tx.put(&self.t, key, value).unwrap();
        tx.commit().unwrap();
    }
    fn rmw(&self, key: &[u8], value: &[u8]) -> bool {
        let mut tx = self.store.transaction().unwrap();
        let old = tx.get(&self.t, key).unwrap();
        assert!(old.is_some(), "a loaded key is missing");
        tx.put(&self.t, key, value).unwrap();
        match tx.commit() {
            Ok(_) => true,
            Err(segstore::Error::Conflict { .. }) => false,
            Err(e) => panic!("{e}"),
        }
    }
    fn close(self: Box<Self>) {
        let Seg { store, t } = *self;
        drop(t);
        store.close().unwrap();
    }
}

struct Fjall {
    db: fjall::OptimisticTxDatabase,
    ks: fjall::OptimisticTxKeyspace,
}

impl TxKv for Fjall {
    fn put(&self, key: &[u8], value: &[u8]) {
        self.ks.insert(key, value).unwrap();
    }
    fn get(&self, key: &[u8]) -> bool {
        self.ks.get(key).unwrap().is_some()
    }
    fn blind(&self, key: &[u8], value: &[u8]) {
        let mut tx = self.db.write_tx().unwrap();
        tx.insert(&self.ks, key, value);
        tx.commit().unwrap().unwrap();
    }
    fn rmw(&self, key: &[u8], value: &[u8]) -> bool {
        use fjall::Readable;
        let mut tx = self.db.write_tx().unwrap();
        let old = tx.get(&self.ks, key).unwrap();
        assert!(old.is_some(), "a loaded key is missing");
        tx.insert(&self.ks, key, value);
        tx.commit().unwrap().is_ok()
    }
    fn close(self: Box<Self>) {
        self.db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
}

fn open(id: &str, dir: &Path) -> Box<dyn TxKv> {
    match id {
        "segstore" => {
            let store = segstore::Store::open(dir, segstore::Config::default()).unwrap();
            let t = store.table(TABLE).unwrap();
            Box::new(Seg { store, t })
        }
        _ => {
            let db = fjall::OptimisticTxDatabase::builder(dir).open().unwrap();
            let ks = db
                .keyspace(TABLE, fjall::KeyspaceCreateOptions::default)
                .unwrap();
            Box::new(Fjall { db, ks })
        }
    }
}

/// Load `keys` items through each system's plain write path in batches, compacted.
fn load(id: &str, dir: &Path, keys: u64) {
    match id {
        "segstore" => {
            let store = segstore::Store::open(dir, segstore::Config::default()).unwrap();
            let t = store.table(TABLE).unwrap();
            for c in (0..keys).collect::<Vec<_>>().chunks(1000) {
                let mut b = segstore::WriteBatch::default();
                for &n in c {
                    b.put(key(n), value(n, 0));
                }
                t.write(&b).unwrap();
            }
            t.flush().unwrap();
            t.compact().unwrap();
            drop(t);
            store.close().unwrap();
        }
        _ => {
            let db = fjall::OptimisticTxDatabase::builder(dir).open().unwrap();
            let ks = db
                .keyspace(TABLE, fjall::KeyspaceCreateOptions::default)
                .unwrap();
            for c in (0..keys).collect::<Vec<_>>().chunks(1000) {
                let mut b = db.inner().batch();
                for &n in c {
                    b.insert(ks.inner(), key(n), value(n, 0));
                }
                b.commit().unwrap();
            }
            ks.inner().major_compact().unwrap();
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }
    }
}

/// Committed operations per second and conflicts per attempted transaction.
#[derive(Clone)]
struct Figure {
    /// Operations done (committed, for transactions).
    ops: u64,
    secs: f64,
    /// Commits that failed with a conflict (and were retried).
    conflicts: u64,
}

impl Figure {
    fn per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    fn conflict_rate(&self) -> f64 {
        self.conflicts as f64 / (self.ops + self.conflicts) as f64
    }
}

/// What a phase does per operation.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// A plain put.
    Put,
    /// A plain get, then a plain put of the same key (no transaction around them).
    GetPut,
    /// A transaction that only writes the key.
    Blind,
    /// A transaction that reads the key and writes it (retried on a conflict).
    Rmw,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Put => "plain put",
            Kind::GetPut => "plain get + put",
            Kind::Blind => "txn: put, commit",
            Kind::Rmw => "txn: get, put, commit",
        }
    }
}

/// The phases of a round, in order.
const CASES: [(Kind, usize); 6] = [
    (Kind::Put, 1),
    (Kind::GetPut, 1),
    (Kind::Blind, 1),
    (Kind::Rmw, 1),
    (Kind::Put, 2),
    (Kind::Rmw, 2),
];

/// Chunks per 1-thread case: the 1-thread cases take turns a chunk at a time.
const CHUNKS: usize = 20;

/// The 1-thread cases of [`CASES`] (indices), taking turns in chunks of
/// `ops / CHUNKS` operations, each case timed over its own chunks only. Every
/// operation writes into the memtable, and a write costs more as the memtable grows
/// (about twice as much at a million entries as at none, measured), so cases run one
/// after another would each meet a different memtable; in turns they meet the same.
fn one_thread_cases(kv: &dyn TxKv, cases: &[usize], a: &Args, seed: u64) -> Vec<Figure> {
    let chunk = Args {
        keys: a.keys,
        ops: (a.ops / CHUNKS).max(1),
        rounds: a.rounds,
        hot: a.hot,
        dir: None,
    };
    let mut sums: Vec<Figure> = cases
        .iter()
        .map(|_| Figure {
            ops: 0,
            secs: 0.0,
            conflicts: 0,
        })
        .collect();
    for n in 0..CHUNKS {
        for (sum, &c) in sums.iter_mut().zip(cases) {
            let f = phase(kv, CASES[c].0, 1, &chunk, seed * 1024 + (n * 16 + c) as u64);
            sum.ops += f.ops;
            sum.secs += f.secs;
            sum.conflicts += f.conflicts;
        }
    }
    sums
}

/// `threads` threads doing `ops` operations of `kind` each.
fn phase(kv: &dyn TxKv, kind: Kind, threads: usize, a: &Args, seed: u64) -> Figure {
    let hot = if threads > 1 { a.hot } else { 0.0 };
    let t = Instant::now();
    let conflicts: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed * 64 + i as u64);
                    let mut conflicts = 0;
                    for op in 0..a.ops {
                        let n = if rng.next_f64() < hot {
                            0
                        } else {
                            rng.next_u64() % a.keys
                        };
                        let (k, v) = (key(n), value(n, seed + op as u64));
                        match kind {
                            Kind::Put => kv.put(&k, &v),
                            Kind::GetPut => {
                                assert!(kv.get(&k), "a loaded key is missing");
                                kv.put(&k, &v);
                            }
                            Kind::Blind => kv.blind(&k, &v),
                            Kind::Rmw => {
                                while !kv.rmw(&k, &v) {
                                    conflicts += 1;
                                }
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    Figure {
        ops: (a.ops * threads) as u64,
        secs: t.elapsed().as_secs_f64(),
        conflicts,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn main(args: impl Iterator<Item = String>) {
    let a = parse(args);
    let tmp;
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().unwrap();
            tmp.path().to_path_buf()
        }
    };
    for id in SYSTEMS {
        let d = root.join(format!("txn_{id}"));
        let _ = std::fs::remove_dir_all(&d);
        let t = Instant::now();
        load(id, &d, a.keys);
        eprintln!("loaded {id} in {:.1} s", t.elapsed().as_secs_f64());
    }
    // Per system, per case, the figure of each round.
    let mut figs = vec![vec![Vec::new(); CASES.len()]; SYSTEMS.len()];
    for round in 0..a.rounds {
        for (s, id) in SYSTEMS.iter().enumerate() {
            let kv = open(id, &root.join(format!("txn_{id}")));
            let one: Vec<usize> = (0..CASES.len()).filter(|&c| CASES[c].1 == 1).collect();
            let seed = (round * 16) as u64;
            for (&c, f) in one.iter().zip(one_thread_cases(&*kv, &one, &a, seed)) {
                figs[s][c].push(f);
            }
            for c in (0..CASES.len()).filter(|&c| CASES[c].1 > 1) {
                let (kind, threads) = CASES[c];
                let seed = (round * 16 + c) as u64;
                figs[s][c].push(phase(&*kv, kind, threads, &a, seed));
            }
            kv.close();
        }
        eprintln!("round {} of {} done", round + 1, a.rounds);
    }
    report(&a, &figs);
}

fn report(a: &Args, figs: &[Vec<Vec<Figure>>]) {
    println!(
        "\n{} keys, {} ops per thread per phase, hot key probability {} at 2 threads, median of {} rounds\n",
        a.keys, a.ops, a.hot, a.rounds
    );
    println!("| operation | threads | segstore K/s | fjall K/s | segstore / fjall | segstore / its plain put | fjall / its plain put | conflicts segstore / fjall |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let med = |s: usize, c: usize, f: fn(&Figure) -> f64| {
        let mut v: Vec<f64> = figs[s][c].iter().map(f).collect();
        median(&mut v)
    };
    for (c, &(kind, threads)) in CASES.iter().enumerate() {
        let put = CASES
            .iter()
            .position(|&p| p == (Kind::Put, threads))
            .unwrap();
        let (seg, fj) = (med(0, c, |f| f.per_sec()), med(1, c, |f| f.per_sec()));
        let (seg_put, fj_put) = (med(0, put, |f| f.per_sec()), med(1, put, |f| f.per_sec()));
        let conflicts = if kind == Kind::Rmw {
            format!(
                "{:.2}% / {:.2}%",
                med(0, c, |f| f.conflict_rate()) * 100.0,
                med(1, c, |f| f.conflict_rate()) * 100.0
            )
        } else {
            String::new()
        };
        println!(
            "| {} | {threads} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {conflicts} |",
            kind.label(),
            seg / 1e3,
            fj / 1e3,
            seg / fj,
            seg / seg_put,
            fj / fj_put
        );
    }
}
