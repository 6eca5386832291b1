//! Tests of durability waits and callbacks ([`super::durable`]).

use std::sync::mpsc;

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

/// A log whose periodic fsync never comes during a test (an hour), so only the calls
/// under test make records durable.
fn periodic_log(dir: &Path, rules: &FileRules) -> CommitLog {
    let cfg = CommitLogConfig {
        sync: CommitLogSync::Periodic {
            period_ms: 3_600_000,
        },
        segment_size: 1 << 20,
    };
    CommitLog::open_with_rules(dir, &cfg, 1, rules, |_| Ok(()))
        .unwrap()
        .0
}

#[test]
fn on_durable_fsyncs_under_periodic_and_runs_once_covered() {
    let dir = tempfile::tempdir().unwrap();
    let log = periodic_log(dir.path(), &FileRules::posix());
    let a = log.append("t", &[cell(b"a", b"1")]).unwrap();
    let b = log.append("t", &[cell(b"b", b"2")]).unwrap();
    assert!(
        log.durable_seq() < a,
        "acknowledged at once, not durable yet"
    );
    assert_eq!(log.written_seq(), b);
    let syncs = log.stats().syncs;
    let (tx, rx) = mpsc::channel();
    for seq in [b, a] {
        let tx = tx.clone();
        log.on_durable(seq, move |r| tx.send((seq, r)).unwrap())
            .unwrap();
    }
    let mut got: Vec<(u64, bool)> = (0..2)
        .map(|_| rx.recv().unwrap())
        .map(|(s, r)| (s, r.is_ok()))
        .collect();
    got.sort();
    assert_eq!(got, [(a, true), (b, true)]);
    assert!(log.durable_seq() >= b);
    assert!(log.stats().syncs > syncs, "the notifier fsynced");
    // A number durable already runs at once, on the notifier.
    log.on_durable(a, move |r| tx.send((a, r)).unwrap())
        .unwrap();
    assert!(rx.recv().unwrap().1.is_ok());
    log.close().unwrap();
}

#[test]
fn wait_durable_fsyncs_now_and_numbers_not_written_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = periodic_log(dir.path(), &FileRules::posix());
    let a = log.append("t", &[cell(b"a", b"1")]).unwrap();
    log.wait_durable(a).unwrap();
    assert_eq!(log.durable_seq(), a);
    for bad in [a + 1, u64::MAX] {
        let e = log.wait_durable(bad).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument(ref m) if m.contains("not been written")),
            "{e}"
        );
        let e = log.on_durable(bad, |_| panic!("must not run")).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    log.close().unwrap();
}

#[test]
fn a_failed_fsync_reaches_every_waiting_callback_as_poisoned() {
    let dir = tempfile::tempdir().unwrap();
    let rules = FileRules::posix().with_faults(Faults::new());
    let log = periodic_log(dir.path(), &rules);
    let a = log.append("t", &[cell(b"a", b"1")]).unwrap();
    rules
        .faults()
        .unwrap()
        .add(FaultKind::Fsync, "commitlog-", 0, u64::MAX);
    let (tx, rx) = mpsc::channel();
    // The first callback panics; the second still runs.
    log.on_durable(a, |_| panic!("a callback that panics"))
        .unwrap();
    log.on_durable(a, move |r| tx.send(r).unwrap()).unwrap();
    let r = rx.recv().unwrap();
    assert!(matches!(r, Err(Error::Poisoned(_))), "{r:?}");
    assert!(log.durable_seq() < a);
    assert!(matches!(log.wait_durable(a), Err(Error::Poisoned(_))));
}

#[test]
fn callbacks_under_batch_and_group_run_as_appends_sync() {
    for sync in [
        CommitLogSync::Batch,
        CommitLogSync::Group {
            window: Duration::from_micros(100),
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = CommitLogConfig {
            sync,
            segment_size: 1 << 20,
        };
        let (log, _) = CommitLog::open(dir.path(), &cfg, 1, |_| Ok(())).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..50u32 {
            let seq = log.append("t", &[cell(&i.to_be_bytes(), b"v")]).unwrap();
            assert!(
                log.durable_seq() >= seq,
                "{sync}: acknowledged after its fsync"
            );
            let tx = tx.clone();
            // A callback may register another (it runs without the log's lock).
            let again = log.on_durable(seq, move |r| tx.send((seq, r.is_ok())).unwrap());
            again.unwrap();
        }
        let mut got: Vec<(u64, bool)> = (0..50).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, (1..=50).map(|s| (s, true)).collect::<Vec<_>>());
        log.close().unwrap();
    }
}

#[test]
fn a_read_only_log_has_no_callbacks() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) =
        CommitLog::open_read_only(dir.path(), &CommitLogConfig::default(), 1, |_| Ok(())).unwrap();
    assert!(matches!(log.on_durable(0, |_| {}), Err(Error::ReadOnly)));
}
