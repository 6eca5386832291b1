//! Power loss at every I/O operation of append, truncate, purge, apply, snapshot build
//! and snapshot install, with segstore's simulator (`segstore::io::PowerLoss`) behind
//! every file operation of both stores and of this crate's own boundary.
//!
//! Each scenario sets up a node with plain rules, reopens it under the simulator, runs
//! its operations once to count their I/O operations, then once per operation with the
//! power lost there (torn writes and reordered name operations every other run), brings
//! the power back, reopens with plain rules and checks what was promised:
//! - a flushed append and a saved vote are there; the log is contiguous;
//! - truncate and purge are whole or absent, and certainly there once a later append
//!   was reported flushed;
//! - the state machine is at some `last_applied` with exactly the writes up to it, and
//!   at or past a snapshot whose build returned;
//! - an install leaves the old state machine and snapshot, or exactly the new ones
//!   (certainly the new ones once it returned), and nothing else in the directory.
//!
//! `SEGSTORE_CRASH_POINTS_STRIDE` (default 1) checks every Nth point.
#![cfg(unix)]

mod common;

use std::future::Future;
use std::path::Path;

use common::*;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{RaftLogReader, RaftSnapshotBuilder, Vote};
use segstore::io::PowerLoss;
use segstore::{Config, FileRules};

fn sim_config(sim: &PowerLoss) -> Config {
    Config::builder()
        .file_rules(FileRules::posix().with_power_loss(sim.clone()))
        .build()
        .unwrap()
}

fn stride() -> u64 {
    std::env::var("SEGSTORE_CRASH_POINTS_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Run `op` on a node set up by `setup`, at every crash point, and `check` each.
fn crash_points<O, F>(
    setup: impl Fn(&Path),
    op: impl Fn(Log, Sm) -> F,
    check: impl Fn(&Path, &O, u64),
) where
    F: Future<Output = O>,
{
    let total = {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path());
        let sim = PowerLoss::new(dir.path(), 1);
        let (log, sm) = open(dir.path(), sim_config(&sim)).unwrap();
        let base = sim.ops();
        let outcome = rt().block_on(op(log, sm));
        let total = sim.ops() - base;
        check(dir.path(), &outcome, u64::MAX);
        total
    };
    assert!(total > 0);
    eprintln!("{total} crash points");
    for k in (0..total).step_by(stride() as usize) {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path());
        let sim = PowerLoss::new(dir.path(), k);
        sim.set_torn_writes(k % 2 == 1);
        sim.set_reordering((k / 2) % 2 == 1);
        let (log, sm) = open(dir.path(), sim_config(&sim)).unwrap();
        sim.crash_at(sim.ops() + k);
        let outcome = rt().block_on(op(log, sm));
        sim.recover().unwrap();
        check(dir.path(), &outcome, k);
    }
}

/// Reopen with plain rules.
fn reopen(dir: &Path) -> (Log, Sm) {
    open(dir, Config::default()).expect("the node opens after power loss")
}

async fn log_entries(log: &mut Log) -> Vec<(u64, u64)> {
    let es = log.try_get_log_entries(..).await.unwrap();
    es.iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

fn contiguous(es: &[(u64, u64)]) {
    for w in es.windows(2) {
        assert_eq!(w[0].1 + 1, w[1].1, "log has a gap: {es:?}");
    }
}

fn setup_log(n: u64) -> impl Fn(&Path) {
    move |dir| {
        let (mut log, sm) = open(dir, Config::default()).unwrap();
        if n > 0 {
            rt().block_on(append(&mut log, entries(1, 1..=n))).unwrap();
        }
        log.close().unwrap();
        sm.close().unwrap();
    }
}

#[test]
fn power_lost_during_appends_and_votes_keeps_what_was_flushed() {
    crash_points(
        setup_log(3),
        |mut log, _sm| async move {
            let (mut flushed, mut voted) = (3, 0);
            for start in (4..=16).step_by(3) {
                if append(&mut log, entries(1, start..=start + 2))
                    .await
                    .is_err()
                {
                    break;
                }
                flushed = start + 2;
                if log.save_vote(&Vote::new(start, 1)).await.is_err() {
                    break;
                }
                voted = start;
            }
            (flushed, voted)
        },
        |dir, &(flushed, voted), k| {
            let (mut log, _sm) = reopen(dir);
            rt().block_on(async {
                let es = log_entries(&mut log).await;
                contiguous(&es);
                assert_eq!(es.first().map(|e| e.1), Some(1), "point {k}");
                assert!(
                    es.len() as u64 >= flushed,
                    "point {k}: flushed {flushed}, found {es:?}"
                );
                let vote = log.read_vote().await.unwrap();
                assert!(vote.map_or(0, |v| v.leader_id.term) >= voted, "point {k}");
            });
        },
    );
}

#[test]
fn power_lost_during_a_truncate_leaves_it_whole_or_absent() {
    crash_points(
        setup_log(20),
        |mut log, _sm| async move {
            let truncated = log.truncate(log_id(1, 11)).await.is_ok();
            let flushed = truncated && append(&mut log, entries(2, 11..=15)).await.is_ok();
            (truncated, flushed)
        },
        |dir, &(_, flushed), k| {
            let (mut log, _sm) = reopen(dir);
            let es = rt().block_on(log_entries(&mut log));
            contiguous(&es);
            assert!(es[..10].iter().all(|e| e.0 == 1), "point {k}: {es:?}");
            let tail = &es[10..];
            let old = tail.iter().all(|e| e.0 == 1) && (tail.is_empty() || tail.len() == 10);
            let new = tail.iter().all(|e| e.0 == 2) && tail.len() <= 5;
            assert!(old || new, "point {k}: a truncate half done: {es:?}");
            if flushed {
                assert_eq!(
                    tail.len(),
                    5,
                    "point {k}: flushed after the truncate: {es:?}"
                );
                assert!(tail.iter().all(|e| e.0 == 2), "point {k}: {es:?}");
            }
        },
    );
}

#[test]
fn power_lost_during_a_purge_leaves_it_whole_or_absent() {
    crash_points(
        setup_log(30),
        |mut log, _sm| async move {
            let purged = log.purge(log_id(1, 10)).await.is_ok();
            purged && append(&mut log, entries(1, 31..=32)).await.is_ok()
        },
        |dir, &flushed, k| {
            let (mut log, _sm) = reopen(dir);
            rt().block_on(async {
                let state = log.get_log_state().await.unwrap();
                let es = log_entries(&mut log).await;
                contiguous(&es);
                let purged = state.last_purged_log_id.map(|l| l.index);
                match purged {
                    None => assert_eq!(es[0].1, 1, "point {k}"),
                    Some(p) => {
                        assert_eq!(p, 10, "point {k}");
                        assert_eq!(es[0].1, 11, "point {k}: purge half done: {es:?}");
                    }
                }
                if flushed {
                    assert_eq!(purged, Some(10), "point {k}: flushed after the purge");
                    assert_eq!(es.last().unwrap().1, 32, "point {k}");
                }
                assert_eq!(state.last_log_id.map(|l| l.index), es.last().map(|e| e.1));
            });
        },
    );
}

/// Applied state and the kv rows agree: exactly the writes up to `last_applied`.
async fn check_applied(sm: &mut Sm, k: u64) -> u64 {
    let (applied, rows) = sm_state(sm).await;
    let applied = applied.unwrap_or(0);
    assert_eq!(
        rows,
        model(applied),
        "point {k}: rows disagree with last_applied {applied}"
    );
    applied
}

#[test]
fn power_lost_while_applying_and_building_a_snapshot_keeps_the_applied_state_whole() {
    crash_points(
        |_: &Path| {},
        |_log, mut sm| async move {
            let mut built = None;
            for (from, to) in [(1, 10), (11, 20)] {
                if sm.apply(entries(1, from..=to)).await.is_err() {
                    return built;
                }
            }
            if let Ok(s) = sm.get_snapshot_builder().await.build_snapshot().await {
                built = Some(s.meta.last_log_id.unwrap().index);
            }
            let _ = sm.apply(entries(1, 21..=25)).await;
            built
        },
        |dir, &built, k| {
            let (_log, mut sm) = reopen(dir);
            rt().block_on(async {
                let applied = check_applied(&mut sm, k).await;
                assert!([0, 10, 20, 25].contains(&applied), "point {k}: {applied}");
                let snap = sm.get_current_snapshot().await.unwrap();
                let at = snap.as_ref().map(|s| s.meta.last_log_id.unwrap().index);
                if let Some(b) = built {
                    assert_eq!(at, Some(b), "point {k}: a built snapshot is current");
                    assert!(
                        applied >= b,
                        "point {k}: applied {applied} behind snapshot {b}"
                    );
                }
                if let Some(s) = snap {
                    assert_eq!(
                        installed_copy(s).await,
                        (at, model(at.unwrap())),
                        "point {k}"
                    );
                }
            });
        },
    );
}

/// Install a snapshot into a fresh state machine and read it back.
async fn installed_copy(
    s: openraft::Snapshot<segstore_raft::kv::TypeConfig>,
) -> (Option<u64>, Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut sm) = open(dir.path(), Config::default()).unwrap();
    sm.install_snapshot(&s.meta, s.snapshot).await.unwrap();
    sm_state(&mut sm).await
}

#[test]
fn power_lost_during_a_snapshot_install_leaves_the_old_state_or_exactly_the_new() {
    let leader = tempfile::tempdir().unwrap();
    let (_, mut sm) = open(leader.path(), Config::default()).unwrap();
    let snap = rt().block_on(async {
        sm.apply(entries(1, 1..=50)).await.unwrap();
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap()
    });
    let meta = snap.meta.clone();
    sm.close().unwrap();
    drop(sm);
    crash_points(
        |dir: &Path| {
            let (_, mut sm) = open(dir, Config::default()).unwrap();
            rt().block_on(async {
                sm.apply(entries(1, 1..=30)).await.unwrap();
                sm.get_snapshot_builder()
                    .await
                    .build_snapshot()
                    .await
                    .unwrap();
            });
            sm.close().unwrap();
        },
        |_log, mut sm| {
            let meta = meta.clone();
            let leader = leader.path().to_path_buf();
            async move {
                // A fresh stream of the leader's current snapshot each run.
                let (_, mut l) = open(&leader, Config::default()).unwrap();
                let s = l.get_current_snapshot().await.unwrap().unwrap();
                sm.install_snapshot(&meta, s.snapshot).await.is_ok()
            }
        },
        |dir, &installed, k| {
            let (_log, mut sm) = reopen(dir);
            rt().block_on(async {
                let applied = check_applied(&mut sm, k).await;
                let cur = sm.get_current_snapshot().await.unwrap().unwrap();
                match applied {
                    30 => assert_eq!(cur.meta.last_log_id, Some(log_id(1, 30)), "point {k}"),
                    50 => assert_eq!(cur.meta, snap.meta, "point {k}"),
                    a => panic!(
                        "point {k}: last_applied {a}, neither the old state nor the snapshot"
                    ),
                }
                if installed {
                    assert_eq!(applied, 50, "point {k}: the install returned");
                }
            });
            let left = names(&dir.join("sm"));
            assert_eq!(left.len(), 3, "point {k}: {left:?}");
        },
    );
}
