//! Mappings and memory residency, as reported: the types of [`crate::StoreStats`]
//! (`mappings`, `memory`, `budget`, `side_runs`), [`crate::SegmentStatsView`], the leaked mappings of
//! [`crate::CloseReport`] and [`crate::segment::SegmentReader::memory_report`]; the
//! mapping budget and the data map budget of [`crate::segment::ReaderOptions`]; and the kernel's own figures
//! (`/proc/self/smaps`, `/proc/self/status`, transparent huge page settings) that those
//! reports are read from. Settings are in [`crate::MemoryOptions`].
//!
//! Every residency control is best effort: a refused lock or advice is a report
//! ([`LockReport`], [`AdviceReport`]), never a failed open; what the kernel granted is
//! read back on demand ([`MappingResidency`]), never assumed.

pub use crate::io::budget::{BudgetStats, MapBudget};
pub use crate::io::data_budget::{DataMapBudget, DataMapStats, DataReservation};
pub use crate::io::identity::FileId;
pub use crate::io::kstats::{ProcessMemory, RangeFigures, SmapsSnapshot, ThpMode, ThpSupport, Vma};
pub use crate::io::memlimit::available_memory;
pub use crate::io::registry::{MappingSite, MappingStats};
pub use crate::io::residency::{
    drop_page_cache, memlock_limit, AdviceReport, LockReport, LockScope, MappingKind,
    MappingResidency, MemlockLimit, ResidencyTotals,
};
pub use crate::table::lsm::SideRunBudgetStats;
