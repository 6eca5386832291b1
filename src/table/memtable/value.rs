//! [`CellValue`]: a memtable cell's value, held inline in the key's node when short,
//! shared behind an `Arc` when long.
//!
//! A scan reads a memtable cell's value where the node holds it: with every value in
//! an allocation of its own, each cell a scan read ahead cost a cache miss on the
//! value after the one on the node, and the node's lock (a locked instruction, which
//! x86 does not reorder loads across) kept those misses from overlapping. Inline, the
//! value comes in with the node's lines, which the read-ahead prefetches together. A
//! put of a short value makes no allocation for it either, and a point read copies it
//! (at most [`INLINE_VALUE`] bytes) instead of counting a reference on a shared line.
//!
//! A long value stays shared, so a point read of it copies nothing: the node is
//! [`INLINE_VALUE`] bytes larger than it needs for such a key.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Values up to this many bytes are held inline: a node of a key of up to 24 bytes is
/// then one 224-byte block of the allocator (this module's tests check it). The size
/// trades memory (`Table::put` of 100,000 keys of 16 bytes, bytes a key in memory
/// before / after: 8-byte values 239 / 287, 100-byte 335 / 287, 135-byte 367 / 447,
/// 1,000-byte 1,231 / 1,311) for a scan's miss on each short value (YCSB's values
/// are 100 bytes).
pub const INLINE_VALUE: usize = 102;

/// A memtable cell's value (empty for a tombstone): inline up to [`INLINE_VALUE`]
/// bytes, else shared. Dereferences to its bytes; cloning copies a short value and
/// counts a reference to a long one.
#[derive(Clone)]
pub struct CellValue(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE_VALUE] },
    Shared(Arc<[u8]>),
}

impl CellValue {
    /// The empty value (every tombstone's).
    pub const EMPTY: CellValue = CellValue(Repr::Inline {
        len: 0,
        bytes: [0; INLINE_VALUE],
    });

    /// A value holding a copy of `v`.
    #[inline]
    pub fn new(v: &[u8]) -> CellValue {
        if v.len() > INLINE_VALUE {
            return CellValue(Repr::Shared(Arc::from(v)));
        }
        let mut bytes = [0; INLINE_VALUE];
        bytes[..v.len()].copy_from_slice(v);
        // Fits in a `u8`: at most `INLINE_VALUE` bytes.
        CellValue(Repr::Inline {
            len: v.len() as u8,
            bytes,
        })
    }

    /// The shared bytes of a long value; `None` for one held inline.
    #[inline]
    pub fn shared(&self) -> Option<&Arc<[u8]>> {
        match &self.0 {
            Repr::Inline { .. } => None,
            Repr::Shared(a) => Some(a),
        }
    }
}

impl Deref for CellValue {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.0 {
            // `len` never exceeds `INLINE_VALUE` (`new`); `get` keeps that unchecked
            // fact from becoming a panic.
            Repr::Inline { len, bytes } => bytes.get(..*len as usize).unwrap_or(bytes),
            Repr::Shared(a) => a,
        }
    }
}

impl AsRef<[u8]> for CellValue {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for CellValue {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for CellValue {}

impl fmt::Debug for CellValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::NodeData;
    use super::*;

    #[test]
    fn short_values_are_inline_and_long_ones_shared() {
        for len in [0, 1, 100, INLINE_VALUE, INLINE_VALUE + 1, 4096] {
            let v: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let c = CellValue::new(&v);
            assert_eq!(&*c, &v[..], "{len} bytes read back");
            assert_eq!(c.shared().is_some(), len > INLINE_VALUE, "{len} bytes");
            assert_eq!(c.clone(), c);
        }
        assert!(CellValue::EMPTY.is_empty());
        assert_eq!(CellValue::EMPTY, CellValue::new(b""));
    }

    /// A node of a key of up to 24 bytes and a value held inline fits one 224-byte
    /// block of the allocator: its `Arc`'s two counts, and the allocator's 8-byte
    /// header. (A node and a 100-byte value apart took blocks of 144 and 128 bytes.)
    #[test]
    fn a_node_with_an_inline_value_fits_a_224_byte_block() {
        let node = std::mem::size_of::<NodeData>();
        assert!(16 + node + 8 <= 224, "a node of {node} bytes");
    }

    /// A point read's cell keeps the bytes it got while its key is overwritten in place,
    /// whether its value was held inline (copied out) or shared (a long one). (Not in
    /// the `loom` build, whose memtable runs only inside a model.)
    #[cfg(not(segstore_loom))]
    #[test]
    fn a_point_read_keeps_its_value_across_an_overwrite() {
        use super::super::Memtable;
        use crate::segment::RecordRef;
        for len in [0, INLINE_VALUE, INLINE_VALUE + 1] {
            let m = Memtable::new();
            let put = |b: u8, ts| {
                let v = vec![b; len];
                m.insert(RecordRef { key: b"k", value: &v, ts, tombstone: false, expires: 0 });
            };
            put(1, 1);
            let got = m.get_shared(b"k").expect("present");
            put(2, 2);
            assert_eq!(&*got.value, &vec![1; len][..], "{len} bytes");
            assert_eq!(got.value.shared().is_some(), len > INLINE_VALUE);
            let now = m.get_shared(b"k").expect("present");
            assert_eq!(&*now.value, &vec![2; len][..], "{len} bytes");
        }
    }
}
