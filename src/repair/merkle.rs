//! Merkle trees over token ranges: pure build and diff, no I/O.
//!
//! A row's *token* is [`super::token`] of its key (xxh3-64). A tree of depth
//! `d` over a [`TokenRange`] has `2^d` leaves that partition the range into equal
//! sub-ranges (up to one token of rounding when the width is not a multiple of `2^d`).
//!
//! # Leaf hash: an order-independent multiset hash
//! Rows arrive in key order, not token order, so a leaf cannot hash its rows as one
//! ordered stream without sorting. Instead every row gets a 128-bit xxh3 hash of a
//! canonical encoding of *all* of its parts (`flags | ts | key length | key | value`:
//! so a missed delete, a different timestamp or a different value is a different hash),
//! and a leaf keeps the **sum modulo 2^128** of its rows' hashes and their count. The
//! leaf's digest is xxh3-128 of (sum, count), and `0` for an empty leaf.
//!
//! Collision properties: addition is commutative, so the order of rows does not matter;
//! unlike XOR, a row added twice does not cancel out (a source that repeats a row changes
//! the count and the sum). If the per-row hashes behave like independent random 128-bit
//! values, two different multisets of rows in one leaf collide with probability about
//! 2^-128, and a tree of 2^20 leaves misses a difference with probability about 2^-108.
//! xxh3 is not cryptographic: a party that chooses keys and values adversarially could
//! craft a collision. Replicas of one database trust each other, as in Cassandra, whose
//! Merkle trees use a non-cryptographic hash the same way.
//!
//! Inner nodes are xxh3-128 of their two children's digests (32 bytes), except that
//! a subtree with no rows has digest `0` (its leaves are all `0`), so the many empty
//! leaves of a deep tree over little data cost nothing to hash. A non-empty leaf or
//! subtree hashes to `0` with probability 2^-128.
//!
//! # Range tombstones: one digest beside the leaves
//! A range tombstone deletes a range of *keys*, and tokens are key hashes, so it spans
//! every token of every leaf: it cannot be hashed into one leaf. A tree therefore
//! carries, beside its leaves, [`range_digest`] of the source's whole set of range
//! tombstones (the table's, whatever token range is repaired): xxh3-128 of the set's
//! canonical encoding, the disjoint coalesced fragments of
//! [`RangeTombstones::encode`] (two sets that cover the same keys at the same
//! timestamps encode alike, whatever the order or shape of the deletes that made them),
//! and `0` for no range tombstone. The coordinator compares these digests apart from
//! the leaves; the root ([`MerkleTree::root`]) folds the digest in when it is not `0`,
//! so equal roots still mean equal data and a tree without range tombstones keeps the
//! root it had before they existed. The rows a tree hashes are those the range
//! tombstones leave (a covered cell is not a row: see [`super::RowSource`]).

use std::fmt;

use xxhash_rust::xxh3::xxh3_128;

use crate::error::{Error, Result};
use crate::format::key_hash;
use crate::format::ranges::RangeTombstones;

use super::Row;

/// Deepest tree allowed (2^20 leaves: 16 MiB of leaf digests, 32 MiB for the whole tree).
pub const MAX_DEPTH: u8 = 20;

/// A 128-bit digest of a leaf, a node, or a whole tree (the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Digest(pub u128);

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// An inclusive range of tokens `[start, end]` (so the full range `[0, u64::MAX]` is
/// representable). Always `start <= end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenRange {
    /// First token in the range.
    pub start: u64,
    /// Last token in the range (inclusive).
    pub end: u64,
}

impl TokenRange {
    /// Every token.
    pub const FULL: TokenRange = TokenRange {
        start: 0,
        end: u64::MAX,
    };

    /// `[start, end]`; an error if `start > end`.
    pub fn new(start: u64, end: u64) -> Result<TokenRange> {
        if start > end {
            return Err(Error::InvalidArgument(format!(
                "token range start {start:#x} is past its end {end:#x}"
            )));
        }
        Ok(TokenRange { start, end })
    }

    /// Does the range hold `token`?
    #[inline]
    pub fn contains(&self, token: u64) -> bool {
        self.start <= token && token <= self.end
    }

    /// Number of tokens in the range (up to 2^64).
    #[inline]
    pub fn width(&self) -> u128 {
        (self.end - self.start) as u128 + 1
    }
}

impl fmt::Display for TokenRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:#018x}, {:#018x}]", self.start, self.end)
    }
}

/// Is `token` in any of `ranges` (sorted by start, not overlapping)?
pub fn ranges_contain(ranges: &[TokenRange], token: u64) -> bool {
    // The last range starting at or before `token`.
    let i = ranges.partition_point(|r| r.start <= token);
    i > 0 && ranges[i - 1].end >= token
}

/// Sort `ranges` and merge those that overlap or touch.
pub fn coalesce(mut ranges: Vec<TokenRange>) -> Vec<TokenRange> {
    ranges.sort();
    let mut out: Vec<TokenRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end == u64::MAX || r.start <= last.end + 1 => {
                last.end = last.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

/// Shape of a tree: its range and depth. Two trees can be compared only if their
/// shapes are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The range the leaves partition.
    pub range: TokenRange,
    /// Depth: the tree has `2^depth` leaves.
    pub depth: u8,
}

impl Shape {
    /// Check the depth limit and that every leaf holds at least one token.
    pub fn new(range: TokenRange, depth: u8) -> Result<Shape> {
        if depth > MAX_DEPTH {
            return Err(Error::InvalidArgument(format!(
                "Merkle tree depth {depth} exceeds the maximum of {MAX_DEPTH}"
            )));
        }
        if range.start > range.end {
            return Err(Error::InvalidArgument(format!(
                "token range start {:#x} is past its end {:#x}",
                range.start, range.end
            )));
        }
        if range.width() < 1u128 << depth {
            return Err(Error::InvalidArgument(format!(
                "token range {range} is narrower than the {} leaves of a depth-{depth} tree",
                1u64 << depth
            )));
        }
        Ok(Shape { range, depth })
    }

    /// Number of leaves.
    #[inline]
    pub fn leaves(&self) -> usize {
        1 << self.depth
    }

    /// Index of the leaf holding `token`, or `None` outside the range.
    #[inline]
    pub fn leaf_of(&self, token: u64) -> Option<usize> {
        if !self.range.contains(token) {
            return None;
        }
        let off = (token - self.range.start) as u128;
        Some(((off << self.depth) / self.range.width()) as usize)
    }

    /// Offset from `range.start` of the first token of leaf `i` (`i` may be `leaves()`).
    fn leaf_start(&self, i: usize) -> u128 {
        // ceil(i * width / 2^depth): the smallest offset whose leaf_of is i.
        let num = i as u128 * self.range.width();
        num.div_ceil(1u128 << self.depth)
    }

    /// Tokens covered by leaf `i`.
    pub fn leaf_range(&self, i: usize) -> TokenRange {
        let lo = self.leaf_start(i);
        let hi = self.leaf_start(i + 1) - 1;
        TokenRange {
            start: self.range.start + lo as u64,
            end: self.range.start + hi as u64,
        }
    }

    /// Coalesced token ranges of the given leaves (ascending indices).
    pub fn ranges_of_leaves(&self, leaves: impl IntoIterator<Item = usize>) -> Vec<TokenRange> {
        let mut out: Vec<TokenRange> = Vec::new();
        let mut prev: Option<usize> = None;
        for i in leaves {
            let r = self.leaf_range(i);
            match (out.last_mut(), prev) {
                (Some(last), Some(p)) if p + 1 == i => last.end = r.end,
                _ => out.push(r),
            }
            prev = Some(i);
        }
        out
    }
}

/// Per-row hash over every part of the row (see the module docs). `buf` is scratch.
#[inline]
pub fn row_hash(buf: &mut Vec<u8>, key: &[u8], value: &[u8], ts: u64, tombstone: bool) -> u128 {
    row_hash_expiring(buf, key, value, ts, tombstone, 0)
}

/// [`row_hash`] of a row with an expiry (0: none, hashed exactly as [`row_hash`], so
/// trees of rows without TTL are what they were before TTL). An expiring row hashes its
/// expiry too (flag byte `tombstone | 2`, then the expiry after the timestamp): two
/// replicas holding one cell with different expiries differ.
#[inline]
pub fn row_hash_expiring(
    buf: &mut Vec<u8>,
    key: &[u8],
    value: &[u8],
    ts: u64,
    tombstone: bool,
    expires: u64,
) -> u128 {
    buf.clear();
    buf.push(tombstone as u8 | if expires != 0 { 2 } else { 0 });
    buf.extend_from_slice(&ts.to_le_bytes());
    if expires != 0 {
        buf.extend_from_slice(&expires.to_le_bytes());
    }
    buf.extend_from_slice(&(key.len() as u64).to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    xxh3_128(buf)
}

/// The digest of a leaf from its accumulated (sum, count).
#[inline]
fn leaf_digest(sum: u128, count: u64) -> u128 {
    if count == 0 {
        return 0;
    }
    let mut b = [0u8; 24];
    b[..16].copy_from_slice(&sum.to_le_bytes());
    b[16..].copy_from_slice(&count.to_le_bytes());
    xxh3_128(&b)
}

/// An inner node's digest; `0` for an empty subtree, so sparse trees are cheap.
#[inline]
fn node_digest(left: u128, right: u128) -> u128 {
    if left == 0 && right == 0 {
        return 0;
    }
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(&left.to_le_bytes());
    b[16..].copy_from_slice(&right.to_le_bytes());
    xxh3_128(&b)
}

/// The digest of a set of range tombstones (see the module docs): `0` for none, else
/// xxh3-128 of its canonical encoding.
pub fn range_digest(set: &RangeTombstones) -> Digest {
    if set.is_empty() {
        return Digest(0);
    }
    let mut b = Vec::with_capacity(16 + 32 * set.len());
    b.extend_from_slice(b"range tombstones");
    set.encode(&mut b);
    Digest(xxh3_128(&b))
}

/// Builds a tree one row at a time, in any order.
#[derive(Debug)]
pub struct MerkleBuilder {
    shape: Shape,
    sums: Vec<u128>,
    counts: Vec<u64>,
    rows: u64,
    skipped: u64,
    buf: Vec<u8>,
}

impl MerkleBuilder {
    /// An empty builder; an error if the shape is not valid (see [`Shape::new`]).
    pub fn new(range: TokenRange, depth: u8) -> Result<MerkleBuilder> {
        let shape = Shape::new(range, depth)?;
        Ok(MerkleBuilder {
            shape,
            sums: vec![0; shape.leaves()],
            counts: vec![0; shape.leaves()],
            rows: 0,
            skipped: 0,
            buf: Vec::new(),
        })
    }

    /// Add one row. A row whose token lies outside the range is not hashed (it is
    /// counted in [`MerkleTree::skipped`]). Returns whether it was hashed.
    #[inline]
    pub fn add_parts(&mut self, key: &[u8], value: &[u8], ts: u64, tombstone: bool) -> bool {
        self.add_expiring(key, value, ts, tombstone, 0)
    }

    /// [`Self::add_parts`] of a row with an expiry ([`row_hash_expiring`]).
    #[inline]
    pub fn add_expiring(
        &mut self,
        key: &[u8],
        value: &[u8],
        ts: u64,
        tombstone: bool,
        expires: u64,
    ) -> bool {
        let Some(leaf) = self.shape.leaf_of(key_hash(key)) else {
            self.skipped += 1;
            return false;
        };
        let h = row_hash_expiring(&mut self.buf, key, value, ts, tombstone, expires);
        self.sums[leaf] = self.sums[leaf].wrapping_add(h);
        self.counts[leaf] += 1;
        self.rows += 1;
        true
    }

    /// Add one row (see [`Self::add_parts`]).
    #[inline]
    pub fn add(&mut self, row: &Row) -> bool {
        self.add_expiring(&row.key, &row.value, row.ts, row.tombstone, row.expires)
    }

    /// Hash the inner nodes.
    pub fn finish(self) -> MerkleTree {
        let n = self.shape.leaves();
        let mut nodes = vec![Digest::default(); 2 * n];
        for ((d, &s), &c) in nodes[n..].iter_mut().zip(&self.sums).zip(&self.counts) {
            *d = Digest(leaf_digest(s, c));
        }
        let mut t = MerkleTree::from_nodes(self.shape, nodes);
        t.rows = self.rows;
        t.skipped = self.skipped;
        t
    }
}

/// A Merkle tree over a token range. Nodes are stored as a heap: node 1 is the root,
/// node `n` has children `2n` and `2n + 1`, leaves are nodes `2^depth .. 2^(depth+1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerkleTree {
    shape: Shape,
    nodes: Vec<Digest>,
    rows: u64,
    skipped: u64,
    /// [`range_digest`] of the source's range tombstones.
    ranges: Digest,
}

impl MerkleTree {
    /// Build from rows in any order. Rows outside `range` are skipped.
    pub fn build(
        range: TokenRange,
        depth: u8,
        rows: impl IntoIterator<Item = Row>,
    ) -> Result<MerkleTree> {
        let mut b = MerkleBuilder::new(range, depth)?;
        for r in rows {
            b.add(&r);
        }
        Ok(b.finish())
    }

    /// A tree from its leaf digests (as received from another replica). The number of
    /// leaves must be `2^shape.depth`.
    ///
    /// # Panics
    /// If `leaves.len()` is not `2^shape.depth` (decoders check this first).
    pub fn from_leaves(shape: Shape, leaves: Vec<Digest>) -> MerkleTree {
        let n = shape.leaves();
        assert_eq!(leaves.len(), n, "leaf count must match the shape");
        let mut nodes = vec![Digest::default(); 2 * n];
        nodes[n..].copy_from_slice(&leaves);
        Self::from_nodes(shape, nodes)
    }

    /// Hash the inner nodes of `nodes`, whose second half holds the leaves.
    fn from_nodes(shape: Shape, mut nodes: Vec<Digest>) -> MerkleTree {
        let n = shape.leaves();
        for i in (1..n).rev() {
            nodes[i] = Digest(node_digest(nodes[2 * i].0, nodes[2 * i + 1].0));
        }
        MerkleTree {
            shape,
            nodes,
            rows: 0,
            skipped: 0,
            ranges: Digest(0),
        }
    }

    /// This tree with `digest` ([`range_digest`]) as its range tombstones' digest.
    pub fn with_range_digest(mut self, digest: Digest) -> MerkleTree {
        self.ranges = digest;
        self
    }

    /// The digest of the range tombstones of the tree's source ([`range_digest`]; `0`
    /// for none).
    pub fn range_digest(&self) -> Digest {
        self.ranges
    }

    /// The digest of the leaves alone (the root of the tree of rows).
    pub fn rows_root(&self) -> Digest {
        self.nodes[1]
    }

    /// Range and depth.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The root digest: equal roots mean equal data, rows and range tombstones (see the
    /// module docs). Without range tombstones it is [`Self::rows_root`].
    pub fn root(&self) -> Digest {
        if self.ranges.0 == 0 {
            return self.nodes[1];
        }
        let mut b = [0u8; 33];
        b[..16].copy_from_slice(&self.nodes[1].0.to_le_bytes());
        b[16..32].copy_from_slice(&self.ranges.0.to_le_bytes());
        b[32] = b'r';
        Digest(xxh3_128(&b))
    }

    /// The leaf digests, in token order.
    pub fn leaves(&self) -> &[Digest] {
        &self.nodes[self.shape.leaves()..]
    }

    /// Rows hashed into this tree (0 for a tree rebuilt from leaves).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows offered to the builder whose token was outside the range.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// Indices of the leaves whose digests differ, ascending. Descends only into subtrees
/// whose roots differ. An error ([`Error::RepairMismatch`]) if the shapes differ.
pub fn diff_leaves(a: &MerkleTree, b: &MerkleTree) -> Result<Vec<usize>> {
    if a.shape != b.shape {
        return Err(Error::RepairMismatch(format!(
            "Merkle trees of different shape: depth {} over {} vs depth {} over {}",
            a.shape.depth, a.shape.range, b.shape.depth, b.shape.range
        )));
    }
    let n = a.shape.leaves();
    let mut out = Vec::new();
    let mut stack = vec![1usize];
    while let Some(i) = stack.pop() {
        if a.nodes[i] == b.nodes[i] {
            continue;
        }
        if i >= n {
            out.push(i - n);
        } else {
            // Right first so the left subtree pops first: ascending output.
            stack.push(2 * i + 1);
            stack.push(2 * i);
        }
    }
    Ok(out)
}

/// Token ranges of the leaves that differ, adjacent leaves coalesced. Empty when the
/// trees are equal; an error ([`Error::RepairMismatch`]) if their shapes differ.
pub fn diff(a: &MerkleTree, b: &MerkleTree) -> Result<Vec<TokenRange>> {
    Ok(a.shape.ranges_of_leaves(diff_leaves(a, b)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row(key: &[u8], value: &[u8], ts: u64, tombstone: bool) -> Row {
        Row {
            key: key.to_vec(),
            value: value.to_vec(),
            ts,
            tombstone,
            expires: 0,
        }
    }

    fn rows_strategy() -> impl Strategy<Value = Vec<Row>> {
        proptest::collection::btree_map(
            proptest::collection::vec(any::<u8>(), 1..12),
            (
                proptest::collection::vec(any::<u8>(), 0..12),
                0u64..100,
                any::<bool>(),
            ),
            0..60,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|(k, (v, ts, t))| row(&k, if t { &[] } else { &v }, ts, t))
                .collect()
        })
    }

    #[test]
    fn leaves_partition_the_range_exactly() {
        for (range, depth) in [
            (TokenRange::FULL, 0u8),
            (TokenRange::FULL, 1),
            (TokenRange::FULL, 20),
            (TokenRange { start: 5, end: 17 }, 3),
            (TokenRange { start: 0, end: 7 }, 3),
            (
                TokenRange {
                    start: u64::MAX - 100,
                    end: u64::MAX,
                },
                4,
            ),
        ] {
            let s = Shape::new(range, depth).unwrap();
            let mut next = range.start as u128;
            for i in 0..s.leaves() {
                let r = s.leaf_range(i);
                assert_eq!(r.start as u128, next, "leaf {i} of {range} depth {depth}");
                assert!(r.start <= r.end);
                assert_eq!(s.leaf_of(r.start), Some(i));
                assert_eq!(s.leaf_of(r.end), Some(i));
                next = r.end as u128 + 1;
            }
            assert_eq!(next, range.end as u128 + 1);
        }
        // Equal widths over the full range.
        let s = Shape::new(TokenRange::FULL, 4).unwrap();
        assert!((0..16).all(|i| s.leaf_range(i).width() == 1u128 << 60));
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(Shape::new(TokenRange::FULL, MAX_DEPTH + 1).is_err());
        assert!(Shape::new(TokenRange { start: 0, end: 6 }, 3).is_err());
        assert!(TokenRange::new(3, 2).is_err());
        let a = MerkleTree::build(TokenRange::FULL, 3, []).unwrap();
        let b = MerkleTree::build(TokenRange::FULL, 4, []).unwrap();
        let c = MerkleTree::build(TokenRange { start: 0, end: 99 }, 3, []).unwrap();
        assert!(matches!(diff(&a, &b), Err(Error::RepairMismatch(_))));
        assert!(matches!(diff(&a, &c), Err(Error::RepairMismatch(_))));
    }

    #[test]
    fn every_part_of_a_row_matters() {
        let base = row(b"k", b"v", 5, false);
        let t = |r: &Row| MerkleTree::build(TokenRange::FULL, 8, [r.clone()]).unwrap();
        let a = t(&base);
        for other in [
            row(b"k", b"w", 5, false),
            row(b"k", b"v", 6, false),
            row(b"k", b"", 5, true),
            row(b"k", b"", 5, false),
            row(b"j", b"v", 5, false),
        ] {
            let b = t(&other);
            assert_ne!(a.root(), b.root(), "{other:?}");
        }
        // A duplicated row does not cancel (as it would with XOR).
        let twice = MerkleTree::build(TokenRange::FULL, 8, [base.clone(), base.clone()]).unwrap();
        let none = MerkleTree::build(TokenRange::FULL, 8, []).unwrap();
        assert_ne!(twice.root(), none.root());
        assert_ne!(twice.root(), a.root());
    }

    #[test]
    fn coalesce_merges_touching_ranges() {
        let r = |s, e| TokenRange { start: s, end: e };
        assert_eq!(
            coalesce(vec![
                r(10, 20),
                r(0, 4),
                r(5, 6),
                r(21, 21),
                r(30, u64::MAX),
                r(40, 50)
            ]),
            vec![r(0, 6), r(10, 21), r(30, u64::MAX)]
        );
        let rs = coalesce(vec![r(0, 4), r(10, 20)]);
        assert!(ranges_contain(&rs, 0) && ranges_contain(&rs, 4) && ranges_contain(&rs, 15));
        assert!(!ranges_contain(&rs, 5) && !ranges_contain(&rs, 21) && !ranges_contain(&[], 1));
    }

    #[test]
    fn range_digest_is_of_the_canonical_set_and_folds_into_the_root() {
        use crate::format::ranges::RangeTombstone;
        let rt = |a: &[u8], b: &[u8], ts| RangeTombstone {
            start: a.to_vec(),
            end: Some(b.to_vec()),
            ts,
        };
        assert_eq!(range_digest(&RangeTombstones::new()), Digest(0));
        let ab = RangeTombstones::from_list(&[rt(b"a", b"m", 3), rt(b"f", b"z", 3)]);
        let ba = RangeTombstones::from_list(&[rt(b"f", b"z", 3), rt(b"a", b"z", 3)]);
        assert_eq!(range_digest(&ab), range_digest(&ba));
        let newer = RangeTombstones::from_list(&[rt(b"a", b"z", 4)]);
        assert_ne!(range_digest(&ab), range_digest(&newer));
        assert_ne!(range_digest(&ab), Digest(0));

        let rows = [row(b"k", b"v", 1, false)];
        let t = MerkleTree::build(TokenRange::FULL, 4, rows).unwrap();
        assert_eq!(t.root(), t.rows_root());
        let with = t.clone().with_range_digest(range_digest(&ab));
        assert_ne!(with.root(), t.root());
        assert_eq!(with.rows_root(), t.rows_root());
        assert_eq!(diff_leaves(&with, &t).unwrap(), Vec::<usize>::new());
    }

    proptest! {
        #[test]
        fn identical_data_in_any_order_has_no_diff(rows in rows_strategy(), depth in 0u8..=12, seed: u64) {
            let a = MerkleTree::build(TokenRange::FULL, depth, rows.clone()).unwrap();
            let mut shuffled = rows.clone();
            // Deterministic shuffle.
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let b = MerkleTree::build(TokenRange::FULL, depth, shuffled).unwrap();
            prop_assert_eq!(a.root(), b.root());
            prop_assert!(diff(&a, &b).unwrap().is_empty());
            prop_assert_eq!(a.rows(), rows.len() as u64);
        }

        #[test]
        fn one_changed_row_differs_in_exactly_its_leaf(
            rows in rows_strategy().prop_filter("non-empty", |r| !r.is_empty()),
            pick: prop::sample::Index,
            change in 0u8..4,
            depth in prop_oneof![4 => 0u8..=12, 1 => Just(MAX_DEPTH)],
        ) {
            let i = pick.index(rows.len());
            let mut changed = rows.clone();
            let r = &mut changed[i];
            match change {
                0 => r.ts += 1,
                1 => { r.tombstone = !r.tombstone; r.value.clear(); if !r.tombstone { r.value.push(1); } }
                2 => r.value.push(7),
                _ => { changed.remove(i); }
            }
            let a = MerkleTree::build(TokenRange::FULL, depth, rows.clone()).unwrap();
            let b = MerkleTree::build(TokenRange::FULL, depth, changed).unwrap();
            let shape = a.shape();
            let leaf = shape.leaf_of(key_hash(&rows[i].key)).unwrap();
            prop_assert_eq!(diff_leaves(&a, &b).unwrap(), vec![leaf]);
            prop_assert_eq!(diff(&a, &b).unwrap(), vec![shape.leaf_range(leaf)]);
            prop_assert!(shape.leaf_range(leaf).contains(key_hash(&rows[i].key)));
        }

        #[test]
        fn diff_is_the_coalesced_set_of_differing_leaves(
            depth in 0u8..=8,
            a_leaves in proptest::collection::vec(0u128..3, 256),
            b_leaves in proptest::collection::vec(0u128..3, 256),
        ) {
            let shape = Shape::new(TokenRange::FULL, depth).unwrap();
            let n = shape.leaves();
            let a = MerkleTree::from_leaves(shape, a_leaves[..n].iter().map(|&x| Digest(x)).collect());
            let b = MerkleTree::from_leaves(shape, b_leaves[..n].iter().map(|&x| Digest(x)).collect());
            let expect: Vec<usize> = (0..n).filter(|&i| a_leaves[i] != b_leaves[i]).collect();
            prop_assert_eq!(diff_leaves(&a, &b).unwrap(), expect.clone());
            let ranges = diff(&a, &b).unwrap();
            prop_assert_eq!(ranges.clone(), coalesce(ranges.clone()));
            for i in 0..n {
                let r = shape.leaf_range(i);
                prop_assert_eq!(ranges_contain(&ranges, r.start), expect.contains(&i));
                prop_assert_eq!(ranges_contain(&ranges, r.end), expect.contains(&i));
            }
        }

        #[test]
        fn leaf_of_matches_leaf_range(start: u64, len: u64, depth in 0u8..=MAX_DEPTH, t: u64) {
            let end = start.saturating_add(len);
            let range = TokenRange { start, end };
            if let Ok(s) = Shape::new(range, depth) {
                match s.leaf_of(t) {
                    Some(i) => prop_assert!(s.leaf_range(i).contains(t)),
                    None => prop_assert!(!range.contains(t)),
                }
            }
        }
    }
}
