//! Compaction filters: code a table runs on every live cell its compactions write, to
//! keep it, remove it or replace its value (RocksDB's `CompactionFilter`, the feature
//! fjall's users ask for most): expire rows by a field of their value, drop a tenant's
//! data lazily, rewrite an old value encoding.
//!
//! A filter is code, so it is not persisted with the table's settings: set it with
//! [`Table::set_compaction_filter`](crate::table::Table::set_compaction_filter) after
//! every open, before the compactions it should apply to (open the store with
//! `background_compaction` off if none may run without it).
//!
//! What each decision writes, so that nothing older comes back:
//! - [`FilterDecision::Remove`] writes a tombstone at the cell's timestamp (a tombstone
//!   beats a value of the same timestamp), which hides older versions of the key in
//!   segments outside the compaction and is purged like any tombstone after
//!   `gc_grace`. Where no older cell can exist outside the merge (the cell is below
//!   the compaction's purge cutoff), nothing is written at all.
//! - [`FilterDecision::Replace`] writes the new value at the cell's timestamp.
//! - Tombstones are never shown to the filter.
//!
//! A filter runs on one compaction thread at a time per table, but on several tables'
//! compactions at once, so it is `Send + Sync`. A filter that panics, or replaces a
//! value with one past [`MAX_VALUE_LEN`](crate::format::MAX_VALUE_LEN), makes the
//! compaction fail with [`Error::CompactionFilter`](crate::Error::CompactionFilter)
//! having changed nothing (its output is discarded); the next compaction tries again.
//!
//! Replicas: a filter changes cells at compaction time, which differs between
//! replicas, so repair sees differences until both have compacted the cells. A removal
//! converges (its tombstone wins everywhere). A replacement keeps the timestamp, and
//! between two values of one timestamp the bytewise larger wins, so on a replicated
//! table a replacement must be deterministic and should only make values larger, or the
//! table should not be repaired.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, Result};
use crate::format::MAX_VALUE_LEN;

/// What a [`CompactionFilter`] decides for one live cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterDecision {
    /// Write the cell as it is.
    Keep,
    /// Delete the key as of the cell's timestamp (see the module docs).
    Remove,
    /// Write this value instead, at the cell's timestamp.
    Replace(Vec<u8>),
}

/// A table's compaction filter.
///
/// What each decision writes, so that nothing older comes back: [`FilterDecision::Remove`]
/// writes a tombstone at the cell's timestamp (purged after `gc_grace` like any), or
/// nothing where no older cell can exist outside the compaction;
/// [`FilterDecision::Replace`] writes the new value at the cell's timestamp; tombstones
/// are never shown to the filter. Not persisted: set it after every open
/// ([`Table::set_compaction_filter`](crate::Table::set_compaction_filter)). A filter
/// that panics, or replaces a value with one past 256 MiB, fails the compaction with
/// [`Error::CompactionFilter`] having changed nothing. On a replicated table, a
/// replacement must be deterministic and should only make values larger (between two
/// values of one timestamp the bytewise larger wins), or the table should not be
/// repaired; removals converge.
pub trait CompactionFilter: Send + Sync + 'static {
    /// Decide for the live cell `key` = `value` written at `ts` (microseconds) in
    /// `table`.
    fn filter(&self, table: &str, key: &[u8], value: &[u8], ts: u64) -> FilterDecision;
}

impl<F> CompactionFilter for F
where
    F: Fn(&str, &[u8], &[u8], u64) -> FilterDecision + Send + Sync + 'static,
{
    fn filter(&self, table: &str, key: &[u8], value: &[u8], ts: u64) -> FilterDecision {
        self(table, key, value, ts)
    }
}

/// Run `f` on one cell, turning a panic or an oversized replacement into
/// [`Error::CompactionFilter`].
pub(crate) fn decide(
    f: &dyn CompactionFilter,
    table: &str,
    key: &[u8],
    value: &[u8],
    ts: u64,
) -> Result<FilterDecision> {
    let failed = |reason: String| Error::CompactionFilter {
        table: table.to_string(),
        reason,
    };
    let d = catch_unwind(AssertUnwindSafe(|| f.filter(table, key, value, ts)))
        .map_err(|_| failed("the filter panicked; the compaction changed nothing".into()))?;
    if let FilterDecision::Replace(v) = &d {
        if v.len() > MAX_VALUE_LEN {
            return Err(failed(format!(
                "a replacement value of {} bytes exceeds the limit of {MAX_VALUE_LEN}",
                v.len()
            )));
        }
    }
    Ok(d)
}
