//! Rule 10: the ingest journal (`lifecycle::ingest_journal`), read before the orphan
//! scan decides. A journal naming segments is a committed ingest: its segments are
//! live (not orphans) and [`roll_forward`] adds them to their manifests, then empties
//! the journal. A segment of a live table the journal names whose files are not all
//! there is refused as [`Error::Corrupt`] naming the journal (an ingest's files are
//! durable before its journal is, and none is deleted before the journal is emptied).
//! Entries of tables without a live manifest (dropped since) are ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::error::{Error, Result};
use crate::io::StoreFs;
use crate::lifecycle::ingest_journal::{self, IngestJournal};
use crate::lifecycle::set::manifest_path;
use crate::lifecycle::Manifest;
use crate::segment::{Component, SegmentName};

/// What the journal adds: per table, the ids its manifest does not name yet; and
/// whether a journal naming anything is on disk (to be emptied).
#[derive(Debug, Default)]
pub(crate) struct Ingested {
    pub(crate) missing: BTreeMap<String, BTreeSet<u64>>,
    pub(crate) pending: bool,
}

/// Read the journal of `dir`; add the segments it names to `tables` (the live ids
/// per table, from the manifests).
pub(super) fn scan(dir: &Path, tables: &mut BTreeMap<String, BTreeSet<u64>>) -> Result<Ingested> {
    let Some(journal) = IngestJournal::load(dir)? else {
        return Ok(Ingested::default());
    };
    let mut out = Ingested {
        pending: !journal.is_empty(),
        ..Ingested::default()
    };
    for (table, ids) in journal.segments {
        let Some(live) = tables.get_mut(&table) else {
            tracing::info!(table = %table, "ingest journal names a table that is gone; ignored");
            continue;
        };
        for id in ids {
            if live.contains(&id) {
                continue;
            }
            let name = SegmentName::new(&table, id)?;
            for c in Component::ALL {
                if !name.path(dir, c).exists() {
                    return Err(Error::corrupt(
                        ingest_journal::path(dir),
                        0,
                        format!("names segment {name}, whose {c:?} component is missing"),
                    ));
                }
            }
            live.insert(id);
            out.missing.entry(table.clone()).or_default().insert(id);
        }
    }
    if out.pending {
        tracing::info!(segments = ?out.missing, "completing an interrupted ingest");
    }
    Ok(out)
}

/// Add the journal's segments to their manifests, durably, then empty the journal.
pub(super) fn roll_forward(dir: &Path, fs: &StoreFs, ingested: &Ingested) -> Result<()> {
    for (table, ids) in &ingested.missing {
        let mpath = manifest_path(dir, table);
        let mut m = Manifest::load(&mpath)?;
        for &id in ids {
            m.segments.insert(id);
            m.next_id = m.next_id.max(id + 1);
        }
        m.store(&mpath, fs)?;
    }
    if ingested.pending {
        IngestJournal::default().store(dir, fs)?;
    }
    Ok(())
}
