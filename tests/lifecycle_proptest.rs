//! Property test of deletion ordering (invariants 1, 3, 4): a state machine over random
//! sequences of flushes, handle and iterator takes and drops, compactions, snapshots,
//! snapshot reads and clears, crashes (drop without close) and reopens, and closes,
//! under `DeferWhileMapped` and the Windows emulation (with and without random delete
//! refusals). After every step:
//! - the emulation never had to refuse a delete of a mapped file (the deleter never
//!   tried one: its ground truth is /proc/self/maps);
//! - every live segment's files exist and every read returns the model's value;
//! - every deletion waiting on mappings names an identity that is mapped right now
//!   (so it ran at the last close of its mappings);
//! - after a clean close (without random refusals), the directory holds exactly the live
//!   segments, the live snapshots and metadata.
//!
//! `PROPTEST_CASES=2000 cargo test --release --test lifecycle_proptest` runs it deep.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{read, test_config};
use proptest::prelude::*;
use segstore::io::registry;
use segstore::lifecycle::{PendingReason, SegmentHandle, SegmentSet};
use segstore::memory::FileId;
use segstore::segment::{Component, SegmentIter, SegmentName};
use segstore::{DiskAccessMode, FileRules, SnapshotView, Store};

#[derive(Debug, Clone)]
enum Op {
    Flush { keys: Vec<u8>, ts_bump: u8 },
    TakeHandle(usize),
    DropHandle(usize),
    TakeIter(usize),
    DropIter(usize),
    Compact,
    Snapshot(u8),
    OpenSnapshot(u8),
    DropSnapshotView(usize),
    ClearSnapshot(u8),
    Crash,
    CloseReopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (proptest::collection::vec(0u8..40, 1..12), any::<u8>()).prop_map(|(keys, ts_bump)| Op::Flush { keys, ts_bump }),
        3 => any::<usize>().prop_map(Op::TakeHandle),
        2 => any::<usize>().prop_map(Op::DropHandle),
        2 => any::<usize>().prop_map(Op::TakeIter),
        2 => any::<usize>().prop_map(Op::DropIter),
        2 => Just(Op::Compact),
        2 => (0u8..3).prop_map(Op::Snapshot),
        2 => (0u8..3).prop_map(Op::OpenSnapshot),
        1 => any::<usize>().prop_map(Op::DropSnapshotView),
        2 => (0u8..3).prop_map(Op::ClearSnapshot),
        1 => Just(Op::Crash),
        1 => Just(Op::CloseReopen),
    ]
}

type Model = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

struct World {
    dir: PathBuf,
    mode: DiskAccessMode,
    rules: FileRules,
    store: Option<Store>,
    set: Option<Arc<SegmentSet>>,
    model: Model,
    snapshots: BTreeMap<String, Model>,
    handles: Vec<SegmentHandle>,
    iters: Vec<SegmentIter<SegmentHandle>>,
    views: Vec<SnapshotView>,
    ts: u64,
}

impl World {
    fn open(&mut self) {
        let store = Store::open(&self.dir, test_config(self.mode, self.rules.clone())).unwrap();
        self.set = Some(store.segments("t").unwrap());
        self.store = Some(store);
    }

    fn store(&self) -> &Store {
        self.store.as_ref().unwrap()
    }

    fn set(&self) -> &SegmentSet {
        self.set.as_ref().unwrap()
    }

    fn drop_everything_held(&mut self) {
        self.handles.clear();
        self.iters.clear();
        self.views.clear();
        self.set = None;
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Flush { keys, ts_bump } => {
                let keys: BTreeSet<u8> = keys.iter().copied().collect();
                self.ts += 1 + *ts_bump as u64 % 3;
                let mut w = self.set().writer().unwrap();
                let name = w.name().clone();
                for k in keys {
                    let key = format!("key{k:03}").into_bytes();
                    let value = format!("{k}@{}", self.ts).into_bytes();
                    w.add(&key, &value, self.ts, false).unwrap();
                    self.model.insert(key, (value, self.ts));
                }
                w.finish().unwrap();
                self.set().add(&[name]).unwrap();
            }
            Op::TakeHandle(i) => {
                let v = self.set().view();
                if !v.segments.is_empty() {
                    self.handles.push(v.segments[i % v.segments.len()].clone());
                }
            }
            Op::DropHandle(i) => {
                if !self.handles.is_empty() {
                    let n = self.handles.len();
                    self.handles.remove(i % n);
                }
            }
            Op::TakeIter(i) => {
                let v = self.set().view();
                if !v.segments.is_empty() {
                    let h = v.segments[i % v.segments.len()].clone();
                    let mut it = SegmentIter::new::<&[u8]>(h, ..).unwrap();
                    assert!(it.next().unwrap().is_ok());
                    self.iters.push(it);
                }
            }
            Op::DropIter(i) => {
                if !self.iters.is_empty() {
                    let n = self.iters.len();
                    let mut it = self.iters.remove(i % n);
                    // Reading on after the segment became obsolete still works.
                    for e in it.by_ref() {
                        e.unwrap();
                    }
                }
            }
            Op::Compact => {
                let v = self.set().view();
                if v.segments.len() < 2 {
                    return;
                }
                let mut merged: Model = BTreeMap::new();
                for h in &v.segments {
                    for e in h.iter().unwrap() {
                        let e = e.unwrap();
                        let newer = merged.get(&e.key).is_none_or(|(_, ts)| e.ts > *ts);
                        if newer {
                            merged.insert(e.key, (e.value, e.ts));
                        }
                    }
                }
                let old: Vec<u64> = v.segments.iter().map(|h| h.name().id).collect();
                drop(v);
                let mut w = self.set().writer().unwrap();
                let name = w.name().clone();
                for (k, (val, ts)) in &merged {
                    w.add(k, val, *ts, false).unwrap();
                }
                w.finish().unwrap();
                self.set().replace(&old, &[name]).unwrap();
            }
            Op::Snapshot(t) => {
                let tag = format!("s{t}");
                if self.snapshots.contains_key(&tag) {
                    assert!(self.store().snapshot(&tag, None).is_err());
                } else if self.store().snapshot(&tag, None).is_ok() {
                    self.snapshots.insert(tag, self.model.clone());
                } else {
                    // Only refused while a clear of the same tag is still pending.
                    assert!(self.store().dir().join("snapshots").join(&tag).exists());
                }
            }
            Op::OpenSnapshot(t) => {
                let tag = format!("s{t}");
                if let Some(model) = self.snapshots.get(&tag) {
                    let view = self.store().open_snapshot(&tag).unwrap();
                    for (k, (v, _)) in model.iter().take(5) {
                        let got = newest(&view.tables["t"], k);
                        assert_eq!(got.as_ref(), Some(v), "snapshot {tag} key {k:?}");
                    }
                    self.views.push(view);
                } else {
                    assert!(self.store().open_snapshot(&tag).is_err());
                }
            }
            Op::DropSnapshotView(i) => {
                if !self.views.is_empty() {
                    let n = self.views.len();
                    self.views.remove(i % n);
                }
            }
            Op::ClearSnapshot(t) => {
                let tag = format!("s{t}");
                let r = self.store().clear_snapshot(&tag);
                assert_eq!(r.is_ok(), self.snapshots.remove(&tag).is_some(), "{r:?}");
            }
            Op::Crash => {
                // A crash: every mapping vanishes with the process, nothing is closed.
                self.drop_everything_held();
                drop(self.store.take());
                self.open();
            }
            Op::CloseReopen => {
                self.drop_everything_held();
                let store = self.store.take().unwrap();
                let dir = store.dir().to_path_buf();
                let report = store.close().unwrap();
                assert!(report.leaked_handles.is_empty(), "{report:?}");
                assert!(report.leaked_mappings.is_empty(), "{report:?}");
                if self.rules.counts().refused_random == 0 {
                    assert!(report.pending_deletions.is_empty(), "{report:?}");
                    self.check_directory_is_exact(&dir);
                }
                self.open();
            }
        }
    }

    fn check(&self) {
        assert_eq!(
            self.rules.counts().refused_mapped,
            0,
            "a delete of a mapped file was attempted"
        );
        let dir = self.store().dir();
        for id in self.set().live_ids() {
            let n = SegmentName::new("t", id).unwrap();
            for c in Component::ALL {
                assert!(
                    n.path(dir, c).exists(),
                    "live file {} missing",
                    n.file_name(c)
                );
            }
        }
        for (k, (v, _)) in &self.model {
            assert_eq!(read(self.set(), k).as_ref(), Some(v), "key {k:?}");
        }
        for tag in self.snapshots.keys() {
            assert!(dir.join("snapshots").join(tag).join("manifest").exists());
        }
        for p in self.store().deleter().pending() {
            if p.reason == PendingReason::Mapped {
                let id = FileId::of_path(&dir.join(&p.path)).unwrap();
                assert!(
                    registry().is_mapped(id),
                    "{} waits for mappings that are closed",
                    p.path.display()
                );
            }
        }
    }

    fn check_directory_is_exact(&self, dir: &Path) {
        let m = segstore::lifecycle::Manifest::load(&dir.join("t.manifest")).unwrap();
        let mut want: BTreeSet<String> = ["LOCK", "t.manifest"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for id in &m.segments {
            for c in Component::ALL {
                want.insert(SegmentName::new("t", *id).unwrap().file_name(c));
            }
        }
        let mut have: BTreeSet<String> = common::files(dir).into_iter().collect();
        have.remove("deletions.pending");
        have.remove("snapshots");
        have.remove("commitlog");
        assert_eq!(have, want);
        let snaps = dir.join("snapshots");
        let have_snaps: BTreeSet<String> = if snaps.exists() {
            common::files(&snaps).into_iter().collect()
        } else {
            BTreeSet::new()
        };
        let want_snaps: BTreeSet<String> = self.snapshots.keys().cloned().collect();
        assert_eq!(have_snaps, want_snaps);
    }
}

fn newest(handles: &[SegmentHandle], key: &[u8]) -> Option<Vec<u8>> {
    let mut best: Option<(u64, Vec<u8>)> = None;
    for h in handles {
        if let Some((ts, v)) = h.get_with(key, |r| (r.ts, r.value.to_vec())).unwrap() {
            if best.as_ref().is_none_or(|(t, _)| ts > *t) {
                best = Some((ts, v));
            }
        }
    }
    best.map(|(_, v)| v)
}

fn run(ops: Vec<Op>, mode: DiskAccessMode, rules: FileRules) {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = World {
        dir: tmp.path().to_path_buf(),
        mode,
        rules,
        store: None,
        set: None,
        model: BTreeMap::new(),
        snapshots: BTreeMap::new(),
        handles: Vec::new(),
        iters: Vec::new(),
        views: Vec::new(),
        ts: 0,
    };
    w.open();
    for op in &ops {
        w.apply(op);
        w.check();
    }
    w.apply(&Op::CloseReopen);
    w.check();
    w.drop_everything_held();
    let store = w.store.take().unwrap();
    let dir = store.dir().to_path_buf();
    let report = store.close().unwrap();
    assert!(report.leaked_handles.is_empty() && report.leaked_mappings.is_empty());
    assert_eq!(registry().stats_under(&dir).maps, 0);
}

fn config() -> ProptestConfig {
    // CI keeps it modest; PROPTEST_CASES overrides.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(48);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn deletion_ordering_under_windows_rule(ops in proptest::collection::vec(op(), 1..40), mode in prop_oneof![Just(DiskAccessMode::Mmap), Just(DiskAccessMode::Auto), Just(DiskAccessMode::Standard)]) {
        run(ops, mode, FileRules::windows_emulation());
    }

    #[test]
    fn deletion_ordering_with_a_scanner_refusing_deletes(ops in proptest::collection::vec(op(), 1..40), seed: u64) {
        run(ops, DiskAccessMode::Mmap, FileRules::windows_emulation_with_refusals(0.3, seed));
    }
}

/// Regression (found by the state machine): a tag cleared and created again, then a
/// crash. The journal still named the first snapshot's manifest, and recovery deleted
/// the second snapshot's. Fixed by `Deleter::reserve`, which flushes completed entries
/// from the journal before a name is reused.
#[test]
fn regression_reused_snapshot_tag_survives_a_crash() {
    run(
        vec![
            Op::Snapshot(2),
            Op::ClearSnapshot(2),
            Op::Snapshot(2),
            Op::Crash,
        ],
        DiskAccessMode::Mmap,
        FileRules::windows_emulation(),
    );
}
