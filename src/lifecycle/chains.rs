//! Chains of segments with disjoint key spans: a leveled table's level, or any run of
//! segments each of whose keys all lie above the one before's. A forward scan reads a
//! chain as one sorted source, opening each segment as the one before runs out
//! (`table/lsm/overlay.rs`), instead of seeking into every segment its range meets.

use super::handle::SegmentHandle;

/// For each segment of a view: the next one in its chain, and how many cells its
/// chain holds.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    /// Of the segments whose smallest key is above segment `i`'s largest, the one with
    /// the smallest such key; `None` if there is none, or if `i` is not chainable.
    next: Vec<Option<usize>>,
    /// The cells of the chain through segment `i`: the segments before it (each one
    /// the chainable segment with the largest largest key below the smallest key of
    /// the one after it), it, and the segments after it. A segment that is not
    /// chainable counts its own cells.
    weight: Vec<u64>,
}

/// Whether `h` may join a chain: it holds a cell and no range tombstone (a range
/// tombstone's span is not its keys').
fn chainable(h: &SegmentHandle) -> bool {
    h.stats().entry_count > 0 && h.range_tombstones().is_empty()
}

impl Chains {
    /// The chains of `segments`: two sorts and a binary search per segment.
    pub(crate) fn of(segments: &[SegmentHandle]) -> Chains {
        let min = |i: usize| &segments[i].stats().min_key;
        let max = |i: usize| &segments[i].stats().max_key;
        let cells = |i: usize| segments[i].stats().entry_count;
        let mut by_min: Vec<usize> = (0..segments.len())
            .filter(|&i| chainable(&segments[i]))
            .collect();
        let mut by_max = by_min.clone();
        by_min.sort_by(|&a, &b| min(a).cmp(min(b)));
        by_max.sort_by(|&a, &b| max(a).cmp(max(b)));
        let mut next = vec![None; segments.len()];
        let mut prev = vec![None; segments.len()];
        for &i in &by_min {
            let at = by_min.partition_point(|&j| min(j) <= max(i));
            next[i] = by_min.get(at).copied();
            let at = by_max.partition_point(|&j| max(j) < min(i));
            prev[i] = at.checked_sub(1).map(|a| by_max[a]);
        }
        // Cells from each segment to its chain's end: its next one's smallest key is
        // above its own, so it comes later in `by_min` and is summed first.
        let mut after: Vec<u64> = (0..segments.len()).map(cells).collect();
        for &i in by_min.iter().rev() {
            if let Some(n) = next[i] {
                after[i] = after[i].saturating_add(after[n]);
            }
        }
        // And from its chain's start: its previous one's largest key is below its own.
        let mut before: Vec<u64> = (0..segments.len()).map(cells).collect();
        for &i in &by_max {
            if let Some(p) = prev[i] {
                before[i] = before[i].saturating_add(before[p]);
            }
        }
        let weight = (0..segments.len())
            .map(|i| (after[i] - cells(i)).saturating_add(before[i]))
            .collect();
        Chains { next, weight }
    }

    /// The segment after segment `i` in its chain: every key it holds is above every
    /// key `i` holds, and no other chainable segment's smallest key lies between.
    pub(crate) fn next(&self, i: usize) -> Option<usize> {
        self.next.get(i).copied().flatten()
    }

    /// The cells of the chain through segment `i`, if these chains know it.
    pub(crate) fn weight(&self, i: usize) -> Option<u64> {
        self.weight.get(i).copied()
    }
}
