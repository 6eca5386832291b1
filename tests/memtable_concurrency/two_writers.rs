//! Test 2 with two writers: their applies land out of sequence order on the hot key's
//! node, so views are checked by the cell's timestamp against plain reads.

use std::sync::atomic::Ordering;
use std::sync::Barrier;

use segstore::{ReadView, Store, Table, WriteBatch};

use crate::hot_key::{freeze_and_flush, store_config, Progress, MIN_VIEWS};
use crate::{wait_for, Gone};

const TWO_WRITER_WRITES: u64 = 6_000;

/// The hot key's cell through a read view: (timestamp, value).
fn hot_cell_in(view: &ReadView, t: &Table) -> (u64, Vec<u8>) {
    let mut cells = view
        .scan_cells(t, b"hot".to_vec()..=b"hot".to_vec())
        .unwrap();
    let cell = cells.next().unwrap().unwrap();
    let value = view.get(t, b"hot").unwrap().unwrap();
    assert_eq!(&value[..], &cell.value[..], "a view's get and scan differ");
    (cell.ts, cell.value)
}

/// The hot key's timestamp through a plain read.
fn hot_ts(t: &Table) -> u64 {
    t.get_cell(b"hot").unwrap().expect("never missing").ts
}

/// Writer `w` of two: `w<w>-<i>` to the hot key, and every other time to one of 32.
fn write_as(t: &Table, p: &Progress, w: u64) {
    let _gone = Gone(&p.writers_gone);
    for i in 1..=TWO_WRITER_WRITES {
        if i == TWO_WRITER_WRITES / 2 {
            wait_for(&p.views, MIN_VIEWS, &p.viewer_gone);
        }
        let mut b = WriteBatch::new();
        b.put(b"hot", format!("w{w}-{i}"));
        if i % 2 == w {
            b.put(format!("k{:02}", i % 32), format!("w{w}-{i}"));
        }
        t.write(&b).unwrap();
        p.acked.fetch_add(1, Ordering::SeqCst);
    }
}

/// Views of the hot key's cell, up to five open: each no older than a plain read
/// finished before it was taken; one of the five (in turn) checked again and dropped
/// at every new one: the same cell, and two whole scans through it alike.
fn view_cells(store: &Store, t: &Table, p: &Progress) {
    let _gone = Gone(&p.viewer_gone);
    let mut open: Vec<(ReadView, (u64, Vec<u8>))> = Vec::new();
    for turn in 0.. {
        if p.writers_done(2) {
            break;
        }
        let before = hot_ts(t);
        let view = store.read_view().unwrap();
        let cell = hot_cell_in(&view, t);
        assert!(
            cell.0 >= before,
            "a view older than a read: {} < {before}",
            cell.0
        );
        open.push((view, cell));
        if open.len() >= 5 {
            let (view, cell) = open.remove(turn % open.len());
            assert_eq!(hot_cell_in(&view, t), cell, "a view's cell changed");
            let scan = || view.scan(t, ..).unwrap().map(|r| r.unwrap());
            assert_eq!(scan().collect::<Vec<_>>(), scan().collect::<Vec<_>>());
            p.views.fetch_add(1, Ordering::SeqCst);
        }
    }
    for (view, cell) in open {
        assert_eq!(hot_cell_in(&view, t), cell);
    }
}

/// Plain reads of the hot key: its timestamp never goes back.
fn read_timestamps(t: &Table, p: &Progress) {
    let mut last = 0;
    while !p.writers_done(2) {
        let ts = hot_ts(t);
        assert!(ts >= last, "a get went back from ts {last} to {ts}");
        last = ts;
    }
}

/// The writers, a viewer and a reader racing freezes and flushes.
pub(crate) fn run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), store_config()).unwrap();
    let t = store.table("t").unwrap();
    t.put(b"hot", b"start").unwrap();
    let p = Progress::default();
    let start = Barrier::new(5);
    std::thread::scope(|s| {
        for w in 0..2 {
            let (t, p, start) = (&t, &p, &start);
            s.spawn(move || {
                start.wait();
                write_as(t, p, w);
            });
        }
        s.spawn(|| {
            start.wait();
            view_cells(&store, &t, &p);
        });
        s.spawn(|| {
            start.wait();
            read_timestamps(&t, &p);
        });
        start.wait();
        freeze_and_flush(&t, &p, 2, 3);
    });
    assert!(p.views.into_inner() >= MIN_VIEWS);
    // Copied: a `Value` read from a segment holds its view (and the segments) open.
    let last = t.get(b"hot").unwrap().unwrap().to_vec();
    let last_of = |w| format!("w{w}-{TWO_WRITER_WRITES}").into_bytes();
    assert!(last == last_of(0) || last == last_of(1), "{last:?}");
    drop(t);
    assert!(store.close().unwrap().is_clean());
}
