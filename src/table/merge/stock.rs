//! A thread's stock of cell buffers for scans' merges (issue 19 item 3).
//!
//! A forward scan under writes holds two [`Entry`] buffers per source of its side
//! merge ([`CopyMerge`](super::CopyMerge)) and one for the overlay's held cell; each
//! grew a key and a value buffer on its first row and freed both when the scan ended,
//! about twenty allocations and frees a YCSB E scan of four sources. A scan now takes
//! its buffers from its thread's stock and gives them back when it is dropped, so a
//! thread that scans again reuses them, their capacity kept.
//!
//! The stock is the thread's own ([`Shelf`]): a buffer taken on one thread and given
//! back on another joins that thread's stock. It holds at most [`KEPT`] buffers of at
//! most [`KEPT_BYTES`] each, so a thread keeps some 100 KiB at most, and a buffer grown
//! past that by a large value goes back to the allocator.

use std::cell::RefCell;

use crate::segment::Entry;
use crate::shelf::Shelf;

/// The most buffers a thread keeps: a scan of sixteen side sources and the next one's.
pub(crate) const KEPT: usize = 40;

/// The most bytes (key and value capacity together) a kept buffer may hold.
pub(crate) const KEPT_BYTES: usize = 2048;

thread_local! {
    static LOCAL: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

static STOCK: Shelf<Entry> = Shelf::new(&LOCAL, KEPT);

/// A buffer from this thread's stock (an empty cell, its buffers' capacity kept), or a
/// new one.
pub(crate) fn take() -> Entry {
    STOCK.take().unwrap_or_default()
}

/// Give `e` back to this thread's stock, emptied, unless the stock is full or `e` is
/// larger than [`KEPT_BYTES`] (then it is freed). During the thread's exit, freed.
pub(crate) fn give(mut e: Entry) {
    if e.key.capacity() + e.value.capacity() > KEPT_BYTES {
        return;
    }
    e.key.clear();
    e.value.clear();
    (e.ts, e.tombstone, e.expires) = (0, false, 0);
    STOCK.give(e);
}

#[cfg(test)]
pub(crate) fn kept() -> usize {
    STOCK.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_comes_back_empty_with_its_capacity() {
        while kept() > 0 {
            drop(take());
        }
        let mut e = take();
        e.key.extend_from_slice(b"key");
        e.value.extend_from_slice(&[7; 100]);
        e.ts = 5;
        let (kc, vc) = (e.key.capacity(), e.value.capacity());
        give(e);
        assert_eq!(kept(), 1);
        let e = take();
        assert_eq!(kept(), 0);
        assert_eq!(e, Entry::default());
        assert_eq!((e.key.capacity(), e.value.capacity()), (kc, vc));
    }

    #[test]
    fn the_stock_is_bounded_in_count_and_in_each_buffers_bytes() {
        for _ in 0..KEPT + 5 {
            give(Entry {
                value: Vec::with_capacity(16),
                ..Entry::default()
            });
        }
        assert_eq!(kept(), KEPT);
        while kept() > 0 {
            drop(take());
        }
        give(Entry {
            value: Vec::with_capacity(KEPT_BYTES + 1),
            ..Entry::default()
        });
        assert_eq!(kept(), 0, "a buffer past KEPT_BYTES is freed");
        // An empty stock makes new buffers.
        assert_eq!(take(), Entry::default());
    }
}
