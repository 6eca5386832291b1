//! [`Value`]: what [`crate::table::Table::get`] returns, a value that is not copied.
//!
//! A value found in a memtable is a copy of a short value, or shares a long one's bytes
//! with the memtable ([`CellValue`]: the cell can be overwritten meanwhile, the value
//! keeps the bytes it got); neither allocates. A value found in a
//! segment whose data is mapped borrows the mapped bytes and holds the view it was read
//! through, so the segment stays mapped (and, if a compaction made it obsolete meanwhile,
//! undeleted: deletion waits for the last handle, as for scans) until the value drops.
//! A value read with positional reads (`standard` mode) is necessarily copied, once.
//!
//! Holding a mapped value pins every segment of the view it was read from, like an open
//! scan; values are meant to be used and dropped, not stored. A value alive at
//! [`crate::Store::close`] shows in its leak report as the view's handles.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, Range};
use std::sync::Arc;

use crate::lifecycle::View;
use crate::table::memtable::{CellValue, SharedCell};

/// A value read from a table, without copying it (but a short one from a memtable).
/// Dereferences to `[u8]`; compares equal to byte slices, arrays and vectors holding
/// the same bytes. Cloning it is cheap (a reference count, or a copy of a short
/// memtable value).
#[derive(Clone)]
pub struct Value(Repr);

#[derive(Clone)]
enum Repr {
    /// A copy made by a positional read.
    Shared(Arc<[u8]>),
    /// A memtable's value.
    Cell(CellValue),
    /// `bytes` of the mapped data of segment `segment` of `view`.
    Mapped {
        view: Arc<View>,
        segment: usize,
        bytes: Range<usize>,
    },
}

impl Value {
    /// A value sharing `bytes`.
    pub(crate) fn shared(bytes: Arc<[u8]>) -> Value {
        Value(Repr::Shared(bytes))
    }

    /// Where the value `bytes`, read from segment `segment` of `view`, can be held:
    /// in place when they lie in its mapped data, else a copy.
    #[inline]
    pub(crate) fn place(view: &View, segment: usize, bytes: &[u8]) -> Place {
        let mapped = view
            .segments
            .get(segment)
            .and_then(|h| h.mapped_data())
            .and_then(|data| {
                // Where `bytes` starts inside the map, if it does (pointer arithmetic on
                // addresses only; nothing is dereferenced).
                let start = (bytes.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
                let end = start.checked_add(bytes.len())?;
                (end <= data.len()).then_some(start..end)
            });
        match mapped {
            Some(range) => Place::Mapped {
                segment,
                bytes: range,
            },
            None => Place::Shared(Arc::from(bytes)),
        }
    }

    /// The value at `place` of `view`, holding a clone of `view` if the place is mapped;
    /// a memtable's is the value of `memtable`, the cell the read found there, taken
    /// (`None` if it holds none, which a memtable place rules out).
    #[inline]
    pub(crate) fn at(
        view: &Arc<View>,
        place: Place,
        memtable: &mut Option<SharedCell>,
    ) -> Option<Value> {
        Some(match place {
            Place::Shared(b) => Value::shared(b),
            Place::Memtable => Value(Repr::Cell(memtable.take()?.value)),
            Place::Mapped { segment, bytes } => Value(Repr::Mapped {
                view: Arc::clone(view),
                segment,
                bytes,
            }),
        })
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Shared(b) => b,
            Repr::Cell(c) => c,
            Repr::Mapped {
                view,
                segment,
                bytes,
            } => view
                .segments
                .get(*segment)
                .and_then(|h| h.mapped_data())
                .and_then(|d| d.get(bytes.clone()))
                // Unreachable: the range was taken from this very map, which the view
                // keeps open.
                .unwrap_or_default(),
        }
    }

    /// Whether the value borrows a segment's mapped bytes (and so keeps that segment
    /// mapped while it lives).
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped { .. })
    }
}

/// Where a value found by a point read can be held (see [`Value::place`]).
pub(crate) enum Place {
    /// A copy.
    Shared(Arc<[u8]>),
    /// The memtable cell the read found (moved into the value only at the end: a place
    /// is returned through the segment reads, and a short value would make it large).
    Memtable,
    /// In place in the mapped data of a segment of the view read.
    Mapped { segment: usize, bytes: Range<usize> },
}

impl Deref for Value {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Borrow<[u8]> for Value {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Value(b\"")?;
        for &b in self.as_slice() {
            fmt::Display::fmt(&b.escape_ascii(), f)?;
        }
        f.write_str("\")")
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Value) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    fn cmp(&self, other: &Value) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

/// `Value == other` and `other == Value` for each byte container.
macro_rules! eq_bytes {
    ($($t:ty),*) => {$(
        impl PartialEq<$t> for Value {
            fn eq(&self, other: &$t) -> bool {
                self.as_slice() == AsRef::<[u8]>::as_ref(other)
            }
        }
        impl PartialEq<Value> for $t {
            fn eq(&self, other: &Value) -> bool {
                AsRef::<[u8]>::as_ref(self) == other.as_slice()
            }
        }
    )*};
}
eq_bytes!([u8], &[u8], Vec<u8>);

impl<const N: usize> PartialEq<[u8; N]> for Value {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Value {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.as_slice() == *other
    }
}

impl From<Value> for Vec<u8> {
    fn from(v: Value) -> Vec<u8> {
        v.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_and_prints_as_its_bytes() {
        let v = Value::shared(Arc::from(&b"ab\x00c"[..]));
        assert_eq!(v, b"ab\x00c");
        assert_eq!(v, &b"ab\x00c"[..]);
        assert_eq!(v, b"ab\x00c".to_vec());
        assert_eq!(b"ab\x00c".to_vec(), v);
        assert_eq!(&b"ab\x00c"[..], v);
        assert_ne!(v, b"ab".to_vec());
        assert_eq!(v.to_vec(), b"ab\x00c");
        assert_eq!(v.len(), 4);
        assert_eq!(format!("{v:?}"), r#"Value(b"ab\x00c")"#);
        assert!(!v.is_mapped());
        // Hashes as its bytes do (so `Borrow<[u8]>` is sound for hash maps).
        let hash = |h: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
            let mut s = std::collections::hash_map::DefaultHasher::new();
            h(&mut s);
            s.finish()
        };
        assert_eq!(hash(&|s| v.hash(s)), hash(&|s| b"ab\x00c"[..].hash(s)));
        assert_eq!(v.cmp(&v.clone()), std::cmp::Ordering::Equal);
    }

    #[test]
    fn values_cross_threads() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Value>();
    }

    #[test]
    fn bytes_outside_any_map_are_copied() {
        let view = Arc::new(View::default());
        let v = Value::at(&view, Value::place(&view, 0, b"xyz"), &mut None).expect("a copy");
        assert!(!v.is_mapped());
        assert_eq!(v, b"xyz");
    }
}
