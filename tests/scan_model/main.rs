//! Scans against a BTreeMap model while the table changes under them.
//!
//! A case is a store set up at random (segment formats 3 to 8, mapped or positional
//! reads, no compression, LZ4 or zstd, data blocks of 64 or 200 bytes, leveled or
//! size-tiered) and up to 400 random operations on its table: puts and deletes at the
//! clock or at explicit old timestamps, puts with a TTL under an expiry clock the case
//! moves, batches, range deletes (in some cases), freezes, flushes and compactions,
//! read views; and cursors. A cursor is a scan of the table or of a view held open
//! across the operations that follow, up to five at once, stepped in turn (forward,
//! backward, `next_with`, seeks both ways after partial iteration, steps on another
//! thread) and drained at its close: every answer must be the one the model as it was
//! at the cursor's creation gives. Keys are prefixes of one another, around the
//! memtable's 8, 16 and 24 byte boundaries and past them, with 0x00 and 0xff bytes, or
//! (some cases) all of one width, as format 8's fixed blocks hold them.
//!
//! What the other model tests leave out: `tests/table_iteration.rs` and
//! `tests/table_scan_overlay.rs` build a table, then step fresh scans over it (in the
//! newest format, and format 3 for the overlay); `tests/table_model/` holds read views
//! (not scans) across later operations and checks whole scans only. Here scans stay
//! open while writes, flushes, compactions (chains of level 1 segments) and the expiry
//! clock move beneath them, in segment formats 3 to 8, compressed or not. Two more
//! tests: scans over more segments than a read keeps a bit for (64), and scans racing
//! a writer and background compactions, each of which must answer as over one state
//! the table passed through.
//!
//! 48 cases by default; `PROPTEST_CASES=400 cargo test --release --test scan_model`
//! runs it deep.

mod check;
#[path = "../common/mod.rs"]
mod common;
mod concurrent;
mod cursor;
mod keys;
mod many_segments;
mod model;
mod ops;
mod run;
mod steps;
mod store;
mod writes;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

proptest! {
    #![proptest_config({
        let mut c = common::proptest_config(file!());
        if std::env::var_os("PROPTEST_CASES").is_none() {
            c.cases = 48;
        }
        c.max_shrink_iters = 4000;
        // Failures saved beside this file, as the other targets' are beside theirs (the
        // default, for a `main.rs`, is `tests/proptest-regressions/main.txt`).
        c.failure_persistence = Some(Box::new(
            FileFailurePersistence::WithSource("proptest-regressions"),
        ));
        c
    })]

    #[test]
    fn scans_held_across_writes_agree_with_the_model(s in ops::setup(), ops in ops::ops()) {
        run::run(&s, &ops)?;
    }
}

/// Scans over 70 segments, of disjoint key spans or each over every key, in formats 3
/// (records) and 8 (blocks), under a memtable of updates.
#[test]
fn scans_over_more_than_64_segments() {
    for disjoint in [true, false] {
        for format in [3, 8] {
            many_segments::check(disjoint, format);
        }
    }
}

/// A writer's batches, flushes and background compactions under scans that step and
/// seek at random: each scan sees one state, no older than its start.
#[test]
fn scans_under_concurrent_writes_see_one_state() {
    concurrent::run();
}
