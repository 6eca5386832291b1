//! Power loss in workloads of their own rather than scripts: a standalone segment,
//! concurrent writers, and batches across tables.

use std::path::Path;

use segstore::io::PowerLoss;
use segstore::segment::{Component, SegmentName, SegmentReader, SegmentWriter};
use segstore::{CommitLogSync, DiskAccessMode, FileRules, Result, SegmentOptions, Store};

use crate::harness::{check, config, opts, rules, stride, GROUP, PERIODIC};
use crate::model::Model;

/// A segment written on its own (no store, no manifest): after a power loss at any
/// operation its meta component (the mark of a whole segment) is present only if the
/// data and index are whole, and a `finish` that returned Ok is durable.
#[test]
fn a_standalone_segment_is_whole_or_absent_after_power_loss() {
    const CELLS: u64 = 3_000;
    let name = SegmentName::new("t", 1).unwrap();
    let write = |dir: &Path, rules: &FileRules| -> Result<()> {
        let opts = SegmentOptions::default();
        let mut w = SegmentWriter::create(dir, name.clone(), &opts, rules)?;
        for i in 0..CELLS {
            w.add(format!("k{i:08}").as_bytes(), &[7u8; 100], i + 1, false)?;
        }
        w.finish().map(|_| ())
    };
    let fresh = |tmp: &tempfile::TempDir| {
        let dir = tmp.path().join("seg");
        std::fs::create_dir(&dir).unwrap();
        dir
    };
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let dir = fresh(&tmp);
        let sim = PowerLoss::new(&dir, 0);
        write(&dir, &FileRules::posix().with_power_loss(sim.clone())).unwrap();
        sim.ops()
    };
    // Few operations: each point runs with every combination of torn writes and
    // reordering, and with four seeds.
    let runs = (0..=total)
        .step_by(stride() as usize)
        .flat_map(|at| (0..16u64).map(move |v| (at, v)));
    for (at, v) in runs {
        let tmp = tempfile::tempdir().unwrap();
        let dir = fresh(&tmp);
        let sim = PowerLoss::new(&dir, at * 16 + v);
        sim.set_torn_writes(v % 2 == 1);
        sim.set_reordering(v % 4 >= 2);
        sim.crash_at(at);
        let finished = write(&dir, &FileRules::posix().with_power_loss(sim.clone())).is_ok();
        let point = format!(
            "segment: power lost at {}",
            sim.crash_point().unwrap_or_else(|| "the end".into())
        );
        sim.recover().unwrap();
        let meta = name.path(&dir, Component::Meta).exists();
        assert!(
            !finished || meta,
            "{point}: finish returned Ok, the segment is gone"
        );
        if meta {
            let r = SegmentReader::open(&dir, &name, DiskAccessMode::Standard.resolve())
                .unwrap_or_else(|e| panic!("{point}: a meta without a whole segment: {e}"));
            assert_eq!(r.verify().unwrap(), CELLS, "{point}");
        }
    }
    eprintln!(
        "standalone segment: {} crash points, 16 runs each",
        total + 1
    );
}

/// Four writers under `group` sync and a flush, concurrently: the operations interleave
/// differently in every run, so "operation n" is a different one each time; each run
/// still checks that every acknowledged write survived.
#[test]
fn concurrent_group_writers_and_a_flush() {
    let o = opts(GROUP);
    let workload = |dir: &Path, rules: FileRules| -> Model {
        let mut model = Model::default();
        let Ok(store) = Store::open(dir, config(o.sync, rules, false)) else {
            return model;
        };
        let results: Vec<Vec<(String, bool)>> = std::thread::scope(|s| {
            let writers: Vec<_> = (0..4)
                .map(|w| {
                    let store = &store;
                    s.spawn(move || {
                        let mut out = Vec::new();
                        let Ok(t) = store.table("a") else {
                            return out;
                        };
                        for i in 0..25 {
                            let k = format!("w{w}-{i:02}");
                            let ok = t.put(k.as_bytes(), k.as_bytes()).is_ok();
                            out.push((k, ok));
                            if !ok {
                                break;
                            }
                        }
                        out
                    })
                })
                .collect();
            if let Ok(t) = store.table("a") {
                let _ = t.flush();
            }
            writers.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (k, ok) in results.into_iter().flatten() {
            model.attempt("a", k.as_bytes(), Some(k.as_bytes()));
            if ok {
                model.acked("a", k.as_bytes(), Some(k.as_bytes()));
            }
        }
        let _ = store.close();
        model
    };
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, 0);
        let model = workload(&dir, rules(o, &sim));
        assert!(model.maybe.is_empty(), "the clean run failed");
        sim.ops()
    };
    let mut tried = 0;
    for at in (0..=total).step_by(stride() as usize) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::crashing_at(&dir, at);
        let model = workload(&dir, rules(o, &sim));
        let point = format!(
            "group/concurrent: power lost at {}",
            sim.crash_point().unwrap_or_else(|| "the end".into())
        );
        sim.recover()
            .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
        check(&dir, &model, o.sync, &point);
        tried += 1;
    }
    eprintln!("group/concurrent: {tried} crash points of about {total} operations");
    assert!(tried > 50);
}

/// Batches across two tables, one table flushed between them, power lost at every
/// operation: after recovery the batch's three keys always hold the same batch, never
/// one table's part without the other's, and no batch older than the last one known
/// durable (acknowledged under `batch`; followed by a sync or a flush under `periodic`).
/// (Under `periodic` a flush once published a segment holding a batch whose log record
/// was not yet durable: after a power loss one table had the batch and the other not.)
#[test]
fn cross_table_batches_are_whole_after_power_loss() {
    for sync in [CommitLogSync::Batch, PERIODIC] {
        let o = opts(sync);
        let periodic = matches!(sync, CommitLogSync::Periodic { .. });
        // Runs the script; returns the last batch known durable.
        let script = |store: &Store| -> u64 {
            let mut durable = 0;
            let (Ok(a), Ok(b)) = (store.table("a"), store.table("b")) else {
                return durable;
            };
            for n in 1..=4u64 {
                let v = n.to_string();
                let mut batch = segstore::Batch::new();
                batch.put(&a, "k1", &v).put(&a, "k2", &v).put(&b, "k1", &v);
                if store.write(&batch).is_err() {
                    return durable;
                }
                if !periodic {
                    durable = n;
                }
                if n % 2 == 0 {
                    if a.flush().is_err() {
                        return durable;
                    }
                    durable = n;
                }
            }
            durable
        };
        let total = {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("store");
            let sim = PowerLoss::new(&dir, 0);
            let store = Store::open(&dir, config(o.sync, rules(o, &sim), false)).unwrap();
            assert_eq!(script(&store), 4);
            drop(store);
            sim.ops()
        };
        let mut tried = 0;
        for at in (0..=total).step_by(stride() as usize) {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("store");
            let sim = PowerLoss::crashing_at(&dir, at);
            let durable = match Store::open(&dir, config(o.sync, rules(o, &sim), false)) {
                Ok(store) => {
                    let d = script(&store);
                    drop(store);
                    d
                }
                Err(_) => 0,
            };
            let point = format!(
                "{sync}/batches across tables: power lost at {}",
                sim.crash_point().unwrap_or_else(|| "the end".into())
            );
            sim.recover()
                .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
            let store = Store::open(&dir, config(o.sync, FileRules::posix(), false))
                .unwrap_or_else(|e| panic!("{point}: the store does not open: {e}"));
            let read = |t: &str, k: &str| -> u64 {
                store
                    .table(t)
                    .unwrap()
                    .get(k)
                    .unwrap()
                    .map_or(0, |v| std::str::from_utf8(&v).unwrap().parse().unwrap())
            };
            let got = [read("a", "k1"), read("a", "k2"), read("b", "k1")];
            assert!(
                got.iter().all(|&n| n == got[0]),
                "{point}: half of a batch: a/k1, a/k2, b/k1 = {got:?}"
            );
            assert!(
                got[0] >= durable,
                "{point}: batch {durable} was durable, found {got:?}"
            );
            store.close().unwrap();
            tried += 1;
        }
        eprintln!("{sync}: batches across tables: {tried} crash points of {total} operations");
        assert!(tried > 20);
    }
}
