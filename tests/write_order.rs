//! Sequence numbers and timestamps order writes alike (commit log invariant 8): a plain
//! put held by a pause point between taking its timestamp and its log append, while
//! another put of the same key goes through, must come out numbered after that put and
//! win reads, replay and reopen. Without the check at the append it is numbered last
//! but loses to the other put's later timestamp, so the returned numbers would say one
//! order and reads the other.

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
