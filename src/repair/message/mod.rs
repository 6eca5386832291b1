//! Repair messages and their wire format: compact, hand-written, versioned and
//! checksummed, so any database can carry them over its own network.
//!
//! # Frame (version 2)
//! ```text
//! offset  size  field
//!      0     4  magic "SGRP"
//!      4     1  version = 2 (1 is still read, see below)
//!      5     1  kind: 1 = tree, 2 = stream plan, 3 = row batch
//!      6     8  body length N, u64 little-endian
//!     14     N  body (below)
//!   14+N     4  crc32c of bytes [0, 14+N), u32 little-endian
//! ```
//! Integers in bodies are LEB128 varints (`v`) unless given a width; byte strings are a
//! varint length then the bytes; a list is a varint count then the items.
//! ```text
//! tree:   session u64 | from v | table str | fingerprint u64 | range | depth u8 | rows v
//!         | 2^depth leaf digests of 16 bytes (u128 little-endian)
//!         | range tombstone digest, 16 bytes (u128 LE; 0: none)             [v2]
//! plan:   session u64 | targets: list of (to v, list of range) | expect_from: list of v
//!         | range_targets: list of v                                        [v2]
//! rows:   session u64 | from v | seq v | last u8 (0/1) | ranges: list of range
//!         | rows: list of row
//!         | range tombstones: the segment meta's block (docs/format.md)     [v2]
//! range:  start u64 | end u64                   (inclusive, start <= end)
//! row:    key str | value str | ts u64 | flags u8 (bit 0 = tombstone, bit 1 = expires;
//!         others zero) | expires u64 (only with bit 1, never 0)
//! ```
//! A row with bit 1 is an expiring cell (TTL) with its expiry, or a tombstone with its
//! local deletion time (an expired cell); a row without it is encoded as before TTL,
//! and a build from before TTL refuses a row with it as "unknown row flags"
//! ([`DecodeError`]), never misreads it.
//! The range tombstone block is a count then disjoint, coalesced fragments in key
//! order (start, optional end, ts); a block not in that canonical form is malformed.
//!
//! # Versions
//! Version 2 adds the fields marked `[v2]`: range tombstones (see [`super::merkle`]).
//! This build writes version 2 and still reads version 1, whose messages mean "no range
//! tombstone" (a version 1 build has none): a tree with digest `0`, a plan sending none,
//! a batch carrying none. Any other version is [`DecodeError::Version`], naming it.
//! Decoding is total: any byte string gives a message or a typed [`DecodeError`], never
//! a panic, and never allocates more than the input's length before checking it.

use crate::error::{Error, Result};
use crate::format::ranges::RangeTombstones;
use crate::format::{checksum, varint, MAX_KEY_LEN, MAX_VALUE_LEN};

use super::merkle::{Digest, MerkleTree, Shape, TokenRange, MAX_DEPTH};
use super::{ReplicaId, Row};

/// First bytes of every frame.
pub const MAGIC: [u8; 4] = *b"SGRP";
/// The wire format version this build writes (it reads this and [`OLDEST_VERSION`]
/// on).
pub const VERSION: u8 = 2;
/// The oldest version this build reads.
pub const OLDEST_VERSION: u8 = 1;
/// Bytes before the body.
pub const HEADER_LEN: usize = 14;
/// Bytes of header plus trailing checksum.
pub const OVERHEAD: usize = HEADER_LEN + 4;
/// Longest table name a message carries.
pub const MAX_TABLE_NAME: usize = 256;

const KIND_TREE: u8 = 1;
const KIND_PLAN: u8 = 2;
const KIND_ROWS: u8 = 3;

/// Why bytes are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than a frame can be.
    #[error("message truncated: {len} bytes, a frame needs at least {needed}")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// Does not start with [`MAGIC`].
    #[error("not a segstore repair message (bad magic)")]
    BadMagic,
    /// A version this build does not read.
    #[error("unsupported repair message version {0} (this build reads versions {OLDEST_VERSION} to {VERSION})")]
    Version(u8),
    /// An unknown message kind.
    #[error("unknown repair message kind {0}")]
    UnknownKind(u8),
    /// The length field disagrees with the bytes given.
    #[error("message body length field says {declared} bytes but {actual} are present")]
    Length {
        /// From the header.
        declared: u64,
        /// Actually present.
        actual: u64,
    },
    /// The checksum does not match.
    #[error("message checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// From the frame.
        stored: u32,
        /// Over the bytes received.
        computed: u32,
    },
    /// The body does not follow the layout.
    #[error("malformed repair message body at frame byte {offset}: {reason}")]
    Malformed {
        /// Byte offset in the frame.
        offset: usize,
        /// What was wrong.
        reason: String,
    },
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Error {
        Error::BadMessage(e)
    }
}

/// A replica's Merkle tree, sent to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeMessage {
    /// Repair session.
    pub session: u64,
    /// Sender.
    pub from: ReplicaId,
    /// Table name (must match across replicas).
    pub table: String,
    /// Fingerprint of the table settings that must agree across replicas.
    pub fingerprint: u64,
    /// Range and depth.
    pub range: TokenRange,
    /// Depth.
    pub depth: u8,
    /// Rows hashed.
    pub rows: u64,
    /// `2^depth` leaf digests.
    pub leaves: Vec<Digest>,
    /// Digest of the sender's range tombstones ([`super::merkle::range_digest`]; `0`:
    /// none).
    pub range_digest: Digest,
}

impl TreeMessage {
    /// The message for `tree`.
    pub fn new(
        session: u64,
        from: ReplicaId,
        table: &str,
        fingerprint: u64,
        tree: &MerkleTree,
    ) -> Self {
        TreeMessage {
            session,
            from,
            table: table.to_string(),
            fingerprint,
            range: tree.shape().range,
            depth: tree.shape().depth,
            rows: tree.rows(),
            leaves: tree.leaves().to_vec(),
            range_digest: tree.range_digest(),
        }
    }

    /// Rebuild the tree (inner nodes are recomputed from the leaves, never trusted).
    pub fn tree(&self) -> Result<MerkleTree> {
        self.clone().into_tree()
    }

    /// [`Self::tree`], without copying the leaves.
    pub fn into_tree(self) -> Result<MerkleTree> {
        let shape = Shape::new(self.range, self.depth)?;
        if self.leaves.len() != shape.leaves() {
            return Err(Error::InvalidArgument(format!(
                "tree message has {} leaves, depth {} needs {}",
                self.leaves.len(),
                self.depth,
                shape.leaves()
            )));
        }
        Ok(MerkleTree::from_leaves(shape, self.leaves).with_range_digest(self.range_digest))
    }
}

/// The coordinator's instructions to one replica: which of its rows to stream to whom,
/// and whose streams to wait for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamPlan {
    /// Repair session.
    pub session: u64,
    /// For each target, the ranges (sorted, coalesced) whose rows to send it.
    pub targets: Vec<(ReplicaId, Vec<TokenRange>)>,
    /// Replicas that will stream to this one (rows, range tombstones or both).
    pub expect_from: Vec<ReplicaId>,
    /// Replicas to send this replica's range tombstones to (in the first batch of the
    /// stream to each; a target here need not be in `targets`).
    pub range_targets: Vec<ReplicaId>,
}

/// Rows for some token ranges, one batch of a stream from one replica to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowBatch {
    /// Repair session.
    pub session: u64,
    /// Sender.
    pub from: ReplicaId,
    /// Position of this batch in its stream, from 0.
    pub seq: u64,
    /// The stream's last batch.
    pub last: bool,
    /// The ranges the stream covers (in the first batch; empty in later ones).
    pub ranges: Vec<TokenRange>,
    /// Rows, in any order.
    pub rows: Vec<Row>,
    /// The sender's range tombstones (in the first batch of a stream that carries them;
    /// empty in the others), each applied with its own timestamp.
    pub range_tombstones: RangeTombstones,
}

/// Everything that crosses a [`super::Transport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A Merkle tree.
    Tree(TreeMessage),
    /// Streaming instructions.
    Plan(StreamPlan),
    /// Rows.
    Rows(RowBatch),
}

impl Message {
    /// The session the message belongs to.
    pub fn session(&self) -> u64 {
        match self {
            Message::Tree(m) => m.session,
            Message::Plan(m) => m.session,
            Message::Rows(m) => m.session,
        }
    }

    /// Encode as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len_hint());
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(match self {
            Message::Tree(_) => KIND_TREE,
            Message::Plan(_) => KIND_PLAN,
            Message::Rows(_) => KIND_ROWS,
        });
        out.extend_from_slice(&[0; 8]);
        match self {
            Message::Tree(m) => {
                put_u64(&mut out, m.session);
                varint::put(&mut out, m.from.0);
                put_bytes(&mut out, m.table.as_bytes());
                put_u64(&mut out, m.fingerprint);
                put_range(&mut out, &m.range);
                out.push(m.depth);
                varint::put(&mut out, m.rows);
                for d in &m.leaves {
                    out.extend_from_slice(&d.0.to_le_bytes());
                }
                out.extend_from_slice(&m.range_digest.0.to_le_bytes());
            }
            Message::Plan(m) => {
                put_u64(&mut out, m.session);
                varint::put(&mut out, m.targets.len() as u64);
                for (to, ranges) in &m.targets {
                    varint::put(&mut out, to.0);
                    put_ranges(&mut out, ranges);
                }
                varint::put(&mut out, m.expect_from.len() as u64);
                for r in &m.expect_from {
                    varint::put(&mut out, r.0);
                }
                varint::put(&mut out, m.range_targets.len() as u64);
                for r in &m.range_targets {
                    varint::put(&mut out, r.0);
                }
            }
            Message::Rows(m) => {
                put_u64(&mut out, m.session);
                varint::put(&mut out, m.from.0);
                varint::put(&mut out, m.seq);
                out.push(m.last as u8);
                put_ranges(&mut out, &m.ranges);
                varint::put(&mut out, m.rows.len() as u64);
                for r in &m.rows {
                    put_bytes(&mut out, &r.key);
                    put_bytes(&mut out, &r.value);
                    put_u64(&mut out, r.ts);
                    out.push(r.tombstone as u8 | if r.expires != 0 { 2 } else { 0 });
                    if r.expires != 0 {
                        put_u64(&mut out, r.expires);
                    }
                }
                m.range_tombstones.encode(&mut out);
            }
        }
        let body_len = (out.len() - HEADER_LEN) as u64;
        out[6..HEADER_LEN].copy_from_slice(&body_len.to_le_bytes());
        let crc = checksum(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn encoded_len_hint(&self) -> usize {
        OVERHEAD
            + 64
            + match self {
                Message::Tree(m) => m.leaves.len() * 16 + m.table.len() + 16,
                Message::Plan(m) => m.targets.iter().map(|t| 10 + t.1.len() * 16).sum(),
                Message::Rows(m) => {
                    m.ranges.len() * 16
                        + m.range_tombstones.len() * 32
                        + m.rows
                            .iter()
                            .map(|r| r.key.len() + r.value.len() + 24)
                            .sum::<usize>()
                }
            }
    }

    /// Decode one frame: the whole of `bytes`, nothing more or less.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() < OVERHEAD {
            return Err(DecodeError::Truncated {
                len: bytes.len(),
                needed: OVERHEAD,
            });
        }
        if bytes[..4] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = bytes[4];
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(DecodeError::Version(version));
        }
        let kind = bytes[5];
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&bytes[6..HEADER_LEN]);
        let declared = u64::from_le_bytes(len8);
        let actual = (bytes.len() - OVERHEAD) as u64;
        if declared != actual {
            return Err(DecodeError::Length { declared, actual });
        }
        let split = bytes.len() - 4;
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&bytes[split..]);
        let stored = u32::from_le_bytes(crc4);
        let computed = checksum(&bytes[..split]);
        if stored != computed {
            return Err(DecodeError::Checksum { stored, computed });
        }
        let mut r = Reader {
            b: &bytes[..split],
            pos: HEADER_LEN,
        };
        let msg = match kind {
            KIND_TREE => Message::Tree(decode_tree(&mut r, version)?),
            KIND_PLAN => Message::Plan(decode_plan(&mut r, version)?),
            KIND_ROWS => Message::Rows(decode_rows(&mut r, version)?),
            k => return Err(DecodeError::UnknownKind(k)),
        };
        if r.pos != r.b.len() {
            return Err(r.err(format!("{} bytes after the body", r.b.len() - r.pos)));
        }
        Ok(msg)
    }
}

fn decode_tree(r: &mut Reader<'_>, version: u8) -> Result<TreeMessage, DecodeError> {
    let session = r.u64()?;
    let from = ReplicaId(r.varint()?);
    let at = r.pos;
    let table = r.bytes(MAX_TABLE_NAME)?;
    let table =
        String::from_utf8(table.to_vec()).map_err(|_| r.err_at(at, "table name is not UTF-8"))?;
    let fingerprint = r.u64()?;
    let range = r.range()?;
    let at = r.pos;
    let depth = r.u8()?;
    if depth > MAX_DEPTH {
        return Err(r.err_at(at, format!("depth {depth} exceeds {MAX_DEPTH}")));
    }
    if range.width() < 1u128 << depth {
        return Err(r.err_at(at, format!("range {range} narrower than 2^{depth} leaves")));
    }
    let rows = r.varint()?;
    let n = 1usize << depth;
    let at = r.pos;
    let raw = r
        .take(n * 16)
        .map_err(|_| r.err_at(at, format!("{n} leaf digests do not fit")))?;
    let leaves = raw
        .chunks_exact(16)
        .map(|c| {
            let mut b = [0u8; 16];
            b.copy_from_slice(c);
            Digest(u128::from_le_bytes(b))
        })
        .collect();
    let range_digest = if version >= 2 {
        Digest(r.u128()?)
    } else {
        Digest(0)
    };
    Ok(TreeMessage {
        session,
        from,
        table,
        fingerprint,
        range,
        depth,
        rows,
        leaves,
        range_digest,
    })
}

fn decode_plan(r: &mut Reader<'_>, version: u8) -> Result<StreamPlan, DecodeError> {
    let session = r.u64()?;
    let n = r.count(2)?;
    let mut targets = Vec::with_capacity(n);
    for _ in 0..n {
        let to = ReplicaId(r.varint()?);
        targets.push((to, r.ranges()?));
    }
    let expect_from = r.ids()?;
    let range_targets = if version >= 2 { r.ids()? } else { Vec::new() };
    Ok(StreamPlan {
        session,
        targets,
        expect_from,
        range_targets,
    })
}

fn decode_rows(r: &mut Reader<'_>, version: u8) -> Result<RowBatch, DecodeError> {
    let session = r.u64()?;
    let from = ReplicaId(r.varint()?);
    let seq = r.varint()?;
    let at = r.pos;
    let last = match r.u8()? {
        0 => false,
        1 => true,
        b => return Err(r.err_at(at, format!("last flag {b} is not 0 or 1"))),
    };
    let ranges = r.ranges()?;
    // A row takes at least 1 + 1 + 8 + 1 bytes.
    let n = r.count(11)?;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        let at = r.pos;
        let key = r.bytes(MAX_KEY_LEN)?.to_vec();
        if key.is_empty() {
            return Err(r.err_at(at, "empty key"));
        }
        let value = r.bytes(MAX_VALUE_LEN)?.to_vec();
        let ts = r.u64()?;
        let at = r.pos;
        let flags = r.u8()?;
        if flags > 3 {
            return Err(r.err_at(at, format!("unknown row flags {flags:#04x}")));
        }
        let tombstone = flags & 1 == 1;
        if tombstone && !value.is_empty() {
            return Err(r.err_at(at, "a tombstone has no value"));
        }
        let expires = if flags & 2 != 0 {
            let at = r.pos;
            match r.u64()? {
                0 => return Err(r.err_at(at, "expiry flag with an expiry of 0")),
                e => e,
            }
        } else {
            0
        };
        rows.push(Row {
            key,
            value,
            ts,
            tombstone,
            expires,
        });
    }
    let range_tombstones = if version >= 2 {
        r.range_tombstones()?
    } else {
        RangeTombstones::new()
    };
    Ok(RowBatch {
        session,
        from,
        seq,
        last,
        ranges,
        rows,
        range_tombstones,
    })
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint::put(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_range(out: &mut Vec<u8>, r: &TokenRange) {
    put_u64(out, r.start);
    put_u64(out, r.end);
}

fn put_ranges(out: &mut Vec<u8>, rs: &[TokenRange]) {
    varint::put(out, rs.len() as u64);
    for r in rs {
        put_range(out, r);
    }
}

/// A cursor over a frame's body; every read is bounds-checked.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, reason: impl Into<String>) -> DecodeError {
        self.err_at(self.pos, reason)
    }

    fn err_at(&self, offset: usize, reason: impl Into<String>) -> DecodeError {
        DecodeError::Malformed {
            offset,
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                self.err(format!(
                    "needs {n} bytes, {} remain",
                    self.b.len() - self.pos
                ))
            })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn u128(&mut self) -> Result<u128, DecodeError> {
        let mut b = [0u8; 16];
        b.copy_from_slice(self.take(16)?);
        Ok(u128::from_le_bytes(b))
    }

    /// A list of replica ids.
    fn ids(&mut self) -> Result<Vec<ReplicaId>, DecodeError> {
        let n = self.count(1)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(ReplicaId(self.varint()?));
        }
        Ok(v)
    }

    /// A range tombstone block, canonical (disjoint, coalesced, in key order).
    fn range_tombstones(&mut self) -> Result<RangeTombstones, DecodeError> {
        let at = self.pos;
        // A fragment takes at least 1 + 1 + 1 + 8 bytes: check the count as `count` does.
        let mut peek = Reader { b: self.b, pos: at };
        peek.count(11)?;
        let (set, used) = RangeTombstones::decode(&self.b[at..]).map_err(|m| {
            self.err_at(
                at + m.offset as usize,
                format!("range tombstones: {}", m.reason),
            )
        })?;
        self.pos += used;
        Ok(set)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let (v, used) = varint::get(&self.b[self.pos..])
            .ok_or_else(|| self.err("truncated or overlong varint"))?;
        self.pos += used;
        Ok(v)
    }

    /// A list count, checked against the bytes left (each item takes at least
    /// `min_item` bytes), so a bad count never causes a huge allocation.
    fn count(&mut self, min_item: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.varint()?;
        let left = (self.b.len() - self.pos) as u64;
        if n > left / min_item as u64 {
            return Err(self.err_at(
                at,
                format!("count {n} cannot fit in the {left} bytes that remain"),
            ));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let at = self.pos;
        let n = self.varint()?;
        if n > max as u64 {
            return Err(self.err_at(at, format!("length {n} exceeds the limit of {max}")));
        }
        self.take(n as usize)
    }

    fn range(&mut self) -> Result<TokenRange, DecodeError> {
        let at = self.pos;
        let start = self.u64()?;
        let end = self.u64()?;
        if start > end {
            return Err(self.err_at(at, format!("range start {start:#x} past end {end:#x}")));
        }
        Ok(TokenRange { start, end })
    }

    fn ranges(&mut self) -> Result<Vec<TokenRange>, DecodeError> {
        let n = self.count(16)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.range()?);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests;
