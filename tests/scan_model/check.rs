//! The checks that are not a cursor's: point reads, and at the end whole scans of the
//! table and of every open view, both ways, and a clean close.

use proptest::prelude::*;
use segstore::Scan;

use crate::common;
use crate::keys::Row;
use crate::run::Run;

impl Run {
    /// A get of pool key `k`.
    pub(crate) fn check_get(&self, k: usize) -> Result<(), TestCaseError> {
        let key = self.pool.key(k);
        let got = self.t.get(&key).unwrap().map(|v| v.to_vec());
        prop_assert_eq!(
            got,
            self.model.get(&key),
            "get {:?}; log:\n{}",
            key,
            self.log
        );
        Ok(())
    }

    /// The cursors still open drained; whole scans of the table and of every view
    /// against the model (as each view's was when it was taken); leveled compaction's
    /// levels disjoint; and the store closed clean.
    pub(crate) fn finish(mut self) -> Result<(), TestCaseError> {
        for cursor in std::mem::take(&mut self.cursors) {
            cursor.drain(&self.log)?;
        }
        let log = &self.log;
        let t = &self.t;
        check_both_ways(|| t.scan(..).unwrap(), self.model.live(), "table", log)?;
        for (i, (view, model)) in self.views.iter().enumerate() {
            let scan = || view.scan(t, ..).unwrap();
            check_both_ways(scan, model.live(), &format!("view {i}"), log)?;
        }
        let levels = common::check_levels(&self.store.segments("t").unwrap());
        eprintln!("segments (level, id, bytes) at the end: {levels:?}");
        let Run {
            store, t, views, ..
        } = self;
        drop((views, t));
        let report = store.close().unwrap();
        prop_assert!(report.is_clean(), "{:?}", report);
        Ok(())
    }
}

/// A scan `scan` makes yields `want` forward, and it reversed backward.
fn check_both_ways(
    scan: impl Fn() -> Scan,
    mut want: Vec<Row>,
    what: &str,
    log: &str,
) -> Result<(), TestCaseError> {
    let got: Vec<Row> = scan().map(|r| r.unwrap()).collect();
    prop_assert_eq!(got, want.clone(), "{} scanned forward; log:\n{}", what, log);
    let got: Vec<Row> = scan().rev().map(|r| r.unwrap()).collect();
    want.reverse();
    prop_assert_eq!(got, want, "{} scanned backward; log:\n{}", what, log);
    Ok(())
}
