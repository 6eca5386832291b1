//! A transaction's reads: its own buffered writes first, else its view (taken by the
//! first read), each read from the view recorded in the read set ([`super::conflict`]);
//! and [`TransactionScan`], the merge of the view's rows with the buffered writes, in
//! key order from either end.

use std::cell::RefCell;
use std::collections::btree_map;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use super::conflict::{End, ReadSet, ScanSlot};
use super::{Transaction, Writes};
use crate::error::Result;
use crate::format::ranges::RangeTombstones;
use crate::range::{as_ref, prefix_range, KeyRange};
use crate::table::lsm::{Scan, Table};
use crate::table::value::Value;

/// What the transaction's own writes say of a key: `Some(None)` deleted, `Some(Some)`
/// put, `None` not written.
type Own<'a> = Option<Option<&'a [u8]>>;

impl Transaction {
    fn own<'a>(&'a self, table: &Arc<Table>, key: &[u8]) -> Own<'a> {
        let written = self
            .writes_of(table)
            .and_then(|w| w.get(key))
            .map(|v| v.as_deref());
        // A key under a buffered range delete and not written since is deleted.
        written.or_else(|| {
            self.ranges_of(table)
                .is_some_and(|r| r.cover(key).is_some())
                .then_some(None)
        })
    }

    /// The value of `key` in `table`: the transaction's own write of it, else the
    /// view's (see [`Table::get`]). A key read from the view joins the read set.
    pub fn get(&self, table: &Arc<Table>, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let key = key.as_ref();
        self.same_store(table)?;
        match self.own(table, key) {
            Some(v) => Ok(v.map(|v| Value::shared(Arc::from(v)))),
            None => {
                let v = self.view().get(table, key)?;
                self.reads.borrow_mut().key(table, key, &v);
                Ok(v)
            }
        }
    }

    /// Run `f` on the value of `key` in `table` without copying it; like
    /// [`Transaction::get`] otherwise (the value is held, shared, for the commit's
    /// check).
    pub fn get_with<R>(
        &self,
        table: &Arc<Table>,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        let key = key.as_ref();
        self.same_store(table)?;
        match self.own(table, key) {
            Some(v) => Ok(f(v)),
            None => {
                // The value is kept for the commit's check (shared, not copied).
                let v = self.view().get(table, key)?;
                let r = f(v.as_deref());
                self.reads.borrow_mut().key(table, key, &v);
                Ok(r)
            }
        }
    }

    /// Whether `key` has a live value in `table`, the transaction's writes included.
    pub fn contains_key(&self, table: &Arc<Table>, key: impl AsRef<[u8]>) -> Result<bool> {
        self.get_with(table, key, |v| v.is_some())
    }

    /// The values of `keys` in `table`, in order (each as [`Transaction::get`]).
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        table: &Arc<Table>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        keys.into_iter().map(|k| self.get(table, k)).collect()
    }

    /// Live rows of `table` in `range`, in key order and from the back too: the view's
    /// rows merged with the transaction's own writes (a put shows its value, a delete
    /// hides the row). What the scan reads, from each end up to the last row it
    /// yielded (the whole range once an end returns `None`), joins the read set. The
    /// scan borrows the transaction: no write between its rows.
    pub fn scan(&self, table: &Arc<Table>, range: impl KeyRange) -> Result<TransactionScan<'_>> {
        self.same_store(table)?;
        let (lo, hi) = range.into_key_bounds();
        if is_empty(&lo, &hi) {
            return Ok(TransactionScan::new(
                None,
                empty().range::<[u8], _>(..),
                None,
                &self.reads,
                None,
            ));
        }
        let view = self.view().scan(table, (lo.clone(), hi.clone()))?;
        let writes = self.writes_of(table).unwrap_or_else(|| empty());
        let buffered = writes.range::<[u8], _>((as_ref(&lo), as_ref(&hi)));
        let slot = self.reads.borrow_mut().scan(table, lo, hi);
        Ok(TransactionScan::new(
            Some(view),
            buffered,
            self.ranges_of(table),
            &self.reads,
            Some(slot),
        ))
    }

    /// Live rows of `table` whose keys start with `prefix` ([`Table::scan_prefix`]),
    /// as [`Transaction::scan`].
    pub fn scan_prefix(
        &self,
        table: &Arc<Table>,
        prefix: impl AsRef<[u8]>,
    ) -> Result<TransactionScan<'_>> {
        self.scan(table, prefix_range(prefix.as_ref()))
    }
}

/// No buffered writes.
fn empty() -> &'static Writes {
    static EMPTY: OnceLock<Writes> = OnceLock::new();
    EMPTY.get_or_init(Writes::new)
}

/// Whether `[lo, hi]` holds no key (a range `BTreeMap::range` would refuse).
fn is_empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    use Bound::{Excluded, Included};
    match (lo, hi) {
        (Included(a), Included(b)) => a > b,
        (Included(a), Excluded(b)) | (Excluded(a), Included(b)) | (Excluded(a), Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

type Row = (Vec<u8>, Vec<u8>);
type OwnRow<'a> = (&'a Vec<u8>, &'a Option<Vec<u8>>);

/// A transaction's scan ([`Transaction::scan`]): live rows `(key, value)` in key order,
/// the view's merged with the transaction's own writes; a [`DoubleEndedIterator`],
/// whose ends meet in the middle with every key yielded once.
pub struct TransactionScan<'t> {
    /// `None` for an empty range.
    view: Option<Scan>,
    buffered: btree_map::Range<'t, Vec<u8>, Option<Vec<u8>>>,
    /// The transaction's range deletes: the view's rows in them are left out.
    ranges: Option<&'t RangeTombstones>,
    /// A row taken from the view's front (or, once the front is exhausted, its back)
    /// and not yet yielded; likewise for the other slots.
    view_front: Option<Row>,
    view_back: Option<Row>,
    own_front: Option<OwnRow<'t>>,
    own_back: Option<OwnRow<'t>>,
    reads: &'t RefCell<ReadSet>,
    /// `None` for an empty range (nothing to record).
    slot: Option<ScanSlot>,
}

impl std::fmt::Debug for TransactionScan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionScan").finish_non_exhaustive()
    }
}

impl<'t> TransactionScan<'t> {
    fn new(
        view: Option<Scan>,
        buffered: btree_map::Range<'t, Vec<u8>, Option<Vec<u8>>>,
        ranges: Option<&'t RangeTombstones>,
        reads: &'t RefCell<ReadSet>,
        slot: Option<ScanSlot>,
    ) -> TransactionScan<'t> {
        TransactionScan {
            view,
            buffered,
            ranges,
            view_front: None,
            view_back: None,
            own_front: None,
            own_back: None,
            reads,
            slot,
        }
    }

    /// Fill the view's slot at `end` with its next row (once that end of the view is
    /// exhausted, the row the other end took and did not yield). `Err` ends the scan.
    fn fill_view(&mut self, end: End) -> Result<()> {
        let (slot, other) = match end {
            End::Front => (&mut self.view_front, &mut self.view_back),
            End::Back => (&mut self.view_back, &mut self.view_front),
        };
        if slot.is_none() {
            let next = match (&mut self.view, end) {
                (None, _) => None,
                (Some(s), End::Front) => s.next(),
                (Some(s), End::Back) => s.next_back(),
            };
            *slot = match next {
                Some(r) => Some(r?),
                None => other.take(),
            };
        }
        Ok(())
    }

    /// Fill the buffered writes' slot at `end`, as [`TransactionScan::fill_view`].
    fn fill_own(&mut self, end: End) {
        let (slot, other) = match end {
            End::Front => (&mut self.own_front, &mut self.own_back),
            End::Back => (&mut self.own_back, &mut self.own_front),
        };
        if slot.is_none() {
            let next = match end {
                End::Front => self.buffered.next(),
                End::Back => self.buffered.next_back(),
            };
            *slot = next.or_else(|| other.take());
        }
    }

    /// Record in the read set that `end` yielded `key` (or `None`).
    fn reached(&self, end: End, key: Option<&[u8]>) {
        if let Some(slot) = self.slot {
            self.reads.borrow_mut().reached(slot, end, key);
        }
    }

    /// The next live row at `end`.
    fn step(&mut self, end: End) -> Option<Result<Row>> {
        loop {
            if let Err(e) = self.fill_view(end) {
                return Some(Err(e));
            }
            self.fill_own(end);
            let (view_slot, own_slot) = match end {
                End::Front => (&mut self.view_front, &mut self.own_front),
                End::Back => (&mut self.view_back, &mut self.own_back),
            };
            // Which comes first from this end: the view's row, or a buffered write (which
            // also replaces a view row of its key).
            let (view_first, same) = match (view_slot.as_ref(), own_slot.as_ref()) {
                (None, None) => {
                    self.reached(end, None);
                    return None;
                }
                (Some(_), None) => (true, false),
                (None, Some(_)) => (false, false),
                (Some((v, _)), Some((o, _))) => {
                    let first = match end {
                        End::Front => v < *o,
                        End::Back => v > *o,
                    };
                    (first, v == *o)
                }
            };
            if view_first {
                let row = view_slot.take()?;
                self.reached(end, Some(&row.0));
                if self.ranges.is_some_and(|r| r.cover(&row.0).is_some()) {
                    continue; // deleted by the transaction's range delete
                }
                return Some(Ok(row));
            }
            let (k, value) = own_slot.take()?;
            if same {
                *view_slot = None; // replaced by the transaction's own write
            }
            if let Some(value) = value {
                self.reached(end, Some(k));
                return Some(Ok((k.clone(), value.clone())));
            }
            // Deleted by the transaction: on to the next key.
        }
    }
}

impl Iterator for TransactionScan<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(End::Front)
    }
}

impl DoubleEndedIterator for TransactionScan<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(End::Back)
    }
}
