//! Tables against a BTreeMap model: random puts, deletes, writes with explicit (old)
//! timestamps, batches, flushes, major compactions, clean reopens and crash reopens
//! (drop without close: the commit log replays), with tiny memtables, log files and
//! compaction thresholds so every path runs; batches across both tables
//! (`Store::write`), and read views (`Store::read_view`) held across later steps and
//! checked against a copy of the model taken when they were opened; transactions
//! (gets and partial scans checked against the model as it was at their beginning plus
//! their own writes, a racing plain put or flush, and a commit that must conflict
//! exactly when something they read changed, by value, and otherwise lands whole). Reads (gets,
//! forward, reverse, bounded and prefix scans) are checked every 25 steps. `tests/table_iteration.rs` covers
//! iteration (reverse, seeks, prefixes) in depth.
//!
//! A third table, `gamma`, has settings of its own (`Store::table_with`: no background
//! compaction) and a compaction filter, set again at every open: at each of its major
//! compactions the model applies the same filter to its live cells (values ending in
//! `7` removed, in `3` replaced by the value with `!` appended).
//!
//! TTL (issue 20): puts with a TTL (`Table::put_ttl`, `WriteBatch::put_ttl`) on every
//! table, under a controllable expiry clock (`Store::set_expiry_clock`, set again at
//! every open) that a step advances; the model expires a cell once the clock reaches its
//! expiry, so gets, scans and views are checked before and after expiry, and
//! compactions (`gamma`'s filter sees no expired cell) run across it. Read views judge
//! expiry at their creation, as the copied model does.
//!
//! `alpha` and `gamma` compact size-tiered. `beta` is a leveled table (the default
//! policy; `Store::table_with`, tiny segments and levels): its
//! background and major compactions follow `table::leveled`, and every check also
//! checks its levels stay disjoint; the run asserts segments reached level 2.

mod check;
#[path = "../common/mod.rs"]
mod common;
mod model;
mod range;
mod run;
mod store;
mod txn;

use segstore::DiskAccessMode;

use check::DEEPEST;
use run::run;

/// What the runs saw, for the assertions that every path ran.
#[derive(Default)]
pub(crate) struct Counts {
    /// Checks of views older than the tables.
    pub(crate) stale_views: usize,
    /// Transactions committed, conflicted.
    pub(crate) txn_outcomes: [usize; 2],
    /// Cells gamma's filter removed or replaced.
    pub(crate) filtered: usize,
    /// Puts with a TTL.
    pub(crate) ttl_puts: usize,
    /// Cells seen to expire as the clock moved.
    pub(crate) expired: usize,
    /// Range deletes written.
    pub(crate) range_deletes: usize,
}

#[test]
fn random_operations_match_the_model_in_every_mode() {
    let mut counts = Counts::default();
    // `MODEL_SEEDS=n` runs n seeds per mode (CI runs one).
    let seeds: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for seed in 0..seeds {
        for (i, mode) in DiskAccessMode::all().into_iter().enumerate() {
            let tmp = tempfile::tempdir().unwrap();
            run(
                0x9E37_79B9 + i as u64 * 7919 + seed * 104_729,
                mode,
                300,
                tmp.path(),
                &mut counts,
            );
        }
    }
    let stale_views_checked = counts.stale_views;
    let deepest = DEEPEST.load(std::sync::atomic::Ordering::Relaxed);
    assert!(deepest >= 2, "beta's segments reached level {deepest} only");
    assert!(
        counts.range_deletes >= 10,
        "only {} range deletes",
        counts.range_deletes
    );
    let [committed, conflicted] = counts.txn_outcomes;
    eprintln!("transactions: {committed} committed, {conflicted} conflicted");
    assert!(
        committed >= 5 && conflicted >= 3,
        "{committed} committed, {conflicted} conflicted"
    );
    // The views were checked while the tables had moved on from what they saw, and the
    // filter changed cells that reads then checked.
    assert!(stale_views_checked >= 4, "only {stale_views_checked}");
    assert!(
        counts.ttl_puts >= 10 && counts.expired >= 5,
        "TTL puts {}, cells expired {}",
        counts.ttl_puts,
        counts.expired
    );
    assert!(
        counts.filtered >= 1,
        "the filter changed only {} cells",
        counts.filtered
    );
    eprintln!(
        "{stale_views_checked} checks of views older than the tables; {} cells filtered; \
         {} TTL puts, {} cells expired as the clock moved",
        counts.filtered, counts.ttl_puts, counts.expired
    );
}
