//! What the workload was told ([`Model`]) and the context the scripts write through
//! ([`Ctx`]), which tells the model how each operation ended.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use segstore::{Result, Store, Table};

use crate::scripts::TTL_CHECK;

/// (table, key).
pub(crate) type Key = (String, Vec<u8>);
/// A value, or `None` for a delete.
pub(crate) type Value = Option<Vec<u8>>;

/// What the workload was told: per (table, key), the values it may find.
#[derive(Default, Debug)]
pub(crate) struct Model {
    /// Last acknowledged (durable) value: `Some(None)` is a delete.
    pub(crate) durable: BTreeMap<Key, Value>,
    /// Written after the last durable point (not acknowledged durable yet, or failed).
    pub(crate) maybe: BTreeMap<Key, Vec<Value>>,
    /// Under periodic sync: acknowledged but not yet covered by a sync.
    pub(crate) unsynced: Vec<(Key, Value)>,
    /// Snapshots created (Ok) and no clear attempted since.
    pub(crate) snapshots: BTreeSet<String>,
    /// Snapshots cleared (Ok) and no re-creation attempted since.
    pub(crate) cleared: BTreeSet<String>,
    pub(crate) periodic: bool,
    /// A write that failed (single-threaded scripts stop at the first one).
    pub(crate) failed: Vec<(Key, Value)>,
    /// One writer: what survived of `unsynced` + `failed` must be a prefix of it.
    pub(crate) ordered: bool,
}

impl Model {
    pub(crate) fn attempt(&mut self, table: &str, key: &[u8], value: Option<&[u8]>) {
        self.maybe
            .entry((table.to_string(), key.to_vec()))
            .or_default()
            .push(value.map(<[u8]>::to_vec));
    }

    pub(crate) fn acked(&mut self, table: &str, key: &[u8], value: Option<&[u8]>) {
        let k = (table.to_string(), key.to_vec());
        let v = value.map(<[u8]>::to_vec);
        if self.periodic {
            self.unsynced.push((k, v));
        } else {
            self.durable.insert(k.clone(), v);
            self.maybe.remove(&k);
        }
    }

    /// A sync returned Ok: everything acknowledged so far is durable.
    pub(crate) fn synced(&mut self) {
        self.synced_where(|_| true);
    }

    /// A flush of `table` returned Ok: what it acknowledged is in a segment (the commit
    /// log holding other tables' writes was not necessarily synced).
    fn flushed(&mut self, table: &str) {
        self.synced_where(|t| t == table);
    }

    /// A drop of `table` is attempted: every key of it may read as absent from now on.
    fn drop_attempt(&mut self, table: &str) {
        let keys: Vec<Key> = self
            .durable
            .keys()
            .chain(self.maybe.keys())
            .filter(|(t, _)| t == table)
            .cloned()
            .collect();
        for k in keys {
            self.maybe.entry(k).or_default().push(None);
        }
    }

    /// The drop returned Ok: nothing written to `table` before it is there.
    fn dropped(&mut self, table: &str) {
        for (k, v) in self.durable.iter_mut() {
            if k.0 == table {
                *v = None;
            }
        }
        self.maybe.retain(|(t, _), _| t != table);
        self.unsynced.retain(|((t, _), _)| t != table);
    }

    fn synced_where(&mut self, f: impl Fn(&str) -> bool) {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unsynced)
            .into_iter()
            .partition(|((t, _), _)| f(t));
        self.unsynced = later;
        for (k, v) in now {
            self.maybe.remove(&k);
            self.durable.insert(k, v);
        }
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) store: &'a Store,
    pub(crate) model: &'a mut Model,
}

impl Ctx<'_> {
    pub(crate) fn table(&self, t: &str) -> Result<Arc<Table>> {
        self.store.table(t)
    }

    pub(crate) fn put(&mut self, t: &str, k: &str, v: &str) -> Result<()> {
        self.write(t, k, Some(v))
    }

    pub(crate) fn delete(&mut self, t: &str, k: &str) -> Result<()> {
        self.write(t, k, None)
    }

    fn write(&mut self, t: &str, k: &str, v: Option<&str>) -> Result<()> {
        let value = v.map(str::as_bytes);
        self.model.attempt(t, k.as_bytes(), value);
        let r = self.table(t).and_then(|table| match value {
            Some(v) => table.put(k.as_bytes(), v),
            None => table.delete(k.as_bytes()),
        });
        self.outcome(t, k, value, r)
    }

    /// The model learns how an attempted write of `value` to `t`/`k` ended: acknowledged,
    /// or failed (then it may or may not be there after the crash).
    fn outcome(&mut self, t: &str, k: &str, value: Option<&[u8]>, r: Result<()>) -> Result<()> {
        match r {
            Ok(()) => {
                self.model.acked(t, k.as_bytes(), value);
                Ok(())
            }
            Err(e) => {
                let key = (t.to_string(), k.as_bytes().to_vec());
                self.model.failed.push((key, value.map(<[u8]>::to_vec)));
                Err(e)
            }
        }
    }

    /// A put for `ttl` seconds of the expiry clock (which the TTL script sets, and the
    /// check reads at [`TTL_CHECK`]): to the model the value if it is still live then,
    /// else a delete (what every read after the reopen sees).
    pub(crate) fn put_ttl(&mut self, t: &str, k: &str, v: &str, ttl: u64) -> Result<()> {
        let live = self.store.expiry_now() + ttl * 1_000_000 > TTL_CHECK;
        let value = live.then_some(v.as_bytes());
        self.model.attempt(t, k.as_bytes(), value);
        let r = self
            .table(t)
            .and_then(|table| table.put_ttl(k.as_bytes(), v.as_bytes(), Duration::from_secs(ttl)));
        self.outcome(t, k, value, r)
    }

    /// A range delete of `[lo, hi)`, to the model a delete of each key of the scripts'
    /// universe (`k000`..`k009`) in it: one record, so all of them or none.
    pub(crate) fn delete_range(&mut self, t: &str, lo: &str, hi: &str) -> Result<()> {
        let keys: Vec<String> = (0..10)
            .map(|i| format!("k{i:03}"))
            .filter(|k| k.as_str() >= lo && k.as_str() < hi)
            .collect();
        for k in &keys {
            self.model.attempt(t, k.as_bytes(), None);
        }
        let r = self
            .table(t)
            .and_then(|table| table.delete_range(lo.as_bytes()..hi.as_bytes()));
        for k in &keys {
            match &r {
                Ok(_) => self.model.acked(t, k.as_bytes(), None),
                Err(_) => {
                    let key = (t.to_string(), k.as_bytes().to_vec());
                    self.model.failed.push((key, None));
                }
            }
        }
        r.map(drop)
    }

    pub(crate) fn flush(&mut self, t: &str) -> Result<()> {
        self.table(t)?.flush()?;
        self.model.flushed(t);
        Ok(())
    }

    pub(crate) fn compact(&mut self, t: &str) -> Result<()> {
        self.table(t)?.compact()?;
        self.model.flushed(t);
        Ok(())
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        self.store.tables().commit_log().sync()?;
        self.model.synced();
        Ok(())
    }

    /// A snapshot whose creation failed may or may not exist after the crash.
    pub(crate) fn snapshot(&mut self, tag: &str) -> Result<()> {
        self.model.cleared.remove(tag);
        self.store.snapshot(tag, None)?;
        // A snapshot flushes first.
        self.model.synced();
        self.model.snapshots.insert(tag.to_string());
        Ok(())
    }

    /// A drop that failed may or may not have taken effect.
    pub(crate) fn drop_table(&mut self, t: &str) -> Result<()> {
        self.model.drop_attempt(t);
        self.store.drop_table(t)?;
        self.model.dropped(t);
        Ok(())
    }

    /// A clear that failed may or may not have taken effect.
    pub(crate) fn clear(&mut self, tag: &str) -> Result<()> {
        self.model.snapshots.remove(tag);
        self.store.clear_snapshot(tag)?;
        self.model.cleared.insert(tag.to_string());
        Ok(())
    }
}
