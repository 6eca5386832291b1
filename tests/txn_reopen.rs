//! Transactions across a reopen without close (the store dropped: the commit log
//! replays): every committed transaction is whole in both tables, some of them in
//! segments and some only in the log; a transaction dropped uncommitted, and one whose
//! commit conflicted, left nothing. In each commit log sync mode.

use std::time::Duration;

use segstore::{CommitLogSync, Config, Error, Store};

fn config(sync: CommitLogSync) -> Config {
    let mut c = Config::default();
    c.commitlog.sync = sync;
    c.commitlog.segment_size = 8192;
    c.table.memtable_flush_bytes = 2048;
    c
}

#[test]
fn committed_transactions_are_whole_after_a_reopen_and_others_left_nothing() {
    for sync in [
        CommitLogSync::Periodic { period_ms: 10_000 },
        CommitLogSync::Batch,
        CommitLogSync::Group {
            window: Duration::from_micros(200),
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), config(sync)).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        let mut last = 0;
        for i in 0..200u32 {
            let mut tx = store.transaction().unwrap();
            let prev = tx.get(&a, "counter").unwrap();
            let n: u32 = prev.map_or(0, |v| std::str::from_utf8(&v).unwrap().parse().unwrap());
            assert_eq!(n, i);
            tx.put(&a, "counter", (n + 1).to_string()).unwrap();
            tx.put(&a, format!("k{i:04}"), format!("v{i}")).unwrap();
            tx.put(&b, format!("k{i:04}"), format!("v{i}")).unwrap();
            if i > 0 && i % 3 == 0 {
                tx.delete(&a, format!("k{:04}", i - 1)).unwrap();
                tx.delete(&b, format!("k{:04}", i - 1)).unwrap();
            }
            let seq = tx.commit().unwrap();
            assert!(seq > last);
            last = seq;
            if i == 100 {
                a.flush().unwrap(); // the first half of table a in a segment
            }
        }
        // Dropped uncommitted.
        let mut tx = store.transaction().unwrap();
        tx.put(&a, "uncommitted", "1").unwrap();
        tx.put(&b, "uncommitted", "1").unwrap();
        drop(tx);
        // Conflicted.
        let mut tx = store.transaction().unwrap();
        tx.get(&a, "counter").unwrap();
        tx.put(&a, "conflicted", "1").unwrap();
        tx.put(&b, "conflicted", "1").unwrap();
        a.put("counter", "200").unwrap(); // the value it had: no conflict by itself
        b.put("other", "x").unwrap(); // not read: no conflict either
        a.put("counter", "201").unwrap();
        assert!(matches!(tx.commit(), Err(Error::Conflict { .. })));
        drop((a, b));
        drop(store);

        let store = Store::open(dir.path(), config(sync)).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        assert_eq!(a.get("counter").unwrap().as_deref(), Some(&b"201"[..]));
        for i in 0..200u32 {
            let k = format!("k{i:04}");
            let want = (i % 3 != 2).then(|| format!("v{i}").into_bytes());
            assert_eq!(
                a.get(&k).unwrap().map(|v| v.to_vec()),
                want,
                "{sync:?}: a {k}"
            );
            assert_eq!(
                b.get(&k).unwrap().map(|v| v.to_vec()),
                want,
                "{sync:?}: b {k}"
            );
        }
        for k in ["uncommitted", "conflicted"] {
            assert_eq!(a.get(k).unwrap(), None, "{sync:?}: {k}");
            assert_eq!(b.get(k).unwrap(), None, "{sync:?}: {k}");
        }
        drop((a, b));
        store.close().unwrap();
    }
}
