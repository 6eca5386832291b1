//! What a case is made of: the store's setup and the operations, and their strategies.
//! Keys, cursors and views are named by index (modulo how many there are), so every
//! operation applies whatever came before it, and shrinking keeps cases valid.

use proptest::prelude::*;
use proptest::{collection, option};

/// The store of a case: segment format, disk access, blocks, compression, compaction.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    pub(crate) format: u16,
    /// Mapped (`mmap`) or positional reads (`standard`).
    pub(crate) mmap: bool,
    pub(crate) block: usize,
    /// 0: none, 1: LZ4, 2: zstd (format 6 on).
    pub(crate) compression: u8,
    /// Leveled (chains of disjoint segments below level 0) or size-tiered.
    pub(crate) leveled: bool,
    /// Fixed-width keys and values (format 8's fixed blocks).
    pub(crate) fixed_keys: bool,
    /// Wider values: more segments per level.
    pub(crate) wide: bool,
}

/// A scan step with its seek target as a probe of the pool (`Pool::probe`).
#[derive(Clone, Debug)]
pub(crate) enum Move {
    Next,
    NextWith,
    Back,
    BackWith,
    Seek(Option<(usize, u8)>),
    SeekBack(Option<(usize, u8)>),
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Put(usize, u8),
    /// A put at an explicit (old) timestamp.
    PutAt(usize, u8, u64),
    Delete(usize),
    DeleteAt(usize, u64),
    /// A put with a TTL of this many microseconds of the expiry clock.
    PutTtl(usize, u8, u64),
    /// The same at an explicit (old) timestamp.
    PutTtlAt(usize, u8, u64, u64),
    Get(usize),
    /// Puts (`Some`) and deletes of pool keys in one batch.
    Batch(Vec<(usize, Option<u8>)>),
    /// A range delete from the first pool key to the second (nothing if not below it).
    DeleteRange(usize, usize),
    /// Puts of `n` consecutive pool keys from `i` in one batch.
    Bulk(usize, usize, u8),
    Flush,
    Freeze,
    CompactPending,
    Compact,
    /// The expiry clock moves on this many microseconds.
    Clock(u64),
    /// A read view taken now (the oldest of three dropped).
    View,
    /// A cursor opened on the table (`None`) or on view `i`, between bounds of pool
    /// keys (`Pool::bound`). The oldest of five is drained and closed.
    Open(Option<usize>, Option<(usize, bool)>, Option<(usize, bool)>),
    Step(usize, Move),
    /// Cursor `c` stepped `n` times forward on another thread, then brought back.
    Hop(usize, usize),
    /// Cursor `c` drained and closed.
    Close(usize),
}

pub(crate) fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![
            Just(3u16),
            Just(4),
            Just(5),
            Just(6),
            Just(7),
            Just(8),
            Just(8),
            Just(8)
        ],
        any::<bool>(),
        prop_oneof![Just(64usize), Just(200usize)],
        0u8..3,
        prop_oneof![3 => Just(true), 1 => Just(false)],
        prop_oneof![3 => Just(false), 1 => Just(true)],
        any::<bool>(),
    )
        .prop_map(
            |(format, mmap, block, compression, leveled, fixed_keys, wide)| Setup {
                format,
                mmap,
                block,
                // Format 3 compresses nothing; zstd came with format 6.
                compression: match (compression, format) {
                    (_, 3) => 0,
                    (2, 4 | 5) => 1,
                    (c, _) => c,
                },
                leveled,
                fixed_keys,
                wide,
            },
        )
}

/// 20 to 400 operations; range deletes in some cases only (they turn every scan into
/// the general merge), puts in their place in the others.
pub(crate) fn ops() -> impl Strategy<Value = Vec<Op>> {
    any::<bool>().prop_flat_map(|ranges| collection::vec(op(ranges), 20..400))
}

fn idx() -> impl Strategy<Value = usize> {
    0usize..1000
}

fn op(ranges: bool) -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (idx(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (idx(), any::<u8>(), 1u64..60).prop_map(|(k, v, t)| Op::PutAt(k, v, t)),
        4 => idx().prop_map(Op::Delete),
        1 => (idx(), 1u64..60).prop_map(|(k, t)| Op::DeleteAt(k, t)),
        3 => (idx(), any::<u8>(), 1u64..40).prop_map(|(k, v, t)| Op::PutTtl(k, v, t)),
        1 => (idx(), any::<u8>(), 1u64..60, 1u64..40)
            .prop_map(|(k, v, ts, t)| Op::PutTtlAt(k, v, ts, t)),
        3 => idx().prop_map(Op::Get),
        2 => collection::vec((idx(), option::of(any::<u8>())), 1..5).prop_map(Op::Batch),
        1 => (idx(), idx()).prop_map(move |(a, b)| match ranges {
            true => Op::DeleteRange(a, b),
            false => Op::Put(a, b as u8),
        }),
        2 => (idx(), 5usize..40, any::<u8>()).prop_map(|(i, n, v)| Op::Bulk(i, n, v)),
        3 => Just(Op::Flush),
        1 => Just(Op::Freeze),
        2 => Just(Op::CompactPending),
        1 => Just(Op::Compact),
        2 => (0u64..25).prop_map(Op::Clock),
        1 => Just(Op::View),
        4 => (
            option::of(idx()),
            option::weighted(0.6, (idx(), any::<bool>())),
            option::weighted(0.4, (idx(), any::<bool>())),
        )
            .prop_map(|(v, lo, hi)| Op::Open(v, lo, hi)),
        14 => (idx(), moves()).prop_map(|(c, m)| Op::Step(c, m)),
        1 => (idx(), 0usize..6).prop_map(|(c, n)| Op::Hop(c, n)),
        1 => idx().prop_map(Op::Close),
    ]
}

fn moves() -> impl Strategy<Value = Move> {
    let probe = || prop_oneof![1 => Just(None), 8 => (idx(), 0u8..3).prop_map(Some)];
    prop_oneof![
        6 => Just(Move::Next),
        2 => Just(Move::NextWith),
        3 => Just(Move::Back),
        1 => Just(Move::BackWith),
        2 => probe().prop_map(Move::Seek),
        2 => probe().prop_map(Move::SeekBack),
    ]
}
