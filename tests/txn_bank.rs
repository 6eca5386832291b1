//! Jepsen's bank test on transactions, and a lost-update check against plain writes.
//!
//! Bank: accounts spread over two tables, transfer transactions on concurrent threads
//! (read two balances, move an amount, commit; retry on `Conflict`), read-only
//! transactions on others that read every balance (by scan of one table, gets of the
//! other) and must always see the same total; a thread flushing and compacting the
//! tables throughout. At the end, and after a reopen without close, the total
//! holds.
//!
//! Plain-write racer: one key, read-then-written by transactions and written blindly
//! by plain puts and `Store::write` batches, each write returning its sequence number.
//! Serializability in commit order means every committed transaction read the value of
//! the write numbered just before its own (no update lost between its view and its
//! commit): checked over the whole history, sorted by sequence number.

mod common;

use common::Rng;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use segstore::{Batch, CommitLogSync, CompactionStrategy, Config, Error, Store, Table};

const ACCOUNTS: u64 = 10;
const INITIAL: u64 = 1_000;
const TRANSFERS_PER_THREAD: u64 = 1_500;

fn config() -> Config {
    let mut c = Config::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.memtable_flush_bytes = 4096;
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c.table.compaction.min_threshold = 2;
    c.table.compaction.max_threshold = 4;
    c
}

fn key(i: u64) -> Vec<u8> {
    format!("acct{i:03}").into_bytes()
}

fn num(v: Option<&[u8]>) -> u64 {
    v.map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap())
}

/// Account `i` lives in table `i % 2`.
fn table_of(tables: &[Arc<Table>; 2], i: u64) -> &Arc<Table> {
    &tables[(i % 2) as usize]
}

/// Every balance, read in one transaction: a scan of table 0, gets of table 1.
fn total(store: &Store, tables: &[Arc<Table>; 2]) -> u64 {
    let tx = store.transaction().unwrap();
    let mut sum = 0;
    for row in tx.scan(&tables[0], ..).unwrap() {
        sum += num(Some(&row.unwrap().1));
    }
    let odd: Vec<Vec<u8>> = (0..ACCOUNTS).filter(|i| i % 2 == 1).map(key).collect();
    for v in tx.multi_get(&tables[1], &odd).unwrap() {
        sum += num(v.as_deref());
    }
    tx.commit().unwrap();
    sum
}

/// Move a random amount between two random accounts; retried until it commits.
/// Returns how many attempts conflicted.
fn transfer(store: &Store, tables: &[Arc<Table>; 2], rng: &mut Rng) -> u64 {
    let from = rng.next() % ACCOUNTS;
    let to = (from + 1 + rng.next() % (ACCOUNTS - 1)) % ACCOUNTS;
    let amount = 1 + rng.next() % 50;
    let mut conflicts = 0;
    loop {
        let mut tx = store.transaction().unwrap();
        let a = tx.get_with(table_of(tables, from), key(from), num).unwrap();
        let b = tx.get_with(table_of(tables, to), key(to), num).unwrap();
        // Let others run between the reads and the commit (not a timed wait).
        std::thread::yield_now();
        let moved = amount.min(a);
        tx.put(table_of(tables, from), key(from), (a - moved).to_string())
            .unwrap();
        tx.put(table_of(tables, to), key(to), (b + moved).to_string())
            .unwrap();
        match tx.commit() {
            Ok(_) => return conflicts,
            Err(Error::Conflict { .. }) => conflicts += 1,
            Err(e) => panic!("transfer: {e}"),
        }
    }
}

#[test]
fn concurrent_transfers_keep_the_total_for_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let tables = [store.table("even").unwrap(), store.table("odd").unwrap()];
    let mut init = Batch::new();
    for i in 0..ACCOUNTS {
        init.put(table_of(&tables, i), key(i), INITIAL.to_string());
    }
    store.write(&init).unwrap();
    let want = ACCOUNTS * INITIAL;
    let (transferers, readers) = (3, 2);
    let done = AtomicBool::new(false);
    let finished = AtomicU64::new(0);
    let conflicts = AtomicU64::new(0);
    let start = Barrier::new(transferers + readers + 1);
    let reads = std::thread::scope(|s| {
        for t in 0..transferers {
            let (store, tables, done, finished, conflicts, start) =
                (&store, &tables, &done, &finished, &conflicts, &start);
            s.spawn(move || {
                let mut rng = Rng(0x5EED + t as u64 * 7919);
                start.wait();
                for _ in 0..TRANSFERS_PER_THREAD {
                    conflicts.fetch_add(transfer(store, tables, &mut rng), Ordering::Relaxed);
                }
                if finished.fetch_add(1, Ordering::AcqRel) + 1 == transferers as u64 {
                    done.store(true, Ordering::Release);
                }
            });
        }
        // Flushes and compactions throughout, until the transfers are done.
        {
            let (tables, done, start) = (&tables, &done, &start);
            s.spawn(move || {
                start.wait();
                let mut i = 0;
                while !done.load(Ordering::Acquire) {
                    let t = &tables[i % 2];
                    t.flush().unwrap();
                    if i % 3 == 0 {
                        t.compact().unwrap();
                    }
                    i += 1;
                }
            });
        }
        let readers: Vec<_> = (0..readers)
            .map(|_| {
                let (store, tables, done, start) = (&store, &tables, &done, &start);
                s.spawn(move || {
                    start.wait();
                    let mut n = 0u64;
                    // At least 200 reads each, then until the transfers are done.
                    while n < 200 || !done.load(Ordering::Acquire) {
                        assert_eq!(total(store, tables), want, "read-only transaction #{n}");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>()
    });
    assert_eq!(total(&store, &tables), want);
    let stats: Vec<_> = tables.iter().map(|t| t.stats()).collect();
    eprintln!(
        "{} transfers, {} conflicts retried, {reads} read-only transactions; {stats:?}",
        transferers as u64 * TRANSFERS_PER_THREAD,
        conflicts.load(Ordering::Relaxed)
    );
    assert!(
        stats.iter().all(|s| s.flushes > 0),
        "flushes ran during the test"
    );
    // A reopen without close (the commit log replays): the total holds.
    drop(tables);
    drop(store);
    let store = Store::open(dir.path(), config()).unwrap();
    let tables = [store.table("even").unwrap(), store.table("odd").unwrap()];
    assert_eq!(total(&store, &tables), want);
}

/// What one write of the racer test wrote and what (if a transaction) it had read.
struct Write {
    seq: u64,
    value: Vec<u8>,
    read: Option<Vec<u8>>,
}

#[test]
fn no_update_is_lost_between_a_transactions_view_and_its_commit_to_plain_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let (hot, other) = (store.table("hot").unwrap(), store.table("other").unwrap());
    hot.put("k", "init").unwrap();
    let start = Barrier::new(4);
    let (mut history, committed, conflicts) = std::thread::scope(|s| {
        let txs: Vec<_> = (0..2)
            .map(|t| {
                let (store, hot, start) = (&store, &hot, &start);
                s.spawn(move || {
                    let mut out = Vec::new();
                    let mut conflicts = 0;
                    start.wait();
                    for i in 0..2_000 {
                        let mut tx = store.transaction().unwrap();
                        let read = tx.get(hot, "k").unwrap().unwrap().to_vec();
                        std::thread::yield_now();
                        let value = format!("tx{t}-{i}").into_bytes();
                        tx.put(hot, "k", &value).unwrap();
                        match tx.commit() {
                            Ok(seq) => out.push(Write {
                                seq,
                                value,
                                read: Some(read),
                            }),
                            Err(Error::Conflict { .. }) => conflicts += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    (out, conflicts)
                })
            })
            .collect();
        let plains: Vec<_> = (0..2)
            .map(|p| {
                let (store, hot, other, start) = (&store, &hot, &other, &start);
                s.spawn(move || {
                    let mut out = Vec::new();
                    start.wait();
                    for i in 0..2_000 {
                        let value = format!("plain{p}-{i}").into_bytes();
                        let seq = if i % 2 == 0 {
                            hot.write(segstore::WriteBatch::new().put("k", &value))
                                .unwrap()
                        } else {
                            let mut b = Batch::new();
                            b.put(hot, "k", &value).put(other, "x", &value);
                            store.write(&b).unwrap()
                        };
                        out.push(Write {
                            seq,
                            value,
                            read: None,
                        });
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut conflicts = 0;
        for t in txs {
            let (w, c) = t.join().unwrap();
            all.extend(w);
            conflicts += c;
        }
        let n_tx = all.len();
        for p in plains {
            all.extend(p.join().unwrap());
        }
        (all, n_tx, conflicts)
    });
    history.sort_by_key(|w| w.seq);
    assert!(
        history.windows(2).all(|w| w[0].seq < w[1].seq),
        "sequence numbers are unique"
    );
    let mut last = b"init".to_vec();
    for w in &history {
        if let Some(read) = &w.read {
            assert_eq!(
                std::str::from_utf8(read).unwrap(),
                std::str::from_utf8(&last).unwrap(),
                "the transaction committed at {} read a value overwritten before its commit",
                w.seq
            );
        }
        last.clone_from(&w.value);
    }
    assert_eq!(hot.get("k").unwrap().as_deref(), Some(&last[..]));
    eprintln!(
        "{committed} committed transactions, {conflicts} conflicts, {} writes",
        history.len()
    );
}
