//! Issue 19 item 3: point reads skip memtables whose key filter rules the key out, and
//! that never loses a write. Writers insert new keys while memtables are frozen and
//! flushed under them; each acknowledged key is sent to a reader (an event: the write
//! happened before the read began), which must find it through every point read
//! (`get`, `get_with`, `contains_key`, `multi_get`, a read view's `get`), whichever
//! memtable or segment holds it by then. No sleeps: the reader waits on the channel.

use std::sync::mpsc;
use std::sync::Arc;

use segstore::{Config, Store, Table};

const WRITERS: usize = 2;
const KEYS_PER_WRITER: usize = 6_000;
/// A writer freezes the active memtable after every this many of its writes.
const FREEZE_EVERY: usize = 700;

fn key(w: usize, i: usize) -> Vec<u8> {
    format!("w{w}:{:08}", (i * 7919) % KEYS_PER_WRITER).into_bytes()
}

fn value(w: usize, i: usize) -> Vec<u8> {
    format!("value {w} {i}").into_bytes()
}

fn check_found(store: &Store, t: &Table, w: usize, i: usize) {
    let k = key(w, i);
    let want = value(w, i);
    let got = t.get(&k).unwrap();
    assert_eq!(got.as_deref(), Some(&want[..]), "get of {w}/{i}");
    assert!(
        t.get_with(&k, |v| v == Some(&want[..])).unwrap(),
        "get_with {w}/{i}"
    );
    assert!(t.contains_key(&k).unwrap(), "contains_key {w}/{i}");
    let many = t.multi_get([&k, &key(w, i)]).unwrap();
    assert!(
        many.iter().all(|v| v.as_deref() == Some(&want[..])),
        "multi_get {w}/{i}"
    );
    let view = store.read_view().unwrap();
    let tv = view.table(t).unwrap();
    assert_eq!(
        tv.get(&k).unwrap().as_deref(),
        Some(&want[..]),
        "read view get of {w}/{i}"
    );
}

#[test]
fn a_read_finds_every_write_acknowledged_before_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.track_leaks = false;
    config.table.background_compaction = false;
    config.table.max_frozen_memtables = 3;
    let store = Store::open(dir.path(), config).unwrap();
    let t = store.table("t").unwrap();
    let (tx, rx) = mpsc::channel::<(usize, usize)>();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let tx = tx.clone();
            let t = Arc::clone(&t);
            s.spawn(move || {
                for i in 0..KEYS_PER_WRITER {
                    t.put(key(w, i), value(w, i)).unwrap();
                    tx.send((w, i)).unwrap();
                    if i % FREEZE_EVERY == FREEZE_EVERY - 1 {
                        if w == 0 {
                            t.freeze_memtable();
                        } else {
                            t.flush().unwrap();
                        }
                    }
                }
            });
        }
        drop(tx);
        let mut seen = 0;
        for (w, i) in rx {
            check_found(&store, &t, w, i);
            seen += 1;
        }
        assert_eq!(seen, WRITERS * KEYS_PER_WRITER);
    });
    // Keys never written are absent.
    for i in 0..1_000 {
        assert!(t.get(format!("absent{i}")).unwrap().is_none());
    }
    drop(t);
    store.close().unwrap();
}
