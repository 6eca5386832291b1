//! The one registry of a store's tables: per name, its segment set and, once opened in
//! this run, its [`Table`]. The store (segment sets, drops, stats, close) and the tables
//! (replay, checkpoints, the worker, read views) share it.
//!
//! Its lock is taken last: nothing else is locked while it is held, except by
//! [`Registry::write`]'s callers (opening a set, wrapping it in a `Table`), who take no
//! table or positions lock under it. Creating a table and dropping one are serialised
//! by the store's own lock, not by holding this one.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{RwLock, RwLockWriteGuard};

use super::lsm::Table;
use crate::lifecycle::SegmentSet;

/// One name's entry.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) set: Arc<SegmentSet>,
    /// The LSM table over `set`, once opened in this run (not for a table only read
    /// through its bare segments, nor after close).
    pub(crate) table: Option<Arc<Table>>,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Registry {
    map: RwLock<BTreeMap<String, Registered>>,
}

impl Registry {
    /// A registry of `sets` (found at open), none opened as a table yet.
    pub(crate) fn new(sets: BTreeMap<String, Arc<SegmentSet>>) -> Registry {
        Registry {
            map: RwLock::new(
                sets.into_iter()
                    .map(|(n, set)| (n, Registered { set, table: None }))
                    .collect(),
            ),
        }
    }

    pub(crate) fn set(&self, name: &str) -> Option<Arc<SegmentSet>> {
        self.map.read().get(name).map(|r| Arc::clone(&r.set))
    }

    pub(crate) fn table(&self, name: &str) -> Option<Arc<Table>> {
        self.map.read().get(name).and_then(|r| r.table.clone())
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.map.read().keys().cloned().collect()
    }

    /// Every segment set, by name.
    pub(crate) fn sets(&self) -> Vec<(String, Arc<SegmentSet>)> {
        self.map
            .read()
            .iter()
            .map(|(n, r)| (n.clone(), Arc::clone(&r.set)))
            .collect()
    }

    /// Every table opened in this run.
    pub(crate) fn tables(&self) -> Vec<Arc<Table>> {
        self.map
            .read()
            .values()
            .filter_map(|r| r.table.clone())
            .collect()
    }

    /// Every entry.
    pub(crate) fn entries(&self) -> Vec<(String, Registered)> {
        self.map_entries(|(n, r)| (n.clone(), r.clone()))
    }

    /// `f` of every entry in name order, under the registry's read lock (no copy of
    /// the list: a read view's capture, once per transaction).
    pub(crate) fn map_entries<R>(&self, f: impl FnMut((&String, &Registered)) -> R) -> Vec<R> {
        self.map.read().iter().map(f).collect()
    }

    /// The map, for a caller that checks and inserts under one lock.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Registered>> {
        self.map.write()
    }

    /// `name`'s table leaves the registry (a drop's commit point passed); its set stays
    /// until the store removes the entry.
    pub(crate) fn forget_table(&self, name: &str) {
        if let Some(r) = self.map.write().get_mut(name) {
            r.table = None;
        }
    }

    /// Every table leaves the registry (close, or a store dropped without close: each
    /// table holds the store's context, a cycle that would keep segments mapped).
    pub(crate) fn forget_tables(&self) {
        for r in self.map.write().values_mut() {
            r.table = None;
        }
    }

    /// `name` leaves the registry (a dropped table).
    pub(crate) fn remove(&self, name: &str) {
        self.map.write().remove(name);
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
