//! One run: random steps against the store and the model in one disk access mode,
//! checked every 25 steps and after a last clean reopen.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use segstore::{Batch, DiskAccessMode, ReadView, WriteBatch};

use crate::check::{check, check_view};
use crate::common::Rng;
use crate::model::Model;
use crate::range::range_step;
use crate::store::{open, TABLES};
use crate::txn::txn_step;
use crate::Counts;

pub(crate) fn run(seed: u64, mode: DiskAccessMode, steps: usize, dir: &Path, counts: &mut Counts) {
    let stale_views_checked = &mut counts.stale_views;
    let txn_outcomes = &mut counts.txn_outcomes;
    let filtered = &mut counts.filtered;
    let mut rng = Rng(seed);
    let mut model = Model::default();
    let mut store = Some(open(dir, mode, model.now));
    // Open read views and the model as each saw it.
    let mut views: Vec<(ReadView, Model)> = Vec::new();
    for step in 0..steps {
        let s = store.as_ref().unwrap();
        let table = match rng.next() % 6 {
            0 | 1 => "beta",
            2 => "gamma",
            _ => "alpha",
        };
        let t = s.table(table).unwrap();
        let key = format!("k{:03}", rng.next() % 120).into_bytes();
        match rng.next() % 130 {
            0..=49 => {
                let pad = "x".repeat((rng.next() % 30) as usize);
                let v = format!("v{step}-{pad}{}", rng.next() % 10).into_bytes();
                t.put(&key, &v).unwrap();
                let ts = model.next_clock();
                model.apply(table, key, (ts, false, v));
            }
            50..=64 => {
                t.delete(&key).unwrap();
                let ts = model.next_clock();
                model.apply(table, key, (ts, true, vec![]));
            }
            65..=74 => {
                // Explicit, old timestamps: only win against each other.
                let ts = 1 + rng.next() % 50;
                let v = format!("old{ts}").into_bytes();
                if rng.next() % 4 == 0 {
                    t.write(WriteBatch::new().delete_at(key.clone(), ts))
                        .unwrap();
                    model.apply(table, key, (ts, true, vec![]));
                } else {
                    t.write(WriteBatch::new().put_at(key.clone(), v.clone(), ts))
                        .unwrap();
                    model.apply(table, key, (ts, false, v));
                }
            }
            75..=80 => {
                let mut b = WriteBatch::new();
                let ts = model.next_clock();
                // Of a key twice in a batch the last operation wins (issue 20 item 1).
                let mut last = BTreeMap::new();
                for i in 0..(1 + rng.next() % 5) {
                    let k = format!("k{:03}", (rng.next() + i) % 120).into_bytes();
                    let v = format!("b{step}-{i}").into_bytes();
                    b.put(k.clone(), v.clone());
                    last.insert(k, (ts, false, v));
                }
                for (k, cell) in last {
                    model.apply(table, k, cell);
                }
                t.write(&b).unwrap();
            }
            81..=83 if table != "gamma" || rng.next() % 2 == 0 => t.flush().unwrap(),
            81..=84 => {
                t.compact().unwrap();
                if table == "gamma" {
                    *filtered += model.filter(table);
                }
            }
            85..=92 => {
                if rng.next() % 2 == 0 || views.len() >= 3 {
                    // Across both tables, all or nothing.
                    let (a, b) = (s.table("alpha").unwrap(), s.table("beta").unwrap());
                    let mut batch = Batch::new();
                    let ts = model.next_clock();
                    let mut last = BTreeMap::new(); // (table, key): the last operation wins
                    for i in 0..(1 + rng.next() % 4) {
                        let (t, name) = if (rng.next() + i) % 2 == 0 {
                            (&a, "alpha")
                        } else {
                            (&b, "beta")
                        };
                        let k = format!("k{:03}", rng.next() % 120).into_bytes();
                        if rng.next() % 4 == 0 {
                            batch.delete(t, &k);
                            last.insert((name, k), (ts, true, vec![]));
                        } else {
                            let v = format!("x{step}-{i}").into_bytes();
                            batch.put(t, &k, &v);
                            last.insert((name, k), (ts, false, v));
                        }
                    }
                    for ((name, k), cell) in last {
                        model.apply(name, k, cell);
                    }
                    s.write(&batch).unwrap();
                } else {
                    views.push((s.read_view().unwrap(), model.clone()));
                }
            }
            93..=95 => {
                // Clean reopen.
                drop(t);
                for (v, m) in views.drain(..) {
                    check_view(s, &v, &m, &mut rng);
                }
                store.take().unwrap().close().unwrap();
                store = Some(open(dir, mode, model.now));
            }
            100..=109 => {
                drop(t);
                txn_step(s, &mut model, &mut rng, step, txn_outcomes);
            }
            110..=117 => {
                drop(t);
                range_step(s, table, &mut model, &mut rng, step);
                counts.range_deletes += 1;
            }
            118..=125 => {
                // A put with a TTL, alone or in a batch, and read back at once.
                let ttl = 1 + rng.next() % 3000;
                let v = format!("ttl{step}").into_bytes();
                if rng.next() % 2 == 0 {
                    t.put_ttl(&key, &v, Duration::from_micros(ttl)).unwrap();
                } else {
                    t.write(WriteBatch::new().put_ttl(&key, &v, Duration::from_micros(ttl)))
                        .unwrap();
                }
                let ts = model.next_clock();
                model.apply_expiring(table, key.clone(), (ts, false, v), model.now + ttl);
                assert_eq!(
                    t.get(&key).unwrap().as_deref(),
                    model.value(table, &key).as_deref()
                );
                counts.ttl_puts += 1;
            }
            126.. => {
                // Time passes: cells whose expiry it reaches read as deleted.
                drop(t);
                let before = TABLES.iter().map(|t| model.live(t).len()).sum::<usize>();
                model.now += rng.next() % 2000;
                s.set_expiry_clock(Some(model.now));
                let after = TABLES.iter().map(|t| model.live(t).len()).sum::<usize>();
                counts.expired += before - after;
            }
            _ => {
                // Crash: drop without close; the commit log replays.
                drop(t);
                views.clear();
                drop(store.take());
                store = Some(open(dir, mode, model.now));
            }
        }
        if step % 25 == 0 {
            let s = store.as_ref().unwrap();
            check(s, &model, &mut rng);
            for (v, m) in &views {
                check_view(s, v, m, &mut rng);
                if TABLES.iter().any(|t| m.live(t) != model.live(t)) {
                    *stale_views_checked += 1;
                }
            }
            if !views.is_empty() && rng.next() % 2 == 0 {
                views.remove(0);
            }
        }
    }
    views.clear();
    let s = store.take().unwrap();
    check(&s, &model, &mut rng);
    s.tables().wait_idle();
    for table in TABLES {
        eprintln!("{mode}: {table}: {:?}", s.table(table).unwrap().stats());
    }
    // A memtable pins the log files its records are in (a table written rarely, from
    // many files back); with every table flushed, every closed file is obsolete.
    s.tables().flush(None).unwrap();
    let log_files = std::fs::read_dir(dir.join("commitlog")).unwrap().count();
    let report = s.close().unwrap();
    assert!(report.is_clean(), "{report:?}");
    // Obsolete commit log files were released: the active file and the positions file.
    assert!(log_files <= 2, "{log_files} files in commitlog/");
    let s = open(dir, mode, model.now);
    check(&s, &model, &mut rng);
    assert!(s.close().unwrap().is_clean());
}
