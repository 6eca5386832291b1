//! Commit log replay: after a clean close, after a drop without close, with a torn tail,
//! with flipped bits, across rolled files, and the obsolete-file report.
//! Rules under test are in `segstore::table::commitlog::replay`'s module docs.
#![allow(clippy::disallowed_methods)] // damages files on purpose, outside the store's I/O boundary

use std::path::{Path, PathBuf};

use segstore::segment::RecordRef;
use segstore::table::commitlog::{CommitLog, LogRecord, Replay};
use segstore::{CommitLogConfig, CommitLogSync, Error};

/// Tiny files so that a few records roll the log several times.
fn cfg() -> CommitLogConfig {
    let mut c = CommitLogConfig::default();
    c.sync = CommitLogSync::Batch;
    c.segment_size = 256;
    c
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 7) as usize)).into_bytes()
}

/// Append record i: two cells (a put of key i and a delete of key i+1000) for table
/// "t{i % 3}".
fn append(log: &CommitLog, i: u64) -> u64 {
    let (k, v, k2) = (key(i), value(i), key(i + 1000));
    log.append(
        &format!("t{}", i % 3),
        &[
            RecordRef {
                key: &k,
                value: &v,
                ts: i,
                tombstone: false,
                expires: 0,
            },
            RecordRef {
                key: &k2,
                value: b"",
                ts: i,
                tombstone: true,
                expires: 0,
            },
        ],
    )
    .unwrap()
}

fn check(rec: &LogRecord, i: u64) {
    assert_eq!(rec.parts.len(), 1);
    let part = &rec.parts[0];
    assert_eq!(part.table, format!("t{}", i % 3));
    assert_eq!(part.cells.len(), 2);
    assert_eq!(
        (&part.cells[0].key, &part.cells[0].value),
        (&key(i), &value(i))
    );
    assert!(!part.cells[0].tombstone && part.cells[1].tombstone);
    assert_eq!(part.cells[1].key, key(i + 1000));
}

fn open(
    dir: &Path,
    replay_from: u64,
) -> segstore::Result<(
    CommitLog,
    Vec<LogRecord>,
    Vec<segstore::table::commitlog::ReplayStop>,
)> {
    let mut recs = Vec::new();
    let (log, outcome) = CommitLog::open(dir, &cfg(), replay_from, |r| {
        recs.push(r);
        Ok(())
    })?;
    Ok((log, recs, outcome.stops))
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort_by_key(|p| {
        p.file_name().unwrap().to_str().unwrap()[10..]
            .trim_end_matches(".log")
            .parse::<u64>()
            .unwrap()
    });
    v
}

/// Write records 1..=n (seq == i) and return the directory.
fn write_n(n: u64, close: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (log, recs, _) = open(dir.path(), 1).unwrap();
    assert!(recs.is_empty());
    for i in 1..=n {
        assert_eq!(append(&log, i), i);
    }
    if close {
        log.close().unwrap();
    }
    drop(log);
    dir
}

#[test]
fn replay_after_clean_close_returns_everything_in_order() {
    let dir = write_n(40, true);
    assert!(
        files(dir.path()).len() > 5,
        "tiny segment_size rolls the log"
    );
    let (log, recs, stops) = open(dir.path(), 1).unwrap();
    assert!(stops.is_empty());
    assert_eq!(recs.len(), 40);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
        check(r, r.seq);
    }
    // Numbering continues; the reopened log starts a new file (invariant 6).
    let before = files(dir.path()).len();
    assert_eq!(log.next_seq(), 41);
    assert_eq!(append(&log, 41), 41);
    assert_eq!(files(dir.path()).len(), before);
    log.close().unwrap();
    let (_, recs, _) = open(dir.path(), 1).unwrap();
    assert_eq!(recs.len(), 41);
}

#[test]
fn replay_after_drop_without_close() {
    let dir = write_n(25, false);
    let (_, recs, stops) = open(dir.path(), 1).unwrap();
    assert!(stops.is_empty());
    assert_eq!(
        recs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=25).collect::<Vec<_>>()
    );
}

#[test]
fn replay_from_skips_flushed_records_and_files() {
    let dir = write_n(40, true);
    let (_, recs, _) = open(dir.path(), 30).unwrap();
    assert_eq!(recs.first().unwrap().seq, 30);
    assert_eq!(recs.len(), 11);
    // The floor also bounds new numbering.
    let dir = write_n(3, true);
    let (log, _, _) = open(dir.path(), 100).unwrap();
    assert_eq!(log.next_seq(), 100);
}

#[test]
fn torn_tail_keeps_every_earlier_record_at_every_cut() {
    let dir = write_n(12, true);
    // close() leaves the active file last, holding the newest records.
    let victim = files(dir.path()).pop().unwrap();
    let full = std::fs::read(&victim).unwrap();
    assert!(full.len() > 40);
    let baseline: Vec<u64> = Replay::open(dir.path(), 1)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(baseline.len(), 12);
    let mut boundaries = 0;
    for cut in (0..full.len()).rev() {
        std::fs::write(&victim, &full[..cut]).unwrap();
        let mut replay = Replay::open(dir.path(), 1).unwrap();
        let got: Vec<u64> = replay.by_ref().map(|r| r.unwrap().seq).collect();
        let out = replay.finish();
        assert!(
            got.len() < 12 && baseline.starts_with(&got),
            "cut {cut}: {got:?}"
        );
        match out.stops.as_slice() {
            [] => boundaries += 1, // cut exactly between two records: a clean shorter file
            [stop] => {
                assert_eq!(stop.path, victim);
                assert!(stop.offset <= cut as u64, "cut {cut}: {stop:?}");
                assert_eq!(stop.expected_seq, Some(got.len() as u64 + 1), "cut {cut}");
            }
            more => panic!("cut {cut}: {more:?}"),
        }
    }
    // One clean cut per record boundary of the file (after the header, between records).
    let in_file = 12 - Replay::open(dir.path(), 1).unwrap().count() as u64;
    assert_eq!(
        boundaries, in_file,
        "header end and every record end but the last"
    );
}

#[test]
fn old_torn_tail_in_a_non_last_file_is_tolerated_after_reopen() {
    let dir = write_n(10, false);
    let last = files(dir.path()).pop().unwrap();
    let full = std::fs::read(&last).unwrap();
    assert!(full.len() > 30);
    std::fs::write(&last, &full[..full.len() - 3]).unwrap();
    // First reopen: the torn record is dropped and its number reused.
    let (log, recs, stops) = open(dir.path(), 1).unwrap();
    assert_eq!(stops.len(), 1);
    let resumed = recs.len() as u64 + 1;
    assert_eq!(log.next_seq(), resumed);
    for i in resumed..resumed + 5 {
        assert_eq!(append(&log, i), i);
    }
    log.close().unwrap();
    // Second reopen: the torn tail is now in a non-last file, and the next file starts
    // at the very number where it stopped: not an error (rule 2).
    let (_, recs, stops) = open(dir.path(), 1).unwrap();
    assert_eq!(stops.len(), 1);
    assert_eq!(
        recs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..resumed + 5).collect::<Vec<_>>()
    );
    for r in &recs {
        check(r, r.seq);
    }
}

#[test]
fn torn_header_from_a_crash_while_creating_a_file() {
    let dir = write_n(5, false);
    let last = files(dir.path()).pop().unwrap();
    let n: u64 = last.file_name().unwrap().to_str().unwrap()[10..]
        .trim_end_matches(".log")
        .parse()
        .unwrap();
    std::fs::write(dir.path().join(format!("commitlog-{}.log", n + 1)), b"SGCL").unwrap();
    for _ in 0..3 {
        let (log, recs, _) = open(dir.path(), 1).unwrap();
        assert_eq!(recs.len(), 5);
        assert_eq!(log.next_seq(), 6);
        drop(log);
    }
}

fn flip(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= 0x10;
    std::fs::write(path, &b).unwrap();
}

#[test]
fn flipped_bit_in_the_newest_file_stops_replay_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = CommitLogConfig::default();
    big.sync = CommitLogSync::Batch;
    big.segment_size = 1 << 20;
    let (log, _) = CommitLog::open(dir.path(), &big, 1, |_| Ok(())).unwrap();
    for i in 1..=10 {
        append(&log, i);
    }
    drop(log);
    let f = files(dir.path()).pop().unwrap();
    let len = std::fs::metadata(&f).unwrap().len();
    flip(&f, len / 2);
    let mut replay = Replay::open(dir.path(), 1).unwrap();
    let got: Vec<u64> = replay.by_ref().map(|r| r.unwrap().seq).collect();
    let out = replay.finish();
    // Earlier records are kept; the damaged one and those after it are not (documented).
    assert!(!got.is_empty() && got.len() < 10);
    assert_eq!(got, (1..=got.len() as u64).collect::<Vec<_>>());
    assert_eq!(out.stops.len(), 1);
    assert_eq!(out.stops[0].path, f);
    assert!(out.stops[0].reason.contains("checksum") || out.stops[0].reason.contains("length"));
}

#[test]
fn flipped_bit_in_an_older_file_is_corruption_naming_the_file() {
    let dir = write_n(30, true);
    let all = files(dir.path());
    let victim = all[1].clone();
    let len = std::fs::metadata(&victim).unwrap().len();
    flip(&victim, len - 5);
    match open(dir.path(), 1) {
        Err(Error::Corrupt {
            path,
            offset,
            reason,
        }) => {
            assert_eq!(path, victim);
            assert!(offset < len, "{offset}");
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!(
            "expected corruption, got {:?}",
            other.map(|(_, r, _)| r.len())
        ),
    }
    // If the damaged records were flushed already, it is only a warning.
    let first_of_next =
        u64::from_le_bytes(std::fs::read(&all[2]).unwrap()[8..16].try_into().unwrap());
    let (_, recs, stops) = open(dir.path(), first_of_next).unwrap();
    assert_eq!(stops.len(), 0, "the damaged file is skipped unread");
    assert_eq!(recs.first().unwrap().seq, first_of_next);
}

#[test]
fn obsolete_files_are_reported_and_handed_to_the_deleter() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _, _) = open(dir.path(), 1).unwrap();
    for i in 1..=30 {
        append(&log, i);
    }
    let tracked = log.files();
    assert!(tracked.len() > 4);
    assert!(log.obsolete_files(1).is_empty());
    // Everything flushed: every file but the active one.
    assert_eq!(log.obsolete_files(31).len(), tracked.len() - 1);
    // Flushed below the third file's first record: exactly the first two files.
    let third = tracked[2].first_seq;
    assert_eq!(
        log.obsolete_files(third),
        vec![tracked[0].path.clone(), tracked[1].path.clone()]
    );
    assert_eq!(log.obsolete_files(third - 1).len(), 1);
    let deleted = std::cell::RefCell::new(Vec::new());
    let n = log.release_obsolete(third, &|p: &Path| {
        deleted.borrow_mut().push(p.to_path_buf())
    });
    assert_eq!(n, 2);
    assert_eq!(
        deleted.into_inner(),
        vec![tracked[0].path.clone(), tracked[1].path.clone()]
    );
    assert!(tracked[0].path.exists(), "the log itself deletes nothing");
    assert_eq!(log.files().len(), tracked.len() - 2);
    assert!(log.obsolete_files(third).is_empty());
    // The lead's deleter removes them; replay from the flush point still works.
    std::fs::remove_file(&tracked[0].path).unwrap();
    std::fs::remove_file(&tracked[1].path).unwrap();
    log.close().unwrap();
    let (_, recs, stops) = open(dir.path(), third).unwrap();
    assert!(stops.is_empty());
    assert_eq!(recs.first().unwrap().seq, third);
    assert_eq!(recs.last().unwrap().seq, 30);
}

#[test]
fn garbage_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("commitlog-1.log"), vec![0u8; 100]).unwrap();
    std::fs::write(dir.path().join("unrelated.txt"), b"hello").unwrap();
    let (log, recs, stops) = open(dir.path(), 1).unwrap();
    assert!(recs.is_empty());
    assert_eq!(stops.len(), 1);
    assert_eq!(log.next_seq(), 1);
    // Random bytes with a valid header.
    let dir = write_n(4, true);
    let f = files(dir.path())[0].clone();
    let mut b = std::fs::read(&f).unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    for byte in &mut b[20..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    std::fs::write(&f, &b).unwrap();
    let _ = open(dir.path(), 1); // error or not, never a panic
}

#[test]
fn oldest_file_starting_beyond_replay_from_is_corruption() {
    // Issue 11, defect 5: the first remaining file was never compared with replay_from.
    let dir = write_n(30, true);
    let all = files(dir.path());
    let second = all[1].clone();
    let second_first =
        u64::from_le_bytes(std::fs::read(&second).unwrap()[8..16].try_into().unwrap());
    std::fs::remove_file(&all[0]).unwrap();
    for replay_from in [1, second_first - 1] {
        match open(dir.path(), replay_from) {
            Err(Error::Corrupt { path, reason, .. }) => {
                assert_eq!(path, second);
                assert!(
                    reason.contains(&format!(
                        "records {replay_from} to {} are missing",
                        second_first - 1
                    )),
                    "{reason}"
                );
            }
            other => panic!(
                "replay_from {replay_from}: expected corruption, got {:?}",
                other.map(|(_, r, _)| r.len())
            ),
        }
    }
    // Records below the new oldest file are flushed: nothing is missing.
    let (_, recs, stops) = open(dir.path(), second_first).unwrap();
    assert!(stops.is_empty());
    assert_eq!(recs.first().unwrap().seq, second_first);
    // An empty directory replays nothing whatever replay_from says.
    let empty = tempfile::tempdir().unwrap();
    let (log, recs, _) = open(empty.path(), 50).unwrap();
    assert!(recs.is_empty());
    assert_eq!(log.next_seq(), 50);
}
