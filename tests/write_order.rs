//! Sequence numbers and timestamps order writes alike (commit log invariant 8): a plain
//! put held by a pause point between taking its timestamp and its log append, while
//! another put of the same key goes through, must come out numbered after that put and
//! win reads, replay and reopen. Without the check at the append it is numbered last
//! but loses to the other put's later timestamp, so the returned numbers would say one
//! order and reads the other. And a put overtaken twice takes the commit lock
//! exclusively, so that a third write waits for it instead of overtaking it again.

use std::sync::Arc;

use segstore::io::faults::Faults;
use segstore::{Config, FileRules, Store, WriteBatch};

fn open(dir: &std::path::Path, rules: &FileRules) -> Store {
    let mut config = Config::default();
    config.file_rules = rules.clone();
    Store::open(dir, config).unwrap()
}

#[test]
fn a_put_overtaken_after_its_timestamp_is_numbered_last_and_wins() {
    let dir = tempfile::tempdir().unwrap();
    let rules = FileRules::posix().with_faults(Faults::new());
    let store = Arc::new(open(dir.path(), &rules));
    let t = store.table("t").unwrap();
    t.put("k", "v0").unwrap();
    let points = rules.faults().unwrap().points();
    let before = points.count("write timestamped");
    points.hold("write timestamped", "t", 1);
    let (held_seq, other_seq) = std::thread::scope(|s| {
        let held = s.spawn(|| t.write(WriteBatch::new().put("k", "held")).unwrap());
        points.wait_for("write timestamped", before + 1);
        // The held put has its timestamp; this one takes a later one and is numbered.
        let other = t.write(WriteBatch::new().put("k", "other")).unwrap();
        points.release("write timestamped");
        (held.join().unwrap(), other)
    });
    assert!(
        held_seq > other_seq,
        "the held put ({held_seq}) is numbered after the put that overtook it ({other_seq})"
    );
    let want = Some(&b"held"[..]);
    assert_eq!(
        t.get("k").unwrap().as_deref(),
        want,
        "the last numbered wins"
    );
    let view = store.read_view().unwrap();
    assert_eq!(view.get(&t, "k").unwrap().as_deref(), want);
    assert!(
        points.count("write timestamped") >= before + 3,
        "the overtaken put took new timestamps"
    );
    drop((view, t));
    Arc::into_inner(store).unwrap().close().unwrap();
    let store = open(dir.path(), &rules);
    let t = store.table("t").unwrap();
    assert_eq!(t.get("k").unwrap().as_deref(), want, "and after replay");
}

/// Commit log invariant 8's fallback: a plain write overtaken twice (each time another
/// write took a later timestamp and was numbered first) takes the commit lock
/// exclusively, so no write can overtake it a third time: one started meanwhile waits
/// for the lock, and is numbered after it.
#[test]
fn a_put_overtaken_twice_takes_the_commit_lock_exclusively_and_is_not_overtaken_again() {
    const STAMPED: &str = "write timestamped";
    const EXCLUSIVE: &str = "write takes the commit lock exclusively";
    const WAITS: &str = "write waits for the commit lock";
    let dir = tempfile::tempdir().unwrap();
    let rules = FileRules::posix().with_faults(Faults::new());
    let store = Arc::new(open(dir.path(), &rules));
    let (w, x) = (store.table("w").unwrap(), store.table("x").unwrap());
    let points = rules.faults().unwrap().points();
    let base = points.count(STAMPED);
    points.hold(STAMPED, "w", 1);
    std::thread::scope(|s| {
        let held = s.spawn(|| w.write(WriteBatch::new().put("k", "w")).unwrap());
        // W has its first timestamps; X (another table: the clock is the store's) takes
        // later ones and is numbered first.
        points.wait_for(STAMPED, base + 1);
        let x1 = x.write(WriteBatch::new().put("k", "x1")).unwrap();
        // Let W go, to be held again with its second timestamps, and overtaken again.
        points.hold(STAMPED, "w", 1);
        points.release_held(STAMPED);
        points.wait_for(STAMPED, base + 3);
        let x2 = x.write(WriteBatch::new().put("k", "x2")).unwrap();
        assert_eq!(
            points.count(EXCLUSIVE),
            0,
            "overtaken once, W still shares the lock"
        );
        // Third attempt: W takes the lock exclusively, then its timestamps (held there).
        points.hold(STAMPED, "w", 1);
        points.release_held(STAMPED);
        points.wait_for(STAMPED, base + 5);
        assert_eq!(
            points.count(EXCLUSIVE),
            1,
            "overtaken twice, W holds the lock alone"
        );
        // A write started now cannot take timestamps before W is numbered: it waits.
        let waits = points.count(WAITS);
        let late = s.spawn(|| x.write(WriteBatch::new().put("k", "x3")).unwrap());
        points.wait_for(WAITS, waits + 1);
        points.release(STAMPED);
        let w_seq = held.join().unwrap();
        let x3 = late.join().unwrap();
        assert!(
            x1 < x2 && x2 < w_seq && w_seq < x3,
            "{x1} {x2} {w_seq} {x3}"
        );
    });
    // Timestamps in the same order as the numbers.
    let ts = |t: &segstore::Table| t.get_cell(b"k").unwrap().unwrap().ts;
    let (w_ts, x_ts) = (ts(&w), ts(&x));
    assert!(
        w_ts < x_ts,
        "W ({w_ts}) is stamped before x3 ({x_ts}), as numbered"
    );
    drop((w, x));
    Arc::into_inner(store).unwrap().close().unwrap();
}
