//! What a repair session found and did: [`RepairReport`] and its parts, with a
//! `Display` that prints differing ranges, rows streamed each way, Merkle roots before
//! and after, and what happened to the ephemeral snapshots' files.

use std::fmt;
use std::time::Duration;

use super::merkle::{Digest, Shape, TokenRange};
use super::session::Parallelism;
use super::ReplicaId;

/// Mappings and pending deletions of one snapshot's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotStatus {
    /// Mappings open through the snapshot's paths.
    pub mappings: usize,
    /// Paths of the snapshot (files, manifest, directory) still waiting for deletion.
    pub pending_deletions: usize,
}

/// What happened to one replica's ephemeral snapshot (sequential repair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotReport {
    /// The replica.
    pub replica: ReplicaId,
    /// Snapshot tag.
    pub tag: String,
    /// Right after clearing, with the tree's reader still open.
    pub while_open: SnapshotStatus,
    /// After the reader closed.
    pub after_close: SnapshotStatus,
}

/// One stream of rows from one replica to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStats {
    /// Sender.
    pub from: ReplicaId,
    /// Receiver.
    pub to: ReplicaId,
    /// Token ranges covered.
    pub ranges: usize,
    /// Rows sent.
    pub rows: u64,
    /// Batches (frames) sent.
    pub batches: u64,
    /// Encoded bytes sent.
    pub bytes: u64,
    /// Range tombstone fragments sent (the sender's whole set, when the range tombstone
    /// digests differ).
    pub range_tombstones: u64,
}

/// Wall-clock time of each step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Snapshots (sequential) and tree builds.
    pub trees: Duration,
    /// Collecting trees, diffing and planning.
    pub diff: Duration,
    /// Reading, sending, receiving and applying rows.
    pub streaming: Duration,
    /// Rebuilding trees afterwards.
    pub verify: Duration,
    /// The whole session.
    pub total: Duration,
}

/// What a session found and did.
#[derive(Debug, Clone)]
pub struct RepairReport {
    /// Session id (in every message).
    pub session: u64,
    /// Table.
    pub table: String,
    /// How trees were built.
    pub parallelism: Parallelism,
    /// Range and depth of the trees.
    pub shape: Shape,
    /// Rows each replica hashed into its tree.
    pub rows_hashed: Vec<(ReplicaId, u64)>,
    /// Root digest of each replica's tree before streaming.
    pub roots_before: Vec<(ReplicaId, Digest)>,
    /// Leaves on which not all replicas agreed.
    pub differing_leaves: usize,
    /// Their token ranges, adjacent ones coalesced.
    pub differing_ranges: Vec<TokenRange>,
    /// Whether the replicas' range tombstone digests differed (each class then sent its
    /// set to the others).
    pub range_tombstones_differ: bool,
    /// Streams, one per (sender, receiver) pair that had rows or range tombstones to
    /// exchange.
    pub streams: Vec<StreamStats>,
    /// Root digest of each replica's tree after streaming (empty unless `verify`).
    pub roots_after: Vec<(ReplicaId, Digest)>,
    /// Ephemeral snapshots (sequential repair only).
    pub snapshots: Vec<SnapshotReport>,
    /// Bytes of tree messages.
    pub tree_bytes: u64,
    /// Time per step.
    pub timings: Timings,
}

impl RepairReport {
    /// True when no leaf and no range tombstone digest differed.
    pub fn was_in_sync(&self) -> bool {
        self.differing_leaves == 0 && !self.range_tombstones_differ
    }

    /// True when verification ran and every root after streaming is equal.
    pub fn converged(&self) -> bool {
        !self.roots_after.is_empty()
            && self
                .roots_after
                .iter()
                .all(|r| r.1 == self.roots_after[0].1)
    }

    /// Rows streamed from `from` to `to`.
    pub fn rows_streamed(&self, from: ReplicaId, to: ReplicaId) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.from == from && s.to == to)
            .map(|s| s.rows)
            .sum()
    }

    /// Rows streamed in all directions.
    pub fn total_rows_streamed(&self) -> u64 {
        self.streams.iter().map(|s| s.rows).sum()
    }

    /// Range tombstone fragments streamed in all directions.
    pub fn total_range_tombstones_streamed(&self) -> u64 {
        self.streams.iter().map(|s| s.range_tombstones).sum()
    }
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "repair {:016x} of table {:?}: {}, {} leaves (depth {}) over {}",
            self.session,
            self.table,
            self.parallelism,
            self.shape.leaves(),
            self.shape.depth,
            self.shape.range
        )?;
        for ((id, root), (_, rows)) in self.roots_before.iter().zip(&self.rows_hashed) {
            writeln!(f, "  {id}: {rows} rows, Merkle root before {root}")?;
        }
        writeln!(
            f,
            "  differing: {} leaves in {} token ranges",
            self.differing_leaves,
            self.differing_ranges.len()
        )?;
        if self.range_tombstones_differ {
            writeln!(f, "  range tombstones differ")?;
        }
        const SHOWN: usize = 8;
        for r in self.differing_ranges.iter().take(SHOWN) {
            writeln!(f, "    {r}")?;
        }
        if self.differing_ranges.len() > SHOWN {
            writeln!(
                f,
                "    ... and {} more",
                self.differing_ranges.len() - SHOWN
            )?;
        }
        for s in &self.streams {
            writeln!(
                f,
                "  streamed {} -> {}: {} rows in {} batches ({} bytes) for {} ranges, {} range tombstone fragments",
                s.from, s.to, s.rows, s.batches, s.bytes, s.ranges, s.range_tombstones
            )?;
        }
        if self.streams.is_empty() {
            writeln!(f, "  streamed: nothing")?;
        }
        for (id, root) in &self.roots_after {
            writeln!(f, "  {id}: Merkle root after {root}")?;
        }
        if !self.roots_after.is_empty() {
            writeln!(
                f,
                "  roots after repair {}",
                if self.converged() {
                    "all equal"
                } else {
                    "DIFFER"
                }
            )?;
        }
        for s in &self.snapshots {
            writeln!(
                f,
                "  {}: ephemeral snapshot {} cleared while {} of its mappings were open: {} deletions pending; after they closed: {} mappings, {} deletions pending{}",
                s.replica,
                s.tag,
                s.while_open.mappings,
                s.while_open.pending_deletions,
                s.after_close.mappings,
                s.after_close.pending_deletions,
                if s.after_close.pending_deletions > 0 {
                    " (hard links of live segments that are still mapped: they go when those segments do, or at close)"
                } else {
                    ""
                }
            )?;
        }
        let t = &self.timings;
        write!(
            f,
            "  time: trees {:.1?}, diff {:.1?}, streaming {:.1?}, verify {:.1?}, total {:.1?}",
            t.trees, t.diff, t.streaming, t.verify, t.total
        )
    }
}
