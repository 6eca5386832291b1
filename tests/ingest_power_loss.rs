//! Power loss at every I/O operation of a bulk ingest across two tables
//! (ARCHITECTURE.md invariant 12; the simulator as in `tests/power_loss/`).
//!
//! The script writes to tables `a` and `b` (a flush of `a` in between), writes one
//! segment per table with `SegmentWriter` outside the store (timestamps from
//! `Store::now`), ingests both in one `Store::ingest`, then writes once more and
//! closes. It runs once to count its operations, then once per operation with the power
//! lost there (torn writes and reordered directory changes on alternate runs, and every
//! third point a second power loss during the recovery that follows). After reopening:
//! - the ingest is all or nothing: both tables hold every ingested cell, or neither
//!   holds any; all of it if `ingest` returned `Ok`; none if it was never attempted;
//! - every write acknowledged before the ingest reads as written (or as the ingested
//!   cell of its key, which is newer, when the ingest is there);
//! - every segment file is named by a manifest or waiting for the deleter, no temp file
//!   is left, the ingest journal is empty, and the store closes clean.
//!
//! Variants: hard links (the default), copies (links refused), and the Windows rules
//! (deferred deletion, links).
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // inspects the directory after recovery

mod common;

use std::path::{Path, PathBuf};

use segstore::io::PowerLoss;
use segstore::lifecycle::ingest_journal::IngestJournal;
use segstore::segment::{Component, SegmentName, SegmentWriter};
use segstore::{CommitLogSync, Config, DeletePolicy, FileRules, SegmentOptions, Store};

const KEYS: usize = 6;
/// Keys written (and acknowledged) before the ingest: `k0`..`k{PRE-1}`.
const PRE: usize = 3;

/// What the script was told.
#[derive(Debug, Default)]
struct Outcome {
    /// Puts acknowledged before the ingest, per table (`k0`.. in order).
    acked: [usize; 2],
    ingest_attempted: bool,
    ingest_ok: bool,
}

#[derive(Clone, Copy)]
struct Opts {
    no_links: bool,
    windows: bool,
}

fn config(rules: FileRules, o: Opts) -> Config {
    let mut c = Config::default();
    c.commitlog.sync = CommitLogSync::Batch;
    c.table.background_compaction = false;
    c.track_leaks = true;
    c.segment.index_block_size = 64;
    if o.windows {
        c.delete_policy = DeletePolicy::DeferWhileMapped;
    }
    c.file_rules = rules;
    c
}

fn rules(o: Opts, sim: &PowerLoss) -> FileRules {
    common::power_loss_rules(o.windows, o.no_links, sim)
}

/// One segment of `rows` for table `t` in `load` (plain rules: the caller's own files,
/// written and fsynced outside the store).
fn source(load: &Path, id: u64, t: &str, ts: u64) -> segstore::Result<PathBuf> {
    let name = SegmentName::new("load", id)?;
    let mut w = SegmentWriter::create(
        load,
        name.clone(),
        &SegmentOptions::default(),
        &FileRules::posix(),
    )?;
    for i in 0..KEYS {
        w.add(
            format!("k{i}").as_bytes(),
            format!("ingested-{t}").as_bytes(),
            ts,
            false,
        )?;
    }
    w.finish()?;
    Ok(name.path(load, Component::Meta))
}

fn script(store: &Store, load: &Path, out: &mut Outcome) -> segstore::Result<()> {
    let (a, b) = (store.table("a")?, store.table("b")?);
    for i in 0..PRE {
        a.put(format!("k{i}"), "pre")?;
        out.acked[0] += 1;
        if i == 1 {
            a.flush()?;
        }
        b.put(format!("k{i}"), "pre")?;
        out.acked[1] += 1;
    }
    let ts = store.now()?;
    let pa = source(load, 1, "a", ts)?;
    let pb = source(load, 2, "b", ts)?;
    out.ingest_attempted = true;
    store.ingest(&[(&a, vec![pa]), (&b, vec![pb])])?;
    out.ingest_ok = true;
    b.put("after", "x")?;
    drop((a, b));
    store.close().map(drop)
}

fn run(dir: &Path, load: &Path, rules: FileRules, o: Opts) -> Outcome {
    std::fs::create_dir_all(load).unwrap();
    let mut out = Outcome::default();
    if let Ok(store) = Store::open(dir, config(rules, o)) {
        let _ = script(&store, load, &mut out);
    }
    out
}

/// What the store holds of the ingest, per table, checking the writes before it.
fn ingested(store: &Store, out: &Outcome, point: &str) -> [usize; 2] {
    let mut ingested = [0; 2];
    for (ti, t) in ["a", "b"].iter().enumerate() {
        let Ok(table) = store.table(t) else {
            assert_eq!(out.acked[ti], 0, "{point}: table {t} lost");
            continue;
        };
        let want = format!("ingested-{t}");
        for i in 0..KEYS {
            let got = table.get(format!("k{i}")).unwrap().map(|v| v.to_vec());
            if got.as_deref() == Some(want.as_bytes()) {
                ingested[ti] += 1;
            } else if i < out.acked[ti] {
                assert_eq!(
                    got.as_deref(),
                    Some(&b"pre"[..]),
                    "{point}: {t}/k{i}, acknowledged before the ingest"
                );
            }
        }
    }
    let all = ingested == [KEYS, KEYS];
    assert!(
        all || ingested == [0, 0],
        "{point}: part of the ingest is visible: {ingested:?} of {KEYS} per table"
    );
    assert!(!out.ingest_ok || all, "{point}: acknowledged ingest lost");
    assert!(
        out.ingest_attempted || !all,
        "{point}: ingest out of nowhere"
    );
    ingested
}

fn check(dir: &Path, out: &Outcome, o: Opts, point: &str) {
    // A read-only open first: it writes nothing, and sees a committed ingest whole
    // (from the journal) or none of it.
    // (A crash before the store's lock file was made leaves no store to open.)
    let seen_ro = dir.join("LOCK").exists().then(|| {
        let ro = Store::open_read_only(dir, config(FileRules::posix(), o))
            .unwrap_or_else(|e| panic!("{point}: the store does not open read-only: {e}"));
        ingested(&ro, out, &format!("{point} (read-only)"))
    });
    let store = Store::open(dir, config(FileRules::posix(), o))
        .unwrap_or_else(|e| panic!("{point}: the store does not open: {e}"));
    let seen = ingested(&store, out, point);
    if let Some(ro) = seen_ro {
        assert_eq!(ro, seen, "{point}: read-only and read-write opens differ");
    }
    let mut live = Vec::new();
    for t in store.table_names() {
        for id in store.segments(&t).unwrap().live_ids() {
            live.push(format!("{t}-{id}-"));
        }
    }
    for name in common::files(store.dir()) {
        let path = store.dir().join(&name);
        let pending = store.deleter().is_pending(&path);
        if name.ends_with(".db") {
            assert!(
                live.iter().any(|p| name.starts_with(p.as_str())) || pending,
                "{point}: orphan segment file {name} left (live: {live:?})"
            );
        }
        assert!(
            !name.ends_with(".tmp") || pending,
            "{point}: temp file {name} left"
        );
    }
    let journal = IngestJournal::load(store.dir()).unwrap();
    assert!(
        journal.as_ref().is_none_or(IngestJournal::is_empty),
        "{point}: the ingest journal still names {journal:?}"
    );
    let report = store.close().unwrap();
    assert!(report.is_clean(), "{point}: close not clean: {report:?}");
}

fn every_crash_point(name: &str, o: Opts) {
    let total = {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, load) = (tmp.path().join("store"), tmp.path().join("load"));
        let sim = PowerLoss::new(&dir, 0);
        let out = run(&dir, &load, rules(o, &sim), o);
        assert!(out.ingest_ok, "{name}: the clean run failed: {out:?}");
        let ops = sim.ops();
        sim.recover().unwrap();
        check(&dir, &out, o, &format!("{name}: no crash"));
        ops
    };
    let stride: u64 = std::env::var("SEGSTORE_CRASH_POINTS_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let mut tried = 0;
    for at in (0..=total).step_by(stride as usize) {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, load) = (tmp.path().join("store"), tmp.path().join("load"));
        let sim = PowerLoss::crashing_at(&dir, at);
        let out = run(&dir, &load, rules(o, &sim), o);
        let mut point = format!(
            "{name}: power lost at {}",
            sim.crash_point().unwrap_or_else(|| "the end".into())
        );
        sim.recover()
            .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
        if at % 3 == 0 {
            // The power goes again while the store recovers (the ingest's roll-forward,
            // the orphans' deletions) or closes.
            let again = PowerLoss::new(&dir, at + 1);
            again.set_reordering(at % 2 == 0);
            again.crash_at((at / 3) % 24);
            if let Ok(s) = Store::open(&dir, config(rules(o, &again), o)) {
                let _ = s.close();
            }
            point = format!(
                "{point}, then at {}",
                again.crash_point().unwrap_or_else(|| "none".into())
            );
            again
                .recover()
                .unwrap_or_else(|e| panic!("{point}: recovery: {e}"));
        }
        check(&dir, &out, o, &point);
        check(&dir, &out, o, &format!("{point} (second reopen)"));
        tried += 1;
    }
    eprintln!("{name}: {tried} crash points of {total} operations");
    assert!(tried > 20, "{name}: only {tried} crash points");
}

#[test]
fn an_ingest_of_two_tables_is_whole_or_absent_after_power_loss() {
    every_crash_point(
        "ingest/links",
        Opts {
            no_links: false,
            windows: false,
        },
    );
}

#[test]
fn an_ingest_that_copies_is_whole_or_absent_after_power_loss() {
    every_crash_point(
        "ingest/copies",
        Opts {
            no_links: true,
            windows: false,
        },
    );
}

#[test]
fn an_ingest_under_the_windows_rules_is_whole_or_absent_after_power_loss() {
    every_crash_point(
        "ingest/windows rules",
        Opts {
            no_links: false,
            windows: true,
        },
    );
}
