//! Repair between replicas: compare Merkle trees over token ranges, stream the rows of
//! the ranges that differ both ways, and converge.
//!
//! - [`merkle`]: pure tree build and diff (a row's token is [`token`] of its key).
//! - [`message`]: the messages and their versioned, checksummed wire format.
//! - [`transport`]: the [`Transport`] trait an embedding database implements over its own
//!   network, and [`LocalTransport`] for one process.
//! - [`session`]: the [`Replica`] trait and [`RepairSession::run`]; `stream.rs`: the
//!   coordinator's plan and the streams of rows and range tombstones.
//! - [`report`]: [`RepairReport`], what a session found and did.
//! - [`table_replica`]: [`TableReplica`], a `Replica` over one LSM table of a store.
//! - [`segment_replica`]: [`SegmentReplica`], a `Replica` over one table's bare segments
//!   (for code that writes segments itself).
//!
//! Repair sees data only through [`RowSource`] iterators, never segments or files.
//!
//! # Reconciliation
//! Every replica resolves two versions of a key the same way ([`cmp_versions`]): the
//! newer timestamp wins; on equal timestamps a tombstone wins; then an expiring cell
//! (the earlier expiry first), then the larger value (bytewise). This is a total order, so
//! applying the union of every replica's rows on every replica gives each the same
//! winner: after one repair the replicas agree and a second repair finds nothing.
//!
//! # Range tombstones
//! A range tombstone (`Table::delete_range`) deletes the cells of a key range at or
//! below its timestamp. Tokens are key hashes, so it spans every token: a tree carries
//! one digest of the replica's whole set of range tombstones beside its leaves
//! ([`merkle`]: xxh3-128 of the canonical fragment encoding), whatever token range is
//! repaired. Where the digests differ, each class of equal digests sends its whole set
//! to the others, and a receiver unites it with its own ([`Replica::apply_range_tombstones`]:
//! the newest timestamp per key, as `RangeTombstones::insert`), each fragment keeping
//! its timestamp. The union is one canonical set whatever the order of arrival, so the
//! digests agree after one exchange. Rows are what the range tombstones leave: a cell
//! a replica's range tombstone deletes is not a row of it, and a row streamed to a
//! replica whose range tombstone deletes it stays hidden there.
//!
//! # Expiring cells (TTL)
//! A row carries its expiry ([`Row::expires`](crate::segment::Entry::expires)): it is
//! hashed ([`merkle::row_hash_expiring`]) and streamed with it, and applied with it
//! (the receiver's default TTL does not apply), so a replica that got the cell from
//! repair expires it at the same moment. As in Cassandra's validation compaction, the
//! replicas' row sources ([`TableReplica`], [`SegmentReplica`]) present a cell expired
//! at the moment the tree is built as what compaction makes of it: a tombstone at its
//! timestamp, its expiry kept as the local deletion time. So a replica that compacted
//! it and one that did not yet hash the same row, and an expired value is never
//! streamed. Replicas whose expiry clocks disagree about a cell on the edge of expiry
//! may stream it; the tombstone wins at its timestamp on both, so they still converge.
//!
//! # Invariants
//! R1. A tree hashes every part of every resolved row (key, value, timestamp, tombstone),
//!     and the canonical set of range tombstones, so a missed delete, a missed range
//!     delete or a different timestamp is a difference (see [`merkle`]).
//! R2. Everything that crosses a transport is an encoded frame; decoding never panics
//!     and bad bytes give [`crate::Error::BadMessage`].
//! R3. Replicas of different tables or incompatible settings are refused with
//!     [`crate::Error::RepairMismatch`] before any row moves.
//! R4. Sequential repair's ephemeral snapshots are always cleared, also on error; their
//!     files go through the deleter, so under the Windows rule a file still mapped is
//!     deleted when its last mapping closes (invariants 1 and 4).

use std::cmp::Ordering;
use std::fmt;

pub mod merkle;
pub mod message;
pub mod report;
pub mod segment_replica;
pub mod session;
mod stream;
pub mod table_replica;
pub mod transport;

pub use merkle::{diff, range_digest, Digest, MerkleTree, Shape, TokenRange, MAX_DEPTH};
pub use message::{DecodeError, Message, RowBatch, StreamPlan, TreeMessage};
pub use report::{RepairReport, SnapshotReport, SnapshotStatus, StreamStats, Timings};
pub use segment_replica::SegmentReplica;
pub use session::{
    build_tree, Parallelism, RepairOptions, RepairSession, Replica, RowIter, RowSource,
};
pub use table_replica::TableReplica;
pub use transport::{Envelope, LocalTransport, Transport};

/// A row as repair sees it: one resolved version of a key (a tombstone has an empty
/// value).
pub use crate::segment::Entry as Row;

pub use crate::segment::{RangeTombstone, RangeTombstones};

/// Identifies a replica (a node) within a repair session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaId(pub u64);

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replica {}", self.0)
    }
}

/// The token of a key: its 64-bit xxh3 hash.
#[inline]
pub fn token(key: &[u8]) -> u64 {
    crate::format::key_hash(key)
}

/// Compare two versions of the same key: `Greater` when `a` wins (see the module docs).
#[inline]
pub fn cmp_versions(a: &Row, b: &Row) -> Ordering {
    crate::table::cell::cmp_versions(
        (a.ts, a.tombstone, a.expires, &a.value),
        (b.ts, b.tombstone, b.expires, &b.value),
    )
}

/// A row as a replica presents it to repair at `now` (the expiry clock): a cell whose
/// expiry is at or before `now` as the tombstone compaction makes of it (its
/// timestamp, its expiry as local deletion time, no value); any other row unchanged.
/// See "Expiring cells" in the module docs.
#[inline]
pub fn as_of(mut row: Row, now: u64) -> Row {
    if !row.tombstone && row.expires != 0 && row.expires <= now {
        row.tombstone = true;
        row.value = Vec::new();
    }
    row
}

/// The winner of two versions of one key.
#[inline]
pub fn newer(a: Row, b: Row) -> Row {
    if cmp_versions(&b, &a) == Ordering::Greater {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(ts: u64, tombstone: bool, v: &[u8]) -> Row {
        Row {
            key: b"k".to_vec(),
            value: v.to_vec(),
            ts,
            tombstone,
            expires: 0,
        }
    }

    #[test]
    fn newest_wins_then_tombstone_then_larger_value() {
        assert_eq!(
            newer(r(1, false, b"z"), r(2, false, b"a")),
            r(2, false, b"a")
        );
        assert_eq!(newer(r(2, true, b""), r(2, false, b"z")), r(2, true, b""));
        assert_eq!(
            newer(r(2, false, b"a"), r(2, false, b"b")),
            r(2, false, b"b")
        );
        assert_eq!(newer(r(3, false, b"a"), r(2, true, b"")), r(3, false, b"a"));
        // Symmetric.
        assert_eq!(
            newer(r(2, false, b"b"), r(2, false, b"a")),
            r(2, false, b"b")
        );
    }
}
