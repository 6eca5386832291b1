//! Tests of the write turn ([`super::turn`]) through the commit log: appends that queue
//! behind a write in flight, a failed write with appends queued behind it, and a roll
//! that waits for the queue. Each race is driven by pause points, not by timing.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::*;
use crate::format::record::RecordRef;
use crate::io::rules::{FaultKind, Faults};

fn cell(v: &[u8]) -> RecordRef<'_> {
    RecordRef {
        key: b"k",
        value: v,
        ts: 1,
        tombstone: false,
        expires: 0,
    }
}

/// A log in `periodic` mode (appends wait for their write only) with pause points.
fn open(dir: &Path, segment_size: u64) -> (Arc<CommitLog>, FileRules) {
    let cfg = CommitLogConfig {
        sync: CommitLogSync::Periodic { period_ms: 60_000 },
        segment_size,
    };
    let rules = FileRules::posix().with_faults(Faults::new());
    let (log, _) = CommitLog::open_with_rules(dir, &cfg, 1, &rules, |_| Ok(())).unwrap();
    (Arc::new(log), rules)
}

fn spawn_append(log: &Arc<CommitLog>, value: Vec<u8>) -> JoinHandle<Result<u64>> {
    let log = Arc::clone(log);
    std::thread::spawn(move || log.append("t", &[cell(&value)]))
}

/// Reopen `dir` and return each record's number and first value, in log order.
fn replayed(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let cfg = CommitLogConfig::default();
    CommitLog::open_read_only(dir, &cfg, 1, |r| {
        out.push((r.seq, r.parts[0].cells[0].value.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

/// Two appends that arrive while a third's write is held queue behind it, are written
/// together by one `write` call once it ends, in number order, and are acknowledged
/// only then.
#[test]
fn appends_queued_behind_a_write_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let (log, rules) = open(dir.path(), 1 << 20);
    let points = rules.faults().unwrap().points();
    points.hold("commitlog write", "commitlog-1.log", 1);
    let first = spawn_append(&log, b"first".to_vec());
    points.wait_for("commitlog write", 1);
    let queued = [spawn_append(&log, b"q1".to_vec()), spawn_append(&log, b"q2".to_vec())];
    points.wait_for("commitlog write queued", 2);
    assert_eq!(log.stats().written_seq, 0, "nothing is written while the write is held");
    points.release("commitlog write");
    assert_eq!(first.join().unwrap().unwrap(), 1);
    let mut seqs: Vec<u64> = queued.map(|h| h.join().unwrap().unwrap()).to_vec();
    seqs.sort_unstable();
    assert_eq!(seqs, [2, 3]);
    let stats = log.stats();
    assert_eq!((stats.appends, stats.writes, stats.written_seq), (3, 2, 3));
    log.close().unwrap();
    let records = replayed(dir.path());
    assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(records[0].1, b"first");
}

/// The held write fails: its append gets the write's error, the appends queued behind
/// it are refused unwritten (commit log invariant 3), the log stays poisoned, and the
/// file replays nothing.
#[test]
fn a_failed_write_refuses_the_appends_queued_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let (log, rules) = open(dir.path(), 1 << 20);
    let faults = rules.faults().unwrap();
    let points = faults.points();
    faults.add(FaultKind::NoSpace, "commitlog-1.log", 0, 1);
    points.hold("commitlog write", "commitlog-1.log", 1);
    let first = spawn_append(&log, b"first".to_vec());
    points.wait_for("commitlog write", 1);
    let queued = spawn_append(&log, b"queued".to_vec());
    points.wait_for("commitlog write queued", 1);
    points.release("commitlog write");
    let first = first.join().unwrap();
    assert!(matches!(first, Err(Error::Io { op: "write", .. })), "{first:?}");
    let queued = queued.join().unwrap();
    assert!(matches!(queued, Err(Error::Poisoned(_))), "{queued:?}");
    let stats = log.stats();
    assert_eq!((stats.appends, stats.writes, stats.written_seq), (0, 1, 0));
    let later = log.append("t", &[cell(b"later")]);
    assert!(matches!(later, Err(Error::Poisoned(_))), "{later:?}");
    drop(log);
    assert!(replayed(dir.path()).is_empty());
}

/// An append that must roll while a write is held and another record is queued for
/// the same file waits: the queued record goes into the old file, the roll follows,
/// and the rolling append's record starts the new file.
#[test]
fn a_roll_waits_for_the_records_queued_for_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (log, rules) = open(dir.path(), 256);
    let points = rules.faults().unwrap().points();
    points.hold("commitlog write", "commitlog-1.log", 1);
    let first = spawn_append(&log, vec![1; 8]);
    points.wait_for("commitlog write", 1);
    let queued = spawn_append(&log, vec![2; 8]);
    points.wait_for("commitlog write queued", 1);
    let roller = spawn_append(&log, vec![3; 200]);
    points.wait_for("commitlog write queued", 2);
    assert_eq!(log.files().len(), 1, "a roll went ahead of the queue");
    points.release("commitlog write");
    assert_eq!(first.join().unwrap().unwrap(), 1);
    assert_eq!(queued.join().unwrap().unwrap(), 2);
    assert_eq!(roller.join().unwrap().unwrap(), 3);
    let files = log.files();
    assert_eq!(files.iter().map(|f| f.first_seq).collect::<Vec<_>>(), [1, 3]);
    log.close().unwrap();
    let records = replayed(dir.path());
    assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(records[2].1, vec![3; 200]);
}
