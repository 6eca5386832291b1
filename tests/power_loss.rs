//! Power loss at every I/O operation (issue 11).
//!
//! Kill tests (`crash_kill_*`) SIGKILL a process, and the page cache survives them, so
//! they cannot tell a missing fsync from a present one. Here every file operation of
//! the store goes through the power-loss simulator (`segstore::io::PowerLoss`, behind
//! the I/O boundary): a scripted workload runs once to count its operations, then once
//! per operation with the power lost at that operation. The simulator then drops what
//! was not fsynced (or tears it at 512-byte granularity, every other run) and undoes
//! creates, renames and unlinks whose directory was not fsynced (or, every other pair of
//! runs, lets a random subset of them persist, in any order consistent per name); the
//! store is reopened with plain rules and checked:
//! - it opens (also after a second power loss during that recovery, every third point);
//! - every write acknowledged under `batch` or `group` is there (under `periodic`, every
//!   write before the last successful `sync` or flush); a write that failed or was not
//!   acknowledged may or may not be there, and nothing else is;
//! - every snapshot whose creation returned Ok and that was not cleared is listed and
//!   opens; a snapshot whose clear returned Ok is not listed;
//! - a table whose drop returned Ok holds nothing written before the drop (a drop
//!   that failed may or may not have taken effect);
//! - every segment file is named by a table manifest or is waiting for the deleter, no
//!   temp file is left, and the store closes with nothing leaked or pending.
//!
//! `SEGSTORE_CRASH_POINTS_STRIDE` (default 1: every operation) checks every Nth point;
//! `SEGSTORE_CRASH_POINT=<n>` runs only point `n` and prints what recovery did.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // inspects the directory after recovery

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use segstore::io::rules::{FaultKind, Faults};
use segstore::io::PowerLoss;
use segstore::segment::{Component, SegmentName, SegmentReader, SegmentWriter};
use segstore::{
    CommitLogSync, CompactionStrategy, Config, DeletePolicy, DiskAccessMode, FileRules, Result,
    SegmentOptions, Store, Table, TableConfig,
};

/// (table, key).
type Key = (String, Vec<u8>);
/// A value, or `None` for a delete.
type Value = Option<Vec<u8>>;

/// What the workload was told: per (table, key), the values it may find.
#[derive(Default, Debug)]
struct Model {
    /// Last acknowledged (durable) value: `Some(None)` is a delete.
    durable: BTreeMap<Key, Value>,
    /// Written after the last durable point (not acknowledged durable yet, or failed).
    maybe: BTreeMap<Key, Vec<Value>>,
    /// Under periodic sync: acknowledged but not yet covered by a sync.
    unsynced: Vec<(Key, Value)>,
    /// Snapshots created (Ok) and no clear attempted since.
    snapshots: BTreeSet<String>,
    /// Snapshots cleared (Ok) and no re-creation attempted since.
    cleared: BTreeSet<String>,
    periodic: bool,
    /// A write that failed (single-threaded scripts stop at the first one).
    failed: Vec<(Key, Value)>,
    /// One writer: what survived of `unsynced` + `failed` must be a prefix of it.
    ordered: bool,
}

impl Model {
    fn attempt(&mut self, table: &str, key: &[u8], value: Option<&[u8]>) {
        self.maybe
            .entry((table.to_string(), key.to_vec()))
            .or_default()
            .push(value.map(<[u8]>::to_vec));
    }

    fn acked(&mut self, table: &str, key: &[u8], value: Option<&[u8]>) {
        let k = (table.to_string(), key.to_vec());
        let v = value.map(<[u8]>::to_vec);
        if self.periodic {
            self.unsynced.push((k, v));
        } else {
            self.durable.insert(k.clone(), v);
            self.maybe.remove(&k);
        }
    }

    /// A sync returned Ok: everything acknowledged so far is durable.
    fn synced(&mut self) {
        self.synced_where(|_| true);
    }

    /// A flush of `table` returned Ok: what it acknowledged is in a segment (the commit
    /// log holding other tables' writes was not necessarily synced).
    fn flushed(&mut self, table: &str) {
        self.synced_where(|t| t == table);
    }

    /// A drop of `table` is attempted: every key of it may read as absent from now on.
    fn drop_attempt(&mut self, table: &str) {
        let keys: Vec<Key> = self
            .durable
            .keys()
            .chain(self.maybe.keys())
            .filter(|(t, _)| t == table)
            .cloned()
            .collect();
        for k in keys {
            self.maybe.entry(k).or_default().push(None);
        }
    }

    /// The drop returned Ok: nothing written to `table` before it is there.
    fn dropped(&mut self, table: &str) {
        for (k, v) in self.durable.iter_mut() {
            if k.0 == table {
                *v = None;
            }
        }
        self.maybe.retain(|(t, _), _| t != table);
        self.unsynced.retain(|((t, _), _)| t != table);
    }

    fn synced_where(&mut self, f: impl Fn(&str) -> bool) {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unsynced)
            .into_iter()
            .partition(|((t, _), _)| f(t));
        self.unsynced = later;
        for (k, v) in now {
            self.maybe.remove(&k);
            self.durable.insert(k, v);
        }
    }
}

struct Ctx<'a> {
    store: &'a Store,
    model: &'a mut Model,
}

impl Ctx<'_> {
    fn table(&self, t: &str) -> Result<Arc<Table>> {
        self.store.table(t)
    }

    fn put(&mut self, t: &str, k: &str, v: &str) -> Result<()> {
        self.write(t, k, Some(v))
    }

    fn delete(&mut self, t: &str, k: &str) -> Result<()> {
        self.write(t, k, None)
    }

    fn write(&mut self, t: &str, k: &str, v: Option<&str>) -> Result<()> {
        let value = v.map(str::as_bytes);
        self.model.attempt(t, k.as_bytes(), value);
        let r = self.table(t).and_then(|table| match value {
            Some(v) => table.put(k.as_bytes(), v),
            None => table.delete(k.as_bytes()),
        });
        self.outcome(t, k, value, r)
    }

    /// The model learns how an attempted write of `value` to `t`/`k` ended: acknowledged,
    /// or failed (then it may or may not be there after the crash).
    fn outcome(&mut self, t: &str, k: &str, value: Option<&[u8]>, r: Result<()>) -> Result<()> {
        match r {
            Ok(()) => {
                self.model.acked(t, k.as_bytes(), value);
                Ok(())
            }
            Err(e) => {
                let key = (t.to_string(), k.as_bytes().to_vec());
                self.model.failed.push((key, value.map(<[u8]>::to_vec)));
                Err(e)
            }
        }
    }

    /// A put for `ttl` seconds of the expiry clock (which the TTL script sets, and the
    /// check reads at [`TTL_CHECK`]): to the model the value if it is still live then,
    /// else a delete (what every read after the reopen sees).
    fn put_ttl(&mut self, t: &str, k: &str, v: &str, ttl: u64) -> Result<()> {
        let live = self.store.expiry_now() + ttl * 1_000_000 > TTL_CHECK;
        let value = live.then_some(v.as_bytes());
        self.model.attempt(t, k.as_bytes(), value);
        let r = self
            .table(t)
            .and_then(|table| table.put_ttl(k.as_bytes(), v.as_bytes(), Duration::from_secs(ttl)));
        self.outcome(t, k, value, r)
    }

    /// A range delete of `[lo, hi)`, to the model a delete of each key of the scripts'
    /// universe (`k000`..`k009`) in it: one record, so all of them or none.
    fn delete_range(&mut self, t: &str, lo: &str, hi: &str) -> Result<()> {
        let keys: Vec<String> = (0..10)
            .map(|i| format!("k{i:03}"))
            .filter(|k| k.as_str() >= lo && k.as_str() < hi)
            .collect();
        for k in &keys {
            self.model.attempt(t, k.as_bytes(), None);
        }
        let r = self
            .table(t)
            .and_then(|table| table.delete_range(lo.as_bytes()..hi.as_bytes()));
        for k in &keys {
            match &r {
                Ok(_) => self.model.acked(t, k.as_bytes(), None),
                Err(_) => {
                    let key = (t.to_string(), k.as_bytes().to_vec());
                    self.model.failed.push((key, None));
                }
            }
        }
        r.map(drop)
    }

    fn flush(&mut self, t: &str) -> Result<()> {
        self.table(t)?.flush()?;
        self.model.flushed(t);
        Ok(())
    }

    fn compact(&mut self, t: &str) -> Result<()> {
        self.table(t)?.compact()?;
        self.model.flushed(t);
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.store.tables().commit_log().sync()?;
        self.model.synced();
        Ok(())
    }

    /// A snapshot whose creation failed may or may not exist after the crash.
    fn snapshot(&mut self, tag: &str) -> Result<()> {
        self.model.cleared.remove(tag);
        self.store.snapshot(tag, None)?;
        // A snapshot flushes first.
        self.model.synced();
        self.model.snapshots.insert(tag.to_string());
        Ok(())
    }

    /// A drop that failed may or may not have taken effect.
    fn drop_table(&mut self, t: &str) -> Result<()> {
        self.model.drop_attempt(t);
        self.store.drop_table(t)?;
        self.model.dropped(t);
        Ok(())
    }

    /// A clear that failed may or may not have taken effect.
    fn clear(&mut self, tag: &str) -> Result<()> {
        self.model.snapshots.remove(tag);
        self.store.clear_snapshot(tag)?;
        self.model.cleared.insert(tag.to_string());
        Ok(())
    }
}

type Script = fn(&mut Ctx<'_>) -> Result<()>;

fn writes(c: &mut Ctx<'_>, t: &str, round: u32, n: u32) -> Result<()> {
    for i in 0..n {
        c.put(t, &format!("k{i:03}"), &format!("v{round}-{i}"))?;
    }
    c.delete(t, &format!("k{:03}", round % n))
}

/// Puts, deletes and overwrites; flushes; a compaction; more writes left in the log.
fn flush_and_compact(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 6)?;
    c.flush("a")?;
    writes(c, "a", 2, 6)?;
    writes(c, "b", 2, 3)?;
    c.flush("a")?;
    c.compact("a")?;
    writes(c, "a", 3, 4)?;
    c.sync()
}

/// Range deletes in the memtable, flushed into a segment (one holding only a range
/// tombstone too), compacted with the cells they cover, and left in the log.
fn range_deletes(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 8)?;
    c.flush("a")?;
    c.delete_range("a", "k002", "k006")?;
    c.flush("a")?;
    c.put("a", "k003", "back")?;
    writes(c, "b", 1, 3)?;
    c.delete_range("b", "k000", "k002")?;
    c.compact("a")?;
    c.delete_range("a", "k005", "k009")?;
    c.sync()
}

/// The expiry clock of the TTL script's start, and of every check (scripts without
/// TTL cells do not notice it).
const TTL_T0: u64 = 1_700_000_000_000_000;
const TTL_CHECK: u64 = TTL_T0 + 100 * 1_000_000;

/// TTL: expiring cells that expire before the check and others that do not, over older
/// values, in the memtable, flushed, and compacted across their expiry in a table with
/// `gc_grace` 0 (expired cells become tombstones or are purged), some left in the log.
fn ttl(c: &mut Ctx<'_>) -> Result<()> {
    c.store.set_expiry_clock(Some(TTL_T0));
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.gc_grace_secs = 0;
    c.store.table_with("e", t)?;
    writes(c, "e", 1, 6)?;
    c.flush("e")?;
    for i in 0..6 {
        let ttl = if i % 2 == 0 { 10 } else { 1000 };
        c.put_ttl("e", &format!("k{i:03}"), &format!("ttl-{i}"), ttl)?;
    }
    c.put_ttl("a", "k000", "short", 5)?;
    c.flush("e")?;
    c.store.set_expiry_clock(Some(TTL_CHECK));
    c.compact("e")?;
    c.store.set_expiry_clock(Some(TTL_CHECK - 1_000_000));
    c.put_ttl("e", "k007", "logged", 1)?;
    c.put_ttl("e", "k008", "logged", 1000)?;
    c.compact("e")?;
    c.sync()
}

/// Leveled compactions (table `l`: segments of 1 KiB, level 1 of 2 KiB): level 0 into
/// level 1 cut into several segments, pushes down to level 2, a range delete clipped
/// between output segments, and a major compaction into one level.
fn leveled(c: &mut Ctx<'_>) -> Result<()> {
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.target_segment_size = 1024;
    t.compaction.base_level_size = 2048;
    t.compaction.level_multiplier = 2;
    t.compaction.l0_trigger = 2;
    c.store.table_with("l", t)?;
    let pad = "p".repeat(300);
    for round in 1..=4 {
        for i in 0..10 {
            c.put("l", &format!("k{i:03}"), &format!("v{round}-{i}-{pad}"))?;
        }
        c.flush("l")?;
        if round % 2 == 0 {
            c.table("l")?.compact_pending()?;
        }
    }
    c.delete_range("l", "k002", "k007")?;
    c.put("l", "k004", "back")?;
    c.flush("l")?;
    c.flush("l")?;
    c.table("l")?.compact_pending()?;
    c.compact("l")?;
    writes(c, "l", 5, 4)?;
    c.sync()
}

/// Table `m`: level 0 kept to one segment (`l0_merge_bytes`), merged at the second
/// and third flushes, into level 1 at the fourth.
fn level_0_merges(c: &mut Ctx<'_>) -> Result<()> {
    let mut t = TableConfig::default();
    t.background_compaction = false;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.l0_trigger = 4;
    t.compaction.l0_merge_bytes = 1 << 20;
    c.store.table_with("m", t)?;
    for round in 1..=4 {
        for i in (round..12).step_by(3) {
            c.put("m", &format!("k{i:03}"), &format!("v{round}-{i}"))?;
        }
        c.flush("m")?;
        c.table("m")?.compact_pending()?;
    }
    c.sync()
}

/// Snapshot, clear, and re-use of the tag; writes between.
fn snapshots(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 4)?;
    c.snapshot("s1")?;
    writes(c, "a", 2, 4)?;
    c.snapshot("s2")?;
    c.clear("s1")?;
    writes(c, "a", 3, 2)?;
    c.snapshot("s1")?;
    c.sync()
}

/// Deferred deletions completing: a snapshot reader maps segments that a compaction and
/// a clear make obsolete; dropping the reader lets their deletions run.
fn deferred(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 4)?;
    c.flush("a")?;
    writes(c, "a", 2, 4)?;
    c.snapshot("s")?;
    let view = c.store.open_snapshot("s")?;
    c.compact("a")?;
    c.clear("s")?;
    writes(c, "a", 3, 3)?;
    drop(view);
    c.flush("a")?;
    c.snapshot("s")?;
    c.sync()
}

/// Tables dropped with flushed and logged data, one of them written again under the
/// same name, and a snapshot naming the dropped table's segments.
fn drop_tables(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 5)?;
    writes(c, "b", 1, 3)?;
    c.flush("a")?;
    c.snapshot("s")?;
    writes(c, "a", 2, 5)?;
    c.drop_table("a")?;
    writes(c, "a", 3, 3)?;
    c.flush("a")?;
    c.drop_table("b")?;
    writes(c, "b", 4, 2)?;
    c.sync()
}

/// Snapshots on a file system without hard links: their files are copies.
fn copied_snapshots(c: &mut Ctx<'_>) -> Result<()> {
    writes(c, "a", 1, 4)?;
    c.snapshot("s1")?;
    writes(c, "a", 2, 2)?;
    c.snapshot("s2")?;
    c.clear("s1")?;
    c.sync()
}

fn config(sync: CommitLogSync, rules: FileRules, defer: bool) -> Config {
    let mut cfg = Config::default();
    cfg.commitlog.sync = sync;
    cfg.table = TableConfig::default();
    cfg.table.background_compaction = false;
    cfg.track_leaks = true;
    if defer {
        cfg.delete_policy = DeletePolicy::DeferWhileMapped;
    }
    cfg.file_rules = rules;
    cfg
}

fn run(dir: &Path, sync: CommitLogSync, defer: bool, rules: FileRules, script: Script) -> Model {
    let mut model = Model {
        periodic: matches!(sync, CommitLogSync::Periodic { .. }),
        ordered: true,
        ..Model::default()
    };
    if let Ok(store) = Store::open(dir, config(sync, rules, defer)) {
        let mut c = Ctx {
            store: &store,
            model: &mut model,
        };
        if script(&mut c).is_ok() && store.close().is_ok() {
            model.synced();
        }
    }
    model
}

/// Reopen and check twice: the first reopen writes (a new commit log file, completed
/// deletions), and what a crash left must not trouble the run after it either.
fn check(dir: &Path, model: &Model, sync: CommitLogSync, point: &str) {
    check_once(dir, model, sync, point);
    check_once(dir, model, sync, &format!("{point} (second reopen)"));
}

fn check_once(dir: &Path, model: &Model, sync: CommitLogSync, point: &str) {
    let store = Store::open(dir, config(sync, FileRules::posix(), false))
        .unwrap_or_else(|e| panic!("{point}: the store does not open: {e}"));
    store.set_expiry_clock(Some(TTL_CHECK));
    let keys: BTreeSet<&(String, Vec<u8>)> =
        model.durable.keys().chain(model.maybe.keys()).collect();
    for k in keys {
        let got = store
            .table(&k.0)
            .unwrap()
            .get(&k.1)
            .unwrap()
            .map(|v| v.to_vec());
        let mut allowed: Vec<Option<Vec<u8>>> = model.maybe.get(k).cloned().unwrap_or_default();
        match model.durable.get(k) {
            Some(v) => allowed.push(v.clone()),
            None => allowed.push(None), // never durably written
        }
        assert!(
            allowed.contains(&got),
            "{point}: {}/{} reads {:?}, expected one of {:?}",
            k.0,
            String::from_utf8_lossy(&k.1),
            got.as_deref().map(String::from_utf8_lossy),
            allowed
        );
    }
    if model.ordered {
        check_prefix(&store, model, point);
    }
    let listed: BTreeSet<String> = store
        .list_snapshots()
        .unwrap()
        .into_iter()
        .map(|s| s.tag)
        .collect();
    for tag in &model.snapshots {
        assert!(
            listed.contains(tag),
            "{point}: snapshot {tag} lost ({listed:?})"
        );
        store
            .open_snapshot(tag)
            .unwrap_or_else(|e| panic!("{point}: snapshot {tag} does not open: {e}"));
    }
    for tag in &model.cleared {
        assert!(
            !listed.contains(tag),
            "{point}: cleared snapshot {tag} came back"
        );
    }
    // Per-table settings survive with the table: the leveled script makes `l` with
    // its own settings before writing to it, and this open passes the defaults. A
    // table whose creation the power loss cut short may have none persisted (a later
    // `table_with` gives it its settings then), but then it holds nothing.
    if store.table_names().iter().any(|n| n == "l") {
        let l = store.table("l").unwrap();
        let c = l.config();
        let own = c.compaction.strategy == CompactionStrategy::Leveled
            && c.compaction.target_segment_size == 1024;
        assert!(
            own || l.scan(..).unwrap().next().is_none(),
            "{point}: table l holds data but reopened without its own settings: {c:?}"
        );
    }
    // Every segment file is live or waiting for the deleter; no temp file anywhere.
    let mut live = BTreeSet::new();
    for t in store.table_names() {
        common::check_levels(&store.segments(&t).unwrap());
        for id in store.segments(&t).unwrap().live_ids() {
            live.insert(format!("{t}-{id}-"));
        }
    }
    for e in std::fs::read_dir(store.dir()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".db") {
            assert!(
                live.iter().any(|p| name.starts_with(p.as_str()))
                    || store.deleter().is_pending(&e.path()),
                "{point}: orphan segment file {name} left (live: {live:?})"
            );
        }
    }
    let mut temps = Vec::new();
    walk(store.dir(), &mut |p| {
        if p.to_string_lossy().ends_with(".tmp") && !store.deleter().is_pending(p) {
            temps.push(p.to_path_buf());
        }
    });
    assert!(temps.is_empty(), "{point}: temp files left: {temps:?}");
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{point}: close not clean: {report:?}");
}

/// One writer: the log replays a prefix of what was written, so what survived of the
/// writes not known durable (acknowledged but unsynced, then the failed one) must be a
/// prefix of them in order: the store equals the durable state plus that prefix, never
/// a later write without an earlier one.
fn check_prefix(store: &Store, model: &Model, point: &str) {
    let seq: Vec<&(Key, Value)> = model.unsynced.iter().chain(&model.failed).collect();
    if seq.is_empty() {
        return;
    }
    let mut actual: BTreeMap<&Key, Value> = BTreeMap::new();
    for (k, _) in &seq {
        actual.insert(
            k,
            store
                .table(&k.0)
                .unwrap()
                .get(&k.1)
                .unwrap()
                .map(|v| v.to_vec()),
        );
    }
    let fits = (0..=seq.len()).any(|p| {
        let mut expect: BTreeMap<&Key, Value> = actual
            .keys()
            .map(|k| (*k, model.durable.get(*k).cloned().flatten()))
            .collect();
        for (k, v) in &seq[..p] {
            expect.insert(k, v.clone());
        }
        expect == actual
    });
    assert!(
        fits,
        "{point}: the surviving writes are not a prefix of those written: {actual:?}"
    );
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        f(&p);
        if p.is_dir() {
            walk(&p, f);
        }
    }
}

fn stride() -> u64 {
    std::env::var("SEGSTORE_CRASH_POINTS_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

#[derive(Clone, Copy)]
struct Opts {
    sync: CommitLogSync,
    /// `DeferWhileMapped` under the Windows emulation.
    defer: bool,
    /// Hard links refused: snapshots copy.
    no_links: bool,
}

fn rules(o: Opts, sim: &PowerLoss) -> FileRules {
    common::power_loss_rules(o.defer, o.no_links, sim)
}

/// Run `script` once to count its operations, then crash it at every one of them.
/// Returns the number of crash points tried.
fn every_crash_point(name: &str, o: Opts, script: Script) -> u64 {
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, 0);
        let model = run(&dir, o.sync, o.defer, rules(o, &sim), script);
        assert!(!sim.crashed());
        let ops = sim.ops();
        sim.recover().unwrap();
        // Without a crash the whole script must have been acknowledged.
        assert!(
            model.maybe.is_empty(),
            "{name}: the clean run failed: {model:?}"
        );
        check(&dir, &model, o.sync, &format!("{name}: no crash"));
        ops
    };
    let mut tried = 0;
    let only: Option<u64> = std::env::var("SEGSTORE_CRASH_POINT")
        .ok()
        .and_then(|s| s.parse().ok());
    let mut at = only.unwrap_or(0);
    while at <= total && (only.is_none() || Some(at) == only) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, at);
        sim.set_torn_writes(at % 2 == 1);
        sim.set_reordering(at % 4 >= 2);
        sim.crash_at(at);
        let model = run(&dir, o.sync, o.defer, rules(o, &sim), script);
        let point = format!(
            "{name}: power lost at {}",
            sim.crash_point().unwrap_or_else(|| "the end".into())
        );
        let rec = sim
            .recover()
            .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
        // Every third point, the power goes again while the store recovers (open, the
        // journal's and the orphans' deletions, a new commit log file) or closes.
        let point = if at % 3 == 0 {
            let again = PowerLoss::new(&dir, at + 1);
            again.set_reordering(at % 2 == 0);
            again.crash_at((at / 3) % 48);
            if let Ok(s) = Store::open(&dir, config(o.sync, rules(o, &again), o.defer)) {
                let _ = s.close();
            }
            let point = format!(
                "{point}, then at {}",
                again.crash_point().unwrap_or_else(|| "none".into())
            );
            again
                .recover()
                .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
            point
        } else {
            point
        };
        if only.is_some() {
            eprintln!("{point}: {rec:?}; model {model:?}");
            walk(&dir, &mut |p| {
                eprintln!("  {}", p.display());
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                if name.ends_with("manifest") || name == "deletions.pending" || name == "positions"
                {
                    eprintln!("{}", std::fs::read_to_string(p).unwrap_or_default());
                }
            });
        }
        check(&dir, &model, o.sync, &point);
        tried += 1;
        at += stride();
    }
    eprintln!("{name}: {tried} crash points of {total} operations");
    tried
}

const GROUP: CommitLogSync = CommitLogSync::Group {
    window: Duration::from_micros(100),
};
// Never fires during the test: only explicit syncs, flushes and close make writes durable.
const PERIODIC: CommitLogSync = CommitLogSync::Periodic {
    period_ms: 3_600_000,
};

fn opts(sync: CommitLogSync) -> Opts {
    Opts {
        sync,
        defer: false,
        no_links: false,
    }
}

#[test]
fn batch_flush_and_compact() {
    let n = every_crash_point(
        "batch/flush+compact",
        opts(CommitLogSync::Batch),
        flush_and_compact,
    );
    assert!(n > 50);
}

#[test]
fn batch_range_deletes() {
    assert!(
        every_crash_point(
            "batch/range deletes",
            opts(CommitLogSync::Batch),
            range_deletes
        ) > 50
    );
}

#[test]
fn batch_ttl_expiry() {
    assert!(every_crash_point("batch/ttl", opts(CommitLogSync::Batch), ttl) > 50);
}

#[test]
fn periodic_ttl_expiry() {
    assert!(every_crash_point("periodic/ttl", opts(PERIODIC), ttl) > 50);
}

#[test]
fn periodic_range_deletes() {
    assert!(every_crash_point("periodic/range deletes", opts(PERIODIC), range_deletes) > 50);
}

#[test]
fn group_flush_and_compact() {
    assert!(every_crash_point("group/flush+compact", opts(GROUP), flush_and_compact) > 50);
}

#[test]
fn periodic_flush_and_compact() {
    assert!(every_crash_point("periodic/flush+compact", opts(PERIODIC), flush_and_compact) > 50);
}

#[test]
fn batch_leveled_compactions() {
    assert!(every_crash_point("batch/leveled", opts(CommitLogSync::Batch), leveled) > 50);
}

#[test]
fn batch_level_0_merges() {
    let o = opts(CommitLogSync::Batch);
    assert!(every_crash_point("batch/l0_merges", o, level_0_merges) > 20);
}

#[test]
fn batch_snapshots_clear_and_tag_reuse() {
    assert!(every_crash_point("batch/snapshots", opts(CommitLogSync::Batch), snapshots) > 50);
}

#[test]
fn periodic_snapshots_clear_and_tag_reuse() {
    assert!(every_crash_point("periodic/snapshots", opts(PERIODIC), snapshots) > 50);
}

#[test]
fn batch_drop_tables() {
    assert!(every_crash_point("batch/drop tables", opts(CommitLogSync::Batch), drop_tables) > 50);
}

/// A store dropped without close, the power lost right after: under `periodic` every
/// acknowledged write is there (the drop fsyncs the commit log, as a close would).
#[test]
fn periodic_writes_survive_a_drop_without_close() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    let mut model = Model {
        periodic: true,
        ..Model::default()
    };
    {
        let store =
            Store::open(&dir, config(PERIODIC, rules(opts(PERIODIC), &sim), false)).unwrap();
        let mut c = Ctx {
            store: &store,
            model: &mut model,
        };
        writes(&mut c, "a", 1, 6).unwrap();
        c.flush("a").unwrap();
        writes(&mut c, "a", 2, 6).unwrap();
        writes(&mut c, "b", 2, 3).unwrap();
        assert!(!c.model.unsynced.is_empty());
    }
    sim.crash_now();
    model.synced();
    sim.recover().unwrap();
    check(
        &dir,
        &model,
        PERIODIC,
        "periodic: power lost after a drop without close",
    );
}

#[test]
fn deferred_deletions_under_the_windows_rule() {
    let o = Opts {
        defer: true,
        ..opts(CommitLogSync::Batch)
    };
    assert!(every_crash_point("batch/deferred", o, deferred) > 50);
}

#[test]
fn snapshots_copied_where_hard_links_are_refused() {
    let o = Opts {
        no_links: true,
        ..opts(GROUP)
    };
    assert!(every_crash_point("group/copied snapshots", o, copied_snapshots) > 50);
}

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
        let sim = PowerLoss::new(&dir, at);
        sim.set_torn_writes(at % 2 == 1);
        sim.set_reordering(at % 4 >= 2);
        sim.crash_at(at);
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

/// Under `periodic`, a flush of one table while another holds unsynced, unflushed
/// writes, then power lost anywhere: the next run writes again and those writes must
/// survive its own clean restart. (The positions file once named sequence numbers whose
/// log records were not durable: after a lost tail the next run reused them, and replay
/// skipped the new records of the flushed table.)
#[test]
fn periodic_writes_after_a_recovery_are_replayed() {
    let o = opts(PERIODIC);
    let script: Script = |c| {
        writes(c, "a", 1, 3)?;
        writes(c, "b", 1, 3)?;
        c.flush("b")?;
        writes(c, "b", 2, 2)?;
        c.flush("b")
    };
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, 0);
        run(&dir, o.sync, false, rules(o, &sim), script);
        sim.ops()
    };
    for at in (0..=total).step_by(stride() as usize) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        let sim = PowerLoss::new(&dir, at);
        sim.set_torn_writes(at % 2 == 1);
        sim.crash_at(at);
        run(&dir, o.sync, false, rules(o, &sim), script);
        let point = format!(
            "periodic/write after recovery: power lost at {}",
            sim.crash_point().unwrap_or_else(|| "the end".into())
        );
        sim.recover().unwrap();
        {
            let store = Store::open(&dir, config(o.sync, FileRules::posix(), false))
                .unwrap_or_else(|e| panic!("{point}: {e}"));
            let t = store.table("b").unwrap();
            for i in 0..5 {
                t.put(format!("new{i}"), "x").unwrap();
            }
            store.tables().commit_log().sync().unwrap();
            drop(t);
            // No close: a close would flush, and the records must come back by replay.
            drop(store);
        }
        let store = Store::open(&dir, config(o.sync, FileRules::posix(), false)).unwrap();
        let t = store.table("b").unwrap();
        for i in 0..5 {
            assert_eq!(
                t.get(format!("new{i}")).unwrap().map(|v| v.to_vec()),
                Some(b"x".to_vec()),
                "{point}: a write of the run after recovery was skipped by replay"
            );
        }
        drop(t);
        store.close().unwrap();
    }
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
            let sim = PowerLoss::new(&dir, at);
            sim.set_torn_writes(at % 2 == 1);
            sim.set_reordering(at % 4 >= 2);
            sim.crash_at(at);
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

/// `new0` .. `new{n-1}` of `t` read `y`: writes synced after a recovery survived the
/// next power loss.
fn assert_new_writes(t: &Table, n: u32) {
    for i in 0..n {
        assert_eq!(
            t.get(format!("new{i}")).unwrap().as_deref(),
            Some(&b"y"[..]),
            "new{i}: a write synced after the recovery was lost"
        );
    }
}

/// Under `periodic`, a table's writes may still be unsynced when it is dropped. The
/// drop names the sequence numbers it covers in the positions file, so it makes them
/// durable in the log first: otherwise a power loss right after the drop loses them
/// from the log, the next run hands the same numbers to a new table of the name, and
/// replay skips that table's records as the dropped one's. Two power losses: after the
/// drop, and after the new table's writes were synced.
#[test]
fn a_table_written_after_a_drop_and_a_power_loss_keeps_its_synced_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    let cfg = || config(PERIODIC, rules(opts(PERIODIC), &sim), false);
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let a = store.table("a").unwrap();
        for i in 0..5u32 {
            a.put(format!("old{i}"), b"x").unwrap();
        }
        drop(a);
        store.drop_table("a").unwrap();
        sim.crash_now();
    }
    sim.recover().unwrap();
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let a = store.table("a").unwrap();
        assert_eq!(a.get("old0").unwrap(), None, "the drop held");
        for i in 0..3u32 {
            a.put(format!("new{i}"), b"y").unwrap();
        }
        store.tables().commit_log().sync().unwrap();
        drop(a);
        sim.crash_now();
    }
    sim.recover().unwrap();
    let store = Store::open(&dir, cfg()).unwrap();
    let a = store.table("a").unwrap();
    assert_new_writes(&a, 3);
    assert_eq!(a.get("old0").unwrap(), None);
    drop(a);
    store.close().unwrap();
}

/// On a poisoned commit log (a failed fsync) a flush still publishes its segment, but
/// the checkpoint after it must not write positions naming sequence numbers the log
/// never made durable: its log sync fails first. Otherwise (here: table `b` holds an
/// older unflushed write, so `replay_from` stays low) a power loss drops the log tail,
/// the next run hands those numbers out again, and replay skips `a`'s new records as
/// flushed. Two power losses: after the poisoned flush, and after `a`'s new writes
/// were synced.
#[test]
fn a_flush_on_a_poisoned_log_writes_no_positions_ahead_of_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let sim = PowerLoss::new(&dir, 0);
    let rules = FileRules::posix()
        .with_faults(Faults::new())
        .with_power_loss(sim.clone());
    let cfg = || config(PERIODIC, rules.clone(), false);
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let (a, b) = (store.table("a").unwrap(), store.table("b").unwrap());
        a.put("a1", b"x").unwrap();
        b.put("b1", b"x").unwrap();
        a.put("a2", b"x").unwrap();
        a.put("a3", b"x").unwrap();
        rules
            .faults()
            .unwrap()
            .add(FaultKind::Fsync, "commitlog-", 0, 1);
        assert!(
            store.tables().commit_log().sync().is_err(),
            "the injected fsync fault"
        );
        assert!(
            matches!(a.flush(), Err(segstore::Error::Poisoned(_))),
            "a flush on a poisoned log publishes, then reports the poison"
        );
        sim.crash_now();
        drop((a, b));
    }
    sim.recover().unwrap();
    {
        let store = Store::open(&dir, cfg()).unwrap();
        let a = store.table("a").unwrap();
        for i in 0..4u32 {
            a.put(format!("new{i}"), b"y").unwrap();
        }
        store.tables().commit_log().sync().unwrap();
        sim.crash_now();
        drop(a);
    }
    sim.recover().unwrap();
    let store = Store::open(&dir, cfg()).unwrap();
    let a = store.table("a").unwrap();
    assert_new_writes(&a, 4);
    drop(a);
    store.close().unwrap();
}
