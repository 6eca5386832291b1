//! Test 2 with one writer: the hot key's values are its write numbers, so a view's
//! read is bounded by the writes acknowledged before and after it was taken.

use std::sync::atomic::Ordering;
use std::sync::Barrier;

use segstore::{ReadView, Store, Table, WriteBatch};

use crate::hot_key::{freeze_and_flush, store_config, Progress, MIN_VIEWS};
use crate::{wait_for, Gone};

fn number(v: &[u8]) -> u64 {
    std::str::from_utf8(v).unwrap().parse().unwrap()
}

/// The hot key's value, a number, through `view` (or the table).
fn hot_number(t: &Table, view: Option<&ReadView>) -> u64 {
    let v = match view {
        Some(view) => view.get(t, b"hot").unwrap(),
        None => t.get(b"hot").unwrap(),
    };
    number(&v.expect("the hot key is never missing"))
}

const ONE_WRITER_WRITES: u64 = 12_000;

/// Writes 1, 2, ... of the hot key, every third with a key of 200 others.
fn write_numbers(t: &Table, p: &Progress) {
    let _gone = Gone(&p.writers_gone);
    for i in 1..=ONE_WRITER_WRITES {
        if i == ONE_WRITER_WRITES / 2 {
            wait_for(&p.views, MIN_VIEWS, &p.viewer_gone);
        }
        let mut b = WriteBatch::new();
        b.put(b"hot", i.to_string());
        if i % 3 == 0 {
            b.put(format!("k{:03}", i % 200), i.to_string());
        }
        t.write(&b).unwrap();
        p.acked.store(i, Ordering::SeqCst);
    }
}

/// Views of the hot key, up to four open: each reads a number between the writes
/// acknowledged before and after it was taken (one write in flight), and the same
/// number by a get and a scan once the writer is 20 writes past it (past `THIN_AT`),
/// or when four are open.
fn view_numbers(store: &Store, t: &Table, p: &Progress) {
    let _gone = Gone(&p.viewer_gone);
    let mut open: Vec<(ReadView, u64, u64)> = Vec::new();
    while !p.writers_done(1) {
        let lo = p.acked();
        let view = store.read_view().unwrap();
        let hi = p.acked() + 1;
        let v = hot_number(t, Some(&view));
        assert!(lo <= v && v <= hi, "view read {v}, acked {lo}..{hi}");
        open.push((view, v, p.acked()));
        while open.len() >= 4 || open.first().is_some_and(|o| p.acked() > o.2 + 20) {
            let (view, v, _) = open.remove(0);
            assert_eq!(hot_number(t, Some(&view)), v, "a view's get changed");
            let scan = view.scan(t, b"hot".to_vec()..=b"hot".to_vec());
            let (k, sv) = scan.unwrap().next().unwrap().unwrap();
            assert_eq!((&k[..], number(&sv)), (&b"hot"[..], v), "a view's scan");
            p.views.fetch_add(1, Ordering::SeqCst);
        }
    }
    for (view, v, _) in open {
        assert_eq!(hot_number(t, Some(&view)), v);
    }
}

/// Plain gets of the hot key: never below what was acknowledged before, never back.
fn read_numbers(t: &Table, p: &Progress) {
    let mut last = 0;
    while !p.writers_done(1) {
        let lo = p.acked();
        let v = hot_number(t, None);
        assert!(v >= lo, "a get read {v} after {lo} was acknowledged");
        assert!(v >= last, "a get went back from {last} to {v}");
        last = v;
    }
}

/// The writer, a viewer and a reader racing freezes and flushes; then a reopen.
pub(crate) fn run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), store_config()).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"hot", b"0").unwrap();
    let p = Progress::default();
    let start = Barrier::new(4);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            write_numbers(&t, &p);
        });
        s.spawn(|| {
            start.wait();
            view_numbers(&store, &t, &p);
        });
        s.spawn(|| {
            start.wait();
            read_numbers(&t, &p);
        });
        start.wait();
        freeze_and_flush(&t, &p, 1, 4);
    });
    assert!(p.views.into_inner() >= MIN_VIEWS);
    assert_eq!(hot_number(&t, None), ONE_WRITER_WRITES);
    drop(t);
    assert!(store.close().unwrap().is_clean());
    let store = Store::open(dir.path(), store_config()).unwrap();
    let t = store.table("t").unwrap();
    assert_eq!(hot_number(&t, None), ONE_WRITER_WRITES);
    for i in (ONE_WRITER_WRITES - 599..=ONE_WRITER_WRITES).filter(|i| i % 3 == 0) {
        let k = format!("k{:03}", i % 200);
        assert!(number(&t.get(&k).unwrap().unwrap()) >= i, "{k}");
    }
    drop(t);
    assert!(store.close().unwrap().is_clean());
}
