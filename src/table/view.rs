//! Read views: one consistent picture of every table of a store
//! ([`crate::Store::read_view`]).
//!
//! A [`ReadView`] reads at one commit log sequence number: every write acknowledged
//! before it was created, nothing written after, and no part of a batch without the rest
//! ([`crate::table::visibility`]). It holds each table's memtables and segment view of
//! that moment, so later writes, flushes and compactions do not change what it reads;
//! segments compacted away meanwhile stay mapped, and are deleted (deferred deletion)
//! once the view and everything else holding them are dropped. Memtables keep the
//! versions of keys overwritten after the view began while it lives, so hold views for
//! a read's duration, not for hours.
//!
//! Plain reads use the same machinery: a scan or a `multi_get` is a read view of one
//! table for its own duration, and a point read sees only what is visible, so none of
//! them sees half of a batch.

use std::path::Path;
use std::sync::Arc;

use super::lsm::{may_expire, Cells, Scan, ScanPin, Table, TableSnap};
use crate::lifecycle::View;
use super::merge::TombstonePolicy;
use super::tables::Context;
use super::value::Value;
use crate::error::{Error, Result};
use crate::range::{prefix_range, KeyRange};

/// A registered read at one sequence number: memtables keep the versions it needs until
/// it drops.
pub(crate) struct Pin {
    ctx: Arc<Context>,
    seq: u64,
}

impl Pin {
    /// Register a read at the currently visible sequence number.
    pub(crate) fn new(ctx: &Arc<Context>) -> Pin {
        Pin {
            ctx: Arc::clone(ctx),
            seq: ctx.visibility.register(),
        }
    }

    /// The sequence number it reads at.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.ctx.visibility.release(self.seq);
    }
}

/// A consistent read of every table of a store at one moment: see the module docs.
/// Created by [`crate::Store::read_view`]; shareable across threads; scans taken from it
/// may outlive it.
pub struct ReadView {
    pin: Arc<Pin>,
    /// Every table's picture, by name in order.
    tables: Vec<(String, TableSnap)>,
    /// The expiry clock's reading at its creation: its reads judge expiry there.
    now: u64,
}

impl std::fmt::Debug for ReadView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadView")
            .field("seq", &self.pin.seq)
            .field(
                "tables",
                &self.tables.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ReadView {
    /// Capture every table of the store's registry (a table with segments but not
    /// opened as a [`Table`] in this run has no memtable).
    pub(crate) fn capture(ctx: &Arc<Context>) -> ReadView {
        let _install = match ctx.install.try_read() {
            Some(g) => g,
            None => {
                // A flush or an ingest swaps views: tests see this capture wait for it.
                ctx.point("read view waits for the install lock", Path::new(""));
                ctx.install.read()
            }
        };
        let pin = Arc::new(Pin::new(ctx));
        // In name order, as the registry holds them (`snap` searches them).
        let mut tables = ctx.registry.map_entries(|(name, r)| {
            let snap = match &r.table {
                Some(t) => t.snap(0),
                None => TableSnap::of_view(&r.set, 0),
            };
            (name.clone(), snap)
        });
        // One moment for expiry, for every table, fixed for the view's life; read only
        // if some table may hold a cell with a TTL (the clock can be a system call, and
        // every transaction takes a view).
        let any = tables
            .iter()
            .any(|(_, s)| may_expire(s.mems.iter().map(|m| &**m), &s.view));
        let now = if any {
            ctx.clock.expiry_now()
        } else {
            0
        };
        for (_, s) in &mut tables {
            s.now = now;
        }
        ReadView { pin, tables, now }
    }

    /// The commit log sequence number it reads at: every write numbered at or below it,
    /// and nothing above.
    pub fn seq(&self) -> u64 {
        self.pin.seq
    }

    /// The moment on the store's expiry clock ([`crate::Store::expiry_now`]) at which
    /// the view judges expiry, taken at its creation: a cell whose expiry is at or
    /// before it reads as deleted, one expiring later reads live for the view's whole
    /// life (a view never changes). 0 when no table of the view held a cell with a TTL
    /// at its creation: nothing it reads can expire, and the clock was not read.
    pub fn expiry_now(&self) -> u64 {
        self.now
    }

    /// What this view holds of `table`: the picture taken at its creation, or nothing
    /// for a table created (or dropped and created again) since.
    fn snap(&self, table: &Table) -> Result<std::borrow::Cow<'_, TableSnap>> {
        if !Arc::ptr_eq(table.ctx(), &self.pin.ctx) {
            return Err(Error::InvalidArgument(format!(
                "table {} belongs to another store than this read view",
                table.name()
            )));
        }
        self.pin.ctx.check_open()?;
        Ok(match self.picture(table.name()) {
            Some(s) if Arc::ptr_eq(&s.set, table.segments()) => std::borrow::Cow::Borrowed(s),
            _ => std::borrow::Cow::Owned(TableSnap::empty(
                Arc::clone(table.segments()),
                self.now,
            )),
        })
    }

    /// The picture of the table named `name`, if the view holds one.
    fn picture(&self, name: &str) -> Option<&TableSnap> {
        let i = self
            .tables
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&self.tables[i].1)
    }

    /// The segments of `table` this view reads, if it holds a picture of this table
    /// (not of one dropped and created again since, nor of one created since).
    pub(crate) fn segments_of(&self, table: &Table) -> Option<&Arc<View>> {
        self.picture(table.name())
            .filter(|s| Arc::ptr_eq(&s.set, table.segments()))
            .map(|s| &s.view)
    }

    /// `table` as of this view, looked up once for many reads (a batch of gets, as an
    /// LMDB reader keeps one read transaction): its reads take no lock and clone nothing
    /// but what a [`Value`] or a [`Scan`] must hold.
    pub fn table<'v>(&'v self, table: &Table) -> Result<TableView<'v>> {
        Ok(TableView {
            seq: self.pin.seq,
            pin: &self.pin,
            snap: self.snap(table)?,
        })
    }

    /// The value of `key` in `table` as of this view (see [`Table::get`]).
    pub fn get(&self, table: &Table, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.table(table)?.get(key)
    }

    /// Run `f` on the value of `key` in `table` as of this view, without copying it
    /// (see [`Table::get_with`]).
    pub fn get_with<R>(
        &self,
        table: &Table,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        self.table(table)?.get_with(key, f)
    }

    /// Whether `key` has a live value in `table` as of this view.
    pub fn contains_key(&self, table: &Table, key: impl AsRef<[u8]>) -> Result<bool> {
        self.table(table)?.contains_key(key)
    }

    /// The values of `keys` in `table` as of this view, in order.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        table: &Table,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        self.table(table)?.multi_get(keys)
    }

    /// Live rows of `table` in `range` as of this view (see [`Table::scan`]); the scan
    /// keeps what it reads alive and may outlive the view.
    pub fn scan(&self, table: &Table, range: impl KeyRange) -> Result<Scan> {
        self.table(table)?.scan(range)
    }

    /// Live rows of `table` whose keys start with `prefix`, as of this view.
    pub fn scan_prefix(&self, table: &Table, prefix: impl AsRef<[u8]>) -> Result<Scan> {
        self.table(table)?.scan_prefix(prefix)
    }

    /// Winning cells of `table` in `range`, tombstones included, as of this view (see
    /// [`Table::scan_cells`]).
    pub fn scan_cells(&self, table: &Table, range: impl KeyRange) -> Result<Cells> {
        self.table(table)?.scan_cells(range)
    }
}

/// One table as a [`ReadView`] sees it ([`ReadView::table`]).
pub struct TableView<'v> {
    seq: u64,
    pin: &'v Arc<Pin>,
    snap: std::borrow::Cow<'v, TableSnap>,
}

impl TableView<'_> {
    /// The value of `key` (see [`Table::get`]).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.snap.get(self.seq, key.as_ref())
    }

    /// Run `f` on the value of `key` without copying it (see [`Table::get_with`]).
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        self.snap.get_with(self.seq, key.as_ref(), f)
    }

    /// Whether `key` has a live value.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.snap.contains_key(self.seq, key.as_ref())
    }

    /// The values of `keys`, in order.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        self.snap.multi_get(self.seq, keys)
    }

    /// Live rows in `range` (see [`Table::scan`]).
    pub fn scan(&self, range: impl KeyRange) -> Result<Scan> {
        Ok(Scan::new(
            self.snap.scan(self.seq, range.into_key_bounds()),
            ScanPin::Shared {
                _pin: Arc::clone(self.pin),
            },
        ))
    }

    /// Live rows whose keys start with `prefix`.
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<Scan> {
        self.scan(prefix_range(prefix.as_ref()))
    }

    /// Winning cells in `range`, tombstones included (see [`Table::scan_cells`]).
    pub fn scan_cells(&self, range: impl KeyRange) -> Result<Cells> {
        let inner = self
            .snap
            .merged(self.seq, range.into_key_bounds(), TombstonePolicy::Keep);
        Ok(Cells::new(inner, ScanPin::Shared {
                _pin: Arc::clone(self.pin),
            }))
    }
}
