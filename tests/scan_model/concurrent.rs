//! Scans under a concurrent writer: every scan answers as over one state the table
//! passed through, one at least as new as the last batch acknowledged before it began.
//!
//! The writer applies batches (puts and deletes of random keys of 300), flushing every
//! seventh, on a leveled table that compacts in the background; this thread scans from
//! random keys with random steps and seeks, then drains. The writer stops once enough
//! scans, batches and compactions have met (events, not a duration).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use segstore::{
    CompactionStrategy, DiskAccessMode, FileRules, Store, Table, TableConfig, WriteBatch,
};

use crate::common::{self, Rng};
use crate::keys::{Key, Row};
use crate::steps::{Expected, Step};

/// The writer goes on until the scanner has made this many scans, ...
const MIN_SCANS: usize = 300;
/// ... it has written this many batches ...
const MIN_BATCHES: usize = 2_000;
/// ... and the table has compacted this many times.
const MIN_COMPACTIONS: u64 = 10;
/// A stuck store fails the test instead of hanging it: some 200 times what the
/// writer needs here (the whole test takes about 1.5 s), so a loaded machine never
/// meets it.
const DEADLINE: Duration = Duration::from_secs(300);

/// A state of the table: its live rows.
type State = Arc<BTreeMap<Key, Vec<u8>>>;

#[derive(Default)]
struct Shared {
    /// Every state in order: `history[n]` after batch `n` (`history[0]`: empty). A
    /// batch's state is pushed before the batch is written.
    history: Mutex<Vec<State>>,
    /// Batches acknowledged: `history[acked]` and later are what a new scan may see.
    acked: AtomicUsize,
    scans: AtomicUsize,
    /// Set when the writer ends, by returning or by a failed assertion.
    writer_gone: AtomicBool,
    /// Set when the scanner ends, the same.
    scanner_gone: AtomicBool,
}

/// Sets its flag when dropped, on return or while unwinding from a failed assertion, so
/// the other thread stops instead of waiting for this one.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

pub(crate) fn run() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::test_config(DiskAccessMode::Mmap, FileRules::posix());
    c.segment.data_block_size = 200;
    c.table = TableConfig::default();
    let store = Store::open(dir.path(), c).unwrap();
    let t = store.table_with("t", leveled()).unwrap();
    let shared = Shared {
        history: Mutex::new(vec![State::default()]),
        ..Shared::default()
    };
    let (batches, scans) = std::thread::scope(|s| {
        let writer = s.spawn(|| write_batches(&t, &shared));
        let scans = {
            let _gone = SetOnDrop(&shared.scanner_gone);
            scan_until_the_writer_stops(&t, &shared)
        };
        (writer.join().unwrap(), scans)
    });
    eprintln!("{batches} batches, {scans} scans; {:?}", t.stats());
    assert!(scans >= MIN_SCANS && batches >= MIN_BATCHES);
    drop(t);
    assert!(store.close().unwrap().is_clean());
}

/// Leveled, compacting in the background: 1 KiB segments, a 4 KiB level 1, a
/// compaction at every second flush.
fn leveled() -> TableConfig {
    let mut t = TableConfig::default();
    t.background_compaction = true;
    t.compaction.strategy = CompactionStrategy::Leveled;
    t.compaction.target_segment_size = 1024;
    t.compaction.base_level_size = 4096;
    t.compaction.level_multiplier = 2;
    t.compaction.l0_trigger = 2;
    t
}

fn key(i: u64) -> Key {
    format!("key{i:04}").into_bytes()
}

/// Batches until the scanner has seen enough (or is gone); returns how many.
fn write_batches(t: &Table, shared: &Shared) -> usize {
    let _gone = SetOnDrop(&shared.writer_gone);
    let start = Instant::now();
    let mut rng = Rng(0x1234_5678_9abc);
    let mut state = State::default();
    let mut n = 0;
    while !enough(t, shared, n) {
        assert!(start.elapsed() < DEADLINE, "{n} batches; {:?}", t.stats());
        n += 1;
        let (batch, next) = random_batch(&mut rng, &state, n);
        shared.history.lock().unwrap().push(Arc::clone(&next));
        t.write(&batch).unwrap();
        shared.acked.store(n, Ordering::SeqCst);
        state = next;
        if n % 7 == 0 {
            t.flush().unwrap();
        }
    }
    n
}

fn enough(t: &Table, shared: &Shared, batches: usize) -> bool {
    shared.scanner_gone.load(Ordering::SeqCst)
        || (batches >= MIN_BATCHES
            && shared.scans.load(Ordering::SeqCst) >= MIN_SCANS
            && t.stats().compactions >= MIN_COMPACTIONS)
}

/// Batch `n`: puts (of the value `b<n>`) and deletes of 1 to 40 random keys, each once;
/// and the state it leads to from `state`.
fn random_batch(rng: &mut Rng, state: &State, n: usize) -> (WriteBatch, State) {
    let mut batch = WriteBatch::new();
    let mut next = BTreeMap::clone(state);
    let mut seen = BTreeSet::new();
    for _ in 0..(1 + rng.next() % 40) {
        let k = key(rng.next() * 7 % 300);
        if !seen.insert(k.clone()) {
            continue;
        }
        if rng.next() % 4 == 0 {
            batch.delete(&k);
            next.remove(&k);
        } else {
            let v = format!("b{n}").into_bytes();
            batch.put(&k, &v);
            next.insert(k, v);
        }
    }
    (batch, Arc::new(next))
}

/// Scans until the writer is gone; returns how many.
fn scan_until_the_writer_stops(t: &Table, shared: &Shared) -> usize {
    let mut rng = Rng(0x9_8765_4321);
    let mut scans = 0;
    while !shared.writer_gone.load(Ordering::SeqCst) {
        one_scan(t, shared, &mut rng, scans);
        scans += 1;
        shared.scans.store(scans, Ordering::SeqCst);
    }
    scans
}

/// A scan from a random key (some past every key): up to 29 random steps, then the
/// rest. What it yielded must be what the same steps yield over one of the states from
/// the last acknowledged before it began to the last written when it ended.
fn one_scan(t: &Table, shared: &Shared, rng: &mut Rng, n: usize) {
    let lo = key(rng.next() % 320);
    let steps: Vec<Step> = (0..rng.next() % 30).map(|_| random_step(rng)).collect();
    let from = shared.acked.load(Ordering::SeqCst);
    let mut scan = t.scan(lo.clone()..).unwrap();
    let got: Vec<Option<Row>> = steps.iter().map(|s| s.on_scan(&mut scan)).collect();
    let rest: Vec<Row> = scan.map(|r| r.unwrap()).collect();
    let candidates = shared.history.lock().unwrap()[from..].to_vec();
    let one_state = candidates
        .iter()
        .any(|state| replays(state, &lo, &steps, &got, &rest));
    assert!(
        one_state,
        "scan {n} from {lo:?} (batches {from}..{}) matches no state: steps {steps:?}, \
         answers {got:?}, rest {rest:?}",
        from + candidates.len()
    );
}

fn random_step(rng: &mut Rng) -> Step {
    let r = rng.next();
    let k = key(r / 8 % 320);
    match r % 8 {
        0 | 1 => Step::Next,
        2 => Step::NextWith,
        3 => Step::Back,
        4 => Step::BackWith,
        5 | 6 => Step::Seek(k),
        _ => Step::SeekBack(k),
    }
}

/// Do `steps` over `state`'s rows from `lo` answer `got`, and leave `rest`?
fn replays(state: &State, lo: &Key, steps: &[Step], got: &[Option<Row>], rest: &[Row]) -> bool {
    let rows = state
        .range(lo.clone()..)
        .map(|(k, v)| (k.clone(), v.clone()));
    let mut e = Expected::new(rows.collect());
    steps.iter().zip(got).all(|(s, g)| s.on_model(&mut e) == *g) && e.rest() == rest
}
