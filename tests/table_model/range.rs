//! The range delete step: alone, in a batch between puts, or across tables.

use segstore::{Batch, Store, WriteBatch};

use crate::common::Rng;
use crate::model::Model;

/// A range delete: alone, inside a batch between puts (the puts before it lose, the
/// puts after it win: issue 20 items 1 and 2), or across tables in a `Batch`.
pub(crate) fn range_step(s: &Store, table: &str, model: &mut Model, rng: &mut Rng, step: usize) {
    let t = s.table(table).unwrap();
    let a = rng.next() % 120;
    let b = (a + 1 + rng.next() % 30).min(120); // [a, b) within the universe
    let lo = format!("k{a:03}").into_bytes();
    let hi = format!("k{b:03}").into_bytes();
    match rng.next() % 5 {
        0 => {
            t.delete_range(lo.as_slice()..hi.as_slice()).unwrap();
            let ts = model.next_clock();
            model.delete_range(table, Some(&lo), Some(&hi), ts);
        }
        1 => {
            // Unbounded on one side.
            let ts = model.next_clock();
            if rng.next() % 2 == 0 {
                t.delete_range(..hi.as_slice()).unwrap();
                model.delete_range(table, None, Some(&hi), ts);
            } else {
                t.delete_range(lo.as_slice()..).unwrap();
                model.delete_range(table, Some(&lo), None, ts);
            }
        }
        2 => {
            // Inclusive end: `..=k` deletes k too.
            let last = format!("k{:03}", b.min(119)).into_bytes();
            t.delete_range(lo.as_slice()..=last.as_slice()).unwrap();
            let mut end = last.clone();
            end.push(0);
            let ts = model.next_clock();
            model.delete_range(table, Some(&lo), Some(&end), ts);
        }
        3 => {
            let mut batch = WriteBatch::new();
            let before = format!("k{:03}", a + rng.next() % (b - a)).into_bytes();
            let after = format!("k{:03}", a + rng.next() % (b - a)).into_bytes();
            let (v1, v2) = (format!("pre{step}"), format!("post{step}"));
            batch.put(&before, &v1);
            batch.delete_range(lo.as_slice()..hi.as_slice());
            batch.put(&after, &v2);
            t.write(&batch).unwrap();
            let ts = model.next_clock();
            model.apply(table, before, (ts, false, v1.into_bytes()));
            model.delete_range(table, Some(&lo), Some(&hi), ts);
            let ts = model.next_clock();
            model.apply(table, after, (ts, false, v2.into_bytes()));
        }
        _ => {
            let (x, y) = (s.table("alpha").unwrap(), s.table("beta").unwrap());
            let mut batch = Batch::new();
            batch.delete_range(&x, lo.as_slice()..hi.as_slice());
            batch.delete_range(&y, lo.as_slice()..hi.as_slice());
            s.write(&batch).unwrap();
            let ts = model.next_clock();
            model.delete_range("alpha", Some(&lo), Some(&hi), ts);
            model.delete_range("beta", Some(&lo), Some(&hi), ts);
        }
    }
}
