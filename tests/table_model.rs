//! Tables against a BTreeMap model: random puts, deletes, writes with explicit (old)
//! timestamps, batches, flushes, major compactions, clean reopens and crash reopens
//! (drop without close: the commit log replays), with tiny memtables, log files and
//! compaction thresholds so every path runs; batches across both tables
//! (`Store::write`), and read views (`Store::read_view`) held across later steps and
//! checked against a copy of the model taken when they were opened. Reads (gets,
//! forward, reverse, bounded and prefix scans) are checked every 25 steps. `tests/table_iteration.rs` covers
//! iteration (reverse, seeks, prefixes) in depth.
//!
//! A third table, `gamma`, has settings of its own (`Store::table_with`: no background
//! compaction) and a compaction filter, set again at every open: at each of its major
//! compactions the model applies the same filter to its live cells (values ending in
//! `7` removed, in `3` replaced by the value with `!` appended).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use std::sync::Arc;

use segstore::{
    Batch, CommitLogConfig, CommitLogSync, Config, DiskAccessMode, FileRules, FilterDecision,
    ReadView, Store, TableConfig, WriteBatch,
};

/// The tables every check reads.
const TABLES: [&str; 3] = ["alpha", "beta", "gamma"];

/// `gamma`'s filter, as the store runs it and as the model applies it.
fn gamma_filter(value: &[u8]) -> FilterDecision {
    match value.last() {
        Some(b'7') => FilterDecision::Remove,
        Some(b'3') => FilterDecision::Replace([value, b"!"].concat()),
        _ => FilterDecision::Keep,
    }
}

/// Open the store with `gamma`'s own settings and its filter.
fn open(dir: &Path, mode: DiskAccessMode) -> Store {
    let s = Store::open(dir, cfg(mode)).unwrap();
    let mut own = cfg(mode).table;
    own.background_compaction = false;
    let g = s.table_with("gamma", own).unwrap();
    g.set_compaction_filter(Some(Arc::new(|_: &str, _: &[u8], v: &[u8], _: u64| {
        gamma_filter(v)
    })));
    s
}

pub fn cfg(mode: DiskAccessMode) -> Config {
    let mut c = common::test_config(mode, FileRules::posix());
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 4096;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 2500;
    c.table.max_frozen_memtables = 2;
    c.table.compaction.min_threshold = 3;
    c.table.compaction.max_threshold = 6;
    c.table.compaction.min_segment_size = 1 << 20;
    c
}

/// (ts, tombstone, value) ordered as the cell rule orders versions.
type Version = (u64, bool, Vec<u8>);

#[derive(Default, Clone)]
struct Model {
    cells: BTreeMap<String, BTreeMap<Vec<u8>, Version>>,
    /// Clock writes are ordered after every explicit timestamp used here.
    clock: u64,
}

impl Model {
    fn apply(&mut self, table: &str, key: Vec<u8>, v: Version) {
        let slot = self.cells.entry(table.into()).or_default().entry(key);
        match slot {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(v);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                if v > *e.get() {
                    e.insert(v);
                }
            }
        }
    }

    /// A major compaction of `table` under [`gamma_filter`]: every live cell decided.
    /// Returns how many it removed or replaced.
    fn filter(&mut self, table: &str) -> usize {
        let Some(cells) = self.cells.get_mut(table) else {
            return 0;
        };
        let mut changed = 0;
        // The timestamp stays: a removal is a tombstone at the cell's own.
        for (_, tombstone, v) in cells.values_mut() {
            if *tombstone {
                continue;
            }
            match gamma_filter(v) {
                FilterDecision::Keep => continue,
                FilterDecision::Remove => (*tombstone, *v) = (true, Vec::new()),
                FilterDecision::Replace(new) => *v = new,
            }
            changed += 1;
        }
        changed
    }

    fn next_clock(&mut self) -> u64 {
        self.clock += 1;
        (1 << 62) + self.clock
    }

    fn live(&self, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.cells
            .get(table)
            .map(|m| {
                m.iter()
                    .filter(|(_, (_, t, _))| !t)
                    .map(|(k, (_, _, v))| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn check(store: &Store, model: &Model, rng: &mut Rng) {
    for table in TABLES {
        let t = store.table(table).unwrap();
        let want = model.live(table);
        let got: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), want.len(), "table {table}: scan length");
        assert_eq!(got, want, "table {table}: scan");
        let mut back: Vec<_> = t.scan(..).unwrap().rev().map(|r| r.unwrap()).collect();
        back.reverse();
        assert_eq!(back, want, "table {table}: reverse scan");
        let prefix = format!("k{:02}", rng.next() % 12).into_bytes();
        let got: Vec<_> = t
            .scan_prefix(&prefix)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let want_prefix: Vec<_> = want
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .cloned()
            .collect();
        assert_eq!(got, want_prefix, "table {table}: prefix scan");
        for _ in 0..20 {
            let k = format!("k{:03}", rng.next() % 120).into_bytes();
            let want = model
                .cells
                .get(table)
                .and_then(|m| m.get(&k))
                .filter(|(_, t, _)| !t)
                .map(|(_, _, v)| v.clone());
            assert_eq!(
                t.get(&k).unwrap().as_deref(),
                want.as_deref(),
                "table {table}: get {k:?}"
            );
        }
        // A bounded scan agrees with the model's range.
        let (lo, hi) = (b"k030".to_vec(), b"k060".to_vec());
        let got: Vec<_> = t
            .scan(lo.as_slice()..hi.as_slice())
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        let want: Vec<_> = model
            .live(table)
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| *k >= lo && *k < hi)
            .collect();
        assert_eq!(got, want, "table {table}: bounded scan");
    }
}

/// A read view reads exactly what the model held when it was opened, whatever was
/// written, flushed or compacted since.
fn check_view(store: &Store, view: &ReadView, model: &Model, rng: &mut Rng) {
    for table in TABLES {
        let t = store.table(table).unwrap();
        let want = model.live(table);
        let got: Vec<_> = view.scan(&t, ..).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got, want, "view at {}: table {table}: scan", view.seq());
        let mut back: Vec<_> = view
            .scan(&t, ..)
            .unwrap()
            .rev()
            .map(|r| r.unwrap())
            .collect();
        back.reverse();
        assert_eq!(back, want, "view: table {table}: reverse scan");
        let keys: Vec<Vec<u8>> = (0..10)
            .map(|_| format!("k{:03}", rng.next() % 120).into_bytes())
            .collect();
        let many = view.multi_get(&t, &keys).unwrap();
        for (k, got) in keys.iter().zip(many) {
            let want = model
                .cells
                .get(table)
                .and_then(|m| m.get(k))
                .filter(|(_, t, _)| !t)
                .map(|(_, _, v)| v.clone());
            assert_eq!(got.as_deref(), want.as_deref(), "view: {table}: {k:?}");
            assert_eq!(
                view.get(&t, k).unwrap().as_deref(),
                want.as_deref(),
                "view: {table}: get {k:?}"
            );
        }
    }
}

/// Counters of what a run exercised.
#[derive(Default)]
struct Exercised {
    /// Checks of views older than the tables.
    stale_views: usize,
    /// Cells the filter removed or replaced.
    filtered: usize,
}

fn run(seed: u64, mode: DiskAccessMode, steps: usize, dir: &Path, seen: &mut Exercised) {
    let Exercised {
        stale_views: stale_views_checked,
        filtered,
    } = seen;
    let mut rng = Rng(seed);
    let mut model = Model::default();
    let mut store = Some(open(dir, mode));
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
        match rng.next() % 100 {
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
                store = Some(open(dir, mode));
            }
            _ => {
                // Crash: drop without close; the commit log replays.
                drop(t);
                views.clear();
                drop(store.take());
                store = Some(open(dir, mode));
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
    let s = open(dir, mode);
    check(&s, &model, &mut rng);
    assert!(s.close().unwrap().is_clean());
}

#[test]
fn random_operations_match_the_model_in_every_mode() {
    let mut seen = Exercised::default();
    for (i, mode) in DiskAccessMode::all().into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        run(
            0x9E37_79B9 + i as u64 * 7919,
            mode,
            300,
            tmp.path(),
            &mut seen,
        );
    }
    // The views were checked while the tables had moved on from what they saw, and the
    // filter changed cells that reads then checked.
    assert!(seen.stale_views >= 4, "only {}", seen.stale_views);
    assert!(
        seen.filtered >= 3,
        "the filter changed only {} cells",
        seen.filtered
    );
    eprintln!(
        "{} checks of views older than the tables; {} cells filtered",
        seen.stale_views, seen.filtered
    );
}
