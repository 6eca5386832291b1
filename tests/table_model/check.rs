//! The checks of a store, and of a read view, against the model.

use segstore::{ReadView, Store};

use crate::common::{self, Rng};
use crate::model::Model;
use crate::store::TABLES;

/// The deepest level `beta`'s segments were seen at, across every run.
pub(crate) static DEEPEST: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub(crate) fn check(store: &Store, model: &Model, rng: &mut Rng) {
    let levels = common::check_levels(&store.segments("beta").unwrap());
    let deepest = levels.iter().map(|l| l.0).max().unwrap_or(0);
    DEEPEST.fetch_max(deepest, std::sync::atomic::Ordering::Relaxed);
    for table in TABLES {
        let t = store.table(table).unwrap();
        let want = model.live(table);
        let got: Vec<_> = t.scan(..).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), want.len(), "table {table}: scan length");
        assert_eq!(got, want, "table {table}: scan");
        let mut back: Vec<_> = t.scan(..).unwrap().rev().map(|r| r.unwrap()).collect();
        back.reverse();
        assert_eq!(back, want, "table {table}: reverse scan");
        let prefix = format!("k{:02}", rng.next() % 12).into_bytes();
        let got: Vec<_> = t
            .scan_prefix(&prefix)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let want_prefix: Vec<_> = want
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .cloned()
            .collect();
        assert_eq!(got, want_prefix, "table {table}: prefix scan");
        for _ in 0..20 {
            let k = format!("k{:03}", rng.next() % 120).into_bytes();
            let want = model.value(table, &k);
            assert_eq!(
                t.get(&k).unwrap().as_deref(),
                want.as_deref(),
                "table {table}: get {k:?} at {}",
                model.now
            );
            assert_eq!(
                t.contains_key(&k).unwrap(),
                want.is_some(),
                "contains {k:?}"
            );
        }
        // A bounded scan agrees with the model's range.
        let (lo, hi) = (b"k030".to_vec(), b"k060".to_vec());
        let got: Vec<_> = t
            .scan(lo.as_slice()..hi.as_slice())
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        let want: Vec<_> = model
            .live(table)
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| *k >= lo && *k < hi)
            .collect();
        assert_eq!(got, want, "table {table}: bounded scan");
    }
}

/// A read view reads exactly what the model held when it was opened, whatever was
/// written, flushed or compacted since.
pub(crate) fn check_view(store: &Store, view: &ReadView, model: &Model, rng: &mut Rng) {
    for table in TABLES {
        let t = store.table(table).unwrap();
        let want = model.live(table);
        let got: Vec<_> = view.scan(&t, ..).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got, want, "view at {}: table {table}: scan", view.seq());
        let mut back: Vec<_> = view
            .scan(&t, ..)
            .unwrap()
            .rev()
            .map(|r| r.unwrap())
            .collect();
        back.reverse();
        assert_eq!(back, want, "view: table {table}: reverse scan");
        let keys: Vec<Vec<u8>> = (0..10)
            .map(|_| format!("k{:03}", rng.next() % 120).into_bytes())
            .collect();
        let many = view.multi_get(&t, &keys).unwrap();
        for (k, got) in keys.iter().zip(many) {
            let want = model.value(table, k);
            assert_eq!(got.as_deref(), want.as_deref(), "view: {table}: {k:?}");
            assert_eq!(
                view.get(&t, k).unwrap().as_deref(),
                want.as_deref(),
                "view: {table}: get {k:?}"
            );
        }
    }
}
