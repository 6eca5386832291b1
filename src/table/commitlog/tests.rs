//! Unit tests of the commit log: poisoning, rolls, close, bad input, and the
//! roll racing a leader's fsync (invariant 7).

use super::*;
use crate::format::record::RecordRef;
use crate::io::rules::{FaultKind, Faults};

fn cell<'a>(k: &'a [u8], v: &'a [u8]) -> RecordRef<'a> {
    RecordRef {
        key: k,
        value: v,
        ts: 1,
        tombstone: false,
        expires: 0,
    }
}

#[test]
fn failed_fsync_poisons_the_log() {
    for sync in [
        CommitLogSync::Batch,
        CommitLogSync::Group {
            window: Duration::from_micros(50),
        },
        CommitLogSync::Periodic { period_ms: 10_000 },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = CommitLogConfig {
            sync,
            segment_size: 1 << 20,
        };
        let rules = FileRules::posix().with_faults(Faults::new());
        let (log, _) = CommitLog::open_with_rules(dir.path(), &cfg, 1, &rules, |_| Ok(())).unwrap();
        log.append("t", &[cell(b"a", b"1")]).unwrap();
        let faults = rules.faults().unwrap();
        faults.add(FaultKind::Fsync, "commitlog-", 0, u64::MAX);
        let first = log.append("t", &[cell(b"b", b"2")]);
        if matches!(sync, CommitLogSync::Periodic { .. }) {
            // Acknowledged at once; the explicit sync sees the failure.
            assert!(first.is_ok());
            assert!(log.sync().is_err());
        } else {
            assert!(
                matches!(first, Err(Error::Io { op: "fsync", .. })),
                "{first:?}"
            );
        }
        // From now on, poisoned, even though fsync would "work" again.
        faults.clear();
        let e = log.append("t", &[cell(b"c", b"3")]).unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)), "{e}");
        assert!(matches!(log.sync(), Err(Error::Poisoned(_))));
        assert!(log.close().is_err());
    }
}

/// Issue 18 A. The bug: a leader fsyncs the active file with the lock released; an
/// append that rolled meanwhile fsynced the same file, got the clean half of the
/// writeback error the leader's fsync got as `EIO`, set `synced_seq` and released
/// the leader's batch. The scenario: the leader's failing fsync is held, a second
/// append waits for it, a third rolls. The fix: the roll waits for the leader
/// (invariant 7), so the waiting append sees the poisoning, not an acknowledgement.
#[test]
fn a_roll_never_acknowledges_a_batch_whose_leaders_fsync_failed() {
    use crate::io::points::reached;
    let dir = tempfile::tempdir().unwrap();
    let cfg = CommitLogConfig {
        sync: CommitLogSync::Batch,
        segment_size: 256,
    };
    let rules = FileRules::posix().with_faults(Faults::new());
    let (log, _) = CommitLog::open_with_rules(dir.path(), &cfg, 1, &rules, |_| Ok(())).unwrap();
    let log = Arc::new(log);
    let faults = rules.faults().unwrap();
    let points = faults.points();
    faults.add(FaultKind::Fsync, "commitlog-1.log", 0, 1);
    points.hold("fsync", "commitlog-1.log", 1);
    let append = |key: &'static [u8], len: usize, mark: &'static str| {
        let (log, rules) = (Arc::clone(&log), rules.clone());
        std::thread::spawn(move || {
            let r = log.append("t", &[cell(key, &vec![7; len])]);
            rules.faults().unwrap().points().mark(mark);
            r
        })
    };
    let leader = append(b"a", 1, "leader returned");
    points.wait_for("fsync", 1);
    let waiter = append(b"b", 1, "waiter returned");
    points.wait_for("commitlog waits for leader", 1);
    let roller = append(b"c", 200, "roller returned");
    points.wait_until(|a| reached(a, "waiter returned") || reached(a, "commitlog roll waits"));
    points.release("fsync");
    let leader = leader.join().unwrap();
    assert!(
        matches!(leader, Err(Error::Io { op: "fsync", .. })),
        "{leader:?}"
    );
    let waiter = waiter.join().unwrap();
    assert!(
        matches!(waiter, Err(Error::Poisoned(_))),
        "record 2 was acknowledged after an fsync of its file failed: {waiter:?}"
    );
    let roller = roller.join().unwrap();
    assert!(matches!(roller, Err(Error::Poisoned(_))), "{roller:?}");
    assert_eq!(log.stats().synced_seq, 0, "nothing is known durable");
}

#[test]
fn failed_fsync_at_roll_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CommitLogConfig {
        sync: CommitLogSync::Periodic { period_ms: 10_000 },
        segment_size: 64,
    };
    let rules = FileRules::posix().with_faults(Faults::new());
    let (log, _) = CommitLog::open_with_rules(dir.path(), &cfg, 1, &rules, |_| Ok(())).unwrap();
    log.append("t", &[cell(b"a", &[7; 40])]).unwrap();
    rules
        .faults()
        .unwrap()
        .add(FaultKind::Fsync, "commitlog-", 0, u64::MAX);
    assert!(log.append("t", &[cell(b"b", &[7; 40])]).is_err());
    assert!(matches!(
        log.append("t", &[cell(b"c", b"")]),
        Err(Error::Poisoned(_))
    ));
    assert_eq!(log.files().len(), 1, "no new file after a failed roll");
}

#[test]
fn appends_after_close_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = CommitLog::open(dir.path(), &CommitLogConfig::default(), 1, |_| Ok(())).unwrap();
    log.append("t", &[cell(b"a", b"1")]).unwrap();
    log.close().unwrap();
    log.close().unwrap();
    assert!(matches!(
        log.append("t", &[cell(b"a", b"1")]),
        Err(Error::Closed)
    ));
}

#[test]
fn bad_input_is_refused_before_numbering() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = CommitLog::open(dir.path(), &CommitLogConfig::default(), 1, |_| Ok(())).unwrap();
    assert!(log.append("bad-name", &[cell(b"a", b"1")]).is_err());
    assert!(log.append("t", &[]).is_err());
    assert!(log.append("t", &[cell(b"", b"1")]).is_err());
    assert_eq!(log.next_seq(), 1);
    assert_eq!(log.append("t", &[cell(b"a", b"1")]).unwrap(), 1);
}

#[test]
#[allow(clippy::disallowed_methods)] // writes the old build's file as it left it
fn a_log_left_by_a_version_1_build_replays_and_continues_in_version_2() {
    let dir = tempfile::tempdir().unwrap();
    // As a build before format version 2 left it: one file, records 1 and 2 (the
    // second across two tables).
    let mut old = format::encode_file_header_as(format::FILE_MAGIC_V1, 1).to_vec();
    old.extend(format::encode_v1_frame(
        1,
        &[("t", &[cell(b"a", b"1")][..])],
    ));
    let two = [cell(b"b", b"2")];
    old.extend(format::encode_v1_frame(
        2,
        &[("t", &two[..]), ("u", &two[..])],
    ));
    std::fs::write(dir.path().join("commitlog-1.log"), &old).unwrap();
    let cfg = CommitLogConfig::default();
    let mut seen = Vec::new();
    let (log, out) = CommitLog::open(dir.path(), &cfg, 1, |r| {
        seen.push(r);
        Ok(())
    })
    .unwrap();
    assert!(out.stops.is_empty(), "{:?}", out.stops);
    assert_eq!(seen.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(seen[1].parts.len(), 2);
    assert_eq!(log.append("t", &[cell(b"c", b"3")]).unwrap(), 3);
    log.close().unwrap();
    drop(log);
    // The new record went to a new file, in version 2; both versions replay.
    let newest = std::fs::read(dir.path().join("commitlog-2.log")).unwrap();
    assert_eq!(newest[..8], format::FILE_MAGIC);
    let mut again = Vec::new();
    let (_log, out) = CommitLog::open(dir.path(), &cfg, 1, |r| {
        again.push((r.seq, r.parts[0].cells[0].key.clone()));
        Ok(())
    })
    .unwrap();
    assert!(out.stops.is_empty(), "{:?}", out.stops);
    let want: Vec<(u64, Vec<u8>)> =
        vec![(1, b"a".to_vec()), (2, b"b".to_vec()), (3, b"c".to_vec())];
    assert_eq!(again, want);
}
