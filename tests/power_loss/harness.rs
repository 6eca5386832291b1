//! The crash-point harness: a script run with the power lost at one operation, the
//! checks of the reopened store against the model, and every crash point of a script.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use segstore::io::PowerLoss;
use segstore::{
    CommitLogSync, CompactionStrategy, Config, DeletePolicy, FileRules, Store, TableConfig,
};

use crate::common;
use crate::model::{Ctx, Key, Model, Value};
use crate::scripts::{Script, TTL_CHECK};

pub(crate) fn config(sync: CommitLogSync, rules: FileRules, defer: bool) -> Config {
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

pub(crate) fn run(
    dir: &Path,
    sync: CommitLogSync,
    defer: bool,
    rules: FileRules,
    script: Script,
) -> Model {
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
pub(crate) fn check(dir: &Path, model: &Model, sync: CommitLogSync, point: &str) {
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

pub(crate) fn stride() -> u64 {
    std::env::var("SEGSTORE_CRASH_POINTS_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

#[derive(Clone, Copy)]
pub(crate) struct Opts {
    pub(crate) sync: CommitLogSync,
    /// `DeferWhileMapped` under the Windows emulation.
    pub(crate) defer: bool,
    /// Hard links refused: snapshots copy.
    pub(crate) no_links: bool,
}

pub(crate) fn rules(o: Opts, sim: &PowerLoss) -> FileRules {
    common::power_loss_rules(o.defer, o.no_links, sim)
}

/// Run `script` once to count its operations, then crash it at every one of them.
/// Returns the number of crash points tried.
pub(crate) fn every_crash_point(name: &str, o: Opts, script: Script) -> u64 {
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
        let sim = PowerLoss::crashing_at(&dir, at);
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

pub(crate) const GROUP: CommitLogSync = CommitLogSync::Group {
    window: Duration::from_micros(100),
};
// Never fires during the test: only explicit syncs, flushes and close make writes durable.
pub(crate) const PERIODIC: CommitLogSync = CommitLogSync::Periodic {
    period_ms: 3_600_000,
};

pub(crate) fn opts(sync: CommitLogSync) -> Opts {
    Opts {
        sync,
        defer: false,
        no_links: false,
    }
}
