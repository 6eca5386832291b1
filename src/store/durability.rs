//! Durability a caller can wait on, store-wide: every table shares one commit log, so
//! one sequence number orders every write of the store ([`Table::write`](crate::table::Table::write) and
//! [`Store::write`] return it). See [`crate::table::commitlog::durable`].

use crate::error::Result;

use super::Store;

impl Store {
    /// fsync the commit log now, in every sync mode, and return the highest sequence
    /// number it covers: every write acknowledged before the call survives power loss
    /// once this returns. [`Error::Poisoned`](crate::Error::Poisoned) if an earlier
    /// write or fsync failed.
    pub fn sync(&self) -> Result<u64> {
        let _op = self.check_open()?;
        let log = &self.lsm.ctx().log;
        let seq = log.written_seq();
        log.wait_durable(seq)?;
        Ok(seq)
    }

    /// The highest sequence number covered by a successful fsync of the commit log.
    /// Under `batch` and `group` every acknowledged write is at or below it; under
    /// `periodic` writes are acknowledged once the OS has them (they survive a crash of
    /// the process) and become durable at the next periodic fsync, [`Store::sync`],
    /// [`Store::wait_durable`] or a callback's fsync ([`Store::on_durable`]).
    pub fn durable_seq(&self) -> Result<u64> {
        let _op = self.check_open()?;
        Ok(self.lsm.ctx().log.durable_seq())
    }

    /// Block until write `seq` (a number [`Table::write`](crate::table::Table::write) or [`Store::write`] returned)
    /// is durable, fsyncing now if no fsync covering it is in flight.
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a number not
    /// handed out yet.
    pub fn wait_durable(&self, seq: u64) -> Result<()> {
        let _op = self.check_open()?;
        self.lsm.ctx().log.wait_durable(seq)
    }

    /// Run `f` once write `seq` is durable, without blocking the caller: `f` runs on
    /// the commit log's notifier thread, exactly once, with `Ok(())` after an fsync
    /// that covers `seq` (under `periodic` the thread fsyncs at once for every callback
    /// waiting, so a server can acknowledge after the fsync as a group commit does),
    /// or with the error that makes that impossible (`Poisoned`, or `Closed` for a
    /// store dropped without [`Store::close`]; `close` fsyncs first). `f` must be
    /// short and must not close the store; a panic in it is caught and logged.
    ///
    /// ```
    /// # fn main() -> segstore::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = segstore::Store::open(dir.path(), segstore::Config::default())?;
    /// let t = store.table("log")?;
    /// let seq = t.write(segstore::WriteBatch::new().put(b"k", b"v"))?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// store.on_durable(seq, move |r| tx.send(r.is_ok()).unwrap())?;
    /// assert!(rx.recv().unwrap());
    /// assert!(store.durable_seq()? >= seq);
    /// # drop(t);
    /// # store.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_durable(&self, seq: u64, f: impl FnOnce(Result<()>) + Send + 'static) -> Result<()> {
        let _op = self.check_open()?;
        self.lsm.ctx().log.on_durable(seq, f)
    }
}
