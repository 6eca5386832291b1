//! Durability a caller can wait on (issue 21 item 2): write sequence numbers,
//! `Store::sync`, `durable_seq`, `wait_durable`, `on_durable`, and an empty synced batch,
//! each checked against the power-loss simulator: what the call reported durable is
//! there after power loss, and a write after it (acknowledged, not fsynced) is not, which
//! shows the check can fail.
#![cfg(unix)]

use std::sync::mpsc;
use std::time::Duration;

use segstore::io::PowerLoss;
use segstore::{Batch, CommitLogSync, Config, FileRules, Store, WriteBatch};

/// Periodic with a period no test reaches: only the calls under test fsync.
const PERIODIC: CommitLogSync = CommitLogSync::Periodic {
    period_ms: 3_600_000,
};

fn config(sync: CommitLogSync, rules: FileRules) -> Config {
    let mut cfg = Config::default();
    cfg.commitlog.sync = sync;
    cfg.table.background_compaction = false;
    cfg.file_rules = rules;
    cfg
}

/// Open a store under the simulator, write `k1`, make it durable with `durable`, write
/// `k2` (acknowledged only), lose power, and return what a reopen finds of each.
fn lose_power_after(durable: impl FnOnce(&Store, u64)) -> (bool, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    {
        let rules = FileRules::posix().with_power_loss(sim.clone());
        let store = Store::open(&dir, config(PERIODIC, rules)).unwrap();
        let t = store.table("t").unwrap();
        let seq = t.write(WriteBatch::new().put(b"k1", b"1")).unwrap();
        assert!(
            store.durable_seq().unwrap() < seq,
            "periodic: not durable yet"
        );
        durable(&store, seq);
        assert!(store.durable_seq().unwrap() >= seq);
        t.put(b"k2", b"2").unwrap();
        // Power goes while the store is open (its drop would fsync at close).
        sim.crash_now();
    }
    sim.recover().unwrap();
    let store = Store::open(&dir, config(PERIODIC, FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    let found = (
        t.get(b"k1").unwrap().is_some(),
        t.get(b"k2").unwrap().is_some(),
    );
    drop(t);
    store.close().unwrap();
    found
}

#[test]
fn store_sync_makes_every_acknowledged_write_durable() {
    let found = lose_power_after(|store, seq| assert!(store.sync().unwrap() >= seq));
    assert_eq!(found, (true, false));
}

#[test]
fn wait_durable_makes_its_write_durable() {
    let found = lose_power_after(|store, seq| store.wait_durable(seq).unwrap());
    assert_eq!(found, (true, false));
}

#[test]
fn an_on_durable_callback_runs_after_the_fsync_that_covers_its_write() {
    let found = lose_power_after(|store, seq| {
        let (tx, rx) = mpsc::channel();
        store
            .on_durable(seq, move |r| tx.send(r.is_ok()).unwrap())
            .unwrap();
        assert!(rx.recv().unwrap());
    });
    assert_eq!(found, (true, false));
}

#[test]
fn an_empty_synced_batch_syncs_what_was_written_before_it() {
    let found = lose_power_after(|store, seq| {
        let t = store.table("t").unwrap();
        assert_eq!(t.write(WriteBatch::new().sync(true)).unwrap(), seq);
    });
    assert_eq!(found, (true, false));
    let found = lose_power_after(|store, seq| {
        assert_eq!(store.write(Batch::new().sync(true)).unwrap(), seq);
    });
    assert_eq!(found, (true, false));
}

#[test]
fn without_a_sync_the_write_is_lost_with_the_power() {
    // The control: the same script with nothing made durable loses both writes, so the
    // tests above would fail if their call did not fsync.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    {
        let rules = FileRules::posix().with_power_loss(sim.clone());
        let store = Store::open(&dir, config(PERIODIC, rules)).unwrap();
        let t = store.table("t").unwrap();
        t.put(b"k1", b"1").unwrap();
        // An empty batch without sync writes nothing and syncs nothing.
        t.write(&WriteBatch::new()).unwrap();
        sim.crash_now();
    }
    sim.recover().unwrap();
    let store = Store::open(&dir, config(PERIODIC, FileRules::posix())).unwrap();
    assert!(store.table("t").unwrap().get(b"k1").unwrap().is_none());
}

#[test]
fn sequence_numbers_order_every_write_of_the_store() {
    for sync in [
        PERIODIC,
        CommitLogSync::Batch,
        CommitLogSync::Group {
            window: Duration::from_micros(200),
        },
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), config(sync, FileRules::posix())).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        let s1 = a.write(WriteBatch::new().put(b"x", b"1")).unwrap();
        let s2 = b.write(WriteBatch::new().put(b"x", b"2")).unwrap();
        let mut batch = Batch::new();
        batch.put(&a, b"y", b"3").put(&b, b"y", b"4");
        let s3 = store.write(&batch).unwrap();
        assert!(s1 < s2 && s2 < s3, "{sync}: {s1} {s2} {s3}");
        if !matches!(sync, CommitLogSync::Periodic { .. }) {
            assert!(
                store.durable_seq().unwrap() >= s3,
                "{sync}: acknowledged after fsync"
            );
        }
        let e = store.wait_durable(s3 + 1).unwrap_err();
        assert!(e.to_string().contains("not been written"), "{e}");
        drop((a, b));
        store.close().unwrap();
        assert!(matches!(store.sync(), Err(segstore::Error::Closed)));
    }
}

#[test]
fn the_store_clock_orders_after_every_write_it_has_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), config(PERIODIC, FileRules::posix())).unwrap();
    let t = store.table("t").unwrap();
    // A cell from the future (a wall clock stepped back, say) is observed at write.
    let far = store.now().unwrap() + 3_600_000_000;
    t.write(WriteBatch::new().put_at(b"k", b"future", far))
        .unwrap();
    drop(t);
    store.close().unwrap();
    let store = Store::open(tmp.path(), config(PERIODIC, FileRules::posix())).unwrap();
    let (a, b) = (store.now().unwrap(), store.now().unwrap());
    assert!(far < a && a < b, "{far} {a} {b}");
    // So a write stamped with it wins over the future cell.
    let t = store.table("t").unwrap();
    t.write(WriteBatch::new().put_at(b"k", b"now", store.now().unwrap()))
        .unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"now"[..]));
    drop(t);
    store.close().unwrap();
    assert!(matches!(store.now(), Err(segstore::Error::Closed)));
}
