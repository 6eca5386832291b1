//! Bulk ingest across tables: [`Store::ingest`] (the protocol is in
//! `table::lsm::ingest`, its commit point the ingest journal,
//! `lifecycle::ingest_journal`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::table::Table;

use super::Store;

impl Store {
    /// Adopt segment files written with [`SegmentWriter`](crate::segment::SegmentWriter)
    /// into several tables in one atomic step: the bulk-load path (README, "Bulk
    /// load"). After it returns `Ok` every table holds all its new segments; after a
    /// crash at any point either every table has all of them or none has any
    /// (ARCHITECTURE.md invariant 12). [`Table::ingest`] is the one-table form.
    ///
    /// Each path names one segment by any of its component files
    /// (`<any table>-<id>-Data.db`, `-Index.db` or `-Meta.db`; the other two are found
    /// beside it). The table name in the file name does not matter: keys are bytes, with
    /// no schema a segment could be of another table's, and the store gives every
    /// adopted segment a fresh name of its table.
    ///
    /// **Checks first** (a failure adopts nothing): a path with a `..` component, a
    /// file inside the store directory, a name that is not a segment component, a
    /// missing or non-regular component, or a segment named twice (in one table or
    /// two) is [`Error::Ingest`] naming the file and what was wrong; a segment whose
    /// bytes do not verify (every record, index block and the meta's statistics are
    /// read, as `SegmentReader::verify` does) is [`Error::Corrupt`] naming the file and
    /// offset; cells (or range tombstones) timestamped past the store's clock are
    /// [`Error::Ingest`] (timestamps must come from [`Store::now`], or be older). A
    /// table appearing twice or of another store is [`Error::InvalidArgument`].
    ///
    /// **The files** are hard-linked into the store directory (copied where links are
    /// refused, say across file systems, and always on Windows, where a link would keep
    /// the caller from deleting its file while the store maps it). The caller's
    /// originals are left where they are, untouched: delete them whenever you like
    /// after the call. Never write to or truncate them while the store may hold a link
    /// (they are immutable segment files; `SegmentWriter` never reopens them).
    ///
    /// **Ranking**: ingested cells keep their own timestamps and reconcile with
    /// memtable cells and other segments by the one rule everywhere (newest timestamp,
    /// then tombstone, then larger value), so with timestamps from `Store::now` taken
    /// before the segment was written, a write acknowledged after that `now` wins over
    /// the ingested cell and one before it loses. The store's clock is advanced past the
    /// ingested timestamps. Under leveled compaction each segment joins the deepest
    /// level none of whose segments its keys overlap (level 1 of an empty table, or the
    /// first level whose budget holds a larger one), so loaded data counts toward no
    /// `l0_trigger` and is rewritten only when later writes reach its keys; where every
    /// such level holds an overlapping segment, it joins level 0 (as after a crash that
    /// the next open completes). Under size-tiered they are added as they are.
    ///
    /// **Reads and transactions**: a [`ReadView`](crate::ReadView) (and a transaction,
    /// a scan, a `multi_get`) taken before the ingest does not see it; one taken after
    /// sees every table's new segments: all views swap under the store's install lock.
    /// The swap holds the commit lock shared, like a write, so a transaction whose
    /// reads the ingest changed (a key it read now reads differently, or a scanned
    /// interval gains a row) fails its commit with [`Error::Conflict`]; one whose reads
    /// the ingest did not change (its cells lost to newer ones) commits.
    ///
    /// If the ingest fails after its commit point, or its commit point's durability is
    /// unknown, the tables are poisoned ([`Error::Poisoned`]): nothing of it is visible
    /// in this run, and the next open completes or undoes it, wholly. An empty list
    /// adopts nothing and returns `Ok`. [`Error::ReadOnly`], [`Error::Closed`],
    /// [`Error::Dropped`] as for writes.
    ///
    /// ```
    /// # fn main() -> segstore::Result<()> {
    /// use segstore::segment::{Component, SegmentName, SegmentWriter};
    /// use segstore::{FileRules, SegmentOptions};
    /// # let root = tempfile::tempdir().unwrap();
    /// # let (dir, load) = (root.path().join("db"), root.path().join("load"));
    /// # std::fs::create_dir_all(&load).unwrap();
    /// let store = segstore::Store::open(&dir, segstore::Config::default())?;
    /// let (users, emails) = (store.table("users")?, store.table("emails")?);
    /// let ts = store.now()?;
    /// let mut paths = Vec::new();
    /// for (i, rows) in [[("u1", "ada"), ("u2", "bob")], [("ada@x", "u1"), ("bob@x", "u2")]]
    ///     .iter()
    ///     .enumerate()
    /// {
    ///     let name = SegmentName::new("load", i as u64 + 1)?;
    ///     let mut w = SegmentWriter::create(&load, name.clone(), &SegmentOptions::default(), &FileRules::posix())?;
    ///     for (k, v) in rows {
    ///         w.add(k.as_bytes(), v.as_bytes(), ts, false)?;
    ///     }
    ///     w.finish()?;
    ///     paths.push(name.path(&load, Component::Data));
    /// }
    /// store.ingest(&[(&users, vec![paths[0].clone()]), (&emails, vec![paths[1].clone()])])?;
    /// assert_eq!(users.get("u2")?.as_deref(), Some(&b"bob"[..]));
    /// assert_eq!(emails.get("ada@x")?.as_deref(), Some(&b"u1"[..]));
    /// # drop((users, emails));
    /// # store.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn ingest(&self, parts: &[(&Table, Vec<PathBuf>)]) -> Result<()> {
        let _op = self.check_writable()?;
        for (t, _) in parts {
            if !Arc::ptr_eq(t.ctx(), self.lsm.ctx()) {
                return Err(Error::InvalidArgument(format!(
                    "table {} belongs to another store",
                    t.name()
                )));
            }
        }
        let parts: Vec<(&Table, &[PathBuf])> = parts.iter().map(|(t, p)| (*t, &p[..])).collect();
        crate::table::lsm::ingest_tables(&parts)
    }
}
