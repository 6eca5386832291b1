//! Power lost, then a new run: the writes made after a recovery survive the next replay
//! (sequence numbers the log never made durable are not named, nor handed out twice).

use segstore::io::rules::{FaultKind, Faults};
use segstore::io::PowerLoss;
use segstore::{FileRules, Store, Table};

use crate::harness::{config, opts, rules, run, stride, PERIODIC};
use crate::scripts::{writes, Script};

/// Under `periodic`, a flush of one table while another holds unsynced, unflushed
/// writes, then power lost anywhere: the next run writes again and those writes must
/// survive its own clean restart. (The positions file once named sequence numbers whose
/// log records were not durable: after a lost tail the next run reused them, and replay
/// skipped the new records of the flushed table.)
#[test]
fn periodic_writes_after_a_recovery_are_replayed() {
    let o = opts(PERIODIC);
    let script: Script = |c| {
        writes(c, "a", 1, 3)?;
        writes(c, "b", 1, 3)?;
        c.flush("b")?;
        writes(c, "b", 2, 2)?;
        c.flush("b")
    };
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, 0);
        run(&dir, o.sync, false, rules(o, &sim), script);
        sim.ops()
    };
    for at in (0..=total).step_by(stride() as usize) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, at);
        sim.set_torn_writes(at % 2 == 1);
        sim.crash_at(at);
        run(&dir, o.sync, false, rules(o, &sim), script);
        let point = format!(
            "periodic/write after recovery: power lost at {}",
            sim.crash_point().unwrap_or_else(|| "the end".into())
        );
        sim.recover().unwrap();
        {
            let store = Store::open(&dir, config(o.sync, FileRules::posix(), false))
                .unwrap_or_else(|e| panic!("{point}: {e}"));
            let t = store.table("b").unwrap();
            for i in 0..5 {
                t.put(format!("new{i}"), "x").unwrap();
            }
            store.tables().commit_log().sync().unwrap();
            drop(t);
            // No close: a close would flush, and the records must come back by replay.
            drop(store);
        }
        let store = Store::open(&dir, config(o.sync, FileRules::posix(), false)).unwrap();
        let t = store.table("b").unwrap();
        for i in 0..5 {
            assert_eq!(
                t.get(format!("new{i}")).unwrap().map(|v| v.to_vec()),
                Some(b"x".to_vec()),
                "{point}: a write of the run after recovery was skipped by replay"
            );
        }
        drop(t);
        store.close().unwrap();
    }
}

/// `new0` .. `new{n-1}` of `t` read `y`: writes synced after a recovery survived the
/// next power loss.
fn assert_new_writes(t: &Table, n: u32) {
    for i in 0..n {
        assert_eq!(
            t.get(format!("new{i}")).unwrap().as_deref(),
            Some(&b"y"[..]),
            "new{i}: a write synced after the recovery was lost"
        );
    }
}

/// Under `periodic`, a table's writes may still be unsynced when it is dropped. The
/// drop names the sequence numbers it covers in the positions file, so it makes them
/// durable in the log first: otherwise a power loss right after the drop loses them
/// from the log, the next run hands the same numbers to a new table of the name, and
/// replay skips that table's records as the dropped one's. Two power losses: after the
/// drop, and after the new table's writes were synced.
#[test]
fn a_table_written_after_a_drop_and_a_power_loss_keeps_its_synced_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    let cfg = || config(PERIODIC, rules(opts(PERIODIC), &sim), false);
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let a = store.table("a").unwrap();
        for i in 0..5u32 {
            a.put(format!("old{i}"), b"x").unwrap();
        }
        drop(a);
        store.drop_table("a").unwrap();
        sim.crash_now();
    }
    sim.recover().unwrap();
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let a = store.table("a").unwrap();
        assert_eq!(a.get("old0").unwrap(), None, "the drop held");
        for i in 0..3u32 {
            a.put(format!("new{i}"), b"y").unwrap();
        }
        store.tables().commit_log().sync().unwrap();
        drop(a);
        sim.crash_now();
    }
    sim.recover().unwrap();
    let store = Store::open(&dir, cfg()).unwrap();
    let a = store.table("a").unwrap();
    assert_new_writes(&a, 3);
    assert_eq!(a.get("old0").unwrap(), None);
    drop(a);
    store.close().unwrap();
}

/// On a poisoned commit log (a failed fsync) a flush still publishes its segment, but
/// the checkpoint after it must not write positions naming sequence numbers the log
/// never made durable: its log sync fails first. Otherwise (here: table `b` holds an
/// older unflushed write, so `replay_from` stays low) a power loss drops the log tail,
/// the next run hands those numbers out again, and replay skips `a`'s new records as
/// flushed. Two power losses: after the poisoned flush, and after `a`'s new writes
/// were synced.
#[test]
fn a_flush_on_a_poisoned_log_writes_no_positions_ahead_of_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    let rules = FileRules::posix()
        .with_faults(Faults::new())
        .with_power_loss(sim.clone());
    let cfg = || config(PERIODIC, rules.clone(), false);
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        a.put("a1", b"x").unwrap();
        b.put("b1", b"x").unwrap();
        a.put("a2", b"x").unwrap();
        a.put("a3", b"x").unwrap();
        rules
            .faults()
            .unwrap()
            .add(FaultKind::Fsync, "commitlog-", 0, 1);
        assert!(
            store.tables().commit_log().sync().is_err(),
            "the injected fsync fault"
        );
        assert!(
            matches!(a.flush(), Err(segstore::Error::Poisoned(_))),
            "a flush on a poisoned log publishes, then reports the poison"
        );
        sim.crash_now();
        drop((a, b));
    }
    sim.recover().unwrap();
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let a = store.table("a").unwrap();
        for i in 0..4u32 {
            a.put(format!("new{i}"), b"y").unwrap();
        }
        store.tables().commit_log().sync().unwrap();
        sim.crash_now();
        drop(a);
    }
    sim.recover().unwrap();
    let store = Store::open(&dir, cfg()).unwrap();
    let a = store.table("a").unwrap();
    assert_new_writes(&a, 4);
    drop(a);
    store.close().unwrap();
}
