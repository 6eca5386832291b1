//! [`Store::stats`] and [`Store::segment_stats`].

use crate::io::kstats::SmapsSnapshot;
use crate::io::registry;

use super::{SegmentStatsView, Store, StoreStats};

impl Store {
    /// Counts across the store. Memory figures are read from the kernel now
    /// (`/proc/self/smaps`, `mincore`), once for all segments.
    pub fn stats(&self) -> StoreStats {
        let per_segment = self.segment_stats();
        StoreStats {
            modes: self.modes,
            mappings: registry().stats_under(&self.dir),
            deletions: self.deleter.stats(),
            segments: self
                .registry
                .sets()
                .into_iter()
                .map(|(n, s)| (n, s.view().segments.len()))
                .collect(),
            memory: per_segment.iter().map(|s| s.memory.totals).sum(),
            budget: self.reader.map_budget.as_ref().map(|b| b.stats()),
            data_budget: self.reader.data_budget.as_ref().map(|b| b.stats()),
            index_cache: self.reader.index_cache.as_ref().map(|c| c.stats()),
            block_cache: self.reader.block_cache.as_ref().map(|c| c.stats()),
            unpacked_cache: self.reader.unpacked_cache.as_ref().map(|c| c.stats()),
            side_runs: self.lsm.ctx().side_run_budget.stats(),
            read_views: self.lsm.ctx().visibility.views(),
            visible_seq: self.lsm.ctx().visibility.visible(),
        }
    }

    /// One line per live segment: its effective access modes, what was asked and
    /// granted at open, and the kernel's figures for its maps.
    pub fn segment_stats(&self) -> Vec<SegmentStatsView> {
        let smaps = SmapsSnapshot::read();
        let mut out = Vec::new();
        for (table, set) in &self.registry.sets() {
            for h in &set.view().segments {
                let (data, index) = h.modes();
                out.push(SegmentStatsView {
                    table: table.clone(),
                    id: h.name().id,
                    data,
                    index,
                    entries: h.stats().entry_count,
                    memory: h.memory_report_in(smaps.as_ref()),
                    index_cache_bytes: h.index_cache_bytes(),
                    point_lookup: h.residency().point_lookup,
                });
            }
        }
        out
    }
}
