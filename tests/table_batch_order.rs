//! Issue 20 item 1. The bug: every cell of one `WriteBatch` or `Batch` without an
//! explicit timestamp shares the batch's timestamp, so the tie rules (tombstone first,
//! then the bytewise larger value) decided between operations on one key, not their
//! order: `delete k; put k` ended deleted and `put k "b"; put k "a"` kept "b". Code that
//! clears and rewrites in one batch (openraft's rocksdb store does in
//! `install_snapshot`) lost data. The fix: the last operation on a key in a batch wins,
//! at write and so after a flush and at replay. Explicit timestamps keep newest-wins.

use segstore::{Batch, Config, Store, WriteBatch};

type Op = (&'static [u8], Option<&'static [u8]>); // key, value (None: delete)

/// (operations in order, what `k` reads after them)
const CASES: &[(&[Op], Option<&[u8]>)] = &[
    (&[(b"k", Some(b"v")), (b"k", None)], None),
    (&[(b"k", None), (b"k", Some(b"v"))], Some(b"v")),
    (&[(b"k", Some(b"b")), (b"k", Some(b"a"))], Some(b"a")),
    (
        &[(b"k", Some(b"1")), (b"k", None), (b"k", Some(b"0"))],
        Some(b"0"),
    ),
];

fn check(store: &Store, case: usize, want: Option<&[u8]>, when: &str) {
    let t = store.table(&format!("t{case}")).unwrap();
    assert_eq!(
        t.get(b"k").unwrap().as_deref(),
        want,
        "case {case} {when}: {:?}",
        CASES[case].0
    );
}

#[test]
fn the_last_operation_on_a_key_in_a_batch_wins_after_flush_and_replay() {
    for across_tables in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Config::default()).unwrap();
        for (i, (ops, _)) in CASES.iter().enumerate() {
            let t = store.table(&format!("t{i}")).unwrap();
            if across_tables {
                let other = store.table("other").unwrap();
                let mut b = Batch::new();
                for (k, v) in *ops {
                    match v {
                        Some(v) => b.put(&t, k, v),
                        None => b.delete(&t, k),
                    };
                    b.put(&other, k, b"x");
                }
                store.write(&b).unwrap();
            } else {
                let mut b = WriteBatch::new();
                for (k, v) in *ops {
                    match v {
                        Some(v) => b.put(k, v),
                        None => b.delete(k),
                    };
                }
                t.write(&b).unwrap();
            }
        }
        for (i, (_, want)) in CASES.iter().enumerate() {
            check(&store, i, *want, "in the memtable");
        }
        drop(store); // no close: the next open replays the commit log
        let store = Store::open(dir.path(), Config::default()).unwrap();
        for (i, (_, want)) in CASES.iter().enumerate() {
            check(&store, i, *want, "after replay");
            store.table(&format!("t{i}")).unwrap().flush().unwrap();
            check(&store, i, *want, "after a flush");
        }
        store.close().unwrap();
    }
}

#[test]
fn explicit_timestamps_in_a_batch_keep_newest_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    let t = store.table("t").unwrap();
    let mut b = WriteBatch::new();
    b.put_at(b"k", b"new", 20).put_at(b"k", b"old", 10);
    b.delete_at(b"d", 5).put_at(b"d", b"older", 4);
    t.write(&b).unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(t.get(b"d").unwrap(), None);
    drop(t);
    store.close().unwrap();
}

/// Large batches (past the linear look-back) keep the same rule: the last operation
/// on each key wins.
#[test]
fn in_a_large_batch_too_the_last_operation_on_a_key_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    let t = store.table("t").unwrap();
    for n in [3usize, 8, 9, 40] {
        let mut b = WriteBatch::new();
        for i in 0..n {
            let k = format!("n{n}-k{}", i % 3);
            if i % 5 == 4 {
                b.delete(&k);
            } else {
                b.put(&k, format!("v{i}"));
            }
        }
        t.write(&b).unwrap();
        for j in 0..3.min(n) {
            let last = (0..n).filter(|i| i % 3 == j).max().unwrap();
            let want = (last % 5 != 4).then(|| format!("v{last}").into_bytes());
            let got = t.get(format!("n{n}-k{j}")).unwrap().map(|v| v.to_vec());
            assert_eq!(got, want, "batch of {n}, key {j}");
        }
    }
    drop(t);
    store.close().unwrap();
}
