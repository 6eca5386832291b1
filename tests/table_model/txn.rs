//! The transaction step: reads checked against the model at its beginning, a racing
//! write, and a commit that conflicts exactly when something it read changed.

use std::collections::BTreeMap;

use segstore::{Error, Store};

use crate::common::Rng;
use crate::model::{live_get, live_in, universe, Model};

/// One transaction: a few gets, partial scans, puts and deletes on both tables, each
/// read checked against the model at its beginning plus its own writes; then a racing
/// plain put (often on something it read) or a flush; then its commit, which must
/// conflict exactly when a key it read or an interval it scanned reads differently now.
pub(crate) fn txn_step(
    s: &Store,
    model: &mut Model,
    rng: &mut Rng,
    step: usize,
    outcomes: &mut [usize; 2],
) {
    let names = ["alpha", "beta"];
    let tables = [s.table("alpha").unwrap(), s.table("beta").unwrap()];
    let begin = model.clone();
    let mut tx = s.transaction().unwrap();
    let mut own: BTreeMap<(usize, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
    // (table, lo, hi) inclusive, read from the store.
    let mut read: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
    for i in 0..(1 + rng.next() % 5) {
        let ti = (rng.next() % 2) as usize;
        let (t, name) = (&tables[ti], names[ti]);
        let key = format!("k{:03}", rng.next() % 120).into_bytes();
        match rng.next() % 4 {
            0 => {
                let want = match own.get(&(ti, key.clone())) {
                    Some(v) => v.clone(),
                    None => {
                        read.push((ti, key.clone(), key.clone()));
                        live_get(&begin, name, &key)
                    }
                };
                let got = tx.get(t, &key).unwrap().map(|v| v.to_vec());
                assert_eq!(got, want, "txn at step {step}: get {name} {key:?}");
            }
            1 => {
                let lo = key;
                let hi = format!("k{:03}", 1 + rng.next() % 119)
                    .into_bytes()
                    .max(lo.clone());
                let mut want: BTreeMap<Vec<u8>, Vec<u8>> =
                    live_in(&begin, name, &lo, &hi).into_iter().collect();
                for ((oti, k), v) in &own {
                    if *oti == ti && *k >= lo && *k <= hi {
                        match v {
                            Some(v) => want.insert(k.clone(), v.clone()),
                            None => want.remove(k),
                        };
                    }
                }
                let want: Vec<_> = want.into_iter().collect();
                let take = (rng.next() % 6) as usize;
                let mut scan = tx.scan(t, lo.as_slice()..=hi.as_slice()).unwrap();
                let mut got = Vec::new();
                let mut ended = false;
                while got.len() < take {
                    match scan.next() {
                        Some(r) => got.push(r.unwrap()),
                        None => {
                            ended = true;
                            break;
                        }
                    }
                }
                drop(scan);
                assert_eq!(got, want[..got.len()], "txn at step {step}: scan {name}");
                if ended {
                    assert_eq!(got.len(), want.len());
                    read.push((ti, lo, hi));
                } else if let Some((last, _)) = got.last() {
                    read.push((ti, lo, last.clone()));
                }
            }
            2 => {
                let v = format!("t{step}-{i}").into_bytes();
                tx.put(t, &key, &v).unwrap();
                own.insert((ti, key), Some(v));
            }
            3 if rng.next() % 3 == 0 => {
                // A range delete: to the model a delete of every key of the universe in
                // it, overridden by the transaction's later writes.
                let a = rng.next() % 120;
                let b = (a + 1 + rng.next() % 20).min(120);
                let (lo, hi) = (format!("k{a:03}"), format!("k{b:03}"));
                tx.delete_range(t, lo.as_bytes()..hi.as_bytes()).unwrap();
                for k in universe()
                    .filter(|k| k.as_slice() >= lo.as_bytes() && k.as_slice() < hi.as_bytes())
                {
                    own.insert((ti, k), None);
                }
            }
            _ => {
                tx.delete(t, &key).unwrap();
                own.insert((ti, key), None);
            }
        }
    }
    match rng.next() % 4 {
        0 | 1 => {
            // A plain put, half the time on the start of something read.
            let (ti, key) = match read.first() {
                Some((ti, lo, _)) if rng.next() % 2 == 0 => (*ti, lo.clone()),
                _ => (
                    (rng.next() % 2) as usize,
                    format!("k{:03}", rng.next() % 120).into_bytes(),
                ),
            };
            let v = format!("racer{step}").into_bytes();
            tables[ti].put(&key, &v).unwrap();
            let ts = model.next_clock();
            model.apply(names[ti], key, (ts, false, v));
        }
        2 => tables[(rng.next() % 2) as usize].flush().unwrap(),
        _ => {}
    }
    let changed: Vec<_> = read
        .iter()
        .filter(|(ti, lo, hi)| {
            live_in(&begin, names[*ti], lo, hi) != live_in(model, names[*ti], lo, hi)
        })
        .collect();
    let read_seq = tx.read_seq();
    let result = tx.commit();
    if own.is_empty() {
        // Read-only: serialized at its view, nothing to check.
        assert_eq!(result.unwrap(), read_seq, "step {step}");
        return;
    }
    match changed.first() {
        Some(first) => {
            match result {
                Err(Error::Conflict { table, key }) => assert!(
                    changed
                        .iter()
                        .any(|(ti, lo, hi)| names[*ti] == table && key >= *lo && key <= *hi),
                    "step {step}: conflict on {table} {key:?}, not in a changed read"
                ),
                r => panic!("step {step}: {first:?} changed, commit gave {r:?}"),
            }
            outcomes[1] += 1;
        }
        None => {
            result.unwrap_or_else(|e| panic!("step {step}: nothing read changed, commit gave {e}"));
            let ts = model.next_clock();
            for ((ti, k), v) in own {
                let cell = match v {
                    Some(v) => (ts, false, v),
                    None => (ts, true, vec![]),
                };
                model.apply(names[ti], k, cell);
            }
            outcomes[0] += 1;
        }
    }
}
