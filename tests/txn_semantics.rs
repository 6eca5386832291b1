//! Transactions, one behaviour per test: read-your-writes in gets and scans (both
//! directions), conflicts on a read key and on a scanned interval (by other
//! transactions and by plain writes, through flushes and compactions), what does not
//! conflict (blind writes, rows past where a scan stopped, a value written again),
//! nothing written by a failed or dropped transaction, one record per commit.

use std::sync::Arc;

use segstore::{Config, Error, Store, Table};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Config::default()).unwrap();
    (dir, store)
}

fn rows(s: impl Iterator<Item = segstore::Result<(Vec<u8>, Vec<u8>)>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    s.map(|r| r.unwrap()).collect()
}

fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
    (k.as_bytes().to_vec(), v.as_bytes().to_vec())
}

fn conflict_key(e: Error) -> (String, Vec<u8>) {
    match e {
        Error::Conflict { table, key } => (table, key),
        e => panic!("expected a conflict, got {e}"),
    }
}

fn fill(t: &Arc<Table>) {
    for (k, v) in [("a", "1"), ("c", "3"), ("e", "5"), ("g", "7")] {
        t.put(k, v).unwrap();
    }
}

#[test]
fn the_view_is_taken_by_the_first_read() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    // Begun, then written to by someone else before reading anything: the first read
    // takes the view, so it sees that write, and nothing changed it before the commit.
    let mut tx = store.transaction().unwrap();
    t.put("a", "before the first read").unwrap();
    let a = tx.get(&t, "a").unwrap();
    assert_eq!(a.as_deref(), Some(&b"before the first read"[..]));
    t.put("c", "after the first read").unwrap(); // not seen
    assert_eq!(tx.get(&t, "c").unwrap().as_deref(), Some(&b"3"[..]));
    tx.put(&t, "z", "26").unwrap();
    let (table, key) = conflict_key(tx.commit().unwrap_err());
    assert_eq!((table.as_str(), key.as_slice()), ("t", &b"c"[..]));

    // `read_seq` takes the view when nothing has been read yet: later writes are not
    // seen, and the number is the one of the last write before it.
    let tx = store.transaction().unwrap();
    let seq = tx.read_seq();
    let after = t
        .write(segstore::WriteBatch::new().put("e", "after read_seq"))
        .unwrap();
    assert!(after > seq);
    assert_eq!(tx.get(&t, "e").unwrap().as_deref(), Some(&b"5"[..]));
    assert_eq!(tx.read_seq(), seq, "the view is taken once");

    // A transaction that reads nothing commits as an atomic batch, after every write
    // before it, whatever was written since it began.
    let mut tx = store.transaction().unwrap();
    t.put("g", "racing").unwrap();
    tx.put(&t, "g", "blind").unwrap();
    let committed = tx.commit().unwrap();
    assert_eq!(t.get("g").unwrap().as_deref(), Some(&b"blind"[..]));
    assert!(committed > seq);
}

#[test]
fn reads_see_the_view_and_the_transactions_own_writes() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    let mut tx = store.transaction().unwrap();
    assert_eq!(tx.get(&t, "g").unwrap().as_deref(), Some(&b"7"[..])); // takes the view
    t.put("a", "later").unwrap(); // after the view: not seen
    tx.put(&t, "b", "2").unwrap();
    tx.put(&t, "c", "33").unwrap();
    tx.delete(&t, "e").unwrap();
    tx.put(&t, "h", "8").unwrap();
    assert_eq!(tx.get(&t, "a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(tx.get(&t, "c").unwrap().as_deref(), Some(&b"33"[..]));
    assert!(!tx.contains_key(&t, "e").unwrap());
    assert!(tx.get_with(&t, "h", |v| v == Some(&b"8"[..])).unwrap());
    let many = tx.multi_get(&t, ["b", "e", "z"]).unwrap();
    assert_eq!(many[0].as_deref(), Some(&b"2"[..]));
    assert!(many[1].is_none() && many[2].is_none());
    let want = vec![
        kv("a", "1"),
        kv("b", "2"),
        kv("c", "33"),
        kv("g", "7"),
        kv("h", "8"),
    ];
    assert_eq!(rows(tx.scan(&t, ..).unwrap()), want);
    let mut back = rows(tx.scan(&t, ..).unwrap().rev());
    back.reverse();
    assert_eq!(back, want);
    assert_eq!(rows(tx.scan(&t, "b"..="g").unwrap()), want[1..4].to_vec());
    assert_eq!(rows(tx.scan_prefix(&t, "h").unwrap()), vec![kv("h", "8")]);
    assert!(
        rows(tx.scan(&t, "x".."b").unwrap()).is_empty(),
        "an inverted range is empty"
    );
    // Both ends mixed meet in the middle, each key once.
    let mut s = tx.scan(&t, ..).unwrap();
    let mut seen = vec![s.next().unwrap().unwrap(), s.next_back().unwrap().unwrap()];
    seen.extend(rows(&mut s));
    seen.sort();
    assert_eq!(seen, want);
    drop(s);
    // A conflict on "a" (written after the view, and read): nothing is written.
    let (table, key) = conflict_key(tx.commit().unwrap_err());
    assert_eq!((table.as_str(), key.as_slice()), ("t", &b"a"[..]));
    assert_eq!(t.get("b").unwrap(), None);
    assert_eq!(t.get("e").unwrap().as_deref(), Some(&b"5"[..]));
}

#[test]
fn a_read_key_written_by_another_transaction_conflicts() {
    let (_d, store) = open();
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    a.put("x", "1").unwrap();
    let mut t1 = store.transaction().unwrap();
    let mut t2 = store.transaction().unwrap();
    assert_eq!(t1.get(&a, "x").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(t2.get(&a, "x").unwrap().as_deref(), Some(&b"1"[..]));
    t1.put(&a, "x", "2").unwrap();
    t2.put(&a, "x", "3").unwrap();
    t2.put(&b, "y", "3").unwrap();
    let s1 = t1.commit().unwrap();
    let (table, key) = conflict_key(t2.commit().unwrap_err());
    assert_eq!((table.as_str(), key.as_slice()), ("a", &b"x"[..]));
    assert_eq!(a.get("x").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(b.get("y").unwrap(), None, "the failed commit wrote nothing");
    assert!(s1 > 0);
}

#[test]
fn a_plain_write_after_the_view_conflicts_through_flush_and_compaction() {
    // 3: the write left in a frozen memtable, another active one after it (the commit's
    // check looks for newer versions in every memtable before it reads any segment).
    for maintenance in 0..4 {
        let (_d, store) = open();
        let t = store.table("t").unwrap();
        fill(&t);
        t.flush().unwrap();
        let mut tx = store.transaction().unwrap();
        assert!(tx.get(&t, "c").unwrap().is_some());
        tx.put(&t, "z", "1").unwrap();
        t.delete("c").unwrap();
        match maintenance {
            1 => t.flush().unwrap(),
            2 => {
                t.flush().unwrap();
                t.compact().unwrap();
            }
            3 => {
                t.freeze_memtable();
                t.put("other", "1").unwrap();
            }
            _ => {}
        }
        let (_, key) = conflict_key(tx.commit().unwrap_err());
        assert_eq!(key, b"c", "after maintenance {maintenance}");
        assert_eq!(t.get("z").unwrap(), None);
    }
}

#[test]
fn a_scanned_interval_conflicts_on_a_write_inside_it_only() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    // Scanned "a" and "c" (stopped there): a write at "d" is past the interval.
    let mut tx = store.transaction().unwrap();
    let mut s = tx.scan(&t, ..).unwrap();
    s.next().unwrap().unwrap();
    s.next().unwrap().unwrap();
    drop(s);
    tx.put(&t, "q", "1").unwrap();
    t.put("d", "4").unwrap();
    tx.commit().unwrap();

    // A phantom: an insert inside the interval scanned.
    let mut tx = store.transaction().unwrap();
    let n = tx.scan(&t, "b".."f").unwrap().count();
    assert_eq!(n, 3, "c, d, e");
    tx.put(&t, "count", n.to_string()).unwrap();
    t.put("bb", "new").unwrap();
    let (_, key) = conflict_key(tx.commit().unwrap_err());
    assert_eq!(key, b"bb");

    // From the back: scanned "q" and "g"; a write to "e" is below the interval.
    let mut tx = store.transaction().unwrap();
    let mut s = tx.scan(&t, ..).unwrap();
    assert_eq!(s.next_back().unwrap().unwrap().0, b"q");
    assert_eq!(s.next_back().unwrap().unwrap().0, b"g");
    drop(s);
    tx.put(&t, "r", "1").unwrap();
    t.put("e", "55").unwrap();
    tx.commit().unwrap();
    let mut tx = store.transaction().unwrap();
    let mut s = tx.scan(&t, ..).unwrap();
    s.next_back().unwrap().unwrap();
    drop(s);
    tx.put(&t, "r", "2").unwrap();
    t.put("zz", "1").unwrap();
    let (_, key) = conflict_key(tx.commit().unwrap_err());
    assert_eq!(key, b"zz");

    // Scanned to the end: a delete anywhere in the range conflicts.
    t.put("ca", "x").unwrap();
    let mut tx = store.transaction().unwrap();
    assert_eq!(tx.scan_prefix(&t, "c").unwrap().count(), 2);
    tx.put(&t, "s", "1").unwrap();
    t.delete("ca").unwrap();
    let (_, key) = conflict_key(tx.commit().unwrap_err());
    assert_eq!(key, b"ca");
}

#[test]
fn blind_writes_and_unchanged_reads_do_not_conflict() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    let mut t1 = store.transaction().unwrap();
    let mut t2 = store.transaction().unwrap();
    t1.put(&t, "a", "from t1").unwrap();
    t2.put(&t, "a", "from t2").unwrap();
    let s1 = t1.commit().unwrap();
    let s2 = t2.commit().unwrap();
    assert!(s2 > s1);
    assert_eq!(
        t.get("a").unwrap().as_deref(),
        Some(&b"from t2"[..]),
        "the later commit wins"
    );
    // A key read, then written again with the value it had: the read still holds.
    let mut tx = store.transaction().unwrap();
    assert_eq!(tx.get(&t, "c").unwrap().as_deref(), Some(&b"3"[..]));
    tx.put(&t, "d", "4").unwrap();
    t.put("c", "3").unwrap();
    t.delete("absent").unwrap();
    tx.commit().unwrap();
    // A key the transaction wrote before reading it was not read from the store.
    let mut tx = store.transaction().unwrap();
    tx.put(&t, "e", "own").unwrap();
    assert_eq!(tx.get(&t, "e").unwrap().as_deref(), Some(&b"own"[..]));
    t.put("e", "other").unwrap();
    tx.commit().unwrap();
    assert_eq!(t.get("e").unwrap().as_deref(), Some(&b"own"[..]));
}

#[test]
fn a_read_only_transaction_commits_at_its_view_and_a_dropped_one_writes_nothing() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    let tx = store.transaction().unwrap();
    assert!(tx.get(&t, "a").unwrap().is_some());
    let seq = tx.read_seq();
    t.put("a", "changed").unwrap();
    assert_eq!(tx.commit().unwrap(), seq);
    let mut tx = store.transaction().unwrap();
    tx.put(&t, "dropped", "1").unwrap();
    drop(tx);
    assert_eq!(t.get("dropped").unwrap(), None);
}

#[test]
fn a_commit_is_one_record_across_tables_and_returns_its_number() {
    let (_d, store) = open();
    let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
    let mut tx = store.transaction().unwrap();
    tx.put(&a, "k", "1").unwrap();
    tx.put(&b, "k", "1").unwrap();
    tx.sync(true);
    let seq = tx.commit().unwrap();
    assert!(
        store.durable_seq().unwrap() >= seq,
        "synced through the commit"
    );
    let next = a.write(segstore::WriteBatch::new().put("n", "n")).unwrap();
    assert_eq!(next, seq + 1, "one sequence number for both tables");
}

#[test]
fn tables_of_another_store_are_refused() {
    let (_d, store) = open();
    let (_d2, other) = open();
    let foreign = other.table("t").unwrap();
    let mut tx = store.transaction().unwrap();
    assert!(matches!(
        tx.put(&foreign, "k", "v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        tx.get(&foreign, "k"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        tx.scan(&foreign, ..),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn delete_range_in_a_transaction_hides_the_range_and_keeps_later_writes() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t); // a c e g
    t.flush().unwrap();
    let other = store.table("o").unwrap();
    other.put("c", "x").unwrap();
    let mut tx = store.transaction().unwrap();
    tx.put(&t, "d", "4").unwrap(); // dropped by the range delete after it
    tx.delete_range(&t, "b".."f").unwrap();
    tx.put(&t, "e", "new").unwrap(); // after it: kept
                                     // Read-your-writes: gets and scans both ways apply the buffered range delete.
    assert_eq!(tx.get(&t, "c").unwrap(), None);
    assert_eq!(tx.get(&t, "d").unwrap(), None);
    assert_eq!(tx.get(&t, "e").unwrap().as_deref(), Some(&b"new"[..]));
    let want = vec![kv("a", "1"), kv("e", "new"), kv("g", "7")];
    assert_eq!(rows(tx.scan(&t, ..).unwrap()), want);
    let mut back = rows(tx.scan(&t, ..).unwrap().rev());
    back.reverse();
    assert_eq!(back, want);
    // Another table's keys are untouched.
    assert_eq!(tx.get(&other, "c").unwrap().as_deref(), Some(&b"x"[..]));
    // Bad ranges buffer nothing.
    assert!(matches!(
        tx.delete_range(&t, "z".."a"),
        Err(Error::InvalidArgument(_))
    ));
    tx.commit().unwrap();
    assert_eq!(rows(t.scan(..).unwrap()), want);
    assert_eq!(rows(other.scan(..).unwrap()), vec![kv("c", "x")]);
}

#[test]
fn a_key_read_under_a_range_another_commit_deleted_conflicts() {
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    let mut tx = store.transaction().unwrap();
    assert!(tx.get(&t, "c").unwrap().is_some());
    tx.put(&t, "z", "1").unwrap();
    t.delete_range("b".."d").unwrap(); // a plain range delete after the view
    let (table, key) = conflict_key(tx.commit().unwrap_err());
    assert_eq!((table.as_str(), key.as_slice()), ("t", &b"c"[..]));
    assert_eq!(t.get("z").unwrap(), None, "a failed commit writes nothing");
}

#[test]
fn a_key_rewritten_with_its_value_and_flushed_does_not_conflict() {
    // The check reads the value again once the segments changed since the view: a
    // rewrite of the same value, flushed, changed nothing the transaction read.
    let (_d, store) = open();
    let t = store.table("t").unwrap();
    fill(&t);
    t.flush().unwrap();
    let mut tx = store.transaction().unwrap();
    let then = tx.get(&t, "c").unwrap().unwrap().to_vec();
    tx.put(&t, "z", "1").unwrap();
    t.put("c", &then).unwrap();
    t.put("d", "changed").unwrap();
    t.flush().unwrap();
    tx.commit().unwrap();
    assert_eq!(t.get("z").unwrap().as_deref(), Some(&b"1"[..]));
}
