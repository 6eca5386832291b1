//! The k-way merge of sorted sources of cells: memtable iterators, segment iterators,
//! anything yielding `Result<Entry>` in strictly ascending key order.
//!
//! For each key the versions from every source are reconciled by
//! [`crate::table::cell`]'s rule; then the [`TombstonePolicy`] decides what a winning
//! tombstone becomes.
//!
//! # Invariants
//! 1. Output keys are strictly ascending, one cell per key: the winner of all sources'
//!    versions of it. The result does not depend on the order of the sources.
//! 2. A tombstone still shadows older versions in the merged sources before the policy
//!    drops or hides it: dropping happens after reconciliation, never before.
//! 3. The first error from any source is yielded, and the iterator then ends (fused);
//!    a source that is not strictly ascending is an error too.
//!
//! # Dropping tombstones in compaction
//! [`TombstonePolicy::DropOlderThan`] removes a tombstone for good, so older versions of
//! the key anywhere outside this merge would come back to life. A caller may pass a
//! cutoff only if every source not in the merge that could hold the key (other
//! segments, memtables) holds nothing older than the cutoff: in a major compaction that
//! is just the gc grace cutoff; in a minor one, the minimum of the gc grace cutoff and
//! the `min_ts` of every overlapping segment left out.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::error::{Error, Result};
use crate::segment::Entry;
use crate::table::cell::cmp_versions;

/// What a winning tombstone becomes in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TombstonePolicy {
    /// Yield it (flushes, and compactions that cannot drop tombstones).
    Keep,
    /// Yield nothing for the key (reads: a deleted key is absent).
    Hide,
    /// Drop tombstones whose timestamp is below the cutoff (compaction past gc grace;
    /// see the module docs for when that is safe); yield the others.
    DropOlderThan(u64),
}

/// A boxed source, for merging different kinds of iterators.
pub type BoxedSource<'a> = Box<dyn Iterator<Item = Result<Entry>> + Send + 'a>;

struct Head {
    entry: Entry,
    src: usize,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        self.entry
            .key
            .cmp(&other.entry.key)
            .then(self.src.cmp(&other.src))
    }
}

/// The merging iterator. See the module docs.
pub struct MergeIter<I> {
    sources: Vec<I>,
    heap: BinaryHeap<Reverse<Head>>,
    policy: TombstonePolicy,
    error: Option<Error>,
    done: bool,
}

impl<I: Iterator<Item = Result<Entry>>> MergeIter<I> {
    /// Merge `sources`, each strictly ascending by key, applying `policy`.
    pub fn new(sources: impl IntoIterator<Item = I>, policy: TombstonePolicy) -> Self {
        let mut m = MergeIter {
            sources: sources.into_iter().collect(),
            heap: BinaryHeap::new(),
            policy,
            error: None,
            done: false,
        };
        m.heap.reserve(m.sources.len());
        for src in 0..m.sources.len() {
            m.pull(src, None);
        }
        m
    }

    /// Take the next cell of source `src` into the heap; `prev` is the key it yielded
    /// last, to check the order (invariant 3).
    fn pull(&mut self, src: usize, prev: Option<&[u8]>) {
        if self.error.is_some() {
            return;
        }
        match self.sources[src].next() {
            None => {}
            Some(Err(e)) => self.error = Some(e),
            Some(Ok(entry)) => {
                if prev.is_some_and(|p| entry.key.as_slice() <= p) {
                    self.error = Some(Error::InvalidArgument(format!(
                        "merge source {src} is not in strictly ascending key order"
                    )));
                    return;
                }
                self.heap.push(Reverse(Head { entry, src }));
            }
        }
    }

    fn next_winner(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(e) = self.error.take() {
                return Some(Err(e));
            }
            let Reverse(Head {
                entry: mut winner,
                src,
            }) = self.heap.pop()?;
            self.pull(src, Some(&winner.key));
            while self
                .heap
                .peek()
                .is_some_and(|Reverse(h)| h.entry.key == winner.key)
            {
                let Reverse(Head { entry, src }) = self.heap.pop().expect("peeked");
                self.pull(src, Some(&entry.key));
                let wins = cmp_versions(
                    entry.ts,
                    entry.tombstone,
                    &entry.value,
                    winner.ts,
                    winner.tombstone,
                    &winner.value,
                )
                .is_gt();
                if wins {
                    winner = entry;
                }
            }
            if let Some(e) = self.error.take() {
                return Some(Err(e));
            }
            let keep = match self.policy {
                _ if !winner.tombstone => true,
                TombstonePolicy::Keep => true,
                TombstonePolicy::Hide => false,
                TombstonePolicy::DropOlderThan(cutoff) => winner.ts >= cutoff,
            };
            if keep {
                return Some(Ok(winner));
            }
        }
    }
}

impl<I: Iterator<Item = Result<Entry>>> Iterator for MergeIter<I> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        let r = self.next_winner();
        if !matches!(r, Some(Ok(_))) {
            self.done = true;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    type Version = (u64, bool, Vec<u8>);

    fn source(cells: &BTreeMap<Vec<u8>, Version>) -> std::vec::IntoIter<Result<Entry>> {
        cells
            .iter()
            .map(|(k, (ts, t, v))| {
                Ok(Entry {
                    key: k.clone(),
                    value: v.clone(),
                    ts: *ts,
                    tombstone: *t,
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn e(k: &str, ts: u64, t: bool, v: &str) -> Entry {
        Entry {
            key: k.into(),
            value: v.into(),
            ts,
            tombstone: t,
        }
    }

    fn sources_strategy() -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Version>>> {
        let version = (0u64..6, any::<bool>(), 0u8..3)
            .prop_map(|(ts, t, v)| (ts, t, if t { vec![] } else { vec![v] }));
        let source = proptest::collection::btree_map(
            proptest::collection::vec(0u8..4, 1..3),
            version,
            0..12,
        );
        proptest::collection::vec(source, 0..6)
    }

    proptest! {
        #[test]
        fn agrees_with_a_btreemap_model(sources in sources_strategy(), cutoff in 0u64..7) {
            // The model: fold every version into a map, keeping the maximum (ts, tomb, value).
            let mut model: BTreeMap<Vec<u8>, Version> = BTreeMap::new();
            for s in &sources {
                for (k, v) in s {
                    let slot = model.entry(k.clone()).or_insert_with(|| v.clone());
                    if *v > *slot { *slot = v.clone(); }
                }
            }
            for policy in [TombstonePolicy::Keep, TombstonePolicy::Hide, TombstonePolicy::DropOlderThan(cutoff)] {
                let want: Vec<Entry> = model.iter()
                    .filter(|(_, (ts, t, _))| match policy {
                        TombstonePolicy::Keep => true,
                        TombstonePolicy::Hide => !t,
                        TombstonePolicy::DropOlderThan(c) => !t || *ts >= c,
                    })
                    .map(|(k, (ts, t, v))| Entry { key: k.clone(), value: v.clone(), ts: *ts, tombstone: *t })
                    .collect();
                let got: Vec<Entry> = MergeIter::new(sources.iter().map(source), policy)
                    .collect::<Result<_>>().unwrap();
                prop_assert_eq!(&got, &want);
                // Invariant 1: the order of the sources does not matter.
                let rev: Vec<Entry> = MergeIter::new(sources.iter().rev().map(source), policy)
                    .collect::<Result<_>>().unwrap();
                prop_assert_eq!(&rev, &want);
            }
        }
    }

    #[test]
    fn a_tombstone_shadows_before_it_is_dropped() {
        let old = vec![Ok(e("a", 1, false, "old")), Ok(e("b", 1, false, "b"))];
        let del = vec![Ok(e("a", 2, true, ""))];
        let got: Vec<_> = MergeIter::new(
            [old.into_iter(), del.into_iter()],
            TombstonePolicy::DropOlderThan(10),
        )
        .map(|r| r.unwrap().key)
        .collect();
        assert_eq!(got, vec![b"b".to_vec()], "a is gone, not resurrected");
    }

    #[test]
    fn boxed_sources_of_different_kinds_merge() {
        let mt = crate::table::Memtable::new();
        mt.insert(crate::format::record::RecordRef {
            key: b"b",
            value: b"new",
            ts: 5,
            tombstone: false,
        });
        let seg = vec![Ok(e("a", 1, false, "x")), Ok(e("b", 1, false, "old"))];
        let sources: Vec<BoxedSource<'_>> =
            vec![Box::new(mt.iter().map(Ok)), Box::new(seg.into_iter())];
        let got: Vec<_> = MergeIter::new(sources, TombstonePolicy::Hide)
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, vec![e("a", 1, false, "x"), e("b", 5, false, "new")]);
    }

    #[test]
    fn errors_are_yielded_once_then_the_iterator_ends() {
        let good = vec![Ok(e("a", 1, false, "1")), Ok(e("z", 1, false, "1"))];
        let bad = vec![
            Ok(e("b", 1, false, "1")),
            Err(Error::corrupt(
                "/x/t-1-Data.db",
                40,
                "record checksum mismatch",
            )),
        ];
        let mut m = MergeIter::new([good.into_iter(), bad.into_iter()], TombstonePolicy::Keep);
        assert_eq!(m.next().unwrap().unwrap().key, b"a");
        let err = m.next().unwrap().unwrap_err();
        assert!(err.is_corrupt(), "{err}");
        assert!(m.next().is_none());
    }

    #[test]
    fn an_unsorted_source_is_an_error() {
        let unsorted = vec![Ok(e("b", 1, false, "1")), Ok(e("a", 1, false, "1"))];
        let r: Result<Vec<_>> =
            MergeIter::new([unsorted.into_iter()], TombstonePolicy::Keep).collect();
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
    }
}
