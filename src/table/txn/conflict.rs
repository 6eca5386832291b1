//! A transaction's read set and the commit's check of it (the module docs of
//! [`super`]): every key it read from the store, with the value it read (a [`Value`]
//! shares the bytes, it copies nothing), and every interval it scanned; at commit each
//! key is read again at the latest state and compared with that value (unless the
//! memtables show that nothing wrote it since the view: `Table::unwritten_since`), each interval
//! scanned through the view and at the latest state; any difference is a conflict.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::range::KeyBounds;
use crate::table::lsm::Table;
use crate::table::value::Value;
use crate::table::view::ReadView;

/// What the transaction read from the store, per table (in the order first read).
#[derive(Debug, Default)]
pub(super) struct ReadSet {
    tables: Vec<TableReads>,
}

#[derive(Debug)]
struct TableReads {
    table: Arc<Table>,
    /// Each key read, and what the view gave (the same at every read of it).
    keys: BTreeMap<Vec<u8>, Option<Value>>,
    scans: Vec<Coverage>,
}

/// How far a scan over `[lo, hi]` has read from each end.
#[derive(Debug)]
struct Coverage {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: Reach,
    back: Reach,
}

/// How far one end of a scan has read.
#[derive(Debug, PartialEq)]
enum Reach {
    /// Nothing yielded yet.
    Nothing,
    /// Everything from the end's bound through this key (the last row it yielded).
    Upto(Vec<u8>),
    /// The end returned `None`: the two ends together read the whole range.
    All,
}

/// Which scan of the read set ([`ReadSet::scan`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct ScanSlot {
    table: usize,
    scan: usize,
}

/// A scan's end.
#[derive(Debug, Clone, Copy)]
pub(super) enum End {
    Front,
    Back,
}

impl ReadSet {
    fn reads_of(&mut self, table: &Arc<Table>) -> usize {
        match self
            .tables
            .iter()
            .position(|r| Arc::ptr_eq(&r.table, table))
        {
            Some(i) => i,
            None => {
                self.tables.push(TableReads {
                    table: Arc::clone(table),
                    keys: BTreeMap::new(),
                    scans: Vec::new(),
                });
                self.tables.len() - 1
            }
        }
    }

    /// `key` of `table` was read from the store (through the view), giving `value`.
    pub(super) fn key(&mut self, table: &Arc<Table>, key: &[u8], value: &Option<Value>) {
        let i = self.reads_of(table);
        let keys = &mut self.tables[i].keys;
        if !keys.contains_key(key) {
            keys.insert(key.to_vec(), value.clone());
        }
    }

    /// A scan of `table` over `[lo, hi]` starts, having read nothing yet.
    pub(super) fn scan(
        &mut self,
        table: &Arc<Table>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    ) -> ScanSlot {
        let i = self.reads_of(table);
        let scans = &mut self.tables[i].scans;
        scans.push(Coverage {
            lo,
            hi,
            front: Reach::Nothing,
            back: Reach::Nothing,
        });
        ScanSlot {
            table: i,
            scan: scans.len() - 1,
        }
    }

    /// The scan's `end` yielded `key` (`Some`) or returned `None`.
    pub(super) fn reached(&mut self, slot: ScanSlot, end: End, key: Option<&[u8]>) {
        let c = &mut self.tables[slot.table].scans[slot.scan];
        let reach = match end {
            End::Front => &mut c.front,
            End::Back => &mut c.back,
        };
        *reach = match key {
            None => Reach::All,
            Some(_) if *reach == Reach::All => Reach::All,
            Some(k) => match reach {
                Reach::Upto(v) => {
                    v.clear();
                    v.extend_from_slice(k);
                    return;
                }
                _ => Reach::Upto(k.to_vec()),
            },
        };
    }

    /// The commit's check, under the store's commit lock held exclusively (every write
    /// before is visible, none runs): every key read must read the same at the latest
    /// state, and every scanned interval the same through `view` and at the latest
    /// state. The first that does not (tables in name order, keys in order, then
    /// intervals) is the [`Error::Conflict`].
    /// True when nothing was read from the store: the commit has nothing to check.
    pub(super) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    pub(super) fn check(&self, view: &ReadView) -> Result<()> {
        let mut order: Vec<&TableReads> = self.tables.iter().collect();
        order.sort_by(|a, b| a.table.name().cmp(b.table.name()));
        for r in order {
            let t = &*r.table;
            let segments = view.segments_of(t);
            for (k, then) in &r.keys {
                // Nothing written to it since the view: it reads the same (no segment
                // read). Else compare the values.
                if segments.is_some_and(|s| t.unwritten_since(k, view.seq(), s)) {
                    continue;
                }
                if !t.get_with(k, |now| then.as_deref() == now)? {
                    return Err(conflict(t, k.clone()));
                }
            }
            for c in &r.scans {
                for (lo, hi) in c.intervals() {
                    if let Some(k) = first_difference(view, t, lo, hi)? {
                        return Err(conflict(t, k));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Coverage {
    /// The intervals read: at most two, possibly overlapping.
    fn intervals(&self) -> Vec<KeyBounds> {
        if self.front == Reach::All || self.back == Reach::All {
            return vec![(self.lo.clone(), self.hi.clone())];
        }
        let mut out = Vec::new();
        if let Reach::Upto(k) = &self.front {
            out.push((self.lo.clone(), Bound::Included(k.clone())));
        }
        if let Reach::Upto(k) = &self.back {
            out.push((Bound::Included(k.clone()), self.hi.clone()));
        }
        out
    }
}

fn conflict(t: &Table, key: Vec<u8>) -> Error {
    Error::Conflict {
        table: t.name().to_string(),
        key,
    }
}

/// The first key in `[lo, hi]` whose live row differs between `view` and the latest
/// state of `t` (present in one only, or with another value).
fn first_difference(
    view: &ReadView,
    t: &Table,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
) -> Result<Option<Vec<u8>>> {
    let mut then = view.scan(t, (lo.clone(), hi.clone()))?;
    let mut now = t.scan((lo, hi))?;
    loop {
        match (then.next().transpose()?, now.next().transpose()?) {
            (None, None) => return Ok(None),
            (Some((k, _)), None) | (None, Some((k, _))) => return Ok(Some(k)),
            (Some(a), Some(b)) if a != b => return Ok(Some(a.0.min(b.0))),
            _ => {}
        }
    }
}
