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

#[path = "../common/mod.rs"]
mod common;
mod harness;
mod model;
mod replay;
mod scripts;
mod workloads;

use segstore::io::PowerLoss;
use segstore::{CommitLogSync, Store};

use harness::{check, config, every_crash_point, opts, rules, Opts, GROUP, PERIODIC};
use model::{Ctx, Model};
use scripts::{
    copied_snapshots, deferred, drop_tables, flush_and_compact, level_0_merges, leveled,
    range_deletes, snapshots, ttl, writes,
};

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
