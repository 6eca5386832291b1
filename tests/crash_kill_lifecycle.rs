//! Kill tests at the segment-lifecycle level (invariants 2, 3, 4, 5): a child process
//! runs flushes, compactions, snapshot creates and clears against a store and reports
//! each acknowledged step on stdout; the parent kills it with SIGKILL at a random moment,
//! reopens the store and checks: every acknowledged flush is readable with at least its
//! timestamp, every acknowledged snapshot is whole (or absent only if its clear was
//! acknowledged or started), no snapshot is partial, no orphan or temp file remains, and
//! no deletion is left pending.
//!
//! CI runs `SEGSTORE_KILL_POINTS` (default 200) kill points; set it higher to soak.
#![cfg(unix)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use segstore::lifecycle::Manifest;
use segstore::segment::{Component, SegmentName};
use segstore::{DiskAccessMode, FileRules, Store};

fn cfg(mode: DiskAccessMode) -> segstore::Config {
    common::test_config(mode, FileRules::posix())
}

/// The child's workload. Runs only when spawned by the parent (ignored otherwise).
#[test]
#[ignore = "spawned by kill_points_leave_a_consistent_store"]
fn child_workload() {
    let Some((dir, seed)) = common::kill::child_dir_and_seed() else {
        return;
    };
    let mode = ["mmap", "standard", "auto"][seed as usize % 3]
        .parse()
        .unwrap();
    // End libtest's "test child_workload ... " line so each report starts a line, and
    // say the workload began (kill points counted from here land in the open).
    println!("\nSTART");
    let store = Store::open(&dir, cfg(mode)).unwrap();
    let set = store.segments("t").unwrap();
    let mut ts = set
        .view()
        .segments
        .iter()
        .map(|h| h.stats().max_ts)
        .max()
        .unwrap_or(0);
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..10_000 {
        match rnd() % 10 {
            0..=5 => {
                ts += 1;
                let mut w = set.writer().unwrap();
                let name = w.name().clone();
                let mut keys = BTreeSet::new();
                for _ in 0..(1 + rnd() % 20) {
                    keys.insert(rnd() % 200);
                }
                for k in &keys {
                    w.add(
                        format!("k{k:04}").as_bytes(),
                        format!("{ts}").as_bytes(),
                        ts,
                        false,
                    )
                    .unwrap();
                }
                w.finish().unwrap();
                set.add(&[name]).unwrap();
                let ks: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                println!("FLUSH {ts} {}", ks.join(","));
            }
            6 | 7 => {
                let v = set.view();
                if v.segments.len() >= 2 {
                    let mut merged: BTreeMap<Vec<u8>, (Vec<u8>, u64)> = BTreeMap::new();
                    for h in &v.segments {
                        for e in h.iter().unwrap() {
                            let e = e.unwrap();
                            if merged.get(&e.key).is_none_or(|(_, t)| e.ts > *t) {
                                merged.insert(e.key, (e.value, e.ts));
                            }
                        }
                    }
                    let old: Vec<u64> = v.segments.iter().map(|h| h.name().id).collect();
                    drop(v);
                    let mut w = set.writer().unwrap();
                    let name = w.name().clone();
                    for (k, (val, t)) in &merged {
                        w.add(k, val, *t, false).unwrap();
                    }
                    w.finish().unwrap();
                    set.replace(&old, &[name]).unwrap();
                    println!("COMPACT");
                }
            }
            8 => {
                let tag = format!("s{}", rnd() % 3);
                println!("SNAPSHOT_START {tag}");
                if store.snapshot(&tag, None).is_ok() {
                    println!("SNAPSHOT {tag} {ts}");
                }
            }
            _ => {
                let tag = format!("s{}", rnd() % 3);
                println!("CLEAR_START {tag}");
                if store.clear_snapshot(&tag).is_ok() {
                    println!("CLEAR {tag}");
                }
            }
        }
    }
}

#[derive(Default)]
struct Model {
    /// key -> newest acknowledged timestamp.
    keys: BTreeMap<String, u64>,
    /// Snapshots acknowledged and not (started to be) cleared: tag -> max ts at creation.
    snapshots: BTreeMap<String, u64>,
    /// Tags whose state is uncertain (create or clear in flight at the kill).
    uncertain: BTreeSet<String>,
}

fn check(dir: &Path, model: &Model) {
    let store = Store::open(dir, cfg(DiskAccessMode::Mmap)).unwrap();
    let set = store.segments("t").unwrap();
    for (k, ts) in &model.keys {
        let view = set.view();
        let best = view
            .segments
            .iter()
            .filter_map(|h| h.get_with(k.as_bytes(), |r| r.ts).unwrap())
            .max();
        assert!(
            best.is_some_and(|b| b >= *ts),
            "key {k}: acknowledged ts {ts}, found {best:?}"
        );
    }
    // Snapshots: whole or absent; acknowledged ones present.
    let listed: BTreeSet<String> = store
        .list_snapshots()
        .unwrap()
        .into_iter()
        .map(|s| s.tag)
        .collect();
    for tag in model.snapshots.keys() {
        assert!(
            listed.contains(tag) || model.uncertain.contains(tag),
            "acknowledged snapshot {tag} lost"
        );
    }
    for tag in &listed {
        let v = store.open_snapshot(tag).unwrap();
        for hs in v.tables.values() {
            for h in hs {
                h.verify().unwrap();
            }
        }
    }
    assert!(
        store.deleter().pending().is_empty(),
        "{:?}; snapshot dirs: {:?}",
        store.deleter().pending(),
        std::fs::read_dir(store.dir().join("snapshots"))
            .map(|rd| rd
                .map(|e| {
                    let p = e.unwrap().path();
                    (
                        p.clone(),
                        std::fs::read_dir(&p).map(|r| r.count()).unwrap_or(0),
                        common::files(&p),
                    )
                })
                .collect::<Vec<_>>())
            .ok()
    );
    // Exactly the live files.
    let m = Manifest::load(&store.dir().join("t.manifest")).unwrap();
    let mut want: BTreeSet<String> = [
        "LOCK",
        "t.manifest",
        "deletions.pending",
        "snapshots",
        "commitlog",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for id in &m.segments {
        for c in Component::ALL {
            want.insert(SegmentName::new("t", *id).unwrap().file_name(c));
        }
    }
    let have: BTreeSet<String> = common::files(store.dir()).into_iter().collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(extra.is_empty(), "orphans left: {extra:?}");
    if store.dir().join("snapshots").exists() {
        let snaps: BTreeSet<String> = common::files(&store.dir().join("snapshots"))
            .into_iter()
            .collect();
        assert_eq!(snaps, listed, "partial snapshot directories left");
    }
    drop(set);
    assert!(store.close().unwrap().is_clean());
}

#[test]
fn kill_points_leave_a_consistent_store() {
    let points: u64 = std::env::var("SEGSTORE_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let exe = std::env::current_exe().unwrap();
    let mut model = Model::default();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let started = Instant::now();
    let mut acked_total = 0usize;
    let (mut acked_snapshots, mut acked_clears) = (0usize, 0usize);
    for point in 0..points {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut child = Command::new(&exe);
        child
            .args([
                "--ignored",
                "--exact",
                "child_workload",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SEGSTORE_CHILD_DIR", &dir)
            .env("SEGSTORE_CHILD_SEED", (rng % 1_000_000).to_string());
        // The delay counts from an event the child reported, never from the spawn (a
        // loaded machine may take longer to start a process than any fixed delay):
        // most kill points from its first acknowledged flush, every fourth from its
        // start, so some land in the open and its recovery.
        let anchor: fn(&str) -> bool = if point % 4 == 3 {
            |l| l == "START"
        } else {
            |l| l.starts_with("FLUSH ")
        };
        let delay = Duration::from_micros(rng % 60_000);
        let lines = common::kill::run_and_kill(child, anchor, delay);
        model.uncertain.clear();
        for l in &lines {
            let mut w = l.split(' ');
            match w.next() {
                Some("FLUSH") => {
                    acked_total += 1;
                    let ts: u64 = w.next().unwrap().parse().unwrap();
                    for k in w.next().unwrap().split(',') {
                        model
                            .keys
                            .insert(format!("k{:04}", k.parse::<u64>().unwrap()), ts);
                    }
                }
                Some("SNAPSHOT_START") | Some("CLEAR_START") => {
                    model.uncertain.insert(w.next().unwrap().to_string());
                }
                Some("SNAPSHOT") => {
                    acked_snapshots += 1;
                    let tag = w.next().unwrap().to_string();
                    model.uncertain.remove(&tag);
                    model.snapshots.insert(tag, 0);
                }
                Some("CLEAR") => {
                    acked_clears += 1;
                    let tag = w.next().unwrap().to_string();
                    model.uncertain.remove(&tag);
                    model.snapshots.remove(&tag);
                }
                _ => {}
            }
        }
        // A clear that started may have finished: the tag is no longer promised.
        for t in model.uncertain.clone() {
            if lines.iter().any(|l| l == &format!("CLEAR_START {t}")) {
                model.snapshots.remove(&t);
            }
        }
        if dir.exists() {
            let journal =
                std::fs::read_to_string(dir.join("deletions.pending")).unwrap_or_default();
            let listing = format!("{:?}", walk(&dir));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&dir, &model)));
            if r.is_err() {
                panic!("kill point {point}: last round printed {lines:#?}\njournal before reopen:\n{journal}\nfiles before reopen: {listing}");
            }
        }
        let _ = point;
    }
    eprintln!(
        "{points} kill points, {acked_total} acknowledged flushes, {acked_snapshots} snapshots, {acked_clears} clears, {} keys checked, {:.1?}",
        model.keys.len(),
        started.elapsed()
    );
    assert!(
        acked_total > 0,
        "the child never got to acknowledge anything"
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.strip_prefix(dir).unwrap_or(&p).display().to_string());
        }
        if p.is_dir() {
            out.push(format!("{}/", p.display()));
        }
    }
    out.sort();
    out
}
