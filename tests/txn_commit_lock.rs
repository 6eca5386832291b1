//! A plain write racing a commit between its check and its log append, driven in that
//! order by pause points: the commit is held right after its check passed, a plain put
//! of the key it read is started and seen to wait for the commit lock, then the commit
//! goes on. The put must be numbered after the commit (else the transaction would have
//! committed over a write it never saw: a lost update).

use std::sync::Arc;

use segstore::io::faults::Faults;
use segstore::io::points::reached;
use segstore::{Config, FileRules, Store};

#[test]
fn a_plain_write_during_a_commit_waits_and_is_numbered_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let rules = FileRules::posix().with_faults(Faults::new());
    let mut config = Config::default();
    config.file_rules = rules.clone();
    let store = Arc::new(Store::open(dir.path(), config).unwrap());
    let t = store.table("t").unwrap();
    t.put("k", "v0").unwrap();
    let points = rules.faults().unwrap().points();

    let mut tx = store.transaction().unwrap();
    assert_eq!(tx.get(&t, "k").unwrap().as_deref(), Some(&b"v0"[..]));
    tx.put(&t, "k", "from the transaction").unwrap();
    points.hold("commit checked", "", 1);
    std::thread::scope(|s| {
        let commit = s.spawn(|| tx.commit().unwrap());
        points.wait_for("commit checked", 1);
        let put = s.spawn(|| {
            let seq = t
                .write(segstore::WriteBatch::new().put("k", "plain"))
                .unwrap();
            points.mark("plain put returned");
            seq
        });
        // The put either waits for the lock (as it must) or, wrongly, got through.
        let seen = points.wait_until(|a| {
            reached(a, "write waits for the commit lock") || reached(a, "plain put returned")
        });
        points.release("commit checked");
        let (commit_seq, put_seq) = (commit.join().unwrap(), put.join().unwrap());
        assert!(
            !reached(&seen, "plain put returned"),
            "the put returned while the commit held its lock"
        );
        assert!(
            put_seq > commit_seq,
            "put {put_seq} numbered before the commit {commit_seq} it raced"
        );
    });
    assert_eq!(t.get("k").unwrap().as_deref(), Some(&b"plain"[..]));
}
