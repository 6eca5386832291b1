//! A thread's stock of block walks for segment scans (issue 19 item 3), as
//! `table::merge::stock` keeps cell buffers.
//!
//! Every [`SegmentIter`](super::SegmentIter) over a block format walks its blocks with
//! a boxed `BlockWalk` that holds a key buffer, and, reading positionally or
//! decompressing, a block buffer and a scratch buffer per end. A scan under writes opens
//! one per segment beside the memtables (YCSB E's: four or five), and each cost a box
//! and a key buffer allocated at the scan's start and freed at its end. The walk now
//! comes from its thread's stock, renewed in place, and goes back to it when the
//! iterator is dropped, holding no block, its buffers' capacity kept.
//!
//! The stock is the thread's own ([`Shelf`]): a walk taken on one thread and given
//! back on another joins that thread's stock. It keeps at most [`KEPT`] walks of
//! at most [`KEPT_BYTES`] of buffers each (about 1 MiB a thread at the very most); a
//! walk with larger buffers goes back to the allocator.

use std::cell::RefCell;

use super::block_walk::BlockWalk;
use super::reader::SegmentReader;
use crate::shelf::Shelf;

/// The most walks a thread keeps: a scan of sixteen segments' worth.
const KEPT: usize = 16;

/// The most bytes of buffers a kept walk may hold: room for a few blocks of 16 KiB (a
/// walk that read larger ones goes back to the allocator).
const KEPT_BYTES: usize = 64 << 10;

thread_local! {
    // Boxed: the box itself is what a `Walk` holds and the stock keeps.
    #[allow(clippy::vec_box)]
    static LOCAL: RefCell<Vec<Box<BlockWalk>>> = const { RefCell::new(Vec::new()) };
}

static STOCK: Shelf<Box<BlockWalk>> = Shelf::new(&LOCAL, KEPT);

/// A [`SegmentIter`](super::SegmentIter)'s block walk, if its segment has blocks
/// (format 4 and later), given back to the thread's stock when dropped. (The Drop is
/// this field's, not the iterator's, so the iterator borrows its reader no longer than
/// before.)
pub(super) struct Walk(Option<Box<BlockWalk>>);

impl Walk {
    /// A walk of `r`'s blocks if it has any: one from this thread's stock, renewed, or a
    /// new one.
    pub(super) fn of(r: &SegmentReader) -> Walk {
        if !r.has_blocks() {
            return Walk(None);
        }
        Walk(Some(match take() {
            Some(mut w) => {
                w.renew(r);
                w
            }
            None => Box::new(BlockWalk::new(r)),
        }))
    }

    #[inline(always)]
    pub(super) fn get(&self) -> Option<&BlockWalk> {
        self.0.as_deref()
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self) -> Option<&mut BlockWalk> {
        self.0.as_deref_mut()
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            give(w);
        }
    }
}

/// A walk from this thread's stock (to be renewed for its segment), if it has one.
fn take() -> Option<Box<BlockWalk>> {
    STOCK.take()
}

/// Give `w` back to this thread's stock, holding no block, unless the stock is full or
/// its buffers are larger than [`KEPT_BYTES`] (then it is freed). During the thread's
/// exit, freed.
fn give(mut w: Box<BlockWalk>) {
    if w.release() > KEPT_BYTES {
        return;
    }
    STOCK.give(w);
}

#[cfg(test)]
pub(super) fn kept() -> usize {
    STOCK.len()
}
