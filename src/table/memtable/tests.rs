use super::*;
use crate::range;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;

fn put(m: &Memtable, k: &[u8], v: &[u8], ts: u64) -> bool {
    m.insert(RecordRef {
        key: k,
        value: v,
        ts,
        tombstone: false,
        expires: 0,
    })
}

fn del(m: &Memtable, k: &[u8], ts: u64) -> bool {
    m.insert(RecordRef {
        key: k,
        value: b"",
        ts,
        tombstone: true,
        expires: 0,
    })
}

#[test]
fn newest_wins_and_ties_are_deterministic() {
    let m = Memtable::new();
    assert!(put(&m, b"k", b"v2", 2));
    assert!(!put(&m, b"k", b"v1", 1), "older write loses");
    assert_eq!(m.get(b"k").unwrap().value, b"v2");
    assert!(put(&m, b"k", b"v3", 3));
    assert!(put(&m, b"k", b"v4", 3), "tie: larger value wins");
    assert!(!put(&m, b"k", b"v0", 3), "tie: smaller value loses");
    assert!(del(&m, b"k", 3), "tie: tombstone wins");
    assert!(
        !put(&m, b"k", b"zz", 3),
        "tie: live cell loses to tombstone"
    );
    let e = m.get(b"k").unwrap();
    assert!(e.tombstone && e.ts == 3);
    assert!(put(&m, b"k", b"back", 4));
    assert_eq!(m.len(), 1);
    assert_eq!(m.get(b"nope"), None);
}

/// Keys of 0 to 40 bytes over a small alphabet (long shared prefixes), on both sides of
/// the inline limit: searches probe short keys as `Key`s ordered by `key_order` and long
/// ones as slices (`key.rs`), and both must find what a `BTreeMap` of the bytes holds.
fn mixed_key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xff)], 0..40)
}

proptest! {
    // 64 cases in CI; `PROPTEST_CASES` runs them deep.
    #![proptest_config(ProptestConfig::with_cases(crate::test_support::proptest_cases(64)))]
    #[test]
    fn keys_of_any_length_are_found_ranged_and_walked_back_in_byte_order(
        keys in proptest::collection::btree_set(mixed_key(), 0..120),
        probes in proptest::collection::vec(mixed_key(), 1..20),
    ) {
        let m = Arc::new(Memtable::new());
        for k in keys.iter().rev() {
            put(&m, k, k, 1);
        }
        for k in keys.iter().chain(&probes) {
            let got = m.get(k).map(|e| e.value);
            prop_assert_eq!(got.as_ref(), keys.get(k), "get of {:?}", k);
        }
        for w in probes.windows(2) {
            let (lo, hi) = if w[0] <= w[1] { (&w[0], &w[1]) } else { (&w[1], &w[0]) };
            let want: Vec<&Vec<u8>> = keys
                .range::<Vec<u8>, _>((Bound::Excluded(lo), Bound::Included(hi)))
                .collect();
            let bounds = (Bound::Excluded(lo.clone()), Bound::Included(hi.clone()));
            let fwd: Vec<Vec<u8>> = m.range_owned(bounds.clone()).map(|e| e.key).collect();
            prop_assert_eq!(fwd.iter().collect::<Vec<_>>(), want.clone());
            let mut back: Vec<Vec<u8>> = m.range_owned(bounds).rev().map(|e| e.key).collect();
            back.reverse();
            prop_assert_eq!(back.iter().collect::<Vec<_>>(), want);
        }
    }
}

#[test]
fn ranges_are_in_key_order_and_bounded() {
    let m = Arc::new(Memtable::new());
    for i in (0..100u32).rev() {
        put(&m, format!("k{i:03}").as_bytes(), b"v", 1);
    }
    let keys = |it: &mut dyn Iterator<Item = Entry>| -> Vec<String> {
        it.map(|e| String::from_utf8(e.key).unwrap()).collect()
    };
    let all = keys(&mut m.iter());
    assert_eq!(all.len(), 100);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    let r = keys(&mut m.range(b"k010".as_slice()..b"k020".as_slice()));
    assert_eq!(r.first().unwrap(), "k010");
    assert_eq!(r.len(), 10);
    let r = keys(&mut m.range::<[u8]>((
        Bound::Excluded(b"k010".as_slice()),
        Bound::Included(b"k020".as_slice()),
    )));
    assert_eq!((r.first().unwrap().as_str(), r.len()), ("k011", 10));
    // The owned iterator agrees and can outlive the borrow.
    let mut it = m.range_owned(b"k010".as_slice()..b"k020".as_slice());
    let owned = keys(&mut it);
    assert_eq!(
        owned,
        keys(&mut m.range(b"k010".as_slice()..b"k020".as_slice()))
    );
    assert_eq!(it.next(), None);
    assert_eq!(keys(&mut m.range_owned(..)), all);
}

#[test]
fn bytes_and_sequence_numbers_are_tracked() {
    let m = Memtable::new();
    assert_eq!((m.approx_bytes(), m.seq_range()), (0, None));
    m.apply(
        7,
        &[RecordRef {
            key: b"abc",
            value: b"12345",
            ts: 1,
            tombstone: false,
            expires: 0,
        }],
    );
    let index_bytes = m.index_bytes();
    assert_eq!(m.approx_bytes(), 8 + CELL_OVERHEAD);
    assert_eq!(m.applied_bytes(), 8 + CELL_OVERHEAD);
    put(&m, b"abc", b"1", 0); // loses: not stored, not charged to memory...
    assert_eq!(m.approx_bytes(), 8 + CELL_OVERHEAD);
    // ...but logged all the same: the flush threshold counts it.
    assert_eq!(m.applied_bytes(), 8 + 4 + 2 * CELL_OVERHEAD);
    put(&m, b"abc", b"0", 0);
    assert_eq!(m.applied_bytes(), 8 + 2 * 4 + 3 * CELL_OVERHEAD);
    assert_eq!(m.index_bytes(), index_bytes, "the index is sized once");
    m.apply_entries(
        3,
        &[Entry {
            key: b"x".to_vec(),
            value: vec![],
            ts: 9,
            tombstone: true,
            expires: 0,
        }],
    );
    assert_eq!(m.seq_range(), Some((3, 7)));
    assert_eq!(m.min_ts(), Some(1));
    assert_eq!(m.approx_bytes(), 9 + 2 * CELL_OVERHEAD);
}

/// Invariant 5: writers racing to create and overwrite the same keys share one node per
/// key, the one the index holds; and a key whose insert has returned is found by a
/// point read on another thread (synchronised by a channel).
#[test]
fn racing_writers_share_one_node_a_key_indexed_once_and_found_once_inserted() {
    const KEYS: u32 = 2_000;
    const WRITERS: usize = 4;
    // Slots for every key (a table's first memtable has 1,024).
    let m = Memtable::with_index(1 << 20, 4 * KEYS as usize);
    let key = |i: u32| format!("key{i:06}").into_bytes();
    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    let stored = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (m, tx, stored) = (&m, tx.clone(), &stored);
            s.spawn(move || {
                // Each writer walks the keys from another place: every key is
                // created by whichever comes first, then found by the others.
                for j in 0..KEYS {
                    let i = (j + w as u32 * KEYS / WRITERS as u32) % KEYS;
                    if put(m, &key(i), b"v", 7) {
                        stored.fetch_add(1, Ordering::Relaxed);
                    }
                    tx.send(i).unwrap();
                }
            });
        }
        drop(tx);
        let m = &m;
        s.spawn(move || {
            for i in rx {
                let c = m.get_shared(&key(i)).expect("a returned insert is found");
                assert_eq!(&*c.value, b"v");
            }
        });
    });
    assert_eq!(m.len(), KEYS as usize);
    let cell = key(0).len() + 1 + CELL_OVERHEAD;
    let stored = stored.into_inner();
    assert!(stored >= KEYS as usize);
    assert_eq!(m.approx_bytes(), stored * cell);
    for i in 0..KEYS {
        let k = key(i);
        assert!(m.newest_seq_hashed(&k, key_hash(&k)).is_some());
        let indexed = m.index.get(&k, key_hash(&k)).expect("indexed at its insert");
        assert!(Arc::ptr_eq(indexed, &m.listed(&k).unwrap()), "one node");
    }
}

/// A new key is indexed at its insert with the ordered map's node (invariant 5), which
/// later reads and overwrites share.
#[test]
fn a_key_is_indexed_at_its_insert_with_the_map_s_node() {
    let m = Memtable::new();
    let h = key_hash(b"k");
    assert!(put(&m, b"k", b"v1", 1));
    let indexed = Arc::clone(m.index.get(b"k", h).expect("indexed by the insert"));
    let listed = m.listed(b"k").unwrap();
    assert!(Arc::ptr_eq(&indexed, &listed), "one node");
    assert!(put(&m, b"k", b"v2", 2), "the overwrite goes through the index");
    assert_eq!(m.len(), 1);
    assert_eq!(&*m.get_shared(b"k").unwrap().value, b"v2");
    assert_eq!(m.get(b"k").unwrap().value, b"v2");
    assert!(m.get(b"absent").is_none());
    assert!(m.index.get(b"absent", key_hash(b"absent")).is_none());
}

/// Keys the index leaves out (more keys of one home slot than its window) are found
/// through the ordered map, read and overwritten like the others.
#[test]
fn keys_the_index_leaves_out_are_found_in_the_ordered_map() {
    let m = Memtable::new();
    let slots = m.index.slots();
    // Keys whose hashes share their low bits crowd one window; find enough of them.
    let home = |k: &[u8]| key_hash(k) as usize & (slots - 1);
    let target = home(b"k0");
    let crowd: Vec<Vec<u8>> = (0u32..)
        .map(|i| format!("k{i}").into_bytes())
        .filter(|k| home(k) == target)
        .take(index::WINDOW + 4)
        .collect();
    for k in &crowd {
        assert!(put(&m, k, b"v1", 1));
    }
    let left_out = crowd
        .iter()
        .filter(|k| m.index.get(k, key_hash(k)).is_none())
        .count();
    assert_eq!(left_out, 4, "a full window leaves keys to the ordered map");
    for k in &crowd {
        assert_eq!(m.get(k).unwrap().value, b"v1");
        assert!(put(&m, k, b"v2", 2));
        assert_eq!(&*m.get_shared(k).unwrap().value, b"v2");
    }
    assert_eq!(m.len(), crowd.len());
}

#[test]
fn concurrent_writers_converge_on_the_winner() {
    let m = Arc::new(Memtable::new());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let key = format!("k{}", i % 16);
                    // Timestamps collide across threads; values break ties.
                    let ts = (i * 7 + t * 13) % 50;
                    if (i + t) % 5 == 0 {
                        del(&m, key.as_bytes(), ts);
                    } else {
                        put(&m, key.as_bytes(), format!("v{t}-{i}").as_bytes(), ts);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Recompute the winners sequentially.
    let mut model: BTreeMap<Vec<u8>, (u64, bool, Vec<u8>)> = BTreeMap::new();
    for t in 0..4u64 {
        for i in 0..2000u64 {
            let key = format!("k{}", i % 16).into_bytes();
            let ts = (i * 7 + t * 13) % 50;
            let c = if (i + t) % 5 == 0 {
                (ts, true, vec![])
            } else {
                (ts, false, format!("v{t}-{i}").into_bytes())
            };
            let slot = model.entry(key).or_insert(c.clone());
            if c > *slot {
                *slot = c;
            }
        }
    }
    let got: Vec<_> = m
        .iter()
        .map(|e| (e.key, (e.ts, e.tombstone, e.value)))
        .collect();
    assert_eq!(got, model.into_iter().collect::<Vec<_>>());
}

#[test]
fn a_key_being_overwritten_is_never_missing_or_older() {
    // A reader must always find the key, with a value at least as new as the last
    // one it saw, while a writer replaces it (invariant 4).
    let m = Arc::new(Memtable::new());
    put(&m, b"k", &0u64.to_be_bytes(), 1);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut last = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let e = m.get(b"k").expect("key missing while overwritten");
                    assert!(e.ts >= last, "went back from ts {last} to {}", e.ts);
                    last = e.ts;
                    let scanned = m
                        .range::<&[u8]>(..)
                        .next()
                        .expect("key missing from a scan");
                    assert!(scanned.ts >= last);
                    last = scanned.ts;
                }
            })
        })
        .collect();
    for ts in 2..50_000u64 {
        put(&m, b"k", &ts.to_be_bytes(), ts);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(m.len(), 1);
    assert_eq!(m.get(b"k").unwrap().ts, 49_999);
}

/// Scans racing writers that link new keys (the ordered map's lock, taken per batch
/// of read-ahead and per insert): every scan, forward and back, yields its keys in
/// order, each once, and holds every key whose insert finished before it began.
#[test]
fn scans_racing_new_keys_are_ordered_and_miss_no_key_linked_before_them() {
    const PER_WRITER: u64 = 20_000;
    let m = Arc::new(Memtable::new());
    let key = |n: u64| format!("{n:08}").into_bytes();
    // Writer `w` inserts the numbers `w`, `w + 2`, ...: the two writers' keys interleave,
    // so every batch of a scan meets both. `done[w]`: how many it has inserted.
    let done: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (m, done) = (Arc::clone(&m), Arc::clone(&done));
            std::thread::spawn(move || {
                for i in 0..PER_WRITER {
                    assert!(put(&m, &key(2 * i + w), b"v", 1));
                    done[w as usize].store(i + 1, Ordering::Release);
                }
            })
        })
        .collect();
    let check = |forward: bool| {
        let before = [0, 1].map(|w| done[w].load(Ordering::Acquire));
        let mut keys: Vec<Vec<u8>> = match forward {
            true => m.range_owned(..).map(|e| e.key).collect(),
            false => m.range_owned(..).rev().map(|e| e.key).collect(),
        };
        if !forward {
            keys.reverse();
        }
        assert!(keys.windows(2).all(|p| p[0] < p[1]), "out of order or repeated");
        for (w, &n) in before.iter().enumerate() {
            for i in 0..n {
                let k = key(2 * i + w as u64);
                assert!(keys.binary_search(&k).is_ok(), "missing {k:?}");
            }
        }
    };
    let mut scans = 0;
    while done.iter().any(|d| d.load(Ordering::Acquire) < PER_WRITER) {
        check(scans % 2 == 0);
        scans += 1;
    }
    for w in writers {
        w.join().unwrap();
    }
    check(true);
    check(false);
    assert_eq!(m.len() as u64, 2 * PER_WRITER);
}

/// The winner of `cells` numbered at or below `at`, as (ts, tombstone, value).
fn model_at(cells: &[(u64, u8, u64, bool, u8)], key: u8, at: u64) -> Option<(u64, bool, Vec<u8>)> {
    cells
        .iter()
        .filter(|c| c.1 == key && c.0 <= at)
        .map(|c| (c.2, c.3, if c.3 { vec![] } else { vec![c.4] }))
        .max()
}

#[test]
fn reads_at_a_sequence_number_see_only_what_was_numbered_at_or_below_it() {
    let m = Arc::new(Memtable::new());
    let cell = |v: &'static [u8], ts| RecordRef {
        key: b"k",
        value: v,
        ts,
        tombstone: false,
        expires: 0,
    };
    m.insert_at(5, cell(b"five", 50), 0);
    m.insert_at(9, cell(b"nine", 90), 0);
    // Numbered 7 but applied last (a concurrent writer), and older by timestamp
    // than what 9 wrote: it shows at 7 and 8 only.
    m.insert_at(7, cell(b"seven", 70), 0);
    let at = |s| {
        m.get_shared_at(b"k", ReadAt::Seq(s))
            .map(|c| c.value.to_vec())
    };
    assert_eq!(at(4), None);
    assert_eq!(at(5).as_deref(), Some(&b"five"[..]));
    assert_eq!(at(8).as_deref(), Some(&b"seven"[..]));
    assert_eq!(at(9).as_deref(), Some(&b"nine"[..]));
    let scan = |s| m.range_at(.., s).map(|e| e.value).collect::<Vec<_>>();
    assert_eq!(scan(4), Vec::<Vec<u8>>::new());
    assert_eq!(scan(7), vec![b"seven".to_vec()]);
    // A floor of 8 forgets what no read at 8 or above needs: 5, not 7.
    m.insert_at(10, cell(b"ten", 100), 8);
    assert_eq!(at(8).as_deref(), Some(&b"seven"[..]));
    assert_eq!(at(10).as_deref(), Some(&b"ten"[..]));
    assert_eq!(at(5), None, "version 5 forgotten below the floor");
    // Two cells of the key in one batch: the winner of both.
    m.insert_at(11, cell(b"a", 110), 10);
    m.insert_at(11, cell(b"b", 110), 10);
    assert_eq!(at(11).as_deref(), Some(&b"b"[..]));
    assert_eq!(m.get(b"k").unwrap().value, b"b");
}

#[test]
fn a_hot_key_under_open_reads_keeps_only_the_versions_they_need() {
    let vis = Visibility::new(0);
    let m = Memtable::new();
    let write = |seq: u64| {
        let v = seq.to_string();
        vis.begin(seq);
        let c = RecordRef {
            key: b"k",
            value: v.as_bytes(),
            ts: seq,
            tombstone: false,
            expires: 0,
        };
        m.apply_visible(seq, &[c], &vis);
        vis.finish(seq);
    };
    let read = |at: ReadAt<'_>| {
        m.get_shared_at(b"k", at)
            .map(|c| String::from_utf8(c.value.to_vec()).unwrap())
    };
    write(1);
    let first = vis.register();
    for s in 2..=5_000 {
        write(s);
    }
    let second = vis.register();
    for s in 5_001..=10_000 {
        write(s);
    }
    let kept = m.listed(b"k").unwrap().versions.read().older.len();
    assert!(kept <= THIN_AT + 2, "{kept} older versions kept");
    assert_eq!(read(ReadAt::Seq(first)).as_deref(), Some("1"));
    assert_eq!(read(ReadAt::Seq(second)).as_deref(), Some("5000"));
    assert_eq!(read(ReadAt::Visible(&vis)).as_deref(), Some("10000"));
    vis.release(first);
    vis.release(second);
    write(10_001);
    assert!(m.listed(b"k").unwrap().versions.read().older.len() <= 1);
}

proptest! {
    /// Writes in number order, reads registered and released between them: every
    /// registered read, and a read at the visible number, sees the winner of the
    /// cells numbered at or below its number, however the versions were thinned.
    #[test]
    fn thinned_versions_serve_every_registered_read(
        ops in proptest::collection::vec((0u8..10, 0u8..2, 0u64..6, any::<bool>(), 0u8..4), 1..120),
    ) {
        let vis = Visibility::new(0);
        let m = Memtable::new();
        let mut cells: Vec<(u64, u8, u64, bool, u8)> = Vec::new();
        let mut views: Vec<u64> = Vec::new();
        let mut seq = 0u64;
        for (op, k, ts, t, v) in ops {
            match op {
                0 => views.push(vis.register()),
                1 if !views.is_empty() => vis.release(views.remove(0)),
                _ => {
                    seq += 1;
                    vis.begin(seq);
                    let (key, val) = ([k], [v]);
                    let c = RecordRef { key: &key, value: if t { &[] } else { &val }, ts, tombstone: t, expires: 0 };
                    m.apply_visible(seq, &[c], &vis);
                    vis.finish(seq);
                    cells.push((seq, k, ts, t, v));
                }
            }
            for &r in views.iter().chain(std::iter::once(&vis.visible())) {
                for k in 0u8..2 {
                    let got = m.get_shared_at(&[k], ReadAt::Seq(r)).map(|c| (c.ts, c.tombstone, c.value.to_vec()));
                    prop_assert_eq!(got, model_at(&cells, k, r), "key {} at {}", k, r);
                }
            }
        }
    }

    /// Cells numbered in any order, inserted in any order: a read at every number
    /// sees the winner of the cells numbered at or below it; with a floor, reads
    /// at or above the floor still do.
    #[test]
    fn versions_match_a_model_at_every_sequence_number(
        cells in proptest::collection::vec((1u64..20, 0u8..3, 0u64..6, any::<bool>(), 0u8..4), 1..30),
        seed: u64,
        floor in 0u64..20,
    ) {
        let m = Arc::new(Memtable::new());
        let mut order: Vec<usize> = (0..cells.len()).collect();
        let mut s = seed | 1;
        for i in (1..order.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            order.swap(i, (s % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            let (seq, k, ts, t, v) = cells[i];
            let key = [k];
            let val = [v];
            m.insert_at(seq, RecordRef { key: &key, value: if t { &[] } else { &val }, ts, tombstone: t, expires: 0 }, 0);
        }
        for at in 0..21u64 {
            for k in 0u8..3 {
                let got = m.get_shared_at(&[k], ReadAt::Seq(at)).map(|c| (c.ts, c.tombstone, c.value.to_vec()));
                prop_assert_eq!(got, model_at(&cells, k, at), "key {} at {}", k, at);
            }
            let scanned: Vec<_> = m.range_at(.., at).map(|e| (e.key[0], (e.ts, e.tombstone, e.value))).collect();
            let want: Vec<_> = (0u8..3).filter_map(|k| model_at(&cells, k, at).map(|c| (k, c))).collect();
            prop_assert_eq!(scanned, want);
        }
        // Inserting in number order with a floor keeps reads at or above it right.
        let m = Memtable::new();
        let mut sorted = cells.clone();
        sorted.sort_by_key(|c| c.0);
        for &(seq, k, ts, t, v) in &sorted {
            let (key, val) = ([k], [v]);
            m.insert_at(seq, RecordRef { key: &key, value: if t { &[] } else { &val }, ts, tombstone: t, expires: 0 }, floor);
        }
        for at in floor..21 {
            for k in 0u8..3 {
                let got = m.get_shared_at(&[k], ReadAt::Seq(at)).map(|c| (c.ts, c.tombstone, c.value.to_vec()));
                prop_assert_eq!(got, model_at(&cells, k, at), "floor {}: key {} at {}", floor, k, at);
            }
        }
    }

    #[test]
    fn any_insert_order_gives_the_same_memtable(
        cells in proptest::collection::vec((0u8..6, 0u64..4, any::<bool>(), 0u8..3), 1..40),
        seed: u64,
    ) {
        let cells: Vec<(Vec<u8>, u64, bool, Vec<u8>)> = cells.into_iter()
            .map(|(k, ts, t, v)| (vec![b'a' + k], ts, t, if t { vec![] } else { vec![v] }))
            .collect();
        let fill = |order: &[usize]| {
            let m = Memtable::new();
            for &i in order {
                let (k, ts, t, v) = &cells[i];
                m.insert(RecordRef { key: k, value: v, ts: *ts, tombstone: *t, expires: 0 });
            }
            m.iter().collect::<Vec<_>>()
        };
        let fwd: Vec<usize> = (0..cells.len()).collect();
        let mut shuffled = fwd.clone();
        let mut s = seed | 1;
        for i in (1..shuffled.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            shuffled.swap(i, (s % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(fill(&fwd), fill(&shuffled));
    }

    /// An owned iterator (its front reading ahead in batches, its back searching) under
    /// any mix of steps and seeks from both ends yields what a model yields: each step
    /// the nearest visible cell between the two bounds, each seek moving one bound.
    /// Enough keys for several batches, up to the largest; some numbered past the read.
    /// Values from empty to past `COPY_MAX` (`iter.rs`): held inline in the node up to
    /// `INLINE_VALUE` (`value.rs`), shared past it; read ahead, short ones are copied
    /// into the front's buffer and long ones shared.
    #[test]
    fn an_owned_iterator_steps_and_seeks_as_the_model(
        keys in proptest::collection::btree_map(0u16..400, 1u64..4, 0..300),
        lo in 0u16..400,
        span in 0u16..450,
        ops in proptest::collection::vec((0u8..7, 0u16..420), 1..160),
    ) {
        let value = |k: u16| vec![k as u8; usize::from(k % 7) * 60];
        let m = Arc::new(Memtable::new());
        for (&k, &seq) in &keys {
            m.insert_at(seq, RecordRef { key: &k.to_be_bytes(), value: &value(k), ts: 1, tombstone: false, expires: 0 }, 0);
        }
        let at = 2;
        let visible: Vec<(Vec<u8>, Vec<u8>)> = keys.iter().filter(|(_, &s)| s <= at).map(|(&k, _)| (k.to_be_bytes().to_vec(), value(k))).collect();
        let start = Bound::Included(lo.to_be_bytes().to_vec());
        let end = Bound::Excluded(lo.saturating_add(span).to_be_bytes().to_vec());
        let mut it = m.range_at((start.clone(), end.clone()), at);
        let (mut front, mut back) = (start.clone(), end.clone());
        let between = |f: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>, k: &Vec<u8>| range::above(k, f) && range::below(k, b);
        let mut into = Entry::default();
        for (op, k) in ops {
            let key = k.to_be_bytes();
            match op {
                0..=3 => {
                    let want = visible.iter().find(|(k, _)| between(&front, &back, k)).cloned();
                    if let Some((w, _)) = &want { front = Bound::Excluded(w.clone()); }
                    // Half the steps as a scan takes them, into reused buffers.
                    let got = if op < 2 {
                        it.next().map(|e| (e.key, e.value))
                    } else {
                        it.next_into(&mut into).then(|| (into.key.clone(), into.value.clone()))
                    };
                    prop_assert_eq!(got, want);
                }
                4 => {
                    let want = visible.iter().rev().find(|(k, _)| between(&front, &back, k)).cloned();
                    if let Some((w, _)) = &want { back = Bound::Excluded(w.clone()); }
                    prop_assert_eq!(it.next_back().map(|e| (e.key, e.value)), want);
                }
                5 => {
                    front = range::max_lower(&start, Bound::Included(&key));
                    it.seek(&key);
                }
                _ => {
                    back = range::min_upper(&end, Bound::Included(&key));
                    it.seek_back(&key);
                }
            }
        }
    }
}

#[test]
fn key_filter_holds_every_key_and_rules_out_most_others() {
    let m = Memtable::for_flush_bytes(1 << 20);
    for i in 0..10_000u32 {
        put(&m, &i.to_be_bytes(), b"v", 1);
    }
    assert!((0..10_000u32).all(|i| m.may_contain_hashed(key_hash(&i.to_be_bytes()))));
    let fp = (10_000..110_000u32)
        .filter(|i| m.may_contain_hashed(key_hash(&i.to_be_bytes())))
        .count();
    // 1 MiB / 64 B per cell * 10 bits = 160 Kbit for 10,000 keys: about 0.01%.
    assert!(fp < 1_000, "false positives {fp} / 100000");
    // A filtered-out key is not looked for, and the answer is the ordered map's anyway.
    assert!(m.get_shared(&20_000u32.to_be_bytes()).is_none());
    assert_eq!(&*m.get_shared(&7u32.to_be_bytes()).unwrap().value, b"v");
    // A memtable made for the same flush size (the one replacing a frozen one, at the
    // table's flush size then) gets a filter of the same size.
    assert_eq!(
        Memtable::for_flush_bytes(1 << 20).filter_bytes(),
        m.filter_bytes()
    );
    assert_eq!(m.filter_bytes(), (1 << 20) / CELL_OVERHEAD * 10 / 8);
}

/// A reader that learns (acquire) how many keys a writer has inserted finds each of
/// them through the key filter while the writer goes on inserting: no false negative.
#[test]
fn key_filter_has_no_false_negative_under_concurrent_inserts() {
    const KEYS: u32 = 20_000;
    let m = Memtable::for_flush_bytes(1 << 20);
    let inserted = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..KEYS {
                put(&m, &i.to_be_bytes(), b"v", 1);
                inserted.store(i + 1, Ordering::Release);
            }
        });
        s.spawn(|| {
            let mut checked = 0;
            while checked < KEYS {
                let n = inserted.load(Ordering::Acquire);
                for i in checked..n {
                    let k = i.to_be_bytes();
                    assert!(m.get_shared(&k).is_some(), "key {i} missing");
                }
                checked = n;
                std::hint::spin_loop();
            }
        });
    });
}

/// A table's first memtable has the fewest slots; the next one room for as many keys as
/// the one before held, so those keys are all indexed.
#[test]
fn the_next_memtable_s_index_is_sized_for_the_keys_of_the_last() {
    let flush = 16 << 20;
    let first = Memtable::for_flush_bytes(flush);
    assert_eq!(first.index.slots(), index::MIN_SLOTS);
    let key = |i: u32| format!("key{i:06}").into_bytes();
    for i in 0..5_000 {
        put(&first, &key(i), b"v", 1);
    }
    let next = Memtable::after(&first, flush);
    assert_eq!(next.index.slots(), 8_192);
    for i in 0..5_000 {
        put(&next, &key(i), b"v", 1);
    }
    let indexed = (0..5_000)
        .filter(|&i| next.index.get(&key(i), key_hash(&key(i))).is_some())
        .count();
    assert!(indexed > 4_900, "{indexed} of 5,000 indexed");
    assert_eq!(next.index_bytes(), 8_192 * 24);
}

#[test]
fn a_scan_s_read_ahead_buffer_goes_back_to_its_thread_s_stock() {
    use crate::table::merge::stock;
    let m = Arc::new(Memtable::new());
    for k in 0u8..20 {
        put(&m, &[k], &[k; 100], 1);
    }
    while stock::kept() > 0 {
        drop(stock::take());
    }
    let mut it = m.range_owned(..);
    assert_eq!(stock::kept(), 0, "the iterator took a buffer");
    let first = it.next().unwrap();
    assert_eq!((first.key, first.value), (vec![0], vec![0; 100]));
    drop(it);
    assert_eq!(stock::kept(), 1, "dropped, it gave the buffer back");
    // With the capacity its short values grew it to: the next scan starts with it.
    assert!(stock::take().value.capacity() >= 100);
}
