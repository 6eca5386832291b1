//! A list-append history checked for serializability, as Elle does.
//!
//! Keys over two tables hold lists (comma-separated element ids). Concurrent
//! transactions each run a few micro-operations: read a key, scan a table (a read of
//! every key of it, an absent key reading the empty list), or append a unique element
//! to a key (a read of the key and a put of the list plus the element). Every committed
//! transaction's operations are recorded; conflicted ones are retried as new
//! transactions with new elements, and their elements must never appear.
//!
//! The check: every list read is a prefix of its key's final list, every committed
//! element appears exactly once and no other; then the dependency graph over committed
//! transactions, with the version order of a key given by its final list: `ww` from the
//! appender of each element to the appender of the next, `wr` from the appender of the
//! last element a read saw to the reader, `rw` from a reader to the appender of the
//! first element its read did not see. Serializable histories have an acyclic graph.

mod common;

use common::Rng;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use segstore::{CommitLogSync, Config, Error, Store, Table, Transaction};

const KEYS_PER_TABLE: u64 = 8;
const THREADS: usize = 4;
/// Committed transactions, over all threads.
const COMMITS: u64 = 12_000;

fn config() -> Config {
    let mut c = Config::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.memtable_flush_bytes = 64 << 10;
    c.table.compaction.min_threshold = 2;
    c.table.compaction.max_threshold = 4;
    c
}

/// A key: (table index, key index).
type Key = (usize, u64);

#[derive(Debug, Clone)]
enum Op {
    Read(Key, Vec<u64>),
    Append(Key, u64),
}

fn key_bytes(k: u64) -> Vec<u8> {
    format!("k{k:02}").into_bytes()
}

fn parse(v: Option<&[u8]>) -> Vec<u64> {
    match v {
        None => Vec::new(),
        Some(v) => std::str::from_utf8(v)
            .unwrap()
            .split(',')
            .map(|e| e.parse().unwrap())
            .collect(),
    }
}

fn unparse(l: &[u64]) -> String {
    l.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// One attempt at a random transaction; `Ok` with its operations if it committed.
fn attempt(
    store: &Store,
    tables: &[Arc<Table>; 2],
    rng: &mut Rng,
    next_element: &AtomicU64,
) -> segstore::Result<Vec<Op>> {
    let mut tx: Transaction = store.transaction()?;
    let mut ops = Vec::new();
    for _ in 0..1 + rng.next() % 4 {
        let k: Key = ((rng.next() % 2) as usize, rng.next() % KEYS_PER_TABLE);
        let t = &tables[k.0];
        match rng.next() % 10 {
            0..=3 => {
                let l = tx.get_with(t, key_bytes(k.1), parse)?;
                ops.push(Op::Read(k, l));
            }
            4 => {
                // Every key of the table, absent ones as empty lists; forward or back.
                let mut seen = BTreeMap::new();
                let scan = tx.scan(t, ..)?;
                let rows: Vec<_> = if rng.next() % 2 == 0 {
                    scan.collect::<segstore::Result<_>>()?
                } else {
                    scan.rev().collect::<segstore::Result<_>>()?
                };
                for (key, v) in rows {
                    let i: u64 = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
                    seen.insert(i, parse(Some(&v)));
                }
                for i in 0..KEYS_PER_TABLE {
                    ops.push(Op::Read((k.0, i), seen.remove(&i).unwrap_or_default()));
                }
            }
            _ => {
                let e = next_element.fetch_add(1, Ordering::Relaxed);
                let mut l = tx.get_with(t, key_bytes(k.1), parse)?;
                l.push(e);
                tx.put(t, key_bytes(k.1), unparse(&l))?;
                ops.push(Op::Append(k, e));
            }
        }
    }
    std::thread::yield_now();
    tx.commit()?;
    Ok(ops)
}

#[test]
fn list_append_histories_are_serializable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let tables = [store.table("left").unwrap(), store.table("right").unwrap()];
    let next_element = AtomicU64::new(1);
    let committed = AtomicU64::new(0);
    let start = Barrier::new(THREADS);
    let results: Vec<(Vec<Vec<Op>>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, tables, next_element, committed, start) =
                    (&store, &tables, &next_element, &committed, &start);
                s.spawn(move || {
                    let mut rng = Rng(0xE11E + 7919 * t as u64);
                    let (mut history, mut aborted) = (Vec::new(), 0);
                    start.wait();
                    while committed.load(Ordering::Relaxed) < COMMITS {
                        match attempt(store, tables, &mut rng, next_element) {
                            Ok(ops) => {
                                committed.fetch_add(1, Ordering::Relaxed);
                                history.push(ops);
                            }
                            Err(Error::Conflict { .. }) => aborted += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    (history, aborted)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let history: Vec<Vec<Op>> = results.iter().flat_map(|(h, _)| h.clone()).collect();
    let aborts: usize = results.iter().map(|(_, a)| a).sum();
    let finals: HashMap<Key, Vec<u64>> = (0..2)
        .flat_map(|t| (0..KEYS_PER_TABLE).map(move |k| (t, k)))
        .map(|k| {
            let l = tables[k.0].get_with(key_bytes(k.1), parse).unwrap();
            (k, l)
        })
        .collect();
    let edges = check(&history, &finals);
    eprintln!(
        "{} committed transactions, {aborts} conflicts, {edges} dependency edges, \
         longest list {}",
        history.len(),
        finals.values().map(Vec::len).max().unwrap()
    );
    assert!(history.len() as u64 >= COMMITS);
}

/// Check `history` (committed transactions' operations) against the final lists;
/// returns how many dependency edges the graph had.
fn check(history: &[Vec<Op>], finals: &HashMap<Key, Vec<u64>>) -> usize {
    // Who appended each element, and where it stands in its key's final list.
    let mut appender: HashMap<u64, usize> = HashMap::new();
    for (t, ops) in history.iter().enumerate() {
        for op in ops {
            if let Op::Append(_, e) = op {
                assert!(appender.insert(*e, t).is_none());
            }
        }
    }
    let mut in_final = 0;
    for (k, l) in finals {
        for e in l {
            let t = appender.get(e).unwrap_or_else(|| {
                panic!("element {e} of {k:?} was appended by no committed transaction")
            });
            assert!(
                history[*t]
                    .iter()
                    .any(|op| matches!(op, Op::Append(kk, ee) if kk == k && ee == e)),
                "element {e} is in {k:?}, appended to another key"
            );
        }
        in_final += l.len();
        let mut sorted = l.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), l.len(), "an element twice in {k:?}: {l:?}");
    }
    assert_eq!(in_final, appender.len(), "a committed append is missing");
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); history.len()];
    let mut add = |from: usize, to: usize| {
        if from != to {
            edges[from].push(to);
        }
    };
    for l in finals.values() {
        for w in l.windows(2) {
            add(appender[&w[0]], appender[&w[1]]); // ww
        }
    }
    for (t, ops) in history.iter().enumerate() {
        for op in ops {
            let Op::Read(k, seen) = op else { continue };
            let l = &finals[k];
            assert!(
                l.starts_with(seen),
                "transaction {t} read {seen:?} of {k:?}, not a prefix of {l:?}"
            );
            if let Some(last) = seen.last() {
                add(appender[last], t); // wr
            }
            if let Some(next) = l.get(seen.len()) {
                add(t, appender[next]); // rw
            }
        }
    }
    let n: usize = edges.iter().map(Vec::len).sum();
    if let Some(cycle) = find_cycle(&edges) {
        let shown: Vec<_> = cycle.iter().map(|&t| (t, &history[t])).collect();
        panic!("dependency cycle: {shown:?}");
    }
    n
}

/// A cycle of the graph, if it has one (iterative depth-first search).
fn find_cycle(edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; edges.len()];
    for root in 0..edges.len() {
        if mark[root] != Mark::New {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        mark[root] = Mark::Open;
        while let Some(&mut (v, ref mut i)) = stack.last_mut() {
            if let Some(&w) = edges[v].get(*i) {
                *i += 1;
                match mark[w] {
                    Mark::New => {
                        mark[w] = Mark::Open;
                        stack.push((w, 0));
                    }
                    Mark::Open => {
                        let from = stack.iter().position(|&(u, _)| u == w).unwrap();
                        return Some(stack[from..].iter().map(|&(u, _)| u).collect());
                    }
                    Mark::Done => {}
                }
            } else {
                mark[v] = Mark::Done;
                stack.pop();
            }
        }
    }
    None
}
