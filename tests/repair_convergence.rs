//! Repair converges replicas (issue 5), under the Windows emulation with deferred
//! deletion and leak tracking, in every `disk_access_mode` and both parallelism modes:
//! after one repair every replica answers every key the same (tombstones included) and
//! as the union of all writes says it must; a second repair finds no difference; the
//! ephemeral snapshots of sequential repair are cleared (their deletion deferred while
//! mapped); every store closes clean. Histories hold range deletes too (issue 20): after
//! one repair every replica holds the union of the range tombstones, hides the same
//! cells, and a second repair streams neither rows nor range tombstones.
//!
//! `PROPTEST_CASES=500 cargo test --release --test repair_convergence` runs it deep.

mod common;

use std::collections::BTreeMap;

use common::test_config;
use proptest::prelude::*;
use segstore::repair::{
    newer, token, LocalTransport, Parallelism, RangeTombstone, RangeTombstones, RepairOptions,
    RepairReport, RepairSession, Replica, ReplicaId, Row, SegmentReplica, Shape, SnapshotStatus,
    TokenRange,
};
use segstore::{DiskAccessMode, Error, FileRules, Store};

/// One write in a history: which replicas it reached, and whether those replicas flush
/// their buffered writes into a segment afterwards. With `range: Some(len)` it is a
/// range delete of the `len` keys from `key` on, at `ts`.
#[derive(Debug, Clone)]
struct Step {
    key: u8,
    delete: bool,
    value: u8,
    ts: u64,
    reach: u8,
    flush: bool,
    range: Option<u8>,
}

fn range_of(s: &Step, len: u8) -> RangeTombstone {
    RangeTombstone {
        start: key(s.key),
        end: Some(key(s.key + len)),
        ts: s.ts,
    }
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

fn row_of(s: &Step) -> Row {
    Row {
        key: key(s.key),
        value: if s.delete {
            Vec::new()
        } else {
            format!("v{}", s.value).into_bytes()
        },
        ts: s.ts,
        tombstone: s.delete,
        expires: 0,
    }
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..40,
        prop::bool::weighted(0.25),
        0u8..4,
        1u64..12,
        1u8..8,
        prop::bool::weighted(0.2),
        prop::option::weighted(0.08, 1u8..8),
    )
        .prop_map(|(key, delete, value, ts, reach, flush, range)| Step {
            key,
            delete,
            value,
            ts,
            reach,
            flush,
            range,
        })
}

struct Cluster {
    _dirs: Vec<tempfile::TempDir>,
    stores: Vec<Store>,
    rules: Vec<FileRules>,
}

impl Cluster {
    fn new(n: usize, mode: DiskAccessMode) -> Cluster {
        let mut dirs = Vec::new();
        let mut stores = Vec::new();
        let mut rules = Vec::new();
        for _ in 0..n {
            let d = tempfile::tempdir().unwrap();
            let r = FileRules::windows_emulation();
            stores.push(Store::open(d.path(), test_config(mode, r.clone())).unwrap());
            dirs.push(d);
            rules.push(r);
        }
        Cluster {
            _dirs: dirs,
            stores,
            rules,
        }
    }

    fn replicas(&self, table: &str) -> Vec<SegmentReplica<'_>> {
        self.stores
            .iter()
            .enumerate()
            .map(|(i, s)| SegmentReplica::new(ReplicaId(i as u64 + 1), s, table).unwrap())
            .collect()
    }

    /// Close every store: clean, no snapshot left, and the deleter never tried to delete
    /// a mapped file.
    fn close(self) {
        for (s, r) in self.stores.into_iter().zip(&self.rules) {
            let dir = s.dir().to_path_buf();
            assert!(s.list_snapshots().unwrap().is_empty());
            let report = s.close().unwrap();
            assert!(report.is_clean(), "{report:?}");
            let snaps = dir.join("snapshots");
            let left: Vec<_> = std::fs::read_dir(&snaps)
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

/// What every replica must end with: the winner of every cell written, and the union of
/// every range tombstone.
struct Model {
    rows: BTreeMap<Vec<u8>, Row>,
    ranges: RangeTombstones,
}

impl Model {
    /// What `get` answers: the winner, or a range tombstone at least as new as a point
    /// tombstone at its timestamp.
    fn get(&self, k: &[u8]) -> Option<Row> {
        let w = self.rows.get(k).cloned();
        match self.ranges.cover_ts(k) {
            Some(ts) if w.as_ref().is_none_or(|w| w.ts <= ts) => Some(Row {
                key: k.to_vec(),
                value: Vec::new(),
                ts,
                tombstone: true,
                expires: 0,
            }),
            _ => w,
        }
    }

    /// What a scan yields: the winners no range tombstone deletes.
    fn scan(&self) -> Vec<Row> {
        let rows = self.rows.values();
        rows.filter(|r| !self.ranges.deletes(&r.key, r.ts))
            .cloned()
            .collect()
    }
}

/// Apply `history` to the replicas; returns the model.
fn apply_history(replicas: &[SegmentReplica<'_>], history: &[Step]) -> Model {
    let n = replicas.len();
    let mut buffers: Vec<(Vec<Row>, RangeTombstones)> = vec![Default::default(); n];
    let mut model: BTreeMap<Vec<u8>, Row> = BTreeMap::new();
    let mut ranges = RangeTombstones::new();
    for s in history {
        let row = row_of(s);
        let mut reach = s.reach as usize & ((1 << n) - 1);
        if reach == 0 {
            reach = (1 << n) - 1;
        }
        for (i, (buf, rbuf)) in buffers.iter_mut().enumerate() {
            if reach & (1 << i) != 0 {
                match s.range {
                    Some(len) => rbuf.insert(&range_of(s, len)),
                    None => buf.push(row.clone()),
                }
                if s.flush {
                    let rs = std::mem::take(rbuf);
                    replicas[i]
                        .write_with_ranges(std::mem::take(buf), &rs)
                        .unwrap();
                }
            }
        }
        if let Some(len) = s.range {
            ranges.insert(&range_of(s, len));
            continue;
        }
        let w = match model.remove(&row.key) {
            Some(old) => newer(old, row),
            None => row,
        };
        model.insert(w.key.clone(), w);
    }
    for (r, (buf, rbuf)) in replicas.iter().zip(buffers) {
        r.write_with_ranges(buf, &rbuf).unwrap();
    }
    Model {
        rows: model,
        ranges,
    }
}

fn run(replicas: &[SegmentReplica<'_>], opts: &RepairOptions) -> RepairReport {
    let dyns: Vec<&dyn Replica> = replicas.iter().map(|r| r as &dyn Replica).collect();
    let t = LocalTransport::new();
    RepairSession::run(&dyns, &t, opts).unwrap()
}

/// The whole check for one history.
fn check_convergence(
    n: usize,
    mode: DiskAccessMode,
    parallelism: Parallelism,
    depth: u8,
    history: &[Step],
) {
    let cluster = Cluster::new(n, mode);
    {
        let replicas = cluster.replicas("t");
        let model = apply_history(&replicas, history);
        let before: Vec<(Vec<Row>, RangeTombstones)> = replicas
            .iter()
            .map(|r| (r.scan().unwrap(), r.range_tombstones()))
            .collect();
        let mut opts = RepairOptions::default();
        opts.depth = depth;
        opts.parallelism = parallelism;
        opts.batch_rows = 7; // several batches per stream
        let report = run(&replicas, &opts);
        let in_sync = before.iter().all(|b| *b == before[0]);
        assert_eq!(report.was_in_sync(), in_sync, "{report}");
        assert!(report.converged(), "{report}");

        // Every replica answers every key as the model says, tombstones included, and
        // holds every range tombstone.
        for k in 0..48u8 {
            let want = model.get(&key(k));
            for r in &replicas {
                assert_eq!(r.get(&key(k)).unwrap(), want, "key {k} on {}", r.id());
            }
        }
        let want = model.scan();
        for r in &replicas {
            assert_eq!(r.scan().unwrap(), want);
            assert_eq!(r.range_tombstones(), model.ranges, "{}", r.id());
        }

        // Sequential: one cleared snapshot per replica, no reader left on any.
        if parallelism == Parallelism::Sequential {
            assert_eq!(report.snapshots.len(), n);
            for s in &report.snapshots {
                assert_eq!(s.after_close.mappings, 0, "{report}");
            }
        } else {
            assert!(report.snapshots.is_empty());
        }

        // A second repair finds nothing.
        let again = run(&replicas, &opts);
        assert!(again.was_in_sync(), "{again}");
        assert_eq!(again.total_rows_streamed(), 0);
        assert_eq!(again.total_range_tombstones_streamed(), 0, "{again}");
        assert_eq!(again.roots_before, report.roots_after);
    }
    cluster.close();
}

fn config() -> ProptestConfig {
    // CI keeps it modest; PROPTEST_CASES overrides.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_divergent_histories_converge(
        n in 2usize..=3,
        mode in prop::sample::select(DiskAccessMode::all().to_vec()),
        sequential: bool,
        depth in 0u8..=10,
        history in proptest::collection::vec(step(), 0..60),
    ) {
        let par = if sequential { Parallelism::Sequential } else { Parallelism::Parallel };
        check_convergence(n, mode, par, depth, &history);
    }
}

/// A fixed history that exercises every kind of divergence.
fn fixed_history() -> Vec<Step> {
    let mut h = Vec::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..120u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        h.push(Step {
            key: (x % 40) as u8,
            delete: x % 5 == 0,
            value: (x >> 8) as u8 % 4,
            ts: 1 + (x >> 16) % 10,
            reach: 1 + ((x >> 24) % 7) as u8,
            flush: i % 9 == 0,
            range: (x % 17 == 0).then_some(1 + ((x >> 32) % 7) as u8),
        });
    }
    h
}

#[test]
fn every_mode_and_parallelism_on_two_and_three_replicas() {
    let h = fixed_history();
    assert!(h.iter().filter(|s| s.range.is_some()).count() >= 3);
    for mode in DiskAccessMode::all() {
        for par in [Parallelism::Sequential, Parallelism::Parallel] {
            for n in [2, 3] {
                check_convergence(n, mode, par, 8, &h);
            }
        }
    }
}

fn put(k: u32, v: &str, ts: u64) -> Row {
    Row {
        key: format!("k{k:04}").into_bytes(),
        value: v.as_bytes().to_vec(),
        ts,
        tombstone: false,
        expires: 0,
    }
}

fn del(k: u32, ts: u64) -> Row {
    Row {
        key: format!("k{k:04}").into_bytes(),
        value: Vec::new(),
        ts,
        tombstone: true,
        expires: 0,
    }
}

/// Rows streamed in each direction are exactly the rows each side holds in the leaves
/// that differ; snapshot deletions wait while mapped and finish by close.
#[test]
fn streams_each_way_exactly_the_differing_leaves_and_snapshots_wait_for_mappings() {
    let cluster = Cluster::new(2, DiskAccessMode::Mmap);
    let depth = 12;
    {
        let rs = cluster.replicas("t");
        let common: Vec<Row> = (0..500).map(|k| put(k, "same", 1)).collect();
        rs[0].write(common.clone()).unwrap();
        rs[1].write(common).unwrap();
        // a: a newer value, a delete b missed, a key b lacks. b: a newer value, a
        // different timestamp with the same value.
        rs[0]
            .write(vec![put(1, "new-a", 5), del(2, 5), put(900, "only-a", 5)])
            .unwrap();
        rs[1]
            .write(vec![put(3, "new-b", 5), put(4, "same", 2)])
            .unwrap();

        let shape = Shape::new(TokenRange::FULL, depth).unwrap();
        let leaf = |k: &[u8]| shape.leaf_of(token(k)).unwrap();
        let changed: std::collections::BTreeSet<usize> = [1u32, 2, 900, 3, 4]
            .iter()
            .map(|&k| leaf(format!("k{k:04}").as_bytes()))
            .collect();
        let count = |r: &SegmentReplica<'_>| {
            r.scan()
                .unwrap()
                .iter()
                .filter(|row| changed.contains(&leaf(&row.key)))
                .count() as u64
        };
        let (a_rows, b_rows) = (count(&rs[0]), count(&rs[1]));

        let mut opts = RepairOptions::default();
        opts.depth = depth;
        opts.parallelism = Parallelism::Sequential;
        let report = run(&rs, &opts);
        println!("{report}");
        let (a, b) = (rs[0].id(), rs[1].id());
        assert_eq!(report.differing_leaves, changed.len());
        assert_eq!(report.rows_streamed(a, b), a_rows);
        assert_eq!(report.rows_streamed(b, a), b_rows);
        assert_ne!(report.roots_before[0].1, report.roots_before[1].1);
        assert!(report.converged());
        assert_eq!(rs[1].get(b"k0002").unwrap(), Some(del(2, 5)));
        assert_eq!(rs[0].get(b"k0003").unwrap(), Some(put(3, "new-b", 5)));
        assert_eq!(rs[0].get(b"k0004").unwrap(), Some(put(4, "same", 2)));

        // Under the Windows rule, with data and index mapped: clearing while the tree's
        // reader was open left the mapped files pending; once the reader closed, no
        // snapshot mapping is left, but the files' hard links in the live table are
        // still mapped, so their deletion still waits (until close).
        for s in &report.snapshots {
            assert!(s.while_open.mappings > 0, "{report}");
            assert!(s.while_open.pending_deletions > 0, "{report}");
            assert_eq!(s.after_close.mappings, 0, "{report}");
        }
        let stats = rs[0].store().stats();
        assert!(stats.deletions.deferred_mapped > 0, "{stats:?}");
        assert!(stats.deletions.pending > 0, "{stats:?}");

        // Compaction retires the live segments: their last mappings close and the
        // snapshot's deletions complete at once, before any close.
        let tag = &report.snapshots[0].tag;
        assert!(rs[0].compact().unwrap() >= 2);
        assert_eq!(rs[0].snapshot_status(tag), SnapshotStatus::default());
        assert!(!rs[0].store().dir().join("snapshots").join(tag).exists());
        assert_eq!(rs[0].store().stats().deletions.pending, 0);
        assert!(run(&rs, &opts).was_in_sync());
    }
    cluster.close(); // checks the snapshot files are gone and everything is clean
}

#[test]
fn standard_mode_snapshots_are_deleted_at_once() {
    let cluster = Cluster::new(2, DiskAccessMode::Standard);
    {
        let rs = cluster.replicas("t");
        rs[0].write(vec![put(1, "a", 1)]).unwrap();
        rs[1].write(vec![put(2, "b", 1)]).unwrap();
        let mut opts = RepairOptions::default();
        opts.parallelism = Parallelism::Sequential;
        let report = run(&rs, &opts);
        for s in &report.snapshots {
            assert_eq!(s.while_open.mappings, 0);
            assert_eq!(s.while_open.pending_deletions, 0, "{report}");
        }
        assert!(report.converged());
    }
    cluster.close();
}

#[test]
fn different_tables_or_settings_are_refused() {
    let cluster = Cluster::new(2, DiskAccessMode::Auto);
    {
        let a = SegmentReplica::new(ReplicaId(1), &cluster.stores[0], "t").unwrap();
        let b = SegmentReplica::new(ReplicaId(2), &cluster.stores[1], "u").unwrap();
        a.write(vec![put(1, "a", 1)]).unwrap();
        let t = LocalTransport::new();
        let opts = RepairOptions::default();
        let e = RepairSession::run(&[&a, &b], &t, &opts).unwrap_err();
        assert!(matches!(e, Error::RepairMismatch(_)), "{e}");
        assert!(e.to_string().contains("\"u\""), "{e}");

        let b = SegmentReplica::new(ReplicaId(2), &cluster.stores[1], "t")
            .unwrap()
            .with_settings("gc_grace=10");
        let e = RepairSession::run(&[&a, &b], &t, &opts).unwrap_err();
        assert!(matches!(e, Error::RepairMismatch(_)), "{e}");
        assert_eq!(t.frames_sent(), 0, "refused before anything moved");
        assert!(b.scan().unwrap().is_empty());

        let e = RepairSession::run(&[&a], &t, &opts).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let a2 = SegmentReplica::new(ReplicaId(1), &cluster.stores[1], "t").unwrap();
        let e = RepairSession::run(&[&a, &a2], &t, &opts).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    cluster.close();
}

#[test]
fn a_corrupted_frame_fails_the_session_and_its_snapshots_are_still_cleared() {
    let cluster = Cluster::new(2, DiskAccessMode::Mmap);
    {
        let rs = cluster.replicas("t");
        rs[0]
            .write((0..50).map(|k| put(k, "a", 1)).collect())
            .unwrap();
        // A failed session may still have applied the batches that arrived before the
        // corrupted frame, so each attempt starts from a fresh divergence: replica 2
        // rewrites every key with a newer timestamp, leaving 50 rows to stream.
        let mut stamp = 1;
        let mut diverge = || {
            stamp += 1;
            rs[1]
                .write((0..50).map(|k| put(k, "b", stamp)).collect())
                .unwrap();
            stamp
        };
        let dyns: Vec<&dyn Replica> = rs.iter().map(|r| r as &dyn Replica).collect();
        for nth in 1..=4 {
            diverge();
            let t = LocalTransport::corrupting_frame(nth);
            let mut opts = RepairOptions::default();
            opts.parallelism = Parallelism::Sequential;
            opts.batch_rows = 10;
            let e = RepairSession::run(&dyns, &t, &opts).unwrap_err();
            assert!(matches!(e, Error::BadMessage(_)), "frame {nth}: {e}");
            for s in &cluster.stores {
                assert!(s.list_snapshots().unwrap().is_empty());
            }
        }
        // In parallel mode a replica waiting for a stream that will never come gives up
        // at once when another replica fails, and the root cause is reported.
        for nth in 3..=6 {
            diverge();
            let t = LocalTransport::corrupting_frame(nth);
            let mut opts = RepairOptions::default();
            opts.batch_rows = 10;
            opts.timeout = std::time::Duration::from_secs(30);
            let start = std::time::Instant::now();
            let e = RepairSession::run(&dyns, &t, &opts).unwrap_err();
            assert!(matches!(e, Error::BadMessage(_)), "frame {nth}: {e}");
            assert!(start.elapsed() < std::time::Duration::from_secs(10));
        }
        // A clean run still converges afterwards.
        let last = diverge();
        let report = run(&rs, &RepairOptions::default());
        assert!(report.converged());
        assert_eq!(rs[0].get(b"k0007").unwrap(), Some(put(7, "b", last)));
    }
    cluster.close();
}

#[test]
fn a_sub_range_repair_touches_only_that_range() {
    let cluster = Cluster::new(2, DiskAccessMode::MmapIndexOnly);
    {
        let rs = cluster.replicas("t");
        rs[0]
            .write((0..300).map(|k| put(k, "a", 1)).collect())
            .unwrap();
        let range = TokenRange::new(0, u64::MAX / 2).unwrap();
        let mut opts = RepairOptions::default();
        opts.range = range;
        opts.depth = 6;
        let report = run(&rs, &opts);
        assert!(report.converged());
        let inside = rs[0]
            .scan()
            .unwrap()
            .iter()
            .filter(|r| range.contains(token(&r.key)))
            .count();
        assert_eq!(report.total_rows_streamed(), inside as u64);
        let b: Vec<Row> = rs[1].scan().unwrap();
        assert_eq!(b.len(), inside);
        assert!(b.iter().all(|r| range.contains(token(&r.key))));
        for r in &report.differing_ranges {
            assert!(r.start >= range.start && r.end <= range.end);
        }
    }
    cluster.close();
}

/// Replicas whose rows agree but whose range tombstones differ (a range delete over
/// keys no replica holds): the leaves agree, the range tombstone digests do not, and a
/// stream carries the range tombstones alone.
#[test]
fn range_tombstones_alone_are_streamed_where_only_they_differ() {
    for par in [Parallelism::Sequential, Parallelism::Parallel] {
        let cluster = Cluster::new(3, DiskAccessMode::Mmap);
        {
            let rs = cluster.replicas("t");
            for r in &rs {
                r.write(vec![put(1, "a", 1)]).unwrap();
            }
            let gone = |a: &str, b: &str, ts| RangeTombstone {
                start: a.into(),
                end: Some(b.into()),
                ts,
            };
            let only_a = RangeTombstones::from_list(&[gone("x", "z", 5)]);
            rs[0].write_with_ranges(Vec::new(), &only_a).unwrap();
            let mut opts = RepairOptions::default();
            opts.parallelism = par;
            let report = run(&rs, &opts);
            println!("{report}");
            assert_eq!(report.differing_leaves, 0, "{report}");
            assert!(report.range_tombstones_differ && !report.was_in_sync());
            assert_eq!(report.total_rows_streamed(), 0);
            // The first replica of the class sends to each of the two others.
            assert_eq!(report.total_range_tombstones_streamed(), 2, "{report}");
            assert!(report.converged(), "{report}");
            for r in &rs {
                assert_eq!(r.range_tombstones(), only_a, "{}", r.id());
            }
            let again = run(&rs, &opts);
            assert!(again.was_in_sync(), "{again}");
            assert_eq!(again.total_range_tombstones_streamed(), 0);
        }
        cluster.close();
    }
}
