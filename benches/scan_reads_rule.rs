//! Issue 19 items 3 and 7: leveled compaction's rule for reads
//! (`table::leveled::choose_for_reads`) on YCSB E's state with background compaction
//! on. A table of 1,000,000 cells in level 1 under three level 0 segments of 89,000
//! updates each and 20,000 updates in the memtable (`common/e_state.rs`) takes passes
//! of 20,000 scans of 1..100 rows from random loaded keys, and nothing else: each
//! scan seeks into every level 0 segment, so the seeks add up until level 0 merges
//! into one segment, then into level 1. Each pass prints its ns a scan and what level
//! 0 held after it; the end, the passes at which level 0 became one segment and none,
//! and the seconds all the passes took.
//!
//! `cargo bench --bench scan_reads_rule` (about 10 seconds; `SCAN_RULE_PASSES`, 30 by
//! default, sets the passes). Timing depends on when the background merges finish,
//! so compare runs of one build by their trajectory, not one pass.

use segstore::{CommitLogSync, Config, Store};

mod common;
use common::e_state;
use common::XorShift;

const LEVEL0_UPDATES: usize = 89_000;
const LEVEL0_SEGMENTS: usize = 3;
const MEMTABLE_UPDATES: usize = 20_000;
const SCANS: usize = 20_000;

fn main() {
    let passes: usize = std::env::var("SCAN_RULE_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Config::default();
    c.commitlog.sync = CommitLogSync::Periodic { period_ms: 10_000 };
    c.table.background_compaction = true;
    c.table.memtable_flush_bytes = 1 << 30;
    let store = Store::open(dir.path(), c).expect("open");
    let t = store.table("e").expect("table");
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    e_state::build(
        &t,
        &mut rng,
        LEVEL0_SEGMENTS,
        LEVEL0_UPDATES,
        MEMTABLE_UPDATES,
    );
    let level0 = || t.segment_levels().iter().filter(|l| l.1 == 0).count();
    println!(
        "built: {} level 0 segments, {} memtable keys",
        level0(),
        t.stats().memtable_keys
    );
    let (mut one, mut none, mut total) = (None, None, 0.0);
    for p in 1..=passes {
        let (ns, _) = e_state::pass(&t, &e_state::scans(&mut rng, SCANS));
        total += ns * SCANS as f64;
        let (l0, s) = (level0(), t.stats());
        println!(
            "pass {p:3}: {ns:7.0} ns a scan; level 0 {l0} segments; {} compactions; {} seeks",
            s.compactions, s.scan_seeks
        );
        if l0 <= 1 && one.is_none() {
            one = Some(p);
        }
        if l0 == 0 && none.is_none() {
            none = Some(p);
        }
    }
    println!(
        "level 0 one segment after pass {one:?}, none after pass {none:?}; {passes} passes \
         took {:.2} s",
        total / 1e9
    );
    drop(t);
    store.close().expect("close");
}
