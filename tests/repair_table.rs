//! Repair of LSM tables (issue 5): [`TableReplica`] over `Store::table`, under the
//! Windows emulation with deferred deletion and leak tracking.
//!
//! Divergent histories are written through the Table API: puts and deletes stamped by
//! each store's clock, and explicit timestamps older and newer than those; some reach
//! a segment (explicit flushes, and background flushes of small memtables), the rest
//! stay in memtables. After one repair, on 2 and 3 replicas, sequential and parallel,
//! with `mmap` and `standard` access: every replica answers every key the same, as the
//! union of all writes says it must (tombstones included); a second repair finds
//! nothing; every store closes clean and the emulation never refused a deletion. One
//! test crashes the replicas (drop without close) before repairing them.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use common::test_config;
use segstore::repair::{
    newer, LocalTransport, Parallelism, RepairOptions, RepairReport, RepairSession, Replica,
    ReplicaId, Row, TableReplica,
};
use segstore::{
    CommitLogConfig, CommitLogSync, Config, DiskAccessMode, Error, FileRules, Store, TableConfig,
    WriteBatch,
};

const KEYS: u32 = 60;

fn key(k: u32) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Small memtables (background flushes while writing) and small commit log files
/// (released through the deleter), tiny blocks, leak tracking, deferral.
fn config(mode: DiskAccessMode, rules: FileRules) -> Config {
    let mut c = test_config(mode, rules);
    c.commitlog = CommitLogConfig::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.commitlog.segment_size = 4096;
    c.table = TableConfig::default();
    c.table.memtable_flush_bytes = 4096;
    c
}

/// One write: which replicas it reached, its timestamp (`None`: the store's clock;
/// `Some(d)`: `t0 + d` microseconds, older or newer than the clock's), and whether the
/// replicas it reached flush afterwards.
#[derive(Debug, Clone)]
struct Step {
    key: u32,
    delete: bool,
    value: u32,
    ts: Option<i64>,
    reach: u32,
    flush: bool,
}

fn history(seed: u64, len: usize) -> Vec<Step> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..len)
        .map(|i| {
            let r = next();
            Step {
                key: (r % KEYS as u64) as u32,
                delete: (r >> 8) % 4 == 0,
                value: ((r >> 12) % 5) as u32,
                ts: match (r >> 16) % 3 {
                    0 => None,
                    _ => Some(((r >> 20) % 6_000_000) as i64 - 3_000_000),
                },
                reach: 1 + ((r >> 44) % 7) as u32,
                // The last writes stay in memtables (unless they fill one).
                flush: (r >> 50) % 10 == 0 && i + 25 < len,
            }
        })
        .collect()
}

struct Cluster {
    dirs: Vec<tempfile::TempDir>,
    stores: Vec<Store>,
    rules: Vec<FileRules>,
    mode: DiskAccessMode,
}

impl Cluster {
    fn new(n: usize, mode: DiskAccessMode) -> Cluster {
        let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut c = Cluster {
            dirs,
            stores: Vec::new(),
            rules: Vec::new(),
            mode,
        };
        c.open();
        c
    }

    fn open(&mut self) {
        for d in &self.dirs {
            let r = FileRules::windows_emulation();
            self.stores
                .push(Store::open(d.path(), config(self.mode, r.clone())).unwrap());
            self.rules.push(r);
        }
    }

    /// Drop every store without closing it (a crash: the commit log has every
    /// acknowledged write), then open them again.
    fn crash_and_reopen(&mut self) {
        for r in std::mem::take(&mut self.rules) {
            assert_eq!(r.counts().refused_mapped, 0);
        }
        self.stores.clear();
        self.open();
    }

    fn replicas(&self, table: &str) -> Vec<TableReplica<'_>> {
        self.stores
            .iter()
            .enumerate()
            .map(|(i, s)| TableReplica::new(ReplicaId(i as u64 + 1), s, table).unwrap())
            .collect()
    }

    /// Close every store: clean, no snapshot left, no refused deletion.
    fn close(self) {
        for (s, r) in self.stores.into_iter().zip(&self.rules) {
            let dir: PathBuf = s.dir().to_path_buf();
            assert!(s.list_snapshots().unwrap().is_empty());
            let report = s.close().unwrap();
            assert!(report.is_clean(), "{report:?}");
            let left: Vec<_> = std::fs::read_dir(dir.join("snapshots"))
                .map(|rd| rd.map(|e| e.unwrap().file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "snapshot files left: {left:?}");
            assert_eq!(
                r.counts().refused_mapped,
                0,
                "tried to delete a mapped file"
            );
        }
    }
}

/// Write `history` through the Table API; returns the model: the winner of every cell
/// written anywhere.
fn apply_history(rs: &[TableReplica<'_>], history: &[Step], t0: u64) -> BTreeMap<Vec<u8>, Row> {
    let mut model: BTreeMap<Vec<u8>, Row> = BTreeMap::new();
    for s in history {
        let k = key(s.key);
        let value = format!("v{}", s.value);
        for (i, r) in rs.iter().enumerate() {
            let reach = s.reach & ((1 << rs.len()) - 1);
            if reach != 0 && reach & (1 << i) == 0 {
                continue;
            }
            let t = r.lsm();
            match (s.ts, s.delete) {
                (None, false) => t.put(&k, value.as_bytes()).unwrap(),
                (None, true) => t.delete(&k).unwrap(),
                (Some(d), false) => {
                    t.write(WriteBatch::new().put_at(
                        k.clone(),
                        value.clone(),
                        t0.wrapping_add_signed(d),
                    ))
                    .unwrap();
                }
                (Some(d), true) => {
                    t.write(WriteBatch::new().delete_at(k.clone(), t0.wrapping_add_signed(d)))
                        .unwrap();
                }
            }
            // The cell just written is the winner here unless something newer was
            // already present, which the model then holds already.
            let cell = r.get(&k).unwrap().expect("just written");
            let w = match model.remove(&k) {
                Some(old) => newer(old, cell),
                None => cell,
            };
            model.insert(k.clone(), w);
            if s.flush {
                t.flush().unwrap();
            }
        }
    }
    model
}

fn run(rs: &[TableReplica<'_>], opts: &RepairOptions) -> RepairReport {
    let dyns: Vec<&dyn Replica> = rs.iter().map(|r| r as &dyn Replica).collect();
    RepairSession::run(&dyns, &LocalTransport::new(), opts).unwrap()
}

/// Repair, then check convergence on every key, the snapshots, and a second repair.
fn repair_and_check(rs: &[TableReplica<'_>], model: &BTreeMap<Vec<u8>, Row>, par: Parallelism) {
    let before: Vec<Vec<Row>> = rs.iter().map(|r| r.scan().unwrap()).collect();
    let mut opts = RepairOptions::default();
    opts.depth = 8;
    opts.parallelism = par;
    opts.batch_rows = 7; // several batches per stream
    let report = run(rs, &opts);
    assert_eq!(
        report.was_in_sync(),
        before.iter().all(|b| *b == before[0]),
        "{report}"
    );
    assert!(report.converged(), "{report}");

    for k in 0..KEYS {
        let want = model.get(&key(k));
        for r in rs {
            assert_eq!(
                r.get(&key(k)).unwrap().as_ref(),
                want,
                "key {k} on {}",
                r.id()
            );
        }
    }
    let want: Vec<Row> = model.values().cloned().collect();
    for r in rs {
        assert_eq!(r.scan().unwrap(), want, "{}", r.id());
        let live: Vec<(Vec<u8>, Vec<u8>)> = r.lsm().scan(..).unwrap().map(|c| c.unwrap()).collect();
        let want_live: Vec<(Vec<u8>, Vec<u8>)> = want
            .iter()
            .filter(|c| !c.tombstone)
            .map(|c| (c.key.clone(), c.value.clone()))
            .collect();
        assert_eq!(live, want_live);
    }

    if par == Parallelism::Sequential {
        assert_eq!(report.snapshots.len(), rs.len());
        for s in &report.snapshots {
            assert_eq!(s.after_close.mappings, 0, "{report}");
        }
    } else {
        assert!(report.snapshots.is_empty());
    }

    let again = run(rs, &opts);
    assert!(again.was_in_sync(), "{again}");
    assert_eq!(again.total_rows_streamed(), 0);
    assert_eq!(again.roots_before, report.roots_after);
}

#[test]
fn divergent_table_histories_converge_in_every_combination() {
    for seed in [0x2545_F491_4F6C_DD1D, 0x9E37_79B9_7F4A_7C15] {
        let h = history(seed, 160);
        for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
            for par in [Parallelism::Sequential, Parallelism::Parallel] {
                for n in [2, 3] {
                    let cluster = Cluster::new(n, mode);
                    {
                        let rs = cluster.replicas("t");
                        let model = apply_history(&rs, &h, now_micros());
                        assert!(
                            rs.iter().any(|r| r.lsm().stats().memtable_keys > 0),
                            "some writes are only in memtables"
                        );
                        assert!(rs.iter().all(|r| r.lsm().stats().segments > 0));
                        repair_and_check(&rs, &model, par);
                    }
                    cluster.close();
                }
            }
        }
    }
}

#[test]
fn replicas_reopened_after_a_crash_converge() {
    for par in [Parallelism::Sequential, Parallelism::Parallel] {
        let mut cluster = Cluster::new(3, DiskAccessMode::Mmap);
        let (model, scans) = {
            let rs = cluster.replicas("t");
            let model = apply_history(&rs, &history(0xC0FF_EE00_D15E_A5E5, 200), now_micros());
            // An ephemeral snapshot left behind by the crash goes at the next open.
            rs[0].snapshot_ephemeral("left_by_crash").unwrap();
            let scans: Vec<Vec<Row>> = rs.iter().map(|r| r.scan().unwrap()).collect();
            (model, scans)
        };
        cluster.crash_and_reopen();
        {
            let rs = cluster.replicas("t");
            for (r, before) in rs.iter().zip(&scans) {
                assert_eq!(&r.scan().unwrap(), before, "{} after replay", r.id());
                assert!(r.store().list_snapshots().unwrap().is_empty());
            }
            repair_and_check(&rs, &model, par);
        }
        cluster.close();
    }
}

/// The sequential snapshot flushes the memtable first, so writes that were only in a
/// memtable are in the tree and are streamed.
#[test]
fn sequential_repair_sees_memtable_only_writes() {
    let cluster = Cluster::new(2, DiskAccessMode::Mmap);
    {
        let rs = cluster.replicas("t");
        for k in 0..10 {
            rs[0].lsm().put(key(k), b"only in a memtable").unwrap();
        }
        rs[0].lsm().delete(key(10)).unwrap();
        assert_eq!(rs[0].lsm().stats().segments, 0);
        let mut opts = RepairOptions::default();
        opts.parallelism = Parallelism::Sequential;
        let report = run(&rs, &opts);
        assert!(report.converged(), "{report}");
        assert_eq!(report.rows_hashed[0].1, 11, "{report}");
        assert_eq!(report.rows_streamed(ReplicaId(1), ReplicaId(2)), 11);
        assert_eq!(
            rs[0].lsm().stats().memtable_keys,
            0,
            "flushed by the snapshot"
        );
        assert_eq!(rs[1].scan().unwrap(), rs[0].scan().unwrap());
        assert!(rs[1].get(&key(10)).unwrap().unwrap().tombstone);
    }
    cluster.close();
}

#[test]
fn tables_with_different_gc_grace_are_refused() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let stores: Vec<Store> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut c = config(DiskAccessMode::Auto, FileRules::windows_emulation());
            c.table.gc_grace_secs = 100 + i as u64;
            Store::open(d.path(), c).unwrap()
        })
        .collect();
    {
        let a = TableReplica::new(ReplicaId(1), &stores[0], "t").unwrap();
        let b = TableReplica::new(ReplicaId(2), &stores[1], "t").unwrap();
        a.lsm().put(b"k", b"v").unwrap();
        let t = LocalTransport::new();
        let e = RepairSession::run(&[&a, &b], &t, &RepairOptions::default()).unwrap_err();
        assert!(matches!(e, Error::RepairMismatch(_)), "{e}");
        assert_eq!(t.frames_sent(), 0);
        assert!(b.scan().unwrap().is_empty());
    }
    for s in stores {
        assert!(s.close().unwrap().is_clean());
    }
}

/// Range deletes converge (issue 20): replica a deleted `key010..key030` (its range
/// tombstone in a segment) and wrote `key015` after it; replica b missed the delete and
/// holds a cell under it that only it has (`key020`) and one newer than it (`key025`,
/// in its memtable); a third replica deleted an overlapping, older range
/// (`key028..key040`, in its memtable). After one repair every replica reads the same
/// keys as the union of the deletes says, holds the same range tombstones, and a second
/// repair streams nothing.
#[test]
fn range_deletes_converge_and_a_second_repair_streams_nothing() {
    for mode in [DiskAccessMode::Mmap, DiskAccessMode::Standard] {
        for par in [Parallelism::Sequential, Parallelism::Parallel] {
            for n in [2, 3] {
                let cluster = Cluster::new(n, mode);
                {
                    let rs = cluster.replicas("t");
                    write_range_delete_divergence(&rs);
                    check_range_delete_convergence(&rs, par);
                }
                cluster.close();
            }
        }
    }
}

fn put_at(r: &TableReplica<'_>, k: u32, v: &str, ts: u64) {
    r.lsm()
        .write(WriteBatch::new().put_at(key(k), v, ts))
        .unwrap();
}

fn write_range_delete_divergence(rs: &[TableReplica<'_>]) {
    for r in rs {
        let mut b = WriteBatch::new();
        for k in 0..KEYS {
            b.put_at(key(k), "common", 100);
        }
        r.lsm().write(&b).unwrap();
        r.lsm().flush().unwrap();
    }
    let a = rs[0].lsm();
    a.delete_range_at(key(10)..key(30), 200).unwrap();
    a.flush().unwrap();
    put_at(&rs[0], 15, "a-after", 300);
    put_at(&rs[1], 20, "b-under", 150);
    rs[1].lsm().flush().unwrap();
    put_at(&rs[1], 25, "b-after", 250);
    if let Some(c) = rs.get(2) {
        c.lsm().delete_range_at(key(28)..key(40), 120).unwrap();
    }
}

/// What every replica reads once repaired.
fn range_delete_expected(n: usize, k: u32) -> Option<&'static str> {
    match k {
        15 => Some("a-after"),
        25 => Some("b-after"),
        10..30 => None,
        30..40 if n == 3 => None,
        _ => Some("common"),
    }
}

fn check_range_delete_convergence(rs: &[TableReplica<'_>], par: Parallelism) {
    let mut union = segstore::repair::RangeTombstones::new();
    for r in rs {
        union.extend(&r.lsm().range_tombstones().unwrap());
    }
    let mut opts = RepairOptions::default();
    opts.depth = 6;
    opts.parallelism = par;
    let report = run(rs, &opts);
    assert!(report.range_tombstones_differ, "{report}");
    assert!(report.total_range_tombstones_streamed() > 0, "{report}");
    assert!(report.converged(), "{report}");
    for k in 0..KEYS {
        let want = range_delete_expected(rs.len(), k);
        for r in rs {
            let got = r.lsm().get(key(k)).unwrap();
            assert_eq!(
                got.as_deref(),
                want.map(str::as_bytes),
                "key {k} on {}",
                r.id()
            );
        }
    }
    let first = rs[0].scan().unwrap();
    for r in rs {
        assert_eq!(r.lsm().range_tombstones().unwrap(), union, "{}", r.id());
        assert_eq!(r.scan().unwrap(), first, "{}", r.id());
    }
    let again = run(rs, &opts);
    assert!(again.was_in_sync(), "{again}");
    assert_eq!(again.total_rows_streamed(), 0, "{again}");
    assert_eq!(again.total_range_tombstones_streamed(), 0, "{again}");
    assert_eq!(again.roots_before, report.roots_after);
}

/// TTL (issue 20): expiring cells carry their expiry through repair. A cell expired on
/// one replica and missing on the other reaches it as the tombstone it has become; a
/// live expiring cell reaches the other replica with its expiry (it expires there at
/// the same moment); a cell one replica compacted into a tombstone and the other holds
/// unexpired-on-disk (expired on the clock) hashes the same on both. A second repair
/// streams nothing.
#[test]
fn expiring_cells_converge_with_their_expiry() {
    const T0: u64 = 1_700_000_000_000_000;
    const SEC: u64 = 1_000_000;
    for par in [Parallelism::Sequential, Parallelism::Parallel] {
        let cluster = Cluster::new(2, DiskAccessMode::Mmap);
        {
            let rs = cluster.replicas("t");
            for r in &rs {
                r.store().set_expiry_clock(Some(T0));
                let mut b = WriteBatch::new();
                for k in 0..KEYS {
                    b.put_at(key(k), "common", 100);
                }
                // Key 3 on both, expiring in 10 s.
                b.put_ttl_at(key(3), "both", 200, std::time::Duration::from_secs(10));
                r.lsm().write(&b).unwrap();
                r.lsm().flush().unwrap();
            }
            let ttl = |r: &TableReplica<'_>, k: u32, v: &str, secs: u64| {
                let d = std::time::Duration::from_secs(secs);
                r.lsm()
                    .write(WriteBatch::new().put_ttl_at(key(k), v, 200, d))
                    .unwrap();
            };
            ttl(&rs[0], 1, "expired", 10);
            ttl(&rs[1], 2, "live", 1000);
            for r in &rs {
                r.store().set_expiry_clock(Some(T0 + 100 * SEC));
            }
            // Replica 0 compacts key 3 into a tombstone; replica 1 does not.
            rs[0].lsm().flush().unwrap();
            rs[0].lsm().compact().unwrap();
            let c3 = rs[0].get(&key(3)).unwrap().unwrap();
            assert!(c3.tombstone && c3.expires == T0 + 10 * SEC, "{c3:?}");
            assert!(!rs[1].get(&key(3)).unwrap().unwrap().tombstone);

            let mut opts = RepairOptions::default();
            opts.depth = 6;
            opts.parallelism = par;
            let report = run(&rs, &opts);
            assert!(!report.was_in_sync(), "{report}");
            assert!(report.converged(), "{report}");
            for r in &rs {
                for k in 0..KEYS {
                    let want = match k {
                        1 | 3 => None,
                        2 => Some(&b"live"[..]),
                        _ => Some(&b"common"[..]),
                    };
                    assert_eq!(r.lsm().get(key(k)).unwrap().as_deref(), want, "key {k}");
                }
                let c2 = r.get(&key(2)).unwrap().unwrap();
                assert_eq!(c2.expires, T0 + 1000 * SEC, "key 2's expiry on {}", r.id());
                let c1 = r.get(&key(1)).unwrap().unwrap();
                assert_eq!(c1.expires, T0 + 10 * SEC, "key 1 on {}: {c1:?}", r.id());
            }
            let again = run(&rs, &opts);
            assert!(again.was_in_sync(), "{again}");
            assert_eq!(again.total_rows_streamed(), 0, "{again}");
            // Past key 2's expiry both replicas see it gone.
            for r in &rs {
                r.store().set_expiry_clock(Some(T0 + 1000 * SEC));
                assert_eq!(r.lsm().get(key(2)).unwrap(), None);
            }
        }
        cluster.close();
    }
}
