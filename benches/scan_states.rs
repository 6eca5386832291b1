//! Issue 19 item 3: YCSB E's scans over the states a leveled table passes through
//! while it takes writes, measured side by side in one run. Three tables of one store
//! each hold 1,000,000 cells in level 1 (`common/e_state.rs`: keys shaped as the peers
//! bench's YCSB keys, 100-byte random values):
//!
//! - `rest`: nothing else;
//! - `memtable`: then 82,000 updates of random loaded keys in the active memtable, put
//!   one at a time among other allocations, as a running process leaves them;
//! - `level 0 + memtable`: three flushes of 89,000 updates each (three level 0
//!   segments), then 82,000 in the memtable: the state the peers bench's YCSB sequence
//!   left at one close ("segments L0 89K, L0 89K, L1 508K, L0 89K, L1 540K", and
//!   82,088 keys in the memtable), with no side run (`side_run_bytes` 0);
//! - `level 0 + memtable, side run`: the same, its level 0 merged into its side run,
//!   which its scans read in place of the three segments (`lsm/side_run.rs`).
//!
//! Each row is a scan from a random loaded key (`scan(k..)`) of 1 to 100 rows
//! (uniform), read with `next_with`, as YCSB E's are. The states take turns on passes
//! of 20,000 pre-generated scans (seven passes, the first not counted, so load from
//! other processes falls on all alike) and print the median ns a scan and its ratio
//! to `rest`'s.
//!
//! `cargo bench --bench scan_states` (about 20 seconds). Background compaction is
//! off, so the states stay as built.

use std::sync::Arc;

use segstore::{CommitLogSync, Config, Store, Table};

mod common;
use common::e_state;
use common::{median, XorShift};

const MEMTABLE_UPDATES: usize = 82_000;
const LEVEL0_UPDATES: usize = 89_000;
const LEVEL0_SEGMENTS: usize = 3;
const SCANS: usize = 20_000;
const PASSES: usize = 7;

/// A table of the loaded keys compacted into level 1, then `level0` flushes of
/// [`LEVEL0_UPDATES`] updates and `memtable` updates left in the memtable; with its side
/// run built if `side_run` (a scan asks, a compaction round builds it), else none.
fn build(
    store: &Store,
    name: &str,
    rng: &mut XorShift,
    level0: usize,
    memtable: usize,
    side_run: bool,
) -> Arc<Table> {
    let mut config = store.config().table.clone();
    if !side_run {
        config.side_run_bytes = 0;
    }
    let t = store.table_with(name, config).expect("table");
    e_state::build(&t, rng, level0, LEVEL0_UPDATES, memtable);
    if side_run {
        e_state::pass(&t, &e_state::scans(rng, 1));
        t.compact_pending().expect("compact_pending");
        assert!(t.stats().side_run_bytes > 0, "{name}: no side run");
    }
    t
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Config::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.background_compaction = false;
    c.table.memtable_flush_bytes = 1 << 30;
    let store = Store::open(dir.path(), c).expect("open");
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let states = [
        ("rest", build(&store, "rest", &mut rng, 0, 0, false)),
        (
            "memtable",
            build(&store, "mem", &mut rng, 0, MEMTABLE_UPDATES, false),
        ),
        (
            "level 0 + memtable",
            build(
                &store,
                "l0",
                &mut rng,
                LEVEL0_SEGMENTS,
                MEMTABLE_UPDATES,
                false,
            ),
        ),
        (
            "level 0 + mem, run",
            build(
                &store,
                "l0_run",
                &mut rng,
                LEVEL0_SEGMENTS,
                MEMTABLE_UPDATES,
                true,
            ),
        ),
    ];
    for (name, t) in &states {
        let s = t.stats();
        println!(
            "{name}: {} segments, {} memtable keys, side run {} cells, {} bytes",
            s.segments, s.memtable_keys, s.side_run_cells, s.side_run_bytes
        );
    }
    let mut ns = vec![Vec::new(); states.len()];
    for p in 0..PASSES {
        let scans = e_state::scans(&mut rng, SCANS);
        let mut bytes = Vec::new();
        for (i, (_, t)) in states.iter().enumerate() {
            let (n, b) = e_state::pass(t, &scans);
            bytes.push(b);
            if p > 0 {
                ns[i].push(n);
            }
        }
        // Every state holds every key with a 100-byte value: the same rows.
        assert!(
            bytes.iter().all(|&b| b == bytes[0]),
            "states read {bytes:?}"
        );
    }
    let rest = median(ns[0].clone());
    for ((name, _), v) in states.iter().zip(ns) {
        let m = median(v);
        println!(
            "{name:20} {m:8.0} ns a 1..100-row scan   {:.2}x rest's time",
            m / rest
        );
    }
    drop(states);
    store.close().expect("close");
}
