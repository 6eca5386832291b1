//! Crashes of the process: a reopen after a drop without close, and a child process
//! SIGKILLed at random moments while it votes, appends, applies, truncates, builds
//! snapshots and purges, as a one-node Raft would.
//!
//! Checked after every kill: the node opens; the log is contiguous above its last
//! purged index; every entry the child saw reported flushed is there with its term
//! (unless a truncate of it was begun since); the vote is at least the last one saved;
//! the state machine is at or past the last apply that returned, with exactly the
//! writes up to its `last_applied`, which is at or past the last purged index; the
//! current snapshot is at or past the last one built. A SIGKILL leaves the page cache,
//! so under the default `periodic` sync all of it survives (power loss is
//! `tests/raft_power_loss.rs`).
//!
//! `SEGSTORE_KILL_POINTS` (default 30) sets the number of kill points.
#![cfg(unix)]

mod common;

#[path = "../../tests/common/kill.rs"]
mod kill;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{RaftLogReader, RaftSnapshotBuilder, Vote};
use segstore::Config;

#[test]
fn a_reopen_after_a_drop_without_close_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (mut log, mut sm) = open(dir.path(), Config::default()).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        append(&mut log, entries(1, 1..=30)).await.unwrap();
        sm.apply(entries(1, 1..=20)).await.unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        log.purge(log_id(1, 15)).await.unwrap();
        log.truncate(log_id(1, 28)).await.unwrap();
        append(&mut log, entries(2, 28..=29)).await.unwrap();
        sm.apply(entries(1, 21..=25)).await.unwrap();
        drop((log, sm)); // no close

        let (mut log, mut sm) = open(dir.path(), Config::default()).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
        let es: Vec<(u64, u64)> = log
            .try_get_log_entries(..)
            .await
            .unwrap()
            .iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect();
        let want: Vec<(u64, u64)> = (16..=27)
            .map(|i| (1, i))
            .chain([(2, 28), (2, 29)])
            .collect();
        assert_eq!(es, want);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 15)));
        assert_eq!(
            state.last_log_id,
            Some(openraft::LogId::new(
                openraft::CommittedLeaderId::new(2, 1),
                29
            ))
        );
        assert_eq!(sm_state(&mut sm).await, (Some(25), model(25)));
        assert_eq!(
            sm.get_current_snapshot().await.unwrap().unwrap().meta,
            snap.meta
        );
    });
}

/// The child's one-node Raft loop, resumed from whatever the directory holds.
async fn child_loop(dir: &Path) {
    let (mut log, mut sm) = open(dir, Config::default()).unwrap();
    println!("OPEN");
    let mut vote = log
        .read_vote()
        .await
        .unwrap()
        .map_or(1, |v| v.leader_id.term);
    let mut round = 0u64;
    loop {
        round += 1;
        let state = log.get_log_state().await.unwrap();
        let last = state.last_log_id.map_or(0, |l| l.index);
        if round % 5 == 0 {
            vote += 1;
            log.save_vote(&Vote::new(vote, 1)).await.unwrap();
            println!("VOTE {vote}");
        }
        let (applied, _) = sm.applied_state().await.unwrap();
        let applied = applied.map_or(0, |l| l.index);
        if round % 7 == 0 && last > applied + 1 {
            // Entries not applied (so not committed) may be replaced by a new leader's.
            println!("TRUNCATING {last}");
            log.truncate(log_id(vote, last)).await.unwrap();
            append(&mut log, entries(vote, last..=last)).await.unwrap();
            println!("FLUSHED {vote} {last} {last}");
            continue;
        }
        append(&mut log, entries(vote, last + 1..=last + 3))
            .await
            .unwrap();
        println!("FLUSHED {vote} {} {}", last + 1, last + 3);
        // Apply up to two entries behind the end, read back from the log.
        let upto = last + 1;
        if upto > applied {
            let es = log.try_get_log_entries(applied + 1..=upto).await.unwrap();
            assert_eq!(
                es.len() as u64,
                upto - applied,
                "the log has every entry above last_applied"
            );
            sm.apply(es).await.unwrap();
            println!("APPLIED {upto}");
        }
        if round % 11 == 0 {
            let s = sm
                .get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .unwrap();
            let at = s.meta.last_log_id.unwrap();
            println!("SNAP {}", at.index);
            if at.index > 5 {
                log.purge(log_id(at.leader_id.term, at.index - 5))
                    .await
                    .unwrap();
            }
        }
    }
}

#[test]
#[ignore = "spawned by kill_points_lose_nothing_acknowledged"]
fn child_node() {
    let Some((dir, _seed)) = kill::child_dir_and_seed() else {
        return;
    };
    println!("\nSTART");
    rt().block_on(child_loop(Path::new(&dir)));
}

/// What the child reported, over every run.
#[derive(Default, Debug)]
struct Promised {
    /// index -> term of entries reported flushed (and not truncated since).
    flushed: BTreeMap<u64, u64>,
    vote: u64,
    applied: u64,
    snap: u64,
}

impl Promised {
    fn read(&mut self, line: &str) {
        let w: Vec<u64> = line
            .split(' ')
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        match (line.split(' ').next(), &w[..]) {
            (Some("FLUSHED"), &[term, from, to]) => {
                for i in from..=to {
                    self.flushed.insert(i, term);
                }
            }
            (Some("TRUNCATING"), &[from]) => {
                self.flushed.split_off(&from);
            }
            (Some("VOTE"), &[v]) => self.vote = self.vote.max(v),
            (Some("APPLIED"), &[a]) => self.applied = self.applied.max(a),
            (Some("SNAP"), &[s]) => self.snap = self.snap.max(s),
            _ => {}
        }
    }
}

async fn check(dir: &Path, p: &Promised, point: u64) {
    let (mut log, mut sm) =
        open(dir, Config::default()).unwrap_or_else(|e| panic!("point {point}: {e}"));
    let state = log.get_log_state().await.unwrap();
    let purged = state.last_purged_log_id.map_or(0, |l| l.index);
    let es = log.try_get_log_entries(..).await.unwrap();
    let got: BTreeMap<u64, u64> = es
        .iter()
        .map(|e| (e.log_id.index, e.log_id.leader_id.term))
        .collect();
    for (i, w) in es.windows(2).enumerate() {
        assert_eq!(
            w[0].log_id.index + 1,
            w[1].log_id.index,
            "point {point}: gap at {i}"
        );
    }
    for (&i, &term) in p.flushed.range(purged + 1..) {
        assert_eq!(
            got.get(&i),
            Some(&term),
            "point {point}: flushed entry {i} (term {term}) lost"
        );
    }
    let vote = log
        .read_vote()
        .await
        .unwrap()
        .map_or(0, |v| v.leader_id.term);
    assert!(
        vote >= p.vote,
        "point {point}: vote {vote} < saved {}",
        p.vote
    );
    let (applied, rows) = sm_state(&mut sm).await;
    let applied = applied.map_or(0, |l| l);
    assert!(
        applied >= p.applied,
        "point {point}: applied {applied} < {}",
        p.applied
    );
    assert!(
        applied >= purged,
        "point {point}: applied {applied} < purged {purged}"
    );
    assert_eq!(rows, model(applied), "point {point}");
    let snap = sm.get_current_snapshot().await.unwrap();
    let snap = snap.map_or(0, |s| s.meta.last_log_id.unwrap().index);
    assert!(
        snap >= p.snap && snap <= applied,
        "point {point}: snapshot at {snap}"
    );
    log.close().unwrap();
    sm.close().unwrap();
}

#[test]
fn kill_points_lose_nothing_acknowledged() {
    let points: u64 = std::env::var("SEGSTORE_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let exe = std::env::current_exe().unwrap();
    let mut promised = Promised::default();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut lines_seen = 0;
    for point in 0..points {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut child = Command::new(&exe);
        child
            .args([
                "--ignored",
                "--exact",
                "child_node",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SEGSTORE_CHILD_DIR", &dir)
            .env("SEGSTORE_CHILD_SEED", point.to_string());
        // From the first flushed append; every fourth point from the start, so some
        // kills land in the open.
        let anchor: fn(&str) -> bool = if point % 4 == 3 {
            |l| l == "START"
        } else {
            |l| l.starts_with("FLUSHED ")
        };
        let delay = Duration::from_micros(rng % 60_000);
        let lines = kill::run_and_kill(child, anchor, delay);
        lines_seen += lines.len();
        for l in &lines {
            promised.read(l);
        }
        if dir.exists() {
            rt().block_on(check(&dir, &promised, point));
        }
    }
    eprintln!(
        "{points} kill points; {lines_seen} lines; {} entries flushed, vote {}, applied {}, snapshot {}",
        promised.flushed.len(),
        promised.vote,
        promised.applied,
        promised.snap
    );
    assert!(promised.applied > 0, "the child never applied anything");
}
