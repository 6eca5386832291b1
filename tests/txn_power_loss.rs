//! Transactions under power loss at every I/O operation (the simulator of
//! `tests/power_loss/`): a single-threaded script of transfer transactions across two
//! tables, each also writing the count of transfers so far, with syncs and a flush
//! between, a transaction dropped uncommitted and one that conflicts. After the power
//! is lost at an operation and the store recovered and reopened, the balances are
//! exactly those after `count` transfers (each commit whole or absent, a prefix of
//! them), `count` is at least the last transfer known durable (under `batch` every
//! acknowledged commit; under `periodic` those before the last `sync` or flush), and
//! nothing of the dropped or conflicted transactions is there.
#![cfg(unix)]

use std::path::Path;

use segstore::io::PowerLoss;
use segstore::{Batch, CommitLogSync, Config, Error, FileRules, Store, TableConfig};

const TRANSFERS: u64 = 6;
/// (table, key) of each account.
const ACCOUNTS: [(&str, &str); 4] = [("a", "x"), ("a", "y"), ("b", "x"), ("b", "y")];

fn config(sync: CommitLogSync, rules: FileRules) -> Config {
    let mut cfg = Config::default();
    cfg.commitlog.sync = sync;
    cfg.table = TableConfig::default();
    cfg.table.background_compaction = false;
    cfg.file_rules = rules;
    cfg
}

/// Transfer `n` (from 1) moves `amount(n)` from account `from(n)` to `to(n)`.
fn transfer_of(n: u64) -> (usize, usize, u64) {
    let from = (n % 4) as usize;
    (from, (from + 1 + (n % 3) as usize) % 4, 5 * n)
}

/// The balances after `count` transfers.
fn balances_after(count: u64) -> [u64; 4] {
    let mut b = [100; 4];
    for n in 1..=count {
        let (from, to, amount) = transfer_of(n);
        let moved = amount.min(b[from]);
        b[from] -= moved;
        b[to] += moved;
    }
    b
}

fn num(v: Option<&[u8]>) -> u64 {
    v.map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap())
}

/// The script; returns how many transfers are known durable when it stops (at the
/// first error, which the power loss causes): `None` before the initial batch is.
fn script(store: &Store, periodic: bool) -> Option<u64> {
    let mut durable = None;
    let run = |durable: &mut Option<u64>| -> segstore::Result<()> {
        let tables = [store.table("a")?, store.table("b")?];
        let table = |i: usize| &tables[usize::from(ACCOUNTS[i].0 == "b")];
        let mut init = Batch::new();
        for (i, (_, k)) in ACCOUNTS.iter().enumerate() {
            init.put(table(i), k, "100");
        }
        init.put(&tables[1], "count", "0").sync(true);
        store.write(&init)?;
        *durable = Some(0);
        for n in 1..=TRANSFERS {
            let (from, to, amount) = transfer_of(n);
            let mut tx = store.transaction()?;
            let a = tx.get_with(table(from), ACCOUNTS[from].1, num)?;
            let b = tx.get_with(table(to), ACCOUNTS[to].1, num)?;
            let moved = amount.min(a);
            tx.put(table(from), ACCOUNTS[from].1, (a - moved).to_string())?;
            tx.put(table(to), ACCOUNTS[to].1, (b + moved).to_string())?;
            tx.put(&tables[1], "count", n.to_string())?;
            tx.commit()?;
            if !periodic {
                *durable = Some(n);
            }
            match n {
                2 => {
                    // Dropped uncommitted.
                    let mut tx = store.transaction()?;
                    tx.put(&tables[0], "x", "999")?;
                    tx.put(&tables[1], "count", "999")?;
                }
                3 => {
                    tables[0].flush()?;
                    *durable = Some(n);
                }
                4 => {
                    // Conflicted: it read "noise", which a plain put changes.
                    let mut tx = store.transaction()?;
                    tx.get(&tables[0], "noise")?;
                    tx.put(&tables[0], "x", "999")?;
                    tx.put(&tables[1], "count", "999")?;
                    tables[0].put("noise", n.to_string())?;
                    match tx.commit() {
                        Err(Error::Conflict { .. }) => {}
                        r => panic!("expected a conflict, got {r:?}"),
                    }
                }
                5 => {
                    store.sync()?;
                    *durable = Some(n);
                }
                _ => {}
            }
        }
        Ok(())
    };
    let _ = run(&mut durable);
    durable
}

fn check(dir: &Path, sync: CommitLogSync, durable: Option<u64>, point: &str) {
    let store = Store::open(dir, config(sync, FileRules::posix()))
        .unwrap_or_else(|e| panic!("{point}: the store does not open: {e}"));
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let read = |t: &str, k: &str| {
        let t = if t == "a" { &a } else { &b };
        t.get_with(k, |v| v.map(|v| num(Some(v)))).unwrap()
    };
    match read("b", "count") {
        None => {
            assert_eq!(durable, None, "{point}: nothing there, {durable:?} durable");
            for (t, k) in ACCOUNTS {
                assert_eq!(
                    read(t, k),
                    None,
                    "{point}: {t}/{k} without the initial batch"
                );
            }
        }
        Some(count) => {
            assert!(
                count <= TRANSFERS,
                "{point}: count {count}: a dropped or conflicted transaction's write"
            );
            assert!(
                Some(count) >= durable,
                "{point}: transfer {durable:?} was durable, count is {count}"
            );
            let got: Vec<u64> = ACCOUNTS.iter().map(|(t, k)| read(t, k).unwrap()).collect();
            assert_eq!(
                got,
                balances_after(count),
                "{point}: balances after {count} transfers"
            );
        }
    }
    drop((a, b));
    store.close().unwrap();
}

#[test]
fn committed_transfers_are_whole_and_a_prefix_after_power_loss() {
    for sync in [
        CommitLogSync::Batch,
        CommitLogSync::Periodic {
            period_ms: 3_600_000,
        },
    ] {
        let periodic = matches!(sync, CommitLogSync::Periodic { .. });
        let total = {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("store");
            let sim = PowerLoss::new(&dir, 0);
            let rules = FileRules::posix().with_power_loss(sim.clone());
            let store = Store::open(&dir, config(sync, rules)).unwrap();
            assert_eq!(
                script(&store, periodic),
                Some(if periodic { 5 } else { TRANSFERS })
            );
            drop(store);
            sim.ops()
        };
        let mut tried = 0;
        for at in 0..=total {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("store");
            let sim = PowerLoss::crashing_at(&dir, at);
            let rules = FileRules::posix().with_power_loss(sim.clone());
            let durable = match Store::open(&dir, config(sync, rules)) {
                Ok(store) => {
                    let d = script(&store, periodic);
                    drop(store);
                    d
                }
                Err(_) => None,
            };
            let point = format!(
                "{sync}: power lost at {}",
                sim.crash_point().unwrap_or_else(|| "the end".into())
            );
            sim.recover()
                .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
            check(&dir, sync, durable, &point);
            tried += 1;
        }
        eprintln!("{sync}: transactions: {tried} crash points of {total} operations");
        assert!(tried > 20);
    }
}
