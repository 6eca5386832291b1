//! Tables against a BTreeMap model: random puts, deletes, writes with explicit (old)
//! timestamps, batches, flushes, major compactions, clean reopens and crash reopens
//! (drop without close: the commit log replays), with tiny memtables, log files and
//! compaction thresholds so every path runs; batches across both tables
//! (`Store::write`), and read views (`Store::read_view`) held across later steps and
//! checked against a copy of the model taken when they were opened; transactions
//! (gets and partial scans checked against the model as it was at their beginning plus
//! their own writes, a racing plain put or flush, and a commit that must conflict
//! exactly when something they read changed, by value, and otherwise lands whole). Reads (gets,
//! forward, reverse, bounded and prefix scans) are checked every 25 steps. `tests/table_iteration.rs` covers
//! iteration (reverse, seeks, prefixes) in depth.
//!
//! A third table, `gamma`, has settings of its own (`Store::table_with`: no background
//! compaction) and a compaction filter, set again at every open: at each of its major
//! compactions the model applies the same filter to its live cells (values ending in
//! `7` removed, in `3` replaced by the value with `!` appended).
//!
//! TTL (issue 20): puts with a TTL (`Table::put_ttl`, `WriteBatch::put_ttl`) on every
//! table, under a controllable expiry clock (`Store::set_expiry_clock`, set again at
//! every open) that a step advances; the model expires a cell once the clock reaches its
//! expiry, so gets, scans and views are checked before and after expiry, and
//! compactions (`gamma`'s filter sees no expired cell) run across it. Read views judge
//! expiry at their creation, as the copied model does.
//!
//! `alpha` and `gamma` compact size-tiered. `beta` is a leveled table (the default
//! policy; `Store::table_with`, tiny segments and levels): its
//! background and major compactions follow `table::leveled`, and every check also
//! checks its levels stay disjoint; the run asserts segments reached level 2.

mod common;

use common::Rng;

use std::collections::BTreeMap;
use std::path::Path;

use std::sync::Arc;
use std::time::Duration;

use segstore::{
    Batch, CommitLogConfig, CommitLogSync, CompactionStrategy, Config, DiskAccessMode, Error,
    FileRules, FilterDecision, ReadView, Store, TableConfig, WriteBatch,
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
fn open(dir: &Path, mode: DiskAccessMode, now: u64) -> Store {
    let s = Store::open(dir, cfg(mode)).unwrap();
    s.set_expiry_clock(Some(now));
    let mut own = cfg(mode).table;
    own.background_compaction = false;
    let g = s.table_with("gamma", own).unwrap();
    s.table_with("beta", leveled(mode)).unwrap();
    g.set_compaction_filter(Some(Arc::new(|_: &str, _: &[u8], v: &[u8], _: u64| {
        gamma_filter(v)
    })));
    s
}

/// `beta`'s settings: leveled compaction with segments of 1 KiB, level 1 of 1 KiB,
/// each level twice the one above, a compaction at every second flush; in `standard`
/// and `auto`, level 0 merged into one segment below 8 KiB (`l0_merge_bytes`) and
/// into level 1 at every fourth flush, so the model covers level 0 merges too.
fn leveled(mode: DiskAccessMode) -> TableConfig {
    let mut t = cfg(mode).table;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.target_segment_size = 1024;
    t.compaction.base_level_size = 1024;
    t.compaction.level_multiplier = 2;
    t.compaction.l0_trigger = 2;
    if matches!(mode, DiskAccessMode::Standard | DiskAccessMode::Auto) {
        t.compaction.l0_trigger = 4;
        t.compaction.l0_merge_bytes = 8192;
    }
    t
}

pub fn cfg(mode: DiskAccessMode) -> Config {
    let mut c = common::test_config(mode, FileRules::posix());
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 4096;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 2500;
    // The explicit timestamps (1..50 µs after the epoch) are far past any gc grace: a
    // compaction may purge an old tombstone and let an older cell written after it
    // come back, which the model does not follow. Nothing is purged here (purging is
    // tested on its own: tests/table_range_delete.rs, tests/table_behaviour.rs).
    c.table.gc_grace_secs = u64::MAX / 1_000_000;
    c.table.max_frozen_memtables = 2;
    // Size-tiered here (alpha, gamma), leveled in `beta`: both policies run.
    c.table.compaction.strategy = CompactionStrategy::SizeTiered;
    c.table.compaction.min_threshold = 3;
    c.table.compaction.max_threshold = 6;
    c.table.compaction.min_segment_size = 1 << 20;
    c
}

/// (ts, tombstone, value) ordered as the cell rule orders versions.
type Version = (u64, bool, Vec<u8>);

#[derive(Clone)]
struct Model {
    cells: BTreeMap<String, BTreeMap<Vec<u8>, Version>>,
    /// Clock writes are ordered after every explicit timestamp used here.
    clock: u64,
    /// The expiry of each winning cell written with a TTL (every TTL put is
    /// clock-timestamped, so no tie with another cell brings the expiry rule in).
    expires: BTreeMap<(String, Vec<u8>), u64>,
    /// The store's expiry clock, as the test sets it. It starts past any wall clock
    /// this test will meet (the year 2096): a reopened store reads the wall clock until
    /// `open` sets this one, and a compaction running in that window judges expiry by
    /// it. Behind the wall clock, that window saw every TTL cell as expired and purged
    /// some (a scan missing one, about 1 run in 50 with four runs at once on two
    /// cores); ahead of it, the window can only keep more than this clock would.
    now: u64,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            cells: BTreeMap::new(),
            clock: 0,
            expires: BTreeMap::new(),
            now: 4_000_000_000_000_000,
        }
    }
}

impl Model {
    fn apply(&mut self, table: &str, key: Vec<u8>, v: Version) {
        self.apply_expiring(table, key, v, 0);
    }

    /// Apply a cell expiring at `expires` (0: never).
    fn apply_expiring(&mut self, table: &str, key: Vec<u8>, v: Version, expires: u64) {
        let slot = self
            .cells
            .entry(table.into())
            .or_default()
            .entry(key.clone());
        let won = match slot {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(v);
                true
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let won = v > *e.get();
                if won {
                    e.insert(v);
                }
                won
            }
        };
        if won {
            let k = (table.to_string(), key);
            if expires != 0 {
                self.expires.insert(k, expires);
            } else {
                self.expires.remove(&k);
            }
        }
    }

    /// The live value of `key` in `table` at the model's expiry clock.
    fn value(&self, table: &str, key: &[u8]) -> Option<Vec<u8>> {
        let (_, t, v) = self.cells.get(table)?.get(key)?;
        let expired = self
            .expires
            .get(&(table.to_string(), key.to_vec()))
            .is_some_and(|&e| e <= self.now);
        (!t && !expired).then(|| v.clone())
    }

    /// A major compaction of `table` under [`gamma_filter`]: every live cell decided.
    /// Returns how many it removed or replaced.
    fn filter(&mut self, table: &str) -> usize {
        let Some(cells) = self.cells.get_mut(table) else {
            return 0;
        };
        let mut changed = 0;
        // The timestamp stays: a removal is a tombstone at the cell's own. Expired cells
        // are tombstones to compaction: the filter never sees them.
        for (k, (_, tombstone, v)) in cells.iter_mut() {
            let expired = self
                .expires
                .get(&(table.to_string(), k.clone()))
                .is_some_and(|&e| e <= self.now);
            if *tombstone || expired {
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
                m.keys()
                    .filter_map(|k| self.value(table, k).map(|v| (k.clone(), v)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The deepest level `beta`'s segments were seen at, across every run.
static DEEPEST: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn check(store: &Store, model: &Model, rng: &mut Rng) {
    let levels = common::check_levels(&store.segments("beta").unwrap());
    let deepest = levels.iter().map(|l| l.0).max().unwrap_or(0);
    DEEPEST.fetch_max(deepest, std::sync::atomic::Ordering::Relaxed);
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
            let want = model.value(table, &k);
            assert_eq!(
                t.get(&k).unwrap().as_deref(),
                want.as_deref(),
                "table {table}: get {k:?} at {}",
                model.now
            );
            assert_eq!(
                t.contains_key(&k).unwrap(),
                want.is_some(),
                "contains {k:?}"
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
            let want = model.value(table, k);
            assert_eq!(got.as_deref(), want.as_deref(), "view: {table}: {k:?}");
            assert_eq!(
                view.get(&t, k).unwrap().as_deref(),
                want.as_deref(),
                "view: {table}: get {k:?}"
            );
        }
    }
}

fn run(seed: u64, mode: DiskAccessMode, steps: usize, dir: &Path, counts: &mut Counts) {
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

/// What the runs saw, for the assertions that every path ran.
#[derive(Default)]
struct Counts {
    /// Checks of views older than the tables.
    stale_views: usize,
    /// Transactions committed, conflicted.
    txn_outcomes: [usize; 2],
    /// Cells gamma's filter removed or replaced.
    filtered: usize,
    /// Puts with a TTL.
    ttl_puts: usize,
    /// Cells seen to expire as the clock moved.
    expired: usize,
    /// Range deletes written.
    range_deletes: usize,
}

/// Every key of the model's universe.
fn universe() -> impl Iterator<Item = Vec<u8>> {
    (0..120).map(|i| format!("k{i:03}").into_bytes())
}

impl Model {
    /// A range tombstone at `ts` over `[lo, hi)` (`None`: unbounded): a tombstone for
    /// every key of the universe in it, which beats exactly what the range tombstone
    /// beats (every cell at or below `ts`, written before or after).
    fn delete_range(&mut self, table: &str, lo: Option<&[u8]>, hi: Option<&[u8]>, ts: u64) {
        for k in universe() {
            if lo.is_none_or(|l| k.as_slice() >= l) && hi.is_none_or(|h| k.as_slice() < h) {
                self.apply(table, k, (ts, true, vec![]));
            }
        }
    }
}

/// A range delete: alone, inside a batch between puts (the puts before it lose, the
/// puts after it win: issue 20 items 1 and 2), or across tables in a `Batch`.
fn range_step(s: &Store, table: &str, model: &mut Model, rng: &mut Rng, step: usize) {
    let t = s.table(table).unwrap();
    let a = rng.next() % 120;
    let b = (a + 1 + rng.next() % 30).min(120); // [a, b) within the universe
    let lo = format!("k{a:03}").into_bytes();
    let hi = format!("k{b:03}").into_bytes();
    match rng.next() % 5 {
        0 => {
            t.delete_range(lo.as_slice()..hi.as_slice()).unwrap();
            let ts = model.next_clock();
            model.delete_range(table, Some(&lo), Some(&hi), ts);
        }
        1 => {
            // Unbounded on one side.
            let ts = model.next_clock();
            if rng.next() % 2 == 0 {
                t.delete_range(..hi.as_slice()).unwrap();
                model.delete_range(table, None, Some(&hi), ts);
            } else {
                t.delete_range(lo.as_slice()..).unwrap();
                model.delete_range(table, Some(&lo), None, ts);
            }
        }
        2 => {
            // Inclusive end: `..=k` deletes k too.
            let last = format!("k{:03}", b.min(119)).into_bytes();
            t.delete_range(lo.as_slice()..=last.as_slice()).unwrap();
            let mut end = last.clone();
            end.push(0);
            let ts = model.next_clock();
            model.delete_range(table, Some(&lo), Some(&end), ts);
        }
        3 => {
            let mut batch = WriteBatch::new();
            let before = format!("k{:03}", a + rng.next() % (b - a)).into_bytes();
            let after = format!("k{:03}", a + rng.next() % (b - a)).into_bytes();
            let (v1, v2) = (format!("pre{step}"), format!("post{step}"));
            batch.put(&before, &v1);
            batch.delete_range(lo.as_slice()..hi.as_slice());
            batch.put(&after, &v2);
            t.write(&batch).unwrap();
            let ts = model.next_clock();
            model.apply(table, before, (ts, false, v1.into_bytes()));
            model.delete_range(table, Some(&lo), Some(&hi), ts);
            let ts = model.next_clock();
            model.apply(table, after, (ts, false, v2.into_bytes()));
        }
        _ => {
            let (x, y) = (s.table("alpha").unwrap(), s.table("beta").unwrap());
            let mut batch = Batch::new();
            batch.delete_range(&x, lo.as_slice()..hi.as_slice());
            batch.delete_range(&y, lo.as_slice()..hi.as_slice());
            s.write(&batch).unwrap();
            let ts = model.next_clock();
            model.delete_range("alpha", Some(&lo), Some(&hi), ts);
            model.delete_range("beta", Some(&lo), Some(&hi), ts);
        }
    }
}

#[test]
fn random_operations_match_the_model_in_every_mode() {
    let mut counts = Counts::default();
    // `MODEL_SEEDS=n` runs n seeds per mode (CI runs one).
    let seeds: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for seed in 0..seeds {
        for (i, mode) in DiskAccessMode::all().into_iter().enumerate() {
            let tmp = tempfile::tempdir().unwrap();
            run(
                0x9E37_79B9 + i as u64 * 7919 + seed * 104_729,
                mode,
                300,
                tmp.path(),
                &mut counts,
            );
        }
    }
    let stale_views_checked = counts.stale_views;
    let deepest = DEEPEST.load(std::sync::atomic::Ordering::Relaxed);
    assert!(deepest >= 2, "beta's segments reached level {deepest} only");
    assert!(
        counts.range_deletes >= 10,
        "only {} range deletes",
        counts.range_deletes
    );
    let [committed, conflicted] = counts.txn_outcomes;
    eprintln!("transactions: {committed} committed, {conflicted} conflicted");
    assert!(
        committed >= 5 && conflicted >= 3,
        "{committed} committed, {conflicted} conflicted"
    );
    // The views were checked while the tables had moved on from what they saw, and the
    // filter changed cells that reads then checked.
    assert!(stale_views_checked >= 4, "only {stale_views_checked}");
    assert!(
        counts.ttl_puts >= 10 && counts.expired >= 5,
        "TTL puts {}, cells expired {}",
        counts.ttl_puts,
        counts.expired
    );
    assert!(
        counts.filtered >= 1,
        "the filter changed only {} cells",
        counts.filtered
    );
    eprintln!(
        "{stale_views_checked} checks of views older than the tables; {} cells filtered; \
         {} TTL puts, {} cells expired as the clock moved",
        counts.filtered, counts.ttl_puts, counts.expired
    );
}

fn live_get(m: &Model, table: &str, key: &[u8]) -> Option<Vec<u8>> {
    m.value(table, key)
}

/// Live rows of `table` in `[lo, hi]` (inclusive).
fn live_in(m: &Model, table: &str, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.live(table)
        .into_iter()
        .filter(|(k, _)| k.as_slice() >= lo && k.as_slice() <= hi)
        .collect()
}

/// One transaction: a few gets, partial scans, puts and deletes on both tables, each
/// read checked against the model at its beginning plus its own writes; then a racing
/// plain put (often on something it read) or a flush; then its commit, which must
/// conflict exactly when a key it read or an interval it scanned reads differently now.
fn txn_step(s: &Store, model: &mut Model, rng: &mut Rng, step: usize, outcomes: &mut [usize; 2]) {
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
