//! Segment handles: a segment is shared as `Arc<Segment>`; handles are tracked for leak
//! reports when tracking is on.
//!
//! Marking a segment obsolete does nothing visible until its last handle drops. Then,
//! by field order, its reader is dropped first (every map of it is unmapped and
//! uncounted) and only after that are its files handed to the deleter (invariant 1).

use std::collections::HashMap;
use std::ops::Deref;
use std::panic::Location;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::deleter::Deleter;
use crate::segment::{Component, SegmentName, SegmentReader};

/// An open segment, shared by handles.
#[derive(Debug)]
pub struct Segment {
    // Field order is the protocol: `reader` (and its maps) drop before `retire` runs.
    reader: SegmentReader,
    retire: Retire,
}

#[derive(Debug)]
struct Retire {
    obsolete: AtomicBool,
    paths: Vec<PathBuf>,
    deleter: Deleter,
    name: SegmentName,
}

impl Drop for Retire {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            tracing::debug!(segment = %self.name, "last handle of obsolete segment dropped; deleting");
            if let Err(e) = self.deleter.delete(&self.paths) {
                if matches!(e, crate::Error::Closed) {
                    // Sealed between the check and the journal write: as if after it.
                    tracing::info!(segment = %self.name, "store closed: deletion left for the next open");
                    return;
                }
                tracing::error!(segment = %self.name, error = %e, "could not queue deletion; the next open's orphan scan will remove the files");
            }
        }
    }
}

impl Segment {
    /// Wrap an open reader. `deleter` will delete its files once it is obsolete and
    /// unreferenced.
    pub(crate) fn new(reader: SegmentReader, deleter: Deleter) -> Segment {
        let paths = Component::ALL
            .iter()
            .map(|&c| reader.name().path(reader.dir(), c))
            .collect();
        let name = reader.name().clone();
        Segment {
            reader,
            retire: Retire {
                obsolete: AtomicBool::new(false),
                paths,
                deleter,
                name,
            },
        }
    }

    /// Delete this segment's files once the last handle is dropped.
    pub(crate) fn mark_obsolete(&self) {
        self.retire.obsolete.store(true, Ordering::Release);
    }

    /// Paths of this segment's components.
    pub fn component_paths(&self) -> &[PathBuf] {
        &self.retire.paths
    }

    /// Has it been marked obsolete (replaced by compaction, or its table dropped)?
    pub fn is_obsolete(&self) -> bool {
        self.retire.obsolete.load(Ordering::Acquire)
    }

    /// The reader.
    pub fn reader(&self) -> &SegmentReader {
        &self.reader
    }
}

impl Deref for Segment {
    type Target = SegmentReader;
    fn deref(&self) -> &SegmentReader {
        &self.reader
    }
}

/// Where a live handle was taken.
#[derive(Debug, Clone)]
pub struct HandleSite {
    /// The segment.
    pub segment: SegmentName,
    /// Source location of the code that took the handle.
    pub taken_at: &'static Location<'static>,
}

/// Records every live handle of one store, for leak reports (Cassandra's "LEAK
/// DETECTED"). Costs a mutex operation per handle taken or dropped, never per read.
#[derive(Debug, Default)]
pub struct LeakTracker {
    sites: Mutex<HashMap<u64, HandleSite>>,
    next: AtomicU64,
}

impl LeakTracker {
    /// Live handles and where they were taken.
    pub fn live(&self) -> Vec<HandleSite> {
        let mut v: Vec<_> = self.sites.lock().values().cloned().collect();
        v.sort_by(|a, b| a.segment.cmp(&b.segment));
        v
    }
}

#[derive(Debug)]
struct Lease {
    tracker: Arc<LeakTracker>,
    token: u64,
}

impl Lease {
    fn take(
        tracker: &Arc<LeakTracker>,
        segment: &SegmentName,
        at: &'static Location<'static>,
    ) -> Lease {
        let token = tracker.next.fetch_add(1, Ordering::Relaxed);
        tracker.sites.lock().insert(
            token,
            HandleSite {
                segment: segment.clone(),
                taken_at: at,
            },
        );
        Lease {
            tracker: tracker.clone(),
            token,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.tracker.sites.lock().remove(&self.token);
    }
}

/// A counted reference to a segment. Keeps the segment's maps open while it lives.
#[derive(Debug)]
pub struct SegmentHandle {
    seg: Arc<Segment>,
    tracker: Option<Arc<LeakTracker>>,
    _lease: Option<Lease>,
}

impl SegmentHandle {
    /// The first handle of a newly opened segment.
    #[track_caller]
    pub(crate) fn new(seg: Segment, tracker: Option<Arc<LeakTracker>>) -> SegmentHandle {
        let at = Location::caller();
        let lease = tracker.as_ref().map(|t| Lease::take(t, seg.name(), at));
        SegmentHandle {
            seg: Arc::new(seg),
            tracker,
            _lease: lease,
        }
    }

    /// The segment.
    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Number of handles of this segment alive now.
    pub fn handle_count(&self) -> usize {
        Arc::strong_count(&self.seg)
    }
}

impl Clone for SegmentHandle {
    #[track_caller]
    fn clone(&self) -> Self {
        let at = Location::caller();
        let lease = self
            .tracker
            .as_ref()
            .map(|t| Lease::take(t, self.seg.name(), at));
        SegmentHandle {
            seg: self.seg.clone(),
            tracker: self.tracker.clone(),
            _lease: lease,
        }
    }
}

impl Deref for SegmentHandle {
    type Target = SegmentReader;
    fn deref(&self) -> &SegmentReader {
        &self.seg.reader
    }
}
